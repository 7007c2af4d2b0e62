//! The dispatcher against a small reference model (`proptest-state-machine`).
//!
//! The model ([`Model`]) is a few plain structs written for this test and shares no code
//! with the implementation: workers (registered, alive or lost, the tasks each worker
//! process runs, which iterations it saw `end_of_splits` in), `range` datasets, OFF and
//! DYNAMIC jobs (named or anonymous, get-or-create), iterations with their tasks, client
//! leases with their deadlines, and per DYNAMIC iteration the status of every split of
//! repetition 0 (fresh, leased by a worker, queued again after a loss, acknowledged).
//! Time is virtual and only moves forward; every transition advances it. Transitions:
//! worker heartbeats (register, revive), worker process restarts (a new `worker_uid`),
//! datasets, jobs, iterations (client leases), client heartbeats and releases, get-split
//! (max 1..4, plus probes with bad arguments and unknown ids), task completion (DYNAMIC
//! only after `end_of_splits`), time passing with the timers run (clients expire, silent
//! workers are lost), and a crash with recovery from the journal (optionally compacted to
//! a snapshot). Iteration garbage collection is off (`job_gc_timeout: None`) and not modelled.
//! TensorFlow datasets are registered beside the declarative ones (get-or-register by id and
//! by content, generated ids shared with declarative datasets) and have their compression
//! decided at run time, so their records go through every replay, recovery and compaction
//! check; their workers, jobs and splits are in `tests/dispatch_tensorflow.rs`.
//!
//! Get-split calls from a worker the dispatcher declared lost are generated too: they are
//! refused (`FAILED_PRECONDITION`) until a heartbeat revives the worker (regression tests
//! `bug_lost_worker_*` below).
//!
//! Each transition of the model is turned into the concrete calls it stands for (with the
//! answers and events the model expects), which the test runs against a [`Dispatcher`].
//! After every call the journal is drained; after every transition the invariants below
//! are checked:
//!
//! 1. `State::replay(journal) == live state`; every record also goes through the framed journal
//!    encoding, and a crash decodes the bytes back before the dispatcher is recovered.
//! 2. Absent worker losses a split of repetition 0 is handed out at most once, and once a
//!    worker saw `end_of_splits` every split `0..num_splits` was handed out.
//! 3. With losses no split is lost: the splits acknowledged by workers that were alive when
//!    they acknowledged them (asked again or finished) cover `0..num_splits` once every live
//!    worker of the iteration saw `end_of_splits` (or the iteration finished); a split is
//!    handed out at most once more per loss of a worker holding it; and `retry_after` is
//!    only answered while another *live* worker holds splits of the repetition.
//! 4. Replies do not leak: a client heartbeat lists only its iteration's tasks, a worker
//!    heartbeat's new tasks are that worker's, and splits lie inside the iteration's dataset.
//! 5. An iteration is finished only when every task is finished or its worker is lost, and
//!    when it becomes finished no live worker's task is unfinished.
//! 6. The model and the dispatcher agree on every answer (ids, status classes, tasks,
//!    splits, `iteration_finished`), on the events, and on a projection of the state.
//!
//! `PROPTEST_CASES` sets the number of cases (default 128).

#[path = "support/replay.rs"]
mod replay;

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest::test_runner::Config;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::framing::{Tail, segment_header};
use shardwise_core::dispatch::journal::{decode_updates, encode_update};
use shardwise_core::dispatch::wire::{
    ClientHeartbeat, CreateIteration, CreateJob, GetSplits, ProcessingMode, RegisterDataset,
    TaskProgress, WorkerHeartbeat, WorkerUpdate,
};
use shardwise_core::dispatch::{
    ClientId, DisableCompression, DispatchError, Dispatcher, DispatcherConfig, Driver, Event,
    IterationId, JobId, Millis, RegisterTfDataset, ReleaseClient, ShardingPolicy, SplitProviderDef,
    TargetWorkers, TaskId, TfDataset, Update, VecSink,
};

// ---------------------------------------------------------------------------------------
// Configuration shared by the model and the system under test.

const ADDRS: [&str; 4] = ["w0:7000", "w1:7000", "w2:7000", "w3:7000"];
const WORKER_TIMEOUT: u64 = 1_000;
const CLIENT_TIMEOUT: u64 = 2_500;
const CLIENT_GRACE: u64 = 4_000;
const MAX_DATASETS: usize = 3;
const MAX_JOBS: usize = 3;
const MAX_ITERATIONS: usize = 3;
const MAX_CLIENTS: usize = 6;
/// An id of every kind that the dispatcher never hands out in these tests.
const UNKNOWN: u64 = 999_999;
/// What the model expects as ids (TensorFlow's first ids).
const FIRST_DATASET: u64 = 1000;
const FIRST_ITERATION: u64 = 2000;
const FIRST_CLIENT: u64 = 3000;
const FIRST_TASK: u64 = 4000;
const FIRST_JOB: u64 = 5000;

fn dispatcher_config() -> DispatcherConfig {
    DispatcherConfig {
        fault_tolerant: true,
        worker_addresses: Vec::new(),
        worker_timeout: Millis(WORKER_TIMEOUT),
        client_timeout: Millis(CLIENT_TIMEOUT),
        client_first_heartbeat_grace: Millis(CLIENT_GRACE),
        // Timers run on every `handle_timeout` (time advances at least 1 ms per transition).
        job_gc_check_interval: Millis(1),
        job_gc_timeout: None,
        gc_dynamic_sharding_jobs: false,
        ..DispatcherConfig::default()
    }
}

fn incarnation(n: u32) -> String {
    format!("inc-{n}")
}

fn range_def(start: i64, stop: i64, step: i64) -> DatasetDef {
    DatasetDef::from_json(
        &json!({"source": {"range": {"start": start, "stop": stop, "step": step}}}),
    )
    .unwrap()
}

// ---------------------------------------------------------------------------------------
// The reference model.

/// A reference to an entity of the model by position, or to an id nobody has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ref {
    Known(usize),
    Unknown,
}

#[derive(Clone, Debug)]
enum Tr {
    /// Register, heartbeat or revive worker `w`.
    Heartbeat {
        w: usize,
    },
    /// Worker `w`'s process restarts (forgetting its tasks, with a new uid) and heartbeats.
    Restart {
        w: usize,
    },
    /// A `range(start, start + len, step)` dataset, with id `ds-<explicit>` if given.
    RegisterDataset {
        explicit: Option<u8>,
        start: i64,
        len: i64,
        step: i64,
    },
    CreateJob {
        dataset: Ref,
        dynamic: bool,
        name: Option<u8>,
        split_size: u64,
    },
    /// Get-or-create iteration `(job, repetition)` and take a client lease.
    CreateIteration {
        job: Ref,
        repetition: u64,
    },
    ClientHeartbeat {
        client: Ref,
    },
    ReleaseClient {
        client: Ref,
    },
    GetSplits {
        w: usize,
        iteration: Ref,
        max: u32,
        repetition: u64,
    },
    /// Worker `w` reports task `task` (an index) complete, maybe with an unknown id too.
    Complete {
        w: usize,
        task: usize,
        with_unknown: bool,
    },
    /// Time passes by `dt`, then the timers run.
    Tick {
        dt: u64,
    },
    /// A worker timeout passes in which only the workers in `keep` (a bit mask) heartbeat;
    /// then the timers run.
    Expire {
        keep: u8,
    },
    /// The dispatcher crashes and recovers from its journal (compacted to a snapshot first).
    Recover {
        compact: bool,
    },
    /// A TensorFlow dataset with graph `graph` (SNAPPY-compressed or not), with id
    /// `tf-<explicit>` if given.
    TfRegister {
        explicit: Option<u8>,
        graph: u8,
        snappy: bool,
    },
    /// A worker proposes to disable a TensorFlow dataset's compression.
    TfCompression {
        dataset: Ref,
        disable: bool,
    },
}

/// A TensorFlow dataset of the model.
#[derive(Clone, Debug)]
struct MTfDataset {
    id: String,
    graph: u8,
    snappy: bool,
    /// The run-time compression decision.
    decided: Option<bool>,
}

/// The model's fingerprint of a TensorFlow dataset: a function of its graph and metadata that
/// explicit ids (`tf-0`, `tf-1`) can collide with, so derived and explicit names meet.
fn tf_fingerprint(graph: u8, snappy: bool) -> u8 {
    graph * 2 + u8::from(snappy)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Fresh,
    Leased(usize),
    Requeued,
    Acked,
}

#[derive(Clone, Debug, Default)]
struct MWorker {
    registered: bool,
    alive: bool,
    last_seen: u64,
    /// The worker process's generation (its uid is `u<generation>`).
    generation: u32,
    /// The uid the dispatcher last recorded for it.
    recorded_uid: Option<u32>,
    /// Task ids the worker process runs (what it sends as `current_tasks`).
    known: BTreeSet<u64>,
    /// Iterations (by index) in which the worker saw `end_of_splits` for repetition 0.
    seen_end: BTreeSet<usize>,
}

