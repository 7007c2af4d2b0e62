//! A deterministic, single-threaded simulation of a Shardwise cluster on a virtual clock: one
//! sans-IO dispatcher driven exactly as the gateway drives it, simulated workers that run one
//! [`Pipeline`] per task, and simulated clients that heartbeat and read elements.
//!
//! Drive rule, as in production: after every dispatcher call the journal is drained (each record
//! is framed into the current segment and applied to a shadow state that must equal the live
//! one), and only then does the reply count as sent. A dispatcher crash keeps exactly the records
//! drained so far; [`Sim::restart_dispatcher`] decodes the segments, recovers from them and checks
//! the recovered state against the state at the moment of the crash.
//!
//! Protocol rules the simulated actors follow (the dispatcher relies on them):
//! - a worker asks for splits only when its task's pipeline asks for one, i.e. after every
//!   element of its earlier splits has been served to a client (that get-split call acknowledges
//!   the earlier splits);
//! - a worker reports a task complete when its pipeline ends (every element served), and serves
//!   the end of sequence only once the dispatcher acknowledged that report (see
//!   [`SimConfig::eos_after_ack`]); workers send a per-process `worker_uid`;
//! - a client reads every listed task that is not finished and not on a lost worker, and stops
//!   an epoch when the dispatcher says the iteration is finished and every listed task is done.
//!
//! Each test file uses a different subset of this module.
#![allow(dead_code)]

pub(crate) mod replay;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use shardwise_core::dataset::{DatasetDef, Element, Pipeline, Sharding, Step};
use shardwise_core::dispatch::framing::{Tail, segment_header};
use shardwise_core::dispatch::journal::{decode_updates, encode_update};
use shardwise_core::dispatch::wire::{
    ClientHeartbeat, CreateIteration, CreateJob, GetSplits, IterationLease, NamedMode,
    ProcessingMode, RegisterDataset, SplitId, SplitsReply, TaskDef, TaskInfo, TaskProgress,
    WorkerHeartbeat, WorkerHeartbeatReply, WorkerUpdate, WorkerUpdateReply,
};
use shardwise_core::dispatch::{
    Call, DispatchError, Dispatcher, DispatcherConfig, Driver, Event, IterationId, JobId, Millis,
    ReleaseClient, ShardingPolicy, State, TargetWorkers, TaskId, Update, VecSink, apply,
};

// ---------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------

pub(crate) use shardwise_core::rng::SplitMix64;

/// A dataset definition from JSON (panics on an invalid one).
pub(crate) fn def(v: Value) -> DatasetDef {
    DatasetDef::from_json(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
}

/// `range(n)`.
pub(crate) fn range(n: i64) -> DatasetDef {
    def(json!({"source": {"range": {"stop": n}}}))
}

/// `range(start, stop)`.
pub(crate) fn range_from(start: i64, stop: i64) -> DatasetDef {
    def(json!({"source": {"range": {"start": start, "stop": stop}}}))
}

/// `base` with more transforms appended.
pub(crate) fn with(mut base: DatasetDef, transforms: Value) -> DatasetDef {
    let Value::Array(items) = transforms else { panic!("transforms must be an array") };
    for t in items {
        base.transforms.push(shardwise_core::dataset::TransformDef::from_json(&t).unwrap());
    }
    base
}

/// JSON integers.
pub(crate) fn ints(values: impl IntoIterator<Item = i64>) -> Vec<Value> {
    values.into_iter().map(Value::from).collect()
}

/// A multiset of values (keyed by their JSON text).
pub(crate) fn multiset<'a>(values: impl IntoIterator<Item = &'a Value>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for v in values {
        *m.entry(v.to_string()).or_insert(0) += 1;
    }
    m
}

/// `k` copies of each value as a multiset.
pub(crate) fn copies(values: &[Value], k: usize) -> BTreeMap<String, usize> {
    values.iter().map(|v| (v.to_string(), k)).collect::<BTreeMap<_, _>>()
}

/// Integers of values, sorted.
pub(crate) fn sorted_ints(values: &[Value]) -> Vec<i64> {
    let mut v: Vec<i64> = values.iter().map(|x| x.as_i64().expect("an integer")).collect();
    v.sort_unstable();
    v
}

/// The processing mode of a policy.
pub(crate) fn mode(policy: ShardingPolicy) -> ProcessingMode {
    ProcessingMode::Policy { sharding_policy: policy }
}

/// TensorFlow's legacy `distributed_epoch`.
pub(crate) fn distributed_epoch() -> ProcessingMode {
    ProcessingMode::Named(NamedMode::DistributedEpoch)
}

/// A create-job request.
pub(crate) fn job_req(dataset_id: &str, policy: ShardingPolicy, name: Option<&str>) -> CreateJob {
    CreateJob {
        dataset_id: dataset_id.into(),
        processing_mode: mode(policy),
        job_name: name.map(str::to_owned),
        num_consumers: None,
        target_workers: TargetWorkers::Auto,
        cross_trainer_cache: false,
        split_size: None,
    }
}

/// A get-split request that acknowledges every split the worker holds.
pub(crate) fn splits_req(worker: &str, repetition: u64, max: u32) -> GetSplits {
    GetSplits {
        worker_address: worker.into(),
        worker_uid: None,
        repetition,
        split_provider_index: 0,
        max_splits: Some(max),
        acknowledge: None,
    }
}

/// A get-split request that acknowledges exactly `acks` (ids from earlier replies).
pub(crate) fn splits_req_ack(
    worker: &str,
    repetition: u64,
    max: u32,
    acks: Vec<SplitId>,
) -> GetSplits {
    GetSplits {
        worker_address: worker.into(),
        worker_uid: None,
        repetition,
        split_provider_index: 0,
        max_splits: Some(max),
        acknowledge: Some(acks),
    }
}

/// The sharding a worker applies for a task.
pub(crate) fn sharding_of(def: &TaskDef) -> Sharding {
    let (num_workers, worker_index) = (def.num_workers.unwrap_or(1), def.worker_index.unwrap_or(0));
    match def.processing_mode {
        ShardingPolicy::Off => Sharding::Off,
        ShardingPolicy::Dynamic => Sharding::Dynamic,
        ShardingPolicy::File => Sharding::File { num_workers, worker_index },
        ShardingPolicy::Data => Sharding::Data { num_workers, worker_index },
        ShardingPolicy::FileOrData => Sharding::FileOrData { num_workers, worker_index },
        ShardingPolicy::Hint => Sharding::Hint { num_workers, worker_index },
    }
}

