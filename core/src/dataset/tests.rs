//! Definition, scenario and property tests of the dataset module.

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

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

fn ints(values: impl IntoIterator<Item = i64>) -> Vec<Value> {
    values.into_iter().map(Value::from).collect()
}

type Files = HashMap<String, Vec<u8>>;

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
            Step::Element(v) => out.push(v),
            Step::NeedFile { path } => pipeline.provide_file(&path, &files[&path]),
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
                Step::Element(v) => {
                    outputs[w].push(v);
                    total += 1;
                }
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

// ---------------------------------------------------------------------------------------------
// Definitions
// ---------------------------------------------------------------------------------------------

#[test]
fn defaults_are_filled_in() {
    let d = def(r#"{"source": {"range": {"stop": 5}}}"#);
    assert!(d.transforms.is_empty());
    let SourceDef::Range(r) = d.source else { panic!() };
    assert_eq!((r.start, r.stop, r.step.get()), (0, 5, 1));
    assert_eq!(
        d.to_json(),
        json!({"source": {"range": {"start": 0, "stop": 5, "step": 1}}, "transforms": []})
    );
    let d = def(r#"{"source": {"list": {"elements": []}},
                   "transforms": [{"batch": {"size": 2}}, {"repeat": null}]}"#);
    assert_eq!(
        d.transforms,
        [
            TransformDef::Batch(BatchDef {
                size: std::num::NonZeroU64::new(2).unwrap(),
                drop_remainder: false
            }),
            TransformDef::Repeat(None)
        ]
    );
}

#[test]
fn every_kind_round_trips() {
    let canonical = json!({
        "source": {"files": {"paths": ["a.txt", "b.txt"], "format": "jsonl"}},
        "transforms": [
            {"repeat": 3}, {"repeat": null}, {"take": 7}, {"skip": 0},
            {"shuffle": {"buffer": 10, "seed": 18446744073709551615u64}},
            {"batch": {"size": 4, "drop_remainder": true}}, {"shard_hint": {}}
        ]
    });
    let d = def_json(canonical.clone());
    assert_eq!(d.to_json(), canonical);
    assert_eq!(serde_json::to_value(&d).unwrap(), canonical);
    assert_eq!(serde_json::from_value::<DatasetDef>(canonical.clone()).unwrap(), d);
    assert_eq!(d.to_json().to_string().parse::<DatasetDef>().unwrap(), d);
    for source in [
        json!({"range": {"start": -3, "stop": -30, "step": -4}}),
        json!({"list": {"elements": [1, "two", [3], {"four": 4}, null]}}),
        json!({"files": {"paths": [], "format": "bytes"}}),
        json!({"files": {"paths": ["x"], "format": "lines"}}),
        json!({"splits": {"items": ["gs://b/0", {"uri": "gs://b/1"}]}}),
    ] {
        let d = def_json(json!({"source": source}));
        assert_eq!(d.source.to_json(), source);
        assert_eq!(serde_json::from_value::<SourceDef>(source.clone()).unwrap(), d.source);
        assert_eq!(DatasetDef::from_json(&d.to_json()).unwrap(), d);
    }
}

#[test]
fn key_order_of_list_elements_is_preserved() {
    let d = def(r#"{"source": {"list": {"elements": [{"z": 1, "a": 2}]}}}"#);
    assert_eq!(
        d.to_json().to_string(),
        r#"{"source":{"list":{"elements":[{"z":1,"a":2}]}},"transforms":[]}"#
    );
}

#[test]
fn every_definition_error_names_its_path() {
    let range = json!({"range": {"stop": 3}});
    let cases: Vec<(Value, &str)> = vec![
        (json!([]), "dataset definition must be an object, got an array"),
        (json!({}), "dataset definition is missing \"source\""),
        (
            json!({"source": range, "sorce": 1}),
            "dataset definition has an unknown field \"sorce\"; expected \"source\" or \"transforms\"",
        ),
        (
            json!({"source": 5}),
            "source must be an object with exactly one key (\"range\", \"list\", \"files\" or \"splits\"), got 5",
        ),
        (
            json!({"source": {}}),
            "source must be an object with exactly one key (\"range\", \"list\", \"files\" or \"splits\"), got 0 keys",
        ),
        (
            json!({"source": {"range": {"stop": 1}, "list": {"elements": []}}}),
            "source must be an object with exactly one key (\"range\", \"list\", \"files\" or \"splits\"), got 2 keys",
        ),
        (
            json!({"source": {"ranges": {"stop": 1}}}),
            "source: unknown source type \"ranges\"; expected \"range\", \"list\", \"files\" or \"splits\"",
        ),
        (json!({"source": {"range": [1]}}), "source.range must be an object, got an array"),
        (
            json!({"source": {"range": {"stop": 1, "stpe": 2}}}),
            "source.range has an unknown field \"stpe\"; expected \"start\", \"stop\" or \"step\"",
        ),
        (json!({"source": {"range": {"start": 1}}}), "source.range.stop is required"),
        (json!({"source": {"range": {"stop": 1, "step": 0}}}), "source.range.step must not be 0"),
        (
            json!({"source": {"range": {"start": "0", "stop": 1}}}),
            "source.range.start must be a 64-bit signed integer, got a string",
        ),
        (
            json!({"source": {"range": {"stop": 1.5}}}),
            "source.range.stop must be a 64-bit signed integer, got 1.5",
        ),
        (
            json!({"source": {"range": {"stop": 9223372036854775808u64}}}),
            "source.range.stop must be a 64-bit signed integer, got 9223372036854775808",
        ),
        (json!({"source": {"list": {}}}), "source.list.elements is required"),
        (
            json!({"source": {"list": {"elements": {}}}}),
            "source.list.elements must be an array, got an object",
        ),
        (
            json!({"source": {"files": {"paths": ["a", 1], "format": "lines"}}}),
            "source.files.paths[1] must be a string, got 1",
        ),
        (json!({"source": {"files": {"paths": []}}}), "source.files.format is required"),
        (
            json!({"source": {"files": {"paths": [], "format": "csv"}}}),
            "source.files.format must be one of \"lines\", \"jsonl\" or \"bytes\", got \"csv\"",
        ),
        (
            json!({"source": {"files": {"paths": [], "format": null}}}),
            "source.files.format must be one of \"lines\", \"jsonl\" or \"bytes\", got null",
        ),
        (json!({"source": {"files": {"format": "lines"}}}), "source.files.paths is required"),
        (
            json!({"source": {"splits": {"items": "x"}}}),
            "source.splits.items must be an array, got a string",
        ),
        (
            json!({"source": {"splits": {"items": [], "more": 1}}}),
            "source.splits has an unknown field \"more\"; expected \"items\"",
        ),
        (json!({"source": range, "transforms": {}}), "transforms must be an array, got an object"),
        (json!({"source": range, "transforms": null}), "transforms must be an array, got null"),
        (
            json!({"source": range, "transforms": [{"take": 1, "skip": 1}]}),
            "transforms[0] must be an object with exactly one key (\"repeat\", \"take\", \"skip\", \"shuffle\", \"batch\" or \"shard_hint\"), got 2 keys",
        ),
        (
            json!({"source": range, "transforms": [{"take": 1}, "take"]}),
            "transforms[1] must be an object with exactly one key",
        ),
        (
            json!({"source": range, "transforms": [{"tkae": 1}]}),
            "transforms[0]: unknown transform \"tkae\"",
        ),
        (
            json!({"source": range, "transforms": [{"take": -1}]}),
            "transforms[0].take must be a non-negative integer, got -1",
        ),
        (
            json!({"source": range, "transforms": [{"skip": "1"}]}),
            "transforms[0].skip must be a non-negative integer, got a string",
        ),
        (
            json!({"source": range, "transforms": [{"repeat": -2}]}),
            "transforms[0].repeat must be a non-negative integer or null (forever), got -2",
        ),
        (
            json!({"source": range, "transforms": [{"take": 1}, {"take": 1}, {"batch": {"size": 0}}]}),
            "transforms[2].batch.size must be at least 1",
        ),
        (
            json!({"source": range, "transforms": [{"batch": {"size": -4}}]}),
            "transforms[0].batch.size must be at least 1",
        ),
        (
            json!({"source": range, "transforms": [{"batch": {"size": 2.5}}]}),
            "transforms[0].batch.size must be a positive integer, got 2.5",
        ),
        (
            json!({"source": range, "transforms": [{"batch": {}}]}),
            "transforms[0].batch.size is required",
        ),
        (
            json!({"source": range, "transforms": [{"batch": 3}]}),
            "transforms[0].batch must be an object, got 3",
        ),
        (
            json!({"source": range, "transforms": [{"batch": {"size": 1, "drop_remainder": "yes"}}]}),
            "transforms[0].batch.drop_remainder must be a boolean, got a string",
        ),
        (
            json!({"source": range, "transforms": [{"batch": {"size": 1, "drop": true}}]}),
            "transforms[0].batch has an unknown field \"drop\"; expected \"size\" or \"drop_remainder\"",
        ),
        (
            json!({"source": range, "transforms": [{"shuffle": {"buffer": 0, "seed": 1}}]}),
            "transforms[0].shuffle.buffer must be at least 1",
        ),
        (
            json!({"source": range, "transforms": [{"shuffle": {"buffer": 1}}]}),
            "transforms[0].shuffle.seed is required",
        ),
        (
            json!({"source": range, "transforms": [{"shuffle": {"buffer": 1, "seed": -1}}]}),
            "transforms[0].shuffle.seed must be a non-negative integer, got -1",
        ),
        (
            json!({"source": range, "transforms": [{"shard_hint": {"n": 1}}]}),
            "transforms[0].shard_hint has an unknown field \"n\"; it takes no fields",
        ),
        (
            json!({"source": range, "transforms": [{"shard_hint": null}]}),
            "transforms[0].shard_hint must be an object, got null",
        ),
    ];
    for (input, expected) in cases {
        let err = DatasetDef::from_json(&input).expect_err(&input.to_string());
        assert_eq!(err.code(), "INVALID_ARGUMENT", "{input}");
        assert!(err.message().starts_with(expected), "{input}\n  got:  {err}\n  want: {expected}");
        let serde_err = serde_json::from_value::<DatasetDef>(input.clone()).unwrap_err();
        assert!(serde_err.to_string().starts_with(expected), "{serde_err}");
    }
}

#[test]
fn transform_limit() {
    let ok = json!({"source": {"range": {"stop": 1}}, "transforms": vec![json!({"skip": 0}); MAX_TRANSFORMS]});
    assert_eq!(DatasetDef::from_json(&ok).unwrap().transforms.len(), MAX_TRANSFORMS);
    let too_many = json!({"source": {"range": {"stop": 1}}, "transforms": vec![json!({"skip": 0}); MAX_TRANSFORMS + 1]});
    let err = DatasetDef::from_json(&too_many).unwrap_err();
    assert_eq!(err.message(), "transforms has 10001 entries; at most 10000 are allowed");
    // A definition built in code is checked by the pipeline.
    let mut big = range(1);
    big.transforms = vec![TransformDef::Skip(0); MAX_TRANSFORMS + 1];
    assert_eq!(Pipeline::new(&big, Sharding::Off).unwrap_err(), err);
}

/// Issue 11, point 3: `{"repeat": null}` then a shuffle of 2^64 - 1 made a worker allocate
/// until it aborted. Counts that size a buffer are bounded by `validate` (which the dispatcher
/// applies at registration and a pipeline when it is built), not by decoding, so that a journal
/// written before the bounds still replays.
#[test]
fn buffer_sizes_are_bounded_at_validation() {
    let issue = json!({"source": {"range": {"stop": 10}}, "transforms": [
        {"repeat": null}, {"shuffle": {"buffer": u64::MAX, "seed": 1}}]});
    let d = DatasetDef::from_json(&issue).expect("decoding does not apply the bounds");
    let err = d.validate().unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    assert_eq!(
        err.message(),
        "transforms[1].shuffle.buffer is 18446744073709551615; at most 1000000 elements are allowed"
    );
    assert_eq!(Pipeline::new(&d, Sharding::Off).unwrap_err(), err);
    assert_eq!(validate_sharding(&d, Sharding::Dynamic).unwrap_err(), err);

    let batch = |size: u64| {
        def_json(
            json!({"source": {"range": {"stop": 1}}, "transforms": [{"take": 1}, {"batch": {"size": size}}]}),
        )
    };
    assert_eq!(batch(MAX_BUFFER_ELEMENTS).validate(), Ok(()));
    assert_eq!(
        batch(MAX_BUFFER_ELEMENTS + 1).validate().unwrap_err().message(),
        "transforms[1].batch.size is 1000001; at most 1000000 elements are allowed"
    );
    let shuffle = |buffer: u64| {
        def_json(
            json!({"source": {"range": {"stop": 1}}, "transforms": [{"shuffle": {"buffer": buffer, "seed": 0}}]}),
        )
    };
    assert_eq!(shuffle(MAX_BUFFER_ELEMENTS).validate(), Ok(()));
    assert!(shuffle(MAX_BUFFER_ELEMENTS + 1).validate().is_err());

    // Batches nest: at most 32 of them, so elements stay decodable (serde_json: 128 levels).
    let batches = |n: usize| {
        let mut d = range(1);
        d.transforms = vec![TransformDef::from_json(&json!({"batch": {"size": 1}})).unwrap(); n];
        d
    };
    assert_eq!(batches(MAX_BATCH_TRANSFORMS).validate(), Ok(()));
    let err = batches(MAX_BATCH_TRANSFORMS + 1).validate().unwrap_err();
    assert!(err.message().starts_with("transforms has 33 batch transforms; at most 32"), "{err}");
    let deepest = run_off(&batches(MAX_BATCH_TRANSFORMS));
    let text = serde_json::to_string(&deepest).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), Value::Array(deepest));

    // Huge counts that size nothing stay valid and are lazy.
    let lazy = def_json(json!({"source": {"range": {"start": i64::MIN, "stop": i64::MAX}},
        "transforms": [{"repeat": u64::MAX}, {"skip": 3}, {"take": u64::MAX}, {"batch": {"size": 2}}, {"take": 2}]}));
    assert_eq!(lazy.validate(), Ok(()));
    assert_eq!(
        run_off(&lazy),
        [json!([i64::MIN + 3, i64::MIN + 4]), json!([i64::MIN + 5, i64::MIN + 6])]
    );
}

