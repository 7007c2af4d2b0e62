//! End to end with real TensorFlow (`tensorflow-cpu`, in the venv `shardwise_tests::tf`
//! builds): a dispatcher, TensorFlow `WorkerServer`s in their own processes (port 0, or ports
//! picked up front for static sharding), and TensorFlow `distribute` clients in their own
//! processes (`tests/tf/e2e.py`, one JSON line each). Every scenario is one function of the
//! dispatcher it runs against: TensorFlow's own `DispatchServer` (which proves the scenario
//! itself right) or `shardwise dispatcher`.
//!
//! Every process's output is captured and printed only when a test fails; every wait is
//! bounded.

use std::time::Duration;

use serde_json::{Value, json};
use shardwise_core::dispatch::JobId;
use shardwise_tests::tf::{CLIENT_DEADLINE, Cluster, Config, Kind};
use shardwise_tests::{Dispatcher, TempDir, Worker, http, ok};

/// The integers of a client's `elements`; panics with the result when it holds an error.
fn elements(result: &Value) -> Vec<i64> {
    assert!(result.get("error").is_none(), "the client failed: {result}");
    let all = result["elements"].as_array().unwrap_or_else(|| panic!("no elements: {result}"));
    shardwise_tests::ints(all)
}

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort_unstable();
    v
}

/// A counter of the dispatcher's `/metrics` (0 when it is not there yet).
fn metric(d: &Dispatcher, name: &str) -> u64 {
    let text = d.call("GET", "/metrics", None).body;
    let line = text.lines().find(|l| l.split_whitespace().next() == Some(name));
    line.and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Two ports nobody listens on now: bound to port 0 and closed again. A static worker list
/// must name the workers before they start, and this is the only way to know their ports up
/// front; a port taken by someone else in between fails the worker's start loudly.
fn free_ports() -> [u16; 2] {
    let a = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let b = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    [a.local_addr().expect("addr").port(), b.local_addr().expect("addr").port()]
}

// ---- the scenarios ----

/// The seed example verbatim (`range(10)`, `parallel_epochs`) with one worker: `[0, ..., 9]`.
fn seed_example(kind: Kind) {
    let mut cluster = Cluster::start(kind, Config::default());
    let result = cluster.add_workers(&[None], |c| c.spawn_client(&["--dataset", "range_10"]));
    let result = cluster.finish(result);
    assert_eq!(elements(&result), (0..10).collect::<Vec<_>>());
}

/// `distributed_epoch` over `range(10)` with two workers: every element exactly once.
fn distributed_epoch_two_workers(kind: Kind) {
    let mut cluster = Cluster::start(kind, Config::default());
    let args = ["--dataset", "range_10", "--mode", "distributed_epoch"];
    let i = cluster.add_workers(&[None, None], |c| c.spawn_client(&args));
    let got = elements(&cluster.finish(i));
    assert_eq!(sorted(got), (0..10).collect::<Vec<_>>(), "every element exactly once");
}

/// FILE_OR_DATA static sharding over the two workers of the dispatcher's worker list: `range`
/// has no files, so each worker reads every second element, and the two together read each
/// element exactly once.
fn static_sharding_file_or_data(kind: Kind) {
    let ports = free_ports();
    let addresses = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let config = Config { worker_addresses: addresses, ..Config::default() };
    let mut cluster = Cluster::start(kind, config);
    let args = ["--dataset", "range_10", "--mode", "file_or_data"];
    let i = cluster.add_workers(&[Some(ports[0]), Some(ports[1])], |c| c.spawn_client(&args));
    let got = elements(&cluster.finish(i));
    assert_eq!(sorted(got), (0..10).collect::<Vec<_>>(), "every element exactly once");
    if kind == Kind::Shardwise {
        // Static sharding indeed (not a DYNAMIC epoch that would read the same): one task per
        // listed worker.
        let job = ok(&cluster.shardwise().call("GET", "/v1/jobs/5000", None));
        assert_eq!(job["processing_mode"]["sharding_policy"], "FILE_OR_DATA", "{job}");
        assert_eq!(job["iterations"][0]["tasks"].as_array().map(Vec::len), Some(2), "{job}");
    }
}

/// Coordinated reads: two consumers (`num_consumers=2`, consumer_index 0 and 1, one job name)
/// of `range(100).repeat()` on two workers. In each round both consumers read from the same
/// worker, consumer `i` the `i`-th of its next two elements: round by round, consumer 0 reads
/// an even element and consumer 1 the one after it.
fn coordinated_reads(kind: Kind) {
    let mut cluster = Cluster::start(kind, Config::default());
    let consumer = |index: &'static str| {
        let mut args = vec!["--dataset", "repeat_100", "--job-name", "coordinated"];
        args.extend(["--num-consumers", "2", "--consumer-index", index, "--take", "20"]);
        args
    };
    let (a, b) = cluster.add_workers(&[None, None], |c| {
        (c.spawn_client(&consumer("0")), c.spawn_client(&consumer("1")))
    });
    let (a, b) = (elements(&cluster.finish(a)), elements(&cluster.finish(b)));
    assert_eq!((a.len(), b.len()), (20, 20), "{a:?} {b:?}");
    for (round, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(x % 2 == 0 && *y == x + 1, "round {round}: {x} and {y}; {a:?} {b:?}");
    }
}

