//! `shardwise worker`: registers with a dispatcher, runs the tasks it is given and serves
//! their elements to clients.
//!
//! * **Registration and heartbeats.** `POST /v1/workers/heartbeat` with the worker's
//!   advertised address, its current tasks, tags, a `worker_uid` new on every process start
//!   and the last incarnation the dispatcher sent, every `--heartbeat-interval` (default 30 s,
//!   TensorFlow's) and at once when a client asks for a task the worker does not know yet
//!   (TensorFlow's dispatcher pushes new tasks to workers; here the worker pulls them when a
//!   client shows up, so a new iteration is served within one round trip, not one interval).
//!   The worker prints its listening line only once the first heartbeat succeeded.
//!   `tasks_to_delete` are stopped before `new_tasks` are started.
//! * **Dispatcher restarts.** A reply with another incarnation than the last one means the
//!   dispatcher lost its state (a restart without a journal): every task is dropped, reads of
//!   them answer `FAILED_PRECONDITION` ("lost"), the heartbeat that noticed it registered the
//!   worker again, and the worker says so on stderr (naming the lost tasks when `GET
//!   /v1/version` reports `fault_tolerant: false`). A fault-tolerant dispatcher keeps its
//!   incarnation across restarts, so its workers carry on.
//! * **Dispatcher replicas.** `--dispatcher` may list several URLs (the replicas of one
//!   journal in etcd): every call goes to the one that answered last and moves on when it
//!   fails, answers `UNAVAILABLE` or redirects (a follower's 307 is followed only to a URL of
//!   the list: the token never goes elsewhere); see [`shardwise_client::rest::Failover`]. The
//!   replicas of one journal share its incarnation, so a failover drops nothing.
//! * **Tasks** are run by the `task` module: lazily started, bounded buffers (`--buffer`), DYNAMIC
//!   splits acknowledged only once clients took their elements.
//! * **Completion.** A task whose pipeline ended and whose every element was taken is reported
//!   with `POST /v1/workers/update`; only after the dispatcher acknowledged that report do
//!   reads answer `end_of_sequence: true`, so a client that saw the end of every task will see
//!   `iteration_finished` on its next heartbeat.
//! * **Serving.** `GET /v1/tasks/{task_id}/elements` ([`routes`]), `/healthz`, `/metrics` and the
//!   one OpenAPI document at `/openapi.json`; `--auth-tokens` requires a client token on the
//!   element route, `--token-file` is the token presented to the dispatcher.
//!
//! # The crate
//!
//! The `shardwise worker` command is [`WorkerArgs`] (its flags, a `clap::Args` the command
//! line flattens) and [`run`]; a program or a test embeds a worker with [`start`], which
//! returns its [`Running`] handle; [`start_with_producer`] runs one whose tasks' elements a
//! [`producer::Producer`] makes from their splits (a user's function: the Python package's
//! workers). [`routes`] is what the OpenAPI document is assembled from.
//! [`DataRoots`] opens the files of `files` datasets beneath the operator's data roots,
//! [`columnar`] reads the columnar ones (Parquet, Arrow IPC files, TFRecord) into Arrow record
//! batches, and [`columnar_out`] turns the rows a task serves back into record batches, IPC
//! streams and JSON objects.
//! The crate stands on `shardwise-core` (the worker's state machine and the pipelines),
//! `shardwise-http` (the servers' kit) and `shardwise-client` (the REST client with failover):
//! no gRPC, no Kubernetes client, no etcd, no journal (a test reads its manifest).
#![forbid(unsafe_code)]
// Handlers return `Result<_, Problem>`; a problem is built at most once per request, on the
// error path, so its size (an RFC 9457 object with optional members) costs nothing that matters.
#![allow(clippy::result_large_err)]

pub mod columnar;
pub mod columnar_out;
mod files;
pub mod producer;
mod reply;
pub mod routes;
mod rows;
mod task;
mod unknown;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Deserialize;
use shardwise_core::dataset::{DEFAULT_MAX_BUFFERED_BYTES, Limits};
use shardwise_core::dispatch::TaskId;
use shardwise_core::dispatch::wire::{
    TaskProgress, WorkerHeartbeat, WorkerHeartbeatReply, WorkerUpdate, WorkerUpdateReply,
};
use tokio::sync::{Notify, watch};

