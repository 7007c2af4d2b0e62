//! The OpenAPI document: generated from the handlers' annotations (utoipa), completed with
//! the problem responses every operation can give, checked in at `openapi/openapi.json`.

use utoipa::OpenApi;
use utoipa::openapi::path::Operation;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};

use crate::http::auth::Access;
use crate::http::problem::{PROBLEM_JSON, Problem};

/// The document's fixed parts; the paths come from the router.
#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "Shardwise",
        description = "Coordination for distributed training input: cluster resolution and a \
                       tf.data-service-style dispatcher (workers, datasets, jobs, iterations, \
                       splits). Every error is an RFC 9457 problem (`application/problem+json`) \
                       whose `code` is the status class (`INVALID_ARGUMENT`, `NOT_FOUND`, \
                       `FAILED_PRECONDITION`, `UNAVAILABLE`, ...). Ids are decimal strings.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    tags(
        (name = "dispatcher", description = "Version and mode."),
        (name = "workers", description = "What workers call: heartbeat, task updates, splits."),
        (name = "datasets", description = "Declarative datasets."),
        (name = "jobs", description = "Jobs and iterations."),
        (name = "clients", description = "What clients call while reading an iteration."),
        (name = "cluster", description = "Cluster resolution (TF_CONFIG, Slurm, Kubernetes)."),
        (name = "health", description = "Liveness, readiness and metrics."),
        (name = "worker-data-plane", description = "Served by `shardwise worker` on its own \
                                                    address, not by the dispatcher: clients read \
                                                    a task's elements there. Workers also serve \
                                                    `/healthz` and this document at \
                                                    `/openapi.json`."),
    ),
    components(schemas(Problem))
)]
pub struct ApiDoc;

/// The problem responses any operation may give, with when.
const PROBLEMS: &[(&str, &str)] = &[
    (
        "400",
        "The request is invalid (`INVALID_ARGUMENT`): malformed JSON, unknown fields, bad ids or values.",
    ),
    (
        "401",
        "With `--auth-tokens`: no `Authorization: Bearer` token, or not a valid one (`UNAUTHENTICATED`).",
    ),
    // Its description names the roles of each route (see `add_problems`).
    ("403", ""),
    ("404", "Something the request names does not exist (`NOT_FOUND`)."),
    (
        "408",
        "The request body did not arrive within `--read-timeout` (`UNAVAILABLE`); the connection is closed.",
    ),
    ("409", "The request conflicts with the state (`FAILED_PRECONDITION` or `ALREADY_EXISTS`)."),
    ("413", "The request body is too large (`RESOURCE_EXHAUSTED`)."),
    ("415", "The request body is not JSON."),
    (
        "429",
        "With `--rate-limit`: too many requests from this address (`RESOURCE_EXHAUSTED`); retry after `Retry-After`.",
    ),
    ("500", "A bug (`INTERNAL`): a panic was caught. Never bad input."),
    (
        "503",
        "Not ready yet, overloaded, or the journal cannot be written (`UNAVAILABLE`); retry after `Retry-After`.",
    ),
];

fn add_problems(op: &mut Operation, with_body: bool, access: Access) {
    let open = access == Access::Open;
    for (status, description) in PROBLEMS {
        if !with_body && (*status == "408" || *status == "413" || *status == "415") {
            continue;
        }
        if open && (*status == "401" || *status == "403") {
            continue;
        }
        // Who may call it, where a caller learns it: in the 403 (every valid token may call
        // an `Any` route, so it has none).
        let description = match (*status, access) {
            ("403", Access::Any) => continue,
            ("403", _) => format!(
                "With `--auth-tokens`: the token's role may not call this route \
                 (`PERMISSION_DENIED`). It needs {}.",
                access.describe()
            ),
            _ => (*description).to_owned(),
        };
        op.responses.responses.entry((*status).to_owned()).or_insert_with(|| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        PROBLEM_JSON,
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("Problem")))
                            .build(),
                    )
                    .build(),
            )
        });
    }
}

/// Completes a generated document: every operation documents the problem responses.
pub fn complete(mut doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    use axum::http::Method;
    for (path, item) in doc.paths.paths.iter_mut() {
        for (op, method, body) in [
            (&mut item.get, Method::GET, false),
            (&mut item.delete, Method::DELETE, false),
            (&mut item.post, Method::POST, true),
            (&mut item.put, Method::PUT, true),
        ] {
            if let Some(op) = op {
                add_problems(op, body, crate::http::auth::access(&method, path));
            }
        }
    }
    doc
}

/// The whole document: the fixed parts, the dispatcher's routes, then the worker's (tag
/// `worker-data-plane`), each operation completed with its problem answers.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.merge(crate::dispatcher::api_router().1);
    doc.merge(crate::worker::routes::api_router().1);
    complete(doc)
}

/// The whole document as pretty JSON (what `openapi/openapi.json` holds).
pub fn document_json() -> String {
    let doc = document();
    let mut text = doc.to_pretty_json().unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}
