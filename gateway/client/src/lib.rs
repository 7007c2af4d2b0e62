//! The Rust client: [`distribute`] reads a dataset through a dispatcher and its workers as a
//! [`Stream`] of JSON elements, and [`distribute_batches`] reads a columnar dataset's rows as
//! Arrow record batches.
//!
//! ```no_run
//! # async fn demo() -> Result<(), shardwise_client::ClientError> {
//! use futures::StreamExt;
//! use shardwise_client::{DistributeOptions, distribute};
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
//! # async fn demo() -> Result<(), shardwise_client::ClientError> {
//! # use futures::TryStreamExt;
//! # use shardwise_client::{DistributeOptions, distribute};
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
//! [`rest::Failover`]. Reads from workers are unchanged.
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
//! **Record batches.** The rows of a columnar dataset (`files` of the `parquet`, `arrow` or
//! `tfrecord` formats) travel better as columns: [`distribute_batches`] is the same read,
//! whose element reads ask workers for Arrow IPC streams ([`arrow_stream`]), optionally
//! compressed ([`DistributeOptions::arrow_compression`]), and whose stream hands out
//! [`RecordBatch`](arrow_array::RecordBatch)es. `elements_per_request` then counts rows, and
//! [`RecordBatchStream::position`] counts the rows of the batches handed out (a position
//! resumes either stream):
//!
//! ```no_run
//! # async fn demo() -> Result<(), shardwise_client::ClientError> {
//! use futures::StreamExt;
//! use shardwise_client::arrow_stream::IpcCompression;
//! use shardwise_client::{DistributeOptions, distribute_batches};
//! use shardwise_core::dispatch::wire::{NamedMode, ProcessingMode};
//!
//! let dataset = r#"{"source": {"files": {"paths": ["/data/train.parquet"],
//!                                         "format": "parquet", "split": "rows"}}}"#;
//! let options = DistributeOptions {
//!     processing_mode: ProcessingMode::Named(NamedMode::DistributedEpoch),
//!     arrow_compression: Some(IpcCompression::Lz4),
//!     ..DistributeOptions::default()
//! };
//! let dispatcher = "http://127.0.0.1:5050";
//! let mut batches = distribute_batches(dispatcher, dataset.parse().unwrap(), options);
//! while let Some(batch) = batches.next().await {
//!     let batch = batch?;
//!     println!("{} rows of {} columns", batch.num_rows(), batch.num_columns());
//!     let checkpoint = batches.position()?; // save it with the model
//! #   let _ = checkpoint;
//! }
//! # Ok(()) }
//! ```
//!
//! An answer that is not an Arrow stream ends the read with [`ClientError::Protocol`];
//! refusals are problems, retried or not as for JSON reads.
//!
//! **How it runs.** The reader's logic (task lists, round robin, rounds and blocks, retries,
//! lost workers, the end of the read) is [`shardwise_core::client::Reader`], a sans-IO state
//! machine; this module drives it on tokio: it makes the calls the machine asks for, feeds
//! their outcomes and the time back, and hands the elements to the stream. Both streams run
//! the same loop; only how an element read is asked for and decoded differs.
//!
//! The stream reads inside a tokio runtime (it spawns its reader there): created outside one,
//! its only item is [`ClientError::NoRuntime`].
//!
//! # What this crate holds, and what it leaves out
//!
//! A training program depends on this crate alone, not on the servers (`shardwise-gateway`):
//! its dependencies are the core, tokio, reqwest and rustls on ring, and no server framework
//! (no axum, tonic, kube, clap or utoipa unless a feature asks for them). Besides the client:
//!
//! * [`rest`]: JSON over HTTP to a dispatcher or a worker, with failover between dispatcher
//!   replicas and the retry rule; the worker's calls to its dispatcher use it too.
//! * [`arrow_stream`]: the elements of columnar datasets as Arrow IPC streams (the media type,
//!   the compression header, the origins in the schema metadata) and their decoding.
//! * [`problem`]: RFC 9457 problem details, the error body of every answer.
//! * [`tls`]: the clients' TLS settings (the system's roots and a CA file) and the PEM file
//!   reading the servers' settings share.
//!
//! Features, both off by default and both on in the gateway: `axum` makes a [`Problem`] an
//! axum answer (`IntoResponse`), `openapi` gives it its OpenAPI schema (`utoipa::ToSchema`).
#![forbid(unsafe_code)]
// Calls return `Result<_, CallError>`; a problem is built at most once per failed call, so its
// size (an RFC 9457 object with optional members) costs nothing that matters.
#![allow(clippy::result_large_err)]

