//! TensorFlow's own test vectors for `SlurmClusterResolver`.

use super::*;

#[test]
fn tf_expand_hostlist() {
    assert_eq!(hosts("n1"), strings(&["n1"]));
    assert_eq!(hosts("n[1,3]"), strings(&["n1", "n3"]));
    assert_eq!(hosts("n[1-3]"), strings(&["n1", "n2", "n3"]));
    assert_eq!(
        hosts("n[1-2],m5,o[3-4,6,7-9]"),
        strings(&["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"])
    );
    assert_eq!(
        hosts("n[0001-0003],m5,o[009-011]"),
        strings(&["n0001", "n0002", "n0003", "m5", "o009", "o010", "o011"])
    );
    let err = expand_hostlist("n[1-2").unwrap_err();
    assert_eq!(err.detail(), "Invalid hostlist format \"n[1-2\": Invalid part: n[1-2");
    assert_eq!(err.tf_exception(), Some(TfException::ValueError));
    assert_eq!(err.code(), "INVALID_ARGUMENT");
}

#[test]
fn tf_expand_tasks_per_node() {
    let expand = |s: &str| expand_tasks_per_node(s).unwrap();
    assert_eq!(expand("2"), [2]);
    assert_eq!(expand("2,1,3"), [2, 1, 3]);
    assert_eq!(expand("3(x2),2,1"), [3, 3, 2, 1]);
    assert_eq!(expand("3(x2),2,11(x4)"), [3, 3, 2, 11, 11, 11, 11]);
    assert_eq!(expand("13(x10)"), [13; 10]);
    let err = expand_tasks_per_node("x").unwrap_err();
    assert_eq!(err.detail(), "Invalid tasks-per-node list format \"x\": ");
    assert_eq!(err.tf_exception(), Some(TfException::ValueError));
}

#[test]
fn tf_simple_retrieval_from_env() {
    let vars = [
        ("SLURM_PROCID", "0"),
        ("SLURM_STEP_NUM_TASKS", "3"),
        ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
        THREE_HOSTS,
        ("CUDA_VISIBLE_DEVICES", "0"),
    ];
    let r = resolve(&vars, json!({})).unwrap();
    let spec = r.cluster_spec().unwrap();
    assert_eq!(spec.as_dict(), json!({"worker": ["t02n13:8888", "t02n41:8888", "t02n43:8888"]}));
    assert_eq!(r.master(Some("worker"), Some(0), Some("grpc")).unwrap(), "grpc://t02n13:8888");
    assert_eq!(
        r.num_accelerators(None, None, &[]).unwrap(),
        Accelerators::from([("GPU".to_owned(), 1)])
    );
    assert_eq!(r.environment_updates().unwrap(), env(&[("CUDA_VISIBLE_DEVICES", "0")]));
    // Known from construction, not only after cluster_spec().
    assert_eq!(r.task_type().unwrap().as_deref(), Some("worker"));
    assert_eq!(r.task_id().unwrap(), Some(0));
    assert_eq!(r.rpc_layer().unwrap().as_deref(), Some("grpc"));
    assert_eq!(r.environment().as_deref(), Some(""));
    assert_eq!((r.gpus_per_node(), r.gpus_per_task(), r.rank()), (1, 1, 0));
}

#[test]
fn tf_simple_successful_retrieval_and_master() {
    let vars = [("SLURM_PROCID", "0"), ("SLURM_STEP_NUM_TASKS", "3"), THREE_HOSTS];
    let mut r = resolve(
        &vars,
        json!({"jobs": {"ps": 1, "worker": 2}, "port_base": 8888, "tasks_per_node": 1,
               "gpus_per_node": 1, "gpus_per_task": 1, "auto_set_gpu": false}),
    )
    .unwrap();
    let spec = r.cluster_spec().unwrap();
    assert_eq!(spec.as_dict(), ps_worker_cluster());
    let def: Vec<String> = spec.cluster_def().into_iter().map(|j| j.name).collect();
    assert_eq!(def, ["ps", "worker"]);
    assert!(r.environment_updates().unwrap().is_empty());

    r.set_task_type(Some("worker".to_owned()));
    r.set_task_id(Some(1));
    assert_eq!(r.master(None, None, None).unwrap(), "grpc://t02n43:8888");
    r.set_rpc_layer(Some("ab".to_owned()));
    assert_eq!(r.master(Some("ps"), Some(0), None).unwrap(), "ab://t02n13:8888");
    assert_eq!(r.master(Some("ps"), Some(0), Some("test")).unwrap(), "test://t02n13:8888");
    // Overrides persist across cluster_spec() (TensorFlow overwrites them).
    r.cluster_spec().unwrap();
    assert_eq!(r.task_type().unwrap().as_deref(), Some("worker"));
    assert_eq!(r.task_id().unwrap(), Some(1));
}

#[test]
fn tf_tasks_per_node_from_env() {
    let vars = [
        ("SLURM_PROCID", "0"),
        ("SLURM_STEP_NUM_TASKS", "3"),
        THREE_HOSTS,
        ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
    ];
    let r = resolve(
        &vars,
        json!({"jobs": {"ps": 1, "worker": 2}, "port_base": 8888, "gpus_per_node": 1,
               "gpus_per_task": 1, "auto_set_gpu": false}),
    )
    .unwrap();
    assert_eq!(r.cluster_spec().unwrap().as_dict(), ps_worker_cluster());
    assert_eq!(r.task_type().unwrap().as_deref(), Some("ps"));
    assert_eq!(r.task_id().unwrap(), Some(0));
}

#[test]
fn tf_multi_task_per_node() {
    let r = resolve(
        &multi_task_env(),
        json!({"jobs": {"ps": 1, "worker": 4}, "port_base": 8888, "gpus_per_node": 2,
               "gpus_per_task": 1, "auto_set_gpu": true}),
    )
    .unwrap();
    assert_eq!(r.cluster_spec().unwrap().as_dict(), multi_task_cluster());
    assert_eq!(r.environment_updates().unwrap(), env(&[("CUDA_VISIBLE_DEVICES", "1")]));
    assert_eq!(r.task_type().unwrap().as_deref(), Some("worker"));
    assert_eq!(r.task_id().unwrap(), Some(0));
    assert_eq!(r.gpu_allocation(), strings(&["0", "1", "0", "1", "0"]));
    let tasks = BTreeMap::from([
        ("t02n13".to_owned(), 2),
        ("t02n41".to_owned(), 2),
        ("t02n43".to_owned(), 1),
    ]);
    assert_eq!(r.task_configuration(), &tasks);
    assert_eq!(r.master(None, None, None).unwrap(), "grpc://t02n13:8889");
}

#[test]
fn tf_multiple_gpus_per_task() {
    let r = resolve(
        &multi_task_env(),
        json!({"jobs": {"ps": 1, "worker": 4}, "port_base": 8888, "gpus_per_node": 4,
               "gpus_per_task": 2, "auto_set_gpu": true}),
    )
    .unwrap();
    assert_eq!(r.cluster_spec().unwrap().as_dict(), multi_task_cluster());
    assert_eq!(r.environment_updates().unwrap(), env(&[("CUDA_VISIBLE_DEVICES", "2,3")]));
    assert_eq!(r.gpu_allocation(), strings(&["0,1", "2,3", "0,1", "2,3", "0,1"]));
    assert_eq!(
        r.num_accelerators(Some("ps"), Some(0), &[]).unwrap(),
        Accelerators::from([("GPU".to_owned(), 2)])
    );
}
