//! The worker's HTTP API: the element route (the data plane), health, metrics and the one
//! OpenAPI document.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use shardwise_core::dispatch::{IterationId, JobId, ShardingPolicy, TaskId};
use utoipa::{IntoParams, ToSchema};

use super::columnar_out::parse_compression;
use super::reply::{Format, Reply};
use super::task::Gone;
use super::{Lookup, Shared};
use shardwise_client::arrow_stream::{ARROW_STREAM, COMPRESSION_HEADER};
pub use shardwise_http::elements::{DEFAULT_MAX_ELEMENTS, Elements, MAX_ELEMENTS};
use shardwise_http::{Code, Problem, auth};

/// How long a read waits for an element before answering an empty list.
pub const READ_WAIT: Duration = Duration::from_millis(500);

/// The worker's handler state.
#[derive(Debug, Clone)]
pub struct WorkerState(pub(crate) Arc<Shared>);

/// Query of `GET /v1/tasks/{task_id}/elements`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ElementsQuery {
    /// Coordinated reads only: the reading consumer's index (with `round`).
    consumer_index: Option<u64>,
    /// Coordinated reads only: the round to read (with `consumer_index`).
    round: Option<u64>,
    /// The most elements to answer (1 to 10,000; default 100). A coordinated read answers
    /// one element.
    #[param(minimum = 1, maximum = 10_000)]
    max: Option<u32>,
}

/// An Arrow IPC stream (the body of an element read that asked for Arrow).
#[derive(Debug, ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct ArrowStream(pub Vec<u8>);

