//! Coordinated reads (`num_consumers`, `consumer_index`) end to end with real TensorFlow, as
//! TensorFlow's own `coordinated_read_test.py` and `worker_tags_test.py` read: several
//! consumers simulated in one client program (`tests/tf/coordinated.py`), TensorFlow workers in
//! their own processes (and, for worker tags, in the client's process: its local workers),
//! eagerly and in a `tf.compat.v1` graph. Every scenario runs against TensorFlow's own
//! `DispatchServer` (which proves the scenario itself) and against `shardwise dispatcher`.
//!
//! Every process's output is printed only when a test fails; every wait is bounded.

use serde_json::Value;
use shardwise_tests::tf::{CLIENT_DEADLINE, Cluster, Config, Kind};

/// The integers of a result's `key`; panics with the result when it holds an error.
fn ints(result: &Value, key: &str) -> Vec<i64> {
    assert!(result.get("error").is_none(), "the client failed: {result}");
    let all = result[key].as_array().unwrap_or_else(|| panic!("no {key}: {result}"));
    shardwise_tests::ints(all)
}

/// TensorFlow's `checkCoordinatedReadGroups`: every round's `n` elements (one per consumer)
/// come from one worker, so each group of `n` is consecutive integers.
fn assert_groups(got: &[i64], n: usize, what: &str) {
    let wrong: Vec<&[i64]> =
        got.chunks(n).filter(|g| g.windows(2).any(|w| w[1] != w[0] + 1)).collect();
    assert!(wrong.is_empty(), "{what}: rounds not from one worker: {wrong:?} in {got:?}");
}

// ---- the scenarios ----

/// `bucket_by_sequence_length` under coordinated reads (TensorFlow's `testBucketizing`): 15
/// consumers (3 hosts of 5 replicas) of one job over 4 workers, whose dataset yields windows of
/// 15 batches of one bucket (boundaries 30 and 60, batches of 10). In every round all consumers
/// read from the same worker, so the 15 batches of a round share one bucket. Eagerly and in a
/// v1 graph (two jobs).
fn bucketizing(kind: Kind) {
    let mut cluster = Cluster::start(kind, Config::default());
    let (eager, graph) = cluster.add_workers(&[None; 4], |c| {
        let eager = c.spawn_script_client(
            "coordinated.py",
            "bucketizing",
            &["--job-name", "bucketizing_eager"],
        );
        let graph = c.spawn_script_client(
            "coordinated.py",
            "bucketizing",
            &["--job-name", "bucketizing_graph", "--graph"],
        );
        (eager, graph)
    });
    let bucket = |x: i64| (x >= 30) as usize + (x >= 60) as usize;
    for (i, what) in [(eager, "eager"), (graph, "graph")] {
        let result = cluster.finish(i);
        assert!(result.get("error").is_none(), "{what}: {result}");
        let batches: Vec<Vec<i64>> = result["batches"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: no batches: {result}"))
            .iter()
            .map(|b| shardwise_tests::ints(b.as_array().expect("a batch")))
            .collect();
        assert_eq!(batches.len(), 4 * 15, "{what}: 4 rounds of 15 batches: {result}");
        for (round, batches) in batches.chunks(15).enumerate() {
            let buckets: Vec<Vec<usize>> =
                batches.iter().map(|b| b.iter().map(|&x| bucket(x)).collect()).collect();
            let first = buckets[0][0];
            assert!(
                buckets.iter().all(|b| b.len() == 10 && b.iter().all(|&x| x == first)),
                "{what}: round {round}: batches of more than one bucket: {batches:?}"
            );
        }
    }
}

/// A consumer restart (TensorFlow's `testConsumerRestart`): 3 consumers read 20 elements of a
/// job on one worker; the same consumers built again (same job name, so the same iteration)
/// ask for round 0 again, which the worker has passed: `FailedPreconditionError` naming the
/// round it reached. Eagerly and in a v1 graph (two jobs).
fn consumer_restart(kind: Kind) {
    let mut cluster = Cluster::start(kind, Config::default());
    let args = |job: &'static str, graph: bool| {
        let mut a = vec!["--num-consumers", "3", "--take", "20", "--job-name", job];
        if graph {
            a.push("--graph");
        }
        a
    };
    let clients = cluster.add_workers(&[None], |c| {
        [
            c.spawn_script_client("coordinated.py", "restart", &args("restart_eager", false)),
            c.spawn_script_client("coordinated.py", "restart", &args("restart_graph", true)),
        ]
    });
    for (i, what) in clients.into_iter().zip(["eager", "graph"]) {
        let result = cluster.finish(i);
        let first = result["first"].as_array().unwrap_or_else(|| panic!("{what}: {result}"));
        let first = shardwise_tests::ints(first);
        assert_eq!(first.len(), 20, "{what}: the first read is whole: {result}");
        assert_groups(&first, 3, what);
        assert_eq!(result["code"], "FailedPreconditionError", "{what}: {result}");
        let error = result["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("current round has already reached"),
            "{what}: the restarted consumers are refused: {error}"
        );
    }
}

