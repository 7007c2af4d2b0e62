//! `shardwise worker` processes with a `shardwise dispatcher`, on 127.0.0.1 and ports bound
//! with 0, read through the Rust client (`shardwise_gateway::client::distribute`) and over raw
//! HTTP: every sharding policy's data, coordinated reads, job sharing, transforms, a worker
//! killed mid-epoch, bad input and backpressure.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};
use shardwise_core::dataset::{DatasetDef, Pipeline, Sharding, Step};
use shardwise_core::dispatch::wire::{NamedMode, ProcessingMode};
use shardwise_gateway::client::{ClientError, DistributeOptions, distribute};
use shardwise_tests::{
    Dispatcher, TempDir, Worker, counts, http, ints, ok, poll_until, rawhttp, runtime,
};

/// Worker flags of these tests: heartbeats often enough for a 2 s worker timeout.
const WORKER: &[&str] = &["--heartbeat-interval", "200ms"];

fn options() -> DistributeOptions {
    DistributeOptions {
        unknown_task_timeout: Duration::from_secs(20),
        unavailable_timeout: Duration::from_secs(30),
        ..shardwise_tests::fast_options()
    }
}

fn distributed() -> ProcessingMode {
    ProcessingMode::Named(NamedMode::DistributedEpoch)
}

fn dataset(json: Value) -> DatasetDef {
    DatasetDef::from_json(&json).expect("a valid dataset")
}

/// Reads a whole epoch through the Rust client (bounded to 60 s).
fn read_all(url: &str, ds: Value, options: DistributeOptions) -> Result<Vec<Value>, ClientError> {
    runtime().block_on(async {
        let read = distribute(url, dataset(ds), options).try_collect::<Vec<Value>>();
        tokio::time::timeout(Duration::from_secs(60), read).await.expect("the epoch ends in time")
    })
}

/// Creates a job and an iteration over raw HTTP; returns the tasks as (task id, worker url).
fn raw_iteration(d: &Dispatcher, ds: Value, mode: Value) -> Vec<(String, String)> {
    let id = ok(&d.call("POST", "/v1/datasets", Some(json!({"dataset": ds}))))["dataset_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let job =
        ok(&d.call("POST", "/v1/jobs", Some(json!({"dataset_id": id, "processing_mode": mode}))));
    let lease = ok(&d.call(
        "POST",
        &format!("/v1/jobs/{}/iterations", job["job_id"].as_str().unwrap()),
        Some(json!({})),
    ));
    let client = lease["client_id"].as_str().unwrap();
    let hb = ok(&d.call("POST", &format!("/v1/clients/{client}/heartbeat"), Some(json!({}))));
    hb["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["task_id"].as_str().unwrap().to_owned(),
                format!("http://{}", t["worker_address"].as_str().unwrap()),
            )
        })
        .collect()
}

/// Reads one task over raw HTTP until end of sequence (retrying the worker's 404 while it
/// fetches the task, at most 2,000 requests).
fn read_task(worker_url: &str, task_id: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for _ in 0..2_000 {
        let r = http("GET", worker_url, &format!("/v1/tasks/{task_id}/elements?max=7"), None)
            .expect("worker answers");
        if r.status == 404 {
            continue;
        }
        let v = ok(&r);
        out.extend(v["elements"].as_array().unwrap().iter().cloned());
        if v["end_of_sequence"] == true {
            return out;
        }
    }
    panic!("task {task_id} never ended");
}

#[test]
fn parallel_epochs_one_worker_reads_the_range_in_order() {
    let d = Dispatcher::start(&[]);
    let _w = Worker::start(&d.url, WORKER);
    let got = read_all(&d.url, json!({"source": {"range": {"stop": 10}}}), options()).unwrap();
    assert_eq!(ints(&got), (0..10).collect::<Vec<_>>());
    // The iteration finished and the client released its lease.
    let job = ok(&d.call("GET", "/v1/jobs/5000", None));
    assert_eq!(job["iterations"][0]["finished"], true);
    assert_eq!(job["iterations"][0]["num_clients"], 0);
}

#[test]
fn parallel_epochs_every_element_once_per_worker() {
    let d = Dispatcher::start(&[]);
    let workers: Vec<Worker> = (0..3).map(|_| Worker::start(&d.url, WORKER)).collect();
    let got = read_all(&d.url, json!({"source": {"range": {"stop": 50}}}), options()).unwrap();
    let c = counts(&ints(&got));
    assert_eq!(c.len(), 50);
    assert!(c.iter().all(|(k, n)| (0..50).contains(k) && *n == workers.len()), "{c:?}");
}

fn distributed_epoch_exactly_once(num_workers: usize) {
    let d = Dispatcher::start(&[]);
    let _workers: Vec<Worker> =
        (0..num_workers).map(|_| Worker::start(&d.url, &["--buffer", "32"])).collect();
    let opts = DistributeOptions {
        processing_mode: distributed(),
        split_size: Some(16),
        elements_per_request: 20,
        ..options()
    };
    let got = read_all(&d.url, json!({"source": {"range": {"stop": 2000}}}), opts).unwrap();
    let mut got = ints(&got);
    got.sort_unstable();
    assert_eq!(got, (0..2000).collect::<Vec<_>>(), "every element exactly once");
    let job = ok(&d.call("GET", "/v1/jobs/5000", None));
    assert_eq!(job["iterations"][0]["tasks"].as_array().unwrap().len(), num_workers);
}

#[test]
fn distributed_epoch_two_workers_every_element_exactly_once() {
    distributed_epoch_exactly_once(2);
}

#[test]
fn distributed_epoch_four_workers_every_element_exactly_once() {
    distributed_epoch_exactly_once(4);
}

#[test]
fn distributed_epoch_with_repeat_reads_each_element_per_repetition() {
    let d = Dispatcher::start(&[]);
    let _w: Vec<Worker> = (0..2).map(|_| Worker::start(&d.url, WORKER)).collect();
    let opts =
        DistributeOptions { processing_mode: distributed(), split_size: Some(3), ..options() };
    let ds = json!({"source": {"range": {"stop": 20}}, "transforms": [{"repeat": 5}]});
    let got = read_all(&d.url, ds, opts).unwrap();
    let c = counts(&ints(&got));
    assert_eq!(c.len(), 20);
    assert!(c.values().all(|n| *n == 5), "{c:?}");
}

/// Two workers registered in order against a fixed worker list of placeholders: the first
/// is shard 0, the second shard 1.
fn static_cluster() -> (Dispatcher, Worker, Worker) {
    static_cluster_with(&[])
}

/// Two workers with the `WORKER` flags and `extra`, at the dispatcher's fixed addresses.
fn static_cluster_with(extra: &[&str]) -> (Dispatcher, Worker, Worker) {
    let d = Dispatcher::start(&["--worker-addresses", "127.0.0.1:%port%,127.0.0.1:%port%"]);
    let flags: Vec<&str> = WORKER.iter().chain(extra).copied().collect();
    let first = Worker::start(&d.url, &flags);
    let second = Worker::start(&d.url, &flags);
    (d, first, second)
}

fn shards_by_worker(
    d: &Dispatcher,
    ds: Value,
    policy: &str,
    workers: [&Worker; 2],
) -> [Vec<Value>; 2] {
    let tasks = raw_iteration(d, ds, json!({"sharding_policy": policy}));
    assert_eq!(tasks.len(), 2);
    workers.map(|w| {
        let (task, url) = tasks.iter().find(|(_, url)| *url == w.url).expect("a task per worker");
        read_task(url, task)
    })
}