/// The dispatcher refuses an unbounded definition at registration (400 INVALID_ARGUMENT over
/// HTTP), while a journal holding one (written before the bounds) still replays.
#[test]
fn registration_refuses_unbounded_buffers_and_old_records_replay() {
    use crate::dispatch::framing::segment_header;
    use crate::dispatch::journal::{decode_updates, encode_update};
    use crate::dispatch::state::Update;
    use crate::dispatch::types::Millis;
    use crate::dispatch::{Dispatcher, DispatcherConfig, Driver, RegisterDataset, VecSink};
    let issue = json!({"dataset": {"source": {"range": {"stop": 10}}, "transforms": [
        {"repeat": null}, {"shuffle": {"buffer": u64::MAX, "seed": 1}}]}});
    let req: RegisterDataset = serde_json::from_value(issue.clone()).unwrap();
    let d = Dispatcher::new(DispatcherConfig::default(), "t".into(), Millis(0)).unwrap();
    let mut d = Driver::new(d, VecSink::default());
    d.flush();
    let journaled = d.sink().records.len();
    let err = d.call(Millis(0), req.clone()).unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    assert!(
        err.to_string().contains("transforms[1].shuffle.buffer is 18446744073709551615"),
        "{err}"
    );
    assert_eq!(d.sink().records.len(), journaled, "nothing was journaled");

    let old = Update::RegisterDataset {
        dataset_id: "1000".into(),
        def: req.dataset.clone(),
        metadata: Value::Null,
    };
    let mut seg = segment_header().to_vec();
    encode_update(&old, &mut seg).unwrap();
    assert_eq!(decode_updates(&seg).unwrap().updates, [old]);
}