/// Runs a non-DYNAMIC pipeline locally to its end (the expected output of one task).
pub(crate) fn run_local(
    def: &DatasetDef,
    sharding: Sharding,
    files: &BTreeMap<String, Vec<u8>>,
) -> Vec<Value> {
    let mut p = Pipeline::new(def, sharding).unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    loop {
        match p.next() {
            Step::Element(Element::Value(v)) => out.push(v),
            Step::NeedFile { path } => p.provide_file(&path, &files[&path]),
            Step::NeedSplit { .. } => panic!("a static pipeline asked for a split"),
            Step::Element(other) => panic!("not a JSON element: {other:?}"),
            Step::NeedRows(r) => panic!("these datasets have no columnar files: {r:?}"),
            Step::NeedOutputs(r) => panic!("not a producer's pipeline: {r:?}"),
            Step::Yield => {}
            Step::End => return out,
            Step::Error(e) => panic!("{e}"),
        }
    }
}

/// Text files with the given lines.
pub(crate) fn line_files(files: &[(&str, &[&str])]) -> BTreeMap<String, Vec<u8>> {
    files
        .iter()
        .map(|(path, lines)| {
            let mut text = lines.join("\n");
            if !lines.is_empty() {
                text.push('\n');
            }
            ((*path).to_owned(), text.into_bytes())
        })
        .collect()
}

/// A `files` dataset in `lines` format.
pub(crate) fn files_def(paths: &[&str]) -> DatasetDef {
    def(json!({"source": {"files": {"paths": paths, "format": "lines"}}}))
}

/// JSON strings.
pub(crate) fn strs(values: &[&str]) -> Vec<Value> {
    values.iter().map(|s| Value::String((*s).to_owned())).collect()
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// How the simulated cluster behaves.
#[derive(Debug, Clone)]
pub(crate) struct SimConfig {
    /// The dispatcher's settings.
    pub(crate) dispatcher: DispatcherConfig,
    /// Virtual milliseconds per step.
    pub(crate) tick: u64,
    /// Worker heartbeat interval.
    pub(crate) worker_heartbeat: u64,
    /// Client heartbeat (task refresh) interval.
    pub(crate) client_heartbeat: u64,
    /// Requests to the dispatcher are applied up to this many ms after they were sent.
    pub(crate) max_delay: u64,
    /// `max_splits` of a get-split call.
    pub(crate) max_splits: u32,
    /// Elements per read request.
    pub(crate) read_batch: usize,
    /// Read requests per client per step.
    pub(crate) reads_per_tick: usize,
    /// Check shadow replay == live state every this many dispatcher calls (0: never).
    pub(crate) check_every: u64,
    /// Probability (per million) that a dispatcher reply is lost after the request was applied.
    pub(crate) lose_replies_per_million: u64,
    /// Seed of the simulation's PRNG.
    pub(crate) seed: u64,
    /// Workers send a per-process `worker_uid` in heartbeats (false: like TensorFlow's
    /// workers before uids, a restart at the same address is indistinguishable).
    pub(crate) send_worker_uid: bool,
    /// Workers serve a task's end of sequence only after the dispatcher acknowledged its
    /// completion report (false: at once, so a worker that dies before its report gets
    /// through leaves clients that saw the end waiting for an iteration that never finishes).
    pub(crate) eos_after_ack: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            dispatcher: DispatcherConfig {
                fault_tolerant: true,
                worker_timeout: Millis(1_000),
                job_gc_check_interval: Millis(1_000),
                ..DispatcherConfig::default()
            },
            tick: 10,
            worker_heartbeat: 100,
            client_heartbeat: 20,
            max_delay: 0,
            max_splits: 1,
            read_batch: 2,
            reads_per_tick: 2,
            check_every: 1,
            lose_replies_per_million: 0,
            seed: 0,
            send_worker_uid: true,
            eos_after_ack: true,
        }
    }
}

impl SimConfig {
    /// With a fixed static-sharding worker list.
    pub(crate) fn with_worker_list(mut self, list: &[&str]) -> Self {
        self.dispatcher.worker_addresses = list.iter().map(|s| (*s).to_owned()).collect();
        self
    }
}

// ---------------------------------------------------------------------------------------------
// Actors
// ---------------------------------------------------------------------------------------------

/// A task on a simulated worker.
#[derive(Debug)]
pub(crate) struct WorkerTask {
    pub(crate) def: TaskDef,
    pipeline: Result<Pipeline, String>,
    /// The pipeline is waiting for a split of this repetition.
    need_split: Option<u64>,
    split_outstanding: bool,
    /// Ids of the splits received last; acknowledged by the next request (the worker asks
    /// only when their elements were read), so a lost reply is simply asked again.
    acks: Vec<SplitId>,
    retry_at: Millis,
    /// The pipeline ended (its completion is reported).
    pub(crate) ended: bool,
    /// The dispatcher acknowledged the completion report.
    pub(crate) completion_acked: bool,
}

/// A simulated worker process at a fixed address.
#[derive(Debug)]
pub(crate) struct SimWorker {
    pub(crate) addr: String,
    pub(crate) tags: Vec<String>,
    /// The process runs.
    pub(crate) up: bool,
    /// Partitioned: sends nothing and serves nothing until then (its state is kept).
    pub(crate) paused_until: Option<Millis>,
    /// Process generation (a restart starts a new one; replies to older ones are dropped).
    pub(crate) generation: u64,
    pub(crate) tasks: BTreeMap<TaskId, WorkerTask>,
    /// Tasks the dispatcher told this process to delete (reads answer end of sequence).
    pub(crate) deleted: BTreeSet<TaskId>,
    next_heartbeat: Millis,
    heartbeat_outstanding: bool,
    update_outstanding: bool,
    pending_completions: BTreeSet<TaskId>,
    /// Restart automatically at this time (see [`Sim::kill_worker`]).
    pub(crate) restart_at: Option<Millis>,
    /// Times killed.
    pub(crate) kills: u64,
    /// The incarnation the dispatcher reported last.
    pub(crate) incarnation_seen: Option<String>,
    /// Errors the dispatcher returned to this worker (other than unavailability).
    pub(crate) errors: Vec<String>,
    /// Get-split refusals while the dispatcher had this worker as lost ("heartbeat first").
    pub(crate) rejoin_signals: Vec<String>,
}

impl SimWorker {
    fn reachable(&self, now: Millis) -> bool {
        self.up && self.paused_until.is_none_or(|t| now >= t)
    }
}