#[test]
fn file_sharding_reads_the_static_file_shards() {
    let dir = TempDir::new("fileshard");
    let paths: Vec<String> = (0..4)
        .map(|i| {
            let p = dir.0.join(format!("part-{i}.txt"));
            std::fs::write(&p, format!("f{i}-a\nf{i}-b\n")).unwrap();
            p.to_str().unwrap().to_owned()
        })
        .collect();
    let (d, w0, w1) = static_cluster_with(&["--data-root", dir.path()]);
    let ds = json!({"source": {"files": {"paths": paths, "format": "lines"}}});
    let [s0, s1] = shards_by_worker(&d, ds, "FILE", [&w0, &w1]);
    assert_eq!(s0, json!(["f0-a", "f0-b", "f2-a", "f2-b"]).as_array().unwrap().clone());
    assert_eq!(s1, json!(["f1-a", "f1-b", "f3-a", "f3-b"]).as_array().unwrap().clone());
}

#[test]
fn data_sharding_reads_the_static_element_shards() {
    let (d, w0, w1) = static_cluster();
    let ds = json!({"source": {"range": {"stop": 10}}});
    let [s0, s1] = shards_by_worker(&d, ds.clone(), "DATA", [&w0, &w1]);
    assert_eq!(ints(&s0), [0, 2, 4, 6, 8]);
    assert_eq!(ints(&s1), [1, 3, 5, 7, 9]);
    // FILE_OR_DATA falls back to DATA for a range; HINT shards at the shard_hint.
    let [s0, s1] = shards_by_worker(&d, ds, "FILE_OR_DATA", [&w0, &w1]);
    assert_eq!((ints(&s0), ints(&s1)), (vec![0, 2, 4, 6, 8], vec![1, 3, 5, 7, 9]));
    let hinted =
        json!({"source": {"range": {"stop": 6}}, "transforms": [{"shard_hint": {}}, {"take": 2}]});
    let [s0, s1] = shards_by_worker(&d, hinted, "HINT", [&w0, &w1]);
    assert_eq!((ints(&s0), ints(&s1)), (vec![0, 2], vec![1, 3]));
}

/// CR-01: in each round every consumer reads the same worker (consecutive elements).
#[test]
fn cr_01_consumers_read_the_same_worker_in_each_round() {
    let d = Dispatcher::start(&[]);
    let _w: Vec<Worker> = (0..2).map(|_| Worker::start(&d.url, WORKER)).collect();
    let (a, b) = read_two_coordinated_consumers(&d.url, "coordinated");
    // Round r visits both tasks in order; in each task's round the two consumers get the
    // task's next two elements: consumer 0 the first, consumer 1 the second.
    assert_rounds_of_two_tasks(&a, &b);
}

/// Two consumers of a coordinated read (`num_consumers: 2`) of `range(100).repeat()` under
/// job `job_name`, 20 elements each, read at the same time.
fn read_two_coordinated_consumers(url: &str, job_name: &str) -> (Vec<i64>, Vec<i64>) {
    let ds = json!({"source": {"range": {"stop": 100}}, "transforms": [{"repeat": null}]});
    let consumer = |i: u64| {
        let opts = DistributeOptions {
            job_name: Some(job_name.into()),
            num_consumers: Some(2),
            consumer_index: Some(i),
            ..options()
        };
        distribute(url, dataset(ds.clone()), opts).take(20).try_collect::<Vec<Value>>()
    };
    let (a, b) = runtime().block_on(async {
        let both = async { tokio::join!(consumer(0), consumer(1)) };
        tokio::time::timeout(Duration::from_secs(60), both).await.expect("in time")
    });
    (ints(&a.unwrap()), ints(&b.unwrap()))
}

/// Two tasks read in turn, two elements a round: consumer 0 gets 0, 0, 2, 2, ... and
/// consumer 1 gets 1, 1, 3, 3, ...
fn assert_rounds_of_two_tasks(a: &[i64], b: &[i64]) {
    let expect_a: Vec<i64> = (0..10).flat_map(|r| [2 * r, 2 * r]).collect();
    let expect_b: Vec<i64> = expect_a.iter().map(|x| x + 1).collect();
    assert_eq!(a, expect_a);
    assert_eq!(b, expect_b);
}

#[test]
fn job_sharing_by_name_splits_the_data_between_clients() {
    let d = Dispatcher::start(&[]);
    let _w = Worker::start(&d.url, &["--buffer", "4"]);
    let ds = json!({"source": {"range": {"stop": 300}}});
    let client = || {
        let opts = DistributeOptions {
            job_name: Some("shared".into()),
            elements_per_request: 3,
            ..options()
        };
        distribute(&d.url, dataset(ds.clone()), opts).try_collect::<Vec<Value>>()
    };
    let (a, b) = runtime().block_on(async {
        let both = async { tokio::join!(client(), client()) };
        tokio::time::timeout(Duration::from_secs(60), both).await.expect("in time")
    });
    let (a, b) = (ints(&a.unwrap()), ints(&b.unwrap()));
    let mut all: Vec<i64> = a.iter().chain(&b).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..300).collect::<Vec<_>>(), "each element read by exactly one client");
    // One job, one iteration, one task: the clients shared them.
    let job = ok(&d.call("GET", "/v1/jobs/5000", None));
    assert_eq!(job["job_name"], "shared");
    assert_eq!(job["iterations"].as_array().unwrap().len(), 1);
}

