//! The Rust client: [`distribute`] reads a dataset through a dispatcher and its workers as a
//! [`Stream`] of JSON elements.
//!
//! ```no_run
//! # async fn demo() -> Result<(), shardwise_gateway::client::ClientError> {
//! use futures::StreamExt;
//! use shardwise_gateway::client::{DistributeOptions, distribute};
//!
//! let dataset = r#"{"source": {"range": {"stop": 10}}}"#.parse().unwrap();
//! let mut stream = distribute("http://127.0.0.1:5050", dataset, DistributeOptions::default());
//! while let Some(element) = stream.next().await {
//!     println!("{}", element?);
//! }
//! # Ok(()) }
//! ```
//!
//! **Several dispatchers.** The dispatcher argument is one URL or the replicas of one
//! dispatcher ([`Dispatchers`]: a comma-separated `&str` as `shardwise worker --dispatcher`
//! takes, or an array, slice or `Vec` of URLs):
//!
//! ```no_run
//! # async fn demo() -> Result<(), shardwise_gateway::client::ClientError> {
//! # use futures::TryStreamExt;
//! # use shardwise_gateway::client::{DistributeOptions, distribute};
//! # let dataset = r#"{"source": {"range": {"stop": 10}}}"#.parse().unwrap();
//! let replicas = ["http://10.0.0.1:5050", "http://10.0.0.2:5050", "http://10.0.0.3:5050"];
//! let all: Vec<serde_json::Value> =
//!     distribute(replicas, dataset, DistributeOptions::default()).try_collect().await?;
//! # Ok(()) }
//! ```
//!
//! Every dispatcher call goes to the replica that answered last; on a transport failure, an
//! `UNAVAILABLE` answer or a follower's redirect it moves on to the next, following a redirect
//! only to a URL of the list (the token never goes to another address): see
//! [`crate::http::client::Failover`]. Reads from workers are unchanged.
//!
//! What it does, in TensorFlow's terms: registers the dataset (its id is a fingerprint of
//! the definition unless [`DistributeOptions::dataset_id`] is given, so clients that share a
//! job by name register the same dataset), gets or creates the job and the iteration
//! (repetition [`DistributeOptions::repetition`]), heartbeats every
//! [`DistributeOptions::heartbeat_interval`] in a task of its own, and reads every task the
//! heartbeats list, at most [`DistributeOptions::max_outstanding_requests`] requests at a time,
//! until the dispatcher says `iteration_finished` and every task it read answered end of
//! sequence (when `target_workers` made it skip tasks, the end of the tasks it reads is
//! enough). Tasks on a worker the dispatcher declared lost are skipped. Coordinated reads
//! (`num_consumers`) visit the tasks in order, one element per task per round, one request at
//! a time, and honour the dispatcher's round blocks when tasks join. Dropping the stream
//! stops the reads and releases the client lease (`DELETE /v1/clients/{id}`).
//!
//! Retries: `UNAVAILABLE` answers and transport failures (a refused or
//! reset connection is `UNAVAILABLE` in gRPC terms) are retried with capped exponential
//! backoff for at most [`DistributeOptions::unavailable_timeout`]; a worker's `NOT_FOUND` for a
//! task the dispatcher listed is retried for at most
//! [`DistributeOptions::unknown_task_timeout`]. Everything else ends the stream with a
//! [`ClientError`].
//!
//! **Read positions.** A `distributed_epoch` read of a dataset without transforms (but
//! `shard_hint`) can be saved and resumed: [`ElementStream::position`] says what the caller
//! was handed so far, as a [`ReadPosition`] (plain JSON); a later stream with
//! [`DistributeOptions::resume_from`] set to it, on a job over the same dataset with any
//! number of workers, reads only what the position has not consumed.
//!
//! The stream must be created inside a tokio runtime (it spawns its reader there).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use futures::stream::{FuturesUnordered, StreamExt};
use serde::Deserialize;
use serde_json::Value;
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::wire::{
    ClientHeartbeat, ClientHeartbeatReply, CreateIteration, CreateJob, IterationLease, NamedMode,
    ProcessingMode, RegisterDataset, TaskInfo,
};
use shardwise_core::dispatch::{ClientId, JobId, ShardingPolicy, TargetWorkers, TaskId};
use shardwise_core::position::{OriginRun, PositionTracker, ReadPosition};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use crate::http::client::{Backoff, CallError, DispatcherUrls, Failover, Rest, UrlListError};
use crate::http::elements::{Elements, MAX_ELEMENTS};
use crate::http::{Code, Problem};

