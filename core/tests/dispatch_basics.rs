//! The dispatcher state machine driven directly: TensorFlow's state-machine scenarios
//! (ST-*), the request flows, and the places where Shardwise deliberately does better.

#[path = "support/replay.rs"]
mod replay;

use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::wire::{
    ClientHeartbeat, CreateIteration, CreateJob, GetSplits, ProcessingMode, RegisterDataset,
    TaskProgress, WorkerHeartbeat, WorkerUpdate,
};
use shardwise_core::dispatch::{
    ClientId, DeleteDataset, DispatchError, Dispatcher, DispatcherConfig, Driver, Event, GetJob,
    GetStatus, Millis, ReleaseClient, ShardingPolicy, State, TargetWorkers, TaskId, Update,
    VecSink,
};
use shardwise_core::position::ReadPosition;

fn def(v: Value) -> DatasetDef {
    DatasetDef::from_json(&v).unwrap()
}

fn range(n: i64) -> DatasetDef {
    def(json!({"source": {"range": {"stop": n}}}))
}

fn dispatcher(config: DispatcherConfig) -> Dispatcher {
    Dispatcher::new(config, "inc-1".into(), Millis(0)).unwrap()
}

/// Drains the journal, checking after every step that replay equals the live state.
struct Harness {
    d: Driver<VecSink>,
    journal: Vec<Update>,
}

impl Harness {
    fn new(config: DispatcherConfig) -> Self {
        Harness { d: Driver::new(dispatcher(config), VecSink::default()), journal: Vec::new() }
    }
    fn sync(&mut self) {
        replay::take_records(self.d.sink_mut(), &mut self.journal);
        let addresses = self.d.dispatcher().config().worker_addresses.clone();
        replay::check_replay("", addresses, &self.journal, self.d.dispatcher().state());
    }
    fn dataset(&mut self, d: DatasetDef) -> String {
        let id = self
            .d
            .call(Millis(0), RegisterDataset { dataset: d, dataset_id: None, metadata: None })
            .unwrap()
            .dataset_id;
        self.sync();
        id
    }
    fn job(
        &mut self,
        dataset_id: &str,
        policy: ShardingPolicy,
        name: Option<&str>,
    ) -> shardwise_core::dispatch::JobId {
        let id = self
            .d
            .call(
                Millis(0),
                CreateJob {
                    dataset_id: dataset_id.into(),
                    processing_mode: ProcessingMode::Policy { sharding_policy: policy },
                    job_name: name.map(str::to_owned),
                    num_consumers: None,
                    target_workers: TargetWorkers::Auto,
                    cross_trainer_cache: false,
                    split_size: Some(10),
                },
            )
            .unwrap()
            .job_id;
        self.sync();
        id
    }
    fn heartbeat(
        &mut self,
        now: u64,
        worker: &str,
        current: &[TaskId],
    ) -> shardwise_core::dispatch::wire::WorkerHeartbeatReply {
        let r = self
            .d
            .call(
                Millis(now),
                WorkerHeartbeat {
                    worker_address: worker.into(),
                    current_tasks: current.to_vec(),
                    tags: vec![],
                    worker_uid: None,
                    incarnation: None,
                    tensorflow: None,
                },
            )
            .unwrap();
        self.sync();
        r
    }
}

#[test]
fn st_01_generated_dataset_ids_start_at_1000() {
    let mut h = Harness::new(DispatcherConfig::default());
    assert_eq!(h.d.dispatcher().state().peek_dataset_id(), "1000");
    assert_eq!(h.d.dispatcher().state().peek_dataset_id(), "1000");
    assert_eq!(h.dataset(range(3)), "1000");
    assert_eq!(h.d.dispatcher().state().peek_dataset_id(), "1001");
    // An explicit decimal id is skipped by the generator.
    h.d.call(
        Millis(0),
        RegisterDataset { dataset: range(4), dataset_id: Some("1001".into()), metadata: None },
    )
    .unwrap();
    h.sync();
    assert_eq!(h.dataset(range(5)), "1002");
}

#[test]
fn st_02_st_03_explicit_ids_and_metadata() {
    let mut h = Harness::new(DispatcherConfig::default());
    let meta = json!({"compression": "SNAPPY", "element_spec": "encoded_element_spec"});
    let req = RegisterDataset {
        dataset: range(3),
        dataset_id: Some("dataset_id1".into()),
        metadata: Some(meta.clone()),
    };
    assert_eq!(h.d.call(Millis(0), req.clone()).unwrap().dataset_id, "dataset_id1");
    h.sync();
    assert_eq!(h.d.dispatcher().state().datasets()["dataset_id1"].metadata, meta);
    // Get-or-register: the same again is the same id, nothing journaled.
    assert_eq!(h.d.call(Millis(0), req.clone()).unwrap().dataset_id, "dataset_id1");
    assert!(h.d.sink().records.is_empty());
    let other = RegisterDataset { dataset: range(4), ..req.clone() };
    let e = h.d.call(Millis(0), other.clone()).unwrap_err();
    assert!(e.detail().contains("Datasets with the same ID should have the same structure"), "{e}");
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    let e =
        h.d.call(
            Millis(0),
            CreateJob {
                dataset_id: "missing_dataset_id".into(),
                processing_mode: ProcessingMode::Policy { sharding_policy: ShardingPolicy::Off },
                job_name: None,
                num_consumers: None,
                target_workers: TargetWorkers::Auto,
                cross_trainer_cache: false,
                split_size: None,
            },
        )
        .unwrap_err();
    assert_eq!(e, DispatchError::NotFound("Dataset id missing_dataset_id not found".into()));
}

#[test]
fn st_04_st_11_worker_registration() {
    let mut h = Harness::new(DispatcherConfig::default());
    assert!(h.d.dispatcher().state().workers().is_empty());
    let r = h.heartbeat(1, "address_1", &[]);
    assert!(r.new_tasks.is_empty() && r.tasks_to_delete.is_empty());
    assert_eq!(r.incarnation, "inc-1");
    h.heartbeat(2, "address_2", &[]);
    assert_eq!(h.d.dispatcher().state().workers().len(), 2);
    assert!(h.d.dispatcher().state().workers()["address_1"].tasks.is_empty());
}

