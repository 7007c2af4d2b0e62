//! TensorFlow's DYNAMIC split providers on `shardwise dispatcher`, and graph walks that stay
//! bounded whatever graph a client registers.
//!
//! With real TensorFlow: one #[test] per dispatcher (TensorFlow's own `DispatchServer`, which
//! proves the expectations, and `shardwise dispatcher`) and per fleet size (1 and 3
//! TensorFlow workers), each with its own cluster and ONE client process
//! (`tests/tf/providers.py`) that reads every dataset in turn, without the service and then
//! through it (`distributed_epoch`), so that nextest runs them side by side. The same
//! assertions hold on both dispatchers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use shardwise_tests::Process;
use shardwise_tests::tf::{TfServer, script};

use shardwise_gateway::tf::proto::tensorflow::data as tf;
use shardwise_tests::graphs::{encode, node, string_scalar};
use shardwise_tests::{Dispatcher, TempDir, http, ok, poll_until, runtime};
use tf::dispatcher_service_client::DispatcherServiceClient;

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

/// SIGTERM to the dispatcher; how long it took to exit, and its status.
fn sigterm(d: &mut Dispatcher, bound: Duration) -> (Duration, std::process::ExitStatus) {
    let pid = d.child.id().to_string();
    let started = Instant::now();
    let status = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let exited = poll_until("an exit on SIGTERM", bound, || {
        d.child.try_wait().unwrap().ok_or("still running")
    });
    (started.elapsed(), exited)
}

/// A 300 KB graph whose `ZipDataset` lists itself 100,000 times as input
/// (a walk that follows every input visits it K^2 times per visit) is answered within a
/// bound, `/healthz` answers meanwhile, SIGTERM ends the process within a bound, and a
/// restart on the same work dir succeeds.
#[test]
fn a_self_zipping_graph_is_answered_quickly_and_sigterm_still_stops_the_dispatcher() {
    const K: usize = 100_000;
    let mut zip = node("z", "ZipDataset", &[]);
    zip.input = vec!["z".to_owned(); K];
    let graph = encode(vec![zip, node("dataset", "_Retval", &["z"])]);
    assert!(graph.len() >= 300_000, "{} bytes", graph.len());

    let dir = TempDir::new("self-zip");
    let args = ["--work-dir", dir.path(), "--fault-tolerant"];
    let mut d = Dispatcher::start(&args);
    let url = d.url.clone();
    let rt = runtime();
    let call = rt.spawn(async move {
        let started = Instant::now();
        let channel = tonic::transport::Endpoint::from_shared(url).expect("a URL");
        let mut c = DispatcherServiceClient::new(channel.connect().await.expect("connected"))
            .max_encoding_message_size(usize::MAX);
        let reply = c.get_or_register_dataset(register(graph)).await;
        (started.elapsed(), reply.map(|r| r.into_inner().dataset_id))
    });
    // /healthz answers while the registration is read.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut checks = 0;
    while checks == 0 || (!call.is_finished() && Instant::now() < deadline) {
        let health = http("GET", &d.url, "/healthz", None).expect("/healthz answers");
        assert_eq!(health.status, 200, "{}", health.body);
        checks += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let (took, reply) = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(20), call).await })
        .expect("GetOrRegisterDataset answers within 20 s")
        .expect("the call's task");
    assert!(took < Duration::from_secs(10), "GetOrRegisterDataset took {took:?}: {reply:?}");
    let health = http("GET", &d.url, "/healthz", None).expect("/healthz answers");
    assert_eq!(health.status, 200, "{}", health.body);
    // Registered (the graph is stored as sent) or refused; a DYNAMIC iteration of it is
    // refused either way, naming why.
    if let Ok(id) = &reply {
        let dataset = d.call("GET", &format!("/v1/datasets/{id}"), None);
        assert_eq!(dataset.status, 200, "{}", dataset.body);
        let why = dataset.json()["dataset"]["tensorflow"]["split_providers"]["unsupported"].clone();
        assert!(
            why.as_str().is_some_and(|w| w.contains("ZipDataset") || w.contains("graph")),
            "{why}"
        );
    }

    let (took, status) = sigterm(&mut d, Duration::from_secs(30));
    assert!(took < Duration::from_secs(10), "SIGTERM took {took:?} to stop the dispatcher");
    assert_eq!(status.code(), Some(0), "{}", d.output());
    let again = Dispatcher::try_start(&args);
    assert!(again.is_ok(), "a restart on the same work dir: {:?}", again.err());
}