pub mod arrow_stream;
mod batches;
mod driver;
mod fetch;
mod handout;
pub mod problem;
pub mod rest;
pub mod tls;

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use serde_json::Value;
use shardwise_core::client::Positions;
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::wire::{NamedMode, ProcessingMode};
use shardwise_core::dispatch::{ShardingPolicy, TargetWorkers};
use shardwise_core::position::ReadPosition;
use tokio::sync::mpsc;

use shardwise_core::client::wire::MAX_ELEMENTS;

use crate::arrow_stream::IpcCompression;
use crate::fetch::Fetch;
use crate::handout::Handout;
use crate::rest::{CallError, DispatcherUrls, UrlListError};

/// The stream of Arrow record batches.
pub use crate::batches::{RecordBatchStream, distribute_batches};
pub use crate::driver::retrying;
/// Problem details, the error body of every answer.
pub use crate::problem::Problem;
/// The status classes of every error (defined in core, where the state machines use them).
pub use shardwise_core::Code;

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
    /// The most time one call (to the dispatcher or a worker) may take, its whole answer
    /// read (default 60 s); a call past it failed, and is retried as a transport failure.
    pub request_timeout: Duration,
    /// A PEM file of CA certificates trusted for `https://` dispatchers and workers, besides
    /// the system's roots (default: the system's roots only).
    pub ca_file: Option<std::path::PathBuf>,
    /// Resume a `distributed_epoch` read where [`ElementStream::position`] (or
    /// [`RecordBatchStream::position`]) was taken: the iteration (of the position's
    /// repetition, whatever `repetition` says) hands out only what the position has not
    /// consumed, and this stream's positions go on from it.
    pub resume_from: Option<ReadPosition>,
    /// [`distribute_batches`] only: the codec workers compress record batches with (asked for
    /// with the [`arrow_stream::COMPRESSION_HEADER`] header; a worker that does not support
    /// it answers uncompressed). Default `None`: uncompressed, the cheapest on a fast network.
    pub arrow_compression: Option<IpcCompression>,
    /// How many reads (answers of up to `elements_per_request` elements) the stream keeps
    /// ready or under way ahead of its caller: `Some(0)` reads only while the caller waits for
    /// an element and none is ready, so nothing is taken from the workers that the caller does
    /// not ask for. Default `None`: as many as `max_outstanding_requests` in flight, and as
    /// many ready as the stream's buffer holds.
    pub read_ahead: Option<usize>,
    /// The most bytes one read's answer may hold (its body, and what an Arrow answer's
    /// compressed buffers decompress to): a larger answer fails the read, before more of it is
    /// read or decompressed. Default 256 MiB, a worker's default `--max-reply-bytes`; a
    /// worker that may send more needs as much here. (An answer must also hold no more rows
    /// than the read asked for, and only a codec it asked for.)
    pub max_read_bytes: u64,
}

/// The default of [`DistributeOptions::max_read_bytes`]: 256 MiB.
pub const DEFAULT_MAX_READ_BYTES: u64 = 256 << 20;

/// The least [`DistributeOptions::max_read_bytes`] (an answer's schema alone takes some).
pub const MIN_MAX_READ_BYTES: u64 = 4096;

/// The read a stream set up ([`ElementStream::ready`]): the ids it registered and leased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadInfo {
    /// The dataset's id.
    pub dataset_id: String,
    /// The job read.
    pub job_id: shardwise_core::dispatch::JobId,
    /// The iteration read.
    pub iteration_id: shardwise_core::dispatch::IterationId,
    /// The client lease the stream holds until it ends or is dropped.
    pub client_id: shardwise_core::dispatch::ClientId,
    /// The iteration's repetition (the resumed position's, when resuming).
    pub repetition: u64,
}

/// A task as a stream reads it ([`ElementStream::tasks`]).
pub use shardwise_core::client::TaskReadInfo;

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
            request_timeout: Duration::from_secs(60),
            ca_file: None,
            resume_from: None,
            arrow_compression: None,
            read_ahead: None,
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
        }
    }
}