#[derive(Clone, Debug)]
struct MDataset {
    id: String,
    start: i64,
    stop: i64,
    step: i64,
}

impl MDataset {
    fn len(&self) -> u64 {
        if self.stop <= self.start {
            0
        } else {
            u64::try_from(self.stop - self.start).unwrap().div_ceil(self.step as u64)
        }
    }
}

#[derive(Clone, Debug)]
struct MJob {
    id: u64,
    name: Option<String>,
    dataset: usize,
    dynamic: bool,
    split_size: u64,
}

#[derive(Clone, Debug)]
struct MIteration {
    id: u64,
    job: usize,
    repetition: u64,
    /// Task indexes, in creation order.
    tasks: Vec<usize>,
    clients: u64,
    finished: bool,
    /// DYNAMIC: the status of every split of repetition 0, and whether the provider moved
    /// on to repetition 1.
    splits: Option<(Vec<Status>, bool)>,
}

#[derive(Clone, Debug)]
struct MClient {
    id: u64,
    iteration: usize,
    active: bool,
    deadline: u64,
}

#[derive(Clone, Debug)]
struct MTask {
    id: u64,
    iteration: usize,
    worker: usize,
    finished: bool,
    abandoned: bool,
}

/// What a worker must be told about a new task.
#[derive(Clone, Debug, PartialEq)]
struct TaskExpect {
    task: u64,
    iteration: u64,
    job: u64,
    dataset_id: String,
    def: (i64, i64, i64),
    dynamic: bool,
    split_size: u64,
}

/// Where the splits of a get-split call must come from.
#[derive(Clone, Copy, Debug)]
struct Shape {
    len: u64,
    split_size: u64,
    total: u64,
}

/// A concrete call on the dispatcher.
#[derive(Clone, Debug)]
enum Call {
    WorkerHeartbeat { w: usize, uid: u32, current: Vec<u64> },
    RegisterDataset { id: Option<String>, def: (i64, i64, i64) },
    CreateJob { dataset_id: String, dynamic: bool, name: Option<String>, split_size: u64 },
    CreateIteration { job: u64, repetition: u64 },
    ClientHeartbeat { client: u64 },
    ReleaseClient { client: u64 },
    GetSplits { w: usize, iteration: u64, max: u32, repetition: u64, shape: Option<Shape> },
    WorkerUpdate { w: usize, tasks: Vec<u64> },
    HandleTimeout,
    Recover { compact: bool },
    TfRegister { id: Option<String>, graph: u8, snappy: bool },
    TfCompression { dataset_id: String, disable: bool },
}

