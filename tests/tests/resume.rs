//! Read positions against real processes: a `distributed_epoch` read saved part way
//! (`ElementStream::position`) and resumed by a new client on a new job
//! (`DistributeOptions::resume_from`) reads every element exactly once overall, with more
//! workers than before, across SIGKILLs of a fault-tolerant dispatcher and of a worker during
//! the resumed read (duplicates only of its in-flight splits); and the worker's
//! element replies carry the `origin` runs positions are made of; a stream without read-ahead
//! takes only what its caller reads.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::wire::{NamedMode, ProcessingMode};
use shardwise_core::position::{OriginRun, ReadPosition, merge_positions};
use shardwise_gateway::client::{DistributeOptions, ElementStream, distribute};
use shardwise_tests::crash::Forwarder;
use shardwise_tests::{Dispatcher, TempDir, Worker, http, ok, poll_until, runtime};

const N: i64 = 100_000;
/// ~100 splits of `range(N)`.
const SPLIT: u64 = 1_000;
/// Elements the first reader takes before it saves its position (about 40%, not a multiple
/// of the splits a round of get-split hands the workers: some splits are under way).
const FIRST: usize = 41_234;
const WORKER: &[&str] = &["--heartbeat-interval", "200ms"];

fn range_ds() -> DatasetDef {
    DatasetDef::from_json(&json!({"source": {"range": {"stop": N}}})).expect("a valid dataset")
}

fn options(resume_from: Option<ReadPosition>) -> DistributeOptions {
    DistributeOptions {
        processing_mode: ProcessingMode::Named(NamedMode::DistributedEpoch),
        split_size: Some(SPLIT),
        elements_per_request: 256,
        unknown_task_timeout: Duration::from_secs(30),
        resume_from,
        ..shardwise_tests::fast_options()
    }
}

/// The next element of `stream` as an integer (bounded: 60 s).
async fn next_int(stream: &mut ElementStream) -> Option<i64> {
    let next = tokio::time::timeout(Duration::from_secs(60), stream.next())
        .await
        .expect("an element or the end within 60 s");
    next.map(|e| e.expect("no error").as_i64().expect("an integer"))
}

/// Reads `FIRST` elements, saves the position, and drops the stream (stopping the read).
fn read_part(url: &str) -> (Vec<i64>, ReadPosition) {
    runtime().block_on(async {
        let mut stream = distribute(url, range_ds(), options(None));
        let mut got = Vec::with_capacity(FIRST);
        while got.len() < FIRST {
            got.push(next_int(&mut stream).await.expect("the epoch is longer"));
        }
        let position = stream.position().expect("a distributed_epoch read has a position");
        (got, position)
    })
}

/// The position is small (its entries are far fewer than the splits read) and plain JSON.
fn check_position(position: &ReadPosition) -> ReadPosition {
    let entries = position.done.len() + position.partial.len();
    println!("position: {entries} entries: {}", serde_json::to_string(position).unwrap());
    assert!(entries > 0 && entries <= 20, "a small position: {position:?}");
    let text = serde_json::to_string(position).unwrap();
    let back: ReadPosition = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, position);
    let value: Value = serde_json::from_str(&text).unwrap();
    assert!(value["done"].is_array() && value["partial"].is_array(), "{value}");
    back
}

/// Every element of `range(N)` exactly once in `before` and `after` together.
fn assert_exactly_once(before: &[i64], after: &[i64]) {
    let mut all: Vec<i64> = before.iter().chain(after).copied().collect();
    assert_eq!(all.len(), N as usize, "as many elements as the range has");
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), N as usize, "none twice");
    assert_eq!(all.first(), Some(&0));
    assert_eq!(all.last(), Some(&(N - 1)));
}

/// Waits until the dispatcher lists `n` live workers.
fn await_workers(d: &Dispatcher, n: usize) {
    poll_until("the workers registered", Duration::from_secs(20), || {
        let workers = ok(&d.call("GET", "/v1/workers", None));
        let alive = workers["workers"].as_array().unwrap().iter().filter(|w| w["alive"] == true);
        if alive.count() == n { Ok(()) } else { Err(format!("{workers}")) }
    });
}

