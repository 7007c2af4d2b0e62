//! Every conversion between TensorFlow's tf.data service messages and the dispatcher's
//! requests and replies, with its validation.
//!
//! TensorFlow's ids are `int64`, the core's `u64`: a negative id is `INVALID_ARGUMENT` naming
//! its field. Enum values this build does not know are `INVALID_ARGUMENT` naming the value and
//! the known ones (prost keeps unknown enum values as their number). A refusal is a
//! [`ConvertError`]: its status class and its message, which the gRPC front sends as a status.

use crate::Code;
use crate::dispatch::address::{check_worker_address, check_worker_tags};
use crate::dispatch::wire::{
    self, ClientHeartbeatReply, CreateJob, ProcessingMode, WorkerHeartbeatReply,
};
use crate::dispatch::{
    CompressionDecision, DatasetSpec, RegisterTfDataset, ShardingPolicy, SplitProviderDef,
    TargetWorkers, TaskId, TfDataset, TfSplit, TfWorkerInfo, TransferServer,
};
use crate::tensorflow::fingerprint::fingerprint;
use crate::tensorflow::graph::{self, SplitProvider};
use crate::tensorflow::prepare::prepare_graph;
use crate::tensorflow::proto::tensorflow::data as tf;
use tf::processing_mode_def::ShardingPolicy as TfPolicy;

/// A message that does not convert: its status class and what to tell the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct ConvertError {
    /// `INVALID_ARGUMENT` for a caller's mistake (it names the field and the value),
    /// `FAILED_PRECONDITION` for a dataset of the other kind, `INTERNAL` for a value of the
    /// core that TensorFlow's messages cannot hold (a bug).
    pub code: Code,
    /// The message.
    pub detail: String,
}

impl ConvertError {
    /// Its status class.
    pub fn code(&self) -> Code {
        self.code
    }
}

fn invalid(detail: String) -> ConvertError {
    ConvertError { code: Code::InvalidArgument, detail }
}

/// A TensorFlow id (`int64`) as the core's: negative is `INVALID_ARGUMENT` naming `field`.
pub fn id(field: &str, value: i64) -> Result<u64, ConvertError> {
    u64::try_from(value).map_err(|_| invalid(format!("{field} must not be negative, got {value}")))
}

/// A count or round (`int64`) as the core's `u64`: negative is `INVALID_ARGUMENT`.
pub fn count(field: &str, value: i64) -> Result<u64, ConvertError> {
    id(field, value)
}

/// A core id or count as TensorFlow's `int64`. The core hands out ids from small numbers up,
/// one by one: one past `i64::MAX` is a bug.
pub fn int64(field: &str, value: u64) -> Result<i64, ConvertError> {
    i64::try_from(value).map_err(|_| ConvertError {
        code: Code::Internal,
        detail: format!("{field} {value} does not fit TensorFlow's int64"),
    })
}

/// The known sharding policies, for messages.
const POLICIES: &str = "OFF (0), DYNAMIC (1), FILE (2), DATA (3), FILE_OR_DATA (4), HINT (5)";

/// TensorFlow's `ProcessingModeDef` (absent: OFF, protobuf's default) as the core's policy.
pub fn sharding_policy(def: Option<tf::ProcessingModeDef>) -> Result<ShardingPolicy, ConvertError> {
    let value = def.map_or(0, |d| d.sharding_policy);
    match TfPolicy::try_from(value) {
        Ok(TfPolicy::Off) => Ok(ShardingPolicy::Off),
        Ok(TfPolicy::Dynamic) => Ok(ShardingPolicy::Dynamic),
        Ok(TfPolicy::File) => Ok(ShardingPolicy::File),
        Ok(TfPolicy::Data) => Ok(ShardingPolicy::Data),
        Ok(TfPolicy::FileOrData) => Ok(ShardingPolicy::FileOrData),
        Ok(TfPolicy::Hint) => Ok(ShardingPolicy::Hint),
        Err(_) => Err(invalid(format!(
            "processing_mode_def.sharding_policy {value} is not one of {POLICIES}"
        ))),
    }
}

