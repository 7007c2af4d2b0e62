//! A TensorFlow worker faked in the test process, for the tests that drive the dispatcher's
//! `tensorflow.data.DispatcherService` over gRPC without TensorFlow: the heartbeat a worker
//! registers (and then heartbeats) with, and the worker's own `WorkerService`, which records
//! the tasks the dispatcher pushes to it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardwise_gateway::tf::proto::tensorflow::data as tf;
use tf::dispatcher_service_client::DispatcherServiceClient;
use tf::worker_service_server::{WorkerService, WorkerServiceServer};

/// A gRPC client of the dispatcher at `url` (`http://HOST:PORT`) without message size limits,
/// as TensorFlow's.
pub async fn dispatcher_client(url: &str) -> DispatcherServiceClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .expect("a URL")
        .connect()
        .await
        .expect("connected");
    DispatcherServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX)
}

/// The heartbeat of a TensorFlow worker at `address` (`HOST:PORT`) with uid `uid`: its one
/// transfer server is gRPC on the same address, as TensorFlow's default. The first one
/// registers the worker.
pub fn heartbeat(address: &str, uid: i64) -> tf::WorkerHeartbeatRequest {
    tf::WorkerHeartbeatRequest {
        worker_address: address.into(),
        worker_uid: uid,
        transfer_servers: vec![tf::DataTransferServerInfo {
            protocol: "grpc".into(),
            address: address.into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A TensorFlow worker's `WorkerService` served in this process ([`FakeWorker::start`]):
/// records the tasks pushed to it (`ProcessTask`); `GetWorkerTasks` is unimplemented.
#[derive(Debug, Default, Clone)]
pub struct FakeWorker {
    got: Arc<Mutex<Vec<tf::TaskDef>>>,
}

#[tonic::async_trait]
impl WorkerService for FakeWorker {
    async fn process_task(
        &self,
        request: tonic::Request<tf::ProcessTaskRequest>,
    ) -> Result<tonic::Response<tf::ProcessTaskResponse>, tonic::Status> {
        if let Some(t) = request.into_inner().task {
            self.got.lock().expect("tasks lock").push(t);
        }
        Ok(tonic::Response::new(tf::ProcessTaskResponse {}))
    }
    async fn get_worker_tasks(
        &self,
        _: tonic::Request<tf::GetWorkerTasksRequest>,
    ) -> Result<tonic::Response<tf::GetWorkerTasksResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("fake"))
    }
}

impl FakeWorker {
    /// Serves it on 127.0.0.1, port 0, on the current tokio runtime: its address (`HOST:PORT`,
    /// what its [`heartbeat`] gives).
    pub async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let addr = listener.local_addr().expect("its address");
        let incoming = futures::stream::unfold(listener, |l| async move {
            let r = l.accept().await.map(|(s, _)| s);
            Some((r, l))
        });
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(WorkerServiceServer::new(self.clone()))
                .serve_with_incoming(incoming),
        );
        addr.to_string()
    }

    /// The tasks pushed to it so far.
    pub fn tasks(&self) -> Vec<tf::TaskDef> {
        self.got.lock().expect("tasks lock").clone()
    }

    /// Waits (at most 10 s, else panics) until a task was pushed: the tasks so far.
    pub async fn wait_for_tasks(&self) -> Vec<tf::TaskDef> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = self.tasks();
            if !got.is_empty() {
                return got;
            }
            assert!(std::time::Instant::now() < deadline, "no task was pushed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
