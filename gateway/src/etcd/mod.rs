//! A client of etcd's v3 API on the project's one tonic (gRPC over plain HTTP/2, no TLS).
//!
//! - [`proto`]: the generated messages and clients (Shardwise's own `.proto` subset of etcd's
//!   API, with etcd's wire names and numbers).
//! - [`Client`]: one lazy connection per member, failover between members, every answer
//!   checked; unary calls ([`Client::range`], [`Client::put`], [`Client::delete_range`],
//!   [`Client::txn`], [`Client::compact`], the lease calls), [`Client::range_all`] (a large
//!   range read page by page at one revision) and [`Client::watch`].
//! - Builders of transaction parts ([`Compare`], [`RequestOp`]) and [`prefix_end`].
//!
//! Every request carries etcd's `hasleader` metadata: a member that lost its cluster's leader
//! refuses it (UNAVAILABLE, so the call moves on to another member) instead of serving stale
//! reads or holding a watch that would never see another event.
//!
//! # Failover
//!
//! A call goes to the member that answered last. When that member cannot be reached, answers
//! UNAVAILABLE or DEADLINE_EXCEEDED, or gives no answer within [`Options::request_timeout`],
//! the call moves on to the next member; each member is tried at most once per call, so a call
//! takes at most one request timeout per member (and a member that refuses connections costs
//! next to nothing). When no member answered, the call fails with [`Error::Unavailable`]: for
//! a write, its outcome is then unknown (it may have been committed), and a write retried on
//! the next member may be committed twice; fence writes with a transaction where that matters.

mod client;
pub mod proto;
mod watch;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use client::{Client, RangeAll};
pub use proto::etcdserverpb::compare::CompareResult;
pub use proto::etcdserverpb::{
    CompactionResponse, Compare, DeleteRangeResponse, PutResponse, RangeRequest, RangeResponse,
    RequestOp, ResponseHeader, ResponseOp, TxnRequest, TxnResponse,
};
pub use proto::mvccpb::event::EventType;
pub use proto::mvccpb::{Event, KeyValue};
pub use watch::{Watch, WatchBatch};

use proto::etcdserverpb::compare::{CompareTarget, TargetUnion};
use proto::etcdserverpb::request_op::Request;
use proto::etcdserverpb::response_op::Response;
use proto::etcdserverpb::{DeleteRangeRequest, PutRequest};

/// How a [`Client`] talks to etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// How long opening a connection to one member may take (default 1 s).
    pub connect_timeout: Duration,
    /// How long one attempt of a call (on one member) may take, connecting included (default
    /// 2 s). Also the bound of HTTP/2 keep-alive pings on open streams (watches), so a member
    /// that stopped answering ends its streams.
    pub request_timeout: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options { connect_timeout: Duration::from_secs(1), request_timeout: Duration::from_secs(2) }
    }
}

/// What went wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An endpoint is not `http://host:port` or `host:port` (or there is none).
    #[error("invalid etcd endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why it is refused.
        reason: String,
    },
    /// No member gave a usable answer (unreachable, no quorum, no answer in time, or an answer
    /// that does not make sense). For a write, the outcome is unknown: it may have been
    /// committed.
    #[error("etcd unavailable: {detail}")]
    Unavailable {
        /// What each member did.
        detail: String,
    },
    /// etcd refused the request (for example a request too large or an invalid argument); the
    /// request changed nothing.
    #[error("etcd refused the request ({code:?}): {message}")]
    Rejected {
        /// etcd's gRPC status code.
        code: tonic::Code,
        /// etcd's message.
        message: String,
    },
    /// The lease does not exist (any more): it expired or was revoked.
    #[error("the etcd lease is gone (expired or revoked)")]
    LeaseGone,
    /// A watch's start revision is older than the oldest revision etcd keeps.
    #[error("the revisions before {compact_revision} were compacted")]
    Compacted {
        /// The oldest revision a watch may start from now.
        compact_revision: i64,
    },
}

