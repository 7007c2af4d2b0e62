//! Dispatcher core benchmarks: the sans-IO state machine driven as the gateway drives it.
//!
//! Every timed call goes through the one [`Driver`], whose sink takes the records of the call
//! (counted, not kept), since producing them is part of the cost of a request; the request is
//! an owned value, as a front that decoded it has one (the benches clone a prepared one). All
//! setup is outside the timed loops.
//!
//! * `get_split`: one DYNAMIC iteration over `range(10^12)` with split size 1 and 8 workers
//!   with tasks; each timed iteration is one `get_splits` call from the next worker in turn
//!   (acknowledging its previous splits and leasing new ones). `max_splits_1` reports
//!   transitions/s (goal: >= 1,000,000/s on one core), `max_splits_64` reports splits/s.
//! * `worker_heartbeat`: steady-state heartbeats (registered worker, reporting exactly its
//!   current tasks and its uid) from every worker in a fixed scattered order, with 100 and
//!   10,000 workers and two open iterations (one OFF, one DYNAMIC). The goal is that the cost
//!   does not grow with the number of workers. `same_worker` repeats one worker's heartbeat
//!   (its state stays cached) to separate the algorithm's growth from cache misses.
//!   `request_floor` only reads the same requests as `workers` does (address, uid, tasks,
//!   incarnation: cold memory at 10,000 workers, as the requests are set up in advance) and
//!   builds the same reply, without the dispatcher: what `workers` cannot go below.
//! * `client_heartbeat`: an iteration with 8 tasks.
//! * `journal_1M`: encode 1,000,000 typical updates into one segment, decode that segment, and
//!   replay 1,000,000 records recorded from a realistic run (decode + apply; goal < 2 s), with
//!   decode and apply also measured apart.
//!
//! `cargo bench -p shardwise-core --bench dispatch`

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::framing::{Tail, segment_header};
use shardwise_core::dispatch::journal::{decode_updates, encode_update};
use shardwise_core::dispatch::state::{SplitRef, Task};
use shardwise_core::dispatch::wire::{
    ClientHeartbeat, CreateIteration, CreateJob, GetSplits, ProcessingMode, RegisterDataset,
    SplitId, TaskProgress, WorkerHeartbeat, WorkerHeartbeatReply, WorkerUpdate,
};
use shardwise_core::dispatch::{
    ClientId, Dispatcher, DispatcherConfig, Driver, Durability, IterationId, JobId, JournalSink,
    Millis, ReleaseClient, Seq, ShardingPolicy, State, SyncSink, TargetWorkers, TaskId, Update,
    VecSink,
};

/// The dispatcher's incarnation id.
const INCARNATION: &str = "bench";

/// Records in the million-record journal benches.
const RECORDS: usize = 1_000_000;

/// The heartbeat a worker process sends: its address, its tasks and its process id (a
/// UUID-sized string, as a real worker would send on every heartbeat).
fn heartbeat(address: &str, current_tasks: Vec<TaskId>) -> WorkerHeartbeat {
    WorkerHeartbeat {
        worker_address: address.to_owned(),
        current_tasks,
        worker_uid: Some(uid_of(address)),
        incarnation: Some(INCARNATION.into()),
        ..WorkerHeartbeat::default()
    }
}

/// The worker process id of the worker at `address` (a UUID-shaped string). Updates and
/// get-split carry it too: only the worker holding a task may change it.
fn uid_of(address: &str) -> String {
    let h = address
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        (h >> 20) & 0xfff,
        h & 0xffff_ffff_ffff
    )
}

/// A Kubernetes-style worker address (about 50 bytes, like a headless-service pod name).
fn worker_address(i: usize) -> String {
    format!("shardwise-worker-{i:05}.shardwise-workers.ml.svc:5050")
}

fn range(stop: i64) -> DatasetDef {
    DatasetDef::from_json(&json!({"source": {"range": {"stop": stop}}})).expect("valid dataset")
}

/// Takes every record (as a journal would) and counts them.
#[derive(Debug, Default)]
struct Counting {
    records: usize,
}

impl JournalSink for Counting {
    type Error = std::convert::Infallible;
    fn persist(&mut self, _: Seq, records: Vec<Update>) -> Result<Durability, Self::Error> {
        self.records += black_box(&records).len();
        Ok(Durability::Now)
    }
}
impl SyncSink for Counting {}

/// The dispatcher as the benches drive it.
type D = Driver<Counting>;

/// Records the sink took since the last call, resetting the count.
fn drain(d: &mut D) -> usize {
    std::mem::take(&mut d.sink_mut().records)
}

