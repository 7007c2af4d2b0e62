//! Optional bearer-token authentication (`--auth-tokens FILE`): each token has a role, each
//! route requires one. Tokens are compared in constant time and never logged or echoed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::problem::{Code, Problem};

/// A caller's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything.
    Admin,
    /// Worker routes: heartbeat, update, splits.
    Worker,
    /// Dataset, job, iteration, client and cluster routes, and a worker's element route.
    Client,
    /// Monitoring: `/metrics` (of the dispatcher and of a worker), `/v1/version`, and the
    /// status routes the status page polls (`/v1/status`, a worker's `/v1/worker/status`),
    /// nothing else: no dataset definitions, and nothing that changes state.
    Monitor,
}

impl Role {
    /// Its name in the token file.
    pub fn name(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Worker => "worker",
            Role::Client => "client",
            Role::Monitor => "monitor",
        }
    }
}

/// What a route requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No token needed.
    Open,
    /// Any valid token (every role).
    Any,
    /// This role (or admin).
    Only(Role),
    /// One of these roles (or admin).
    OneOf(&'static [Role]),
}

impl Access {
    /// Whether a token of `role` may call a route that requires this.
    pub fn allows(self, role: Role) -> bool {
        match self {
            Access::Open | Access::Any => true,
            _ if role == Role::Admin => true,
            Access::Only(want) => role == want,
            Access::OneOf(roles) => roles.contains(&role),
        }
    }

    /// The roles it lets in besides admin, for messages and the OpenAPI document (empty for
    /// `Open` and `Any`).
    pub fn roles(self) -> &'static [Role] {
        match self {
            Access::Open | Access::Any => &[],
            Access::Only(Role::Admin) => &[Role::Admin],
            Access::Only(Role::Worker) => &[Role::Worker],
            Access::Only(Role::Client) => &[Role::Client],
            Access::Only(Role::Monitor) => &[Role::Monitor],
            Access::OneOf(roles) => roles,
        }
    }

    /// `the client role (or admin)`, `the worker or client role (or admin)`, `the admin role`.
    pub fn describe(self) -> String {
        let names: Vec<&str> = self.roles().iter().map(|r| r.name()).collect();
        match self.roles() {
            [] => "any valid token".to_owned(),
            [Role::Admin] => "the admin role".to_owned(),
            _ => format!("the {} role (or admin)", names.join(" or ")),
        }
    }
}

/// One operation of the API as REST and gRPC name it, and the roles that may call it.
#[derive(Debug)]
struct Operation {
    /// Who may call it.
    access: Access,
    /// Its REST routes: method and route template.
    rest: &'static [(&'static str, &'static str)],
    /// Its RPCs of `tensorflow.data.DispatcherService`.
    grpc: &'static [&'static str],
}

const WORKER_OR_CLIENT: Access = Access::OneOf(&[Role::Worker, Role::Client]);