#[test]
fn resume_after_partial_read_on_more_workers() {
    let d = Dispatcher::start(&[]);
    let _workers = [Worker::start(&d.url, WORKER), Worker::start(&d.url, WORKER)];
    await_workers(&d, 2);
    let (before, position) = read_part(&d.url);
    let position = check_position(&position);
    assert_eq!(position.repetition, 0);
    let _third = Worker::start(&d.url, WORKER);
    await_workers(&d, 3);

    let (after, end) = runtime().block_on(async {
        let mut stream = distribute(&d.url, range_ds(), options(Some(position.clone())));
        // Before anything is read, the position is the one resumed from.
        assert_eq!(stream.position().unwrap(), position);
        let mut got = Vec::new();
        while let Some(x) = next_int(&mut stream).await {
            got.push(x);
        }
        (got, stream.position().unwrap())
    });
    assert_exactly_once(&before, &after);
    // At the end, the position covers the whole range.
    assert_eq!(end.done.len(), 1, "{end:?}");
    assert_eq!((end.done[0].start, end.done[0].stop), (0, N as u64));
    assert!(end.partial.is_empty(), "{end:?}");
}

#[test]
fn resume_after_kill_9_of_a_fault_tolerant_dispatcher() {
    let dir = TempDir::new("resumekill");
    let args = ["--work-dir", dir.path(), "--fault-tolerant"];
    let start = || {
        Dispatcher::try_start(&args).unwrap_or_else(|e| panic!("the dispatcher did not start: {e}"))
    };
    let port = |d: &Dispatcher| -> u16 { d.url.rsplit(':').next().unwrap().parse().unwrap() };
    let fwd = Forwarder::start();
    let url = fwd.url();
    let mut d = start();
    fwd.set_target(port(&d));
    let _workers = [Worker::start(&url, WORKER), Worker::start(&url, WORKER)];
    await_workers(&d, 2);
    let (before, position) = read_part(&url);
    let position = check_position(&position);

    // SIGKILL between saving the position and resuming.
    d.kill();
    fwd.cut();
    d = start();
    fwd.set_target(port(&d));
    let _third = Worker::start(&url, WORKER);
    await_workers(&d, 3);

    let after = runtime().block_on(async {
        let mut stream = distribute(&url, range_ds(), options(Some(position)));
        let mut got = Vec::new();
        while let Some(x) = next_int(&mut stream).await {
            got.push(x);
            // And once more during the resumed read (the iteration exists: elements came).
            if got.len() == 20_000 {
                d.kill();
                fwd.cut();
                d = start();
                fwd.set_target(port(&d));
            }
        }
        got
    });
    assert!(after.len() > 20_000, "the second kill came during the resumed read");
    assert_exactly_once(&before, &after);
}

/// Registers `ds`, makes a DYNAMIC job with splits of 3 and an iteration over raw HTTP;
/// returns the dataset id, the job id and its tasks as (task id, worker url).
fn raw_dynamic(d: &Dispatcher, ds: Value) -> (Value, String, Vec<(String, String)>) {
    let id =
        ok(&d.call("POST", "/v1/datasets", Some(json!({"dataset": ds}))))["dataset_id"].clone();
    let job = ok(&d.call(
        "POST",
        "/v1/jobs",
        Some(json!({"dataset_id": id, "processing_mode": "distributed_epoch", "split_size": 3})),
    ));
    let job_id = job["job_id"].as_str().unwrap().to_owned();
    let lease = ok(&d.call("POST", &format!("/v1/jobs/{job_id}/iterations"), Some(json!({}))));
    let client = lease["client_id"].as_str().unwrap();
    let hb = ok(&d.call("POST", &format!("/v1/clients/{client}/heartbeat"), Some(json!({}))));
    let tasks = hb["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let address = t["worker_address"].as_str().unwrap();
            (t["task_id"].as_str().unwrap().to_owned(), format!("http://{address}"))
        })
        .collect();
    (id, job_id, tasks)
}

/// Reads a task over raw HTTP until end of sequence: every reply with elements.
fn read_replies(worker_url: &str, task_id: &str) -> Vec<Value> {
    let mut replies = Vec::new();
    for _ in 0..2_000 {
        let r = http("GET", worker_url, &format!("/v1/tasks/{task_id}/elements?max=4"), None)
            .expect("the worker answers");
        if r.status == 404 {
            continue;
        }
        let body = ok(&r);
        if body["end_of_sequence"] == true {
            return replies;
        }
        if !body["elements"].as_array().unwrap().is_empty() {
            replies.push(body);
        }
    }
    panic!("the task did not end");
}

