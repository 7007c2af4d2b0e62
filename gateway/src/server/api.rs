//! The v1 REST handlers: parse, call the dispatcher actor, map errors through the one table.

use std::sync::atomic::Ordering;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use shardwise_core::dispatch::dispatcher::{
    ClientHeartbeat, CreateIteration, CreateJob, GetSplits, RegisterDataset, WorkerHeartbeat,
    WorkerUpdate,
};
use shardwise_core::dispatch::{ClientId, DispatchError, IterationId, JobId, TaskId};

use super::actor::Actor;
use crate::problem::{PROBLEM_JSON, Problem};

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The dispatcher actor.
    pub actor: Actor,
    /// Fault-tolerant mode.
    pub fault_tolerant: bool,
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        let body = serde_json::to_vec(&self).unwrap_or_default();
        (status, headers, body).into_response()
    }
}

/// A dispatcher error as a problem.
pub fn problem_of(e: &DispatchError) -> Problem {
    Problem::new(e.code(), e.detail())
}

/// A JSON body: any JSON media type (or none), decoded strictly (unknown fields and
/// duplicate keys are refused), every rejection a problem.
#[derive(Debug)]
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
            let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
            let essence = ct.split(';').next().unwrap_or("").trim();
            let json = essence == "application/json"
                || (essence.starts_with("application/") && essence.ends_with("+json"));
            if !json {
                let mut p = Problem::new(
                    "INVALID_ARGUMENT",
                    format!(
                        "the request body must be JSON (Content-Type: application/json), not {essence:?}"
                    ),
                );
                p.status = 415;
                p.title = "Unsupported media type".into();
                return Err(p);
            }
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            let status = e.status();
            let mut p = Problem::new("INVALID_ARGUMENT", e.body_text());
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                p = Problem::new("RESOURCE_EXHAUSTED", "the request body is too large");
                p.status = 413;
            }
            p
        })?;
        let text = if bytes.is_empty() { &b"{}"[..] } else { &bytes[..] };
        shardwise_core::json::from_slice_strict(text)
            .map(Body)
            .map_err(|e| Problem::new("INVALID_ARGUMENT", format!("invalid request body: {e}")))
    }
}

fn parse_id<T: std::str::FromStr<Err = String>>(name: &str, raw: &str) -> Result<T, Problem> {
    raw.parse::<T>().map_err(|e| Problem::new("INVALID_ARGUMENT", format!("{name}: {e}")))
}

type ApiResult = Result<Response, Problem>;

fn ok<T: Serialize>(v: &T) -> ApiResult {
    Ok(Json(serde_json::to_value(v).map_err(|e| Problem::new("INTERNAL", e.to_string()))?)
        .into_response())
}

async fn run<R, F>(s: &AppState, f: F) -> Result<R, Problem>
where
    F: FnOnce(
            &mut shardwise_core::dispatch::Dispatcher,
            shardwise_core::dispatch::Millis,
        ) -> Result<R, DispatchError>
        + Send
        + 'static,
    R: Send + 'static,
{
    s.actor.call(f).await?.map_err(|e| problem_of(&e))
}

/// `GET /v1/version`.
pub async fn version(State(s): State<AppState>) -> ApiResult {
    ok(&json!({
        "version": shardwise_core::dispatch::dispatcher::PROTOCOL_VERSION,
        "incarnation": s.actor.incarnation(),
        "fault_tolerant": s.fault_tolerant,
    }))
}

/// `POST /v1/workers/heartbeat`.
pub async fn worker_heartbeat(
    State(s): State<AppState>,
    Body(req): Body<WorkerHeartbeat>,
) -> ApiResult {
    ok(&run(&s, move |d, now| d.worker_heartbeat(now, &req)).await?)
}

/// `POST /v1/workers/update`.
pub async fn worker_update(State(s): State<AppState>, Body(req): Body<WorkerUpdate>) -> ApiResult {
    ok(&run(&s, move |d, now| d.worker_update(now, &req)).await?)
}

/// `GET /v1/workers`.
pub async fn workers(State(s): State<AppState>) -> ApiResult {
    let list = run(&s, |d, _| {
        Ok(d.workers()
            .map(|w| {
                json!({
                    "worker_address": w.address,
                    "tags": w.tags,
                    "tasks": w.tasks.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
                    "alive": w.alive,
                })
            })
            .collect::<Vec<_>>())
    })
    .await?;
    ok(&json!({ "workers": list }))
}

/// `POST /v1/datasets`.
pub async fn register_dataset(
    State(s): State<AppState>,
    Body(req): Body<RegisterDataset>,
) -> ApiResult {
    let id = run(&s, move |d, _| d.register_dataset(&req)).await?;
    ok(&json!({ "dataset_id": id, "incarnation": s.actor.incarnation() }))
}

/// `GET /v1/datasets/{dataset_id}`.
pub async fn get_dataset(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let v = run(&s, move |d, _| {
        let ds = d.dataset(&id)?;
        Ok(json!({ "dataset_id": ds.id, "dataset": ds.def, "metadata": ds.metadata }))
    })
    .await?;
    ok(&v)
}

/// `POST /v1/jobs`.
pub async fn create_job(State(s): State<AppState>, Body(req): Body<CreateJob>) -> ApiResult {
    let id = run(&s, move |d, _| d.create_job(&req)).await?;
    ok(&json!({ "job_id": id, "incarnation": s.actor.incarnation() }))
}

