//! `--auth-tokens`: every role against the routes it may and may not call, over HTTP.

use std::time::Duration;

use serde_json::{Value, json};
use shardwise_tests::fake_k8s::FakeKube;
use shardwise_tests::rawhttp::{self, Request};
use shardwise_tests::{
    Dispatcher, Process, TempDir, Worker, http, poll_until, repo_root, shardwise_bin,
};

const ADMIN: &str = "admin-token-0123456789";
const WORKER: &str = "worker-token-0123456789";
const CLIENT: &str = "client-token-0123456789";
const MONITOR: &str = "monitor-token-0123456789";
/// A token-shaped secret no server knows.
const WRONG: &str = "wrong-secret-token-9876543210";

/// A token file with one token per role, and the worker's `--token-file`.
fn token_files(dir: &TempDir) -> (String, String) {
    let file = dir.0.join("tokens.json");
    std::fs::write(&file, json!({"tokens": [
        {"role": "admin", "token": ADMIN}, {"role": "worker", "token": WORKER}, {"role": "client", "token": CLIENT},
        {"role": "monitor", "token": MONITOR}
    ]}).to_string()).unwrap();
    let worker = dir.0.join("worker-token");
    std::fs::write(&worker, WORKER).unwrap();
    (file.to_str().unwrap().to_owned(), worker.to_str().unwrap().to_owned())
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}\r\n")
}

fn call(
    d: &Dispatcher,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, String) {
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    send(&d.url, method, path, &auth, &payload)
}

/// One request with the header lines `headers` (each ending in CRLF) and a JSON body;
/// returns the status and the whole raw answer.
fn send(url: &str, method: &str, path: &str, headers: &str, payload: &str) -> (u16, String) {
    let mut request = Request::new(method, path);
    for line in headers.lines() {
        let (name, value) = line.split_once(": ").expect("a `Name: value` header line");
        request = request.header(name, value);
    }
    let raw = rawhttp::one_shot_text(url, &request.json_text(payload)).unwrap();
    (rawhttp::status_of(&raw), raw)
}

#[test]
fn roles_are_enforced_and_tokens_never_echoed() {
    let dir = TempDir::new("auth");
    let file = dir.0.join("tokens.json");
    std::fs::write(&file, json!({"tokens": [
        {"role": "admin", "token": ADMIN}, {"role": "worker", "token": WORKER}, {"role": "client", "token": CLIENT}
    ]}).to_string()).unwrap();
    let d = Dispatcher::start(&["--auth-tokens", file.to_str().unwrap()]);
    // Open routes.
    assert_eq!(http("GET", &d.url, "/healthz", None).unwrap().status, 200);
    assert_eq!(http("GET", &d.url, "/openapi.json", None).unwrap().status, 200);
    // No token, a wrong token: 401 with a problem body and WWW-Authenticate.
    let (st, raw) = call(&d, "GET", "/v1/version", None, None);
    assert_eq!(st, 401);
    assert!(raw.to_ascii_lowercase().contains("www-authenticate: bearer"), "{raw}");
    assert!(raw.contains("\"code\":\"UNAUTHENTICATED\""), "{raw}");
    let (st, raw) = call(&d, "GET", "/v1/version", Some("not-a-real-token-at-all"), None);
    assert_eq!(st, 401);
    assert!(!raw.contains("not-a-real-token-at-all"), "the token is not echoed");
    // Every role may read the version.
    for t in [ADMIN, WORKER, CLIENT] {
        assert_eq!(call(&d, "GET", "/v1/version", Some(t), None).0, 200);
    }
    // Client routes.
    let ds = json!({"dataset": {"source": {"range": {"stop": 3}}}});
    assert_eq!(call(&d, "POST", "/v1/datasets", Some(CLIENT), Some(ds.clone())).0, 200);
    let (st, raw) = call(&d, "POST", "/v1/datasets", Some(WORKER), Some(ds.clone()));
    assert_eq!(st, 403);
    assert!(raw.contains("\"code\":\"PERMISSION_DENIED\"") && !raw.contains(WORKER), "{raw}");
    assert_eq!(call(&d, "POST", "/v1/datasets", Some(ADMIN), Some(ds)).0, 200);
    // Worker routes.
    let hb = json!({"worker_address": "w:1"});
    assert_eq!(call(&d, "POST", "/v1/workers/heartbeat", Some(WORKER), Some(hb.clone())).0, 200);
    assert_eq!(call(&d, "POST", "/v1/workers/heartbeat", Some(CLIENT), Some(hb)).0, 403);
    // The worker list: a client's (as TensorFlow's GetWorkers), not a worker's.
    assert_eq!(call(&d, "GET", "/v1/workers", Some(CLIENT), None).0, 200);
    assert_eq!(call(&d, "GET", "/v1/workers", Some(WORKER), None).0, 403);
    assert_eq!(call(&d, "GET", "/v1/workers", Some(ADMIN), None).0, 200);
    // Admin-only: the metrics without a monitor token.
    assert_eq!(call(&d, "GET", "/metrics", Some(CLIENT), None).0, 403);
    assert_eq!(call(&d, "GET", "/metrics", Some(ADMIN), None).0, 200);
    // Nothing the dispatcher printed contains a token.
    let printed = d.output();
    for t in [ADMIN, WORKER, CLIENT] {
        assert!(!printed.contains(t), "token in the output");
    }
}

