//! Every parser of the crate fed arbitrary text and arbitrary JSON: each returns a value or a
//! typed error, never panics. Plus two round trips: `ClusterSpec` through `as_dict()`, and a
//! task through `render_tf_config` and `TfConfigResolver`.
//!
//! Case counts are proptest's (256 by default); `PROPTEST_CASES=100000 cargo test ...` runs
//! longer.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Value, json};
use shardwise_core::cluster::pods::PodList;
use shardwise_core::cluster::request::HostInputs;
use shardwise_core::cluster::slurm::{expand_hostlist, expand_tasks_per_node};
use shardwise_core::cluster::{
    ClusterError, ClusterResolver, ClusterSpec, LabelSelector, ResolveRequest, TaskIndex, Tasks,
    TfConfigResolver, render_tf_config,
};
use shardwise_core::json::parse_strict;

// ---------------------------------------------------------------------------------------------
// Text

/// Arbitrary text, with a share of JSON-, selector- and hostlist-looking strings.
fn text() -> BoxedStrategy<String> {
    prop_oneof![
        2 => any::<String>(),
        1 => "\\PC{0,24}",
        2 => "[\\[\\]{}:,\"0-9a-z .eE+\\-\\\\/]{0,40}",
        1 => "[ \t\n\r]{0,3}[{\\[\"0-9tfn-][\\[\\]{}:,\"0-9.eE+tnulrfase\\-]{0,30}",
    ]
    .boxed()
}

/// A selector-shaped string.
fn selector_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => select(vec![
            "", "job-name=tensorflow", "app=w", "app==w", "app!=w", "app in (a,b)",
            "app notin (a)", "!gpu", "gpu", "rank>3", "rank<3", "a=1,b=2", "example.com/role=ps",
            "=x", "app in (a", "app in ()", "a,,b", "a=b=c", "in in (in)", " a = b ", "a>b",
            "a in (x,)", "-a=b", "a/b/c=d",
        ])
        .prop_map(str::to_owned),
        2 => "[a-z0-9=!(),<> .\\-_/]{0,30}",
        1 => "[a-zé\\u{1F600}=!(),<> \t\n.\\-_/]{0,20}",
    ]
    .boxed()
}

/// A Slurm-hostlist-shaped string with small numbers (so expansion stays cheap).
fn hostlist_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "[a-c]{1,3}(\\[[0-9]{1,3}(-[0-9]{1,2})?(,[0-9]{1,2}(-[0-9]{1,2})?){0,2}\\])?(,[a-c][0-9]?(\\[[0-9]-[0-9]\\])?){0,3}",
        2 => "[a-c0-9\\[\\],x() _+\n-]{0,24}",
        1 => select(vec!["", "n[1-2", "n[]", "n[a-b]", "n[5-3]", "n[ 1]", "n[1_0]", "n[0-99999999999]",
                         "n[9223372036854775807-9223372036854775808]", "n[1-2]\n", "n[1-2]x", "[1]", ","])
            .prop_map(str::to_owned),
    ]
    .boxed()
}

fn tasks_per_node_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "[0-4](\\(x[0-4]\\))?(,[0-4](\\(x[0-4]\\))?){0,3}",
        2 => "[0-9x(),\n -]{0,16}",
        1 => select(vec!["", "x", "3(x", "3(x0)", "1(x9999999999)", "99999999999", "1\n", "١"])
            .prop_map(str::to_owned),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------------------------
// JSON

/// An object key: mostly small integers as strings (sparse task indices), some near-integers
/// Python's `int()` may or may not take, field names the parsers look at, and anything.
fn key() -> BoxedStrategy<String> {
    prop_oneof![
        5 => (-1_i64..6).prop_map(|i| i.to_string()),
        2 => select(vec![
            " 1", "1 ", "01", "+2", "1_0", "1__0", "_1", "1.0", "", "0x1", "٣", "2147483647",
            "2147483648", "-2147483648", "-2147483649", "99999999999999999999",
        ])
        .prop_map(str::to_owned),
        2 => select(vec![
            "worker", "ps", "chief", "cluster", "task", "type", "index", "rpc_layer",
            "session_master", "metadata", "name", "status", "phase", "items", "podIP",
        ])
        .prop_map(str::to_owned),
        1 => "\\PC{0,6}",
    ]
    .boxed()
}

