//! Hostile data files against real processes (issue 30): what a small file can make a worker
//! or a dispatcher allocate, and how long it can keep them busy.
//!
//! - Parquet pages whose GZIP or LZ4 body inflates far past the size the page declares are
//!   refused at that size, naming the file, row group and column: the worker's peak memory
//!   stays small (before: +1 GB and more per page).

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_gateway::client::{ClientError, DistributeOptions, distribute};
use shardwise_tests::parquet_bytes::{self, codec};
use shardwise_tests::{Dispatcher, TempDir, Worker, peak_rss_mib, rss_mib};

fn options() -> DistributeOptions {
    DistributeOptions {
        unknown_task_timeout: Duration::from_secs(20),
        unavailable_timeout: Duration::from_secs(30),
        ..shardwise_tests::fast_options()
    }
}

/// Reads a whole epoch through the Rust client; `None` if it took more than `limit`.
fn read_within(url: &str, ds: Value, limit: Duration) -> Option<Result<Vec<Value>, ClientError>> {
    let def = DatasetDef::from_json(&ds).expect("a valid dataset");
    shardwise_tests::runtime().block_on(async {
        let read = distribute(url, def, options()).try_collect::<Vec<Value>>();
        tokio::time::timeout(limit, read).await.ok()
    })
}

/// Reads a whole epoch through the Rust client (bounded to 60 s).
fn read_all(url: &str, ds: Value) -> Result<Vec<Value>, ClientError> {
    read_within(url, ds, Duration::from_secs(60)).expect("the epoch ends in time")
}

fn parquet(path: &str) -> Value {
    json!({"source": {"files": {"paths": [path], "format": "parquet"}}})
}

/// Issue 30, defect 2: a 1 MB Parquet file whose GZIP page declares 24 bytes inflated to 1 GB
/// before any size check (the worker, with a 16 MiB buffer budget, peaked at 2.08 GB), and a
/// legacy LZ4 page did the same through its LZ4-frame fallback. Every codec now stops at the
/// declared size.
#[test]
fn parquet_pages_that_inflate_past_their_declared_size_are_refused_with_small_memory() {
    let dir = TempDir::new("bombs");
    let files = [
        ("gzip.parquet", parquet_bytes::one_page(codec::GZIP, &parquet_bytes::gzip_bomb(1024), 3)),
        (
            "lz4.parquet",
            parquet_bytes::one_page(codec::LZ4, &parquet_bytes::lz4_frame_bomb(512), 3),
        ),
    ];
    for (name, bytes) in &files {
        println!("{name}: {} bytes", bytes.len());
        std::fs::write(dir.0.join(name), bytes).unwrap();
    }
    // The pages are what they say: a valid file of the same layout reads.
    let valid: Vec<u8> = [1i64, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
    let valid = parquet_bytes::one_page(codec::UNCOMPRESSED, &valid, 3);
    std::fs::write(dir.0.join("valid.parquet"), valid).unwrap();

    // One cluster per file, so that each peak is that file's.
    let mut errors = Vec::new();
    let mut peaks = Vec::new();
    for (name, _) in &files {
        let d = Dispatcher::start(&[]);
        let mut w = Worker::start(
            &d.url,
            &[
                "--data-root",
                dir.path(),
                "--max-buffer-bytes",
                "16777216",
                "--heartbeat-interval",
                "200ms",
            ],
        );
        let pid = w.child.id();
        let got = read_all(&d.url, parquet(&format!("{}/valid.parquet", dir.path()))).unwrap();
        assert_eq!(got, [json!({"x": 1}), json!({"x": 2}), json!({"x": 3})]);
        let before = peak_rss_mib(pid);
        let t = Instant::now();
        let limit = Duration::from_secs(60);
        let read = read_within(&d.url, parquet(&format!("{}/{name}", dir.path())), limit);
        let (took, peak, now) = (t.elapsed(), peak_rss_mib(pid), rss_mib(pid));
        println!(
            "{name}: {:.1} s{}, worker peak RSS {peak} MiB ({before} MiB before), RSS after {now} \
             MiB",
            took.as_secs_f64(),
            if read.is_none() { " (not answered yet)" } else { "" },
        );
        peaks.push((name, peak));
        errors.push((name, read));
        w.kill();
    }
    for (name, peak) in peaks {
        assert!(peak < 200, "{name}: the worker's peak RSS reached {peak} MiB");
    }
    let errors = errors.into_iter().map(|(name, read)| {
        let read = read.expect("the read is answered within a minute");
        (name, read.expect_err("a page that lies about its size"))
    });
    for (name, err) in errors {
        let text = err.to_string();
        println!("{name}: {text}");
        assert_eq!(err.code(), "INVALID_ARGUMENT", "{text}");
        for part in [*name, "row group 0", "column \"x\" page 0", "inflates past the 24 bytes"] {
            assert!(text.contains(part), "{name}: {part:?} not in {text}");
        }
    }
}
