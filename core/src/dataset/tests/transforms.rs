//! Transforms: ranges, take and skip, repeats, batches, shuffles, list and splits sources.

use super::*;

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
    let (first, stop) = values(p.next_batch(3));
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
            Step::Element(Element::Value(v)) => out.push(v),
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
