//! The dispatcher's protocol as plain data: every request and every reply the REST front (or
//! any other front) exchanges with the state machine, with their serde forms, the split-id
//! codec, and (behind the `openapi` feature) their schemas.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::DispatchError;
use super::state::SplitRef;
use super::tensorflow::{DatasetSpec, TfWorkerInfo, TransferServer};
use super::types::{ClientId, IterationId, JobId, ShardingPolicy, TargetWorkers, TaskId};
use crate::dataset::DatasetDef;
use crate::echo::echo;
use crate::position::{ReadPosition, SplitPositions};

/// The protocol version `GET /v1/version` reports.
pub const PROTOCOL_VERSION: u32 = 1;
/// The most splits one get-split call may ask for.
pub const MAX_SPLITS_PER_CALL: u32 = 1024;
/// How long a worker waits before asking for a split again when none is free now but the
/// repetition is not over (the reply's `retry_after_ms`, and the worker's wait when a reply
/// names none).
pub const SPLIT_RETRY_AFTER_MS: u64 = 100;

/// The longest job name.
pub const MAX_JOB_NAME_LEN: usize = 256;
/// The longest `worker_uid` a worker may register with (a UUID is 36 bytes).
pub const MAX_UID_LEN: usize = 255;

/// How a job divides data, as clients spell it: `"parallel_epochs"`,
/// `"distributed_epoch"` or `{"sharding_policy": "OFF" | ...}`. Anything else is refused with
/// a text naming these forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum ProcessingMode {
    /// `parallel_epochs` / `distributed_epoch`.
    Named(NamedMode),
    /// An explicit sharding policy.
    Policy {
        /// The policy.
        sharding_policy: ShardingPolicy,
    },
}

/// TensorFlow's legacy processing-mode names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum NamedMode {
    /// OFF.
    ParallelEpochs,
    /// DYNAMIC.
    DistributedEpoch,
}

/// The forms of a processing mode, for error texts.
const PROCESSING_MODES: &str = "\"parallel_epochs\", \"distributed_epoch\" or \
    {\"sharding_policy\": P} with P one of OFF, DYNAMIC, FILE, DATA, FILE_OR_DATA, HINT";