pub use self::files::DataRoots;
use self::task::{Gone, Task};
use self::unknown::Unknown;
use shardwise_client::rest::{Backoff, CallError, DispatcherUrls, Failover};
pub use shardwise_http::Running;
use shardwise_http::{auth, parse_duration};

/// How many gone task ids a worker remembers (to answer their reads).
const TOMBSTONES: usize = 100_000;

/// The default `--max-file-bytes`: 64 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 20;

fn parse_buffer(s: &str) -> Result<usize, String> {
    let n: usize = s.trim().parse().map_err(|_| format!("{s:?} is not a whole number"))?;
    if n == 0 {
        return Err("--buffer must be at least 1".into());
    }
    Ok(n)
}

/// Arguments of `shardwise worker`, each also read from `SHARDWISE_WORKER_<FLAG>` (the
/// dispatcher's are `SHARDWISE_<FLAG>`: one environment can configure both roles).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The dispatcher (`http://host:port` or `host:port`), or its replicas, comma separated:
    /// calls go to the one that answered last and move on to the next when it fails or is a
    /// follower (whose redirect is followed only to an address of this list).
    #[arg(long, env = "SHARDWISE_WORKER_DISPATCHER", value_name = "URL[,URL...]")]
    pub dispatcher: String,
    /// Address to listen on.
    #[arg(long, env = "SHARDWISE_WORKER_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port; the bound port is printed).
    #[arg(long, env = "SHARDWISE_WORKER_PORT", default_value_t = 0)]
    pub port: u16,
    /// The address the dispatcher and clients reach this worker at (`host:port`, where
    /// `%port%` stands for the bound port). Default: --host and the bound port.
    #[arg(long, env = "SHARDWISE_WORKER_ADDRESS", value_name = "HOST:PORT")]
    pub worker_address: Option<String>,
    /// Worker tags, comma separated (e.g. `COLOCATED`).
    #[arg(long, env = "SHARDWISE_WORKER_TAGS", value_delimiter = ',')]
    pub tags: Vec<String>,
    /// How often to heartbeat (tasks are also fetched at once when a client asks for one
    /// the worker does not know yet).
    #[arg(long, env = "SHARDWISE_WORKER_HEARTBEAT_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub heartbeat_interval: Duration,
    /// The most elements buffered per task before production pauses.
    #[arg(long, env = "SHARDWISE_WORKER_BUFFER", default_value = "1024", value_parser = parse_buffer)]
    pub buffer: usize,
    /// A file holding the bearer token presented to the dispatcher.
    #[arg(long, env = "SHARDWISE_WORKER_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Require bearer tokens on this worker's element route (client role) and `/metrics`
    /// (monitor role): a JSON file `{"tokens": [{"role": "admin"|"worker"|"client"|"monitor",
    /// "token": "..."}]}`.
    #[arg(long, env = "SHARDWISE_WORKER_AUTH_TOKENS", value_name = "FILE")]
    pub auth_tokens: Option<PathBuf>,
    /// The time a client may take to send a request's headers (from connecting, or from the
    /// last answer on a kept-alive connection; then it is disconnected) and then its body
    /// (then it is answered 408).
    #[arg(long, env = "SHARDWISE_WORKER_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub read_timeout: Duration,
    /// A directory whose files `files` datasets may read (repeatable; the variable is comma
    /// separated). Files are opened beneath a root (`..` may not leave it; no symlink is
    /// followed and no mount crossed) and must be regular files with one hard link; relative
    /// paths are tried under each root in order. Without one, `files` datasets fail.
    #[arg(
        long = "data-root",
        env = "SHARDWISE_WORKER_DATA_ROOT",
        value_delimiter = ',',
        value_name = "DIR"
    )]
    pub data_roots: Vec<PathBuf>,
    /// The largest file a `files` dataset may read, in bytes (a larger one fails its task).
    #[arg(long, env = "SHARDWISE_WORKER_MAX_FILE_BYTES", default_value_t = DEFAULT_MAX_FILE_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_file_bytes: u64,
    /// The most bytes a task's shuffle and batch buffers hold together (more fails the task
    /// with RESOURCE_EXHAUSTED); a task's element buffer also pauses production there.
    #[arg(long, env = "SHARDWISE_WORKER_MAX_BUFFER_BYTES", default_value_t = DEFAULT_MAX_BUFFERED_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_buffer_bytes: u64,
    /// The most bytes one read's reply takes (its JSON or Arrow body, as written, not as its
    /// rows are held): a read of `max` elements answers as many as fit and leaves the rest
    /// for the next read; an element that does not fit alone is refused with
    /// RESOURCE_EXHAUSTED, naming it. Default: --max-buffer-bytes (at least 64 KiB).
    #[arg(long, env = "SHARDWISE_WORKER_MAX_REPLY_BYTES", value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1024..))]
    pub max_reply_bytes: Option<u64>,
    /// The largest Parquet footer read, in bytes (a file with a larger one fails its task
    /// with RESOURCE_EXHAUSTED); a footer's decoded metadata must also fit --max-buffer-bytes.
    #[arg(long, env = "SHARDWISE_WORKER_MAX_FOOTER_BYTES", default_value_t = columnar::DEFAULT_MAX_FOOTER_BYTES, value_parser = clap::value_parser!(u64).range(12..))]
    pub max_footer_bytes: u64,
    /// Serve TLS only (HTTP/1.1 and HTTP/2 by ALPN) with this PEM certificate chain (the
    /// worker's certificate first); needs --tls-key. Clients then read elements over
    /// `https://`.
    #[arg(long, env = "SHARDWISE_WORKER_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "SHARDWISE_WORKER_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates trusted, besides the system's roots, for `https://` dispatcher URLs.
    #[arg(long, env = "SHARDWISE_WORKER_CA_FILE", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
}

