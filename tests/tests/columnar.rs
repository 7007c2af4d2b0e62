//! Columnar datasets against real processes: Parquet, Arrow IPC and TFRecord files written by
//! pyarrow and TensorFlow (`tests/tf/columnar.py make`), served by `shardwise worker`s as Arrow
//! record batches (`Accept: application/vnd.apache.arrow.stream`) and as JSON rows.
//!
//! - pyarrow, reading the workers' HTTP streams in plain Python, gets every row of every
//!   format exactly once from two workers in a `distributed_epoch`, with the tensors as NumPy
//!   arrays of their declared shape that share the Arrow buffers (no copy), compressed or not;
//! - the JSON route serves the same rows as objects;
//! - a file whose schema disagrees with the declared tensors, and a TFRecord file with a
//!   corrupted record, are task errors that name the column or the record, and the workers go
//!   on serving.

use std::sync::OnceLock;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::wire::{NamedMode, ProcessingMode};
use shardwise_gateway::client::{DistributeOptions, distribute};
use shardwise_tests::{Dispatcher, TempDir, Worker, assert_ran, run_bounded, runtime, tf};

/// The files of `tests/tf/columnar.py make`, made once per test process.
fn data() -> &'static TempDir {
    static DATA: OnceLock<TempDir> = OnceLock::new();
    DATA.get_or_init(|| {
        let dir = TempDir::new("columnar-data");
        let run = run_bounded(
            &mut tf::script("columnar.py", &["make", dir.path()]),
            Duration::from_secs(300),
        );
        assert_ran("columnar.py make", &run);
        dir
    })
}

/// A dispatcher and `n` workers, all allowed to read the data directory.
fn cluster(n: usize) -> (Dispatcher, Vec<Worker>) {
    let dir = data().path().to_owned();
    let d = Dispatcher::start(&["--data-root", &dir]);
    let workers = (0..n)
        .map(|_| Worker::start(&d.url, &["--data-root", &dir, "--heartbeat-interval", "200ms"]))
        .collect();
    (d, workers)
}

const IMAGE: &str = r#"{"name": "image", "dtype": "float32", "shape": [2, 3, 2]}"#;

fn files(paths: &[&str], format: &str, extra: Value) -> Value {
    let dir = data().path();
    let paths: Vec<String> = paths.iter().map(|p| format!("{dir}/{p}")).collect();
    let mut files = json!({"paths": paths, "format": format});
    for (k, v) in extra.as_object().expect("an object") {
        files[k] = v.clone();
    }
    json!({"source": {"files": files}})
}

fn image() -> Value {
    serde_json::from_str(IMAGE).expect("JSON")
}

/// The datasets of the tests, with the ids their rows hold.
fn datasets() -> Vec<(&'static str, Value, Vec<i64>)> {
    let parquet = ["images-0.parquet", "images-1.parquet"];
    vec![
        (
            "parquet split by rows",
            files(&parquet, "parquet", json!({"split": "rows", "tensors": [image()]})),
            (0..50).collect(),
        ),
        (
            "parquet split by files",
            files(&parquet, "parquet", json!({"columns": ["image", "id"]})),
            (0..50).collect(),
        ),
        (
            "arrow",
            files(&["images.arrow"], "arrow", json!({"tensors": [image()]})),
            (100..120).collect(),
        ),
        (
            "tfrecord",
            files(
                &["examples.tfrecord"],
                "tfrecord",
                json!({"tensors": [{"name": "id", "dtype": "int64"}, image(),
                                   {"name": "label", "dtype": "string"}]}),
            ),
            (300..315).collect(),
        ),
    ]
}

