//! Issue 11: what a hostile caller may not do to the state machine. Only the worker holding a
//! task changes it, what workers register as is bounded, identical datasets are one dataset,
//! what datasets hold is bounded, and error texts quote at most a short prefix of the input.

#[path = "support/replay.rs"]
mod replay;

use serde_json::json;
use shardwise_core::dispatch::wire::{
    CreateIteration, CreateJob, GetSplits, ProcessingMode, RegisterDataset, TaskProgress,
    WorkerHeartbeat, WorkerUpdate,
};
use shardwise_core::dispatch::{
    DispatchError, Dispatcher, DispatcherConfig, Driver, IterationId, Millis, ShardingPolicy,
    State, TaskId, Update, VecSink,
};

struct H {
    d: Driver<VecSink>,
    journal: Vec<Update>,
}

impl H {
    fn new(config: DispatcherConfig) -> H {
        let d = Dispatcher::new(config, "inc".into(), Millis(0)).unwrap();
        let mut h = H { d: Driver::new(d, VecSink::default()), journal: vec![] };
        h.d.flush();
        h.sync();
        h
    }
    fn sync(&mut self) {
        replay::take_records(self.d.sink_mut(), &mut self.journal);
    }
    /// Journal records since `from`, draining the dispatcher's queue first.
    fn records_since(&mut self, from: usize) -> usize {
        self.sync();
        self.journal.len() - from
    }
    fn heartbeat(&mut self, addr: &str, uid: Option<&str>) -> Vec<TaskId> {
        let r = self
            .d
            .call(
                Millis(1),
                WorkerHeartbeat {
                    worker_address: addr.into(),
                    worker_uid: uid.map(Into::into),
                    ..WorkerHeartbeat::default()
                },
            )
            .unwrap();
        self.sync();
        r.new_tasks.iter().map(|t| t.task_id).collect()
    }
    fn register(&mut self, def: serde_json::Value) -> Result<String, DispatchError> {
        let req: RegisterDataset = serde_json::from_value(def).unwrap();
        let r = self.d.call(Millis(0), req.clone());
        self.sync();
        r.map(|r| r.dataset_id)
    }
    /// A dataset, a job of `policy` and its iteration; every registered worker gets a task.
    fn iteration(&mut self, policy: ShardingPolicy) -> IterationId {
        let ds = self.register(json!({"dataset": {"source": {"range": {"stop": 40}}}})).unwrap();
        let job = self
            .d
            .call(
                Millis(0),
                CreateJob {
                    dataset_id: ds,
                    processing_mode: ProcessingMode::Policy { sharding_policy: policy },
                    job_name: None,
                    num_consumers: None,
                    target_workers: Default::default(),
                    cross_trainer_cache: false,
                    split_size: Some(10),
                },
            )
            .unwrap()
            .job_id;
        let it = self.d.call(Millis(1), (job, CreateIteration::default())).unwrap();
        self.sync();
        it.iteration_id
    }
    fn update(
        &mut self,
        addr: &str,
        uid: Option<&str>,
        tasks: &[TaskId],
    ) -> Result<Vec<TaskId>, DispatchError> {
        let r = self.d.call(
            Millis(2),
            WorkerUpdate {
                worker_address: addr.into(),
                worker_uid: uid.map(Into::into),
                updates: tasks
                    .iter()
                    .map(|t| TaskProgress { task_id: *t, completed: true })
                    .collect(),
            },
        );
        self.sync();
        r.map(|r| r.unknown_tasks)
    }
    fn splits(
        &mut self,
        it: IterationId,
        addr: &str,
        uid: Option<&str>,
        ack: Option<Vec<shardwise_core::dispatch::wire::SplitId>>,
    ) -> Result<shardwise_core::dispatch::wire::SplitsReply, DispatchError> {
        let r = self.d.call(
            Millis(3),
            (
                it,
                GetSplits {
                    worker_address: addr.into(),
                    worker_uid: uid.map(Into::into),
                    repetition: 0,
                    split_provider_index: 0,
                    max_splits: Some(2),
                    acknowledge: ack,
                },
            ),
        );
        self.sync();
        r
    }
    fn finished(&self, t: TaskId) -> bool {
        self.d.dispatcher().state().tasks()[&t].finished
    }
    /// The journal replays to the live state, derived indexes included.
    fn check_replay(&self) {
        replay::check_replay("", vec![], &self.journal, self.d.dispatcher().state());
    }
}