/// What a shuffle or batch buffer weighs is only known at run time: past the pipeline's byte
/// budget the pipeline fails with RESOURCE_EXHAUSTED (a task error), never an abort.
#[test]
fn buffers_are_bounded_in_bytes_at_run_time() {
    let strings = |n: usize| json!({"list": {"elements": vec!["x".repeat(1000); n]}});
    let limits = Limits { max_buffered_bytes: 10_000 };
    let run_limited = |d: &DatasetDef| -> Result<Vec<Value>, DatasetError> {
        let mut p = Pipeline::with_limits(d, Sharding::Off, limits)?;
        let (out, stop) = p.next_batch(1_000_000);
        match stop {
            Some(Step::End) => Ok(out),
            Some(Step::Error(e)) => Err(e),
            other => panic!("unexpected {other:?}"),
        }
    };
    // A 1,032-byte element: a buffer of 9 fits, one of 10 does not.
    let fits = def_json(json!({"source": strings(30), "transforms": [
        {"shuffle": {"buffer": 9, "seed": 3}}, {"repeat": 3}]}));
    assert_eq!(run_limited(&fits).unwrap().len(), 90, "the budget is given back as it drains");
    let over = def_json(json!({"source": strings(30), "transforms": [
        {"repeat": null}, {"shuffle": {"buffer": 10, "seed": 3}}]}));
    let err = run_limited(&over).unwrap_err();
    assert_eq!(err.code(), "RESOURCE_EXHAUSTED");
    assert!(
        err.message().starts_with("transforms[1].shuffle would hold more than 10000 bytes"),
        "{err}"
    );
    let over = def_json(json!({"source": strings(30), "transforms": [{"batch": {"size": 20}}]}));
    assert!(
        run_limited(&over).unwrap_err().message().starts_with("transforms[0].batch would hold")
    );
    // The buffers of one pipeline share the budget: a batch of 5 (5,160 bytes) fits alone,
    // but not with a shuffle holding the previous batch (5,192 bytes).
    let alone = def_json(json!({"source": strings(10), "transforms": [{"batch": {"size": 5}}]}));
    assert_eq!(run_limited(&alone).unwrap().len(), 2);
    let shared = def_json(json!({"source": strings(15), "transforms": [
        {"batch": {"size": 5}}, {"shuffle": {"buffer": 2, "seed": 0}}]}));
    assert_eq!(run_limited(&shared).unwrap_err().code(), "RESOURCE_EXHAUSTED");
    // The issue's endless read at the count bound, with the default budget, runs lazily.
    let endless = def_json(json!({"source": {"range": {"stop": 10}}, "transforms": [
        {"repeat": null}, {"shuffle": {"buffer": 1000, "seed": 1}}]}));
    let mut p = Pipeline::new(&endless, Sharding::Off).unwrap();
    assert_eq!(p.next_batch(5000).0.len(), 5000);
}

/// A `skip` of 2^64 - 1 over an endless `repeat` discards elements forever: one `next` call
/// used to spin without returning, holding the worker's thread. It now answers `Yield` after
/// `MAX_PULLS_PER_STEP` pulls, and a long but finite skip goes on where it left off.
#[test]
fn long_skips_yield_instead_of_spinning() {
    let endless = def_json(json!({"source": {"range": {"stop": 10}}, "transforms": [
        {"repeat": null}, {"skip": u64::MAX}]}));
    let mut p = Pipeline::new(&endless, Sharding::Off).unwrap();
    for _ in 0..3 {
        assert_eq!(p.next(), Step::Yield);
    }
    let skip = MAX_PULLS_PER_STEP * 2 + 5;
    let long =
        def_json(json!({"source": {"range": {"stop": skip + 2}}, "transforms": [{"skip": skip}]}));
    let mut p = Pipeline::new(&long, Sharding::Off).unwrap();
    let (none, stop) = p.next_batch(10);
    assert_eq!((none, stop), (vec![], Some(Step::Yield)));
    assert_eq!(p.next(), Step::Yield);
    let skip = i64::try_from(skip).unwrap();
    assert_eq!(p.next_batch(10), (ints([skip, skip + 1]), Some(Step::End)));
}

