//! The caller protocol: queued and stale splits, unexpected inputs, what stops a batch.

use super::*;

#[test]
fn splits_can_be_queued_and_stale_ones_are_dropped() {
    let d = with(range(10), json!([{"take": 3}, {"repeat": 2}]));
    let mut p = Pipeline::new(&d, Sharding::Dynamic).unwrap();
    assert_eq!(p.next(), Step::NeedSplit { repetition: 0 });
    p.provide_split(0, Some(json!({"start": 0, "stop": 2})));
    p.provide_split(0, Some(json!({"start": 5, "stop": 7})));
    assert_eq!(
        values(p.next_batch(10)),
        (ints([0, 1, 5]), Some(Step::NeedSplit { repetition: 1 }))
    );
    // The rest of repetition 0 (the take ended the pass) is stale now.
    p.provide_split(0, Some(json!({"start": 7, "stop": 9})));
    p.provide_split(0, None);
    p.provide_split(1, Some(json!({"start": 9, "stop": 10})));
    assert_eq!(p.next(), Step::Element(json!(9).into()));
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
    assert_eq!(values(p.next_batch(0)), (vec![], None));
    assert_eq!(values(p.next_batch(2)), (ints([0, 1]), None));
    assert_eq!(values(p.next_batch(10)), (ints([2, 3, 4]), Some(Step::End)));
    let mut p = Pipeline::new(&range(5), Sharding::Dynamic).unwrap();
    assert_eq!(values(p.next_batch(10)), (vec![], Some(Step::NeedSplit { repetition: 0 })));
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