/// What core's pipeline produces for `ds` unsharded: the reference sequence.
fn reference(ds: &Value) -> Vec<Value> {
    let mut p = Pipeline::new(&dataset(ds.clone()), Sharding::Off).unwrap();
    let mut out = Vec::new();
    loop {
        match p.next() {
            Step::Element(e) => out.push(e.into_value().expect("a JSON element")),
            Step::End => return out,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn repeat_take_and_seeded_shuffle_give_the_expected_sequences() {
    let d = Dispatcher::start(&[]);
    let _w = Worker::start(&d.url, &["--buffer", "8"]);
    let ds =
        json!({"source": {"range": {"stop": 10}}, "transforms": [{"repeat": 2}, {"take": 15}]});
    let got = ints(&read_all(&d.url, ds, options()).unwrap());
    assert_eq!(got, (0..10).chain(0..5).collect::<Vec<_>>());

    let shuffled = json!({"source": {"range": {"stop": 40}}, "transforms": [
        {"shuffle": {"buffer": 8, "seed": 7}}, {"repeat": 2}, {"batch": {"size": 6}}
    ]});
    let got = read_all(&d.url, shuffled.clone(), options()).unwrap();
    assert_eq!(got, reference(&shuffled));
    assert_ne!(got[0], json!([0, 1, 2, 3, 4, 5]), "shuffled");
    // Seeded: a second epoch gives the same sequence.
    assert_eq!(read_all(&d.url, shuffled, options()).unwrap(), got);
}

/// A worker killed with kill -9 in the middle of a DYNAMIC epoch: the dispatcher declares it
/// lost after `--worker-timeout`, hands its unacknowledged splits to the other worker, and the
/// epoch completes with every element. Elements of the split that was in flight on the killed
/// worker may come twice (at-least-once for that split), never zero times.
#[test]
fn worker_killed_mid_epoch_loses_no_element() {
    let d = Dispatcher::start(&["--worker-timeout", "2s"]);
    let survivor = Worker::start(&d.url, &["--heartbeat-interval", "200ms", "--buffer", "8"]);
    let mut victim = Worker::start(&d.url, &["--heartbeat-interval", "200ms", "--buffer", "8"]);
    let opts = DistributeOptions {
        processing_mode: distributed(),
        split_size: Some(10),
        elements_per_request: 4,
        max_outstanding_requests: 2,
        ..options()
    };
    let got = runtime().block_on(async {
        let mut stream =
            distribute(&d.url, dataset(json!({"source": {"range": {"stop": 3000}}})), opts);
        let mut got = Vec::new();
        let read = async {
            while let Some(e) = stream.next().await {
                got.push(e.expect("no error"));
                if got.len() == 300 {
                    victim.kill();
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read).await.expect("the epoch ends");
        got
    });
    let c = counts(&ints(&got));
    assert_eq!(c.len(), 3000, "no element lost");
    assert!(c.keys().all(|k| (0..3000).contains(k)));
    let duplicates: usize = c.values().map(|n| n - 1).sum();
    assert!(duplicates <= 20, "at most the in-flight split comes again: {duplicates}");
    assert!(c.values().all(|n| *n <= 2));
    let workers = ok(&d.call("GET", "/v1/workers", None));
    let lost: Vec<&Value> =
        workers["workers"].as_array().unwrap().iter().filter(|w| w["alive"] == false).collect();
    assert_eq!(lost.len(), 1, "{workers}");
    assert_ne!(lost[0]["worker_address"], survivor.address());
}

#[test]
fn bad_reads_are_problems_and_the_worker_keeps_working() {
    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, WORKER);
    let problem = |path: &str, status: u16, code: &str| {
        let r = w.call("GET", path);
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert_eq!(r.header("content-type"), Some("application/problem+json"), "{path}");
        let p = r.json();
        assert_eq!(p["code"], code, "{path}: {p}");
        for k in ["type", "title", "status", "detail"] {
            assert!(p.get(k).is_some(), "{path}: {k}");
        }
        p
    };
    let p = problem("/v1/tasks/999999/elements", 404, "NOT_FOUND");
    assert!(p["detail"].as_str().unwrap().contains("not known to this worker"), "{p}");
    problem("/v1/tasks/abc/elements", 400, "INVALID_ARGUMENT");
    problem("/v1/tasks/-1/elements", 400, "INVALID_ARGUMENT");
    problem("/nope", 404, "NOT_FOUND");
    let r = http("POST", &w.url, "/v1/tasks/1/elements", Some(&json!({}))).unwrap();
    assert_eq!((r.status, r.json()["code"].clone()), (405, json!("INVALID_ARGUMENT")));

    let tasks =
        raw_iteration(&d, json!({"source": {"range": {"stop": 5}}}), json!("parallel_epochs"));
    let task = &tasks[0].0;
    for (query, what) in [
        ("max=abc", "invalid query"),
        ("max=0", "max must be"),
        ("max=10001", "max must be"),
        ("bogus=1", "unknown field"),
        ("consumer_index=0&round=0", "only for coordinated reads"),
    ] {
        // The first read may meet the task before the worker fetched it: retry the 404.
        let path = format!("/v1/tasks/{task}/elements?{query}");
        let r = (0..1000)
            .map(|_| w.call("GET", &path))
            .find(|r| r.status != 404)
            .expect("the worker learns the task");
        assert_eq!(r.status, 400, "{query}: {}", r.body);
        assert!(r.json()["detail"].as_str().unwrap().contains(what), "{query}: {}", r.body);
    }
    assert_eq!(ints(&read_task(&w.url, task)), [0, 1, 2, 3, 4]);
    // A completed task keeps answering the end of the sequence.
    let v = ok(&w.call("GET", &format!("/v1/tasks/{task}/elements")));
    assert_eq!(v, json!({"elements": [], "end_of_sequence": true}));
}

#[test]
fn a_dataset_whose_files_do_not_exist_fails_clearly() {
    let d = Dispatcher::start(&[]);
    let root = TempDir::new("missing-root");
    let w = Worker::start(&d.url, &[WORKER, &["--data-root", root.path()]].concat());
    let missing = root.0.join("part-0");
    let ds = json!({"source": {"files": {"paths": [missing], "format": "lines"}}});
    let err = read_all(&d.url, ds, options()).unwrap_err();
    assert_eq!(err.code(), "FAILED_PRECONDITION", "{err}");
    let text = err.to_string();
    assert!(text.contains("is not a readable file under this worker's data roots"), "{text}");
    assert!(text.contains("part-0"), "{text}");
    // The rest keeps working.
    let got = read_all(&d.url, json!({"source": {"range": {"stop": 3}}}), options()).unwrap();
    assert_eq!(ints(&got), [0, 1, 2]);
    assert_eq!(w.call("GET", "/healthz").status, 200);
}

/// The error text a worker gives for a path it will not read, after the path.
const NOT_READABLE: &str = "is not a readable file under this worker's data roots";

/// Issue 11, point 2: a worker served any file on its disk (`/etc/passwd`,
/// `/proc/self/environ`, `../` out of any directory) and its errors told whether a path
/// existed. Now only files under `--data-root` are read, after `..` and symlinks are resolved,
/// and every other path gets the same answer, with nothing of its content.
#[test]
fn a_worker_reads_files_only_under_its_data_roots() {
    let base = TempDir::new("roots");
    let root = base.0.join("root");
    let outside = base.0.join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("ok.txt"), "inside-1\ninside-2\n").unwrap();
    std::fs::write(outside.join("secret.txt"), "SECRET-LINE\n").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("escape")).unwrap();
    let r = root.to_str().unwrap();

    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, &[WORKER, &["--data-root", r]].concat());
    let lines = |path: &str| json!({"source": {"files": {"paths": [path], "format": "lines"}}});

    let refused = [
        "/etc/passwd".to_owned(),
        "/proc/self/environ".to_owned(),
        format!("{r}/../outside/secret.txt"),
        "../outside/secret.txt".to_owned(),
        format!("{r}/escape"),
        format!("{r}/missing.txt"),
        "/nonexistent/shardwise/x".to_owned(),
    ];
    for path in &refused {
        let err = read_all(&d.url, lines(path), options()).unwrap_err();
        assert_eq!(err.code(), "FAILED_PRECONDITION", "{path}: {err}");
        let text = err.to_string();
        let quoted = serde_json::to_string(path).unwrap();
        assert!(text.contains(&format!("path {quoted} {NOT_READABLE}")), "{path}: {text}");
        // The same text whether the path exists or not: nothing after it either.
        assert!(text.trim_end().ends_with(NOT_READABLE), "{path}: {text}");
        assert!(!text.contains("SECRET") && !text.contains("root:"), "{text}");
        assert!(!text.contains("No such file") && !text.contains("denied"), "{text}");
    }
    // Under the root, absolute or relative to it, a file is served.
    let inside = json!(["inside-1", "inside-2"]);
    assert_eq!(
        Value::Array(read_all(&d.url, lines(&format!("{r}/ok.txt")), options()).unwrap()),
        inside
    );
    assert_eq!(Value::Array(read_all(&d.url, lines("ok.txt"), options()).unwrap()), inside);
    // A directory under the root has its own answer.
    let err = read_all(&d.url, lines(r), options()).unwrap_err();
    assert!(err.to_string().contains("is a directory"), "{err}");
    assert!(!w.output().contains("SECRET"));
    assert_eq!(w.call("GET", "/healthz").status, 200);
}

#[test]
fn a_worker_without_data_roots_refuses_files_datasets() {
    let dir = TempDir::new("noroot");
    let file = dir.0.join("a.txt");
    std::fs::write(&file, "a\n").unwrap();
    let d = Dispatcher::start(&[]);
    let _w = Worker::start(&d.url, WORKER);
    let ds = json!({"source": {"files": {"paths": [file], "format": "lines"}}});
    let err = read_all(&d.url, ds, options()).unwrap_err();
    assert_eq!(err.code(), "FAILED_PRECONDITION", "{err}");
    let text = err.to_string();
    assert!(text.contains("allows no data roots") && text.contains("--data-root"), "{text}");
}

/// Issue 11, point 3: `{"repeat": null}` then a shuffle of 2^64 - 1 elements made every worker
/// reading it abort. It is refused at registration now, as is a batch over the bound.
#[test]
fn unbounded_buffers_are_refused_at_registration() {
    let d = Dispatcher::start(&[]);
    let _w = Worker::start(&d.url, WORKER);
    let issue = json!({"source": {"range": {"stop": 10}}, "transforms": [
        {"repeat": null}, {"shuffle": {"buffer": u64::MAX, "seed": 1}}]});
    let r = d.call("POST", "/v1/datasets", Some(json!({"dataset": issue})));
    assert_eq!(r.status, 400, "{}", r.body);
    let p = r.json();
    assert_eq!(p["code"], "INVALID_ARGUMENT");
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("transforms[1].shuffle.buffer is 18446744073709551615; at most 1000000"),
        "{detail}"
    );
    let batch =
        json!({"source": {"range": {"stop": 10}}, "transforms": [{"batch": {"size": 1_000_001}}]});
    let r = d.call("POST", "/v1/datasets", Some(json!({"dataset": batch})));
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (400, json!("INVALID_ARGUMENT")),
        "{}",
        r.body
    );
    // The bound itself is fine.
    let at_bound = json!({"source": {"range": {"stop": 10}}, "transforms": [
        {"repeat": 2}, {"shuffle": {"buffer": 1_000_000, "seed": 1}}]});
    assert_eq!(read_all(&d.url, at_bound, options()).unwrap().len(), 20);
}

