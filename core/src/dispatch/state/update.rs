//! The journal's records: one durable state change each.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dataset::DatasetDef;
use crate::dispatch::tensorflow::{TfDataset, TfWorkerInfo};
use crate::dispatch::types::{ClientId, IterationId, JobId, Millis, TaskId};
use crate::position::ResumePlan;

use super::{Job, SplitRef, State, Task};

/// One durable state change. The journal is a sequence of these; [`apply`](super::apply)
/// gives each its meaning, for the live path and for replay alike.
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