/// A JSON leaf: mostly strings (addresses), null and numbers.
fn leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => select(vec!["a:1", "10.0.0.1:8470", "[fd00::1]:2222", "", "grpc", "worker", "Running"])
            .prop_map(Value::from),
        2 => "\\PC{0,12}".prop_map(Value::from),
        2 => Just(Value::Null),
        2 => (-3_i64..8).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(Value::from),
        1 => any::<bool>().prop_map(Value::Bool),
    ]
    .boxed()
}

/// Arbitrary JSON of small depth, biased toward objects with small-integer keys.
fn json_value() -> BoxedStrategy<Value> {
    leaf()
        .prop_recursive(3, 40, 5, |inner| {
            prop_oneof![
                2 => proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                3 => proptest::collection::vec((key(), inner), 0..5).prop_map(object),
            ]
        })
        .boxed()
}

/// An object from pairs (a repeated key keeps the last value, as `serde_json` does).
fn object(fields: Vec<(String, Value)>) -> Value {
    Value::Object(fields.into_iter().collect())
}

/// An object of the fields that are present.
fn fields(pairs: Vec<(&str, Option<Value>)>) -> Value {
    Value::Object(pairs.into_iter().filter_map(|(k, v)| Some((k.to_owned(), v?))).collect())
}

