//! The crash harness: a fault-tolerant `shardwise dispatcher` killed with SIGKILL at random
//! moments (seeded; the seed is printed, `SHARDWISE_CRASH_SEED` replays it) and restarted from
//! its work dir, while 3 real workers and 2 clients (a `distributed_epoch` and a
//! `parallel_epochs` job) read epochs through it and the harness itself registers datasets,
//! jobs and iterations. Workers and clients reach it through a forwarder that keeps one
//! address across restarts. A tiny `--compact-at-bytes` keeps compaction running constantly,
//! so kills land during and just after compactions (counted from the segment files and the
//! dispatcher's log). Afterwards: every acknowledged reply is in the replayed state, every
//! epoch completed, every element was read exactly once (DYNAMIC) or once per worker (OFF).
//! A second run SIGKILLs a worker mid-epoch, and the dispatcher while the dead worker's
//! splits are handed out again: nothing is lost, and only the dead worker's splits come twice.
//!
//! 10 dispatcher kills by default, 100 with `SHARDWISE_LONG=1`. Run with `--no-capture` to
//! see the summary lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::TargetWorkers;
use shardwise_core::dispatch::wire::{CreateJob, NamedMode, ProcessingMode};
use shardwise_gateway::client::{DistributeOptions, distribute, fingerprint};
use shardwise_tests::crash::{
    Forwarder, Rng, check_acked, churn, compaction_interrupted, log_time_of_day, long_run, seed,
    segments, time_of_day_now,
};
use shardwise_tests::{
    Dispatcher, TempDir, Worker, counts, http, ints, ok, run_shardwise, try_poll_until,
};

/// Journal compaction threshold: far below one commit's worth plus a snapshot, so every
/// commit compacts.
const COMPACT_AT: &str = "512";
/// The DYNAMIC job's dataset: `0..DYN_N`.
const DYN_N: i64 = 400;
/// The OFF job's dataset: `PAR_START..PAR_START + PAR_N` (distinct from the DYNAMIC one).
const PAR_START: i64 = 100_000;
const PAR_N: i64 = 150;
const NUM_WORKERS: usize = 3;

fn dataset(v: &Value) -> DatasetDef {
    DatasetDef::from_json(v).expect("a valid dataset")
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port")
}

/// Log lines without ANSI colour codes.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The dispatcher's flags and environment in these runs.
struct Flags {
    args: Vec<String>,
}

impl Flags {
    fn new(dir: &TempDir, extra: &[&str]) -> Flags {
        let mut args: Vec<String> = ["--work-dir", dir.path(), "--fault-tolerant"]
            .iter()
            .chain(["--compact-at-bytes", COMPACT_AT].iter())
            .map(|s| s.to_string())
            .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        Flags { args }
    }

    fn start(&self) -> Dispatcher {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        // The actor's info lines tell when compactions happen; timestamps without colour.
        let env =
            [("SHARDWISE_LOG", "warn,shardwise_gateway::dispatcher::core=info"), ("NO_COLOR", "1")];
        Dispatcher::try_start_env(&args, &env)
            .unwrap_or_else(|e| panic!("the dispatcher did not (re)start: {e}"))
    }
}

fn options(mode: NamedMode, name: &str, split_size: Option<u64>) -> DistributeOptions {
    DistributeOptions {
        processing_mode: ProcessingMode::Named(mode),
        job_name: Some(name.into()),
        split_size,
        elements_per_request: 8,
        max_outstanding_requests: 4,
        ..shardwise_tests::fast_options()
    }
}

