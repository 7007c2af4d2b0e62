//! TensorFlow's `tensorflow.data.DispatcherService` over gRPC, on the dispatcher's port: the
//! front that lets TensorFlow's workers and clients (`dispatcher_address="HOST:PORT"`,
//! `service="grpc://HOST:PORT"`) use a Shardwise dispatcher.
//!
//! * [`service`]: the RPCs, each translated to the core request REST uses for the same thing.
//! * [`convert`]: the one table from the core's status classes to gRPC codes; the
//!   conversions between TensorFlow's messages and the core's are the core's
//!   ([`shardwise_core::tensorflow::convert`]).
//! * [`push`]: `WorkerService.ProcessTask` pushes of new tasks to TensorFlow workers.
//!
//! Around the RPCs ([`front`]): the bearer-token check of `--auth-tokens` by RPC (the one role
//! table of `http::auth`, shared with the REST routes: the same operation needs the same role
//! over either), `--rate-limit` and `--max-in-flight` (gRPC calls have their own token buckets
//! and in-flight count, of the same sizes as REST's), the request message read whole within
//! `--read-timeout` (else `DEADLINE_EXCEEDED`, and the stream is reset) and checked as exactly
//! one length-prefixed message of at most `--max-body-bytes` (else `INVALID_ARGUMENT` or
//! `RESOURCE_EXHAUSTED`), the bytes of request messages being read and of large replies held
//! unwritten bounded per connection and in total ([`budget`]), a 30 s bound per call (sooner:
//! the caller's `grpc-timeout`, then `DEADLINE_EXCEEDED`), caught
//! panics. Every refusal is a gRPC
//! status.

pub mod convert;
pub mod push;
pub mod service;

use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http;
use axum::response::Response;
use futures::FutureExt as _;
use hyper::body::Incoming;
use tonic::Status;
use tower::Service;

use self::budget::{
    ConnectionBudget, Growing, HeldReply, Metered, ReplyBudgets, RequestBudget, Waiting,
};
pub use self::service::{DispatcherGrpc, TF_DATA_SERVICE_VERSION};
use crate::http::auth::{Access, Tokens, check};
pub use crate::http::budget;
use crate::http::conn::GrpcService;
use crate::http::front::{REQUEST_TIMEOUT, within};
use crate::http::limit::{LimitConfig, Limits};
use crate::tf::proto::tensorflow::data::dispatcher_service_server::DispatcherServiceServer;

/// The path prefix of every RPC of the service.
pub const SERVICE_PATH: &str = "/tensorflow.data.DispatcherService/";

/// What an RPC requires of the caller's token: its entry in the role table REST shares
/// ([`crate::http::auth::grpc_access`]); an unknown method requires admin.
pub fn access(method: &str) -> Access {
    crate::http::auth::grpc_access(method)
}

/// The gRPC front of the dispatcher, for `http::conn::serve`: the RPCs of `service` behind
/// the gate (token check, request limits, the per-call bound, caught panics, typed decode
/// errors). A hand-written service rather than a router with middleware: a call pays no
/// routing, no boxed middleware future and no body boxing before tonic reads its message.
#[derive(Debug, Clone)]
pub struct GrpcFront {
    server: DispatcherServiceServer<DispatcherGrpc>,
    gate: Arc<Gate>,
    /// The budget of the connection this front serves (each connection gets its own front:
    /// [`GrpcService::for_connection`]); `None` before.
    connection: Option<ConnectionBudget>,
}

/// What the gate around the RPCs checks.
#[derive(Debug)]
struct Gate {
    tokens: Option<Tokens>,
    limits: Limits,
    /// The time a request message may take to arrive.
    read_timeout: Duration,
    /// The largest request message.
    max_message: usize,
    /// The bytes of replies held unwritten.
    replies: ReplyBudgets,
}

