//! The status snapshot (`GET /v1/status`): what the dispatcher holds, as one typed, bounded
//! reply for people (the status page) and tools.
//!
//! Each list holds at most [`STATUS_LIST_CAP`] entries; `totals` says how many exist, so a
//! dispatcher with 100 000 clients still answers a bounded reply. Workers are listed in
//! address order and datasets in id order (the first ones); jobs, iterations and clients
//! newest first (the highest ids), since those are the ones being watched.

use serde::{Deserialize, Serialize};

use super::state::{SplitState, State, TfSplitCursor};
use super::tensorflow::DatasetSpec;
use super::types::{ClientId, IterationId, JobId, Millis, ShardingPolicy, TaskId};
use crate::dataset::{DatasetDef, SourceDef, TransformDef};

/// The most entries of each list of a [`StatusReport`].
pub const STATUS_LIST_CAP: usize = 500;

/// `GET /v1/status`: the status snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GetStatus;

/// The dispatcher's state at a glance. Lists are capped at `list_cap` entries each
/// (workers by address, datasets by id, jobs, iterations and clients newest first);
/// `totals` counts everything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatusReport {
    /// The incarnation id.
    pub incarnation: String,
    /// The state's version (updates applied): equal versions, equal states.
    pub state_version: u64,
    /// The dispatcher's time of the snapshot, in milliseconds since the Unix epoch.
    pub now_ms: u64,
    /// The most entries each list holds.
    pub list_cap: u64,
    /// How many of each there are (lists may hold fewer).
    pub totals: StatusTotals,
    /// Registered workers, in address order.
    pub workers: Vec<WorkerStatus>,
    /// Registered datasets, in id order.
    pub datasets: Vec<DatasetStatus>,
    /// Jobs, newest first.
    pub jobs: Vec<JobStatus>,
    /// Iterations, newest first.
    pub iterations: Vec<IterationStatus>,
    /// Client leases, newest first.
    pub clients: Vec<ClientStatus>,
}

/// How many of each thing the dispatcher holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatusTotals {
    /// Registered workers.
    pub workers: u64,
    /// Registered workers that are not lost.
    pub workers_alive: u64,
    /// Datasets.
    pub datasets: u64,
    /// Jobs.
    pub jobs: u64,
    /// Iterations (garbage-collected ones are freed and not counted).
    pub iterations: u64,
    /// Iterations that are not finished.
    pub iterations_open: u64,
    /// Client leases.
    pub clients: u64,
    /// Tasks.
    pub tasks: u64,
    /// DYNAMIC splits handed out, over every iteration ever created (collected ones too).
    pub splits_handed_out: u64,
}

/// A worker's kind, fixed when it registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum WorkerKind {
    /// `shardwise worker`.
    Shardwise,
    /// A TensorFlow tf.data service worker.
    Tensorflow,
}

/// One registered worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerStatus {
    /// Its address.
    pub worker_address: String,
    /// False once it missed heartbeats for the worker timeout.
    pub alive: bool,
    /// Its tags.
    pub tags: Vec<String>,
    /// Shardwise or TensorFlow.
    pub kind: WorkerKind,
    /// Its tasks that are neither finished nor removed.
    pub tasks: Vec<TaskId>,
    /// Milliseconds since the dispatcher last heard from it (`null`: not since this
    /// dispatcher started).
    pub since_heartbeat_ms: Option<u64>,
}

/// A dataset's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DatasetKind {
    /// A declarative dataset (`POST /v1/datasets`).
    Declarative,
    /// A TensorFlow graph (registered over gRPC).
    Tensorflow,
}

/// One dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatasetStatus {
    /// Its id.
    pub dataset_id: String,
    /// Declarative or TensorFlow.
    pub kind: DatasetKind,
    /// One line: the source and transforms (`range(0, 100000) | shuffle(1000)`), or the
    /// TensorFlow graph's size.
    pub summary: String,
}

/// One job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobStatus {
    /// Its id.
    pub job_id: JobId,
    /// Its name.
    pub job_name: String,
    /// Its dataset.
    pub dataset_id: String,
    /// Its sharding policy.
    pub sharding_policy: ShardingPolicy,
    /// Coordinated reads: the number of consumers.
    pub num_consumers: Option<u64>,
    /// Elements per split (DYNAMIC).
    pub split_size: u64,
}