#[test]
fn bad_token_files_refuse_to_start() {
    let dir = TempDir::new("authbad");
    let file = dir.0.join("tokens.json");
    for text in [
        "{",
        r#"{"tokens": []}"#,
        r#"{"tokens": [{"role": "god", "token": "0123456789abcdefgh"}]}"#,
    ] {
        std::fs::write(&file, text).unwrap();
        let err = Dispatcher::try_start(&["--auth-tokens", file.to_str().unwrap()]).unwrap_err();
        assert!(
            err.contains("exited with Some(2)") && err.contains("--auth-tokens"),
            "{text}: {err}"
        );
    }
    let err = Dispatcher::try_start(&["--auth-tokens", "/nonexistent/tokens.json"]).unwrap_err();
    assert!(err.contains("cannot read --auth-tokens"), "{err}");
}

/// Who may call each documented operation, written out here independently of the server's
/// own table: `open` (no token), `any` (any valid token) or the roles, `|`-separated (admin
/// may call everything).
const EXPECTED: &[(&str, &str, &str)] = &[
    ("get", "/v1/version", "any"),
    ("get", "/v1/leader", "any"),
    ("post", "/v1/workers/heartbeat", "worker"),
    ("post", "/v1/workers/update", "worker"),
    ("post", "/v1/iterations/{iteration_id}/splits", "worker"),
    ("get", "/v1/workers", "client"),
    ("post", "/v1/datasets", "client"),
    ("get", "/v1/datasets/{dataset_id}", "worker|client"),
    ("delete", "/v1/datasets/{dataset_id}", "client"),
    ("post", "/v1/jobs", "client"),
    ("get", "/v1/jobs/{job_id}", "client"),
    ("post", "/v1/jobs/{job_id}/iterations", "client"),
    ("post", "/v1/clients/{client_id}/heartbeat", "client"),
    ("delete", "/v1/clients/{client_id}", "client"),
    ("post", "/v1/tasks/{task_id}/maybe-remove", "client"),
    ("post", "/v1/cluster/resolve", "client"),
    ("get", "/v1/cluster", "worker|client"),
    ("get", "/healthz", "open"),
    ("get", "/readyz", "open"),
    ("get", "/metrics", "monitor"),
    ("get", "/v1/tasks/{task_id}/elements", "client"),
    ("get", "/v1/status", "monitor"),
    ("get", "/v1/worker/status", "monitor"),
];

