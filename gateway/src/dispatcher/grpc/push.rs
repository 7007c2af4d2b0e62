//! Pushes new tasks to TensorFlow workers with `tensorflow.data.WorkerService/ProcessTask`, as
//! TensorFlow's dispatcher does when it creates an iteration: a TensorFlow worker otherwise
//! learns of a task at its next heartbeat (every 30 s by default).
//!
//! A push is best effort: it runs on its own task (the reply that created the tasks never
//! waits for it), bounded by [`PUSH_TIMEOUT`] for connecting and for the call, and a failure is
//! logged at debug level only: the worker gets the task at its next heartbeat anyway. One
//! lazily connected channel per worker address is kept, at most [`MAX_CHANNELS`] of them.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use crate::tf::proto::tensorflow::data as tf;
use tf::worker_service_client::WorkerServiceClient;

/// The bound on connecting to a worker and on one `ProcessTask` call.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// Channels kept (the oldest is dropped past it).
pub const MAX_CHANNELS: usize = 1024;

#[derive(Debug, Default)]
struct Channels {
    by_address: HashMap<String, Channel>,
    /// Addresses in the order their channels were made (the first is dropped first).
    order: VecDeque<String>,
}

/// The `ProcessTask` client of the dispatcher.
#[derive(Debug, Default)]
pub struct Pusher {
    channels: Mutex<Channels>,
}

impl Pusher {
    /// A pusher without channels yet.
    pub fn new() -> Pusher {
        Pusher::default()
    }

    /// The channel to `address` (made, unconnected, on first use).
    fn channel(&self, address: &str) -> Result<Channel, tonic::transport::Error> {
        let mut c = self.channels.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(ch) = c.by_address.get(address) {
            return Ok(ch.clone());
        }
        let ch = Endpoint::from_shared(format!("http://{address}"))?
            .connect_timeout(PUSH_TIMEOUT)
            .timeout(PUSH_TIMEOUT)
            .connect_lazy();
        if c.order.len() >= MAX_CHANNELS
            && let Some(oldest) = c.order.pop_front()
        {
            c.by_address.remove(&oldest);
        }
        c.order.push_back(address.to_owned());
        c.by_address.insert(address.to_owned(), ch.clone());
        Ok(ch)
    }

    /// Sends each task to its worker (`(worker address, task)`), each on its own tokio task;
    /// returns at once.
    pub fn push(&self, tasks: Vec<(String, tf::TaskDef)>) {
        for (address, task) in tasks {
            let channel = match self.channel(&address) {
                Ok(ch) => ch,
                Err(e) => {
                    tracing::debug!(%address, error = %e, "cannot push a task to this worker");
                    continue;
                }
            };
            let task_id = task.task_id;
            tokio::spawn(async move {
                let mut client = WorkerServiceClient::new(channel)
                    .max_encoding_message_size(usize::MAX)
                    .max_decoding_message_size(usize::MAX);
                let call = client.process_task(tf::ProcessTaskRequest { task: Some(task) });
                match tokio::time::timeout(PUSH_TIMEOUT, call).await {
                    Ok(Ok(_)) => tracing::debug!(%address, task_id, "task pushed"),
                    Ok(Err(status)) => {
                        tracing::debug!(%address, task_id, %status, "task push refused");
                    }
                    Err(_) => tracing::debug!(%address, task_id, "task push timed out"),
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tf::worker_service_server::{WorkerService, WorkerServiceServer};

    /// A TensorFlow worker's `WorkerService` that records the tasks it is given.
    #[derive(Debug, Default, Clone)]
    struct FakeWorker {
        got: Arc<Mutex<Vec<tf::TaskDef>>>,
    }

    #[tonic::async_trait]
    impl WorkerService for FakeWorker {
        async fn process_task(
            &self,
            request: tonic::Request<tf::ProcessTaskRequest>,
        ) -> Result<tonic::Response<tf::ProcessTaskResponse>, tonic::Status> {
            if let Some(t) = request.into_inner().task {
                self.got.lock().unwrap().push(t);
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

    #[tokio::test]
    async fn a_pushed_task_reaches_the_worker_and_a_dead_worker_is_only_logged() {
        let fake = FakeWorker::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = tokio_stream_of(listener);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(WorkerServiceServer::new(fake.clone()))
                .serve_with_incoming(incoming),
        );
        // A port nobody listens on (bound, then closed).
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let pusher = Pusher::new();
        let task = tf::TaskDef {
            task_id: 4000,
            iteration_id: 2000,
            dataset_id: "1000".into(),
            worker_address: addr.to_string(),
            ..Default::default()
        };
        let started = std::time::Instant::now();
        pusher.push(vec![(dead.to_string(), task.clone()), (addr.to_string(), task.clone())]);
        assert!(started.elapsed() < Duration::from_millis(500), "push waited");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while fake.got.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "the task never arrived");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(fake.got.lock().unwrap().as_slice(), &[task]);
        assert_eq!(pusher.channels.lock().unwrap().by_address.len(), 2);
    }

    /// The accepted connections of `listener`, as tonic's server takes them.
    fn tokio_stream_of(
        listener: tokio::net::TcpListener,
    ) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
        futures::stream::unfold(listener, |l| async move {
            let r = l.accept().await.map(|(s, _)| s);
            Some((r, l))
        })
    }

    #[test]
    fn the_channel_cache_is_bounded() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let p = Pusher::new();
            for i in 0..MAX_CHANNELS + 5 {
                p.channel(&format!("127.0.0.1:{}", 1 + i)).unwrap();
            }
            let c = p.channels.lock().unwrap();
            assert_eq!(c.by_address.len(), MAX_CHANNELS);
            assert!(!c.by_address.contains_key("127.0.0.1:1"), "the oldest is dropped");
        });
    }
}
