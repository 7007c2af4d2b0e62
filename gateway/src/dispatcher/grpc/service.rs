//! The RPCs of `tensorflow.data.DispatcherService`, each translated (by the core's
//! [`convert`]) to the core request REST uses for the same thing and answered from its reply.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use shardwise_core::dispatch::wire::{CreateIteration, MaybeRemove};
use shardwise_core::dispatch::{
    ClientId, DatasetSpec, DisableCompression, GetDataset, IterationId, JobId, ListWorkers,
    ReleaseClient, TaskId, TfGetSplit,
};
use shardwise_core::tensorflow::convert::{self, id, int64};
use tonic::{Request, Response, Status};

use super::budget::ConnectionBudget;
use super::convert::{from_convert, from_problem};
use super::push::Pusher;
use crate::dispatcher::core::DriverHandle;
use crate::tf::proto::tensorflow::data as tf;
use tf::dispatcher_service_server::DispatcherService;

/// The tf.data service protocol version this dispatcher speaks: TensorFlow's
/// `kDataServiceVersion` of TensorFlow 2.21 (its clients and workers refuse any other).
pub const TF_DATA_SERVICE_VERSION: i64 = 9;

/// What `distributed_save` calls are answered.
const NO_SNAPSHOTS: &str = "Shardwise does not support tf.data service snapshots \
                            (`distributed_save`)";

/// The gRPC service over the dispatcher core.
#[derive(Debug, Clone)]
pub struct DispatcherGrpc {
    driver: DriverHandle,
    /// TensorFlow's `DeploymentMode` value of `--deployment-mode`.
    deployment_mode: i32,
    /// Pushes the tasks a new iteration made to TensorFlow workers.
    pusher: Arc<Pusher>,
    /// Where `list_files` patterns may be globbed (`--data-root`).
    data_roots: Arc<crate::tf::files::DataRoots>,
}

impl DispatcherGrpc {
    /// The service over `driver`, answering `deployment_mode`, pushing new tasks with
    /// `pusher` (shared with the REST front), globbing `list_files` under `data_roots`.
    pub fn new(
        driver: DriverHandle,
        deployment_mode: tf::DeploymentMode,
        pusher: Arc<Pusher>,
        data_roots: Arc<crate::tf::files::DataRoots>,
    ) -> DispatcherGrpc {
        DispatcherGrpc { driver, deployment_mode: deployment_mode as i32, pusher, data_roots }
    }

    /// The TensorFlow dataset `dataset_id`.
    async fn tf_dataset(
        &self,
        dataset_id: String,
    ) -> Result<shardwise_core::dispatch::TfDataset, Status> {
        let info = self.driver.call(GetDataset { dataset_id }).await.map_err(from_problem)?;
        convert::tf_dataset(info).map_err(from_convert)
    }
}

impl DispatcherGrpc {
    /// The size of the graph of dataset `dataset_id` (0 for an unknown or declarative one): what
    /// a `GetDatasetDef` reply will hold, read without copying the graph.
    fn graph_bytes(&self, dataset_id: &str) -> usize {
        let size = self.driver.inspect(|d| {
            d.state().datasets().get(dataset_id).map_or(0, |ds| match &ds.spec {
                DatasetSpec::TensorFlow(tf) => tf.graph.len(),
                DatasetSpec::Declarative(_) => 0,
            })
        });
        size.unwrap_or(0)
    }
}

type Answer<T> = Result<Response<T>, Status>;

/// Sets its flag when dropped: with the future of a call, whether it was answered or
/// abandoned.
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[tonic::async_trait]
impl DispatcherService for DispatcherGrpc {
    async fn worker_heartbeat(
        &self,
        request: Request<tf::WorkerHeartbeatRequest>,
    ) -> Answer<tf::WorkerHeartbeatResponse> {
        let req = convert::worker_heartbeat(request.into_inner()).map_err(from_convert)?;
        let address = req.worker_address.clone();
        let reply = self.driver.call(req).await.map_err(from_problem)?;
        Ok(Response::new(convert::worker_heartbeat_reply(reply, &address).map_err(from_convert)?))
    }

    async fn worker_update(
        &self,
        request: Request<tf::WorkerUpdateRequest>,
    ) -> Answer<tf::WorkerUpdateResponse> {
        let req = convert::worker_update(request.into_inner()).map_err(from_convert)?;
        self.driver.call(req).await.map_err(from_problem)?;
        Ok(Response::new(tf::WorkerUpdateResponse {}))
    }