/// The core's policy as TensorFlow's `ProcessingModeDef`.
pub fn processing_mode_def(policy: ShardingPolicy) -> tf::ProcessingModeDef {
    let p = match policy {
        ShardingPolicy::Off => TfPolicy::Off,
        ShardingPolicy::Dynamic => TfPolicy::Dynamic,
        ShardingPolicy::File => TfPolicy::File,
        ShardingPolicy::Data => TfPolicy::Data,
        ShardingPolicy::FileOrData => TfPolicy::FileOrData,
        ShardingPolicy::Hint => TfPolicy::Hint,
    };
    tf::ProcessingModeDef { sharding_policy: p as i32 }
}

/// TensorFlow's `TargetWorkers` (UNSPECIFIED is AUTO, as in TensorFlow) as the core's.
pub fn target_workers(value: i32) -> Result<TargetWorkers, ConvertError> {
    match tf::TargetWorkers::try_from(value) {
        Ok(tf::TargetWorkers::Unspecified | tf::TargetWorkers::Auto) => Ok(TargetWorkers::Auto),
        Ok(tf::TargetWorkers::Any) => Ok(TargetWorkers::Any),
        Ok(tf::TargetWorkers::Local) => Ok(TargetWorkers::Local),
        Err(_) => Err(invalid(format!(
            "target_workers {value} is not one of TARGET_WORKERS_UNSPECIFIED (0), \
             TARGET_WORKERS_AUTO (1), TARGET_WORKERS_ANY (2), TARGET_WORKERS_LOCAL (3)"
        ))),
    }
}

/// A worker address as REST checks it (`host:port`), else `INVALID_ARGUMENT`.
pub fn worker_address(addr: &str) -> Result<(), ConvertError> {
    check_worker_address(addr).map_err(|e| invalid(e.to_string()))
}

/// TensorFlow's `worker_uid` (a random `int64` per worker process; 0: none) as the core's
/// string uid, so that a restarted worker is recognised as REST workers are.
pub fn worker_uid(uid: i64) -> Option<String> {
    (uid != 0).then(|| uid.to_string())
}

/// The core's string uid of a TensorFlow worker back as its `int64` (0 when it has none, or
/// when it is not one: a Shardwise worker's).
pub fn worker_uid_int(uid: Option<&str>) -> i64 {
    uid.and_then(|u| u.parse().ok()).unwrap_or(0)
}

/// `WorkerHeartbeatRequest` as the core's heartbeat (task ids sorted and deduplicated, as
/// REST does, off the dispatcher's lock).
pub fn worker_heartbeat(
    req: tf::WorkerHeartbeatRequest,
) -> Result<wire::WorkerHeartbeat, ConvertError> {
    worker_address(&req.worker_address)?;
    check_worker_tags(&req.worker_tags).map_err(|e| invalid(e.to_string()))?;
    let mut current_tasks = req
        .current_tasks
        .iter()
        .map(|&t| id("current_tasks", t).map(TaskId))
        .collect::<Result<Vec<_>, _>>()?;
    current_tasks.sort_unstable();
    current_tasks.dedup();
    Ok(wire::WorkerHeartbeat {
        worker_address: req.worker_address,
        current_tasks,
        tags: req.worker_tags,
        worker_uid: worker_uid(req.worker_uid),
        incarnation: None,
        tensorflow: Some(TfWorkerInfo {
            transfer_servers: req.transfer_servers.into_iter().map(transfer_server).collect(),
        }),
    })
}

