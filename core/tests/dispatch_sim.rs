//! Randomized, deterministic end-to-end simulation of the dispatcher with workers, clients,
//! worker deaths and restarts, dispatcher crashes and recoveries, partitions and message delays.
//!
//! Every run is determined by its seed. `SIM_SEED=<n>` reruns one seed, `SIM_RUNS=<n>` sets how
//! many seeds each profile runs (default small, so the file takes a few seconds in debug).
//!
//! Invariants checked at the end of each run: every epoch of every client completes (it saw
//! `iteration_finished`); DYNAMIC: every element of every source repetition of every epoch was
//! read at least once, and exactly once when no worker died or was declared lost (elements of
//! splits in flight on a lost worker may be read twice: documented); OFF and DATA: the task of
//! every worker that never failed produced its whole (shard of the) dataset; replay of the
//! journal equals the live state after every dispatcher call (shadow) and in full at every
//! crash and at the end; recovery from the decoded segments equals the crashed state.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use serde_json::{Value, json};
use shardwise_core::dataset::{DatasetDef, Sharding};
use shardwise_core::dispatch::wire::{
    CreateIteration, Split, SplitId, SplitsReply, WorkerHeartbeat, WorkerHeartbeatReply,
};
use shardwise_core::dispatch::{Event, IterationId, Millis, ShardingPolicy, TaskId};
use support::*;

/// The fault mix of a family of runs.
#[derive(Debug, Clone, Copy)]
struct Profile {
    /// Per-step probability (per million) that a worker is killed.
    kill: u64,
    /// A killed worker may come back before the dispatcher declared it lost.
    fast_restart: bool,
    /// Per-step probability that the dispatcher crashes.
    crash: u64,
    /// Per-step probability that a worker is partitioned past the worker timeout.
    partition: u64,
    /// Per-step probability that a worker joins.
    join: u64,
    /// Probability that a dispatcher reply is lost.
    lose_replies: u64,
    /// Requests reach the dispatcher up to this late.
    max_delay: u64,
    /// DYNAMIC datasets may carry buffering transforms (shuffle, batch) when nothing can die.
    buffering_dynamic: bool,
    /// Workers send a per-process uid with their heartbeats.
    worker_uid: bool,
    /// Workers serve end of sequence only after their completion report was acknowledged.
    eos_after_ack: bool,
}

const CALM: Profile = Profile {
    kill: 0,
    fast_restart: false,
    crash: 0,
    partition: 0,
    join: 0,
    lose_replies: 0,
    max_delay: 30,
    buffering_dynamic: true,
    worker_uid: true,
    eos_after_ack: true,
};

const FAULTS: Profile = Profile {
    kill: 20_000,
    fast_restart: false,
    crash: 10_000,
    partition: 0,
    join: 5_000,
    lose_replies: 0,
    max_delay: 30,
    buffering_dynamic: false,
    worker_uid: true,
    eos_after_ack: true,
};

