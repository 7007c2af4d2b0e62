//! The dispatcher's REST front: one file per resource, each with its handlers and their part
//! of the OpenAPI document; [`api_router`] merges them once. A handler parses (strictly, off
//! the dispatcher's lock), calls the [`DriverHandle`], and answers JSON or a problem.

mod clients;
mod cluster;
mod datasets;
mod health;
mod iterations;
mod jobs;
mod status;
mod tasks;
mod version;
mod workers;

use std::sync::Arc;

use axum::Router;
use shardwise_core::dispatch::address::check_worker_address;
use utoipa_axum::router::OpenApiRouter;

pub use self::status::{DispatcherStatus, JournalMode};
use super::core::DriverHandle;
use crate::http::metrics::RouteMetrics;
use crate::http::{Code, Problem};
use crate::kubernetes::live::LiveCluster;
use crate::kubernetes::resolve::KubeSlot;

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The dispatcher core behind its handle.
    pub driver: DriverHandle,
    /// Who leads (a single dispatcher always does).
    pub replica: Arc<super::replica::ReplicaStatus>,
    /// Fault-tolerant mode.
    pub fault_tolerant: bool,
    /// Where the journal lives (for `GET /v1/status`).
    pub journal_mode: JournalMode,
    /// `--compact-at-bytes`.
    pub compact_at_bytes: u64,
    /// `--cluster-config`'s live cluster.
    pub cluster: Option<Arc<LiveCluster>>,
    /// The Kubernetes API for resolve requests without inline pods.
    pub kube: Arc<KubeSlot>,
    /// `--max-resolve-tasks`.
    pub max_resolve_tasks: usize,
    /// Per-route request counters and latencies.
    pub routes: Arc<RouteMetrics>,
    /// Pushes new tasks of TensorFlow datasets to TensorFlow workers (`ProcessTask`), for
    /// REST and gRPC alike.
    pub pusher: Arc<super::grpc::push::Pusher>,
    /// `--data-root`, opened as a worker opens it: the dispatcher reads the row counts of a
    /// Parquet source split by rows from its files' footers (`None` without a root).
    pub footers: Option<Arc<Footers>>,
}

/// The footer reads of registrations (a Parquet source split by rows): the row counter (its
/// bounds and cache) and the turns of `--max-footer-reads`.
#[derive(Debug)]
pub struct Footers {
    pub(super) counts: shardwise_worker::columnar::RowCounts,
    pub(super) turns: Arc<tokio::sync::Semaphore>,
    pub(super) reads: usize,
}

impl Footers {
    /// `counts`, read by at most `reads` registrations at once.
    pub fn new(counts: shardwise_worker::columnar::RowCounts, reads: usize) -> Footers {
        Footers { counts, turns: Arc::new(tokio::sync::Semaphore::new(reads)), reads }
    }
}

/// The API routes and their part of the OpenAPI document (before state and layers): every
/// resource's routes, merged here once, in the document's order.
pub fn api_router() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    OpenApiRouter::new()
        .merge(version::routes())
        .merge(workers::routes())
        .merge(datasets::routes())
        .merge(jobs::routes())
        .merge(clients::routes())
        .merge(iterations::routes())
        .merge(tasks::routes())
        .merge(cluster::routes())
        .merge(health::routes())
        .merge(status::routes())
        .split_for_parts()
}

/// A worker address where one enters: `host:port`, else INVALID_ARGUMENT (checked off the
/// dispatcher's lock).
fn worker_address(addr: &str) -> Result<(), Problem> {
    check_worker_address(addr).map_err(|e| Problem::new(Code::InvalidArgument, e.to_string()))
}