/// The role table: every operation, REST routes and gRPC methods alike, and what it requires
/// (the same operation needs the same role over either protocol). A route or RPC missing here
/// requires admin (so a new one cannot slip through unprotected).
const OPERATIONS: &[Operation] = &[
    Operation {
        access: Access::Any,
        rest: &[("GET", "/v1/version"), ("GET", "/v1/leader")],
        grpc: &["GetVersion", "GetDataServiceConfig"],
    },
    // Every task of a training job reads the cluster (its TF_CONFIG), workers and clients
    // alike; a monitoring token does not (the view names every host of the job).
    Operation { access: WORKER_OR_CLIENT, rest: &[("GET", "/v1/cluster")], grpc: &[] },
    // A dataset: a worker reads its graph to run it, a client its metadata; either may
    // decide its run-time compression.
    Operation {
        access: WORKER_OR_CLIENT,
        rest: &[("GET", "/v1/datasets/{dataset_id}")],
        grpc: &["GetDatasetDef", "GetDataServiceMetadata", "DisableCompressionAtRuntime"],
    },
    // Prometheus scrapes with a monitor token (dispatcher and worker alike); the status
    // page's data (dispatcher and worker).
    Operation {
        access: Access::Only(Role::Monitor),
        rest: &[("GET", "/metrics"), ("GET", "/v1/status"), ("GET", "/v1/worker/status")],
        grpc: &[],
    },
    Operation {
        access: Access::Only(Role::Worker),
        rest: &[
            ("POST", "/v1/workers/heartbeat"),
            ("POST", "/v1/workers/update"),
            ("POST", "/v1/iterations/{iteration_id}/splits"),
        ],
        grpc: &["WorkerHeartbeat", "WorkerUpdate", "GetSplit", "GetSnapshotSplit"],
    },
    // The live workers: a TensorFlow client lists them (local workers, `GetWorkers`).
    Operation {
        access: Access::Only(Role::Client),
        rest: &[("GET", "/v1/workers")],
        grpc: &["GetWorkers"],
    },
    Operation {
        access: Access::Only(Role::Client),
        rest: &[
            ("POST", "/v1/datasets"),
            ("POST", "/v1/jobs"),
            ("GET", "/v1/jobs/{job_id}"),
            ("POST", "/v1/jobs/{job_id}/iterations"),
            ("POST", "/v1/clients/{client_id}/heartbeat"),
            ("DELETE", "/v1/clients/{client_id}"),
            ("DELETE", "/v1/datasets/{dataset_id}"),
            ("POST", "/v1/tasks/{task_id}/maybe-remove"),
            ("POST", "/v1/cluster/resolve"),
            ("GET", "/v1/tasks/{task_id}/elements"),
        ],
        grpc: &[
            "GetOrRegisterDataset",
            "GetOrCreateJob",
            "GetOrCreateIteration",
            "ClientHeartbeat",
            "ReleaseIterationClient",
            "MaybeRemoveTask",
            "Snapshot",
            "GetSnapshotStreams",
        ],
    },
];

/// What the REST route `path` (its template) requires for `method`. `HEAD` is `GET` without
/// the body: it requires what `GET` does.
pub fn access(method: &Method, path: &str) -> Access {
    let method = if method == Method::HEAD { "GET" } else { method.as_str() };
    match (method, path) {
        (_, "/healthz" | "/readyz" | "/openapi.json") => return Access::Open,
        (_, p) if p == "/docs" || p.starts_with("/docs/") => return Access::Open,
        // The status page and its assets hold no data: the page asks for a token itself.
        ("GET", p) if p == "/" || p.starts_with("/ui/") => return Access::Open,
        _ => {}
    }
    OPERATIONS
        .iter()
        .find(|op| op.rest.iter().any(|&(m, p)| m == method && p == path))
        .map_or(Access::Only(Role::Admin), |op| op.access)
}

/// What the RPC `method` of `tensorflow.data.DispatcherService` requires (an unknown one:
/// admin).
pub fn grpc_access(method: &str) -> Access {
    OPERATIONS
        .iter()
        .find(|op| op.grpc.contains(&method))
        .map_or(Access::Only(Role::Admin), |op| op.access)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    tokens: Vec<TokenEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    role: Role,
    token: String,
}

/// A token file's text that is not a valid token list (the token at index `i` is named by its
/// index, never by its value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokensError {
    /// Not the documented JSON.
    #[error(transparent)]
    Json(#[from] shardwise_core::json::JsonError),
    /// An empty `tokens` list.
    #[error("no tokens are configured")]
    Empty,
    /// A token shorter than 16 characters.
    #[error("token {0} is shorter than 16 characters")]
    Short(usize),
    /// A token with whitespace or control characters.
    #[error("token {0} contains whitespace or control characters")]
    Characters(usize),
    /// A token equal to an earlier one.
    #[error("token {0} is listed twice")]
    Twice(usize),
}

/// An `--auth-tokens` file that cannot be used (a usage error: the process does not start).
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// The file cannot be read.
    #[error("cannot read --auth-tokens {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file's text is not a valid token list.
    #[error("--auth-tokens {}: {error}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        error: TokensError,
    },
}

/// The configured tokens.
#[derive(Clone)]
pub struct Tokens(Arc<Vec<(Vec<u8>, Role)>>);

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} configured, values hidden)", self.0.len())
    }
}