fn seeds(default_runs: u64, salt: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let runs = std::env::var("SIM_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(default_runs);
    (0..runs).map(|i| salt * 1_000_000 + i).collect()
}

/// What a family of runs exercised (printed with `--nocapture`).
#[derive(Debug, Default)]
struct Stats {
    runs: u64,
    dynamic_runs: u64,
    kills: u64,
    workers_lost: u64,
    dispatcher_crashes: u64,
    partitions: u64,
    joins: u64,
    lost_replies: u64,
    rejoin_refusals: u64,
    elements_read: u64,
    virtual_ms: u64,
}

/// Runs `profile` for every seed; a failing seed is printed before the panic continues.
fn run_profile(name: &str, profile: Profile, default_runs: u64, salt: u64) {
    let mut stats = Stats::default();
    for seed in seeds(default_runs, salt) {
        let r = catch_unwind(AssertUnwindSafe(|| run_seed(seed, profile, &mut stats)));
        if let Err(e) = r {
            eprintln!("{name}: failed with SIM_SEED={seed}");
            resume_unwind(e);
        }
    }
    println!("{name}: {stats:?}");
}

/// Runs a profile that breaks a documented limit: at least one seed must fail, and every
/// failure must be a documented one (one of `expected` in its message), so the limit stays what the
/// docs say it is and nothing else fails alongside it.
fn run_profile_expecting(
    name: &str,
    profile: Profile,
    default_runs: u64,
    salt: u64,
    expected: &[&str],
) {
    let mut stats = Stats::default();
    let mut failed = Vec::new();
    for seed in seeds(default_runs, salt) {
        let r = catch_unwind(AssertUnwindSafe(|| run_seed(seed, profile, &mut stats)));
        if let Err(e) = r {
            let message = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            assert!(
                expected.iter().any(|x| message.contains(x)),
                "{name}: seed {seed} failed otherwise than documented ({expected:?}): {message}"
            );
            failed.push(seed);
        }
    }
    assert!(!failed.is_empty(), "{name}: the documented limit ({expected:?}) no longer shows");
    println!("{name}: {} of the seeds show the limit ({failed:?}); {stats:?}", failed.len());
}

/// What one seed runs.
#[derive(Debug)]
struct Plan {
    dataset: DatasetDef,
    policy: ShardingPolicy,
    /// DYNAMIC: one pass over the source; the expected elements of an epoch are these for every
    /// source repetition `0..inner_repeat`.
    one_pass: Vec<Value>,
    inner_repeat: u64,
    workers: usize,
    clients: usize,
    epochs: u64,
    split_size: u64,
}

fn plan(rng: &mut SplitMix64, profile: &Profile, files: &mut BTreeMap<String, Vec<u8>>) -> Plan {
    let policy = match rng.below(20) {
        0..=7 => ShardingPolicy::Dynamic,
        8..=16 => ShardingPolicy::Off,
        _ => ShardingPolicy::Data,
    };
    let source = match rng.below(10) {
        0..=4 => json!({"range": {"start": rng.below(5), "stop": rng.between(0, 40)}}),
        5..=6 => {
            let n = rng.between(0, 12);
            let elements: Vec<Value> = (0..n)
                .map(|i| if i % 2 == 0 { json!(format!("e{i}")) } else { json!({"k": i}) })
                .collect();
            json!({"list": {"elements": elements}})
        }
        7..=8 => {
            let n = rng.between(1, 4);
            let mut paths = Vec::new();
            for f in 0..n {
                let path = format!("/data/f{f}.txt");
                let lines = rng.between(0, 4);
                let text: String = (0..lines).map(|l| format!("f{f}-{l}\n")).collect();
                files.insert(path.clone(), text.into_bytes());
                paths.push(path);
            }
            json!({"files": {"paths": paths, "format": "lines"}})
        }
        _ => {
            let n = rng.between(0, 6);
            let items: Vec<Value> = (0..n).map(|i| json!({"uri": format!("gs://b/{i}")})).collect();
            json!({"splits": {"items": items}})
        }
    };
    let base = def(json!({ "source": source }));
    let one_pass = run_local(&base, Sharding::Off, files);
    let inner_repeat = if rng.below(3) == 0 { rng.between(2, 3) } else { 1 };
    let mut transforms = Vec::new();
    if inner_repeat > 1 {
        transforms.push(json!({"repeat": inner_repeat}));
    }
    let buffering_ok = policy != ShardingPolicy::Dynamic || profile.buffering_dynamic;
    if buffering_ok && rng.below(3) == 0 {
        transforms.push(json!({"shuffle": {"buffer": rng.between(1, 5), "seed": rng.below(100)}}));
    }
    if policy != ShardingPolicy::Dynamic && rng.below(4) == 0 {
        transforms.push(json!({"skip": rng.below(3)}));
    }
    if policy != ShardingPolicy::Dynamic && rng.below(4) == 0 {
        transforms.push(json!({"take": rng.between(0, 30)}));
    }
    if buffering_ok && rng.below(4) == 0 {
        transforms.push(
            json!({"batch": {"size": rng.between(1, 3), "drop_remainder": rng.below(2) == 0}}),
        );
    }
    let dataset = with(base, Value::Array(transforms));
    Plan {
        dataset,
        policy,
        one_pass,
        inner_repeat,
        workers: rng.between(1, 4) as usize,
        clients: rng.between(1, 2) as usize,
        epochs: rng.between(1, 2),
        split_size: rng.between(1, 6),
    }
}

fn is_plain(d: &DatasetDef) -> bool {
    d.transforms.iter().all(|t| t.kind() == "repeat")
}

fn run_seed(seed: u64, profile: Profile, stats: &mut Stats) {
    let mut rng = SplitMix64::new(seed ^ 0x5eed);
    let mut files = BTreeMap::new();
    let plan = plan(&mut rng, &profile, &mut files);
    let addrs: Vec<String> = (0..plan.workers).map(|i| format!("w{i}")).collect();
    let mut cfg = SimConfig {
        seed,
        max_delay: profile.max_delay,
        max_splits: rng.between(1, 3) as u32,
        read_batch: rng.between(1, 3) as usize,
        lose_replies_per_million: profile.lose_replies,
        send_worker_uid: profile.worker_uid,
        eos_after_ack: profile.eos_after_ack,
        ..SimConfig::default()
    };
    if plan.policy == ShardingPolicy::Data {
        let list: Vec<&str> = addrs.iter().map(String::as_str).collect();
        cfg = cfg.with_worker_list(&list);
    }
    let mut sim = Sim::new(cfg);
    sim.files = files;
    for a in &addrs {
        sim.add_worker(a);
    }
    sim.settle();
    let ds = sim.register(plan.dataset.clone());
    for c in 0..plan.clients {
        let mut spec = ClientSpec::new(&ds, plan.policy).job("job").epochs(plan.epochs);
        spec.split_size = Some(plan.split_size);
        spec.start_at = Millis(sim.now.0 + rng.below(300) * c as u64);
        sim.add_client(spec);
    }
    sim.note(format!("plan: {plan:?}"));

    // Faults.
    let worker_timeout = sim.cfg.dispatcher.worker_timeout.0;
    let mut faulted: BTreeSet<String> = BTreeSet::new();
    let mut pending_restarts: BTreeMap<String, Millis> = BTreeMap::new();
    let mut dispatcher_back_at: Option<Millis> = None;
    let mut joined = 0;
    // A budget of faults per run, so that every run can finish.
    let (mut kills_left, mut crashes_left, mut partitions_left) = (4, 5, 4);
    let limit = Millis(sim.now.0 + 600_000);
    while !sim.clients.iter().all(|c| c.done || c.failed) {
        assert!(
            sim.now < limit,
            "seed {seed}: no progress in 10 virtual minutes\n{}",
            report(&sim)
        );
        sim.step();
        let now = sim.now;
        // Dispatcher crash and recovery.
        if let Some(t) = dispatcher_back_at
            && now >= t
        {
            sim.restart_dispatcher();
            dispatcher_back_at = None;
            if rng.below(3) == 0 {
                sim.compact();
            }
        }
        if sim.d.is_some() && crashes_left > 0 && rng.chance(profile.crash) {
            crashes_left -= 1;
            sim.crash_dispatcher();
            dispatcher_back_at = Some(now.plus(Millis(rng.below(400))));
        }
        // Worker deaths and restarts.
        let up: Vec<String> =
            sim.workers.values().filter(|w| w.up).map(|w| w.addr.clone()).collect();
        if !up.is_empty() && kills_left > 0 && rng.chance(profile.kill) {
            kills_left -= 1;
            let victim = up[rng.below(up.len() as u64) as usize].clone();
            sim.kill_worker(&victim, None);
            faulted.insert(victim.clone());
            let delay =
                if profile.fast_restart { rng.below(worker_timeout / 2) } else { rng.below(500) };
            pending_restarts.insert(victim, now.plus(Millis(delay)));
        }
        let due: Vec<String> = pending_restarts
            .iter()
            .filter(|(_, t)| now >= **t)
            .map(|(a, _)| a.clone())
            .filter(|a| {
                profile.fast_restart
                    || sim.d.as_ref().is_some_and(|d| {
                        d.dispatcher().state().workers().get(a).is_none_or(|w| !w.alive)
                    })
            })
            .collect();
        for a in due {
            pending_restarts.remove(&a);
            sim.restart_worker(&a);
        }
        if !up.is_empty() && partitions_left > 0 && rng.chance(profile.partition) {
            partitions_left -= 1;
            let victim = up[rng.below(up.len() as u64) as usize].clone();
            if sim.workers[&victim].paused_until.is_none_or(|t| now >= t) {
                faulted.insert(victim.clone());
                sim.pause_worker(&victim, worker_timeout + rng.between(300, 1_500));
            }
        }
        if plan.policy != ShardingPolicy::Data && joined < 3 && rng.chance(profile.join) {
            let addr = format!("late{joined}");
            joined += 1;
            sim.add_worker(&addr);
        }
    }
    if sim.d.is_none() {
        sim.restart_dispatcher();
    }
    check(&sim, &plan, &faulted, seed);
    let count = |what: &str| sim.trace.iter().filter(|l| l.contains(what)).count() as u64;
    stats.runs += 1;
    stats.dynamic_runs += u64::from(plan.policy == ShardingPolicy::Dynamic);
    stats.kills += count(" killed");
    stats.workers_lost +=
        sim.events.iter().filter(|(_, e)| matches!(e, Event::WorkerLost { .. })).count() as u64;
    stats.dispatcher_crashes += count("dispatcher crashed");
    stats.partitions += count(" partitioned");
    stats.joins += count(" added") - plan.workers as u64;
    stats.lost_replies += sim.lost_replies;
    stats.rejoin_refusals +=
        sim.workers.values().map(|w| w.rejoin_signals.len() as u64).sum::<u64>();
    stats.elements_read += sim.reads.len() as u64;
    stats.virtual_ms += sim.now.0;
}

fn report(sim: &Sim) -> String {
    let clients: Vec<String> = sim
        .clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            format!(
                "client {i}: done={} failed={} epochs={} reads={} errors={:?} read_errors={:?} \
                 tasks={:?}",
                c.done,
                c.failed,
                c.epochs_completed,
                c.reads.len(),
                c.errors,
                c.read_errors,
                c.tasks
            )
        })
        .collect();
    let workers: Vec<String> = sim
        .workers
        .values()
        .map(|w| {
            format!(
                "{}: up={} tasks={:?} errors={:?}",
                w.addr,
                w.up,
                w.tasks.keys().collect::<Vec<_>>(),
                w.errors
            )
        })
        .collect();
    let state = sim
        .d
        .as_ref()
        .map(|d| format!("{:#?}", d.dispatcher().state().iterations()))
        .unwrap_or_default();
    format!(
        "{}\n{}\ntrace:\n{}\niterations: {state}",
        clients.join("\n"),
        workers.join("\n"),
        sim.trace.join("\n")
    )
}