/// The reproduction: an address that never registered completes another worker's
/// task. Refused (NOT_FOUND), nothing journaled, the task and its iteration go on.
#[test]
fn an_unregistered_address_cannot_finish_a_task() {
    let mut h = H::new(DispatcherConfig::default());
    h.heartbeat("w1:1", Some("uid-1"));
    let it = h.iteration(ShardingPolicy::Off);
    let t = h.heartbeat("w1:1", Some("uid-1"))[0];
    let before = h.journal.len();
    let e = h.update("evil:1", None, &[t]).unwrap_err();
    assert_eq!(e.code(), "NOT_FOUND", "{e}");
    assert_eq!(h.records_since(before), 0);
    assert!(!h.finished(t));
    assert!(!h.d.dispatcher().state().iterations()[&it].finished);
    // The holder still can.
    assert_eq!(h.update("w1:1", Some("uid-1"), &[t]).unwrap(), []);
    assert!(h.finished(t) && h.d.dispatcher().state().iterations()[&it].finished);
    h.check_replay();
}

/// A registered worker naming another worker's task is refused as a whole (PERMISSION_DENIED):
/// its own task in the same update is not finished either, and no record is written.
#[test]
fn another_workers_task_refuses_the_whole_update() {
    let mut h = H::new(DispatcherConfig::default());
    h.heartbeat("w1:1", None);
    h.heartbeat("w2:1", None);
    let it = h.iteration(ShardingPolicy::Off);
    let t1 = h.heartbeat("w1:1", None)[0];
    let t2 = h.heartbeat("w2:1", None)[0];
    let before = h.journal.len();
    let e = h.update("w2:1", None, &[t2, t1]).unwrap_err();
    assert_eq!(e.code(), "PERMISSION_DENIED", "{e}");
    assert!(e.detail().contains(&t1.to_string()), "{e}");
    assert_eq!(h.records_since(before), 0);
    assert!(!h.finished(t1) && !h.finished(t2));
    // Unknown ids are still only reported, next to the worker's own task.
    assert_eq!(h.update("w2:1", None, &[TaskId(999_999), t2, t2]).unwrap(), [TaskId(999_999)]);
    assert_eq!(h.records_since(before), 1, "one record, the task listed twice finished once");
    assert!(h.finished(t2) && !h.finished(t1));
    assert!(!h.d.dispatcher().state().iterations()[&it].finished);
    // A worker that has no tasks at all can send a stale id: never wedged.
    h.heartbeat("w3:1", None);
    assert_eq!(h.update("w3:1", None, &[TaskId(7)]).unwrap(), [TaskId(7)]);
    h.check_replay();
}

/// A worker that registered with a uid must send it: none or another is PERMISSION_DENIED,
/// and the error does not quote the registered uid. A worker without a uid (TensorFlow's) is
/// known by its address.
#[test]
fn the_uid_a_worker_registered_with_is_required() {
    let mut h = H::new(DispatcherConfig::default());
    h.heartbeat("w1:1", Some("secret-uid-1"));
    h.heartbeat("w2:1", None);
    let it = h.iteration(ShardingPolicy::Dynamic);
    let t1 = h.heartbeat("w1:1", Some("secret-uid-1"))[0];
    let t2 = h.heartbeat("w2:1", None)[0];
    let before = h.journal.len();
    for uid in [None, Some("guess"), Some("secret-uid-1 ")] {
        let e = h.update("w1:1", uid, &[t1]).unwrap_err();
        assert_eq!(e.code(), "PERMISSION_DENIED", "{uid:?}: {e}");
        assert!(!e.detail().contains("secret-uid-1"), "{e}");
        let e = h.splits(it, "w1:1", uid, None).unwrap_err();
        assert_eq!(e.code(), "PERMISSION_DENIED", "{uid:?}: {e}");
        assert!(!e.detail().contains("secret-uid-1"), "{e}");
    }
    assert_eq!(h.records_since(before), 0);
    assert!(h.d.dispatcher().state().iterations()[&it].splits.as_ref().unwrap().leases.is_empty());
    // The holder gets splits; a get-split without its uid cannot acknowledge them.
    let r = h.splits(it, "w1:1", Some("secret-uid-1"), None).unwrap();
    assert_eq!(r.splits.len(), 2);
    let before = h.journal.len();
    let e = h.splits(it, "w1:1", None, Some(r.split_ids.clone())).unwrap_err();
    assert_eq!(e.code(), "PERMISSION_DENIED");
    assert_eq!(h.records_since(before), 0);
    assert_eq!(
        h.d.dispatcher().state().iterations()[&it].splits.as_ref().unwrap().leases["w1:1"].len(),
        2
    );
    // A worker registered without a uid: its address is enough, whatever uid it sends.
    assert_eq!(h.splits(it, "w2:1", Some("anything"), None).unwrap().splits.len(), 2);
    assert_eq!(h.update("w2:1", None, &[t2]).unwrap(), []);
    assert!(h.finished(t2));
    // A restarted process (new uid) is the holder from its first heartbeat on; the old
    // process is not any more.
    h.heartbeat("w1:1", Some("secret-uid-2"));
    let e = h.update("w1:1", Some("secret-uid-1"), &[t1]).unwrap_err();
    assert_eq!(e.code(), "PERMISSION_DENIED");
    assert_eq!(h.update("w1:1", Some("secret-uid-2"), &[t1]).unwrap(), []);
    h.check_replay();
}

