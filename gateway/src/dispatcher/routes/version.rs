//! `GET /v1/version`: the protocol version, incarnation and mode.

use axum::extract::State;
use shardwise_core::dispatch::GetVersion;
use shardwise_core::dispatch::wire::VersionInfo;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::dispatcher::replica::LeaderReport;
use crate::http::{ApiResult, ok};

/// This resource's routes (each with its part of the OpenAPI document).
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(version)).routes(routes!(leader))
}

/// `GET /v1/leader`: answered by every replica itself (never redirected).
#[utoipa::path(
    get,
    path = "/v1/leader",
    tag = "dispatcher",
    operation_id = "leader",
    summary = "Who leads: this replica's role, the leader's URL and its term.",
    description = "A dispatcher replicated on etcd (`--etcd`) has one leader, elected with an \
        etcd lease; the other replicas follow and redirect API calls to it (307). The term is \
        the etcd revision at which the leader was elected: it grows with every election. A \
        single dispatcher reports `replication: none`, itself as leader, term 0.",
    responses((status = 200, description = "The leadership as this replica knows it.", body = LeaderReport))
)]
pub(super) async fn leader(State(s): State<AppState>) -> ApiResult {
    ok(&s.replica.report())
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
