//! The soak test: a long-lived dispatcher stays flat.
//!
//! A real `shardwise dispatcher --work-dir DIR --fault-tolerant` with short client and
//! garbage-collection timeouts and a tiny `--compact-at-bytes` runs rounds of job lifecycles
//! over REST, as clients and a worker do them: register a dataset (the round's own, next to
//! a shared one), create a job, create an iteration (a client lease), heartbeat as the client,
//! read every split as the worker (get-split, acknowledging, to the end), report the task
//! done, release the client. Between rounds the test waits (bounded) for garbage collection.
//!
//! After the first round (the warm-up) everything must stay flat: the counts of
//! `GET /v1/status` go back to zero, the dispatcher's resident memory (`VmRSS`) and the
//! journal on disk stay within a tolerance of the first round's, and per-request latency (the
//! p99 of a round) does not grow with the rounds. Each round also deletes its dataset with
//! `DELETE /v1/datasets/{id}` (refused with 409 while a job uses it), which frees its bytes
//! from `--max-dataset-bytes`: the budget holds only two round datasets, so the rounds after
//! the second register theirs only because the earlier ones were deleted.
//!
//! Run with `--no-capture` to see one line per round.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use shardwise_tests::{Dispatcher, TempDir, http, poll_until, try_poll_until};

const ROUNDS: usize = 5;
/// Lifecycles per round (`SHARDWISE_SOAK_LIFECYCLES` overrides it).
const LIFECYCLES: usize = 1200;
/// Clients running lifecycles at the same time.
const CLIENTS: usize = 4;
const WORKER: &str = "127.0.0.1:1";

fn call(d: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value, Duration) {
    let start = Instant::now();
    let r = http(method, d, path, body.as_ref()).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let took = start.elapsed();
    let v = if r.body.is_empty() { Value::Null } else { r.json() };
    (r.status, v, took)
}

fn ok(d: &str, method: &str, path: &str, body: Value, lat: &mut Vec<Duration>) -> Value {
    let (status, v, took) = call(d, method, path, Some(body));
    assert_eq!(status, 200, "{method} {path}: {v}");
    lat.push(took);
    v
}

fn id(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_else(|| panic!("no {key} in {v}")).to_owned()
}

/// The dispatcher's resident set, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Bytes of every file under `dir`.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).expect("work dir").flatten() {
        let m = e.metadata().expect("metadata");
        total += if m.is_dir() { dir_bytes(&e.path()) } else { m.len() };
    }
    total
}

fn totals(d: &str) -> Value {
    let (status, v, _) = call(d, "GET", "/v1/status", None);
    assert_eq!(status, 200, "{v}");
    v["state"]["totals"].clone()
}

fn p99(lat: &mut [Duration]) -> Duration {
    lat.sort_unstable();
    lat[(lat.len() * 99 / 100).min(lat.len() - 1)]
}

/// One job lifecycle on `dataset`, as a client and the worker do it.
fn lifecycle(d: &str, dataset: &str, lat: &mut Vec<Duration>) {
    let job = ok(
        d,
        "POST",
        "/v1/jobs",
        json!({"dataset_id": dataset, "processing_mode": "distributed_epoch", "split_size": 4}),
        lat,
    );
    let job_id = id(&job, "job_id");
    let lease = ok(d, "POST", &format!("/v1/jobs/{job_id}/iterations"), json!({}), lat);
    let (iteration, client) = (id(&lease, "iteration_id"), id(&lease, "client_id"));
    let hb = ok(d, "POST", &format!("/v1/clients/{client}/heartbeat"), json!({}), lat);
    let tasks = hb["tasks"].as_array().expect("tasks").clone();
    assert_eq!(tasks.len(), 1, "{hb}");
    let task = id(&tasks[0], "task_id");
    let mut acknowledge: Vec<Value> = Vec::new();
    loop {
        let r = ok(
            d,
            "POST",
            &format!("/v1/iterations/{iteration}/splits"),
            json!({"worker_address": WORKER, "repetition": 0, "max_splits": 8,
                   "acknowledge": acknowledge}),
            lat,
        );
        if r["end_of_splits"] == json!(true) {
            break;
        }
        acknowledge = r["split_ids"].as_array().expect("split_ids").clone();
        assert!(!acknowledge.is_empty(), "{r}");
    }
    ok(
        d,
        "POST",
        "/v1/workers/update",
        json!({"worker_address": WORKER, "updates": [{"task_id": task, "completed": true}]}),
        lat,
    );
    let (status, v, took) = call(d, "DELETE", &format!("/v1/clients/{client}"), None);
    assert_eq!(status, 200, "{v}");
    lat.push(took);
}