/// `GET /v1/tasks/{task_id}/elements`.
#[utoipa::path(
    get,
    path = "/v1/tasks/{task_id}/elements",
    tag = "worker-data-plane",
    operation_id = "get_elements",
    summary = "Read a task's next elements (served by the worker, not the dispatcher).",
    description = "Several elements per call, first come first served among the clients of the \
                   task. A task the worker does not know (yet) is a 404 `NOT_FOUND`: the worker \
                   fetches its tasks from the dispatcher at once, so a client retries it for a \
                   bounded time. Coordinated reads (`num_consumers`) pass `consumer_index` and \
                   `round` and get their element of that round. A failed or deleted task is a \
                   409 `FAILED_PRECONDITION`.",
    params(
        ("task_id" = String, Path, description = "The task id.", pattern = "^[0-9]{1,19}$"),
        ElementsQuery,
        ("Accept" = Option<String>, Header, description = "`application/vnd.apache.arrow.stream` \
         for an Arrow IPC stream (columnar datasets only: parquet, arrow and tfrecord files); \
         JSON otherwise. Weights are honoured (RFC 9110): the type of the higher `;q=` wins \
         (`q=0`: not this; the most specific range applies), Arrow on a tie when it is named; \
         a weight that is not a number from 0 to 1 is a 400."),
        ("shardwise-arrow-compression" = Option<String>, Header, description = "With Arrow: \
         `lz4` or `zstd` (Arrow IPC's LZ4 frame and Zstandard buffer compression), or `none`; \
         a comma-separated list read like `Accept-Encoding`: the known value of the highest \
         `;q=` weight wins (`q=0`: not this), the first listed among equals, and unknown \
         values are passed over. A header that names no value the worker serves (`brotli`, \
         `zstd;q=0`) is a 400 naming them. Default: uncompressed."),
    ),
    responses(
        (status = 200, description = "The next elements (as many as fit the worker's \
         `--max-reply-bytes` as written, at most `max`; the rest come with the next read), and \
         whether the task is over. With \
         `Accept: application/vnd.apache.arrow.stream`, one Arrow IPC stream (schema, record \
         batches, end-of-stream marker) holding the next rows, `max` counting rows (a `batch` \
         transform's batch is one record batch of that many rows); fixed-shape tensors are \
         fixed-size lists with the `arrow.fixed_shape_tensor` extension type. The stream's \
         schema metadata `shardwise.origin` holds the rows' origin runs (JSON, as `origin` \
         below) when the read has positions. An empty stream (no batch) means nothing arrived \
         within about half a second: ask again.",
         content(
             (Elements = "application/json"),
             (ArrowStream = "application/vnd.apache.arrow.stream"),
         ),
         headers(("shardwise-end-of-sequence" = String, description = "`true` when the task is over (Arrow replies; JSON replies say it in the body), `false` otherwise."))),
        (status = 400, description = "The request is invalid (`INVALID_ARGUMENT`): a bad id, \
         `max` or query; an `Accept` weight that is not one; a `shardwise-arrow-compression` \
         header naming no compression the worker serves.", body = Problem,
         content_type = "application/problem+json"),
        (status = 406, description = "Arrow was asked for a dataset whose elements are JSON \
         values (`FAILED_PRECONDITION`).", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The next element does not fit alone in one reply as it \
         would be written (the worker's `--max-reply-bytes`): `RESOURCE_EXHAUSTED` naming it \
         (its row in its file); it stays unread, and the same read is refused the same way: \
         read it as Arrow (where a row usually takes less), or raise the flag.", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn get_elements(
    State(w): State<WorkerState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    query: Result<Query<ElementsQuery>, QueryRejection>,
) -> Result<Response, Problem> {
    let Query(q) = query.map_err(|e| {
        Problem::new(Code::InvalidArgument, format!("invalid query: {}", e.body_text()))
    })?;
    let id: TaskId = shardwise_http::parse_id("task_id", &raw)?;
    let max = q.max.unwrap_or(DEFAULT_MAX_ELEMENTS);
    if max == 0 || max > MAX_ELEMENTS {
        return Err(Problem::new(
            Code::InvalidArgument,
            format!("max must be in 1..={MAX_ELEMENTS}, not {max}"),
        ));
    }
    let format = match wants_arrow(&headers)? {
        false => Format::Json,
        true => Format::Arrow(parse_compression(
            headers.get_all(COMPRESSION_HEADER).iter().filter_map(|v| v.to_str().ok()),
        )?),
    };
    let arrow = matches!(format, Format::Arrow(_));
    let mut reply = Reply::new(format, w.0.max_reply_bytes);
    let shared = &w.0;
    let task = match shared.lookup(id) {
        Lookup::Live(t) => t,
        // A task lost in a dispatcher restart without state: its id may come back in the new
        // incarnation (ids start over), so it reads as not known yet.
        Lookup::Gone(Gone::Lost) | Lookup::Unknown => {
            shared.heartbeat_now.notify_one();
            return Err(Problem::new(
                Code::NotFound,
                format!(
                    "task {id} is not known to this worker (yet): it is asking the dispatcher; \
                     retry shortly"
                ),
            ));
        }
        // A heartbeat sent after the first read of this id came back without it: the task will
        // not come (see `unknown`), and no further heartbeat is asked for.
        Lookup::Unassigned => {
            return Err(Problem::new(
                Code::NotFound,
                format!(
                    "the dispatcher has not assigned task {id} to this worker (a heartbeat sent \
                     after this task was first asked for came back without it): ask the \
                     dispatcher which worker serves it"
                ),
            ));
        }
        Lookup::Gone(g) => return g.answer(id).and_then(|r| reply.finish(r, None, 0)),
    };
    // A producer's rows are served as Arrow too (its JSON values are refused as they come).
    let columnar = shared.producer.is_some()
        || super::rows::files_of(&task.def).is_some_and(|f| f.format.is_columnar());
    if arrow && !columnar {
        return Err(Problem::new(
            Code::FailedPrecondition,
            format!(
                "task {id}'s elements are JSON values: Arrow streams serve the rows of parquet, \
                 arrow and tfrecord files; read it as JSON"
            ),
        )
        .with_status(406, "Not Acceptable"));
    }
    let read = match (task.def.num_consumers, q.consumer_index, q.round) {
        (Some(n), Some(i), Some(_)) if i >= n => {
            return Err(Problem::new(
                Code::InvalidArgument,
                format!(
                    "Requesting data for consumer index {i}, but the task is configured for only \
                     {n} consumers"
                ),
            ));
        }
        (Some(_), Some(i), Some(r)) => task.read_round(shared, i, r, READ_WAIT, &mut reply).await?,
        (Some(n), _, _) => {
            return Err(Problem::new(
                Code::InvalidArgument,
                format!(
                    "task {id} is a coordinated read for {n} consumers: pass consumer_index and \
                     round"
                ),
            ));
        }
        (None, None, None) => task.read(shared, max as usize, READ_WAIT, &mut reply).await?,
        (None, _, _) => {
            return Err(Problem::new(
                Code::InvalidArgument,
                format!(
                    "consumer_index and round are only for coordinated reads; task {id} is not one"
                ),
            ));
        }
    };
    let (read, served) = read;
    reply.finish(read, task.schema().as_ref(), served)
}

/// Whether a read answers Arrow rather than JSON, from its `Accept` headers (RFC 9110
/// content negotiation): each media range's weight `;q=` (default 1, 0: "not this") applies
/// to the types it matches, the most specific range first (`application/json` before
/// `application/*` before `*/*`); the type of the higher weight wins. Arrow wins a tie only
/// when it is named itself (as it always did: `Accept: application/vnd.apache.arrow.stream,
/// application/json` is Arrow, `*/*` is JSON), and JSON answers when neither is acceptable
/// (no `Accept`, or one naming neither: the header is then disregarded, as RFC 9110 allows).
/// A weight that is not a number from 0 to 1 is `INVALID_ARGUMENT`.
fn wants_arrow(headers: &HeaderMap) -> Result<bool, Problem> {
    const JSON: &str = "application/json";
    // Per type: (specificity of the range that set it, its weight); specificity 3 is the
    // type itself, 2 `type/*`, 1 `*/*`.
    let mut arrow = (0u8, 0.0f32);
    let mut json = (0u8, 0.0f32);
    for value in headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()) {
        for range in value.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            if media.is_empty() {
                continue;
            }
            let q = super::columnar_out::weight(parts).map_err(|why| {
                Problem::new(
                    Code::InvalidArgument,
                    format!("Accept: {why} in {}", shardwise_core::echo::echo(value)),
                )
            })?;
            for (target, slot) in [(ARROW_STREAM, &mut arrow), (JSON, &mut json)] {
                let specificity = match media.as_str() {
                    m if m == target => 3,
                    "*/*" => 1,
                    m => match (m.strip_suffix("/*"), target.split_once('/')) {
                        (Some(t), Some((kind, _))) if t == kind => 2,
                        _ => 0,
                    },
                };
                // The most specific range decides; among equally specific ones, the highest.
                if specificity > slot.0 || (specificity == slot.0 && specificity > 0 && q > slot.1)
                {
                    *slot = (specificity, q);
                }
            }
        }
    }
    let named = arrow.0 == 3;
    Ok(arrow.1 > json.1 || (arrow.1 > 0.0 && arrow.1 == json.1 && named))
}