/// How [`distribute`] reads.
#[derive(Debug, Clone)]
pub struct DistributeOptions {
    /// How the data is divided between workers (default `parallel_epochs`).
    pub processing_mode: ProcessingMode,
    /// Share the job (and its iterations) with other clients of the same name.
    pub job_name: Option<String>,
    /// Coordinated reads: how many consumers read in lockstep (needs `job_name` and
    /// `consumer_index`).
    pub num_consumers: Option<u64>,
    /// Coordinated reads: this consumer's index.
    pub consumer_index: Option<u64>,
    /// Which workers to read: `AUTO` (skip workers tagged `COLOCATED`), `ANY`, or `LOCAL`
    /// (only the workers in `local_workers`).
    pub target_workers: TargetWorkers,
    /// With `LOCAL`: the addresses of the workers in this process.
    pub local_workers: Vec<String>,
    /// The most element requests in flight at once (default 16).
    pub max_outstanding_requests: usize,
    /// The most elements asked for per request (default 1,024; at most 10,000).
    pub elements_per_request: u32,
    /// Elements per DYNAMIC split of a range or list (default: the dispatcher's, 1,024).
    pub split_size: Option<u64>,
    /// Which iteration of the job (default 0).
    pub repetition: u64,
    /// The dataset id to register under (default: a fingerprint of the definition).
    pub dataset_id: Option<String>,
    /// Bearer token for the dispatcher and the workers (client role).
    pub token: Option<String>,
    /// How often to heartbeat, which is also how often new tasks are noticed (default 1 s,
    /// TensorFlow's task refresh interval).
    pub heartbeat_interval: Duration,
    /// How long a worker may answer `NOT_FOUND` for a task the dispatcher listed (default 60 s).
    pub unknown_task_timeout: Duration,
    /// How long `UNAVAILABLE` answers and transport failures are retried (default 1 h).
    pub unavailable_timeout: Duration,
    /// A PEM file of CA certificates trusted for `https://` dispatchers and workers, besides
    /// the system's roots (default: the system's roots only).
    pub ca_file: Option<std::path::PathBuf>,
    /// Resume a `distributed_epoch` read where [`ElementStream::position`] was taken: the
    /// iteration (of the position's repetition, whatever `repetition` says) hands out only
    /// what the position has not consumed, and this stream's positions go on from it.
    pub resume_from: Option<ReadPosition>,
}

impl Default for DistributeOptions {
    fn default() -> Self {
        DistributeOptions {
            processing_mode: ProcessingMode::Named(NamedMode::ParallelEpochs),
            job_name: None,
            num_consumers: None,
            consumer_index: None,
            target_workers: TargetWorkers::Auto,
            local_workers: Vec::new(),
            max_outstanding_requests: 16,
            elements_per_request: 1024,
            split_size: None,
            repetition: 0,
            dataset_id: None,
            token: None,
            heartbeat_interval: Duration::from_secs(1),
            unknown_task_timeout: Duration::from_secs(60),
            unavailable_timeout: Duration::from_secs(3600),
            ca_file: None,
            resume_from: None,
        }
    }
}

/// Why a [`distribute`] stream ended with an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The options are inconsistent (nothing was sent).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The dispatcher or a worker refused a request with a problem that is not retried.
    #[error("{context}: {} ({}): {}", problem.code, problem.status, problem.detail)]
    Problem {
        /// Which call.
        context: String,
        /// The problem it answered (boxed: it is large and errors are rare).
        problem: Box<Problem>,
    },
    /// Retries of an `UNAVAILABLE` answer or a transport failure ran out.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The dispatcher restarted without its state (a new incarnation): the iteration is gone.
    #[error(
        "the dispatcher restarted without its state (incarnation {was} -> {now}); the \
         iteration was lost: start it again"
    )]
    DispatcherRestarted {
        /// The incarnation the iteration was created in.
        was: String,
        /// The dispatcher's incarnation now.
        now: String,
    },
    /// The TLS handshake with an `https://` dispatcher or worker failed: its certificate is not
    /// trusted (neither the system's roots nor [`DistributeOptions::ca_file`] sign it) or not
    /// for its host, or it does not speak TLS. Not retried.
    #[error("{context}: TLS handshake failed: {detail}")]
    Tls {
        /// Which call.
        context: String,
        /// rustls' reason (e.g. `invalid peer certificate: UnknownIssuer`).
        detail: String,
    },
    /// What was asked cannot be done in the stream's state (e.g. [`ElementStream::position`]
    /// of a read whose positions are not exact).
    #[error("failed precondition: {0}")]
    FailedPrecondition(String),
    /// A 2xx answer that is not what the API documents.
    #[error("{context}: unexpected answer: {detail}")]
    Protocol {
        /// Which call.
        context: String,
        /// What was wrong.
        detail: String,
    },
}

impl ClientError {
    /// The status class: the problem's `code`, `UNAVAILABLE`, `FAILED_PRECONDITION` for a
    /// restarted dispatcher, `INVALID_ARGUMENT` for bad options, `INTERNAL` for bad answers.
    pub fn code(&self) -> Code {
        match self {
            ClientError::InvalidArgument(_) => Code::InvalidArgument,
            ClientError::Problem { problem, .. } => problem.code,
            ClientError::Unavailable(_) | ClientError::Tls { .. } => Code::Unavailable,
            ClientError::DispatcherRestarted { .. } | ClientError::FailedPrecondition(_) => {
                Code::FailedPrecondition
            }
            ClientError::Protocol { .. } => Code::Internal,
        }
    }

    fn of_call(context: impl Into<String>, e: CallError) -> ClientError {
        let context = context.into();
        match e {
            CallError::Problem(problem) => {
                ClientError::Problem { context, problem: Box::new(problem) }
            }
            CallError::Transport(t) => ClientError::Unavailable(format!("{context}: {t}")),
            e @ CallError::Redirect { .. } => ClientError::Unavailable(format!("{context}: {e}")),
            CallError::Decode(detail) => ClientError::Protocol { context, detail },
            CallError::Tls(detail) => ClientError::Tls { context, detail },
        }
    }
}

/// The elements of a [`distribute`] call. Dropping it stops the reads and releases the
/// client lease.
#[derive(Debug)]
pub struct ElementStream {
    rx: mpsc::Receiver<Result<Batch, ClientError>>,
    pending: VecDeque<Value>,
    done: bool,
    positions: Positions,
}

/// Elements of one read, with their origins when the worker gave them.
#[derive(Debug)]
struct Batch {
    elements: Vec<Value>,
    origin: Option<Vec<OriginRun>>,
}

