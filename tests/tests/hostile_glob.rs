//! `list_files` patterns (`MatchingFiles` of a `Const` in a registered graph) that would make
//! the dispatcher's glob expensive, over the real binary: each registration is answered well
//! within the 30 s bound of a call, and once it is answered (or abandoned) the dispatcher does
//! no more work for it. The files are 99,000 names of 200 bytes under `--data-root`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use shardwise_gateway::tf::proto::tensorflow::data as tf;
use shardwise_gateway::tf::proto::tensorflow::{DataType, TensorProto, TensorShapeProto};
use shardwise_tests::graphs::{const_node, encode, node, string_scalar};
use shardwise_tests::{Dispatcher, TempDir, ok, runtime};
use tf::dispatcher_service_client::DispatcherServiceClient;

/// Files in the data root: fewer than `--max-glob-entries`' default (100,000) with the
/// directories, so a glob of all of them fits in its budget.
const FILES: usize = 99_000;

fn register(graph: Vec<u8>) -> tf::GetOrRegisterDatasetRequest {
    tf::GetOrRegisterDatasetRequest {
        dataset: Some(tf::DatasetDef { graph: graph.into() }),
        metadata: Some(tf::DataServiceMetadata {
            compression: 1,
            cardinality: -2,
            ..Default::default()
        }),
        optional_dataset_id: None,
    }
}

/// `Dataset.list_files` of each of `patterns`, zipped: the graph a client registers.
fn list_files(patterns: &[String]) -> Vec<u8> {
    let mut nodes = Vec::new();
    let mut slices = Vec::new();
    for (i, pattern) in patterns.iter().enumerate() {
        nodes.push(string_scalar(&format!("pattern{i}"), pattern));
        nodes.push(node(&format!("files{i}"), "MatchingFiles", &[&format!("pattern{i}")]));
        nodes.push(node(&format!("slices{i}"), "TensorSliceDataset", &[&format!("files{i}")]));
        slices.push(format!("slices{i}"));
    }
    let slices: Vec<&str> = slices.iter().map(String::as_str).collect();
    nodes.push(node("zip", "ZipDataset", &slices));
    nodes.push(node("dataset", "_Retval", &["zip"]));
    encode(nodes)
}

