//! Issue 11 over HTTP, against the real binary: a caller that is not the worker holding a
//! task cannot change it, worker addresses are `host:port`, identical datasets share an id and
//! what datasets hold is bounded, error texts echo a capped prefix, enum errors name the valid
//! values, and request bodies are JSON objects.

use std::time::Duration;

use serde_json::{Value, json};
use shardwise_tests::{Dispatcher, HttpResponse, Worker, http, ints, ok, poll_until, rawhttp};

/// Worker flags: heartbeats often enough that a test does not wait.
const WORKER: &[&str] = &["--heartbeat-interval", "200ms"];

/// A refusal: `status`, the problem's `code`, and a body well under 1 KB.
fn refused(r: &HttpResponse, status: u16, code: &str) -> Value {
    assert_eq!(r.status, status, "{}", r.body);
    assert!(r.body.len() < 1024, "{} bytes: {}", r.body.len(), r.body);
    let p = r.json();
    assert_eq!(p["code"], code, "{}", r.body);
    p
}

fn detail(p: &Value) -> &str {
    p["detail"].as_str().unwrap()
}

/// Registers `ds`, creates a job in `mode` and an iteration; returns (iteration, client).
fn iteration(d: &Dispatcher, ds: Value, mode: Value) -> (String, String) {
    let id = ok(&d.call("POST", "/v1/datasets", Some(json!({"dataset": ds}))))["dataset_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let job =
        ok(&d.call("POST", "/v1/jobs", Some(json!({"dataset_id": id, "processing_mode": mode}))));
    let job_id = job["job_id"].as_str().unwrap();
    let lease = ok(&d.call("POST", &format!("/v1/jobs/{job_id}/iterations"), Some(json!({}))));
    (
        lease["iteration_id"].as_str().unwrap().to_owned(),
        lease["client_id"].as_str().unwrap().to_owned(),
    )
}

fn client_heartbeat(d: &Dispatcher, client: &str) -> Value {
    ok(&d.call("POST", &format!("/v1/clients/{client}/heartbeat"), Some(json!({}))))
}

/// The issue's reproduction, and its variants: an address that never registered, and the
/// real worker's address without (or with a guessed) `worker_uid`, send `completed: true`
/// for the real worker's task. Every one is refused and changes nothing; the real worker then
/// delivers every element and finishes the iteration itself.
#[test]
fn only_the_worker_holding_a_task_finishes_it() {
    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, WORKER);
    let (_, client) =
        iteration(&d, json!({"source": {"range": {"stop": 20}}}), json!("parallel_epochs"));
    let hb = client_heartbeat(&d, &client);
    let task = hb["tasks"][0]["task_id"].as_str().unwrap().to_owned();
    let address = w.address().to_owned();
    let finish = |worker_address: &str, uid: Option<&str>| {
        let mut body = json!({
            "worker_address": worker_address,
            "updates": [{"task_id": task, "completed": true}],
        });
        if let Some(uid) = uid {
            body["worker_uid"] = json!(uid);
        }
        d.call("POST", "/v1/workers/update", Some(body))
    };
    let p = refused(&finish("attacker.example:1", None), 404, "NOT_FOUND");
    assert!(detail(&p).contains("attacker.example:1"), "{p}");
    refused(&finish(&address, None), 403, "PERMISSION_DENIED");
    refused(&finish(&address, Some("guessed-uid")), 403, "PERMISSION_DENIED");
    // A caller that registers a worker of its own may finish its own task, not this one.
    ok(&d.call(
        "POST",
        "/v1/workers/heartbeat",
        Some(json!({"worker_address": "attacker.example:2"})),
    ));
    refused(&finish("attacker.example:2", None), 403, "PERMISSION_DENIED");
    let hb = client_heartbeat(&d, &client);
    assert_eq!(hb["iteration_finished"], false, "{hb}");
    let real = hb["tasks"].as_array().unwrap().iter().find(|t| t["task_id"] == task.as_str());
    assert_eq!(real.unwrap()["finished"], false, "{hb}");
    // The uid is a capability: no route shows it.
    let workers = ok(&d.call("GET", "/v1/workers", None));
    assert!(workers["workers"].as_array().unwrap().iter().all(|w| w.get("worker_uid").is_none()));
    assert!(!workers.to_string().contains("uid"), "{workers}");
    // The real worker still delivers everything, and finishes its task (with its uid).
    let mut got = Vec::new();
    let read = || http("GET", &w.url, &format!("/v1/tasks/{task}/elements?max=7"), None).unwrap();
    let mut r = poll_until("the worker gets the task", Duration::from_secs(30), || {
        let r = read();
        if r.status == 404 { Err(r.body) } else { Ok(r) }
    });
    loop {
        let v = ok(&r);
        got.extend(v["elements"].as_array().unwrap().iter().cloned());
        if v["end_of_sequence"] == true {
            break;
        }
        r = read();
    }
    assert_eq!(ints(&got), (0..20).collect::<Vec<_>>());
    poll_until("the worker reports its task finished", Duration::from_secs(30), || {
        let hb = client_heartbeat(&d, &client);
        let real = hb["tasks"].as_array().unwrap().iter().find(|t| t["task_id"] == task.as_str());
        if real.unwrap()["finished"] == true { Ok(()) } else { Err(hb) }
    });
}