#[test]
fn text_is_parsed_strictly() {
    let err = r#"{"source": {"range": {"stop": 1, "stop": 2}}}"#.parse::<DatasetDef>().unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    assert!(err.message().contains("duplicate key \"stop\""), "{err}");
    let err = "{".parse::<DatasetDef>().unwrap_err();
    assert!(err.message().starts_with("dataset definition is not valid JSON"), "{err}");
    use std::str::FromStr;
    assert_eq!(DatasetDef::from_str(r#"{"source": {"range": {"stop": 2}}}"#).unwrap(), range(2));
}

// ---------------------------------------------------------------------------------------------
// Scenarios (reference/dispatcher_scenarios.md)
// ---------------------------------------------------------------------------------------------

#[test]
fn sv01_off_every_worker_produces_everything() {
    let d = range(20);
    for _worker in 0..5 {
        assert_eq!(run(&d, Sharding::Off).unwrap(), ints(0..20));
    }
}

#[test]
fn sv02_dynamic_union_is_exactly_one_copy() {
    let d = range(20);
    for split_size in [1, 3, DEFAULT_SPLIT_SIZE] {
        let outputs = run_dynamic(&d, 5, split_size);
        assert_eq!(sorted_ints(&outputs), (0..20).collect::<Vec<_>>(), "split_size {split_size}");
        if split_size == 1 {
            assert!(
                outputs.iter().all(|o| !o.is_empty()),
                "round robin spreads splits: {outputs:?}"
            );
        }
    }
}

#[test]
fn sv03_data_and_file_or_data_shard_by_worker_index() {
    let d = range(20);
    for i in 0..5 {
        let expected = ints([i, i + 5, i + 10, i + 15]);
        let iu = u64::try_from(i).unwrap();
        assert_eq!(run(&d, data(5, iu)).unwrap(), expected);
        let fod = Sharding::FileOrData { num_workers: 5, worker_index: iu };
        assert_eq!(run(&d, fod).unwrap(), expected);
    }
}

#[test]
fn sv04_hint_shards_at_the_hint() {
    let d = with(range(20), json!([{"shard_hint": {}}]));
    for i in 0..5 {
        let hint = Sharding::Hint { num_workers: 5, worker_index: u64::try_from(i).unwrap() };
        assert_eq!(run(&d, hint).unwrap(), ints([i, i + 5, i + 10, i + 15]));
    }
}

#[test]
fn hint_applies_at_its_position() {
    let hint = Sharding::Hint { num_workers: 5, worker_index: 1 };
    let before = with(range(20), json!([{"shard_hint": {}}, {"batch": {"size": 2}}]));
    assert_eq!(run(&before, hint).unwrap(), [json!([1, 6]), json!([11, 16])]);
    let after = with(range(20), json!([{"batch": {"size": 2}}, {"shard_hint": {}}]));
    assert_eq!(run(&after, hint).unwrap(), [json!([2, 3]), json!([12, 13])]);
    // Two hints shard twice; a hint inside a repeat restarts with every pass.
    let twice = with(range(20), json!([{"shard_hint": {}}, {"shard_hint": {}}]));
    assert_eq!(
        run(&twice, Sharding::Hint { num_workers: 2, worker_index: 1 }).unwrap(),
        ints([3, 7, 11, 15, 19])
    );
    let repeated = with(range(4), json!([{"shard_hint": {}}, {"repeat": 2}]));
    assert_eq!(
        run(&repeated, Sharding::Hint { num_workers: 2, worker_index: 0 }).unwrap(),
        ints([0, 2, 0, 2])
    );
}

#[test]
fn sv05_file_sharding_over_five_files() {
    let (d, files) = five_files();
    let stream: Vec<Value> = (0..5)
        .flat_map(|i: i64| vec![json!(i.to_string()); usize::try_from(i + 1).unwrap()])
        .collect();
    assert_eq!(run_with(&d, Sharding::Off, &files).unwrap(), stream);
    for i in 0..5u64 {
        let only_file_i = vec![json!(i.to_string()); usize::try_from(i + 1).unwrap()];
        let file = Sharding::File { num_workers: 5, worker_index: i };
        assert_eq!(run_with(&d, file, &files).unwrap(), only_file_i);
        let fod = Sharding::FileOrData { num_workers: 5, worker_index: i };
        assert_eq!(run_with(&d, fod, &files).unwrap(), only_file_i);
        let every_fifth: Vec<Value> =
            stream.iter().skip(usize::try_from(i).unwrap()).step_by(5).cloned().collect();
        assert_eq!(run_with(&d, data(5, i), &files).unwrap(), every_fifth);
    }
}

#[test]
fn as01_element_sharding_with_batches() {
    let d = range(20);
    assert_eq!(run(&d, data(5, 1)).unwrap(), ints([1, 6, 11, 16]));
    assert_eq!(run(&d, data(5, 3)).unwrap(), ints([3, 8, 13, 18]));
    let batched = with(range(20), json!([{"batch": {"size": 3}}]));
    assert_eq!(run(&batched, data(5, 1)).unwrap(), [json!([3, 4, 5]), json!([18, 19])]);
    let fod = Sharding::FileOrData { num_workers: 5, worker_index: 1 };
    assert_eq!(run(&batched, fod).unwrap(), [json!([3, 4, 5]), json!([18, 19])]);
}

#[test]
fn as02_file_sharding_needs_files() {
    for source in [
        json!({"range": {"stop": 20}}),
        json!({"list": {"elements": [1]}}),
        json!({"splits": {"items": [1]}}),
    ] {
        let d = def_json(json!({"source": source}));
        let err =
            Pipeline::new(&d, Sharding::File { num_workers: 5, worker_index: 1 }).unwrap_err();
        assert_eq!(err.code(), "NOT_FOUND");
        assert!(err.message().contains("Found an unshardable source dataset"), "{err}");
        assert_eq!(
            validate_sharding(&d, Sharding::File { num_workers: 5, worker_index: 1 }),
            Err(err)
        );
    }
}

#[test]
fn as03_shard_hint_only_under_hint() {
    let d = with(range(20), json!([{"take": 20}, {"shard_hint": {}}]));
    for sharding in [
        Sharding::Off,
        Sharding::Dynamic,
        Sharding::File { num_workers: 5, worker_index: 1 },
        data(5, 1),
        Sharding::FileOrData { num_workers: 5, worker_index: 1 },
    ] {
        let err = Pipeline::new(&d, sharding).unwrap_err();
        assert_eq!(err.code(), "FAILED_PRECONDITION", "{sharding:?}");
        assert!(err.message().contains(HINT_MESSAGE), "{err}");
        assert!(err.message().starts_with("transforms[1] is a shard_hint"), "{err}");
    }
    assert_eq!(
        run(&d, Sharding::Hint { num_workers: 5, worker_index: 1 }).unwrap(),
        ints([1, 6, 11, 16])
    );
    // Without a hint, HINT does not shard.
    assert_eq!(
        run(&range(20), Sharding::Hint { num_workers: 5, worker_index: 1 }).unwrap(),
        ints(0..20)
    );
}

#[test]
fn static_shard_arguments_are_checked() {
    let d = range(20);
    for make in [
        |n, i| Sharding::File { num_workers: n, worker_index: i },
        |n, i| Sharding::Data { num_workers: n, worker_index: i },
        |n, i| Sharding::FileOrData { num_workers: n, worker_index: i },
        |n, i| Sharding::Hint { num_workers: n, worker_index: i },
    ] {
        let err = Pipeline::new(&d, make(0, 0)).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert!(err.message().contains("greater than zero"), "{err}");
        let err = Pipeline::new(&d, make(5, 5)).unwrap_err();
        assert_eq!(err.message(), "Index must be between 0 and 4 (currently index = 5).");
    }
    assert_eq!(run(&d, data(1, 0)).unwrap(), ints(0..20));
    assert_eq!(run(&d, data(u64::MAX, 3)).unwrap(), ints([3]));
}

#[test]
fn as05_file_sharding_of_ten_files() {
    let (d, files) = record_files(10);
    let expected: Vec<Value> = ints((30..40).chain(80..90));
    for sharding in [
        Sharding::File { num_workers: 5, worker_index: 3 },
        Sharding::FileOrData { num_workers: 5, worker_index: 3 },
    ] {
        assert_eq!(run_with(&d, sharding, &files).unwrap(), expected);
    }
    assert_eq!(run_with(&d, data(5, 3), &files).unwrap(), ints((3..100).step_by(5)));
    assert_eq!(run_with(&d, Sharding::Off, &files).unwrap(), ints(0..100));
}

#[test]
fn as06_too_few_files() {
    let (d, files) = record_files(4);
    for sharding in [
        Sharding::File { num_workers: 5, worker_index: 3 },
        Sharding::FileOrData { num_workers: 5, worker_index: 3 },
    ] {
        let err = Pipeline::new(&d, sharding).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert!(err.message().contains("not enough for the required 5 shards/workers."), "{err}");
    }
    // DATA shards the records of the 4 files instead.
    assert_eq!(run_with(&d, data(5, 3), &files).unwrap(), ints((3..40).step_by(5)));
}

#[test]
fn as11_misc() {
    let fod = Sharding::FileOrData { num_workers: 1, worker_index: 0 };
    assert_eq!(run(&range(20), fod).unwrap(), ints(0..20));
    assert_eq!(run(&range(0), fod).unwrap(), NONE);
    let (d, files) = record_files(10);
    for sharding in [
        Sharding::Off,
        Sharding::File { num_workers: 1, worker_index: 0 },
        data(1, 0),
        fod,
        Sharding::Hint { num_workers: 1, worker_index: 0 },
    ] {
        assert_eq!(run_with(&d, sharding, &files).unwrap(), ints(0..100), "{sharding:?}");
    }
    let dynamic = run_dynamic_limited(&d, 1, 1, &files, usize::MAX);
    assert_eq!(sorted_ints(&dynamic), (0..100).collect::<Vec<_>>());
}

#[test]
fn dy01_dynamic_basics() {
    let outputs = run_dynamic(&range(100), 2, DEFAULT_SPLIT_SIZE);
    assert_eq!(sorted_ints(&outputs), (0..100).collect::<Vec<_>>());
    let outputs = run_dynamic(&range(100), 2, 7);
    assert_eq!(sorted_ints(&outputs), (0..100).collect::<Vec<_>>());
    let slices = def_json(json!({"source": {"list": {"elements": [5, 1, 2, 4]}}}));
    assert_eq!(sorted_ints(&run_dynamic(&slices, 2, 1)), [1, 2, 4, 5]);
}

#[test]
fn dy02_repeat_inside_and_outside() {
    let inside = with(range(20), json!([{"repeat": 5}]));
    for split_size in [1, 3, DEFAULT_SPLIT_SIZE] {
        let outputs = run_dynamic(&inside, 5, split_size);
        assert_eq!(sorted_ints(&outputs), copies(5, 0..20), "split_size {split_size}");
    }
    // `.repeat(5)` after distribute: five iterations, each with its own split provider.
    let outside: Vec<Vec<Value>> = (0..5).flat_map(|_| run_dynamic(&range(20), 5, 3)).collect();
    assert_eq!(sorted_ints(&outside), copies(5, 0..20));
    let shuffled = with(range(20), json!([{"shuffle": {"buffer": 8, "seed": 3}}, {"repeat": 5}]));
    assert_eq!(sorted_ints(&run_dynamic(&shuffled, 5, 2)), copies(5, 0..20));
}

#[test]
fn dy03_infinite_repeat_is_balanced() {
    let d = with(range(20), json!([{"repeat": null}]));
    let outputs = run_dynamic_limited(&d, 2, 1, &Files::new(), 1000);
    let all = sorted_ints(&outputs);
    assert_eq!(all.len(), 1000);
    for value in 0..20 {
        let count = all.iter().filter(|&&v| v == value).count();
        assert!(count > 25, "{value} appeared {count} times");
    }
}

#[test]
fn dy04_fewer_splits_than_workers() {
    let d = with(range(1), json!([{"repeat": null}]));
    let outputs = run_dynamic_limited(&d, 5, 1, &Files::new(), 20);
    assert_eq!(sorted_ints(&outputs), vec![0; 20]);
    // A worker alone (the others stopped) still gets every repetition.
    let outputs = run_dynamic_limited(&d, 1, 1, &Files::new(), 20);
    assert_eq!(outputs, [vec![json!(0); 20]]);
}

#[test]
fn dy09_concatenation_as_a_list() {
    let d = def_json(json!({"source": {"list": {"elements": (0..200).collect::<Vec<_>>()}}}));
    assert_eq!(run_dynamic(&d, 1, 16), [ints(0..200)]);
    assert_eq!(sorted_ints(&run_dynamic(&d, 3, 16)), (0..200).collect::<Vec<_>>());
}

#[test]
fn js19_off_mode_basics() {
    let drop = with(range(10), json!([{"batch": {"size": 1000, "drop_remainder": true}}]));
    for _worker in 0..2 {
        assert_eq!(run_off(&drop), NONE);
    }
    let keep = with(range(10), json!([{"batch": {"size": 1000}}]));
    for _worker in 0..2 {
        assert_eq!(run_off(&keep), [json!((0..10).collect::<Vec<_>>())]);
    }
    for _epoch in 0..10 {
        assert_eq!(run_off(&range(3)), ints(0..3));
    }
    let repeated = with(range(10), json!([{"repeat": 5}]));
    assert_eq!(run_off(&repeated), ints((0..5).flat_map(|_| 0..10)));
}

// ---------------------------------------------------------------------------------------------
// Transforms
// ---------------------------------------------------------------------------------------------

#[test]
fn ranges_like_python() {
    let r = |start: i64, stop: i64, step: i64| {
        run_off(&def_json(
            json!({"source": {"range": {"start": start, "stop": stop, "step": step}}}),
        ))
    };
    assert_eq!(r(10, 0, -3), ints([10, 7, 4, 1]));
    assert_eq!(r(0, 10, -1), NONE);
    assert_eq!(r(-5, -1, 2), ints([-5, -3]));
    assert_eq!(r(3, 3, 1), NONE);
    assert_eq!(r(i64::MAX - 2, i64::MAX, 1), ints([i64::MAX - 2, i64::MAX - 1]));
    assert_eq!(r(i64::MIN + 1, i64::MIN, -1), ints([i64::MIN + 1]));
    // Positions count down too.
    let d = def_json(json!({"source": {"range": {"start": 10, "stop": -10, "step": -3}}}));
    assert_eq!(num_splits(&d.source, 3), 3);
    let mut all = sorted_ints(&run_dynamic(&d, 2, 3));
    all.reverse();
    assert_eq!(all, [10, 7, 4, 1, -2, -5, -8]);
}

#[test]
fn take_and_skip_on_infinite_repeat() {
    let d = with(range(3), json!([{"repeat": null}, {"skip": 2}, {"take": 7}]));
    assert_eq!(run_off(&d), ints([2, 0, 1, 2, 0, 1, 2]));
    let d = with(range(3), json!([{"repeat": null}, {"batch": {"size": 2}}, {"take": 3}]));
    assert_eq!(run_off(&d), [json!([0, 1]), json!([2, 0]), json!([1, 2])]);
    // Lazily: the first elements of an endless pipeline come out one by one.
    let endless = with(range(1_000_000_000), json!([{"repeat": null}, {"skip": 5}]));
    let mut p = Pipeline::new(&endless, Sharding::Off).unwrap();
    let (first, stop) = p.next_batch(3);
    assert_eq!((first, stop), (ints([5, 6, 7]), None));
    assert_eq!(run_off(&with(range(5), json!([{"take": 0}]))), NONE);
    assert_eq!(run_off(&with(range(5), json!([{"skip": 10}]))), NONE);
    assert_eq!(run_off(&with(range(5), json!([{"skip": 3}, {"take": 10}]))), ints([3, 4]));
    assert_eq!(run_off(&with(range(5), json!([{"take": 2}, {"repeat": 2}]))), ints([0, 1, 0, 1]));
    assert_eq!(run_off(&with(range(2), json!([{"repeat": 2}, {"repeat": 3}]))).len(), 12);
}

#[test]
fn empty_passes_end_repeat() {
    for transforms in [
        json!([{"repeat": null}]),
        json!([{"take": 0}, {"repeat": null}]),
        json!([{"repeat": 18446744073709551615u64}, {"repeat": null}]),
        json!([{"batch": {"size": 10, "drop_remainder": true}}, {"repeat": null}]),
    ] {
        let mut d = with(range(0), json!([]));
        if transforms[0].get("take").is_some() || transforms[0].get("batch").is_some() {
            d = range(3);
        }
        let d = with(d, transforms.clone());
        assert_eq!(run_off(&d), NONE, "{transforms}");
    }
    assert_eq!(run_off(&with(range(3), json!([{"repeat": 0}]))), NONE);
    // DYNAMIC: a pass that never asked for a split ends the repeat; one that asked goes on.
    let never_asks = with(range(5), json!([{"take": 0}, {"repeat": null}]));
    assert_eq!(Pipeline::new(&never_asks, Sharding::Dynamic).unwrap().next(), Step::End);
    let empty = with(range(0), json!([{"repeat": 3}]));
    let mut p = Pipeline::new(&empty, Sharding::Dynamic).unwrap();
    for repetition in 0..3 {
        assert_eq!(p.next(), Step::NeedSplit { repetition });
        p.provide_split(repetition, None);
    }
    assert_eq!(p.next(), Step::End);
}

#[test]
fn nested_repeats_use_contiguous_repetitions() {
    let d = with(range(2), json!([{"repeat": 2}, {"repeat": 3}]));
    let mut p = Pipeline::new(&d, Sharding::Dynamic).unwrap();
    let mut dispatcher = SplitDispatcher::new(&d, 1);
    let mut seen = Vec::new();
    let mut out = Vec::new();
    loop {
        match p.next() {
            Step::Element(v) => out.push(v),
            Step::NeedSplit { repetition } => {
                if seen.last() != Some(&repetition) {
                    seen.push(repetition);
                }
                p.provide_split(repetition, dispatcher.get_split(repetition));
            }
            Step::End => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seen, [0, 1, 2, 3, 4, 5]);
    assert_eq!(out, ints((0..6).flat_map(|_| 0..2)));
    assert_eq!(p.repetition(), 5);
}

#[test]
fn batches() {
    let d = with(range(7), json!([{"batch": {"size": 3}}]));
    assert_eq!(run_off(&d), [json!([0, 1, 2]), json!([3, 4, 5]), json!([6])]);
    let d = with(range(7), json!([{"batch": {"size": 3, "drop_remainder": true}}]));
    assert_eq!(run_off(&d), [json!([0, 1, 2]), json!([3, 4, 5])]);
    let d = with(range(4), json!([{"batch": {"size": 2}}, {"batch": {"size": 2}}]));
    assert_eq!(run_off(&d), [json!([[0, 1], [2, 3]])]);
    let d = with(range(3), json!([{"batch": {"size": 2}}, {"repeat": 2}]));
    assert_eq!(run_off(&d), [json!([0, 1]), json!([2]), json!([0, 1]), json!([2])]);
}

#[test]
fn shuffle_is_a_seeded_permutation() {
    let shuffled = |seed: u64, buffer: u64| {
        run_off(&with(range(100), json!([{"shuffle": {"buffer": buffer, "seed": seed}}])))
    };
    let a = shuffled(7, 10);
    assert_eq!(a, shuffled(7, 10), "same seed, same order");
    assert_ne!(a, ints(0..100), "an order change is overwhelmingly likely");
    assert_ne!(a, shuffled(8, 10));
    let mut sorted = sorted_ints(&[a]);
    sorted.dedup();
    assert_eq!(sorted, (0..100).collect::<Vec<_>>());
    assert_eq!(shuffled(7, 1), ints(0..100), "a buffer of one keeps the order");
    let full = shuffled(7, 1000);
    assert_eq!(sorted_ints(std::slice::from_ref(&full)), (0..100).collect::<Vec<_>>());
    assert_ne!(full, shuffled(7, 10));
    // A buffer of 10 cannot move an element more than 9 places earlier.
    for (position, v) in shuffled(3, 10).iter().enumerate() {
        assert!(v.as_i64().unwrap() <= i64::try_from(position).unwrap() + 9);
    }
}

#[test]
fn shuffle_epochs_differ_but_reproduce() {
    let d = with(range(50), json!([{"shuffle": {"buffer": 50, "seed": 11}}, {"repeat": 3}]));
    let out = run_off(&d);
    assert_eq!(out, run_off(&d));
    let epochs: Vec<&[Value]> = out.chunks(50).collect();
    assert_eq!(epochs.len(), 3);
    assert_ne!(epochs[0], epochs[1]);
    assert_ne!(epochs[1], epochs[2]);
    for epoch in &epochs {
        assert_eq!(sorted_ints(&[epoch.to_vec()]), (0..50).collect::<Vec<_>>());
    }
    // The first epoch is the plain shuffle.
    let once = with(range(50), json!([{"shuffle": {"buffer": 50, "seed": 11}}]));
    assert_eq!(run_off(&once), epochs[0]);
}

#[test]
fn lists_and_splits_sources() {
    let list = def_json(json!({"source": {"list": {"elements": ["a", {"b": 1}, [2], null]}}}));
    assert_eq!(run_off(&list), [json!("a"), json!({"b": 1}), json!([2]), Value::Null]);
    let items = json!(["gs://b/0", {"uri": "gs://b/1"}, 7]);
    let splits = def_json(json!({"source": {"splits": {"items": items}}}));
    assert_eq!(Value::Array(run_off(&splits)), items);
    assert_eq!(run(&splits, data(3, 1)).unwrap(), [json!({"uri": "gs://b/1"})]);
    let outputs = run_dynamic(&splits, 2, 1);
    let mut all: Vec<String> = outputs.iter().flatten().map(Value::to_string).collect();
    all.sort();
    let mut want: Vec<String> = items.as_array().unwrap().iter().map(Value::to_string).collect();
    want.sort();
    assert_eq!(all, want);
}

// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

#[test]
fn files_are_requested_one_at_a_time() {
    let d = def_json(json!({"source": {"files": {"paths": ["a", "b"], "format": "lines"}}}));
    let mut p = Pipeline::new(&d, Sharding::Off).unwrap();
    assert_eq!(p.next(), Step::NeedFile { path: "a".into() });
    assert_eq!(p.next(), Step::NeedFile { path: "a".into() }, "asked again until provided");
    p.provide_file("a", b"1\r\n2");
    assert_eq!(p.next(), Step::Element(json!("1")));
    assert_eq!(p.next(), Step::Element(json!("2")));
    assert_eq!(p.next(), Step::NeedFile { path: "b".into() });
    p.provide_file("b", b"");
    assert_eq!(p.next(), Step::End);
    assert_eq!(p.next(), Step::End);
}

#[test]
fn jsonl_errors_name_file_and_line() {
    let d = def_json(json!({"source": {"files": {"paths": ["data/x.jsonl"], "format": "jsonl"}}}));
    let mut p = Pipeline::new(&d, Sharding::Off).unwrap();
    assert_eq!(p.next(), Step::NeedFile { path: "data/x.jsonl".into() });
    p.provide_file("data/x.jsonl", b"{\"a\": 1}\n\n[1, 2\n3\n");
    assert_eq!(p.next(), Step::Element(json!({"a": 1})));
    let Step::Error(err) = p.next() else { panic!("expected an error") };
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    assert!(err.message().starts_with("file \"data/x.jsonl\" line 3 is not valid JSON"), "{err}");
    assert_eq!(p.next(), Step::Error(err.clone()), "the error sticks");
    p.provide_file("data/x.jsonl", b"1");
    assert_eq!(p.next(), Step::Error(err));
}

#[test]
fn bytes_files_are_one_element_each() {
    let d = def_json(json!({"source": {"files": {"paths": ["t", "b"], "format": "bytes"}}}));
    let files: Files = [("t".to_string(), b"hi\nthere".to_vec()), ("b".to_string(), vec![0xff, 1])]
        .into_iter()
        .collect();
    // One element type: a base64 string for a UTF-8 file and a binary one alike.
    assert_eq!(
        run_with(&d, Sharding::Off, &files).unwrap(),
        [json!("aGkKdGhlcmU="), json!("/wE=")]
    );
}

#[test]
fn dynamic_files_come_as_path_splits() {
    let (d, files) = five_files();
    let outputs = run_dynamic_limited(&d, 2, 1, &files, usize::MAX);
    let mut all: Vec<String> =
        outputs.iter().flatten().map(|v| v.as_str().unwrap().to_owned()).collect();
    all.sort();
    assert_eq!(all, ["0", "1", "1", "2", "2", "2", "3", "3", "3", "3", "4", "4", "4", "4", "4"]);
}

// ---------------------------------------------------------------------------------------------
// The caller protocol
// ---------------------------------------------------------------------------------------------

#[test]
fn splits_can_be_queued_and_stale_ones_are_dropped() {
    let d = with(range(10), json!([{"take": 3}, {"repeat": 2}]));
    let mut p = Pipeline::new(&d, Sharding::Dynamic).unwrap();
    assert_eq!(p.next(), Step::NeedSplit { repetition: 0 });
    p.provide_split(0, Some(json!({"start": 0, "stop": 2})));
    p.provide_split(0, Some(json!({"start": 5, "stop": 7})));
    assert_eq!(p.next_batch(10), (ints([0, 1, 5]), Some(Step::NeedSplit { repetition: 1 })));
    // The rest of repetition 0 (the take ended the pass) is stale now.
    p.provide_split(0, Some(json!({"start": 7, "stop": 9})));
    p.provide_split(0, None);
    p.provide_split(1, Some(json!({"start": 9, "stop": 10})));
    assert_eq!(p.next(), Step::Element(json!(9)));
    assert_eq!(p.next(), Step::NeedSplit { repetition: 1 });
    p.provide_split(1, None);
    assert_eq!(p.next(), Step::End);
    p.provide_split(2, Some(json!({"start": 0, "stop": 1})));
    assert_eq!(p.next(), Step::End, "inputs after the end are ignored");
}

#[test]
fn unexpected_inputs_fail_the_pipeline() {
    let dynamic = |def: &DatasetDef| Pipeline::new(def, Sharding::Dynamic).unwrap();
    let d = range(10);

    let mut p = dynamic(&d);
    p.provide_split(1, Some(json!({"start": 0, "stop": 1})));
    let Step::Error(err) = p.next() else { panic!() };
    assert_eq!(err.code(), "FAILED_PRECONDITION");
    assert!(err.message().contains("repetition 1"), "{err}");

    let mut p = dynamic(&d);
    p.provide_split(0, Some(json!({"start": 5, "stop": 11})));
    let Step::Error(err) = p.next() else { panic!() };
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    assert!(err.message().contains("outside the range source, which has 10 elements"), "{err}");

    let mut p = dynamic(&d);
    p.provide_split(0, None);
    p.provide_split(0, Some(json!({"start": 0, "stop": 1})));
    assert!(matches!(p.next(), Step::Error(DatasetError::FailedPrecondition(_))));

    let mut p = Pipeline::new(&d, Sharding::Off).unwrap();
    p.provide_split(0, None);
    assert!(matches!(p.next(), Step::Error(DatasetError::FailedPrecondition(_))));

    let mut p = Pipeline::new(&d, Sharding::Off).unwrap();
    p.provide_file("x", b"");
    let Step::Error(err) = p.next() else { panic!() };
    assert!(err.message().contains("did not ask for a file"), "{err}");

    let (files_def, _) = five_files();
    let mut p = Pipeline::new(&files_def, Sharding::Off).unwrap();
    assert_eq!(p.next(), Step::NeedFile { path: "/data/f0.txt".into() });
    p.provide_file("/data/f1.txt", b"");
    let Step::Error(err) = p.next() else { panic!() };
    assert!(err.message().contains("asked for \"/data/f0.txt\""), "{err}");

    let mut p = dynamic(&files_def);
    p.provide_split(0, Some(json!("/etc/passwd")));
    let Step::Error(err) = p.next() else { panic!() };
    assert!(err.message().contains("not one of the files source's paths"), "{err}");
}

#[test]
fn next_batch_reports_what_stopped_it() {
    let mut p = Pipeline::new(&range(5), Sharding::Off).unwrap();
    assert_eq!(p.next_batch(0), (vec![], None));
    assert_eq!(p.next_batch(2), (ints([0, 1]), None));
    assert_eq!(p.next_batch(10), (ints([2, 3, 4]), Some(Step::End)));
    let mut p = Pipeline::new(&range(5), Sharding::Dynamic).unwrap();
    assert_eq!(p.next_batch(10), (vec![], Some(Step::NeedSplit { repetition: 0 })));
}

#[test]
fn long_pipelines_do_not_recurse() {
    let mut transforms = vec![json!({"repeat": 1}); MAX_TRANSFORMS - 1];
    transforms.push(json!({"take": 4}));
    let d = with(range(5), Value::Array(transforms));
    assert_eq!(run_off(&d), ints(0..4));
    let d = with(range(0), Value::Array(vec![json!({"repeat": null}); MAX_TRANSFORMS]));
    assert_eq!(run_off(&d), NONE);
    let d = with(range(3), Value::Array(vec![json!({"skip": 0}); MAX_TRANSFORMS]));
    assert_eq!(run(&d, data(2, 1)).unwrap(), ints([1]));
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "source",
            "transforms",
            "range",
            "list",
            "files",
            "splits",
            "start",
            "stop",
            "step",
            "elements",
            "paths",
            "format",
            "items",
            "repeat",
            "take",
            "skip",
            "shuffle",
            "batch",
            "shard_hint",
            "buffer",
            "seed",
            "size",
            "drop_remainder",
        ])
        .prop_map(String::from),
        "[a-z_]{0,6}",
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-3i64..5).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(vec!["lines", "jsonl", "bytes", "x"]).prop_map(Value::from),
        "\\PC{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 96, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((arb_key(), inner), 0..5)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// Mostly valid definitions with arbitrary values in places.
fn arb_near_def() -> impl Strategy<Value = Value> {
    let source = (
        prop::sample::select(vec!["range", "list", "files", "splits", "nope"]),
        prop::collection::vec((arb_key(), arb_json()), 0..4),
    )
        .prop_map(|(kind, fields)| json!({kind: Value::Object(fields.into_iter().collect())}));
    let transform = (
        prop::sample::select(vec!["repeat", "take", "skip", "shuffle", "batch", "shard_hint"]),
        prop_oneof![
            arb_json(),
            prop::collection::vec((arb_key(), arb_json()), 0..3)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ],
    )
        .prop_map(|(kind, body)| json!({kind: body}));
    (source, prop::collection::vec(transform, 0..4))
        .prop_map(|(source, transforms)| json!({"source": source, "transforms": transforms}))
}

fn arb_position_source() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-30i64..30, -30i64..60, prop_oneof![-5i64..=-1, 1i64..=5]).prop_map(
            |(start, stop, step)| json!({"range": {"start": start, "stop": stop, "step": step}})
        ),
        prop::collection::vec(any::<i16>(), 0..40)
            .prop_map(|elements| json!({"list": {"elements": elements}})),
    ]
}

