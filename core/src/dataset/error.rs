//! The error type of the dataset module.

use crate::code::Code;

/// Why a dataset definition, a split or a pipeline step was refused.
///
/// The variants keep TensorFlow's status classes so that the gateway can map them onto its
/// problem+json `code` (see [`DatasetError::code`]). `Display` prints the message only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DatasetError {
    /// A malformed definition, split, option or file content (`INVALID_ARGUMENT`).
    #[error("{0}")]
    InvalidArgument(String),
    /// Something the request relies on does not exist, e.g. FILE sharding of a source that has
    /// no files (`NOT_FOUND`).
    #[error("{0}")]
    NotFound(String),
    /// The request is valid but not in this state or mode, e.g. a `shard_hint` outside the HINT
    /// policy, or an input handed to a pipeline that did not ask for it (`FAILED_PRECONDITION`).
    #[error("{0}")]
    FailedPrecondition(String),
    /// A pipeline would hold more than its limits allow, e.g. a `shuffle` buffer whose
    /// elements weigh more than [`Limits::max_buffered_bytes`](super::Limits)
    /// (`RESOURCE_EXHAUSTED`).
    #[error("{0}")]
    ResourceExhausted(String),
}

impl DatasetError {
    /// The machine-readable status class: `INVALID_ARGUMENT`, `NOT_FOUND`,
    /// `FAILED_PRECONDITION` or `RESOURCE_EXHAUSTED`.
    pub fn code(&self) -> Code {
        match self {
            DatasetError::InvalidArgument(_) => Code::InvalidArgument,
            DatasetError::NotFound(_) => Code::NotFound,
            DatasetError::FailedPrecondition(_) => Code::FailedPrecondition,
            DatasetError::ResourceExhausted(_) => Code::ResourceExhausted,
        }
    }

    /// The human-readable message (what `Display` prints).
    pub fn message(&self) -> &str {
        match self {
            DatasetError::InvalidArgument(m)
            | DatasetError::NotFound(m)
            | DatasetError::FailedPrecondition(m)
            | DatasetError::ResourceExhausted(m) => m,
        }
    }
}

/// Shorthand for an [`DatasetError::InvalidArgument`].
pub(super) fn invalid(message: impl Into<String>) -> DatasetError {
    DatasetError::InvalidArgument(message.into())
}

/// Shorthand for a [`DatasetError::FailedPrecondition`].
pub(super) fn precondition(message: impl Into<String>) -> DatasetError {
    DatasetError::FailedPrecondition(message.into())
}

/// Renders a JSON value for an error message, cut to a bounded length so that a huge input
/// cannot produce a huge message.
pub(super) fn brief(value: &serde_json::Value) -> String {
    let text = serde_json::to_string(value).unwrap_or_else(|_| String::from("<unprintable>"));
    truncate(text, 120)
}

/// Renders a string as a JSON string literal, cut to a bounded length.
pub(super) fn quoted(text: &str) -> String {
    brief(&serde_json::Value::String(text.chars().take(100).collect()))
}

fn truncate(mut text: String, max_chars: usize) -> String {
    if let Some((cut, _)) = text.char_indices().nth(max_chars) {
        text.truncate(cut);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_messages() {
        assert_eq!(invalid("a").code(), "INVALID_ARGUMENT");
        assert_eq!(DatasetError::NotFound("b".into()).code(), "NOT_FOUND");
        assert_eq!(precondition("c").code(), "FAILED_PRECONDITION");
        assert_eq!(precondition("c").message(), "c");
        assert_eq!(DatasetError::ResourceExhausted("d".into()).code(), "RESOURCE_EXHAUSTED");
        assert_eq!(invalid("x y").to_string(), "x y");
    }

    #[test]
    fn brief_is_bounded() {
        let long = serde_json::Value::String("é".repeat(1000));
        assert!(brief(&long).chars().count() <= 121);
        assert_eq!(quoted("ab\"c"), r#""ab\"c""#);
    }
}