/// The answer the model expects.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    Err(&'static str),
    Nothing,
    Dataset(String),
    Job(u64),
    Lease {
        iteration: u64,
        client: u64,
        total: Option<u64>,
    },
    /// `(task, worker, finished, worker_lost)` per task, and `iteration_finished`.
    ClientHb {
        tasks: Vec<(u64, usize, bool, bool)>,
        finished: bool,
    },
    WorkerHb {
        new: Vec<TaskExpect>,
        delete: Vec<u64>,
    },
    Splits {
        indices: Vec<u64>,
        end: bool,
        retry: bool,
    },
    Update {
        unknown: Vec<u64>,
    },
    Compression(Option<bool>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Ev {
    WorkerLost(usize),
    IterationFinished(u64),
}

#[derive(Clone, Debug)]
struct Step {
    at: u64,
    call: Call,
    expect: Expect,
    events: Vec<Ev>,
}

#[derive(Clone, Debug)]
struct Model {
    now: u64,
    incarnation: u32,
    workers: Vec<MWorker>,
    datasets: Vec<MDataset>,
    tf_datasets: Vec<MTfDataset>,
    generated_datasets: u64,
    jobs: Vec<MJob>,
    iterations: Vec<MIteration>,
    clients: Vec<MClient>,
    tasks: Vec<MTask>,
    /// The calls the last transition stands for.
    steps: Vec<Step>,
    /// Events of the call being modelled.
    events: Vec<Ev>,
}

const INVALID_ARGUMENT: &str = "INVALID_ARGUMENT";
const NOT_FOUND: &str = "NOT_FOUND";
const FAILED_PRECONDITION: &str = "FAILED_PRECONDITION";

impl Model {
    fn new() -> Self {
        Model {
            now: 0,
            incarnation: 1,
            workers: vec![MWorker::default(); ADDRS.len()],
            datasets: Vec::new(),
            tf_datasets: Vec::new(),
            generated_datasets: 0,
            jobs: Vec::new(),
            iterations: Vec::new(),
            clients: Vec::new(),
            tasks: Vec::new(),
            steps: Vec::new(),
            events: Vec::new(),
        }
    }

    fn record(&mut self, call: Call, expect: Expect) {
        let events = std::mem::take(&mut self.events);
        self.steps.push(Step { at: self.now, call, expect, events });
    }

    fn is_dynamic(&self, it: usize) -> bool {
        self.jobs[self.iterations[it].job].dynamic
    }

    /// An iteration is done when every task is finished or abandoned, one is finished, and
    /// no split of the repetition is leased or waiting to be handed out again.
    fn done(&self, it: usize) -> bool {
        let i = &self.iterations[it];
        let tasks: Vec<&MTask> = i.tasks.iter().map(|t| &self.tasks[*t]).collect();
        !tasks.is_empty()
            && tasks.iter().all(|t| t.finished || t.abandoned)
            && tasks.iter().any(|t| t.finished)
            && i.splits
                .as_ref()
                .is_none_or(|(s, _)| s.iter().all(|x| matches!(x, Status::Fresh | Status::Acked)))
    }

    fn finish_check(&mut self) {
        for it in 0..self.iterations.len() {
            if !self.iterations[it].finished && self.done(it) {
                self.iterations[it].finished = true;
                self.events.push(Ev::IterationFinished(self.iterations[it].id));
            }
        }
    }

    fn create_task(&mut self, it: usize, w: usize) {
        let idx = self.tasks.len();
        self.tasks.push(MTask {
            id: FIRST_TASK + idx as u64,
            iteration: it,
            worker: w,
            finished: false,
            abandoned: false,
        });
        self.iterations[it].tasks.push(idx);
    }

    /// A (re)joining worker gets a task in every unfinished iteration it has none in.
    fn join(&mut self, w: usize) {
        for it in 0..self.iterations.len() {
            let has = self.iterations[it].tasks.iter().any(|t| self.tasks[*t].worker == w);
            if !self.iterations[it].finished && !has {
                self.create_task(it, w);
            }
        }
    }

    fn lose(&mut self, w: usize) {
        self.workers[w].alive = false;
        for t in self.tasks.iter_mut().filter(|t| t.worker == w && !t.finished) {
            t.abandoned = true;
        }
        self.requeue_leases(w);
        self.finish_check();
        self.events.push(Ev::WorkerLost(w));
    }

    fn requeue_leases(&mut self, w: usize) {
        for it in &mut self.iterations {
            if let Some((status, _)) = &mut it.splits {
                for s in status.iter_mut().filter(|s| **s == Status::Leased(w)) {
                    *s = Status::Requeued;
                }
            }
        }
    }

    /// A revived worker's tasks of unfinished iterations count again; its tasks of
    /// iterations that finished while it was lost are over.
    fn revive(&mut self, w: usize) {
        self.workers[w].alive = true;
        for t in 0..self.tasks.len() {
            let task = &self.tasks[t];
            if task.worker == w && !task.finished {
                if self.iterations[task.iteration].finished {
                    self.tasks[t].finished = true;
                } else {
                    self.tasks[t].abandoned = false;
                }
            }
        }
        self.join(w);
    }

    fn task_expect(&self, t: usize) -> TaskExpect {
        let task = &self.tasks[t];
        let it = &self.iterations[task.iteration];
        let job = &self.jobs[it.job];
        let ds = &self.datasets[job.dataset];
        TaskExpect {
            task: task.id,
            iteration: it.id,
            job: job.id,
            dataset_id: ds.id.clone(),
            def: (ds.start, ds.stop, ds.step),
            dynamic: job.dynamic,
            split_size: job.split_size,
        }
    }

    fn worker_heartbeat(&mut self, w: usize) {
        let current: Vec<u64> = self.workers[w].known.iter().copied().collect();
        let uid = self.workers[w].generation;
        if !self.workers[w].registered {
            self.workers[w].registered = true;
            self.workers[w].alive = true;
            self.workers[w].recorded_uid = Some(uid);
            self.join(w);
        } else if !self.workers[w].alive {
            self.workers[w].recorded_uid = Some(uid);
            self.revive(w);
        } else if self.workers[w].recorded_uid != Some(uid) {
            // A new process at a known address: the old one's splits are handed out again.
            self.workers[w].recorded_uid = Some(uid);
            self.requeue_leases(w);
        }
        self.workers[w].last_seen = self.now;
        let assigned: BTreeSet<u64> =
            self.tasks.iter().filter(|t| t.worker == w && !t.finished).map(|t| t.id).collect();
        let known = std::mem::replace(&mut self.workers[w].known, assigned.clone());
        let new = assigned
            .difference(&known)
            .map(|id| self.task_expect((id - FIRST_TASK) as usize))
            .collect();
        let delete = known.difference(&assigned).copied().collect();
        self.record(Call::WorkerHeartbeat { w, uid, current }, Expect::WorkerHb { new, delete });
    }

    /// The worker process restarts: it forgets its tasks and what it read.
    fn restart(&mut self, w: usize) {
        let worker = &mut self.workers[w];
        worker.generation += 1;
        worker.known.clear();
        worker.seen_end.clear();
        self.worker_heartbeat(w);
    }

    fn register_dataset(&mut self, explicit: Option<u8>, start: i64, len: i64, step: i64) {
        let def = (start, start + len, step);
        let id = explicit.map(|e| format!("ds-{e}"));
        let call = Call::RegisterDataset { id: id.clone(), def };
        let existing = id.as_ref().and_then(|id| self.datasets.iter().find(|d| &d.id == id));
        let expect = match existing {
            Some(d) if (d.start, d.stop, d.step) == def => Expect::Dataset(d.id.clone()),
            Some(_) => Expect::Err(INVALID_ARGUMENT),
            // Without an id, the same definition gets the id it has (the first in id order).
            None if id.is_none()
                && self.datasets.iter().any(|d| (d.start, d.stop, d.step) == def) =>
            {
                let ids = self.datasets.iter().filter(|d| (d.start, d.stop, d.step) == def);
                Expect::Dataset(ids.map(|d| d.id.clone()).min().unwrap())
            }
            None => {
                let id = id.unwrap_or_else(|| {
                    self.generated_datasets += 1;
                    (FIRST_DATASET + self.generated_datasets - 1).to_string()
                });
                self.datasets.push(MDataset { id: id.clone(), start, stop: def.1, step });
                Expect::Dataset(id)
            }
        };
        self.record(call, expect);
    }

    /// TensorFlow's get-or-register: an existing id answers when the metadata (here the
    /// compression) matches, whatever the graph; without an id the dataset of the same
    /// fingerprint (graph and metadata) answers, and a new one is `tf-<fingerprint>` unless an
    /// explicit registration holds that name (then the next generated id).
    fn tf_register(&mut self, explicit: Option<u8>, graph: u8, snappy: bool) {
        let id = explicit.map(|e| format!("tf-{e}"));
        let call = Call::TfRegister { id: id.clone(), graph, snappy };
        let existing = id.as_ref().and_then(|id| self.tf_datasets.iter().find(|d| &d.id == id));
        let same = |d: &&MTfDataset| d.graph == graph && d.snappy == snappy;
        let expect = match existing {
            Some(d) if d.snappy == snappy => Expect::Dataset(d.id.clone()),
            Some(_) => Expect::Err(INVALID_ARGUMENT),
            None if id.is_none() && self.tf_datasets.iter().any(|d| same(&d)) => Expect::Dataset(
                self.tf_datasets.iter().filter(same).map(|d| d.id.clone()).min().unwrap(),
            ),
            None => {
                let id = id.unwrap_or_else(|| {
                    let derived = format!("tf-{}", tf_fingerprint(graph, snappy));
                    let taken = self.tf_datasets.iter().any(|d| d.id == derived)
                        || self.datasets.iter().any(|d| d.id == derived);
                    if !taken {
                        return derived;
                    }
                    self.generated_datasets += 1;
                    (FIRST_DATASET + self.generated_datasets - 1).to_string()
                });
                self.tf_datasets.push(MTfDataset { id: id.clone(), graph, snappy, decided: None });
                Expect::Dataset(id)
            }
        };
        self.record(call, expect);
    }

    /// The first proposal for a SNAPPY dataset decides; others have nothing to disable.
    fn tf_compression(&mut self, dataset: Ref, disable: bool) {
        let (dataset_id, expect) = match dataset {
            Ref::Unknown => (UNKNOWN.to_string(), Expect::Err(NOT_FOUND)),
            Ref::Known(d) => {
                let ds = &mut self.tf_datasets[d];
                let decision = ds.snappy.then(|| *ds.decided.get_or_insert(disable));
                (ds.id.clone(), Expect::Compression(decision))
            }
        };
        self.record(Call::TfCompression { dataset_id, disable }, expect);
    }

    fn create_job(&mut self, dataset: Ref, dynamic: bool, name: Option<u8>, split_size: u64) {
        let name = name.map(|n| format!("job-{n}"));
        let dataset_id = match dataset {
            Ref::Known(d) => self.datasets[d].id.clone(),
            Ref::Unknown => UNKNOWN.to_string(),
        };
        let call = Call::CreateJob { dataset_id, dynamic, name: name.clone(), split_size };
        let expect = match dataset {
            Ref::Unknown => Expect::Err(NOT_FOUND),
            Ref::Known(_) if split_size == 0 => Expect::Err(INVALID_ARGUMENT),
            Ref::Known(d) => {
                let same_name = name
                    .as_ref()
                    .and_then(|n| self.jobs.iter().find(|j| j.name.as_ref() == Some(n)));
                match same_name {
                    Some(j) if (j.dataset, j.dynamic, j.split_size) == (d, dynamic, split_size) => {
                        Expect::Job(j.id)
                    }
                    Some(_) => Expect::Err(INVALID_ARGUMENT),
                    None => {
                        let id = FIRST_JOB + self.jobs.len() as u64;
                        self.jobs.push(MJob { id, name, dataset: d, dynamic, split_size });
                        Expect::Job(id)
                    }
                }
            }
        };
        self.record(call, expect);
    }

    fn create_iteration(&mut self, job: Ref, repetition: u64) {
        let Ref::Known(j) = job else {
            self.record(Call::CreateIteration { job: UNKNOWN, repetition }, Expect::Err(NOT_FOUND));
            return;
        };
        let call = Call::CreateIteration { job: self.jobs[j].id, repetition };
        let existing =
            self.iterations.iter().position(|i| i.job == j && i.repetition == repetition);
        let it = match existing {
            Some(it) => it,
            None => {
                let it = self.iterations.len();
                let job = &self.jobs[j];
                let splits = job.dynamic.then(|| {
                    let total = self.datasets[job.dataset].len().div_ceil(job.split_size);
                    (vec![Status::Fresh; total as usize], false)
                });
                self.iterations.push(MIteration {
                    id: FIRST_ITERATION + it as u64,
                    job: j,
                    repetition,
                    tasks: Vec::new(),
                    clients: 0,
                    finished: false,
                    splits,
                });
                for w in 0..self.workers.len() {
                    if self.workers[w].registered && self.workers[w].alive {
                        self.create_task(it, w);
                    }
                }
                it
            }
        };
        let client = FIRST_CLIENT + self.clients.len() as u64;
        self.clients.push(MClient {
            id: client,
            iteration: it,
            active: true,
            deadline: self.now + CLIENT_GRACE,
        });
        self.iterations[it].clients += 1;
        let total = self.iterations[it].splits.as_ref().map(|(s, _)| s.len() as u64);
        self.record(call, Expect::Lease { iteration: self.iterations[it].id, client, total });
    }

    fn client_id(&self, client: Ref) -> u64 {
        match client {
            Ref::Known(c) => self.clients[c].id,
            Ref::Unknown => UNKNOWN,
        }
    }

    fn client_heartbeat(&mut self, client: Ref) {
        let call = Call::ClientHeartbeat { client: self.client_id(client) };
        let expect = match client {
            Ref::Known(c) if self.clients[c].active => {
                self.clients[c].deadline = self.now + CLIENT_TIMEOUT;
                let it = &self.iterations[self.clients[c].iteration];
                let tasks = it
                    .tasks
                    .iter()
                    .map(|t| {
                        let t = &self.tasks[*t];
                        (t.id, t.worker, t.finished, t.abandoned)
                    })
                    .collect();
                Expect::ClientHb { tasks, finished: it.finished }
            }
            _ => Expect::Err(NOT_FOUND),
        };
        self.record(call, expect);
    }

    fn release_client(&mut self, client: Ref) {
        let call = Call::ReleaseClient { client: self.client_id(client) };
        let expect = match client {
            Ref::Known(c) if self.clients[c].active => {
                self.clients[c].active = false;
                self.iterations[self.clients[c].iteration].clients -= 1;
                Expect::Nothing
            }
            _ => Expect::Err(NOT_FOUND),
        };
        self.record(call, expect);
    }

    /// What a get-split call would hand out (indices of repetition 0), without doing it.
    fn would_hand_out(&self, it: usize, max: u32) -> Vec<u64> {
        let Some((status, advanced)) = &self.iterations[it].splits else { return Vec::new() };
        if *advanced {
            return Vec::new();
        }
        let requeued = (0..status.len()).filter(|i| status[*i] == Status::Requeued);
        let fresh = (0..status.len()).filter(|i| status[*i] == Status::Fresh);
        requeued.chain(fresh).take(max as usize).map(|i| i as u64).collect()
    }

    fn get_splits(&mut self, w: usize, iteration: Ref, max: u32, repetition: u64) {
        let (iteration_id, shape) = match iteration {
            Ref::Known(it) => {
                let job = &self.jobs[self.iterations[it].job];
                let len = self.datasets[job.dataset].len();
                let shape = self.iterations[it].splits.as_ref().map(|(s, _)| Shape {
                    len,
                    split_size: job.split_size,
                    total: s.len() as u64,
                });
                (self.iterations[it].id, shape)
            }
            Ref::Unknown => (UNKNOWN, None),
        };
        let call = Call::GetSplits { w, iteration: iteration_id, max, repetition, shape };
        let expect = self.get_splits_answer(w, iteration, max, repetition);
        self.record(call, expect);
    }

    fn get_splits_answer(&mut self, w: usize, iteration: Ref, max: u32, repetition: u64) -> Expect {
        if max == 0 || max > 1024 {
            return Expect::Err(INVALID_ARGUMENT);
        }
        let Ref::Known(it) = iteration else { return Expect::Err(NOT_FOUND) };
        let Some((_, advanced)) = &self.iterations[it].splits else {
            return Expect::Err(FAILED_PRECONDITION);
        };
        let advanced = *advanced;
        if !self.workers[w].registered {
            return Expect::Err(NOT_FOUND);
        }
        if !self.workers[w].alive {
            // A lost worker is refused until a heartbeat revives it.
            return Expect::Err(FAILED_PRECONDITION);
        }
        if !self.iterations[it].tasks.iter().any(|t| self.tasks[*t].worker == w) {
            return Expect::Err(FAILED_PRECONDITION);
        }
        if repetition > u64::from(advanced) {
            return Expect::Err(FAILED_PRECONDITION);
        }
        assert_eq!(repetition, 0, "the model only reads repetition 0");
        self.workers[w].last_seen = self.now;
        if advanced {
            self.workers[w].seen_end.insert(it);
            return Expect::Splits { indices: Vec::new(), end: true, retry: false };
        }
        let picks = self.would_hand_out(it, max);
        let Some((status, advanced)) = &mut self.iterations[it].splits else { unreachable!() };
        for s in status.iter_mut().filter(|s| **s == Status::Leased(w)) {
            *s = Status::Acked;
        }
        for p in &picks {
            status[*p as usize] = Status::Leased(w);
        }
        let (mut end, mut retry) = (false, false);
        if picks.is_empty() {
            if status.iter().any(|s| matches!(s, Status::Leased(_) | Status::Requeued)) {
                retry = true;
            } else {
                end = true;
                *advanced = true;
            }
        }
        if end {
            self.workers[w].seen_end.insert(it);
        }
        self.finish_check();
        Expect::Splits { indices: picks, end, retry }
    }

    fn complete(&mut self, w: usize, task: usize, with_unknown: bool) {
        let id = self.tasks[task].id;
        let mut tasks = vec![id];
        if with_unknown {
            tasks.push(UNKNOWN);
        }
        if self.workers[w].registered {
            self.workers[w].last_seen = self.now;
        }
        if !self.tasks[task].finished {
            self.tasks[task].finished = true;
            let owner = self.tasks[task].worker;
            let it = self.tasks[task].iteration;
            if let Some((status, _)) = &mut self.iterations[it].splits {
                for s in status.iter_mut().filter(|s| **s == Status::Leased(owner)) {
                    *s = Status::Acked;
                }
            }
            self.finish_check();
        }
        let unknown = if with_unknown { vec![UNKNOWN] } else { Vec::new() };
        self.record(Call::WorkerUpdate { w, tasks }, Expect::Update { unknown });
    }

    fn handle_timeout(&mut self) {
        for c in 0..self.clients.len() {
            let client = &self.clients[c];
            // Silent clients expire, of finished iterations too (as TensorFlow's): a lease
            // nobody renews must not keep its iteration forever.
            if client.active && client.deadline < self.now {
                self.clients[c].active = false;
                self.iterations[self.clients[c].iteration].clients -= 1;
            }
        }
        for w in 0..self.workers.len() {
            let worker = &self.workers[w];
            if worker.registered && worker.alive && self.now - worker.last_seen > WORKER_TIMEOUT {
                self.lose(w);
            }
        }
        self.record(Call::HandleTimeout, Expect::Nothing);
    }

    fn recover(&mut self, compact: bool) {
        // Recovery from the journal keeps the state's incarnation id.
        for w in self.workers.iter_mut().filter(|w| w.registered) {
            w.last_seen = self.now;
        }
        for c in self.clients.iter_mut().filter(|c| c.active) {
            c.deadline = self.now + CLIENT_TIMEOUT;
        }
        self.record(Call::Recover { compact }, Expect::Nothing);
    }

    /// `(worker, iteration)` pairs where the worker runs a task of a DYNAMIC iteration and
    /// has not seen the end of repetition 0 yet.
    fn split_readers(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (w, worker) in self.workers.iter().enumerate() {
            for id in &worker.known {
                let it = self.tasks[(id - FIRST_TASK) as usize].iteration;
                if self.is_dynamic(it) && !worker.seen_end.contains(&it) {
                    out.push((w, it));
                }
            }
        }
        out
    }

    /// `(worker, task)` pairs where the worker may report its task complete: OFF tasks at
    /// any time, DYNAMIC tasks once the worker saw the end of the splits.
    fn completable(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (w, worker) in self.workers.iter().enumerate() {
            for id in &worker.known {
                let t = (id - FIRST_TASK) as usize;
                if self.may_complete(w, t) {
                    out.push((w, t));
                }
            }
        }
        out
    }

    fn may_complete(&self, w: usize, t: usize) -> bool {
        let Some(task) = self.tasks.get(t) else { return false };
        self.workers[w].known.contains(&task.id)
            && task.worker == w
            && (!self.is_dynamic(task.iteration)
                || self.workers[w].seen_end.contains(&task.iteration))
    }
}

fn known_ref(len: usize) -> BoxedStrategy<Ref> {
    if len == 0 {
        Just(Ref::Unknown).boxed()
    } else {
        prop_oneof![9 => (0..len).prop_map(Ref::Known), 1 => Just(Ref::Unknown)].boxed()
    }
}

struct ModelMachine;

impl ReferenceStateMachine for ModelMachine {
    type State = Model;
    type Transition = Tr;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::new()).boxed()
    }

    fn transitions(m: &Model) -> BoxedStrategy<Tr> {
        let registered = m.workers.iter().filter(|w| w.registered).count();
        // Weights steer towards a running DYNAMIC iteration; probes of errors stay rare.
        let setup = |empty: bool, prerequisite: bool| match (prerequisite, empty) {
            (false, _) => 1,
            (true, true) => 15,
            (true, false) => 2,
        };
        let mut options: Vec<(u32, BoxedStrategy<Tr>)> = vec![
            (
                if registered < 2 { 12 } else { 3 },
                (0..ADDRS.len()).prop_map(|w| Tr::Heartbeat { w }).boxed(),
            ),
            (
                setup(m.datasets.is_empty(), true),
                (proptest::option::weighted(0.3, 0..2u8), 0..3i64, 0..=30i64, 1..=2i64)
                    .prop_map(|(explicit, start, len, step)| Tr::RegisterDataset {
                        explicit,
                        start,
                        len,
                        step,
                    })
                    .boxed(),
            ),
            (
                setup(m.jobs.is_empty(), !m.datasets.is_empty()),
                (
                    known_ref(m.datasets.len()),
                    proptest::bool::weighted(0.7),
                    proptest::option::of(0..2u8),
                    prop_oneof![20 => 1..=7u64, 1 => Just(0u64)],
                )
                    .prop_map(|(dataset, dynamic, name, split_size)| Tr::CreateJob {
                        dataset,
                        dynamic,
                        name,
                        split_size,
                    })
                    .boxed(),
            ),
            (
                setup(m.iterations.is_empty(), !m.jobs.is_empty()),
                (known_ref(m.jobs.len()), prop_oneof![3 => Just(0u64), 1 => Just(1u64)])
                    .prop_map(|(job, repetition)| Tr::CreateIteration { job, repetition })
                    .boxed(),
            ),
            (
                4,
                known_ref(m.clients.len())
                    .prop_map(|client| Tr::ClientHeartbeat { client })
                    .boxed(),
            ),
            (1, known_ref(m.clients.len()).prop_map(|client| Tr::ReleaseClient { client }).boxed()),
            (
                3,
                (
                    0..ADDRS.len(),
                    known_ref(m.iterations.len()),
                    prop_oneof![8 => 1..=4u32, 1 => Just(0u32), 1 => Just(1025u32)],
                    prop_oneof![5 => Just(0u64), 1 => Just(1u64)],
                )
                    .prop_map(|(w, iteration, max, repetition)| Tr::GetSplits {
                        w,
                        iteration,
                        max,
                        repetition,
                    })
                    .boxed(),
            ),
            (3, (1..=300u64).prop_map(|dt| Tr::Tick { dt }).boxed()),
            (1, (0..ADDRS.len()).prop_map(|w| Tr::Restart { w }).boxed()),
            (2, (0..16u8).prop_map(|keep| Tr::Expire { keep }).boxed()),
            (2, any::<bool>().prop_map(|compact| Tr::Recover { compact }).boxed()),
            (
                1,
                (proptest::option::weighted(0.3, 0..2u8), 0..2u8, any::<bool>())
                    .prop_map(|(explicit, graph, snappy)| Tr::TfRegister {
                        explicit,
                        graph,
                        snappy,
                    })
                    .boxed(),
            ),
            (
                1,
                (known_ref(m.tf_datasets.len()), any::<bool>())
                    .prop_map(|(dataset, disable)| Tr::TfCompression { dataset, disable })
                    .boxed(),
            ),
        ];
        let uninformed: Vec<usize> = (0..ADDRS.len())
            .filter(|w| {
                let worker = &m.workers[*w];
                m.tasks
                    .iter()
                    .any(|t| t.worker == *w && !t.finished && !worker.known.contains(&t.id))
            })
            .collect();
        if !uninformed.is_empty() {
            options.push((15, select(uninformed).prop_map(|w| Tr::Heartbeat { w }).boxed()));
        }
        let readers = m.split_readers();
        if !readers.is_empty() {
            options.push((
                30,
                (select(readers), 1..=4u32)
                    .prop_map(|((w, it), max)| Tr::GetSplits {
                        w,
                        iteration: Ref::Known(it),
                        max,
                        repetition: 0,
                    })
                    .boxed(),
            ));
        }
        let completable = m.completable();
        if !completable.is_empty() {
            options.push((
                12,
                (select(completable), proptest::bool::weighted(0.2))
                    .prop_map(|((w, task), with_unknown)| Tr::Complete { w, task, with_unknown })
                    .boxed(),
            ));
        }
        Union::new_weighted(options).boxed()
    }

    fn preconditions(m: &Model, tr: &Tr) -> bool {
        let known = |r: &Ref, len: usize| match r {
            Ref::Known(i) => *i < len,
            Ref::Unknown => true,
        };
        match tr {
            Tr::Heartbeat { w } => *w < ADDRS.len(),
            Tr::Restart { w } => *w < ADDRS.len() && m.workers[*w].registered,
            Tr::RegisterDataset { explicit, .. } => {
                m.datasets.len() < MAX_DATASETS
                    || explicit
                        .is_some_and(|e| m.datasets.iter().any(|d| d.id == format!("ds-{e}")))
            }
            Tr::CreateJob { dataset, name, .. } => {
                known(dataset, m.datasets.len())
                    && (m.jobs.len() < MAX_JOBS
                        || name.is_some_and(|n| {
                            m.jobs.iter().any(|j| j.name == Some(format!("job-{n}")))
                        }))
            }
            Tr::CreateIteration { job, repetition } => {
                known(job, m.jobs.len())
                    && m.clients.len() < MAX_CLIENTS
                    && match job {
                        Ref::Known(j) => {
                            m.iterations.len() < MAX_ITERATIONS
                                || m.iterations
                                    .iter()
                                    .any(|i| i.job == *j && i.repetition == *repetition)
                        }
                        Ref::Unknown => true,
                    }
            }
            Tr::ClientHeartbeat { client } | Tr::ReleaseClient { client } => {
                known(client, m.clients.len())
            }
            Tr::GetSplits { w, iteration, repetition, .. } => {
                *w < ADDRS.len()
                    && known(iteration, m.iterations.len())
                    // Reading repetition 1 is only generated where it is refused.
                    && (*repetition == 0
                        || match iteration {
                            Ref::Known(it) => m.iterations[*it]
                                .splits
                                .as_ref()
                                .is_none_or(|(_, advanced)| !advanced),
                            Ref::Unknown => true,
                        })
                // The known bug: not generated, see the ignored test below.
            }
            Tr::Complete { w, task, .. } => *w < ADDRS.len() && m.may_complete(*w, *task),
            Tr::Tick { dt } => *dt >= 1,
            Tr::Expire { .. } | Tr::Recover { .. } => true,
            Tr::TfRegister { explicit, .. } => {
                m.tf_datasets.len() < MAX_DATASETS
                    || explicit
                        .is_some_and(|e| m.tf_datasets.iter().any(|d| d.id == format!("tf-{e}")))
            }
            Tr::TfCompression { dataset, .. } => known(dataset, m.tf_datasets.len()),
        }
    }

    fn apply(mut m: Model, tr: &Tr) -> Model {
        m.steps.clear();
        match tr {
            Tr::Tick { dt } => {
                m.now += dt;
                m.handle_timeout();
            }
            Tr::Expire { keep } => {
                m.now += WORKER_TIMEOUT;
                for w in 0..ADDRS.len() {
                    if keep & (1 << w) != 0 && m.workers[w].registered {
                        m.worker_heartbeat(w);
                    }
                }
                m.now += 1;
                m.handle_timeout();
            }
            _ => {
                m.now += 1;
                match *tr {
                    Tr::Heartbeat { w } => m.worker_heartbeat(w),
                    Tr::Restart { w } => m.restart(w),
                    Tr::RegisterDataset { explicit, start, len, step } => {
                        m.register_dataset(explicit, start, len, step);
                    }
                    Tr::CreateJob { dataset, dynamic, name, split_size } => {
                        m.create_job(dataset, dynamic, name, split_size);
                    }
                    Tr::CreateIteration { job, repetition } => m.create_iteration(job, repetition),
                    Tr::ClientHeartbeat { client } => m.client_heartbeat(client),
                    Tr::ReleaseClient { client } => m.release_client(client),
                    Tr::GetSplits { w, iteration, max, repetition } => {
                        m.get_splits(w, iteration, max, repetition);
                    }
                    Tr::Complete { w, task, with_unknown } => m.complete(w, task, with_unknown),
                    Tr::Recover { compact } => m.recover(compact),
                    Tr::TfRegister { explicit, graph, snappy } => {
                        m.tf_register(explicit, graph, snappy);
                    }
                    Tr::TfCompression { dataset, disable } => m.tf_compression(dataset, disable),
                    Tr::Tick { .. } | Tr::Expire { .. } => unreachable!(),
                }
            }
        }
        m
    }
}