/// Get-split from an address that never registered stays NOT_FOUND, quoting a short prefix.
#[test]
fn get_split_from_an_unregistered_address() {
    let mut h = H::new(DispatcherConfig::default());
    h.heartbeat("w1:1", None);
    let it = h.iteration(ShardingPolicy::Dynamic);
    let long = "x".repeat(10_000);
    let e = h.splits(it, &long, None, None).unwrap_err();
    assert_eq!(e.code(), "NOT_FOUND");
    assert!(e.detail().len() < 300, "{e}");
    let e = h.update(&long, None, &[]).unwrap_err();
    assert_eq!(e.code(), "NOT_FOUND");
    assert!(e.detail().len() < 300, "{e}");
}

/// What the state machine stores of a worker is bounded: no address longer than 255 bytes or
/// with whitespace or control characters, no uid longer than 255 bytes.
#[test]
fn heartbeats_bound_what_a_worker_registers() {
    let mut h = H::new(DispatcherConfig::default());
    let hb = |addr: String, uid: Option<String>| WorkerHeartbeat {
        worker_address: addr,
        worker_uid: uid,
        ..WorkerHeartbeat::default()
    };
    for req in [
        hb("a".repeat(1 << 20), None),
        hb("w1:1\nX-Injected: 1".into(), None),
        hb("w1:1".into(), Some("u".repeat(256))),
        hb("w1:1".into(), Some(String::new())),
        hb("w1:1".into(), Some("a\nb".into())),
    ] {
        let e = h.d.call(Millis(1), req.clone()).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT", "{e}");
        assert!(e.detail().len() < 300, "{e}");
    }
    assert!(h.d.dispatcher().state().workers().is_empty());
    let e =
        h.d.call(
            Millis(1),
            WorkerHeartbeat {
                worker_address: "w1:1".into(),
                tags: vec!["t".repeat(10_000), String::new()],
                ..WorkerHeartbeat::default()
            },
        )
        .unwrap_err();
    assert!(e.detail().len() < 300, "{e}");
}

/// Issue 11, point 6: the same definition and metadata without an id is the same dataset;
/// the fingerprint index is rebuilt from a snapshot as from the records.
#[test]
fn identical_datasets_are_deduplicated() {
    let mut h = H::new(DispatcherConfig::default());
    let def =
        json!({"dataset": {"source": {"list": {"elements": [1, 2, 3]}}}, "metadata": {"m": 1}});
    let a = h.register(def.clone()).unwrap();
    let before = h.journal.len();
    assert_eq!(h.register(def.clone()).unwrap(), a);
    assert_eq!(h.records_since(before), 0, "a duplicate changes nothing");
    // Other metadata, or another definition: another dataset.
    let b = h
        .register(
            json!({"dataset": {"source": {"list": {"elements": [1, 2, 3]}}}, "metadata": {"m": 2}}),
        )
        .unwrap();
    let c = h.register(json!({"dataset": {"source": {"list": {"elements": [1, 2]}}}})).unwrap();
    assert!(a != b && b != c && a != c);
    // An explicit id registers its own dataset, even with the same content ...
    let mut named = def.clone();
    named["dataset_id"] = json!("named");
    assert_eq!(h.register(named).unwrap(), "named");
    // ... and anonymous duplicates keep finding one of them, deterministically.
    assert_eq!(h.register(def.clone()).unwrap(), a);
    h.check_replay();
    let snapshot = h.d.dispatcher().snapshot();
    let replayed = State::replay(vec![], std::slice::from_ref(&snapshot));
    replayed.check_heartbeat_index().unwrap();
    assert_eq!(
        replayed.datasets_by_fingerprint(),
        h.d.dispatcher().state().datasets_by_fingerprint()
    );
    assert_eq!(replayed.dataset_bytes(), h.d.dispatcher().state().dataset_bytes());
    let d = Dispatcher::recover(DispatcherConfig::default(), "x".into(), Millis(9), &[snapshot])
        .unwrap();
    let mut d = Driver::new(d, VecSink::default());
    let req: RegisterDataset = serde_json::from_value(def).unwrap();
    assert_eq!(d.call(Millis(0), req.clone()).unwrap().dataset_id, a);
    assert!(d.sink().records.is_empty());
}

