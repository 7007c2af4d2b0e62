//! What the state holds: datasets, workers, jobs, iterations and their splits, tasks,
//! clients; and a dataset's footprint (fingerprint and size).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dataset::DatasetDef;
use crate::dispatch::tensorflow::{DatasetSpec, TfDataset, TfWorkerInfo};
use crate::dispatch::types::{
    ClientId, IterationId, JobId, Millis, ShardingPolicy, TargetWorkers, TaskId,
};
use crate::position::ResumePlan;

/// A registered dataset.
///
/// In records a declarative dataset is `{"id", "def", "metadata"}` (as before TensorFlow
/// datasets existed) and a TensorFlow one `{"id", "tensorflow", "metadata"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "DatasetRecord", into = "DatasetRecord")]
pub struct Dataset {
    /// Its id (generated decimal ids start at 1000).
    pub id: String,
    /// The definition workers run: declarative, or a TensorFlow graph with its metadata.
    pub spec: DatasetSpec,
    /// Opaque client metadata of a declarative dataset (`null` for TensorFlow datasets, whose
    /// metadata is part of [`TfDataset`]).
    pub metadata: Value,
    /// TensorFlow datasets: whether compression was disabled at run time, once decided
    /// (TensorFlow's `DisableCompressionAtRuntime`).
    pub compression_disabled: Option<bool>,
}

/// [`Dataset`]'s record form.
#[derive(Serialize, Deserialize)]
struct DatasetRecord {
    id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    def: Option<DatasetDef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tensorflow: Option<Box<TfDataset>>,
    #[serde(default)]
    metadata: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compression_disabled: Option<bool>,
}

impl TryFrom<DatasetRecord> for Dataset {
    type Error = String;
    fn try_from(r: DatasetRecord) -> Result<Self, String> {
        let spec = match (r.def, r.tensorflow) {
            (Some(def), None) => DatasetSpec::Declarative(def),
            (None, Some(tf)) => DatasetSpec::TensorFlow(tf),
            _ => return Err(format!("dataset {} needs exactly one of def and tensorflow", r.id)),
        };
        Ok(Dataset {
            id: r.id,
            spec,
            metadata: r.metadata,
            compression_disabled: r.compression_disabled,
        })
    }
}

impl From<Dataset> for DatasetRecord {
    fn from(d: Dataset) -> Self {
        let (def, tensorflow) = match d.spec {
            DatasetSpec::Declarative(def) => (Some(def), None),
            DatasetSpec::TensorFlow(tf) => (None, Some(tf)),
        };
        DatasetRecord {
            id: d.id,
            def,
            tensorflow,
            metadata: d.metadata,
            compression_disabled: d.compression_disabled,
        }
    }
}

/// A registered worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worker {
    /// The address clients and the dispatcher use for it.
    pub address: String,
    /// Tags (e.g. `COLOCATED`), captured at first registration.
    pub tags: Vec<String>,
    /// False after the worker missed heartbeats for the worker timeout.
    pub alive: bool,
    /// The worker process's own id, when it sends one: a new id at the same address means
    /// the process restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Tasks assigned to it that are neither finished nor removed.
    pub tasks: BTreeSet<TaskId>,
    /// A TensorFlow worker's own fields (its transfer servers); `None`: a Shardwise worker.
    /// The kind is fixed at registration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorflow: Option<TfWorkerInfo>,
}

/// A job: a named, shareable consumer of one dataset with fixed parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Id.
    pub id: JobId,
    /// Name (`anonymous_job_<id>` when the client gave none).
    pub name: String,
    /// The dataset.
    pub dataset_id: String,
    /// Sharding policy.
    pub policy: ShardingPolicy,
    /// Coordinated reads: the number of consumers.
    pub num_consumers: Option<u64>,
    /// Which workers clients read from.
    pub target_workers: TargetWorkers,
    /// TensorFlow's cross-trainer cache flag (passed to workers).
    pub cross_trainer_cache: bool,
    /// Elements per split of a range or list source (DYNAMIC).
    pub split_size: u64,
}

