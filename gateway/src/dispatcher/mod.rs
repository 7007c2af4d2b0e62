//! `shardwise dispatcher`: the v1 REST API over the dispatcher state machine, and TensorFlow's
//! `tensorflow.data.DispatcherService` over gRPC on the same port ([`grpc`]).

pub mod core;
pub mod grpc;
pub mod replica;
pub mod routes;
#[cfg(test)]
mod storage_faults;

use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use shardwise_core::dispatch::address::AddressError;
use shardwise_core::dispatch::{Dispatcher, DispatcherConfig, Millis};
use shardwise_journal::{DirStorage, Journal};

pub use self::core::DriverHandle;
use self::core::{JournalWriter, Startup, StartupError, now};
pub use self::routes::{AppState, DispatcherStatus, JournalMode, api_router};
use crate::http::{
    Code, DurationError, Problem, Running, auth, common_layers, conn, docs, front, incarnation,
    init_logging, limit, metrics, parse_duration, shutdown_signal,
};

fn millis(d: Duration) -> Millis {
    Millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Arguments of `shardwise dispatcher` (each also read from a `SHARDWISE_*` variable).
#[derive(Debug, Clone, clap::Args)]
pub struct DispatcherArgs {
    /// Address to listen on.
    #[arg(long, env = "SHARDWISE_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port; the bound port is printed).
    #[arg(long, env = "SHARDWISE_PORT", default_value_t = 5050)]
    pub port: u16,
    /// Threads serving requests (0: one per CPU). Fewer threads wake each other less: on 2
    /// CPUs, 1 thread served 10,000 heartbeats/s with ~13% less CPU than 2.
    #[arg(long, env = "SHARDWISE_THREADS", default_value_t = 0)]
    pub threads: usize,
    /// Keep a journal in this directory and replay it on start.
    #[arg(long, env = "SHARDWISE_WORK_DIR", value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Make every journal record durable (fsync, group commit) before acknowledging it.
    /// Needs --work-dir.
    #[arg(long, env = "SHARDWISE_FAULT_TOLERANT")]
    pub fault_tolerant: bool,
    /// Static sharding's fixed worker list, comma separated (`host:port`, `host:%port%`,
    /// `host`).
    #[arg(long, env = "SHARDWISE_WORKER_ADDRESSES", value_delimiter = ',', value_parser = parse_worker_list_entry)]
    pub worker_addresses: Vec<String>,
    /// A worker silent this long is lost (its tasks stop blocking, its splits are handed out again).
    #[arg(long, env = "SHARDWISE_WORKER_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    pub worker_timeout: Duration,
    /// A client silent this long is released.
    #[arg(long, env = "SHARDWISE_CLIENT_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub client_timeout: Duration,
    /// How long a new client may take to send its first heartbeat.
    #[arg(long, env = "SHARDWISE_CLIENT_FIRST_HEARTBEAT_GRACE", default_value = "30m", value_parser = parse_duration)]
    pub client_first_heartbeat_grace: Duration,
    /// How often timeouts and garbage collection are checked.
    #[arg(long, env = "SHARDWISE_JOB_GC_CHECK_INTERVAL", default_value = "10m", value_parser = parse_duration)]
    pub job_gc_check_interval: Duration,
    /// How long an iteration without clients is kept (`never`: forever).
    #[arg(long, env = "SHARDWISE_JOB_GC_TIMEOUT", default_value = "5m", value_parser = parse_gc_timeout)]
    pub job_gc_timeout: GcTimeout,
    /// Also collect DYNAMIC iterations.
    #[arg(long, env = "SHARDWISE_GC_DYNAMIC_SHARDING_JOBS")]
    pub gc_dynamic_sharding_jobs: bool,
    /// Require bearer tokens: a JSON file `{"tokens": [{"role":
    /// "admin"|"worker"|"client"|"monitor", "token": "..."}]}` (`monitor`: `/metrics`, `/v1/version`).
    #[arg(long, env = "SHARDWISE_AUTH_TOKENS", value_name = "FILE")]
    pub auth_tokens: Option<PathBuf>,
    /// Keep this resolve request (the `shardwise resolve` JSON) resolved and serve it at
    /// `GET /v1/cluster`; Kubernetes resolvers without inline pods are kept live by watches.
    #[arg(long, env = "SHARDWISE_CLUSTER_CONFIG", value_name = "FILE")]
    pub cluster_config: Option<PathBuf>,
    /// The most tasks `POST /v1/cluster/resolve` (and --cluster-config) may resolve: a Slurm
    /// hostlist or tasks-per-node list expanding to more is refused with INVALID_ARGUMENT
    /// (counted before anything is built), and so is a cluster of more tasks from any
    /// resolver. Raise it for a giant cluster.
    #[arg(long, env = "SHARDWISE_MAX_RESOLVE_TASKS", default_value_t = shardwise_core::cluster::slurm::DEFAULT_MAX_TASKS, value_parser = crate::kubernetes::resolve::parse_max_tasks)]
    pub max_resolve_tasks: usize,
    /// Largest accepted request body, in bytes (and gRPC request message: well over
    /// TensorFlow's 4 MiB; gRPC replies are of any size, see --max-reply-bytes).
    #[arg(long, env = "SHARDWISE_MAX_BODY_BYTES", default_value_t = 16 << 20)]
    pub max_body_bytes: usize,
    /// The time a client may take to send a request's headers (from connecting, or from the
    /// last answer on a kept-alive connection; then it is disconnected) and then its body
    /// (then it is answered 408).
    #[arg(long, env = "SHARDWISE_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub read_timeout: Duration,
    /// Requests per second accepted from one peer IP address, more are answered 429 with
    /// `Retry-After` (0: off, the default: a fleet behind one NAT shares an address, so
    /// size it for the whole fleet, e.g. 2x its heartbeats per second, if you turn it on).
    #[arg(long, env = "SHARDWISE_RATE_LIMIT", default_value_t = 0, value_name = "PER_SEC")]
    pub rate_limit: u32,
    /// Requests one peer IP address may send at once above --rate-limit (0: one second's
    /// worth).
    #[arg(long, env = "SHARDWISE_RATE_LIMIT_BURST", default_value_t = 0)]
    pub rate_limit_burst: u32,
    /// Requests handled at once over all peers, more are answered 503 with `Retry-After`
    /// (0: no limit, the default; long polls of `GET /v1/cluster?wait=` count while they
    /// wait).
    #[arg(long, env = "SHARDWISE_MAX_IN_FLIGHT", default_value_t = 0)]
    pub max_in_flight: usize,
    /// The most bytes of large gRPC replies (`GetDatasetDef`'s graph) held in memory and not yet
    /// read by their callers, over all connections; more wait (up to 30 s, then UNAVAILABLE,
    /// which TensorFlow retries).
    #[arg(long, env = "SHARDWISE_MAX_REPLY_BYTES", default_value_t = grpc::budget::DEFAULT_REPLY_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_reply_bytes: u64,
    /// The same bound for one connection (a reply larger than it is served alone on its
    /// connection).
    #[arg(long, env = "SHARDWISE_MAX_REPLY_BYTES_PER_CONNECTION", default_value_t = grpc::budget::DEFAULT_REPLY_BYTES_PER_CONNECTION, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_reply_bytes_per_connection: u64,
    /// The most bytes of request bodies (REST bodies and gRPC messages) being read and held in
    /// memory, over all connections; a body past it is not read further and waits (up to
    /// --read-timeout, then 503 / RESOURCE_EXHAUSTED).
    #[arg(long, env = "SHARDWISE_MAX_REQUEST_BYTES", default_value_t = grpc::budget::DEFAULT_REQUEST_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_request_bytes: u64,
    /// The same bound for one connection (e.g. the streams of one HTTP/2 connection; a body
    /// larger than it is read alone on its connection).
    #[arg(long, env = "SHARDWISE_MAX_REQUEST_BYTES_PER_CONNECTION", default_value_t = grpc::budget::DEFAULT_REQUEST_BYTES_PER_CONNECTION, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_request_bytes_per_connection: u64,
    /// Compact the journal (a snapshot opens a new segment, older segments are deleted) when
    /// its current segment grows past this many bytes.
    #[arg(long, env = "SHARDWISE_COMPACT_AT_BYTES", default_value_t = core::COMPACT_AT_BYTES)]
    pub compact_at_bytes: u64,
    /// The most bytes registered datasets may hold (definitions and metadata, encoded as
    /// JSON, summed); a registration past it is refused with RESOURCE_EXHAUSTED. In memory a
    /// dataset takes up to about 36 times its encoded size (a `list` of one-digit numbers).
    #[arg(long, env = "SHARDWISE_MAX_DATASET_BYTES", default_value_t = shardwise_core::dispatch::DEFAULT_MAX_DATASET_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_dataset_bytes: u64,
    /// TensorFlow's `DispatcherConfig.deployment_mode`, answered to TensorFlow clients
    /// (`GetDataServiceConfig`, `ClientHeartbeat`): `colocated` (each client reads the worker
    /// in its own process), `remote` (workers on other hosts) or `hybrid` (both). Unset:
    /// TensorFlow's default, DEPLOYMENT_MODE_UNSPECIFIED.
    #[arg(long, env = "SHARDWISE_DEPLOYMENT_MODE", value_enum)]
    pub deployment_mode: Option<DeploymentMode>,
    /// A directory under which the dispatcher may glob the file patterns of TensorFlow's
    /// `Dataset.list_files` to compute a DYNAMIC dataset's split providers, and read the
    /// footers of the files of a Parquet source split by rows (repeatable; the variable is
    /// comma separated). A pattern (or a match) outside every root is refused with the reason;
    /// without one, DYNAMIC sharding of `list_files` and Parquet splits by rows are refused.
    #[arg(
        long = "data-root",
        env = "SHARDWISE_DATA_ROOT",
        value_delimiter = ',',
        value_name = "DIR"
    )]
    pub data_roots: Vec<PathBuf>,
    /// The most directory entries the dispatcher reads to glob the `list_files` patterns of
    /// one registration (all its patterns together; a pattern counts for one entry per 256
    /// bytes and each `[...]` class for one more). Past it, DYNAMIC sharding of the dataset is
    /// refused naming this flag (the registration itself succeeds). Raise it for directories of
    /// more files.
    #[arg(long, env = "SHARDWISE_MAX_GLOB_ENTRIES", default_value_t = crate::tf::files::DEFAULT_MAX_GLOB_ENTRIES, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_glob_entries: u64,
    /// The largest Parquet footer read to count a file's rows (a Parquet source split by
    /// rows), in bytes; a file with a larger one is refused with RESOURCE_EXHAUSTED. Footers
    /// are walked for their row counts, never decoded.
    #[arg(long, env = "SHARDWISE_MAX_FOOTER_BYTES", default_value_t = shardwise_worker::columnar::DEFAULT_MAX_FOOTER_BYTES, value_parser = clap::value_parser!(u64).range(12..))]
    pub max_footer_bytes: u64,
    /// The most files whose footers one registration reads (a Parquet source split by rows);
    /// more is refused with RESOURCE_EXHAUSTED.
    #[arg(long, env = "SHARDWISE_MAX_FOOTER_FILES", default_value_t = shardwise_worker::columnar::DEFAULT_MAX_FOOTER_FILES, value_parser = parse_positive)]
    pub max_footer_files: usize,
    /// Registrations reading footers at once (each holds at most one footer); more wait for
    /// their turn, up to 20 s, then are answered UNAVAILABLE. Identical files are read once:
    /// their row counts are remembered by the file's identity.
    #[arg(long, env = "SHARDWISE_MAX_FOOTER_READS", default_value_t = DEFAULT_FOOTER_READS, value_parser = parse_positive)]
    pub max_footer_reads: usize,
    /// Keep the journal in etcd (its client URLs, comma separated: `http://host:port`), with
    /// replicas: every dispatcher started with the same --etcd and --etcd-prefix is one, one
    /// of them leads (elected with an etcd lease) and the others follow as hot standbys. Every
    /// record is committed by etcd before its reply. Conflicts with --work-dir.
    #[arg(
        long,
        env = "SHARDWISE_ETCD",
        value_delimiter = ',',
        value_name = "URL",
        conflicts_with = "work_dir"
    )]
    pub etcd: Vec<String>,
    /// The journal's key prefix in etcd (several replicated dispatchers can share one etcd;
    /// prefixes must not nest).
    #[arg(long, env = "SHARDWISE_ETCD_PREFIX", default_value = replica::DEFAULT_PREFIX, value_parser = replica::check_prefix)]
    pub etcd_prefix: String,
    /// The leader's etcd lease: a leader that dies is replaced about this long after (whole
    /// seconds, at least 2 s: etcd's shortest lease).
    #[arg(long, env = "SHARDWISE_LEADER_LEASE", default_value = "5s", value_parser = parse_lease)]
    pub leader_lease: Duration,
    /// The URL other replicas redirect to when this one leads, and `GET /v1/leader` reports
    /// (default: `http://<--host>:<bound port>`, `https://` with --tls-cert; needed when --host is a wildcard address).
    #[arg(long, env = "SHARDWISE_ADVERTISE_URL", value_name = "URL")]
    pub advertise_url: Option<String>,
    /// Serve TLS only (HTTP/1.1 and HTTP/2 by ALPN, REST and gRPC alike) with this PEM
    /// certificate chain (the server's certificate first); needs --tls-key.
    #[arg(long, env = "SHARDWISE_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "SHARDWISE_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// The default `--max-footer-reads`.