struct Round {
    rss_kib: u64,
    journal_bytes: u64,
    p99: Duration,
    totals: Value,
}

#[test]
fn thousands_of_job_lifecycles_leave_memory_journal_and_latency_flat() {
    let lifecycles: usize = std::env::var("SHARDWISE_SOAK_LIFECYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(LIFECYCLES);
    let dir = TempDir::new("soak");
    // A round dataset is about 60 bytes of JSON, the shared one about as much: room for the
    // shared one and two round datasets, not three.
    let process = Dispatcher::start(&[
        "--work-dir",
        dir.path(),
        "--fault-tolerant",
        "--client-timeout",
        "2s",
        // Long enough that a job is never collected between its creation and its first
        // iteration on a loaded machine (a job without iterations is idle from its creation).
        "--job-gc-timeout",
        "1s",
        "--job-gc-check-interval",
        "50ms",
        "--gc-dynamic-sharding-jobs",
        "--compact-at-bytes",
        "65536",
        "--max-dataset-bytes",
        "200",
    ]);
    let pid = process.child.id();
    let d = process.url.as_str();
    let heartbeat = json!({"worker_address": WORKER});
    let (status, v, _) = call(d, "POST", "/v1/workers/heartbeat", Some(heartbeat.clone()));
    assert_eq!(status, 200, "{v}");
    let shared = {
        let body = json!({"dataset": {"source": {"range": {"stop": 16}}}});
        let (status, v, _) = call(d, "POST", "/v1/datasets", Some(body));
        assert_eq!(status, 200, "{v}");
        id(&v, "dataset_id")
    };

    let mut rounds: Vec<Round> = Vec::new();
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let started = Instant::now();
        let mut lat = Vec::with_capacity(lifecycles * 8);
        // The worker stays alive (its heartbeat lists no tasks: the dispatcher sends its new
        // ones, which this fake worker does not need to run).
        let (status, v, _) = call(d, "POST", "/v1/workers/heartbeat", Some(heartbeat.clone()));
        assert_eq!(status, 200, "{v}");
        // The round's own dataset, deleted at the end of the round.
        let body = json!({"dataset": {"source": {"range": {"stop": 24 + round}}}});
        let (status, v, _) = call(d, "POST", "/v1/datasets", Some(body));
        // (Failures are collected, so that a run shows every round's figures.)
        let own = if status == 200 {
            id(&v, "dataset_id")
        } else {
            failures.push(format!("round {round}: registering its dataset: {status} {v}"));
            shared.clone()
        };
        // Clients in parallel, as a busy dispatcher sees them (their records share fsyncs).
        let per_client = lifecycles / CLIENTS;
        let results: Vec<Vec<Duration>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..CLIENTS)
                .map(|c| {
                    let (shared, own) = (shared.as_str(), own.as_str());
                    scope.spawn(move || {
                        let mut lat = Vec::with_capacity(per_client * 8);
                        for i in 0..per_client {
                            let dataset = if (i + c) % 2 == 0 { shared } else { own };
                            lifecycle(d, dataset, &mut lat);
                        }
                        lat
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a client thread panicked")).collect()
        });
        lat.extend(results.into_iter().flatten());
        // A dataset that a job with an iteration uses cannot be deleted.
        {
            let body = json!({"dataset_id": own, "processing_mode": "parallel_epochs"});
            let job = id(&ok(d, "POST", "/v1/jobs", body, &mut lat), "job_id");
            let lease = ok(d, "POST", &format!("/v1/jobs/{job}/iterations"), json!({}), &mut lat);
            let (status, v, _) = call(d, "DELETE", &format!("/v1/datasets/{own}"), None);
            if own != shared && (status != 409 || v["code"] != "FAILED_PRECONDITION") {
                failures.push(format!("round {round}: deleting a dataset in use: {status} {v}"));
            }
            let client = id(&lease, "client_id");
            let (status, v, _) = call(d, "DELETE", &format!("/v1/clients/{client}"), None);
            assert_eq!(status, 200, "{v}");
        }
        let read_time = started.elapsed();
        // Garbage collection collects every iteration and, after them, every job.
        let settled = try_poll_until(Duration::from_secs(15), || {
            let t = totals(d);
            let zero = ["jobs", "iterations", "clients", "tasks"].iter().all(|k| t[k] == json!(0));
            if zero { Ok(t) } else { Err(t) }
        });
        let totals = match settled {
            Ok(t) => t,
            Err(t) => {
                failures.push(format!("round {round}: {t}"));
                t
            }
        };
        if own != shared {
            let (status, v, _) = call(d, "DELETE", &format!("/v1/datasets/{own}"), None);
            if status == 200 {
                let (status, v, _) = call(d, "GET", &format!("/v1/datasets/{own}"), None);
                assert_eq!(status, 404, "a deleted dataset is gone: {v}");
            } else {
                failures.push(format!("round {round}: DELETE /v1/datasets/{own}: {status} {v}"));
            }
        }
        let r = Round {
            rss_kib: rss_kib(pid),
            journal_bytes: dir_bytes(std::path::Path::new(dir.path())),
            p99: p99(&mut lat),
            totals,
        };
        println!(
            "round {round}: {lifecycles} lifecycles, {} requests in {read_time:?}; p99 {:?}, \
             RSS {} KiB, journal {} bytes, totals {}",
            lat.len(),
            r.p99,
            r.rss_kib,
            r.journal_bytes,
            r.totals
        );
        rounds.push(r);
    }
    // The worker's task list is empty again.
    let (_, workers, _) = call(d, "GET", "/v1/workers", None);
    let tasks = &workers["workers"][0]["tasks"];
    if tasks != &json!([]) {
        failures.push(format!("the worker still has tasks: {workers}"));
    }
    assert!(failures.is_empty(), "{failures:#?}");
    let (first, last) = (&rounds[1], &rounds[ROUNDS - 1]);
    // Memory: within 8 MiB (or a quarter) of the first round after the warm-up.
    let rss_bound = first.rss_kib + (first.rss_kib / 4).max(8 << 10);
    assert!(
        last.rss_kib <= rss_bound,
        "RSS grew: {} KiB after round 1, {} KiB after round {} (bound {rss_bound})",
        first.rss_kib,
        last.rss_kib,
        ROUNDS - 1
    );
    // The journal: a snapshot of the live state and the records since the last compaction.
    let journal_bound = first.journal_bytes.max(65_536) * 3;
    assert!(
        last.journal_bytes <= journal_bound,
        "the journal grew: {} bytes after round 1, {} after round {} (bound {journal_bound})",
        first.journal_bytes,
        last.journal_bytes,
        ROUNDS - 1
    );
    // Latency: generous, for a busy machine.
    let p99_bound = rounds[0].p99.max(first.p99) * 3 + Duration::from_millis(5);
    assert!(
        last.p99 <= p99_bound,
        "p99 latency grew: {:?} in round 1, {:?} in round {} (bound {p99_bound:?})",
        first.p99,
        last.p99,
        ROUNDS - 1
    );
    // A restart from the work dir recovers the same (empty) state.
    drop(process);
    let process = Dispatcher::start(&["--work-dir", dir.path(), "--fault-tolerant"]);
    let d = process.url.as_str();
    let t = poll_until("recovered totals", Duration::from_secs(5), || {
        let t = totals(d);
        if t["datasets"] == json!(1) { Ok(t) } else { Err(t) }
    });
    assert_eq!(t["jobs"], json!(0), "{t}");
    assert_eq!(t["iterations"], json!(0), "{t}");
}

/// Releasing a burst of clients keeps the dispatcher responsive. Thousands of
/// clients each hold the lease of their own job's iteration (two workers heartbeat, so each
/// iteration has a task on each: thousands of tasks a worker); they are released at once from
/// several connections while another connection polls `/healthz`, and one second later
/// (`--job-gc-timeout 1s`, checked every second) their iterations are collected, during the
/// burst and after it. Every release is answered 200 within a second and `/healthz` within
/// 500 ms throughout, collection included (the longest of each is printed: `--no-capture`).
/// Collecting an iteration used to rebuild its workers' whole task lists, so collecting
/// thousands at once held the dispatcher for seconds.
#[test]
fn releasing_a_burst_of_clients_keeps_healthz_and_every_release_fast() {
    let clients: usize =
        std::env::var("SHARDWISE_BURST_CLIENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    const CONNECTIONS: usize = 8;
    let process = Dispatcher::start(&["--job-gc-timeout", "1s", "--job-gc-check-interval", "1s"]);
    let d = process.url.as_str();
    for worker in ["127.0.0.1:1", "127.0.0.1:2"] {
        let (status, v, _) =
            call(d, "POST", "/v1/workers/heartbeat", Some(json!({"worker_address": worker})));
        assert_eq!(status, 200, "{v}");
    }
    let body = json!({"dataset": {"source": {"range": {"stop": 1000}}}});
    let (status, v, _) = call(d, "POST", "/v1/datasets", Some(body));
    assert_eq!(status, 200, "{v}");
    let dataset = id(&v, "dataset_id");
    let leases: Vec<Vec<String>> = std::thread::scope(|s| {
        let lease = |_| {
            let job = json!({"dataset_id": dataset, "processing_mode": "parallel_epochs"});
            let (status, v, _) = call(d, "POST", "/v1/jobs", Some(job));
            assert_eq!(status, 200, "{v}");
            let path = format!("/v1/jobs/{}/iterations", id(&v, "job_id"));
            let (status, v, _) = call(d, "POST", &path, Some(json!({})));
            assert_eq!(status, 200, "{v}");
            id(&v, "client_id")
        };
        let threads: Vec<_> = (0..CONNECTIONS)
            .map(|c| {
                let mine = clients / CONNECTIONS + usize::from(c < clients % CONNECTIONS);
                s.spawn(move || (0..mine).map(lease).collect())
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("leasing thread")).collect()
    });
    let held = totals(d);
    println!("leases taken: {held}");
    assert_eq!(held["iterations_open"], clients, "{held}");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (healthz, releases, collected) = std::thread::scope(|s| {
        let poller = s.spawn(|| {
            let mut lat = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let (status, v, took) = call(d, "GET", "/healthz", None);
                assert_eq!(status, 200, "{v}");
                lat.push(took);
            }
            lat
        });
        let started = Instant::now();
        let releasers: Vec<_> = leases
            .iter()
            .map(|mine| {
                s.spawn(move || {
                    let mut lat = Vec::new();
                    for client in mine {
                        let (status, v, took) =
                            call(d, "DELETE", &format!("/v1/clients/{client}"), None);
                        assert_eq!(status, 200, "DELETE /v1/clients/{client}: {v}");
                        lat.push(took);
                    }
                    lat
                })
            })
            .collect();
        let mut releases: Vec<Duration> =
            releasers.into_iter().flat_map(|t| t.join().expect("releasing thread")).collect();
        // `/healthz` is polled on until every iteration is collected.
        poll_until("every iteration collected", Duration::from_secs(30), || {
            let open = totals(d)["iterations_open"].clone();
            if open == 0 { Ok(()) } else { Err(open) }
        });
        let collected = started.elapsed();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut healthz = poller.join().expect("healthz thread");
        healthz.sort_unstable();
        releases.sort_unstable();
        (healthz, releases, collected)
    });
    let (h_max, r_max) = (healthz[healthz.len() - 1], releases[releases.len() - 1]);
    println!(
        "{} releases over {CONNECTIONS} connections: p50 {:?}, p99 {:?}, max {r_max:?}; every \
         iteration collected {collected:?} after the first; {} /healthz meanwhile: p50 {:?}, \
         max {h_max:?}",
        releases.len(),
        releases[releases.len() / 2],
        releases[releases.len() * 99 / 100],
        healthz.len(),
        healthz[healthz.len() / 2],
    );
    assert_eq!(releases.len(), clients);
    assert!(h_max < Duration::from_millis(500), "/healthz took {h_max:?} during the burst");
    assert!(r_max < Duration::from_secs(1), "a release took {r_max:?}");
}