// ---------------------------------------------------------------------------------------
// The system under test, with what it observed of the splits.

/// Per DYNAMIC iteration, the splits (of repetition 0) as seen in the replies.
#[derive(Debug, Default)]
struct SplitObs {
    total: u64,
    /// How often each split was handed out.
    handed: BTreeMap<u64, u32>,
    /// Splits a worker got in its last call and has not acknowledged yet.
    outstanding: BTreeMap<String, Vec<u64>>,
    /// Splits acknowledged by a worker that was alive at the time.
    delivered: BTreeSet<u64>,
    /// Per split, how many workers were lost while holding it.
    lost_holding: BTreeMap<u64, u32>,
    /// Workers that saw `end_of_splits`.
    seen_end: BTreeSet<String>,
    /// A worker was lost since the iteration was created.
    saw_loss: bool,
}

/// The dispatcher under test, driven by the one driver; its sink keeps the records.
type D = Driver<VecSink>;

#[derive(Debug)]
struct Sut {
    d: D,
    journal: Vec<Update>,
    /// The journal as one framed segment.
    segment: Vec<u8>,
    obs: BTreeMap<u64, SplitObs>,
    finished: BTreeSet<u64>,
}

fn code(r: &Result<impl std::fmt::Debug, DispatchError>) -> Option<&'static str> {
    r.as_ref().err().map(|e| e.code().as_str())
}

