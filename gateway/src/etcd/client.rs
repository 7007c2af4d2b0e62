//! [`Client`]: the members' channels, failover, and the unary calls.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use super::proto::etcdserverpb::kv_client::KvClient;
use super::proto::etcdserverpb::lease_client::LeaseClient;
use super::proto::etcdserverpb::watch_client::WatchClient;
use super::proto::etcdserverpb::{
    CompactionRequest, DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest,
    LeaseRevokeRequest, PutRequest,
};
use super::{
    CompactionResponse, DeleteRangeResponse, Error, KeyValue, Options, PutResponse, RangeOptions,
    RangeRequest, RangeResponse, TxnRequest, TxnResponse, check_header, check_range, check_txn,
    parse_endpoint,
};

/// The largest answer a client decodes. A range read without a limit over large values can
/// exceed it ([`Client::range_all`] pages instead); watch answers come in fragments of about
/// etcd's request size limit (1.5 MiB by default).
pub(super) const MAX_MESSAGE: usize = 16 << 20;

/// HTTP/2 keep-alive pings on open streams: etcd (its `--grpc-keepalive-min-time`, 5 s by
/// default) closes connections that ping more often, and pings without open streams.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// [`Client::range_all`]: the first page's number of keys, small enough for the largest values
/// etcd accepts (its request limit, 1.5 MiB by default) to fit into [`MAX_MESSAGE`].
const FIRST_PAGE: i64 = 8;
/// [`Client::range_all`]: at most this many keys per page.
const MAX_PAGE: i64 = 64;
/// [`Client::range_all`]: the size of page it aims at, from the largest key-value seen so far.
const PAGE_BYTES: usize = 2 << 20;

/// A client of an etcd cluster: cheap to clone (clones share the connections and the member
/// that answered last). See the [module docs](super) for failover.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    members: Vec<Member>,
    /// The member that answered last: where the next call starts.
    current: AtomicUsize,
    options: Options,
}

#[derive(Debug)]
struct Member {
    url: String,
    channel: Channel,
}

/// Why one attempt (on one member) failed.
pub(super) enum AttemptError {
    /// The call's gRPC status (etcd's answer, or a transport failure).
    Status(Status),
    /// The member answered, but the answer does not make sense.
    Malformed(String),
    /// The member answered with an error of its own (for example a cancelled watch).
    Final(Error),
}

impl From<Status> for AttemptError {
    fn from(status: Status) -> AttemptError {
        AttemptError::Status(status)
    }
}

/// What a failed gRPC call means: another member may do (`Ok(why)`), or the call's error.
pub(super) fn classify(status: &Status) -> Result<String, Error> {
    let message = status.message();
    // A status with a source is this side's transport error (connection refused or reset,
    // an HTTP/2 error), not an answer from etcd.
    if matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded)
        || std::error::Error::source(status).is_some()
    {
        return Ok(format!("{:?}: {message}", status.code()));
    }
    if status.code() == Code::NotFound && message.contains("lease not found") {
        return Err(Error::LeaseGone);
    }
    Err(Error::Rejected { code: status.code(), message: message.to_owned() })
}

/// A request with etcd's `hasleader` metadata: a member without a leader refuses it.
pub(super) fn with_leader<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("hasleader", tonic::metadata::MetadataValue::from_static("true"));
    request
}

/// A whole range at one revision, from [`Client::range_all`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RangeAll {
    /// The revision every page was read at.
    pub revision: i64,
    /// Every key of the range, in key order.
    pub kvs: Vec<KeyValue>,
}

