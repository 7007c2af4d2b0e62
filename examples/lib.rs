//! Runnable examples; see the `[[example]]` targets. The seed flow's logic lives here
//! ([`seed::run`]) so that a test runs it too, and so does the load generator's fleet mode
//! ([`fleet::run`]), the bare axum server it measures as a yardstick ([`bare::serve`]), and the
//! dispatcher embedded without tokio ([`embedded::Server`]).

#[path = "load/bare.rs"]
pub mod bare;
#[path = "load/fleet.rs"]
pub mod fleet;

#[path = "embedded/server.rs"]
pub mod embedded;

pub mod seed {
    //! TensorFlow's `DispatchServer` example, in one process: a dispatcher and a worker on
    //! ephemeral ports, a client reading `range(10)` with `parallel_epochs`; then a second
    //! worker and `distributed_epoch`, where each element is read exactly once across both.

    use futures::TryStreamExt;
    use serde_json::Value;
    use shardwise_client::{DistributeOptions, distribute};
    use shardwise_core::dataset::DatasetDef;
    use shardwise_core::dispatch::wire::{NamedMode, ProcessingMode};
    use shardwise_gateway::dispatcher::{self, DispatcherArgs};
    use shardwise_gateway::worker::{self, WorkerArgs};

    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn list(elements: &[Value]) -> String {
        let items: Vec<String> = elements.iter().map(Value::to_string).collect();
        format!("[{}]", items.join(", "))
    }

    /// Runs the seed flow, writing what it prints to `out`:
    ///
    /// ```text
    /// [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    /// distributed_epoch over 2 workers, sorted: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    /// ```
    pub async fn run(out: &mut (dyn std::io::Write + Send)) -> Result<(), Error> {
        // dispatcher = tf.data.experimental.service.DispatchServer()
        let dispatcher =
            dispatcher::start(DispatcherArgs { port: 0, ..DispatcherArgs::default() }).await?;
        let url = dispatcher.url();
        // worker = tf.data.experimental.service.WorkerServer(...)
        let first = worker::start(WorkerArgs::new(&url)).await?;
        // dataset = tf.data.Dataset.range(10).apply(distribute("parallel_epochs", ...))
        let dataset: DatasetDef = r#"{"source": {"range": {"stop": 10}}}"#.parse()?;
        let elements: Vec<Value> =
            distribute(&url, dataset.clone(), DistributeOptions::default()).try_collect().await?;
        writeln!(out, "{}", list(&elements))?;

        // A second worker; distributed_epoch hands each split to one of them.
        let second = worker::start(WorkerArgs::new(&url)).await?;
        let options = DistributeOptions {
            processing_mode: ProcessingMode::Named(NamedMode::DistributedEpoch),
            split_size: Some(2),
            ..DistributeOptions::default()
        };
        let mut elements: Vec<Value> = distribute(&url, dataset, options).try_collect().await?;
        elements.sort_by_key(|v| v.as_i64());
        writeln!(out, "distributed_epoch over 2 workers, sorted: {}", list(&elements))?;

        second.stop().await;
        first.stop().await;
        dispatcher.stop().await;
        Ok(())
    }
}
