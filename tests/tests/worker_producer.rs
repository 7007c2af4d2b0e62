//! A worker whose own producer makes each split's outputs (`shardwise_worker::start_with_producer`,
//! what a Python worker's `fn(split)` runs on), embedded in this process, against a real
//! dispatcher process, read by the Rust client: every output of a `distributed_epoch` read
//! exactly once with read positions, a read stopped part way resumed without an output twice
//! (the producer runs the split from its start, the worker drops what was consumed), rows
//! served as Arrow, a producer's error failing its task with its text, and what a producer
//! cannot serve refused with a reason.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use futures::StreamExt;
use serde_json::{Value, json};
use shardwise_core::Code;
use shardwise_core::dataset::{Chunk, DatasetDef, Outputs};
use shardwise_core::dispatch::wire::{NamedMode, ProcessingMode, TaskDef};
use shardwise_core::position::{ReadPosition, SplitPositions};
use shardwise_core::worker::TaskError;
use shardwise_gateway::client::{DistributeOptions, distribute, distribute_batches};
use shardwise_gateway::worker::producer::{Producer, SplitOutputs};
use shardwise_gateway::worker::{WorkerArgs, start_with_producer};
use shardwise_tests::{Dispatcher, ok, poll_until, runtime};

/// Each element `x` of a range split becomes `{"x": x, "sq": x * x}`, two outputs per chunk;
/// a split holding 13 fails with "unlucky"; as rows, one record batch of the split's `x`.
struct Squares {
    rows: bool,
    started: Arc<AtomicU64>,
}

struct Running {
    xs: std::vec::IntoIter<i64>,
    rows: bool,
}

impl Producer for Squares {
    fn start(
        &self,
        _task: &TaskDef,
        split: &Value,
        _positions: Option<&SplitPositions>,
    ) -> Result<Box<dyn SplitOutputs>, TaskError> {
        self.started.fetch_add(1, Ordering::Relaxed);
        let (start, stop) = (split["start"].as_i64(), split["stop"].as_i64());
        let (Some(start), Some(stop)) = (start, stop) else {
            return Err(TaskError::new(
                Code::InvalidArgument,
                format!("not a range split: {split}"),
            ));
        };
        let xs: Vec<i64> = (start..stop).collect();
        if xs.contains(&13) {
            return Err(TaskError::new(Code::InvalidArgument, "unlucky: 13"));
        }
        Ok(Box::new(Running { xs: xs.into_iter(), rows: self.rows }))
    }
}

impl SplitOutputs for Running {
    fn next(&mut self) -> Result<(Outputs, bool), TaskError> {
        let chunk: Vec<i64> = self.xs.by_ref().take(2).collect();
        let last = self.xs.len() == 0;
        if self.rows {
            let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
            let column = Arc::new(Int64Array::from(chunk.clone()));
            let batch = RecordBatch::try_new(schema, vec![column]).unwrap();
            let n = chunk.len() as u64;
            return Ok((Outputs::Rows(Chunk::new(n, n * 8, Arc::new(batch))), last));
        }
        let values = chunk.iter().map(|x| json!({"x": x, "sq": x * x})).collect();
        Ok((Outputs::Values(values), last))
    }
}

fn range(n: i64) -> DatasetDef {
    DatasetDef::from_json(&json!({"source": {"range": {"stop": n}}})).unwrap()
}

fn options(resume_from: Option<ReadPosition>) -> DistributeOptions {
    DistributeOptions {
        processing_mode: ProcessingMode::Named(NamedMode::DistributedEpoch),
        split_size: Some(5),
        elements_per_request: 3,
        resume_from,
        ..shardwise_tests::fast_options()
    }
}

/// A dispatcher process and `n` producing workers on this process's runtime.
fn cluster(
    rt: &tokio::runtime::Runtime,
    n: usize,
    rows: bool,
) -> (Dispatcher, Vec<shardwise_gateway::http::Running>, Arc<AtomicU64>) {
    let d = Dispatcher::start(&[]);
    let started = Arc::new(AtomicU64::new(0));
    let workers = (0..n)
        .map(|_| {
            let producer = Arc::new(Squares { rows, started: Arc::clone(&started) });
            let args = WorkerArgs {
                heartbeat_interval: Duration::from_millis(200),
                ..WorkerArgs::new(d.url.clone())
            };
            rt.block_on(start_with_producer(args, producer)).expect("the worker starts")
        })
        .collect();
    poll_until("the workers registered", Duration::from_secs(20), || {
        let w = ok(&d.call("GET", "/v1/workers", None));
        if w["workers"].as_array().is_some_and(|w| w.len() == n) {
            Ok(())
        } else {
            Err(w.to_string())
        }
    });
    (d, workers, started)
}