#[test]
fn st_05_fixed_worker_list() {
    let config = DispatcherConfig {
        worker_addresses: vec![
            "/worker/task/0".into(),
            "/worker/task/1".into(),
            "localhost:%port%".into(),
        ],
        ..DispatcherConfig::default()
    };
    let mut h = Harness::new(config);
    h.heartbeat(1, "/worker/task/0:20000", &[]);
    h.heartbeat(1, "localhost:20001", &[]);
    let e =
        h.d.call(
            Millis(1),
            WorkerHeartbeat { worker_address: "localhost:20002".into(), ..Default::default() },
        )
        .unwrap_err();
    assert_eq!(e.code(), "FAILED_PRECONDITION");
    assert!(e.detail().contains("other workers are already running at the configured host"), "{e}");
    let e =
        h.d.call(
            Millis(1),
            WorkerHeartbeat { worker_address: "elsewhere:1".into(), ..Default::default() },
        )
        .unwrap_err();
    assert!(e.detail().contains("The worker's address is not configured"), "{e}");
    assert_eq!(
        h.d.dispatcher().state().worker_list().entries(),
        ["/worker/task/0:20000", "/worker/task/1", "localhost:20001"]
    );
}

#[test]
fn st_06_journal_records_without_a_known_type_are_refused() {
    assert!(serde_json::from_str::<Update>(r#"{"type": "bogus"}"#).is_err());
    assert!(serde_json::from_str::<Update>(r#"{}"#).is_err());
}

#[test]
fn st_07_st_08_jobs() {
    let mut h = Harness::new(DispatcherConfig::default());
    let ds = h.dataset(range(10));
    let id = h.job(&ds, ShardingPolicy::Off, Some("test_name"));
    assert_eq!(id.0, 5000);
    let job = h.d.call(Millis(0), GetJob { job_id: id }).unwrap();
    assert_eq!(
        (job.job_name.as_str(), job.dataset_id.as_str(), job.cross_trainer_cache),
        ("test_name", ds.as_str(), false)
    );
    assert_eq!(h.d.dispatcher().state().next_job_id(), 5001);
    // Same name, same parameters: the same job.
    assert_eq!(h.job(&ds, ShardingPolicy::Off, Some("test_name")), id);
    // Same name, other parameters: refused with the differences listed.
    let e =
        h.d.call(
            Millis(0),
            CreateJob {
                dataset_id: ds.clone(),
                processing_mode: ProcessingMode::Policy {
                    sharding_policy: ShardingPolicy::Dynamic,
                },
                job_name: Some("test_name".into()),
                num_consumers: None,
                target_workers: TargetWorkers::Auto,
                cross_trainer_cache: true,
                split_size: Some(10),
            },
        )
        .unwrap_err();
    let msg = e.detail();
    assert!(msg.contains("Tried to create job with name test_name, but found an existing job with different parameters: "), "{msg}");
    assert!(msg.contains("Existing processing mode: <OFF>; got <DYNAMIC>."), "{msg}");
    assert!(msg.contains("Existing cross-trainer cache: <disabled>; got <enabled>."), "{msg}");
    // Beyond TensorFlow: reusing a name with another dataset is an error, not a silent join.
    let ds2 = h.dataset(range(5));
    let e =
        h.d.call(
            Millis(0),
            CreateJob {
                dataset_id: ds2,
                processing_mode: ProcessingMode::Policy { sharding_policy: ShardingPolicy::Off },
                job_name: Some("test_name".into()),
                num_consumers: None,
                target_workers: TargetWorkers::Auto,
                cross_trainer_cache: false,
                split_size: Some(10),
            },
        )
        .unwrap_err();
    assert!(e.detail().contains("Existing dataset: <1000>; got <1001>."), "{e}");
}

#[test]
fn st_09_st_13_tasks_and_finishing() {
    let mut h = Harness::new(DispatcherConfig::default());
    h.heartbeat(0, "w1", &[]);
    h.heartbeat(0, "w2", &[]);
    let ds = h.dataset(range(10));
    let job = h.job(&ds, ShardingPolicy::Off, None);
    let lease = h.d.call(Millis(1), (job, CreateIteration::default())).unwrap();
    h.sync();
    let it = &h.d.dispatcher().state().iterations()[&lease.iteration_id];
    assert_eq!(it.tasks.len(), 2);
    assert_eq!(it.num_clients, 1);
    // Workers learn their tasks from heartbeats.
    let r1 = h.heartbeat(2, "w1", &[]);
    assert_eq!(r1.new_tasks.len(), 1);
    let t1 = r1.new_tasks[0].task_id;
    assert_eq!(r1.new_tasks[0].dataset, range(10));
    let t2 = h.heartbeat(2, "w2", &[]).new_tasks[0].task_id;
    // Finishing one task leaves the iteration open; finishing both closes it.
    h.d.call(
        Millis(3),
        WorkerUpdate {
            worker_address: "w1".into(),
            worker_uid: None,
            updates: vec![TaskProgress { task_id: t1, completed: true }],
        },
    )
    .unwrap();
    h.sync();
    assert!(!h.d.dispatcher().state().iterations()[&lease.iteration_id].finished);
    // An unknown id does not fail the update (TensorFlow #52252) and is reported.
    let r =
        h.d.call(
            Millis(3),
            WorkerUpdate {
                worker_address: "w2".into(),
                worker_uid: None,
                updates: vec![
                    TaskProgress { task_id: TaskId(99), completed: true },
                    TaskProgress { task_id: t2, completed: true },
                ],
            },
        )
        .unwrap();
    h.sync();
    assert_eq!(r.unknown_tasks, vec![TaskId(99)]);
    assert!(h.d.dispatcher().state().iterations()[&lease.iteration_id].finished);
    assert!(matches!(h.d.poll_event(), Some(Event::IterationFinished { .. })));
    // A finished task is deleted on the next heartbeat.
    assert_eq!(h.heartbeat(4, "w1", &[t1]).tasks_to_delete, vec![t1]);
    let hb = h.d.call(Millis(5), (lease.client_id, ClientHeartbeat::default())).unwrap();
    assert!(hb.iteration_finished);
    assert_eq!(hb.tasks.len(), 2);
}

#[test]
fn st_14_st_15_client_leases() {
    let mut h = Harness::new(DispatcherConfig::default());
    let ds = h.dataset(range(10));
    let job = h.job(&ds, ShardingPolicy::Off, Some("j"));
    let a = h.d.call(Millis(1), (job, CreateIteration::default())).unwrap();
    let b = h.d.call(Millis(1), (job, CreateIteration::default())).unwrap();
    h.sync();
    assert_eq!(a.iteration_id, b.iteration_id);
    assert_eq!((a.client_id, b.client_id), (ClientId(3000), ClientId(3001)));
    assert_eq!(h.d.dispatcher().state().iterations()[&a.iteration_id].num_clients, 2);
    h.d.call(Millis(100), ReleaseClient { client_id: b.client_id }).unwrap();
    h.sync();
    let it = &h.d.dispatcher().state().iterations()[&a.iteration_id];
    assert_eq!((it.num_clients, it.last_release), (1, Some(Millis(100))));
    let e = h.d.call(Millis(101), ReleaseClient { client_id: b.client_id }).unwrap_err();
    assert_eq!(e.detail(), "Iteration client id not found: 3001");
    let e = h.d.call(Millis(101), (b.client_id, ClientHeartbeat::default())).unwrap_err();
    assert!(e.detail().starts_with("Unknown iteration client id 3001. The dispatcher is not configured to be fault tolerant"), "{e}");
}

/// Reads an iteration's DYNAMIC splits with the given workers until every worker sees the
/// end; returns the split values each worker got.
fn drain_splits(
    h: &mut Harness,
    now: u64,
    iteration: shardwise_core::dispatch::IterationId,
    workers: &[&str],
    per_call: u32,
) -> Vec<Value> {
    let mut got = Vec::new();
    let mut done = vec![false; workers.len()];
    let mut rounds = 0;
    while !done.iter().all(|d| *d) {
        rounds += 1;
        assert!(rounds < 10_000, "no progress");
        for (i, w) in workers.iter().enumerate() {
            if done[i] {
                continue;
            }
            let r =
                h.d.call(
                    Millis(now),
                    (
                        iteration,
                        GetSplits {
                            worker_address: (*w).into(),
                            worker_uid: None,
                            repetition: 0,
                            split_provider_index: 0,
                            max_splits: Some(per_call),
                            acknowledge: None,
                        },
                    ),
                )
                .unwrap();
            h.sync();
            got.extend(r.splits.into_iter().map(Value::from));
            done[i] = r.end_of_splits;
        }
    }
    got
}

#[test]
fn dynamic_splits_are_handed_out_exactly_once() {
    let mut h = Harness::new(DispatcherConfig::default());
    for w in ["w1", "w2", "w3"] {
        h.heartbeat(0, w, &[]);
    }
    let ds = h.dataset(range(95));
    let job = h.job(&ds, ShardingPolicy::Dynamic, None);
    let lease = h.d.call(Millis(1), (job, CreateIteration::default())).unwrap();
    h.sync();
    let splits = drain_splits(&mut h, 2, lease.iteration_id, &["w1", "w2", "w3"], 2);
    let mut starts: Vec<i64> = splits.iter().map(|s| s["start"].as_i64().unwrap()).collect();
    starts.sort_unstable();
    assert_eq!(starts, (0..10).map(|i| i * 10).collect::<Vec<_>>());
    assert_eq!(splits.iter().find(|s| s["start"] == 90).unwrap()["stop"], 95);
    // Past the end of the repetition: end_of_splits without consuming anything.
    let r =
        h.d.call(
            Millis(3),
            (
                lease.iteration_id,
                GetSplits {
                    worker_address: "w1".into(),
                    worker_uid: None,
                    repetition: 0,
                    split_provider_index: 0,
                    max_splits: None,
                    acknowledge: None,
                },
            ),
        )
        .unwrap();
    assert!(r.end_of_splits && r.splits.is_empty());
    // Errors.
    let bad =
        |h: &mut Harness, req: GetSplits, it| h.d.call(Millis(3), (it, req.clone())).unwrap_err();
    let e = bad(
        &mut h,
        GetSplits {
            worker_address: "w1".into(),
            worker_uid: None,
            repetition: 0,
            split_provider_index: 1,
            max_splits: None,
            acknowledge: None,
        },
        lease.iteration_id,
    );
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    let e = bad(
        &mut h,
        GetSplits {
            worker_address: "nobody".into(),
            worker_uid: None,
            repetition: 0,
            split_provider_index: 0,
            max_splits: None,
            acknowledge: None,
        },
        lease.iteration_id,
    );
    assert_eq!(e.code(), "NOT_FOUND");
    let e = bad(
        &mut h,
        GetSplits {
            worker_address: "w1".into(),
            worker_uid: None,
            repetition: 0,
            split_provider_index: 0,
            max_splits: Some(0),
            acknowledge: None,
        },
        lease.iteration_id,
    );
    assert_eq!(e.code(), "INVALID_ARGUMENT");
}

#[test]
fn a_lost_workers_splits_are_handed_out_again() {
    let config = DispatcherConfig { worker_timeout: Millis(1_000), ..DispatcherConfig::default() };
    let mut h = Harness::new(config);
    h.heartbeat(0, "w1", &[]);
    h.heartbeat(0, "w2", &[]);
    let ds = h.dataset(range(40));
    let job = h.job(&ds, ShardingPolicy::Dynamic, None);
    let lease = h.d.call(Millis(1), (job, CreateIteration::default())).unwrap();
    h.sync();
    let req = |w: &str, n| GetSplits {
        worker_address: w.into(),
        worker_uid: None,
        repetition: 0,
        split_provider_index: 0,
        max_splits: Some(n),
        acknowledge: None,
    };
    // w2 takes two splits and dies with them.
    let lost = h.d.call(Millis(10), (lease.iteration_id, req("w2", 2))).unwrap().splits;
    h.sync();
    assert_eq!(lost.len(), 2);
    // w1 takes the rest; the repetition is not over while w2's splits are in flight.
    let mut got: Vec<Value> =
        h.d.call(Millis(10), (lease.iteration_id, req("w1", 2)))
            .unwrap()
            .splits
            .into_iter()
            .map(Value::from)
            .collect();
    h.sync();
    let r = h.d.call(Millis(10), (lease.iteration_id, req("w1", 2))).unwrap();
    h.sync();
    assert!(r.splits.is_empty() && !r.end_of_splits && r.retry_after_ms.is_some());
    // The one retry interval, which the worker also waits when a reply names none.
    assert_eq!(r.retry_after_ms, Some(shardwise_core::dispatch::wire::SPLIT_RETRY_AFTER_MS));
    // w1 keeps heartbeating, w2 does not: w2 is lost and its splits go to w1.
    h.heartbeat(900, "w1", &[]);
    h.d.handle_timeout(Millis(1_500));
    h.sync();
    assert!(!h.d.dispatcher().state().workers()["w2"].alive);
    assert!(matches!(h.d.poll_event(), Some(Event::WorkerLost { address }) if address == "w2"));
    got.extend(drain_splits(&mut h, 1_600, lease.iteration_id, &["w1"], 2));
    let mut starts: Vec<i64> = got.iter().map(|s| s["start"].as_i64().unwrap()).collect();
    starts.sort_unstable();
    assert_eq!(starts, vec![0, 10, 20, 30], "every split handed out once to a live worker");
    // The iteration finishes when w1 finishes: the lost worker's task no longer blocks.
    let t1 = h.d.dispatcher().state().workers()["w1"].tasks.iter().next().copied().unwrap();
    h.d.call(
        Millis(1_700),
        WorkerUpdate {
            worker_address: "w1".into(),
            worker_uid: None,
            updates: vec![TaskProgress { task_id: t1, completed: true }],
        },
    )
    .unwrap();
    h.sync();
    assert!(h.d.dispatcher().state().iterations()[&lease.iteration_id].finished);
}

#[test]
fn silent_clients_are_released_and_idle_iterations_collected() {
    let config = DispatcherConfig {
        client_timeout: Millis(100),
        client_first_heartbeat_grace: Millis(1_000),
        job_gc_check_interval: Millis(10),
        job_gc_timeout: Some(Millis(50)),
        ..DispatcherConfig::default()
    };
    let mut h = Harness::new(config);
    h.heartbeat(0, "w1", &[]);
    let ds = h.dataset(range(10));
    let job = h.job(&ds, ShardingPolicy::Off, Some("j"));
    let lease = h.d.call(Millis(0), (job, CreateIteration::default())).unwrap();
    h.sync();
    // Within the first-heartbeat grace nothing happens (SV-06).
    h.d.handle_timeout(Millis(500));
    h.sync();
    assert_eq!(h.d.dispatcher().state().iterations()[&lease.iteration_id].num_clients, 1);
    // One heartbeat, then silence: released after the client timeout, collected after the GC
    // timeout, and the worker is told to drop its task.
    h.d.call(Millis(600), (lease.client_id, ClientHeartbeat::default())).unwrap();
    h.heartbeat(600, "w1", &[]);
    h.d.handle_timeout(Millis(710));
    h.sync();
    assert_eq!(h.d.dispatcher().state().iterations()[&lease.iteration_id].num_clients, 0);
    h.d.handle_timeout(Millis(770));
    h.sync();
    let state = h.d.dispatcher().state();
    assert!(!state.iterations().contains_key(&lease.iteration_id), "collected means freed");
    assert!(state.tasks().is_empty() && state.clients().is_empty());
    let task = TaskId(TaskId::FIRST);
    assert_eq!(h.heartbeat(780, "w1", &[task]).tasks_to_delete, vec![task]);
    // The same key creates a fresh iteration.
    let again = h.d.call(Millis(800), (job, CreateIteration::default())).unwrap();
    h.sync();
    assert_ne!(again.iteration_id, lease.iteration_id);
    // Timers run every check interval after the last run.
    assert_eq!(h.d.poll_timeout(), Millis(780));
}

#[test]
fn config_is_validated() {
    for bad in [
        DispatcherConfig { worker_timeout: Millis(0), ..DispatcherConfig::default() },
        DispatcherConfig { job_gc_timeout: Some(Millis(0)), ..DispatcherConfig::default() },
        DispatcherConfig { worker_addresses: vec![" ".into()], ..DispatcherConfig::default() },
    ] {
        assert_eq!(
            Dispatcher::new(bad, "i".into(), Millis(0)).unwrap_err().code(),
            "INVALID_ARGUMENT"
        );
    }
}

#[test]
fn a_restarted_worker_process_gives_back_its_splits_at_once() {
    let mut h = Harness::new(DispatcherConfig::default());
    let hb = |h: &mut Harness, uid: &str, current: Vec<TaskId>| {
        let r =
            h.d.call(
                Millis(5),
                WorkerHeartbeat {
                    worker_address: "w1".into(),
                    current_tasks: current,
                    tags: vec![],
                    worker_uid: Some(uid.into()),
                    incarnation: None,
                    tensorflow: None,
                },
            )
            .unwrap();
        h.sync();
        r
    };
    hb(&mut h, "process-a", vec![]);
    let ds = h.dataset(range(30));
    let job = h.job(&ds, ShardingPolicy::Dynamic, None);
    let lease = h.d.call(Millis(1), (job, CreateIteration::default())).unwrap();
    h.sync();
    let task = hb(&mut h, "process-a", vec![]).new_tasks[0].task_id;
    // Each process asks with its own uid.
    let req = |uid: &str| GetSplits {
        worker_address: "w1".into(),
        worker_uid: Some(uid.into()),
        repetition: 0,
        split_provider_index: 0,
        max_splits: Some(2),
        acknowledge: None,
    };
    let first = h.d.call(Millis(6), (lease.iteration_id, req("process-a"))).unwrap().splits;
    h.sync();
    assert_eq!(first.len(), 2);
    // Same uid: nothing changes. New uid: the process restarted; its task comes back and
    // the two splits it held are handed out again.
    assert!(hb(&mut h, "process-a", vec![task]).new_tasks.is_empty());
    let r = hb(&mut h, "process-b", vec![]);
    assert_eq!(r.new_tasks.len(), 1);
    let again = h.d.call(Millis(7), (lease.iteration_id, req("process-b"))).unwrap().splits;
    h.sync();
    assert_eq!(again, first);
}

#[test]
fn snapshot_compacts_the_journal() {
    let mut h = Harness::new(DispatcherConfig::default());
    h.heartbeat(0, "w1", &[]);
    let ds = h.dataset(range(30));
    let job = h.job(&ds, ShardingPolicy::Dynamic, Some("j"));
    let lease = h.d.call(Millis(1), (job, CreateIteration::default())).unwrap();
    h.sync();
    let snapshot = h.d.dispatcher().snapshot();
    // Round trip through JSON as a journal record would.
    let snapshot: Update =
        serde_json::from_str(&serde_json::to_string(&snapshot).unwrap()).unwrap();
    let before = h.journal.len();
    h.d.call(
        Millis(2),
        (
            lease.iteration_id,
            GetSplits {
                worker_address: "w1".into(),
                worker_uid: None,
                repetition: 0,
                split_provider_index: 0,
                max_splits: Some(3),
                acknowledge: None,
            },
        ),
    )
    .unwrap();
    h.sync();
    let mut compacted = vec![snapshot];
    compacted.extend(h.journal[before..].iter().cloned());
    assert_eq!(&State::replay(vec![], &compacted), h.d.dispatcher().state());
    // Indexes rebuilt: the job is found by name again.
    let d2 =
        Dispatcher::recover(DispatcherConfig::default(), "inc-2".into(), Millis(3), &compacted)
            .unwrap();
    assert_eq!(d2.state().jobs_by_name().get("j"), Some(&job));
}

/// A client that sends back the `tasks_version` it kept is told "unchanged" instead of being
/// sent the same task list again (megabytes with thousands of workers); any change to the
/// state sends the whole list, and a recovered dispatcher has the same version.
#[test]
fn client_heartbeats_leave_out_an_unchanged_task_list() {
    let mut h = Harness::new(DispatcherConfig::default());
    h.heartbeat(1, "w1", &[]);
    let ds = h.dataset(range(10));
    let job = h.job(&ds, ShardingPolicy::Off, None);
    let lease = h.d.call(Millis(1), (job, CreateIteration::default())).unwrap();
    h.sync();
    let hb = |h: &mut Harness, known: Option<u64>| {
        let req = ClientHeartbeat { known_tasks_version: known, ..ClientHeartbeat::default() };
        let r = h.d.call(Millis(2), (lease.client_id, req)).unwrap();
        h.sync();
        r
    };
    let full = hb(&mut h, None);
    assert_eq!((full.tasks.len(), full.tasks_unchanged), (1, false));
    let same = hb(&mut h, Some(full.tasks_version));
    assert!(same.tasks_unchanged);
    assert!(same.tasks.is_empty());
    assert_eq!(same.tasks_version, full.tasks_version);
    // A stale or foreign version gets the whole list.
    let other = hb(&mut h, Some(full.tasks_version + 7));
    assert_eq!((other.tasks.len(), other.tasks_unchanged), (1, false));
    // A worker joins: its new task changes the list.
    h.heartbeat(3, "w2", &[]);
    let grown = hb(&mut h, Some(full.tasks_version));
    assert!(!grown.tasks_unchanged);
    assert_eq!(grown.tasks.len(), 2);
    assert!(grown.tasks_version > full.tasks_version);
    // Recovery replays to the same version: a client carries on without a full list.
    let recovered =
        Dispatcher::recover(DispatcherConfig::default(), "inc-1".into(), Millis(4), &h.journal)
            .unwrap();
    assert_eq!(recovered.state().version(), h.d.dispatcher().state().version());
    assert!(hb(&mut h, Some(grown.tasks_version)).tasks_unchanged);
}

/// A standby applies the leader's records as they come, one by one (snapshots included), and
/// takes over from that state: the same dispatcher as a replay of the journal.
#[test]
fn a_standby_resumes_from_the_state_it_applied() {
    let mut h = Harness::new(DispatcherConfig::default());
    h.heartbeat(1, "w1", &[]);
    let ds = h.dataset(range(10));
    let job = h.job(&ds, ShardingPolicy::Off, Some("j"));
    h.sync();
    let snapshot = h.d.dispatcher().snapshot();
    let before = h.journal.len();
    let lease = h.d.call(Millis(2), (job, CreateIteration::default())).unwrap();
    h.sync();
    let mut standby = State::new(vec![]);
    for u in std::iter::once(&snapshot).chain(&h.journal[before..]) {
        shardwise_core::dispatch::apply(&mut standby, u);
    }
    let replayed = State::replay(vec![], &h.journal);
    assert_eq!(standby, replayed);
    let d = Dispatcher::resume(DispatcherConfig::default(), "unused".into(), Millis(3), standby)
        .unwrap();
    assert_eq!(d.state(), h.d.dispatcher().state());
    assert_eq!(d.incarnation(), h.d.dispatcher().incarnation(), "the journal's incarnation");
    assert_eq!(d.state().jobs_by_name().get("j"), Some(&job));
    assert!(d.state().clients().contains_key(&lease.client_id));
}

/// Drains an iteration's splits like [`drain_splits`], returning where each lies in the source.
fn drain_positions(
    h: &mut Harness,
    now: u64,
    iteration: shardwise_core::dispatch::IterationId,
    workers: &[&str],
) -> Vec<(Value, shardwise_core::position::SplitPositions)> {
    let mut got = Vec::new();
    let mut done = vec![false; workers.len()];
    while !done.iter().all(|d| *d) {
        assert!(got.len() < 100_000, "no progress");
        for (i, w) in workers.iter().enumerate() {
            if done[i] {
                continue;
            }
            let req = GetSplits {
                worker_address: (*w).into(),
                worker_uid: None,
                repetition: 0,
                split_provider_index: 0,
                max_splits: Some(3),
                acknowledge: None,
            };
            let r = h.d.call(Millis(now), (iteration, req)).unwrap();
            h.sync();
            assert_eq!(r.positions.len(), r.splits.len());
            got.extend(r.splits.into_iter().map(Value::from).zip(r.positions));
            done[i] = r.end_of_splits;
        }
    }
    got
}

fn position(v: Value) -> shardwise_core::position::ReadPosition {
    serde_json::from_value(v).unwrap()
}

#[test]
fn every_split_says_where_it_lies_in_the_source() {
    let mut h = Harness::new(DispatcherConfig::default());
    h.heartbeat(0, "w1", &[]);
    let ds = h.dataset(range(25));
    let job = h.job(&ds, ShardingPolicy::Dynamic, None);
    let lease = h.d.call(Millis(1), (job, CreateIteration::default())).unwrap();
    h.sync();
    let got = drain_positions(&mut h, 2, lease.iteration_id, &["w1"]);
    let ranges: Vec<(u64, u64, u64)> = got.iter().map(|(_, p)| (p.start, p.stop, p.skip)).collect();
    assert_eq!(ranges, vec![(0, 10, 0), (10, 20, 0), (20, 25, 0)]);
    for (split, p) in &got {
        assert_eq!(split, &json!({"start": p.start, "stop": p.stop}));
    }
}

#[test]
fn a_resumed_iteration_hands_out_only_what_the_position_left() {
    let mut h = Harness::new(DispatcherConfig::default());
    for w in ["w1", "w2", "w3"] {
        h.heartbeat(0, w, &[]);
    }
    let ds = h.dataset(range(95));
    let job = h.job(&ds, ShardingPolicy::Dynamic, None);
    let p = position(json!({
        "dataset_id": ds, "repetition": 0,
        "done": [{"start": 0, "stop": 30}, {"start": 60, "stop": 70}],
        "partial": [
            {"split": {"start": 30, "stop": 40}, "consumed": 5},
            {"split": {"start": 50, "stop": 60}, "consumed": 0}
        ]
    }));
    let req = CreateIteration { resume_from: Some(p.clone()), ..CreateIteration::default() };
    let lease = h.d.call(Millis(1), (job, req.clone())).unwrap();
    h.sync();
    // A second consumer resuming from the same position shares the iteration.
    let again = h.d.call(Millis(1), (job, req)).unwrap();
    h.sync();
    assert_eq!(again.iteration_id, lease.iteration_id);
    // From another position it is refused: the iteration is under way.
    let other = CreateIteration {
        resume_from: Some(ReadPosition { done: vec![], ..p.clone() }),
        ..CreateIteration::default()
    };
    let e = h.d.call(Millis(1), (job, other)).unwrap_err();
    assert_eq!(e.code(), shardwise_core::Code::FailedPrecondition, "{e}");
    assert!(e.detail().contains("another position"), "{e}");

    let got = drain_positions(&mut h, 2, lease.iteration_id, &["w1", "w2", "w3"]);
    let mut left: Vec<u64> = got.iter().flat_map(|(_, p)| p.start..p.stop).collect();
    left.sort_unstable();
    let want: Vec<u64> = (35..60).chain(70..95).collect();
    assert_eq!(left, want, "each position not consumed, once");
    assert!(got.iter().all(|(_, p)| p.skip == 0 && p.stop - p.start <= 10));
    for (split, p) in &got {
        assert_eq!(split, &json!({"start": p.start, "stop": p.stop}));
    }
}

#[test]
fn a_files_split_resumed_part_way_tells_the_worker_what_to_skip() {
    let mut h = Harness::new(DispatcherConfig::default());
    h.heartbeat(0, "w1", &[]);
    let ds = h.dataset(def(json!({"source": {"files": {
        "paths": ["/d/a", "/d/b", "/d/c"], "format": "lines"}}})));
    let job = h.job(&ds, ShardingPolicy::Dynamic, None);
    let p = position(json!({
        "dataset_id": ds, "repetition": 0, "done": [{"start": 0, "stop": 1}],
        "partial": [{"split": {"start": 1, "stop": 2}, "consumed": 7}]
    }));
    let req = CreateIteration { resume_from: Some(p), ..CreateIteration::default() };
    let lease = h.d.call(Millis(1), (job, req)).unwrap();
    h.sync();
    let got = drain_positions(&mut h, 2, lease.iteration_id, &["w1"]);
    let got: Vec<(Value, u64, u64, u64)> =
        got.into_iter().map(|(v, p)| (v, p.start, p.stop, p.skip)).collect();
    assert_eq!(got, vec![(json!("/d/b"), 1, 2, 7), (json!("/d/c"), 2, 3, 0)]);
}

#[test]
fn positions_that_cannot_be_resumed_are_refused_with_the_reason() {
    use shardwise_core::Code;
    let mut h = Harness::new(DispatcherConfig::default());
    h.heartbeat(0, "w1", &[]);
    let ds = h.dataset(range(50));
    let other = h.dataset(range(51));
    let shuffled = h.dataset(def(json!({"source": {"range": {"stop": 50}},
        "transforms": [{"shuffle": {"buffer": 10, "seed": 1}}]})));
    let dynamic = h.job(&ds, ShardingPolicy::Dynamic, None);
    let static_job = h.job(&ds, ShardingPolicy::Off, None);
    let shuffled_job = h.job(&shuffled, ShardingPolicy::Dynamic, None);
    let at = |ds: &str, v: Value| {
        let mut p = position(v);
        p.dataset_id = ds.to_owned();
        CreateIteration { resume_from: Some(p), ..CreateIteration::default() }
    };
    let empty = json!({"dataset_id": "", "repetition": 0, "done": [], "partial": []});
    let mut refuse = |job, req: CreateIteration, code: Code, words: &str| {
        let e = h.d.call(Millis(1), (job, req)).unwrap_err();
        assert_eq!(e.code(), code, "{e}");
        assert!(e.detail().contains(words), "{words:?} not in {e}");
    };
    refuse(static_job, at(&ds, empty.clone()), Code::FailedPrecondition, "DYNAMIC");
    refuse(dynamic, at(&other, empty.clone()), Code::FailedPrecondition, "is of dataset");
    refuse(shuffled_job, at(&shuffled, empty.clone()), Code::FailedPrecondition, "`shuffle`");
    let mut rep = at(&ds, empty.clone());
    rep.repetition = 1;
    refuse(dynamic, rep, Code::InvalidArgument, "repetition 0");
    let outside = json!({"dataset_id": "", "repetition": 0,
        "done": [{"start": 40, "stop": 51}], "partial": []});
    refuse(dynamic, at(&ds, outside), Code::InvalidArgument, "50 positions");
    let too_many = json!({"dataset_id": "", "repetition": 0, "done": [],
        "partial": [{"split": {"start": 0, "stop": 10}, "consumed": 11}]});
    refuse(dynamic, at(&ds, too_many), Code::InvalidArgument, "not 11 consumed");
    let coordinated =
        h.d.call(
            Millis(0),
            CreateJob {
                dataset_id: ds.clone(),
                processing_mode: ProcessingMode::Policy {
                    sharding_policy: ShardingPolicy::Dynamic,
                },
                job_name: Some("lockstep".into()),
                num_consumers: Some(2),
                target_workers: TargetWorkers::Auto,
                cross_trainer_cache: false,
                split_size: Some(10),
            },
        )
        .unwrap()
        .job_id;
    h.sync();
    let mut req = at(&ds, empty.clone());
    req.consumer_index = Some(0);
    let e = h.d.call(Millis(1), (coordinated, req)).unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(e.detail().contains("coordinated reads"), "{e}");
    // Nothing was created by the refusals.
    assert!(h.d.dispatcher().state().iterations().is_empty());
}

/// One DYNAMIC job lifecycle at `now`: a job, an iteration, every split read and
/// acknowledged by `worker`, its task reported done, the client released.
fn lifecycle(h: &mut Harness, now: u64, dataset: &str, name: Option<&str>) -> (u64, u64) {
    let job =
        h.d.call(
            Millis(now),
            CreateJob {
                dataset_id: dataset.into(),
                processing_mode: ProcessingMode::Policy {
                    sharding_policy: ShardingPolicy::Dynamic,
                },
                job_name: name.map(str::to_owned),
                num_consumers: None,
                target_workers: TargetWorkers::Auto,
                cross_trainer_cache: false,
                split_size: Some(10),
            },
        )
        .unwrap()
        .job_id;
    let lease = h.d.call(Millis(now), (job, CreateIteration::default())).unwrap();
    h.sync();
    let mut acknowledge = Some(Vec::new());
    loop {
        let req = GetSplits {
            worker_address: "w1:1".into(),
            worker_uid: None,
            repetition: 0,
            split_provider_index: 0,
            max_splits: Some(2),
            acknowledge: acknowledge.take(),
        };
        let r = h.d.call(Millis(now), (lease.iteration_id, req)).unwrap();
        h.sync();
        if r.end_of_splits {
            break;
        }
        acknowledge = Some(r.split_ids);
    }
    let task = h.d.dispatcher().state().iterations()[&lease.iteration_id].tasks[0];
    let update = WorkerUpdate {
        worker_address: "w1:1".into(),
        worker_uid: None,
        updates: vec![TaskProgress { task_id: task, completed: true }],
    };
    h.d.call(Millis(now), update).unwrap();
    h.d.call(Millis(now), ReleaseClient { client_id: lease.client_id }).unwrap();
    h.sync();
    (job.0, lease.iteration_id.0)
}

fn status_totals(h: &mut Harness, now: u64) -> shardwise_core::dispatch::status::StatusTotals {
    h.d.call(Millis(now), GetStatus).unwrap().totals
}

/// Garbage collection frees what it collects. A finished, released iteration is
/// freed `job_gc_timeout` after its last client left, with its tasks (from the task map,
/// the worker's open tasks and the heartbeat index) and split state; its job stays as a
/// tombstone (name and id kept) for another `job_gc_timeout`, then is forgotten; a lost
/// worker without tasks is forgotten a worker timeout after it was lost. Replay equals the
/// live state at every step (the harness), from the journal and from a snapshot.
#[test]
fn collection_frees_iterations_tasks_jobs_and_lost_workers() {
    let config = DispatcherConfig {
        client_timeout: Millis(1_000),
        job_gc_check_interval: Millis(10),
        job_gc_timeout: Some(Millis(50)),
        gc_dynamic_sharding_jobs: true,
        worker_timeout: Millis(400),
        ..DispatcherConfig::default()
    };
    let mut h = Harness::new(config);
    h.heartbeat(0, "w1:1", &[]);
    let ds = h.dataset(range(25));
    let mut now = 0;
    for i in 0..30 {
        now += 5;
        h.heartbeat(now, "w1:1", &[]);
        lifecycle(&mut h, now, &ds, if i % 3 == 0 { Some("named") } else { None });
        h.d.handle_timeout(Millis(now));
        h.sync();
    }
    // (A named job's lifecycle reads nothing when it finds the iteration of the previous
    // one not collected yet: the same name and repetition are the same iteration.)
    let splits_before = h.d.call(Millis(now), shardwise_core::dispatch::GetMetrics).unwrap();
    assert!(splits_before.splits_handed_out >= 20 * 3, "{splits_before:?}");
    // The iterations go job_gc_timeout after their release, not before.
    let t = status_totals(&mut h, now);
    assert!(t.iterations > 0, "{t:?}");
    // A named job's iteration was collected and the name is a tombstone: the same name with
    // other parameters is still refused, and its id still takes iterations.
    now += 60;
    h.heartbeat(now, "w1:1", &[]);
    h.d.handle_timeout(Millis(now));
    h.sync();
    let t = status_totals(&mut h, now);
    assert_eq!((t.iterations, t.tasks, t.clients), (0, 0, 0), "{t:?}");
    assert!(t.jobs > 0, "jobs are tombstones for a while: {t:?}");
    let other = CreateJob {
        dataset_id: ds.clone(),
        processing_mode: ProcessingMode::Policy { sharding_policy: ShardingPolicy::Off },
        job_name: Some("named".into()),
        num_consumers: None,
        target_workers: TargetWorkers::Auto,
        cross_trainer_cache: false,
        split_size: Some(10),
    };
    let e = h.d.call(Millis(now), other.clone()).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT", "{e}");
    // The worker's open tasks are gone, from its heartbeat too.
    assert!(h.d.dispatcher().state().workers()["w1:1"].tasks.is_empty());
    let stale = TaskId(TaskId::FIRST);
    assert_eq!(h.heartbeat(now, "w1:1", &[stale]).tasks_to_delete, vec![stale]);
    // A dataset used by a job with iterations cannot be deleted; an unknown one is 404.
    let (busy_job, _) = {
        let job = h.d.call(Millis(now), CreateJob { job_name: None, ..other.clone() }).unwrap();
        let lease = h.d.call(Millis(now), (job.job_id, CreateIteration::default())).unwrap();
        h.d.call(Millis(now), (lease.client_id, ClientHeartbeat::default())).unwrap();
        h.sync();
        (job.job_id, lease)
    };
    let e = h.d.call(Millis(now), DeleteDataset { dataset_id: ds.clone() }).unwrap_err();
    assert_eq!(e.code(), "FAILED_PRECONDITION", "{e}");
    assert!(e.to_string().contains(&busy_job.to_string()), "{e}");
    let e = h.d.call(Millis(now), DeleteDataset { dataset_id: "nope".into() }).unwrap_err();
    assert_eq!(e.code(), "NOT_FOUND", "{e}");
    let e = h.d.call(Millis(now), DeleteDataset { dataset_id: "a b".into() }).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT", "{e}");
    // Its client goes silent: released after the client timeout, then everything goes.
    now += 1_000 + 100;
    h.heartbeat(now, "w1:1", &[]);
    h.d.handle_timeout(Millis(now));
    h.sync();
    now += 100;
    h.heartbeat(now, "w1:1", &[]);
    h.d.handle_timeout(Millis(now));
    h.sync();
    // Collected; its job is a tombstone for one more job_gc_timeout.
    let t = status_totals(&mut h, now);
    assert_eq!((t.jobs, t.iterations, t.tasks, t.clients), (1, 0, 0, 0), "{t:?}");
    now += 100;
    h.heartbeat(now, "w1:1", &[]);
    h.d.handle_timeout(Millis(now));
    h.sync();
    let t = status_totals(&mut h, now);
    assert_eq!((t.jobs, t.iterations, t.tasks, t.clients), (0, 0, 0, 0), "{t:?}");
    // The tombstone is gone: the name is free, the old ids unknown.
    let e = h.d.call(Millis(now), GetJob { job_id: busy_job }).unwrap_err();
    assert_eq!(e.code(), "NOT_FOUND", "{e}");
    // The splits counter does not go down with the iterations.
    let splits_after = h.d.call(Millis(now), shardwise_core::dispatch::GetMetrics).unwrap();
    assert_eq!(splits_after.splits_handed_out, splits_before.splits_handed_out);
    // The dataset can go now, freeing its bytes and its fingerprint.
    let bytes = h.d.dispatcher().state().dataset_bytes();
    let deleted = h.d.call(Millis(now), DeleteDataset { dataset_id: ds.clone() }).unwrap();
    h.sync();
    assert_eq!(deleted.freed_bytes, bytes);
    assert_eq!(h.d.dispatcher().state().dataset_bytes(), 0);
    assert!(h.d.dispatcher().state().datasets_by_fingerprint().is_empty());
    let again = h.dataset(range(25));
    assert_ne!(again, ds, "a generated id is not handed out twice");
    // A worker that goes silent is lost after the worker timeout and, holding no task,
    // forgotten one more worker timeout later; the live one stays.
    h.heartbeat(now, "w2:1", &[]);
    for step in 1..=20 {
        let at = now + step * 50;
        h.heartbeat(at, "w1:1", &[]);
        h.d.handle_timeout(Millis(at));
        h.sync();
    }
    let workers = h.d.dispatcher().state().workers();
    assert!(workers.contains_key("w1:1") && !workers.contains_key("w2:1"), "{workers:?}");
    assert!(h.journal.iter().any(|u| matches!(u, Update::RemoveWorker { .. })));
    // A snapshot of this state replays to it, and holds only live things.
    let snapshot = h.d.dispatcher().snapshot();
    let replayed = State::replay(vec![], [&snapshot]);
    assert_eq!(&replayed, h.d.dispatcher().state());
    replayed.check_heartbeat_index().unwrap();
    let text = serde_json::to_string(&snapshot).unwrap();
    assert!(text.len() < 2_000, "{text}");
}

/// Journals and snapshots written before collection freed things still replay: a
/// collected iteration kept in an old snapshot (`garbage_collected: true`) is freed on
/// replay, with its tasks, and the state is the one the new records give.
#[test]
fn old_snapshots_with_collected_iterations_replay_to_the_freed_state() {
    let config = DispatcherConfig {
        job_gc_check_interval: Millis(10),
        job_gc_timeout: Some(Millis(50)),
        gc_dynamic_sharding_jobs: true,
        ..DispatcherConfig::default()
    };
    let mut h = Harness::new(config);
    h.heartbeat(0, "w1:1", &[]);
    let ds = h.dataset(range(25));
    let (_, iteration) = lifecycle(&mut h, 0, &ds, Some("j"));
    // The old form of the collected state: the iteration kept, marked collected, its task
    // finished and off the worker.
    let Update::Snapshot { state } = h.d.dispatcher().snapshot() else { unreachable!() };
    let mut old = serde_json::to_value(&*state).unwrap();
    for pair in old["iterations"].as_array_mut().unwrap() {
        pair[1]["garbage_collected"] = json!(true);
        pair[1]["finished"] = json!(true);
    }
    for pair in old["tasks"].as_array_mut().unwrap() {
        pair[1]["finished"] = json!(true);
    }
    let old: State = serde_json::from_value(old).unwrap();
    let replayed = State::replay(vec![], [&Update::Snapshot { state: Box::new(old) }]);
    assert!(replayed.iterations().is_empty() && replayed.tasks().is_empty());
    replayed.check_heartbeat_index().unwrap();
    // The new records reach the same state.
    h.d.handle_timeout(Millis(100));
    h.sync();
    assert!(
        !h.d.dispatcher()
            .state()
            .iterations()
            .contains_key(&shardwise_core::dispatch::IterationId(iteration))
    );
    assert_eq!(replayed.iterations(), h.d.dispatcher().state().iterations());
    assert_eq!(replayed.tasks(), h.d.dispatcher().state().tasks());
}

/// Without `gc_dynamic_sharding_jobs` an idle DYNAMIC iteration that is not finished is kept
/// (as TensorFlow: its split position would be lost), while a finished one is collected
/// like any other (it has no position left to lose, and would otherwise be kept forever).
#[test]
fn finished_dynamic_iterations_are_collected_without_the_flag() {
    let config = DispatcherConfig {
        job_gc_check_interval: Millis(10),
        job_gc_timeout: Some(Millis(50)),
        ..DispatcherConfig::default()
    };
    let mut h = Harness::new(config);
    h.heartbeat(0, "w1:1", &[]);
    let ds = h.dataset(range(25));
    let (_, finished) = lifecycle(&mut h, 0, &ds, None);
    // Another, released before anything was read.
    let job = h.job(&ds, ShardingPolicy::Dynamic, None);
    let lease = h.d.call(Millis(0), (job, CreateIteration::default())).unwrap();
    h.d.call(Millis(0), ReleaseClient { client_id: lease.client_id }).unwrap();
    h.sync();
    for at in [100, 200] {
        h.heartbeat(at, "w1:1", &[]);
        h.d.handle_timeout(Millis(at));
        h.sync();
    }
    let iterations = h.d.dispatcher().state().iterations();
    assert!(!iterations.contains_key(&shardwise_core::dispatch::IterationId(finished)));
    assert!(iterations.contains_key(&lease.iteration_id));
}