fn check(sim: &Sim, plan: &Plan, faulted: &BTreeSet<String>, seed: u64) {
    let ctx = || format!("seed {seed}\n{}", report(sim));
    for c in &sim.clients {
        assert!(c.done && !c.failed, "a client did not finish: {}", ctx());
        assert_eq!(c.epochs_completed, plan.epochs, "{}", ctx());
    }
    for w in sim.workers.values() {
        assert!(w.errors.is_empty(), "worker {} got errors {:?}: {}", w.addr, w.errors, ctx());
    }
    sim.check_replay();
    let state = sim.state();
    let job_iterations: Vec<_> = state.iterations().values().collect();
    assert_eq!(job_iterations.len() as u64, plan.epochs, "{}", ctx());
    assert!(job_iterations.iter().all(|i| i.finished && !i.garbage_collected), "{}", ctx());

    let lost_any = !faulted.is_empty()
        || sim.events.iter().any(|(_, e)| matches!(e, Event::WorkerLost { .. }));
    match plan.policy {
        ShardingPolicy::Dynamic => {
            for epoch in 0..plan.epochs {
                let got: Vec<Value> = sim
                    .reads
                    .iter()
                    .filter(|r| r.repetition == epoch)
                    .map(|r| json!([r.source_repetition, r.value]))
                    .collect();
                let got = multiset(&got);
                if is_plain(&plan.dataset) {
                    let expected: Vec<Value> = (0..plan.inner_repeat)
                        .flat_map(|r| plan.one_pass.iter().map(move |v| json!([r, v])))
                        .collect();
                    let expected = multiset(&expected);
                    if lost_any {
                        for k in expected.keys() {
                            assert!(
                                got.contains_key(k),
                                "epoch {epoch}: {k} was never read: {}",
                                ctx()
                            );
                        }
                        for k in got.keys() {
                            assert!(
                                expected.contains_key(k),
                                "epoch {epoch}: {k} is not an element: {}",
                                ctx()
                            );
                        }
                    } else {
                        assert_eq!(got, expected, "epoch {epoch}: exactly once: {}", ctx());
                    }
                } else {
                    // Shuffle/batch: count the elements inside batches, per value.
                    let mut flat = Vec::new();
                    for r in sim.reads.iter().filter(|r| r.repetition == epoch) {
                        match &r.value {
                            Value::Array(items) => flat.extend(items.iter().cloned()),
                            v => flat.push(v.clone()),
                        }
                    }
                    let mut expected = Vec::new();
                    for _ in 0..plan.inner_repeat {
                        expected.extend(plan.one_pass.iter().cloned());
                    }
                    if !lost_any && !has_dropping_batch(&plan.dataset) {
                        assert_eq!(
                            multiset(&flat),
                            multiset(&expected),
                            "epoch {epoch}: {}",
                            ctx()
                        );
                    }
                }
            }
        }
        ShardingPolicy::Off | ShardingPolicy::Data => {
            let n = plan.workers as u64;
            for ((addr, generation, task), log) in &sim.served {
                if faulted.contains(addr) || *generation != 0 {
                    continue;
                }
                let sharding = if plan.policy == ShardingPolicy::Off {
                    Sharding::Off
                } else {
                    let index = addr[1..].parse::<u64>().expect("w<i>");
                    Sharding::Data { num_workers: n, worker_index: index }
                };
                let expected = run_local(&plan.dataset, sharding, &sim.files);
                let got: Vec<Value> = log.elements.iter().map(|(_, v)| v.clone()).collect();
                assert_eq!(got, expected, "task {task} on {addr}: {}", ctx());
                assert!(log.ended, "task {task} on {addr} did not end: {}", ctx());
                // Clients read exactly what was served, in order.
                let read: Vec<Value> = sim
                    .reads
                    .iter()
                    .filter(|r| r.task == *task && r.worker == *addr && r.generation == 0)
                    .map(|r| r.value.clone())
                    .collect();
                assert_eq!(read, got, "{}", ctx());
            }
            // Every epoch read something from every never-failed original worker's task.
            for epoch in 0..plan.epochs {
                let it =
                    state.iterations().values().find(|i| i.repetition == epoch).expect("iteration");
                for t in &it.tasks {
                    let task = &state.tasks()[t];
                    if faulted.contains(&task.worker_address) {
                        continue;
                    }
                    assert!(task.finished && !task.abandoned, "task {t:?}: {}", ctx());
                    let _: TaskId = *t;
                }
            }
        }
        _ => unreachable!(),
    }
}

