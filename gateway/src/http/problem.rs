//! RFC 9457 problem details: the one error shape of every Shardwise surface (HTTP bodies with
//! `application/problem+json`, and the CLI's stdout on failure).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use shardwise_core::cluster::ClusterError;

/// The media type of a problem body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// A problem object: `type`, `title`, `status`, `detail` and the machine-readable `code` (the
/// gRPC-style status class TensorFlow uses, e.g. `INVALID_ARGUMENT`), plus optional members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Problem {
    /// A URI naming the problem type.
    #[serde(rename = "type")]
    pub type_uri: String,
    /// A short summary of the problem type.
    pub title: String,
    /// The HTTP status code for this problem.
    pub status: u16,
    /// What went wrong this time (TensorFlow's text where TensorFlow has one).
    pub detail: String,
    /// The status class, e.g. `NOT_FOUND`.
    pub code: String,
    /// The Python exception TensorFlow raises for the same input, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf_exception: Option<String>,
    /// For `UNAVAILABLE` cluster answers: how many tasks each job still lacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<BTreeMap<String, usize>>,
}

/// The one table from status class to HTTP status and title.
pub fn status_of(code: &str) -> (u16, &'static str) {
    match code {
        "INVALID_ARGUMENT" => (400, "Invalid argument"),
        "UNAUTHENTICATED" => (401, "Unauthenticated"),
        "PERMISSION_DENIED" => (403, "Permission denied"),
        "NOT_FOUND" => (404, "Not found"),
        "FAILED_PRECONDITION" => (409, "Failed precondition"),
        "ALREADY_EXISTS" => (409, "Already exists"),
        "RESOURCE_EXHAUSTED" => (429, "Resource exhausted"),
        "UNAVAILABLE" => (503, "Unavailable"),
        "DATA_LOSS" => (500, "Data loss"),
        _ => (500, "Internal error"),
    }
}

impl Problem {
    /// A problem of status class `code` with `detail`.
    pub fn new(code: &str, detail: impl Into<String>) -> Self {
        let (status, title) = status_of(code);
        Problem {
            type_uri: format!(
                "urn:shardwise:problem:{}",
                code.to_ascii_lowercase().replace('_', "-")
            ),
            title: title.to_owned(),
            status,
            detail: detail.into(),
            code: code.to_owned(),
            tf_exception: None,
            missing: None,
        }
    }
}

impl From<&ClusterError> for Problem {
    fn from(e: &ClusterError) -> Self {
        let mut p = Problem::new(e.code(), e.detail());
        p.tf_exception = e.tf_exception().map(|t| t.name().to_owned());
        if let ClusterError::Unavailable { missing, .. } = e {
            p.missing = Some(missing.clone());
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardwise_core::cluster::TfException;

    #[test]
    fn cluster_errors_map_through_the_table() {
        let p = Problem::from(&ClusterError::not_found("No such job in cluster: 'x'"));
        assert_eq!((p.status, p.code.as_str()), (404, "NOT_FOUND"));
        assert_eq!(p.tf_exception.as_deref(), Some("ValueError"));
        let p = Problem::from(&ClusterError::invalid(TfException::TypeError, "t"));
        assert_eq!(
            (p.status, p.type_uri.as_str()),
            (400, "urn:shardwise:problem:invalid-argument")
        );
        let json = serde_json::to_value(&p).unwrap();
        for k in ["type", "title", "status", "detail", "code"] {
            assert!(json.get(k).is_some(), "{k}");
        }
    }
}