/// Every operation of `openapi/openapi.json`, on the server that serves it (the worker for
/// tag `worker-data-plane`), with no token, a wrong token and each role's token: 401, 403 or
/// let through exactly as [`EXPECTED`] says. An operation missing from it fails the test.
#[test]
fn every_documented_operation_is_checked_for_its_role() {
    let dir = TempDir::new("auth-walk");
    let (tokens, worker_token) = token_files(&dir);
    let d = Dispatcher::start(&["--auth-tokens", &tokens]);
    let w = Worker::start(&d.url, &["--token-file", &worker_token, "--auth-tokens", &tokens]);
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("openapi/openapi.json")).unwrap(),
    )
    .unwrap();
    let mut walked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if method == "servers" {
                continue; // the worker's route says where it is served
            }
            let need = EXPECTED
                .iter()
                .find(|(m, p, _)| m == method && p == path)
                .unwrap_or_else(|| {
                    panic!("{method} {path} is not in EXPECTED: say who may call it")
                })
                .2;
            // The document declares the same: `security: []` when open, else the bearer scheme
            // with the roles that may call it (admin always) as scopes and `x-shardwise-roles`.
            let declared = match need {
                "open" => json!([]),
                "any" => json!([{"bearerAuth": ["admin", "worker", "client", "monitor"]}]),
                roles => {
                    let mut roles: Vec<&str> = roles.split('|').collect();
                    if !roles.contains(&"admin") {
                        roles.push("admin");
                    }
                    json!([{"bearerAuth": roles}])
                }
            };
            assert_eq!(op["security"], declared, "{method} {path}");
            if need != "open" {
                assert_eq!(op["x-shardwise-roles"], declared[0]["bearerAuth"], "{method} {path}");
            }
            let on_worker = op["tags"].as_array().unwrap().iter().any(|t| t == "worker-data-plane");
            let url = if on_worker { &w.url } else { &d.url };
            let concrete = path
                .replace("{dataset_id}", "some-dataset")
                .replace("{job_id}", "5000")
                .replace("{iteration_id}", "2000")
                .replace("{client_id}", "3000")
                .replace("{task_id}", "4000");
            assert!(!concrete.contains('{'), "fill in the parameters of {path}");
            let method = method.to_ascii_uppercase();
            let body = if method == "POST" { "{}" } else { "" };
            let what = format!("{method} {concrete}");
            let mut answers = vec![(None, send(url, &method, &concrete, "", body))];
            for t in [WRONG, ADMIN, WORKER, CLIENT, MONITOR] {
                answers.push((Some(t), send(url, &method, &concrete, &bearer(t), body)));
            }
            for (token, (status, raw)) in answers {
                for secret in [WRONG, ADMIN, WORKER, CLIENT, MONITOR] {
                    assert!(!raw.contains(secret), "{what} echoed a token: {raw}");
                }
                let allowed = match (need, token) {
                    ("open", _) => true,
                    (_, None | Some(WRONG)) => {
                        assert_eq!(status, 401, "{what} with {token:?}: {raw}");
                        assert!(raw.contains("application/problem+json"), "{what}: {raw}");
                        assert!(raw.to_ascii_lowercase().contains("www-authenticate: bearer"));
                        continue;
                    }
                    (_, Some(ADMIN)) | ("any", _) => true,
                    (roles, Some(t)) => roles.split('|').any(|r| match r {
                        "worker" => t == WORKER,
                        "client" => t == CLIENT,
                        "monitor" => t == MONITOR,
                        "admin" => false,
                        other => panic!("unknown role {other:?} in EXPECTED"),
                    }),
                };
                if allowed {
                    assert!(status != 401 && status != 403, "{what} refused {token:?}: {raw}");
                } else {
                    assert_eq!(status, 403, "{what} let {token:?} through: {raw}");
                    assert!(raw.contains("\"code\":\"PERMISSION_DENIED\""), "{what}: {raw}");
                }
            }
            walked += 1;
        }
    }
    assert_eq!(walked, EXPECTED.len(), "every row of EXPECTED is a documented operation");
    // The worker's undocumented metrics route: monitor (or admin) only.
    assert_eq!(send(&w.url, "GET", "/metrics", &bearer(CLIENT), "").0, 403);
    assert_eq!(send(&w.url, "GET", "/metrics", &bearer(WORKER), "").0, 403);
    assert_eq!(send(&w.url, "GET", "/metrics", &bearer(MONITOR), "").0, 200);
    assert_eq!(send(&w.url, "GET", "/metrics", &bearer(ADMIN), "").0, 200);
}

