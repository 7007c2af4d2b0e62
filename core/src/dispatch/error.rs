//! The dispatcher's error type, by status class.

use crate::code::Code;

/// Why a dispatcher request was refused. The variant is the status class TensorFlow's
/// dispatcher uses for the same condition; the message is TensorFlow's text where it has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// The request is malformed or contradicts earlier requests.
    #[error("{0}")]
    InvalidArgument(String),
    /// An id or address the dispatcher does not know.
    #[error("{0}")]
    NotFound(String),
    /// The request is valid but the state does not allow it.
    #[error("{0}")]
    FailedPrecondition(String),
    /// Something with that identity exists already.
    #[error("{0}")]
    AlreadyExists(String),
    /// Try again later.
    #[error("{0}")]
    Unavailable(String),
    /// The caller may not do this (e.g. change a task another worker holds).
    #[error("{0}")]
    PermissionDenied(String),
    /// A bound the operator set is reached (e.g. the bytes datasets may hold).
    #[error("{0}")]
    ResourceExhausted(String),
}

impl DispatchError {
    /// The machine-readable status class, e.g. `NOT_FOUND`.
    pub fn code(&self) -> Code {
        match self {
            Self::InvalidArgument(_) => Code::InvalidArgument,
            Self::NotFound(_) => Code::NotFound,
            Self::FailedPrecondition(_) => Code::FailedPrecondition,
            Self::AlreadyExists(_) => Code::AlreadyExists,
            Self::Unavailable(_) => Code::Unavailable,
            Self::PermissionDenied(_) => Code::PermissionDenied,
            Self::ResourceExhausted(_) => Code::ResourceExhausted,
        }
    }

    /// The message.
    pub fn detail(&self) -> &str {
        match self {
            Self::InvalidArgument(m)
            | Self::NotFound(m)
            | Self::FailedPrecondition(m)
            | Self::AlreadyExists(m)
            | Self::Unavailable(m)
            | Self::PermissionDenied(m)
            | Self::ResourceExhausted(m) => m,
        }
    }
}