/// A worker's `DataTransferServerInfo` as the core keeps it.
fn transfer_server(t: tf::DataTransferServerInfo) -> TransferServer {
    TransferServer {
        protocol: t.protocol,
        address: t.address,
        compatibility_info: t.compatibility_info,
        fall_back_to_grpc_at_client_creation_time: t.fall_back_to_grpc_at_client_creation_time,
        fall_back_to_grpc_at_get_element_time: t.fall_back_to_grpc_at_get_element_time,
    }
}

/// A transfer server as TensorFlow's `DataTransferServerInfo`.
fn transfer_server_info(t: &TransferServer) -> tf::DataTransferServerInfo {
    tf::DataTransferServerInfo {
        protocol: t.protocol.clone(),
        address: t.address.clone(),
        compatibility_info: t.compatibility_info.clone(),
        fall_back_to_grpc_at_client_creation_time: t.fall_back_to_grpc_at_client_creation_time,
        fall_back_to_grpc_at_get_element_time: t.fall_back_to_grpc_at_get_element_time,
    }
}

/// The core's heartbeat reply as TensorFlow's. `new_tasks` holds only TensorFlow tasks.
pub fn worker_heartbeat_reply(
    reply: WorkerHeartbeatReply,
    worker_address: &str,
) -> Result<tf::WorkerHeartbeatResponse, ConvertError> {
    let new_tasks = reply
        .new_tasks
        .iter()
        .filter_map(|t| task_def(t, worker_address).transpose())
        .collect::<Result<Vec<_>, _>>()?;
    let tasks_to_delete = reply
        .tasks_to_delete
        .iter()
        .map(|t| int64("task_id", t.0))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(tf::WorkerHeartbeatResponse { new_tasks, tasks_to_delete })
}

/// A core task as TensorFlow's `TaskDef` for the worker at `worker_address` (its own address,
/// as TensorFlow's workers expect): the graph inline as `dataset_def`, `num_consumers` only
/// when set. `None` for a task of a declarative dataset (never sent to a TensorFlow worker).
pub fn task_def(
    task: &wire::TaskDef,
    worker_address: &str,
) -> Result<Option<tf::TaskDef>, ConvertError> {
    use tf::task_def::{Dataset, OptionalNumConsumers};
    let DatasetSpec::TensorFlow(dataset) = &task.dataset else { return Ok(None) };
    let optional_num_consumers = match task.num_consumers {
        None => None,
        Some(n) => Some(OptionalNumConsumers::NumConsumers(int64("num_consumers", n)?)),
    };
    Ok(Some(tf::TaskDef {
        dataset: Some(Dataset::DatasetDef(tf::DatasetDef { graph: dataset.graph.clone().into() })),
        dataset_id: task.dataset_id.clone(),
        task_id: int64("task_id", task.task_id.0)?,
        iteration_id: int64("iteration_id", task.iteration_id.0)?,
        num_split_providers: i64::from(task.num_split_providers),
        worker_address: worker_address.to_owned(),
        processing_mode_def: Some(processing_mode_def(task.processing_mode)),
        optional_num_consumers,
        num_workers: int64("num_workers", task.num_workers.unwrap_or(0))?,
        worker_index: int64("worker_index", task.worker_index.unwrap_or(0))?,
        use_cross_trainer_cache: task.cross_trainer_cache,
    }))
}

/// The tasks an iteration's creation made for TensorFlow workers, as `(address, TaskDef)`
/// pairs to push. A task that does not convert (never: ids fit) is left to the heartbeat.
pub fn pushed_tasks(tasks: &[(String, wire::TaskDef)]) -> Vec<(String, tf::TaskDef)> {
    tasks
        .iter()
        .filter_map(|(address, t)| {
            task_def(t, address).ok().flatten().map(|def| (address.clone(), def))
        })
        .collect()
}

/// `WorkerUpdateRequest` as the core's update.
pub fn worker_update(req: tf::WorkerUpdateRequest) -> Result<wire::WorkerUpdate, ConvertError> {
    worker_address(&req.worker_address)?;
    let updates = req
        .updates
        .iter()
        .map(|u| {
            Ok(wire::TaskProgress {
                task_id: TaskId(id("task_id", u.task_id)?),
                completed: u.completed,
            })
        })
        .collect::<Result<Vec<_>, ConvertError>>()?;
    Ok(wire::WorkerUpdate { worker_address: req.worker_address, worker_uid: None, updates })
}

