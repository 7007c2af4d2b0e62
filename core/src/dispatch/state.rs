//! The dispatcher's durable state and the one pure `apply` that changes it.
//!
//! Everything here is what the journal records: [`State`] is exactly the fold of
//! [`apply`] over the journal, so `recover(journal) == live state` holds by construction
//! and is checked by the tests. Liveness timestamps are not durable state: the
//! [`super::Dispatcher`] keeps them in the state's derived heartbeat index (next to what a
//! worker heartbeat checks, outside equality and serialization) and resets them on recovery.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::heartbeat_index::HeartbeatIndex;
use super::tensorflow::{DatasetSpec, TfDataset, TfWorkerInfo};
use super::types::{
    ClientId, FIRST_DATASET_ID, IterationId, JobId, Millis, ShardingPolicy, TargetWorkers, TaskId,
};
use crate::dataset::DatasetDef;
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

/// A worker whose address matches no entry of the static-sharding worker list (TensorFlow's
/// words, which its tests read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Failed to assign an index for worker {address}. Configured workers list: [{}]. The \
     worker's address is not configured, or other workers are already running at the \
     configured host. If your worker has restarted, make sure it runs at the same address and \
     port.",
    entries.join(", ")
)]
pub struct NotInWorkerList {
    /// The address that asked to register.
    pub address: String,
    /// The list's entries (placeholders bound so far replaced by addresses).
    pub entries: Vec<String>,
}

/// A derived index of [`State`] that differs from what [`State::reindex`] rebuilds (found by
/// [`State::check_heartbeat_index`]): which index, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IndexDrift(pub String);

/// The fixed worker list of static sharding, with placeholder entries bound to concrete
/// addresses in registration order (TensorFlow's `WorkerIndexResolver`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerList {
    entries: Vec<String>,
}

fn split_host_port(addr: &str) -> (&str, Option<&str>) {
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() => (host, Some(port)),
        _ => (addr, None),
    }
}

fn is_port_placeholder(port: &str) -> bool {
    port == "%port%" || (port.starts_with("%port_") && port.ends_with('%'))
}

impl WorkerList {
    /// The configured list (`host`, `host:port`, `host:%port%`, `host:%port_<name>%`).
    pub fn new(entries: Vec<String>) -> Self {
        WorkerList { entries }
    }
    /// Whether static sharding is configured at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// The number of shards.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// The entries, with bound placeholders replaced by addresses.
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    fn matching(&self, addr: &str) -> Option<usize> {
        if let Some(i) = self.entries.iter().position(|e| e == addr) {
            return Some(i);
        }
        let (host, port) = split_host_port(addr);
        port?;
        self.entries.iter().position(|e| {
            let (eh, ep) = split_host_port(e);
            eh == host && ep.is_none_or(is_port_placeholder)
        })
    }

    /// Whether `addr` may register: the list is empty, or an entry matches it.
    pub fn validate(&self, addr: &str) -> Result<(), NotInWorkerList> {
        if self.entries.is_empty() || self.matching(addr).is_some() {
            return Ok(());
        }
        Err(NotInWorkerList { address: addr.to_owned(), entries: self.entries.clone() })
    }

    /// Binds `addr` to its entry (replacing a placeholder entry by the address).
    pub fn bind(&mut self, addr: &str) {
        if let Some(i) = self.matching(addr) {
            self.entries[i] = addr.to_owned();
        }
    }

    /// The worker's shard index.
    pub fn index_of(&self, addr: &str) -> Option<usize> {
        self.entries.iter().position(|e| e == addr)
    }
}

/// The durable state of a dispatcher. Read-only from outside the crate: every change is an
/// [`Update`] through [`apply`]. The lookup indexes beside the durable fields are derived
/// (rebuilt by [`State::reindex`], neither serialized nor compared).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    /// Next generated dataset id.
    pub(crate) next_dataset_id: u64,
    /// Next job id.
    pub(crate) next_job_id: u64,
    /// Next iteration id.
    pub(crate) next_iteration_id: u64,
    /// Next client id.
    pub(crate) next_client_id: u64,
    /// Next task id.
    pub(crate) next_task_id: u64,
    /// Datasets by id.
    pub(crate) datasets: BTreeMap<String, Dataset>,
    /// Workers by address.
    pub(crate) workers: BTreeMap<String, Worker>,
    /// Static sharding's worker list (bound as workers register).
    pub(crate) worker_list: WorkerList,
    /// Jobs by id.
    #[serde(with = "pairs")]
    pub(crate) jobs: BTreeMap<JobId, Job>,
    /// Iterations by id.
    #[serde(with = "pairs")]
    pub(crate) iterations: BTreeMap<IterationId, Iteration>,
    /// Iteration clients by id.
    #[serde(with = "pairs")]
    pub(crate) clients: BTreeMap<ClientId, Client>,
    /// Tasks by id.
    #[serde(with = "pairs")]
    pub(crate) tasks: BTreeMap<TaskId, Task>,
    /// The incarnation id of this state: chosen when a dispatcher starts without a journal
    /// to recover, kept by every recovery from the journal. A change tells workers and
    /// clients that the state they knew is gone (ids may start over).
    #[serde(default)]
    pub(crate) incarnation: String,
    /// Updates applied since the state began (a snapshot carries it). Within one incarnation,
    /// equal versions mean equal states, so a reader that saw version `v` can be told
    /// "nothing changed" instead of being sent the same data again.
    #[serde(default)]
    pub(crate) version: u64,
    /// DYNAMIC splits handed out by iterations that were garbage-collected since the state
    /// began, so that the total over every iteration ever created never goes down.
    #[serde(default)]
    pub(crate) splits_handed_out_collected: u64,
    /// Job id by name.
    #[serde(skip)]
    pub(crate) jobs_by_name: HashMap<String, JobId>,
    /// Current iteration by `(job name, repetition)`.
    #[serde(skip)]
    pub(crate) iterations_by_key: HashMap<(String, u64), IterationId>,
    /// Coordinated-read iterations that are not finished.
    #[serde(skip)]
    pub(crate) open_round_robin: BTreeSet<IterationId>,
    /// Workers by address, with what a steady-state heartbeat reads inline: one hash probe.
    #[serde(skip)]
    pub(crate) heartbeat_index: HeartbeatIndex,
    /// Dataset ids by the fingerprint of their definition and metadata ([`footprint`]), so
    /// that registering the same dataset again without an id finds it.
    #[serde(skip)]
    pub(crate) datasets_by_fingerprint: HashMap<u64, BTreeSet<String>>,
    /// What the datasets hold: the encoded JSON bytes of every definition and metadata,
    /// summed ([`footprint`]). Bounded by `max_dataset_bytes` for new registrations.
    #[serde(skip)]
    pub(crate) dataset_bytes: u64,
    /// The iterations of each job (jobs without any have no entry).
    #[serde(skip)]
    pub(crate) iterations_by_job: HashMap<JobId, BTreeSet<IterationId>>,
    /// The jobs of each dataset (datasets without any have no entry).
    #[serde(skip)]
    pub(crate) jobs_by_dataset: HashMap<String, BTreeSet<JobId>>,
    /// The iterations in which each worker holds DYNAMIC split leases (workers holding none
    /// have no entry): what losing or restarting a worker has to look at.
    #[serde(skip)]
    pub(crate) leases_by_worker: HashMap<String, BTreeSet<IterationId>>,
    /// How many tasks of the task map (finished ones included) each worker has (workers
    /// with none have no entry): a worker is forgotten only when it has none.
    #[serde(skip)]
    pub(crate) tasks_per_worker: HashMap<String, u64>,
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

