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

/// The security scheme every protected operation names.
pub const BEARER: &str = "bearerAuth";

/// The worker's element route: served by `shardwise worker`, not by the dispatcher.
pub const WORKER_ROUTE: &str = "/v1/tasks/{task_id}/elements";

/// The routes served by `shardwise worker`, not by the dispatcher.
pub const WORKER_ROUTES: &[&str] = &[WORKER_ROUTE, "/v1/worker/status"];

/// Inline schemas given a name, so that generated SDKs get a meaningful type for each (not
/// `ProcessingModeType1`): `(component, oneOf index, new name)`.
const NAMED_VARIANTS: &[(&str, usize, &str)] = &[
    ("ProcessingMode", 1, "ShardingPolicyMode"),
    ("DatasetSpec", 1, "TfDatasetSpec"),
    ("SplitProviderDef", 0, "RangeSplitProviderDef"),
    ("SplitProviderDef", 1, "SlicesSplitProviderDef"),
    ("TfSplitProviders", 1, "UnsupportedSplitProviders"),
];

/// Inline request and response bodies given a name (not `ResolveResponse200`):
/// `(path, status or "request", new name)`.
const NAMED_BODIES: &[(&str, &str, &str)] = &[
    ("/v1/cluster/resolve", "request", "ResolveRequest"),
    ("/v1/cluster/resolve", "200", "ResolveReply"),
    ("/v1/cluster", "200", "ClusterView"),
];

/// The roles a token may have to call a route (admin may call every protected route).
pub fn roles(access: Access) -> Vec<&'static str> {
    use crate::http::auth::Role;
    let mut roles: Vec<&str> = match access {
        Access::Open => return Vec::new(),
        Access::Any => [Role::Admin, Role::Worker, Role::Client, Role::Monitor]
            .iter()
            .map(|r| r.name())
            .collect(),
        _ => access.roles().iter().map(|r| r.name()).collect(),
    };
    if !roles.contains(&"admin") {
        roles.push("admin");
    }
    roles
}

/// Who may call an operation: `security: []` for an open route; else the bearer scheme with
/// the roles as its scopes, and the same list as `x-shardwise-roles`.
fn add_security(op: &mut Operation, access: Access) {
    use utoipa::openapi::extensions::ExtensionsBuilder;
    use utoipa::openapi::security::SecurityRequirement;
    if access == Access::Open {
        op.security = Some(Vec::new());
        return;
    }
    let roles = roles(access);
    op.security = Some(vec![SecurityRequirement::new(BEARER, roles.clone())]);
    let ext = ExtensionsBuilder::new().add("x-shardwise-roles", serde_json::json!(roles)).build();
    match &mut op.extensions {
        Some(existing) => existing.merge(ext),
        None => op.extensions = Some(ext),
    }
}

/// Moves an inline schema into `components` under `name` and leaves a reference to it.
fn hoist(
    schema: &mut utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
    name: &str,
    named: &mut Vec<(String, RefOr<utoipa::openapi::schema::Schema>)>,
) {
    let inline = std::mem::replace(schema, RefOr::Ref(Ref::from_schema_name(name)));
    assert!(matches!(inline, RefOr::T(_)), "{name}: already a reference");
    named.push((name.to_owned(), inline));
}

fn name_inline_schemas(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::schema::Schema;
    let mut named = Vec::new();
    if let Some(components) = doc.components.as_mut() {
        for (component, index, name) in NAMED_VARIANTS {
            if let Some(RefOr::T(Schema::OneOf(one_of))) = components.schemas.get_mut(*component)
                && let Some(item) = one_of.items.get_mut(*index)
            {
                hoist(item, name, &mut named);
            }
        }
    }
    for (path, status, name) in NAMED_BODIES {
        let Some(item) = doc.paths.paths.get_mut(*path) else { continue };
        for op in [&mut item.get, &mut item.post].into_iter().flatten() {
            let content = if *status == "request" {
                match op.request_body.as_mut() {
                    Some(RefOr::T(b)) => b.content.get_mut("application/json"),
                    _ => None,
                }
            } else {
                match op.responses.responses.get_mut(*status) {
                    Some(RefOr::T(r)) => r.content.get_mut("application/json"),
                    _ => None,
                }
            };
            if let Some(RefOr::T(content)) = content
                && let Some(schema) = content.schema.as_mut()
            {
                hoist(schema, name, &mut named);
            }
        }
    }
    if let Some(components) = doc.components.as_mut() {
        components.schemas.extend(named);
    }
}

/// Completes a generated document: every operation documents the problem responses and who
/// may call it, the bearer scheme is declared, inline schemas get names, and the worker's
/// route says where it is served.
pub fn complete(mut doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    use axum::http::Method;
    use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
    use utoipa::openapi::server::{ServerBuilder, ServerVariableBuilder};
    for (path, item) in doc.paths.paths.iter_mut() {
        for (op, method, body) in [
            (&mut item.get, Method::GET, false),
            (&mut item.delete, Method::DELETE, false),
            (&mut item.post, Method::POST, true),
            (&mut item.put, Method::PUT, true),
        ] {
            if let Some(op) = op {
                let access = crate::http::auth::access(&method, path);
                add_problems(op, body, access);
                add_security(op, access);
            }
        }
        if WORKER_ROUTES.contains(&path.as_str()) {
            item.servers = Some(vec![
                ServerBuilder::new()
                    .url("http://{worker_address}")
                    .description(Some(
                        "A `shardwise worker`: the `worker_address` of the task (in a client \
                         heartbeat's `tasks`), not the dispatcher.",
                    ))
                    .parameter(
                        "worker_address",
                        ServerVariableBuilder::new().default_value("127.0.0.1:5051").description(
                            Some(
                                "The worker's `host:port` (its `--worker-address`; the default \
                                 is only an example).",
                            ),
                        ),
                    )
                    .build(),
            ]);
        }
    }
    name_inline_schemas(&mut doc);
    let bearer = HttpBuilder::new()
        .scheme(HttpAuthScheme::Bearer)
        .description(Some(
            "With `--auth-tokens FILE`: `Authorization: Bearer <token>`. Each token has a role \
             (`admin`, `worker`, `client` or `monitor`); each operation lists the roles that may \
             call it as this requirement's scopes and in `x-shardwise-roles` (admin may call \
             every one). Without `--auth-tokens` no token is needed.",
        ))
        .build();
    doc.components
        .get_or_insert_with(Default::default)
        .add_security_scheme(BEARER, SecurityScheme::Http(bearer));
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