impl Client {
    /// A client of the cluster with these members' client URLs (`http://host:port` or
    /// `host:port`). Connects lazily: nothing is dialled before the first call, so a member
    /// down now is no error. Must be called within a tokio runtime.
    pub fn new(endpoints: &[String], options: Options) -> Result<Client, Error> {
        if endpoints.is_empty() {
            return Err(Error::InvalidEndpoint {
                endpoint: String::new(),
                reason: "no etcd endpoint given".to_owned(),
            });
        }
        let urls = endpoints.iter().map(|e| parse_endpoint(e)).collect::<Result<Vec<_>, _>>()?;
        let mut members = Vec::with_capacity(urls.len());
        for (url, given) in urls.into_iter().zip(endpoints) {
            let endpoint = Endpoint::from_shared(url.clone()).map_err(|e| {
                Error::InvalidEndpoint { endpoint: given.clone(), reason: e.to_string() }
            })?;
            let channel = endpoint
                .connect_timeout(options.connect_timeout)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
                .keep_alive_timeout(options.request_timeout)
                .keep_alive_while_idle(false)
                .connect_lazy();
            members.push(Member { url, channel });
        }
        Ok(Client { inner: Arc::new(Inner { members, current: AtomicUsize::new(0), options }) })
    }

    /// The members' URLs (`http://host:port`), in the order given.
    pub fn endpoints(&self) -> Vec<&str> {
        self.inner.members.iter().map(|m| m.url.as_str()).collect()
    }

    /// The options the client was made with.
    pub fn options(&self) -> Options {
        self.inner.options
    }

    /// Runs `attempt` on one member after the other, from the one that answered last, until
    /// one answers (see the module docs): its answer, or the call's error.
    pub(super) async fn call<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut(Channel, String) -> Fut,
        Fut: Future<Output = Result<T, AttemptError>>,
    {
        let members = &self.inner.members;
        let timeout = self.inner.options.request_timeout;
        let start = self.inner.current.load(Ordering::Relaxed) % members.len();
        let mut failures = Vec::new();
        for k in 0..members.len() {
            let i = (start + k) % members.len();
            let member = &members[i];
            let outcome =
                tokio::time::timeout(timeout, attempt(member.channel.clone(), member.url.clone()))
                    .await;
            let failure = match outcome {
                Ok(Ok(answer)) => {
                    self.inner.current.store(i, Ordering::Relaxed);
                    return Ok(answer);
                }
                Err(_) => format!("no answer within {timeout:?}"),
                Ok(Err(AttemptError::Status(status))) => match classify(&status) {
                    Ok(why) => why,
                    Err(e) => {
                        self.inner.current.store(i, Ordering::Relaxed);
                        return Err(e);
                    }
                },
                Ok(Err(AttemptError::Malformed(detail))) => {
                    self.inner.current.store(i, Ordering::Relaxed);
                    return Err(Error::malformed(&member.url, what, detail));
                }
                Ok(Err(AttemptError::Final(e))) => {
                    self.inner.current.store(i, Ordering::Relaxed);
                    return Err(e);
                }
            };
            tracing::debug!(member = %member.url, %failure, "etcd {what} failed over");
            failures.push(format!("{}: {failure}", member.url));
        }
        // Nobody answered: the next call starts with the member after this call's first.
        self.inner.current.store((start + 1) % members.len(), Ordering::Relaxed);
        Err(Error::Unavailable { detail: format!("{what}: {}", failures.join("; ")) })
    }

    /// The keys in `[key, range_end)` (only `key` when `range_end` is empty; see
    /// [`prefix_end`](super::prefix_end)).
    pub async fn range(
        &self,
        key: impl Into<Vec<u8>>,
        range_end: impl Into<Vec<u8>>,
        options: RangeOptions,
    ) -> Result<RangeResponse, Error> {
        self.range_request(options.request(key.into(), range_end.into())).await
    }

    async fn range_request(&self, request: RangeRequest) -> Result<RangeResponse, Error> {
        self.call("range", |channel, _| {
            let request = request.clone();
            async move {
                let response = kv(channel).range(with_leader(request.clone())).await?.into_inner();
                check_range(&request, &response).map_err(AttemptError::Malformed)?;
                Ok(response)
            }
        })
        .await
    }