/// The gRPC front over `service`, behind the token check and the request limits of `limits`
/// (its `max_body_bytes` bounds a request message, its `read_timeout` the time it takes to
/// arrive); the bytes of replies not yet written are bounded by `replies`.
pub fn front(
    service: DispatcherGrpc,
    limits: LimitConfig,
    tokens: Option<Tokens>,
    replies: ReplyBudgets,
) -> GrpcFront {
    let server = DispatcherServiceServer::new(service)
        .max_decoding_message_size(limits.max_body_bytes)
        .max_encoding_message_size(usize::MAX);
    let gate = Gate {
        tokens,
        limits: Limits::new(limits),
        read_timeout: limits.read_timeout,
        max_message: limits.max_body_bytes,
        replies,
    };
    GrpcFront { server, gate: Arc::new(gate), connection: None }
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
    fn for_connection(&self) -> Self {
        GrpcFront { connection: Some(self.gate.replies.connection()), ..self.clone() }
    }

    fn serve(
        &self,
        req: http::Request<Incoming>,
        peer: SocketAddr,
    ) -> impl Future<Output = Response> + Send + use<> {
        let admitted = self.admit(&req, peer);
        // The caller's deadline, when it is sooner than the bound of every call.
        let deadline = grpc_timeout(req.headers()).filter(|t| *t < REQUEST_TIMEOUT);
        let gate = self.gate.clone();
        let budget = self.connection.clone().unwrap_or_else(|| gate.replies.connection());
        let mut server = self.server.clone();
        async move {
            let (permit, method) = match admitted {
                Ok(admitted) => admitted,
                Err(refused) => return refused,
            };
            let (mut req, held) = match read_message(&gate, req, method).await {
                Ok(read) => read,
                Err(refused) => return answer(refused),
            };
            req.extensions_mut().insert(budget);
            // The generated server is always ready; a panic while making its future is a bug
            // like one while polling it.
            let call = match std::panic::catch_unwind(AssertUnwindSafe(move || server.call(req))) {
                Ok(call) => call,
                Err(_) => return answer(panicked(method)),
            };
            // A call answered on its first poll (an in-memory one) arms no timer.
            // The call's future is dropped at the bound: what it started off the async threads
            // (a registration's glob) sees it abandoned and stops.
            let bounded = within(AssertUnwindSafe(call).catch_unwind(), || {
                Instant::now() + deadline.unwrap_or(REQUEST_TIMEOUT)
            });
            let res = match bounded.await {
                Some(Ok(Ok(res))) => typed_decode_errors(res.map(Body::new)),
                Some(Ok(Err(never))) => match never {},
                Some(Err(_)) => answer(panicked(method)),
                None => answer(match deadline {
                    Some(deadline) => Status::deadline_exceeded(format!(
                        "{method} did not finish within its deadline (grpc-timeout, {} ms)",
                        deadline.as_millis()
                    )),
                    None => Status::unavailable(format!(
                        "{method} took longer than {} s; retry",
                        REQUEST_TIMEOUT.as_secs()
                    )),
                }),
            };
            // The request's bytes were reserved until the call is done.
            drop(held);
            drop(permit);
            metered(res)
        }
    }
}

/// The caller's deadline from its `grpc-timeout` header (gRPC over HTTP/2: at most 8 digits
/// and a unit, `H`, `M`, `S`, `m`, `u` or `n`); `None` without one, or when it is malformed
/// (the call then has the bound of every call).
fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.as_bytes();
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// `INTERNAL`: the RPC panicked.
fn panicked(method: &str) -> Status {
    Status::internal(format!("the dispatcher hit a bug handling {method} (a panic was caught)"))
}

/// A reply that holds reserved bytes ([`HeldReply`], put there by its RPC) keeps them until
/// its body has been written (or dropped).
fn metered(mut res: Response) -> Response {
    match res.extensions_mut().remove::<HeldReply>() {
        Some(held) => res.map(|body| Body::new(Metered::new(body, held))),
        None => res,
    }
}

impl GrpcFront {
    /// The gate's checks before the call: the in-flight permit and the RPC's name, or the
    /// answer refusing it.
    fn admit(
        &self,
        req: &http::Request<Incoming>,
        peer: SocketAddr,
    ) -> Result<(Option<tokio::sync::OwnedSemaphorePermit>, &'static str), Response> {
        let gate = &self.gate;
        let method = req.uri().path().strip_prefix(SERVICE_PATH).unwrap_or("");
        if let Some(tokens) = &gate.tokens {
            let what = || format!("the RPC {method}");
            if let Err(refused) = check(tokens, access(method), what, req.headers()) {
                return Err(answer(convert::status(refused.code(), refused.detail())));
            }
        }
        let name = rpc_name(method).unwrap_or("an unknown RPC");
        match gate.limits.check_from(req.headers(), peer.ip()) {
            Ok(permit) => Ok((permit, name)),
            Err(refused) => Err(answer(convert::status(refused.code, &refused.detail))),
        }
    }
}

/// The length of a gRPC message's frame header: a compression flag and a 4-byte length.
const FRAME_HEADER: usize = 5;

