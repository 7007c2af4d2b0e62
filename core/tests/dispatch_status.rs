//! The status snapshot (`Request::Status`): the split progress of a DYNAMIC iteration through
//! a lost worker, the workers' last heartbeats, the summaries, and the lists' caps.

#[path = "support/replay.rs"]
mod replay;

use serde_json::json;
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::status::{DatasetKind, SplitProgress, WorkerKind};
use shardwise_core::dispatch::wire::{
    CreateIteration, CreateJob, GetSplits, ProcessingMode, RegisterDataset, WorkerHeartbeat,
};
use shardwise_core::dispatch::{
    Dispatcher, DispatcherConfig, Driver, GetStatus, IterationId, JobId, Millis, STATUS_LIST_CAP,
    ShardingPolicy, StatusReport, TargetWorkers, Update, VecSink,
};

struct Harness {
    d: Driver<VecSink>,
    journal: Vec<Update>,
}

impl Harness {
    fn new() -> Self {
        let config =
            DispatcherConfig { worker_timeout: Millis(1_000), ..DispatcherConfig::default() };
        let d = Dispatcher::new(config, "inc-1".into(), Millis(0)).unwrap();
        Harness { d: Driver::new(d, VecSink::default()), journal: Vec::new() }
    }
    /// Drains the journal; replay must equal the live state (the `reissued` counter included).
    fn sync(&mut self) {
        replay::take_records(self.d.sink_mut(), &mut self.journal);
        replay::check_replay("", vec![], &self.journal, self.d.dispatcher().state());
    }
    fn heartbeat(&mut self, now: u64, worker: &str, tags: &[&str]) {
        self.d
            .call(
                Millis(now),
                WorkerHeartbeat {
                    worker_address: worker.into(),
                    current_tasks: vec![],
                    tags: tags.iter().map(|t| (*t).to_owned()).collect(),
                    worker_uid: None,
                    incarnation: None,
                    tensorflow: None,
                },
            )
            .unwrap();
        self.sync();
    }
    fn dataset(&mut self, v: serde_json::Value) -> String {
        let dataset = DatasetDef::from_json(&v).unwrap();
        let id = self
            .d
            .call(Millis(0), RegisterDataset { dataset, dataset_id: None, metadata: None })
            .unwrap()
            .dataset_id;
        self.sync();
        id
    }
    fn job(&mut self, dataset_id: &str, policy: ShardingPolicy) -> JobId {
        let id = self
            .d
            .call(
                Millis(0),
                CreateJob {
                    dataset_id: dataset_id.into(),
                    processing_mode: ProcessingMode::Policy { sharding_policy: policy },
                    job_name: None,
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
    fn splits(&mut self, now: u64, it: IterationId, worker: &str, max: u32) -> usize {
        let req = GetSplits {
            worker_address: worker.into(),
            worker_uid: None,
            repetition: 0,
            split_provider_index: 0,
            max_splits: Some(max),
            acknowledge: None,
        };
        let n = self.d.call(Millis(now), (it, req)).unwrap().splits.len();
        self.sync();
        n
    }
    fn status(&mut self, now: u64) -> StatusReport {
        let r = *self.d.call(Millis(now), GetStatus).unwrap();
        // A query journals nothing.
        assert!(self.d.sink_mut().records.is_empty());
        r
    }
    fn progress(&mut self, now: u64, it: IterationId) -> SplitProgress {
        let r = self.status(now);
        let i = r.iterations.iter().find(|i| i.iteration_id == it).unwrap();
        i.splits.unwrap()
    }
}

fn figures(p: SplitProgress) -> [u64; 7] {
    [p.handed_out, p.acknowledged, p.leased, p.requeued, p.remaining, p.reissued, p.total]
}

#[test]
fn split_progress_counts_a_lost_workers_splits_as_reissued_then_acknowledged() {
    let mut h = Harness::new();
    h.heartbeat(0, "w1", &["COLOCATED"]);
    h.heartbeat(0, "w2", &[]);
    let ds = h.dataset(json!({"source": {"range": {"stop": 40}}}));
    let job = h.job(&ds, ShardingPolicy::Dynamic);
    let lease = h.d.call(Millis(1), (job, CreateIteration::default())).unwrap();
    h.sync();
    let it = lease.iteration_id;
    //                          [handed, acked, leased, requeued, remaining, reissued, total]
    assert_eq!(figures(h.progress(1, it)), [0, 0, 0, 0, 4, 0, 4]);
    // w2 takes two splits and will die with them; w1 takes the other two.
    assert_eq!(h.splits(10, it, "w2", 2), 2);
    assert_eq!(figures(h.progress(10, it)), [2, 0, 2, 0, 2, 0, 4]);
    assert_eq!(h.splits(10, it, "w1", 2), 2);
    assert_eq!(figures(h.progress(10, it)), [4, 0, 4, 0, 0, 0, 4]);
    // w1 asks again: that acknowledges its two, and none is free.
    assert_eq!(h.splits(20, it, "w1", 2), 0);
    assert_eq!(figures(h.progress(20, it)), [4, 2, 2, 0, 0, 0, 4]);
    // w2 is lost: its two splits wait to be handed out again.
    h.heartbeat(900, "w1", &["COLOCATED"]);
    h.d.handle_timeout(Millis(1_500));
    h.sync();
    let report = h.status(1_500);
    let w: Vec<_> = report
        .workers
        .iter()
        .map(|w| (w.worker_address.as_str(), w.alive, w.since_heartbeat_ms, w.kind))
        .collect();
    assert_eq!(
        w,
        [
            ("w1", true, Some(600), WorkerKind::Shardwise),
            ("w2", false, Some(1_490), WorkerKind::Shardwise)
        ]
    );
    assert_eq!(report.workers[0].tags, ["COLOCATED"]);
    assert_eq!(figures(h.progress(1_500, it)), [4, 2, 0, 2, 0, 0, 4]);
    // w1 gets them: re-issued, in flight.
    assert_eq!(h.splits(1_600, it, "w1", 2), 2);
    assert_eq!(figures(h.progress(1_600, it)), [4, 2, 2, 0, 0, 2, 4]);
    assert_eq!(h.progress(1_600, it).acknowledged_all_epochs, 2);
    // Its next get-split acknowledges them: every split of the repetition is done, and the
    // provider moves on to the next repetition (figures of the current one start over; the
    // counts over every epoch keep growing).
    h.splits(1_700, it, "w1", 2);
    let p = h.progress(1_700, it);
    assert_eq!(p.repetition, 1);
    assert_eq!(figures(p), [0, 0, 0, 0, 4, 2, 4]);
    assert_eq!((p.handed_out_total, p.acknowledged_all_epochs), (6, 4));
    // Replaying the journal counts the re-issued splits too (checked by `sync`), and a
    // recovered dispatcher reports the same figures.
    let recovered = Dispatcher::recover(
        h.d.dispatcher().config().clone(),
        "inc-2".into(),
        Millis(0),
        &h.journal,
    )
    .unwrap();
    let mut d2 = Driver::new(recovered, VecSink::default());
    let again = d2.call(Millis(1_700), GetStatus).unwrap();
    let i = again.iterations.iter().find(|i| i.iteration_id == it).unwrap();
    assert_eq!(i.splits, Some(p));
}

#[test]
fn datasets_and_jobs_are_summarized() {
    let mut h = Harness::new();
    let ds = h.dataset(json!({
        "source": {"range": {"stop": 100000}},
        "transforms": [{"shuffle": {"buffer": 1000, "seed": 7}}, {"batch": {"size": 32}}, {"repeat": null}]
    }));
    let list = h.dataset(json!({"source": {"list": {"elements": [1, "<b>x</b>"]}}}));
    let job = h.job(&ds, ShardingPolicy::Off);
    let r = h.status(5);
    let d: Vec<_> =
        r.datasets.iter().map(|d| (d.dataset_id.as_str(), d.kind, d.summary.as_str())).collect();
    assert_eq!(
        d,
        [
            (
                ds.as_str(),
                DatasetKind::Declarative,
                "range(0, 100000) | shuffle(1000) | batch(32) | repeat"
            ),
            (list.as_str(), DatasetKind::Declarative, "list(2 elements)"),
        ]
    );
    assert_eq!(r.jobs.len(), 1);
    assert_eq!(
        (
            r.jobs[0].job_id,
            r.jobs[0].sharding_policy,
            r.jobs[0].split_size,
            r.jobs[0].dataset_id.as_str()
        ),
        (job, ShardingPolicy::Off, 10, ds.as_str())
    );
    assert_eq!((r.totals.datasets, r.totals.jobs, r.totals.workers), (2, 1, 0));
    assert_eq!(r.incarnation, "inc-1");
    assert_eq!(r.now_ms, 5);
    // Static iterations have no split progress.
    let lease = h.d.call(Millis(6), (job, CreateIteration::default())).unwrap();
    h.sync();
    let r = h.status(6);
    assert_eq!(r.iterations[0].iteration_id, lease.iteration_id);
    assert_eq!((r.iterations[0].splits, r.iterations[0].tf_splits.as_ref()), (None, None));
    assert_eq!(r.clients[0].client_id, lease.client_id);
}

#[test]
fn lists_are_capped_newest_first_and_totals_count_everything() {
    let mut h = Harness::new();
    for i in 0..(STATUS_LIST_CAP + 10) {
        h.d.call(
            Millis(0),
            WorkerHeartbeat { worker_address: format!("w{i:04}:1"), ..Default::default() },
        )
        .unwrap();
    }
    let ds = h.dataset(json!({"source": {"range": {"stop": 10}}}));
    let job = h.job(&ds, ShardingPolicy::Off);
    let n = STATUS_LIST_CAP + 100;
    let mut last = None;
    for _ in 0..n {
        last = Some(h.d.call(Millis(1), (job, CreateIteration::default())).unwrap().client_id);
    }
    h.sync();
    let r = h.status(2);
    assert_eq!(r.list_cap, STATUS_LIST_CAP as u64);
    assert_eq!((r.totals.clients, r.clients.len()), (n as u64, STATUS_LIST_CAP));
    assert_eq!(r.clients[0].client_id, last.unwrap(), "newest first");
    assert!(r.clients.windows(2).all(|w| w[0].client_id > w[1].client_id));
    assert_eq!((r.totals.workers, r.workers.len()), (STATUS_LIST_CAP as u64 + 10, STATUS_LIST_CAP));
    assert_eq!(r.workers[0].worker_address, "w0000:1", "workers in address order");
    // Bounded JSON: about 100 bytes per entry, whatever the totals.
    let bytes = serde_json::to_vec(&r).unwrap().len();
    assert!(bytes < 1 << 20, "{bytes} bytes");
}

#[test]
fn split_state_of_an_old_journal_has_no_reissued_splits() {
    // Written before `reissued` existed.
    let old = json!({
        "total": 4, "repetition": 0, "next_index": 2, "leases": {"w1": [[0, 0], [0, 1]]},
        "requeue": [], "handed_out": 2
    });
    let s: shardwise_core::dispatch::state::SplitState = serde_json::from_value(old).unwrap();
    assert_eq!(s.reissued, 0);
    let p = shardwise_core::dispatch::status::split_progress(&s);
    assert_eq!(figures(p), [2, 0, 2, 0, 2, 0, 4]);
}