/// `GetOrCreateJobRequest` as the core's get-or-create job.
pub fn create_job(req: tf::GetOrCreateJobRequest) -> Result<CreateJob, ConvertError> {
    use tf::get_or_create_job_request::{OptionalJobName, OptionalNumConsumers};
    let policy = sharding_policy(req.processing_mode_def)?;
    let num_consumers = match req.optional_num_consumers {
        None => None,
        Some(OptionalNumConsumers::NumConsumers(n)) => Some(count("num_consumers", n)?),
    };
    Ok(CreateJob {
        dataset_id: req.dataset_id,
        processing_mode: ProcessingMode::Policy { sharding_policy: policy },
        job_name: req.optional_job_name.map(|OptionalJobName::JobName(n)| n),
        num_consumers,
        target_workers: target_workers(req.target_workers)?,
        cross_trainer_cache: req.use_cross_trainer_cache,
        split_size: None,
    })
}

/// `ClientHeartbeatRequest` as the core's client heartbeat (always the full task list:
/// TensorFlow's clients keep no version).
pub fn client_heartbeat(
    req: &tf::ClientHeartbeatRequest,
) -> Result<wire::ClientHeartbeat, ConvertError> {
    use tf::client_heartbeat_request::{OptionalBlockedRound, OptionalCurrentRound};
    let current_round = match req.optional_current_round {
        None => None,
        Some(OptionalCurrentRound::CurrentRound(r)) => Some(count("current_round", r)?),
    };
    let blocked_round = match req.optional_blocked_round {
        None => None,
        Some(OptionalBlockedRound::BlockedRound(r)) => Some(count("blocked_round", r)?),
    };
    Ok(wire::ClientHeartbeat { current_round, blocked_round, known_tasks_version: None })
}

/// The core's client heartbeat reply as TensorFlow's. Tasks whose worker is lost are left
/// out: TensorFlow's clients drop a task that leaves the list, instead of retrying a dead
/// worker forever.
pub fn client_heartbeat_reply(
    reply: ClientHeartbeatReply,
    deployment_mode: i32,
) -> Result<tf::ClientHeartbeatResponse, ConvertError> {
    use tf::client_heartbeat_response::OptionalBlockRound;
    // A lost worker's task stays listed, as TensorFlow's dispatcher keeps listing it: its
    // clients retry the worker (which may come back at its address) and move on when the
    // iteration finishes; a coordinated-read consumer that cannot read it votes it out
    // (MaybeRemoveTask).
    let task_info = reply
        .tasks
        .iter()
        .map(|t| {
            Ok(tf::TaskInfo {
                worker_address: t.worker_address.clone(),
                transfer_servers: t.transfer_servers.iter().map(transfer_server_info).collect(),
                worker_tags: t.worker_tags.clone(),
                task_id: int64("task_id", t.task_id.0)?,
                iteration_id: int64("iteration_id", t.iteration_id.0)?,
                worker_uid: worker_uid_int(t.worker_uid.as_deref()),
                starting_round: int64("starting_round", t.starting_round)?,
            })
        })
        .collect::<Result<Vec<_>, ConvertError>>()?;
    let optional_block_round = match reply.block_round {
        None => None,
        Some(r) => Some(OptionalBlockRound::BlockRound(int64("block_round", r)?)),
    };
    Ok(tf::ClientHeartbeatResponse {
        task_info,
        iteration_finished: reply.iteration_finished,
        deployment_mode,
        optional_block_round,
    })
}

