//! Definitions: defaults, round trips, errors with their paths, and the bounds `validate`
//! puts on them.

use super::*;

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
            "source.files.format must be one of \"lines\", \"jsonl\", \"bytes\", \"parquet\", \"arrow\" or \"tfrecord\", got \"csv\"",
        ),
        (
            json!({"source": {"files": {"paths": [], "format": null}}}),
            "source.files.format must be one of \"lines\", \"jsonl\", \"bytes\", \"parquet\", \"arrow\" or \"tfrecord\", got null",
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
        let (out, stop) = values(p.next_batch(1_000_000));
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
    assert_eq!(values(p.next_batch(5000)).0.len(), 5000);
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
    let (none, stop) = values(p.next_batch(10));
    assert_eq!((none, stop), (vec![], Some(Step::Yield)));
    assert_eq!(p.next(), Step::Yield);
    let skip = i64::try_from(skip).unwrap();
    assert_eq!(values(p.next_batch(10)), (ints([skip, skip + 1]), Some(Step::End)));
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