fn new_dispatcher() -> D {
    let d = Dispatcher::new(DispatcherConfig::default(), INCARNATION.into(), Millis(0))
        .expect("valid config");
    Driver::new(d, Counting::default())
}

fn register_workers(d: &mut D, addresses: &[String]) {
    for a in addresses {
        d.call(Millis(0), heartbeat(a, vec![])).expect("registration");
    }
    drain(d);
}

fn dataset(d: &mut D, def: DatasetDef) -> String {
    let id = d
        .call(Millis(0), RegisterDataset { dataset: def, dataset_id: None, metadata: None })
        .expect("dataset")
        .dataset_id;
    drain(d);
    id
}

fn job(d: &mut D, dataset_id: &str, policy: ShardingPolicy, split_size: u64) -> JobId {
    let id = d
        .call(
            Millis(0),
            CreateJob {
                dataset_id: dataset_id.into(),
                processing_mode: ProcessingMode::Policy { sharding_policy: policy },
                job_name: None,
                num_consumers: None,
                target_workers: TargetWorkers::Auto,
                cross_trainer_cache: false,
                split_size: Some(split_size),
            },
        )
        .expect("job")
        .job_id;
    drain(d);
    id
}

/// Creates an iteration of `job` (tasks on every registered worker) and returns its client.
fn iteration(d: &mut D, now: u64, job_id: JobId) -> (IterationId, ClientId) {
    let lease = d.call(Millis(now), (job_id, CreateIteration::default())).expect("it");
    drain(d);
    (lease.iteration_id, lease.client_id)
}

fn get_splits_req(worker: &str, max_splits: u32) -> GetSplits {
    GetSplits {
        worker_address: worker.into(),
        worker_uid: Some(uid_of(worker)),
        repetition: 0,
        split_provider_index: 0,
        max_splits: Some(max_splits),
        acknowledge: None,
    }
}

/// A dispatcher with one DYNAMIC iteration over `range(10^12)`, split size 1, and 8 workers
/// with tasks, each of which already holds a lease (the steady state).
fn split_fixture(max_splits: u32) -> (D, IterationId, Vec<GetSplits>, Vec<Vec<SplitId>>) {
    let mut d = new_dispatcher();
    let workers: Vec<String> = (0..8).map(worker_address).collect();
    register_workers(&mut d, &workers);
    let ds = dataset(&mut d, range(1_000_000_000_000));
    let job_id = job(&mut d, &ds, ShardingPolicy::Dynamic, 1);
    let (it, _client) = iteration(&mut d, 1, job_id);
    let reqs: Vec<GetSplits> = workers.iter().map(|w| get_splits_req(w, max_splits)).collect();
    let mut held = Vec::new();
    for r in &reqs {
        let reply = d.call(Millis(1), (it, r.clone())).expect("get_splits");
        assert_eq!(reply.splits.len(), max_splits as usize);
        assert_eq!(drain(&mut d), 1);
        held.push(reply.split_ids);
    }
    (d, it, reqs, held)
}

fn get_split(c: &mut Criterion) {
    let mut group = c.benchmark_group("get_split");
    for max_splits in [1u32, 64] {
        group.throughput(Throughput::Elements(u64::from(max_splits)));
        // Workers that acknowledge implicitly (`acknowledge` absent: everything held is done).
        let (mut d, it, reqs, _) = split_fixture(max_splits);
        let mut i = 0usize;
        group.bench_function(BenchmarkId::new("max_splits", max_splits), |b| {
            b.iter(|| {
                let req = &reqs[i % reqs.len()];
                i += 1;
                let reply = d.call(Millis(2 + i as u64), (it, black_box(req).clone())).unwrap();
                drain(&mut d);
                reply
            })
        });
        // Workers that acknowledge explicitly, echoing the split ids of their last reply.
        let (mut d, it, mut reqs, mut held) = split_fixture(max_splits);
        let mut i = 0usize;
        group.bench_function(BenchmarkId::new("max_splits_explicit_ack", max_splits), |b| {
            b.iter(|| {
                let w = i % reqs.len();
                i += 1;
                reqs[w].acknowledge = Some(std::mem::take(&mut held[w]));
                let mut reply =
                    d.call(Millis(2 + i as u64), (it, black_box(&reqs[w]).clone())).unwrap();
                drain(&mut d);
                held[w] = std::mem::take(&mut reply.split_ids);
                reply
            })
        });
        assert!(
            held.iter().all(|h| h.len() == max_splits as usize),
            "every worker holds max_splits splits"
        );
    }
    group.finish();
}

