//! Pipelines whose splits' outputs the caller produces ([`Pipeline::external`]).

use std::sync::Arc;

use super::*;
use crate::position::{OriginRun, SourceRange, SplitPositions};

fn at(start: u64, stop: u64, skip: u64, until: Option<u64>) -> Option<SplitPositions> {
    Some(SplitPositions { start, stop, skip, until })
}

fn values(vs: &[i64]) -> Outputs {
    Outputs::Values(vs.iter().map(|v| json!(v)).collect())
}

fn asked(p: &mut Pipeline) -> OutputsRequest {
    match p.next() {
        Step::NeedOutputs(r) => r,
        other => panic!("expected a request for outputs, got {other:?}"),
    }
}

fn emitted(p: &mut Pipeline, n: usize) -> Vec<Value> {
    (0..n)
        .map(|_| match p.next() {
            Step::Element(e) => e.into_value().expect("a JSON value"),
            other => panic!("expected an element, got {other:?}"),
        })
        .collect()
}

#[test]
fn a_dynamic_split_is_asked_for_chunk_by_chunk_with_origins_and_skips() {
    let mut p = Pipeline::external(&range(100), Sharding::Dynamic, 10, Limits::default()).unwrap();
    assert_eq!(p.next(), Step::NeedSplit { repetition: 0 });
    p.provide_split_at(0, Some((json!({"start": 0, "stop": 10}), at(0, 10, 2, None))));
    p.provide_split_at(0, Some((json!({"start": 10, "stop": 20}), at(10, 20, 0, Some(2)))));
    let first = asked(&mut p);
    assert_eq!((first.seq, first.provided), (0, 0));
    assert_eq!(first.split, json!({"start": 0, "stop": 10}));
    assert_eq!(first.positions.unwrap().skip, 2, "the producer learns what is skipped");
    // The first two outputs were consumed before: dropped, across chunks.
    p.provide_outputs(0, values(&[100]), false);
    assert_eq!(asked(&mut p).provided, 1, "asked again, on from the first output");
    p.provide_outputs(0, values(&[101, 102, 103]), false);
    assert_eq!(emitted(&mut p, 2), [json!(102), json!(103)]);
    p.provide_outputs(0, values(&[104]), true);
    assert_eq!(emitted(&mut p, 1), [json!(104)]);
    // The second split stops at output 2 (what follows was consumed before).
    let second = asked(&mut p);
    assert_eq!(second.seq, 1);
    p.provide_outputs(1, values(&[200, 201, 202, 203]), false);
    assert_eq!(emitted(&mut p, 2), [json!(200), json!(201)]);
    assert_eq!(p.next(), Step::NeedSplit { repetition: 0 }, "the rest is not asked for");
    let runs = p.take_origins().unwrap();
    let split = |start, stop| SourceRange { start, stop };
    assert_eq!(
        runs,
        [
            OriginRun { split: split(0, 10), offset: 2, count: 3, end: true },
            OriginRun { split: split(10, 20), offset: 0, count: 2, end: false },
        ]
    );
    p.provide_split_at(0, None);
    assert_eq!(p.next(), Step::End);
}

#[test]
fn off_cuts_the_source_as_the_dispatcher_does_and_rows_count_as_outputs() {
    let files = def_json(json!({"source": {"files": {"paths": ["a", "b"], "format": "lines"}}}));
    let mut p = Pipeline::external(&files, Sharding::Off, 1, Limits::default()).unwrap();
    let a = asked(&mut p);
    assert_eq!((a.seq, a.split.clone(), a.positions), (0, json!("a"), None));
    let chunk = Chunk::new(3, 30, Arc::new(()));
    p.provide_outputs(0, Outputs::Rows(chunk), true);
    for index in 0..3 {
        match p.next() {
            Step::Element(Element::Row(r)) => assert_eq!(r.index, index),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(asked(&mut p).split, json!("b"));
    p.provide_outputs(1, Outputs::Rows(Chunk::new(0, 0, Arc::new(()))), true);
    assert_eq!(p.next(), Step::End);
    assert_eq!(p.take_origins(), None, "OFF reads have no positions");
    let mut r = Pipeline::external(&range(25), Sharding::Off, 10, Limits::default()).unwrap();
    let splits: Vec<Value> = (0..3)
        .map(|seq| {
            let req = asked(&mut r);
            r.provide_outputs(seq, values(&[]), true);
            req.split
        })
        .collect();
    assert_eq!(
        splits,
        [
            json!({"start": 0, "stop": 10}),
            json!({"start": 10, "stop": 20}),
            json!({"start": 20, "stop": 25})
        ]
    );
    assert_eq!(r.next(), Step::End);
}

#[test]
fn what_the_pipeline_did_not_ask_for_fails_it() {
    let fails = |p: &mut Pipeline, what: &str| match p.next() {
        Step::Error(e) => assert!(e.message().contains(what), "{what:?} in {e}"),
        other => panic!("expected an error with {what:?}, got {other:?}"),
    };
    let mut p = Pipeline::external(&range(10), Sharding::Off, 5, Limits::default()).unwrap();
    p.provide_outputs(0, values(&[1]), false);
    fails(&mut p, "did not ask for them");
    let mut p = Pipeline::external(&range(10), Sharding::Off, 5, Limits::default()).unwrap();
    asked(&mut p);
    p.provide_outputs(1, values(&[1]), false);
    fails(&mut p, "asked for split 0");
    let mut p = Pipeline::external(&range(10), Sharding::Off, 5, Limits::default()).unwrap();
    asked(&mut p);
    p.provide_outputs(0, values(&[]), false);
    fails(&mut p, "without an output and without the end");
    let mut p = Pipeline::external(&range(10), Sharding::Off, 5, Limits::default()).unwrap();
    asked(&mut p);
    p.provide_outputs(0, values(&[1]), true);
    emitted(&mut p, 1);
    asked(&mut p);
    p.provide_outputs(1, Outputs::Rows(Chunk::new(1, 8, Arc::new(()))), true);
    fails(&mut p, "made rows after JSON values");
    // A split that is not the source's is refused as for any pipeline.
    let mut p = Pipeline::external(&range(10), Sharding::Dynamic, 5, Limits::default()).unwrap();
    assert_eq!(p.next(), Step::NeedSplit { repetition: 0 });
    p.provide_split_at(0, Some((json!({"start": 5, "stop": 50}), None)));
    assert!(matches!(p.next(), Step::Error(_)));
}

#[test]
fn transforms_and_static_policies_are_refused() {
    let shuffled = with(range(10), json!([{"take": 3}]));
    let e = Pipeline::external(&shuffled, Sharding::Dynamic, 5, Limits::default()).unwrap_err();
    assert!(e.message().contains("runs no transforms"), "{e}");
    let data = Sharding::Data { num_workers: 2, worker_index: 0 };
    let e = Pipeline::external(&range(10), data, 5, Limits::default()).unwrap_err();
    assert!(e.message().contains("OFF and DYNAMIC"), "{e}");
}