    /// Puts `key` = `value`, attached to `lease` (0: none). [`Error::LeaseGone`] when the lease
    /// does not exist.
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease: i64,
    ) -> Result<PutResponse, Error> {
        let request =
            PutRequest { key: key.into(), value: value.into(), lease, ..PutRequest::default() };
        self.call("put", |channel, _| {
            let request = request.clone();
            async move {
                let response = kv(channel).put(with_leader(request)).await?.into_inner();
                check_header(response.header.as_ref()).map_err(AttemptError::Malformed)?;
                Ok(response)
            }
        })
        .await
    }

    /// Deletes the keys in `[key, range_end)` (only `key` when `range_end` is empty).
    pub async fn delete_range(
        &self,
        key: impl Into<Vec<u8>>,
        range_end: impl Into<Vec<u8>>,
    ) -> Result<DeleteRangeResponse, Error> {
        let request = DeleteRangeRequest {
            key: key.into(),
            range_end: range_end.into(),
            ..DeleteRangeRequest::default()
        };
        self.call("delete range", |channel, _| {
            let request = request.clone();
            async move {
                let response = kv(channel).delete_range(with_leader(request)).await?.into_inner();
                check_header(response.header.as_ref()).map_err(AttemptError::Malformed)?;
                if response.deleted < 0 {
                    return Err(AttemptError::Malformed(format!("{} deleted", response.deleted)));
                }
                Ok(response)
            }
        })
        .await
    }

    /// A transaction: `success` if every comparison holds, else `failure`, atomically.
    pub async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, Error> {
        self.call("txn", |channel, _| {
            let request = request.clone();
            async move {
                let response = kv(channel).txn(with_leader(request.clone())).await?.into_inner();
                check_txn(&request, &response).map_err(AttemptError::Malformed)?;
                Ok(response)
            }
        })
        .await
    }

    /// Forgets every key's history before `revision` (reads and watches of older revisions
    /// fail afterwards).
    pub async fn compact(&self, revision: i64) -> Result<CompactionResponse, Error> {
        let request = CompactionRequest { revision, physical: false };
        self.call("compact", |channel, _| async move {
            let response = kv(channel).compact(with_leader(request)).await?.into_inner();
            check_header(response.header.as_ref()).map_err(AttemptError::Malformed)?;
            Ok(response)
        })
        .await
    }

    /// Grants a lease of `ttl_secs` seconds: its id and the TTL etcd granted.
    pub async fn lease_grant(&self, ttl_secs: i64) -> Result<(i64, i64), Error> {
        let request = LeaseGrantRequest { ttl: ttl_secs, id: 0 };
        self.call("lease grant", |channel, _| async move {
            let response = lease(channel).lease_grant(with_leader(request)).await?.into_inner();
            if !response.error.is_empty() {
                return Err(AttemptError::Final(Error::Rejected {
                    code: Code::Unknown,
                    message: response.error,
                }));
            }
            check_header(response.header.as_ref()).map_err(AttemptError::Malformed)?;
            if response.id == 0 || response.ttl <= 0 {
                return Err(AttemptError::Malformed(format!(
                    "lease {} with TTL {}",
                    response.id, response.ttl
                )));
            }
            Ok((response.id, response.ttl))
        })
        .await
    }

    /// Revokes lease `id`: its keys are deleted. [`Error::LeaseGone`] when it does not exist.
    pub async fn lease_revoke(&self, id: i64) -> Result<(), Error> {
        self.call("lease revoke", |channel, _| async move {
            let response =
                lease(channel).lease_revoke(with_leader(LeaseRevokeRequest { id })).await?;
            check_header(response.get_ref().header.as_ref()).map_err(AttemptError::Malformed)?;
            Ok(())
        })
        .await
    }

    /// Renews lease `id` once (one request and its answer on a `LeaseKeepAlive` stream): its
    /// new TTL in seconds. [`Error::LeaseGone`] when it does not exist any more.
    pub async fn lease_keep_alive(&self, id: i64) -> Result<i64, Error> {
        self.call("lease keep-alive", |channel, _| async move {
            let requests = futures::stream::iter([LeaseKeepAliveRequest { id }]);
            let mut answers =
                lease(channel).lease_keep_alive(with_leader(requests)).await?.into_inner();
            let Some(response) = answers.message().await? else {
                return Err(AttemptError::Malformed("the stream ended without an answer".into()));
            };
            if response.id != id {
                return Err(AttemptError::Malformed(format!(
                    "the keep-alive of lease {id} answered for lease {}",
                    response.id
                )));
            }
            check_header(response.header.as_ref()).map_err(AttemptError::Malformed)?;
            if response.ttl <= 0 {
                return Err(AttemptError::Final(Error::LeaseGone));
            }
            Ok(response.ttl)
        })
        .await
    }

    /// Every key in `[start, end)` at `revision` (0: the latest, then pinned for every page),
    /// read page by page so that no answer exceeds what the client decodes, however large the
    /// values (up to etcd's request limit). A revision compacted meanwhile fails the read
    /// (`Rejected` with `OutOfRange`): read again at the latest revision.
    pub async fn range_all(
        &self,
        start: impl Into<Vec<u8>>,
        end: impl Into<Vec<u8>>,
        revision: i64,
    ) -> Result<RangeAll, Error> {
        let end = end.into();
        let mut key = start.into();
        let mut revision = revision;
        let mut limit = FIRST_PAGE;
        let mut largest = 0usize;
        let mut kvs = Vec::new();
        loop {
            let request = RangeRequest {
                key: key.clone(),
                range_end: end.clone(),
                limit,
                revision,
                ..RangeRequest::default()
            };
            let page = match self.range_request(request).await {
                Ok(page) => page,
                // A page too large for this client: fewer keys per page.
                Err(Error::Rejected { code: Code::OutOfRange, message })
                    if limit > 1 && message.contains("message length too large") =>
                {
                    limit /= 2;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if revision == 0 {
                revision = page.revision();
            }
            let Some(last) = page.kvs.last() else {
                if page.more {
                    return Err(Error::Unavailable {
                        detail:
                            "etcd answered a range read with an empty page and more keys to come"
                                .to_owned(),
                    });
                }
                break;
            };
            // The next page starts right after the last key of this one.
            key = last.key.clone();
            key.push(0);
            let more = page.more;
            for kv in page.kvs {
                largest = largest.max(kv.key.len() + kv.value.len());
                kvs.push(kv);
            }
            if !more || (end.as_slice() != [0] && !end.is_empty() && key >= end) {
                break;
            }
            let fits = (PAGE_BYTES / largest.max(1)).clamp(1, MAX_PAGE as usize) as i64;
            limit = fits.min(limit.saturating_mul(2));
        }
        Ok(RangeAll { revision, kvs })
    }

    /// Watches `[key, range_end)` from `start_revision` (0: from now on): see [`Watch`].
    ///
    /// [`Watch`]: super::Watch
    pub async fn watch(
        &self,
        key: impl Into<Vec<u8>>,
        range_end: impl Into<Vec<u8>>,
        start_revision: i64,
    ) -> Result<super::Watch, Error> {
        super::watch::open(self, key.into(), range_end.into(), start_revision).await
    }
}

fn kv(channel: Channel) -> KvClient<Channel> {
    KvClient::new(channel).max_decoding_message_size(MAX_MESSAGE)
}

fn lease(channel: Channel) -> LeaseClient<Channel> {
    LeaseClient::new(channel).max_decoding_message_size(MAX_MESSAGE)
}

pub(super) fn watch(channel: Channel) -> WatchClient<Channel> {
    WatchClient::new(channel).max_decoding_message_size(MAX_MESSAGE)
}
