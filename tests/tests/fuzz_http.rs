//! Hostile requests against the dispatcher's real axum router (`shardwise_gateway::dispatcher::
//! router`), driven in process with `tower::ServiceExt::oneshot`: every route, with mutated
//! valid bodies (`tests/fuzz/requests.jsonl`, filled with the ids of a live session), arbitrary
//! JSON and broken JSON, hostile path parameters and query strings, other methods and content
//! types.
//!
//! Checked for every request: the answer is never 5xx; every 4xx is `application/problem+json`
//! with the documented shape (`type`, `title`, `status` equal to the HTTP status, `detail`,
//! `code`, and nothing else but `tf_exception` and `missing`); every 2xx of a JSON route is
//! JSON. Afterwards the dispatcher is consistent: a valid session still works, its derived
//! indexes match a rebuild (`State::check_heartbeat_index`), and the journal it wrote, encoded
//! and decoded as the gateway stores it, replays to the state it holds.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use shardwise_core::dispatch::framing::{Tail, segment_header};
use shardwise_core::dispatch::journal::{decode_updates, encode_update};
use shardwise_core::dispatch::{Dispatcher, DispatcherConfig, Update};
use shardwise_gateway::dispatcher::core::{
    DriverHandle, JournalWriter, SnapshotWriter, StagedSnapshot, Startup, now,
};
use shardwise_gateway::dispatcher::replica::ReplicaStatus;
use shardwise_gateway::dispatcher::{AppState, api_router, router};
use shardwise_gateway::http::limit::LimitConfig;
use shardwise_gateway::http::metrics::RouteMetrics;
use shardwise_tests::fuzz::{
    Budget, Rng, Verdict, corpus, hostile_value, keys_of, mutate_json, mutate_text, run, show_bytes,
};
use tower::ServiceExt;

/// The journal, kept in memory: appends are recorded, a compaction keeps only its snapshot.
#[derive(Clone, Default)]
struct MemoryJournal(Arc<Mutex<Vec<Update>>>);

impl JournalWriter for MemoryJournal {
    fn append(&mut self, updates: &[Update]) -> std::io::Result<()> {
        self.0.lock().expect("journal lock").extend_from_slice(updates);
        Ok(())
    }
    fn commit(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn segment_bytes(&self) -> u64 {
        0
    }
    // (Never called: the segment never grows past the threshold.)
    fn begin_compaction(&mut self) -> std::io::Result<Box<dyn SnapshotWriter>> {
        Err(std::io::Error::other("this journal does not compact"))
    }
    fn finish_compaction(&mut self, _: StagedSnapshot) -> std::io::Result<()> {
        Ok(())
    }
}

fn config() -> DispatcherConfig {
    // Fault tolerant: every reply waits until its records are in the journal, so the journal
    // is complete whenever no request is in flight.
    DispatcherConfig { fault_tolerant: true, ..DispatcherConfig::default() }
}

/// A request as the fuzzer builds it.
#[derive(Debug, Clone)]
struct Req {
    method: String,
    uri: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
}

fn show(r: &Req) -> String {
    format!("{} {} ({:?}) {}", r.method, r.uri, r.content_type, show_bytes(&r.body))
}

/// What came back.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    content_type: String,
    body: Vec<u8>,
}

async fn send(app: &axum::Router, r: &Req) -> Answer {
    let mut builder = Request::builder().method(r.method.as_str()).uri(r.uri.as_str());
    if let Some(ct) = r.content_type {
        builder = builder.header(header::CONTENT_TYPE, ct);
    }
    let request = builder.body(Body::from(r.body.clone())).expect("a well-formed request");
    let response = app.clone().oneshot(request).await.expect("the router is infallible");
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("the body is readable")
        .to_vec();
    Answer { status, content_type, body }
}

