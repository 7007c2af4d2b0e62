//! The resolver's behaviour: GPUs, missing and bad variables, per-host configuration, ports,
//! bounds, and the serde contract.

use super::*;

#[test]
fn zero_gpus_work_and_assign_empty_lists() {
    let base = [
        ("SLURM_PROCID", "2"),
        ("SLURM_STEP_NUM_TASKS", "3"),
        ("SLURM_STEP_TASKS_PER_NODE", "2,1"),
        ("SLURM_STEP_NODELIST", "a,b"),
    ];
    let empty_cuda: Vec<_> = base.iter().copied().chain([("CUDA_VISIBLE_DEVICES", "")]).collect();
    let cases = [
        (base.to_vec(), json!({})),
        (empty_cuda, json!({})),
        (base.to_vec(), json!({"gpus_per_node": 0})),
        (base.to_vec(), json!({"gpus_per_node": 4, "gpus_per_task": 0})),
    ];
    for (vars, value) in cases {
        let r = resolve(&vars, value.clone()).unwrap();
        assert_eq!(r.gpus_per_task(), 0, "{value}");
        assert_eq!(r.gpu_allocation(), strings(&["", "", ""]));
        assert_eq!(r.environment_updates().unwrap(), env(&[("CUDA_VISIBLE_DEVICES", "")]));
        assert_eq!(
            r.num_accelerators(None, None, &[]).unwrap(),
            Accelerators::from([("GPU".to_owned(), 0)])
        );
        assert_eq!(
            r.cluster_spec().unwrap().as_dict(),
            json!({"worker": ["a:8888", "a:8889", "b:8888"]})
        );
        assert_eq!(r.master(None, None, None).unwrap(), "grpc://b:8888");
    }
    // Blank entries do not count; the detected count is used only without other sources.
    let vars: Vec<_> = base.iter().copied().chain([("CUDA_VISIBLE_DEVICES", "0,,1, ")]).collect();
    let r = SlurmResolver::new(SlurmConfig::default(), &env(&vars), Some(8)).unwrap();
    assert_eq!((r.gpus_per_node(), r.gpus_per_task()), (2, 1));
    let r = SlurmResolver::new(SlurmConfig::default(), &env(&base), Some(8)).unwrap();
    assert_eq!((r.gpus_per_node(), r.gpus_per_task()), (8, 4));
    assert_eq!(r.gpu_allocation(), strings(&["0,1,2,3", "4,5,6,7", "0,1,2,3"]));
}

#[test]
fn missing_variables_are_failed_preconditions() {
    let err = resolve(&[], json!({})).unwrap_err();
    assert_eq!(
        err.detail(),
        "SLURM_PROCID not found in environment. Not running inside a SLURM step?"
    );
    assert_eq!(err.code(), "FAILED_PRECONDITION");
    assert_eq!(err.tf_exception(), Some(TfException::RuntimeError));
    let err = resolve(&[("SLURM_PROCID", "0")], json!({})).unwrap_err();
    assert!(err.detail().starts_with("SLURM_STEP_NUM_TASKS not found"));
    // The hostlist is read before the tasks-per-node list.
    let err = resolve(&[("SLURM_PROCID", "0")], json!({"jobs": {}})).unwrap_err();
    assert!(err.detail().starts_with("SLURM_STEP_NODELIST not found"));
    let err = resolve(&[("SLURM_PROCID", "0"), ("SLURM_STEP_NODELIST", "a")], json!({"jobs": {}}))
        .unwrap_err();
    assert!(err.detail().starts_with("SLURM_STEP_TASKS_PER_NODE not found"));
    // A per-host configuration reads no hostlist.
    let r =
        resolve(&[("SLURM_PROCID", "0")], json!({"jobs": {"w": 1}, "tasks_per_node": {"h": 1}}))
            .unwrap();
    assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"w": ["h:8888"]}));
}

