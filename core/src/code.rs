//! The status classes every Shardwise error is sorted into (gRPC's, which TensorFlow uses).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A status class: what kind of failure an error is, whatever its message. On the wire (the
/// `code` of a problem+json body) it is the upper-case gRPC name, e.g. `NOT_FOUND`.
///
/// These are the classes Shardwise answers with, and no more; each front maps them to its own
/// status (the HTTP front's table is in the gateway).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// The request is malformed or contradicts earlier requests.
    InvalidArgument,
    /// No credentials, or not valid ones.
    Unauthenticated,
    /// Valid credentials that may not do this.
    PermissionDenied,
    /// An id, name or address that is not known.
    NotFound,
    /// Something with that identity exists already.
    AlreadyExists,
    /// The request is valid but the state does not allow it.
    FailedPrecondition,
    /// A bound is reached (a size, a rate).
    ResourceExhausted,
    /// Try again later.
    Unavailable,
    /// A bug.
    Internal,
}

impl Code {
    /// Every class, in the order above.
    pub const ALL: [Code; 9] = [
        Code::InvalidArgument,
        Code::Unauthenticated,
        Code::PermissionDenied,
        Code::NotFound,
        Code::AlreadyExists,
        Code::FailedPrecondition,
        Code::ResourceExhausted,
        Code::Unavailable,
        Code::Internal,
    ];

    /// The wire name, e.g. `NOT_FOUND`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::Unavailable => "UNAVAILABLE",
            Code::Internal => "INTERNAL",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A wire name that is not one of the [`Code`]s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a status class")]
pub struct UnknownCode(pub String);

impl FromStr for Code {
    type Err = UnknownCode;
    fn from_str(s: &str) -> Result<Code, UnknownCode> {
        Code::ALL.into_iter().find(|c| c.as_str() == s).ok_or_else(|| UnknownCode(s.to_owned()))
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Code, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_wire_name() {
        for c in Code::ALL {
            assert_eq!(c.as_str().parse::<Code>(), Ok(c));
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<Code>(&json).unwrap(), c);
            assert_eq!(c, c.as_str());
        }
        let names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "INVALID_ARGUMENT",
                "UNAUTHENTICATED",
                "PERMISSION_DENIED",
                "NOT_FOUND",
                "ALREADY_EXISTS",
                "FAILED_PRECONDITION",
                "RESOURCE_EXHAUSTED",
                "UNAVAILABLE",
                "INTERNAL",
            ]
        );
        assert!("not_found".parse::<Code>().is_err());
        assert!(serde_json::from_str::<Code>("\"DATA_LOSS\"").is_err());
    }
}