/// By hand rather than serde's untagged decoding, whose error ("data did not match any
/// variant of untagged enum") names neither the value nor the valid ones.
impl<'de> Deserialize<'de> for ProcessingMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ProcessingMode;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "a processing mode: {PROCESSING_MODES}")
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<ProcessingMode, E> {
                match v {
                    "parallel_epochs" => Ok(ProcessingMode::Named(NamedMode::ParallelEpochs)),
                    "distributed_epoch" => Ok(ProcessingMode::Named(NamedMode::DistributedEpoch)),
                    _ => Err(E::custom(format!(
                        "processing_mode {} is not one of {PROCESSING_MODES}",
                        echo(v)
                    ))),
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<ProcessingMode, A::Error> {
                let mut policy = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "sharding_policy" {
                        return Err(A::Error::custom(format!(
                            "processing_mode has an unknown field {}: it is one of \
                             {PROCESSING_MODES}",
                            echo(&key)
                        )));
                    }
                    if policy.is_some() {
                        return Err(A::Error::duplicate_field("sharding_policy"));
                    }
                    policy = Some(map.next_value::<ShardingPolicy>()?);
                }
                match policy {
                    Some(sharding_policy) => Ok(ProcessingMode::Policy { sharding_policy }),
                    None => Err(A::Error::custom(format!(
                        "processing_mode {{}} lacks sharding_policy: it is one of \
                         {PROCESSING_MODES}"
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl ProcessingMode {
    /// The sharding policy.
    pub fn policy(self) -> ShardingPolicy {
        match self {
            ProcessingMode::Named(NamedMode::ParallelEpochs) => ShardingPolicy::Off,
            ProcessingMode::Named(NamedMode::DistributedEpoch) => ShardingPolicy::Dynamic,
            ProcessingMode::Policy { sharding_policy } => sharding_policy,
        }
    }
}

/// `POST /v1/workers/heartbeat`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WorkerHeartbeat {
    /// The worker's address.
    pub worker_address: String,
    /// Tasks the worker is running.
    #[serde(default)]
    pub current_tasks: Vec<TaskId>,
    /// Tags, e.g. `COLOCATED` (kept from the first registration).
    #[serde(default)]
    pub tags: Vec<String>,
    /// The worker process's id (new on every start). A new id at a known address tells the
    /// dispatcher the process restarted, so the splits the old process held are handed out
    /// again at once instead of after the worker timeout.
    #[serde(default)]
    pub worker_uid: Option<String>,
    /// The dispatcher incarnation the worker's `current_tasks` came from. When it is not this
    /// dispatcher's (a restart without a journal, where ids start over), every current task
    /// is to be deleted and every assigned task is new, even where ids coincide: the worker
    /// applies `tasks_to_delete` before `new_tasks`.
    #[serde(default)]
    pub incarnation: Option<String>,
    /// A TensorFlow worker's own fields (its transfer servers). Not part of the REST form:
    /// `None` is a Shardwise worker. A worker's kind is fixed when it registers.
    #[serde(skip)]
    pub tensorflow: Option<TfWorkerInfo>,
}

/// A task as a worker needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskDef {
    /// Task.
    pub task_id: TaskId,
    /// Iteration.
    pub iteration_id: IterationId,
    /// Job.
    pub job_id: JobId,
    /// Dataset.
    pub dataset_id: String,
    // Declarative for a Shardwise worker (the REST form is the `DatasetDef`), the TensorFlow
    // dataset for a TensorFlow worker (which never reads REST).
    /// The dataset definition.
    #[cfg_attr(feature = "openapi", schema(value_type = DatasetDef))]
    pub dataset: DatasetSpec,
    /// The sharding policy.
    pub processing_mode: ShardingPolicy,
    /// Static sharding: number of shards.
    pub num_workers: Option<u64>,
    /// Static sharding: this worker's shard.
    pub worker_index: Option<u64>,
    // TensorFlow datasets: the dataset's number of providers.
    /// DYNAMIC: split providers (always 1 for declarative datasets), else 0.
    pub num_split_providers: u32,
    /// Elements per split (DYNAMIC range/list sources).
    pub split_size: u64,
    /// Coordinated reads.
    pub num_consumers: Option<u64>,
    /// Coordinated reads: first round.
    pub starting_round: u64,
    /// TensorFlow's cross-trainer cache flag.
    pub cross_trainer_cache: bool,
}

/// Reply to a worker heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerHeartbeatReply {
    /// Tasks to start.
    pub new_tasks: Vec<TaskDef>,
    /// Tasks to stop (finished, collected or unknown).
    pub tasks_to_delete: Vec<TaskId>,
    /// The dispatcher's incarnation id.
    pub incarnation: String,
}

/// One entry of a worker update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TaskProgress {
    /// Task.
    pub task_id: TaskId,
    /// The task produced its last element.
    pub completed: bool,
}

/// `POST /v1/workers/update`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WorkerUpdate {
    /// The worker.
    pub worker_address: String,
    /// The `worker_uid` the worker registered with. Required when it registered with one:
    /// only the worker holding a task may change it.
    #[serde(default)]
    pub worker_uid: Option<String>,
    /// Per-task progress.
    pub updates: Vec<TaskProgress>,
}

/// Reply to a worker update. Unknown task ids are reported, not fatal (a stale id never
/// wedges a worker, unlike TensorFlow's #52252); a task held by another worker refuses the
/// whole update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerUpdateReply {
    /// Task ids the dispatcher does not know.
    pub unknown_tasks: Vec<TaskId>,
    /// Incarnation.
    pub incarnation: String,
}

/// `POST /v1/datasets`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterDataset {
    /// The definition.
    pub dataset: DatasetDef,
    /// An explicit id (get-or-register).
    #[serde(default)]
    pub dataset_id: Option<String>,
    /// Opaque client metadata.
    #[serde(default)]
    pub metadata: Option<Value>,
}