/// What only the worker can know, the bytes of a file or of buffered elements, fails the task
/// with a clear problem (never an abort), and the worker serves the next task.
#[test]
fn run_time_limits_fail_the_task_and_the_worker_goes_on() {
    let dir = TempDir::new("limits");
    std::fs::write(dir.0.join("big.txt"), "x".repeat(1000)).unwrap();
    std::fs::write(dir.0.join("small.txt"), "s\n").unwrap();
    let d = Dispatcher::start(&[]);
    let flags =
        ["--data-root", dir.path(), "--max-file-bytes", "100", "--max-buffer-bytes", "100000"];
    let w = Worker::start(&d.url, &[WORKER, &flags].concat());
    let file = |name: &str| json!({"source": {"files": {"paths": [name], "format": "bytes"}}});
    let err = read_all(&d.url, file("big.txt"), options()).unwrap_err();
    assert_eq!(err.code(), "RESOURCE_EXHAUSTED", "{err}");
    assert!(
        err.to_string().contains("larger than this worker's --max-file-bytes (100 bytes)"),
        "{err}"
    );

    // Elements of 10,032 bytes: a shuffle of 20 of them weighs more than 100,000.
    let heavy = json!({"source": {"list": {"elements": vec!["y".repeat(10_000); 3]}}, "transforms": [
        {"repeat": null}, {"shuffle": {"buffer": 20, "seed": 1}}]});
    let err = read_all(&d.url, heavy, options()).unwrap_err();
    assert_eq!(err.code(), "RESOURCE_EXHAUSTED", "{err}");
    assert!(
        err.to_string().contains("transforms[1].shuffle would hold more than 100000 bytes"),
        "{err}"
    );

    // The worker is alive and serves other tasks.
    assert_eq!(ok(&w.call("GET", "/healthz"))["status"], "ok");
    assert_eq!(read_all(&d.url, file("small.txt"), options()).unwrap(), [json!("cwo=")]);
    let got = read_all(&d.url, json!({"source": {"range": {"stop": 3}}}), options()).unwrap();
    assert_eq!(ints(&got), [0, 1, 2]);
}

/// A skip of 2^64 - 1 over an endless repeat spun inside one pipeline step, holding a runtime
/// thread for ever: a few such tasks left the worker unable to answer anything. Its pipeline
/// now yields, and the worker keeps serving.
#[test]
fn endless_skips_do_not_hold_the_worker() {
    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, WORKER);
    let spin = json!({"source": {"range": {"stop": 10}}, "transforms": [
        {"repeat": null}, {"skip": u64::MAX}]});
    for _ in 0..4 {
        let tasks = raw_iteration(&d, spin.clone(), json!("parallel_epochs"));
        let path = format!("/v1/tasks/{}/elements?max=1", tasks[0].0);
        // The first read starts the producer; nothing ever comes.
        let first = (0..1000).map(|_| w.call("GET", &path)).find(|r| r.status != 404).unwrap();
        assert_eq!(ok(&first)["elements"], json!([]));
    }
    assert_eq!(ok(&w.call("GET", "/healthz"))["status"], "ok");
    let got = read_all(&d.url, json!({"source": {"range": {"stop": 3}}}), options()).unwrap();
    assert_eq!(ints(&got), [0, 1, 2]);
}

/// A coordinated read sizes a round by `num_consumers`, which a client chooses: a round of
/// 2^50 consumers would be allocated at once. The worker refuses more than 10,000.
#[test]
fn a_huge_round_of_coordinated_reads_is_refused() {
    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, WORKER);
    let ds = json!({"source": {"range": {"stop": 10}}, "transforms": [{"repeat": null}]});
    let opts = DistributeOptions {
        job_name: Some("huge-round".into()),
        num_consumers: Some(1 << 50),
        consumer_index: Some(0),
        ..options()
    };
    let first = runtime().block_on(async {
        let mut s = distribute(&d.url, dataset(ds), opts);
        tokio::time::timeout(Duration::from_secs(60), s.next()).await.expect("in time")
    });
    let err = first.expect("an answer").unwrap_err();
    assert_eq!(err.code(), "RESOURCE_EXHAUSTED", "{err}");
    assert!(err.to_string().contains("at most 10000 consumers"), "{err}");
    assert_eq!(ok(&w.call("GET", "/healthz"))["status"], "ok");
}

/// Issue 11, point 14: `bytes` gave a string for a UTF-8 file and an array of numbers for
/// another; now every file is one base64 string.
#[test]
fn bytes_files_are_base64_strings_text_or_not() {
    let dir = TempDir::new("bytesfmt");
    std::fs::write(dir.0.join("text.txt"), "héllo\n").unwrap();
    std::fs::write(dir.0.join("blob.bin"), [0xff, 0x00, 0xfe, 0x80]).unwrap();
    let d = Dispatcher::start(&[]);
    let _w = Worker::start(&d.url, &[WORKER, &["--data-root", dir.path()]].concat());
    let ds = json!({"source": {"files": {"paths": ["text.txt", "blob.bin"], "format": "bytes"}}});
    let got = read_all(&d.url, ds, options()).unwrap();
    assert_eq!(got, [json!("aMOpbGxvCg=="), json!("/wD+gA==")]);
}

