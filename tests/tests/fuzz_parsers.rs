//! Hostile input for core's text parsers: the label-selector parser, the TF_CONFIG parser (and
//! the resolve request around it) and the dataset-definition parser, each fed mutations of its
//! seed corpus (`tests/fuzz/*.jsonl`) by the stable fuzzer of `shardwise_tests::fuzz`.
//!
//! Smoke run by default; `SHARDWISE_LONG=1` (with `SHARDWISE_FUZZ_SECS` or
//! `SHARDWISE_FUZZ_INPUTS`) for long runs, `SHARDWISE_FUZZ_SEED` to replay one.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use shardwise_core::cluster::request::HostInputs;
use shardwise_core::cluster::{
    ClusterError, ClusterResolver, ClusterSpec, LabelSelector, ResolveRequest, TfConfigResolver,
    render_tf_config,
};
use shardwise_core::dataset::{
    DatasetDef, DatasetError, Pipeline, Sharding, SourceDef, Step, TransformDef, num_splits,
    split_at, validate_sharding,
};
use shardwise_tests::fuzz::{
    Budget, Verdict, corpus, keys_of, mutate_json_text, mutate_text, run, text_corpus,
};

/// Every cluster error has a status class and a message.
fn check_cluster_error(e: &ClusterError, input: &str) {
    assert!(
        ["INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "UNAVAILABLE"]
            .contains(&e.code().as_str()),
        "untyped error {e:?} for {input:?}"
    );
    assert!(!e.detail().is_empty(), "empty message {e:?} for {input:?}");
}

const SELECTOR_TOKENS: &[&str] = &[
    " in ",
    " notin ",
    "in",
    "notin",
    "(",
    ")",
    ",",
    "!",
    "=",
    "==",
    "!=",
    "<",
    ">",
    " ",
    "\t",
    "/",
    ".",
    "-",
    "_",
    "é",
    "\u{1F600}",
    "0",
    "-1",
    "99999999999999999999",
    "a.b.c/",
    "\u{0}",
    "\u{85}",
    "\u{3000}",
];

/// Selectors: no panic; what parses displays in canonical form and parses back to the same
/// requirements (the canonical form is a fixed point); refusals are `INVALID_ARGUMENT` with a
/// column (or "reached the end").
#[test]
fn fuzz_label_selector() {
    let seeds = text_corpus("selector");
    let labels = BTreeMap::from([
        ("app".to_owned(), "web".to_owned()),
        ("x".to_owned(), "5".to_owned()),
        ("example.com/role".to_owned(), "ps".to_owned()),
    ]);
    let report = run(
        "label-selector",
        Budget::from_env(6_000),
        |rng, _| {
            if rng.one_in(10) {
                // Long inputs: many requirements, or one long token.
                let one = rng.pick(&seeds).clone();
                return if rng.one_in(2) {
                    vec![one; 1 + rng.below(2_000)].join(",")
                } else {
                    format!("{}{one}", "a".repeat(rng.below(10_000)))
                };
            }
            mutate_text(rng, &seeds, SELECTOR_TOKENS)
        },
        |s| format!("{s:?}"),
        |text| match LabelSelector::parse(text) {
            Ok(selector) => {
                assert_eq!(selector.as_str(), text);
                let canonical = selector.to_string();
                let again = LabelSelector::parse(&canonical).unwrap_or_else(|e| {
                    panic!("{text:?} parsed, its canonical form {canonical:?} did not: {e}")
                });
                assert_eq!(again.requirements(), selector.requirements(), "{text:?}");
                assert_eq!(again.to_string(), canonical, "{text:?}");
                assert_eq!(selector.matches(&labels), again.matches(&labels));
                Verdict::Accepted
            }
            Err(e) => {
                check_cluster_error(&e, text);
                assert_eq!(e.code(), "INVALID_ARGUMENT", "{text:?}: {e:?}");
                // Where: a column, or the end of the text.
                let detail = e.detail();
                assert!(
                    detail.contains("column") || detail.contains("reached the end"),
                    "{text:?}: no position in {e}"
                );
                Verdict::Rejected
            }
        },
    );
    assert!(report.accepted > 0 && report.rejected > 0, "{report:?}");
}

/// TF_CONFIG: every accessor answers or fails with a typed error; a readable TF_CONFIG
/// renders (`render_tf_config`) and reads back to the same cluster and task; the same text
/// inside a resolve request resolves offline or fails typed.
#[test]
fn fuzz_tf_config() {
    let seeds: Vec<Value> = text_corpus("tf_config")
        .iter()
        .map(|t| serde_json::from_str(t).expect("the TF_CONFIG corpus is JSON"))
        .collect();
    let raw: Vec<String> = text_corpus("tf_config");
    let keys = keys_of(&seeds);
    let keys: Vec<&str> =
        keys.iter().map(String::as_str).chain(["-1", "1e3", "environment"]).collect();
    let report = run(
        "tf-config",
        Budget::from_env(3_000),
        |rng, _| {
            if rng.one_in(4) {
                mutate_text(rng, &raw, &["{", "}", "\"", ":", ",", "[", "]", "\\", "null", "1e999"])
            } else {
                mutate_json_text(rng, &seeds, &keys)
            }
        },
        |s| format!("{s:?}"),
        |text| {
            let r = TfConfigResolver::new(Some(text));
            let spec = r.cluster_spec();
            let (task_type, task_id, rpc) = (r.task_type(), r.task_id(), r.rpc_layer());
            for e in [
                spec.as_ref().err(),
                task_type.as_ref().err(),
                task_id.as_ref().err(),
                rpc.as_ref().err(),
                r.master(None, None, None).as_ref().err(),
                r.master(Some("worker"), Some(0), Some("grpc")).as_ref().err(),
                r.session_master().as_ref().err(),
                r.num_accelerators(None, None, &[]).as_ref().err(),
            ]
            .into_iter()
            .flatten()
            {
                check_cluster_error(e, text);
            }
            let request = json!({"resolver": {"tf_config": {"value": text}}}).to_string();
            match ResolveRequest::from_json(&request) {
                Ok(req) => {
                    if let Err(e) = req.resolve(&HostInputs::default()) {
                        check_cluster_error(&e, text);
                    }
                }
                Err(e) => check_cluster_error(&e, text),
            }
            let (Ok(spec), Ok(task_type), Ok(task_id), Ok(rpc)) = (spec, task_type, task_id, rpc)
            else {
                return Verdict::Rejected;
            };
            let rendered = render_tf_config(&spec, task_type.as_deref(), task_id, rpc.as_deref());
            let back = TfConfigResolver::new(Some(&rendered));
            assert_eq!(back.cluster_spec().as_ref(), Ok(&spec), "{text:?} -> {rendered}");
            assert_eq!(back.task_type(), Ok(task_type), "{text:?} -> {rendered}");
            assert_eq!(back.task_id(), Ok(task_id), "{text:?} -> {rendered}");
            assert_eq!(back.rpc_layer(), Ok(rpc), "{text:?} -> {rendered}");
            assert_eq!(ClusterSpec::from_json(&spec.as_dict()).as_ref(), Ok(&spec));
            Verdict::Accepted
        },
    );
    assert!(report.accepted > 0 && report.rejected > 0, "{report:?}");
}

/// The most a "small" definition may ask one pipeline step to discard or hold, so that pulling
/// a few hundred elements stays cheap (a huge `skip` over an endless `repeat` is slow by design,
/// as in TensorFlow, not a defect).
const SMALL: u64 = 1_000;

fn is_small(def: &DatasetDef) -> bool {
    let files_ok = match &def.source {
        SourceDef::Files(f) => f.paths.len() as u64 <= SMALL,
        _ => true,
    };
    files_ok
        && def.transforms.iter().all(|t| match t {
            TransformDef::Take(n) | TransformDef::Skip(n) => *n <= SMALL,
            TransformDef::Repeat(n) => n.is_none_or(|n| n <= SMALL),
            TransformDef::Shuffle(s) => s.buffer.get() <= SMALL,
            TransformDef::Batch(b) => b.size.get() <= SMALL,
            _ => true,
        })
}

/// Pulls at most 300 elements of `def` under `sharding`, answering its requests (splits from
/// [`split_at`] with a split size of 3, files with a few JSON lines); returns the count.
fn drain(def: &DatasetDef, sharding: Sharding) -> Result<usize, DatasetError> {
    let mut pipeline = Pipeline::new(def, sharding)?;
    let split_size = 3;
    let splits = num_splits(&def.source, split_size);
    let mut next_split = BTreeMap::<u64, u64>::new();
    let mut elements = 0;
    for _ in 0..1_000 {
        match pipeline.next() {
            Step::Element(_) => {
                elements += 1;
                if elements >= 300 {
                    break;
                }
            }
            Step::NeedSplit { repetition } => {
                let i = next_split.entry(repetition).or_default();
                let split = (*i < splits).then(|| split_at(&def.source, split_size, *i)).flatten();
                *i += 1;
                pipeline.provide_split(repetition, split);
            }
            Step::NeedFile { path } => {
                pipeline.provide_file(&path, b"1\n{\"a\": [2]}\n\"three\"\n");
            }
            Step::NeedRows(r) => {
                // A columnar file of two rows the pipeline cannot look into.
                let chunk = shardwise_core::dataset::Chunk::new(2, 16, std::sync::Arc::new(()));
                pipeline.provide_rows(&r.path, chunk, true);
            }
            Step::NeedOutputs(r) => panic!("only a producer's pipeline asks for outputs: {r:?}"),
            Step::Yield => {}
            Step::End => break,
            Step::Error(e) => return Err(e),
        }
    }
    Ok(elements)
}

/// Dataset definitions: no panic; accepted definitions have a canonical JSON form that decodes
/// to the same definition, and small ones run under every sharding policy (or are refused with
/// a typed error) without panicking.
#[test]
fn fuzz_dataset_definition() {
    let seeds = corpus("dataset");
    let keys = keys_of(&seeds);
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let report = run(
        "dataset-definition",
        Budget::from_env(3_000),
        |rng, _| mutate_json_text(rng, &seeds, &keys),
        |s| format!("{s:?}"),
        |text| match text.parse::<DatasetDef>() {
            Ok(def) => {
                let canonical = def.to_json();
                assert_eq!(DatasetDef::from_json(&canonical).as_ref(), Ok(&def), "{text:?}");
                let reparsed: DatasetDef = canonical.to_string().parse().expect("canonical text");
                assert_eq!(reparsed, def);
                let _ = num_splits(&def.source, 1);
                let _ = split_at(&def.source, 1, u64::MAX);
                if is_small(&def) {
                    for sharding in [
                        Sharding::Off,
                        Sharding::Dynamic,
                        Sharding::Data { num_workers: 2, worker_index: 1 },
                        Sharding::File { num_workers: 2, worker_index: 0 },
                        Sharding::FileOrData { num_workers: 3, worker_index: 2 },
                        Sharding::Hint { num_workers: 2, worker_index: 0 },
                    ] {
                        let checked = validate_sharding(&def, sharding);
                        match drain(&def, sharding) {
                            Ok(_) => assert!(checked.is_ok(), "{text:?} {sharding:?}: {checked:?}"),
                            Err(e) => assert!(!e.message().is_empty(), "{text:?}: {e:?}"),
                        }
                    }
                }
                Verdict::Accepted
            }
            Err(e) => {
                assert_eq!(e.code(), "INVALID_ARGUMENT", "{text:?}: {e:?}");
                assert!(!e.message().is_empty());
                Verdict::Rejected
            }
        },
    );
    assert!(report.accepted > 0 && report.rejected > 0, "{report:?}");
}