    async fn get_dataset_def(
        &self,
        request: Request<tf::GetDatasetDefRequest>,
    ) -> Answer<tf::GetDatasetDefResponse> {
        // The reply (the graph: megabytes, maybe) is held until the caller has read it: its
        // bytes are reserved from the connection's budget before the graph is copied out.
        let budget = request.extensions().get::<ConnectionBudget>().cloned();
        let dataset_id = request.into_inner().dataset_id;
        let held = match budget {
            Some(budget) => Some(budget.reserve(self.graph_bytes(&dataset_id)).await),
            None => None,
        };
        let dataset = self.tf_dataset(dataset_id).await?;
        let mut reply = Response::new(tf::GetDatasetDefResponse {
            dataset_def: Some(tf::DatasetDef { graph: dataset.graph.into() }),
        });
        if let Some(held) = held {
            reply.extensions_mut().insert(held);
        }
        Ok(reply)
    }

    async fn get_split(
        &self,
        request: Request<tf::GetSplitRequest>,
    ) -> Answer<tf::GetSplitResponse> {
        let req = request.into_inner();
        let iteration = IterationId(id("iteration_id", req.iteration_id).map_err(from_convert)?);
        let body = TfGetSplit {
            repetition: convert::count("repetition", req.repetition).map_err(from_convert)?,
            split_provider_index: convert::count("split_provider_index", req.split_provider_index)
                .map_err(from_convert)?,
        };
        let split = self.driver.call((iteration, body)).await.map_err(from_problem)?;
        Ok(Response::new(convert::split_reply(split)))
    }

    async fn get_version(
        &self,
        _request: Request<tf::GetVersionRequest>,
    ) -> Answer<tf::GetVersionResponse> {
        Ok(Response::new(tf::GetVersionResponse { version: TF_DATA_SERVICE_VERSION }))
    }

    async fn get_or_register_dataset(
        &self,
        request: Request<tf::GetOrRegisterDatasetRequest>,
    ) -> Answer<tf::GetOrRegisterDatasetResponse> {
        // Reading the graph (megabytes, maybe) and globbing its `list_files` patterns is work
        // for a blocking thread, which stops globbing once this call is abandoned: answered
        // (the 30 s bound, the caller's deadline) or dropped (its client went away).
        let roots = self.data_roots.clone();
        let abandoned = Arc::new(AtomicBool::new(false));
        let _abandon_on_drop = AbandonOnDrop(abandoned.clone());
        let req = tokio::task::spawn_blocking(move || {
            convert::register_dataset(request.into_inner(), &roots.glob(&abandoned))
        })
        .await
        .map_err(|_| Status::internal("reading the dataset's graph failed (a bug)"))?
        .map_err(from_convert)?;
        let reply = self.driver.call(req).await.map_err(from_problem)?;
        Ok(Response::new(tf::GetOrRegisterDatasetResponse { dataset_id: reply.dataset_id }))
    }

    async fn get_or_create_job(
        &self,
        request: Request<tf::GetOrCreateJobRequest>,
    ) -> Answer<tf::GetOrCreateJobResponse> {
        let req = convert::create_job(request.into_inner()).map_err(from_convert)?;
        let reply = self.driver.call(req).await.map_err(from_problem)?;
        Ok(Response::new(tf::GetOrCreateJobResponse {
            job_id: int64("job_id", reply.job_id.0).map_err(from_convert)?,
        }))
    }

    async fn get_or_create_iteration(
        &self,
        request: Request<tf::GetOrCreateIterationRequest>,
    ) -> Answer<tf::GetOrCreateIterationResponse> {
        let req = request.into_inner();
        let job = JobId(id("job_id", req.job_id).map_err(from_convert)?);
        let repetition = convert::count("repetition", req.repetition).map_err(from_convert)?;
        let body = CreateIteration { repetition, consumer_index: None, resume_from: None };
        let reply = self.driver.call((job, body)).await.map_err(from_problem)?;
        self.pusher.push(convert::pushed_tasks(&reply.pushed_tasks));
        Ok(Response::new(tf::GetOrCreateIterationResponse {
            iteration_client_id: int64("iteration_client_id", reply.client_id.0)
                .map_err(from_convert)?,
        }))
    }