/// What one client printed: each dataset's result line, by name.
type Results = BTreeMap<String, Value>;

fn results(stdout: &str) -> Results {
    assert!(stdout.lines().any(|l| l == "done"), "the client did not finish:\n{stdout}");
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            (v["name"].as_str().expect("a name").to_owned(), v)
        })
        .collect()
}

/// A dataset's elements (`field`: `elements` through the service, `local` without it),
/// sorted (a multiset); panics when reading it failed.
fn multiset(results: &Results, name: &str, field: &str) -> Vec<String> {
    let r = &results[name];
    let Some(elements) = r[field].as_array() else { panic!("{name} ({field}): {r}") };
    if field == "elements" {
        assert!(r.get("error").is_none(), "{name}: {r}");
    }
    let mut all: Vec<String> = elements.iter().map(Value::to_string).collect();
    all.sort();
    all
}

/// Which dispatcher a cluster runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    TensorFlow,
    Shardwise,
}

/// A dispatcher with `workers` TensorFlow workers, and one `providers.py read` client: its
/// results. Every process's output is printed when it fails.
fn read_through(kind: Kind, workers: usize, data: &str) -> Results {
    let (_tf_dispatcher, _shardwise, address) = match kind {
        Kind::TensorFlow => {
            let d = TfServer::dispatcher();
            let address = d.address();
            (Some(d), None, address)
        }
        Kind::Shardwise => {
            let d = Dispatcher::start(&["--data-root", data, "--job-gc-check-interval", "200ms"]);
            let address = d.url.trim_start_matches("http://").to_owned();
            (None, Some(d), address)
        }
    };
    // One process for all of them: one TensorFlow import.
    let spawned = TfServer::spawn_workers(&address, &vec![None; workers], &[]);
    let _workers = TfServer::ready_n("worker", spawned, workers);
    let target = format!("grpc://{address}");
    let n = workers.to_string();
    let mut client = Process::spawn(&mut script("providers.py", &["read", &target, data, &n]));
    let run = client
        .finish(Duration::from_secs(600))
        .unwrap_or_else(|e| panic!("{kind:?} with {workers} workers: {e}"));
    assert_eq!(run.code, 0, "{kind:?} with {workers} workers:\n{}\n{}", run.stdout, run.stderr);
    results(&run.stdout)
}

/// The datasets whose elements TensorFlow gives exactly once with DYNAMIC sharding, however
/// many workers: every element of the dataset, once.
const EXACTLY_ONCE: &[&str] = &[
    "concatenate",
    "sample_from_datasets",
    "interleave",
    "parallel_interleave",
    "flat_map",
    "flat_map_repeat",
    "group_by_window",
    "bucket_by_sequence_length",
    "text_line_files",
    "list_files",
    "from_tensors",
    "from_list",
    "sparse_slices",
    "ragged_slices",
    "cache",
    "scan",
    "window",
    "ignore_errors",
    "rebatch",
];

/// The datasets TensorFlow's dispatcher cannot shard, the op Shardwise's refusal names, and
/// what TensorFlow's own refusal (`UNIMPLEMENTED`) says.
const REFUSED: &[(&str, &str, &str)] = &[
    ("sql", "SqlDataset", "SqlDataset"),
    ("snapshot", "SnapshotDatasetV2", "Splitting is not implemented for snapshot datasets"),
    ("distribute_of_distribute", "DataServiceDatasetV4", "DataServiceDatasetV4"),
];