/// The stream's read position: the origins of the elements handed to the caller, folded.
///
/// The fold is lazy, so handing out an element costs nothing here: a batch's runs are folded
/// when the next batch arrives (every element of the previous one was handed out by then), and
/// [`Positions::position`] folds the part of the current batch handed out so far.
#[derive(Debug)]
struct Positions {
    dataset_id: String,
    repetition: u64,
    /// Why this read has no position (`None`: it has one so far).
    unavailable: Option<String>,
    /// Every batch before the current one, folded.
    tracker: PositionTracker,
    /// The current batch's runs (`None`: it came without origins that cover it).
    runs: Option<Vec<OriginRun>>,
    /// The current batch's elements.
    batch_len: usize,
}

impl Positions {
    fn new(dataset: &DatasetDef, options: &DistributeOptions) -> Positions {
        let policy = options.processing_mode.policy();
        let unavailable = if policy != ShardingPolicy::Dynamic {
            Some(format!(
                "read positions need a distributed_epoch (DYNAMIC) read; this one shards {}",
                policy.as_str()
            ))
        } else if options.num_consumers.is_some() {
            Some("coordinated reads (num_consumers) have no read positions".to_owned())
        } else {
            dataset.check_resumable().err()
        };
        let (repetition, tracker) = match &options.resume_from {
            Some(p) => (p.repetition, PositionTracker::resuming(p)),
            None => (options.repetition, PositionTracker::new()),
        };
        Positions {
            dataset_id: options.dataset_id.clone().unwrap_or_else(|| fingerprint(dataset)),
            repetition,
            unavailable,
            tracker,
            runs: None,
            batch_len: 0,
        }
    }

    /// A new batch (every element of the previous one was handed out): the previous one is
    /// folded.
    fn arrived(&mut self, batch: &Batch) {
        if self.unavailable.is_none() {
            self.unavailable = fold(&mut self.tracker, self.runs.as_deref(), self.batch_len);
        }
        self.batch_len = batch.elements.len();
        self.runs = batch.origin.clone().filter(|runs| {
            let covered = runs.iter().try_fold(0u64, |n, r| n.checked_add(r.count));
            covered == Some(self.batch_len as u64) && runs.iter().all(|r| r.count > 0)
        });
    }

    /// The position, `pending` elements of the current batch not handed out yet.
    fn position(&self, pending: usize) -> Result<ReadPosition, ClientError> {
        let mut tracker = self.tracker.clone();
        let handed = self.batch_len.saturating_sub(pending);
        let why =
            self.unavailable.clone().or_else(|| fold(&mut tracker, self.runs.as_deref(), handed));
        if let Some(why) = why {
            return Err(ClientError::FailedPrecondition(format!(
                "this stream has no read position: {why}"
            )));
        }
        Ok(tracker.position(&self.dataset_id, self.repetition))
    }
}

/// Folds the first `handed` elements that `runs` cover into `tracker`; why the read has no
/// position when elements were handed out without origins.
fn fold(
    tracker: &mut PositionTracker,
    runs: Option<&[OriginRun]>,
    handed: usize,
) -> Option<String> {
    let Some(runs) = runs else {
        return (handed > 0).then(|| {
            "an element without origin was handed out (a worker that does not tag elements \
             with their origin, or origins that do not cover its elements)"
                .to_owned()
        });
    };
    let mut left = handed as u64;
    for run in runs {
        if left == 0 {
            break;
        }
        let taken = left.min(run.count);
        tracker.consumed(run, taken);
        left -= taken;
    }
    None
}

impl ElementStream {
    /// Where the caller is in the read: every element this stream handed out (and, when it
    /// resumed, everything its [`DistributeOptions::resume_from`] covered), not those still
    /// buffered in the client. Save it with a model checkpoint; resume with
    /// [`DistributeOptions::resume_from`].
    ///
    /// `FAILED_PRECONDITION` ([`ClientError::FailedPrecondition`]) when the read has no exact
    /// positions: it is not a `distributed_epoch` read, it is a coordinated read, the dataset
    /// has a transform that buffers or counts across splits (the error says which), or an
    /// element came without origin.
    pub fn position(&self) -> Result<ReadPosition, ClientError> {
        self.positions.position(self.pending.len())
    }
}

impl Stream for ElementStream {
    type Item = Result<Value, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(v) = self.pending.pop_front() {
                return Poll::Ready(Some(Ok(v)));
            }
            if self.done {
                return Poll::Ready(None);
            }
            match self.rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(batch))) => {
                    self.positions.arrived(&batch);
                    self.pending = batch.elements.into();
                }
                Poll::Ready(Some(Err(e))) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    self.done = true;
                    return Poll::Ready(None);
                }
            }
        }
    }
}

/// What [`distribute`] takes as its dispatcher: one URL (`http://host:port` or `host:port`), or
/// the URLs of its replicas. A `&str` or `String` is a comma-separated list (as `shardwise
/// worker --dispatcher` takes); an array, slice or `Vec` holds one URL per item.
pub trait Dispatchers {
    /// The validated list.
    fn into_urls(self) -> Result<DispatcherUrls, UrlListError>;
}

impl Dispatchers for DispatcherUrls {
    fn into_urls(self) -> Result<DispatcherUrls, UrlListError> {
        Ok(self)
    }
}

impl Dispatchers for &str {
    fn into_urls(self) -> Result<DispatcherUrls, UrlListError> {
        DispatcherUrls::parse(self)
    }
}

impl Dispatchers for String {
    fn into_urls(self) -> Result<DispatcherUrls, UrlListError> {
        DispatcherUrls::parse(&self)
    }
}