/// Each value of `values` `times` times, sorted.
fn each_times(values: impl Iterator<Item = i64> + Clone, times: usize) -> Vec<i64> {
    sorted((0..times).flat_map(|_| values.clone()).collect())
}

/// Dataset identity (TensorFlow's `HashGraph`): two programs build the same dataset, one of
/// them after unrelated datasets and functions and twice (so its node and function names
/// differ), and read it under one `job_name`. Both get the same dataset id and share the job:
/// two iterations of `range(20).map(x * 2)` give each element exactly twice over the two
/// clients, and `.repeat(3)` each element exactly three times.
fn dataset_identity(kind: Kind) {
    let mut cluster = Cluster::start(kind, Config::default());
    let twice = ["--dataset", "map_20", "--job-name", "shared", "--iterations", "2"];
    let repeat = ["--dataset", "maprepeat_20_3", "--job-name", "shared_repeat"];
    let noisy = |args: &[&'static str]| [args, &["--noise"]].concat();
    let clients = cluster.add_workers(&[None], |c| {
        [
            c.spawn_client(&twice),
            c.spawn_client(&noisy(&twice)),
            c.spawn_client(&repeat),
            c.spawn_client(&noisy(&repeat)),
        ]
    });
    let got: Vec<Vec<i64>> = clients.iter().map(|&i| elements(&cluster.finish(i))).collect();
    let doubled = (0..20).map(|x| x * 2);
    assert_eq!(
        sorted([got[0].clone(), got[1].clone()].concat()),
        each_times(doubled.clone(), 2),
        "two iterations of one shared job: {got:?}"
    );
    assert_eq!(
        sorted([got[2].clone(), got[3].clone()].concat()),
        each_times(doubled, 3),
        "one shared job of repeat(3): {got:?}"
    );
    if kind == Kind::Shardwise {
        // Two jobs (not four), of two datasets.
        let d = cluster.shardwise();
        let first = JobId::FIRST;
        let a = ok(&d.call("GET", &format!("/v1/jobs/{first}"), None));
        let b = ok(&d.call("GET", &format!("/v1/jobs/{}", first + 1), None));
        assert_ne!(a["dataset_id"], b["dataset_id"], "{a} {b}");
        assert_eq!(d.call("GET", &format!("/v1/jobs/{}", first + 2), None).status, 404);
    }
}

/// Dataset identity under attack: before any victim registers, an attacker claims the id a
/// victim's `range(10)` would get (an explicit `dataset_id`, learned on a scratch dispatcher of
/// the same kind), and registers, without an id, the graph of the victim's `range(10).map(x *
/// 2)` with its own `range(100, 110)` appended behind a second `_Retval` (the one TensorFlow's
/// workers run). Each victim then reads its own data, as on TensorFlow's dispatcher.
fn dataset_identity_attacks(kind: Kind) {
    let scratch = Cluster::start(kind, Config::default());
    let mut cluster = Cluster::start(kind, Config::default());
    let attack = |how: &str, victim: &str| {
        let args = [how, &scratch.service(), &cluster.service(), victim];
        let run = shardwise_tests::tf::run_script("identity.py", &args, CLIENT_DEADLINE);
        let line = run.stdout.lines().last().unwrap_or_default().to_owned();
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{how}: {e}: {run:?}"))
    };
    let claimed = attack("claim", "range_10");
    let sink = attack("sink", "map_10");
    let (a, b) = cluster.add_workers(&[None], |c| {
        (c.spawn_client(&["--dataset", "range_10"]), c.spawn_client(&["--dataset", "map_10"]))
    });
    let (range, doubled) = (elements(&cluster.finish(a)), elements(&cluster.finish(b)));
    assert_eq!(
        (&range, &doubled),
        (&(0..10).collect(), &(0..10).map(|x| x * 2).collect()),
        "the victims of the claim {claimed} and of the sink {sink} read their own data"
    );
}

/// Coordinated reads as TensorFlow's own tests make them: `n` consumers of one job in one
/// program, read round by round by a deterministic parallel interleave; the workers' dataset
/// yields groups of `n` consecutive integers. In every round all consumers read from the same
/// worker, so every group of `n` elements read is consecutive (TensorFlow's
/// `checkCoordinatedReadGroups`). 2 and 5 consumers (two jobs) over 3 workers.
fn coordinated_read_groups(kind: Kind) {
    let mut cluster = Cluster::start(kind, Config::default());
    let consumers = [2usize, 5];
    let clients: Vec<usize> = cluster.add_workers(&[None, None, None], |c| {
        consumers
            .iter()
            .map(|n| {
                let n = n.to_string();
                let job = format!("coordinated_{n}");
                c.spawn_jobs_client("coordinated", &["--num-consumers", &n, "--job-name", &job])
            })
            .collect()
    });
    for (i, n) in clients.into_iter().zip(consumers) {
        let got = elements(&cluster.finish(i));
        assert_eq!(got.len(), 100, "{n} consumers: {got:?}");
        let wrong: Vec<&[i64]> =
            got.chunks(n).filter(|g| g.windows(2).any(|w| w[1] != w[0] + 1)).collect();
        assert!(
            wrong.is_empty(),
            "{n} consumers: rounds not from one worker: {wrong:?} in {got:?}"
        );
    }
}

/// Fault tolerance: a dispatcher with a work dir in fault-tolerant mode is killed (SIGKILL)
/// while a client is in the middle of an epoch of parallel epochs, and started again on the
/// same port and work dir; the worker and the client carry on and read the whole range, in
/// order.
fn restart_mid_parallel_epochs(kind: Kind) {
    let work_dir = TempDir::new("tf-e2e-ft");
    let config = Config {
        work_dir: Some(work_dir.path().to_owned()),
        fault_tolerant: true,
        ..Config::default()
    };
    let mut cluster = Cluster::start(kind, config);
    let args = ["--dataset", "range_500", "--pause-after", "10"];
    let i = cluster.add_workers(&[None], |c| c.spawn_client(&args));
    let paused = cluster.clients[i].1.wait_for_line(|l| l == "PAUSED", CLIENT_DEADLINE);
    assert!(paused.is_some(), "the client never read 10 elements");
    if kind == Kind::Shardwise {
        let job = ok(&cluster.shardwise().call("GET", "/v1/jobs/5000", None));
        assert_eq!(job["iterations"][0]["finished"], false, "{job}");
    }
    cluster.kill_dispatcher();
    cluster.restart_dispatcher();
    cluster.clients[i].1.send_line("go").expect("the client's stdin");
    let got = elements(&cluster.finish(i));
    assert_eq!(got, (0..500).collect::<Vec<_>>(), "the whole range, in order");
}

/// Exact restarts in DYNAMIC mode: a fault-tolerant dispatcher is killed (SIGKILL) and
/// started again on the same port and work dir while `distributed_epoch` reads are paused
/// half way (the worker idle, no split asked for), and every element arrives exactly once
/// (TensorFlow's dispatcher may lose one in-flight split: [`check_after_kill`]): `range(100)` whole, and `range(100).repeat()` taking 150 (one
/// worker: the first repetition, then the first half of the second, in order).
fn restart_mid_distributed_epoch(kind: Kind) {
    let work_dir = TempDir::new("tf-e2e-ft");
    let config = Config {
        work_dir: Some(work_dir.path().to_owned()),
        fault_tolerant: true,
        ..Config::default()
    };
    let mut cluster = Cluster::start(kind, config);
    let mode = ["--mode", "distributed_epoch", "--pause-after", "50"];
    let range = [&["--dataset", "range_100"][..], &mode].concat();
    let repeat = [&["--dataset", "repeat_100", "--take", "150"][..], &mode].concat();
    let (a, b) =
        cluster.add_workers(&[None], |c| (c.spawn_client(&range), c.spawn_client(&repeat)));
    for i in [a, b] {
        let paused = cluster.clients[i].1.wait_for_line(|l| l == "PAUSED", CLIENT_DEADLINE);
        assert!(paused.is_some(), "client {i} never read 50 elements");
    }
    if kind == Kind::Shardwise {
        // The workers idle: they stop asking for splits once the clients' buffers are full
        // (no split handed out for a second).
        let d = cluster.shardwise();
        let mut last = (metric(d, "shardwise_splits_handed_out_total"), std::time::Instant::now());
        shardwise_tests::poll_until("the workers idle", Duration::from_secs(60), || {
            let now = metric(d, "shardwise_splits_handed_out_total");
            if now != last.0 {
                last = (now, std::time::Instant::now());
            }
            if last.1.elapsed() >= Duration::from_secs(1) { Ok(()) } else { Err(now) }
        });
        // Mid-epoch indeed: neither iteration is finished.
        for job in [JobId::FIRST, JobId::FIRST + 1] {
            let job = ok(&d.call("GET", &format!("/v1/jobs/{job}"), None));
            assert_eq!(job["iterations"][0]["finished"], false, "{job}");
        }
    }
    cluster.kill_dispatcher();
    cluster.restart_dispatcher();
    for i in [a, b] {
        cluster.clients[i].1.send_line("go").expect("the client's stdin");
    }
    let got = elements(&cluster.finish(a));
    let want: Vec<i64> = (0..100).collect();
    check_after_kill(kind, &sorted(got.clone()), &want, "exactly once");
    let got = elements(&cluster.finish(b));
    let want: Vec<i64> = (0..100).chain(0..50).collect();
    check_after_kill(kind, &got, &want, "the first repetition, then half the second, each once");
}

/// What a read that spanned a dispatcher SIGKILL delivered, against what it should have.
///
/// Shardwise: exactly `want` (a split is handed out again until the worker acknowledges it).
/// TensorFlow's dispatcher journals a split before it answers the worker's `GetSplit` and
/// never hears whether the answer arrived, so a kill between the two loses that split's one
/// element (seen in a reference run: `range(100)` came back without 56). Its run is held to
/// the rest: `want` in order with at most one element missing, nothing twice.
fn check_after_kill(kind: Kind, got: &[i64], want: &[i64], what: &str) {
    match kind {
        Kind::Shardwise => assert_eq!(got, want, "{what}: {got:?}"),
        Kind::TensorFlow => {
            let lost_one = (0..want.len()).any(|i| {
                let mut w = want.to_vec();
                w.remove(i);
                got == w.as_slice()
            });
            assert!(got == want || lost_one, "{what} (at most one lost split): {got:?}");
        }
    }
}

/// DYNAMIC sharding of a dataset whose source has no split provider: the client's iteration is
/// refused with an error naming the op (`expected` gives the TensorFlow error class for each
/// dataset), and the same dispatcher then serves the seed example.
fn dynamic_unsupported_source(kind: Kind, expected: &[(&str, &str, &str)]) {
    let mut cluster = Cluster::start(kind, Config::default());
    let refused: Vec<usize> = cluster.add_workers(&[None], |c| {
        expected
            .iter()
            .map(|(dataset, ..)| {
                c.spawn_client(&["--dataset", dataset, "--mode", "distributed_epoch"])
            })
            .collect()
    });
    for (i, (dataset, code, op)) in refused.into_iter().zip(expected) {
        let result = cluster.finish(i);
        let error = result["error"].as_str().unwrap_or_else(|| panic!("{dataset}: {result}"));
        assert_eq!(result["code"], *code, "{dataset}: {result}");
        assert!(error.contains(op), "{dataset}: the error names {op}: {error}");
    }
    let seed = cluster.read(&["--dataset", "range_10"]);
    assert_eq!(elements(&seed), (0..10).collect::<Vec<_>>());
}

/// A mixed fleet on one Shardwise dispatcher: a TensorFlow worker and a `shardwise worker`. A
/// TensorFlow client reads `range(10)` in parallel epochs exactly once (only the TensorFlow
/// worker serves a TensorFlow dataset); a declarative dataset read over REST is served by the
/// Shardwise worker only; `GET /v1/workers` shows both.
fn mixed_fleet() {
    let mut cluster = Cluster::start(Kind::Shardwise, Config::default());
    let shardwise_worker =
        Worker::start(&cluster.shardwise().url, &["--heartbeat-interval", "200ms"]);
    let shardwise_address = shardwise_worker.address().to_owned();
    cluster.shardwise_workers.push(shardwise_worker);
    // GetWorkers lists the Shardwise worker too: the client waits for both.
    cluster.expected_workers += 1;
    let i = cluster.add_workers(&[None], |c| c.spawn_client(&["--dataset", "range_10"]));
    let result = cluster.finish(i);
    assert_eq!(elements(&result), (0..10).collect::<Vec<_>>(), "once, from the TensorFlow worker");
    let tf_address = cluster.worker_addresses()[0].clone();

    let d = cluster.shardwise();
    let workers = ok(&d.call("GET", "/v1/workers", None));
    let mut listed: Vec<&str> = workers["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["worker_address"].as_str().expect("address"))
        .collect();
    listed.sort_unstable();
    let mut both = vec![tf_address.as_str(), shardwise_address.as_str()];
    both.sort_unstable();
    assert_eq!(listed, both, "{workers}");
    assert_eq!(metric(d, "shardwise_workers_alive"), 2, "/metrics counts both kinds");
    // The TensorFlow client's job (the first job id) is visible over REST: one finished
    // iteration with one task, the TensorFlow worker's (the Shardwise worker got none).
    let tf_job = ok(&d.call("GET", &format!("/v1/jobs/{}", JobId::FIRST), None));
    assert_eq!(tf_job["processing_mode"], json!({"sharding_policy": "OFF"}), "{tf_job}");
    assert_eq!(tf_job["iterations"][0]["tasks"].as_array().map(Vec::len), Some(1), "{tf_job}");
    assert_eq!(tf_job["iterations"][0]["finished"], true, "{tf_job}");

    // A declarative dataset over REST: its tasks are the Shardwise worker's only.
    let ds = json!({"source": {"range": {"stop": 5}}});
    let id =
        ok(&d.call("POST", "/v1/datasets", Some(json!({"dataset": ds}))))["dataset_id"].clone();
    let job = ok(&d.call(
        "POST",
        "/v1/jobs",
        Some(json!({"dataset_id": id, "processing_mode": "parallel_epochs"})),
    ));
    let iteration = format!("/v1/jobs/{}/iterations", job["job_id"].as_str().expect("job id"));
    let lease = ok(&d.call("POST", &iteration, Some(json!({}))));
    let heartbeat =
        format!("/v1/clients/{}/heartbeat", lease["client_id"].as_str().expect("client"));
    let tasks = shardwise_tests::poll_until(
        "the declarative dataset's task",
        Duration::from_secs(20),
        || {
            let hb = ok(&d.call("POST", &heartbeat, Some(json!({}))));
            let tasks = hb["tasks"].as_array().cloned().unwrap_or_default();
            if tasks.is_empty() { Err(hb) } else { Ok(tasks) }
        },
    );
    assert_eq!(tasks.len(), 1, "one task, on the Shardwise worker: {tasks:?}");
    assert_eq!(tasks[0]["worker_address"], shardwise_address.as_str(), "{tasks:?}");
    let task = tasks[0]["task_id"].as_str().expect("task id").to_owned();
    let worker_url = format!("http://{shardwise_address}");
    let mut read = Vec::new();
    shardwise_tests::poll_until("the task's elements", Duration::from_secs(20), || {
        let r = http("GET", &worker_url, &format!("/v1/tasks/{task}/elements?max=10"), None)
            .map_err(|e| e.to_string())?;
        if r.status == 404 {
            return Err("404".to_owned());
        }
        let v = ok(&r);
        read.extend(shardwise_tests::ints(v["elements"].as_array().expect("elements")));
        if v["end_of_sequence"] == true { Ok(()) } else { Err(v.to_string()) }
    });
    assert_eq!(read, (0..5).collect::<Vec<_>>());
}

/// The DispatcherService benchmark of `examples/tf_bench`, with the
/// TensorFlow venv this harness builds: prints its markdown table. Long (about 2 minutes), so
/// it is ignored by default; `SHARDWISE_BENCH_BIN` names the `shardwise` binary to measure (a
/// release build; this test build's own debug binary by default, whose CPU figures mean
/// little).
#[test]
#[ignore = "benchmark: run with --ignored (about 2 minutes; SHARDWISE_BENCH_BIN=target/release/shardwise for meaningful figures)"]
fn dispatcher_benchmark_against_tensorflow() {
    let bin = std::env::var("SHARDWISE_BENCH_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| shardwise_tests::shardwise_bin());
    let bin = bin.to_str().expect("utf-8 path").to_owned();
    let bench = shardwise_tests::repo_root().join("examples/tf_bench/bench.py");
    let mut cmd = shardwise_tests::tf::python(&bench, &["--shardwise", &bin, "--fault-tolerant"]);
    let run = shardwise_tests::run_bounded(&mut cmd, Duration::from_secs(900));
    shardwise_tests::assert_ran("examples/tf_bench/bench.py", &run);
    println!("{}", run.stdout);
    for rpc in ["WorkerHeartbeat", "ClientHeartbeat", "GetSplit"] {
        for threads in [1, 8] {
            let row = format!("| {rpc} | {threads} |");
            assert!(run.stdout.contains(&row), "no row {row}:\n{}", run.stdout);
        }
    }
}

// ---- against TensorFlow's own dispatcher ----

#[test]
fn tensorflow_dispatcher_seed_example() {
    seed_example(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_distributed_epoch_two_workers() {
    distributed_epoch_two_workers(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_static_sharding_file_or_data() {
    static_sharding_file_or_data(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_coordinated_reads() {
    coordinated_reads(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_dataset_identity() {
    dataset_identity(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_dataset_identity_attacks() {
    dataset_identity_attacks(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_coordinated_read_groups() {
    coordinated_read_groups(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_restart_mid_parallel_epochs() {
    restart_mid_parallel_epochs(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_restart_mid_distributed_epoch() {
    restart_mid_distributed_epoch(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_dynamic_unsupported_source() {
    // TensorFlow's dispatcher splits interleave's input; an SQL source it cannot split.
    dynamic_unsupported_source(Kind::TensorFlow, &[("sql", "UnimplementedError", "SqlDataset")]);
}

// ---- against `shardwise dispatcher` ----

#[test]
fn shardwise_dispatcher_seed_example() {
    seed_example(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_distributed_epoch_two_workers() {
    distributed_epoch_two_workers(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_static_sharding_file_or_data() {
    static_sharding_file_or_data(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_coordinated_reads() {
    coordinated_reads(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_dataset_identity() {
    dataset_identity(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_dataset_identity_attacks() {
    dataset_identity_attacks(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_coordinated_read_groups() {
    coordinated_read_groups(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_restart_mid_parallel_epochs() {
    restart_mid_parallel_epochs(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_restart_mid_distributed_epoch() {
    restart_mid_distributed_epoch(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_dynamic_unsupported_source() {
    dynamic_unsupported_source(
        Kind::Shardwise,
        // (interleave has TensorFlow's split providers now: tests/tests/tensorflow_providers.rs)
        &[("sql", "FailedPreconditionError", "SqlDataset")],
    );
}

#[test]
fn shardwise_dispatcher_mixed_fleet() {
    mixed_fleet();
}