fn has_dropping_batch(d: &DatasetDef) -> bool {
    d.transforms.iter().any(|t| t.to_json()["batch"]["drop_remainder"] == json!(true))
}

/// No faults, with message delays: exactly-once DYNAMIC delivery, whole datasets per OFF task.
#[test]
fn sim_calm() {
    run_profile("sim_calm", CALM, 60, 1);
}

/// Worker deaths (restarted after the dispatcher declared them lost), joining workers,
/// dispatcher crashes with recovery and compaction, message delays.
#[test]
fn sim_faults() {
    run_profile("sim_faults", FAULTS, 60, 2);
}

/// Killed workers come back at the same address before the worker timeout (a fast process
/// restart, announced by a new `worker_uid`). Their unacknowledged DYNAMIC splits must not be
/// lost.
#[test]
fn sim_fast_worker_restarts() {
    run_profile("sim_fast_worker_restarts", Profile { fast_restart: true, ..FAULTS }, 60, 3);
}

/// The same with workers that send no uid: a documented limit, not a bug. The dispatcher
/// cannot tell a fast restart from a heartbeat, so splits in flight on the old process are
/// lost (as in TensorFlow), and the epoch is no longer read exactly once. The test asserts that this, and only
/// this, happens.
#[test]
fn sim_fast_worker_restarts_without_uid_lose_in_flight_splits() {
    run_profile_expecting(
        "sim_fast_worker_restarts_without_uid",
        Profile { fast_restart: true, worker_uid: false, ..FAULTS },
        60,
        6,
        &["exactly once"],
    );
}