pub const DEFAULT_FOOTER_READS: usize = 2;

/// A count of at least 1.
fn parse_positive(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{s:?} is not a whole number of at least 1")),
    }
}

/// `--leader-lease`: whole seconds, 2 s to 1 h.
fn parse_lease(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
    if d.subsec_nanos() != 0 || d < Duration::from_secs(2) || d > Duration::from_secs(3600) {
        return Err(format!("{s:?}: a lease is whole seconds from 2s to 1h (etcd's leases are)"));
    }
    Ok(d)
}

/// `--deployment-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeploymentMode {
    /// DEPLOYMENT_MODE_COLOCATED.
    Colocated,
    /// DEPLOYMENT_MODE_REMOTE.
    Remote,
    /// DEPLOYMENT_MODE_HYBRID.
    Hybrid,
}

impl DeploymentMode {
    /// TensorFlow's enum value (unset: UNSPECIFIED).
    pub fn tf(mode: Option<DeploymentMode>) -> crate::tf::proto::tensorflow::data::DeploymentMode {
        use crate::tf::proto::tensorflow::data::DeploymentMode as Tf;
        match mode {
            None => Tf::Unspecified,
            Some(DeploymentMode::Colocated) => Tf::Colocated,
            Some(DeploymentMode::Remote) => Tf::Remote,
            Some(DeploymentMode::Hybrid) => Tf::Hybrid,
        }
    }
}

