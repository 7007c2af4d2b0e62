//! The HTTP kit every Shardwise server shares, the dispatcher's and the worker's:
//! problem+json answers ([`problem`]), the front services around a router ([`front`],
//! [`common_layers`]), the accept loop with bounded read times ([`conn`]), bearer tokens
//! ([`auth`]), request limits ([`limit`]), the budgets of bytes held per connection
//! ([`budget`]), answers to bodies refused unread that the client still reads ([`linger`]),
//! Prometheus metrics ([`metrics`]), the strict JSON body extractor and path ids
//! ([`body`]), the served OpenAPI document ([`docs`]), the status page ([`ui`]), the element
//! route's wire types ([`elements`]), TLS ([`tls`]), durations ([`parse_duration`]), logging
//! ([`init_logging`]) and a running server's handle ([`Running`]).
//!
//! What the Rust client needs too lives in `shardwise-client` and is re-exported here under
//! the paths the servers use: [`problem`] (with the `axum` and `openapi` features this crate
//! turns on, a problem is an axum answer and has its schema), [`client`] (that crate's `rest`,
//! the REST client with failover), and the client half of [`tls`].
//!
//! It depends on `shardwise-core` and `shardwise-client` and on no server: the dispatcher
//! (in `shardwise-gateway`) and the worker (`shardwise-worker`) are built on it. It has no
//! gRPC stack (the dispatcher hands [`conn::serve`] its gRPC service through
//! [`conn::GrpcService`]), no Kubernetes client and no command line parser (a test reads its
//! manifest).
#![forbid(unsafe_code)]
// Handlers return `Result<_, Problem>`; a problem is built at most once per request, on the
// error path, so its size (an RFC 9457 object with optional members) costs nothing that matters.
#![allow(clippy::result_large_err)]

pub mod auth;
pub mod body;
pub mod budget;
pub mod conn;
pub mod docs;
pub mod elements;
pub mod front;
pub mod limit;
pub mod linger;
pub mod metrics;
pub mod tls;
pub mod ui;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;

/// RFC 9457 problem details (`shardwise_client::problem`).
pub use shardwise_client::problem;
/// JSON over HTTP to a dispatcher or a worker, with failover between dispatcher replicas
/// (`shardwise_client::rest`).
pub use shardwise_client::rest as client;

pub use self::body::{ApiResult, Body, Health, RequestBody, healthz, not_found, ok, parse_id};
pub use self::problem::{Code, Problem};

/// A server address that cannot be listened on (the process does not start).
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct ListenError {
    /// `host:port` as given.
    pub addr: String,
    /// Why.
    pub source: std::io::Error,
}

/// Binds `host:port` (port 0: any free port): the listener and the address it is bound to.
pub async fn listen(
    host: &str,
    port: u16,
) -> Result<(tokio::net::TcpListener, SocketAddr), ListenError> {
    let addr = format!("{host}:{port}");
    let bound = match tokio::net::TcpListener::bind(&addr).await {
        Ok(listener) => listener.local_addr().map(|local| (listener, local)),
        Err(e) => Err(e),
    };
    bound.map_err(|source| ListenError { addr, source })
}

/// Why a duration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// No number first.
    #[error("{0:?} is not a duration: use a whole number with a unit, e.g. 500ms, 30s, 5m, 2h")]
    NotADuration(String),
    /// Too many milliseconds for a `u64`.
    #[error("{0:?} is out of range")]
    OutOfRange(String),
    /// A number without a unit.
    #[error("{text:?} has no unit: write e.g. {n}s or {n}ms")]
    NoUnit {
        /// What was given.
        text: String,
        /// Its number.
        n: u64,
    },
    /// A unit other than `ms`, `s`, `m`, `h`.
    #[error("unknown duration unit {unit:?} in {text:?}: use ms, s, m or h")]
    UnknownUnit {
        /// The unit.
        unit: String,
        /// What was given.
        text: String,
    },
    /// Zero.
    #[error("{0:?} must be positive")]
    Zero(String),
}