fn arb_finite_transform() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0u64..12).prop_map(|n| json!({"take": n})),
        (0u64..12).prop_map(|n| json!({"skip": n})),
        (0u64..3).prop_map(|n| json!({"repeat": n})),
        (1u64..5, any::<bool>()).prop_map(|(size, drop_remainder)| json!({"batch": {"size": size, "drop_remainder": drop_remainder}})),
        (1u64..8, any::<u64>()).prop_map(|(buffer, seed)| json!({"shuffle": {"buffer": buffer, "seed": seed}})),
    ]
}

fn flatten_ints(value: &Value, out: &mut Vec<i64>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| flatten_ints(v, out)),
        other => out.push(other.as_i64().unwrap()),
    }
}

proptest! {
    #[test]
    fn from_json_never_panics(value in arb_json()) {
        if let Ok(d) = DatasetDef::from_json(&value) {
            prop_assert_eq!(DatasetDef::from_json(&d.to_json()), Ok(d));
        }
    }

    #[test]
    fn near_definitions_never_panic_and_round_trip(value in arb_near_def()) {
        match DatasetDef::from_json(&value) {
            Ok(d) => {
                prop_assert_eq!(DatasetDef::from_json(&d.to_json()), Ok(d.clone()));
                // Building a pipeline never panics either.
                let _ = Pipeline::new(&d, Sharding::Hint { num_workers: 2, worker_index: 1 });
            }
            Err(e) => prop_assert_eq!(e.code(), "INVALID_ARGUMENT"),
        }
    }

    #[test]
    fn splits_cover_the_source_in_order(source in arb_position_source(), split_size in 1u64..12) {
        let d = def_json(json!({"source": source}));
        let mut joined = Vec::new();
        let count = num_splits(&d.source, split_size);
        for index in 0..count {
            let split = split_at(&d.source, split_size, index).expect("split in range");
            let SplitElements::Positions { start, stop } = elements_of_split(&d.source, &split)? else {
                panic!("range and list splits are positions");
            };
            prop_assert!(stop - start <= split_size && start < stop);
            joined.extend((start..stop).map(|p| element_at(&d.source, p).expect("position")));
        }
        prop_assert_eq!(split_at(&d.source, split_size, count), None);
        prop_assert_eq!(joined, run_off(&d));
    }

    #[test]
    fn data_sharding_partitions_the_off_output(
        source in arb_position_source(),
        transforms in prop::collection::vec(arb_finite_transform(), 0..5),
        num_workers in 1u64..5,
    ) {
        let d = def_json(json!({"source": source, "transforms": transforms}));
        let off = run_off(&d);
        for worker_index in 0..num_workers {
            let mine = run(&d, data(num_workers, worker_index))?;
            let expected: Vec<Value> = off
                .iter()
                .skip(usize::try_from(worker_index).unwrap())
                .step_by(usize::try_from(num_workers).unwrap())
                .cloned()
                .collect();
            prop_assert_eq!(mine, expected);
        }
    }

    #[test]
    fn dynamic_sharding_produces_one_copy_in_total(
        source in (-30i64..30, -30i64..60, prop_oneof![-5i64..=-1, 1i64..=5])
            .prop_map(|(start, stop, step)| json!({"range": {"start": start, "stop": stop, "step": step}})),
        transforms in prop::collection::vec(prop_oneof![
            (0u64..3).prop_map(|n| json!({"repeat": n})),
            (1u64..4).prop_map(|size| json!({"batch": {"size": size}})),
            (1u64..8, any::<u64>()).prop_map(|(buffer, seed)| json!({"shuffle": {"buffer": buffer, "seed": seed}})),
        ], 0..4),
        workers in 1usize..5,
        split_size in 1u64..8,
    ) {
        let d = def_json(json!({"source": source, "transforms": transforms}));
        let mut want = Vec::new();
        run_off(&d).iter().for_each(|v| flatten_ints(v, &mut want));
        want.sort_unstable();
        let mut got = Vec::new();
        run_dynamic(&d, workers, split_size).iter().flatten().for_each(|v| flatten_ints(v, &mut got));
        got.sort_unstable();
        prop_assert_eq!(got, want);
    }
}

