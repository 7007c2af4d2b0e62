//! Datasets: `POST /v1/datasets` (get-or-register), `GET /v1/datasets/{dataset_id}`,
//! `DELETE /v1/datasets/{dataset_id}`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::{Path, State};
use shardwise_core::dataset::{FileSplit, SourceDef};
use shardwise_core::dispatch::wire::{
    DatasetDeleted, DatasetInfo, DatasetRegistered, RegisterDataset,
};
use shardwise_core::dispatch::{DeleteDataset, GetDataset};
use shardwise_core::echo::echo;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::http::{ApiResult, Body, Code, Problem, ok};

/// This resource's routes (each with its part of the OpenAPI document).
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(register_dataset))
        .routes(routes!(get_dataset, delete_dataset))
}

/// `POST /v1/datasets`.
#[utoipa::path(
    post,
    path = "/v1/datasets",
    tag = "datasets",
    operation_id = "register_dataset",
    summary = "Get-or-register a dataset.",
    request_body = RegisterDataset,
    responses((status = 200, description = "The dataset id.", body = DatasetRegistered))
)]
pub(super) async fn register_dataset(
    State(s): State<AppState>,
    Body(mut req): Body<RegisterDataset>,
) -> ApiResult {
    count_rows(&s, &mut req).await?;
    ok(&s.driver.call(req).await?)
}

/// How long a registration waits for a turn to read footers (`--max-footer-reads`): well within
/// the 30 s every request is given, so that the answer says why.
const FOOTER_TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Fills in the row counts of a Parquet source split by rows from its files' footers, read
/// beneath `--data-root` (without a root the core refuses the split, saying why).
///
/// At most `--max-footer-reads` registrations read footers at once; the others wait for a
/// turn (a burst of trainers registering one dataset then finds the first one's counts
/// remembered) and are answered `UNAVAILABLE` after 20 s. A registration whose caller goes
/// away stops reading at its next file.
async fn count_rows(s: &AppState, req: &mut RegisterDataset) -> Result<(), Problem> {
    let (SourceDef::Files(files), Some(footers)) = (&mut req.dataset.source, &s.footers) else {
        return Ok(());
    };
    if files.split != FileSplit::Rows || files.rows.is_some() {
        return Ok(());
    }
    let turn =
        tokio::time::timeout(FOOTER_TURN_WAIT, Arc::clone(&footers.turns).acquire_owned()).await;
    let Ok(Ok(turn)) = turn else {
        return Err(Problem::new(
            Code::Unavailable,
            format!(
                "{} registrations are reading Parquet footers (--max-footer-reads); this one \
                 waited {} s for its turn: retry",
                footers.reads,
                FOOTER_TURN_WAIT.as_secs()
            ),
        ));
    };
    // Dropped with this future when the caller goes away: the reader stops at its next file.
    let cancel = Cancel(Arc::new(AtomicBool::new(false)));
    let (footers, paths, flag) = (Arc::clone(footers), files.paths.clone(), Arc::clone(&cancel.0));
    let counted = tokio::task::spawn_blocking(move || {
        let counted = footers.counts.count(&paths, &flag);
        drop(turn);
        counted
    })
    .await
    .map_err(|e| Problem::new(Code::Internal, format!("the footer reader stopped: {e}")))?;
    drop(cancel);
    files.rows = Some(counted.map_err(|p| {
        Problem::new(p.code, format!("counting the rows of the parquet files: {}", p.detail))
    })?);
    Ok(())
}

/// Sets its flag when dropped.
struct Cancel(Arc<AtomicBool>);

impl Drop for Cancel {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// `GET /v1/datasets/{dataset_id}`.
#[utoipa::path(
    get,
    path = "/v1/datasets/{dataset_id}",
    tag = "datasets",
    operation_id = "get_dataset",
    summary = "A registered dataset.",
    params(("dataset_id" = String, Path, description = "The dataset id.", pattern = "^[A-Za-z0-9_.=/-]{1,256}$")),
    responses((status = 200, description = "The dataset.", body = DatasetInfo))
)]
pub(super) async fn get_dataset(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult {
    check_dataset_id(&id)?;
    ok(&s.driver.call(GetDataset { dataset_id: id }).await?)
}

/// `DELETE /v1/datasets/{dataset_id}`.
#[utoipa::path(
    delete,
    path = "/v1/datasets/{dataset_id}",
    tag = "datasets",
    operation_id = "delete_dataset",
    summary = "Delete a dataset no job with iterations uses.",
    description = "Frees its bytes from `--max-dataset-bytes` and its deduplication entry \
                   (registering the same definition again gets a new id). Jobs without \
                   iterations that name it go with it. 404 `NOT_FOUND` for an unknown id, \
                   409 `FAILED_PRECONDITION` while a job with iterations (not yet \
                   garbage-collected) uses it.",
    params(("dataset_id" = String, Path, description = "The dataset id.", pattern = "^[A-Za-z0-9_.=/-]{1,256}$")),
    responses(
        (status = 200, description = "Deleted.", body = DatasetDeleted),
        (status = 404, description = "No such dataset (`NOT_FOUND`).", body = Problem,
         content_type = "application/problem+json"),
        (status = 409, description = "A job with iterations uses it (`FAILED_PRECONDITION`).",
         body = Problem, content_type = "application/problem+json"),
    )
)]
pub(super) async fn delete_dataset(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult {
    check_dataset_id(&id)?;
    ok(&s.driver.call(DeleteDataset { dataset_id: id }).await?)
}

/// What registration accepts as an id: anything else cannot name a dataset, and is not
/// echoed back at length.
fn check_dataset_id(id: &str) -> Result<(), Problem> {
    let syntax = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'=' | b'/');
    if id.is_empty() || id.len() > 256 || !id.bytes().all(syntax) {
        return Err(Problem::new(
            Code::InvalidArgument,
            format!("dataset_id: {} is not 1 to 256 characters of A-Z a-z 0-9 - _ . = /", echo(id)),
        ));
    }
    Ok(())
}