#[test]
fn element_replies_carry_origins_only_for_resumable_reads() {
    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, WORKER);
    await_workers(&d, 1);

    // range(10) in splits of 3: every element is at its position, so each run says which.
    let (_, _, tasks) = raw_dynamic(&d, json!({"source": {"range": {"stop": 10}}}));
    assert_eq!(tasks.len(), 1);
    let mut seen = Vec::new();
    let mut ends = Vec::new();
    for reply in read_replies(&tasks[0].1, &tasks[0].0) {
        let elements = reply["elements"].as_array().unwrap();
        let runs: Vec<OriginRun> = serde_json::from_value(reply["origin"].clone())
            .unwrap_or_else(|e| panic!("origin runs in {reply}: {e}"));
        assert_eq!(runs.iter().map(|r| r.count).sum::<u64>(), elements.len() as u64, "{reply}");
        let mut i = 0;
        for run in &runs {
            assert_eq!(run.split.stop - run.split.start, if run.split.start == 9 { 1 } else { 3 });
            for k in 0..run.count {
                let at = run.split.start + run.offset + k;
                assert_eq!(elements[i], json!(at), "{reply}");
                i += 1;
            }
            if run.end {
                assert_eq!(run.split.start + run.offset + run.count, run.split.stop, "{reply}");
                ends.push(run.split.start);
            }
        }
        seen.extend(elements.iter().map(|e| e.as_i64().unwrap()));
    }
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
    assert_eq!(ends, [0, 3, 6, 9], "every split's last element is marked");

    // A shuffled dataset's replies have no origins, and resuming it is refused with the reason.
    let shuffled = json!({
        "source": {"range": {"stop": 10}},
        "transforms": [{"shuffle": {"buffer": 4, "seed": 7}}]
    });
    let (dataset_id, job_id, tasks) = raw_dynamic(&d, shuffled);
    let replies = read_replies(&tasks[0].1, &tasks[0].0);
    assert!(!replies.is_empty());
    for reply in &replies {
        assert!(reply.get("origin").is_none(), "no origin for a shuffled read: {reply}");
    }
    let position = json!({"dataset_id": dataset_id, "repetition": 1, "done": [], "partial": []});
    let r = d.call(
        "POST",
        &format!("/v1/jobs/{job_id}/iterations"),
        Some(json!({"repetition": 1, "resume_from": position})),
    );
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let problem = r.json();
    assert_eq!(problem["code"], "FAILED_PRECONDITION", "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("`shuffle`"), "{problem}");
    drop(w);
}

/// 4 JSON Lines files of 50 records in `dir` (record j of file i is 100 * i + j): their
/// dataset, and every record.
fn jsonl_parts(dir: &TempDir) -> (DatasetDef, Vec<i64>) {
    let paths: Vec<String> = (0..4)
        .map(|i| {
            let path = format!("{}/part-{i}.jsonl", dir.path());
            let text: String = (0..50).map(|j| format!("{}\n", 100 * i + j)).collect();
            std::fs::write(&path, text).unwrap();
            path
        })
        .collect();
    let all = (0..4).flat_map(|i| (0..50).map(move |j| 100 * i + j)).collect();
    let ds = json!({"source": {"files": {"paths": paths, "format": "jsonl"}}});
    (DatasetDef::from_json(&ds).unwrap(), all)
}

#[test]
fn resume_part_way_through_a_file_skips_the_records_read() {
    // 4 JSON Lines files of 50 records (record j of file i is 100 * i + j): a split is a
    // file, so a position taken after 75 records has a file under way, which the resumed
    // read's worker opens and passes over the records already read.
    let dir = TempDir::new("resumefiles");
    let (ds, all) = jsonl_parts(&dir);
    let d = Dispatcher::start(&[]);
    let worker =
        || Worker::start(&d.url, &["--heartbeat-interval", "200ms", "--data-root", dir.path()]);
    let _workers = [worker(), worker()];
    await_workers(&d, 2);
    let opts = |from| DistributeOptions { elements_per_request: 7, ..options(from) };
    let (before, position) = runtime().block_on(async {
        let mut stream = distribute(&d.url, ds.clone(), opts(None));
        let mut got = Vec::new();
        while got.len() < 75 {
            got.push(next_int(&mut stream).await.expect("more records"));
        }
        (got, stream.position().unwrap())
    });
    assert!(
        position.partial.iter().any(|p| p.consumed > 0 && p.split.stop == p.split.start + 1),
        "a file under way: {position:?}"
    );
    let after = runtime().block_on(async {
        let mut stream = distribute(&d.url, ds.clone(), opts(Some(position)));
        let mut got = Vec::new();
        while let Some(x) = next_int(&mut stream).await {
            got.push(x);
        }
        got
    });
    let mut got: Vec<i64> = before.into_iter().chain(after).collect();
    got.sort_unstable();
    assert_eq!(got, all, "every record exactly once");
}