/// The documented answer shape; panics (with the request) otherwise.
fn check_answer(r: &Req, a: &Answer) -> Verdict {
    let what = || format!("{} -> {} {}", show(r), a.status, String::from_utf8_lossy(&a.body));
    assert!(!a.status.is_server_error(), "5xx: {}", what());
    if a.status.is_client_error() {
        assert!(
            a.content_type.starts_with("application/problem+json"),
            "not a problem: {}",
            what()
        );
        let problem: Value =
            serde_json::from_slice(&a.body).unwrap_or_else(|e| panic!("{e}: {}", what()));
        let fields = problem.as_object().unwrap_or_else(|| panic!("not an object: {}", what()));
        for key in ["type", "title", "detail", "code"] {
            assert!(fields.get(key).is_some_and(Value::is_string), "no {key}: {}", what());
        }
        assert_eq!(
            fields.get("status").and_then(Value::as_u64),
            Some(u64::from(a.status.as_u16())),
            "{}",
            what()
        );
        for key in fields.keys() {
            assert!(
                ["type", "title", "status", "detail", "code", "tf_exception", "missing"]
                    .contains(&key.as_str()),
                "undocumented member {key}: {}",
                what()
            );
        }
        let code = fields["code"].as_str().unwrap_or_default();
        assert!(
            !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
            "{}",
            what()
        );
        return Verdict::Rejected;
    }
    assert!(a.status.is_success(), "neither success nor error: {}", what());
    let path = r.uri.split('?').next().unwrap_or_default();
    if path.starts_with("/v1/") || path == "/healthz" || path == "/readyz" {
        assert!(a.content_type.starts_with("application/json"), "{}", what());
        let _: Value =
            serde_json::from_slice(&a.body).unwrap_or_else(|e| panic!("{e}: {}", what()));
    }
    Verdict::Accepted
}

/// One template of the corpus.
#[derive(Debug, Clone)]
struct Template {
    method: String,
    path: String,
    body: Option<Value>,
}

fn templates() -> Vec<Template> {
    corpus("requests")
        .into_iter()
        .map(|v| Template {
            method: v["method"].as_str().expect("method").to_owned(),
            path: v["path"].as_str().expect("path").to_owned(),
            body: v.get("body").cloned(),
        })
        .collect()
}

/// Ids of the live session, by placeholder name.
type Ids = BTreeMap<&'static str, String>;

fn fill_text(text: &str, ids: &Ids) -> String {
    let mut out = text.to_owned();
    for (name, id) in ids {
        out = out.replace(&format!("{{{name}}}"), id);
    }
    out
}

fn fill(v: &Value, ids: &Ids) -> Value {
    match v {
        Value::String(s) => Value::String(fill_text(s, ids)),
        Value::Array(a) => Value::Array(a.iter().map(|x| fill(x, ids)).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, x)| (k.clone(), fill(x, ids))).collect())
        }
        other => other.clone(),
    }
}

/// Percent-encodes what a URI path segment or query may not hold as is.
fn encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~%=&?".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

const HOSTILE_IDS: &[&str] = &[
    "0",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "1.5",
    "1e3",
    "abc",
    "%00",
    "..",
    "%2e%2e%2f",
    "é",
    "\u{1F600}",
    " ",
    "%",
    "%zz",
    "null",
    "{}",
    "0x10",
    "+1",
    "01",
];

const CONTENT_TYPES: &[&str] = &[
    "text/plain",
    "application/problem+json",
    "application/json; charset=utf-8",
    "application/x-www-form-urlencoded",
    "APPLICATION/JSON",
    "application/",
];

