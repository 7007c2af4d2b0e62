//! Liveness, readiness and metrics: `GET /healthz`, `GET /readyz`, `GET /metrics`.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use shardwise_core::dispatch::GetMetrics;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::dispatcher::replica::Role;
use crate::http::{ApiResult, Code, Health, Problem, ok};

/// This resource's routes (each with its part of the OpenAPI document).
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(crate::http::body::healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

/// `GET /readyz`: replay finished and the journal is writable.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    operation_id = "readyz",
    summary = "Readiness: the journal is replayed (and, replicated, this replica leads).",
    responses((status = 200, description = "Ready.", body = Health))
)]
pub(super) async fn readyz(State(s): State<AppState>) -> ApiResult {
    if s.driver.is_ready() {
        return ok(&Health { status: "ready".into() });
    }
    let detail = match s.replica.redirect().await {
        // A single dispatcher or the leader: replaying, or its journal could not be written.
        None => s.driver.unready_reason(),
        Some(Some(leader)) => format!("this replica follows; the leader is {leader}"),
        Some(None) => s.replica.no_leader_reason(),
    };
    Err(Problem::new(Code::Unavailable, detail))
}

/// `GET /metrics`: Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    operation_id = "metrics",
    summary = "Prometheus metrics (text format).",
    responses((status = 200, description = "Metrics.", body = String, content_type = "text/plain"))
)]
pub(super) async fn metrics(State(s): State<AppState>) -> Response {
    let st = &s.driver.stats;
    let gauges = if s.driver.is_ready() { s.driver.call(GetMetrics).await.ok() } else { None };
    let mut out = String::new();
    let line = |out: &mut String, name: &str, help: &str, kind: &str, v: u64| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"));
    };
    line(
        &mut out,
        "shardwise_requests_total",
        "Dispatcher requests handled.",
        "counter",
        st.requests.load(Ordering::Relaxed),
    );
    line(
        &mut out,
        "shardwise_journal_commits_total",
        "Journal commits (one fsync each in fault-tolerant mode).",
        "counter",
        st.commits.load(Ordering::Relaxed),
    );
    line(
        &mut out,
        "shardwise_journal_records_total",
        "Journal records written.",
        "counter",
        st.records.load(Ordering::Relaxed),
    );
    out.push_str(
        "# HELP shardwise_journal_commit_duration_seconds Journal commits (append, and fsync in \
         fault-tolerant mode), by duration.\n# TYPE shardwise_journal_commit_duration_seconds \
         histogram\n",
    );
    st.commit_latency.render(&mut out, "shardwise_journal_commit_duration_seconds", "");
    let leadership = s.replica.report();
    line(
        &mut out,
        "shardwise_leader",
        "1 when this dispatcher leads (a single dispatcher always does), else 0.",
        "gauge",
        u64::from(leadership.role == Role::Leader),
    );
    line(
        &mut out,
        "shardwise_leader_term",
        "The term of the leader this replica knows (the etcd revision of its election; 0 for a \
         single dispatcher or when no leader is known).",
        "gauge",
        leadership.leader.map_or(0, |l| l.term),
    );
    if let Some(figures) = gauges {
        line(
            &mut out,
            "shardwise_workers_alive",
            "Registered workers that are not lost.",
            "gauge",
            figures.workers_alive,
        );
        line(
            &mut out,
            "shardwise_iterations_open",
            "Iterations that are not finished.",
            "gauge",
            figures.iterations_open,
        );
        line(
            &mut out,
            "shardwise_splits_handed_out_total",
            "DYNAMIC splits handed out.",
            "counter",
            figures.splits_handed_out,
        );
    }
    s.routes.render(&mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
