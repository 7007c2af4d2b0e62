//! `shardwise dispatcher` as a black box over HTTP on 127.0.0.1: the seed-shaped flow, the
//! error contract, and durability under kill -9.

use serde_json::{Value, json};
use shardwise_tests::{Dispatcher, TempDir, poll_until, rawhttp};

fn ok(r: &shardwise_tests::HttpResponse) -> Value {
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

#[test]
fn seed_flow_parallel_epochs() {
    let d = Dispatcher::start(&[]);
    let r = d.call("GET", "/v1/version", None);
    let id = r.header("x-request-id").expect("a request id is echoed").to_owned();
    let again = d.call("GET", "/v1/version", None);
    assert_ne!(again.header("x-request-id"), Some(id.as_str()), "ids are unique");
    assert!(!id.is_empty());
    let v = ok(&r);
    assert_eq!(v["fault_tolerant"], false);
    let incarnation = v["incarnation"].as_str().unwrap().to_owned();
    let ds = ok(&d.call(
        "POST",
        "/v1/datasets",
        Some(json!({"dataset": {"source": {"range": {"stop": 10}}}})),
    ));
    assert_eq!(ds["dataset_id"], "1000");
    let hb = ok(&d.call(
        "POST",
        "/v1/workers/heartbeat",
        Some(json!({"worker_address": "127.0.0.1:7001"})),
    ));
    assert_eq!(hb["incarnation"], incarnation.as_str());
    let job = ok(&d.call(
        "POST",
        "/v1/jobs",
        Some(json!({"dataset_id": "1000", "processing_mode": "parallel_epochs"})),
    ));
    assert_eq!(job["job_id"], "5000");
    let it = ok(&d.call("POST", "/v1/jobs/5000/iterations", Some(json!({}))));
    let client = it["client_id"].as_str().unwrap().to_owned();
    let c = ok(&d.call("POST", &format!("/v1/clients/{client}/heartbeat"), Some(json!({}))));
    assert_eq!(c["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(c["tasks"][0]["worker_address"], "127.0.0.1:7001");
    assert_eq!(c["iteration_finished"], false);
    let hb = ok(&d.call(
        "POST",
        "/v1/workers/heartbeat",
        Some(json!({"worker_address": "127.0.0.1:7001"})),
    ));
    let task = &hb["new_tasks"][0];
    assert_eq!(task["dataset"]["source"]["range"]["stop"], 10);
    assert_eq!(task["processing_mode"], "OFF");
    let task_id = task["task_id"].as_str().unwrap().to_owned();
    let up = ok(&d.call("POST", "/v1/workers/update", Some(json!({"worker_address": "127.0.0.1:7001", "updates": [{"task_id": task_id, "completed": true}]}))));
    assert_eq!(up["unknown_tasks"], json!([]));
    let c = ok(&d.call("POST", &format!("/v1/clients/{client}/heartbeat"), Some(json!({}))));
    assert_eq!(c["iteration_finished"], true);
    ok(&d.call("DELETE", &format!("/v1/clients/{client}"), None));
    let workers = ok(&d.call("GET", "/v1/workers", None));
    assert_eq!(workers["workers"][0]["worker_address"], "127.0.0.1:7001");
    let job = ok(&d.call("GET", "/v1/jobs/5000", None));
    assert_eq!(job["iterations"][0]["finished"], true);
    let ds = ok(&d.call("GET", "/v1/datasets/1000", None));
    assert_eq!(ds["dataset"]["source"]["range"]["stop"], 10);
}

#[test]
fn distributed_epoch_splits_over_http() {
    let d = Dispatcher::start(&[]);
    ok(&d.call(
        "POST",
        "/v1/datasets",
        Some(json!({"dataset": {"source": {"range": {"stop": 100}}}})),
    ));
    for w in ["w1:1", "w2:1"] {
        ok(&d.call("POST", "/v1/workers/heartbeat", Some(json!({"worker_address": w}))));
    }
    let job = ok(&d.call(
        "POST",
        "/v1/jobs",
        Some(
            json!({"dataset_id": "1000", "processing_mode": "distributed_epoch", "split_size": 7}),
        ),
    ));
    let it = ok(&d.call(
        "POST",
        &format!("/v1/jobs/{}/iterations", job["job_id"].as_str().unwrap()),
        Some(json!({})),
    ));
    let iteration = it["iteration_id"].as_str().unwrap().to_owned();
    let mut covered = [false; 100];
    let mut done = [false, false];
    while !done.iter().all(|x| *x) {
        for (i, w) in ["w1:1", "w2:1"].iter().enumerate() {
            if done[i] {
                continue;
            }
            let r = ok(&d.call(
                "POST",
                &format!("/v1/iterations/{iteration}/splits"),
                Some(json!({"worker_address": w, "repetition": 0, "max_splits": 3})),
            ));
            for s in r["splits"].as_array().unwrap() {
                for e in s["start"].as_u64().unwrap()..s["stop"].as_u64().unwrap() {
                    assert!(!covered[e as usize], "element {e} handed out twice");
                    covered[e as usize] = true;
                }
            }
            done[i] = r["end_of_splits"] == true;
        }
    }
    assert!(covered.iter().all(|c| *c));
}

#[test]
fn every_error_is_a_problem() {
    let d = Dispatcher::start(&["--max-body-bytes", "2000"]);
    let cases: Vec<(&str, &str, Option<Value>, u16, &str)> = vec![
        ("GET", "/nope", None, 404, "NOT_FOUND"),
        ("PUT", "/v1/version", None, 405, "INVALID_ARGUMENT"),
        (
            "POST",
            "/v1/jobs",
            Some(json!({"dataset_id": "1000", "processing_mode": "parallel_epochs", "bogus": 1})),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "POST",
            "/v1/jobs",
            Some(json!({"dataset_id": "1000", "processing_mode": "sometimes"})),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "POST",
            "/v1/jobs",
            Some(json!({"dataset_id": "nope", "processing_mode": "parallel_epochs"})),
            404,
            "NOT_FOUND",
        ),
        ("POST", "/v1/jobs/abc/iterations", Some(json!({})), 400, "INVALID_ARGUMENT"),
        ("POST", "/v1/jobs/99999/iterations", Some(json!({})), 404, "NOT_FOUND"),
        ("POST", "/v1/clients/3000/heartbeat", Some(json!({})), 404, "NOT_FOUND"),
        ("DELETE", "/v1/clients/-1", None, 400, "INVALID_ARGUMENT"),
        (
            "POST",
            "/v1/iterations/2000/splits",
            Some(json!({"worker_address": "w:1", "repetition": 0})),
            404,
            "NOT_FOUND",
        ),
        (
            "POST",
            "/v1/workers/heartbeat",
            Some(json!({"worker_address": ""})),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "POST",
            "/v1/datasets",
            Some(
                json!({"dataset": {"source": {"range": {"stop": 1}}, "transforms": [{"batch": {"size": 0}}]}}),
            ),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "POST",
            "/v1/datasets",
            Some(json!({"dataset": {"source": {"list": {"elements": vec![0; 1000]}}}})),
            413,
            "RESOURCE_EXHAUSTED",
        ),
        (
            "POST",
            "/v1/cluster/resolve",
            Some(json!({"resolver": {"simple": {"cluster": {"w": 5}}}})),
            400,
            "INVALID_ARGUMENT",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let r = d.call(method, path, body);
        assert_eq!(r.status, status, "{method} {path}: {}", r.body);
        assert_eq!(r.header("content-type"), Some("application/problem+json"), "{method} {path}");
        let p = r.json();
        assert_eq!(p["code"], code, "{method} {path}: {p}");
        for k in ["type", "title", "status", "detail", "code"] {
            assert!(p.get(k).is_some(), "{method} {path}: problem lacks {k}");
        }
    }
    // Invalid JSON, duplicate keys (also nested, also in the directly decoded hot-path
    // bodies) and unknown fields, sent raw.
    for (path, raw) in [
        ("/v1/datasets", "{"),
        ("/v1/datasets", r#"{"dataset": {}, "dataset": {}}"#),
        ("/v1/datasets", r#"{"dataset": {"source": {"range": {"stop": 1, "stop": 2}}}}"#),
        ("/v1/workers/heartbeat", r#"{"worker_address": "a:1", "worker_address": "b:1"}"#),
        ("/v1/workers/heartbeat", r#"{"worker_address": "a:1", "current_task": []}"#),
        (
            "/v1/workers/update",
            r#"{"worker_address": "a:1", "updates": [{"task_id": "4000", "completed": true, "completed": false}]}"#,
        ),
        (
            "/v1/iterations/2000/splits",
            r#"{"worker_address": "a:1", "repetition": 0, "repetition": 1}"#,
        ),
        ("/v1/clients/3000/heartbeat", r#"{"current_round": 1, "current_round": 2}"#),
    ] {
        let r = raw_post(&d.url, path, raw);
        assert_eq!(r.status, 400, "{raw}: {}", r.body);
        assert_eq!(r.json()["code"], "INVALID_ARGUMENT");
    }
    // The OpenAPI document is served, and equals the checked-in one.
    let served = ok(&d.call("GET", "/openapi.json", None));
    let checked_in: Value =
        serde_json::from_str(include_str!("../../openapi/openapi.json")).unwrap();
    assert_eq!(served, checked_in);
    // Swagger UI, from vendored assets.
    let docs = d.call("GET", "/docs/", None);
    assert_eq!(docs.status, 200);
    assert!(docs.body.contains("Swagger UI"));
    // The resolve contract over HTTP.
    let r = d.call("POST", "/v1/cluster/resolve", Some(json!({"resolver": {"simple": {"cluster": {"worker": ["a:1", "b:1"]}}}, "task_type": "worker", "task_id": 1})));
    assert_eq!(ok(&r)["role"]["is_chief"], false);
}

fn raw_post(base: &str, path: &str, body: &str) -> shardwise_tests::HttpResponse {
    rawhttp::one_shot(base, &rawhttp::Request::new("POST", path).json_text(body)).unwrap()
}

#[test]
fn kill_9_loses_nothing_acknowledged() {
    let dir = TempDir::new("kill9");
    let mut d = Dispatcher::start(&["--work-dir", dir.path(), "--fault-tolerant"]);
    let version = ok(&d.call("GET", "/v1/version", None));
    assert_eq!(version["fault_tolerant"], true);
    // A stream of state changes from another thread; the dispatcher is killed mid-stream.
    let url = d.url.clone();
    let writer = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for i in 0..400 {
            let body = json!({"dataset": {"source": {"range": {"stop": i + 1}}}});
            match shardwise_tests::http("POST", &url, "/v1/datasets", Some(&body)) {
                Ok(r) if r.status == 200 => {
                    acked.push((r.json()["dataset_id"].as_str().unwrap().to_owned(), i + 1))
                }
                _ => break,
            }
        }
        acked
    });
    // Kill once at least 60 records were committed (polling the live state, bounded; the
    // assertions below tell if the writer stalled).
    let _ = shardwise_tests::try_poll_until(std::time::Duration::from_secs(30), || {
        let r = d.call("GET", "/metrics", None);
        let done = r
            .body
            .lines()
            .find_map(|l| l.strip_prefix("shardwise_journal_records_total "))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        if done >= 60 { Ok(()) } else { Err(done) }
    });
    d.kill();
    let acked = writer.join().unwrap();
    assert!(acked.len() >= 30, "only {} acknowledged", acked.len());
    let d2 = Dispatcher::start(&["--work-dir", dir.path(), "--fault-tolerant"]);
    // The replay line is printed before the dispatcher reports ready.
    poll_until("the replay line", std::time::Duration::from_secs(2), || {
        let printed = d2.output();
        if printed.contains("replayed") { Ok(()) } else { Err(printed) }
    });
    for (id, stop) in &acked {
        let r = ok(&d2.call("GET", &format!("/v1/datasets/{id}"), None));
        assert_eq!(r["dataset"]["source"]["range"]["stop"], *stop, "dataset {id}");
    }
    // A recovery keeps the state's incarnation: workers and clients carry on.
    assert_eq!(ok(&d2.call("GET", "/v1/version", None))["incarnation"], version["incarnation"]);
    // New ids continue after the replayed ones (a dataset not registered before: the same
    // one again would get its id back).
    let next = ok(&d2.call(
        "POST",
        "/v1/datasets",
        Some(json!({"dataset": {"source": {"range": {"stop": 1_000_000}}}})),
    ));
    assert!(!acked.iter().any(|(id, _)| id == next["dataset_id"].as_str().unwrap()));
}

#[test]
fn a_corrupt_journal_refuses_to_start_and_a_torn_tail_is_truncated() {
    let dir = TempDir::new("corrupt");
    {
        let d = Dispatcher::start(&["--work-dir", dir.path(), "--fault-tolerant"]);
        for i in 0..5 {
            ok(&d.call(
                "POST",
                "/v1/datasets",
                Some(json!({"dataset": {"source": {"range": {"stop": i + 1}}}})),
            ));
        }
    }
    let seg =
        std::fs::read_dir(dir.0.join("journal")).unwrap().map(|e| e.unwrap().path()).min().unwrap();
    let good = std::fs::read(&seg).unwrap();
    // A torn tail: starts, with a warning, and keeps the first four records.
    std::fs::write(&seg, &good[..good.len() - 5]).unwrap();
    {
        let d = Dispatcher::start(&["--work-dir", dir.path(), "--fault-tolerant"]);
        assert_eq!(d.call("GET", "/v1/datasets/1003", None).status, 200);
        assert_eq!(d.call("GET", "/v1/datasets/1004", None).status, 404);
    }
    // A flipped byte in the middle: refuses with the file and the offset.
    let mut bad = good.clone();
    bad[40] ^= 0x55;
    std::fs::write(&seg, &bad).unwrap();
    let err = Dispatcher::try_start(&["--work-dir", dir.path(), "--fault-tolerant"]).unwrap_err();
    assert!(err.contains("is corrupt at byte offset 16"), "{err}");
    assert!(err.contains(seg.to_str().unwrap()), "{err}");
}

#[test]
fn flags_are_validated() {
    for args in [
        vec!["--fault-tolerant"],
        vec!["--worker-timeout", "-5s"],
        vec!["--client-timeout", "5"],
        vec!["--job-gc-timeout", "0s"],
    ] {
        let err = Dispatcher::try_start(&args).unwrap_err();
        assert!(err.contains("exited with Some(2)"), "{args:?}: {err}");
    }
}

#[test]
fn sigterm_shuts_down_cleanly_and_keeps_the_journal() {
    let dir = TempDir::new("sigterm");
    let mut d = Dispatcher::start(&["--work-dir", dir.path(), "--fault-tolerant"]);
    ok(&d.call(
        "POST",
        "/v1/datasets",
        Some(json!({"dataset": {"source": {"range": {"stop": 4}}}})),
    ));
    let pid = d.child.id().to_string();
    let status = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let exited = poll_until("an exit on SIGTERM", std::time::Duration::from_secs(10), || {
        d.child.try_wait().unwrap().ok_or("still running")
    });
    assert_eq!(exited.code(), Some(0), "exits with 0 on SIGTERM");
    let d2 = Dispatcher::start(&["--work-dir", dir.path(), "--fault-tolerant"]);
    assert_eq!(d2.call("GET", "/v1/datasets/1000", None).status, 200);
}

#[test]
fn metrics_count_and_time_every_route_and_the_journal() {
    let dir = TempDir::new("metrics");
    let d = Dispatcher::start(&["--work-dir", dir.path(), "--fault-tolerant"]);
    let hb = json!({"worker_address": "127.0.0.1:7000", "current_tasks": []});
    for _ in 0..3 {
        ok(&d.call("POST", "/v1/workers/heartbeat", Some(hb.clone())));
    }
    let bad = d.call("POST", "/v1/workers/heartbeat", Some(json!({"worker_address": 7})));
    assert_eq!(bad.status, 400);
    assert_eq!(d.call("GET", "/v1/jobs/5999", None).status, 404);
    let r = d.call("GET", "/metrics", None);
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let m = &r.body;
    for line in [
        "shardwise_http_requests_total{method=\"POST\",route=\"/v1/workers/heartbeat\",status=\"2xx\"} 3",
        "shardwise_http_requests_total{method=\"POST\",route=\"/v1/workers/heartbeat\",status=\"4xx\"} 1",
        "shardwise_http_requests_total{method=\"GET\",route=\"/v1/jobs/{job_id}\",status=\"4xx\"} 1",
        "shardwise_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/workers/heartbeat\"} 4",
        "shardwise_http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/workers/heartbeat\",le=\"+Inf\"} 4",
        "# TYPE shardwise_journal_commit_duration_seconds histogram",
        "shardwise_workers_alive 1",
    ] {
        assert!(m.lines().any(|l| l == line), "no line {line:?} in\n{m}");
    }
    // The first heartbeat registered the worker: one journal commit (fsynced) at least.
    let commits = m
        .lines()
        .find_map(|l| l.strip_prefix("shardwise_journal_commit_duration_seconds_count "))
        .and_then(|n| n.parse::<u64>().ok())
        .expect("a commit count");
    assert!(commits >= 1, "{m}");
}

/// Path parameters that are not ids (or, for datasets, not dataset ids): 400 problems, never
/// a 404, a 500 or a panic, and never the junk echoed back at length.
#[test]
fn path_parameters_are_validated() {
    let d = Dispatcher::start(&[]);
    let huge = "9".repeat(5_000);
    let junk = [
        "abc",
        "-1",
        "1.5",
        "+5",
        "0x10",
        "1e3",
        "%20",
        "%00",
        "%FF%FE",
        "1%2F2",
        "%E2%80%8B1",
        "18446744073709551616",
        huge.as_str(),
    ];
    let routes = [
        ("GET", "/v1/jobs/{}"),
        ("POST", "/v1/jobs/{}/iterations"),
        ("POST", "/v1/clients/{}/heartbeat"),
        ("DELETE", "/v1/clients/{}"),
        ("POST", "/v1/iterations/{}/splits"),
        ("POST", "/v1/tasks/{}/maybe-remove"),
    ];
    let check = |method: &str, path: &str| {
        let body = (method == "POST").then(|| json!({}));
        let r = d.call(method, path, body);
        assert_eq!(r.status, 400, "{method} {path}: {}", r.body);
        assert_eq!(r.header("content-type"), Some("application/problem+json"), "{path}");
        assert_eq!(r.json()["code"], "INVALID_ARGUMENT", "{path}");
        assert!(r.body.len() < 400, "{method} {path} echoed its input: {} bytes", r.body.len());
    };
    for (method, route) in routes {
        for j in junk {
            check(method, &route.replace("{}", j));
        }
        // The largest id is an id: not found, not invalid.
        let r = d.call(method, &route.replace("{}", "18446744073709551615"), Some(json!({})));
        assert!(r.status != 400 || !r.body.contains("_id: "), "{route}: {}", r.body);
    }
    for j in ["x".repeat(300).as_str(), "x".repeat(5_000).as_str(), "%FF", "a%20b", "%00", "a:b"] {
        check("GET", &format!("/v1/datasets/{j}"));
    }
    assert_eq!(d.call("GET", "/v1/datasets/no-such-dataset", None).status, 404);
    assert!(!d.output().contains("panicked"), "{}", d.output());
}

/// A raw request: the head with `headers`, then `body` (which may be shorter than the
/// declared length); the status and the whole raw answer.
fn raw(base: &str, head: &str, body: &str) -> (u16, String) {
    let host = rawhttp::authority(base);
    let bytes = format!("{head}\r\nHost: {host}\r\nConnection: close\r\n\r\n{body}");
    let s =
        rawhttp::send_bytes(base, bytes.as_bytes(), std::time::Duration::from_secs(30)).unwrap();
    let (out, _) = rawhttp::read_until_closed(s);
    (rawhttp::status_of(&out), out)
}

/// A body past `--max-body-bytes` (16 MiB by default) sent whole before the answer is read,
/// as Python's `requests` and `urllib` send it, gets its 413 problem and a clean close, not a
/// broken pipe: the dispatcher reads and discards the rest (up to 4 times the limit, within
/// `--read-timeout`). Over HTTP/1.1 with a declared length and chunked, and over HTTP/2
/// (curl), where the stream stays open for the rest of the body. And a gRPC message past the
/// limit is `RESOURCE_EXHAUSTED`.
#[test]
fn a_body_past_the_limit_sent_whole_gets_its_413_not_a_broken_pipe() {
    use std::io::Write as _;
    let d = Dispatcher::start(&[]);
    let host = rawhttp::authority(&d.url);
    const MIB: usize = 1 << 20;
    let head = |framing: &str| {
        format!(
            "POST /v1/datasets HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             {framing}\r\n\r\n"
        )
        .into_bytes()
    };
    let declared = head(&format!("Content-Length: {}", 32 * MIB));
    let chunk = [format!("{:x}\r\n", MIB).into_bytes(), vec![b'1'; MIB], b"\r\n".to_vec()].concat();
    let mut chunks = chunk.repeat(32);
    chunks.extend_from_slice(b"0\r\n\r\n");
    for (what, head, body) in [
        ("declared", declared, vec![b'1'; 32 * MIB]),
        ("chunked", head("Transfer-Encoding: chunked"), chunks),
    ] {
        let mut s = std::net::TcpStream::connect(host).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        s.set_write_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        let started = std::time::Instant::now();
        let sent = s.write_all(&head).and_then(|()| s.write_all(&body));
        let (answer, end) = rawhttp::read_until_closed(s);
        let took = started.elapsed();
        let first: String = answer.lines().next().unwrap_or_default().into();
        eprintln!("{what}: sent {sent:?}, answer {first:?}, end {end:?}, in {took:?}");
        assert!(sent.is_ok(), "{what}: sending the body: {sent:?}; the answer: {answer}");
        assert_eq!(rawhttp::status_of(&answer), 413, "{what}: {answer}");
        assert!(answer.contains("application/problem+json"), "{what}: {answer}");
        assert!(answer.contains("RESOURCE_EXHAUSTED"), "{what}: {answer}");
        assert!(end.is_ok(), "{what}: the connection ended with {end:?}");
    }

    // HTTP/2 (prior knowledge, as gRPC clients speak it), with curl.
    let dir = TempDir::new("413");
    let file = format!("{}/body.json", dir.path());
    std::fs::write(&file, vec![b'1'; 32 * MIB]).unwrap();
    for framing in [None, Some("Transfer-Encoding: chunked")] {
        let mut curl = std::process::Command::new("curl");
        curl.args(["-sS", "--http2-prior-knowledge", "-o", "-", "-w", "\n%{http_code}"])
            .args(["-H", "Content-Type: application/json", "--data-binary"])
            .arg(format!("@{file}"))
            .arg(format!("{}/v1/datasets", d.url));
        if let Some(framing) = framing {
            curl.args(["-H", framing]);
        }
        let out = curl.output().expect("curl runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("HTTP/2 {framing:?}: {:?} {stdout} {stderr}", out.status.code());
        assert!(out.status.success(), "HTTP/2 {framing:?}: {:?}: {stderr}", out.status.code());
        assert!(stdout.ends_with("\n413") && stdout.contains("RESOURCE_EXHAUSTED"), "{stdout}");
    }
    // A gRPC message past the limit.
    let rt = shardwise_tests::runtime();
    let url = d.url.clone();
    let status = rt.block_on(async move {
        use shardwise_gateway::tf::proto::tensorflow::data as tf;
        let channel = tonic::transport::Endpoint::from_shared(url).unwrap();
        let mut c = tf::dispatcher_service_client::DispatcherServiceClient::new(
            channel.connect().await.unwrap(),
        )
        .max_encoding_message_size(usize::MAX);
        let graph = vec![1u8; 32 * MIB];
        let req = tf::GetOrRegisterDatasetRequest {
            dataset: Some(tf::DatasetDef { graph: graph.into() }),
            ..Default::default()
        };
        c.get_or_register_dataset(req).await.expect_err("too large")
    });
    eprintln!("gRPC: {status:?}");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
}

#[test]
fn body_size_rate_and_in_flight_limits_answer_problems() {
    // A declared body over the limit is refused before it is read.
    let d = Dispatcher::start(&["--max-body-bytes", "1000"]);
    let (status, answer) = raw(
        &d.url,
        "POST /v1/datasets HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 100000000",
        "",
    );
    assert_eq!(status, 413, "{answer}");
    assert!(answer.contains("application/problem+json") && answer.contains("RESOURCE_EXHAUSTED"));
    // A chunked body (no declared length) is cut at the limit.
    let chunk = format!("{:x}\r\n{}\r\n0\r\n\r\n", 2000, "x".repeat(2000));
    let (status, answer) = raw(
        &d.url,
        "POST /v1/datasets HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked",
        &chunk,
    );
    assert_eq!(status, 413, "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    drop(d);

    // One request per second per address, three at once: the fourth quick one is refused
    // with a problem and Retry-After, and the address is served again once it has waited.
    let d = Dispatcher::start(&["--rate-limit", "1", "--rate-limit-burst", "3"]);
    let refused = (0..20)
        .map(|_| d.call("GET", "/v1/version", None))
        .find(|r| r.status != 200)
        .expect("the rate limit refuses some of 20 quick requests");
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.header("content-type"), Some("application/problem+json"));
    assert_eq!(refused.json()["code"], "RESOURCE_EXHAUSTED");
    let wait: u64 = refused.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=3).contains(&wait), "{wait}");
    served_again(&d, "served again after the rate limit");
    drop(d);

    // One request in flight: a request whose body never finishes holds it, others get 503.
    let d = Dispatcher::start(&["--max-in-flight", "1"]);
    let host = d.url.trim_start_matches("http://").to_owned();
    let hold = || {
        let head = format!(
            "POST /v1/datasets HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        );
        rawhttp::send_bytes(&host, head.as_bytes(), std::time::Duration::from_millis(1)).unwrap()
    };
    let mut held = hold();
    let busy = poll_until("the held request counts", std::time::Duration::from_secs(10), || {
        let r = d.call("GET", "/v1/version", None);
        if r.status != 200 {
            return Ok(r);
        }
        // A probe that held the slot when the held request arrived got it refused (503):
        // hold it again.
        let mut answer = [0u8; 64];
        if std::io::Read::read(&mut held, &mut answer).is_ok() {
            held = hold();
        }
        Err(r.status)
    });
    assert_eq!(busy.status, 503, "{}", busy.body);
    assert_eq!(busy.json()["code"], "UNAVAILABLE");
    assert_eq!(busy.header("retry-after"), Some("1"));
    drop(held);
    served_again(&d, "the slot is given back");
}

/// Waits (10 s at most) until `GET /v1/version` answers 200 again.
fn served_again(d: &Dispatcher, what: &str) {
    poll_until(what, std::time::Duration::from_secs(10), || {
        let r = d.call("GET", "/v1/version", None);
        if r.status == 200 { Ok(()) } else { Err(format!("{} {}", r.status, r.body)) }
    });
}