fn make(rng: &mut Rng, templates: &[Template], ids: &Ids, keys: &[&str]) -> Req {
    let t = rng.pick(templates);
    // Path parameters: the session's ids, or one time in five a hostile one.
    let mut path = t.path.clone();
    for name in ["dataset", "job", "iteration", "client", "task"] {
        let hole = format!("{{{name}}}");
        if path.contains(&hole) {
            let id = if rng.one_in(5) {
                if rng.one_in(3) {
                    mutate_text(rng, &[ids[name].clone()], HOSTILE_IDS)
                } else {
                    (*rng.pick(HOSTILE_IDS)).to_owned()
                }
            } else {
                ids[name].clone()
            };
            path = path.replace(&hole, &encode(&id));
        }
    }
    if rng.one_in(10) {
        let query = mutate_text(
            rng,
            &["after=1&wait=10ms".to_owned()],
            &["&", "=", "after", "wait", "ms", "-", "99999999999999999999"],
        );
        path = format!("{}?{}", path.split('?').next().unwrap_or_default(), encode(&query));
    }
    let method = if rng.one_in(25) {
        (*rng.pick(&["GET", "POST", "DELETE", "PUT", "PATCH"])).to_owned()
    } else {
        t.method.clone()
    };
    let same_route: Vec<Value> = templates
        .iter()
        .filter(|x| x.path == t.path)
        .filter_map(|x| x.body.as_ref().map(|b| fill(b, ids)))
        .collect();
    let body = match (&t.body, rng.below(10)) {
        (None, 0) => hostile_value(rng).to_string().into_bytes(),
        (None, _) => Vec::new(),
        (Some(_), 0..=5) => mutate_json(rng, &same_route, keys).to_string().into_bytes(),
        (Some(_), 6) => hostile_value(rng).to_string().into_bytes(),
        (Some(b), 7) => fill(b, ids).to_string().into_bytes(),
        (Some(_), _) => {
            let texts: Vec<String> = same_route.iter().map(Value::to_string).collect();
            mutate_text(
                rng,
                &texts,
                &["\"", "{", "}", "[", "]", ":", ",", "1e999", "-0", "\\u0000", "\"dataset_id\":"],
            )
            .into_bytes()
        }
    };
    let content_type = if rng.one_in(8) {
        if rng.one_in(3) { None } else { Some(*rng.pick(CONTENT_TYPES)) }
    } else {
        Some("application/json")
    };
    Req { method, uri: path, content_type, body }
}

fn post(uri: &str, body: Value) -> Req {
    Req {
        method: "POST".into(),
        uri: uri.into(),
        content_type: Some("application/json"),
        body: body.to_string().into_bytes(),
    }
}

fn id_of(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

/// A valid session (dataset, DYNAMIC job, iteration, client heartbeat, a worker with a task,
/// a split); every step must succeed. Returns the ids it created.
async fn session(app: &axum::Router, worker: &str) -> Ids {
    let ok = |r: &Req, a: Answer| -> Value {
        assert_eq!(a.status, StatusCode::OK, "{} -> {}", show(r), String::from_utf8_lossy(&a.body));
        serde_json::from_slice(&a.body).expect("a JSON reply")
    };
    let r = post("/v1/datasets", json!({"dataset": {"source": {"range": {"stop": 100}}}}));
    let dataset = id_of(&ok(&r, send(app, &r).await)["dataset_id"]);
    let r = post(
        "/v1/jobs",
        json!({"dataset_id": dataset, "processing_mode": "distributed_epoch", "split_size": 4}),
    );
    let job = id_of(&ok(&r, send(app, &r).await)["job_id"]);
    let r = post(&format!("/v1/jobs/{job}/iterations"), json!({}));
    let lease = ok(&r, send(app, &r).await);
    let (iteration, client) = (id_of(&lease["iteration_id"]), id_of(&lease["client_id"]));
    let r = post(&format!("/v1/clients/{client}/heartbeat"), json!({}));
    ok(&r, send(app, &r).await);
    let r = post("/v1/workers/heartbeat", json!({"worker_address": worker}));
    let reply = ok(&r, send(app, &r).await);
    let task = reply["new_tasks"]
        .as_array()
        .and_then(|t| t.iter().find(|t| id_of(&t["iteration_id"]) == iteration))
        .map_or_else(|| "1".to_owned(), |t| id_of(&t["task_id"]));
    let r = post(
        &format!("/v1/iterations/{iteration}/splits"),
        json!({"worker_address": worker, "repetition": 0}),
    );
    let splits = ok(&r, send(app, &r).await);
    assert!(splits.is_object(), "{splits}");
    Ids::from([
        ("dataset", dataset),
        ("job", job),
        ("iteration", iteration),
        ("client", client),
        ("task", task),
        ("worker", worker.to_owned()),
    ])
}

/// A runtime and a dispatcher router on it, journaling into memory.
fn dispatcher() -> (tokio::runtime::Runtime, axum::Router, DriverHandle, MemoryJournal) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let _entered = rt.enter();
    let journal = MemoryJournal::default();
    let sink = journal.clone();
    let startup: Startup = Box::new(move || {
        let d = Dispatcher::new(config(), "fuzz".into(), now())?;
        let sink: Box<dyn JournalWriter> = Box::new(sink);
        Ok((d, Some(sink)))
    });
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let actor = DriverHandle::spawn(startup, move |e| {
        let _ = started_tx.send(e);
    });
    assert!(started_rx.recv().expect("the actor starts").is_none());
    let state = AppState {
        driver: actor.clone(),
        replica: Arc::new(ReplicaStatus::single("http://127.0.0.1:1".into())),
        fault_tolerant: true,
        journal_mode: shardwise_gateway::dispatcher::JournalMode::WorkDir,
        compact_at_bytes: 64 << 20,
        cluster: None,
        kube: Default::default(),
        max_resolve_tasks: shardwise_core::cluster::slurm::DEFAULT_MAX_TASKS,
        routes: Arc::new(RouteMetrics::for_document(&api_router().1)),
        pusher: Default::default(),
        footers: None,
    };
    let limits = LimitConfig { max_body_bytes: 1 << 20, ..LimitConfig::default() };
    let app = router(state, limits, None);
    drop(_entered);
    (rt, app, actor, journal)
}

