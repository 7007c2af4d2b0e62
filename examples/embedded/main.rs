//! The dispatcher core and a file journal embedded in a plain `std::net` program: no tokio.
//!
//! `cargo run -p shardwise-examples --example embedded -- [ADDR] [WORK_DIR]` (defaults
//! `127.0.0.1:5060` and `shardwise-embedded` in the system's temporary directory, so a run
//! from the checkout writes nothing into it, and a second run replays the first's journal),
//! then speak line-delimited JSON to it, e.g. `echo '{"op": "version"}' | nc 127.0.0.1 5060`.
//! See `shardwise_examples::embedded`.

use std::net::TcpListener;
use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:5060".into());
    let dir = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("shardwise-embedded"));
    let listener = match TcpListener::bind(&addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("embedded: cannot listen on {addr}: {e}");
            std::process::exit(1);
        }
    };
    match shardwise_examples::embedded::Server::start(listener, &dir) {
        Ok(server) => {
            println!(
                "embedded dispatcher on {} (work dir {}, {} records replayed)",
                server.addr(),
                dir.display(),
                server.replayed
            );
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            eprintln!("embedded: {e}");
            std::process::exit(1);
        }
    }
}