/// Three consumers sharing one job take its tasks' records first come, first served, and stop
/// with records in their buffers: each position has gaps inside the files under way, their
/// merge (`merge_positions`) is exact, and one consumer resuming from it on three workers
/// reads exactly the records nobody handed out (the resumed parts of files stop where the
/// next consumed range starts).
#[test]
fn positions_of_consumers_sharing_a_job_merge_and_resume_exactly_once() {
    let dir = TempDir::new("resumeshared");
    let (ds, all) = jsonl_parts(&dir);
    let d = Dispatcher::start(&[]);
    let worker =
        || Worker::start(&d.url, &["--heartbeat-interval", "200ms", "--data-root", dir.path()]);
    let _workers = [worker(), worker()];
    await_workers(&d, 2);
    let shared = || DistributeOptions {
        elements_per_request: 7,
        job_name: Some("shared".into()),
        ..options(None)
    };
    let (before, positions) = runtime().block_on(async {
        let mut streams: Vec<ElementStream> =
            (0..3).map(|_| distribute(&d.url, ds.clone(), shared())).collect();
        let mut got = Vec::new();
        // Five records from each in turn until 120 were handed out.
        while got.len() < 120 {
            for stream in &mut streams {
                for _ in 0..5 {
                    got.push(next_int(stream).await.expect("more records"));
                }
            }
        }
        let positions: Vec<ReadPosition> =
            streams.iter().map(|s| s.position().expect("a position")).collect();
        (got, positions)
    });
    assert_eq!(before.len(), 120);
    let merged = merge_positions(&positions).expect("positions of one read");
    println!("merged position: {}", serde_json::to_string(&merged).unwrap());
    let _third = worker();
    await_workers(&d, 3);
    let after = runtime().block_on(async {
        let resumed = DistributeOptions { elements_per_request: 7, ..options(Some(merged)) };
        let mut stream = distribute(&d.url, ds.clone(), resumed);
        let mut got = Vec::new();
        while let Some(x) = next_int(&mut stream).await {
            got.push(x);
        }
        got
    });
    let mut got: Vec<i64> = before.into_iter().chain(after).collect();
    got.sort_unstable();
    assert_eq!(got, all, "every record exactly once over both reads");
}

/// A worker killed with SIGKILL during the resumed read: nothing consumed before the position
/// comes again, nothing is lost, and the only duplicates are elements of the splits the dead
/// worker had in flight (handed out again, at-least-once as without positions); the position
/// at the end still covers the whole range exactly.
#[test]
fn resume_with_a_worker_killed_during_the_resumed_read() {
    let d = Dispatcher::start(&["--worker-timeout", "2s"]);
    let _workers = [Worker::start(&d.url, WORKER), Worker::start(&d.url, WORKER)];
    await_workers(&d, 2);
    let (before, position) = read_part(&d.url);
    let position = check_position(&position);
    let mut victim = Worker::start(&d.url, WORKER);
    await_workers(&d, 3);

    let (after, end) = runtime().block_on(async {
        let mut stream = distribute(&d.url, range_ds(), options(Some(position)));
        let mut got = Vec::new();
        while let Some(x) = next_int(&mut stream).await {
            got.push(x);
            if got.len() == 15_000 {
                victim.kill();
            }
        }
        (got, stream.position().expect("a position"))
    });
    assert!(after.len() > 15_000, "the worker was killed during the resumed read");
    let consumed: std::collections::HashSet<i64> = before.iter().copied().collect();
    let again: Vec<&i64> = after.iter().filter(|x| consumed.contains(x)).take(5).collect();
    assert!(again.is_empty(), "consumed before the position, read again: {again:?}");
    let mut counts = std::collections::BTreeMap::<i64, usize>::new();
    for x in before.iter().chain(&after) {
        *counts.entry(*x).or_default() += 1;
    }
    assert_eq!(counts.len(), N as usize, "no element lost");
    assert!(counts.keys().all(|x| (0..N).contains(x)));
    assert!(counts.values().all(|n| *n <= 2), "at most one duplicate of any element");
    // Duplicates come from the dead worker's in-flight splits only: a get-split batch of a
    // worker with the default 1,024-element buffer holds at most two 1,000-element splits
    // (a resumed iteration's splits start where the position left off, not at multiples of
    // 1,000), and what comes again of a split is a run of consecutive elements.
    let duplicated: Vec<i64> = counts.iter().filter(|(_, n)| **n > 1).map(|(x, _)| *x).collect();
    let runs = duplicated.windows(2).filter(|w| w[1] != w[0] + 1).count() + 1;
    assert!(
        duplicated.is_empty() || (duplicated.len() <= 2 * SPLIT as usize && runs <= 2),
        "duplicates beyond the in-flight splits: {} elements in {runs} runs",
        duplicated.len()
    );
    // The end position is exact despite the duplicates.
    assert_eq!(end.done.len(), 1, "{end:?}");
    assert_eq!((end.done[0].start, end.done[0].stop), (0, N as u64));
    assert!(end.partial.is_empty(), "{end:?}");
    let workers = ok(&d.call("GET", "/v1/workers", None));
    let lost = workers["workers"].as_array().unwrap().iter().filter(|w| w["alive"] == false);
    assert_eq!(lost.count(), 1, "{workers}");
}