fn expect_err<T: std::fmt::Debug>(r: &Result<T, DispatchError>, class: &'static str) {
    assert_eq!(code(r), Some(class), "expected {class}, got {r:?}");
}

impl Sut {
    fn new() -> Self {
        let d = Dispatcher::new(dispatcher_config(), incarnation(1), Millis(0)).unwrap();
        let mut d = Driver::new(d, VecSink::default());
        d.flush();
        // The fresh state's first record (its incarnation id).
        let mut journal = Vec::new();
        let mut segment = segment_header().to_vec();
        for u in std::mem::take(&mut d.sink_mut().records) {
            encode_update(&u, &mut segment).unwrap();
            journal.push(u);
        }
        Sut { d, journal, segment, obs: BTreeMap::new(), finished: BTreeSet::new() }
    }

    fn alive(&self, addr: &str) -> bool {
        self.d.dispatcher().state().workers().get(addr).is_some_and(|w| w.alive)
    }

    /// Drains the journal (framing every record) and the events.
    fn sync(&mut self, step: &Step) {
        for u in std::mem::take(&mut self.d.sink_mut().records) {
            encode_update(&u, &mut self.segment).unwrap();
            // A lost worker, or a worker process that restarted, loses its splits.
            if let Update::WorkerLost { address } | Update::WorkerRestarted { address, .. } = &u {
                for obs in self.obs.values_mut() {
                    obs.saw_loss = true;
                    if matches!(u, Update::WorkerRestarted { .. }) {
                        obs.seen_end.remove(address);
                    }
                    for s in obs.outstanding.remove(address).unwrap_or_default() {
                        *obs.lost_holding.entry(s).or_default() += 1;
                    }
                }
            }
            self.journal.push(u);
        }
        let mut events = Vec::new();
        while let Some(e) = self.d.poll_event() {
            events.push(match e {
                Event::WorkerLost { address } => {
                    Ev::WorkerLost(ADDRS.iter().position(|a| *a == address).unwrap())
                }
                Event::IterationFinished { iteration_id } => Ev::IterationFinished(iteration_id.0),
                other => panic!("unexpected event {other:?}"),
            });
        }
        assert_eq!(events, step.events, "events of {:?}", step.call);
    }

