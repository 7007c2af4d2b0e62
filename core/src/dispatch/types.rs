//! Identifiers, time and the job options the dispatcher works with.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Milliseconds on the caller's clock. Core never reads a clock: every handler takes `now`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Millis(pub u64);

impl Millis {
    /// `self + d`, saturating.
    pub fn plus(self, d: Millis) -> Millis {
        Millis(self.0.saturating_add(d.0))
    }
    /// `self - earlier`, zero when `earlier` is later.
    pub fn since(self, earlier: Millis) -> Millis {
        Millis(self.0.saturating_sub(earlier.0))
    }
}

/// A text that is not an id (ids parse from decimal strings: [`JobId`], [`TaskId`], ...). The
/// text is quoted as [`echo`](crate::echo::echo) quotes it (at most a short prefix).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Empty, or not only ASCII digits.
    #[error("{0} is not a decimal id")]
    NotDecimal(String),
    /// More than `u64` holds.
    #[error("{0} is out of range for an id")]
    OutOfRange(String),
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $first:expr) => {
        $(#[$doc])*
        ///
        /// On the wire an id is a decimal string (`"5000"`); a JSON integer is accepted too.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u64);

        impl $name {
            /// The first id TensorFlow's dispatcher hands out for this kind.
            pub const FIRST: u64 = $first;
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .pattern(Some("^[0-9]+$"))
                    .description(Some(concat!("A decimal id (", stringify!($name), ").")))
                    .examples([serde_json::Value::String($first.to_string())])
                    .into()
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {}

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(IdError::NotDecimal(crate::echo::echo(s)));
                }
                s.parse::<u64>().map($name).map_err(|_| IdError::OutOfRange(crate::echo::echo(s)))
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl serde::de::Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a decimal id string")
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        v.parse().map_err(E::custom)
                    }
                    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<$name, E> {
                        Ok($name(v))
                    }
                    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<$name, E> {
                        u64::try_from(v).map($name).map_err(|_| E::custom("an id cannot be negative"))
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

id_type!(
    /// A job (a named, shareable consumer of one dataset).
    JobId, 5000
);
id_type!(
    /// An iteration (one repetition of a job).
    IterationId, 2000
);
id_type!(
    /// An iteration client (one consumer's lease on an iteration).
    ClientId, 3000
);
id_type!(
    /// A task (an iteration's work on one worker).
    TaskId, 4000
);

/// The first generated dataset id (datasets may also carry explicit string ids).
pub const FIRST_DATASET_ID: u64 = 1000;

/// How an iteration's data is divided between workers (TensorFlow's `ShardingPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ShardingPolicy {
    /// Every worker produces the whole dataset (`parallel_epochs`).
    Off,
    /// The dispatcher hands out splits; each split is processed once (`distributed_epoch`).
    Dynamic,
    /// Static: worker i of N reads files i, i+N, ...
    File,
    /// Static: worker i of N keeps elements i, i+N, ... of the output.
    Data,
    /// Static: FILE for file sources, else DATA.
    FileOrData,
    /// Static: `shard_hint` transforms become shard(N, i).
    Hint,
}

impl ShardingPolicy {
    /// Whether the policy needs the fixed worker list (static sharding).
    pub fn is_static(self) -> bool {
        matches!(self, Self::File | Self::Data | Self::FileOrData | Self::Hint)
    }
    /// The wire name, e.g. `FILE_OR_DATA`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "OFF",
            Self::Dynamic => "DYNAMIC",
            Self::File => "FILE",
            Self::Data => "DATA",
            Self::FileOrData => "FILE_OR_DATA",
            Self::Hint => "HINT",
        }
    }
}

/// Which workers a client reads from (TensorFlow's `TargetWorkers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TargetWorkers {
    /// Skip remote workers tagged `COLOCATED`.
    #[default]
    Auto,
    /// Every worker.
    Any,
    /// Only workers in the client's process.
    Local,
}

impl TargetWorkers {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "AUTO",
            Self::Any => "ANY",
            Self::Local => "LOCAL",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_from_decimals_with_typed_refusals() {
        assert_eq!("17".parse::<JobId>(), Ok(JobId(17)));
        assert_eq!("x1".parse::<TaskId>(), Err(IdError::NotDecimal("\"x1\"".into())));
        assert_eq!("".parse::<TaskId>(), Err(IdError::NotDecimal("\"\"".into())));
        let big = "99999999999999999999";
        assert_eq!(big.parse::<ClientId>(), Err(IdError::OutOfRange(format!("{big:?}"))));
        assert_eq!(
            "-1".parse::<IterationId>().unwrap_err().to_string(),
            "\"-1\" is not a decimal id"
        );
        assert_eq!(
            big.parse::<JobId>().unwrap_err().to_string(),
            format!("{big:?} is out of range for an id")
        );
    }
}