/// Workers that serve end of sequence before their completion report got through: when such
/// a worker dies before the report reaches the dispatcher, the restarted process gets the task
/// again (it is not finished), but the clients already saw its end and never read it again,
/// so the iteration may never finish, or an epoch is not read exactly once. A protocol obligation of the gateway's worker
/// (which serves end of sequence only after the report was acknowledged), not a dispatcher
/// bug; the test asserts that breaking it shows exactly this.
#[test]
fn sim_eos_before_completion_ack_breaks_the_epoch() {
    run_profile_expecting(
        "sim_eos_before_completion_ack",
        Profile { eos_after_ack: false, ..FAULTS },
        300,
        7,
        &["exactly once", "no progress"],
    );
}

/// Workers partitioned past the worker timeout, declared lost while alive, then back.
#[test]
fn sim_partitions() {
    run_profile(
        "sim_partitions",
        Profile { partition: 20_000, kill: 0, crash: 5_000, ..FAULTS },
        60,
        4,
    );
}

/// Replies of the dispatcher are lost after the request was applied (an HTTP timeout, or a
/// dispatcher that crashed after making its records durable but before replying).
#[test]
fn sim_lost_replies() {
    run_profile(
        "sim_lost_replies",
        Profile { lose_replies: 30_000, kill: 0, crash: 0, join: 0, ..CALM },
        60,
        5,
    );
}