#[test]
fn non_integer_and_negative_ranks() {
    let vars = |rank: &'static str| [("SLURM_PROCID", rank), ("SLURM_STEP_NUM_TASKS", "1")];
    let err = resolve(&vars("x"), json!({})).unwrap_err();
    assert_eq!(err.detail(), "invalid literal for int() with base 10: 'x'");
    assert_eq!(err.tf_exception(), Some(TfException::ValueError));
    let err = resolve(&vars(""), json!({})).unwrap_err();
    assert_eq!(err.detail(), "invalid literal for int() with base 10: ''");
    let err = resolve(&vars("-1"), json!({})).unwrap_err();
    assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
    let err = resolve(&vars("99999999999999999999"), json!({})).unwrap_err();
    assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
    let err =
        resolve(&[("SLURM_PROCID", "0"), ("SLURM_STEP_NUM_TASKS", "3.0")], json!({})).unwrap_err();
    assert_eq!(err.detail(), "invalid literal for int() with base 10: '3.0'");
    // Python int() accepts surrounding whitespace.
    let r = resolve(
        &[
            ("SLURM_PROCID", " 1 "),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("SLURM_STEP_NODELIST", "a"),
            ("SLURM_STEP_TASKS_PER_NODE", "2"),
        ],
        json!({}),
    )
    .unwrap();
    assert_eq!(r.rank(), 1);
    assert_eq!(r.task_id().unwrap(), Some(1));
}

#[test]
fn too_many_gpus_requested() {
    let err = resolve(
        &multi_task_env(),
        json!({"jobs": {"ps": 1, "worker": 4},
        "gpus_per_node": 2, "gpus_per_task": 2}),
    )
    .unwrap_err();
    assert_eq!(err.detail(), "Requested more GPUs per node than available.");
    assert_eq!(err.tf_exception(), Some(TfException::RuntimeError));
    assert_eq!(err.code(), "INVALID_ARGUMENT");
}

#[test]
fn job_sum_mismatch() {
    let err = resolve(
        &multi_task_env(),
        json!({"jobs": {"ps": 1, "worker": 2},
        "gpus_per_node": 2}),
    )
    .unwrap_err();
    assert_eq!(err.detail(), "Requested 3 tasks but only 5 were assigned.");
    assert_eq!(err.tf_exception(), Some(TfException::RuntimeError));
    // The default job takes SLURM_STEP_NUM_TASKS, negative included (as TensorFlow).
    let mut vars = multi_task_env();
    vars[1] = ("SLURM_STEP_NUM_TASKS", "-4");
    let err = resolve(&vars, json!({})).unwrap_err();
    assert_eq!(err.detail(), "Requested -4 tasks but only 5 were assigned.");
    // The GPU check comes first.
    let err = resolve(
        &multi_task_env(),
        json!({"jobs": {"w": 1}, "gpus_per_node": 1,
        "gpus_per_task": 1}),
    )
    .unwrap_err();
    assert_eq!(err.detail(), "Requested more GPUs per node than available.");
}

#[test]
fn duplicate_hosts_collapse_later_count_wins() {
    let vars = [
        ("SLURM_PROCID", "0"),
        ("SLURM_STEP_NODELIST", "b,a,b"),
        ("SLURM_STEP_TASKS_PER_NODE", "1,2,3"),
    ];
    let r = resolve(&vars, json!({"jobs": {"w": 5}, "gpus_per_node": 0})).unwrap();
    let expected = BTreeMap::from([("a".to_owned(), 2), ("b".to_owned(), 3)]);
    assert_eq!(r.task_configuration(), &expected);
    assert_eq!(
        r.cluster_spec().unwrap().as_dict(),
        json!({"w": ["a:8888", "a:8889", "b:8888", "b:8889", "b:8890"]})
    );
    // Uniform: every (distinct) host gets the count.
    let r = resolve(&vars, json!({"jobs": {"w": 4}, "tasks_per_node": 2})).unwrap();
    assert_eq!(r.task_configuration().len(), 2);
    // Zip truncates to the shorter list.
    let vars = [
        ("SLURM_PROCID", "0"),
        ("SLURM_STEP_NODELIST", "a,b,c"),
        ("SLURM_STEP_TASKS_PER_NODE", "1,1"),
    ];
    let r = resolve(&vars, json!({"jobs": {"w": 2}})).unwrap();
    assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"w": ["a:8888", "b:8888"]}));
}