/// How far a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskRunState {
    /// No client read it yet: it produces nothing until the first read.
    Waiting,
    /// Producing (or waiting for room in its buffer, or for splits).
    Running,
    /// Its pipeline ended (its buffer may still hold elements).
    Finished,
    /// Its pipeline failed.
    Failed,
}

/// One task of a worker.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskStatus {
    /// The task.
    pub task_id: TaskId,
    /// Its iteration.
    pub iteration_id: IterationId,
    /// Its job.
    pub job_id: JobId,
    /// Its dataset.
    pub dataset_id: String,
    /// The job's sharding policy.
    pub sharding_policy: ShardingPolicy,
    /// How far it is.
    pub state: TaskRunState,
    /// Elements produced.
    pub elements_produced: u64,
    /// Elements handed to clients.
    pub elements_served: u64,
    /// Elements produced and not yet read.
    pub buffered_elements: u64,
    /// What they weigh, in approximate bytes.
    pub buffered_bytes: u64,
    /// The most elements the buffer holds.
    pub buffer_capacity: u64,
    /// The most bytes the buffer holds.
    pub buffer_capacity_bytes: u64,
    /// DYNAMIC: splits fetched and not yet acknowledged.
    pub splits_held: u64,
}

/// `GET /v1/worker/status`: this worker and its tasks.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkerStatusReport {
    /// The address it registered with.
    pub worker_address: String,
    /// The dispatcher it talks to now.
    pub dispatcher: String,
    /// Every dispatcher replica it knows (`--dispatcher`).
    pub dispatchers: Vec<String>,
    /// Its tags.
    pub tags: Vec<String>,
    /// The dispatcher incarnation it last heard (`null`: none yet).
    pub dispatcher_incarnation: Option<String>,
    /// Its live tasks, by id.
    pub tasks: Vec<TaskStatus>,
}