fn xs(values: &[Value]) -> Vec<i64> {
    let mut xs: Vec<i64> = values
        .iter()
        .map(|v| {
            assert_eq!(v["sq"].as_i64(), v["x"].as_i64().map(|x| x * x), "{v}");
            v["x"].as_i64().unwrap()
        })
        .collect();
    xs.sort_unstable();
    xs
}

/// The error a JSON read of `ds` ends with (panics if it ends without one).
async fn error_of(url: &str, ds: DatasetDef) -> shardwise_gateway::client::ClientError {
    let mut s = distribute(url, ds, options(None));
    while let Some(item) = s.next().await {
        if let Err(e) = item {
            return e;
        }
    }
    panic!("the read ended without an error")
}

#[test]
fn every_output_comes_once_and_a_stopped_read_resumes_without_one_twice() {
    let rt = runtime();
    let (d, _workers, started) = cluster(&rt, 2, false);
    let (before, position) = rt.block_on(async {
        let mut s = distribute(&d.url, range(12), options(None));
        let mut got = Vec::new();
        // 7 outputs: part way through the second split some worker produces.
        for _ in 0..7 {
            got.push(s.next().await.expect("more").expect("no error"));
        }
        (got, s.position().expect("a position"))
    });
    assert!(started.load(Ordering::Relaxed) >= 2);
    let after = rt.block_on(async {
        let mut s = distribute(&d.url, range(12), options(Some(position)));
        let mut got = Vec::new();
        while let Some(v) = s.next().await {
            got.push(v.expect("no error"));
        }
        got
    });
    let all: Vec<Value> = before.into_iter().chain(after).collect();
    assert_eq!(xs(&all), (0..12).collect::<Vec<_>>(), "each output once over both reads");
}

#[test]
fn rows_are_served_as_arrow_and_a_producers_error_fails_its_task() {
    let rt = runtime();
    let (d, _workers, _) = cluster(&rt, 1, true);
    let xs = rt.block_on(async {
        let mut s = distribute_batches(&d.url, range(11), options(None));
        let mut xs = Vec::new();
        while let Some(b) = s.next().await {
            let b = b.expect("no error");
            let column = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            xs.extend(column.values().iter().copied());
            assert!(column.null_count() == 0);
        }
        xs.sort_unstable();
        xs
    });
    assert_eq!(xs, (0..11).collect::<Vec<_>>());
    // Range 20 has a split holding 13: its task fails with the producer's words.
    let err = rt.block_on(error_of(&d.url, range(20)));
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.to_string().contains("unlucky: 13"), "{err}");
}

#[test]
fn what_a_producer_cannot_serve_is_refused_with_its_reason() {
    let rt = runtime();
    let (d, _workers, _) = cluster(&rt, 1, false);
    let with_take = DatasetDef::from_json(
        &json!({"source": {"range": {"stop": 10}}, "transforms": [{"take": 3}]}),
    )
    .unwrap();
    let err = rt.block_on(error_of(&d.url, with_take));
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    assert!(err.to_string().contains("runs no transforms"), "{err}");
    // JSON values asked for as Arrow: 406, nothing taken (read as JSON, all of them come).
    let got = rt.block_on(async {
        let mut s = distribute_batches(&d.url, range(4), options(None));
        let e = s.next().await.expect("an item").expect_err("JSON values are not rows");
        assert!(e.to_string().contains("406") || e.to_string().contains("JSON values"), "{e}");
        let mut j =
            distribute(&d.url, range(4), DistributeOptions { job_name: None, ..options(None) });
        let mut got = Vec::new();
        while let Some(v) = j.next().await {
            got.push(v.expect("no error"));
        }
        got
    });
    assert_eq!(xs(&got), [0, 1, 2, 3]);
}
