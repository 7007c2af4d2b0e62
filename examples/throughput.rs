//! Elements per second read by one client (the data plane's benchmark), all in this process:
//!
//! ```sh
//! cargo run --release -p shardwise-examples --example throughput -- [ELEMENTS [ROUNDS]]
//! ```
//!
//! A dispatcher and workers on 127.0.0.1 port 0, one client reading `range(ELEMENTS)`
//! (default 2,000,000) unbatched: `parallel_epochs` with one worker, then
//! `distributed_epoch` with two. Client, workers and dispatcher share this process's tokio
//! runtime and the machine's cores, so the figures include everyone's CPU.
//!
//! Then `distributed_epoch` again, `ROUNDS` times (default 5; 0 skips it), taking the read position every
//! 100,000 elements as a trainer that checkpoints often would; it prints the median. Every
//! `distributed_epoch` read of a range tracks positions (workers tag elements with origin
//! runs, the client folds them): `docs/benchmarks/read-positions.md` compares this example's
//! figures with those of a build from before positions, run alternately.

use std::time::Instant;

use futures::StreamExt;
use shardwise_client::{DistributeOptions, distribute};
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::wire::{NamedMode, ProcessingMode};
use shardwise_gateway::dispatcher::{self, DispatcherArgs};
use shardwise_gateway::worker::{self, WorkerArgs};

async fn read(url: &str, n: u64, mode: NamedMode) -> (u64, f64) {
    let dataset: DatasetDef =
        format!(r#"{{"source": {{"range": {{"stop": {n}}}}}}}"#).parse().expect("dataset");
    read_dataset(url, dataset, mode, None).await
}

/// Reads `dataset` to its end; with `checkpoint_every`, takes the read position every that
/// many elements.
async fn read_dataset(
    url: &str,
    dataset: DatasetDef,
    mode: NamedMode,
    checkpoint_every: Option<u64>,
) -> (u64, f64) {
    let options = DistributeOptions {
        processing_mode: ProcessingMode::Named(mode),
        split_size: Some(4096),
        ..DistributeOptions::default()
    };
    let started = Instant::now();
    let mut stream = distribute(url, dataset, options);
    let mut count = 0u64;
    while let Some(e) = stream.next().await {
        e.expect("element");
        count += 1;
        if checkpoint_every.is_some_and(|every| count.is_multiple_of(every)) {
            let position = stream.position().expect("a range read has a position");
            std::hint::black_box(serde_json::to_vec(&position).expect("JSON"));
        }
    }
    (count, started.elapsed().as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2_000_000);
    let dispatcher = dispatcher::start(DispatcherArgs { port: 0, ..DispatcherArgs::default() })
        .await
        .expect("dispatcher");
    let url = dispatcher.url();
    let w1 = worker::start(WorkerArgs::new(&url)).await.expect("worker");
    let (count, secs) = read(&url, n, NamedMode::ParallelEpochs).await;
    assert_eq!(count, n);
    println!(
        "parallel_epochs, 1 worker:   {count} elements in {secs:.2} s = {:.0}/s",
        n as f64 / secs
    );
    let w2 = worker::start(WorkerArgs::new(&url)).await.expect("worker");
    let (count, secs) = read(&url, n, NamedMode::DistributedEpoch).await;
    assert_eq!(count, n);
    println!(
        "distributed_epoch, 2 workers: {count} elements in {secs:.2} s = {:.0}/s",
        n as f64 / secs
    );
    let rounds: usize = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let dataset: DatasetDef =
        format!(r#"{{"source": {{"range": {{"stop": {n}}}}}}}"#).parse().expect("dataset");
    // ROUNDS 0 skips this part (to compare with builds that lack it).
    if rounds > 0 {
        let mut rates = Vec::new();
        for _ in 0..rounds {
            let (count, secs) =
                read_dataset(&url, dataset.clone(), NamedMode::DistributedEpoch, Some(100_000))
                    .await;
            assert_eq!(count, n);
            rates.push(n as f64 / secs);
        }
        println!(
            "distributed_epoch, 2 workers, position() every 100,000 elements: median of {rounds} \
             rounds {:.0}/s",
            median(rates)
        );
    }
    w2.stop().await;
    w1.stop().await;
    dispatcher.stop().await;
}