/// Reads epochs (repetitions 0, 1, ...) of a named job until `stop` is set, finishing the
/// epoch under way; returns each epoch's elements.
async fn epochs(
    url: String,
    ds: Value,
    opts: DistributeOptions,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Vec<i64>>, String> {
    let mut out = Vec::new();
    for repetition in 0.. {
        if stop.load(Ordering::SeqCst) && !out.is_empty() {
            break;
        }
        let o = DistributeOptions { repetition, ..opts.clone() };
        let read = distribute(&url, dataset(&ds), o).try_collect::<Vec<Value>>();
        let got = tokio::time::timeout(Duration::from_secs(120), read)
            .await
            .map_err(|_| format!("epoch {repetition} did not end within 120 s"))?
            .map_err(|e| format!("epoch {repetition}: {e}"))?;
        out.push(ints(&got));
    }
    Ok(out)
}

/// A job request the way `distribute` sends it for `opts` over `ds`.
fn job_request(ds: &Value, opts: &DistributeOptions) -> Value {
    serde_json::to_value(CreateJob {
        dataset_id: fingerprint(&dataset(ds)),
        processing_mode: opts.processing_mode,
        job_name: opts.job_name.clone(),
        num_consumers: None,
        target_workers: TargetWorkers::Auto,
        cross_trainer_cache: false,
        split_size: opts.split_size,
    })
    .expect("serialize")
}

/// Checks a named job's state: `epochs` iterations (repetitions 0..epochs), all finished.
fn check_job(url: &str, ds: &Value, opts: &DistributeOptions, epochs: usize) -> usize {
    // Get-or-create finds the job by name (a lost job would be created anew, without
    // iterations, and fail below).
    let id =
        ok(&http("POST", url, "/v1/jobs", Some(&job_request(ds, opts))).expect("answer"))["job_id"]
            .as_str()
            .expect("job id")
            .to_owned();
    let job = ok(&http("GET", url, &format!("/v1/jobs/{id}"), None).expect("answer"));
    let its = job["iterations"].as_array().expect("iterations");
    let reps: BTreeSet<u64> = its.iter().map(|i| i["repetition"].as_u64().unwrap()).collect();
    assert_eq!(reps, (0..epochs as u64).collect(), "one iteration per epoch read: {job}");
    assert!(its.iter().all(|i| i["finished"] == true), "every epoch finished: {job}");
    its.len()
}

/// Dispatcher-side figures gathered over the runs.
#[derive(Debug, Default)]
struct Figures {
    kills: usize,
    aimed: usize,
    immediate: usize,
    mid_compaction: usize,
    just_after_compaction: usize,
    compactions: usize,
    torn_tails: usize,
}

impl Figures {
    /// Counts what a killed dispatcher's output shows; `killed_at` is the kill's time of day.
    fn add_output(&mut self, output: &str, killed_at: Option<f64>) {
        let text = plain(output);
        let compacted: Vec<&str> =
            text.lines().filter(|l| l.contains("journal compacted")).collect();
        self.compactions += compacted.len();
        // Torn final records truncated, segments cut short while created removed. (Each
        // warning is also logged; the printed line counts.)
        for l in text.lines().filter(|l| {
            l.starts_with("shardwise dispatcher: warning")
                && (l.contains("truncated a torn") || l.contains("cut short"))
        }) {
            self.torn_tails += 1;
            println!("{l}");
        }
        if let (Some(at), Some(last)) =
            (killed_at, compacted.last().and_then(|l| log_time_of_day(l)))
            && (0.0..0.1).contains(&(at - last))
        {
            self.just_after_compaction += 1;
        }
    }
}

/// The segment numbers in the work dir (cheap: names only).
fn segment_numbers(dir: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(dir.join("journal")) else { return Vec::new() };
    let mut v: Vec<u64> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_prefix("segment-")?.strip_suffix(".swj")?.parse().ok()
        })
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn dispatcher_killed_at_random_loses_no_acknowledged_state_and_no_split() {
    let started = Instant::now();
    let seed = seed();
    println!("crash seed {seed} (replay with SHARDWISE_CRASH_SEED={seed})");
    let mut rng = Rng::new(seed);
    let kills = if long_run() { 100 } else { 10 };
    let dir = TempDir::new("crash");
    let flags = Flags::new(&dir, &[]);
    let fwd = Forwarder::start();
    let url = fwd.url();
    let mut d = flags.start();
    fwd.set_target(port_of(&d.url));
    let workers: Vec<Worker> = (0..NUM_WORKERS)
        .map(|_| Worker::start(&url, &["--heartbeat-interval", "100ms", "--buffer", "16"]))
        .collect();

    let dyn_ds = json!({"source": {"range": {"stop": DYN_N}}});
    let par_ds = json!({"source": {"range": {"start": PAR_START, "stop": PAR_START + PAR_N}}});
    let dyn_opts = options(NamedMode::DistributedEpoch, "crash-dynamic", Some(5));
    let par_opts = options(NamedMode::ParallelEpochs, "crash-parallel", None);
    let stop_clients = Arc::new(AtomicBool::new(false));
    let clients = {
        let (url, stop) = (url.clone(), stop_clients.clone());
        let (dyn_ds, par_ds, dyn_opts, par_opts) =
            (dyn_ds.clone(), par_ds.clone(), dyn_opts.clone(), par_opts.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(async move {
                let a = tokio::spawn(epochs(url.clone(), dyn_ds, dyn_opts, stop.clone()));
                let b = tokio::spawn(epochs(url, par_ds, par_opts, stop));
                (a.await.expect("join"), b.await.expect("join"))
            })
        })
    };
    let stop_churn = Arc::new(AtomicBool::new(false));
    let churner = {
        let (url, stop) = (url.clone(), stop_churn.clone());
        std::thread::spawn(move || churn(&[url], &stop))
    };

    let mut figures = Figures::default();
    let mut run_segment = segment_numbers(&dir.0).last().copied().unwrap_or(0);
    for k in 0..kills {
        // Every fifth kill comes as soon as the restart is ready (before any compaction
        // could clean up what the previous kill left); the others after a random delay.
        if k % 5 != 4 {
            std::thread::sleep(Duration::from_millis(rng.range(20, 500)));
        }
        // Every third kill is aimed: it waits for the next compaction to create its segment
        // and kills at once (so the default run surely has kills inside compactions).
        if k % 5 == 4 {
            figures.immediate += 1;
        } else if k % 3 == 2 {
            figures.aimed += 1;
            let seen = segment_numbers(&dir.0).last().copied().unwrap_or(0);
            let deadline = Instant::now() + Duration::from_secs(10);
            while segment_numbers(&dir.0).last().copied().unwrap_or(0) <= seen
                && Instant::now() < deadline
            {
                std::thread::yield_now();
            }
        }
        let at = time_of_day_now();
        d.kill();
        fwd.cut();
        figures.kills += 1;
        if compaction_interrupted(&segments(&dir.0), run_segment) {
            figures.mid_compaction += 1;
        }
        figures.add_output(&d.output(), Some(at));
        d = flags.start();
        run_segment = segment_numbers(&dir.0).last().copied().unwrap_or(0);
        fwd.set_target(port_of(&d.url));
    }
    // Let the clients finish the epochs under way, and stop the harness's own calls.
    stop_clients.store(true, Ordering::SeqCst);
    let (dyn_epochs, par_epochs) = clients.join().expect("client thread");
    let dyn_epochs = dyn_epochs.unwrap_or_else(|e| panic!("DYNAMIC client: {e}\n{}", d.output()));
    let par_epochs = par_epochs.unwrap_or_else(|e| panic!("OFF client: {e}\n{}", d.output()));
    stop_churn.store(true, Ordering::SeqCst);
    let acked = churner.join().expect("churn thread");

    // The final restart: everything is checked against the replayed state.
    d.kill();
    fwd.cut();
    figures.add_output(&d.output(), None);
    let mut d = flags.start();
    fwd.set_target(port_of(&d.url));
    figures.add_output(&d.output(), None);
    let mut records = check_acked(&d.url, &acked);
    records += check_job(&d.url, &dyn_ds, &dyn_opts, dyn_epochs.len());
    records += check_job(&d.url, &par_ds, &par_opts, par_epochs.len());
    let listed = ok(&http("GET", &d.url, "/v1/workers", None).expect("answer"));
    for w in &workers {
        let found = listed["workers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["worker_address"] == w.address() && x["alive"] == true);
        assert!(found, "worker {} registered and alive: {listed}", w.address());
        records += 1;
    }

    // Every epoch: DYNAMIC exactly once, OFF once per worker.
    let mut elements = 0;
    for (r, got) in dyn_epochs.iter().enumerate() {
        let mut got = got.clone();
        got.sort_unstable();
        assert_eq!(got, (0..DYN_N).collect::<Vec<_>>(), "DYNAMIC epoch {r}: each element once");
        elements += got.len();
    }
    for (r, got) in par_epochs.iter().enumerate() {
        let c = counts(got);
        let want: BTreeMap<i64, usize> =
            (PAR_START..PAR_START + PAR_N).map(|x| (x, NUM_WORKERS)).collect();
        assert_eq!(c, want, "OFF epoch {r}: each element once per worker");
        elements += got.len();
    }
    // The journal on disk, read offline, holds every acknowledged dataset too.
    d.kill();
    let dump = run_shardwise(&["journal", "dump", dir.path()], "", &[]);
    assert_eq!(dump.code, 0, "journal dump: {}", dump.stderr);
    for (id, _) in &acked.datasets {
        assert!(dump.stdout.contains(&format!("\"{id}\"")), "dataset {id} in the journal dump");
    }
    let (forwarded, refused) = fwd.counts();
    println!(
        "crash summary: seed={seed} dispatcher_kills={} (aimed {}, immediate {}) \
         kills_mid_compaction={} kills_within_100ms_after_compaction={} compactions={} \
         torn_or_cut_segments_repaired={} acknowledged_records_checked={records} \
         elements_checked={elements} epochs_dynamic={} epochs_parallel={} \
         harness_acks(datasets/jobs/iterations)={}/{}/{} connections_forwarded={forwarded} \
         connections_refused_while_down={refused} wall={:.1}s",
        figures.kills,
        figures.aimed,
        figures.immediate,
        figures.mid_compaction,
        figures.just_after_compaction,
        figures.compactions,
        figures.torn_tails,
        dyn_epochs.len(),
        par_epochs.len(),
        acked.datasets.len(),
        acked.jobs.len(),
        acked.iterations.len(),
        started.elapsed().as_secs_f64(),
    );
    assert_eq!(figures.kills, kills);
    assert!(figures.compactions > 0, "compaction ran");
    assert!(
        figures.mid_compaction + figures.just_after_compaction > 0,
        "some kills landed during or just after a compaction"
    );
    assert!(!acked.iterations.is_empty(), "the harness's own calls were acknowledged");
}