    async fn maybe_remove_task(
        &self,
        request: Request<tf::MaybeRemoveTaskRequest>,
    ) -> Answer<tf::MaybeRemoveTaskResponse> {
        let req = request.into_inner();
        let task = TaskId(id("task_id", req.task_id).map_err(from_convert)?);
        let body = MaybeRemove {
            consumer_index: convert::count("consumer_index", req.consumer_index)
                .map_err(from_convert)?,
            round: convert::count("round", req.round).map_err(from_convert)?,
        };
        let reply = self.driver.call((task, body)).await.map_err(from_problem)?;
        Ok(Response::new(tf::MaybeRemoveTaskResponse { removed: reply.removed }))
    }

    async fn release_iteration_client(
        &self,
        request: Request<tf::ReleaseIterationClientRequest>,
    ) -> Answer<tf::ReleaseIterationClientResponse> {
        let client = ClientId(
            id("iteration_client_id", request.get_ref().iteration_client_id)
                .map_err(from_convert)?,
        );
        self.driver.call(ReleaseClient { client_id: client }).await.map_err(from_problem)?;
        Ok(Response::new(tf::ReleaseIterationClientResponse {}))
    }

    async fn client_heartbeat(
        &self,
        request: Request<tf::ClientHeartbeatRequest>,
    ) -> Answer<tf::ClientHeartbeatResponse> {
        let req = request.into_inner();
        let client =
            ClientId(id("iteration_client_id", req.iteration_client_id).map_err(from_convert)?);
        let body = convert::client_heartbeat(&req).map_err(from_convert)?;
        let reply = self.driver.call((client, body)).await.map_err(from_problem)?;
        Ok(Response::new(
            convert::client_heartbeat_reply(reply, self.deployment_mode).map_err(from_convert)?,
        ))
    }

    async fn get_workers(
        &self,
        _request: Request<tf::GetWorkersRequest>,
    ) -> Answer<tf::GetWorkersResponse> {
        let list = self.driver.call(ListWorkers).await.map_err(from_problem)?;
        let workers = list
            .workers
            .into_iter()
            .filter(|w| w.alive)
            .map(|w| tf::WorkerInfo { address: w.worker_address })
            .collect();
        Ok(Response::new(tf::GetWorkersResponse { workers }))
    }

    async fn get_data_service_metadata(
        &self,
        request: Request<tf::GetDataServiceMetadataRequest>,
    ) -> Answer<tf::GetDataServiceMetadataResponse> {
        let dataset = self.tf_dataset(request.into_inner().dataset_id).await?;
        Ok(Response::new(tf::GetDataServiceMetadataResponse {
            metadata: Some(convert::metadata(&dataset)),
        }))
    }

    async fn get_data_service_config(
        &self,
        _request: Request<tf::GetDataServiceConfigRequest>,
    ) -> Answer<tf::GetDataServiceConfigResponse> {
        Ok(Response::new(tf::GetDataServiceConfigResponse {
            config: Some(tf::DataServiceConfig { deployment_mode: self.deployment_mode }),
        }))
    }

    async fn snapshot(
        &self,
        _request: Request<tf::SnapshotRequest>,
    ) -> Answer<tf::SnapshotResponse> {
        Err(Status::unimplemented(NO_SNAPSHOTS))
    }

    async fn get_snapshot_split(
        &self,
        _request: Request<tf::GetSnapshotSplitRequest>,
    ) -> Answer<tf::GetSnapshotSplitResponse> {
        Err(Status::unimplemented(NO_SNAPSHOTS))
    }

    async fn get_snapshot_streams(
        &self,
        _request: Request<tf::GetSnapshotStreamsRequest>,
    ) -> Answer<tf::GetSnapshotStreamsResponse> {
        Err(Status::unimplemented(NO_SNAPSHOTS))
    }

    async fn disable_compression_at_runtime(
        &self,
        request: Request<tf::DisableCompressionAtRuntimeRequest>,
    ) -> Answer<tf::DisableCompressionAtRuntimeResponse> {
        let req = request.into_inner();
        let body = DisableCompression {
            dataset_id: req.dataset_id,
            disable: req.disable_compression_at_runtime,
        };
        let decision = self.driver.call(body).await.map_err(from_problem)?;
        Ok(Response::new(convert::compression_decision(decision)))
    }
}