/// `GET /v1/jobs/{job_id}`.
pub async fn get_job(State(s): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id: JobId = parse_id("job_id", &raw)?;
    let v = run(&s, move |d, _| {
        let job = d.job(id)?;
        let iterations: Vec<Value> = d
            .state()
            .iterations
            .values()
            .filter(|i| i.job_id == id)
            .map(|i| {
                json!({
                    "iteration_id": i.id, "repetition": i.repetition, "finished": i.finished,
                    "garbage_collected": i.garbage_collected, "num_clients": i.num_clients,
                    "tasks": i.tasks,
                })
            })
            .collect();
        Ok(json!({
            "job_id": job.id, "job_name": job.name, "dataset_id": job.dataset_id,
            "processing_mode": {"sharding_policy": job.policy}, "num_consumers": job.num_consumers,
            "target_workers": job.target_workers, "cross_trainer_cache": job.cross_trainer_cache,
            "split_size": job.split_size, "iterations": iterations,
        }))
    })
    .await?;
    ok(&v)
}

/// `POST /v1/jobs/{job_id}/iterations`.
pub async fn create_iteration(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Body(req): Body<CreateIteration>,
) -> ApiResult {
    let id: JobId = parse_id("job_id", &raw)?;
    ok(&run(&s, move |d, now| d.create_iteration(now, id, &req)).await?)
}

/// `POST /v1/clients/{client_id}/heartbeat`.
pub async fn client_heartbeat(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Body(req): Body<ClientHeartbeat>,
) -> ApiResult {
    let id: ClientId = parse_id("client_id", &raw)?;
    ok(&run(&s, move |d, now| d.client_heartbeat(now, id, &req)).await?)
}

/// `DELETE /v1/clients/{client_id}`.
pub async fn release_client(State(s): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id: ClientId = parse_id("client_id", &raw)?;
    run(&s, move |d, now| d.release_client(now, id)).await?;
    ok(&json!({ "released": true, "incarnation": s.actor.incarnation() }))
}

/// `POST /v1/iterations/{iteration_id}/splits`.
pub async fn get_splits(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Body(req): Body<GetSplits>,
) -> ApiResult {
    let id: IterationId = parse_id("iteration_id", &raw)?;
    ok(&run(&s, move |d, now| d.get_splits(now, id, &req)).await?)
}

/// Body of maybe-remove.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaybeRemove {
    consumer_index: u64,
    round: u64,
}

/// `POST /v1/tasks/{task_id}/maybe-remove`.
pub async fn maybe_remove(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Body(req): Body<MaybeRemove>,
) -> ApiResult {
    let id: TaskId = parse_id("task_id", &raw)?;
    let removed =
        run(&s, move |d, _| d.maybe_remove_task(id, req.consumer_index, req.round)).await?;
    ok(&json!({ "removed": removed, "incarnation": s.actor.incarnation() }))
}

/// `POST /v1/cluster/resolve`.
pub async fn resolve(Body(req): Body<Value>) -> ApiResult {
    let text = req.to_string();
    let outcome = tokio::task::spawn_blocking(move || crate::resolve::resolve_text(&text))
        .await
        .map_err(|e| Problem::new("INTERNAL", e.to_string()))?;
    if outcome.exit_code == 0 {
        Ok(Json(outcome.json).into_response())
    } else {
        let p: Problem = serde_json::from_value(outcome.json)
            .unwrap_or_else(|e| Problem::new("INTERNAL", e.to_string()));
        Err(p)
    }
}

/// `GET /healthz`: the process is up.
pub async fn healthz() -> ApiResult {
    ok(&json!({ "status": "ok" }))
}

/// `GET /readyz`: replay finished and the journal is writable.
pub async fn readyz(State(s): State<AppState>) -> ApiResult {
    if s.actor.is_ready() {
        ok(&json!({ "status": "ready", "incarnation": s.actor.incarnation() }))
    } else {
        Err(Problem::new("UNAVAILABLE", "the dispatcher is replaying its journal"))
    }
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(State(s): State<AppState>) -> Response {
    let st = &s.actor.stats;
    let gauges = if s.actor.is_ready() {
        s.actor
            .call(|d, _| {
                let st = d.state();
                let splits: u64 = st
                    .iterations
                    .values()
                    .filter_map(|i| i.splits.as_ref())
                    .map(|x| x.handed_out)
                    .sum();
                (
                    st.workers.values().filter(|w| w.alive).count(),
                    st.iterations.values().filter(|i| !i.finished).count(),
                    splits,
                )
            })
            .await
            .ok()
    } else {
        None
    };
    let mut out = String::new();
    let mut line = |name: &str, help: &str, kind: &str, v: u64| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"));
    };
    line(
        "shardwise_requests_total",
        "Dispatcher requests handled.",
        "counter",
        st.requests.load(Ordering::Relaxed),
    );
    line(
        "shardwise_journal_commits_total",
        "Journal commits (one fsync each in fault-tolerant mode).",
        "counter",
        st.commits.load(Ordering::Relaxed),
    );
    line(
        "shardwise_journal_records_total",
        "Journal records written.",
        "counter",
        st.records.load(Ordering::Relaxed),
    );
    line(
        "shardwise_journal_commit_seconds_total",
        "Time spent committing the journal.",
        "counter",
        st.commit_micros.load(Ordering::Relaxed) / 1_000_000,
    );
    if let Some((workers, iterations, splits)) = gauges {
        line(
            "shardwise_workers_alive",
            "Registered workers that are not lost.",
            "gauge",
            workers as u64,
        );
        line(
            "shardwise_iterations_open",
            "Iterations that are not finished.",
            "gauge",
            iterations as u64,
        );
        line("shardwise_splits_handed_out_total", "DYNAMIC splits handed out.", "counter", splits);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// Unknown routes.
pub async fn not_found(uri: axum::http::Uri) -> Problem {
    Problem::new("NOT_FOUND", format!("no route for {}", uri.path()))
}
