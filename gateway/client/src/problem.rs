//! RFC 9457 problem details: the one error shape of every Shardwise surface (HTTP bodies with
//! `application/problem+json`, and the CLI's stdout on failure). The client decodes them; the
//! servers answer them (the `axum` feature) and document them (the `openapi` feature).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
pub use shardwise_core::Code;
use shardwise_core::cluster::ClusterError;
use shardwise_core::dispatch::DispatchError;

/// The media type of a problem body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// A problem object: `type`, `title`, `status`, `detail` and the machine-readable `code` (the
/// gRPC-style status class TensorFlow uses, e.g. `INVALID_ARGUMENT`), plus optional members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub code: Code,
    /// The Python exception TensorFlow raises for the same input, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf_exception: Option<String>,
    /// For `UNAVAILABLE` cluster answers: how many tasks each job still lacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<MissingTasks>))]
    pub missing: Option<BTreeMap<String, usize>>,
    /// For answers of a replica that does not lead (307): the leader's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
}

// Named in the OpenAPI document, so that SDKs get a type for `Problem::missing`.
/// How many tasks each job of the cluster still lacks: job name to count.
#[cfg(feature = "openapi")]
#[derive(Debug, utoipa::ToSchema)]
pub struct MissingTasks(pub BTreeMap<String, usize>);

/// The one table from status class to HTTP status and title. Some answers override the
/// status within their class (405, 408, 413, 415, 429 above): see [`Problem::with_status`].
pub fn status_of(code: Code) -> (u16, &'static str) {
    match code {
        Code::InvalidArgument => (400, "Invalid argument"),
        Code::Unauthenticated => (401, "Unauthenticated"),
        Code::PermissionDenied => (403, "Permission denied"),
        Code::NotFound => (404, "Not found"),
        Code::FailedPrecondition => (409, "Failed precondition"),
        Code::AlreadyExists => (409, "Already exists"),
        Code::ResourceExhausted => (429, "Resource exhausted"),
        Code::Unavailable => (503, "Unavailable"),
        Code::Internal => (500, "Internal error"),
    }
}

/// The status class of an HTTP error status that came without a problem body (a middleware's
/// answer, or a proxy's): the reverse of [`status_of`], with the statuses it overrides.
pub fn code_of_status(status: u16) -> Code {
    match status {
        400 | 405 | 415 => Code::InvalidArgument,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        409 => Code::FailedPrecondition,
        413 | 429 => Code::ResourceExhausted,
        408 | 502..=504 => Code::Unavailable,
        _ => Code::Internal,
    }
}

impl Problem {
    /// A problem of status class `code` with `detail`.
    pub fn new(code: Code, detail: impl Into<String>) -> Self {
        let (status, title) = status_of(code);
        Problem {
            type_uri: format!(
                "urn:shardwise:problem:{}",
                code.as_str().to_ascii_lowercase().replace('_', "-")
            ),
            title: title.to_owned(),
            status,
            detail: detail.into(),
            code,
            tf_exception: None,
            missing: None,
            leader: None,
        }
    }

    /// The same problem with a more precise HTTP status of its class (e.g. 413 for a
    /// `RESOURCE_EXHAUSTED` body size) and that status's title.
    pub fn with_status(mut self, status: u16, title: &str) -> Self {
        self.status = status;
        title.clone_into(&mut self.title);
        self
    }
}

impl From<&DispatchError> for Problem {
    fn from(e: &DispatchError) -> Self {
        Problem::new(e.code(), e.detail())
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

/// A problem as a server's answer: its status (`Retry-After: 1` with 503 and 429),
/// `application/problem+json`, and its detail capped as every echo is.
#[cfg(feature = "axum")]
mod response {
    use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use shardwise_core::echo::{MAX_MESSAGE_BYTES, cap_quotes};

    use super::{PROBLEM_JSON, Problem};

    impl IntoResponse for Problem {
        fn into_response(self) -> Response {
            let status =
                StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
            if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS
            {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            let mut problem = self;
            if problem.detail.len() > MAX_MESSAGE_BYTES {
                // The last line of defence: no answer grows with what it was sent.
                problem.detail = cap_quotes(&problem.detail);
            }
            let body = serde_json::to_vec(&problem).unwrap_or_default();
            (status, headers, body).into_response()
        }
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