/// What a simulated client reads: which job, which repetitions, how much.
#[derive(Debug, Clone)]
pub(crate) struct ClientSpec {
    pub(crate) dataset_id: String,
    pub(crate) mode: ProcessingMode,
    pub(crate) job_name: Option<String>,
    pub(crate) split_size: Option<u64>,
    pub(crate) target_workers: TargetWorkers,
    pub(crate) cross_trainer_cache: bool,
    /// The repetition of the first iteration.
    pub(crate) first_repetition: u64,
    /// Iterations read one after the other (`repeat` after `distribute`).
    pub(crate) epochs: u64,
    /// Elements the client may still read (`None`: unlimited).
    pub(crate) budget: Option<usize>,
    /// Do nothing before this time.
    pub(crate) start_at: Millis,
}

impl ClientSpec {
    pub(crate) fn new(dataset_id: &str, policy: ShardingPolicy) -> Self {
        ClientSpec {
            dataset_id: dataset_id.into(),
            mode: mode(policy),
            job_name: None,
            split_size: None,
            target_workers: TargetWorkers::Auto,
            cross_trainer_cache: false,
            first_repetition: 0,
            epochs: 1,
            budget: None,
            start_at: Millis(0),
        }
    }
    pub(crate) fn job(mut self, name: &str) -> Self {
        self.job_name = Some(name.into());
        self
    }
    pub(crate) fn epochs(mut self, n: u64) -> Self {
        self.epochs = n;
        self
    }
    pub(crate) fn repetition(mut self, r: u64) -> Self {
        self.first_repetition = r;
        self
    }
    pub(crate) fn budget(mut self, n: usize) -> Self {
        self.budget = Some(n);
        self
    }
    pub(crate) fn split_size(mut self, n: u64) -> Self {
        self.split_size = Some(n);
        self
    }
    pub(crate) fn mode(mut self, m: ProcessingMode) -> Self {
        self.mode = m;
        self
    }
    pub(crate) fn create_job(&self) -> CreateJob {
        CreateJob {
            dataset_id: self.dataset_id.clone(),
            processing_mode: self.mode,
            job_name: self.job_name.clone(),
            num_consumers: None,
            target_workers: self.target_workers,
            cross_trainer_cache: self.cross_trainer_cache,
            split_size: self.split_size,
        }
    }
}

/// One element a client read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Read {
    pub(crate) client: usize,
    /// The iteration's repetition (the client's epoch).
    pub(crate) repetition: u64,
    pub(crate) iteration: IterationId,
    pub(crate) task: TaskId,
    pub(crate) worker: String,
    pub(crate) generation: u64,
    /// The source repetition inside the worker's pipeline when it produced the element.
    pub(crate) source_repetition: u64,
    pub(crate) value: Value,
}

/// A simulated client (one dataset object being iterated).
#[derive(Debug)]
pub(crate) struct SimClient {
    pub(crate) spec: ClientSpec,
    pub(crate) job_id: Option<JobId>,
    pub(crate) lease: Option<IterationLease>,
    /// Epochs started so far minus one (index into `spec.epochs`).
    pub(crate) epoch: u64,
    session: u64,
    pub(crate) tasks: Vec<TaskInfo>,
    pub(crate) eos: BTreeSet<TaskId>,
    pub(crate) finished_seen: bool,
    next_heartbeat: Millis,
    heartbeat_outstanding: bool,
    cursor: usize,
    pub(crate) reads: Vec<Read>,
    pub(crate) errors: Vec<DispatchError>,
    /// Errors workers returned for reads.
    pub(crate) read_errors: Vec<String>,
    pub(crate) epochs_completed: u64,
    pub(crate) done: bool,
    pub(crate) failed: bool,
    /// Stop heartbeating (a client that went silent, e.g. a destroyed iterator without release).
    pub(crate) silent: bool,
    pending_release: Vec<shardwise_core::dispatch::ClientId>,
    pub(crate) incarnation_seen: Option<String>,
    /// Release the lease at the end of each epoch (false: keep it, as a live iterator does).
    pub(crate) release_at_end: bool,
}

/// What a worker answered to a read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Served {
    /// Elements (with the source repetition they came from) and whether the sequence ended.
    Elements(Vec<(u64, Value)>, bool),
    /// The worker does not answer (dead or partitioned).
    Unavailable,
    /// The worker does not know the task (yet).
    NotFound,
    /// The task's pipeline failed.
    Failed(String),
}

/// Everything a task served in one worker process.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ServedLog {
    pub(crate) iteration: Option<IterationId>,
    pub(crate) elements: Vec<(u64, Value)>,
    pub(crate) ended: bool,
}

#[derive(Debug, Clone)]
enum Req {
    WorkerHeartbeat {
        addr: String,
        generation: u64,
        current: Vec<TaskId>,
        tags: Vec<String>,
    },
    WorkerUpdate {
        addr: String,
        generation: u64,
        tasks: Vec<TaskId>,
    },
    GetSplits {
        addr: String,
        generation: u64,
        task: TaskId,
        iteration: IterationId,
        req: GetSplits,
    },
    ClientHeartbeat {
        client: usize,
        session: u64,
        client_id: shardwise_core::dispatch::ClientId,
    },
}

// ---------------------------------------------------------------------------------------------
// The simulation
// ---------------------------------------------------------------------------------------------

/// The simulated cluster.
#[derive(Debug)]
pub(crate) struct Sim {
    pub(crate) cfg: SimConfig,
    pub(crate) now: Millis,
    pub(crate) rng: SplitMix64,
    /// The dispatcher and its sink (`None` while it is down).
    pub(crate) d: Option<Driver<VecSink>>,
    pub(crate) incarnations: u64,
    /// The durable journal (records made durable so far, across incarnations).
    pub(crate) journal: Vec<Update>,
    /// The same records, framed: one segment per incarnation (or per compaction).
    pub(crate) segments: Vec<Vec<u8>>,
    shadow: State,
    calls: u64,
    crashed_state: Option<State>,
    queue: BTreeMap<(Millis, u64), Req>,
    seq: u64,
    pub(crate) workers: BTreeMap<String, SimWorker>,
    pub(crate) clients: Vec<SimClient>,
    pub(crate) files: BTreeMap<String, Vec<u8>>,
    /// Per (worker, process generation, task): what was served.
    pub(crate) served: BTreeMap<(String, u64, TaskId), ServedLog>,
    /// Every read, in global order.
    pub(crate) reads: Vec<Read>,
    pub(crate) events: Vec<(Millis, Event)>,
    /// Faults and notable events, for failure messages.
    pub(crate) trace: Vec<String>,
    pub(crate) lost_replies: u64,
}

impl Sim {
    /// A cluster whose dispatcher is up at time 0, without workers or clients.
    pub(crate) fn new(cfg: SimConfig) -> Sim {
        let mut sim = Sim::new_down(cfg);
        sim.start_dispatcher();
        sim
    }