/// A task's element buffer pauses production at `--max-buffer-bytes`, not only at `--buffer`
/// elements: 1,024 batches of 100 integers would otherwise wait in memory.
#[test]
fn production_pauses_at_the_byte_bound() {
    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, &["--max-buffer-bytes", "10000"]);
    let tasks = raw_iteration(
        &d,
        json!({"source": {"range": {"stop": 1000000}}, "transforms": [{"batch": {"size": 100}}]}),
        json!("parallel_epochs"),
    );
    let path = format!("/v1/tasks/{}/elements?max=1", tasks[0].0);
    let first = (0..1000).map(|_| w.call("GET", &path)).find(|r| r.status != 404).unwrap();
    assert_eq!(ok(&first)["elements"][0].as_array().unwrap().len(), 100);
    // A batch weighs 3,232 bytes: at most four wait (the fourth starts below 10,000 bytes).
    let mut settled = false;
    for _ in 0..2_000 {
        let buffered = metric(&w, "shardwise_worker_buffered_elements");
        assert!(buffered <= 4, "buffered {buffered}");
        if buffered >= 3 {
            settled = true;
            break;
        }
    }
    assert!(settled, "the buffer fills to the byte bound");
    let produced = metric(&w, "shardwise_worker_elements_produced_total");
    for _ in 0..50 {
        assert_eq!(metric(&w, "shardwise_worker_elements_produced_total"), produced);
    }
}

fn metric(w: &Worker, name: &str) -> u64 {
    let text = w.call("GET", "/metrics").body;
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[test]
fn production_pauses_at_the_buffer_bound() {
    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, &["--buffer", "8"]);
    let tasks = raw_iteration(
        &d,
        json!({"source": {"range": {"stop": 1000000}}}),
        json!("parallel_epochs"),
    );
    let path = format!("/v1/tasks/{}/elements?max=1", tasks[0].0);
    // The first read starts the producer.
    let first = (0..1000).map(|_| w.call("GET", &path)).find(|r| r.status != 404).unwrap();
    assert_eq!(ints(ok(&first)["elements"].as_array().unwrap()), [0]);
    // The buffer fills to its bound and no further: produced - served never exceeds 8.
    let mut full = false;
    for _ in 0..2_000 {
        let buffered = metric(&w, "shardwise_worker_buffered_elements");
        assert!(buffered <= 8, "buffered {buffered}");
        if buffered == 8 {
            full = true;
            break;
        }
    }
    assert!(full, "the buffer fills");
    for _ in 0..50 {
        let produced = metric(&w, "shardwise_worker_elements_produced_total");
        let served = metric(&w, "shardwise_worker_elements_served_total");
        assert_eq!((produced, served), (9, 1), "production paused at the bound");
    }
    // A large read gets at most the buffered elements, in order.
    let big = format!("/v1/tasks/{}/elements?max=1000", tasks[0].0);
    let v = ok(&w.call("GET", &big));
    let got = ints(v["elements"].as_array().unwrap());
    assert!(!got.is_empty() && got.len() <= 8, "{got:?}");
    assert_eq!(got, (1..=got.len() as i64).collect::<Vec<_>>());
}

#[test]
fn worker_serves_health_and_the_one_openapi_document() {
    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, WORKER);
    assert_eq!(ok(&w.call("GET", "/healthz"))["status"], "ok");
    let from_worker = ok(&w.call("GET", "/openapi.json"));
    let from_dispatcher = ok(&d.call("GET", "/openapi.json", None));
    assert_eq!(from_worker, from_dispatcher, "one document");
    let op = &from_worker["paths"]["/v1/tasks/{task_id}/elements"]["get"];
    assert_eq!(op["tags"], json!(["worker-data-plane"]));
    // The dispatcher itself does not serve the element route.
    assert_eq!(d.call("GET", "/v1/tasks/4000/elements", None).status, 404);
}

#[test]
fn worker_with_tokens_presents_its_own_and_requires_a_client_token() {
    let dir = TempDir::new("workerauth");
    let tokens = dir.0.join("tokens.json");
    let (worker_token, client_token) = ("worker-token-0123456789", "client-token-0123456789");
    std::fs::write(
        &tokens,
        json!({"tokens": [{"role": "worker", "token": worker_token}, {"role": "client", "token": client_token}]})
            .to_string(),
    )
    .unwrap();
    let token_file = dir.0.join("worker.token");
    std::fs::write(&token_file, format!("{worker_token}\n")).unwrap();
    let tokens = tokens.to_str().unwrap();
    let d = Dispatcher::start(&["--auth-tokens", tokens]);
    // Without a token the worker cannot register.
    let err = Worker::try_start(&d.url, &[]).unwrap_err();
    assert!(err.contains("refused to register") && err.contains("UNAUTHENTICATED"), "{err}");
    let w = Worker::start(
        &d.url,
        &["--token-file", token_file.to_str().unwrap(), "--auth-tokens", tokens],
    );
    assert_eq!(w.call("GET", "/v1/tasks/4000/elements").status, 401);
    assert_eq!(w.call("GET", "/healthz").status, 200);
    let opts = DistributeOptions { token: Some(client_token.into()), ..options() };
    let got = read_all(&d.url, json!({"source": {"range": {"stop": 4}}}), opts).unwrap();
    assert_eq!(ints(&got), [0, 1, 2, 3]);
    assert!(!w.output().contains(worker_token), "tokens are never printed");
}

#[test]
fn worker_notices_a_dispatcher_restart_without_state_and_registers_again() {
    let mut d = Dispatcher::start(&[]);
    let port = d.url.rsplit(':').next().unwrap().to_owned();
    let w = Worker::start(&d.url, &["--heartbeat-interval", "100ms"]);
    let tasks =
        raw_iteration(&d, json!({"source": {"range": {"stop": 1000}}}), json!("parallel_epochs"));
    let (task, _) = &tasks[0];
    let path = format!("/v1/tasks/{task}/elements?max=2");
    let first = (0..1000).map(|_| w.call("GET", &path)).find(|r| r.status != 404).unwrap();
    assert_eq!(ints(ok(&first)["elements"].as_array().unwrap()), [0, 1]);
    // kill -9 and a restart on the same port without a journal: a new incarnation.
    d.kill();
    let d2 = Dispatcher::try_start_on(&port, &[]).expect("restarts on the same port");
    // The worker registers again by itself, so a new epoch over it works (task ids start
    // over: the new iteration's task has the old task's id, and never serves its data).
    let got = read_all(&d2.url, json!({"source": {"range": {"stop": 3}}}), options()).unwrap();
    assert_eq!(ints(&got), [0, 1, 2]);
    assert!(w.wait_for_output("has a new incarnation"), "{}", w.output());
    assert!(w.wait_for_output("is not fault tolerant"), "{}", w.output());
    assert!(w.output().contains(&format!("[{task}]")), "{}", w.output());
}

#[test]
fn worker_exits_cleanly_on_sigterm() {
    let d = Dispatcher::start(&[]);
    let mut w = Worker::start(&d.url, WORKER);
    let pid = w.child.id().to_string();
    let status = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let exited = poll_until("an exit on SIGTERM", Duration::from_secs(10), || {
        w.child.try_wait().ok().flatten().ok_or("still running")
    });
    assert_eq!(exited.code(), Some(0), "exits with 0 on SIGTERM");
}