/// Partitions and kills together, with longer message delays.
#[test]
fn sim_partitions_and_kills() {
    run_profile(
        "sim_partitions_and_kills",
        Profile { partition: 20_000, kill: 20_000, crash: 5_000, max_delay: 60, ..FAULTS },
        60,
        8,
    );
}

// ---------------------------------------------------------------------------------------------
// Targeted reproductions (the dispatcher driven by hand, journal drained after every call)
// ---------------------------------------------------------------------------------------------

fn heartbeat(sim: &mut Sim, worker: &str, uid: &str) -> WorkerHeartbeatReply {
    let req = WorkerHeartbeat {
        worker_address: worker.into(),
        worker_uid: Some(uid.into()),
        ..WorkerHeartbeat::default()
    };
    sim.dispatch(req.clone()).expect("heartbeat")
}

fn get_splits(sim: &mut Sim, it: IterationId, worker: &str, max: u32) -> SplitsReply {
    // As the process registered at `worker` (its uid).
    let mut req = splits_req(worker, 0, max);
    req.worker_uid = sim.state().workers().get(worker).and_then(|w| w.uid.clone());
    sim.dispatch((it, req.clone())).expect("get_splits")
}

fn starts(splits: &[Split]) -> Vec<u64> {
    splits
        .iter()
        .map(|s| match s {
            Split::Chunk { start, .. } => *start,
            other => panic!("{other:?} is not a chunk"),
        })
        .collect()
}

/// Two workers, `range(40)` DYNAMIC in splits of 10, one iteration.
fn two_workers_dynamic() -> (Sim, IterationId) {
    let mut sim = Sim::new(SimConfig::default());
    heartbeat(&mut sim, "w1", "w1#0");
    heartbeat(&mut sim, "w2", "w2#0");
    let ds = sim.register(range(40));
    let mut req = job_req(&ds, ShardingPolicy::Dynamic, None);
    req.split_size = Some(10);
    let job = sim.dispatch(req).expect("job").job_id;
    let lease = sim.dispatch((job, CreateIteration::default())).expect("iteration");
    (sim, lease.iteration_id)
}

/// Drains the rest of the repetition with `w1` (heartbeating it and running the timers),
/// returning the split starts it got and whether it saw the end.
fn drain_with_w1(sim: &mut Sim, it: IterationId, until: u64) -> (Vec<u64>, bool) {
    let mut got = Vec::new();
    while sim.now.0 < until {
        sim.now = sim.now.plus(Millis(100));
        heartbeat(sim, "w1", "w1#0");
        if sim.now >= sim.dispatcher().poll_timeout() {
            sim.tick();
        }
        let r = get_splits(sim, it, "w1", 1);
        got.extend(starts(&r.splits));
        if r.end_of_splits {
            return (got, true);
        }
    }
    (got, false)
}