/// Every split provider TensorFlow's dispatcher gives, read with `workers`
/// real TensorFlow workers and a real TensorFlow client through `kind`'s dispatcher.
fn every_dynamic_split_provider(kind: Kind, workers: usize) {
    let dir = TempDir::new("tf-providers");
    let started = Instant::now();
    let r = read_through(kind, workers, dir.path());
    let at = format!("{kind:?} with {workers} workers");
    eprintln!("{at}: {:?}", started.elapsed());
    for line in r.values() {
        eprintln!("  {line}");
    }
    for name in EXACTLY_ONCE {
        assert_eq!(multiset(&r, name, "elements"), multiset(&r, name, "local"), "{name} on {at}");
    }
    // choose_from_datasets shards its selector too: one worker reads it all; with more,
    // every element at most once, of the dataset's.
    let chosen = multiset(&r, "choose_from_datasets", "elements");
    let mut all = multiset(&r, "choose_from_datasets", "local");
    if workers == 1 {
        assert_eq!(chosen, all, "{at}");
    } else {
        for e in &chosen {
            let i = all.iter().position(|x| x == e);
            assert!(i.is_some(), "choose_from_datasets on {at}: {e} twice or not of it");
            all.remove(i.expect("found"));
        }
    }
    // enumerate: every element once; each worker counts its own from `start`.
    let pairs: Vec<Vec<i64>> = r["enumerate"]["elements"]
        .as_array()
        .unwrap_or_else(|| panic!("enumerate on {at}: {}", r["enumerate"]))
        .iter()
        .map(|p| p.as_array().expect("a pair").iter().map(|v| v.as_i64().expect("int")).collect())
        .collect();
    let mut values: Vec<i64> = pairs.iter().map(|p| p[1]).collect();
    values.sort_unstable();
    assert_eq!(values, (5..15).collect::<Vec<_>>(), "enumerate on {at}");
    assert!(pairs.iter().all(|p| (100..110).contains(&p[0])), "enumerate on {at}: {pairs:?}");
    if workers == 1 {
        assert_eq!(
            multiset(&r, "enumerate", "elements"),
            multiset(&r, "enumerate", "local"),
            "{at}"
        );
    }
    // random ignores its splits: every worker reads take(4) of its own.
    let random = r["random"]["elements"].as_array().map(Vec::len);
    assert_eq!(random, Some(4 * workers), "random on {at}: {}", r["random"]);
    // Files shuffled by a seeded shuffle, then interleaved: every worker reads every file
    // (each record once per worker).
    let records = multiset(&r, "tfrecord_files", "local");
    let each: Vec<String> = records.iter().flat_map(|e| vec![e.clone(); workers]).collect();
    assert_eq!(multiset(&r, "tfrecord_files", "elements"), each, "tfrecord_files on {at}");
    // A cache in a file: one worker reads each element once. Several workers on one file
    // system contend for the cache's lock file (TensorFlow's cache refuses a second writer,
    // whatever the dispatcher); a worker that starts once another has written the whole
    // cache reads all of it: each element 1 to `workers` times, or that refusal.
    let dataset = multiset(&r, "cache_file", "local");
    let cache = &r["cache_file"];
    if workers == 1 {
        assert_eq!(multiset(&r, "cache_file", "elements"), dataset, "cache_file on {at}");
    } else if let Some(why) = cache["error"].as_str() {
        assert!(why.contains("cache lockfile already exists"), "cache_file on {at}: {why}");
    } else {
        let cached = multiset(&r, "cache_file", "elements");
        for e in &dataset {
            let n = cached.iter().filter(|x| *x == e).count();
            assert!((1..=workers).contains(&n), "cache_file on {at}: {e} {n} times: {cached:?}");
        }
        assert!(cached.iter().all(|e| dataset.contains(e)), "cache_file on {at}: {cached:?}");
    }
    // What TensorFlow cannot shard is refused by both dispatchers, naming the op.
    for (name, op, tensorflow_says) in REFUSED {
        let refused = &r[*name];
        let why = refused["error"].as_str().unwrap_or_default();
        match kind {
            Kind::Shardwise => {
                assert_eq!(refused["code"], "FailedPreconditionError", "{name} on {at}: {refused}");
                assert!(why.contains(op), "{name} on {at}: names the op: {why}");
            }
            Kind::TensorFlow => {
                assert_eq!(refused["code"], "UnimplementedError", "{name} on {at}: {refused}");
                assert!(why.contains(tensorflow_says), "{name} on {at}: {why}");
            }
        }
    }
}

