//! The scenarios of reference/dispatcher_scenarios.md that a pipeline alone can express.

use super::*;

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