impl WorkerArgs {
    /// The defaults of the command line, for the dispatcher at `dispatcher`.
    pub fn new(dispatcher: impl Into<String>) -> WorkerArgs {
        WorkerArgs {
            dispatcher: dispatcher.into(),
            host: "127.0.0.1".into(),
            port: 0,
            worker_address: None,
            tags: Vec::new(),
            heartbeat_interval: Duration::from_secs(30),
            buffer: 1024,
            token_file: None,
            auth_tokens: None,
            read_timeout: shardwise_http::conn::DEFAULT_READ_TIMEOUT,
            data_roots: Vec::new(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_buffer_bytes: DEFAULT_MAX_BUFFERED_BYTES,
            max_reply_bytes: None,
            max_footer_bytes: columnar::DEFAULT_MAX_FOOTER_BYTES,
            tls_cert: None,
            tls_key: None,
            ca_file: None,
        }
    }
}

/// What the worker's loops and handlers share.
#[derive(Debug)]
pub struct Shared {
    /// The dispatcher replicas (`--dispatcher`), with failover.
    pub(crate) dispatcher: Failover,
    pub(crate) address: String,
    uid: String,
    tags: Vec<String>,
    buffer: usize,
    /// What `files` datasets may read.
    pub(crate) files: DataRoots,
    /// The limits of every task's pipeline (and its element buffer's byte bound).
    pub(crate) limits: Limits,
    /// The most bytes of one read's reply (`--max-reply-bytes`).
    pub(crate) max_reply_bytes: u64,
    /// The largest Parquet footer read (`--max-footer-bytes`).
    pub(crate) max_footer_bytes: u64,
    tasks: Mutex<Tasks>,
    /// Heartbeat now (a client asked for a task this worker does not know).
    pub(crate) heartbeat_now: Notify,
    /// A task may be ready for its completion report.
    pub(crate) report_now: Notify,
    /// The worker's own producer of splits' outputs ([`start_with_producer`]).
    pub(crate) producer: Option<ProducerRef>,
}

/// A [`producer::Producer`], shared by the worker's tasks.
#[derive(Clone)]
pub(crate) struct ProducerRef(pub(crate) Arc<dyn producer::Producer>);

impl std::fmt::Debug for ProducerRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Producer")
    }
}