/// RFC 9110: the auth scheme is case-insensitive. `bearer`, `BEARER` and `BeArEr` are
/// `Bearer`, on the dispatcher and on the worker; other schemes stay 401. A monitor token
/// reads `/metrics` on both (what Prometheus scrapes with) and nothing that is not its.
#[test]
fn the_bearer_scheme_is_case_insensitive_and_a_monitor_token_reads_metrics() {
    let dir = TempDir::new("auth-scheme");
    let (tokens, worker_token) = token_files(&dir);
    let d = Dispatcher::start(&["--auth-tokens", &tokens]);
    let w = Worker::start(&d.url, &["--token-file", &worker_token, "--auth-tokens", &tokens]);
    for scheme in ["Bearer", "bearer", "BEARER", "BeArEr"] {
        let auth = |t: &str| format!("Authorization: {scheme} {t}\r\n");
        let (st, raw) = send(&d.url, "GET", "/v1/version", &auth(CLIENT), "");
        assert_eq!(st, 200, "{scheme}: {raw}");
        let (st, raw) = send(&d.url, "GET", "/metrics", &auth(MONITOR), "");
        assert_eq!(st, 200, "{scheme}: {raw}");
        assert!(raw.contains("shardwise_"), "{raw}");
        let (st, raw) = send(&w.url, "GET", "/metrics", &auth(MONITOR), "");
        assert_eq!(st, 200, "{scheme}: {raw}");
        assert!(raw.contains("shardwise_worker_tasks"), "{raw}");
        let (st, raw) = send(&w.url, "GET", "/v1/tasks/1/elements", &auth(MONITOR), "");
        assert_eq!(st, 403, "{scheme}: {raw}");
    }
    for bad in ["Basic", "Bearer:", "Token"] {
        let (st, raw) =
            send(&d.url, "GET", "/v1/version", &format!("Authorization: {bad} {CLIENT}\r\n"), "");
        assert_eq!(st, 401, "{bad}: {raw}");
    }
    // Least privilege: the monitor token reads nothing but the metrics and the version.
    assert_eq!(send(&d.url, "GET", "/v1/version", &bearer(MONITOR), "").0, 200);
    for path in ["/v1/workers", "/v1/cluster", "/v1/datasets/1000", "/v1/jobs/5000"] {
        let (st, raw) = send(&d.url, "GET", path, &bearer(MONITOR), "");
        assert_eq!(st, 403, "{path}: {raw}");
        assert!(raw.contains("\"code\":\"PERMISSION_DENIED\""), "{raw}");
    }
    let ds = json!({"dataset": {"source": {"range": {"stop": 3}}}}).to_string();
    assert_eq!(send(&d.url, "POST", "/v1/datasets", &bearer(MONITOR), &ds).0, 403);
    // Client and worker tokens no longer read the metrics.
    for t in [CLIENT, WORKER] {
        assert_eq!(send(&d.url, "GET", "/metrics", &bearer(t), "").0, 403);
    }
}

