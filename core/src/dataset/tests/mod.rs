//! Definition, scenario and property tests of the dataset module, by feature; here the
//! helpers they share.

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

mod caller;
mod columnar;
mod definitions;
mod files;
mod origins;
mod outputs;
mod properties;
mod scenarios;
mod transforms;

fn def(text: &str) -> DatasetDef {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn def_json(value: Value) -> DatasetDef {
    DatasetDef::from_json(&value).unwrap_or_else(|e| panic!("{value}: {e}"))
}

fn range(stop: i64) -> DatasetDef {
    def_json(json!({"source": {"range": {"stop": stop}}}))
}

fn with(mut base: DatasetDef, transforms: Value) -> DatasetDef {
    let Value::Array(items) = transforms else { panic!("transforms must be an array") };
    base.transforms.extend(items.iter().map(|t| TransformDef::from_json(t).unwrap()));
    base
}

/// The JSON values of a batch of elements (panics on rows), with the step that stopped it.
fn values((elements, step): (Vec<Element>, Option<Step>)) -> (Vec<Value>, Option<Step>) {
    let values = elements.into_iter().map(|e| e.into_value().expect("a JSON element")).collect();
    (values, step)
}

fn ints(values: impl IntoIterator<Item = i64>) -> Vec<Value> {
    values.into_iter().map(Value::from).collect()
}

type Files = HashMap<String, Vec<u8>>;

/// Rows per chunk of the fake columnar files.
const FAKE_CHUNK_ROWS: u64 = 3;

/// Serves a pipeline's request for rows of a fake columnar file: `files` holds its row count
/// as decimal text, its row `i` is `{"file": path, "row": i}`, and chunks hold
/// [`FAKE_CHUNK_ROWS`] rows (the payload is the rows as JSON values).
fn provide_fake_rows(p: &mut Pipeline, files: &Files, req: &RowsRequest) {
    let text = std::str::from_utf8(&files[&req.path]).unwrap();
    let n: u64 = text.trim().parse().unwrap();
    let stop = req.stop.unwrap_or(n).min(n);
    let end = (req.start + FAKE_CHUNK_ROWS).min(stop);
    let rows: Vec<Value> =
        (req.start.min(end)..end).map(|i| json!({"file": req.path, "row": i})).collect();
    let count = rows.len() as u64;
    let chunk = Chunk::new(count, count * 100, std::sync::Arc::new(rows));
    p.provide_rows(&req.path, chunk, end >= stop);
}

/// An element as JSON: a value as it is, a fake row as its JSON value, a batch of rows as an
/// array of them.
fn json_of(element: Element) -> Value {
    let row = |r: &Row| {
        let rows: &Vec<Value> = r.chunk.data().downcast_ref().expect("a fake chunk");
        rows[usize::try_from(r.index).unwrap()].clone()
    };
    match element {
        Element::Value(v) => v,
        Element::Row(r) => row(&r),
        Element::Rows(rows) => Value::Array(rows.iter().map(row).collect()),
    }
}

const NONE: [Value; 0] = [];

/// Runs a non-DYNAMIC pipeline to its end, answering file requests from `files`.
fn run_with(
    def: &DatasetDef,
    sharding: Sharding,
    files: &Files,
) -> Result<Vec<Value>, DatasetError> {
    let mut pipeline = Pipeline::new(def, sharding)?;
    let mut out = Vec::new();
    for _ in 0..1_000_000 {
        match pipeline.next() {
            Step::Element(e) => out.push(json_of(e)),
            Step::NeedFile { path } => pipeline.provide_file(&path, &files[&path]),
            Step::NeedRows(r) => provide_fake_rows(&mut pipeline, files, &r),
            Step::NeedOutputs(_) => panic!("only a producer's pipeline asks for outputs"),
            Step::NeedSplit { .. } => panic!("a static pipeline asked for a split"),
            Step::Yield => {}
            Step::End => return Ok(out),
            Step::Error(e) => return Err(e),
        }
    }
    panic!("pipeline did not finish");
}

fn run(def: &DatasetDef, sharding: Sharding) -> Result<Vec<Value>, DatasetError> {
    run_with(def, sharding, &Files::new())
}

fn run_off(def: &DatasetDef) -> Vec<Value> {
    run(def, Sharding::Off).unwrap()
}

/// A stand-in for the dispatcher's split provider of one iteration, with TensorFlow's
/// GetSplit rules (reference §3.11) and nothing but counters.
struct SplitDispatcher {
    source: SourceDef,
    split_size: u64,
    current: u64,
    index: u64,
}

impl SplitDispatcher {
    fn new(def: &DatasetDef, split_size: u64) -> Self {
        SplitDispatcher { source: def.source.clone(), split_size, current: 0, index: 0 }
    }

    fn get_split(&mut self, repetition: u64) -> Option<Value> {
        if repetition < self.current {
            return None;
        }
        if repetition > self.current {
            self.current = repetition;
            self.index = 0;
        }
        match split_at(&self.source, self.split_size, self.index) {
            Some(split) => {
                self.index += 1;
                Some(split)
            }
            None => {
                self.current += 1;
                self.index = 0;
                None
            }
        }
    }
}

/// Drives `workers` DYNAMIC pipelines round-robin (one step each per turn) against one shared
/// split provider until all end, or until `limit` elements were produced in total.
fn run_dynamic_limited(
    def: &DatasetDef,
    workers: usize,
    split_size: u64,
    files: &Files,
    limit: usize,
) -> Vec<Vec<Value>> {
    let mut dispatcher = SplitDispatcher::new(def, split_size);
    let mut pipelines: Vec<Pipeline> =
        (0..workers).map(|_| Pipeline::new(def, Sharding::Dynamic).unwrap()).collect();
    let mut outputs = vec![Vec::new(); workers];
    let mut done = vec![false; workers];
    let mut total = 0;
    for _ in 0..10_000_000 {
        if done.iter().all(|d| *d) || total >= limit {
            return outputs;
        }
        for w in 0..workers {
            if done[w] || total >= limit {
                continue;
            }
            match pipelines[w].next() {
                Step::Element(e) => {
                    outputs[w].push(json_of(e));
                    total += 1;
                }
                Step::NeedRows(r) => provide_fake_rows(&mut pipelines[w], files, &r),
                Step::NeedOutputs(_) => panic!("only a producer's pipeline asks for outputs"),
                Step::NeedSplit { repetition } => {
                    let split = dispatcher.get_split(repetition);
                    pipelines[w].provide_split(repetition, split);
                }
                Step::NeedFile { path } => pipelines[w].provide_file(&path, &files[&path]),
                Step::Yield => {}
                Step::End => done[w] = true,
                Step::Error(e) => panic!("worker {w}: {e}"),
            }
        }
    }
    panic!("dynamic run did not finish");
}

fn run_dynamic(def: &DatasetDef, workers: usize, split_size: u64) -> Vec<Vec<Value>> {
    run_dynamic_limited(def, workers, split_size, &Files::new(), usize::MAX)
}

fn sorted_ints(outputs: &[Vec<Value>]) -> Vec<i64> {
    let mut all: Vec<i64> = outputs.iter().flatten().map(|v| v.as_i64().unwrap()).collect();
    all.sort_unstable();
    all
}

fn copies(n: usize, values: impl Iterator<Item = i64> + Clone) -> Vec<i64> {
    let mut all: Vec<i64> = (0..n).flat_map(|_| values.clone()).collect();
    all.sort_unstable();
    all
}

fn data(num_workers: u64, worker_index: u64) -> Sharding {
    Sharding::Data { num_workers, worker_index }
}

const HINT_MESSAGE: &str =
    "tf.data service with `tf.data.experimental.service.ShardingPolicy.HINT` processing mode.";

/// Five text files: file i holds i + 1 lines, each "i" (SV-05).
fn five_files() -> (DatasetDef, Files) {
    let paths: Vec<String> = (0..5).map(|i| format!("/data/f{i}.txt")).collect();
    let files = paths
        .iter()
        .enumerate()
        .map(|(i, p)| (p.clone(), format!("{i}\n").repeat(i + 1).into_bytes()))
        .collect();
    (def_json(json!({"source": {"files": {"paths": paths, "format": "lines"}}})), files)
}

/// `n` files of 10 records each, record j of file i being `10 * i + j`, as JSON Lines.
fn record_files(n: usize) -> (DatasetDef, Files) {
    let paths: Vec<String> = (0..n).map(|i| format!("r{i}.jsonl")).collect();
    let files = paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let text: String = (0..10).map(|j| format!("{}\n", 10 * i + j)).collect();
            (p.clone(), text.into_bytes())
        })
        .collect();
    (def_json(json!({"source": {"files": {"paths": paths, "format": "jsonl"}}})), files)
}