#[derive(Debug, Default)]
struct Tasks {
    live: HashMap<TaskId, Arc<Task>>,
    gone: HashMap<TaskId, Gone>,
    gone_order: VecDeque<TaskId>,
    incarnation: Option<String>,
    /// Reads of task ids the worker does not have, against the heartbeats sent since.
    unknown: Unknown,
}

impl Tasks {
    fn bury(&mut self, id: TaskId, how: Gone) {
        if self.gone.insert(id, how).is_none() {
            self.gone_order.push_back(id);
        }
        while self.gone_order.len() > TOMBSTONES {
            if let Some(old) = self.gone_order.pop_front() {
                self.gone.remove(&old);
            }
        }
    }
}

/// What the worker knows of a task id.
#[derive(Debug)]
pub(crate) enum Lookup {
    Live(Arc<Task>),
    Gone(Gone),
    /// Not known yet: it may come with the next heartbeat reply.
    Unknown,
    /// Not known, and a heartbeat sent after the first read of it came back without it: the
    /// dispatcher has not assigned it to this worker.
    Unassigned,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Tasks> {
        self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the worker knows of task `id`; a read of an id it does not have counts as one
    /// (see [`Unknown::read`]).
    pub(crate) fn lookup(&self, id: TaskId) -> Lookup {
        let mut t = self.lock();
        if let Some(task) = t.live.get(&id) {
            return Lookup::Live(Arc::clone(task));
        }
        if let Some(g) = t.gone.get(&id).copied() {
            return Lookup::Gone(g);
        }
        if t.unknown.read(id) { Lookup::Unassigned } else { Lookup::Unknown }
    }

    /// `(tasks, buffered, produced, served)` over the live tasks.
    pub(crate) fn counters(&self) -> (u64, u64, u64, u64) {
        let t = self.lock();
        let mut out = (t.live.len() as u64, 0, 0, 0);
        for task in t.live.values() {
            let (b, p, s) = task.counters();
            out.1 += b;
            out.2 += p;
            out.3 += s;
        }
        out
    }

    /// What `GET /v1/worker/status` answers: this worker and its live tasks (by id).
    pub(crate) fn status(&self) -> routes::WorkerStatusReport {
        let (mut tasks, incarnation): (Vec<_>, _) = {
            let t = self.lock();
            (t.live.values().map(|task| task.status()).collect(), t.incarnation.clone())
        };
        tasks.sort_unstable_by_key(|t| t.task_id);
        routes::WorkerStatusReport {
            worker_address: self.address.clone(),
            dispatcher: self.dispatcher.current().to_owned(),
            dispatchers: self.dispatcher.urls().bases().to_vec(),
            tags: self.tags.clone(),
            dispatcher_incarnation: incarnation,
            tasks,
        }
    }

    fn stop_all(&self) {
        let mut t = self.lock();
        for (_, task) in t.live.drain() {
            task.stop();
        }
    }

    /// One heartbeat: report the current tasks, apply the tasks to delete and to start.
    async fn heartbeat(&self) -> Result<(), CallError> {
        let (mut current, incarnation, number) = {
            let mut t = self.lock();
            let number = t.unknown.sending();
            (t.live.keys().copied().collect::<Vec<_>>(), t.incarnation.clone(), number)
        };
        current.sort_unstable();
        let req = WorkerHeartbeat {
            worker_address: self.address.clone(),
            current_tasks: current,
            tags: self.tags.clone(),
            worker_uid: Some(self.uid.clone()),
            incarnation,
            tensorflow: None,
        };
        let reply: WorkerHeartbeatReply =
            self.dispatcher.post("/v1/workers/heartbeat", &req).await?;
        // All under one lock: a client must never see the old task where the new incarnation
        // reuses its id (ids start over after a restart without a journal).
        let lost: Option<(String, Vec<TaskId>)> = {
            let mut t = self.lock();
            let mut lost = None;
            if let Some(old) = t.incarnation.clone()
                && old != reply.incarnation
            {
                let mut ids: Vec<TaskId> = Vec::new();
                for (id, task) in std::mem::take(&mut t.live) {
                    task.stop();
                    ids.push(id);
                }
                ids.sort_unstable();
                t.gone.clear();
                t.gone_order.clear();
                t.unknown.clear();
                for id in &ids {
                    t.bury(*id, Gone::Lost);
                }
                lost = Some((old, ids));
            }
            t.incarnation = Some(reply.incarnation.clone());
            for id in &reply.tasks_to_delete {
                if let Some(task) = t.live.remove(id) {
                    let how = task.gone_kind();
                    task.stop();
                    t.bury(*id, how);
                    tracing::info!(task_id = %id, ?how, "task deleted");
                }
            }
            for def in reply.new_tasks {
                let id = def.task_id;
                let known =
                    t.live.contains_key(&id) || t.gone.get(&id).is_some_and(|g| *g != Gone::Lost);
                if known {
                    continue;
                }
                if t.gone.remove(&id).is_some() {
                    t.gone_order.retain(|x| *x != id);
                }
                tracing::info!(task_id = %id, iteration_id = %def.iteration_id, mode = def.processing_mode.as_str(), "task started");
                t.unknown.arrived(id);
                t.live.insert(
                    id,
                    Arc::new(Task::new(def, self.buffer, self.limits, self.producer.is_some())),
                );
            }
            t.unknown.applied(number);
            lost
        };
        if let Some((old, ids)) = lost {
            self.report_new_incarnation(&old, &reply.incarnation, &ids).await;
        }
        Ok(())
    }

    async fn report_new_incarnation(&self, old: &str, new: &str, ids: &[TaskId]) {
        #[derive(Deserialize)]
        struct Version {
            fault_tolerant: bool,
        }
        let list = ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        eprintln!(
            "shardwise worker: the dispatcher at {} has a new incarnation ({old} -> {new}): it \
             restarted without its state; dropped {} task(s) [{list}] and registered again",
            self.dispatcher.current(),
            ids.len()
        );
        tracing::warn!(old, new, dropped = ids.len(), "dispatcher incarnation changed");
        match self.dispatcher.get::<Version>("/v1/version", &[]).await {
            Ok(v) if !v.fault_tolerant && !ids.is_empty() => eprintln!(
                "shardwise worker: the dispatcher is not fault tolerant: tasks [{list}] were \
                 lost; their clients must start their iterations again"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot ask the dispatcher for its version"),
        }
    }

    /// Reports every task that is ready; marks them acknowledged on success.
    async fn report_completed(&self) -> Result<(), CallError> {
        let ready: Vec<Arc<Task>> =
            self.lock().live.values().filter(|t| t.ready_to_report()).cloned().collect();
        if ready.is_empty() {
            return Ok(());
        }
        let req = WorkerUpdate {
            worker_address: self.address.clone(),
            worker_uid: Some(self.uid.clone()),
            updates: ready
                .iter()
                .map(|t| TaskProgress { task_id: t.def.task_id, completed: true })
                .collect(),
        };
        let reply: WorkerUpdateReply = self.dispatcher.post("/v1/workers/update", &req).await?;
        if !reply.unknown_tasks.is_empty() {
            tracing::warn!(unknown = ?reply.unknown_tasks, "the dispatcher does not know these tasks");
        }
        for t in ready {
            tracing::info!(task_id = %t.def.task_id, "task completed");
            t.mark_acked();
        }
        Ok(())
    }
}

async fn heartbeat_loop(shared: Arc<Shared>, interval: Duration, mut stop: watch::Receiver<bool>) {
    let mut backoff =
        Backoff::new(Duration::from_millis(100), interval.min(Duration::from_secs(5)));
    let mut wait = interval;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shared.heartbeat_now.notified() => {}
            _ = stop.changed() => return,
        }
        match shared.heartbeat().await {
            Ok(()) => {
                backoff.reset();
                wait = interval;
            }
            Err(e) => {
                tracing::warn!(error = %e, "heartbeat failed");
                wait = backoff.next_delay().min(interval);
            }
        }
        // On-demand heartbeats at most every 20 ms, however many clients ask.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn report_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
    loop {
        tokio::select! {
            () = shared.report_now.notified() => {}
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => return,
        }
        loop {
            match shared.report_completed().await {
                Ok(()) => {
                    backoff.reset();
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "completion report failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        _ = stop.changed() => return,
                    }
                }
            }
        }
    }
}