/// `POST /v1/jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateJob {
    /// The dataset.
    pub dataset_id: String,
    /// How data is divided.
    pub processing_mode: ProcessingMode,
    /// Share the job by name.
    #[serde(default)]
    pub job_name: Option<String>,
    /// Coordinated reads.
    #[serde(default)]
    pub num_consumers: Option<u64>,
    /// Which workers clients read.
    #[serde(default)]
    pub target_workers: TargetWorkers,
    /// TensorFlow's cross-trainer cache flag.
    #[serde(default)]
    pub cross_trainer_cache: bool,
    /// Elements per split of range/list sources (default 1,024).
    #[serde(default)]
    pub split_size: Option<u64>,
}

/// `POST /v1/jobs/{job_id}/iterations`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateIteration {
    /// Which pass over the job (default 0).
    #[serde(default)]
    pub repetition: u64,
    /// Coordinated reads: this consumer's index. Without it the consumer is counted by its
    /// client id, as for TensorFlow's clients, which send none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_index: Option<u64>,
    /// Resume a `distributed_epoch` read where a reader saved this position: the iteration
    /// hands out only what the position has not consumed. The job must be DYNAMIC, over the
    /// position's dataset, with a pipeline whose positions are exact, and `repetition` must
    /// be the position's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_from: Option<ReadPosition>,
}

/// Reply to get-or-create iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IterationLease {
    /// Iteration.
    pub iteration_id: IterationId,
    /// This consumer's lease.
    pub client_id: ClientId,
    /// Incarnation.
    pub incarnation: String,
    /// The tasks this call created on TensorFlow workers, by worker address, to push to them
    /// (`WorkerService.ProcessTask`) once the reply is released. Not part of the REST form.
    #[serde(skip)]
    pub pushed_tasks: Vec<(String, TaskDef)>,
}

/// `POST /v1/clients/{client_id}/heartbeat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ClientHeartbeat {
    /// Coordinated reads: the round the client is in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_round: Option<u64>,
    /// Coordinated reads: the round the client agreed to stop before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_round: Option<u64>,
    /// The `tasks_version` of the last reply whose `tasks` the client kept. When the tasks
    /// have not changed since, the reply leaves them out (`tasks_unchanged`): with thousands
    /// of workers the list is megabytes. Valid within one incarnation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_tasks_version: Option<u64>,
}

/// A task as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskInfo {
    /// Task.
    pub task_id: TaskId,
    /// Where to read it.
    pub worker_address: String,
    /// The worker's tags.
    pub worker_tags: Vec<String>,
    /// Coordinated reads: first round.
    pub starting_round: u64,
    /// The worker reported the task complete.
    pub finished: bool,
    /// The worker was lost: reading it will fail; skip it.
    pub worker_lost: bool,
    /// The task's iteration (not part of the REST form).
    #[serde(skip)]
    pub iteration_id: IterationId,
    /// A TensorFlow worker's transfer servers (not part of the REST form).
    #[serde(skip)]
    pub transfer_servers: Vec<TransferServer>,
    /// The worker's `worker_uid`, if it registered with one (not part of the REST form).
    #[serde(skip)]
    pub worker_uid: Option<String>,
}

/// Reply to a client heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClientHeartbeatReply {
    /// Tasks of the iteration, in creation order (empty when `tasks_unchanged`).
    pub tasks: Vec<TaskInfo>,
    /// The version of the dispatcher state these tasks are from: send it back as
    /// `known_tasks_version`.
    #[serde(default)]
    pub tasks_version: u64,
    /// The tasks are those of the `known_tasks_version` the client sent, so `tasks` is empty:
    /// keep the list from that reply.
    #[serde(default)]
    pub tasks_unchanged: bool,
    /// Every task is done.
    pub iteration_finished: bool,
    /// Coordinated reads: do not start this round yet.
    pub block_round: Option<u64>,
    /// Incarnation.
    pub incarnation: String,
}

/// `POST /v1/iterations/{iteration_id}/splits`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GetSplits {
    /// The asking worker (its earlier splits of this iteration are acknowledged).
    pub worker_address: String,
    /// The `worker_uid` the worker registered with. Required when it registered with one:
    /// only the worker holding a task may take or acknowledge its splits.
    #[serde(default)]
    pub worker_uid: Option<String>,
    /// The worker's pass over the source.
    pub repetition: u64,
    /// Always 0 for declarative datasets.
    #[serde(default)]
    pub split_provider_index: u32,
    /// How many splits at most (default 1).
    #[serde(default)]
    pub max_splits: Option<u32>,
    /// Ids of leased splits this worker has finished. Splits it holds and does not
    /// acknowledge are sent again instead of new ones, so a retried request whose reply was
    /// lost is safe. Absent: every split the worker holds counts as finished (the simple
    /// protocol for workers that only ask when they are done).
    #[serde(default)]
    pub acknowledge: Option<Vec<SplitId>>,
}