/// The worker's element route needs the client role: no token 401, a worker token 403, a
/// client token reads the elements.
#[test]
fn worker_elements_need_the_client_role() {
    let dir = TempDir::new("auth-elements");
    let (tokens, worker_token) = token_files(&dir);
    let d = Dispatcher::start(&["--auth-tokens", &tokens]);
    let w = Worker::start(&d.url, &["--token-file", &worker_token, "--auth-tokens", &tokens]);
    let client = bearer(CLIENT);
    let post = |path: &str, body: Value| {
        let (status, raw) = send(&d.url, "POST", path, &client, &body.to_string());
        assert_eq!(status, 200, "{path}: {raw}");
        let body = raw.split_once("\r\n\r\n").unwrap().1;
        serde_json::from_str::<Value>(body).unwrap()
    };
    let ds = post("/v1/datasets", json!({"dataset": {"source": {"range": {"stop": 5}}}}));
    let job = post(
        "/v1/jobs",
        json!({"dataset_id": ds["dataset_id"], "processing_mode": "parallel_epochs"}),
    );
    let lease =
        post(&format!("/v1/jobs/{}/iterations", job["job_id"].as_str().unwrap()), json!({}));
    let client_id = lease["client_id"].as_str().unwrap();
    let task_id = poll_until("a task for the client", Duration::from_secs(30), || {
        let hb = post(&format!("/v1/clients/{client_id}/heartbeat"), json!({}));
        match hb["tasks"].as_array().and_then(|t| t.first()) {
            Some(t) => Ok(t["task_id"].as_str().unwrap().to_owned()),
            None => Err(hb),
        }
    });
    let path = format!("/v1/tasks/{task_id}/elements");
    let (status, raw) = send(&w.url, "GET", &path, "", "");
    assert_eq!(status, 401, "{raw}");
    assert!(raw.contains("\"code\":\"UNAUTHENTICATED\""), "{raw}");
    let (status, raw) = send(&w.url, "GET", &path, &bearer(WORKER), "");
    assert_eq!(status, 403, "{raw}");
    assert!(raw.contains("\"code\":\"PERMISSION_DENIED\"") && !raw.contains(WORKER), "{raw}");
    // The worker learns of the task at once when a client asks: 404 until then.
    let raw = poll_until("the worker serves the task", Duration::from_secs(30), || {
        let (status, raw) = send(&w.url, "GET", &path, &client, "");
        if status == 200 {
            return Ok(raw);
        }
        assert_eq!(status, 404, "{raw}");
        Err(raw)
    });
    assert!(raw.contains("\"elements\":[0"), "{raw}");
}

/// Trace-level logging on both servers, right and wrong tokens, and a Kubernetes API that
/// refuses the dispatcher's bearer token: no token value appears in anything they print or
/// answer (`GET /v1/cluster`'s freshness and last error, the resolve error body, the logs).
#[test]
fn no_secret_in_logs_or_error_bodies() {
    let dir = TempDir::new("auth-secrets");
    let (tokens, worker_token) = token_files(&dir);
    let kube = FakeKube::start();
    let (kubeconfig, cluster, request) = kube.tf_worker_cluster(&dir.0, &["10.0.0.1"]);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let trace = [("SHARDWISE_LOG", "trace"), ("RUST_LOG", "trace"), ("KUBECONFIG", kubeconfig)];
    let d = Dispatcher::try_start_env(
        &["--auth-tokens", &tokens, "--cluster-config", cluster.to_str().unwrap()],
        &trace,
    )
    .unwrap_or_else(|e| panic!("dispatcher: {e}"));
    assert!(kube.wait_for_watchers(1, Duration::from_secs(30)), "{}", d.output());
    let w = Process::spawn(
        std::process::Command::new(shardwise_bin())
            .args(["worker", "--port", "0", "--dispatcher", &d.url])
            .args(["--token-file", &worker_token, "--auth-tokens", &tokens])
            .envs(trace),
    );
    let line = w
        .wait_for_line(|l| l.contains("listening on "), Duration::from_secs(30))
        .unwrap_or_else(|| panic!("worker: {:?}", w.output()));
    let worker_url = line.rsplit(' ').next().unwrap().trim().to_owned();

    let bodies = std::cell::RefCell::new(String::new());
    let ask = |url: &str, method: &str, path: &str, headers: &str, body: &str| {
        let (status, raw) = send(url, method, path, headers, body);
        bodies.borrow_mut().push_str(&raw);
        status
    };
    for t in [ADMIN, WORKER, CLIENT, WRONG] {
        ask(&d.url, "GET", "/v1/version", &bearer(t), "");
        ask(&d.url, "GET", "/v1/workers", &bearer(t), "");
        ask(&worker_url, "GET", "/v1/tasks/1/elements", &bearer(t), "");
        // Malformed and misplaced credentials.
        ask(&d.url, "GET", "/v1/version", &format!("Authorization: bearer {t}\r\n"), "");
        ask(&d.url, "GET", "/v1/version", &format!("Authorization: Basic {t}\r\n"), "");
        ask(&d.url, "GET", &format!("/v1/version?access_token={t}"), "", "");
        ask(&d.url, "POST", "/v1/datasets", &bearer(t), &format!("{{\"token\": \"{t}\"}}"));
    }
    // The Kubernetes API refuses the token: a resolve is UNAVAILABLE naming the refusal (its
    // watch is idle, so the fault meets the resolve's own list).
    let admin = bearer(ADMIN);
    kube.fail_next(1, 403);
    let status = ask(&d.url, "POST", "/v1/cluster/resolve", &admin, &request.to_string());
    assert_eq!(status, 503, "a refused resolve is UNAVAILABLE: {}", bodies.borrow());
    assert!(bodies.borrow().contains("403"), "the refusal is named");
    assert!(kube.last_authorization().is_some_and(|a| a.contains(kube.token())), "it was sent");
    // And the live view goes stale with a last error.
    kube.fail_next(1_000_000, 401);
    kube.reset_watches();
    let view = poll_until("a 401 as the watch's last_error", Duration::from_secs(60), || {
        let (status, raw) = send(&d.url, "GET", "/v1/cluster", &admin, "");
        bodies.borrow_mut().push_str(&raw);
        assert_eq!(status, 200, "{raw}");
        let view: Value = serde_json::from_str(raw.split_once("\r\n\r\n").unwrap().1).unwrap();
        if view["freshness"]["watches"][0]["last_error"].as_str().is_some_and(|e| e.contains("401"))
        {
            Ok(view)
        } else {
            Err(view)
        }
    });
    assert_eq!(view["freshness"]["watches"][0]["healthy"], false, "{view}");
    let bodies = bodies.into_inner();

    let (w_out, w_err) = w.output();
    let printed = format!("{}{w_out}{w_err}", d.output());
    assert!(printed.contains("TRACE") || printed.contains("DEBUG"), "trace logging is on");
    for secret in [ADMIN, WORKER, CLIENT, WRONG, kube.token()] {
        assert!(!printed.contains(secret), "{secret} in the logs");
        assert!(!bodies.contains(secret), "{secret} in an answer");
    }
}