/// Get-split (and its acknowledgement) from the worker's address without its uid is refused;
/// with it, splits come.
#[test]
fn only_the_worker_holding_a_task_takes_its_splits() {
    let d = Dispatcher::start(&[]);
    let hb = json!({"worker_address": "w1.example:1", "worker_uid": "uid-w1"});
    ok(&d.call("POST", "/v1/workers/heartbeat", Some(hb.clone())));
    let (it, _) =
        iteration(&d, json!({"source": {"range": {"stop": 20}}}), json!("distributed_epoch"));
    ok(&d.call("POST", "/v1/workers/heartbeat", Some(hb)));
    let path = format!("/v1/iterations/{it}/splits");
    let ask = |uid: Option<&str>, ack: Value| {
        let mut body =
            json!({"worker_address": "w1.example:1", "repetition": 0, "acknowledge": ack});
        if let Some(uid) = uid {
            body["worker_uid"] = json!(uid);
        }
        d.call("POST", &path, Some(body))
    };
    let p = refused(&ask(None, json!([])), 403, "PERMISSION_DENIED");
    assert!(!detail(&p).contains("uid-w1"), "{p}");
    refused(&ask(Some("uid-w2"), json!([])), 403, "PERMISSION_DENIED");
    let first = ok(&ask(Some("uid-w1"), json!([])));
    assert_eq!(first["splits"], json!([{"start": 0, "stop": 20}]));
    // Acknowledging without the uid is refused: the split is still held, and sent again.
    refused(&ask(None, first["split_ids"].clone()), 403, "PERMISSION_DENIED");
    assert_eq!(ok(&ask(Some("uid-w1"), json!([])))["split_ids"], first["split_ids"]);
}

/// Worker addresses are `host:port`: anything else is a 400 with a short body, wherever an
/// address enters (heartbeat, update, get-split, `--worker-addresses`).
#[test]
fn worker_addresses_are_host_port() {
    let d = Dispatcher::start(&[]);
    let megabyte = "a".repeat(1 << 20);
    for bad in [
        megabyte.as_str(),
        "w1:1\r\nX-Injected: yes",
        "w1 :1",
        "w1",
        "w1:0",
        "w1:70000",
        "http://w1:1",
        "under_score:1",
        "",
    ] {
        let p = refused(
            &d.call("POST", "/v1/workers/heartbeat", Some(json!({"worker_address": bad}))),
            400,
            "INVALID_ARGUMENT",
        );
        assert!(detail(&p).contains("is not host:port"), "{p}");
        assert!(!detail(&p).contains('\n'), "{p}");
        refused(
            &d.call(
                "POST",
                "/v1/workers/update",
                Some(json!({"worker_address": bad, "updates": []})),
            ),
            400,
            "INVALID_ARGUMENT",
        );
        refused(
            &d.call(
                "POST",
                "/v1/iterations/2000/splits",
                Some(json!({"worker_address": bad, "repetition": 0})),
            ),
            400,
            "INVALID_ARGUMENT",
        );
    }
    assert_eq!(ok(&d.call("GET", "/v1/workers", None))["workers"], json!([]));
    for good in ["w1.example:5050", "127.0.0.1:7001", "[::1]:7002"] {
        ok(&d.call("POST", "/v1/workers/heartbeat", Some(json!({"worker_address": good}))));
    }
    assert_eq!(ok(&d.call("GET", "/v1/workers", None))["workers"].as_array().unwrap().len(), 3);
    let Err(e) = Dispatcher::try_start(&["--worker-addresses", "w1:%port%,bad address:1"]) else {
        panic!("a bad --worker-addresses entry is refused");
    };
    assert!(e.contains("\"bad address:1\"") && e.contains("--worker-addresses"), "{e}");
    Dispatcher::start(&["--worker-addresses", "w1:%port%, w2:7000,w3"]);
}