/// A split's id on the wire: `"<repetition>:<index>"`.
pub fn split_id(s: &SplitRef) -> String {
    format!("{}:{}", s.repetition, s.index)
}

fn parse_split_id(id: &str) -> Result<SplitRef, DispatchError> {
    let bad = || {
        DispatchError::InvalidArgument(format!(
            "{} is not a split id (\"<repetition>:<index>\")",
            echo(id)
        ))
    };
    let (r, i) = id.split_once(':').ok_or_else(bad)?;
    Ok(SplitRef { repetition: r.parse().map_err(|_| bad())?, index: i.parse().map_err(|_| bad())? })
}

/// One split of a get-split reply, serialized exactly like the JSON value it stands for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Split {
    /// A chunk of element positions.
    Chunk {
        /// First position.
        start: u64,
        /// End (exclusive).
        stop: u64,
    },
    /// A path or item.
    Item(Value),
}

impl From<Split> for Value {
    fn from(s: Split) -> Value {
        match s {
            Split::Chunk { start, stop } => serde_json::json!({"start": start, "stop": stop}),
            Split::Item(v) => v,
        }
    }
}

/// A split equals the JSON value it serializes to.
impl PartialEq<Value> for Split {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Split::Chunk { start, stop }, Value::Object(o)) => {
                o.len() == 2
                    && o.get("start").and_then(Value::as_u64) == Some(*start)
                    && o.get("stop").and_then(Value::as_u64) == Some(*stop)
            }
            (Split::Chunk { .. }, _) => false,
            (Split::Item(v), other) => v == other,
        }
    }
}

/// A split id, `"<repetition>:<index>"` on the wire, a pair of integers in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitId(pub SplitRef);

impl Serialize for SplitId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{}:{}", self.0.repetition, self.0.index))
    }
}

impl<'de> Deserialize<'de> for SplitId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        parse_split_id(&s).map(SplitId).map_err(|e| serde::de::Error::custom(e.detail()))
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for SplitId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some("^[0-9]+:[0-9]+$"))
            .description(Some("A split id, `\"<repetition>:<index>\"`."))
            .examples([Value::String("0:0".into())])
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for SplitId {}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Split {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        // Any JSON value: a chunk object, a path string or a list item.
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::SchemaType::AnyValue)
            .description(Some(
                "A split. For a `range` or `list` source, a chunk `{\"start\": a, \"stop\": b}` \
                 of element positions in the source (0-based, `stop` exclusive), not element \
                 values: `range(-5, 5)` split by 4 gives `{\"start\": 0, \"stop\": 4}` for the \
                 elements -5, -4, -3 and -2. For `files`, a path; for `splits`, the item itself.",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Split {}

/// Reply to get-split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SplitsReply {
    /// The splits: chunks `{"start", "stop"}` of element positions in the source (not
    /// element values), paths, or items.
    pub splits: Vec<Split>,
    /// Their ids (`"<repetition>:<index>"`), to acknowledge them in the next request.
    pub split_ids: Vec<SplitId>,
    /// Where each split lies in the source's positions, and how many of its first output
    /// elements to skip (a split resumed part way), in the order of `splits` (declarative
    /// datasets; empty from older dispatchers). Workers tag elements with it
    /// (`OriginRun`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub positions: Vec<SplitPositions>,
    /// The repetition is over for this worker.
    pub end_of_splits: bool,
    /// No split now but the repetition is not over (splits are in flight elsewhere): ask
    /// again after this many milliseconds.
    pub retry_after_ms: Option<u64>,
    /// Incarnation.
    pub incarnation: String,
}

/// Body of maybe-remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MaybeRemove {
    /// The voting consumer.
    pub consumer_index: u64,
    /// The round it cannot read the task in.
    pub round: u64,
}