/// What `ClusterSpec::from_json` takes: jobs that are lists or index maps of addresses, and
/// now and then something wrong.
fn cluster_json() -> BoxedStrategy<Value> {
    let address = prop_oneof![
        8 => select(vec!["a:1", "b:2", "10.0.0.1:8470", "[fd00::1]:2222", ""]).prop_map(Value::from),
        1 => leaf(),
    ];
    let index = prop_oneof![8 => (0_i64..6).prop_map(|i| i.to_string()), 1 => key()];
    let job = prop_oneof![
        4 => proptest::collection::vec(address.clone(), 0..4).prop_map(Value::Array),
        4 => proptest::collection::vec((index, address), 0..4).prop_map(object),
        1 => leaf(),
        1 => json_value(),
    ];
    let name = prop_oneof![
        6 => select(vec!["worker", "ps", "chief", "evaluator", ""]).prop_map(str::to_owned),
        1 => "\\PC{0,6}",
    ];
    prop_oneof![
        12 => proptest::collection::vec((name, job), 0..4).prop_map(object),
        1 => json_value(),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------------------------
// Resolve requests: plausible, and wrong here and there

/// Mostly `valid`, now and then any JSON leaf (a wrong type, or null).
fn mostly(valid: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop_oneof![12 => valid, 1 => leaf()].boxed()
}

/// An optional field that is usually well-typed.
fn opt(valid: BoxedStrategy<Value>) -> BoxedStrategy<Option<Value>> {
    proptest::option::of(mostly(valid)).boxed()
}

/// A field no decoder knows: rarely present.
fn stray() -> BoxedStrategy<Option<Value>> {
    proptest::option::weighted(0.03, leaf()).boxed()
}

fn one_of(options: Vec<&'static str>) -> BoxedStrategy<Value> {
    select(options).prop_map(Value::from).boxed()
}

fn job_name() -> BoxedStrategy<String> {
    select(vec!["worker", "worker", "ps", "chief", "evaluator", ""]).prop_map(str::to_owned).boxed()
}

fn small_count() -> BoxedStrategy<Value> {
    mostly((0_u64..4).prop_map(Value::from).boxed())
}

/// A v1 pod: mostly Running with addresses, sometimes not, now and then junk.
fn pod_json() -> BoxedStrategy<Value> {
    let pod = (
        select(vec!["w-0", "w-1", "w-10", "w-2", "ps-0", "c-0"]),
        proptest::option::of(select(vec!["ml", "ml", "other", ""])),
        proptest::option::weighted(
            0.95,
            select(vec![
                "Running",
                "Running",
                "Running",
                "Running",
                "Running",
                "Running",
                "Pending",
                "Failed",
                "Succeeded",
                "Unknown",
                "running",
            ]),
        ),
        proptest::option::weighted(
            0.95,
            select(vec!["10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::5", "", "[fd00::1]"]),
        ),
        proptest::option::weighted(0.95, select(vec!["192.168.0.1", "fd00:1::7", ""])),
        proptest::option::weighted(0.9, select(vec!["True", "True", "True", "False", "Unknown"])),
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(name, namespace, phase, pod_ip, host_ip, ready, terminating)| {
            let mut metadata = json!({"name": name, "labels": {"job-name": "tensorflow"}});
            if let Some(ns) = namespace {
                metadata["namespace"] = json!(ns);
            }
            if terminating {
                metadata["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            let status = fields(vec![
                ("phase", phase.map(Value::from)),
                ("podIP", pod_ip.map(Value::from)),
                ("hostIP", host_ip.map(Value::from)),
                ("conditions", ready.map(|s| json!([{"type": "Ready", "status": s}]))),
            ]);
            json!({"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "status": status})
        });
    prop_oneof![12 => pod, 1 => json_value()].boxed()
}

fn pod_list_json() -> BoxedStrategy<Value> {
    let list = (
        proptest::option::of(select(vec![
            "PodList", "PodList", "PodList", "List", "Status", "Pod",
        ])),
        proptest::option::of(select(vec!["1", "100"])),
        proptest::collection::vec(pod_json(), 0..4),
    )
        .prop_map(|(kind, rv, items)| {
            fields(vec![
                ("kind", kind.map(Value::from)),
                ("metadata", rv.map(|rv| json!({"resourceVersion": rv}))),
                ("items", Some(Value::Array(items))),
            ])
        });
    prop_oneof![12 => list, 1 => json_value()].boxed()
}

/// A selector as a mapping or a `pods` key: mostly one of a few, so that they meet.
fn k8s_selector() -> BoxedStrategy<String> {
    prop_oneof![
        8 => select(vec!["job-name=tensorflow", "job-name=tensorflow", "app=w", "app=ps", ""])
            .prop_map(str::to_owned),
        1 => selector_text(),
    ]
    .boxed()
}

fn kubernetes_json() -> BoxedStrategy<Value> {
    let selectors = proptest::collection::vec(k8s_selector().prop_map(Value::from), 0..3)
        .prop_map(Value::Array)
        .boxed();
    let mapping =
        proptest::collection::vec((job_name(), mostly(selectors)), 0..3).prop_map(object).boxed();
    let pods =
        proptest::collection::vec((k8s_selector(), pod_list_json()), 0..4).prop_map(object).boxed();
    let expected =
        proptest::collection::vec((job_name(), small_count()), 0..3).prop_map(object).boxed();
    (
        opt(mapping),
        opt(prop_oneof![
            8 => select(vec![8470_i64, 2222, 1, 65535]).prop_map(Value::from),
            1 => select(vec![0_i64, 65536, 70000, -1]).prop_map(Value::from),
        ]
        .boxed()),
        proptest::option::of(prop_oneof![one_of(vec!["grpc", ""]), Just(Value::Null)]),
        proptest::option::of(prop_oneof![
            12 => one_of(vec!["pod_ip", "host_ip"]),
            1 => Just(json!("node_ip")),
        ]),
        opt(one_of(vec!["ml", "ml", "other", ""])),
        opt(any::<bool>().prop_map(Value::Bool).boxed()),
        opt(expected),
        proptest::option::weighted(0.9, mostly(pods)),
        stray(),
        (proptest::bool::weighted(0.8), proptest::collection::vec(pod_list_json(), 1..3)),
    )
        .prop_map(
            |(mapping, port, rpc, address, namespace, ready, expected, pods, stray, cover)| {
                // Mostly, `pods` has a list for every selector the mapping (or the default) uses.
                let pods = match (pods, cover) {
                    (Some(Value::Object(mut lists)), (true, spare)) => {
                        let used: Vec<String> = match &mapping {
                            Some(Value::Object(m)) if !m.is_empty() => m
                                .values()
                                .filter_map(Value::as_array)
                                .flatten()
                                .filter_map(Value::as_str)
                                .map(str::to_owned)
                                .collect(),
                            _ => vec!["job-name=tensorflow".to_owned()],
                        };
                        for (i, selector) in used.into_iter().enumerate() {
                            lists.entry(selector).or_insert_with(|| spare[i % spare.len()].clone());
                        }
                        Some(Value::Object(lists))
                    }
                    (pods, _) => pods,
                };
                fields(vec![
                    ("job_to_label_mapping", mapping),
                    ("tf_server_port", port),
                    ("rpc_layer", rpc),
                    ("address", address),
                    ("namespace", namespace),
                    ("require_ready", ready),
                    ("expected", expected),
                    ("pods", pods),
                    ("executable_location", stray),
                ])
            },
        )
        .boxed()
}

/// A Slurm step environment; half the time `SLURM_STEP_NUM_TASKS` is the step's real size.
fn slurm_env() -> BoxedStrategy<Value> {
    let int_text = || {
        prop_oneof![
            12 => (0_u32..6).prop_map(|n| n.to_string()),
            1 => select(vec!["-1", "x", " 2", "+1", "1_0", "", "99999999999999999999"])
                .prop_map(str::to_owned),
        ]
    };
    (
        proptest::option::weighted(0.95, int_text()),
        proptest::option::weighted(0.95, int_text()),
        any::<bool>(),
        proptest::option::weighted(0.95, hostlist_text()),
        proptest::option::weighted(0.95, tasks_per_node_text()),
        proptest::option::of(select(vec!["", "0", "0,1", "0,1,2,3", "x", " , "])),
    )
        .prop_map(|(procid, num, consistent, nodelist, tasks, cuda)| {
            let num = if consistent {
                // What the resolver will count: hosts zipped with counts, a later host wins.
                let hosts = nodelist.as_deref().map(expand_hostlist);
                let counts = tasks.as_deref().map(expand_tasks_per_node);
                let configuration: std::collections::BTreeMap<String, u32> = hosts
                    .and_then(Result::ok)
                    .unwrap_or_default()
                    .into_iter()
                    .zip(counts.and_then(Result::ok).unwrap_or_default())
                    .collect();
                Some(configuration.values().map(|&n| u64::from(n)).sum::<u64>().to_string())
            } else {
                num
            };
            fields(vec![
                ("SLURM_PROCID", procid.map(Value::from)),
                ("SLURM_STEP_NUM_TASKS", num.map(Value::from)),
                ("SLURM_STEP_NODELIST", nodelist.map(Value::from)),
                ("SLURM_STEP_TASKS_PER_NODE", tasks.map(Value::from)),
                ("CUDA_VISIBLE_DEVICES", cuda.map(Value::from)),
            ])
        })
        .boxed()
}

fn slurm_json() -> BoxedStrategy<Value> {
    let small = || mostly((0_u64..5).prop_map(Value::from).boxed());
    let jobs = proptest::collection::vec((job_name(), small()), 0..3).prop_map(object).boxed();
    let per_host =
        proptest::collection::vec(("[a-c][0-9]?", small()), 0..3).prop_map(object).boxed();
    (
        proptest::option::weighted(0.9, mostly(slurm_env())),
        proptest::option::weighted(0.2, mostly(jobs)),
        opt(prop_oneof![
            8 => select(vec![8888_i64, 1, 65535]).prop_map(Value::from),
            1 => select(vec![0_i64, 65536, -1]).prop_map(Value::from),
        ]
        .boxed()),
        proptest::option::of(small()),
        proptest::option::of(small()),
        proptest::option::weighted(0.2, prop_oneof![small(), mostly(per_host)]),
        opt(any::<bool>().prop_map(Value::Bool).boxed()),
        proptest::option::of(prop_oneof![Just(Value::Null), Just(json!("grpc"))]),
        stray(),
    )
        .prop_map(|(env, jobs, port_base, gpn, gpt, tpn, auto, rpc, stray)| {
            fields(vec![
                ("env", env),
                ("jobs", jobs),
                ("port_base", port_base),
                ("gpus_per_node", gpn),
                ("gpus_per_task", gpt),
                ("tasks_per_node", tpn),
                ("auto_set_gpu", auto),
                ("rpc_layer", rpc),
                ("auto_detect_gpus", stray),
            ])
        })
        .boxed()
}

fn simple_json() -> BoxedStrategy<Value> {
    let accelerators = proptest::collection::vec(
        (select(vec!["GPU", "TPU"]).prop_map(str::to_owned), small_count()),
        0..2,
    )
    .prop_map(object)
    .boxed();
    (
        cluster_json(),
        opt(one_of(vec!["", "grpc://a:1", "local"])),
        opt(job_name().prop_map(Value::from).boxed()),
        opt((-1_i64..4).prop_map(Value::from).boxed()),
        opt(one_of(vec!["grpc", ""])),
        opt(one_of(vec!["", "google"])),
        opt(accelerators),
        stray(),
    )
        .prop_map(|(cluster, master, task_type, task_id, rpc, environment, accel, stray)| {
            fields(vec![
                ("cluster", Some(cluster)),
                ("master", master),
                ("task_type", task_type),
                ("task_id", task_id),
                ("rpc_layer", rpc),
                ("environment", environment),
                ("num_accelerators", accel),
                ("cluster_def", stray),
            ])
        })
        .boxed()
}

/// TF_CONFIG text: mostly a cluster and a task, sometimes any JSON, sometimes not JSON.
fn tf_config_text() -> BoxedStrategy<String> {
    let task =
        (job_name(), small_count()).prop_map(|(t, i)| json!({"type": t, "index": i})).boxed();
    prop_oneof![
        6 => (cluster_json(), proptest::option::of(mostly(task)), proptest::option::of(leaf()))
            .prop_map(|(cluster, task, rpc)| {
                fields(vec![("cluster", Some(cluster)), ("task", task), ("rpc_layer", rpc)])
                    .to_string()
            }),
        1 => json_value().prop_map(|v| v.to_string()),
        1 => text(),
    ]
    .boxed()
}

fn tf_config_json() -> BoxedStrategy<Value> {
    (
        proptest::option::weighted(0.9, mostly(tf_config_text().prop_map(Value::from).boxed())),
        opt(one_of(vec!["", "google"])),
        stray(),
    )
        .prop_map(|(value, environment, stray)| {
            fields(vec![("value", value), ("environment", environment), ("task_type", stray)])
        })
        .boxed()
}

/// One resolver of a kind (or of no kind).
fn single_resolver() -> BoxedStrategy<Value> {
    prop_oneof![
        6 => simple_json().prop_map(|v| json!({"simple": v})),
        6 => tf_config_json().prop_map(|v| json!({"tf_config": v})),
        8 => kubernetes_json().prop_map(|v| json!({"kubernetes": v})),
        6 => slurm_json().prop_map(|v| json!({"slurm": v})),
        1 => (select(vec!["unknown", "Simple", "union", "kubernetes", "slurm"]), json_value())
            .prop_map(|(kind, v)| json!({kind: v})),
        1 => json_value(),
    ]
    .boxed()
}

/// A union of 1-3 members, and now and then of none.
fn union_of(member: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop_oneof![
        12 => proptest::collection::vec(member, 1..4),
        1 => Just(Vec::new()),
    ]
    .prop_map(|m| json!({"union": m}))
    .boxed()
}

/// A `resolver` value: mostly one kind, often a union (nested a little).
fn resolver_json() -> BoxedStrategy<Value> {
    let member = prop_oneof![4 => single_resolver(), 1 => union_of(single_resolver())].boxed();
    let two_kinds = (single_resolver(), single_resolver()).prop_map(|(a, b)| {
        // Two kinds in one resolver object.
        let mut merged = a.as_object().cloned().unwrap_or_default();
        merged.extend(b.as_object().cloned().unwrap_or_default());
        Value::Object(merged)
    });
    prop_oneof![8 => single_resolver(), 4 => union_of(member), 1 => two_kinds].boxed()
}

fn request_json() -> BoxedStrategy<Value> {
    let device = (
        select(vec![
            "/job:worker/replica:0/task:0/device:GPU:0",
            "/job:worker/replica:0/task:1/device:GPU:0",
            "/job:worker2/task:10/device:TPU:0",
            "/device:CPU:0",
            "",
        ]),
        select(vec!["GPU", "TPU", "CPU", "XLA_CPU"]),
    )
        .prop_map(|(name, device_type)| json!({"name": name, "device_type": device_type}));
    let task_id = prop_oneof![
        8 => (-1_i64..4).prop_map(Value::from),
        1 => select(vec![i64::MAX, i64::MIN, 2_147_483_648]).prop_map(Value::from),
    ]
    .boxed();
    (
        proptest::option::weighted(0.97, resolver_json()),
        opt(job_name().prop_map(Value::from).boxed()),
        opt(task_id),
        opt(one_of(vec!["grpc", "", "http"])),
        opt(proptest::collection::vec(device, 0..3).prop_map(Value::Array).boxed()),
        proptest::option::of(prop_oneof![
            12 => one_of(vec!["exact", "tf_substring"]),
            1 => Just(json!("fuzzy")),
        ]),
        stray(),
    )
        .prop_map(|(resolver, task_type, task_id, rpc, devices, device_match, stray)| {
            fields(vec![
                ("resolver", resolver),
                ("task_type", task_type),
                ("task_id", task_id),
                ("rpc_layer", rpc),
                ("devices", devices),
                ("device_match", device_match),
                ("verbose", stray),
            ])
        })
        .boxed()
}

/// Decodes and, when that works, resolves offline: a reply or a typed error.
fn decode_and_resolve(text: &str) -> Result<(), TestCaseError> {
    let Ok(request) = ResolveRequest::from_json(text) else { return Ok(()) };
    match request.resolve(&HostInputs::default()) {
        Ok(reply) => {
            // A reply is self-consistent: its cluster parses back to its cluster_def.
            let cluster = ClusterSpec::from_json(&reply.cluster);
            prop_assert!(cluster.is_ok(), "{:?}", cluster);
            let cluster = cluster.unwrap_or_default();
            prop_assert_eq!(cluster.cluster_def(), reply.cluster_def);
        }
        Err(e) => check_error(&e)?,
    }
    Ok(())
}

/// Every error has a status class and a message.
fn check_error(e: &ClusterError) -> Result<(), TestCaseError> {
    prop_assert!(
        ["INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "UNAVAILABLE"]
            .contains(&e.code().as_str())
    );
    prop_assert!(!e.detail().is_empty(), "{:?}", e);
    Ok(())
}

fn exercise_tf_config(text: &str) -> Result<(), TestCaseError> {
    let r = TfConfigResolver::new(Some(text));
    for e in [
        r.cluster_spec().err(),
        r.task_type().err(),
        r.task_id().err(),
        r.rpc_layer().err(),
        r.master(None, None, None).err(),
        r.master(Some("worker"), Some(0), Some("grpc")).err(),
        r.session_master().err(),
    ]
    .into_iter()
    .flatten()
    {
        check_error(&e)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Valid clusters, for the round trips

/// 1-4 jobs with distinct names (in arbitrary order), each dense or sparse with indices in
/// `0..1000`.
fn valid_cluster() -> BoxedStrategy<ClusterSpec> {
    let address = prop_oneof![
        3 => "[a-z0-9.-]{1,12}:[0-9]{1,5}",
        1 => "\\PC{0,16}",
    ];
    let tasks = prop_oneof![
        proptest::collection::vec(address.clone(), 0..5).prop_map(Tasks::Dense),
        proptest::collection::btree_map(0_i64..1000, address, 0..5)
            .prop_map(|m| Tasks::Sparse(m.into_iter().collect())),
    ];
    let name = prop_oneof![
        3 => select(vec!["worker", "ps", "chief", "evaluator"]).prop_map(str::to_owned),
        1 => "\\PC{0,8}",
    ];
    proptest::collection::vec((name, tasks), 1..=4)
        .prop_map(|jobs| {
            let mut seen = std::collections::BTreeSet::new();
            let jobs: Vec<(String, Tasks)> =
                jobs.into_iter().filter(|(name, _)| seen.insert(name.clone())).collect();
            ClusterSpec::from_jobs(jobs).expect("indices in 0..1000 are valid")
        })
        .boxed()
}

proptest! {
    #[test]
    fn parse_strict_never_panics(s in text()) {
        let _ = parse_strict(&s);
    }

    #[test]
    fn parse_strict_takes_serialized_json_and_refuses_repeated_keys(
        v in json_value(),
        k in key(),
    ) {
        let text = v.to_string();
        prop_assert!(parse_strict(&text).is_ok(), "{}", text);
        let k = Value::from(k).to_string();
        let doubled = format!("{{{k}: {text}, {k}: null}}");
        prop_assert!(parse_strict(&doubled).is_err(), "{}", doubled);
    }

    #[test]
    fn tf_config_never_panics_on_text(s in text()) {
        exercise_tf_config(&s)?;
    }

    #[test]
    fn tf_config_never_panics_on_json(
        cluster in cluster_json(),
        task in proptest::option::of(json_value()),
        rpc in proptest::option::of(leaf()),
        master in proptest::option::of(leaf()),
        whole in json_value(),
    ) {
        let v = fields(vec![
            ("cluster", Some(cluster)),
            ("task", task),
            ("rpc_layer", rpc),
            ("session_master", master),
        ]);
        exercise_tf_config(&v.to_string())?;
        exercise_tf_config(&whole.to_string())?;
    }

    #[test]
    fn cluster_spec_from_json_never_panics(v in prop_oneof![json_value(), cluster_json()]) {
        match ClusterSpec::from_json(&v) {
            Ok(spec) => {
                // Whatever parses renders, and the rendering parses to the same cluster.
                let again = ClusterSpec::from_json(&spec.as_dict());
                prop_assert_eq!(again.as_ref(), Ok(&spec));
                let _ = spec.py_repr();
                for job in spec.jobs() {
                    let _ = spec.job_tasks_len(job);
                    let _ = spec.task_indices(job);
                }
            }
            Err(e) => check_error(&e)?,
        }
    }

    #[test]
    fn resolve_request_never_panics_on_text(s in text()) {
        decode_and_resolve(&s)?;
    }

    #[test]
    fn resolve_request_never_panics_on_plausible_requests(v in request_json()) {
        decode_and_resolve(&v.to_string())?;
    }

    #[test]
    fn label_selector_never_panics(s in prop_oneof![text(), selector_text()]) {
        match LabelSelector::parse(&s) {
            Ok(selector) => prop_assert_eq!(selector.as_str(), s.as_str()),
            Err(e) => prop_assert_eq!(e.code(), "INVALID_ARGUMENT"),
        }
    }

    #[test]
    fn slurm_lists_never_panic(
        s in prop_oneof![text(), hostlist_text(), tasks_per_node_text()],
    ) {
        match expand_hostlist(&s) {
            Ok(hosts) => prop_assert!(hosts.len() <= 1_000_000),
            Err(e) => prop_assert_eq!(e.code(), "INVALID_ARGUMENT"),
        }
        match expand_tasks_per_node(&s) {
            Ok(counts) => prop_assert!(counts.len() <= 1_000_000),
            Err(e) => prop_assert_eq!(e.code(), "INVALID_ARGUMENT"),
        }
    }

    #[test]
    fn pod_list_never_panics(v in prop_oneof![json_value(), pod_list_json()]) {
        match PodList::from_json(&v) {
            Ok(list) => prop_assert!(list.items.iter().all(|p| !p.name.is_empty())),
            Err(e) => prop_assert_eq!(e.code(), "INVALID_ARGUMENT"),
        }
        let wrapped = json!({"items": [v]});
        if let Err(e) = PodList::from_json(&wrapped) {
            prop_assert_eq!(e.code(), "INVALID_ARGUMENT");
        }
    }

    #[test]
    fn cluster_spec_round_trips_through_as_dict(spec in valid_cluster()) {
        let dict = spec.as_dict();
        let back = ClusterSpec::from_json(&dict);
        prop_assert!(back.is_ok(), "{}: {:?}", dict, back);
        let back = back.unwrap_or_default();
        prop_assert_eq!(&back, &spec);
        prop_assert_eq!(back.cluster_def(), spec.cluster_def());
        prop_assert_eq!(back.jobs().collect::<Vec<_>>(), spec.jobs().collect::<Vec<_>>());
        prop_assert_eq!(back.as_dict(), dict);
        // Through text as well (what a TF_CONFIG or a request carries).
        let text = parse_strict(&spec.as_dict().to_string());
        prop_assert_eq!(text.as_ref().map(ClusterSpec::from_json), Ok(Ok(spec.clone())));
    }

    #[test]
    fn rendered_tf_config_parses_back(
        spec in valid_cluster(),
        task_type in proptest::option::of(prop_oneof![
            3 => select(vec!["worker", "ps", "chief"]).prop_map(str::to_owned),
            1 => "\\PC{0,8}",
        ]),
        task_id in proptest::option::of(prop_oneof![
            3 => 0_i64..8,
            1 => any::<TaskIndex>(),
        ]),
        rpc_layer in proptest::option::of(prop_oneof![
            3 => select(vec!["grpc", "grpc+verbs", ""]).prop_map(str::to_owned),
            1 => "\\PC{0,8}",
        ]),
    ) {
        let text = render_tf_config(&spec, task_type.as_deref(), task_id, rpc_layer.as_deref());
        let r = TfConfigResolver::new(Some(&text));
        let cluster = r.cluster_spec();
        prop_assert_eq!(cluster.as_ref(), Ok(&spec), "{}", text);
        let cluster = cluster.unwrap_or_default();
        prop_assert_eq!(cluster.jobs().collect::<Vec<_>>(), spec.jobs().collect::<Vec<_>>());
        prop_assert_eq!(cluster.cluster_def(), spec.cluster_def());
        prop_assert_eq!(r.task_type(), Ok(task_type));
        prop_assert_eq!(r.task_id(), Ok(task_id));
        prop_assert_eq!(r.rpc_layer(), Ok(rpc_layer));
    }
}