    fn run(&mut self, step: &Step, inc: &str) {
        let now = Millis(step.at);
        match &step.call {
            Call::WorkerHeartbeat { w, uid, current } => {
                let req = WorkerHeartbeat {
                    worker_address: ADDRS[*w].into(),
                    current_tasks: current.iter().map(|t| TaskId(*t)).collect(),
                    tags: Vec::new(),
                    worker_uid: Some(format!("u{uid}")),
                    incarnation: None,
                    tensorflow: None,
                };
                let r = self.d.call(now, req.clone()).unwrap();
                assert_eq!(r.incarnation, inc);
                let Expect::WorkerHb { new, delete } = &step.expect else { unreachable!() };
                let got: Vec<u64> = r.new_tasks.iter().map(|t| t.task_id.0).collect();
                let want: Vec<u64> = new.iter().map(|t| t.task).collect();
                assert_eq!(got, want, "new tasks of {}", ADDRS[*w]);
                for (def, want) in r.new_tasks.iter().zip(new) {
                    // Invariant 4: a worker is only told about its own tasks.
                    assert_eq!(
                        self.d.dispatcher().state().tasks()[&def.task_id].worker_address,
                        ADDRS[*w]
                    );
                    assert_eq!(def.iteration_id, IterationId(want.iteration));
                    assert_eq!(def.job_id, JobId(want.job));
                    assert_eq!(def.dataset_id, want.dataset_id);
                    assert_eq!(def.dataset, range_def(want.def.0, want.def.1, want.def.2));
                    let policy =
                        if want.dynamic { ShardingPolicy::Dynamic } else { ShardingPolicy::Off };
                    assert_eq!(def.processing_mode, policy);
                    assert_eq!(def.num_split_providers, u32::from(want.dynamic));
                    assert_eq!(def.split_size, want.split_size);
                    assert_eq!((def.num_workers, def.worker_index), (None, None));
                }
                let deleted: Vec<u64> = r.tasks_to_delete.iter().map(|t| t.0).collect();
                assert_eq!(&deleted, delete, "tasks to delete of {}", ADDRS[*w]);
            }
            Call::RegisterDataset { id, def } => {
                let req = RegisterDataset {
                    dataset: range_def(def.0, def.1, def.2),
                    dataset_id: id.clone(),
                    metadata: None,
                };
                let r = self.d.call(now, req.clone()).map(|r| r.dataset_id);
                match &step.expect {
                    Expect::Dataset(id) => assert_eq!(r.as_ref(), Ok(id)),
                    Expect::Err(class) => expect_err(&r, class),
                    e => unreachable!("{e:?}"),
                }
            }
            Call::TfRegister { id, graph, snappy } => {
                let req = RegisterTfDataset {
                    dataset_id: id.clone(),
                    dataset: TfDataset {
                        graph: vec![*graph; 3],
                        element_spec: Some(b"spec".to_vec()),
                        compression: if *snappy { 2 } else { 1 },
                        cardinality: 7,
                        split_providers: Ok(vec![SplitProviderDef::Slices { len: 2 }]),
                        fingerprint: Some(tf_fingerprint(*graph, *snappy).to_string()),
                    },
                };
                let r = self.d.call(now, req).map(|r| r.dataset_id);
                match &step.expect {
                    Expect::Dataset(id) => assert_eq!(r.as_ref(), Ok(id)),
                    Expect::Err(class) => expect_err(&r, class),
                    e => unreachable!("{e:?}"),
                }
            }
            Call::TfCompression { dataset_id, disable } => {
                let req = DisableCompression { dataset_id: dataset_id.clone(), disable: *disable };
                let r = self.d.call(now, req).map(|r| r.compression_disabled);
                match &step.expect {
                    Expect::Compression(want) => assert_eq!(r, Ok(*want)),
                    Expect::Err(class) => expect_err(&r, class),
                    e => unreachable!("{e:?}"),
                }
            }
            Call::CreateJob { dataset_id, dynamic, name, split_size } => {
                let policy = if *dynamic { ShardingPolicy::Dynamic } else { ShardingPolicy::Off };
                let req = CreateJob {
                    dataset_id: dataset_id.clone(),
                    processing_mode: ProcessingMode::Policy { sharding_policy: policy },
                    job_name: name.clone(),
                    num_consumers: None,
                    target_workers: TargetWorkers::Auto,
                    cross_trainer_cache: false,
                    split_size: Some(*split_size),
                };
                let r = self.d.call(now, req.clone()).map(|r| r.job_id);
                match &step.expect {
                    Expect::Job(id) => assert_eq!(r, Ok(JobId(*id))),
                    Expect::Err(class) => expect_err(&r, class),
                    e => unreachable!("{e:?}"),
                }
            }
            Call::CreateIteration { job, repetition } => {
                let req = CreateIteration {
                    repetition: *repetition,
                    consumer_index: None,
                    resume_from: None,
                };
                let r = self.d.call(now, (JobId(*job), req));
                match &step.expect {
                    Expect::Lease { iteration, client, total } => {
                        let lease = r.unwrap();
                        assert_eq!(lease.iteration_id, IterationId(*iteration));
                        assert_eq!(lease.client_id, ClientId(*client));
                        assert_eq!(lease.incarnation, inc);
                        if let Some(total) = total {
                            self.obs.entry(*iteration).or_insert_with(|| SplitObs {
                                total: *total,
                                ..SplitObs::default()
                            });
                        }
                    }
                    Expect::Err(class) => expect_err(&r, class),
                    e => unreachable!("{e:?}"),
                }
            }
            Call::ClientHeartbeat { client } => {
                let r = self.d.call(now, (ClientId(*client), ClientHeartbeat::default()));
                match &step.expect {
                    Expect::ClientHb { tasks, finished } => {
                        let r = r.unwrap();
                        assert_eq!(r.incarnation, inc);
                        let mine =
                            self.d.dispatcher().state().clients()[&ClientId(*client)].iteration_id;
                        let got: Vec<(u64, usize, bool, bool)> = r
                            .tasks
                            .iter()
                            .map(|t| {
                                // Invariant 4: only tasks of the client's iteration.
                                assert_eq!(
                                    self.d.dispatcher().state().tasks()[&t.task_id].iteration_id,
                                    mine
                                );
                                // Invariant 5: a finished iteration has nothing left to read.
                                assert!(
                                    !r.iteration_finished || t.finished || t.worker_lost,
                                    "finished iteration {mine} with an unfinished task {t:?}"
                                );
                                let w = ADDRS.iter().position(|a| *a == t.worker_address);
                                (t.task_id.0, w.unwrap(), t.finished, t.worker_lost)
                            })
                            .collect();
                        assert_eq!(&got, tasks, "tasks of client {client}");
                        assert_eq!(r.iteration_finished, *finished, "iteration_finished");
                        assert_eq!(r.block_round, None);
                    }
                    Expect::Err(class) => expect_err(&r, class),
                    e => unreachable!("{e:?}"),
                }
            }
            Call::ReleaseClient { client } => {
                let r = self.d.call(now, ReleaseClient { client_id: ClientId(*client) });
                match &step.expect {
                    Expect::Nothing => assert!(r.unwrap().released),
                    Expect::Err(class) => expect_err(&r, class),
                    e => unreachable!("{e:?}"),
                }
            }
            Call::GetSplits { w, iteration, max, repetition, shape } => {
                let addr = ADDRS[*w];
                let alive = self.alive(addr);
                let req = GetSplits {
                    worker_address: addr.into(),
                    // As the worker holding the task: the uid it registered with.
                    worker_uid: self
                        .d
                        .dispatcher()
                        .state()
                        .workers()
                        .get(addr)
                        .and_then(|w| w.uid.clone()),
                    repetition: *repetition,
                    split_provider_index: 0,
                    max_splits: Some(*max),
                    acknowledge: None,
                };
                let r = self.d.call(now, (IterationId(*iteration), req.clone()));
                let (indices, end, retry) = match &step.expect {
                    Expect::Splits { indices, end, retry } => (indices, *end, *retry),
                    Expect::Err(class) => return expect_err(&r, class),
                    e => unreachable!("{e:?}"),
                };
                let r = r.unwrap();
                assert_eq!(r.incarnation, inc);
                let shape = shape.unwrap();
                // Invariant 4: every split is a chunk of this iteration's dataset.
                let got: Vec<u64> = r
                    .splits
                    .iter()
                    .map(|s| {
                        let s = Value::from(s.clone());
                        let start = s["start"].as_u64().unwrap();
                        let stop = s["stop"].as_u64().unwrap();
                        assert_eq!(start % shape.split_size, 0, "{s}");
                        assert!(start < shape.len, "split {s} outside a dataset of {}", shape.len);
                        assert_eq!(stop, (start + shape.split_size).min(shape.len), "{s}");
                        assert_eq!(s.as_object().unwrap().len(), 2, "{s}");
                        start / shape.split_size
                    })
                    .collect();
                assert_eq!(
                    (&got, r.end_of_splits, r.retry_after_ms.is_some()),
                    (indices, end, retry)
                );
                assert!(r.splits.len() <= *max as usize);
                assert_eq!(shape.total, shape.len.div_ceil(shape.split_size));
                self.observe_splits(*iteration, addr, alive, &got, end, retry);
            }
            Call::WorkerUpdate { w, tasks } => {
                let addr = ADDRS[*w];
                let alive = self.alive(addr);
                let before: Vec<(IterationId, bool)> = tasks
                    .iter()
                    .filter_map(|t| self.d.dispatcher().state().tasks().get(&TaskId(*t)))
                    .map(|t| (t.iteration_id, t.finished))
                    .collect();
                let req = WorkerUpdate {
                    worker_address: addr.into(),
                    // As the worker holding the task: the uid it registered with.
                    worker_uid: self
                        .d
                        .dispatcher()
                        .state()
                        .workers()
                        .get(addr)
                        .and_then(|w| w.uid.clone()),
                    updates: tasks
                        .iter()
                        .map(|t| TaskProgress { task_id: TaskId(*t), completed: true })
                        .collect(),
                };
                let r = self.d.call(now, req.clone()).unwrap();
                assert_eq!(r.incarnation, inc);
                let Expect::Update { unknown } = &step.expect else { unreachable!() };
                let got: Vec<u64> = r.unknown_tasks.iter().map(|t| t.0).collect();
                assert_eq!(&got, unknown);
                // Finishing a task acknowledges the worker's splits.
                for (it, was_finished) in before {
                    if let Some(obs) = self.obs.get_mut(&it.0)
                        && !was_finished
                    {
                        let acked = obs.outstanding.remove(addr).unwrap_or_default();
                        if alive {
                            obs.delivered.extend(acked);
                        }
                    }
                }
            }
            Call::HandleTimeout => self.d.handle_timeout(now),
            Call::Recover { compact } => {
                if *compact {
                    self.segment = segment_header().to_vec();
                    encode_update(&self.d.dispatcher().snapshot(), &mut self.segment).unwrap();
                }
                // The dispatcher comes back from the bytes alone; they decode to records
                // that encode to the very same bytes.
                let replayed = decode_updates(&self.segment).unwrap();
                assert_eq!(replayed.tail, Tail::Clean);
                let mut again = segment_header().to_vec();
                for u in &replayed.updates {
                    encode_update(u, &mut again).unwrap();
                }
                assert!(again == self.segment, "re-encoding the decoded journal changed it");
                if !*compact {
                    assert_eq!(replayed.updates.len(), self.journal.len());
                    for (back, original) in replayed.updates.iter().zip(&self.journal) {
                        // (A decoded snapshot lacks the derived indexes until it is applied.)
                        if !matches!(original, Update::Snapshot { .. }) {
                            assert_eq!(back, original);
                        }
                    }
                }
                let before = self.d.dispatcher().state().clone();
                self.journal = replayed.updates;
                let d = Dispatcher::recover(dispatcher_config(), inc.into(), now, &self.journal)
                    .unwrap();
                self.d = Driver::new(d, VecSink::default());
                assert_eq!(self.d.dispatcher().state(), &before, "recovered state");
                self.d.dispatcher().state().check_heartbeat_index().unwrap();
                assert!(self.d.sink().records.is_empty());
            }
        }
    }