/// Worker tags with coordinated reads (TensorFlow's `WorkerTagsTest.testCoordinatedRead`): 3
/// remote workers tagged `COLOCATED`, plus one untagged, and two clients, each with its own
/// local worker tagged `COLOCATED` (in the client's process), reading 200 elements with 4
/// consumers: one with `target_workers="AUTO"` eagerly, one with `"ANY"` in a v1 graph
/// (initializable iterator). Coordinated reads read from every worker, local or not, so every
/// round's 4 elements come from one worker.
fn worker_tags(kind: Kind) {
    let mut cluster = Cluster::start(kind, Config::default());
    let clients = cluster.add_workers_with(&[None; 3], &["--tags", "COLOCATED"], |c| {
        c.add_workers(&[None], |c| {
            // Each client waits for the other's local worker too.
            c.expected_workers += 2;
            let common = ["--num-consumers", "4", "--take", "200", "--local-workers", "1"];
            let auto = [&common[..], &["--tags", "COLOCATED", "--job-name", "tags_auto"]].concat();
            let any = [
                &common[..],
                &["--tags", "COLOCATED", "--job-name", "tags_any", "--target-workers", "ANY"],
                &["--graph"],
            ]
            .concat();
            let clients = [
                c.spawn_script_client("coordinated.py", "groups", &auto),
                c.spawn_script_client("coordinated.py", "groups", &any),
            ];
            c.expected_workers -= 2;
            clients
        })
    });
    for (i, what) in clients.into_iter().zip(["AUTO, eager", "ANY, graph"]) {
        let got = ints(&cluster.finish(i), "elements");
        assert_eq!(got.len(), 200, "{what}: {got:?}");
        assert_groups(&got, 4, what);
    }
}

/// `target_workers="LOCAL"` with coordinated reads (TensorFlow's local-workers test): refused
/// by the client with `InvalidArgumentError`, coordinated reads need non-local workers; the
/// client has a local worker (else the refusal is that there is none).
fn local_target_refused(kind: Kind) {
    let mut cluster = Cluster::start(kind, Config::default());
    cluster.expected_workers = 1;
    let args = [
        "--num-consumers",
        "3",
        "--take",
        "10",
        "--local-workers",
        "1",
        "--target-workers",
        "LOCAL",
        "--job-name",
        "local",
    ];
    let i = cluster.spawn_script_client("coordinated.py", "groups", &args);
    let result = cluster.finish(i);
    assert_eq!(result["code"], "InvalidArgumentError", "{result}");
    let error = result["error"].as_str().unwrap_or_default();
    assert!(error.contains("Coordinated reads require non-local workers"), "{error}");
}

/// Workers join mid-read (TensorFlow's `testAddWorkers`, with worker tags): 7 consumers read
/// 25 elements over 3 workers, then one worker tagged `COLOCATED` and one untagged join; the
/// read goes on until the first element of each of the 5 workers arrived (each new worker's
/// task starts in a round all consumers agreed on), and 25 more: every round from one worker.
fn workers_join_mid_read(kind: Kind) {
    let mut cluster = Cluster::start(kind, Config::default());
    let args = ["--num-consumers", "7", "--take", "25", "--total-workers", "5"];
    let i = cluster
        .add_workers(&[None; 3], |c| c.spawn_script_client("coordinated.py", "add-workers", &args));
    let paused = cluster.clients[i].1.wait_for_line(|l| l == "PAUSED", CLIENT_DEADLINE);
    assert!(paused.is_some(), "the client never read 25 elements");
    cluster.add_workers_with(&[None], &["--tags", "COLOCATED"], |c| c.add_workers(&[None], |_| ()));
    cluster.clients[i].1.send_line("go").expect("the client's stdin");
    let got = ints(&cluster.finish(i), "elements");
    assert!(got.len() >= 50, "{got:?}");
    assert_eq!(got.iter().filter(|&&x| x == 0).count(), 5, "one start per worker: {got:?}");
    assert_groups(&got, 7, "7 consumers");
}

/// TensorFlow's `testBasic` in graph mode: 2 and 5 consumers (two jobs) over 3 workers, read
/// in a v1 graph (one-shot iterator); every round's elements from one worker. (Eagerly:
/// `coordinated_read_groups` in `tensorflow_e2e.rs`.)
fn read_groups_graph(kind: Kind) {
    let mut cluster = Cluster::start(kind, Config::default());
    let consumers = [2usize, 5];
    let clients: Vec<usize> = cluster.add_workers(&[None; 3], |c| {
        consumers
            .iter()
            .map(|n| {
                let n = n.to_string();
                let job = format!("graph_{n}");
                let args = ["--num-consumers", &n, "--job-name", &job, "--graph"];
                c.spawn_script_client("coordinated.py", "groups", &args)
            })
            .collect()
    });
    for (i, n) in clients.into_iter().zip(consumers) {
        let got = ints(&cluster.finish(i), "elements");
        assert_eq!(got.len(), 100, "{n} consumers: {got:?}");
        assert_groups(&got, n, &format!("{n} consumers"));
    }
}

// ---- against TensorFlow's own dispatcher ----

#[test]
fn tensorflow_dispatcher_bucketizing() {
    bucketizing(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_consumer_restart() {
    consumer_restart(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_worker_tags() {
    worker_tags(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_read_groups_graph() {
    read_groups_graph(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_local_target_refused() {
    local_target_refused(Kind::TensorFlow);
}

#[test]
fn tensorflow_dispatcher_workers_join_mid_read() {
    workers_join_mid_read(Kind::TensorFlow);
}

// ---- against `shardwise dispatcher` ----

#[test]
fn shardwise_dispatcher_bucketizing() {
    bucketizing(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_consumer_restart() {
    consumer_restart(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_worker_tags() {
    worker_tags(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_read_groups_graph() {
    read_groups_graph(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_local_target_refused() {
    local_target_refused(Kind::Shardwise);
}

#[test]
fn shardwise_dispatcher_workers_join_mid_read() {
    workers_join_mid_read(Kind::Shardwise);
}