/// [`footprint`] of a TensorFlow dataset: a hash of the graph and metadata as sent (not the
/// providers, derived from the graph), and the bytes `max_dataset_bytes` counts (the graph
/// and the element spec).
pub fn footprint_tf(tf: &TfDataset) -> (u64, u64) {
    use std::hash::{DefaultHasher, Hasher};
    let mut hasher = DefaultHasher::new();
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

/// One durable state change. The journal is a sequence of these; [`apply`] gives each its
/// meaning, for the live path and for replay alike.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Update {
    /// A dataset was registered.
    RegisterDataset {
        /// Id.
        dataset_id: String,
        /// Definition.
        def: DatasetDef,
        /// Client metadata.
        metadata: Value,
    },
    /// A TensorFlow dataset was registered.
    RegisterTfDataset {
        /// Id.
        dataset_id: String,
        /// The dataset, as sent.
        dataset: Box<TfDataset>,
    },
    /// The run-time compression of a TensorFlow dataset was decided (the first
    /// `DisableCompressionAtRuntime`).
    DecideCompression {
        /// Dataset.
        dataset_id: String,
        /// Whether compression is disabled.
        disabled: bool,
    },
    /// A TensorFlow DYNAMIC split was handed out: the provider's cursor moves past it.
    TfSplitHandedOut {
        /// Iteration.
        iteration_id: IterationId,
        /// Provider.
        split_provider_index: u64,
        /// Its repetition.
        repetition: u64,
        /// Its index in the repetition.
        index: u64,
    },
    /// A worker registered (first heartbeat).
    RegisterWorker {
        /// Address.
        address: String,
        /// Tags.
        tags: Vec<String>,
        /// The process's id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uid: Option<String>,
        /// A TensorFlow worker's fields (`None`: a Shardwise worker).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tensorflow: Option<TfWorkerInfo>,
    },
    /// A worker's process restarted at the same address (a new uid): the splits it held are
    /// handed out again; its tasks stay assigned and restart from the beginning.
    WorkerRestarted {
        /// Address.
        address: String,
        /// The new process's id.
        uid: Option<String>,
        /// A TensorFlow worker's fields of the new process (its transfer servers).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tensorflow: Option<TfWorkerInfo>,
    },
    /// A worker missed heartbeats for the worker timeout.
    WorkerLost {
        /// Address.
        address: String,
    },
    /// A lost worker heartbeated again.
    WorkerRevived {
        /// Address.
        address: String,
        /// The process's id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uid: Option<String>,
        /// A TensorFlow worker's fields (its transfer servers, refreshed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tensorflow: Option<TfWorkerInfo>,
    },
    /// A job was created.
    CreateJob {
        /// The job.
        job: Job,
    },
    /// An iteration was created (replacing a collected one with the same key).
    CreateIteration {
        /// Id.
        iteration_id: IterationId,
        /// Job.
        job_id: JobId,
        /// Client-side repetition.
        repetition: u64,
        /// DYNAMIC: splits per repetition.
        total_splits: Option<u64>,
        /// DYNAMIC of a TensorFlow dataset: its number of split providers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tf_split_providers: Option<u64>,
        /// Resumed from a read position: the splits left (`total_splits` of them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume: Option<ResumePlan>,
    },
    /// A task was created.
    CreateTask {
        /// The task.
        task: Task,
    },
    /// A coordinated-read task was created for a worker that joined late.
    CreatePendingTask {
        /// The task (its `starting_round` is the proposed round).
        task: Task,
    },
    /// A consumer's answer to the front pending task's proposal.
    ConsumerRound {
        /// Iteration.
        iteration_id: IterationId,
        /// The consumer (when it has an index; 0 when `client_id` names it).
        consumer_index: u64,
        /// The consumer, when it is a client without a consumer index (TensorFlow's clients).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_id: Option<ClientId>,
        /// The proposal was rejected (the consumer is already past it): the new round.
        rejected_new_target: Option<u64>,
        /// The consumer agreed to block before the (possibly new) target round.
        accepted: bool,
    },
    /// Every consumer agreed to drop a coordinated-read task.
    RemoveTask {
        /// Task.
        task_id: TaskId,
    },
    /// A worker reported a task complete.
    FinishTask {
        /// Task.
        task_id: TaskId,
    },
    /// A client took a lease on an iteration.
    AcquireClient {
        /// Client.
        client_id: ClientId,
        /// Iteration.
        iteration_id: IterationId,
        /// Coordinated reads: the consumer index.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        consumer_index: Option<u64>,
    },
    /// A client's lease ended (released or timed out).
    ReleaseClient {
        /// Client.
        client_id: ClientId,
        /// When.
        at: Millis,
    },
    /// An iteration without clients was collected: it is freed with its tasks and split
    /// state (records written before this version meant the same; their replay frees it too).
    GarbageCollectIteration {
        /// Iteration.
        iteration_id: IterationId,
    },
    /// A job without iterations was forgotten (its name is free again, its id unknown).
    RemoveJob {
        /// Job.
        job_id: JobId,
    },
    /// A dataset was deleted (`DELETE /v1/datasets/{id}`), with the jobs without iterations
    /// that still named it.
    DeleteDataset {
        /// Dataset.
        dataset_id: String,
    },
    /// A lost worker without tasks was forgotten.
    RemoveWorker {
        /// Address.
        address: String,
    },
    /// A get-split call: `acked` leases of the worker are done, `assigned` become its leases;
    /// `advance_to` moves the provider to a new repetition.
    ProduceSplits {
        /// Iteration.
        iteration_id: IterationId,
        /// Worker.
        worker_address: String,
        /// Leases acknowledged.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        acked: Vec<SplitRef>,
        /// Splits handed out.
        assigned: Vec<SplitRef>,
        /// The provider's next repetition, when this call ended one.
        advance_to: Option<u64>,
    },
    /// A dispatcher started on a fresh state with this incarnation id.
    Started {
        /// The id.
        incarnation: String,
    },
    /// The whole state, for compaction: replay starts from here.
    Snapshot {
        /// The state.
        state: Box<State>,
    },
}

