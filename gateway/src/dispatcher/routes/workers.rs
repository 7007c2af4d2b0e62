//! What workers call: `POST /v1/workers/heartbeat`, `POST /v1/workers/update`; and the
//! list of workers, `GET /v1/workers`.

use axum::extract::State;
use shardwise_core::dispatch::ListWorkers;
use shardwise_core::dispatch::address::check_worker_tags;
use shardwise_core::dispatch::wire::{
    WorkerHeartbeat, WorkerHeartbeatReply, WorkerUpdate, WorkerUpdateReply, WorkersList,
};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{AppState, worker_address};
use crate::http::{ApiResult, Body, Code, Problem, ok};

/// This resource's routes (each with its part of the OpenAPI document).
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(worker_heartbeat))
        .routes(routes!(worker_update))
        .routes(routes!(workers))
}

/// `POST /v1/workers/heartbeat`.
#[utoipa::path(
    post,
    path = "/v1/workers/heartbeat",
    tag = "workers",
    operation_id = "worker_heartbeat",
    summary = "Register (first call) or heartbeat a worker; answers the tasks it should start and stop.",
    request_body = WorkerHeartbeat,
    responses((status = 200, description = "Tasks to start and to delete.", body = WorkerHeartbeatReply))
)]
pub(super) async fn worker_heartbeat(
    State(s): State<AppState>,
    Body(mut req): Body<WorkerHeartbeat>,
) -> ApiResult {
    // The task list is a set: in ascending order it meets the dispatcher's fast path (one
    // probe) whatever order the worker sent it in. Sorted off the dispatcher's lock.
    req.current_tasks.sort_unstable();
    req.current_tasks.dedup();
    worker_address(&req.worker_address)?;
    check_worker_tags(&req.tags).map_err(|e| Problem::new(Code::InvalidArgument, e.to_string()))?;
    ok(&s.driver.call(req).await?)
}

/// `POST /v1/workers/update`.
#[utoipa::path(
    post,
    path = "/v1/workers/update",
    tag = "workers",
    operation_id = "worker_update",
    summary = "Report task progress; each entry is applied on its own.",
    request_body = WorkerUpdate,
    responses((status = 200, description = "Applied; unknown task ids are listed.", body = WorkerUpdateReply))
)]
pub(super) async fn worker_update(
    State(s): State<AppState>,
    Body(req): Body<WorkerUpdate>,
) -> ApiResult {
    worker_address(&req.worker_address)?;
    ok(&s.driver.call(req).await?)
}

/// `GET /v1/workers`.
#[utoipa::path(
    get,
    path = "/v1/workers",
    tag = "workers",
    operation_id = "workers",
    summary = "Every registered worker.",
    responses((status = 200, description = "The workers.", body = WorkersList))
)]
pub(super) async fn workers(State(s): State<AppState>) -> ApiResult {
    ok(&s.driver.call(ListWorkers).await?)
}