fn worker_heartbeat(c: &mut Criterion) {
    let mut group = c.benchmark_group("worker_heartbeat");
    group.throughput(Throughput::Elements(1));
    for n in [100usize, 10_000] {
        let mut d = new_dispatcher();
        let workers: Vec<String> = (0..n).map(worker_address).collect();
        register_workers(&mut d, &workers);
        let ds = dataset(&mut d, range(1_000_000_000));
        for policy in [ShardingPolicy::Off, ShardingPolicy::Dynamic] {
            let job_id = job(&mut d, &ds, policy, 1024);
            iteration(&mut d, 1, job_id);
        }
        let reqs: Vec<WorkerHeartbeat> = workers
            .iter()
            .map(|w| {
                heartbeat(w, d.dispatcher().state().workers()[w].tasks.iter().copied().collect())
            })
            .collect();
        for r in &reqs {
            assert_eq!(r.current_tasks.len(), 2);
            let reply = d.call(Millis(2), r.clone()).expect("heartbeat");
            assert!(reply.new_tasks.is_empty() && reply.tasks_to_delete.is_empty());
        }
        assert_eq!(drain(&mut d), 0);
        let mut i = 0usize;
        group.bench_function(BenchmarkId::new("workers", n), |b| {
            b.iter(|| {
                // Heartbeats arrive in no particular order: visit the workers in a fixed
                // permutation (7919 is prime, so coprime with both sizes).
                let req = &reqs[(i * 7919) % reqs.len()];
                i += 1;
                let reply = d.call(Millis(3 + i as u64), black_box(req).clone()).unwrap();
                drain(&mut d);
                reply
            })
        });
        // The same requests in the same order, only read (no dispatcher): the part of
        // `workers` that is the benchmark's own cold memory, not the dispatcher's.
        let incarnation = d.dispatcher().incarnation().to_owned();
        group.bench_function(BenchmarkId::new("request_floor", n), |b| {
            b.iter(|| {
                let req = black_box(&reqs[(i * 7919) % reqs.len()]);
                i += 1;
                // The first and the last byte: every cache line of a short string.
                let read = |s: &str| {
                    let b = s.as_bytes();
                    let end = |x: Option<&u8>| u64::from(x.copied().unwrap_or(0));
                    b.len() as u64 ^ end(b.first()) ^ end(b.last()) << 8
                };
                let sum = read(req.worker_address.trim())
                    ^ req.worker_uid.as_deref().map_or(0, read)
                    ^ req.incarnation.as_deref().map_or(0, read)
                    ^ req.current_tasks.iter().fold(req.tags.len() as u64, |h, t| h ^ t.0);
                black_box(sum);
                drain(&mut d);
                WorkerHeartbeatReply {
                    new_tasks: Vec::new(),
                    tasks_to_delete: Vec::new(),
                    incarnation: incarnation.clone(),
                }
            })
        });
        // One worker over and over: its state stays in cache, so what remains of the growth
        // from 100 to 10,000 workers is the algorithm's, not the memory's.
        let req = &reqs[n / 2];
        group.bench_function(BenchmarkId::new("same_worker", n), |b| {
            b.iter(|| {
                i += 1;
                let reply = d.call(Millis(3 + i as u64), black_box(req).clone()).unwrap();
                drain(&mut d);
                reply
            })
        });
    }
    group.finish();
}

fn client_heartbeat(c: &mut Criterion) {
    let mut d = new_dispatcher();
    let workers: Vec<String> = (0..8).map(worker_address).collect();
    register_workers(&mut d, &workers);
    let ds = dataset(&mut d, range(1_000_000));
    let job_id = job(&mut d, &ds, ShardingPolicy::Dynamic, 1024);
    let (_, client) = iteration(&mut d, 1, job_id);
    let req = ClientHeartbeat::default();
    assert_eq!(d.call(Millis(2), (client, req)).unwrap().tasks.len(), 8);

    let mut group = c.benchmark_group("client_heartbeat");
    group.throughput(Throughput::Elements(1));
    let mut i = 0u64;
    group.bench_function("tasks_8", |b| {
        b.iter(|| {
            i += 1;
            let reply = d.call(Millis(3 + i), (black_box(client), req)).unwrap();
            drain(&mut d);
            reply
        })
    });
    group.finish();
}