/// `GET /v1/version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VersionInfo {
    /// Protocol version.
    pub version: u32,
    /// The state's incarnation id (changes when a dispatcher without a journal restarts).
    pub incarnation: String,
    /// Journal records are fsynced before replies.
    pub fault_tolerant: bool,
}

/// A registered worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerInfo {
    /// Its address.
    pub worker_address: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Tasks assigned to it.
    pub tasks: Vec<TaskId>,
    /// False once it missed heartbeats for the worker timeout.
    pub alive: bool,
    /// A TensorFlow worker's own fields; `None`: a Shardwise worker (not part of the REST
    /// form).
    #[serde(skip)]
    pub tensorflow: Option<TfWorkerInfo>,
}

/// `GET /v1/workers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkersList {
    /// Every registered worker.
    pub workers: Vec<WorkerInfo>,
}

/// `POST /v1/datasets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatasetRegistered {
    /// The dataset's id.
    pub dataset_id: String,
    /// Incarnation.
    pub incarnation: String,
}

// (Doc comments of REST types are the OpenAPI document's descriptions, so this is a plain
// comment.) For a TensorFlow dataset `dataset` is the whole `TfDataset` as the client sent it
// (TensorFlow's `GetDataServiceMetadata` answers the metadata as sent, also after workers
// disabled compression at run time: `compression_disabled` says that); its REST form is
// `{"tensorflow": summary}`, without the graph's bytes.
/// `GET /v1/datasets/{dataset_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatasetInfo {
    /// Id.
    pub dataset_id: String,
    /// Definition: a declarative `DatasetDef`, or `{"tensorflow": TfDatasetSummary}` for a
    /// dataset a TensorFlow client registered.
    pub dataset: DatasetSpec,
    /// Client metadata.
    pub metadata: Value,
    /// TensorFlow datasets: the run-time compression decision, once made (not part of the
    /// REST form).
    #[serde(skip)]
    pub compression_disabled: Option<bool>,
}

/// `POST /v1/jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobCreated {
    /// The job's id.
    pub job_id: JobId,
    /// Incarnation.
    pub incarnation: String,
}

/// An iteration as `GET /v1/jobs/{job_id}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IterationInfo {
    /// Id.
    pub iteration_id: IterationId,
    /// Client-side repetition.
    pub repetition: u64,
    /// All tasks done.
    pub finished: bool,
    /// Collected after its clients left.
    pub garbage_collected: bool,
    /// Clients holding a lease.
    pub num_clients: u64,
    /// Visible tasks.
    pub tasks: Vec<TaskId>,
}

/// `GET /v1/jobs/{job_id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobInfo {
    /// Id.
    pub job_id: JobId,
    /// Name.
    pub job_name: String,
    /// Dataset.
    pub dataset_id: String,
    /// Sharding policy.
    pub processing_mode: ProcessingMode,
    /// Coordinated reads.
    pub num_consumers: Option<u64>,
    /// Which workers clients read.
    pub target_workers: TargetWorkers,
    /// TensorFlow's cross-trainer cache flag.
    pub cross_trainer_cache: bool,
    /// Elements per split.
    pub split_size: u64,
    /// Its iterations.
    pub iterations: Vec<IterationInfo>,
}

/// `DELETE /v1/datasets/{dataset_id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatasetDeleted {
    /// The deleted dataset's id.
    pub dataset_id: String,
    /// Bytes of `max_dataset_bytes` this freed.
    pub freed_bytes: u64,
    /// Incarnation.
    pub incarnation: String,
}

/// `DELETE /v1/clients/{client_id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Released {
    /// Always true.
    pub released: bool,
    /// Incarnation.
    pub incarnation: String,
}

/// `POST /v1/tasks/{task_id}/maybe-remove`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Removed {
    /// The task is removed (every consumer agreed, or it was already gone).
    pub removed: bool,
    /// Incarnation.
    pub incarnation: String,
}

/// The figures `/metrics` reports about the state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsFigures {
    /// Registered workers that are not lost.
    pub workers_alive: u64,
    /// Iterations that are not finished.
    pub iterations_open: u64,
    /// DYNAMIC splits handed out, over every iteration.
    pub splits_handed_out: u64,
}
