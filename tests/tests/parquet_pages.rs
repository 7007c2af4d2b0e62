//! Parquet files as pyarrow writes them, in every codec and both data page versions, read
//! back through a real worker: the worker decompresses pages itself (into exactly the size
//! each declares, see `gateway/worker/src/columnar/codec.rs`), so every codec pyarrow writes
//! must read as pyarrow wrote it, whole and by row ranges (a DYNAMIC read of a source split by
//! rows, whose splits start inside row groups and pass over pages), and the dispatcher's row
//! counts, taken from a walk of the footer, must be pyarrow's.

use std::time::Duration;

use futures::TryStreamExt;
use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::wire::{NamedMode, ProcessingMode};
use shardwise_gateway::client::{DistributeOptions, distribute};
use shardwise_tests::{Dispatcher, TempDir, Worker, assert_ran, pyenv, run_bounded};

/// Rows in each file (row groups of 500, pages of about 1 KiB).
const ROWS: i64 = 1_500;

/// Writes `name.parquet` for every codec and page version into `dir` with pyarrow.
const WRITE: &str = r#"
import sys
import pyarrow as pa, pyarrow.parquet as pq
n = int(sys.argv[2])
ids = list(range(n))
table = pa.table({
    "id": pa.array(ids, pa.int64()),
    "x": pa.array([None if i % 7 == 0 else i * 0.5 for i in ids], pa.float64()),
    "s": pa.array(["s%d" % (i % 13) for i in ids], pa.string()),
    "v": pa.array([[float(i), float(i) + 1.0] for i in ids], pa.list_(pa.float32())),
    "b": pa.array([bytes([i % 251]) * (i % 5) for i in ids], pa.binary()),
})
for codec in ["none", "snappy", "gzip", "lz4", "zstd", "brotli"]:
    for version in ["1.0", "2.0"]:
        pq.write_table(table, "%s/%s-%s.parquet" % (sys.argv[1], codec, version),
                       compression=codec, data_page_version=version, row_group_size=500,
                       data_page_size=1024)
"#;

/// What row `i` holds, as the worker's JSON gives it.
fn row(i: i64) -> Value {
    let x = if i % 7 == 0 { Value::Null } else { json!(i as f64 * 0.5) };
    let bytes: Vec<u8> = vec![(i % 251) as u8; (i % 5) as usize];
    use base64::Engine as _;
    let b = base64::engine::general_purpose::STANDARD.encode(bytes);
    json!({"id": i, "x": x, "s": format!("s{}", i % 13), "v": [i as f64, i as f64 + 1.0], "b": b})
}

fn read(url: &str, dataset: Value, mode: NamedMode) -> Result<Vec<Value>, String> {
    let def = DatasetDef::from_json(&dataset).expect("a valid dataset");
    let options = DistributeOptions {
        processing_mode: ProcessingMode::Named(mode),
        split_size: Some(400),
        unknown_task_timeout: Duration::from_secs(20),
        ..shardwise_tests::fast_options()
    };
    shardwise_tests::runtime().block_on(async {
        let read = distribute(url, def, options).try_collect::<Vec<Value>>();
        let done = tokio::time::timeout(Duration::from_secs(120), read).await;
        done.expect("the read ends in time").map_err(|e| e.to_string())
    })
}

#[test]
fn pyarrow_files_of_every_codec_and_page_version_read_back_whole_and_by_row_ranges() {
    let dir = TempDir::new("parquet-pages");
    let run = run_bounded(
        &mut pyenv::python(&["-c", WRITE, dir.path(), &ROWS.to_string()]),
        Duration::from_secs(300),
    );
    assert_ran("pyarrow writes the files", &run);
    let d = Dispatcher::start(&["--data-root", dir.path()]);
    let _w = Worker::start(&d.url, &["--data-root", dir.path(), "--heartbeat-interval", "200ms"]);
    let want: Vec<Value> = (0..ROWS).map(row).collect();
    for codec in ["none", "snappy", "gzip", "lz4", "zstd", "brotli"] {
        for version in ["1.0", "2.0"] {
            let path = format!("{}/{codec}-{version}.parquet", dir.path());
            let whole = json!({"source": {"files": {"paths": [&path], "format": "parquet"}}});
            let by_rows = json!({"source": {"files": {"paths": [&path], "format": "parquet",
                                                       "split": "rows"}}});
            let got = read(&d.url, whole, NamedMode::ParallelEpochs);
            if codec == "brotli" {
                // Not built in: refused, naming the codec.
                let e = got.expect_err("brotli is not read");
                assert!(e.contains("BROTLI") && e.contains("does not read"), "{e}");
                continue;
            }
            assert_eq!(got.as_deref(), Ok(want.as_slice()), "{codec} {version}: whole");
            // Splits of 400 rows start inside row groups: pages before them are passed over.
            let mut got = read(&d.url, by_rows, NamedMode::DistributedEpoch)
                .unwrap_or_else(|e| panic!("{codec} {version}: {e}"));
            got.sort_by_key(|r| r["id"].as_i64());
            assert_eq!(got, want, "{codec} {version}: by row ranges");
            println!("{codec} {version}: {} rows whole and by row ranges", got.len());
        }
    }
}