/// 1,000,000 typical updates, in a fixed mix out of every 10 records: 7 `ProduceSplits` (one
/// split, Kubernetes-style worker address), 1 `FinishTask`, 1 `CreateTask`, 1 `ReleaseClient`.
fn typical_updates() -> Vec<Update> {
    let workers: Vec<String> = (0..64).map(worker_address).collect();
    (0..RECORDS)
        .map(|i| {
            let n = i as u64;
            let worker = &workers[i % workers.len()];
            let iteration_id = IterationId(IterationId::FIRST + n / 100_000);
            match i % 10 {
                7 => Update::FinishTask { task_id: TaskId(TaskId::FIRST + n / 10) },
                8 => Update::CreateTask {
                    task: Task {
                        id: TaskId(TaskId::FIRST + n / 10),
                        iteration_id,
                        worker_address: worker.clone(),
                        shard: None,
                        starting_round: 0,
                        finished: false,
                        abandoned: false,
                    },
                },
                9 => Update::ReleaseClient {
                    client_id: ClientId(ClientId::FIRST + n / 10),
                    at: Millis(1_700_000_000_000 + n),
                },
                _ => Update::ProduceSplits {
                    iteration_id,
                    worker_address: worker.clone(),
                    acked: vec![SplitRef { repetition: 0, index: n.saturating_sub(1) }],
                    assigned: vec![SplitRef { repetition: 0, index: n }],
                    advance_to: None,
                },
            }
        })
        .collect()
}

fn encode_all(updates: &[Update], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&segment_header());
    for u in updates {
        encode_update(u, out).expect("encodable");
    }
}

fn collect(d: &mut Driver<VecSink>, journal: &mut Vec<Update>) {
    journal.append(&mut d.sink_mut().records);
}

/// The first 1,000,000 journal records of a realistic run: 32 workers; epochs of 4 concurrent
/// DYNAMIC iterations over `range(10^7)` with split size 1,024 (9,766 splits each); every
/// worker asks each iteration for one split at a time, round-robin, until end of splits; then
/// it reports its tasks complete and the clients release their leases.
fn realistic_run() -> Vec<Update> {
    let d = Dispatcher::new(DispatcherConfig::default(), INCARNATION.into(), Millis(0))
        .expect("valid config");
    let mut d = Driver::new(d, VecSink::default());
    let workers: Vec<String> = (0..32).map(worker_address).collect();
    let mut journal = Vec::with_capacity(RECORDS + 10_000);
    let mut now = 0u64;
    for w in &workers {
        d.call(Millis(now), heartbeat(w, vec![])).unwrap();
    }
    collect(&mut d, &mut journal);
    let reqs: Vec<GetSplits> = workers.iter().map(|w| get_splits_req(w, 1)).collect();
    while journal.len() < RECORDS {
        let mut open = Vec::new();
        for _ in 0..4 {
            let ds = d
                .call(
                    Millis(0),
                    RegisterDataset {
                        dataset: range(10_000_000),
                        dataset_id: None,
                        metadata: Some(json!({"element_spec": "int64", "compression": "AUTO"})),
                    },
                )
                .unwrap()
                .dataset_id;
            let job_id = d
                .call(
                    Millis(0),
                    CreateJob {
                        dataset_id: ds,
                        processing_mode: ProcessingMode::Policy {
                            sharding_policy: ShardingPolicy::Dynamic,
                        },
                        job_name: None,
                        num_consumers: None,
                        target_workers: TargetWorkers::Auto,
                        cross_trainer_cache: false,
                        split_size: Some(1024),
                    },
                )
                .unwrap()
                .job_id;
            let lease = d.call(Millis(now), (job_id, CreateIteration::default()));
            let lease = lease.unwrap();
            collect(&mut d, &mut journal);
            open.push(lease);
        }
        let mut done = vec![[false; 4]; workers.len()];
        while done.iter().any(|w| w.iter().any(|d| !d)) {
            for (wi, req) in reqs.iter().enumerate() {
                for (k, lease) in open.iter().enumerate() {
                    if done[wi][k] {
                        continue;
                    }
                    now += 1;
                    let r = d.call(Millis(now), (lease.iteration_id, req.clone())).unwrap();
                    collect(&mut d, &mut journal);
                    done[wi][k] = r.end_of_splits;
                }
            }
        }
        for w in &workers {
            let updates = d.dispatcher().state().workers()[w]
                .tasks
                .iter()
                .map(|t| TaskProgress { task_id: *t, completed: true })
                .collect();
            d.call(
                Millis(now),
                WorkerUpdate { worker_address: w.clone(), worker_uid: Some(uid_of(w)), updates },
            )
            .unwrap();
        }
        for lease in &open {
            d.call(Millis(now), ReleaseClient { client_id: lease.client_id }).unwrap();
        }
        collect(&mut d, &mut journal);
    }
    journal.truncate(RECORDS);
    journal
}

fn kind(u: &Update) -> &'static str {
    match u {
        Update::ProduceSplits { .. } => "produce_splits",
        Update::CreateTask { .. } => "create_task",
        Update::FinishTask { .. } => "finish_task",
        Update::AcquireClient { .. } => "acquire_client",
        Update::ReleaseClient { .. } => "release_client",
        _ => "other",
    }
}