/// What to do when etcd is at its space quota (`--quota-backend-bytes`): etcd raised its
/// NOSPACE alarm and refuses every write until the alarm is disarmed; no restart helps.
pub const SPACE_EXCEEDED_REMEDY: &str = "etcd is at its space quota (etcdserver: mvcc: \
     database space exceeded) and refuses every write: compact and defragment etcd (etcdctl \
     compact REVISION; etcdctl defrag), then run `etcdctl alarm disarm`; the dispatcher \
     resumes by itself, no restart is needed";

impl Error {
    /// Whether etcd refused a write because it is at its space quota (its NOSPACE alarm):
    /// see [`SPACE_EXCEEDED_REMEDY`].
    pub fn is_space_exceeded(&self) -> bool {
        let text = match self {
            Error::Rejected { message, .. } => message,
            Error::Unavailable { detail } => detail,
            _ => return false,
        };
        text.contains("database space exceeded")
    }

    /// A malformed answer: the member answered, but not something this client can use.
    fn malformed(url: &str, what: &str, detail: impl std::fmt::Display) -> Error {
        Error::Unavailable {
            detail: format!("{url} answered {what} with a malformed response: {detail}"),
        }
    }
}

/// Parameters of a range read (see etcd's `RangeRequest`); the default reads every key of the
/// range at the latest revision with a quorum read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangeOptions {
    /// At most this many keys (0: no limit); `more` in the answer says whether keys remain.
    pub limit: i64,
    /// Read at this revision (0: the latest).
    pub revision: i64,
    /// Keys and revisions only, no values.
    pub keys_only: bool,
    /// Only the number of keys (`count`).
    pub count_only: bool,
    /// Answer from the member's own state, without a quorum read (may be stale).
    pub serializable: bool,
}

impl RangeOptions {
    fn request(self, key: Vec<u8>, range_end: Vec<u8>) -> RangeRequest {
        RangeRequest {
            key,
            range_end,
            limit: self.limit,
            revision: self.revision,
            keys_only: self.keys_only,
            count_only: self.count_only,
            serializable: self.serializable,
            ..RangeRequest::default()
        }
    }
}

/// The end of the range of every key starting with `prefix`: the prefix with its last byte
/// below 0xff incremented (and the 0xff bytes after it dropped). For an empty prefix, or one
/// of 0xff bytes only, `[0]`: etcd's "every key from the start key on".
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Whether `key` is in etcd's range `[start, end)`: only `start` when `end` is empty, every
/// key from `start` on when `end` is `[0]`.
fn in_range(key: &[u8], start: &[u8], end: &[u8]) -> bool {
    match end {
        [] => key == start,
        [0] => key >= start,
        _ => key >= start && key < end,
    }
}

impl Compare {
    fn new(key: Vec<u8>, op: CompareResult, target: CompareTarget, value: TargetUnion) -> Compare {
        Compare {
            result: op as i32,
            target: target as i32,
            key,
            target_union: Some(value),
            range_end: Vec::new(),
        }
    }

    /// `key`'s create revision `op` `revision` (0 when the key does not exist).
    pub fn create_revision(key: impl Into<Vec<u8>>, op: CompareResult, revision: i64) -> Compare {
        Compare::new(key.into(), op, CompareTarget::Create, TargetUnion::CreateRevision(revision))
    }

    /// `key`'s latest modification revision `op` `revision` (0 when the key does not exist).
    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareResult, revision: i64) -> Compare {
        Compare::new(key.into(), op, CompareTarget::Mod, TargetUnion::ModRevision(revision))
    }

    /// `key`'s version (writes since its creation) `op` `version` (0 when it does not exist).
    pub fn version(key: impl Into<Vec<u8>>, op: CompareResult, version: i64) -> Compare {
        Compare::new(key.into(), op, CompareTarget::Version, TargetUnion::Version(version))
    }

    /// `key`'s lease `op` `lease` (0: no lease).
    pub fn lease(key: impl Into<Vec<u8>>, op: CompareResult, lease: i64) -> Compare {
        Compare::new(key.into(), op, CompareTarget::Lease, TargetUnion::Lease(lease))
    }

    /// `key`'s value `op` `value` (a comparison with a missing key is false).
    pub fn value(key: impl Into<Vec<u8>>, op: CompareResult, value: impl Into<Vec<u8>>) -> Compare {
        Compare::new(key.into(), op, CompareTarget::Value, TargetUnion::Value(value.into()))
    }
}