impl Tokens {
    /// Reads `{"tokens": [{"role": "admin"|"worker"|"client"|"monitor", "token": "..."}]}`.
    pub fn load(path: &Path) -> Result<Tokens, TokenFileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| TokenFileError::Read { path: path.to_owned(), source })?;
        Self::parse(&text).map_err(|error| TokenFileError::Invalid { path: path.to_owned(), error })
    }

    /// Parses a token file's text.
    pub fn parse(text: &str) -> Result<Tokens, TokensError> {
        let file: TokenFile = shardwise_core::json::from_str_strict(text)?;
        if file.tokens.is_empty() {
            return Err(TokensError::Empty);
        }
        let mut out: Vec<(Vec<u8>, Role)> = Vec::new();
        for (i, t) in file.tokens.into_iter().enumerate() {
            if t.token.len() < 16 {
                return Err(TokensError::Short(i));
            }
            if t.token.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
                return Err(TokensError::Characters(i));
            }
            if out.iter().any(|(x, _)| ct_eq(x, t.token.as_bytes())) {
                return Err(TokensError::Twice(i));
            }
            out.push((t.token.into_bytes(), t.role));
        }
        Ok(Tokens(Arc::new(out)))
    }

    /// The role of a presented token (checked against every token, in constant time).
    fn role_of(&self, presented: &[u8]) -> Option<Role> {
        let mut found = None;
        for (token, role) in self.0.iter() {
            if ct_eq(token, presented) {
                found = Some(*role);
            }
        }
        found
    }
}

/// Constant-time equality (time depends on the lengths only).
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// The token of an `Authorization: Bearer <token>` value. The scheme is case-insensitive
/// (RFC 9110, section 11.1): `bearer`, `BEARER` and `Bearer` are the same.
pub fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let value = value.trim_ascii();
    let space = value.iter().position(|b| *b == b' ' || *b == b'\t')?;
    let (scheme, token) = value.split_at(space);
    let token = token.trim_ascii_start();
    (scheme.eq_ignore_ascii_case(b"bearer") && !token.is_empty()).then_some(token)
}

fn unauthenticated(detail: &str) -> Response {
    let mut res = Problem::new(Code::Unauthenticated, detail).into_response();
    res.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    res
}

/// Why a caller was refused: no valid token ([`Code::Unauthenticated`]) or a token whose role
/// may not do this ([`Code::PermissionDenied`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer token, or not a valid one.
    Unauthenticated(&'static str),
    /// A valid token of a role that may not call this; the text names the roles that may.
    PermissionDenied(String),
}

impl Refusal {
    /// Its status class.
    pub fn code(&self) -> Code {
        match self {
            Refusal::Unauthenticated(_) => Code::Unauthenticated,
            Refusal::PermissionDenied(_) => Code::PermissionDenied,
        }
    }

    /// What to tell the caller.
    pub fn detail(&self) -> &str {
        match self {
            Refusal::Unauthenticated(d) => d,
            Refusal::PermissionDenied(d) => d,
        }
    }
}

/// Checks the `Authorization` header of a call that requires `need` (named by `what` in the
/// refusal, e.g. `post /v1/jobs`; made only when refused): the caller's role (`None` for an
/// open route), or the refusal. Shared by the REST routes and the gRPC service (whose
/// metadata are HTTP/2 headers).
pub fn check(
    tokens: &Tokens,
    need: Access,
    what: impl FnOnce() -> String,
    headers: &axum::http::HeaderMap,
) -> Result<Option<Role>, Refusal> {
    if need == Access::Open {
        return Ok(None);
    }
    let presented = headers.get(header::AUTHORIZATION).and_then(|v| bearer_token(v.as_bytes()));
    let Some(presented) = presented else {
        return Err(Refusal::Unauthenticated("this route needs `Authorization: Bearer <token>`"));
    };
    let Some(role) = tokens.role_of(presented) else {
        return Err(Refusal::Unauthenticated("the bearer token is not valid"));
    };
    if need.allows(role) {
        Ok(Some(role))
    } else {
        Err(Refusal::PermissionDenied(format!("{} needs {}", what(), need.describe())))
    }
}

/// The role of the token a request was let in with (a request extension; absent without
/// `--auth-tokens` and on open routes). Handlers that show less to some roles read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller(pub Role);