#[test]
fn worker_killed_mid_epoch_loses_nothing_and_only_its_splits_come_again() {
    let dir = TempDir::new("crashworker");
    let flags = Flags::new(&dir, &["--worker-timeout", "3s"]);
    let fwd = Forwarder::start();
    let url = fwd.url();
    let d = flags.start();
    fwd.set_target(port_of(&d.url));
    let worker = || Worker::start(&url, &["--heartbeat-interval", "200ms", "--buffer", "8"]);
    let _survivors = [worker(), worker()];
    let mut victim = worker();
    const N: i64 = 3000;
    const SPLIT: i64 = 10;
    let dyn_ds = json!({"source": {"range": {"stop": N}}});
    let par_ds = json!({"source": {"range": {"start": PAR_START, "stop": PAR_START + 2000}}});
    let dyn_opts = DistributeOptions {
        elements_per_request: 4,
        max_outstanding_requests: 2,
        ..options(NamedMode::DistributedEpoch, "victim-dynamic", Some(SPLIT as u64))
    };
    let par_opts = DistributeOptions {
        elements_per_request: 4,
        max_outstanding_requests: 2,
        ..options(NamedMode::ParallelEpochs, "victim-parallel", None)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    // The victim dies once 300 elements were read; at 600 (its splits being handed out
    // again) the dispatcher is killed and restarted too.
    let read = AtomicUsize::new(0);
    let (d, (dyn_got, par_got)) = std::thread::scope(|s| {
        let restarter = s.spawn(|| {
            let mut d = d;
            // Killed after 60 s even if the readers stalled (their checks then fail).
            let _ = try_poll_until(Duration::from_secs(60), || {
                if read.load(Ordering::SeqCst) >= 600 { Ok(()) } else { Err(()) }
            });
            d.kill();
            fwd.cut();
            let d = flags.start();
            fwd.set_target(port_of(&d.url));
            d
        });
        let got =
            rt.block_on(async {
                let par = tokio::spawn({
                    let (url, ds) = (url.clone(), par_ds.clone());
                    async move {
                        distribute(&url, dataset(&ds), par_opts).try_collect::<Vec<Value>>().await
                    }
                });
                let reading = distribute(&url, dataset(&dyn_ds), dyn_opts).try_fold(
                    Vec::new(),
                    |mut got, e| {
                        got.push(e);
                        read.store(got.len(), Ordering::SeqCst);
                        if got.len() == 300 {
                            victim.kill();
                        }
                        std::future::ready(Ok(got))
                    },
                );
                let got = tokio::time::timeout(Duration::from_secs(90), reading)
                    .await
                    .expect("the DYNAMIC epoch ends")
                    .expect("no error");
                let par = tokio::time::timeout(Duration::from_secs(90), par)
                    .await
                    .expect("the OFF epoch ends")
                    .expect("join")
                    .expect("no error");
                (ints(&got), ints(&par))
            });
        (restarter.join().expect("restarted"), got)
    });

    // DYNAMIC: every element at least once; twice only within the dead worker's splits.
    let c = counts(&dyn_got);
    assert_eq!(c.keys().copied().collect::<Vec<_>>(), (0..N).collect::<Vec<_>>(), "none lost");
    assert!(c.values().all(|n| *n <= 2), "at most twice");
    let again: BTreeSet<i64> = c.iter().filter(|(_, n)| **n == 2).map(|(x, _)| x / SPLIT).collect();
    assert!(again.len() <= 3, "only the dead worker's few in-flight splits came again: {again:?}");
    // OFF: the survivors' copies whole; the dead worker's copy a prefix (read in order).
    let c = counts(&par_got);
    let thrice = c.values().filter(|n| **n == 3).count() as i64;
    for (x, n) in &c {
        let want = if x - PAR_START < thrice { 3 } else { 2 };
        assert_eq!(*n, want, "element {x}: survivors' copies whole, the dead one's a prefix");
    }
    assert_eq!(c.len() as i64, 2000);

    let workers = ok(&d.call("GET", "/v1/workers", None));
    let lost: Vec<&Value> =
        workers["workers"].as_array().unwrap().iter().filter(|w| w["alive"] == false).collect();
    assert_eq!(lost.len(), 1, "{workers}");
    assert_eq!(lost[0]["worker_address"], victim.address());
    println!(
        "crash worker summary: elements_checked={} dynamic_splits_read_twice={} \
         parallel_prefix_of_dead_worker={thrice}",
        dyn_got.len() + par_got.len(),
        again.len()
    );
}
