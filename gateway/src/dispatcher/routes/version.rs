//! `GET /v1/version`: the protocol version, incarnation and mode.

use axum::extract::State;
use shardwise_core::dispatch::GetVersion;
use shardwise_core::dispatch::wire::VersionInfo;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::http::{ApiResult, ok};

/// This resource's routes (each with its part of the OpenAPI document).
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(version))
}

/// `GET /v1/version`.
#[utoipa::path(
    get,
    path = "/v1/version",
    tag = "dispatcher",
    operation_id = "version",
    summary = "The dispatcher's protocol version, incarnation and mode.",
    responses((status = 200, description = "Version information.", body = VersionInfo))
)]
pub(super) async fn version(State(s): State<AppState>) -> ApiResult {
    ok(&s.driver.call(GetVersion).await?)
}