fn process_uid() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{nanos:x}-{:x}-{n}", std::process::id())
}

fn advertised(args: &WorkerArgs, local: SocketAddr) -> Result<String, StartError> {
    if let Some(a) = &args.worker_address {
        let a = a.trim().replacen("%port%", &local.port().to_string(), 1);
        // What the dispatcher checks at registration, as a usage error before it.
        shardwise_core::dispatch::address::check_worker_address(&a)
            .map_err(StartError::WorkerAddress)?;
        return Ok(a);
    }
    if local.ip().is_unspecified() {
        return Err(StartError::Unadvertisable { host: args.host.clone() });
    }
    Ok(local.to_string())
}

/// Why a worker did not start. It renders itself as the process's answer: its `Display` is
/// the stderr line (after `shardwise worker: `), [`StartError::exit_code`] the exit status.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// An unusable `--tls-cert`, `--tls-key` or `--ca-file`.
    #[error(transparent)]
    Tls(#[from] shardwise_http::tls::TlsFileError),
    /// `--dispatcher` is not a list of http(s) addresses.
    #[error("--dispatcher: {0}")]
    Dispatcher(shardwise_client::rest::UrlListError),
    /// An empty tag among `--tags` (TensorFlow's words; all the tags, trimmed).
    #[error("Worker tags cannot be empty. Got tags {{{}}}", tags.join(", "))]
    EmptyTag {
        /// The tags as given, trimmed.
        tags: Vec<String>,
    },
    /// `--token-file` cannot be read.
    #[error("cannot read --token-file {}: {source}", path.display())]
    TokenFileRead {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `--token-file` holds no token, or more than one.
    #[error("--token-file {} must hold one token", path.display())]
    TokenFileNotOneToken {
        /// The file.
        path: PathBuf,
    },
    /// An unusable `--auth-tokens` file.
    #[error(transparent)]
    AuthTokens(#[from] auth::TokenFileError),
    /// A `--data-root` that cannot be resolved.
    #[error("--data-root {}: {source}", path.display())]
    DataRoot {
        /// The directory as given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A `--data-root` that is not a directory.
    #[error("--data-root {} is not a directory", path.display())]
    DataRootNotDirectory {
        /// The path as given.
        path: PathBuf,
    },
    /// `--worker-address` is not `host:port` (after `%port%` is replaced).
    #[error("--worker-address: {0}")]
    WorkerAddress(shardwise_core::dispatch::address::AddressError),
    /// `--host` is a wildcard and no `--worker-address` says how to reach the worker.
    #[error(
        "--host {host} listens on every interface and cannot be advertised: also give \
         --worker-address HOST:%port%"
    )]
    Unadvertisable {
        /// `--host`.
        host: String,
    },
    /// `--host` and `--port` cannot be listened on.
    #[error(transparent)]
    Listen(#[from] shardwise_http::ListenError),
    /// The dispatcher refused the registration (an answer that is not retried).
    #[error("the dispatcher at {dispatcher} refused to register this worker: {error}")]
    Refused {
        /// The dispatcher's base URL.
        dispatcher: String,
        /// Its answer.
        error: CallError,
    },
}

impl StartError {
    /// The process's exit status: 2 for bad arguments (usage), 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            StartError::Listen(_) | StartError::Refused { .. } => 1,
            StartError::Dispatcher(_)
            | StartError::EmptyTag { .. }
            | StartError::TokenFileRead { .. }
            | StartError::TokenFileNotOneToken { .. }
            | StartError::AuthTokens(_)
            | StartError::DataRoot { .. }
            | StartError::DataRootNotDirectory { .. }
            | StartError::WorkerAddress(_)
            | StartError::Unadvertisable { .. }
            | StartError::Tls(_) => 2,
        }
    }
}