/// Found by the journal fuzz target: a dataset nested deeper than the journal can replay was
/// acknowledged. Over HTTP it is now a 400 problem, and nothing reaches the journal.
#[test]
fn deeply_nested_dataset_is_refused_before_the_journal() {
    let (rt, app, _actor, journal) = dispatcher();
    let deep = (0..100).fold(json!(1), |v, _| json!([v]));
    for body in [
        json!({"dataset": {"source": {"list": {"elements": [deep.clone()]}}}}),
        json!({"dataset": {"source": {"splits": {"items": [deep.clone()]}}}}),
        json!({"dataset": {"source": {"range": {"stop": 1}}}, "metadata": deep}),
    ] {
        let r = post("/v1/datasets", body);
        let answer = rt.block_on(send(&app, &r));
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", show(&r));
        assert_eq!(check_answer(&r, &answer), Verdict::Rejected);
        let detail = String::from_utf8_lossy(&answer.body).into_owned();
        assert!(detail.contains("more than 64 levels deep"), "{detail}");
    }
    let journaled = journal.0.lock().expect("journal lock").clone();
    assert!(
        !journaled.iter().any(|u| matches!(u, Update::RegisterDataset { .. })),
        "{journaled:?}"
    );
}

#[test]
fn fuzz_request_bodies() {
    let (rt, app, actor, journal) = dispatcher();
    let ids = rt.block_on(session(&app, "fuzz-worker:1"));
    let templates = templates();
    let bodies: Vec<Value> = templates.iter().filter_map(|t| t.body.clone()).collect();
    let keys = keys_of(&bodies);
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut by_status = BTreeMap::<u16, u64>::new();
    let report = run(
        "request-bodies",
        Budget::from_env(5_000),
        |rng, _| make(rng, &templates, &ids, &keys),
        show,
        |r| {
            let answer = rt.block_on(send(&app, r));
            *by_status.entry(answer.status.as_u16()).or_default() += 1;
            check_answer(r, &answer)
        },
    );
    println!("fuzz request-bodies: answers by status {by_status:?}");
    assert!(report.accepted > 0 && report.rejected > 0, "{report:?}");

    // The dispatcher still serves a valid session, and is consistent.
    rt.block_on(session(&app, "after-fuzz:1"));
    let (live, index) = actor
        .inspect(|d| {
            (
                serde_json::to_value(d.state()).expect("state is JSON"),
                d.state().check_heartbeat_index(),
            )
        })
        .expect("the actor answers");
    assert_eq!(index, Ok(()), "derived indexes after the fuzz");
    // Through the bytes, as the gateway's journal stores them: what was acknowledged decodes.
    let updates = journal.0.lock().expect("journal lock").clone();
    let mut segment = segment_header().to_vec();
    for u in &updates {
        encode_update(u, &mut segment).expect("encode");
    }
    let decoded = decode_updates(&segment).expect("the journal decodes");
    assert_eq!(decoded.tail, Tail::Clean);
    assert_eq!(decoded.updates, updates);
    let replayed = Dispatcher::recover(config(), "replay".into(), now(), &updates).expect("replay");
    assert_eq!(
        serde_json::to_value(replayed.state()).expect("state is JSON"),
        live,
        "replaying the journal ({} records) gives another state",
        updates.len()
    );
}