impl Dispatchers for &String {
    fn into_urls(self) -> Result<DispatcherUrls, UrlListError> {
        DispatcherUrls::parse(self)
    }
}

impl<S: AsRef<str>, const N: usize> Dispatchers for [S; N] {
    fn into_urls(self) -> Result<DispatcherUrls, UrlListError> {
        DispatcherUrls::new(self)
    }
}

impl<S: AsRef<str>> Dispatchers for &[S] {
    fn into_urls(self) -> Result<DispatcherUrls, UrlListError> {
        DispatcherUrls::new(self)
    }
}

impl<S: AsRef<str>> Dispatchers for Vec<S> {
    fn into_urls(self) -> Result<DispatcherUrls, UrlListError> {
        DispatcherUrls::new(self)
    }
}

impl<S: AsRef<str>> Dispatchers for &Vec<S> {
    fn into_urls(self) -> Result<DispatcherUrls, UrlListError> {
        DispatcherUrls::new(self)
    }
}

/// Reads `dataset` through the dispatcher at `dispatchers` (`http://host:port`, or several
/// replicas: see [`Dispatchers`] and the module docs). Errors, including bad options and bad
/// URLs, arrive as the stream's last item.
pub fn distribute(
    dispatchers: impl Dispatchers,
    dataset: DatasetDef,
    options: DistributeOptions,
) -> ElementStream {
    let (tx, rx) = mpsc::channel(options.max_outstanding_requests.clamp(2, 1024));
    let urls = dispatchers.into_urls();
    let positions = Positions::new(&dataset, &options);
    tokio::spawn(async move {
        let mut reader = match Reader::setup(urls, dataset, options).await {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        let result = if reader.options.num_consumers.is_some() {
            reader.run_coordinated(&tx).await
        } else {
            reader.run(&tx).await
        };
        reader.release().await;
        if let Err(e) = result {
            let _ = tx.send(Err(e)).await;
        }
    });
    ElementStream { rx, pending: VecDeque::new(), done: false, positions }
}

/// A stable id for a dataset definition: FNV-1a over its canonical JSON, twice (128 bits).
pub fn fingerprint(dataset: &DatasetDef) -> String {
    let text = dataset.to_json().to_string();
    let fnv = |basis: u64| {
        text.bytes().fold(basis, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
    };
    format!("fp-{:016x}{:016x}", fnv(0xcbf2_9ce4_8422_2325), fnv(0x6c62_272e_07bb_0142))
}

#[derive(Debug, Deserialize)]
struct DatasetIdReply {
    dataset_id: String,
}

#[derive(Debug, Deserialize)]
struct JobIdReply {
    job_id: JobId,
}

#[derive(Debug, Deserialize)]
struct VersionReply {
    version: u32,
}

/// What the heartbeat task publishes.
#[derive(Debug, Clone, Default)]
struct View {
    reply: Option<ClientHeartbeatReply>,
    error: Option<ClientError>,
}

/// Coordinated reads: the last round this consumer started and the block it agreed to.
#[derive(Debug, Default)]
struct RoundState {
    current: AtomicU64,
    limit: Mutex<Option<u64>>,
}

impl RoundState {
    fn limit(&self) -> Option<u64> {
        *self.limit.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    /// TensorFlow's `TryBlockRound`: a block at `R` is taken when this consumer has not
    /// reached `R` yet (otherwise the dispatcher will move the target); no block lifts it.
    fn apply_block(&self, block_round: Option<u64>) {
        let mut limit = self.limit.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match block_round {
            Some(r) if self.current.load(Ordering::SeqCst) < r => *limit = Some(r),
            Some(_) => {}
            None => *limit = None,
        }
    }
}

async fn retrying<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CallError>>,
{
    let start = Instant::now();
    let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_retryable() => {
                if start.elapsed() >= timeout {
                    return Err(ClientError::Unavailable(format!(
                        "{what}: {e} (retried for {:?})",
                        start.elapsed()
                    )));
                }
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(e) => return Err(ClientError::of_call(what, e)),
        }
    }
}

fn validate(options: &DistributeOptions) -> Result<(), ClientError> {
    let invalid = |m: &str| Err(ClientError::InvalidArgument(m.to_owned()));
    match (options.num_consumers, options.consumer_index) {
        (Some(0), _) => return invalid("num_consumers must be at least 1"),
        (Some(n), Some(i)) if i >= n => {
            return Err(ClientError::InvalidArgument(format!(
                "consumer_index {i} is out of range for {n} consumers"
            )));
        }
        (Some(_), None) => return invalid("coordinated reads (num_consumers) need consumer_index"),
        (None, Some(_)) => return invalid("consumer_index needs num_consumers"),
        _ => {}
    }
    if options.num_consumers.is_some() && options.job_name.is_none() {
        return invalid("coordinated reads (num_consumers) require a job_name");
    }
    if options.max_outstanding_requests == 0 {
        return invalid("max_outstanding_requests must be positive");
    }
    if options.elements_per_request == 0 || options.elements_per_request > MAX_ELEMENTS {
        return Err(ClientError::InvalidArgument(format!(
            "elements_per_request must be in 1..={}",
            MAX_ELEMENTS
        )));
    }
    if options.heartbeat_interval.is_zero() {
        return invalid("heartbeat_interval must be positive");
    }
    if options.resume_from.is_some() && options.processing_mode.policy() != ShardingPolicy::Dynamic
    {
        return invalid("resume_from needs processing_mode distributed_epoch (DYNAMIC)");
    }
    if options.target_workers == TargetWorkers::Local {
        if options.num_consumers.is_some() {
            return invalid(
                "Coordinated reads require non-local workers, but `target_workers` is \"LOCAL\".",
            );
        }
        if options.local_workers.is_empty() {
            return invalid(
                "Local reads require local tf.data workers, but no local worker is found. You \
                 need to run local tf.data service workers in your training workers.",
            );
        }
    }
    Ok(())
}

/// One task as this client reads it.
#[derive(Debug)]
struct TaskRead {
    info: TaskInfo,
    rest: Rest,
    done: bool,
    in_flight: bool,
    retry_at: Option<Instant>,
    backoff: Backoff,
    unknown_since: Option<Instant>,
    unavailable_since: Option<Instant>,
}

/// The shortest gap between heartbeats the reader asks for at the end of an epoch.
const NUDGE_GAP: Duration = Duration::from_millis(20);

type Fetch = Pin<Box<dyn Future<Output = (TaskId, Result<Elements, CallError>)> + Send>>;

struct Reader {
    options: DistributeOptions,
    dispatcher: Failover,
    client_id: ClientId,
    view: watch::Receiver<View>,
    heartbeat: tokio::task::JoinHandle<()>,
    heartbeat_now: Arc<Notify>,
    rounds: Arc<RoundState>,
}

impl Reader {
    async fn setup(
        urls: Result<DispatcherUrls, UrlListError>,
        dataset: DatasetDef,
        options: DistributeOptions,
    ) -> Result<Reader, ClientError> {
        validate(&options)?;
        let urls = urls.map_err(|e| ClientError::InvalidArgument(format!("dispatcher: {e}")))?;
        let tls = crate::http::tls::client_config(options.ca_file.as_deref())
            .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        let http = crate::http::client::http_client_with(Duration::from_secs(60), tls);
        let rest = Failover::new(http, urls, options.token.clone());
        let timeout = options.unavailable_timeout;
        let version: VersionReply =
            retrying("GET /v1/version", timeout, || rest.get("/v1/version", &[])).await?;
        let ours = shardwise_core::dispatch::wire::PROTOCOL_VERSION;
        if version.version != ours {
            return Err(ClientError::Problem {
                context: "GET /v1/version".into(),
                problem: Box::new(Problem::new(
                    Code::FailedPrecondition,
                    format!(
                        "Version mismatch with the dispatcher: it speaks protocol version {}, \
                         this client {ours}",
                        version.version
                    ),
                )),
            });
        }
        let dataset_id = options.dataset_id.clone().unwrap_or_else(|| fingerprint(&dataset));
        let register =
            RegisterDataset { dataset, dataset_id: Some(dataset_id.clone()), metadata: None };
        let ds: DatasetIdReply =
            retrying("POST /v1/datasets", timeout, || rest.post("/v1/datasets", &register)).await?;
        let job = CreateJob {
            dataset_id: ds.dataset_id,
            processing_mode: options.processing_mode,
            job_name: options.job_name.clone(),
            num_consumers: options.num_consumers,
            target_workers: options.target_workers,
            cross_trainer_cache: false,
            split_size: options.split_size,
        };
        let job: JobIdReply =
            retrying("POST /v1/jobs", timeout, || rest.post("/v1/jobs", &job)).await?;
        let iteration = CreateIteration {
            repetition: options.resume_from.as_ref().map_or(options.repetition, |p| p.repetition),
            consumer_index: options.consumer_index,
            resume_from: options.resume_from.clone(),
        };
        let path = format!("/v1/jobs/{}/iterations", job.job_id);
        let lease: IterationLease =
            retrying(&format!("POST {path}"), timeout, || rest.post(&path, &iteration)).await?;
        let (view_tx, view) = watch::channel(View::default());
        let heartbeat_now = Arc::new(Notify::new());
        let rounds = Arc::new(RoundState::default());
        let heartbeat = tokio::spawn(heartbeat_task(
            rest.clone(),
            lease.client_id,
            lease.incarnation,
            options.clone(),
            view_tx,
            Arc::clone(&heartbeat_now),
            Arc::clone(&rounds),
        ));
        Ok(Reader {
            options,
            dispatcher: rest,
            client_id: lease.client_id,
            view,
            heartbeat,
            heartbeat_now,
            rounds,
        })
    }

    /// Releases the lease (best effort: twice at most) and stops heartbeating.
    async fn release(&mut self) {
        self.heartbeat.abort();
        let path = format!("/v1/clients/{}", self.client_id);
        for _ in 0..2 {
            match self.dispatcher.delete::<Value>(&path).await {
                Ok(_) => return,
                Err(e) if e.is_retryable() => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "releasing the client failed");
                    return;
                }
            }
        }
    }

    fn should_read(&self, info: &TaskInfo) -> bool {
        match self.options.target_workers {
            TargetWorkers::Any => true,
            TargetWorkers::Local => self.options.local_workers.contains(&info.worker_address),
            TargetWorkers::Auto => {
                self.options.num_consumers.is_some()
                    || !info.worker_tags.iter().any(|t| t.eq_ignore_ascii_case("COLOCATED"))
            }
        }
    }

    /// A worker's element server: over `https://` when the dispatcher is (a TLS cluster is TLS
    /// throughout: workers started with --tls-cert), else plain HTTP.
    fn worker_rest(&self, address: &str) -> Rest {
        let scheme =
            if self.dispatcher.current().starts_with("https://") { "https" } else { "http" };
        self.dispatcher.with_base(format!("{scheme}://{address}"))
    }

    /// First-come-first-served reads of every task until the epoch is over.
    async fn run(
        &mut self,
        tx: &mpsc::Sender<Result<Batch, ClientError>>,
    ) -> Result<(), ClientError> {
        let mut tasks: Vec<TaskRead> = Vec::new();
        let mut index: HashMap<TaskId, usize> = HashMap::new();
        let mut skipped_any = false;
        let mut finished = false;
        let mut inflight: FuturesUnordered<Fetch> = FuturesUnordered::new();
        let mut next = 0usize;
        let mut last_nudge: Option<Instant> = None;
        let max = self.options.elements_per_request.to_string();
        loop {
            let view = self.view.borrow_and_update().clone();
            if let Some(e) = view.error {
                return Err(e);
            }
            let Some(reply) = view.reply else {
                // No heartbeat answered yet.
                tokio::select! {
                    r = self.view.changed() => if r.is_err() {
                        return Err(ClientError::Unavailable("the heartbeat task stopped".into()));
                    },
                    () = tx.closed() => return Ok(()),
                }
                continue;
            };
            finished |= reply.iteration_finished;
            for info in reply.tasks {
                match index.get(&info.task_id) {
                    Some(&i) => {
                        if info.worker_lost {
                            tasks[i].done = true;
                        }
                        tasks[i].info = info;
                    }
                    None if self.should_read(&info) => {
                        index.insert(info.task_id, tasks.len());
                        tasks.push(TaskRead {
                            rest: self.worker_rest(&info.worker_address),
                            done: info.worker_lost,
                            info,
                            in_flight: false,
                            retry_at: None,
                            backoff: Backoff::new(
                                Duration::from_millis(5),
                                Duration::from_millis(500),
                            ),
                            unknown_since: None,
                            unavailable_since: None,
                        });
                    }
                    None => skipped_any = true,
                }
            }
            let mut wake_at = Instant::now() + Duration::from_secs(3600);
            if !tasks.is_empty() && tasks.iter().all(|t| t.done) && inflight.is_empty() {
                if finished || skipped_any {
                    return Ok(());
                }
                // Every task read is over, so the dispatcher acknowledged their completion:
                // ask it now (at most every 20 ms) whether the iteration finished.
                let due = last_nudge.map_or(Instant::now(), |t| t + NUDGE_GAP);
                if Instant::now() >= due {
                    last_nudge = Some(Instant::now());
                    self.heartbeat_now.notify_one();
                } else {
                    wake_at = due;
                }
            } else if tasks.is_empty() && (finished || skipped_any) {
                // An iteration without tasks, or every task skipped by `target_workers`.
                return Ok(());
            }
            // Launch reads, round robin over the tasks that are ready.
            let now = Instant::now();
            let n = tasks.len();
            let mut scanned = 0;
            while inflight.len() < self.options.max_outstanding_requests && scanned < n {
                let i = (next + scanned) % n;
                scanned += 1;
                let t = &mut tasks[i];
                if t.done || t.in_flight || t.retry_at.is_some_and(|at| at > now) {
                    continue;
                }
                t.in_flight = true;
                t.retry_at = None;
                let rest = t.rest.clone();
                let id = t.info.task_id;
                let max = max.clone();
                inflight.push(Box::pin(async move {
                    let path = format!("/v1/tasks/{id}/elements");
                    (id, rest.get(&path, &[("max", max)]).await)
                }));
                next = (i + 1) % n;
            }
            let next_retry = tasks
                .iter()
                .filter(|t| !t.done && !t.in_flight)
                .filter_map(|t| t.retry_at)
                .fold(wake_at, Instant::min);
            tokio::select! {
                Some((id, result)) = inflight.next(), if !inflight.is_empty() => {
                    let Some(&i) = index.get(&id) else { continue };
                    let t = &mut tasks[i];
                    t.in_flight = false;
                    match result {
                        Ok(r) => {
                            t.backoff.reset();
                            t.unknown_since = None;
                            t.unavailable_since = None;
                            if r.end_of_sequence {
                                t.done = true;
                            }
                            let batch = Batch { elements: r.elements, origin: r.origin };
                            if !batch.elements.is_empty() && tx.send(Ok(batch)).await.is_err() {
                                return Ok(()); // the stream was dropped
                            }
                        }
                        Err(e) => self.retry_or_fail(t, e)?,
                    }
                }
                r = self.view.changed() => if r.is_err() {
                    return Err(ClientError::Unavailable("the heartbeat task stopped".into()));
                },
                () = tokio::time::sleep_until(next_retry) => {}
                () = tx.closed() => return Ok(()),
            }
        }
    }

    /// Schedules a retry of a failed read, or says why it is over.
    fn retry_or_fail(&self, t: &mut TaskRead, e: CallError) -> Result<(), ClientError> {
        let now = Instant::now();
        let context =
            || format!("GET /v1/tasks/{}/elements at {}", t.info.task_id, t.info.worker_address);
        if t.done {
            return Ok(()); // its worker was declared lost meanwhile
        }
        if matches!(&e, CallError::Problem(p) if p.code == Code::NotFound) {
            let since = *t.unknown_since.get_or_insert(now);
            if now.duration_since(since) >= self.options.unknown_task_timeout {
                return Err(ClientError::of_call(context(), e));
            }
        } else if e.is_retryable() {
            let since = *t.unavailable_since.get_or_insert(now);
            if now.duration_since(since) >= self.options.unavailable_timeout {
                return Err(ClientError::Unavailable(format!("{}: {e}", context())));
            }
        } else {
            return Err(ClientError::of_call(context(), e));
        }
        t.retry_at = Some(now + t.backoff.next_delay());
        Ok(())
    }

    /// Coordinated reads: round by round, one element per task in task order.
    async fn run_coordinated(
        &mut self,
        tx: &mpsc::Sender<Result<Batch, ClientError>>,
    ) -> Result<(), ClientError> {
        let consumer = self.options.consumer_index.unwrap_or(0).to_string();
        // The next round to read; `rounds.current` is the last round started, which is what
        // the heartbeats report (a consumer waiting at a block at R reports R - 1).
        let mut round: u64 = 0;
        let mut nudged_for: Option<u64> = None;
        loop {
            let view = self.view.borrow_and_update().clone();
            if let Some(e) = view.error {
                return Err(e);
            }
            let blocked = self.rounds.limit().is_some_and(|limit| round >= limit);
            let tasks: Vec<TaskInfo> = view
                .reply
                .map(|r| r.tasks)
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t.starting_round <= round && !t.worker_lost)
                .collect();
            if blocked || tasks.is_empty() {
                // Tell the dispatcher at once that this consumer reached the block (once).
                let limit = self.rounds.limit();
                if blocked && nudged_for != limit {
                    nudged_for = limit;
                    self.heartbeat_now.notify_one();
                }
                tokio::select! {
                    r = self.view.changed() => if r.is_err() {
                        return Err(ClientError::Unavailable("the heartbeat task stopped".into()));
                    },
                    () = tx.closed() => return Ok(()),
                }
                continue;
            }
            self.rounds.current.store(round, Ordering::SeqCst);
            for info in tasks {
                let rest = self.worker_rest(&info.worker_address);
                let path = format!("/v1/tasks/{}/elements", info.task_id);
                let query = [("consumer_index", consumer.clone()), ("round", round.to_string())];
                let mut t = TaskRead {
                    rest: rest.clone(),
                    info,
                    done: false,
                    in_flight: false,
                    retry_at: None,
                    backoff: Backoff::new(Duration::from_millis(5), Duration::from_millis(500)),
                    unknown_since: None,
                    unavailable_since: None,
                };
                loop {
                    let result = tokio::select! {
                        r = rest.get::<Elements>(&path, &query) => r,
                        () = tx.closed() => return Ok(()),
                    };
                    match result {
                        Ok(r) if !r.elements.is_empty() => {
                            let batch = Batch { elements: r.elements, origin: None };
                            if tx.send(Ok(batch)).await.is_err() {
                                return Ok(());
                            }
                            break;
                        }
                        Ok(r) if r.end_of_sequence => break,
                        Ok(_) => {}
                        Err(e) => {
                            let lost = self.view.borrow().reply.as_ref().is_some_and(|r| {
                                r.tasks.iter().any(|x| x.task_id == t.info.task_id && x.worker_lost)
                            });
                            if lost {
                                break;
                            }
                            self.retry_or_fail(&mut t, e)?;
                            if let Some(at) = t.retry_at.take() {
                                tokio::time::sleep_until(at).await;
                            }
                        }
                    }
                }
            }
            round += 1;
        }
    }
}