/// Starts a worker on this tokio runtime: validates the arguments, binds, serves, and
/// registers with the dispatcher (retrying while it is unavailable; a refusal is an error).
/// Errors know their exit status ([`StartError::exit_code`]: 2 for bad arguments, 1
/// otherwise).
pub async fn start(args: WorkerArgs) -> Result<Running, StartError> {
    start_inner(args, None).await
}

/// [`start`] a worker whose tasks' elements `producer` makes from their splits instead of
/// their datasets' pipelines (see [`producer`]): a Python worker's user function.
pub async fn start_with_producer(
    args: WorkerArgs,
    producer: Arc<dyn producer::Producer>,
) -> Result<Running, StartError> {
    start_inner(args, Some(ProducerRef(producer))).await
}

async fn start_inner(
    args: WorkerArgs,
    producer: Option<ProducerRef>,
) -> Result<Running, StartError> {
    let urls = DispatcherUrls::parse(&args.dispatcher).map_err(StartError::Dispatcher)?;
    let tags: Vec<String> = args.tags.iter().map(|t| t.trim().to_owned()).collect();
    if tags.iter().any(String::is_empty) {
        return Err(StartError::EmptyTag { tags });
    }
    let token = match &args.token_file {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|source| StartError::TokenFileRead { path: path.clone(), source })?;
            let t = text.trim().to_owned();
            if t.is_empty() || t.contains(char::is_whitespace) {
                return Err(StartError::TokenFileNotOneToken { path: path.clone() });
            }
            Some(t)
        }
    };
    let tokens = match &args.auth_tokens {
        None => None,
        Some(path) => Some(auth::Tokens::load(path)?),
    };
    let files = DataRoots::new(&args.data_roots, args.max_file_bytes)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(shardwise_http::tls::server_config(cert, key)?),
        _ => None,
    };
    let client_tls = shardwise_http::tls::client_config(args.ca_file.as_deref())?;
    let (listener, local) = shardwise_http::listen(&args.host, args.port).await?;
    let address = advertised(&args, local)?;
    let dispatcher = Failover::new(
        shardwise_client::rest::http_client_with(Duration::from_secs(30), client_tls),
        urls,
        token,
    );
    let shared = Arc::new(Shared {
        dispatcher,
        address: address.clone(),
        uid: process_uid(),
        tags,
        buffer: args.buffer,
        files,
        limits: Limits { max_buffered_bytes: args.max_buffer_bytes },
        max_reply_bytes: args.max_reply_bytes.unwrap_or(args.max_buffer_bytes.max(64 << 10)),
        max_footer_bytes: args.max_footer_bytes,
        tasks: Mutex::default(),
        heartbeat_now: Notify::new(),
        report_now: Notify::new(),
        producer,
    });
    let app = routes::router(Arc::clone(&shared), tokens, args.read_timeout);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (loops_tx, loops_rx) = watch::channel(false);
    let server_shared = Arc::clone(&shared);
    let read_timeout = args.read_timeout;
    let https = tls.is_some();
    let task = tokio::spawn(async move {
        // Bounded header and body reads, TCP_NODELAY, graceful shutdown: as on the dispatcher.
        let stop = async move {
            let _ = stop_rx.await;
        };
        shardwise_http::conn::serve(
            listener,
            app,
            None::<axum::Router>,
            None,
            tls,
            read_timeout,
            stop,
        )
        .await;
        let _ = loops_tx.send(true);
        server_shared.stop_all();
        0
    });
    let running = Running::new(local, address, https, stop_tx, task);
    // Register: retry while the dispatcher is unavailable (it may start later).
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    loop {
        match shared.heartbeat().await {
            Ok(()) => break,
            Err(e) if e.is_retryable() => {
                tracing::warn!(error = %e, "cannot register with the dispatcher yet; retrying");
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(e) => {
                running.stop().await;
                return Err(StartError::Refused {
                    dispatcher: shared.dispatcher.current().to_owned(),
                    error: e,
                });
            }
        }
    }
    tokio::spawn(heartbeat_loop(Arc::clone(&shared), args.heartbeat_interval, loops_rx.clone()));
    tokio::spawn(report_loop(shared, loops_rx));
    Ok(running)
}