impl PartialEq for State {
    /// Equality of the durable fields. The destructuring names every field, so a new one does
    /// not compile until it is compared here or set aside with the reason.
    fn eq(&self, o: &Self) -> bool {
        let State {
            next_dataset_id,
            next_job_id,
            next_iteration_id,
            next_client_id,
            next_task_id,
            datasets,
            workers,
            worker_list,
            jobs,
            iterations,
            clients,
            tasks,
            incarnation,
            splits_handed_out_collected,
            // A count of the updates applied, not state: compared by the tests that need it.
            version: _,
            // Derived from the fields above (`State::check_heartbeat_index` checks them).
            jobs_by_name: _,
            iterations_by_key: _,
            open_round_robin: _,
            heartbeat_index: _,
            datasets_by_fingerprint: _,
            dataset_bytes: _,
            iterations_by_job: _,
            jobs_by_dataset: _,
            leases_by_worker: _,
            tasks_per_worker: _,
        } = self;
        *next_dataset_id == o.next_dataset_id
            && *next_job_id == o.next_job_id
            && *next_iteration_id == o.next_iteration_id
            && *next_client_id == o.next_client_id
            && *next_task_id == o.next_task_id
            && *datasets == o.datasets
            && *workers == o.workers
            && *worker_list == o.worker_list
            && *jobs == o.jobs
            && *iterations == o.iterations
            && *clients == o.clients
            && *tasks == o.tasks
            && *incarnation == o.incarnation
            && *splits_handed_out_collected == o.splits_handed_out_collected
    }
}

