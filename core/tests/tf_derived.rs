//! Edge cases the behavioural spec describes in words (the vector ids it names that the
//! fixture does not hold), and more of TensorFlow's corners. Where Shardwise deliberately
//! differs, the test asserts Shardwise's behaviour and says what TensorFlow does.

use serde_json::{Value, json};
use shardwise_core::cluster::kubernetes::KubernetesSpec;
use shardwise_core::cluster::slurm::{expand_hostlist, expand_tasks_per_node};
use shardwise_core::cluster::{
    ClusterResolver, ClusterSpec, Device, DeviceMatch, JobDef, SimpleResolver, TfConfigResolver,
    TfException, UnionResolver, count_accelerators,
};

fn spec(v: Value) -> ClusterSpec {
    ClusterSpec::from_json(&v).unwrap()
}

fn jobs(s: &ClusterSpec) -> Vec<&str> {
    s.jobs().collect()
}

#[test]
fn clusterspec_derived_job_order() {
    let s = spec(json!({"worker": ["w:1"], "ps": ["p:1"]}));
    assert_eq!(jobs(&s), ["worker", "ps"]);
    assert_eq!(jobs(&ClusterSpec::from_spec(&s)), ["ps", "worker"]);
    assert_eq!(jobs(&ClusterSpec::from_spec(&ClusterSpec::from_spec(&s))), ["ps", "worker"]);
}

#[test]
fn clusterspec_derived_clusterdef_order_preserved() {
    let def = vec![
        JobDef { name: "worker".into(), tasks: [(0, "w:1".to_owned())].into() },
        JobDef { name: "chief".into(), tasks: [(0, "c:1".to_owned())].into() },
    ];
    let s = ClusterSpec::from_cluster_def(def.clone()).unwrap();
    assert_eq!(jobs(&s), ["worker", "chief"]);
    assert_eq!(s.cluster_def(), def);
    // Protobuf equality is order-sensitive: the sorted definition rebuilt from as_dict differs
    // although the specs are equal.
    let rebuilt = ClusterSpec::from_json(&s.as_dict()).unwrap();
    assert_ne!(rebuilt.cluster_def(), s.cluster_def());
    assert_eq!(rebuilt, s);
}

#[test]
fn clusterspec_int_keys_bool_and_odd_names() {
    // Keys are int()-converted; a later key that collapses onto an earlier index wins.
    let s = spec(json!({"w": {"1": "a", "01": "b", " 2 ": "c"}}));
    assert_eq!(s.as_dict(), json!({"w": {"1": "b", "2": "c"}}));
    // Dict given, dense in fact: rendered as a list.
    assert_eq!(spec(json!({"w": {"1": "b", "0": "a"}})).as_dict(), json!({"w": ["a", "b"]}));
    // An empty job name and duplicate addresses are accepted.
    let s = spec(json!({"": ["x:1", "x:1"]}));
    assert_eq!(s.num_tasks("").unwrap(), 2);
    assert!(ClusterSpec::new().is_empty());
    assert!(!spec(json!({"worker": []})).is_empty());
    let e = ClusterSpec::from_json(&json!({"w": [null]})).unwrap_err();
    assert_eq!(e.detail(), "Task address None must be bytes or unicode");
    assert_eq!(e.tf_exception(), Some(TfException::TypeError));
    assert_eq!(
        spec(json!({"w": {"0": "a", "3": "b"}})).py_repr(),
        "ClusterSpec({'w': {0: 'a', 3: 'b'}})"
    );
    assert_eq!(
        ClusterSpec::new().task_address_opt(None, None).unwrap_err().detail(),
        "No such job in cluster: None"
    );
}

#[test]
fn simple_derived_empty_master_with_rpc() {
    let r = SimpleResolver::new(spec(json!({"w": ["a:1"]}))).with_rpc_layer(Some("grpc".into()));
    assert_eq!(r.master(None, None, None).unwrap(), "grpc://");
    // The argument wins when non-empty; "" falls back to the stored layer.
    assert_eq!(r.master(Some("w"), Some(0), Some("http")).unwrap(), "http://a:1");
    assert_eq!(r.master(Some("w"), Some(0), Some("")).unwrap(), "grpc://a:1");
    assert_eq!(r.master(Some("w"), Some(1), None).unwrap_err().code(), "NOT_FOUND");
}

