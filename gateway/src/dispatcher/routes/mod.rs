//! The v1 REST handlers: parse, call the dispatcher actor, map errors through the one table.

use std::sync::atomic::Ordering;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use shardwise_core::dispatch::address::check_worker_address;
use shardwise_core::dispatch::wire::{
    ClientHeartbeat, ClientHeartbeatReply, CreateIteration, CreateJob, DatasetInfo,
    DatasetRegistered, GetSplits, IterationLease, JobCreated, JobInfo, MaybeRemove,
    RegisterDataset, Released, Removed, SplitsReply, VersionInfo, WorkerHeartbeat,
    WorkerHeartbeatReply, WorkerUpdate, WorkerUpdateReply, WorkersList,
};
use shardwise_core::dispatch::{
    ClientId, DispatchError, GetDataset, GetJob, GetMetrics, GetVersion, IterationId, JobId,
    ListWorkers, ReleaseClient, TaskId,
};
use shardwise_core::echo::{MAX_MESSAGE_BYTES, cap_quotes, echo};
use utoipa::ToSchema;

use super::actor::Actor;
use crate::problem::{PROBLEM_JSON, Problem};

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The dispatcher actor.
    pub actor: Actor,
    /// Fault-tolerant mode.
    pub fault_tolerant: bool,
    /// `--cluster-config`'s live cluster.
    pub cluster: Option<std::sync::Arc<crate::live_cluster::LiveCluster>>,
    /// The Kubernetes API for resolve requests without inline pods.
    pub kube: std::sync::Arc<crate::resolve::KubeSlot>,
    /// Per-route request counters and latencies.
    pub routes: std::sync::Arc<super::metrics::RouteMetrics>,
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        let mut problem = self;
        if problem.detail.len() > MAX_MESSAGE_BYTES {
            // The last line of defence: no answer grows with what it was sent.
            problem.detail = cap_quotes(&problem.detail);
        }
        let body = serde_json::to_vec(&problem).unwrap_or_default();
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

/// How a request type is decoded.
pub trait RequestBody: DeserializeOwned {
    /// serde's derived decoding of this type already refuses unknown and repeated fields (a
    /// struct with `deny_unknown_fields` all the way down and no free-form JSON inside), so it
    /// is decoded directly, without the strict pass over a `Value` tree first.
    const FLAT: bool = false;
}

impl RequestBody for WorkerHeartbeat {
    const FLAT: bool = true;
}
impl RequestBody for WorkerUpdate {
    const FLAT: bool = true;
}
impl RequestBody for ClientHeartbeat {
    const FLAT: bool = true;
}
impl RequestBody for GetSplits {
    const FLAT: bool = true;
}
impl RequestBody for MaybeRemove {
    const FLAT: bool = true;
}
impl RequestBody for RegisterDataset {}
impl RequestBody for CreateJob {}
impl RequestBody for CreateIteration {}
impl RequestBody for Value {}

impl<S: Send + Sync, T: RequestBody> FromRequest<S> for Body<T> {
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
                        "the request body must be JSON (Content-Type: application/json), not {}",
                        echo(essence)
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
        // Every body is an object: serde would take an array for a struct (`[1]` as
        // `{"repetition": 1}`).
        if let Some(first) = text.iter().find(|b| !b.is_ascii_whitespace())
            && *first != b'{'
        {
            let kind = match first {
                b'[' => "an array",
                b'"' => "a string",
                b'n' => "null",
                b't' | b'f' => "a boolean",
                b'-' | b'0'..=b'9' => "a number",
                _ => "not JSON",
            };
            return Err(Problem::new(
                "INVALID_ARGUMENT",
                format!(
                    "invalid request body: it must be a JSON object ({{...}}), and it is {kind}"
                ),
            ));
        }
        let decoded = if T::FLAT {
            serde_json::from_slice(text).map_err(|e| e.to_string())
        } else {
            shardwise_core::json::from_slice_strict(text).map_err(|e| e.to_string())
        };
        decoded.map(Body).map_err(|e| {
            Problem::new("INVALID_ARGUMENT", format!("invalid request body: {}", cap_quotes(&e)))
        })
    }
}