/// Read-only views.
impl State {
    /// The next generated dataset id (before skipping taken ones: see
    /// [`State::peek_dataset_id`]).
    pub fn next_dataset_id(&self) -> u64 {
        self.next_dataset_id
    }
    /// The next job id.
    pub fn next_job_id(&self) -> u64 {
        self.next_job_id
    }
    /// The next iteration id.
    pub fn next_iteration_id(&self) -> u64 {
        self.next_iteration_id
    }
    /// The next client id.
    pub fn next_client_id(&self) -> u64 {
        self.next_client_id
    }
    /// The next task id.
    pub fn next_task_id(&self) -> u64 {
        self.next_task_id
    }
    /// Datasets by id.
    pub fn datasets(&self) -> &BTreeMap<String, Dataset> {
        &self.datasets
    }
    /// Workers by address.
    pub fn workers(&self) -> &BTreeMap<String, Worker> {
        &self.workers
    }
    /// Static sharding's worker list (bound as workers register).
    pub fn worker_list(&self) -> &WorkerList {
        &self.worker_list
    }
    /// Jobs by id.
    pub fn jobs(&self) -> &BTreeMap<JobId, Job> {
        &self.jobs
    }
    /// Iterations by id.
    pub fn iterations(&self) -> &BTreeMap<IterationId, Iteration> {
        &self.iterations
    }
    /// Iteration clients by id.
    pub fn clients(&self) -> &BTreeMap<ClientId, Client> {
        &self.clients
    }
    /// Tasks by id.
    pub fn tasks(&self) -> &BTreeMap<TaskId, Task> {
        &self.tasks
    }
    /// The incarnation id of this state (see [`Update::Started`]).
    pub fn incarnation(&self) -> &str {
        &self.incarnation
    }
    /// Updates applied since the state began: within one incarnation, equal versions mean
    /// equal states.
    pub fn version(&self) -> u64 {
        self.version
    }
    /// Job id by name (derived).
    pub fn jobs_by_name(&self) -> &HashMap<String, JobId> {
        &self.jobs_by_name
    }
    /// Dataset ids by fingerprint (derived).
    pub fn datasets_by_fingerprint(&self) -> &HashMap<u64, BTreeSet<String>> {
        &self.datasets_by_fingerprint
    }
    /// The encoded bytes the datasets hold (derived; bounded by `max_dataset_bytes`).
    pub fn dataset_bytes(&self) -> u64 {
        self.dataset_bytes
    }
    /// The iterations of a job (derived).
    pub fn iterations_of_job(&self, job_id: JobId) -> impl Iterator<Item = &Iteration> + '_ {
        self.iterations_by_job
            .get(&job_id)
            .into_iter()
            .flatten()
            .filter_map(|i| self.iterations.get(i))
    }
    /// Whether a dataset is used by a job with iterations (derived).
    pub fn dataset_in_use(&self, dataset_id: &str) -> Option<JobId> {
        self.jobs_by_dataset
            .get(dataset_id)
            .into_iter()
            .flatten()
            .find(|j| self.iterations_by_job.contains_key(j))
            .copied()
    }
    /// DYNAMIC splits handed out over every iteration the state ever had, collected ones
    /// included.
    pub fn splits_handed_out_total(&self) -> u64 {
        self.iterations
            .values()
            .map(Iteration::splits_handed_out)
            .sum::<u64>()
            .saturating_add(self.splits_handed_out_collected)
    }
}

impl State {
    /// An empty state whose static sharding list is `worker_addresses`.
    pub fn new(worker_addresses: Vec<String>) -> Self {
        State {
            next_dataset_id: FIRST_DATASET_ID,
            next_job_id: JobId::FIRST,
            next_iteration_id: IterationId::FIRST,
            next_client_id: ClientId::FIRST,
            next_task_id: TaskId::FIRST,
            worker_list: WorkerList::new(worker_addresses),
            ..State::default()
        }
    }

    /// Rebuilds the indexes that are not serialized (after a snapshot is decoded). When the
    /// dispatcher last heard from each worker is kept.
    pub fn reindex(&mut self) {
        self.heartbeat_index = HeartbeatIndex::build(&self.workers, &self.heartbeat_index);
        self.datasets_by_fingerprint.clear();
        self.dataset_bytes = 0;
        for ds in self.datasets.values() {
            let (fingerprint, bytes) = footprint(&ds.spec, &ds.metadata);
            self.datasets_by_fingerprint.entry(fingerprint).or_default().insert(ds.id.clone());
            self.dataset_bytes += bytes;
        }
        self.jobs_by_name = self.jobs.values().map(|j| (j.name.clone(), j.id)).collect();
        self.jobs_by_dataset.clear();
        for j in self.jobs.values() {
            self.jobs_by_dataset.entry(j.dataset_id.clone()).or_default().insert(j.id);
        }
        self.iterations_by_key.clear();
        self.open_round_robin.clear();
        self.iterations_by_job.clear();
        self.leases_by_worker.clear();
        self.tasks_per_worker.clear();
        for t in self.tasks.values() {
            *self.tasks_per_worker.entry(t.worker_address.clone()).or_default() += 1;
        }
        for it in self.iterations.values() {
            self.iterations_by_key.insert((it.job_name.clone(), it.repetition), it.id);
            self.iterations_by_job.entry(it.job_id).or_default().insert(it.id);
            if it.num_consumers.is_some() && !it.finished {
                self.open_round_robin.insert(it.id);
            }
            for (worker, held) in it.splits.iter().flat_map(|s| &s.leases) {
                if !held.is_empty() {
                    self.leases_by_worker.entry(worker.clone()).or_default().insert(it.id);
                }
            }
        }
    }

    /// Checks that the derived indexes (not serialized) are what [`State::reindex`] rebuilds:
    /// the heartbeat index mirrors [`State::workers`] exactly, and the open coordinated-read
    /// iterations and name lookups agree, so that a dispatcher recovered from a snapshot
    /// behaves like the live one. For tests.
    pub fn check_heartbeat_index(&self) -> Result<(), IndexDrift> {
        self.heartbeat_index.check(&self.workers).map_err(IndexDrift)?;
        let mut rebuilt = self.clone();
        rebuilt.reindex();
        if rebuilt.open_round_robin != self.open_round_robin {
            return Err(IndexDrift(format!(
                "open coordinated-read iterations {:?}, rebuilt {:?}",
                self.open_round_robin, rebuilt.open_round_robin
            )));
        }
        if rebuilt.iterations_by_key != self.iterations_by_key {
            return Err(IndexDrift(
                "iterations by job name and repetition differ from a rebuild".into(),
            ));
        }
        if rebuilt.jobs_by_name != self.jobs_by_name {
            return Err(IndexDrift("jobs by name differ from a rebuild".into()));
        }
        if rebuilt.datasets_by_fingerprint != self.datasets_by_fingerprint {
            return Err(IndexDrift("datasets by fingerprint differ from a rebuild".into()));
        }
        if rebuilt.iterations_by_job != self.iterations_by_job {
            return Err(IndexDrift("iterations by job differ from a rebuild".into()));
        }
        if rebuilt.jobs_by_dataset != self.jobs_by_dataset {
            return Err(IndexDrift("jobs by dataset differ from a rebuild".into()));
        }
        if rebuilt.tasks_per_worker != self.tasks_per_worker {
            return Err(IndexDrift("tasks per worker differ from a rebuild".into()));
        }
        if rebuilt.leases_by_worker != self.leases_by_worker {
            return Err(IndexDrift(format!(
                "iterations with leases by worker {:?}, rebuilt {:?}",
                self.leases_by_worker, rebuilt.leases_by_worker
            )));
        }
        if rebuilt.dataset_bytes != self.dataset_bytes {
            return Err(IndexDrift(format!(
                "datasets hold {} bytes, rebuilt {}",
                self.dataset_bytes, rebuilt.dataset_bytes
            )));
        }
        Ok(())
    }