/// What `columnar.py read` printed.
fn pyarrow_read(dispatcher: &str, dataset: &Value, extra: &[&str]) -> Value {
    let text = dataset.to_string();
    let mut args = vec!["read", dispatcher, &text, "--split-size", "5", "--max", "8"];
    args.extend_from_slice(extra);
    let run = run_bounded(&mut tf::script("columnar.py", &args), Duration::from_secs(180));
    assert_ran("columnar.py read", &run);
    let line = run.stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

fn sorted_ids(read: &Value) -> Vec<i64> {
    let mut ids: Vec<i64> =
        read["ids"].as_array().expect("ids").iter().map(|v| v.as_i64().expect("an id")).collect();
    ids.sort_unstable();
    ids
}

#[test]
fn pyarrow_reads_every_row_exactly_once_from_two_workers() {
    let (d, _workers) = cluster(2);
    for (name, dataset, want) in datasets() {
        let read = pyarrow_read(&d.url, &dataset, &[]);
        assert_eq!(sorted_ids(&read), want, "{name}: every row exactly once");
        assert!(read["batches"].as_u64().unwrap() >= 2, "{name}: {read}");
        assert_eq!(read["zero_copy"], true, "{name}: tensors without a copy");
        assert_eq!(read["values_ok"], true, "{name}: each image holds what its id says");
    }
    // Compressed streams (Arrow IPC's lz4 and zstd) read the same.
    let (_, dataset, want) = datasets().swap_remove(0);
    for compression in ["lz4", "zstd"] {
        let read = pyarrow_read(&d.url, &dataset, &["--compression", compression]);
        assert_eq!(sorted_ids(&read), want, "{compression}");
        assert_eq!(read["values_ok"], true, "{compression}");
    }
}

fn options() -> DistributeOptions {
    DistributeOptions {
        processing_mode: ProcessingMode::Named(NamedMode::DistributedEpoch),
        split_size: Some(5),
        elements_per_request: 8,
        unknown_task_timeout: Duration::from_secs(30),
        ..shardwise_tests::fast_options()
    }
}

/// Every element of a JSON read of `dataset`, or the read's error.
fn json_read(url: &str, dataset: &Value) -> Result<Vec<Value>, String> {
    let def = DatasetDef::from_json(dataset).expect("a valid dataset");
    runtime().block_on(async {
        let mut stream = distribute(url, def, options());
        let mut out = Vec::new();
        loop {
            let next = tokio::time::timeout(Duration::from_secs(60), stream.next())
                .await
                .expect("an element or the end within 60 s");
            match next {
                None => return Ok(out),
                Some(Ok(v)) => out.push(v),
                Some(Err(e)) => return Err(e.to_string()),
            }
        }
    })
}

#[test]
fn the_json_route_serves_the_same_rows_as_objects() {
    let (d, _workers) = cluster(2);
    for (name, dataset, want) in datasets() {
        let rows = json_read(&d.url, &dataset).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().expect("an id")).collect();
        ids.sort_unstable();
        assert_eq!(ids, want, "{name}");
        for row in &rows {
            let id = row["id"].as_f64().expect("an id");
            // The tensor as nested arrays of its shape, value k at flat position k.
            let image = &row["image"];
            let flat: Vec<f64> = image
                .as_array()
                .expect("[2][3][2]")
                .iter()
                .flat_map(|a| a.as_array().expect("[3][2]").iter())
                .flat_map(|a| a.as_array().expect("[2]").iter())
                .map(|v| v.as_f64().expect("a number"))
                .collect();
            let expect: Vec<f64> = (0..12).map(|k| id + 0.5 * f64::from(k)).collect();
            assert_eq!(flat, expect, "{name}: {row}");
            if let Some(label) = row.get("label") {
                assert_eq!(label, &json!(format!("row-{id}")), "{name}");
            }
        }
    }
}

#[test]
fn bad_files_are_task_errors_and_the_workers_go_on() {
    let (d, _workers) = cluster(2);
    let bad = files(&["bad-schema.parquet"], "parquet", json!({"tensors": [image()]}));
    let err = json_read(&d.url, &bad).expect_err("a schema that disagrees fails the read");
    assert!(err.contains("bad-schema.parquet"), "names the file: {err}");
    assert!(err.contains("column \"image\""), "names the column: {err}");
    assert!(err.contains("float32") && err.contains("[2, 3, 2]"), "says what was declared: {err}");

    let corrupt = files(&["corrupt.tfrecord"], "tfrecord", json!({}));
    let err = json_read(&d.url, &corrupt).expect_err("a corrupted record fails the read");
    assert!(err.contains("corrupt.tfrecord") && err.contains("record 2"), "{err}");
    assert!(err.to_lowercase().contains("crc"), "{err}");

    // A file the worker may not read is refused like any other path outside its roots.
    let outside = json!({"source": {"files": {"paths": ["/etc/hostname"], "format": "parquet"}}});
    let err = json_read(&d.url, &outside).expect_err("outside the data roots");
    assert!(err.contains("not a readable file under this worker's data roots"), "{err}");

    // The same workers serve the next read.
    let (name, dataset, want) = datasets().swap_remove(2);
    let rows = json_read(&d.url, &dataset).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().expect("an id")).collect();
    ids.sort_unstable();
    assert_eq!(ids, want);
}