#[test]
fn base_num_accelerators_derived_substring_filter() {
    let devices = [
        Device {
            name: "/job:worker2/replica:0/task:10/device:GPU:0".into(),
            device_type: "GPU".into(),
        },
        Device {
            name: "/job:worker/replica:0/task:1/device:XLA_CPU:0".into(),
            device_type: "XLA_CPU".into(),
        },
    ];
    // TensorFlow: `worker` matches `worker2` and `task:1` matches `task:10`.
    let tf = count_accelerators(&devices, Some("worker"), Some(1), DeviceMatch::TfSubstring);
    assert_eq!(json!(tf), json!({"GPU": 1}));
    // Shardwise (default): exact components; CPU and XLA_CPU never count.
    let ours = count_accelerators(&devices, Some("worker"), Some(1), DeviceMatch::Exact);
    assert_eq!(json!(ours), json!({}));
}

fn simple(v: Value) -> SimpleResolver {
    SimpleResolver::new(spec(v))
}

#[test]
fn union_derived_list_dict_list_rekeys() {
    let u = UnionResolver::new(vec![
        simple(json!({"w": ["a:1"]})),
        simple(json!({"w": {"4": "b:1"}})),
        simple(json!({"w": ["c:1"]})),
    ])
    .unwrap();
    let e = u.cluster_spec().unwrap_err();
    assert_eq!(e.detail(), "Duplicate keys detected when merging two ClusterSpecs: {0}");
    // A list `[a, b]` plus `{1: ..}` collides at 1.
    let u = UnionResolver::new(vec![
        simple(json!({"w": ["a", "b"]})),
        simple(json!({"w": {"1": "c"}})),
    ])
    .unwrap();
    assert_eq!(
        u.cluster_spec().unwrap_err().detail(),
        "Duplicate keys detected when merging two ClusterSpecs: {1}"
    );
}

#[test]
fn union_derived_falsy_overrides_ignored() {
    // TensorFlow ignores task_id=0 and task_type="" overrides (truthiness); Shardwise honours
    // every override that is set.
    let first = simple(json!({"worker": ["a", "b"]})).with_task(Some("worker".into()), Some(1));
    let mut u = UnionResolver::new(vec![first]).unwrap();
    assert_eq!(u.task_id().unwrap(), Some(1));
    u.set_task_id(Some(0));
    assert_eq!(u.task_id().unwrap(), Some(0));
    // The union's rpc_layer is used for a full task, not on the delegated path (as TF).
    u.set_rpc_layer(Some("grpc".into()));
    assert_eq!(u.master(Some("worker"), Some(0), None).unwrap(), "grpc://a");
    assert_eq!(u.master(None, None, None).unwrap(), "");
}

#[test]
fn tfconfig_derived_live_reread() {
    let mut r = TfConfigResolver::new(None);
    assert_eq!(r.cluster_spec().unwrap(), ClusterSpec::new());
    r.set_tf_config(Some(
        r#"{"cluster": {"a": ["x:1"], "b": ["y:1"]}, "task": {"type": "b", "index": 0}}"#,
    ));
    assert_eq!(r.master(None, None, None).unwrap(), "y:1");
    r.set_tf_config(Some("{not json"));
    assert_eq!(r.task_type().unwrap_err().tf_exception(), Some(TfException::ValueError));
    r.set_tf_config(None);
    assert_eq!(r.task_type().unwrap(), None);
}