/// Runs the worker until SIGINT/SIGTERM; returns the process exit status.
pub fn run(args: WorkerArgs) -> i32 {
    shardwise_http::init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("shardwise worker: cannot start the runtime: {e}");
            return 1;
        }
    };
    let dispatcher = args.dispatcher.clone();
    runtime.block_on(async move {
        // Polled first, so the handlers are installed before the listening line is printed
        // (a signal that arrives before a handler exists would be lost).
        let signal = shardwise_http::shutdown_signal();
        tokio::pin!(signal);
        let started = tokio::select! {
            biased;
            () = &mut signal => return 0,
            r = start(args) => r,
        };
        match started {
            Ok(running) => {
                println!("shardwise worker listening on {}", running.url());
                tracing::info!(url = %running.url(), %dispatcher, "worker serving");
                running.run_until(signal).await
            }
            Err(e) => {
                eprintln!("shardwise worker: {e}");
                e.exit_code()
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_positive() {
        assert_eq!(parse_buffer("8"), Ok(8));
        assert!(parse_buffer("0").is_err());
        assert!(parse_buffer("-1").is_err());
        assert!(parse_buffer("x").is_err());
    }

    #[test]
    fn advertised_addresses() {
        let local: SocketAddr = "127.0.0.1:4321".parse().unwrap();
        let mut args = WorkerArgs::new("127.0.0.1:1");
        assert_eq!(advertised(&args, local).unwrap(), "127.0.0.1:4321");
        args.worker_address = Some("w1.example:%port%".into());
        assert_eq!(advertised(&args, local).unwrap(), "w1.example:4321");
        for bad in ["w1.example", "w1 x:%port%", "http://w1:%port%", "w_1:%port%"] {
            args.worker_address = Some(bad.into());
            let e = advertised(&args, local).unwrap_err();
            assert!(matches!(e, StartError::WorkerAddress(_)), "{e}");
            assert_eq!(e.exit_code(), 2);
            let e = e.to_string();
            assert!(e.starts_with("--worker-address: worker_address "), "{e}");
        }
        args.worker_address = None;
        let any: SocketAddr = "0.0.0.0:4321".parse().unwrap();
        let e = advertised(&args, any).unwrap_err();
        assert!(matches!(&e, StartError::Unadvertisable { host } if host == "127.0.0.1"), "{e}");
        assert!(e.to_string().contains("--worker-address"));
    }

    /// A start that fails is a typed error that knows its exit status and its stderr line.
    #[tokio::test]
    async fn start_errors_render_as_exit_status_and_line() {
        let e = start(WorkerArgs::new("ftp://d:1")).await.unwrap_err();
        assert!(matches!(e, StartError::Dispatcher(_)), "{e}");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().starts_with("--dispatcher: \"ftp://d:1\" is not an http"), "{e}");
        // In a list, the bad address is named with its place.
        let e = start(WorkerArgs::new("127.0.0.1:1,,https://d:1")).await.unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert_eq!(e.to_string(), "--dispatcher: the address is empty (address 2 of 3)");
        let mut args = WorkerArgs::new("127.0.0.1:1");
        args.tags = vec!["a".into(), " ".into()];
        let e = start(args).await.unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert_eq!(e.to_string(), "Worker tags cannot be empty. Got tags {a, }");
        let mut args = WorkerArgs::new("127.0.0.1:1");
        args.data_roots = vec![PathBuf::from("/nonexistent/root")];
        let e = start(args).await.unwrap_err();
        assert!(matches!(e, StartError::DataRoot { .. }), "{e}");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().starts_with("--data-root /nonexistent/root: "), "{e}");
    }

    #[test]
    fn new_args_are_the_command_lines() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: WorkerArgs,
        }
        let parsed =
            <Cli as clap::Parser>::try_parse_from(["worker", "--dispatcher", "d:1"]).unwrap().args;
        assert_eq!(format!("{parsed:?}"), format!("{:?}", WorkerArgs::new("d:1")));
    }

    #[test]
    fn tombstones_are_bounded() {
        let mut t = Tasks::default();
        for i in 0..(TOMBSTONES as u64 + 10) {
            t.bury(TaskId(i), Gone::Completed);
        }
        assert_eq!(t.gone.len(), TOMBSTONES);
        assert!(!t.gone.contains_key(&TaskId(0)));
    }
}
