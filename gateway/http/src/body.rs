//! What handlers share: the strict JSON body extractor, path ids, JSON answers, `/healthz`
//! and the answer for unknown routes.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use shardwise_core::dispatch::wire::{
    ClientHeartbeat, CreateIteration, CreateJob, GetSplits, MaybeRemove, RegisterDataset,
    WorkerHeartbeat, WorkerUpdate,
};
use shardwise_core::echo::{cap_quotes, echo};
use utoipa::ToSchema;

use super::problem::{Code, Problem};

/// What a handler answers: a response, or a problem.
pub type ApiResult = Result<Response, Problem>;

/// A JSON body: any JSON media type (or none), decoded strictly (unknown fields and
/// duplicate keys are refused), every rejection a problem.
#[derive(Debug)]
pub struct Body<T>(pub T);

/// How a request type is decoded.
pub trait RequestBody: DeserializeOwned {
    /// serde's derived decoding of this type already refuses unknown and repeated fields (a
    /// struct with `deny_unknown_fields` all the way down and no free-form JSON inside), so it
    /// is decoded directly, without the strict pass over a `Value` tree first.
    const FLAT: bool = false;
}

impl RequestBody for Value {}

// The dispatcher's request bodies (the core's wire types; the trait's crate holds the impls).
// The flat ones have no free-form JSON inside.
impl RequestBody for WorkerHeartbeat {
    const FLAT: bool = true;
}
impl RequestBody for WorkerUpdate {
    const FLAT: bool = true;
}
impl RequestBody for ClientHeartbeat {
    const FLAT: bool = true;
}
impl RequestBody for GetSplits {
    const FLAT: bool = true;
}
impl RequestBody for MaybeRemove {
    const FLAT: bool = true;
}
impl RequestBody for RegisterDataset {}
impl RequestBody for CreateJob {}
impl RequestBody for CreateIteration {}

impl<S: Send + Sync, T: RequestBody> FromRequest<S> for Body<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
            let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
            let essence = ct.split(';').next().unwrap_or("").trim();
            let json = essence == "application/json"
                || (essence.starts_with("application/") && essence.ends_with("+json"));
            if !json {
                return Err(Problem::new(
                    Code::InvalidArgument,
                    format!(
                        "the request body must be JSON (Content-Type: application/json), not {}",
                        echo(essence)
                    ),
                )
                .with_status(415, "Unsupported media type"));
            }
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            let status = e.status();
            let mut p = Problem::new(Code::InvalidArgument, e.body_text());
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                p = Problem::new(Code::ResourceExhausted, "the request body is too large");
                p.status = 413;
            }
            p
        })?;
        let text = if bytes.is_empty() { &b"{}"[..] } else { &bytes[..] };
        // Every body is an object: serde would take an array for a struct (`[1]` as
        // `{"repetition": 1}`).
        if let Some(first) = text.iter().find(|b| !b.is_ascii_whitespace())
            && *first != b'{'
        {
            let kind = match first {
                b'[' => "an array",
                b'"' => "a string",
                b'n' => "null",
                b't' | b'f' => "a boolean",
                b'-' | b'0'..=b'9' => "a number",
                _ => "not JSON",
            };
            return Err(Problem::new(
                Code::InvalidArgument,
                format!(
                    "invalid request body: it must be a JSON object ({{...}}), and it is {kind}"
                ),
            ));
        }
        let decoded = if T::FLAT {
            serde_json::from_slice(text).map_err(|e| e.to_string())
        } else {
            shardwise_core::json::from_slice_strict(text).map_err(|e| e.to_string())
        };
        decoded.map(Body).map_err(|e| {
            Problem::new(Code::InvalidArgument, format!("invalid request body: {}", cap_quotes(&e)))
        })
    }
}

/// A path id: a problem naming the parameter when it is not one. A value too long to be an
/// id is not echoed back (an answer never grows with the junk it was sent).
pub fn parse_id<T: std::str::FromStr<Err = shardwise_core::dispatch::IdError>>(
    name: &str,
    raw: &str,
) -> Result<T, Problem> {
    if raw.len() > 64 {
        return Err(Problem::new(
            Code::InvalidArgument,
            format!(
                "{name}: a {}-byte value is not an id (a decimal of at most 20 digits)",
                raw.len()
            ),
        ));
    }
    raw.parse::<T>().map_err(|e| Problem::new(Code::InvalidArgument, format!("{name}: {e}")))
}

/// `/healthz` and `/readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok` or `ready`.
    pub status: String,
}

pub fn ok<T: Serialize>(v: &T) -> ApiResult {
    // Serialized straight to bytes (no intermediate JSON value tree).
    let body = serde_json::to_vec(v).map_err(|e| Problem::new(Code::Internal, e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body)
        .into_response())
}

/// `GET /healthz`: the process is up.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    operation_id = "healthz",
    summary = "Liveness: the process is up.",
    responses((status = 200, description = "Up.", body = Health))
)]
pub async fn healthz() -> ApiResult {
    ok(&Health { status: "ok".into() })
}

/// Unknown routes.
pub async fn not_found(uri: axum::http::Uri) -> Problem {
    Problem::new(Code::NotFound, format!("no route for {}", echo(uri.path())))
}