    /// A cluster whose dispatcher has not started yet.
    pub(crate) fn new_down(cfg: SimConfig) -> Sim {
        let rng = SplitMix64::new(cfg.seed);
        let shadow = State::new(cfg.dispatcher.worker_addresses.clone());
        Sim {
            cfg,
            now: Millis(0),
            rng,
            d: None,
            incarnations: 0,
            journal: Vec::new(),
            segments: Vec::new(),
            shadow,
            calls: 0,
            crashed_state: None,
            queue: BTreeMap::new(),
            seq: 0,
            workers: BTreeMap::new(),
            clients: Vec::new(),
            files: BTreeMap::new(),
            served: BTreeMap::new(),
            reads: Vec::new(),
            events: Vec::new(),
            trace: Vec::new(),
            lost_replies: 0,
        }
    }

    /// A cluster with `n` workers `w0..`, registered.
    pub(crate) fn with_workers(cfg: SimConfig, n: usize) -> Sim {
        let mut sim = Sim::new(cfg);
        for i in 0..n {
            sim.add_worker(&format!("w{i}"));
        }
        sim.settle();
        sim
    }

    pub(crate) fn note(&mut self, what: String) {
        self.trace.push(format!("t={} {what}", self.now.0));
    }

    // --- the dispatcher -----------------------------------------------------------------------

    /// Starts the dispatcher for the first time (a fresh state).
    pub(crate) fn start_dispatcher(&mut self) {
        assert!(self.d.is_none());
        self.incarnations += 1;
        let d = Dispatcher::new(
            self.cfg.dispatcher.clone(),
            format!("inc-{}", self.incarnations),
            self.now,
        )
        .expect("valid dispatcher config");
        self.segments.push(segment_header().to_vec());
        self.d = Some(Driver::new(d, VecSink::default()));
        self.note("dispatcher started".into());
    }

    /// The dispatcher (panics while it is down).
    pub(crate) fn dispatcher(&self) -> &Dispatcher {
        self.d.as_ref().expect("the dispatcher is up").dispatcher()
    }

    /// Its state.
    pub(crate) fn state(&self) -> &State {
        self.dispatcher().state()
    }

    /// Calls the dispatcher (if it is up) through its driver, whose sink keeps the records the
    /// reply waited for; they join the journal before the reply counts as sent. `None` while
    /// it is down.
    pub(crate) fn call<C: Call>(&mut self, request: C) -> Option<Result<C::Output, DispatchError>> {
        let now = self.now;
        let r = self.d.as_mut()?.call(now, request);
        self.drain();
        Some(r)
    }

    /// [`Sim::call`] that requires the dispatcher to be up.
    pub(crate) fn dispatch<C: Call>(&mut self, request: C) -> Result<C::Output, DispatchError> {
        self.call(request).expect("the dispatcher is up")
    }

    /// Runs the dispatcher's timers (if it is up).
    pub(crate) fn tick(&mut self) {
        let now = self.now;
        if let Some(d) = self.d.as_mut() {
            d.handle_timeout(now);
            self.drain();
        }
    }

    fn drain(&mut self) {
        let Some(d) = self.d.as_mut() else { return };
        let segment = self.segments.last_mut().expect("an open segment");
        for u in std::mem::take(&mut d.sink_mut().records) {
            encode_update(&u, segment).expect("every update encodes");
            apply(&mut self.shadow, &u);
            self.journal.push(u);
        }
        while let Some(e) = d.poll_event() {
            self.events.push((self.now, e));
        }
        self.calls += 1;
        if self.cfg.check_every > 0 && self.calls.is_multiple_of(self.cfg.check_every) {
            let what =
                format!("replay of the journal at t={} (seed {})", self.now.0, self.cfg.seed);
            replay::assert_same_state(&what, &self.shadow, d.dispatcher().state());
        }
    }

    /// Registers a dataset.
    pub(crate) fn register(&mut self, dataset: DatasetDef) -> String {
        self.dispatch(RegisterDataset { dataset, dataset_id: None, metadata: None })
            .expect("register")
            .dataset_id
    }

    /// The records of all segments, decoded (checks that they equal the in-memory journal).
    pub(crate) fn decoded_journal(&self) -> Vec<Update> {
        let mut all = Vec::new();
        for seg in &self.segments {
            let r = decode_updates(seg).expect("every segment decodes");
            assert_eq!(r.tail, Tail::Clean);
            all.extend(r.updates);
        }
        // Compared by encoding: a decoded snapshot record lacks the state's derived indexes
        // (`#[serde(skip)]`), which replay rebuilds.
        let json = |u: &Update| serde_json::to_value(u).expect("encodes");
        assert_eq!(all.len(), self.journal.len(), "decoded segments hold every record");
        for (a, b) in all.iter().zip(&self.journal) {
            assert!(json(a) == json(b), "decoded segments equal the journal");
        }
        all
    }

    /// The dispatcher process dies; the records drained so far are durable, nothing else.
    pub(crate) fn crash_dispatcher(&mut self) {
        let d = self.d.take().expect("the dispatcher is up");
        self.crashed_state = Some(d.dispatcher().state().clone());
        self.note("dispatcher crashed".into());
    }

    /// A new dispatcher process recovers from the durable journal; its state must equal the
    /// crashed dispatcher's.
    pub(crate) fn restart_dispatcher(&mut self) {
        assert!(self.d.is_none());
        let records = self.decoded_journal();
        self.incarnations += 1;
        let d = Dispatcher::recover(
            self.cfg.dispatcher.clone(),
            format!("inc-{}", self.incarnations),
            self.now,
            &records,
        )
        .expect("recover");
        if let Some(crashed) = self.crashed_state.take() {
            let what = format!("recovery after a crash (seed {})", self.cfg.seed);
            replay::assert_same_state(&what, d.state(), &crashed);
        }
        d.state().check_heartbeat_index().expect("heartbeat index after recovery");
        self.segments.push(segment_header().to_vec());
        self.d = Some(Driver::new(d, VecSink::default()));
        self.note("dispatcher recovered".into());
    }

    /// Crash and recover at once.
    pub(crate) fn bounce_dispatcher(&mut self) {
        self.crash_dispatcher();
        self.restart_dispatcher();
    }

    /// A non-fault-tolerant restart: all state is gone.
    pub(crate) fn restart_dispatcher_fresh(&mut self) {
        if self.d.is_some() {
            self.crash_dispatcher();
        }
        self.crashed_state = None;
        self.journal.clear();
        self.segments.clear();
        self.shadow = State::new(self.cfg.dispatcher.worker_addresses.clone());
        self.start_dispatcher();
    }