/// Reads the request's whole body within the read timeout (every RPC of the service is unary:
/// one message) and checks that it is exactly one length-prefixed message of at most the
/// limit: the request to hand to tonic, or the status refusing it. A body that does not arrive
/// in time is `DEADLINE_EXCEEDED` (its stream is then reset: the body is dropped unread). Its
/// bytes are reserved as they arrive from the connection's budget of request bytes when it has
/// one (returned, to hold until the call is done); a body still waiting for room at the read
/// timeout is `RESOURCE_EXHAUSTED`, naming the budget's flag.
async fn read_message(
    gate: &Gate,
    req: http::Request<Incoming>,
    method: &str,
) -> Result<(http::Request<Body>, Option<Growing>), Status> {
    use hyper::body::Body as _;
    let mut held = req.extensions().get::<RequestBudget>().map(|b| b.0.growing());
    let waiting = Waiting::default();
    let (held_ref, waiting_ref) = (&mut held, &waiting);
    let (parts, body) = req.into_parts();
    let max = gate.max_message;
    let too_large = || {
        Status::resource_exhausted(format!(
            "the request message of {method} is larger than --max-body-bytes allows ({max} bytes)"
        ))
    };
    let read = async move {
        let mut body = std::pin::pin!(body);
        let mut bytes = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            let frame = frame.map_err(|e| {
                Status::cancelled(format!("the request stream of {method} failed: {e}"))
            })?;
            let Ok(chunk) = frame.into_data() else { continue };
            if bytes.len() + chunk.len() > max.saturating_add(FRAME_HEADER) {
                return Err(too_large());
            }
            if let Some(held) = held_ref.as_mut() {
                held.cover(bytes.len() + chunk.len(), waiting_ref).await;
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(bytes))
    };
    let timeout = gate.read_timeout;
    let bytes = match within(read, || Instant::now() + timeout).await {
        Some(read) => read?,
        None if waiting.short().is_some() => {
            return Err(Status::resource_exhausted(format!(
                "the dispatcher holds as many request bytes as it may ({}); the message of \
                 {method} found no room within {} ms (--read-timeout); retry later",
                crate::http::front::request_budget_flag(waiting.short()),
                timeout.as_millis()
            )));
        }
        None => {
            return Err(Status::deadline_exceeded(format!(
                "the request message of {method} did not arrive within {} ms (--read-timeout)",
                timeout.as_millis()
            )));
        }
    };
    check_frames(&bytes, max).map_err(|why| match why {
        FrameError::TooLarge => too_large(),
        FrameError::Invalid(why) => Status::invalid_argument(format!(
            "the request of {method} is not one gRPC message: {why}"
        )),
    })?;
    Ok((http::Request::from_parts(parts, Body::from(bytes)), held))
}

/// Why a unary call's body is not exactly one message.
#[derive(Debug, PartialEq, Eq)]
enum FrameError {
    /// The message is larger than the limit.
    TooLarge,
    /// Malformed: what is wrong.
    Invalid(String),
}

/// Checks that `body` is exactly one gRPC length-prefixed message of at most `max` bytes.
fn check_frames(body: &[u8], max: usize) -> Result<(), FrameError> {
    let invalid = |why: String| Err(FrameError::Invalid(why));
    if body.is_empty() {
        return invalid("it has no message (a unary call sends exactly one)".to_owned());
    }
    let Some((header, rest)) = body.split_first_chunk::<FRAME_HEADER>() else {
        return invalid(format!(
            "its frame is cut short ({} bytes; a message's header alone is {FRAME_HEADER})",
            body.len()
        ));
    };
    if header[0] > 1 {
        return invalid(format!("the compression flag is {} (0 or 1)", header[0]));
    }
    let declared = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if declared > max {
        return Err(FrameError::TooLarge);
    }
    if declared > rest.len() {
        return invalid(format!("its length prefix says {declared} bytes, {} follow", rest.len()));
    }
    let after = rest.len() - declared;
    if after > 0 {
        return invalid(format!(
            "{after} bytes follow its message (a unary call sends exactly one message)"
        ));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(msg: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&u32::try_from(msg.len()).unwrap().to_be_bytes());
        out.extend_from_slice(msg);
        out
    }

    /// Every RPC of the service has its entry in the role table (none falls to admin only).
    #[test]
    fn every_rpc_has_its_role() {
        use crate::http::auth::Role;
        for rpc in RPCS {
            assert_ne!(access(rpc), Access::Only(Role::Admin), "{rpc}");
        }
    }

    #[test]
    fn the_callers_deadline_is_read_from_grpc_timeout() {
        let timeout = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert("grpc-timeout", http::HeaderValue::from_str(v).unwrap());
            grpc_timeout(&h)
        };
        assert_eq!(timeout("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(timeout("99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in ["", "m", "123456789m", "10x", "-1S", "1.5S"] {
            assert_eq!(timeout(bad), None, "{bad}");
        }
        assert_eq!(grpc_timeout(&http::HeaderMap::new()), None);
    }

    #[test]
    fn a_unary_body_is_exactly_one_message_within_the_limit() {
        assert_eq!(check_frames(&framed(b""), 10), Ok(()));
        assert_eq!(check_frames(&framed(b"abc"), 10), Ok(()));
        let mut compressed = framed(b"abc");
        compressed[0] = 1;
        assert_eq!(check_frames(&compressed, 10), Ok(()), "tonic answers compression");
        let invalid = |body: &[u8]| match check_frames(body, 10) {
            Err(FrameError::Invalid(why)) => why,
            other => panic!("{body:?}: {other:?}"),
        };
        assert!(invalid(b"").contains("no message"));
        assert!(invalid(&[0, 0, 0]).contains("cut short"));
        assert!(invalid(&[7, 0, 0, 0, 0]).contains("compression flag is 7"));
        assert!(invalid(&[0, 0, 0, 0, 9, 1, 2]).contains("says 9 bytes, 2 follow"));
        let mut trailing = framed(b"abc");
        trailing.push(0);
        assert!(invalid(&trailing).contains("1 bytes follow"));
        let mut two = framed(b"abc");
        two.extend_from_slice(&framed(b"d"));
        assert!(invalid(&two).contains("6 bytes follow"));
        assert_eq!(check_frames(&framed(&[0; 11]), 10), Err(FrameError::TooLarge));
        assert_eq!(check_frames(&[0, 0xff, 0xff, 0xff, 0xff], 10), Err(FrameError::TooLarge));
    }
}