/// A data root of [`FILES`] files named `a...a000000` (194 `a`s and 6 digits): in memory
/// (`/dev/shm`) where there is one, since a loaded disk takes half a minute to make them.
fn data_root() -> TempDir {
    let started = Instant::now();
    let shm = std::path::Path::new("/dev/shm");
    static N: AtomicU64 = AtomicU64::new(0);
    let in_memory = shm.join(format!(
        "shardwise-glob-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let dir = match std::fs::create_dir(&in_memory) {
        Ok(()) => TempDir(in_memory),
        Err(_) => TempDir::new("glob"),
    };
    let data = dir.0.join("data");
    std::fs::create_dir(&data).unwrap();
    let prefix = "a".repeat(194);
    for i in 0..FILES {
        std::fs::File::create(data.join(format!("{prefix}{i:06}"))).unwrap();
    }
    eprintln!("{FILES} files made in {:?}", started.elapsed());
    dir
}

/// The CPU time (user and system) process `pid` has used, in seconds (`/proc/PID/stat`).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // The fields after the command name (in parentheses, which may hold spaces): utime and
    // stime are the 12th and 13th of them, in clock ticks.
    let rest = &stat[stat.rfind(')').expect("a command name") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // Linux's /proc counts in USER_HZ, 100 a second on every platform Rust supports.
    ticks as f64 / 100.0
}

/// How much CPU time `pid` uses over the next `window`, sampled every 100 ms.
fn cpu_growth(pid: u32, window: Duration) -> f64 {
    let (start, from) = (Instant::now(), cpu_seconds(pid));
    while start.elapsed() < window {
        std::thread::sleep(Duration::from_millis(100));
    }
    cpu_seconds(pid) - from
}

/// One `GetOrRegisterDataset` of `graph` with the caller's deadline `timeout` (sent as
/// `grpc-timeout`), or dropped by its client after `give_up` when given: how long it took,
/// and its answer (`None`: given up).
fn call(
    url: &str,
    graph: Vec<u8>,
    timeout: Option<Duration>,
    give_up: Option<Duration>,
) -> (Duration, Option<Result<String, tonic::Status>>) {
    let rt = runtime();
    let url = url.to_owned();
    rt.block_on(async move {
        let channel = tonic::transport::Endpoint::from_shared(url).unwrap();
        let mut c = DispatcherServiceClient::new(channel.connect().await.unwrap())
            .max_encoding_message_size(usize::MAX);
        let mut req = tonic::Request::new(register(graph));
        if let Some(t) = timeout {
            req.set_timeout(t);
        }
        let started = Instant::now();
        let call = c.get_or_register_dataset(req);
        let answer = match give_up {
            None => Some(
                tokio::time::timeout(Duration::from_secs(60), call)
                    .await
                    .expect("an answer within 60 s"),
            ),
            Some(after) => tokio::time::timeout(after, call).await.ok(),
        };
        (started.elapsed(), answer.map(|a| a.map(|r| r.into_inner().dataset_id)))
    })
}

/// The reason DYNAMIC sharding of dataset `id` is refused (its split providers).
fn unsupported(d: &Dispatcher, id: &str) -> String {
    let info = ok(&d.call("GET", &format!("/v1/datasets/{id}"), None));
    let providers = &info["dataset"]["tensorflow"]["split_providers"];
    providers["unsupported"].as_str().map_or_else(|| providers.to_string(), str::to_owned)
}

/// The trial's pattern (100,000 `*`, 100 KB) and one a backtracking matcher takes quadratic
/// time on (`*a...ab*`: 100 `a`s against names of 194 `a`s), over 99,000 files: each is
/// answered in seconds, its reason named, and the dispatcher's CPU time stops growing with
/// the answer. Before: the first ran past the 30 s bound of a call (`UNAVAILABLE`, which
/// TensorFlow's clients retry) and kept a core busy after it.
#[test]
fn a_hostile_glob_is_answered_fast_and_leaves_no_work_behind() {
    let dir = data_root();
    let data = format!("{}/data", dir.path());
    let cases = [
        ("100,000 `*`", format!("{data}/{}", "*".repeat(100_000)), "longer than the 4096 bytes"),
        ("`*a...ab*`", format!("{data}/*{}b*", "a".repeat(100)), "[{\"slices\":{\"len\":0}}]"),
        // Matches every file: the budget holds a glob of all of them.
        ("`*a*[0-9]`", format!("{data}/*a*[0-9]"), "[{\"slices\":{\"len\":99000}}]"),
    ];
    // Each on a dispatcher of its own, so that one's leftover work does not count for the
    // next; all measured, then checked.
    let mut results = Vec::new();
    for (name, pattern, why) in cases {
        let d = Dispatcher::start(&["--data-root", dir.path()]);
        let (took, answer) = call(&d.url, list_files(&[pattern]), None, None);
        let after = cpu_growth(d.child.id(), Duration::from_secs(2));
        let answer = answer.unwrap().map(|id| unsupported(&d, &id));
        eprintln!("{name}: answered in {took:?}, CPU after: {after:.2} s over 2 s: {answer:?}");
        results.push((name, took, after, answer, why));
    }
    for (name, took, after, answer, why) in results {
        let reason = answer.unwrap_or_else(|s| panic!("{name}: refused: {s:?} after {took:?}"));
        assert!(took < Duration::from_secs(15), "{name}: answered after {took:?}");
        assert!(after < 0.5, "{name}: the dispatcher used {after:.2} s of CPU in the 2 s after");
        assert!(reason.contains(why), "{name}: {reason}");
        assert!(reason.len() < 1024, "{name}: {} bytes", reason.len());
    }
}

/// A glob that would run for many seconds (64 patterns over 99,000 files, with
/// `--max-glob-entries` raised to allow it) stops when its call is abandoned: at the caller's
/// deadline (`DEADLINE_EXCEEDED`, sent as `grpc-timeout`), or when the caller goes away (its
/// call dropped). The dispatcher's CPU time grows while it globs and stops growing within a
/// moment of either. Before: the deadline was not kept, and the glob ran on after its caller
/// left.
#[test]
fn an_abandoned_glob_stops() {
    let dir = data_root();
    let data = format!("{}/data", dir.path());
    let env = [("SHARDWISE_MAX_GLOB_ENTRIES", "100000000")];
    let d = Dispatcher::try_start_env(&["--data-root", dir.path()], &env).unwrap();
    let pid = d.child.id();
    let patterns: Vec<String> = (0..64).map(|i| format!("{data}/*{i}")).collect();

    // The caller's deadline.
    let cpu = cpu_seconds(pid);
    let (took, answer) = call(&d.url, list_files(&patterns), Some(Duration::from_secs(1)), None);
    let during = cpu_seconds(pid) - cpu;
    let after = cpu_growth(pid, Duration::from_secs(2));
    eprintln!(
        "deadline: answered in {took:?} ({during:.2} s CPU): {answer:?}; after: {after:.2} s"
    );
    // Answered by the dispatcher, or by the client keeping its own deadline, whichever is
    // first (tonic does both).
    let status = answer.unwrap().expect_err("past its deadline");
    assert!(
        matches!(status.code(), tonic::Code::DeadlineExceeded | tonic::Code::Cancelled),
        "{status:?}"
    );
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    assert!(during > 0.1, "the glob ran: {during:.2} s of CPU");
    assert!(after < 0.5, "the dispatcher used {after:.2} s of CPU in the 2 s after the answer");

    // The caller goes away.
    let cpu = cpu_seconds(pid);
    let (took, answer) = call(&d.url, list_files(&patterns), None, Some(Duration::from_secs(1)));
    let during = cpu_seconds(pid) - cpu;
    let after = cpu_growth(pid, Duration::from_secs(2));
    eprintln!("gone: after {took:?} ({during:.2} s CPU): {answer:?}; after: {after:.2} s");
    assert!(answer.is_none(), "{answer:?}");
    assert!(during > 0.1, "the glob ran: {during:.2} s of CPU");
    assert!(
        after < 0.5,
        "the dispatcher used {after:.2} s of CPU in the 2 s after its caller left"
    );
}

/// Peak resident memory of a process, in MiB (`VmHWM`).
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
}