    /// Changes the worker at `address` and mirrors it into the heartbeat index. Every change
    /// [`apply`] makes to a worker goes through here, or syncs the index right after it where
    /// the borrows do not allow this.
    fn update_worker<R>(&mut self, address: &str, f: impl FnOnce(&mut Worker) -> R) -> Option<R> {
        let w = self.workers.get_mut(address)?;
        let r = f(w);
        self.heartbeat_index.sync(address, w);
        Some(r)
    }

    /// Adds (or, never in practice, replaces) a dataset and keeps its derived indexes.
    fn insert_dataset(&mut self, ds: Dataset) {
        let (fingerprint, bytes) = footprint(&ds.spec, &ds.metadata);
        let id = ds.id.clone();
        // (The dispatcher never registers an id twice; replay of any journal stays exact.)
        if let Some(old) = self.datasets.insert(id.clone(), ds) {
            let (old_fingerprint, old_bytes) = footprint(&old.spec, &old.metadata);
            if let Some(ids) = self.datasets_by_fingerprint.get_mut(&old_fingerprint) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.datasets_by_fingerprint.remove(&old_fingerprint);
                }
            }
            self.dataset_bytes = self.dataset_bytes.saturating_sub(old_bytes);
        }
        self.datasets_by_fingerprint.entry(fingerprint).or_default().insert(id);
        self.dataset_bytes += bytes;
        while self.datasets.contains_key(&self.next_dataset_id.to_string()) {
            self.next_dataset_id += 1;
        }
    }

    /// The next generated dataset id that is not taken.
    pub fn peek_dataset_id(&self) -> String {
        let mut n = self.next_dataset_id;
        while self.datasets.contains_key(&n.to_string()) {
            n += 1;
        }
        n.to_string()
    }

    fn recompute_finished(&mut self, iteration_id: IterationId) {
        let Some(it) = self.iterations.get(&iteration_id) else { return };
        // Cheapest checks first: this runs on every get-split.
        if it.finished || it.tasks.is_empty() || it.splits.as_ref().is_some_and(SplitState::pending)
        {
            return;
        }
        let mut some_finished = false;
        for t in it.tasks.iter().filter_map(|t| self.tasks.get(t)) {
            if !(t.finished || t.abandoned) {
                return;
            }
            some_finished |= t.finished;
        }
        if some_finished && let Some(it) = self.iterations.get_mut(&iteration_id) {
            it.finished = true;
            // As `reindex` has it: a finished iteration takes no more coordinated-read
            // consumers (a rejoining worker gets no pending task in it).
            self.open_round_robin.remove(&iteration_id);
        }
    }

    fn release_leases(&mut self, iteration_id: IterationId, worker: &str, requeue: bool) {
        if let Some(s) = self.iterations.get_mut(&iteration_id).and_then(|i| i.splits.as_mut())
            && let Some(leased) = s.leases.remove(worker)
        {
            if requeue {
                s.requeue.extend(leased);
            }
            self.unindex_leases(worker, iteration_id);
        }
    }

    /// Hands the splits `worker` holds in every iteration out again: only the iterations
    /// where it holds some are looked at.
    fn release_all_leases(&mut self, worker: &str) {
        let Some(iterations) = self.leases_by_worker.remove(worker) else { return };
        for it in iterations {
            self.release_leases(it, worker, true);
        }
    }

    /// `worker` holds no more leases in `iteration_id`.
    fn unindex_leases(&mut self, worker: &str, iteration_id: IterationId) {
        if let Some(its) = self.leases_by_worker.get_mut(worker) {
            its.remove(&iteration_id);
            if its.is_empty() {
                self.leases_by_worker.remove(worker);
            }
        }
    }

    /// Adds `task` to the open tasks of the worker at `address` (and to its heartbeat-index
    /// entry, one task at a time: never a copy of the whole list).
    fn worker_add_task(&mut self, address: &str, task: TaskId) {
        if let Some(w) = self.workers.get_mut(address)
            && w.tasks.insert(task)
        {
            self.heartbeat_index.add_task(address, task);
        }
    }

    /// Removes `task` from the open tasks of the worker at `address`.
    fn worker_remove_task(&mut self, address: &str, task: TaskId) {
        if let Some(w) = self.workers.get_mut(address)
            && w.tasks.remove(&task)
        {
            self.heartbeat_index.remove_task(address, task);
        }
    }

    /// Frees a collected iteration and everything that is only its: its tasks (from the task
    /// map, their workers and the heartbeat index), its split state (leases, resume plan), its
    /// key and its place among its job's iterations. The client count is zero (only idle
    /// iterations are collected), so no client refers to it.
    fn collect_iteration(&mut self, id: IterationId) {
        self.open_round_robin.remove(&id);
        let Some(it) = self.iterations.remove(&id) else { return };
        for t in it.tasks.iter().copied().chain(it.pending.iter().map(|p| p.task_id)) {
            if let Some(task) = self.remove_task(t) {
                self.worker_remove_task(&task.worker_address, t);
            }
        }
        if let Some(s) = &it.splits {
            for worker in s.leases.keys() {
                self.unindex_leases(worker, id);
            }
        }
        self.splits_handed_out_collected =
            self.splits_handed_out_collected.saturating_add(it.splits_handed_out());
        let key = (it.job_name, it.repetition);
        if self.iterations_by_key.get(&key) == Some(&id) {
            self.iterations_by_key.remove(&key);
        }
        if let Some(its) = self.iterations_by_job.get_mut(&it.job_id) {
            its.remove(&id);
            if its.is_empty() {
                self.iterations_by_job.remove(&it.job_id);
            }
        }
    }

    /// Forgets a job that has no iteration left (a job with iterations stays).
    fn remove_job(&mut self, job_id: JobId) {
        if self.iterations_by_job.contains_key(&job_id) {
            return;
        }
        let Some(job) = self.jobs.remove(&job_id) else { return };
        if self.jobs_by_name.get(&job.name) == Some(&job_id) {
            self.jobs_by_name.remove(&job.name);
        }
        if let Some(jobs) = self.jobs_by_dataset.get_mut(&job.dataset_id) {
            jobs.remove(&job_id);
            if jobs.is_empty() {
                self.jobs_by_dataset.remove(&job.dataset_id);
            }
        }
    }

    /// Forgets a dataset: its bytes leave the `max_dataset_bytes` budget and its fingerprint
    /// the deduplication index.
    fn remove_dataset(&mut self, dataset_id: &str) {
        let Some(old) = self.datasets.remove(dataset_id) else { return };
        let (fingerprint, bytes) = footprint(&old.spec, &old.metadata);
        if let Some(ids) = self.datasets_by_fingerprint.get_mut(&fingerprint) {
            ids.remove(dataset_id);
            if ids.is_empty() {
                self.datasets_by_fingerprint.remove(&fingerprint);
            }
        }
        self.dataset_bytes = self.dataset_bytes.saturating_sub(bytes);
    }

    /// Adds a task to the task map.
    fn insert_task(&mut self, task: Task) {
        let worker = task.worker_address.clone();
        if self.tasks.insert(task.id, task).is_none() {
            *self.tasks_per_worker.entry(worker).or_default() += 1;
        }
    }

    /// Removes a task from the task map (not from its worker's open tasks).
    fn remove_task(&mut self, task_id: TaskId) -> Option<Task> {
        let task = self.tasks.remove(&task_id)?;
        if let Some(n) = self.tasks_per_worker.get_mut(&task.worker_address) {
            *n -= 1;
            if *n == 0 {
                self.tasks_per_worker.remove(&task.worker_address);
            }
        }
        Some(task)
    }

    /// Whether the worker at `address` is lost and no task (finished or not) names it: then
    /// it can be forgotten, and if it comes back it registers as new.
    pub fn worker_forgettable(&self, address: &str) -> bool {
        self.workers.get(address).is_some_and(|w| !w.alive && w.tasks.is_empty())
            && !self.tasks_per_worker.contains_key(address)
    }

    /// Forgets a lost worker that no task names (any other worker stays).
    fn remove_worker(&mut self, address: &str) {
        if !self.worker_forgettable(address) {
            return;
        }
        self.workers.remove(address);
        self.heartbeat_index.remove(address);
        if let Some(its) = self.leases_by_worker.remove(address) {
            for it in its {
                self.release_leases(it, address, true);
            }
        }
    }
}