#[test]
fn every_dynamic_split_provider_on_tensorflows_dispatcher_with_1_worker() {
    every_dynamic_split_provider(Kind::TensorFlow, 1);
}

#[test]
fn every_dynamic_split_provider_on_tensorflows_dispatcher_with_3_workers() {
    every_dynamic_split_provider(Kind::TensorFlow, 3);
}

#[test]
fn every_dynamic_split_provider_on_shardwise_with_1_worker() {
    every_dynamic_split_provider(Kind::Shardwise, 1);
}

#[test]
fn every_dynamic_split_provider_on_shardwise_with_3_workers() {
    every_dynamic_split_provider(Kind::Shardwise, 3);
}

/// `list_files` patterns in a graph (`MatchingFiles` of a `Const`, as a graph built outside
/// eager mode may have it): globbed only under `--data-root`; outside it, or without one,
/// DYNAMIC is refused with the reason.
#[test]
fn matching_files_is_globbed_only_under_the_data_root() {
    let dir = TempDir::new("data-root");
    for f in ["a.txt", "b.txt", "c.csv"] {
        std::fs::write(format!("{}/{f}", dir.path()), "x\n").unwrap();
    }
    let graph = |pattern: &str| {
        encode(vec![
            string_scalar("pattern", pattern),
            node("files", "MatchingFiles", &["pattern"]),
            node("names", "Identity", &["files"]),
            node("slices", "TensorSliceDataset", &["names"]),
            node("dataset", "_Retval", &["slices"]),
        ])
    };
    let inside = format!("{}/*.txt", dir.path());
    let rt = runtime();
    let providers = |d: &Dispatcher, pattern: &str| {
        let url = d.url.clone();
        let g = graph(pattern);
        let id = rt.block_on(async move {
            let channel = tonic::transport::Endpoint::from_shared(url).unwrap();
            let mut c = DispatcherServiceClient::new(channel.connect().await.unwrap());
            c.get_or_register_dataset(register(g)).await.unwrap().into_inner().dataset_id
        });
        ok(&d.call("GET", &format!("/v1/datasets/{id}"), None))["dataset"]["tensorflow"]
            ["split_providers"]
            .clone()
    };
    let d = Dispatcher::start(&["--data-root", dir.path()]);
    assert_eq!(providers(&d, &inside), serde_json::json!([{"slices": {"len": 2}}]));
    for outside in ["/etc/*", &format!("{}/../*", dir.path())] {
        let why = providers(&d, outside)["unsupported"].as_str().unwrap_or_default().to_owned();
        assert!(
            why.contains("MatchingFiles") && why.contains("outside every --data-root"),
            "{why}"
        );
    }
    let without = Dispatcher::start(&[]);
    let why = providers(&without, &inside)["unsupported"].as_str().unwrap_or_default().to_owned();
    assert!(why.contains("--data-root"), "{why}");
    // A root that is not a directory is a usage error.
    let err = Dispatcher::try_start(&["--data-root", &format!("{}/a.txt", dir.path())])
        .expect_err("refused");
    assert!(err.contains("exited with Some(2)") && err.contains("--data-root"), "{err}");
}