/// A worker declared lost while still running (a partition) asks for splits before its next
/// heartbeat, then dies for good; in a second variant a new process at its address rejoins.
///
/// Input: w1, w2 alive; `range(40)` DYNAMIC, split size 10. w2 takes split 0, goes silent and
/// is declared lost (split 0 requeued). w2 comes back and calls get-split before heartbeating.
/// Expected: the call is refused until w2 heartbeats (or, if granted, the lease is requeued
/// when w2 is lost again or restarts); w1 gets every other split and sees the end; a new w2
/// process that rejoins takes part normally. (Before the fix, the call leased split 0 to the
/// lost w2, which was never declared lost again, and w1 got `retry_after_ms` forever.)
#[test]
fn lost_worker_gets_no_splits_until_it_rejoins() {
    for rejoin in [false, true] {
        let (mut sim, it) = two_workers_dynamic();
        assert_eq!(starts(&get_splits(&mut sim, it, "w2", 1).splits), [0]);
        for _ in 0..15 {
            sim.now = sim.now.plus(Millis(100));
            heartbeat(&mut sim, "w1", "w1#0");
            sim.tick();
        }
        assert!(!sim.state().workers()["w2"].alive);
        // The partition heals: w2's split thread asks before its heartbeat thread does.
        let mut req = splits_req("w2", 0, 1);
        req.worker_uid = Some("w2#0".into());
        let zombie = sim.dispatch((it, req.clone()));
        let mut got = match zombie {
            Ok(r) => starts(&r.splits),
            Err(e) => {
                assert_eq!(e.code(), "FAILED_PRECONDITION", "{e}");
                Vec::new()
            }
        };
        if rejoin {
            // A new w2 process registers and reads with w1.
            heartbeat(&mut sim, "w2", "w2#1");
            loop {
                sim.now = sim.now.plus(Millis(100));
                heartbeat(&mut sim, "w1", "w1#0");
                heartbeat(&mut sim, "w2", "w2#1");
                let a = get_splits(&mut sim, it, "w2", 1);
                let b = get_splits(&mut sim, it, "w1", 1);
                got.extend(starts(&a.splits));
                got.extend(starts(&b.splits));
                if a.end_of_splits && b.end_of_splits {
                    break;
                }
                assert!(sim.now.0 < 60_000, "no end");
            }
        } else {
            // w2 dies for good.
            let (rest, ended) = drain_with_w1(&mut sim, it, 60_000);
            assert!(ended, "w1 never saw the end: {:?}", sim.state().iterations()[&it].splits);
            got.extend(rest);
        }
        got.sort_unstable();
        assert_eq!(got, [0, 10, 20, 30], "rejoin: {rejoin}");
    }
}

/// Regression (found by the simulation): a get-split reply that is lost after the request
/// was applied. The worker acknowledges explicitly the splits it received, so its retry gets
/// the same splits again instead of acknowledging splits it never saw.
#[test]
fn lost_get_split_reply_is_sent_again() {
    let mut sim = Sim::new(SimConfig::default());
    heartbeat(&mut sim, "w1", "w1#0");
    let ds = sim.register(range(20));
    let mut req = job_req(&ds, ShardingPolicy::Dynamic, None);
    req.split_size = Some(10);
    let job = sim.dispatch(req).expect("job").job_id;
    let it = sim.dispatch((job, CreateIteration::default())).expect("iteration").iteration_id;
    let ask = |sim: &mut Sim, acks: Vec<SplitId>| {
        let mut req = splits_req_ack("w1", 0, 1, acks);
        req.worker_uid = Some("w1#0".into());
        sim.dispatch((it, req.clone())).expect("get_splits")
    };
    let _lost = ask(&mut sim, vec![]);
    // The same crash, made explicit: the record is durable, the reply never left.
    sim.bounce_dispatcher();
    let mut got = Vec::new();
    let mut acks = Vec::new();
    loop {
        let r = ask(&mut sim, std::mem::take(&mut acks));
        got.extend(starts(&r.splits));
        acks = r.split_ids;
        if r.end_of_splits {
            break;
        }
    }
    got.sort_unstable();
    assert_eq!(got, [0, 10], "every split reaches the worker that asked");
}