/// WT-01 and WT-02: `AUTO` skips COLOCATED-tagged workers and reads untagged ones (`ANY`
/// reads both).
#[test]
fn wt_01_wt_02_auto_skips_colocated_workers_and_reads_untagged_ones() {
    let d = Dispatcher::start(&[]);
    let _plain = Worker::start(&d.url, WORKER);
    let _colocated =
        Worker::start(&d.url, &["--tags", "COLOCATED", "--heartbeat-interval", "200ms"]);
    let ds = json!({"source": {"range": {"stop": 5}}});
    // AUTO skips the COLOCATED worker's task and ends when the tasks it reads end.
    let got = read_all(&d.url, ds.clone(), options()).unwrap();
    assert_eq!(ints(&got), [0, 1, 2, 3, 4]);
    let any = DistributeOptions {
        target_workers: shardwise_core::dispatch::TargetWorkers::Any,
        ..options()
    };
    let c = counts(&ints(&read_all(&d.url, ds, any).unwrap()));
    assert!(c.len() == 5 && c.values().all(|n| *n == 2), "{c:?}");
}

/// WT-07: a tag other than COLOCATED does not keep a worker from `AUTO` reads, and an empty
/// tag is refused when the worker starts.
#[test]
fn wt_07_unrelated_tags_are_read_and_an_empty_tag_is_refused() {
    let d = Dispatcher::start(&[]);
    let _plain = Worker::start(&d.url, WORKER);
    let _gpu =
        Worker::start(&d.url, &["--tags", "GPU,COLOCATED_2", "--heartbeat-interval", "200ms"]);
    let c = counts(&ints(
        &read_all(&d.url, json!({"source": {"range": {"stop": 5}}}), options()).unwrap(),
    ));
    assert!(c.len() == 5 && c.values().all(|n| *n == 2), "both workers are read: {c:?}");
    let Err(refused) = Worker::try_start(&d.url, &["--tags", "COLOCATED,"]) else {
        panic!("a worker with an empty tag started");
    };
    assert!(refused.contains("Worker tags cannot be empty"), "{refused}");
}

/// CR-09: coordinated reads ignore worker tags: a COLOCATED worker's task takes its turn in
/// the rounds like any other.
#[test]
fn cr_09_coordinated_reads_ignore_worker_tags() {
    let d = Dispatcher::start(&[]);
    let _plain = Worker::start(&d.url, WORKER);
    let _colocated =
        Worker::start(&d.url, &["--tags", "COLOCATED", "--heartbeat-interval", "200ms"]);
    let (a, b) = read_two_coordinated_consumers(&d.url, "tagged");
    // The same rounds as with untagged workers (CR-01): both tasks in turn, two elements each.
    assert_rounds_of_two_tasks(&a, &b);
}

#[test]
fn distributed_epoch_over_files_and_split_items_reads_each_once() {
    let dir = TempDir::new("dynfiles");
    let paths: Vec<String> = (0..5)
        .map(|i| {
            let p = dir.0.join(format!("part-{i}.jsonl"));
            std::fs::write(&p, format!("{{\"f\": {i}, \"n\": 0}}\n{{\"f\": {i}, \"n\": 1}}\n"))
                .unwrap();
            p.to_str().unwrap().to_owned()
        })
        .collect();
    let d = Dispatcher::start(&[]);
    let flags = [WORKER, &["--data-root", dir.path()]].concat();
    let _w: Vec<Worker> = (0..2).map(|_| Worker::start(&d.url, &flags)).collect();
    let opts = DistributeOptions { processing_mode: distributed(), ..options() };
    let ds = json!({"source": {"files": {"paths": paths, "format": "jsonl"}}});
    let mut got: Vec<(i64, i64)> = read_all(&d.url, ds, opts.clone())
        .unwrap()
        .iter()
        .map(|v| (v["f"].as_i64().unwrap(), v["n"].as_i64().unwrap()))
        .collect();
    got.sort_unstable();
    assert_eq!(got, (0..5).flat_map(|f| [(f, 0), (f, 1)]).collect::<Vec<_>>());
    // A `splits` source: each item is one element.
    let items: Vec<Value> = (0..30).map(|i| json!({"uri": format!("gs://b/{i}")})).collect();
    let ds = json!({"source": {"splits": {"items": items.clone()}}});
    let mut got = read_all(&d.url, ds, opts).unwrap();
    got.sort_by_key(|v| v["uri"].as_str().unwrap()[7..].parse::<u32>().unwrap());
    assert_eq!(got, items);
}

/// CR-06: a worker added mid-read joins the rounds without breaking their alignment.
#[test]
fn cr_06_a_worker_added_mid_read_keeps_the_rounds_aligned() {
    let d = Dispatcher::start(&[]);
    let _first = Worker::start(&d.url, WORKER);
    let ds = json!({"source": {"range": {"stop": 1000000}}, "transforms": [{"repeat": null}]});
    let (a, b) = runtime().block_on(async {
        let consumer = |i: u64| {
            let opts = DistributeOptions {
                job_name: Some("joining".into()),
                num_consumers: Some(2),
                consumer_index: Some(i),
                ..options()
            };
            distribute(&d.url, dataset(ds.clone()), opts)
        };
        let (mut s0, mut s1) = (consumer(0), consumer(1));
        let mut a: Vec<Value> = Vec::new();
        let mut b: Vec<Value> = Vec::new();
        let read = async {
            let mut second = None;
            // At least 200 steps, and on until the new worker's task (its stream starts at
            // 0) shows up: it joins after a heartbeat and the consumers' agreement, which
            // may take longer than 180 steps (the timeout below bounds the wait).
            while a.len() < 200 || !a[20..].iter().any(|x| x.as_i64().is_some_and(|x| x < 10)) {
                let (x, y) = tokio::join!(s0.next(), s1.next());
                a.push(x.expect("endless").expect("no error"));
                b.push(y.expect("endless").expect("no error"));
                if a.len() == 20 {
                    // A second worker joins mid-read: its task is pending until both
                    // consumers agreed on the round it starts in.
                    let url = d.url.clone();
                    second = Some(tokio::task::spawn_blocking(move || Worker::start(&url, WORKER)));
                }
            }
            second.expect("started").await.expect("worker")
        };
        let _second = tokio::time::timeout(Duration::from_secs(60), read).await.expect("in time");
        (ints(&a), ints(&b))
    });
    // Every step both consumers read the same task's round: consecutive elements.
    for (j, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(*y, x + 1, "step {j}: {x} and {y} are not one round of one task");
    }
    // The second worker's task joined: its stream (starting at 0) showed up after step 20
    // (the read above ends only then).
    assert!(a[20..].iter().any(|x| *x < 10), "the new task was read: {a:?}");
}

