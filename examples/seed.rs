//! The seed flow in one process (TensorFlow's `DispatchServer` example):
//!
//! ```sh
//! cargo run -p shardwise-examples --example seed
//! ```
//!
//! prints `[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]` (a dispatcher, one worker and a client reading
//! `range(10)` with `parallel_epochs`), then the same range read with `distributed_epoch`
//! over two workers, each element exactly once. The logic is `shardwise_examples::seed::run`,
//! which `examples/tests/seed.rs` runs too.

#[tokio::main]
async fn main() {
    let mut out = std::io::stdout();
    if let Err(e) = shardwise_examples::seed::run(&mut out).await {
        eprintln!("seed: {e}");
        std::process::exit(1);
    }
}