/// One split of a repetition: `(repetition, index)`; `[repetition, index]` in records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(from = "(u64, u64)", into = "(u64, u64)")]
pub struct SplitRef {
    /// The split provider's repetition.
    pub repetition: u64,
    /// The split's index within the repetition.
    pub index: u64,
}

/// DYNAMIC sharding bookkeeping of one iteration's split provider.
///
/// Splits are numbered `0..total` in every repetition and computed from the dataset
/// definition on demand, so the provider is just counters: nothing needs fast-forwarding
/// on recovery. A split handed to a worker is *leased* until the same worker asks for more
/// splits (or finishes its task), which acknowledges it; the leases of a worker that is lost
/// go back to `requeue` and are handed out again, so no split of a repetition is lost.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitState {
    /// Splits per repetition.
    pub total: u64,
    /// The repetition fresh splits come from.
    pub repetition: u64,
    /// The next fresh split index in `repetition`.
    pub next_index: u64,
    /// Splits handed out and not yet acknowledged, per worker address.
    pub leases: BTreeMap<String, Vec<SplitRef>>,
    /// Splits of lost workers, to be handed out again.
    pub requeue: BTreeSet<SplitRef>,
    /// Splits handed out so far (fresh and again), for metrics.
    pub handed_out: u64,
    /// Splits handed out again after their worker was lost (taken from `requeue`), for the
    /// status page.
    #[serde(default)]
    pub reissued: u64,
    /// A resumed iteration's splits (`0..total` index into it); `None`: the source's own
    /// splits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<ResumePlan>,
}

impl From<(u64, u64)> for SplitRef {
    fn from((repetition, index): (u64, u64)) -> Self {
        SplitRef { repetition, index }
    }
}

impl From<SplitRef> for (u64, u64) {
    fn from(s: SplitRef) -> Self {
        (s.repetition, s.index)
    }
}

impl SplitState {
    /// Whether any split of `repetition` is still leased or waiting to be handed out again.
    pub fn pending_in(&self, repetition: u64) -> bool {
        self.requeue.iter().any(|s| s.repetition == repetition)
            || self.leases.values().flatten().any(|s| s.repetition == repetition)
    }
    /// Whether any split at all is leased or queued again.
    pub fn pending(&self) -> bool {
        !self.requeue.is_empty() || self.leases.values().any(|l| !l.is_empty())
    }
}

/// A pass over a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Iteration {
    /// Id.
    pub id: IterationId,
    /// The job.
    pub job_id: JobId,
    /// The job name, part of the iteration's key.
    pub job_name: String,
    /// The client-side repetition, the other part of the key.
    pub repetition: u64,
    /// Visible tasks, in creation order.
    pub tasks: Vec<TaskId>,
    /// Clients holding a lease.
    pub num_clients: u64,
    /// When the last client released it.
    pub last_release: Option<Millis>,
    /// All tasks are done.
    pub finished: bool,
    /// Collected after its clients left.
    pub garbage_collected: bool,
    /// DYNAMIC iterations only.
    pub splits: Option<SplitState>,
    /// Coordinated reads: the number of consumers.
    pub num_consumers: Option<u64>,
    /// Coordinated reads: late tasks waiting for the consumers' agreement, first in front.
    pub pending: VecDeque<PendingTask>,
    /// DYNAMIC iterations of TensorFlow datasets: one cursor per split provider (TensorFlow
    /// workers never acknowledge splits: no leases, at-most-once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf_splits: Option<Vec<TfSplitCursor>>,
}

impl Iteration {
    /// DYNAMIC splits handed out so far (fresh and again), over every split provider.
    pub fn splits_handed_out(&self) -> u64 {
        self.splits.as_ref().map_or(0, |s| s.handed_out)
            + self.tf_splits.iter().flatten().map(|c| c.handed_out).sum::<u64>()
    }
}

