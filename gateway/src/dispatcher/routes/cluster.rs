//! Cluster resolution: `POST /v1/cluster/resolve`, `GET /v1/cluster`.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::response::IntoResponse;
use serde_json::Value;
use shardwise_core::echo::{cap_quotes, echo};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::http::{ApiResult, Body, Code, Problem, ok, parse_duration};

/// This resource's routes (each with its part of the OpenAPI document).
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(resolve)).routes(routes!(get_cluster))
}

/// `POST /v1/cluster/resolve`.
#[utoipa::path(
    post,
    path = "/v1/cluster/resolve",
    tag = "cluster",
    operation_id = "resolve",
    summary = "Resolve a cluster (the `shardwise resolve` contract).",
    request_body(content = Object, description = "A resolve request.", content_type = "application/json"),
    responses((status = 200, description = "The resolved cluster, task, role and TF_CONFIG, and (when the request has `launch`) the task's PyTorch environment and JAX arguments.", body = Object))
)]
pub(super) async fn resolve(State(s): State<AppState>, Body(req): Body<Value>) -> ApiResult {
    let text = req.to_string();
    let outcome =
        crate::kubernetes::resolve::resolve_text(&text, &s.kube, s.max_resolve_tasks).await;
    if outcome.exit_code == 0 {
        Ok(Json(outcome.json).into_response())
    } else {
        let p: Problem = serde_json::from_value(outcome.json)
            .unwrap_or_else(|e| Problem::new(Code::Internal, e.to_string()));
        Err(p)
    }
}

/// The longest `GET /v1/cluster?wait=` honoured.
const MAX_CLUSTER_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `GET /v1/cluster`.
#[utoipa::path(
    get,
    path = "/v1/cluster",
    tag = "cluster",
    operation_id = "get_cluster",
    summary = "The cluster of `--cluster-config`, kept live, with its freshness.",
    description = "The resolve reply of the `--cluster-config` request plus `freshness`: whether \
        Kubernetes watches keep it live, whether it is stale (a watch is failing and the last \
        good membership is served) and for how long, and a `version` bumped on every change. \
        With `after=V`, waits until the version passes V, at most `wait` (default 30s, at most \
        60s), then answers with the current view.",
    params(
        ("after" = Option<u64>, Query, description = "Wait for a version greater than this."),
        ("wait" = Option<String>, Query, description = "How long to wait at most (`500ms`, `30s`; default 30s, at most 60s).")
    ),
    responses((status = 200, description = "The cluster and its freshness.", body = Object))
)]
pub(super) async fn get_cluster(State(s): State<AppState>, RawQuery(query): RawQuery) -> ApiResult {
    let Some(cluster) = &s.cluster else {
        return Err(Problem::new(
            Code::NotFound,
            "this dispatcher keeps no cluster: start it with --cluster-config FILE",
        ));
    };
    let mut after = None;
    let mut wait = std::time::Duration::from_secs(30);
    for pair in query.as_deref().unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "after" => {
                after = Some(v.parse::<u64>().map_err(|_| {
                    Problem::new(
                        Code::InvalidArgument,
                        format!("after must be a version number, not {}", echo(v)),
                    )
                })?);
            }
            "wait" => {
                wait = parse_duration(v)
                    .map_err(|e| {
                        Problem::new(
                            Code::InvalidArgument,
                            format!("wait: {}", cap_quotes(&e.to_string())),
                        )
                    })?
                    .min(MAX_CLUSTER_WAIT);
            }
            other => {
                return Err(Problem::new(
                    Code::InvalidArgument,
                    format!("unknown query parameter {} (expected after, wait)", echo(other)),
                ));
            }
        }
    }
    if let Some(after) = after {
        cluster.wait_past(after, wait).await;
    }
    let view = cluster.view().map_err(|e| Problem::from(&e))?;
    ok(&view)
}