/// Why a [`distribute`] (or [`distribute_batches`]) stream ended with an error.
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
    /// [`distribute`] was called outside a tokio runtime, where it cannot spawn its reader
    /// (nothing was sent).
    #[error(
        "distribute needs a tokio runtime to read in: call it from within one (e.g. in \
         #[tokio::main] or Runtime::block_on)"
    )]
    NoRuntime,
    /// A 2xx answer that is not what the API documents (for [`distribute_batches`], one that
    /// is not a whole Arrow IPC stream with its end-of-sequence header).
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
    /// restarted dispatcher or a missing runtime, `INVALID_ARGUMENT` for bad options, `INTERNAL` for bad answers.
    pub fn code(&self) -> Code {
        match self {
            ClientError::InvalidArgument(_) => Code::InvalidArgument,
            ClientError::Problem { problem, .. } => problem.code,
            ClientError::Unavailable(_) | ClientError::Tls { .. } => Code::Unavailable,
            ClientError::DispatcherRestarted { .. }
            | ClientError::FailedPrecondition(_)
            | ClientError::NoRuntime => Code::FailedPrecondition,
            ClientError::Protocol { .. } => Code::Internal,
        }
    }

    /// A call's failure as the error it ends a stream (or a caller's call) with, `context`
    /// naming the call.
    pub fn of_call(context: impl Into<String>, e: CallError) -> ClientError {
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
pub struct ElementStream(Handout<Vec<Value>>);

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
        self.0.position(0)
    }

    /// [`ElementStream::position`], the last `held_back` elements handed out of the current
    /// read not counted (the caller has not passed them on yet).
    pub fn position_holding_back(&self, held_back: usize) -> Result<ReadPosition, ClientError> {
        self.0.position(held_back)
    }

    /// Waits until the read is set up (the dataset registered, the job and the iteration
    /// leased): their ids, or the error that ended the read before it began (which the
    /// stream then yields no more).
    pub async fn ready(&mut self) -> Result<ReadInfo, ClientError> {
        self.0.ready().await
    }

    /// Asks for at most `count` elements per read from now on (clamped to 1..=10,000).
    pub fn set_elements_per_request(&self, count: u32) {
        self.0.set_elements_per_request(count);
    }

    /// The tasks the stream reads (or read), as of its last answer.
    pub fn tasks(&self) -> Vec<TaskReadInfo> {
        self.0.tasks()
    }

    /// The read is over (its end, its error, or a close), whatever the stream still holds.
    pub fn is_over(&self) -> bool {
        self.0.is_over()
    }

    /// Stops the read and waits until the lease is released (or given up on); what was not
    /// handed out is dropped, [`ElementStream::position`] still answers what was. Dropping the
    /// stream does the same without the wait.
    pub async fn close(&mut self) {
        self.0.close().await;
    }
}

impl Stream for ElementStream {
    type Item = Result<Value, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_next(cx)
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
    let fetch = fetch::Json { max_bytes: options.max_read_bytes };
    ElementStream(start(dispatchers, dataset, options, fetch))
}

/// Starts a read whose element reads `fetch` makes, on the current tokio runtime: the
/// stream's side of it.
fn start<F: Fetch>(
    dispatchers: impl Dispatchers,
    dataset: DatasetDef,
    options: DistributeOptions,
    fetch: F,
) -> Handout<F::Payload>
where
    F::Payload: handout::Items,
{
    let buffer = match options.read_ahead {
        Some(n) => n.clamp(1, 1024),
        None => options.max_outstanding_requests.clamp(2, 1024),
    };
    let (tx, rx) = mpsc::channel(buffer);
    let control = std::sync::Arc::new(handout::Control::default());
    let (info_tx, info_rx) = tokio::sync::oneshot::channel();
    let positions = Positions::new(
        &dataset,
        options.dataset_id.clone().unwrap_or_else(|| fingerprint(&dataset)),
        options.processing_mode.policy(),
        options.num_consumers.is_some(),
        options.repetition,
        options.resume_from.as_ref(),
    );
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            let urls = dispatchers.into_urls();
            let sides = driver::Sides { tx, info: info_tx, control: control.clone() };
            let driver = runtime.spawn(driver::read(urls, dataset, options, fetch, sides));
            Handout::new(rx, positions, info_rx, control, Some(driver))
        }
        Err(_) => {
            // The channel holds at least one item: this one fits.
            drop(tx.try_send(Err(ClientError::NoRuntime)));
            Handout::new(rx, positions, info_rx, control, None)
        }
    }
}

/// A stream's answer to `position()` when it has none.
fn no_position(why: String) -> ClientError {
    ClientError::FailedPrecondition(format!("this stream has no read position: {why}"))
}

/// A stable id for a dataset definition: FNV-1a over its canonical JSON, twice (128 bits).
pub fn fingerprint(dataset: &DatasetDef) -> String {
    let text = dataset.to_json().to_string();
    let fnv = |basis: u64| {
        text.bytes().fold(basis, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
    };
    format!("fp-{:016x}{:016x}", fnv(0xcbf2_9ce4_8422_2325), fnv(0x6c62_272e_07bb_0142))
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
    if options.max_read_bytes < MIN_MAX_READ_BYTES {
        return Err(ClientError::InvalidArgument(format!(
            "max_read_bytes must be at least {MIN_MAX_READ_BYTES}, not {}",
            options.max_read_bytes
        )));
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

#[cfg(test)]
mod tests;