/// A graph's split providers as the core keeps them.
fn split_provider_def(p: &SplitProvider) -> SplitProviderDef {
    // A provider's split count is never negative.
    let len = u64::try_from(p.num_splits()).unwrap_or(0);
    match *p {
        SplitProvider::Range { start, step, .. } => SplitProviderDef::Range { start, step, len },
        SplitProvider::Index { .. } => SplitProviderDef::Slices { len },
    }
}

/// The DYNAMIC split providers of a serialized `GraphDef`, or why it has none (a graph that
/// does not decode is stored all the same: only DYNAMIC refuses it, with this text).
pub fn split_providers(
    graph: &[u8],
    files: &dyn graph::Files,
) -> Result<Vec<SplitProviderDef>, String> {
    graph::split_providers_of(graph, files)
        .map(|ps| ps.iter().map(split_provider_def).collect())
        .map_err(|e| e.to_string())
}

/// `GetOrRegisterDatasetRequest` as the core's registration of a TensorFlow dataset: the
/// graph's bytes prepared as TensorFlow's dispatcher prepares them ([`prepare_graph`]: lookup
/// tables shared by node name, devices cleared; otherwise byte for byte as sent, and as sent
/// when they are not a graph), the metadata exactly as sent, the split providers computed
/// here, the dataset's [fingerprint] (its identity: a registration without an id is a
/// get-or-register by it, whatever order TensorFlow wrote the graph's maps in), and the id the
/// client gave, if any.
pub fn register_dataset(
    req: tf::GetOrRegisterDatasetRequest,
    files: &dyn graph::Files,
) -> Result<RegisterTfDataset, ConvertError> {
    use tf::data_service_metadata::OptionalElementSpec;
    use tf::get_or_register_dataset_request::OptionalDatasetId;
    let Some(dataset) = req.dataset else {
        return Err(invalid("GetOrRegisterDataset needs a dataset".into()));
    };
    let metadata = req.metadata.unwrap_or_default();
    // Prepared before anything reads it: the prepared graph is what is fingerprinted, stored,
    // journaled and sent to workers.
    let graph = prepare_graph(dataset.graph.into());
    let split_providers = split_providers(&graph, files);
    let element_spec =
        metadata.optional_element_spec.map(|OptionalElementSpec::ElementSpec(spec)| spec);
    // The fingerprint is the dataset's identity: without an id, the dataset of the same
    // fingerprint is the answer (another process's build of the same pipeline, its maps in
    // another order, its nodes named apart), so clients in different processes share jobs by
    // name as on TensorFlow's dispatcher. The core names a new one `tf-<fingerprint>`; an
    // explicit id is only ever the client's own.
    let fingerprint =
        fingerprint(&graph, element_spec.as_deref(), metadata.compression, metadata.cardinality);
    let dataset_id = req.optional_dataset_id.map(|OptionalDatasetId::DatasetId(id)| id);
    Ok(RegisterTfDataset {
        dataset_id,
        dataset: TfDataset {
            graph,
            element_spec,
            compression: metadata.compression,
            cardinality: metadata.cardinality,
            split_providers,
            fingerprint: Some(fingerprint),
        },
    })
}

/// The TensorFlow dataset of a `GetDataset` reply, else `FAILED_PRECONDITION` (a Shardwise
/// dataset has no graph).
pub fn tf_dataset(info: wire::DatasetInfo) -> Result<TfDataset, ConvertError> {
    match info.dataset {
        DatasetSpec::TensorFlow(dataset) => Ok(*dataset),
        DatasetSpec::Declarative(_) => Err(ConvertError {
            code: Code::FailedPrecondition,
            detail: format!(
                "dataset {} is a Shardwise (declarative) dataset, not a TensorFlow one",
                crate::echo::echo(&info.dataset_id)
            ),
        }),
    }
}