/// One iteration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IterationStatus {
    /// Its id.
    pub iteration_id: IterationId,
    /// Its job.
    pub job_id: JobId,
    /// The job's name.
    pub job_name: String,
    /// The client-side repetition.
    pub repetition: u64,
    /// Clients holding a lease.
    pub num_clients: u64,
    /// All tasks are done.
    pub finished: bool,
    /// Collected after its clients left.
    pub garbage_collected: bool,
    /// Its tasks.
    pub tasks: Vec<TaskId>,
    /// DYNAMIC iterations of declarative datasets: the split progress.
    pub splits: Option<SplitProgress>,
    /// DYNAMIC iterations of TensorFlow datasets: one cursor per split provider.
    pub tf_splits: Option<Vec<TfSplitProgress>>,
}

/// The split progress of a DYNAMIC iteration's current repetition (the provider's
/// `repetition`): `acknowledged + leased + requeued + remaining = total`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SplitProgress {
    /// The provider's current repetition (epoch).
    pub repetition: u64,
    /// Splits per repetition.
    pub total: u64,
    /// Distinct splits of this repetition handed out so far.
    pub handed_out: u64,
    /// Splits of this repetition handed out and acknowledged (done).
    pub acknowledged: u64,
    /// Splits of this repetition in flight: handed out, not yet acknowledged.
    pub leased: u64,
    /// Splits of this repetition taken back from a lost worker, waiting to be handed out
    /// again.
    pub requeued: u64,
    /// Splits of this repetition not handed out yet.
    pub remaining: u64,
    /// Splits handed out again after their worker was lost, over every repetition.
    pub reissued: u64,
    /// Splits handed out over every repetition (re-issued ones included).
    pub handed_out_total: u64,
    /// Splits acknowledged over every repetition: `repetition * total + acknowledged` (a
    /// repetition ends only when every split of it is acknowledged). Grows steadily while
    /// clients read, across epochs: what the status page plots.
    pub acknowledged_all_epochs: u64,
}

/// A TensorFlow DYNAMIC split provider's cursor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TfSplitProgress {
    /// The provider's current repetition.
    pub repetition: u64,
    /// The next split index in it.
    pub next_index: u64,
    /// Splits handed out so far.
    pub handed_out: u64,
}

/// One client lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClientStatus {
    /// Its id.
    pub client_id: ClientId,
    /// The iteration it reads.
    pub iteration_id: IterationId,
    /// Coordinated reads: which consumer it is.
    pub consumer_index: Option<u64>,
}

/// The progress of a split provider's current repetition.
pub fn split_progress(s: &SplitState) -> SplitProgress {
    let current = |r: &&super::state::SplitRef| r.repetition == s.repetition;
    let leased = s.leases.values().flatten().filter(current).count() as u64;
    let requeued = s.requeue.iter().filter(current).count() as u64;
    let handed_out = s.next_index.min(s.total);
    let acknowledged = handed_out.saturating_sub(leased + requeued);
    SplitProgress {
        repetition: s.repetition,
        total: s.total,
        handed_out,
        acknowledged,
        leased,
        requeued,
        remaining: s.total - handed_out,
        reissued: s.reissued,
        handed_out_total: s.handed_out,
        acknowledged_all_epochs: s.repetition.saturating_mul(s.total).saturating_add(acknowledged),
    }
}

fn tf_progress(c: &TfSplitCursor) -> TfSplitProgress {
    TfSplitProgress { repetition: c.repetition, next_index: c.next_index, handed_out: c.handed_out }
}

