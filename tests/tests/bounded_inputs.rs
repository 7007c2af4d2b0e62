//! Inputs bounded where they enter, against the real binary: worker tags (count, length,
//! charset) over REST and gRPC, and the Slurm expansion of `POST /v1/cluster/resolve` and
//! `shardwise resolve` (`--max-resolve-tasks`), refused before it is built.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use shardwise_gateway::tf::proto::tensorflow::data as tf;
use shardwise_tests::tf_fake::{dispatcher_client, heartbeat as fake_tf_worker};
use shardwise_tests::{Dispatcher, run_shardwise};

fn heartbeat(d: &Dispatcher, address: &str, tags: Value) -> shardwise_tests::HttpResponse {
    d.call("POST", "/v1/workers/heartbeat", Some(json!({"worker_address": address, "tags": tags})))
}

fn assert_problem(r: &shardwise_tests::HttpResponse, text: &str) {
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/problem+json"), "{:?}", r.headers);
    let p = r.json();
    assert_eq!(p["code"], "INVALID_ARGUMENT", "{p}");
    let detail = p["detail"].as_str().unwrap();
    assert!(detail.contains(text), "{text:?} not in {detail:?}");
    assert!(detail.len() < 400, "the problem quotes a short prefix only: {} bytes", detail.len());
}