/// A `--worker-addresses` entry, trimmed: empty, or what
/// [`check_worker_list_entry`](shardwise_core::dispatch::address::check_worker_list_entry)
/// allows.
fn parse_worker_list_entry(s: &str) -> Result<String, AddressError> {
    let s = s.trim();
    if !s.is_empty() {
        shardwise_core::dispatch::address::check_worker_list_entry(s)?;
    }
    Ok(s.to_owned())
}

impl Default for DispatcherArgs {
    /// The command line's defaults (in memory, 127.0.0.1:5050).
    fn default() -> Self {
        DispatcherArgs {
            host: "127.0.0.1".into(),
            port: 5050,
            threads: 0,
            work_dir: None,
            fault_tolerant: false,
            worker_addresses: Vec::new(),
            worker_timeout: Duration::from_secs(600),
            client_timeout: Duration::from_secs(300),
            client_first_heartbeat_grace: Duration::from_secs(1800),
            job_gc_check_interval: Duration::from_secs(600),
            job_gc_timeout: GcTimeout(Some(Duration::from_secs(300))),
            gc_dynamic_sharding_jobs: false,
            auth_tokens: None,
            cluster_config: None,
            max_resolve_tasks: shardwise_core::cluster::slurm::DEFAULT_MAX_TASKS,
            max_body_bytes: 16 << 20,
            read_timeout: conn::DEFAULT_READ_TIMEOUT,
            rate_limit: 0,
            rate_limit_burst: 0,
            max_in_flight: 0,
            max_reply_bytes: grpc::budget::DEFAULT_REPLY_BYTES,
            max_reply_bytes_per_connection: grpc::budget::DEFAULT_REPLY_BYTES_PER_CONNECTION,
            max_request_bytes: grpc::budget::DEFAULT_REQUEST_BYTES,
            max_request_bytes_per_connection: grpc::budget::DEFAULT_REQUEST_BYTES_PER_CONNECTION,
            compact_at_bytes: core::COMPACT_AT_BYTES,
            max_dataset_bytes: shardwise_core::dispatch::DEFAULT_MAX_DATASET_BYTES,
            deployment_mode: None,
            data_roots: Vec::new(),
            max_glob_entries: crate::tf::files::DEFAULT_MAX_GLOB_ENTRIES,
            max_footer_bytes: shardwise_worker::columnar::DEFAULT_MAX_FOOTER_BYTES,
            max_footer_files: shardwise_worker::columnar::DEFAULT_MAX_FOOTER_FILES,
            max_footer_reads: DEFAULT_FOOTER_READS,
            etcd: Vec::new(),
            etcd_prefix: replica::DEFAULT_PREFIX.into(),
            leader_lease: Duration::from_secs(5),
            advertise_url: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// `--job-gc-timeout`: a duration or `never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcTimeout(pub Option<Duration>);

fn parse_gc_timeout(s: &str) -> Result<GcTimeout, DurationError> {
    if s.trim() == "never" {
        Ok(GcTimeout(None))
    } else {
        parse_duration(s).map(|d| GcTimeout(Some(d)))
    }
}

impl DispatcherArgs {
    /// The request limits.
    pub fn limits(&self) -> limit::LimitConfig {
        limit::LimitConfig {
            max_body_bytes: self.max_body_bytes,
            read_timeout: self.read_timeout,
            rate_per_sec: self.rate_limit,
            burst: self.rate_limit_burst,
            max_in_flight: self.max_in_flight,
        }
    }

    /// The state machine's configuration.
    pub fn config(&self) -> DispatcherConfig {
        DispatcherConfig {
            // A journal in etcd is always durable before a reply.
            fault_tolerant: self.fault_tolerant || !self.etcd.is_empty(),
            worker_addresses: self
                .worker_addresses
                .iter()
                .map(|a| a.trim().to_owned())
                .filter(|a| !a.is_empty())
                .collect(),
            worker_timeout: millis(self.worker_timeout),
            client_timeout: millis(self.client_timeout),
            client_first_heartbeat_grace: millis(self.client_first_heartbeat_grace),
            job_gc_check_interval: millis(self.job_gc_check_interval),
            job_gc_timeout: self.job_gc_timeout.0.map(millis),
            gc_dynamic_sharding_jobs: self.gc_dynamic_sharding_jobs,
            max_dataset_bytes: self.max_dataset_bytes,
        }
    }
}

/// The router, with every rejection, unknown route, wrong method, oversized body, timeout
/// and panic answered as problem+json, and the OpenAPI document at `/openapi.json`.
pub fn router(state: AppState, limits: limit::LimitConfig, tokens: Option<auth::Tokens>) -> Router {
    let (api, _) = api_router();
    // Per route: metrics, then the token check, then the body (read after the token check:
    // an unauthenticated caller gets no buffer).
    // On a replica that does not lead, after the token check: a redirect to the leader.
    let api = api
        .route_layer(axum::middleware::from_fn_with_state(state.replica.clone(), to_leader))
        .route_layer(front::RouteLayer::new(Some(state.routes.clone()), tokens, &limits));
    // Swagger UI from assets vendored in the build (no network), reading /openapi.json.
    let docs: Router<AppState> = utoipa_swagger_ui::SwaggerUi::new("/docs")
        .external_url_unchecked("/openapi.json", docs::document())
        .into();
    let app = api.merge(docs).merge(crate::http::ui::router(crate::http::ui::Kind::Dispatcher));
    common_layers(app.fallback(crate::http::not_found), "dispatcher", limits).with_state(state)
}

/// A replica that does not lead answers every `/v1/` call but `GET /v1/leader` with a
/// redirect to the leader (307: the method and body are kept), or 503 when no replica leads.
async fn to_leader(
    axum::extract::State(status): axum::extract::State<std::sync::Arc<replica::ReplicaStatus>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = request.uri().path();
    // A replica's status page shows that replica (its `state` is null while it follows).
    if !path.starts_with("/v1/") || path == "/v1/leader" || path == "/v1/status" {
        return next.run(request).await;
    }
    match status.redirect().await {
        None => next.run(request).await,
        Some(None) => Problem::new(Code::Unavailable, status.no_leader_reason()).into_response(),
        Some(Some(leader)) => {
            let target = format!(
                "{leader}{}",
                request.uri().path_and_query().map_or(path, axum::http::uri::PathAndQuery::as_str)
            );
            let mut p = Problem::new(
                Code::Unavailable,
                format!("This dispatcher replica follows; the leader is {leader}."),
            )
            .with_status(307, "Temporary Redirect");
            p.leader = Some(leader);
            let mut response = p.into_response();
            if let Ok(v) = axum::http::HeaderValue::from_str(&target) {
                response.headers_mut().insert(axum::http::header::LOCATION, v);
            }
            response
        }
    }
}

/// Why a dispatcher did not start. It renders itself as the process's answer: its `Display`
/// is the stderr line (after `shardwise dispatcher: `), [`StartError::exit_code`] the exit
/// status.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `--fault-tolerant` without `--work-dir`.
    #[error("--fault-tolerant needs --work-dir (where the journal is kept)")]
    FaultTolerantWithoutWorkDir,
    /// An unusable `--auth-tokens` file.
    #[error(transparent)]
    AuthTokens(#[from] auth::TokenFileError),
    /// Settings the state machine refuses (e.g. a zero duration).
    #[error("{0}")]
    Config(shardwise_core::dispatch::DispatchError),
    /// An unusable `--cluster-config` file.
    #[error(transparent)]
    ClusterConfig(#[from] crate::kubernetes::live::ClusterConfigError),
    /// The work dir cannot be owned (another dispatcher holds it, or it cannot be created).
    #[error("refusing to start: {0}")]
    WorkDir(#[from] shardwise_journal::WorkDirError),
    /// `--host` and `--port` cannot be listened on.
    #[error(transparent)]
    Listen(#[from] crate::http::ListenError),
    /// The journal cannot be replayed (or the state machine not built from it).
    #[error("refusing to start: {0}")]
    Recovery(StartupError),
    /// The replay thread ended without an answer.
    #[error("refusing to start: the replay thread ended without an answer (a bug)")]
    RecoveryLost,
    /// An unusable `--etcd` endpoint.
    #[error("--etcd: {0}")]
    Etcd(crate::etcd::Error),
    /// An unusable `--tls-cert` or `--tls-key`.
    #[error(transparent)]
    Tls(#[from] crate::http::tls::TlsFileError),
    /// An unusable `--advertise-url`, or none where one is needed.
    #[error("--advertise-url: {0}")]
    AdvertiseUrl(String),
    /// A `--data-root` that does not resolve to a directory.
    #[error("{0}")]
    DataRoot(String),
}

impl StartError {
    /// The process's exit status: 2 for bad arguments (usage), 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            StartError::FaultTolerantWithoutWorkDir
            | StartError::AuthTokens(_)
            | StartError::Config(_)
            | StartError::ClusterConfig(_)
            | StartError::Etcd(_)
            | StartError::AdvertiseUrl(_)
            | StartError::DataRoot(_)
            | StartError::Tls(_) => 2,
            StartError::WorkDir(_)
            | StartError::Listen(_)
            | StartError::Recovery(_)
            | StartError::RecoveryLost => 1,
        }
    }
}

/// Runs the dispatcher until SIGINT/SIGTERM; returns the process exit status.
pub fn run(args: DispatcherArgs) -> i32 {
    init_logging();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if args.threads > 0 {
        builder.worker_threads(args.threads);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("shardwise dispatcher: cannot start the runtime: {e}");
            return 1;
        }
    };
    let mode = match (&args.work_dir, args.etcd.is_empty()) {
        (_, false) => {
            format!("replica on etcd {} (prefix {:?})", args.etcd.join(","), args.etcd_prefix)
        }
        (Some(dir), true) => format!("journal in work dir {}", dir.display()),
        (None, true) => "in memory (no work dir)".to_owned(),
    };
    let fault_tolerant = args.fault_tolerant;
    let status = runtime.block_on(async move {
        // Polled first, so the handlers are installed before the listening line is printed
        // (a signal that arrives before a handler exists would be lost).
        let signal = shutdown_signal();
        tokio::pin!(signal);
        let started = tokio::select! {
            biased;
            () = &mut signal => return 0,
            r = start(args) => r,
        };
        let running = match started {
            Ok(r) => r,
            Err(e) => {
                eprintln!("shardwise dispatcher: {e}");
                return e.exit_code();
            }
        };
        println!("shardwise dispatcher listening on {}", running.url());
        tracing::info!(url = %running.url(), %mode, fault_tolerant, "dispatcher serving");
        running.run_until(signal).await
    });
    // The graceful stop is over (the journal closed, the work dir unlocked): a blocking task
    // still running (a request's CPU work, e.g. a graph read whose caller gave up) must not
    // keep the process alive, as dropping the runtime would (it waits for blocking tasks).
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    status
}

/// How long the process waits, after the graceful stop, for blocking tasks still running.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Starts a dispatcher on this tokio runtime: validates the arguments, takes the work dir's
/// lock (one dispatcher per work dir), binds, replays the journal (if any) on the driver's
/// thread while already answering `/healthz` (and `/readyz` 503), and returns once it is
/// ready. Errors know their exit status ([`StartError::exit_code`]: 2 for bad arguments, 1
/// otherwise) and name the path that failed; a journal that cannot be replayed is an error,
/// and nothing is left serving.
pub async fn start(args: DispatcherArgs) -> Result<Running, StartError> {
    if args.fault_tolerant && args.work_dir.is_none() {
        return Err(StartError::FaultTolerantWithoutWorkDir);
    }
    let tokens = match &args.auth_tokens {
        None => None,
        Some(path) => Some(auth::Tokens::load(path)?),
    };
    let config = args.config();
    config.validate().map_err(StartError::Config)?;
    let data_roots = crate::tf::files::DataRoots::new(&args.data_roots, args.max_glob_entries)
        .map_err(StartError::DataRoot)?;
    // A footer is read, never a whole file: no file size limit applies, the footer's does.
    let footers = if args.data_roots.is_empty() {
        None
    } else {
        let roots = shardwise_worker::DataRoots::new(&args.data_roots, u64::MAX)
            .map_err(|e| StartError::DataRoot(e.to_string()))?;
        Some(std::sync::Arc::new(routes::Footers::new(
            shardwise_worker::columnar::RowCounts::new(
                roots,
                args.max_footer_bytes,
                args.max_footer_files,
            ),
            args.max_footer_reads,
        )))
    };
    let cluster = match &args.cluster_config {
        None => None,
        Some(path) => {
            Some(crate::kubernetes::live::LiveCluster::start(path, args.max_resolve_tasks).await?)
        }
    };
    // Own the work dir before anything reads it: a second dispatcher on it would acknowledge
    // records with the same ids as this one.
    let storage = match &args.work_dir {
        None => None,
        Some(dir) => Some(DirStorage::exclusive(dir)?),
    };
    let etcd = if args.etcd.is_empty() {
        None
    } else {
        let options = crate::etcd::Options {
            connect_timeout: Duration::from_millis(500),
            request_timeout: (args.leader_lease / 3)
                .clamp(Duration::from_millis(500), Duration::from_secs(2)),
        };
        Some(crate::etcd::Client::new(&args.etcd, options).map_err(StartError::Etcd)?)
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(crate::http::tls::server_config(cert, key)?),
        _ => None,
    };
    let https = tls.is_some();
    let (listener, local) = crate::http::listen(&args.host, args.port).await?;
    let advertise_url = advertise_url(&args, local)?;
    let fault_tolerant = config.fault_tolerant;
    let (driver, replica, started_rx) = if let Some(client) = etcd {
        let driver = DriverHandle::idle(args.compact_at_bytes);
        let status = std::sync::Arc::new(replica::ReplicaStatus::replica(advertise_url.clone()));
        let options = replica::ReplicaOptions {
            prefix: args.etcd_prefix.clone(),
            lease: args.leader_lease,
            advertise_url: advertise_url.clone(),
            config,
            incarnation: incarnation(),
        };
        let r = replica::Replica::start(options, client, driver.clone(), status.clone());
        (driver, Some((r, status)), None)
    } else {
        let (driver, started_rx) = start_single(&args, config, storage);
        (driver, None, Some(started_rx))
    };
    let status = match &replica {
        Some((_, status)) => status.clone(),
        None => std::sync::Arc::new(replica::ReplicaStatus::single(advertise_url)),
    };
    let pusher = std::sync::Arc::new(grpc::push::Pusher::new());
    let grpc = grpc::front(
        grpc::DispatcherGrpc::new(
            driver.clone(),
            DeploymentMode::tf(args.deployment_mode),
            pusher.clone(),
            std::sync::Arc::new(data_roots),
        ),
        args.limits(),
        tokens.clone(),
        grpc::budget::ReplyBudgets::new(
            usize::try_from(args.max_reply_bytes).unwrap_or(usize::MAX),
            usize::try_from(args.max_reply_bytes_per_connection).unwrap_or(usize::MAX),
        ),
    );
    let state = AppState {
        driver,
        replica: status,
        fault_tolerant,
        journal_mode: if !args.etcd.is_empty() {
            routes::JournalMode::Etcd
        } else if args.work_dir.is_some() {
            routes::JournalMode::WorkDir
        } else {
            routes::JournalMode::Memory
        },
        compact_at_bytes: args.compact_at_bytes,
        cluster,
        kube: Default::default(),
        max_resolve_tasks: args.max_resolve_tasks,
        routes: std::sync::Arc::new(metrics::RouteMetrics::for_document(&api_router().1)),
        pusher,
        footers,
    };
    let app = router(state, args.limits(), tokens);
    let requests = grpc::budget::ReplyBudgets::new(
        usize::try_from(args.max_request_bytes).unwrap_or(usize::MAX),
        usize::try_from(args.max_request_bytes_per_connection).unwrap_or(usize::MAX),
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let read_timeout = args.read_timeout;
    let replica = replica.map(|(r, _)| r);
    let task = tokio::spawn(async move {
        conn::serve(listener, app, Some(grpc), Some(requests), tls, read_timeout, async move {
            let _ = stop_rx.await;
        })
        .await;
        // A leader that stops hands over at once: it ends its term and revokes its lease.
        if let Some(r) = replica {
            r.stop().await;
        }
        0
    });
    let running = Running::new(local, local.to_string(), https, stop_tx, task);
    // A replica serves at once (GET /v1/leader says what it is); a single dispatcher is
    // ready once replay finished: the caller prints the listening line after this.
    let Some(started_rx) = started_rx else { return Ok(running) };
    let failure = match started_rx.await {
        Ok(None) => return Ok(running),
        Ok(Some(e)) => StartError::Recovery(e),
        Err(_) => StartError::RecoveryLost,
    };
    running.stop().await;
    Err(failure)
}

/// Starts a single dispatcher (in memory, or on its work dir): replay runs on a thread of its
/// own; the receiver answers when it is done.
fn start_single(
    args: &DispatcherArgs,
    config: DispatcherConfig,
    storage: Option<DirStorage>,
) -> (DriverHandle, tokio::sync::oneshot::Receiver<Option<StartupError>>) {
    let work_dir = args.work_dir.clone();
    let inc = incarnation();
    let startup: Startup = Box::new(move || {
        let t = now();
        let (Some(storage), Some(dir)) = (storage, work_dir) else {
            return Ok((Dispatcher::new(config, inc, t)?, None));
        };
        let (journal, replay) = Journal::open(storage, config.fault_tolerant)?;
        for w in &replay.warnings {
            tracing::warn!("{w}");
            eprintln!("shardwise dispatcher: warning: {w}");
        }
        let d = Dispatcher::recover(config, inc, t, &replay.updates)?;
        println!(
            "shardwise dispatcher replayed {} records from {} segments in {}",
            replay.updates.len(),
            replay.segments,
            dir.display()
        );
        let sink: Box<dyn JournalWriter> = Box::new(journal);
        Ok((d, Some(sink)))
    });
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<Option<StartupError>>();
    let driver = DriverHandle::spawn_with(startup, args.compact_at_bytes, move |err| {
        let _ = started_tx.send(err);
    });
    (driver, started_rx)
}

/// `--advertise-url`, or `http://<--host>:<bound port>` (refused for a wildcard host).
fn advertise_url(args: &DispatcherArgs, local: std::net::SocketAddr) -> Result<String, StartError> {
    if let Some(url) = &args.advertise_url {
        return crate::http::client::base_url(url)
            .map_err(|e| StartError::AdvertiseUrl(e.to_string()));
    }
    if local.ip().is_unspecified() {
        if args.etcd.is_empty() {
            return Ok(format!("{}://{local}", scheme(args)));
        }
        return Err(StartError::AdvertiseUrl(format!(
            "--host {} listens on every address: say which one other replicas and clients reach \
             this one at (e.g. --advertise-url http://10.0.0.5:{})",
            args.host,
            local.port()
        )));
    }
    Ok(format!("{}://{local}", scheme(args)))
}

/// `https` when the dispatcher serves TLS, else `http`.
fn scheme(args: &DispatcherArgs) -> &'static str {
    if args.tls_cert.is_some() { "https" } else { "http" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_units_and_are_positive() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        for bad in ["", "5", "-5s", "0s", "5x", "ms", "1.5s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_gc_timeout("never").unwrap(), GcTimeout(None));
    }

    /// A start that fails is a typed error that knows its exit status and its stderr line.
    #[tokio::test]
    async fn start_errors_render_as_exit_status_and_line() {
        let args = DispatcherArgs { fault_tolerant: true, port: 0, ..DispatcherArgs::default() };
        let e = start(args).await.unwrap_err();
        assert!(matches!(e, StartError::FaultTolerantWithoutWorkDir), "{e}");
        assert_eq!(e.exit_code(), 2);
        assert_eq!(e.to_string(), "--fault-tolerant needs --work-dir (where the journal is kept)");
        let args = DispatcherArgs {
            auth_tokens: Some(PathBuf::from("/nonexistent/tokens.json")),
            port: 0,
            ..DispatcherArgs::default()
        };
        let e = start(args).await.unwrap_err();
        assert!(matches!(e, StartError::AuthTokens(auth::TokenFileError::Read { .. })), "{e}");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().starts_with("cannot read --auth-tokens /nonexistent/tokens.json: "));
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let e = start(DispatcherArgs { port, ..DispatcherArgs::default() }).await.unwrap_err();
        assert!(matches!(e, StartError::Listen(_)), "{e}");
        assert_eq!(e.exit_code(), 1);
        assert!(e.to_string().starts_with(&format!("cannot listen on 127.0.0.1:{port}: ")), "{e}");
    }

    #[test]
    fn default_args_are_the_command_lines() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: DispatcherArgs,
        }
        let parsed = <Cli as clap::Parser>::try_parse_from(["dispatcher"]).unwrap().args;
        assert_eq!(format!("{parsed:?}"), format!("{:?}", DispatcherArgs::default()));
    }
}
