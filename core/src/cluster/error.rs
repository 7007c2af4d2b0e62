//! The one error type of cluster resolution.

use std::collections::BTreeMap;

use crate::code::Code;

/// The Python exception class TensorFlow raises for the same condition.
///
/// Kept so that callers (and the TensorFlow parity tests) can tell a TF `TypeError` from a
/// `ValueError` although both map to the same status class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TfException {
    /// `ValueError` (and its subclass `json.JSONDecodeError`).
    ValueError,
    /// `TypeError`.
    TypeError,
    /// `KeyError` (its message is the exception's argument, without Python's extra quotes).
    KeyError,
    /// `RuntimeError`.
    RuntimeError,
}

impl TfException {
    /// The Python class name.
    pub fn name(self) -> &'static str {
        match self {
            TfException::ValueError => "ValueError",
            TfException::TypeError => "TypeError",
            TfException::KeyError => "KeyError",
            TfException::RuntimeError => "RuntimeError",
        }
    }
}

/// Why a cluster could not be resolved, by status class.
///
/// `detail` carries TensorFlow's message text where TensorFlow has one (`tf` then names the
/// Python exception it raises); Shardwise's own checks have `tf: None`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The input is malformed: bad JSON, wrong types, an invalid selector or hostlist.
    #[error("{detail}")]
    InvalidArgument {
        /// Human-readable explanation.
        detail: String,
        /// TensorFlow's exception class for the same input, if TensorFlow has one.
        tf: Option<TfException>,
    },
    /// A job or task that the cluster does not contain was asked for.
    #[error("{detail}")]
    NotFound {
        /// Human-readable explanation.
        detail: String,
        /// TensorFlow's exception class.
        tf: Option<TfException>,
    },
    /// The environment is not in a state that can be resolved (a pod that is not running,
    /// no Slurm step, no Kubernetes API to ask).
    #[error("{detail}")]
    FailedPrecondition {
        /// Human-readable explanation.
        detail: String,
        /// TensorFlow's exception class.
        tf: Option<TfException>,
    },
    /// Fewer members than expected are up yet; asking again later may succeed.
    #[error("{detail}")]
    Unavailable {
        /// Human-readable explanation.
        detail: String,
        /// Per job, how many qualifying tasks are still missing.
        missing: BTreeMap<String, usize>,
    },
}

impl ClusterError {
    /// An `InvalidArgument` with TensorFlow's exception class.
    pub fn invalid(tf: TfException, detail: impl Into<String>) -> Self {
        ClusterError::InvalidArgument { detail: detail.into(), tf: Some(tf) }
    }
    /// An `InvalidArgument` for a check TensorFlow does not make.
    pub fn invalid_input(detail: impl Into<String>) -> Self {
        ClusterError::InvalidArgument { detail: detail.into(), tf: None }
    }
    /// A `NotFound` raised by TensorFlow as `ValueError`.
    pub fn not_found(detail: impl Into<String>) -> Self {
        ClusterError::NotFound { detail: detail.into(), tf: Some(TfException::ValueError) }
    }
    /// A `FailedPrecondition` with an optional TensorFlow class.
    pub fn precondition(tf: Option<TfException>, detail: impl Into<String>) -> Self {
        ClusterError::FailedPrecondition { detail: detail.into(), tf }
    }

    /// The machine-readable status class, e.g. `INVALID_ARGUMENT`.
    pub fn code(&self) -> Code {
        match self {
            ClusterError::InvalidArgument { .. } => Code::InvalidArgument,
            ClusterError::NotFound { .. } => Code::NotFound,
            ClusterError::FailedPrecondition { .. } => Code::FailedPrecondition,
            ClusterError::Unavailable { .. } => Code::Unavailable,
        }
    }

    /// The message.
    pub fn detail(&self) -> &str {
        match self {
            ClusterError::InvalidArgument { detail, .. }
            | ClusterError::NotFound { detail, .. }
            | ClusterError::FailedPrecondition { detail, .. }
            | ClusterError::Unavailable { detail, .. } => detail,
        }
    }

    /// TensorFlow's exception class for the same condition, if it has one.
    pub fn tf_exception(&self) -> Option<TfException> {
        match self {
            ClusterError::InvalidArgument { tf, .. }
            | ClusterError::NotFound { tf, .. }
            | ClusterError::FailedPrecondition { tf, .. } => *tf,
            ClusterError::Unavailable { .. } => None,
        }
    }

    /// Prefixes the message with where the error happened (for nested resolvers).
    pub fn context(mut self, prefix: &str) -> Self {
        match &mut self {
            ClusterError::InvalidArgument { detail, .. }
            | ClusterError::NotFound { detail, .. }
            | ClusterError::FailedPrecondition { detail, .. }
            | ClusterError::Unavailable { detail, .. } => {
                *detail = format!("{prefix}: {detail}");
            }
        }
        self
    }
}