/// Where a TensorFlow DYNAMIC split provider is: the next split it hands out is `next_index`
/// of `repetition`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TfSplitCursor {
    /// The provider's current repetition.
    pub repetition: u64,
    /// The next split index in it.
    pub next_index: u64,
    /// Splits handed out so far, for metrics.
    #[serde(default)]
    pub handed_out: u64,
}

/// A coordinated-read task that joined late: sent to its worker at once, shown to clients
/// only when every consumer agreed on the round it starts in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTask {
    /// The task.
    pub task_id: TaskId,
    /// The round it is proposed to start in.
    pub target_round: u64,
    /// Consumers (by index) that agreed to block before `target_round`.
    pub ready_consumers: BTreeSet<u64>,
    /// Consumers without an index (TensorFlow's clients), by client id, that agreed.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub ready_clients: BTreeSet<ClientId>,
    /// Rejected proposals so far (each doubles the distance of the next one).
    pub failures: u32,
}

/// An iteration's work on one worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// Id.
    pub id: TaskId,
    /// The iteration.
    pub iteration_id: IterationId,
    /// The worker.
    pub worker_address: String,
    /// Static sharding: `(num_workers, worker_index)`.
    pub shard: Option<(u64, u64)>,
    /// Coordinated reads: the first round clients read it in.
    pub starting_round: u64,
    /// The worker reported it complete (or its iteration was collected).
    pub finished: bool,
    /// Its worker was lost; it no longer blocks the iteration.
    pub abandoned: bool,
}

/// A consumer's lease on an iteration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Client {
    /// Id.
    pub id: ClientId,
    /// The iteration.
    pub iteration_id: IterationId,
    /// Coordinated reads: which consumer this client is.
    pub consumer_index: Option<u64>,
}

/// A dataset's fingerprint and size: a hash of its definition and metadata encoded as JSON,
/// and the length of that encoding. Equal fingerprints do not prove equal datasets (the
/// dispatcher compares them before it deduplicates); the fingerprint only finds candidates.
/// Encoded as a stream, without building the JSON text.
pub fn footprint(spec: &DatasetSpec, metadata: &Value) -> (u64, u64) {
    match spec {
        DatasetSpec::Declarative(def) => footprint_declarative(def, metadata),
        DatasetSpec::TensorFlow(tf) => footprint_tf(tf),
    }
}

/// [`footprint`] of a TensorFlow dataset: a hash of its fingerprint, or (a dataset recorded
/// without one) of the graph and metadata as sent (not the providers, derived from the graph),
/// and the bytes `max_dataset_bytes` counts (the graph and the element spec).
pub fn footprint_tf(tf: &TfDataset) -> (u64, u64) {
    use std::hash::{DefaultHasher, Hasher};
    let mut hasher = DefaultHasher::new();
    if let Some(fingerprint) = &tf.fingerprint {
        hasher.write(b"tensorflow fingerprint");
        hasher.write(fingerprint.as_bytes());
        return (hasher.finish(), tf.bytes());
    }
    hasher.write(b"tensorflow");
    hasher.write(&tf.graph);
    match &tf.element_spec {
        Some(e) => {
            hasher.write_u8(1);
            hasher.write(e);
        }
        None => hasher.write_u8(0),
    }
    hasher.write_i32(tf.compression);
    hasher.write_i64(tf.cardinality);
    (hasher.finish(), tf.bytes())
}

/// [`footprint`] of a declarative dataset.
pub fn footprint_declarative(def: &DatasetDef, metadata: &Value) -> (u64, u64) {
    use std::hash::{DefaultHasher, Hasher};
    struct Sink {
        hasher: DefaultHasher,
        len: u64,
    }
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.hasher.write(buf);
            self.len += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut sink = Sink { hasher: DefaultHasher::new(), len: 0 };
    // Plain data: encoding cannot fail (a failure would only weaken deduplication).
    let _ = serde_json::to_writer(&mut sink, &(def, metadata));
    (sink.hasher.finish(), sink.len)
}