/// A path id: a problem naming the parameter when it is not one. A value too long to be an
/// id is not echoed back (an answer never grows with the junk it was sent).
pub(crate) fn parse_id<T: std::str::FromStr<Err = String>>(
    name: &str,
    raw: &str,
) -> Result<T, Problem> {
    if raw.len() > 64 {
        return Err(Problem::new(
            "INVALID_ARGUMENT",
            format!(
                "{name}: a {}-byte value is not an id (a decimal of at most 20 digits)",
                raw.len()
            ),
        ));
    }
    raw.parse::<T>().map_err(|e| Problem::new("INVALID_ARGUMENT", format!("{name}: {e}")))
}

/// A worker address where one enters: `host:port`, else INVALID_ARGUMENT (checked off the
/// dispatcher's lock).
fn worker_address(addr: &str) -> Result<(), Problem> {
    check_worker_address(addr).map_err(|e| Problem::new("INVALID_ARGUMENT", e))
}

type ApiResult = Result<Response, Problem>;

/// `/healthz` and `/readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok` or `ready`.
    pub status: String,
}

fn ok<T: Serialize>(v: &T) -> ApiResult {
    // Serialized straight to bytes (no intermediate JSON value tree).
    let body = serde_json::to_vec(v).map_err(|e| Problem::new("INTERNAL", e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body)
        .into_response())
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
pub async fn version(State(s): State<AppState>) -> ApiResult {
    ok(&s.actor.call(GetVersion).await?)
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
pub async fn worker_heartbeat(
    State(s): State<AppState>,
    Body(mut req): Body<WorkerHeartbeat>,
) -> ApiResult {
    // The task list is a set: in ascending order it meets the dispatcher's fast path (one
    // probe) whatever order the worker sent it in. Sorted off the dispatcher's lock.
    req.current_tasks.sort_unstable();
    req.current_tasks.dedup();
    worker_address(&req.worker_address)?;
    ok(&s.actor.call(req).await?)
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
pub async fn worker_update(State(s): State<AppState>, Body(req): Body<WorkerUpdate>) -> ApiResult {
    worker_address(&req.worker_address)?;
    ok(&s.actor.call(req).await?)
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
pub async fn workers(State(s): State<AppState>) -> ApiResult {
    ok(&s.actor.call(ListWorkers).await?)
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
pub async fn register_dataset(
    State(s): State<AppState>,
    Body(req): Body<RegisterDataset>,
) -> ApiResult {
    ok(&s.actor.call(req).await?)
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
pub async fn get_dataset(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult {
    // What registration accepts as an id: anything else cannot name a dataset, and is not
    // echoed back at length.
    let syntax = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'=' | b'/');
    if id.is_empty() || id.len() > 256 || !id.bytes().all(syntax) {
        return Err(Problem::new(
            "INVALID_ARGUMENT",
            format!(
                "dataset_id: {} is not 1 to 256 characters of A-Z a-z 0-9 - _ . = /",
                echo(&id)
            ),
        ));
    }
    ok(&s.actor.call(GetDataset { dataset_id: id }).await?)
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
pub async fn create_job(State(s): State<AppState>, Body(req): Body<CreateJob>) -> ApiResult {
    ok(&s.actor.call(req).await?)
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
pub async fn get_job(State(s): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id: JobId = parse_id("job_id", &raw)?;
    ok(&s.actor.call(GetJob { job_id: id }).await?)
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
pub async fn create_iteration(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Body(req): Body<CreateIteration>,
) -> ApiResult {
    let id: JobId = parse_id("job_id", &raw)?;
    ok(&s.actor.call((id, req)).await?)
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
pub async fn client_heartbeat(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Body(req): Body<ClientHeartbeat>,
) -> ApiResult {
    let id: ClientId = parse_id("client_id", &raw)?;
    ok(&s.actor.call((id, req)).await?)
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
pub async fn release_client(State(s): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let id: ClientId = parse_id("client_id", &raw)?;
    ok(&s.actor.call(ReleaseClient { client_id: id }).await?)
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
pub async fn get_splits(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Body(req): Body<GetSplits>,
) -> ApiResult {
    let id: IterationId = parse_id("iteration_id", &raw)?;
    worker_address(&req.worker_address)?;
    ok(&s.actor.call((id, req)).await?)
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
pub async fn maybe_remove(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Body(req): Body<MaybeRemove>,
) -> ApiResult {
    let id: TaskId = parse_id("task_id", &raw)?;
    ok(&s.actor.call((id, req)).await?)
}

/// `POST /v1/cluster/resolve`.
#[utoipa::path(
    post,
    path = "/v1/cluster/resolve",
    tag = "cluster",
    operation_id = "resolve",
    summary = "Resolve a cluster (the `shardwise resolve` contract).",
    request_body(content = Object, description = "A resolve request.", content_type = "application/json"),
    responses((status = 200, description = "The resolved cluster, task, role and TF_CONFIG.", body = Object))
)]
pub async fn resolve(State(s): State<AppState>, Body(req): Body<Value>) -> ApiResult {
    let text = req.to_string();
    let outcome = crate::resolve::resolve_text(&text, &s.kube).await;
    if outcome.exit_code == 0 {
        Ok(Json(outcome.json).into_response())
    } else {
        let p: Problem = serde_json::from_value(outcome.json)
            .unwrap_or_else(|e| Problem::new("INTERNAL", e.to_string()));
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
pub async fn get_cluster(State(s): State<AppState>, RawQuery(query): RawQuery) -> ApiResult {
    let Some(cluster) = &s.cluster else {
        return Err(Problem::new(
            "NOT_FOUND",
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
                        "INVALID_ARGUMENT",
                        format!("after must be a version number, not {}", echo(v)),
                    )
                })?);
            }
            "wait" => {
                wait = super::parse_duration(v)
                    .map_err(|e| {
                        Problem::new("INVALID_ARGUMENT", format!("wait: {}", cap_quotes(&e)))
                    })?
                    .min(MAX_CLUSTER_WAIT);
            }
            other => {
                return Err(Problem::new(
                    "INVALID_ARGUMENT",
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

/// `GET /healthz`: the process is up.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    operation_id = "healthz",
    summary = "Liveness: the process is up.",
    responses((status = 200, description = "Up.", body = Health))
)]
pub async fn healthz() -> ApiResult {
    ok(&Health { status: "ok".into() })
}

/// `GET /readyz`: replay finished and the journal is writable.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    operation_id = "readyz",
    summary = "Readiness: the journal is replayed.",
    responses((status = 200, description = "Ready.", body = Health))
)]
pub async fn readyz(State(s): State<AppState>) -> ApiResult {
    if s.actor.is_ready() {
        ok(&Health { status: "ready".into() })
    } else {
        Err(Problem::new("UNAVAILABLE", "the dispatcher is replaying its journal"))
    }
}

/// `GET /metrics`: Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    operation_id = "metrics",
    summary = "Prometheus metrics (text format).",
    responses((status = 200, description = "Metrics.", body = String, content_type = "text/plain"))
)]
pub async fn metrics(State(s): State<AppState>) -> Response {
    let st = &s.actor.stats;
    let gauges = if s.actor.is_ready() { s.actor.call(GetMetrics).await.ok() } else { None };
    let mut out = String::new();
    let line = |out: &mut String, name: &str, help: &str, kind: &str, v: u64| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"));
    };
    line(
        &mut out,
        "shardwise_requests_total",
        "Dispatcher requests handled.",
        "counter",
        st.requests.load(Ordering::Relaxed),
    );
    line(
        &mut out,
        "shardwise_journal_commits_total",
        "Journal commits (one fsync each in fault-tolerant mode).",
        "counter",
        st.commits.load(Ordering::Relaxed),
    );
    line(
        &mut out,
        "shardwise_journal_records_total",
        "Journal records written.",
        "counter",
        st.records.load(Ordering::Relaxed),
    );
    out.push_str(
        "# HELP shardwise_journal_commit_duration_seconds Journal commits (append, and fsync in \
         fault-tolerant mode), by duration.\n# TYPE shardwise_journal_commit_duration_seconds \
         histogram\n",
    );
    st.commit_latency.render(&mut out, "shardwise_journal_commit_duration_seconds", "");
    if let Some(figures) = gauges {
        line(
            &mut out,
            "shardwise_workers_alive",
            "Registered workers that are not lost.",
            "gauge",
            figures.workers_alive,
        );
        line(
            &mut out,
            "shardwise_iterations_open",
            "Iterations that are not finished.",
            "gauge",
            figures.iterations_open,
        );
        line(
            &mut out,
            "shardwise_splits_handed_out_total",
            "DYNAMIC splits handed out.",
            "counter",
            figures.splits_handed_out,
        );
    }
    s.routes.render(&mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// Unknown routes.
pub async fn not_found(uri: axum::http::Uri) -> Problem {
    Problem::new("NOT_FOUND", format!("no route for {}", echo(uri.path())))
}