/// A pattern vector of shape [65,536] holding one 8 KB pattern (TensorFlow repeats the last
/// value to fill the shape): its patterns are counted, not copied 65,536 times. Before: 512 MB
/// of copies, and the refusal quoted them all.
#[test]
fn a_pattern_vector_repeating_one_value_is_not_copied() {
    let d = Dispatcher::start(&[]);
    let pid = d.child.id();
    let before = peak_rss_mib(pid);
    let patterns = const_node(
        "patterns",
        TensorProto {
            dtype: DataType::DtString as i32,
            tensor_shape: Some(TensorShapeProto {
                dim: vec![shardwise_gateway::tf::proto::tensorflow::tensor_shape_proto::Dim {
                    size: 65_536,
                    name: String::new(),
                }],
                unknown_rank: false,
            }),
            string_val: vec![format!("/data/{}", "x".repeat(8 << 10)).into_bytes()],
            ..Default::default()
        },
    );
    let graph = encode(vec![
        patterns,
        node("files", "MatchingFiles", &["patterns"]),
        node("slices", "TensorSliceDataset", &["files"]),
        node("dataset", "_Retval", &["slices"]),
    ]);
    let (took, answer) = call(&d.url, graph, None, None);
    let peak = peak_rss_mib(pid);
    eprintln!("answered in {took:?}; peak RSS {before} -> {peak} MiB");
    let id = answer.unwrap().expect("registered");
    assert!(peak < before + 100, "peak RSS {before} -> {peak} MiB");
    let reason = unsupported(&d, &id);
    let start: String = reason.chars().take(200).collect();
    assert!(
        reason.contains("--data-root") && reason.len() < 1024,
        "{} bytes: {start}",
        reason.len()
    );
}