// ---------------------------------------------------------------------------------------------
// Origins of elements (read positions)
// ---------------------------------------------------------------------------------------------

use crate::position::{ElementOrigin, SourceRange, SplitPositions};

/// Reads every element of a DYNAMIC pipeline over `def` given `splits` (all provided up
/// front, as a get-split reply carrying several), with each element's origin.
fn read_with_origins(
    def: &DatasetDef,
    splits: Vec<(Value, Option<SplitPositions>)>,
    files: &Files,
) -> Vec<(Value, Option<ElementOrigin>)> {
    let mut p = Pipeline::new(def, Sharding::Dynamic).unwrap();
    let mut splits = Some(splits);
    let mut out = Vec::new();
    for _ in 0..1_000_000 {
        match p.next() {
            Step::Element(v) => out.push((v, p.origin())),
            Step::NeedSplit { repetition } => match splits.take() {
                Some(splits) => {
                    for s in splits {
                        p.provide_split_at(repetition, Some(s));
                    }
                }
                None => p.provide_split_at(repetition, None),
            },
            Step::NeedFile { path } => p.provide_file(&path, &files[&path]),
            Step::Yield => {}
            Step::End => {
                assert_eq!(p.origin(), None, "no origin after the end");
                return out;
            }
            Step::Error(e) => panic!("{e}"),
        }
    }
    panic!("did not end");
}