/// Id-keyed maps are stored as `[[id, value], ...]`: JSON object keys are strings, and
/// records are decoded through serde's buffered (internally tagged) path, which does not turn
/// strings back into numbers.
mod pairs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        map: &BTreeMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.iter())
    }

    pub(super) fn deserialize<'de, K, V, D>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}

fn bump(counter: &mut u64, used: u64) {
    *counter = (*counter).max(used.saturating_add(1));
}

/// Applies one update. Trusts its input: the dispatcher validates before it journals.
pub fn apply(state: &mut State, update: &Update) {
    if !matches!(update, Update::Snapshot { .. }) {
        state.version += 1;
    }
    match update {
        Update::RegisterDataset { dataset_id, def, metadata } => {
            state.insert_dataset(Dataset {
                id: dataset_id.clone(),
                spec: DatasetSpec::Declarative(def.clone()),
                metadata: metadata.clone(),
                compression_disabled: None,
            });
        }
        Update::RegisterTfDataset { dataset_id, dataset } => {
            state.insert_dataset(Dataset {
                id: dataset_id.clone(),
                spec: DatasetSpec::TensorFlow(dataset.clone()),
                metadata: Value::Null,
                compression_disabled: None,
            });
        }
        Update::DecideCompression { dataset_id, disabled } => {
            if let Some(ds) = state.datasets.get_mut(dataset_id) {
                ds.compression_disabled = Some(*disabled);
            }
        }
        Update::TfSplitHandedOut { iteration_id, split_provider_index, repetition, index } => {
            let cursor =
                state.iterations.get_mut(iteration_id).and_then(|i| i.tf_splits.as_mut()).and_then(
                    |c| usize::try_from(*split_provider_index).ok().and_then(|p| c.get_mut(p)),
                );
            if let Some(c) = cursor {
                c.repetition = *repetition;
                c.next_index = index.saturating_add(1);
                c.handed_out += 1;
            }
        }
        Update::RegisterWorker { address, tags, uid, tensorflow } => {
            state.worker_list.bind(address);
            let w = state.workers.entry(address.clone()).or_insert_with(|| Worker {
                address: address.clone(),
                tags: tags.clone(),
                alive: true,
                uid: uid.clone(),
                tasks: BTreeSet::new(),
                tensorflow: tensorflow.clone(),
            });
            state.heartbeat_index.sync(address, w);
        }
        Update::WorkerRestarted { address, uid, tensorflow } => {
            let restarted = state.update_worker(address, |w| {
                w.uid = uid.clone();
                if tensorflow.is_some() {
                    w.tensorflow = tensorflow.clone();
                }
            });
            if restarted.is_none() {
                return;
            }
            state.release_all_leases(address);
        }
        Update::WorkerLost { address } => {
            let Some(tasks) = state.update_worker(address, |w| {
                w.alive = false;
                w.tasks.iter().copied().collect::<Vec<TaskId>>()
            }) else {
                return;
            };
            let mut iterations = BTreeSet::new();
            for t in tasks {
                if let Some(task) = state.tasks.get_mut(&t) {
                    task.abandoned = true;
                    iterations.insert(task.iteration_id);
                }
            }
            state.release_all_leases(address);
            for it in iterations {
                state.recompute_finished(it);
            }
        }
        Update::WorkerRevived { address, uid, tensorflow } => {
            let Some(tasks) = state.update_worker(address, |w| {
                w.alive = true;
                if uid.is_some() {
                    w.uid = uid.clone();
                }
                if tensorflow.is_some() {
                    w.tensorflow = tensorflow.clone();
                }
                w.tasks.iter().copied().collect::<Vec<TaskId>>()
            }) else {
                return;
            };
            for t in tasks {
                let Some(task) = state.tasks.get_mut(&t) else { continue };
                let unfinished =
                    state.iterations.get(&task.iteration_id).is_some_and(|i| !i.finished);
                if unfinished {
                    task.abandoned = false;
                } else {
                    // Its iteration finished while the worker was away: the task is over.
                    task.finished = true;
                    state.worker_remove_task(address, t);
                }
            }
        }
        Update::CreateJob { job } => {
            bump(&mut state.next_job_id, job.id.0);
            state.jobs_by_name.insert(job.name.clone(), job.id);
            state.jobs_by_dataset.entry(job.dataset_id.clone()).or_default().insert(job.id);
            state.jobs.insert(job.id, job.clone());
        }
        Update::CreateIteration {
            iteration_id,
            job_id,
            repetition,
            total_splits,
            tf_split_providers,
            resume,
        } => {
            bump(&mut state.next_iteration_id, iteration_id.0);
            let job = state.jobs.get(job_id);
            let job_name = job.map(|j| j.name.clone()).unwrap_or_default();
            let num_consumers = job.and_then(|j| j.num_consumers);
            state.iterations_by_key.insert((job_name.clone(), *repetition), *iteration_id);
            state.iterations_by_job.entry(*job_id).or_default().insert(*iteration_id);
            if num_consumers.is_some() {
                state.open_round_robin.insert(*iteration_id);
            }
            state.iterations.insert(
                *iteration_id,
                Iteration {
                    id: *iteration_id,
                    job_id: *job_id,
                    job_name,
                    repetition: *repetition,
                    tasks: Vec::new(),
                    num_clients: 0,
                    last_release: None,
                    finished: false,
                    garbage_collected: false,
                    splits: total_splits.map(|total| SplitState {
                        total,
                        plan: resume.clone(),
                        ..SplitState::default()
                    }),
                    num_consumers,
                    pending: VecDeque::new(),
                    tf_splits: tf_split_providers
                        .map(|n| vec![TfSplitCursor::default(); usize::try_from(n).unwrap_or(0)]),
                },
            );
        }
        Update::CreateTask { task } => {
            bump(&mut state.next_task_id, task.id.0);
            if let Some(it) = state.iterations.get_mut(&task.iteration_id) {
                it.tasks.push(task.id);
            }
            state.worker_add_task(&task.worker_address, task.id);
            state.insert_task(task.clone());
        }
        Update::CreatePendingTask { task } => {
            bump(&mut state.next_task_id, task.id.0);
            if let Some(it) = state.iterations.get_mut(&task.iteration_id) {
                it.pending.push_back(PendingTask {
                    task_id: task.id,
                    target_round: task.starting_round,
                    ready_consumers: BTreeSet::new(),
                    ready_clients: BTreeSet::new(),
                    failures: 0,
                });
            }
            state.worker_add_task(&task.worker_address, task.id);
            state.insert_task(task.clone());
        }
        Update::ConsumerRound {
            iteration_id,
            consumer_index,
            client_id,
            rejected_new_target,
            accepted,
        } => {
            let Some(it) = state.iterations.get_mut(iteration_id) else { return };
            let needed = it.num_consumers.unwrap_or(1);
            let Some(front) = it.pending.front_mut() else { return };
            if let Some(target) = rejected_new_target {
                front.failures = front.failures.saturating_add(1);
                front.ready_consumers.clear();
                front.ready_clients.clear();
                front.target_round = *target;
            }
            if *accepted {
                match client_id {
                    Some(c) => front.ready_clients.insert(*c),
                    None => front.ready_consumers.insert(*consumer_index),
                };
            }
            if (front.ready_consumers.len() + front.ready_clients.len()) as u64 >= needed {
                let (task_id, round) = (front.task_id, front.target_round);
                it.pending.pop_front();
                it.tasks.push(task_id);
                if let Some(t) = state.tasks.get_mut(&task_id) {
                    t.starting_round = round;
                }
            }
        }
        Update::RemoveTask { task_id } => {
            let Some(task) = state.remove_task(*task_id) else { return };
            if let Some(it) = state.iterations.get_mut(&task.iteration_id) {
                it.tasks.retain(|t| t != task_id);
                it.pending.retain(|p| p.task_id != *task_id);
            }
            state.worker_remove_task(&task.worker_address, *task_id);
        }
        Update::FinishTask { task_id } => {
            let Some(task) = state.tasks.get_mut(task_id) else { return };
            task.finished = true;
            let (iteration_id, worker) = (task.iteration_id, task.worker_address.clone());
            state.worker_remove_task(&worker, *task_id);
            state.release_leases(iteration_id, &worker, false);
            state.recompute_finished(iteration_id);
        }
        Update::AcquireClient { client_id, iteration_id, consumer_index } => {
            bump(&mut state.next_client_id, client_id.0);
            let client = Client {
                id: *client_id,
                iteration_id: *iteration_id,
                consumer_index: *consumer_index,
            };
            state.clients.insert(*client_id, client);
            if let Some(it) = state.iterations.get_mut(iteration_id) {
                it.num_clients += 1;
            }
        }
        Update::ReleaseClient { client_id, at } => {
            let Some(c) = state.clients.remove(client_id) else { return };
            if let Some(it) = state.iterations.get_mut(&c.iteration_id) {
                it.num_clients = it.num_clients.saturating_sub(1);
                it.last_release = Some(*at);
            }
        }
        Update::GarbageCollectIteration { iteration_id } => {
            // Journals written before collection freed things meant "mark it collected";
            // replayed now, their records free it as well, which is what they stood for.
            state.collect_iteration(*iteration_id);
        }
        Update::RemoveJob { job_id } => state.remove_job(*job_id),
        Update::DeleteDataset { dataset_id } => {
            let jobs: Vec<JobId> = state
                .jobs_by_dataset
                .get(dataset_id)
                .map(|j| j.iter().copied().collect())
                .unwrap_or_default();
            for job_id in jobs {
                state.remove_job(job_id);
            }
            state.remove_dataset(dataset_id);
        }
        Update::RemoveWorker { address } => state.remove_worker(address),
        Update::ProduceSplits { iteration_id, worker_address, acked, assigned, advance_to } => {
            let Some(s) = state.iterations.get_mut(iteration_id).and_then(|i| i.splits.as_mut())
            else {
                return;
            };
            let held_before = s.leases.contains_key(worker_address);
            // One lookup of the worker's leases; the Vec is reused in place.
            match s.leases.get_mut(worker_address) {
                Some(held) => {
                    if held.as_slice() == acked.as_slice() {
                        held.clear();
                    } else if held.len() * acked.len() > 256 {
                        let acked: std::collections::HashSet<&SplitRef> = acked.iter().collect();
                        held.retain(|x| !acked.contains(x));
                    } else {
                        held.retain(|x| !acked.contains(x));
                    }
                    held.extend_from_slice(assigned);
                    if held.is_empty() {
                        s.leases.remove(worker_address);
                    }
                }
                None if !assigned.is_empty() => {
                    s.leases.insert(worker_address.clone(), assigned.clone());
                }
                None => {}
            }
            for split in assigned {
                if s.requeue.remove(split) {
                    s.reissued += 1;
                }
                if split.repetition == s.repetition && split.index >= s.next_index {
                    s.next_index = split.index + 1;
                }
            }
            s.handed_out += assigned.len() as u64;
            if let Some(r) = advance_to {
                s.repetition = *r;
                s.next_index = 0;
            }
            match (held_before, s.leases.contains_key(worker_address)) {
                (false, true) => {
                    state
                        .leases_by_worker
                        .entry(worker_address.clone())
                        .or_default()
                        .insert(*iteration_id);
                }
                (true, false) => state.unindex_leases(worker_address, *iteration_id),
                _ => {}
            }
            state.recompute_finished(*iteration_id);
        }
        Update::Started { incarnation } => {
            state.incarnation = incarnation.clone();
        }
        Update::Snapshot { state: snap } => {
            *state = (**snap).clone();
            state.reindex();
            // Snapshots written before collection freed things hold collected iterations.
            let collected: Vec<IterationId> =
                state.iterations.values().filter(|i| i.garbage_collected).map(|i| i.id).collect();
            for id in collected {
                state.collect_iteration(id);
            }
        }
    }
}

impl State {
    /// Replays `updates` onto a fresh state (configured with `worker_addresses`): the state
    /// a journal stands for.
    pub fn replay<'a>(
        worker_addresses: Vec<String>,
        updates: impl IntoIterator<Item = &'a Update>,
    ) -> State {
        let mut state = State::new(worker_addresses);
        for u in updates {
            apply(&mut state, u);
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_outside_the_worker_list_is_a_typed_refusal_in_tensorflows_words() {
        let list = WorkerList::new(vec!["w1:%port%".into(), "w2:7".into()]);
        assert_eq!(list.validate("w1:5"), Ok(()));
        assert_eq!(WorkerList::default().validate("anything"), Ok(()));
        let e = list.validate("w3:7").unwrap_err();
        assert_eq!(
            e,
            NotInWorkerList {
                address: "w3:7".into(),
                entries: vec!["w1:%port%".into(), "w2:7".into()]
            }
        );
        assert_eq!(
            e.to_string(),
            "Failed to assign an index for worker w3:7. Configured workers list: [w1:%port%, \
             w2:7]. The worker's address is not configured, or other workers are already running \
             at the configured host. If your worker has restarted, make sure it runs at the same \
             address and port."
        );
    }
}
