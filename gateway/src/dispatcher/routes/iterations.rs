//! Get-split (DYNAMIC): `POST /v1/iterations/{iteration_id}/splits`.

use axum::extract::{Path, State};
use shardwise_core::dispatch::IterationId;
use shardwise_core::dispatch::wire::{GetSplits, SplitsReply};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{AppState, worker_address};
use crate::http::{ApiResult, Body, ok, parse_id};

/// This resource's routes (each with its part of the OpenAPI document).
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_splits))
}

/// `POST /v1/iterations/{iteration_id}/splits`.
#[utoipa::path(
    post,
    path = "/v1/iterations/{iteration_id}/splits",
    tag = "workers",
    operation_id = "get_splits",
    summary = "Get-split (DYNAMIC): acknowledge finished splits and get more.",
    params(("iteration_id" = String, Path, description = "The iteration id.", pattern = "^[0-9]{1,19}$")),
    request_body = GetSplits,
    responses((status = 200, description = "Splits, or the end of the repetition, or a retry hint.", body = SplitsReply))
)]
pub(super) async fn get_splits(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Body(req): Body<GetSplits>,
) -> ApiResult {
    let id: IterationId = parse_id("iteration_id", &raw)?;
    worker_address(&req.worker_address)?;
    ok(&s.driver.call((id, req)).await?)
}