fn at(start: u64, stop: u64, skip: u64) -> Option<SplitPositions> {
    Some(SplitPositions { start, stop, skip })
}

fn origin(start: u64, stop: u64, offset: u64, end: bool) -> Option<ElementOrigin> {
    Some(ElementOrigin { split: SourceRange { start, stop }, offset, end })
}

#[test]
fn range_and_list_elements_have_offsets_and_end_flags_and_skips_move_the_cursor() {
    let splits = vec![
        (json!({"start": 0, "stop": 3}), at(0, 3, 0)),
        (json!({"start": 6, "stop": 10}), at(6, 10, 2)),
        (json!({"start": 3, "stop": 6}), at(3, 6, 9)), // skips more than it has: nothing
        (json!({"start": 10, "stop": 12}), None),      // no positions: no origin
    ];
    let got = read_with_origins(&range(12), splits, &Files::new());
    assert_eq!(
        got,
        vec![
            (json!(0), origin(0, 3, 0, false)),
            (json!(1), origin(0, 3, 1, false)),
            (json!(2), origin(0, 3, 2, true)),
            (json!(8), origin(6, 10, 2, false)),
            (json!(9), origin(6, 10, 3, true)),
            (json!(10), None),
            (json!(11), None),
        ]
    );
    let list = def(r#"{"source": {"list": {"elements": ["a", "b", "c"]}}}"#);
    let got = read_with_origins(
        &list,
        vec![(json!({"start": 0, "stop": 3}), at(0, 3, 1))],
        &Files::new(),
    );
    assert_eq!(
        got,
        vec![(json!("b"), origin(0, 3, 1, false)), (json!("c"), origin(0, 3, 2, true))]
    );
}

#[test]
fn items_and_bytes_files_are_one_element_left_out_whole_by_a_skip() {
    let items = def(r#"{"source": {"splits": {"items": ["x", "y"]}}}"#);
    let got = read_with_origins(
        &items,
        vec![(json!("x"), at(0, 1, 0)), (json!("y"), at(1, 2, 1))],
        &Files::new(),
    );
    assert_eq!(got, vec![(json!("x"), origin(0, 1, 0, true))]);
    let bytes = def(r#"{"source": {"files": {"paths": ["a", "b"], "format": "bytes"}}}"#);
    let files: Files = [("a".to_owned(), b"A".to_vec())].into_iter().collect();
    // "b" is skipped whole: it is never even asked for (it is not in `files`).
    let got = read_with_origins(
        &bytes,
        vec![(json!("b"), at(1, 2, 1)), (json!("a"), at(0, 1, 0))],
        &files,
    );
    assert_eq!(got, vec![(json!("QQ=="), origin(0, 1, 0, true))]);
}

#[test]
fn text_files_skip_records_and_know_their_last_record_when_they_emit_it() {
    let (jsonl, files) = record_files(3);
    let got = read_with_origins(
        &jsonl,
        vec![
            (json!("r0.jsonl"), at(0, 1, 0)),
            (json!("r1.jsonl"), at(1, 2, 7)),
            (json!("r2.jsonl"), at(2, 3, 1_000_000)),
        ],
        &files,
    );
    let mut want: Vec<_> = (0..10).map(|j| (json!(j), origin(0, 1, j, j == 9))).collect();
    want.extend((17..20).map(|v| (json!(v), origin(1, 2, v - 10, v == 19))));
    assert_eq!(got, want);
    // Trailing blank lines do not hide the end of a JSON Lines file; lines count every line.
    let mut files = Files::new();
    files.insert("j".into(), b"1\n\n2\n  \n\n".to_vec());
    files.insert("l".into(), b"a\n\nb".to_vec());
    let j = def(r#"{"source": {"files": {"paths": ["j"], "format": "jsonl"}}}"#);
    let got = read_with_origins(&j, vec![(json!("j"), at(0, 1, 1))], &files);
    assert_eq!(got, vec![(json!(2), origin(0, 1, 1, true))]);
    let l = def(r#"{"source": {"files": {"paths": ["l"], "format": "lines"}}}"#);
    let got = read_with_origins(&l, vec![(json!("l"), at(0, 1, 1))], &files);
    assert_eq!(got, vec![(json!(""), origin(0, 1, 1, false)), (json!("b"), origin(0, 1, 2, true))]);
}

#[test]
fn pipelines_that_buffer_or_count_across_splits_and_static_pipelines_have_no_origins() {
    let splits = || vec![(json!({"start": 0, "stop": 4}), at(0, 4, 0))];
    for transforms in [
        json!([{"shuffle": {"buffer": 2, "seed": 1}}]),
        json!([{"batch": {"size": 2}}]),
        json!([{"take": 3}]),
        json!([{"skip": 1}]),
    ] {
        let got = read_with_origins(&with(range(4), transforms.clone()), splits(), &Files::new());
        assert!(!got.is_empty(), "{transforms}");
        assert!(got.iter().all(|(_, o)| o.is_none()), "{transforms}: {got:?}");
    }
    for sharding in [Sharding::Off, data(2, 0)] {
        let mut p = Pipeline::new(&range(3), sharding).unwrap();
        assert!(matches!(p.next(), Step::Element(_)));
        assert_eq!(p.origin(), None, "{sharding:?}");
    }
    // A resumable pipeline's origin is for the element just returned, not a request.
    let mut p = Pipeline::new(&range(3), Sharding::Dynamic).unwrap();
    assert_eq!(p.next(), Step::NeedSplit { repetition: 0 });
    assert_eq!(p.origin(), None);
    p.provide_split_at(0, Some((json!({"start": 0, "stop": 3}), at(0, 3, 0))));
    assert_eq!(p.next(), Step::Element(json!(0)));
    assert_eq!(p.origin(), origin(0, 3, 0, false));
}

/// `Pipeline::take_origins`, taken every `chunk` elements, gives the runs that folding each
/// element's `origin` gives (what a worker sends beside each batch it buffers).
#[test]
fn origins_taken_per_batch_are_the_runs_of_the_elements_origins() {
    use crate::position::OriginRun;
    let files: Files =
        [("/d/a".to_owned(), b"x\ny\nz\n".to_vec()), ("/d/b".to_owned(), b"p\nq\n".to_vec())]
            .into_iter()
            .collect();
    type Splits = Vec<(Value, Option<SplitPositions>)>;
    let cases: Vec<(DatasetDef, Splits)> = vec![
        (
            range(12),
            vec![
                (json!({"start": 0, "stop": 3}), at(0, 3, 0)),
                (json!({"start": 6, "stop": 10}), at(6, 10, 2)),
                (json!({"start": 3, "stop": 6}), at(3, 6, 9)),
                (json!({"start": 10, "stop": 12}), at(10, 12, 0)),
            ],
        ),
        (
            def(r#"{"source": {"files": {"paths": ["/d/a", "/d/b"], "format": "lines"}}}"#),
            vec![(json!("/d/b"), at(1, 2, 0)), (json!("/d/a"), at(0, 1, 1))],
        ),
    ];
    for (def, splits) in cases {
        for chunk in 1..6 {
            let mut p = Pipeline::new(&def, Sharding::Dynamic).unwrap();
            let mut splits = Some(splits.clone());
            let (mut want, mut got, mut since) = (Vec::new(), Vec::new(), 0);
            loop {
                match p.next() {
                    Step::Element(_) => {
                        OriginRun::push(&mut want, p.origin().expect("an origin"));
                        since += 1;
                        if since == chunk {
                            got.extend(p.take_origins().expect("resumable"));
                            since = 0;
                        }
                    }
                    Step::NeedSplit { repetition } => match splits.take() {
                        Some(s) => {
                            s.into_iter().for_each(|s| p.provide_split_at(repetition, Some(s)))
                        }
                        None => p.provide_split_at(repetition, None),
                    },
                    Step::NeedFile { path } => p.provide_file(&path, &files[&path]),
                    Step::Yield => {}
                    Step::End => break,
                    Step::Error(e) => panic!("{e}"),
                }
            }
            got.extend(p.take_origins().expect("resumable"));
            // Runs cut at batch boundaries join back into the per-element fold.
            let mut joined: Vec<OriginRun> = Vec::new();
            for r in got {
                match joined.last_mut() {
                    Some(l) if l.split == r.split && l.offset + l.count == r.offset => {
                        l.count += r.count;
                        l.end = r.end;
                    }
                    _ => joined.push(r),
                }
            }
            assert_eq!(joined, want, "chunk {chunk}");
        }
    }
    let mut shuffled = Pipeline::new(
        &def(r#"{"source": {"range": {"stop": 4}}, "transforms": [{"shuffle": {"buffer": 2, "seed": 1}}]}"#),
        Sharding::Dynamic,
    )
    .unwrap();
    assert_eq!(shuffled.take_origins(), None);
}
