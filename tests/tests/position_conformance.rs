//! The Python package's read-position cases (`python/tests/position_cases.json`) folded by the
//! Rust core: both implementations of the fold give the same positions (the shared
//! `core/src/position/vectors.json` is checked by both sides too).

use serde_json::Value;
use shardwise_core::position::{OriginRun, PositionTracker, ReadPosition, merge_positions};
use shardwise_tests::repo_root;

fn position(v: &Value) -> ReadPosition {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("a position: {e}: {v}"))
}

#[test]
fn the_python_packages_position_cases_fold_alike_in_rust() {
    let path = repo_root().join("python/tests/position_cases.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 10, "the package has its cases");
    for case in cases {
        let name = case["name"].as_str().unwrap_or("?");
        if let Some(merge) = case.get("merge") {
            let parts: Vec<ReadPosition> = merge.as_array().unwrap().iter().map(position).collect();
            match (merge_positions(&parts), case.get("expect_error")) {
                (Err(_), Some(_)) => {}
                (Ok(got), None) => assert_eq!(got, position(&case["expect"]), "{name}"),
                (got, want) => panic!("{name}: got {got:?}, expected error {want:?}"),
            }
            continue;
        }
        let mut tracker = PositionTracker::new();
        for p in case.get("resume_from").and_then(Value::as_array).into_iter().flatten() {
            tracker.absorb(&position(p));
        }
        for step in case.get("steps").and_then(Value::as_array).into_iter().flatten() {
            let run: OriginRun = serde_json::from_value(step["run"].clone()).unwrap();
            let taken = step.get("taken").and_then(Value::as_u64).unwrap_or(run.count);
            tracker.consumed(&run, taken);
        }
        let dataset_id = case.get("dataset_id").and_then(Value::as_str).unwrap_or("d");
        let repetition = case.get("repetition").and_then(Value::as_u64).unwrap_or(0);
        let got = tracker.position(dataset_id, repetition);
        assert_eq!(got, position(&case["expect"]), "{name}");
    }
}
