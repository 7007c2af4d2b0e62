//! TensorFlow's `tensorflow.data.DispatcherService` over gRPC, on the dispatcher's port: the
//! front that lets TensorFlow's workers and clients (`dispatcher_address="HOST:PORT"`,
//! `service="grpc://HOST:PORT"`) use a Shardwise dispatcher.
//!
//! * [`service`]: the RPCs, each translated to the core request REST uses for the same thing.
//! * [`convert`]: every conversion between TensorFlow's messages and the core's, and the one
//!   table from the core's status classes to gRPC codes.
//! * [`push`]: `WorkerService.ProcessTask` pushes of new tasks to TensorFlow workers.
//!
//! Around the RPCs ([`front`]): the bearer-token check of `--auth-tokens` by RPC (worker RPCs
//! need the worker role, client RPCs the client role, `GetVersion` and `GetDataServiceConfig`
//! any valid token; admin may call everything), `--rate-limit` and `--max-in-flight` (gRPC
//! calls have their own token buckets and in-flight count, of the same sizes as REST's),
//! request messages up to `--max-body-bytes` and replies of any size, a 30 s bound per call
//! and caught panics. Every refusal is a gRPC status.

pub mod convert;
pub mod push;
pub mod service;

use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http;
use axum::response::Response;
use futures::FutureExt as _;
use hyper::body::Incoming;
use tonic::Status;
use tower::Service;

pub use self::service::{DispatcherGrpc, TF_DATA_SERVICE_VERSION};
use crate::http::auth::{Access, Role, Tokens, check};
use crate::http::conn::GrpcService;
use crate::http::front::{REQUEST_TIMEOUT, within};
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

/// The gRPC front of the dispatcher, for `http::conn::serve`: the RPCs of `service` behind
/// the gate (token check, request limits, the per-call bound, caught panics, typed decode
/// errors). A hand-written service rather than a router with middleware: a call pays no
/// routing, no boxed middleware future and no body boxing before tonic reads its message.
#[derive(Debug, Clone)]
pub struct GrpcFront {
    server: DispatcherServiceServer<DispatcherGrpc>,
    gate: Arc<Gate>,
}

/// What the gate around the RPCs checks.
#[derive(Debug)]
struct Gate {
    tokens: Option<Tokens>,
    limits: Limits,
}

/// The gRPC front over `service`, behind the token check and the request limits of `limits`
/// (its `max_body_bytes` bounds a request message; replies are unbounded).
pub fn front(service: DispatcherGrpc, limits: LimitConfig, tokens: Option<Tokens>) -> GrpcFront {
    let server = DispatcherServiceServer::new(service)
        .max_decoding_message_size(limits.max_body_bytes)
        .max_encoding_message_size(usize::MAX);
    GrpcFront { server, gate: Arc::new(Gate { tokens, limits: Limits::new(limits) }) }
}

/// A gRPC status as the whole answer to a call.
fn answer(status: Status) -> Response {
    status.into_http::<Body>()
}

/// The RPC's name as a static string (for the answers given after the call, which no longer
/// has its path); `None` for a method the service does not have.
fn rpc_name(method: &str) -> Option<&'static str> {
    RPCS.iter().copied().find(|name| *name == method)
}

/// Every RPC of the service.
const RPCS: &[&str] = &[
    "WorkerHeartbeat",
    "WorkerUpdate",
    "GetDatasetDef",
    "GetSplit",
    "GetVersion",
    "GetOrRegisterDataset",
    "GetOrCreateJob",
    "GetOrCreateIteration",
    "MaybeRemoveTask",
    "ReleaseIterationClient",
    "ClientHeartbeat",
    "GetWorkers",
    "GetDataServiceMetadata",
    "GetDataServiceConfig",
    "Snapshot",
    "GetSnapshotSplit",
    "GetSnapshotStreams",
    "DisableCompressionAtRuntime",
];

impl GrpcService for GrpcFront {
    fn serve(
        &self,
        req: http::Request<Incoming>,
        peer: SocketAddr,
    ) -> impl Future<Output = Response> + Send + use<> {
        let admitted = self.admit(req, peer);
        async move {
            let (call, permit, method) = match admitted {
                Ok(admitted) => admitted,
                Err(refused) => return refused,
            };
            // A call answered on its first poll (an in-memory one) arms no timer.
            let bounded =
                within(AssertUnwindSafe(call).catch_unwind(), || Instant::now() + REQUEST_TIMEOUT);
            let res = match bounded.await {
                Some(Ok(Ok(res))) => typed_decode_errors(res.map(Body::new)),
                Some(Ok(Err(never))) => match never {},
                Some(Err(_)) => answer(Status::internal(format!(
                    "the dispatcher hit a bug handling {method} (a panic was caught)"
                ))),
                None => answer(Status::unavailable(format!(
                    "{method} took longer than {} s; retry",
                    REQUEST_TIMEOUT.as_secs()
                ))),
            };
            drop(permit);
            res
        }
    }
}

/// The call tonic makes of a request, once the gate let it through.
type Admitted = (
    <DispatcherServiceServer<DispatcherGrpc> as Service<http::Request<Incoming>>>::Future,
    Option<tokio::sync::OwnedSemaphorePermit>,
    &'static str,
);

impl GrpcFront {
    /// The gate's checks before the call: the call, or the answer refusing it.
    fn admit(&self, req: http::Request<Incoming>, peer: SocketAddr) -> Result<Admitted, Response> {
        let gate = &self.gate;
        let method = req.uri().path().strip_prefix(SERVICE_PATH).unwrap_or("");
        if let Some(tokens) = &gate.tokens {
            let what = || format!("the RPC {method}");
            if let Err(refused) = check(tokens, access(method), what, req.headers()) {
                return Err(answer(convert::status(refused.code(), refused.detail())));
            }
        }
        let name = rpc_name(method).unwrap_or("an unknown RPC");
        let permit = match gate.limits.check_from(req.headers(), peer.ip()) {
            Ok(permit) => permit,
            Err(refused) => return Err(answer(convert::status(refused.code, &refused.detail))),
        };
        // The generated server is always ready; a panic while making its future is a bug like
        // one while polling it.
        let mut server = self.server.clone();
        match std::panic::catch_unwind(AssertUnwindSafe(move || server.call(req))) {
            Ok(call) => Ok((call, permit, name)),
            Err(_) => Err(answer(Status::internal(format!(
                "the dispatcher hit a bug handling {name} (a panic was caught)"
            )))),
        }
    }
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