#[test]
fn per_host_configuration() {
    let r = resolve(
        &[("SLURM_PROCID", "3")],
        json!({"jobs": {"chief": 1, "worker": 3, "evaluator": 0},
               "tasks_per_node": {"z": 1, "m": 3}, "gpus_per_node": 6, "port_base": 2000}),
    )
    .unwrap();
    assert_eq!(r.gpus_per_task(), 2);
    assert_eq!(
        r.cluster_spec().unwrap().as_dict(),
        json!({"chief": ["m:2000"], "evaluator": {}, "worker": ["m:2001", "m:2002", "z:2000"]})
    );
    assert_eq!(r.task_type().unwrap().as_deref(), Some("worker"));
    assert_eq!(r.task_id().unwrap(), Some(2));
    assert_eq!(r.environment_updates().unwrap(), env(&[("CUDA_VISIBLE_DEVICES", "0,1")]));
    assert_eq!(r.master(Some("chief"), Some(0), Some("")).unwrap(), "grpc://m:2000");
    let err = r.master(Some("ps"), None, None).unwrap_err();
    assert_eq!(err.code(), "NOT_FOUND");
    // An empty configuration is refused (TensorFlow: max() of an empty sequence).
    let err =
        resolve(&[("SLURM_PROCID", "0")], json!({"tasks_per_node": {}, "jobs": {}})).unwrap_err();
    assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
    let err = resolve(
        &[("SLURM_PROCID", "0"), ("SLURM_STEP_NODELIST", "")],
        json!({"tasks_per_node": 1, "jobs": {}}),
    )
    .unwrap_err();
    assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
    // No host with a task: gpus_per_task cannot be derived (TensorFlow divides by zero) ...
    let err = resolve(&[("SLURM_PROCID", "0")], json!({"tasks_per_node": {"a": 0}, "jobs": {}}))
        .unwrap_err();
    assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
    // ... but given, an empty step resolves (as in TensorFlow).
    let r = resolve(
        &[("SLURM_PROCID", "0")],
        json!({"tasks_per_node": {"a": 0}, "jobs": {"w": 0}, "gpus_per_task": 0,
               "auto_set_gpu": false}),
    )
    .unwrap();
    assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"w": {}}));
    assert_eq!(r.task_type().unwrap(), None);
}

#[test]
fn rank_outside_the_step() {
    let vars = [
        ("SLURM_PROCID", "7"),
        ("SLURM_STEP_NUM_TASKS", "2"),
        ("SLURM_STEP_NODELIST", "a"),
        ("SLURM_STEP_TASKS_PER_NODE", "2"),
    ];
    let r = resolve(&vars, json!({})).unwrap();
    assert_eq!(r.task_type().unwrap(), None);
    assert_eq!(r.task_id().unwrap(), None);
    for err in [r.cluster_spec().unwrap_err(), r.environment_updates().unwrap_err()] {
        assert_eq!(err.detail(), "SLURM_PROCID 7 is outside the 2 tasks of this step");
        assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
    }
    assert_eq!(r.master(None, None, None).unwrap(), "");
    assert!(r.master(Some("worker"), Some(0), None).is_err());
    // Without auto_set_gpu TensorFlow does not index the GPU list: no error.
    let r = resolve(&vars, json!({"auto_set_gpu": false})).unwrap();
    assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"worker": ["a:8888", "a:8889"]}));
    assert!(r.environment_updates().unwrap().is_empty());
    assert_eq!(r.master(Some("worker"), Some(1), None).unwrap(), "grpc://a:8889");
    assert_eq!(r.master(Some("worker"), None, None).unwrap(), "");
}

#[test]
fn overrides_and_rpc_layer() {
    let vars = [("SLURM_PROCID", "1"), ("SLURM_STEP_NODELIST", "a,b")];
    let mut r =
        resolve(&vars, json!({"jobs": {"w": 2}, "tasks_per_node": 1, "rpc_layer": null})).unwrap();
    assert_eq!(r.rpc_layer().unwrap(), None);
    assert_eq!(r.master(None, None, None).unwrap(), "b:8888");
    assert_eq!(r.master(None, None, Some("")).unwrap(), "b:8888");
    assert_eq!(r.master(None, Some(0), Some("x")).unwrap(), "x://a:8888");
    r.set_task_type(None);
    assert_eq!(r.task_type().unwrap(), None);
    assert_eq!(r.master(None, None, None).unwrap(), "");
    r.set_task_type(Some("w".to_owned()));
    r.set_task_id(Some(5));
    assert_eq!(r.master(None, None, None).unwrap_err().code(), "NOT_FOUND");
}

#[test]
fn ports_are_checked() {
    let vars = [("SLURM_PROCID", "0"), ("SLURM_STEP_NODELIST", "a")];
    let r =
        resolve(&vars, json!({"jobs": {"w": 2}, "tasks_per_node": 2, "port_base": 65534})).unwrap();
    assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"w": ["a:65534", "a:65535"]}));
    let err = resolve(&vars, json!({"jobs": {"w": 3}, "tasks_per_node": 3, "port_base": 65534}))
        .unwrap_err();
    assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
    assert!(err.detail().contains("65536"), "{}", err.detail());
    let err = resolve(
        &vars,
        json!({"jobs": {"w": 4000000000_u64}, "tasks_per_node": 4000000000_u32,
               "gpus_per_task": 0}),
    )
    .unwrap_err();
    assert!(err.detail().contains("above 65535"), "{}", err.detail());
    let err =
        resolve(&vars, json!({"jobs": {"w": 1}, "tasks_per_node": 1, "port_base": 0})).unwrap_err();
    assert_eq!(err.detail(), "port_base must be at least 1");
}