    /// Compacts the journal into one snapshot record (a new segment).
    pub(crate) fn compact(&mut self) {
        let snap = self.dispatcher().snapshot();
        let mut seg = segment_header().to_vec();
        encode_update(&snap, &mut seg).expect("snapshot encodes");
        self.journal = vec![snap];
        self.segments = vec![seg];
        // Replaying the snapshot alone gives the live state.
        self.check_replay();
        self.note("journal compacted".into());
    }

    /// Full replay of the durable journal equals the live state.
    pub(crate) fn check_replay(&self) {
        let addresses = self.cfg.dispatcher.worker_addresses.clone();
        let when = format!(" (seed {})", self.cfg.seed);
        replay::check_replay(&when, addresses, &self.decoded_journal(), self.state());
    }

    // --- workers --------------------------------------------------------------------------------

    /// Starts a worker process at `addr` (it registers with its first heartbeat).
    pub(crate) fn add_worker(&mut self, addr: &str) {
        self.add_worker_tagged(addr, &[]);
    }

    /// Starts a worker with tags.
    pub(crate) fn add_worker_tagged(&mut self, addr: &str, tags: &[&str]) {
        assert!(!self.workers.contains_key(addr), "worker {addr} exists");
        self.workers.insert(
            addr.to_owned(),
            SimWorker {
                addr: addr.to_owned(),
                tags: tags.iter().map(|t| (*t).to_owned()).collect(),
                up: true,
                paused_until: None,
                generation: 0,
                tasks: BTreeMap::new(),
                deleted: BTreeSet::new(),
                next_heartbeat: self.now,
                heartbeat_outstanding: false,
                update_outstanding: false,
                pending_completions: BTreeSet::new(),
                restart_at: None,
                kills: 0,
                incarnation_seen: None,
                errors: Vec::new(),
                rejoin_signals: Vec::new(),
            },
        );
        self.note(format!("worker {addr} added"));
    }

    /// Kills a worker process: its tasks, buffered elements and leased splits are gone. With
    /// `restart_after`, a new process starts at the same address that much later.
    pub(crate) fn kill_worker(&mut self, addr: &str, restart_after: Option<u64>) {
        let now = self.now;
        let w = self.workers.get_mut(addr).expect("known worker");
        w.up = false;
        w.paused_until = None;
        w.tasks.clear();
        w.deleted.clear();
        w.pending_completions.clear();
        w.heartbeat_outstanding = false;
        w.update_outstanding = false;
        w.generation += 1;
        w.kills += 1;
        w.restart_at = restart_after.map(|d| now.plus(Millis(d)));
        self.note(format!("worker {addr} killed"));
    }

    /// Starts a new process at a killed worker's address (empty task map).
    pub(crate) fn restart_worker(&mut self, addr: &str) {
        let now = self.now;
        let w = self.workers.get_mut(addr).expect("known worker");
        if w.up {
            w.tasks.clear();
            w.deleted.clear();
            w.pending_completions.clear();
            w.generation += 1;
            w.kills += 1;
        }
        w.up = true;
        w.restart_at = None;
        w.next_heartbeat = now;
        w.heartbeat_outstanding = false;
        w.update_outstanding = false;
        self.note(format!("worker {addr} restarted"));
    }

    /// Partitions a worker for `ms`: it sends and serves nothing but keeps its state.
    pub(crate) fn pause_worker(&mut self, addr: &str, ms: u64) {
        let until = self.now.plus(Millis(ms));
        // Heartbeats and split requests run on separate threads in a real worker: after the
        // partition either may go first.
        let jitter = self.rng.below(self.cfg.worker_heartbeat);
        let w = self.workers.get_mut(addr).expect("known worker");
        w.paused_until = Some(until);
        w.next_heartbeat = until.plus(Millis(jitter));
        self.note(format!("worker {addr} partitioned until {}", until.0));
    }

    /// Runs until every worker process that is up is registered and alive.
    pub(crate) fn settle(&mut self) {
        let ok = self.run_until(5_000, |s| {
            s.d.as_ref().map(Driver::dispatcher).is_some_and(|d| {
                s.workers.values().filter(|w| w.up).all(|w| {
                    d.state().workers().get(&w.addr).is_some_and(|x| x.alive)
                        && w.incarnation_seen.as_deref() == Some(d.incarnation())
                })
            })
        });
        assert!(ok, "workers did not register");
    }

    /// Task ids the dispatcher assigns to `addr` (unfinished, not collected).
    pub(crate) fn dispatcher_tasks_of(&self, addr: &str) -> usize {
        self.state().workers().get(addr).map_or(0, |w| w.tasks.len())
    }

    /// Tasks the worker process currently runs.
    pub(crate) fn worker_task_count(&self, addr: &str) -> usize {
        self.workers[addr].tasks.len()
    }

    /// Everything a worker served for a task, over all its processes, in order.
    pub(crate) fn served_by(&self, addr: &str) -> Vec<Value> {
        self.served
            .iter()
            .filter(|((a, _, _), _)| a == addr)
            .flat_map(|(_, log)| log.elements.iter().map(|(_, v)| v.clone()))
            .collect()
    }

    /// Serves up to `max` elements of `task` from the worker at `addr`.
    pub(crate) fn serve(&mut self, addr: &str, task: TaskId, max: usize) -> Served {
        let now = self.now;
        let eos_after_ack = self.cfg.eos_after_ack;
        let Sim { workers, files, served, .. } = self;
        let Some(w) = workers.get_mut(addr) else { return Served::Unavailable };
        if !w.reachable(now) {
            return Served::Unavailable;
        }
        let Some(t) = w.tasks.get_mut(&task) else {
            return if w.deleted.contains(&task) {
                Served::Elements(Vec::new(), true)
            } else {
                Served::NotFound
            };
        };
        let p = match &mut t.pipeline {
            Ok(p) => p,
            Err(e) => return Served::Failed(e.clone()),
        };
        let log = served.entry((addr.to_owned(), w.generation, task)).or_default();
        if t.ended {
            // The end is served once the completion report is acknowledged.
            let eos = t.completion_acked || !eos_after_ack;
            return Served::Elements(Vec::new(), eos);
        }
        log.iteration = Some(t.def.iteration_id);
        let mut out = Vec::new();
        let mut eos = false;
        while out.len() < max {
            match p.next() {
                Step::Element(Element::Value(v)) => {
                    let rep = p.repetition();
                    log.elements.push((rep, v.clone()));
                    out.push((rep, v));
                }
                Step::NeedFile { path } => match files.get(&path) {
                    Some(bytes) => p.provide_file(&path, bytes),
                    None => panic!("no file {path} in the simulation"),
                },
                Step::NeedSplit { repetition } => {
                    t.need_split = Some(repetition);
                    break;
                }
                Step::Element(other) => panic!("not a JSON element: {other:?}"),
                Step::NeedRows(r) => panic!("the simulation has no columnar files: {r:?}"),
                Step::NeedOutputs(r) => panic!("not a producer's pipeline: {r:?}"),
                Step::Yield => {}
                Step::End => {
                    eos = !eos_after_ack;
                    log.ended = true;
                    t.ended = true;
                    w.pending_completions.insert(task);
                    break;
                }
                Step::Error(e) => return Served::Failed(e.to_string()),
            }
        }
        Served::Elements(out, eos)
    }