async fn heartbeat_task(
    rest: Failover,
    client_id: ClientId,
    incarnation: String,
    options: DistributeOptions,
    view: watch::Sender<View>,
    now: Arc<Notify>,
    rounds: Arc<RoundState>,
) {
    let path = format!("/v1/clients/{client_id}/heartbeat");
    let coordinated = options.num_consumers.is_some();
    let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
    let mut failing_since: Option<Instant> = None;
    let publish_error = |e: ClientError| {
        view.send_modify(|v| v.error = Some(e));
    };
    // The last task list and its version: the dispatcher leaves an unchanged list out.
    let mut known: Option<(u64, Vec<TaskInfo>)> = None;
    loop {
        let mut req = if coordinated {
            ClientHeartbeat {
                current_round: Some(rounds.current.load(Ordering::SeqCst)),
                blocked_round: rounds.limit(),
                ..ClientHeartbeat::default()
            }
        } else {
            ClientHeartbeat::default()
        };
        req.known_tasks_version = known.as_ref().map(|(v, _)| *v);
        let wait = match rest.post::<_, ClientHeartbeatReply>(&path, &req).await {
            Ok(mut reply) => {
                match &known {
                    Some((v, tasks)) if reply.tasks_unchanged && *v == reply.tasks_version => {
                        reply.tasks.clone_from(tasks);
                    }
                    _ => known = Some((reply.tasks_version, reply.tasks.clone())),
                }
                failing_since = None;
                backoff.reset();
                if reply.incarnation != incarnation {
                    return publish_error(ClientError::DispatcherRestarted {
                        was: incarnation,
                        now: reply.incarnation,
                    });
                }
                if coordinated {
                    rounds.apply_block(reply.block_round);
                }
                view.send_modify(|v| v.reply = Some(reply));
                options.heartbeat_interval
            }
            Err(e) if e.is_retryable() => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= options.unavailable_timeout {
                    return publish_error(ClientError::Unavailable(format!(
                        "POST {path}: {e} (retried for {:?})",
                        since.elapsed()
                    )));
                }
                backoff.next_delay()
            }
            Err(e) => return publish_error(ClientError::of_call(format!("POST {path}"), e)),
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = now.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_stable_and_distinct() {
        let a: DatasetDef = r#"{"source": {"range": {"stop": 10}}}"#.parse().unwrap();
        let b: DatasetDef = r#"{"source": {"range": {"stop": 10, "step": 1}}}"#.parse().unwrap();
        let c: DatasetDef = r#"{"source": {"range": {"stop": 11}}}"#.parse().unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b), "canonical form");
        assert_ne!(fingerprint(&a), fingerprint(&c));
        assert_eq!(fingerprint(&a).len(), 35);
    }

    #[test]
    fn options_are_validated() {
        let ok = DistributeOptions::default();
        assert!(validate(&ok).is_ok());
        let bad = [
            DistributeOptions { num_consumers: Some(2), ..ok.clone() },
            DistributeOptions {
                num_consumers: Some(2),
                consumer_index: Some(2),
                job_name: Some("j".into()),
                ..ok.clone()
            },
            DistributeOptions { num_consumers: Some(2), consumer_index: Some(0), ..ok.clone() },
            DistributeOptions { consumer_index: Some(0), ..ok.clone() },
            DistributeOptions { max_outstanding_requests: 0, ..ok.clone() },
            DistributeOptions { elements_per_request: 0, ..ok.clone() },
            DistributeOptions { target_workers: TargetWorkers::Local, ..ok.clone() },
        ];
        for o in bad {
            assert_eq!(validate(&o).unwrap_err().code(), "INVALID_ARGUMENT", "{o:?}");
        }
    }

    #[test]
    fn positions_count_only_elements_handed_out() {
        use shardwise_core::position::{PartialSplit, SourceRange};
        let dataset: DatasetDef = r#"{"source": {"range": {"stop": 100}}}"#.parse().unwrap();
        let dynamic = DistributeOptions {
            processing_mode: ProcessingMode::Named(NamedMode::DistributedEpoch),
            dataset_id: Some("ds".into()),
            ..DistributeOptions::default()
        };
        let r = |start, stop| SourceRange { start, stop };
        let run = |start, stop, offset, count, end| OriginRun {
            split: r(start, stop),
            offset,
            count,
            end,
        };
        let mut p = Positions::new(&dataset, &dynamic);
        assert_eq!(
            p.position(0).unwrap(),
            ReadPosition { dataset_id: "ds".into(), ..ReadPosition::default() }
        );
        let batch = Batch {
            elements: (0..5).map(Value::from).collect(),
            origin: Some(vec![run(0, 2, 0, 2, true), run(10, 20, 4, 3, false)]),
        };
        p.arrived(&batch);
        // Nothing handed out yet: the batch is buffered, not consumed.
        assert_eq!(p.position(5).unwrap().done, []);
        // Three of five handed out (two pending).
        let got = p.position(2).unwrap();
        assert_eq!(got.done, [r(0, 2)]);
        assert_eq!(got.partial, [PartialSplit { split: r(10, 20), consumed: 5 }]);
        assert_eq!(
            p.position(0).unwrap().partial,
            [PartialSplit { split: r(10, 20), consumed: 7 }]
        );
        // The next batch folds the whole previous one.
        p.arrived(&Batch {
            elements: vec![Value::from(7)],
            origin: Some(vec![run(10, 20, 7, 1, false)]),
        });
        let got = p.position(1).unwrap();
        assert_eq!(
            (got.done.as_slice(), got.partial.as_slice()),
            ([r(0, 2)].as_slice(), [PartialSplit { split: r(10, 20), consumed: 7 }].as_slice())
        );
        assert_eq!(
            p.position(0).unwrap().partial,
            [PartialSplit { split: r(10, 20), consumed: 8 }]
        );
        // Origins that do not cover their elements count as none, once an element is handed
        // out, and for good.
        p.arrived(&Batch {
            elements: vec![Value::from(1)],
            origin: Some(vec![run(2, 4, 0, 2, true)]),
        });
        assert!(p.position(1).is_ok(), "not handed out yet");
        let err = p.position(0).unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition);
        assert!(err.to_string().contains("without origin"), "{err}");
        p.arrived(&Batch {
            elements: vec![Value::from(2)],
            origin: Some(vec![run(4, 6, 0, 1, false)]),
        });
        assert!(p.position(1).unwrap_err().to_string().contains("without origin"));
        // Resuming goes on from the position; its repetition is the position's.
        let from = ReadPosition {
            dataset_id: "ds".into(),
            repetition: 3,
            done: vec![r(0, 50)],
            partial: vec![],
        };
        let p = Positions::new(
            &dataset,
            &DistributeOptions { resume_from: Some(from.clone()), ..dynamic.clone() },
        );
        assert_eq!(p.position(0).unwrap(), from);
        // Reads that have no exact positions say why at once.
        let shuffled: DatasetDef =
            r#"{"source": {"range": {"stop": 9}}, "transforms": [{"shuffle": {"buffer": 2, "seed": 1}}]}"#
                .parse()
                .unwrap();
        let err = Positions::new(&shuffled, &dynamic).position(0).unwrap_err();
        assert!(err.to_string().contains("`shuffle` buffers elements across splits"), "{err}");
        let err = Positions::new(&dataset, &DistributeOptions::default()).position(0).unwrap_err();
        assert!(err.to_string().contains("distributed_epoch"), "{err}");
        assert_eq!(
            validate(&DistributeOptions {
                resume_from: Some(from),
                ..DistributeOptions::default()
            })
            .unwrap_err()
            .code(),
            Code::InvalidArgument
        );
    }

    #[test]
    fn blocks_follow_tensorflow() {
        let r = RoundState::default();
        r.current.store(3, Ordering::SeqCst);
        r.apply_block(Some(5));
        assert_eq!(r.limit(), Some(5));
        r.apply_block(Some(2)); // already past: the dispatcher will move the target
        assert_eq!(r.limit(), Some(5));
        r.apply_block(None);
        assert_eq!(r.limit(), None);
    }
}