/// The same definition and metadata registered twice without an id is one dataset; a small
/// `--max-dataset-bytes` refuses what does not fit with a clear RESOURCE_EXHAUSTED, and the
/// dispatcher keeps serving.
#[test]
fn identical_datasets_share_an_id_and_dataset_bytes_are_bounded() {
    let d = Dispatcher::start(&["--max-dataset-bytes", "2000"]);
    let register = |body: Value| d.call("POST", "/v1/datasets", Some(body));
    let ds =
        json!({"dataset": {"source": {"list": {"elements": [1, 2, 3]}}}, "metadata": {"a": 1}});
    let a = ok(&register(ds.clone()))["dataset_id"].clone();
    assert_eq!(ok(&register(ds.clone()))["dataset_id"], a);
    let other =
        json!({"dataset": {"source": {"list": {"elements": [1, 2, 3]}}}, "metadata": {"a": 2}});
    assert_ne!(ok(&register(other))["dataset_id"], a);
    let big = json!({"dataset": {"source": {"list": {"elements": vec![12345; 1000]}}}});
    let p = refused(&register(big), 429, "RESOURCE_EXHAUSTED");
    assert!(detail(&p).contains("max_dataset_bytes = 2000"), "{p}");
    assert!(detail(&p).contains("--max-dataset-bytes"), "{p}");
    // Still serving: duplicates and datasets that fit.
    assert_eq!(ok(&register(ds))["dataset_id"], a);
    ok(&register(json!({"dataset": {"source": {"range": {"stop": 5}}}})));
    ok(&d.call("GET", "/readyz", None));
    let Err(bad) = Dispatcher::try_start(&["--max-dataset-bytes", "0"]) else {
        panic!("--max-dataset-bytes 0 is refused");
    };
    assert!(bad.contains("--max-dataset-bytes"), "{bad}");
}