/// `GET /v1/worker/status`.
#[utoipa::path(
    get,
    path = "/v1/worker/status",
    tag = "worker-data-plane",
    operation_id = "get_worker_status",
    summary = "A worker's status: its tasks, their buffers and splits (served by the worker, \
               not the dispatcher).",
    description = "What the worker's status page at `/` shows. Readable with the `monitor` role.",
    responses((status = 200, description = "The worker and its tasks.", body = WorkerStatusReport))
)]
pub async fn get_worker_status(State(w): State<WorkerState>) -> Response {
    let body = serde_json::to_vec(&w.0.status()).unwrap_or_default();
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

async fn metrics(State(w): State<WorkerState>) -> Response {
    let (tasks, buffered, produced, served) = w.0.counters();
    let mut out = String::new();
    for (name, help, kind, v) in [
        ("shardwise_worker_tasks", "Tasks this worker runs.", "gauge", tasks),
        (
            "shardwise_worker_buffered_elements",
            "Elements produced and not yet read, over the live tasks.",
            "gauge",
            buffered,
        ),
        (
            "shardwise_worker_elements_produced_total",
            "Elements produced by the live tasks.",
            "counter",
            produced,
        ),
        (
            "shardwise_worker_elements_served_total",
            "Elements of the live tasks handed to clients.",
            "counter",
            served,
        ),
    ] {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        shardwise_http::docs::DOCUMENT,
    )
        .into_response()
}

/// The worker's documented routes and their part of the OpenAPI document.
pub fn api_router() -> (Router<WorkerState>, utoipa::openapi::OpenApi) {
    use utoipa_axum::router::OpenApiRouter;
    use utoipa_axum::routes;
    OpenApiRouter::new()
        .routes(routes!(get_elements))
        .routes(routes!(get_worker_status))
        .split_for_parts()
}

/// The worker's router: the element route behind `--auth-tokens` (client role), `/healthz`,
/// `/metrics` (monitor role) and `/openapi.json`, with the layers every Shardwise server has.
pub(crate) fn router(
    shared: Arc<Shared>,
    tokens: Option<auth::Tokens>,
    read_timeout: Duration,
) -> Router {
    let limits = shardwise_http::limit::LimitConfig {
        max_body_bytes: 64 << 10,
        read_timeout,
        ..Default::default()
    };
    let (api, _) = api_router();
    let api = api
        .route("/healthz", get(shardwise_http::healthz))
        .route("/metrics", get(metrics))
        // No route takes a body; one sent anyway is read within the bound, after the token.
        .route_layer(shardwise_http::front::RouteLayer::new(None, tokens, &limits));
    let app = api
        .route("/openapi.json", get(openapi_json))
        .merge(shardwise_http::ui::router(shardwise_http::ui::Kind::Worker))
        .fallback(shardwise_http::not_found);
    shardwise_http::common_layers(app, "worker", limits).with_state(WorkerState(shared))
}