    /// Invariants 2 and 3 on one get-split answer.
    fn observe_splits(
        &mut self,
        iteration: u64,
        addr: &str,
        alive_before: bool,
        got: &[u64],
        end: bool,
        retry: bool,
    ) {
        let live: BTreeSet<String> = ADDRS
            .iter()
            .filter(|a| **a != addr && self.alive(a))
            .map(|a| (*a).to_owned())
            .collect();
        let obs = self.obs.get_mut(&iteration).expect("a DYNAMIC iteration");
        // Asking again acknowledges the splits of the previous call.
        if got.is_empty() && !end && !retry {
            panic!("an answer with no splits must be end_of_splits or retry_after");
        }
        let acked = obs.outstanding.remove(addr).unwrap_or_default();
        if alive_before {
            obs.delivered.extend(acked);
        }
        for s in got {
            let n = obs.handed.entry(*s).or_default();
            *n += 1;
            let allowed = 1 + obs.lost_holding.get(s).copied().unwrap_or(0);
            assert!(*n <= allowed, "split {s} of iteration {iteration} handed out {n} times");
            if !obs.saw_loss {
                assert_eq!(*n, 1, "split {s} of iteration {iteration} handed out twice");
            }
        }
        if !got.is_empty() {
            obs.outstanding.insert(addr.to_owned(), got.to_vec());
        }
        if end {
            obs.seen_end.insert(addr.to_owned());
            let handed: Vec<u64> = obs.handed.keys().copied().collect();
            assert_eq!(handed, (0..obs.total).collect::<Vec<_>>(), "end_of_splits too early");
        }
        if retry {
            // Progress: waiting is only right while a live worker holds splits.
            let holders: Vec<&String> =
                obs.outstanding.iter().filter(|(_, l)| !l.is_empty()).map(|(w, _)| w).collect();
            assert!(
                holders.iter().any(|w| live.contains(*w)),
                "{addr} told to retry in iteration {iteration}, but the only holders of \
                 splits are {holders:?} and the live workers are {live:?}"
            );
        }
    }

    /// Invariant 5 when an iteration becomes finished.
    fn check_newly_finished(&mut self) {
        let state = self.d.dispatcher().state();
        for it in state.iterations().values().filter(|i| i.finished) {
            if self.finished.insert(it.id.0) {
                for t in &it.tasks {
                    let task = &state.tasks()[t];
                    let live = state.workers().get(&task.worker_address).is_some_and(|w| w.alive);
                    assert!(
                        task.finished || (task.abandoned && !live),
                        "iteration {} finished with task {task:?} of a live worker open",
                        it.id
                    );
                }
            }
        }
    }
}

struct DispatcherTest;

impl StateMachineTest for DispatcherTest {
    type SystemUnderTest = Sut;
    type Reference = ModelMachine;

    fn init_test(_: &Model) -> Sut {
        Sut::new()
    }

    fn apply(mut sut: Sut, m: &Model, _: Tr) -> Sut {
        let inc = incarnation(m.incarnation);
        for step in &m.steps {
            sut.run(step, &inc);
            sut.sync(step);
        }
        sut.check_newly_finished();
        sut
    }

    fn check_invariants(sut: &Sut, m: &Model) {
        let state = sut.d.dispatcher().state();
        // 1. Replay equals the live state.
        replay::check_replay("", dispatcher_config().worker_addresses, &sut.journal, state);
        // 6. The model and the state agree on what the model keeps.
        for (w, addr) in ADDRS.iter().enumerate() {
            let worker = &m.workers[w];
            assert_eq!(
                state.workers().get(*addr).map(|x| x.alive),
                worker.registered.then_some(worker.alive),
                "liveness of {addr}"
            );
        }
        assert_eq!(state.datasets().len(), m.datasets.len() + m.tf_datasets.len());
        for d in &m.tf_datasets {
            assert_eq!(state.datasets()[&d.id].compression_disabled, d.decided, "{}", d.id);
        }
        assert_eq!(state.jobs().len(), m.jobs.len());
        assert_eq!(state.iterations().len(), m.iterations.len());
        for mi in &m.iterations {
            let it = &state.iterations()[&IterationId(mi.id)];
            assert_eq!(it.finished, mi.finished, "finished of iteration {}", mi.id);
            assert_eq!(it.num_clients, mi.clients, "clients of iteration {}", mi.id);
            let tasks: Vec<u64> = mi.tasks.iter().map(|t| m.tasks[*t].id).collect();
            assert_eq!(it.tasks.iter().map(|t| t.0).collect::<Vec<_>>(), tasks);
        }
        assert_eq!(state.tasks().len(), m.tasks.len());
        for mt in &m.tasks {
            let t = &state.tasks()[&TaskId(mt.id)];
            assert_eq!(t.worker_address, ADDRS[mt.worker]);
            assert_eq!((t.finished, t.abandoned), (mt.finished, mt.abandoned), "task {}", mt.id);
        }
        let active: BTreeSet<u64> = m.clients.iter().filter(|c| c.active).map(|c| c.id).collect();
        assert_eq!(state.clients().keys().map(|c| c.0).collect::<BTreeSet<_>>(), active);
        // 5. Finished iterations have nothing open.
        for it in state.iterations().values().filter(|i| i.finished) {
            for t in &it.tasks {
                let t = &state.tasks()[t];
                assert!(t.finished || t.abandoned, "finished iteration {} with {t:?}", it.id);
            }
        }
        // 3. No split lost: once every live worker of the iteration saw the end (or the
        // iteration finished), live workers acknowledged every split.
        for (id, obs) in &sut.obs {
            let it = &state.iterations()[&IterationId(*id)];
            let live: BTreeSet<&str> = it
                .tasks
                .iter()
                .map(|t| state.tasks()[t].worker_address.as_str())
                .filter(|a| state.workers()[*a].alive)
                .collect();
            let all_ended = !live.is_empty() && live.iter().all(|a| obs.seen_end.contains(*a));
            if all_ended || it.finished {
                let missing: Vec<u64> =
                    (0..obs.total).filter(|s| !obs.delivered.contains(s)).collect();
                assert!(
                    missing.is_empty(),
                    "iteration {id}: splits {missing:?} were never acknowledged by a live worker"
                );
            }
        }
    }
}

