//! What clients call while reading: `POST /v1/clients/{client_id}/heartbeat`,
//! `DELETE /v1/clients/{client_id}`.

use axum::extract::{Path, State};
use shardwise_core::dispatch::wire::{ClientHeartbeat, ClientHeartbeatReply, Released};
use shardwise_core::dispatch::{ClientId, ReleaseClient};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::http::{ApiResult, Body, ok, parse_id};

/// This resource's routes (each with its part of the OpenAPI document).
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(client_heartbeat)).routes(routes!(release_client))
}

/// `POST /v1/clients/{client_id}/heartbeat`.
#[utoipa::path(
    post,
    path = "/v1/clients/{client_id}/heartbeat",
    tag = "clients",
    operation_id = "client_heartbeat",
    summary = "Client heartbeat: the iteration's tasks and whether it is finished.",
    params(("client_id" = String, Path, description = "The client lease id.", pattern = "^[0-9]{1,19}$")),
    request_body = ClientHeartbeat,
    responses((status = 200, description = "Tasks and progress.", body = ClientHeartbeatReply))
)]
pub(super) async fn client_heartbeat(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Body(req): Body<ClientHeartbeat>,
) -> ApiResult {
    let id: ClientId = parse_id("client_id", &raw)?;
    ok(&s.driver.call((id, req)).await?)
}

/// `DELETE /v1/clients/{client_id}`.
#[utoipa::path(
    delete,
    path = "/v1/clients/{client_id}",
    tag = "clients",
    operation_id = "release_client",
    summary = "Release a client lease.",
    params(("client_id" = String, Path, description = "The client lease id.", pattern = "^[0-9]{1,19}$")),
    responses((status = 200, description = "Released.", body = Released))
)]
pub(super) async fn release_client(
    State(s): State<AppState>,
    Path(raw): Path<String>,
) -> ApiResult {
    let id: ClientId = parse_id("client_id", &raw)?;
    ok(&s.driver.call(ReleaseClient { client_id: id }).await?)
}
