//! TensorFlow's `tensorflow.data.DispatcherService` over gRPC, on the dispatcher's port: the
//! front that lets TensorFlow's workers and clients (`dispatcher_address="HOST:PORT"`,
//! `service="grpc://HOST:PORT"`) use a Shardwise dispatcher.
//!
//! * [`service`]: the RPCs, each translated to the core request REST uses for the same thing.
//! * [`convert`]: every conversion between TensorFlow's messages and the core's, and the one
//!   table from the core's status classes to gRPC codes.
//! * [`push`]: `WorkerService.ProcessTask` pushes of new tasks to TensorFlow workers.
//!
//! Around the RPCs ([`router`]): the bearer-token check of `--auth-tokens` by RPC (worker RPCs
//! need the worker role, client RPCs the client role, `GetVersion` and `GetDataServiceConfig`
//! any valid token; admin may call everything), `--rate-limit` and `--max-in-flight` (gRPC
//! calls have their own token buckets and in-flight count, of the same sizes as REST's),
//! request messages up to `--max-body-bytes` and replies of any size, a 30 s bound per call
//! and caught panics. Every refusal is a gRPC status.

pub mod convert;
pub mod push;
pub mod service;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::FutureExt as _;
use tonic::Status;

pub use self::service::{DispatcherGrpc, TF_DATA_SERVICE_VERSION};
use crate::http::auth::{Access, Role, Tokens, check};
use crate::http::front::REQUEST_TIMEOUT;
use crate::http::limit::{LimitConfig, Limits};
use crate::tf::proto::tensorflow::data::dispatcher_service_server::DispatcherServiceServer;

/// The path prefix of every RPC of the service.
pub const SERVICE_PATH: &str = "/tensorflow.data.DispatcherService/";

/// What an RPC requires of the caller's token: worker RPCs the worker role, client RPCs the
/// client role, RPCs both call either, `GetVersion` and `GetDataServiceConfig` any valid
/// token; anything else (an unknown method) admin.
pub fn access(method: &str) -> Access {
    match method {
        "GetVersion" | "GetDataServiceConfig" => Access::Any,
        "WorkerHeartbeat" | "WorkerUpdate" | "GetSplit" | "GetSnapshotSplit" => {
            Access::Only(Role::Worker)
        }
        // A worker reads a dataset's graph and decides compression; so may a client.
        "GetDatasetDef" | "DisableCompressionAtRuntime" => {
            Access::OneOf(&[Role::Worker, Role::Client])
        }
        "GetOrRegisterDataset"
        | "GetDataServiceMetadata"
        | "GetOrCreateJob"
        | "GetOrCreateIteration"
        | "ClientHeartbeat"
        | "ReleaseIterationClient"
        | "MaybeRemoveTask"
        | "GetWorkers"
        | "Snapshot"
        | "GetSnapshotStreams" => Access::Only(Role::Client),
        _ => Access::Only(Role::Admin),
    }
}

/// What the gate around the RPCs checks.
#[derive(Debug, Clone)]
struct Gate {
    tokens: Option<Tokens>,
    limits: Limits,
}

/// The gRPC service as a router for `http::conn::serve`: the RPCs of `service`
/// behind the token check and the request limits of `limits` (its `max_body_bytes` bounds a
/// request message; replies are unbounded).
pub fn router(
    service: DispatcherGrpc,
    limits: LimitConfig,
    tokens: Option<Tokens>,
) -> axum::Router {
    let server = DispatcherServiceServer::new(service)
        .max_decoding_message_size(limits.max_body_bytes)
        .max_encoding_message_size(usize::MAX);
    let gate = Arc::new(Gate { tokens, limits: Limits::new(limits) });
    tonic::service::Routes::new(server)
        .into_axum_router()
        .layer(axum::middleware::from_fn_with_state(gate, gate_call))
}

/// A gRPC status as the whole answer to a call.
fn answer(status: Status) -> Response {
    status.into_http::<Body>()
}

async fn gate_call(State(gate): State<Arc<Gate>>, req: Request, next: Next) -> Response {
    let method = req.uri().path().strip_prefix(SERVICE_PATH).unwrap_or("").to_owned();
    if let Some(tokens) = &gate.tokens {
        let what = || format!("the RPC {method}");
        if let Err(refused) = check(tokens, access(&method), what, req.headers()) {
            return answer(convert::status(refused.code(), refused.detail()));
        }
    }
    let permit = match gate.limits.check(&req) {
        Ok(permit) => permit,
        Err(refused) => return answer(convert::status(refused.code, &refused.detail)),
    };
    let call = AssertUnwindSafe(next.run(req)).catch_unwind();
    let res = match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
        Ok(Ok(res)) => res,
        Ok(Err(_)) => answer(Status::internal(format!(
            "the dispatcher hit a bug handling {method} (a panic was caught)"
        ))),
        Err(_) => answer(Status::unavailable(format!(
            "{method} took longer than {} s; retry",
            REQUEST_TIMEOUT.as_secs()
        ))),
    };
    drop(permit);
    typed_decode_errors(res)
}

/// tonic answers a request message that does not decode (or has an invalid compression flag)
/// `INTERNAL`, and one over the size limit `OUT_OF_RANGE`: both are the caller's doing, so
/// they are answered `INVALID_ARGUMENT` and `RESOURCE_EXHAUSTED` (what gRPC's own servers
/// answer a message over their limit) with tonic's text.
fn typed_decode_errors(res: Response) -> Response {
    let Some(status) = Status::from_header_map(res.headers()) else { return res };
    let message = status.message();
    match status.code() {
        tonic::Code::Internal
            if message.starts_with("failed to decode Protobuf message")
                || message.starts_with("protocol error") =>
        {
            answer(Status::invalid_argument(format!("the request message is invalid: {message}")))
        }
        tonic::Code::OutOfRange if message.contains("message length too large") => {
            answer(Status::resource_exhausted(format!(
                "the request message is larger than --max-body-bytes allows: {message}"
            )))
        }
        _ => res,
    }
}