impl RequestOp {
    /// Put `key` = `value`, attached to `lease` (0: none).
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, lease: i64) -> RequestOp {
        let put =
            PutRequest { key: key.into(), value: value.into(), lease, ..PutRequest::default() };
        RequestOp { request: Some(Request::RequestPut(put)) }
    }

    /// Delete the keys in `[key, range_end)` (only `key` when `range_end` is empty).
    pub fn delete_range(key: impl Into<Vec<u8>>, range_end: impl Into<Vec<u8>>) -> RequestOp {
        let delete = DeleteRangeRequest {
            key: key.into(),
            range_end: range_end.into(),
            ..DeleteRangeRequest::default()
        };
        RequestOp { request: Some(Request::RequestDeleteRange(delete)) }
    }

    /// Read the keys in `[key, range_end)`.
    pub fn range(
        key: impl Into<Vec<u8>>,
        range_end: impl Into<Vec<u8>>,
        options: RangeOptions,
    ) -> RequestOp {
        RequestOp {
            request: Some(Request::RequestRange(options.request(key.into(), range_end.into()))),
        }
    }
}

/// The revision in a checked answer's header (every answer a [`Client`] returns has one).
fn header_revision(header: Option<&ResponseHeader>) -> i64 {
    header.map_or(0, |h| h.revision)
}

impl RangeResponse {
    /// The store's revision the read was served at.
    pub fn revision(&self) -> i64 {
        header_revision(self.header.as_ref())
    }
}

impl PutResponse {
    /// The revision of the write.
    pub fn revision(&self) -> i64 {
        header_revision(self.header.as_ref())
    }
}

impl DeleteRangeResponse {
    /// The store's revision after the delete (the delete's own revision when it deleted a key).
    pub fn revision(&self) -> i64 {
        header_revision(self.header.as_ref())
    }
}

impl TxnResponse {
    /// The store's revision after the transaction (its own revision when it wrote).
    pub fn revision(&self) -> i64 {
        header_revision(self.header.as_ref())
    }
}

/// Checks that an answer has a header with a revision: every etcd answer has one.
fn check_header(header: Option<&ResponseHeader>) -> Result<(), String> {
    match header {
        None => Err("no header".to_owned()),
        Some(h) if h.revision < 1 => Err(format!("header revision {}", h.revision)),
        Some(_) => Ok(()),
    }
}

/// Checks a range answer against its request: header, then [`check_range_body`].
fn check_range(request: &RangeRequest, response: &RangeResponse) -> Result<(), String> {
    check_header(response.header.as_ref())?;
    if request.revision > 0
        && response.header.as_ref().is_some_and(|h| h.revision < request.revision)
    {
        return Err(format!(
            "a read at revision {} from a store at an older one",
            request.revision
        ));
    }
    check_range_body(request, response)
}

/// Checks the keys of a range answer (as a whole or inside a transaction's, whose inner
/// headers etcd does not fill): in the range, in order, within the limit, revisions valid.
fn check_range_body(request: &RangeRequest, response: &RangeResponse) -> Result<(), String> {
    if request.limit > 0 && response.kvs.len() as u64 > request.limit as u64 {
        return Err(format!("{} keys for a limit of {}", response.kvs.len(), request.limit));
    }
    if request.count_only && !response.kvs.is_empty() {
        return Err("keys for a count-only read".to_owned());
    }
    let mut previous: Option<&[u8]> = None;
    for kv in &response.kvs {
        if !in_range(&kv.key, &request.key, &request.range_end) {
            return Err(format!(
                "key {:?} outside the range read",
                String::from_utf8_lossy(&kv.key)
            ));
        }
        if previous.is_some_and(|p| p >= kv.key.as_slice()) {
            return Err("keys out of order".to_owned());
        }
        if kv.create_revision < 1 || kv.mod_revision < kv.create_revision || kv.version < 1 {
            return Err(format!(
                "key {:?} with create revision {}, mod revision {}, version {}",
                String::from_utf8_lossy(&kv.key),
                kv.create_revision,
                kv.mod_revision,
                kv.version
            ));
        }
        previous = Some(&kv.key);
    }
    if response.count < response.kvs.len() as i64 {
        return Err(format!("count {} below the {} keys sent", response.count, response.kvs.len()));
    }
    Ok(())
}