fn journal(c: &mut Criterion) {
    let mut group = c.benchmark_group("journal_1M");
    group.sample_size(10);
    group.throughput(Throughput::Elements(RECORDS as u64));

    let typical = typical_updates();
    let mut segment = Vec::new();
    encode_all(&typical, &mut segment);
    eprintln!(
        "journal_1M: typical segment {} bytes ({:.1} bytes/record)",
        segment.len(),
        segment.len() as f64 / RECORDS as f64
    );
    let mut out = Vec::with_capacity(segment.len());
    group.bench_function("encode_typical", |b| {
        b.iter(|| {
            encode_all(black_box(&typical), &mut out);
            black_box(out.len())
        })
    });
    group.bench_function("decode_typical", |b| {
        b.iter(|| {
            let replayed = decode_updates(black_box(&segment)).expect("clean segment");
            assert_eq!(replayed.tail, Tail::Clean);
            replayed.updates.len()
        })
    });
    drop((typical, segment, out));

    let run = realistic_run();
    let mut run_segment = Vec::new();
    encode_all(&run, &mut run_segment);
    let mut kinds = std::collections::BTreeMap::<&str, usize>::new();
    for u in &run {
        *kinds.entry(kind(u)).or_default() += 1;
    }
    assert_eq!(decode_updates(&run_segment).expect("clean segment").updates, run);
    let live = State::replay(Vec::new(), &run);
    eprintln!(
        "journal_1M: realistic run segment {} bytes ({:.1} bytes/record), {} iterations, {} \
         tasks, records {kinds:?}",
        run_segment.len(),
        run_segment.len() as f64 / RECORDS as f64,
        live.iterations().len(),
        live.tasks().len(),
    );
    group.bench_function("replay_realistic_decode_and_apply", |b| {
        b.iter(|| {
            let replayed = decode_updates(black_box(&run_segment)).expect("clean segment");
            State::replay(Vec::new(), &replayed.updates)
        })
    });
    group.bench_function("replay_realistic_decode_only", |b| {
        b.iter(|| decode_updates(black_box(&run_segment)).expect("clean segment"))
    });
    group.bench_function("replay_realistic_apply_only", |b| {
        b.iter(|| State::replay(Vec::new(), black_box(&run)))
    });
    group.bench_function("replay_realistic_dispatcher_recover", |b| {
        b.iter(|| {
            let replayed = decode_updates(black_box(&run_segment)).expect("clean segment");
            Dispatcher::recover(
                DispatcherConfig::default(),
                "bench".into(),
                Millis(0),
                &replayed.updates,
            )
            .expect("valid config")
        })
    });
    group.finish();
}

/// Shows the values a get-split reply carries, so a reader of the bench output can see the
/// shape of what was timed (printed once).
fn describe() {
    let d = Dispatcher::new(DispatcherConfig::default(), INCARNATION.into(), Millis(0))
        .expect("valid config");
    let mut d = Driver::new(d, VecSink::default());
    let w = worker_address(0);
    d.call(Millis(0), heartbeat(&w, vec![])).expect("registration");
    let ds = d
        .call(
            Millis(0),
            RegisterDataset { dataset: range(1_000_000_000_000), dataset_id: None, metadata: None },
        )
        .expect("dataset")
        .dataset_id;
    let job = CreateJob {
        dataset_id: ds,
        processing_mode: ProcessingMode::Policy { sharding_policy: ShardingPolicy::Dynamic },
        job_name: None,
        num_consumers: None,
        target_workers: TargetWorkers::Auto,
        cross_trainer_cache: false,
        split_size: Some(1),
    };
    let job_id = d.call(Millis(0), job).expect("job").job_id;
    let it = d.call(Millis(1), (job_id, CreateIteration::default())).expect("it").iteration_id;
    d.call(Millis(1), heartbeat(&w, vec![])).expect("tasks");
    d.sink_mut().records.clear();
    let reply = d.call(Millis(2), (it, get_splits_req(&w, 1))).unwrap();
    let record = d.sink_mut().records.pop().expect("one record");
    eprintln!(
        "get_split: reply splits {}, record {}",
        serde_json::to_string(&reply.splits).unwrap(),
        serde_json::to_string(&record).unwrap()
    );
}

fn dispatch(c: &mut Criterion) {
    describe();
    get_split(c);
    worker_heartbeat(c);
    client_heartbeat(c);
    journal(c);
}

criterion_group!(benches, dispatch);
criterion_main!(benches);