/// Parses a duration with a unit: `500ms`, `30s`, `5m`, `2h`.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(DurationError::NotADuration(s.to_owned()));
    }
    let n: u64 = num.parse().map_err(|_| DurationError::OutOfRange(s.to_owned()))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "" => return Err(DurationError::NoUnit { text: s.to_owned(), n }),
        other => {
            return Err(DurationError::UnknownUnit { unit: other.to_owned(), text: s.to_owned() });
        }
    }
    .ok_or_else(|| DurationError::OutOfRange(s.to_owned()))?;
    if ms == 0 {
        return Err(DurationError::Zero(s.to_owned()));
    }
    Ok(Duration::from_millis(ms))
}

/// A process-unique id: the start time and the process id, in hex.
pub fn incarnation() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}-{:x}", nanos, std::process::id())
}

/// What every Shardwise server has around its router: problem+json for wrong methods, and
/// the front layer of [`front`] (request ids kept from `x-request-id` or generated, logged and
/// echoed; the request span; the request limits of [`limit`]; the body limit; a 30 s timeout;
/// caught panics as `INTERNAL` problems; a problem body for answers without one).
pub fn common_layers<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    who: &'static str,
    limits: limit::LimitConfig,
) -> Router<S> {
    router
        .method_not_allowed_fallback(method_not_allowed)
        .layer(front::FrontLayer::new(who, limits))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Problem {
    Problem::new(Code::InvalidArgument, format!("{method} is not allowed on {}", uri.path()))
        .with_status(405, "Method not allowed")
}

/// The log filter without `SHARDWISE_LOG`: Shardwise's own events at `info` (start-up,
/// leadership, workers registered and lost, compactions, garbage collection, refusals), other
/// crates' at `warn`. Per-request logs are `debug` (this crate's `front`). A target matches
/// by prefix, so `shardwise` alone covers the command and every `shardwise_*` crate; the
/// crates are named as well, to be found here.
pub const DEFAULT_LOG_FILTER: &str = "warn,shardwise=info,shardwise_gateway=info,\
                                      shardwise_worker=info,shardwise_http=info,\
                                      shardwise_client=info,shardwise_journal=info";

/// Logs on stderr; `SHARDWISE_LOG` (e.g. `debug`, `warn,shardwise=debug`) replaces
/// [`DEFAULT_LOG_FILTER`]. Colour (ANSI escapes) only when stderr is a terminal: a log file or
/// collector gets plain text.
pub fn init_logging() {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("SHARDWISE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// A server running on this process's tokio runtime: `shardwise dispatcher` or `shardwise
/// worker` started with `dispatcher::start` or `worker::start`. Dropping it stops the server.
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    advertised: String,
    https: bool,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<i32>,
}

impl Running {
    pub fn new(
        addr: SocketAddr,
        advertised: String,
        https: bool,
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<i32>,
    ) -> Running {
        Running { addr, advertised, https, stop: Some(stop), task }
    }

    /// The bound socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://` (`https://` when it serves TLS) and the address others use to reach it (for
    /// a worker, its advertised address).
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.advertised)
    }

    /// Stops it gracefully (in-flight requests finish) and returns its exit status.
    pub async fn stop(mut self) -> i32 {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await.unwrap_or(1)
    }

    /// Serves until SIGINT/SIGTERM (then stops gracefully) or until it stops by itself;
    /// returns the exit status.
    pub async fn run_until_signal(self) -> i32 {
        self.run_until(shutdown_signal()).await
    }

    /// Serves until `stop` resolves (then stops gracefully) or until it stops by itself;
    /// returns the exit status.
    pub async fn run_until(mut self, stop: impl std::future::Future<Output = ()>) -> i32 {
        tokio::select! {
            code = &mut self.task => code.unwrap_or(1),
            () = stop => self.stop().await,
        }
    }
}

pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
