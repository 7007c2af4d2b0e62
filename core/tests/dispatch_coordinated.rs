//! Coordinated (round-robin) reads: late workers join through the pending-task protocol,
//! consumers vote tasks out, and consumer identity is the consumer index.

#[path = "support/replay.rs"]
mod replay;

use serde_json::json;
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::wire::{
    ClientHeartbeat, CreateIteration, CreateJob, IterationLease, ProcessingMode, RegisterDataset,
    TaskProgress, WorkerHeartbeat, WorkerUpdate,
};
use shardwise_core::dispatch::{
    Dispatcher, DispatcherConfig, Driver, MaybeRemove, Millis, ShardingPolicy, TargetWorkers,
    TaskId, Update, VecSink,
};

struct H {
    d: Driver<VecSink>,
    journal: Vec<Update>,
}

impl H {
    fn new() -> Self {
        let d = Dispatcher::new(DispatcherConfig::default(), "i".into(), Millis(0)).unwrap();
        H { d: Driver::new(d, VecSink::default()), journal: vec![] }
    }
    fn sync(&mut self) {
        replay::take_records(self.d.sink_mut(), &mut self.journal);
        replay::check_replay("", vec![], &self.journal, self.d.dispatcher().state());
    }
    fn worker(&mut self, now: u64, addr: &str, current: &[TaskId]) -> Vec<TaskId> {
        let r = self
            .d
            .call(
                Millis(now),
                WorkerHeartbeat {
                    worker_address: addr.into(),
                    current_tasks: current.to_vec(),
                    tags: vec![],
                    worker_uid: None,
                    incarnation: None,
                    tensorflow: None,
                },
            )
            .unwrap();
        self.sync();
        r.new_tasks.iter().map(|t| t.task_id).collect()
    }
    /// A job with `n` consumers over an infinite dataset; returns one lease per consumer.
    fn job(&mut self, n: u64) -> (shardwise_core::dispatch::JobId, Vec<IterationLease>) {
        let ds = DatasetDef::from_json(
            &json!({"source": {"range": {"stop": 10}}, "transforms": [{"repeat": null}]}),
        )
        .unwrap();
        let ds = self
            .d
            .call(Millis(0), RegisterDataset { dataset: ds, dataset_id: None, metadata: None })
            .unwrap()
            .dataset_id;
        let job = self
            .d
            .call(
                Millis(0),
                CreateJob {
                    dataset_id: ds,
                    processing_mode: ProcessingMode::Policy {
                        sharding_policy: ShardingPolicy::Off,
                    },
                    job_name: Some("rr".into()),
                    num_consumers: Some(n),
                    target_workers: TargetWorkers::Any,
                    cross_trainer_cache: false,
                    split_size: None,
                },
            )
            .unwrap()
            .job_id;
        let leases = (0..n)
            .map(|i| {
                self.d
                    .call(
                        Millis(1),
                        (
                            job,
                            CreateIteration {
                                repetition: 0,
                                consumer_index: Some(i),
                                resume_from: None,
                            },
                        ),
                    )
                    .unwrap()
            })
            .collect();
        self.sync();
        (job, leases)
    }
    fn hb(
        &mut self,
        lease: &IterationLease,
        current: u64,
        blocked: Option<u64>,
    ) -> shardwise_core::dispatch::wire::ClientHeartbeatReply {
        let r = self
            .d
            .call(
                Millis(10),
                (
                    lease.client_id,
                    ClientHeartbeat {
                        current_round: Some(current),
                        blocked_round: blocked,
                        ..ClientHeartbeat::default()
                    },
                ),
            )
            .unwrap();
        self.sync();
        r
    }
}

#[test]
fn im_03_late_worker_joins_through_a_pending_task() {
    let mut h = H::new();
    h.worker(0, "w1", &[]);
    let (_, leases) = h.job(2);
    let t1 = h.worker(1, "w1", &[]);
    assert_eq!(t1.len(), 1);
    // Both consumers are in round 4 when w2 arrives.
    for l in &leases {
        assert!(h.hb(l, 4, None).block_round.is_none());
    }
    // w2 gets its task at once ...
    let t2 = h.worker(2, "w2", &[]);
    assert_eq!(t2.len(), 1);
    // ... but clients see only w1's task, with a proposal to block before round 5.
    let r = h.hb(&leases[0], 4, None);
    assert_eq!(r.tasks.len(), 1);
    assert_eq!(r.block_round, Some(5));
    // Consumer 0 agrees; consumer 1 agrees too: the task is promoted with starting round 5.
    assert_eq!(h.hb(&leases[0], 4, Some(5)).tasks.len(), 1);
    let r = h.hb(&leases[1], 4, Some(5));
    assert_eq!(r.tasks.len(), 2);
    assert_eq!(r.block_round, None);
    assert_eq!(r.tasks[1].task_id, t2[0]);
    assert_eq!(r.tasks[1].starting_round, 5);
}

/// A finished coordinated-read iteration takes no more consumers: a worker whose task in it
/// finished gets no new pending task there (live and after a recovery from a snapshot alike).
#[test]
fn a_finished_coordinated_iteration_takes_no_rejoining_worker() {
    let mut h = H::new();
    h.worker(0, "w1", &[]);
    let (_, leases) = h.job(2);
    let t1 = h.worker(1, "w1", &[]);
    assert_eq!(t1.len(), 1);
    let r =
        h.d.call(
            Millis(2),
            WorkerUpdate {
                worker_address: "w1".into(),
                worker_uid: None,
                updates: vec![TaskProgress { task_id: t1[0], completed: true }],
            },
        )
        .unwrap();
    assert!(r.unknown_tasks.is_empty());
    h.sync();
    assert!(h.hb(&leases[0], 0, None).iteration_finished);
    // w1 reports no tasks: it is not handed a pending task in the finished iteration.
    assert_eq!(h.worker(3, "w1", &[]), Vec::<TaskId>::new());
}

