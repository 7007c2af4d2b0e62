//! Coordinated reads: `POST /v1/tasks/{task_id}/maybe-remove`.

use axum::extract::{Path, State};
use shardwise_core::dispatch::TaskId;
use shardwise_core::dispatch::wire::{MaybeRemove, Removed};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::http::{ApiResult, Body, ok, parse_id};

/// This resource's routes (each with its part of the OpenAPI document).
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(maybe_remove))
}

/// `POST /v1/tasks/{task_id}/maybe-remove`.
#[utoipa::path(
    post,
    path = "/v1/tasks/{task_id}/maybe-remove",
    tag = "clients",
    operation_id = "maybe_remove",
    summary = "Coordinated reads: vote to remove a task in a round.",
    params(("task_id" = String, Path, description = "The task id.", pattern = "^[0-9]{1,19}$")),
    request_body = MaybeRemove,
    responses((status = 200, description = "Whether the task is removed.", body = Removed))
)]
pub(super) async fn maybe_remove(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Body(req): Body<MaybeRemove>,
) -> ApiResult {
    let id: TaskId = parse_id("task_id", &raw)?;
    ok(&s.driver.call((id, req)).await?)
}