/// `GET /v1/status` with a monitor token shows the `--cluster-config` membership's size and
/// freshness but not its hosts (a monitor token may not read `GET /v1/cluster` either); an
/// admin token shows the members.
#[test]
fn a_monitor_token_sees_the_clusters_size_not_its_hosts() {
    let dir = TempDir::new("auth-status-cluster");
    let (tokens, _) = token_files(&dir);
    let kube = FakeKube::start();
    let (kubeconfig, cluster, _) = kube.tf_worker_cluster(&dir.0, &["10.0.0.1", "10.0.0.2"]);
    let d = Dispatcher::try_start_env(
        &["--auth-tokens", &tokens, "--cluster-config", cluster.to_str().unwrap()],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
    )
    .unwrap_or_else(|e| panic!("dispatcher: {e}"));
    let status = |token: &str| {
        let (code, raw) = call(&d, "GET", "/v1/status", Some(token), None);
        assert_eq!(code, 200, "{raw}");
        let body = raw.split_once("\r\n\r\n").unwrap().1;
        serde_json::from_str::<serde_json::Value>(body).unwrap()["cluster"].clone()
    };
    let monitor = status(MONITOR);
    assert_eq!(monitor["total_members"], 2, "{monitor}");
    assert_eq!(monitor["members_hidden"], true, "{monitor}");
    assert_eq!(monitor["members"], json!([]), "{monitor}");
    assert!(!monitor.to_string().contains("10.0.0."), "{monitor}");
    assert_eq!(call(&d, "GET", "/v1/cluster", Some(MONITOR), None).0, 403);
    let admin = status(ADMIN);
    assert_eq!(admin["members_hidden"], false, "{admin}");
    assert_eq!(admin["members"].as_array().map(Vec::len), Some(2), "{admin}");
}