/// Checks the access of `route` (the matched route template, else the path) against the
/// request's bearer token: the caller's role (`None` for an open route), or the answer that
/// refuses it.
pub fn authorize(tokens: &Tokens, route: &str, req: &Request) -> Result<Option<Role>, Response> {
    let need = access(req.method(), route);
    let what = || format!("{} {route}", req.method().as_str().to_lowercase());
    check(tokens, need, what, req.headers()).map_err(|refused| match refused {
        Refusal::Unauthenticated(detail) => unauthenticated(detail),
        Refusal::PermissionDenied(detail) => {
            Problem::new(Code::PermissionDenied, detail).into_response()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_are_validated() {
        assert_eq!(Tokens::parse(r#"{"tokens": []}"#).unwrap_err(), TokensError::Empty);
        assert!(
            Tokens::parse(r#"{"tokens": [{"role": "root", "token": "0123456789abcdef"}]}"#)
                .is_err()
        );
        let short = Tokens::parse(r#"{"tokens": [{"role": "admin", "token": "short"}]}"#);
        assert_eq!(short.unwrap_err().to_string(), "token 0 is shorter than 16 characters");
        let dup = r#"{"tokens": [{"role": "admin", "token": "0123456789abcdef"}, {"role": "client", "token": "0123456789abcdef"}]}"#;
        assert_eq!(Tokens::parse(dup).unwrap_err(), TokensError::Twice(1));
        let t = Tokens::parse(r#"{"tokens": [{"role": "worker", "token": "0123456789abcdef"}]}"#)
            .unwrap();
        assert_eq!(t.role_of(b"0123456789abcdef"), Some(Role::Worker));
        assert_eq!(t.role_of(b"0123456789abcde"), None);
        assert!(!format!("{t:?}").contains("0123"), "tokens never printed");
        let m = Tokens::parse(r#"{"tokens": [{"role": "monitor", "token": "0123456789abcdef"}]}"#)
            .unwrap();
        assert_eq!(m.role_of(b"0123456789abcdef"), Some(Role::Monitor));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for v in ["Bearer tok", "bearer tok", "BEARER tok", "bEaReR   tok", " Bearer tok "] {
            assert_eq!(bearer_token(v.as_bytes()), Some(&b"tok"[..]), "{v:?}");
        }
        for v in ["Basic tok", "Bearer", "Bearer ", "Bearertok", "tok", "", "Bearers tok"] {
            assert_eq!(bearer_token(v.as_bytes()), None, "{v:?}");
        }
    }

    #[test]
    fn roles_are_least_privilege() {
        let metrics = access(&Method::GET, "/metrics");
        for role in [Role::Monitor, Role::Admin] {
            assert!(metrics.allows(role), "{role:?}");
        }
        for role in [Role::Worker, Role::Client] {
            assert!(!metrics.allows(role), "{role:?}");
        }
        // A monitor token reads the version and the metrics, and nothing else.
        for (m, p) in [
            (Method::GET, "/v1/cluster"),
            (Method::GET, "/v1/workers"),
            (Method::HEAD, "/v1/workers"),
            (Method::GET, "/v1/datasets/{dataset_id}"),
            (Method::GET, "/v1/jobs/{job_id}"),
            (Method::GET, "/v1/tasks/{task_id}/elements"),
            (Method::POST, "/v1/datasets"),
            (Method::POST, "/v1/workers/heartbeat"),
        ] {
            assert!(!access(&m, p).allows(Role::Monitor), "{m} {p}");
        }
        assert!(access(&Method::GET, "/v1/version").allows(Role::Monitor));
        assert_eq!(metrics.describe(), "the monitor role (or admin)");
        assert_eq!(
            access(&Method::GET, "/v1/cluster").describe(),
            "the worker or client role (or admin)"
        );
        assert_eq!(access(&Method::GET, "/v1/workers").describe(), "the client role (or admin)");
        assert_eq!(access(&Method::POST, "/v1/workers").describe(), "the admin role");
        // HEAD is GET without the body.
        assert_eq!(access(&Method::HEAD, "/metrics"), metrics);
        assert_eq!(access(&Method::HEAD, "/"), Access::Open);
    }

    /// One operation, one role set, whichever protocol names it.
    #[test]
    fn rest_and_grpc_name_the_same_operations_with_the_same_roles() {
        for (rpc, method, route) in [
            ("GetWorkers", Method::GET, "/v1/workers"),
            ("GetDatasetDef", Method::GET, "/v1/datasets/{dataset_id}"),
            ("GetDataServiceMetadata", Method::GET, "/v1/datasets/{dataset_id}"),
            ("GetVersion", Method::GET, "/v1/version"),
            ("WorkerHeartbeat", Method::POST, "/v1/workers/heartbeat"),
            ("WorkerUpdate", Method::POST, "/v1/workers/update"),
            ("GetSplit", Method::POST, "/v1/iterations/{iteration_id}/splits"),
            ("GetOrRegisterDataset", Method::POST, "/v1/datasets"),
            ("GetOrCreateJob", Method::POST, "/v1/jobs"),
            ("GetOrCreateIteration", Method::POST, "/v1/jobs/{job_id}/iterations"),
            ("ClientHeartbeat", Method::POST, "/v1/clients/{client_id}/heartbeat"),
            ("ReleaseIterationClient", Method::DELETE, "/v1/clients/{client_id}"),
            ("MaybeRemoveTask", Method::POST, "/v1/tasks/{task_id}/maybe-remove"),
        ] {
            assert_eq!(grpc_access(rpc), access(&method, route), "{rpc} and {method} {route}");
        }
        assert_eq!(grpc_access("NoSuchMethod"), Access::Only(Role::Admin));
        // Every route and RPC is named once.
        let mut rest: Vec<_> = OPERATIONS.iter().flat_map(|op| op.rest.iter()).collect();
        let mut grpc: Vec<_> = OPERATIONS.iter().flat_map(|op| op.grpc.iter()).collect();
        let (r, g) = (rest.len(), grpc.len());
        rest.sort();
        rest.dedup();
        grpc.sort();
        grpc.dedup();
        assert_eq!((rest.len(), grpc.len()), (r, g), "a route or an RPC named twice");
    }

    #[test]
    fn constant_time_eq() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
        assert!(!ct_eq(b"", b"a"));
    }
}

#[cfg(test)]
mod table {
    use super::*;

    /// Every documented operation has a deliberate access level: a new route fails this test
    /// until it is added here (and to `access`).
    #[test]
    fn every_openapi_route_has_its_role() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../../openapi/openapi.json")).unwrap();
        let expected: &[(&str, &str, Access)] = &[
            ("get", "/v1/version", Access::Any),
            ("get", "/v1/leader", Access::Any),
            ("post", "/v1/workers/heartbeat", Access::Only(Role::Worker)),
            ("post", "/v1/workers/update", Access::Only(Role::Worker)),
            ("post", "/v1/iterations/{iteration_id}/splits", Access::Only(Role::Worker)),
            ("get", "/v1/workers", Access::Only(Role::Client)),
            ("post", "/v1/datasets", Access::Only(Role::Client)),
            ("get", "/v1/datasets/{dataset_id}", Access::OneOf(&[Role::Worker, Role::Client])),
            ("delete", "/v1/datasets/{dataset_id}", Access::Only(Role::Client)),
            ("post", "/v1/jobs", Access::Only(Role::Client)),
            ("get", "/v1/jobs/{job_id}", Access::Only(Role::Client)),
            ("post", "/v1/jobs/{job_id}/iterations", Access::Only(Role::Client)),
            ("post", "/v1/clients/{client_id}/heartbeat", Access::Only(Role::Client)),
            ("delete", "/v1/clients/{client_id}", Access::Only(Role::Client)),
            ("post", "/v1/tasks/{task_id}/maybe-remove", Access::Only(Role::Client)),
            ("post", "/v1/cluster/resolve", Access::Only(Role::Client)),
            ("get", "/v1/cluster", Access::OneOf(&[Role::Worker, Role::Client])),
            ("get", "/healthz", Access::Open),
            ("get", "/readyz", Access::Open),
            ("get", "/metrics", Access::Only(Role::Monitor)),
            ("get", "/v1/status", Access::Only(Role::Monitor)),
            ("get", "/v1/tasks/{task_id}/elements", Access::Only(Role::Client)),
            ("get", "/v1/worker/status", Access::Only(Role::Monitor)),
        ];
        let mut seen = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                if method == "servers" {
                    continue; // the worker's route says where it is served
                }
                let want = expected
                    .iter()
                    .find(|(m, p, _)| m == method && p == path)
                    .unwrap_or_else(|| panic!("{method} {path} has no entry in the auth table"))
                    .2;
                let m = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
                assert_eq!(access(&m, path), want, "{method} {path}");
                seen += 1;
            }
        }
        assert_eq!(seen, expected.len());
        assert_eq!(access(&Method::GET, "/openapi.json"), Access::Open);
        assert_eq!(access(&Method::GET, "/"), Access::Open);
        assert_eq!(access(&Method::GET, "/ui/app.js"), Access::Open);
        assert_eq!(access(&Method::POST, "/"), Access::Only(Role::Admin));
    }
}