/// The dispatcher killed with kill -9 mid-epoch in fault-tolerant mode and restarted on the
/// same port and work dir: workers and the client retry while it is down and carry on (same
/// incarnation), and the DYNAMIC epoch completes with every element exactly once.
#[test]
fn fault_tolerant_dispatcher_killed_mid_epoch_and_restarted_loses_nothing() {
    let dir = TempDir::new("ftrestart");
    let ft = ["--work-dir", dir.path(), "--fault-tolerant"];
    let mut d = Dispatcher::start(&ft);
    let port = d.url.rsplit(':').next().unwrap().to_owned();
    let url = d.url.clone();
    let _w: Vec<Worker> = (0..2)
        .map(|_| Worker::start(&url, &["--heartbeat-interval", "100ms", "--buffer", "8"]))
        .collect();
    let opts = DistributeOptions {
        processing_mode: distributed(),
        split_size: Some(10),
        elements_per_request: 4,
        ..options()
    };
    let mut restarted = None;
    let got = runtime().block_on(async {
        let mut stream =
            distribute(&url, dataset(json!({"source": {"range": {"stop": 2000}}})), opts);
        let mut got = Vec::new();
        let read = async {
            while let Some(e) = stream.next().await {
                got.push(e.expect("no error"));
                if got.len() == 300 {
                    d.kill();
                    let port = port.clone();
                    let ft: Vec<String> = ft.iter().map(|s| s.to_string()).collect();
                    restarted = Some(
                        tokio::task::spawn_blocking(move || {
                            let args: Vec<&str> = ft.iter().map(String::as_str).collect();
                            Dispatcher::try_start_on(&port, &args)
                        })
                        .await
                        .expect("join")
                        .expect("restarts"),
                    );
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read).await.expect("the epoch ends");
        got
    });
    let mut got = ints(&got);
    got.sort_unstable();
    assert_eq!(got, (0..2000).collect::<Vec<_>>(), "every element exactly once");
    let d2 = restarted.expect("restarted");
    let job = ok(&d2.call("GET", "/v1/jobs/5000", None));
    assert_eq!(job["iterations"][0]["finished"], true);
}

#[test]
fn dropping_the_stream_releases_the_client() {
    let d = Dispatcher::start(&[]);
    let _w = Worker::start(&d.url, WORKER);
    let released = runtime().block_on(async {
        let ds = dataset(json!({"source": {"range": {"stop": 1000000}}}));
        let first: Vec<Value> =
            distribute(&d.url, ds, options()).take(3).try_collect().await.expect("three elements");
        assert_eq!(ints(&first), [0, 1, 2]);
        // The stream is dropped: its reader releases the lease in the background.
        for _ in 0..1_000 {
            let job = ok(&d.call("GET", "/v1/jobs/5000", None));
            if job["iterations"][0]["num_clients"] == 0 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    });
    assert!(released, "the client lease is released");
}

/// The worker's element route: task ids that are not ids and out-of-range `max` are 400
/// problems (never echoed at length), and a declared body over the worker's limit is 413
/// (the route reads no body, so nothing else would have refused it).
#[test]
fn worker_path_parameters_and_body_limit() {
    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, &[]);
    let huge = "9".repeat(5_000);
    for j in ["abc", "-1", "+5", "1.5", "%00", "%FF%FE", "1%2F2", "18446744073709551616", &huge] {
        let r = w.call("GET", &format!("/v1/tasks/{j}/elements"));
        assert_eq!(r.status, 400, "{j}: {}", r.body);
        assert_eq!(r.header("content-type"), Some("application/problem+json"), "{j}");
        assert_eq!(r.json()["code"], "INVALID_ARGUMENT", "{j}");
        assert!(r.body.len() < 400, "{} bytes echoed", r.body.len());
    }
    for q in ["max=0", "max=10001", "max=-1", "max=abc", "bogus=1"] {
        let r = w.call("GET", &format!("/v1/tasks/4000/elements?{q}"));
        assert_eq!(r.status, 400, "{q}: {}", r.body);
        assert_eq!(r.json()["code"], "INVALID_ARGUMENT", "{q}");
    }
    let host = w.address().to_owned();
    let head = format!(
        "GET /v1/tasks/4000/elements HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 100000000\r\n\r\n"
    );
    let s = rawhttp::send_bytes(&host, head.as_bytes(), Duration::from_secs(30)).unwrap();
    let (out, _) = rawhttp::read_until_closed(s);
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    assert!(
        out.contains("application/problem+json") && out.contains("RESOURCE_EXHAUSTED"),
        "{out}"
    );
    assert!(!w.output().contains("panicked"), "{}", w.output());
}

/// Reads `path` (a `lines` file) through a worker until the read ends or fails; the elements
/// read and whether it failed (the error text is returned as an element to check too).
fn read_lines_until_error(url: &str, paths: &[&str]) -> (Vec<String>, Option<String>) {
    let ds = json!({"source": {"files": {"paths": paths, "format": "lines"}}});
    runtime().block_on(async {
        let mut stream = distribute(url, dataset(ds), options());
        let mut got = Vec::new();
        loop {
            let next = tokio::time::timeout(Duration::from_secs(60), stream.next())
                .await
                .expect("an element or the end within 60 s");
            match next {
                None => return (got, None),
                Some(Ok(v)) => got.push(v.as_str().unwrap_or_default().to_owned()),
                Some(Err(e)) => return (got, Some(e.to_string())),
            }
        }
    })
}

/// A worker checked a path's canonical form, then opened it again by name;
/// swapping a directory and a symlink inside the root (`renameat2(RENAME_EXCHANGE)`) between
/// the two leaked a file outside the root. Files are now opened beneath the root without
/// following links: over at least 2,000 file reads while a thread swaps, nothing outside
/// is ever served.
#[test]
fn a_directory_swapped_with_a_symlink_never_leaks_a_file_outside_the_root() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let base = TempDir::new("swaprace");
    let root = base.0.join("root");
    let outside = base.0.join("outside");
    std::fs::create_dir_all(root.join("dir")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("dir/f.txt"), "inside\n").unwrap();
    std::fs::write(outside.join("f.txt"), "SENTINEL-OUTSIDE\n").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    let r = root.to_str().unwrap().to_owned();
    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, &[WORKER, &["--data-root", &r]].concat());

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, root) = (stop.clone(), root.clone());
        std::thread::spawn(move || {
            use rustix::fs::{Mode, OFlags, RenameFlags};
            let dir =
                rustix::fs::open(&root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) && swaps < 100_000_000 {
                rustix::fs::renameat_with(&dir, "dir", &dir, "link", RenameFlags::EXCHANGE)
                    .unwrap();
                swaps += 1;
                if swaps.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            }
            swaps
        })
    };
    let absolute = format!("{r}/dir/f.txt");
    let paths: Vec<&str> =
        (0..50).map(|i| if i % 2 == 0 { "dir/f.txt" } else { &absolute }).collect();
    let (mut reads, mut inside, mut leaks, mut refused) = (0usize, 0usize, 0usize, 0usize);
    let started = std::time::Instant::now();
    // Bounded: 2,000 file reads, or at most 1,500 datasets read, or 150 s.
    for _ in 0..1_500 {
        if reads >= 2_000 || started.elapsed() > Duration::from_secs(150) {
            break;
        }
        let (lines, error) = read_lines_until_error(&d.url, &paths);
        reads += lines.len() + usize::from(error.is_some());
        for line in &lines {
            if line == "inside" {
                inside += 1;
            } else {
                leaks += 1;
            }
        }
        if let Some(e) = error {
            assert!(!e.contains("SENTINEL"), "{e}");
            refused += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    println!(
        "{reads} file reads: {inside} inside, {refused} refused, {leaks} leaked; {swaps} swaps"
    );
    assert_eq!(leaks, 0, "a file outside the root was served");
    assert!(reads >= 2_000 && inside > 0 && swaps > 0, "the race ran: {reads} reads");
    assert!(!w.output().contains("SENTINEL"));
}

/// What is opened beneath the root is checked, not its name: a symlink
/// (even to a file inside), a hard link (to a file outside) and another filesystem mounted
/// under the root (a bind mount of `/proc`) are refused.
#[test]
fn symlinks_hard_links_and_mounts_under_a_data_root_are_refused() {
    let base = TempDir::new("rootlinks");
    let root = base.0.join("root");
    let outside = base.0.join("outside");
    std::fs::create_dir_all(root.join("mnt")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("ok.txt"), "inside\n").unwrap();
    std::fs::write(outside.join("secret.txt"), "SECRET-LINE\n").unwrap();
    std::os::unix::fs::symlink(root.join("ok.txt"), root.join("inner-link")).unwrap();
    std::fs::hard_link(outside.join("secret.txt"), root.join("hard.txt")).unwrap();
    let r = root.to_str().unwrap().to_owned();
    let d = Dispatcher::start(&[]);
    let _w = Worker::start(&d.url, &[WORKER, &["--data-root", &r]].concat());
    let lines = |path: &str| json!({"source": {"files": {"paths": [path], "format": "lines"}}});
    let err = |path: &str| read_all(&d.url, lines(path), options()).unwrap_err().to_string();

    assert_eq!(read_all(&d.url, lines("ok.txt"), options()).unwrap(), vec![json!("inside")]);
    let e = err("inner-link");
    assert!(e.contains(NOT_READABLE), "{e}");
    let e = err(&format!("{r}/hard.txt"));
    assert!(e.contains("more than one hard link") && !e.contains("SECRET"), "{e}");

    let mounted = std::process::Command::new("mount")
        .args(["--bind", "/proc", root.join("mnt").to_str().unwrap()])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if mounted {
        let e = err("mnt/self/environ");
        let _ = std::process::Command::new("umount").arg(root.join("mnt")).status();
        assert!(e.contains(NOT_READABLE) || e.contains("another filesystem"), "{e}");
        assert!(!e.contains("PATH="), "{e}");
    } else {
        println!("skipped the bind mount case: `mount --bind` failed (not root?)");
    }
}

/// A read of a task id the dispatcher never assigned to the worker is "not known yet, retry"
/// only until a heartbeat sent after the first read came back without it; from then on it is
/// a final 404 saying so, and a task the dispatcher does assign is still read.
#[test]
fn a_task_the_dispatcher_never_assigned_is_not_found_for_good() {
    let d = Dispatcher::start(&[]);
    // Heartbeats every 30 s: the one that settles it is the one the first read asks for.
    let w = Worker::start(&d.url, &["--heartbeat-interval", "30s"]);
    let path = "/v1/tasks/424242/elements";
    let detail = |r: &shardwise_tests::HttpResponse| {
        assert_eq!(r.status, 404, "{}", r.body);
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let p = r.json();
        assert_eq!(p["code"], "NOT_FOUND", "{p}");
        p["detail"].as_str().unwrap().to_owned()
    };
    let first = detail(&w.call("GET", path));
    assert!(first.contains("not known to this worker (yet)") && first.contains("retry"), "{first}");
    let last = poll_until("a final answer", Duration::from_secs(20), || {
        let d = detail(&w.call("GET", path));
        if d.contains("the dispatcher has not assigned task 424242 to this worker") {
            Ok(d)
        } else {
            std::thread::sleep(Duration::from_millis(20));
            Err(d)
        }
    });
    assert!(!last.contains("retry"), "{last}");
    assert_eq!(detail(&w.call("GET", path)), last, "it stays final");
    // A task the dispatcher assigns later is read as ever.
    let tasks =
        raw_iteration(&d, json!({"source": {"range": {"stop": 3}}}), json!("parallel_epochs"));
    assert_eq!(ints(&read_task(&w.url, &tasks[0].0)), [0, 1, 2]);
}

/// One read of a task with `headers`: the status, the content type and the body's bytes
/// (the worker's 404 retried while it fetches the task).
fn read_with(worker: &str, task: &str, headers: &[(&str, &str)]) -> (u16, String, Vec<u8>) {
    let path = format!("/v1/tasks/{task}/elements?max=10");
    for _ in 0..2_000 {
        let mut request = rawhttp::Request::new("GET", &path);
        for (k, v) in headers {
            request = request.header(k, v);
        }
        let mut conn = rawhttp::Conn::open(worker, Duration::from_secs(30)).unwrap();
        conn.send(&request).unwrap();
        let head = conn.read_head().unwrap();
        let body = conn.read_body(&head).unwrap();
        if head.status == 404 {
            continue;
        }
        let content_type = head.header("content-type").unwrap_or_default().to_owned();
        return (head.status, content_type, body);
    }
    panic!("task {task} never came");
}

/// Issue 30, rough edges: an unknown `shardwise-arrow-compression` was served uncompressed
/// without a word, and `Accept` weights were ignored (`application/json` preferred by its
/// weight still got Arrow). Now a compression header naming nothing the worker serves is a 400
/// naming what it serves, and `Accept` is negotiated by weight (RFC 9110).
#[test]
fn accept_weights_are_honoured_and_unknown_compressions_refused() {
    let dir = TempDir::new("negotiation");
    let values: Vec<u8> = (0..3i64).flat_map(i64::to_le_bytes).collect();
    let file = shardwise_tests::parquet_bytes::one_page(0, &values, 3);
    std::fs::write(dir.0.join("x.parquet"), file).unwrap();
    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, &[WORKER, &["--data-root", dir.path()]].concat());
    let path = format!("{}/x.parquet", dir.path());
    let ds = json!({"source": {"files": {"paths": [path], "format": "parquet"}}, "transforms": [{"repeat": null}]});
    let tasks = raw_iteration(&d, ds, json!("parallel_epochs"));
    let (task, _) = &tasks[0];
    const ARROW: &str = "application/vnd.apache.arrow.stream";
    let answers = |accept: &str| read_with(&w.url, task, &[("accept", accept)]).1;
    for (accept, want) in [
        (ARROW, ARROW),
        ("application/json", "application/json"),
        // The higher weight wins; a tie goes to Arrow when it is named; q=0 is "not this".
        ("application/vnd.apache.arrow.stream;q=0.5, application/json", "application/json"),
        ("application/json;q=0.1, application/vnd.apache.arrow.stream;q=0.9", ARROW),
        ("application/json, application/vnd.apache.arrow.stream", ARROW),
        ("application/vnd.apache.arrow.stream;q=0", "application/json"),
        ("*/*", "application/json"),
        ("application/*;q=0.2, application/vnd.apache.arrow.stream;q=0.1", "application/json"),
        ("application/json;q=0, */*", ARROW),
    ] {
        assert_eq!(answers(accept), want, "Accept: {accept}");
    }
    let (status, _, body) = read_with(&w.url, task, &[("accept", "application/json;q=2")]);
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));

    // The compression header: a codec the worker serves, or a 400 naming them.
    let arrow_with = |value: &str| {
        read_with(&w.url, task, &[("accept", ARROW), ("shardwise-arrow-compression", value)])
    };
    for value in ["zstd", "bogus, lz4", "zstd;q=0.2, lz4;q=0.8", "none"] {
        let (status, content_type, _) = arrow_with(value);
        assert_eq!((status, content_type.as_str()), (200, ARROW), "{value}");
    }
    for value in ["brotli", "gzip, br", "zstd;q=0"] {
        let (status, _, body) = arrow_with(value);
        let p: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((status, p["code"].as_str()), (400, Some("INVALID_ARGUMENT")), "{value}: {p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(detail.contains("ask for lz4, zstd or none"), "{value}: {detail}");
    }
}