/// One role table for REST and gRPC: a token gets the same answer for the same operation over
/// either (a client token could call `GetWorkers` but not `GET /v1/workers`, a worker
/// token `GetDatasetDef` but not `GET /v1/datasets/{id}`); `HEAD` is allowed where `GET` is.
#[tokio::test]
async fn a_token_gets_the_same_answer_over_rest_and_grpc() {
    use shardwise_gateway::tf::proto::tensorflow::data as tf;
    let dir = TempDir::new("auth-grpc-rest");
    let (tokens, _) = token_files(&dir);
    let d = Dispatcher::start(&["--auth-tokens", &tokens]);
    let ds = json!({"dataset": {"source": {"range": {"stop": 3}}}});
    let url = d.url.clone();
    let (st, raw) = tokio::task::spawn_blocking(move || {
        send(&url, "POST", "/v1/datasets", &bearer(CLIENT), &ds.to_string())
    })
    .await
    .unwrap();
    assert_eq!(st, 200, "{raw}");
    let body = raw.split("\r\n\r\n").nth(1).unwrap();
    let id =
        serde_json::from_str::<Value>(body).unwrap()["dataset_id"].as_str().unwrap().to_owned();
    let channel =
        tonic::transport::Endpoint::from_shared(d.url.clone()).unwrap().connect().await.unwrap();
    let mut c = tf::dispatcher_service_client::DispatcherServiceClient::new(channel);
    fn with<T>(msg: T, token: &str) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
        r
    }
    for token in [CLIENT, WORKER, MONITOR, ADMIN] {
        // Allowed over gRPC: anything but PERMISSION_DENIED (a declarative dataset has no graph
        // for GetDatasetDef: FAILED_PRECONDITION, once let in).
        let allowed = |r: Result<(), tonic::Status>| match r {
            Ok(()) => true,
            Err(s) if s.code() == tonic::Code::PermissionDenied => false,
            Err(s) => {
                assert_ne!(s.code(), tonic::Code::Unauthenticated, "{s:?}");
                true
            }
        };
        let workers =
            allowed(c.get_workers(with(tf::GetWorkersRequest {}, token)).await.map(|_| ()));
        let request = tf::GetDatasetDefRequest { dataset_id: id.clone() };
        let def = allowed(c.get_dataset_def(with(request, token)).await.map(|_| ()));
        let request = tf::GetDataServiceMetadataRequest { dataset_id: id.clone() };
        let meta = allowed(c.get_data_service_metadata(with(request, token)).await.map(|_| ()));
        let url = d.url.clone();
        let path = format!("/v1/datasets/{id}");
        let rest = tokio::task::spawn_blocking(move || {
            let allowed = |(status, raw): (u16, String)| {
                assert_ne!(status, 401, "{raw}");
                status != 403
            };
            (
                allowed(send(&url, "GET", "/v1/workers", &bearer(token), "")),
                allowed(send(&url, "GET", &path, &bearer(token), "")),
            )
        })
        .await
        .unwrap();
        assert_eq!(workers, rest.0, "{token}: GetWorkers and GET /v1/workers");
        assert_eq!(def, rest.1, "{token}: GetDatasetDef and GET /v1/datasets/{{id}}");
        assert_eq!(meta, rest.1, "{token}: GetDataServiceMetadata and GET /v1/datasets/{{id}}");
        let want = match token {
            CLIENT => (true, true),
            WORKER => (false, true),
            MONITOR => (false, false),
            _ => (true, true),
        };
        assert_eq!(rest, want, "{token}");
    }
    // HEAD is GET without the body: a monitor token may HEAD /metrics, a client may not.
    let url = d.url.clone();
    let (monitor, client) = tokio::task::spawn_blocking(move || {
        (
            send(&url, "HEAD", "/metrics", &bearer(MONITOR), ""),
            send(&url, "HEAD", "/metrics", &bearer(CLIENT), ""),
        )
    })
    .await
    .unwrap();
    assert_eq!(monitor.0, 200, "{}", monitor.1);
    assert_eq!(client.0, 403, "{}", client.1);
}
