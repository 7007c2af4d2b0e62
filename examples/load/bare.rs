//! The load generator's yardstick: a bare axum server with the dispatcher's two simplest
//! shapes of call, each doing trivial work, and nothing else (no middleware, no state).
//!
//! * `GET /healthz` (and `/readyz`, which the generator polls before it starts): a small JSON
//!   object.
//! * `POST /v1/workers/heartbeat`: decodes a worker heartbeat body with `axum::Json` and
//!   answers the steady-state reply (no task to start or delete), so the generator's
//!   `worker_hb` workload runs against it unchanged.
//!
//! Served by `axum::serve` on a multi-threaded tokio runtime with one thread per CPU (what
//! `shardwise dispatcher` runs by default) and `TCP_NODELAY`, as the dispatcher sets it. What
//! the dispatcher spends per call beyond this server is the cost of its own front (layers,
//! body handling, routing of a larger table) and of its state machine.

use axum::Json;
use axum::Router;
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};

/// What the load generator's `worker_hb` workload sends.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Heartbeat {
    worker_address: String,
    #[serde(default)]
    current_tasks: Vec<u64>,
}

/// The steady-state heartbeat reply: `"new_tasks":[]` and `"tasks_to_delete":[]`.
#[derive(Debug, Serialize)]
struct HeartbeatReply {
    new_tasks: Vec<u64>,
    tasks_to_delete: Vec<u64>,
    /// The trivial work: how many tasks the worker reported.
    current: usize,
}

#[derive(Debug, Serialize)]
struct Health {
    status: &'static str,
}

async fn health() -> Json<Health> {
    Json(Health { status: "ok" })
}

async fn heartbeat(Json(hb): Json<Heartbeat>) -> Json<HeartbeatReply> {
    let current = if hb.worker_address.is_empty() { 0 } else { hb.current_tasks.len() };
    Json(HeartbeatReply { new_tasks: Vec::new(), tasks_to_delete: Vec::new(), current })
}

/// The routes.
pub fn router() -> Router {
    Router::new()
        .route("/healthz", get(health))
        .route("/readyz", get(health))
        .route("/v1/workers/heartbeat", post(heartbeat))
}

/// Serves [`router`] on `listener` (with `TCP_NODELAY`) until the process ends.
pub async fn serve(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router()).await
}