fn proptest_config() -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(128);
    Config { cases, failure_persistence: None, ..Config::default() }
}

prop_state_machine! {
    #![proptest_config(proptest_config())]

    /// The dispatcher against the reference model, with the invariants of the module docs.
    #[test]
    fn dispatcher_agrees_with_the_model(sequential 1..100 => DispatcherTest);
}

// ---------------------------------------------------------------------------------------
// Dispatcher bugs found while writing the model, minimised; fixed, kept as regressions.

/// A dispatcher with workers `w1` and `w2` (registered at 0) and an iteration over
/// `range(n)` with one element per split; returns the iteration and its client.
fn two_workers_one_iteration(n: i64, policy: ShardingPolicy) -> (D, IterationId, ClientId) {
    let d = Dispatcher::new(dispatcher_config(), incarnation(1), Millis(0)).unwrap();
    let mut d = Driver::new(d, VecSink::default());
    for w in ["w1", "w2"] {
        heartbeat(&mut d, 0, w, &[]);
    }
    let ds = d
        .call(
            Millis(0),
            RegisterDataset { dataset: range_def(0, n, 1), dataset_id: None, metadata: None },
        )
        .unwrap()
        .dataset_id;
    let job = d
        .call(
            Millis(0),
            CreateJob {
                dataset_id: ds,
                processing_mode: ProcessingMode::Policy { sharding_policy: policy },
                job_name: None,
                num_consumers: None,
                target_workers: TargetWorkers::Auto,
                cross_trainer_cache: false,
                split_size: Some(1),
            },
        )
        .unwrap()
        .job_id;
    let lease = d.call(Millis(1), (job, CreateIteration::default())).unwrap();
    (d, lease.iteration_id, lease.client_id)
}

fn heartbeat(
    d: &mut D,
    now: u64,
    w: &str,
    current: &[TaskId],
) -> shardwise_core::dispatch::wire::WorkerHeartbeatReply {
    let req = WorkerHeartbeat {
        worker_address: w.into(),
        current_tasks: current.to_vec(),
        tags: Vec::new(),
        worker_uid: None,
        incarnation: None,
        tensorflow: None,
    };
    d.call(Millis(now), req.clone()).unwrap()
}

fn ask(
    d: &mut D,
    now: u64,
    it: IterationId,
    w: &str,
    max: u32,
) -> Result<(Vec<u64>, bool), DispatchError> {
    let req = GetSplits {
        worker_address: w.into(),
        worker_uid: None,
        repetition: 0,
        split_provider_index: 0,
        max_splits: Some(max),
        acknowledge: None,
    };
    let r = d.call(Millis(now), (it, req.clone()))?;
    Ok((
        r.splits.into_iter().map(|s| Value::from(s)["start"].as_u64().unwrap()).collect(),
        r.end_of_splits,
    ))
}

fn task_of(d: &D, it: IterationId, w: &str) -> TaskId {
    let state = d.dispatcher().state();
    *state.iterations()[&it].tasks.iter().find(|t| state.tasks()[*t].worker_address == w).unwrap()
}

/// `w1` misses heartbeats and is declared lost, but was only slow: it asks for a split
/// before its next heartbeat and gets one, leased to a worker that is already lost. When
/// `w1` then dies for good, nothing ever hands that split out again (a worker is lost only
/// once), so `w2` is told to retry forever and the iteration never finishes.
#[test]
fn bug_lost_worker_is_handed_splits_that_are_then_stuck() {
    let (mut d, it, _) = two_workers_one_iteration(3, ShardingPolicy::Dynamic);
    heartbeat(&mut d, 900, "w2", &[]);
    d.handle_timeout(Millis(1_001));
    assert!(!d.dispatcher().state().workers()["w1"].alive);
    // Today: Ok([0]), leased to the lost w1. Then w1 dies.
    let stranded = ask(&mut d, 1_002, it, "w1", 1).map(|(s, _)| s).unwrap_or_default();
    // w2 stays alive and reads until the end of the splits.
    let mut got = Vec::new();
    let mut ended = false;
    for k in 0..20 {
        let now = 1_100 + k * 600;
        heartbeat(&mut d, now, "w2", &[]);
        d.handle_timeout(Millis(now + 1));
        let (splits, end) = ask(&mut d, now + 2, it, "w2", 4).unwrap();
        got.extend(splits);
        if end {
            ended = true;
            break;
        }
    }
    assert!(ended, "w2 never sees end_of_splits: {stranded:?} stay leased to the lost w1");
    got.sort_unstable();
    assert_eq!(got, [0, 1, 2], "every split reaches a live worker");
}

/// The same root cause, losing data instead of progress: the lost `w1` keeps running, is
/// handed split 0, and acknowledges it by asking again, all while clients are told to skip
/// its task (`worker_lost`). The iteration finishes without split 0 ever being produced by
/// a task a client reads.
#[test]
fn bug_split_read_by_a_lost_worker_is_lost() {
    let (mut d, it, client) = two_workers_one_iteration(2, ShardingPolicy::Dynamic);
    heartbeat(&mut d, 900, "w2", &[]);
    d.handle_timeout(Millis(1_001));
    let mut by_w1 = ask(&mut d, 1_002, it, "w1", 1).map(|(s, _)| s).unwrap_or_default();
    let mut by_w2 = Vec::new();
    let mut w2_ended = false;
    for k in 0..10 {
        let now = 1_003 + k * 10;
        by_w1.extend(ask(&mut d, now, it, "w1", 1).map(|(s, _)| s).unwrap_or_default());
        let (splits, end) = ask(&mut d, now + 1, it, "w2", 1).unwrap();
        by_w2.extend(splits);
        if end {
            w2_ended = true;
            break;
        }
    }
    assert!(w2_ended);
    let t2 = task_of(&d, it, "w2");
    d.call(
        Millis(1_200),
        WorkerUpdate {
            worker_address: "w2".into(),
            worker_uid: None,
            updates: vec![TaskProgress { task_id: t2, completed: true }],
        },
    )
    .unwrap();
    let hb = d.call(Millis(1_201), (client, ClientHeartbeat::default())).unwrap();
    let w1_skipped = hb.tasks.iter().any(|t| t.worker_address == "w1" && t.worker_lost);
    for s in 0..2 {
        assert!(
            by_w2.contains(&s) || (by_w1.contains(&s) && !w1_skipped),
            "split {s} was only produced by w1, whose task clients skip (worker_lost); \
             w1 got {by_w1:?}, w2 got {by_w2:?}, iteration_finished {}",
            hb.iteration_finished
        );
    }
}

/// A worker lost while its OFF iteration finished keeps that iteration's task after it
/// comes back: the task stays assigned (abandoned, never finished), so the worker is never
/// told to delete it, and a restarted process is even sent it as a new task.
#[test]
fn bug_revived_worker_keeps_tasks_of_finished_iterations() {
    let (mut d, it, _) = two_workers_one_iteration(3, ShardingPolicy::Off);
    let t1 = task_of(&d, it, "w1");
    let t2 = task_of(&d, it, "w2");
    heartbeat(&mut d, 900, "w2", &[t2]);
    d.handle_timeout(Millis(1_001));
    d.call(
        Millis(1_002),
        WorkerUpdate {
            worker_address: "w2".into(),
            worker_uid: None,
            updates: vec![TaskProgress { task_id: t2, completed: true }],
        },
    )
    .unwrap();
    assert!(d.dispatcher().state().iterations()[&it].finished);
    // w1 comes back still running t1: it should be told to drop it.
    let r = heartbeat(&mut d, 1_003, "w1", &[t1]);
    assert_eq!(r.tasks_to_delete, [t1], "t1 belongs to a finished iteration");
    // A fresh w1 process must not be given it either.
    let r = heartbeat(&mut d, 1_004, "w1", &[]);
    assert!(r.new_tasks.is_empty(), "sent {:?}", r.new_tasks);
}