#[test]
fn a_consumer_past_the_proposal_rejects_it_and_the_distance_doubles() {
    let mut h = H::new();
    h.worker(0, "w1", &[]);
    let (_, leases) = h.job(2);
    h.hb(&leases[0], 2, None);
    h.worker(2, "w2", &[]);
    let first = h.hb(&leases[0], 2, None).block_round.unwrap();
    assert_eq!(first, 3);
    // Consumer 1 is already in round 3: rejected, new target = its round + 2.
    let r = h.hb(&leases[1], 3, None);
    assert_eq!(r.block_round, Some(5));
    // Consumer 0 races past 5 too: next target = 6 + 4.
    let r = h.hb(&leases[0], 6, None);
    assert_eq!(r.block_round, Some(10));
    // Agreement on 10 promotes.
    h.hb(&leases[0], 6, Some(10));
    let r = h.hb(&leases[1], 7, Some(10));
    assert_eq!(r.tasks.len(), 2);
    assert_eq!(r.tasks[1].starting_round, 10);
}

#[test]
fn a_restarted_consumer_replaces_its_predecessor() {
    let mut h = H::new();
    h.worker(0, "w1", &[]);
    let (job, leases) = h.job(2);
    h.worker(2, "w2", &[]);
    // Consumer 0 agrees, then restarts with a new client id and agrees again: that is still
    // one consumer, so the task is not promoted until consumer 1 agrees.
    h.hb(&leases[0], 0, Some(1));
    let again =
        h.d.call(
            Millis(3),
            (job, CreateIteration { repetition: 0, consumer_index: Some(0), resume_from: None }),
        )
        .unwrap();
    h.sync();
    let r = h.hb(&again, 0, Some(1));
    assert_eq!(r.tasks.len(), 1, "not promoted by one consumer twice");
    let r = h.hb(&leases[1], 0, Some(1));
    assert_eq!(r.tasks.len(), 2);
}

#[test]
fn consumers_vote_a_task_out_and_its_worker_rejoins() {
    let mut h = H::new();
    h.worker(0, "w1", &[]);
    h.worker(0, "w2", &[]);
    let (_, leases) = h.job(2);
    let t1 = h.worker(1, "w1", &[])[0];
    h.worker(1, "w2", &[]);
    assert!(
        !h.d.call(Millis(0), (t1, MaybeRemove { consumer_index: 0, round: 7 })).unwrap().removed
    );
    // A vote for another round starts over.
    assert!(
        !h.d.call(Millis(0), (t1, MaybeRemove { consumer_index: 1, round: 8 })).unwrap().removed
    );
    h.sync();
    assert!(h.d.dispatcher().state().tasks().contains_key(&t1), "no removal without agreement");
    // Both consumers on round 8: removed.
    assert!(
        h.d.call(Millis(0), (t1, MaybeRemove { consumer_index: 0, round: 8 })).unwrap().removed
    );
    h.sync();
    assert!(!h.d.dispatcher().state().tasks().contains_key(&t1));
    assert!(
        h.d.call(Millis(0), (t1, MaybeRemove { consumer_index: 0, round: 8 })).unwrap().removed,
        "an unknown task counts as removed"
    );
    assert_eq!(h.hb(&leases[0], 9, None).tasks.len(), 1);
    // w1 heartbeats again (still reporting the removed task): told to drop it, given a
    // pending task for the iteration instead.
    let r =
        h.d.call(
            Millis(20),
            WorkerHeartbeat {
                worker_address: "w1".into(),
                current_tasks: vec![t1],
                tags: vec![],
                worker_uid: None,
                incarnation: None,
                tensorflow: None,
            },
        )
        .unwrap();
    h.sync();
    assert_eq!(r.tasks_to_delete, vec![t1]);
    assert_eq!(r.new_tasks.len(), 1);
    assert_eq!(h.hb(&leases[0], 9, None).block_round, Some(10));
}

#[test]
fn coordinated_read_errors() {
    let mut h = H::new();
    h.worker(0, "w1", &[]);
    let (job, _) = h.job(2);
    let e =
        h.d.call(
            Millis(1),
            (job, CreateIteration { repetition: 0, consumer_index: Some(2), resume_from: None }),
        )
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    // maybe-remove on an ordinary task.
    let ds = h.d.dispatcher().state().datasets().keys().next().unwrap().clone();
    let off =
        h.d.call(
            Millis(0),
            CreateJob {
                dataset_id: ds,
                processing_mode: ProcessingMode::Policy { sharding_policy: ShardingPolicy::Off },
                job_name: None,
                num_consumers: None,
                target_workers: TargetWorkers::Auto,
                cross_trainer_cache: false,
                split_size: None,
            },
        )
        .unwrap()
        .job_id;
    h.d.call(Millis(1), (off, CreateIteration::default())).unwrap();
    h.sync();
    let task = *h.d.dispatcher().state().tasks().keys().last().unwrap();
    let e = h.d.call(Millis(0), (task, MaybeRemove { consumer_index: 0, round: 0 })).unwrap_err();
    assert_eq!(e.detail(), "MaybeRemoveTask called on a non-round-robin task.");
}
