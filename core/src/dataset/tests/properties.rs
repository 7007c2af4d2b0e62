//! Properties over arbitrary and nearly valid definitions.

use super::*;

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