/// One line describing a declarative dataset: `range(0, 100) | shuffle(1000) | batch(32)`.
pub fn summarize(def: &DatasetDef) -> String {
    let mut out = match &def.source {
        SourceDef::Range(r) if r.step.get() == 1 => format!("range({}, {})", r.start, r.stop),
        SourceDef::Range(r) => format!("range({}, {}, {})", r.start, r.stop, r.step),
        SourceDef::List(l) => format!("list({} elements)", l.elements.len()),
        SourceDef::Files(f) => format!("files({} paths, {:?})", f.paths.len(), f.format),
        SourceDef::Splits(s) => format!("splits({} items)", s.items.len()),
    };
    for t in &def.transforms {
        let part = match t {
            TransformDef::Repeat(None) => "repeat".to_owned(),
            TransformDef::Repeat(Some(n)) => format!("repeat({n})"),
            TransformDef::Take(n) => format!("take({n})"),
            TransformDef::Skip(n) => format!("skip({n})"),
            TransformDef::Shuffle(s) => format!("shuffle({})", s.buffer),
            TransformDef::Batch(b) if b.drop_remainder => format!("batch({}, drop)", b.size),
            TransformDef::Batch(b) => format!("batch({})", b.size),
            TransformDef::ShardHint => "shard_hint".to_owned(),
        };
        out.push_str(" | ");
        out.push_str(&part);
    }
    out
}

/// The status snapshot of `state` at `now` (`seen`: when each worker was last heard from).
pub(crate) fn report(
    state: &State,
    now: Millis,
    seen: impl Fn(&str) -> Option<Millis>,
) -> StatusReport {
    let cap = STATUS_LIST_CAP;
    let workers = state
        .workers
        .values()
        .take(cap)
        .map(|w| WorkerStatus {
            worker_address: w.address.clone(),
            alive: w.alive,
            tags: w.tags.clone(),
            kind: if w.tensorflow.is_some() {
                WorkerKind::Tensorflow
            } else {
                WorkerKind::Shardwise
            },
            tasks: w.tasks.iter().copied().collect(),
            since_heartbeat_ms: seen(&w.address).map(|t| now.since(t).0),
        })
        .collect();
    let datasets = state
        .datasets
        .values()
        .take(cap)
        .map(|d| match &d.spec {
            DatasetSpec::Declarative(def) => DatasetStatus {
                dataset_id: d.id.clone(),
                kind: DatasetKind::Declarative,
                summary: summarize(def),
            },
            DatasetSpec::TensorFlow(tf) => DatasetStatus {
                dataset_id: d.id.clone(),
                kind: DatasetKind::Tensorflow,
                summary: format!("tensorflow graph ({} bytes)", tf.graph.len()),
            },
        })
        .collect();
    let jobs = state
        .jobs
        .values()
        .rev()
        .take(cap)
        .map(|j| JobStatus {
            job_id: j.id,
            job_name: j.name.clone(),
            dataset_id: j.dataset_id.clone(),
            sharding_policy: j.policy,
            num_consumers: j.num_consumers,
            split_size: j.split_size,
        })
        .collect();
    let iterations = state
        .iterations
        .values()
        .rev()
        .take(cap)
        .map(|i| IterationStatus {
            iteration_id: i.id,
            job_id: i.job_id,
            job_name: i.job_name.clone(),
            repetition: i.repetition,
            num_clients: i.num_clients,
            finished: i.finished,
            garbage_collected: i.garbage_collected,
            tasks: i.tasks.clone(),
            splits: i.splits.as_ref().map(split_progress),
            tf_splits: i.tf_splits.as_ref().map(|c| c.iter().map(tf_progress).collect()),
        })
        .collect();
    let clients = state
        .clients
        .values()
        .rev()
        .take(cap)
        .map(|c| ClientStatus {
            client_id: c.id,
            iteration_id: c.iteration_id,
            consumer_index: c.consumer_index,
        })
        .collect();
    let totals = StatusTotals {
        workers: state.workers.len() as u64,
        workers_alive: state.workers.values().filter(|w| w.alive).count() as u64,
        datasets: state.datasets.len() as u64,
        jobs: state.jobs.len() as u64,
        iterations: state.iterations.len() as u64,
        iterations_open: state.iterations.values().filter(|i| !i.finished).count() as u64,
        clients: state.clients.len() as u64,
        tasks: state.tasks.len() as u64,
        splits_handed_out: state.splits_handed_out_total(),
    };
    StatusReport {
        incarnation: state.incarnation.clone(),
        state_version: state.version,
        now_ms: now.0,
        list_cap: cap as u64,
        totals,
        workers,
        datasets,
        jobs,
        iterations,
        clients,
    }
}