#[test]
fn huge_steps_are_refused() {
    let vars = [("SLURM_PROCID", "0"), ("SLURM_STEP_NODELIST", "n[1-1000]")];
    let err = resolve(
        &vars,
        json!({"jobs": {"w": 2000000}, "tasks_per_node": 2000, "gpus_per_task": 0,
               "port_base": 1}),
    )
    .unwrap_err();
    assert!(err.detail().contains("at most 100000 are resolved"), "{}", err.detail());
    let err = resolve(
        &vars,
        json!({"jobs": {"w": 1000}, "tasks_per_node": 1, "gpus_per_node": 4000000000_u32}),
    )
    .unwrap_err();
    assert!(err.detail().contains("bytes"), "{}", err.detail());
    let long = "h".repeat(100_000);
    let err = resolve(
        &[("SLURM_PROCID", "0")],
        json!({"jobs": {"w": 1000}, "tasks_per_node": {long: 1000}, "gpus_per_task": 0,
               "port_base": 1}),
    )
    .unwrap_err();
    assert!(err.detail().contains("bytes"), "{}", err.detail());
}

#[test]
fn inline_env_replaces_the_process_env() {
    let process = env(&[("SLURM_PROCID", "0"), ("SLURM_STEP_NUM_TASKS", "9")]);
    let mut cfg = config(json!({"env": {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_STEP_NODELIST": "x[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}}));
    let r = SlurmResolver::new(cfg.clone(), &process, Some(2)).unwrap();
    assert_eq!(r.rank(), 1);
    assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"worker": ["x1:8888", "x2:8888"]}));
    assert_eq!(r.environment_updates().unwrap(), env(&[("CUDA_VISIBLE_DEVICES", "0,1")]));
    cfg.env = None;
    let err = SlurmResolver::new(cfg, &process, None).unwrap_err();
    assert!(err.detail().starts_with("SLURM_STEP_NODELIST not found"));
}

#[test]
fn serde_contract() {
    assert_eq!(config(json!({})), SlurmConfig::default());
    let d = SlurmConfig::default();
    assert_eq!(d.port_base, 8888);
    assert!(d.auto_set_gpu);
    assert_eq!(d.rpc_layer.as_deref(), Some("grpc"));
    assert_eq!(
        (d.env, d.jobs, d.gpus_per_node, d.gpus_per_task, d.tasks_per_node),
        (None, None, None, None, None)
    );
    assert_eq!(config(json!({"rpc_layer": null})).rpc_layer, None);
    assert_eq!(config(json!({"tasks_per_node": 2})).tasks_per_node, Some(TasksPerNode::Uniform(2)));
    assert_eq!(
        config(json!({"tasks_per_node": {"a": 1, "b": 2}})).tasks_per_node,
        Some(TasksPerNode::PerHost(BTreeMap::from([("a".to_owned(), 1), ("b".to_owned(), 2)])))
    );
    for bad in [
        json!({"unknown": 1}),
        json!({"tasks_per_node": "2"}),
        json!({"tasks_per_node": -1}),
        json!({"tasks_per_node": {"a": "1"}}),
        json!({"port_base": 70000}),
        json!({"jobs": {"w": -1}}),
        json!({"env": {"A": 1}}),
    ] {
        assert!(serde_json::from_value::<SlurmConfig>(bad.clone()).is_err(), "{bad}");
    }
    let full = json!({"env": {"SLURM_PROCID": "0"}, "jobs": {"w": 1}, "port_base": 1,
        "gpus_per_node": 2, "gpus_per_task": 1, "tasks_per_node": {"h": 1},
        "auto_set_gpu": false, "rpc_layer": "x"});
    let cfg = config(full.clone());
    assert_eq!(serde_json::to_value(&cfg).unwrap(), full);
    let strict: SlurmConfig =
        crate::json::from_str_strict(r#"{"tasks_per_node": 3, "auto_set_gpu": false}"#).unwrap();
    assert_eq!(strict.tasks_per_node, Some(TasksPerNode::Uniform(3)));
}