/// Checks a transaction's answer against its request: header, and one answer of the right
/// kind per operation of the branch that ran (nested transactions included).
fn check_txn(request: &TxnRequest, response: &TxnResponse) -> Result<(), String> {
    check_header(response.header.as_ref())?;
    check_txn_body(request, response)
}

/// [`check_txn`] without the header (which etcd does not fill in nested answers).
fn check_txn_body(request: &TxnRequest, response: &TxnResponse) -> Result<(), String> {
    let branch = if response.succeeded { &request.success } else { &request.failure };
    if branch.len() != response.responses.len() {
        return Err(format!(
            "{} answers to the {} operations of the {} branch",
            response.responses.len(),
            branch.len(),
            if response.succeeded { "success" } else { "failure" }
        ));
    }
    for (i, (op, answer)) in branch.iter().zip(&response.responses).enumerate() {
        let checked = match (&op.request, &answer.response) {
            (Some(Request::RequestRange(q)), Some(Response::ResponseRange(a))) => {
                check_range_body(q, a)
            }
            (Some(Request::RequestPut(_)), Some(Response::ResponsePut(_))) => Ok(()),
            (Some(Request::RequestDeleteRange(_)), Some(Response::ResponseDeleteRange(_))) => {
                Ok(())
            }
            (Some(Request::RequestTxn(q)), Some(Response::ResponseTxn(a))) => check_txn_body(q, a),
            (None, _) => Err("an empty operation was answered".to_owned()),
            (Some(_), _) => Err("an answer of the wrong kind".to_owned()),
        };
        checked.map_err(|e| format!("operation {i}: {e}"))?;
    }
    Ok(())
}

/// Parses one endpoint: `http://host:port` or `host:port` (a trailing `/` is allowed), into
/// `http://host:port`.
fn parse_endpoint(endpoint: &str) -> Result<String, Error> {
    let invalid = |reason: &str| Error::InvalidEndpoint {
        endpoint: endpoint.to_owned(),
        reason: reason.to_owned(),
    };
    let trimmed = endpoint.trim();
    if trimmed.is_empty() {
        return Err(invalid("empty"));
    }
    let with_scheme = match trimmed.split_once("://") {
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("http") => trimmed.to_owned(),
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
            return Err(invalid(
                "https is not supported (the etcd client has no TLS yet): use http://host:port",
            ));
        }
        Some((scheme, _)) => {
            return Err(invalid(&format!("unsupported scheme {scheme:?}: use http://host:port")));
        }
        None => format!("http://{trimmed}"),
    };
    let uri: http::Uri = with_scheme.parse().map_err(|e| invalid(&format!("not a URL: {e}")))?;
    let authority = uri.authority().ok_or_else(|| invalid("no host"))?;
    if authority.as_str().contains('@') {
        return Err(invalid("user information is not supported"));
    }
    if authority.host().is_empty() {
        return Err(invalid("no host"));
    }
    let port = match (authority.port(), authority.port_u16()) {
        (None, _) => return Err(invalid("no port (etcd's is usually 2379)")),
        (Some(_), None) => return Err(invalid("the port is not a number from 1 to 65535")),
        (Some(_), Some(port)) => port,
    };
    if port == 0 {
        return Err(invalid("the port is not a number from 1 to 65535"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(invalid("a path or query (an etcd endpoint is http://host:port)"));
    }
    Ok(format!("http://{}:{port}", authority.host()))
}