/// What datasets hold is bounded for new registrations (RESOURCE_EXHAUSTED naming the
/// option), never for replay; duplicates and existing ids still answer when full.
#[test]
fn dataset_bytes_are_bounded() {
    let config = DispatcherConfig { max_dataset_bytes: 400, ..DispatcherConfig::default() };
    let mut h = H::new(config.clone());
    let list = |n: usize| json!({"dataset": {"source": {"list": {"elements": vec![7; n]}}}});
    let a = h.register(list(50)).unwrap();
    let held = h.d.dispatcher().state().dataset_bytes();
    assert!(held > 100 && held < 200, "{held}");
    let before = h.journal.len();
    let e = h.register(list(150)).unwrap_err();
    assert_eq!(e.code(), "RESOURCE_EXHAUSTED", "{e}");
    assert!(e.detail().contains("max_dataset_bytes = 400"), "{e}");
    assert!(e.detail().contains("--max-dataset-bytes"), "{e}");
    assert_eq!(h.records_since(before), 0);
    assert_eq!(h.d.dispatcher().state().dataset_bytes(), held);
    // Still serving: a duplicate, and a small dataset that fits.
    assert_eq!(h.register(list(50)).unwrap(), a);
    h.register(list(10)).unwrap();
    // Replay under a smaller bound keeps every acknowledged dataset.
    let small = DispatcherConfig { max_dataset_bytes: 1, ..DispatcherConfig::default() };
    let d = Dispatcher::recover(small, "x".into(), Millis(0), &h.journal).unwrap();
    assert_eq!(d.state().datasets().len(), 2);
    assert_eq!(d.state().dataset_bytes(), h.d.dispatcher().state().dataset_bytes());
    h.check_replay();
    let zero = DispatcherConfig { max_dataset_bytes: 0, ..DispatcherConfig::default() };
    assert_eq!(zero.validate().unwrap_err().code(), "INVALID_ARGUMENT");
}

/// Issue 11, point 7: error texts quote at most a short prefix of what they were sent.
#[test]
fn error_texts_quote_a_short_prefix() {
    let mut h = H::new(DispatcherConfig::default());
    let long = "d".repeat(10_000);
    let e = h
        .register(json!({"dataset": {"source": {"range": {"stop": 1}}}, "dataset_id": long}))
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert!(e.detail().len() < 300 && e.detail().contains("10000 bytes"), "{e}");
    let e =
        h.d.call(
            Millis(0),
            CreateJob {
                dataset_id: long.clone(),
                processing_mode: ProcessingMode::Policy { sharding_policy: ShardingPolicy::Off },
                job_name: None,
                num_consumers: None,
                target_workers: Default::default(),
                cross_trainer_cache: false,
                split_size: None,
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), "NOT_FOUND");
    assert!(e.detail().len() < 300, "{e}");
    h.register(json!({"dataset": {"source": {"range": {"stop": 1}}}, "dataset_id": "ds"})).unwrap();
    let e =
        h.d.call(
            Millis(0),
            CreateJob {
                dataset_id: "ds".into(),
                processing_mode: ProcessingMode::Policy { sharding_policy: ShardingPolicy::Off },
                job_name: Some(long.clone()),
                num_consumers: None,
                target_workers: Default::default(),
                cross_trainer_cache: false,
                split_size: None,
            },
        )
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert!(e.detail().len() < 300, "{e}");
    let e = serde_json::from_value::<GetSplits>(
        json!({"worker_address": "w:1", "repetition": 0, "acknowledge": [long]}),
    )
    .unwrap_err();
    assert!(e.to_string().len() < 300, "{e}");
    let e = "9".repeat(10_000).parse::<TaskId>().unwrap_err();
    assert!(e.to_string().len() < 300, "{e}");
}