/// `list` (and `splits`) elements are JSON values: an integer literal past 64 bits
/// (`2^64`, `2^64 + 1`, below `-2^63`) is refused naming the value and the range, not read as
/// the nearest float (which made two different lists one dataset). Integers at the bounds and
/// written floats are kept as they are.
#[test]
fn integers_past_64_bits_are_refused_not_rounded_into_one_dataset() {
    let d = Dispatcher::start(&[]);
    let register = |elements: &str| {
        let body =
            format!(r#"{{"dataset": {{"source": {{"list": {{"elements": [{elements}]}}}}}}}}"#);
        let req = rawhttp::Request::new("POST", "/v1/datasets").json_text(&body);
        rawhttp::one_shot(&d.url, &req).unwrap()
    };
    let (a, b) = (register("18446744073709551616"), register("18446744073709551617"));
    eprintln!("2^64: {} {}\n2^64 + 1: {} {}", a.status, a.body, b.status, b.body);
    for (r, value) in [(a, "18446744073709551616"), (b, "18446744073709551617")] {
        let p = refused(&r, 400, "INVALID_ARGUMENT");
        assert!(detail(&p).contains(value), "{p}");
        assert!(detail(&p).contains("-9223372036854775808 to 18446744073709551615"), "{p}");
    }
    let r = register("[1, -9223372036854775809]");
    assert!(detail(&refused(&r, 400, "INVALID_ARGUMENT")).contains("-9223372036854775809"));
    // The largest integers are kept exactly: neighbours are different datasets.
    let id = |elements: &str| ok(&register(elements))["dataset_id"].as_str().unwrap().to_owned();
    assert_ne!(id("18446744073709551615"), id("18446744073709551614"));
    assert_ne!(id("-9223372036854775808"), id("-9223372036854775807"));
    // Written as floats, the same float is the same dataset, as asked.
    assert_eq!(id("1.8446744073709552e19"), id("18446744073709551616.0"));
}

/// Error texts echo at most a short prefix of what they were sent.
#[test]
fn long_input_is_echoed_as_a_short_prefix() {
    let d = Dispatcher::start(&[]);
    let long = "x".repeat(10_000);
    let range = json!({"source": {"range": {"stop": 3}}});
    let ds =
        ok(&d.call("POST", "/v1/datasets", Some(json!({"dataset": range}))))["dataset_id"].clone();
    let job = |body: Value| d.call("POST", "/v1/jobs", Some(body));
    for (what, r) in [
        ("dataset_id", d.call("POST", "/v1/datasets", Some(json!({"dataset": range, "dataset_id": long})))),
        ("worker address", d.call("POST", "/v1/workers/heartbeat", Some(json!({"worker_address": long})))),
        ("enum value", job(json!({"dataset_id": ds, "processing_mode": long}))),
        ("policy", job(json!({"dataset_id": ds, "processing_mode": {"sharding_policy": long}}))),
        ("target_workers", job(json!({"dataset_id": ds, "processing_mode": "parallel_epochs", "target_workers": long}))),
        ("unknown field", job(json!({"dataset_id": ds, "processing_mode": "parallel_epochs", long.as_str(): 1}))),
        ("job name", job(json!({"dataset_id": ds, "processing_mode": "parallel_epochs", "job_name": long}))),
        ("id", d.call("POST", "/v1/workers/update", Some(json!({"worker_address": "w:1", "updates": [{"task_id": long, "completed": true}]})))),
        ("path", d.call("GET", &format!("/v1/datasets/{long}"), None)),
        ("split id", d.call("POST", "/v1/iterations/2000/splits", Some(json!({"worker_address": "w:1", "repetition": 0, "acknowledge": [long]})))),
    ] {
        let p = refused(&r, 400, "INVALID_ARGUMENT");
        assert!(detail(&p).contains("xxxx"), "{what}: {p}");
    }
    let r = d.call(
        "POST",
        "/v1/jobs",
        Some(json!({"dataset_id": long, "processing_mode": "parallel_epochs"})),
    );
    refused(&r, 404, "NOT_FOUND");
    let r = d.call("GET", &format!("/v1/{long}"), None);
    refused(&r, 404, "NOT_FOUND");
}

/// An unknown processing mode, sharding policy or target_workers value is refused with a text
/// naming the valid values; a body that is JSON but not an object is refused on every route.
#[test]
fn enum_errors_name_the_valid_values_and_bodies_are_objects() {
    let d = Dispatcher::start(&[]);
    let range = json!({"source": {"range": {"stop": 3}}});
    let ds =
        ok(&d.call("POST", "/v1/datasets", Some(json!({"dataset": range}))))["dataset_id"].clone();
    let job = |extra: Value| {
        let mut body = json!({"dataset_id": ds, "processing_mode": "parallel_epochs"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        d.call("POST", "/v1/jobs", Some(body))
    };
    let p = refused(&job(json!({"processing_mode": "sideways"})), 400, "INVALID_ARGUMENT");
    for part in
        ["\"sideways\"", "parallel_epochs", "distributed_epoch", "sharding_policy", "FILE_OR_DATA"]
    {
        assert!(detail(&p).contains(part), "{part}: {p}");
    }
    assert!(!detail(&p).contains("untagged"), "{p}");
    for (extra, parts) in [
        (
            json!({"processing_mode": {"sharding_policy": "SIDEWAYS"}}),
            &["SIDEWAYS", "OFF", "DYNAMIC", "HINT"][..],
        ),
        (json!({"processing_mode": {"policy": "OFF"}}), &["policy", "sharding_policy"][..]),
        (json!({"processing_mode": 5}), &["parallel_epochs", "sharding_policy"][..]),
        (json!({"target_workers": "NOWHERE"}), &["NOWHERE", "AUTO", "ANY", "LOCAL"][..]),
    ] {
        let p = refused(&job(extra.clone()), 400, "INVALID_ARGUMENT");
        for part in parts {
            assert!(detail(&p).contains(part), "{extra} {part}: {p}");
        }
    }
    let job_id = ok(&job(json!({})))["job_id"].as_str().unwrap().to_owned();
    let routes = [
        "/v1/datasets".to_owned(),
        "/v1/jobs".to_owned(),
        format!("/v1/jobs/{job_id}/iterations"),
        "/v1/workers/heartbeat".to_owned(),
        "/v1/workers/update".to_owned(),
        "/v1/clients/3000/heartbeat".to_owned(),
        "/v1/iterations/2000/splits".to_owned(),
        "/v1/tasks/4000/maybe-remove".to_owned(),
        "/v1/cluster/resolve".to_owned(),
    ];
    for route in &routes {
        for body in [json!([1]), json!(1), json!("x"), Value::Null, json!(true), json!([])] {
            let p = refused(&d.call("POST", route, Some(body.clone())), 400, "INVALID_ARGUMENT");
            assert!(detail(&p).contains("must be a JSON object"), "{route} {body}: {p}");
        }
    }
    // `[1]` created no iteration.
    let job = ok(&d.call("GET", &format!("/v1/jobs/{job_id}"), None));
    assert_eq!(job["iterations"], json!([]));
}