    // --- clients --------------------------------------------------------------------------------

    /// Adds a client; it creates its job and first iteration on its next step.
    pub(crate) fn add_client(&mut self, spec: ClientSpec) -> usize {
        self.clients.push(SimClient {
            spec,
            job_id: None,
            lease: None,
            epoch: 0,
            session: 0,
            tasks: Vec::new(),
            eos: BTreeSet::new(),
            finished_seen: false,
            next_heartbeat: Millis(0),
            heartbeat_outstanding: false,
            cursor: 0,
            reads: Vec::new(),
            errors: Vec::new(),
            read_errors: Vec::new(),
            epochs_completed: 0,
            done: false,
            failed: false,
            silent: false,
            pending_release: Vec::new(),
            incarnation_seen: None,
            release_at_end: true,
        });
        self.clients.len() - 1
    }

    /// Lets client `i` read `n` more elements.
    pub(crate) fn allow(&mut self, i: usize, n: usize) {
        self.clients[i].spec.budget = Some(n);
    }

    /// Lets client `i` read without limit.
    pub(crate) fn unlimit(&mut self, i: usize) {
        self.clients[i].spec.budget = None;
    }

    /// Destroys client `i`'s iterator: it releases its lease and stops.
    pub(crate) fn destroy_client(&mut self, i: usize) {
        let c = &mut self.clients[i];
        c.done = true;
        c.session += 1;
        if let Some(lease) = c.lease.take() {
            let id = lease.client_id;
            if self.call(ReleaseClient { client_id: id }).is_none() {
                self.clients[i].pending_release.push(id);
            }
        }
    }

    /// Client `i` stops heartbeating (it keeps reading what it knows).
    pub(crate) fn silence(&mut self, i: usize) {
        self.clients[i].silent = true;
    }

    /// Runs until client `i` holds an iteration lease and knows its tasks.
    pub(crate) fn open(&mut self, i: usize, max_ms: u64) {
        let ok = self.run_until(max_ms, |s| {
            let c = &s.clients[i];
            c.failed || (c.lease.is_some() && !c.tasks.is_empty())
        });
        assert!(
            ok && !self.clients[i].failed,
            "client {i} did not open: {:?}",
            self.clients[i].errors
        );
    }

    /// The values client `i` read, in order.
    pub(crate) fn values(&self, i: usize) -> Vec<Value> {
        self.clients[i].reads.iter().map(|r| r.value.clone()).collect()
    }

    /// The values client `i` read in iteration repetition `r`.
    pub(crate) fn values_of(&self, i: usize, r: u64) -> Vec<Value> {
        self.clients[i]
            .reads
            .iter()
            .filter(|x| x.repetition == r)
            .map(|x| x.value.clone())
            .collect()
    }

    /// The values client `i` read, per worker.
    pub(crate) fn by_worker(&self, i: usize) -> BTreeMap<String, Vec<Value>> {
        let mut m: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for r in &self.clients[i].reads {
            m.entry(r.worker.clone()).or_default().push(r.value.clone());
        }
        m
    }

    /// Runs until client `i` finished all its epochs (panics after `max_ms` or on an error).
    pub(crate) fn finish(&mut self, i: usize, max_ms: u64) {
        let ok = self.run_until(max_ms, |s| s.clients[i].done || s.clients[i].failed);
        let c = &self.clients[i];
        assert!(
            ok && c.done && !c.failed,
            "client {i} did not finish: done={} failed={} errors={:?} read_errors={:?} \
             epochs_completed={} reads={} tasks={:?}\ntrace: {:#?}",
            c.done,
            c.failed,
            c.errors,
            c.read_errors,
            c.epochs_completed,
            c.reads.len(),
            c.tasks,
            self.trace
        );
    }

    /// Runs until client `i` has read `n` elements in total.
    pub(crate) fn read_until(&mut self, i: usize, n: usize, max_ms: u64) {
        let ok = self.run_until(max_ms, |s| s.clients[i].reads.len() >= n || s.clients[i].failed);
        assert!(
            ok && !self.clients[i].failed,
            "client {i} read {} of {n} elements; errors {:?}",
            self.clients[i].reads.len(),
            self.clients[i].errors
        );
    }

    // --- time -----------------------------------------------------------------------------------

    /// One step of virtual time.
    pub(crate) fn step(&mut self) {
        self.now = self.now.plus(Millis(self.cfg.tick));
        self.deliver_due();
        let due = self.d.as_ref().is_some_and(|d| self.now >= d.poll_timeout());
        if due {
            self.tick();
        }
        let addrs: Vec<String> = self.workers.keys().cloned().collect();
        for a in &addrs {
            self.worker_tick(a);
        }
        for i in 0..self.clients.len() {
            self.client_tick(i);
        }
    }

    /// Steps until `pred` holds (true) or `max_ms` passed (false).
    pub(crate) fn run_until(&mut self, max_ms: u64, mut pred: impl FnMut(&Sim) -> bool) -> bool {
        let deadline = self.now.plus(Millis(max_ms));
        loop {
            if pred(self) {
                return true;
            }
            if self.now >= deadline {
                return false;
            }
            self.step();
        }
    }

    /// Steps for `ms`.
    pub(crate) fn run_for(&mut self, ms: u64) {
        let end = self.now.plus(Millis(ms));
        while self.now < end {
            self.step();
        }
    }

    fn send(&mut self, req: Req) {
        let delay = self.rng.below(self.cfg.max_delay + 1);
        let at = self.now.plus(Millis(delay));
        self.seq += 1;
        self.queue.insert((at, self.seq), req);
    }

