//! Jobs and iterations: `POST /v1/jobs`, `GET /v1/jobs/{job_id}`,
//! `POST /v1/jobs/{job_id}/iterations`.

use axum::extract::{Path, State};
use shardwise_core::dispatch::wire::{
    CreateIteration, CreateJob, IterationLease, JobCreated, JobInfo,
};
use shardwise_core::dispatch::{GetJob, JobId};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::http::{ApiResult, Body, ok, parse_id};

/// This resource's routes (each with its part of the OpenAPI document).
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_job))
        .routes(routes!(get_job))
        .routes(routes!(create_iteration))
}

/// `POST /v1/jobs`.
#[utoipa::path(
    post,
    path = "/v1/jobs",
    tag = "jobs",
    operation_id = "create_job",
    summary = "Get-or-create a job (named jobs are shared).",
    request_body = CreateJob,
    responses((status = 200, description = "The job id.", body = JobCreated))
)]
pub(super) async fn create_job(State(s): State<AppState>, Body(req): Body<CreateJob>) -> ApiResult {
    ok(&s.driver.call(req).await?)
}

/// `GET /v1/jobs/{job_id}`.
#[utoipa::path(
    get,
    path = "/v1/jobs/{job_id}",
    tag = "jobs",
    operation_id = "get_job",
    summary = "A job and its iterations.",
    params(("job_id" = String, Path, description = "The job id.", pattern = "^[0-9]{1,19}$")),
    responses((status = 200, description = "The job.", body = JobInfo))
)]
pub(super) async fn get_job(State(s): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id: JobId = parse_id("job_id", &raw)?;
    ok(&s.driver.call(GetJob { job_id: id }).await?)
}

/// `POST /v1/jobs/{job_id}/iterations`.
#[utoipa::path(
    post,
    path = "/v1/jobs/{job_id}/iterations",
    tag = "jobs",
    operation_id = "create_iteration",
    summary = "Get-or-create the iteration `(job, repetition)` and take a client lease on it.",
    params(("job_id" = String, Path, description = "The job id.", pattern = "^[0-9]{1,19}$")),
    request_body = CreateIteration,
    responses((status = 200, description = "The iteration and this client's lease.", body = IterationLease))
)]
pub(super) async fn create_iteration(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Body(req): Body<CreateIteration>,
) -> ApiResult {
    let id: JobId = parse_id("job_id", &raw)?;
    let lease = s.driver.call((id, req)).await?;
    // An iteration of a TensorFlow dataset made tasks for TensorFlow workers: tell them now.
    s.pusher.push(shardwise_core::tensorflow::convert::pushed_tasks(&lease.pushed_tasks));
    ok(&lease)
}