#[test]
fn tfconfig_master_corners() {
    let cfg = r#"{"cluster": {"chief": ["c:1"], "worker": ["w:1"]}, "task": {"type": "evaluator", "index": 0},
                  "rpc_layer": "grpc", "session_master": "sm:1"}"#;
    // session_master wins, even over explicit arguments, and gets no scheme.
    let r = TfConfigResolver::new(Some(cfg));
    assert_eq!(r.master(Some("worker"), Some(0), Some("grpc")).unwrap(), "sm:1");
    // Without it, an evaluator outside the cluster is TensorFlow's ValueError (issue #27857).
    let cfg = cfg.replace(r#", "session_master": "sm:1""#, "");
    let r = TfConfigResolver::new(Some(&cfg));
    assert_eq!(
        r.master(None, None, None).unwrap_err().detail(),
        "No such job in cluster: 'evaluator'"
    );
    // An explicit "" rpc_layer suppresses the scheme.
    assert_eq!(r.master(Some("worker"), Some(0), Some("")).unwrap(), "w:1");
    assert_eq!(r.master(Some("worker"), Some(0), None).unwrap(), "grpc://w:1");
    // One job with one task: "" even with explicit arguments.
    let r = TfConfigResolver::new(Some(r#"{"cluster": {"worker": ["w:1"]}}"#));
    assert_eq!(r.master(Some("worker"), Some(0), Some("grpc")).unwrap(), "");
    // task.index goes through Python's int(); task.type through str().
    let r = TfConfigResolver::new(Some(r#"{"task": {"type": 7, "index": " 3 "}}"#));
    assert_eq!((r.task_type().unwrap(), r.task_id().unwrap()), (Some("7".into()), Some(3)));
    let r = TfConfigResolver::new(Some(r#"{"task": {"index": "abc"}}"#));
    assert_eq!(r.task_id().unwrap_err().detail(), "invalid literal for int() with base 10: 'abc'");
    assert_eq!(TfConfigResolver::new(None).environment(), None);
}

fn k8s(body: Value) -> ClusterSpec {
    let spec: KubernetesSpec = serde_json::from_value(body).unwrap();
    let (config, pods) = spec.build().unwrap();
    config.resolve(&pods.unwrap()).unwrap()
}

fn pod(name: &str, host: &str, ip: &str) -> Value {
    json!({"metadata": {"name": name}, "status": {"phase": "Running", "hostIP": host, "podIP": ip}})
}

#[test]
fn k8s_derived_duplicate_host_ip() {
    let pods = json!({"job-name=tensorflow": {"items": [pod("a", "10.0.0.1", "172.16.0.1"), pod("b", "10.0.0.1", "172.16.0.2")]}});
    let tf = k8s(json!({"address": "host_ip", "pods": pods}));
    assert_eq!(tf.as_dict(), json!({"worker": ["10.0.0.1:8470", "10.0.0.1:8470"]}));
    let ours = k8s(json!({"pods": pods}));
    assert_eq!(ours.as_dict(), json!({"worker": ["172.16.0.1:8470", "172.16.0.2:8470"]}));
}

#[test]
fn k8s_derived_lexicographic_not_natural_sort() {
    let items: Vec<Value> =
        [2, 10, 1].iter().map(|i| pod(&format!("w-{i}"), "h", &format!("10.0.0.{i}"))).collect();
    let s = k8s(json!({"pods": {"job-name=tensorflow": {"items": items}}}));
    assert_eq!(
        s.as_dict(),
        json!({"worker": ["10.0.0.1:8470", "10.0.0.10:8470", "10.0.0.2:8470"]})
    );
}

#[test]
fn slurm_hostlist_corners() {
    assert_eq!(expand_hostlist("b04-[09-10]").unwrap(), ["b04-09", "b04-10"]);
    assert_eq!(expand_hostlist("n[8-11]").unwrap(), ["n8", "n9", "n10", "n11"]);
    assert_eq!(expand_hostlist("n[1-3,2-4]").unwrap().len(), 6);
    assert_eq!(
        expand_hostlist("n[1-2").unwrap_err().detail(),
        "Invalid hostlist format \"n[1-2\": Invalid part: n[1-2"
    );
    assert_eq!(
        expand_tasks_per_node("x").unwrap_err().detail(),
        "Invalid tasks-per-node list format \"x\": "
    );
}