    fn deliver_due(&mut self) {
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let req = entry.remove();
            self.process(req);
        }
    }

    fn reply_lost(&mut self) -> bool {
        let lost = self.cfg.lose_replies_per_million > 0
            && self.rng.chance(self.cfg.lose_replies_per_million);
        if lost {
            self.lost_replies += 1;
        }
        lost
    }

    fn process(&mut self, req: Req) {
        let unavailable = || DispatchError::Unavailable("the dispatcher is not reachable".into());
        match req {
            Req::WorkerHeartbeat { addr, generation, current, tags } => {
                let worker_uid = self.cfg.send_worker_uid.then(|| format!("{addr}#{generation}"));
                let incarnation = self.workers.get(&addr).and_then(|w| w.incarnation_seen.clone());
                let hb = WorkerHeartbeat {
                    worker_address: addr.clone(),
                    current_tasks: current,
                    tags,
                    worker_uid,
                    incarnation,
                    tensorflow: None,
                };
                let mut r = self.call(hb.clone()).unwrap_or_else(|| Err(unavailable()));
                if self.reply_lost() {
                    r = Err(unavailable());
                }
                self.on_worker_heartbeat(&addr, generation, r);
            }
            Req::WorkerUpdate { addr, generation, tasks } => {
                let req = WorkerUpdate {
                    worker_address: addr.clone(),
                    worker_uid: self.cfg.send_worker_uid.then(|| format!("{addr}#{generation}")),
                    updates: tasks
                        .iter()
                        .map(|t| TaskProgress { task_id: *t, completed: true })
                        .collect(),
                };
                let mut r = self.call(req.clone()).unwrap_or_else(|| Err(unavailable()));
                if self.reply_lost() {
                    r = Err(unavailable());
                }
                self.on_worker_update(&addr, generation, &tasks, r);
            }
            Req::GetSplits { addr, generation, task, iteration, mut req } => {
                req.worker_uid = self.cfg.send_worker_uid.then(|| format!("{addr}#{generation}"));
                let was_lost = self
                    .d
                    .as_ref()
                    .and_then(|d| d.dispatcher().state().workers().get(&addr))
                    .is_some_and(|w| !w.alive);
                let mut r =
                    self.call((iteration, req.clone())).unwrap_or_else(|| Err(unavailable()));
                if self.reply_lost() {
                    r = Err(unavailable());
                }
                self.on_splits(&addr, generation, task, req.repetition, was_lost, r);
            }
            Req::ClientHeartbeat { client, session, client_id } => {
                let mut r = self
                    .call((client_id, ClientHeartbeat::default()))
                    .unwrap_or_else(|| Err(unavailable()));
                if self.reply_lost() {
                    r = Err(unavailable());
                }
                self.on_client_heartbeat(client, session, r);
            }
        }
    }

    fn on_worker_heartbeat(
        &mut self,
        addr: &str,
        generation: u64,
        r: Result<WorkerHeartbeatReply, DispatchError>,
    ) {
        let Some(w) = self.workers.get_mut(addr) else { return };
        if w.generation != generation {
            return;
        }
        w.heartbeat_outstanding = false;
        match r {
            Err(DispatchError::Unavailable(_)) => {}
            Err(e) => w.errors.push(format!("heartbeat: {} {}", e.code(), e.detail())),
            Ok(r) => {
                let new_incarnation =
                    w.incarnation_seen.as_ref().is_some_and(|i| *i != r.incarnation);
                w.incarnation_seen = Some(r.incarnation);
                for t in r.tasks_to_delete {
                    w.tasks.remove(&t);
                    w.deleted.insert(t);
                }
                if new_incarnation {
                    // A new dispatcher state: ids start over, so what was deleted under the
                    // old one says nothing about the new tasks.
                    w.deleted.clear();
                }
                for def in r.new_tasks {
                    if w.tasks.contains_key(&def.task_id) || w.deleted.contains(&def.task_id) {
                        continue;
                    }
                    let pipeline = Pipeline::new(
                        def.dataset.declarative().expect("a declarative task"),
                        sharding_of(&def),
                    )
                    .map_err(|e| e.to_string());
                    w.tasks.insert(
                        def.task_id,
                        WorkerTask {
                            def,
                            pipeline,
                            need_split: None,
                            split_outstanding: false,
                            acks: Vec::new(),
                            retry_at: Millis(0),
                            ended: false,
                            completion_acked: false,
                        },
                    );
                }
            }
        }
    }

    fn on_worker_update(
        &mut self,
        addr: &str,
        generation: u64,
        tasks: &[TaskId],
        r: Result<WorkerUpdateReply, DispatchError>,
    ) {
        let Some(w) = self.workers.get_mut(addr) else { return };
        if w.generation != generation {
            return;
        }
        w.update_outstanding = false;
        match r {
            Ok(_) => {
                for t in tasks {
                    w.pending_completions.remove(t);
                    if let Some(task) = w.tasks.get_mut(t) {
                        task.completion_acked = true;
                    }
                }
            }
            Err(DispatchError::Unavailable(_)) => {}
            Err(e) => w.errors.push(format!("update: {} {}", e.code(), e.detail())),
        }
    }

    fn on_splits(
        &mut self,
        addr: &str,
        generation: u64,
        task: TaskId,
        repetition: u64,
        was_lost: bool,
        r: Result<SplitsReply, DispatchError>,
    ) {
        let now = self.now;
        let Some(w) = self.workers.get_mut(addr) else { return };
        if w.generation != generation {
            return;
        }
        let Some(t) = w.tasks.get_mut(&task) else { return };
        t.split_outstanding = false;
        match r {
            Ok(reply) => {
                let Ok(p) = &mut t.pipeline else { return };
                let got = !reply.splits.is_empty() || reply.end_of_splits;
                t.acks = reply.split_ids;
                for s in reply.splits {
                    p.provide_split(repetition, Some(s.into()));
                }
                if reply.end_of_splits {
                    p.provide_split(repetition, None);
                }
                if got {
                    t.need_split = None;
                }
                if let Some(ms) = reply.retry_after_ms {
                    t.retry_at = now.plus(Millis(ms));
                }
            }
            Err(DispatchError::Unavailable(_)) => t.retry_at = now.plus(Millis(50)),
            Err(DispatchError::FailedPrecondition(m)) if was_lost => {
                // A worker declared lost gets no splits until it heartbeats again.
                t.retry_at = now.plus(Millis(50));
                w.next_heartbeat = w.next_heartbeat.min(now);
                w.rejoin_signals.push(m);
            }
            Err(e) => {
                t.retry_at = now.plus(Millis(100));
                w.errors.push(format!("get_splits(task {task}): {} {}", e.code(), e.detail()));
            }
        }
    }

    fn on_client_heartbeat(
        &mut self,
        i: usize,
        session: u64,
        r: Result<shardwise_core::dispatch::wire::ClientHeartbeatReply, DispatchError>,
    ) {
        let c = &mut self.clients[i];
        if c.session != session {
            return;
        }
        c.heartbeat_outstanding = false;
        match r {
            Ok(r) => {
                c.tasks = r.tasks;
                c.finished_seen = r.iteration_finished;
                c.incarnation_seen = Some(r.incarnation);
            }
            Err(DispatchError::Unavailable(_)) => {}
            Err(e) => {
                c.errors.push(e);
                c.failed = true;
            }
        }
    }

    fn worker_tick(&mut self, addr: &str) {
        let now = self.now;
        let hb_interval = self.cfg.worker_heartbeat;
        let max_splits = self.cfg.max_splits;
        let mut out = Vec::new();
        {
            let w = self.workers.get_mut(addr).expect("known worker");
            if !w.up && w.restart_at.is_some_and(|t| now >= t) {
                w.up = true;
                w.restart_at = None;
                w.next_heartbeat = now;
                self.trace.push(format!("t={} worker {addr} restarted", now.0));
            }
            if !w.reachable(now) {
                return;
            }
            if now >= w.next_heartbeat && !w.heartbeat_outstanding {
                w.next_heartbeat = now.plus(Millis(hb_interval));
                w.heartbeat_outstanding = true;
                out.push(Req::WorkerHeartbeat {
                    addr: addr.to_owned(),
                    generation: w.generation,
                    current: w.tasks.keys().copied().collect(),
                    tags: w.tags.clone(),
                });
            }
            if !w.pending_completions.is_empty() && !w.update_outstanding {
                w.update_outstanding = true;
                out.push(Req::WorkerUpdate {
                    addr: addr.to_owned(),
                    generation: w.generation,
                    tasks: w.pending_completions.iter().copied().collect(),
                });
            }
            let generation = w.generation;
            for (id, t) in &mut w.tasks {
                if let Some(rep) = t.need_split
                    && !t.split_outstanding
                    && now >= t.retry_at
                {
                    t.split_outstanding = true;
                    let acks = std::mem::take(&mut t.acks);
                    out.push(Req::GetSplits {
                        addr: addr.to_owned(),
                        generation,
                        task: *id,
                        iteration: t.def.iteration_id,
                        req: splits_req_ack(addr, rep, max_splits, acks),
                    });
                }
            }
        }
        for r in out {
            self.send(r);
        }
    }

    fn client_tick(&mut self, i: usize) {
        let now = self.now;
        // Releases that could not be sent while the dispatcher was down.
        if self.d.is_some() && !self.clients[i].pending_release.is_empty() {
            let ids = std::mem::take(&mut self.clients[i].pending_release);
            for id in ids {
                let _ = self.call(ReleaseClient { client_id: id });
            }
        }
        {
            let c = &self.clients[i];
            if c.done || c.failed || now < c.spec.start_at {
                return;
            }
        }
        if self.clients[i].job_id.is_none() {
            let req = self.clients[i].spec.create_job();
            match self.call(req.clone()) {
                None | Some(Err(DispatchError::Unavailable(_))) => return,
                Some(Err(e)) => {
                    let c = &mut self.clients[i];
                    c.errors.push(e);
                    c.failed = true;
                    return;
                }
                Some(Ok(created)) => self.clients[i].job_id = Some(created.job_id),
            }
        }
        if self.clients[i].lease.is_none() {
            let c = &self.clients[i];
            let job = c.job_id.expect("job created");
            let req = CreateIteration {
                repetition: c.spec.first_repetition + c.epoch,
                ..CreateIteration::default()
            };
            match self.call((job, req)) {
                None | Some(Err(DispatchError::Unavailable(_))) => return,
                Some(Err(e)) => {
                    let c = &mut self.clients[i];
                    c.errors.push(e);
                    c.failed = true;
                    return;
                }
                Some(Ok(lease)) => {
                    let c = &mut self.clients[i];
                    c.lease = Some(lease);
                    c.session += 1;
                    c.tasks.clear();
                    c.eos.clear();
                    c.finished_seen = false;
                    c.next_heartbeat = now;
                    c.heartbeat_outstanding = false;
                    c.cursor = 0;
                }
            }
        }
        // Heartbeat.
        let hb_interval = self.cfg.client_heartbeat;
        {
            let c = &mut self.clients[i];
            let lease = c.lease.as_ref().expect("lease");
            if !c.silent && now >= c.next_heartbeat && !c.heartbeat_outstanding {
                c.next_heartbeat = now.plus(Millis(hb_interval));
                c.heartbeat_outstanding = true;
                let req = Req::ClientHeartbeat {
                    client: i,
                    session: c.session,
                    client_id: lease.client_id,
                };
                self.send(req);
            }
        }
        // Reads: round-robin over readable tasks.
        for _ in 0..self.cfg.reads_per_tick {
            let c = &mut self.clients[i];
            let budget = c.spec.budget.unwrap_or(usize::MAX);
            if budget == 0 || c.tasks.is_empty() {
                break;
            }
            let n = c.tasks.len();
            let pick = (0..n).map(|k| (c.cursor + k) % n).find(|&k| {
                let t = &c.tasks[k];
                !c.eos.contains(&t.task_id) && !t.finished && !t.worker_lost
            });
            let Some(k) = pick else { break };
            c.cursor = (k + 1) % n;
            let (task, worker) = (c.tasks[k].task_id, c.tasks[k].worker_address.clone());
            let max = self.cfg.read_batch.min(budget);
            let served = self.serve(&worker, task, max);
            let generation = self.workers.get(&worker).map_or(0, |w| w.generation);
            let c = &mut self.clients[i];
            match served {
                Served::Elements(elements, eos) => {
                    let lease = c.lease.as_ref().expect("lease");
                    let repetition = c.spec.first_repetition + c.epoch;
                    for (source_repetition, value) in elements {
                        let read = Read {
                            client: i,
                            repetition,
                            iteration: lease.iteration_id,
                            task,
                            worker: worker.clone(),
                            generation,
                            source_repetition,
                            value,
                        };
                        c.reads.push(read.clone());
                        self.reads.push(read);
                        if let Some(b) = &mut c.spec.budget {
                            *b = b.saturating_sub(1);
                        }
                    }
                    if eos {
                        c.eos.insert(task);
                    }
                }
                Served::Unavailable | Served::NotFound => {}
                Served::Failed(e) => {
                    c.read_errors.push(e);
                    c.eos.insert(task);
                    c.failed = true;
                    return;
                }
            }
        }
        // End of the epoch.
        let c = &mut self.clients[i];
        let all_done =
            c.tasks.iter().all(|t| c.eos.contains(&t.task_id) || t.finished || t.worker_lost);
        if c.finished_seen && all_done {
            let lease = c.lease.take().expect("lease");
            c.epochs_completed += 1;
            c.epoch += 1;
            c.session += 1;
            c.tasks.clear();
            c.finished_seen = false;
            if c.epoch >= c.spec.epochs {
                c.done = true;
            }
            if c.release_at_end {
                let id = lease.client_id;
                if self.call(ReleaseClient { client_id: id }).is_none() {
                    self.clients[i].pending_release.push(id);
                }
            }
        }
    }
}