/// A resumed iteration of a job whose `split_size` is past the source's end (up to
/// `u64::MAX`) hands out valid splits: `range(10)` resumed from `done: [0, 5)` reads exactly
/// 5..10 (the plan once wrapped `start + size` around to a split `{5, 4}` the worker refused,
/// and the read never ended).
#[test]
fn resume_with_a_huge_split_size_reads_the_rest() {
    let d = Dispatcher::start(&[]);
    let _worker = Worker::start(&d.url, WORKER);
    await_workers(&d, 1);
    let ds = DatasetDef::from_json(&json!({"source": {"range": {"stop": 10}}})).unwrap();
    for split_size in [u64::MAX, u64::MAX - 3, 1 << 63] {
        let position: ReadPosition = serde_json::from_value(json!({
            "dataset_id": "huge-split", "repetition": 0, "done": [{"start": 0, "stop": 5}], "partial": []
        }))
        .unwrap();
        let got = runtime().block_on(async {
            let opts = DistributeOptions {
                split_size: Some(split_size),
                dataset_id: Some("huge-split".into()),
                unknown_task_timeout: Duration::from_secs(10),
                ..options(Some(position))
            };
            let mut stream = distribute(&d.url, ds.clone(), opts);
            let mut got = Vec::new();
            while let Some(x) = next_int(&mut stream).await {
                got.push(x);
                assert!(got.len() <= 10, "more elements than the range has: {got:?}");
            }
            got
        });
        assert_eq!(got, (5..10).collect::<Vec<_>>(), "split_size {split_size}");
    }
}

/// Without read-ahead (`read_ahead: Some(0)`) a stream takes from the workers only what its
/// caller asks for: two streams sharing a `distributed_epoch` job, the first stopped after a
/// few elements, read every element exactly once between them (with read-ahead, the first
/// would have taken elements it never handed out, and the second would miss them).
#[test]
fn a_stream_without_read_ahead_takes_only_what_its_caller_reads() {
    let d = Dispatcher::start(&[]);
    let _worker = Worker::start(&d.url, WORKER);
    await_workers(&d, 1);
    let ds = DatasetDef::from_json(&json!({"source": {"range": {"stop": 300}}})).unwrap();
    let lazy = |read_ahead| DistributeOptions {
        job_name: Some("lazy".into()),
        split_size: Some(10),
        elements_per_request: 3,
        read_ahead,
        ..options(None)
    };
    let (first, rest) = runtime().block_on(async {
        let mut first = distribute(&d.url, ds.clone(), lazy(Some(0)));
        let mut got = Vec::new();
        // Two reads of three elements: a stream reading ahead has asked for many more by now.
        for _ in 0..6 {
            got.push(next_int(&mut first).await.expect("more elements"));
        }
        first.close().await;
        assert!(first.next().await.is_none(), "a closed stream ends");
        let mut second = distribute(&d.url, ds.clone(), lazy(None));
        let mut rest = Vec::new();
        while let Some(x) = next_int(&mut second).await {
            rest.push(x);
        }
        (got, rest)
    });
    let mut all: Vec<i64> = first.iter().chain(&rest).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..300).collect::<Vec<_>>(), "first: {first:?}, then {} more", rest.len());
}