/// A TensorFlow dataset's metadata as TensorFlow's `GetDataServiceMetadata` answers it.
pub fn metadata(dataset: &TfDataset) -> tf::DataServiceMetadata {
    use tf::data_service_metadata::OptionalElementSpec;
    tf::DataServiceMetadata {
        optional_element_spec: dataset.element_spec.clone().map(OptionalElementSpec::ElementSpec),
        compression: dataset.compression,
        cardinality: dataset.cardinality,
    }
}

/// The core's compression decision as TensorFlow's answer.
pub fn compression_decision(d: CompressionDecision) -> tf::DisableCompressionAtRuntimeResponse {
    use tf::disable_compression_at_runtime_response::Decision;
    let decision = match d.compression_disabled {
        None => Decision::NoCompressionToDisable(true),
        Some(disabled) => Decision::CompressionDisabledAtRuntime(disabled),
    };
    tf::DisableCompressionAtRuntimeResponse { decision: Some(decision) }
}

/// The core's split as TensorFlow's `GetSplitResponse`: an int64 scalar tensor, as
/// TensorFlow's dispatcher encodes it ([`graph::int64_scalar`]), or `end_of_splits`.
pub fn split_reply(s: TfSplit) -> tf::GetSplitResponse {
    match s.split {
        Some(v) => {
            tf::GetSplitResponse { split: Some(graph::int64_scalar(v)), end_of_splits: false }
        }
        None => tf::GetSplitResponse { split: None, end_of_splits: true },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_ids_and_unknown_enum_values_are_invalid_arguments_naming_them() {
        let e = id("job_id", -1).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        assert!(e.detail.contains("job_id") && e.detail.contains("-1"), "{e}");
        assert_eq!(id("job_id", 5000).unwrap(), 5000);
        let e = sharding_policy(Some(tf::ProcessingModeDef { sharding_policy: 9 })).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        assert!(e.detail.contains("sharding_policy 9"), "{e}");
        assert_eq!(sharding_policy(None).unwrap(), ShardingPolicy::Off);
        let e = target_workers(-3).unwrap_err();
        assert!(e.detail.contains("target_workers -3"), "{e}");
        assert_eq!(target_workers(0).unwrap(), TargetWorkers::Auto);
        for p in [
            ShardingPolicy::Off,
            ShardingPolicy::Dynamic,
            ShardingPolicy::File,
            ShardingPolicy::Data,
            ShardingPolicy::FileOrData,
            ShardingPolicy::Hint,
        ] {
            assert_eq!(sharding_policy(Some(processing_mode_def(p))).unwrap(), p);
        }
    }

    #[test]
    fn a_lost_workers_task_stays_in_the_clients_task_list() {
        use crate::dispatch::IterationId;
        use crate::dispatch::wire::TaskInfo;
        let task = |id: u64, lost: bool| TaskInfo {
            task_id: TaskId(id),
            worker_address: format!("w{id}:1"),
            worker_tags: Vec::new(),
            starting_round: 0,
            finished: false,
            worker_lost: lost,
            iteration_id: IterationId(7),
            transfer_servers: Vec::new(),
            worker_uid: None,
        };
        let reply = ClientHeartbeatReply {
            tasks: vec![task(1, false), task(2, true)],
            tasks_version: 1,
            tasks_unchanged: false,
            iteration_finished: false,
            block_round: None,
            incarnation: "i".into(),
        };
        let tf = client_heartbeat_reply(reply, 0).unwrap();
        let listed: Vec<(i64, &str)> =
            tf.task_info.iter().map(|t| (t.task_id, t.worker_address.as_str())).collect();
        assert_eq!(listed, [(1, "w1:1"), (2, "w2:1")]);
    }

    #[test]
    fn worker_uids_round_trip_as_decimal_strings() {
        assert_eq!(worker_uid(0), None);
        assert_eq!(worker_uid(-42).as_deref(), Some("-42"));
        assert_eq!(worker_uid_int(Some("-42")), -42);
        assert_eq!(worker_uid_int(Some("a-uuid")), 0);
        assert_eq!(worker_uid_int(None), 0);
    }
}