/// The tags a worker at `address` is listed with (`None`: not listed).
fn listed_tags(d: &Dispatcher, address: &str) -> Option<Value> {
    let workers = d.call("GET", "/v1/workers", None).json();
    workers["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["address"] == address || w["worker_address"] == address)
        .map(|w| w["tags"].clone())
}

#[test]
fn worker_tags_are_bounded_over_rest() {
    let d = Dispatcher::start(&[]);
    // At the bounds: 64 tags of 255 bytes, printable (spaces and non-ASCII letters too).
    let mut tags: Vec<String> = (0..63).map(|i| format!("{i:0>255}")).collect();
    tags.push("zone é 1".into());
    let r = heartbeat(&d, "127.0.0.1:7001", json!(tags));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(listed_tags(&d, "127.0.0.1:7001"), Some(json!(tags)));

    let many: Vec<String> = (0..100_000).map(|i| format!("t{i}")).collect();
    assert_problem(&heartbeat(&d, "127.0.0.1:7002", json!(many)), "more than the 64");
    assert_problem(&heartbeat(&d, "127.0.0.1:7002", json!(vec!["t"; 65])), "more than the 64");
    let long = "x".repeat(1 << 20);
    assert_problem(&heartbeat(&d, "127.0.0.1:7002", json!([long])), "longer than 255 bytes");
    assert_problem(&heartbeat(&d, "127.0.0.1:7002", json!(["x".repeat(256)])), "255 bytes");
    for bad in ["a\nb", "a\u{0}b", "tab\there", "del\u{7f}", "\u{85}"] {
        assert_problem(&heartbeat(&d, "127.0.0.1:7002", json!(["ok", bad])), "control character");
    }
    // None of the refused workers registered.
    assert_eq!(listed_tags(&d, "127.0.0.1:7002"), None);
}

#[tokio::test]
async fn worker_tags_are_bounded_over_grpc() {
    let d = Dispatcher::start(&[]);
    let mut c = dispatcher_client(&d.url).await;
    let hb = |tags: Vec<String>| tf::WorkerHeartbeatRequest {
        worker_tags: tags,
        ..fake_tf_worker("127.0.0.1:7003", 7)
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        ((0..100_000).map(|i| format!("t{i}")).collect(), "more than the 64"),
        (vec!["x".repeat(1 << 20)], "longer than 255 bytes"),
        (vec!["a\nb".into()], "control character"),
        (vec!["a\0b".into()], "control character"),
    ];
    for (tags, text) in cases {
        let s = c.worker_heartbeat(hb(tags)).await.unwrap_err();
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
        assert!(s.message().contains(text), "{text:?} not in {:?}", s.message());
    }
    let ok: Vec<String> = vec!["COLOCATED".into(), "y".repeat(255)];
    c.worker_heartbeat(hb(ok.clone())).await.expect("tags within the bounds");
    assert_eq!(listed_tags(&d, "127.0.0.1:7003"), Some(json!(ok)));
}

/// A 200-byte request naming a million Slurm tasks.
fn million_tasks() -> Value {
    json!({"resolver": {"slurm": {"env": {
        "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1000000",
        "SLURM_STEP_NODELIST": "n[0000000-0999999]", "SLURM_STEP_TASKS_PER_NODE": "1(x1000000)"
    }, "gpus_per_node": 0}}})
}

fn slurm(tasks: u64) -> Value {
    json!({"resolver": {"slurm": {"env": {
        "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": tasks.to_string(),
        "SLURM_STEP_NODELIST": format!("n[1-{tasks}]"), "SLURM_STEP_TASKS_PER_NODE": format!("1(x{tasks})")
    }, "gpus_per_node": 0}}})
}

/// Peak resident memory of a process, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_huge_slurm_resolve_is_refused_fast_with_small_memory() {
    let d = Dispatcher::start(&[]);
    let pid = d.child.id();
    assert!(million_tasks().to_string().len() < 260);
    let before = peak_rss_kib(pid);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let url = d.url.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                let r = shardwise_tests::http(
                    "POST",
                    &url,
                    "/v1/cluster/resolve",
                    Some(&million_tasks()),
                )
                .unwrap();
                (r, t.elapsed())
            })
        })
        .collect();
    for t in threads {
        let (r, took) = t.join().unwrap();
        assert_eq!(r.status, 400, "{}", r.body);
        let p = r.json();
        assert_eq!(p["code"], "INVALID_ARGUMENT", "{p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.contains("more than 100000 entries") && detail.contains("--max-resolve-tasks"),
            "{detail}"
        );
        assert!(r.body.len() < 2000, "a short problem, not a {} byte reply", r.body.len());
        assert!(took < Duration::from_secs(5), "refused in {took:?}");
    }
    let grew = peak_rss_kib(pid).saturating_sub(before);
    println!("peak RSS grew by {grew} KiB over 4 refused requests");
    assert!(grew < 32 << 10, "peak RSS grew by {grew} KiB");
    // Within the default bound it resolves.
    let r = d.call("POST", "/v1/cluster/resolve", Some(slurm(1000)));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["cluster"]["worker"].as_array().unwrap().len(), 1000);
    // The operator's bound: lower it and a 1,000-task step is refused, naming it.
    let small = Dispatcher::start(&["--max-resolve-tasks", "999"]);
    let r = small.call("POST", "/v1/cluster/resolve", Some(slurm(1000)));
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json()["detail"].as_str().unwrap().contains("more than 999 entries"), "{}", r.body);
}

#[test]
fn shardwise_resolve_takes_the_same_bound() {
    let t = Instant::now();
    let run = run_shardwise(&["resolve", "--compact"], &million_tasks().to_string(), &[]);
    assert_eq!(run.code, 1, "{} {}", run.stdout, run.stderr);
    let p = run.json();
    assert_eq!(p["code"], "INVALID_ARGUMENT", "{p}");
    assert!(p["detail"].as_str().unwrap().contains("--max-resolve-tasks"), "{p}");
    assert!(t.elapsed() < Duration::from_secs(5), "refused in {:?}", t.elapsed());
    // Raised for a giant cluster, 200,000 tasks resolve.
    let run = run_shardwise(
        &["resolve", "--compact", "--max-resolve-tasks", "200000"],
        &slurm(200_000).to_string(),
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["cluster"]["worker"].as_array().unwrap().len(), 200_000);
    let run = run_shardwise(&["resolve", "--max-resolve-tasks", "0"], &slurm(1).to_string(), &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
}
