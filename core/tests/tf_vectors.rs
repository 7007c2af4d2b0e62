//! Every TensorFlow test vector in `fixtures/tf_cluster_resolver_vectors.json` (checked against
//! TensorFlow 2.21 itself), run through the core API.
//!
//! Where Shardwise deliberately differs from TensorFlow the vector is run in TensorFlow's mode
//! when Shardwise has one (Kubernetes `address: host_ip`), and the difference is asserted in
//! its own test below.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use shardwise_core::cluster::kubernetes::KubernetesSpec;
use shardwise_core::cluster::multi_worker;
use shardwise_core::cluster::slurm::{
    SlurmConfig, SlurmResolver, expand_hostlist, expand_tasks_per_node,
};
use shardwise_core::cluster::{
    ClusterError, ClusterResolver, ClusterSpec, Device, DeviceMatch, JobDef, KubernetesResolver,
    SimpleResolver, TfConfigResolver, UnionResolver, count_accelerators,
};

const FIXTURE: &str = include_str!("fixtures/tf_cluster_resolver_vectors.json");

fn vectors() -> Vec<Value> {
    let doc: Value = serde_json::from_str(FIXTURE).expect("fixture is JSON");
    doc["vectors"].as_array().expect("vectors").clone()
}

fn s(v: &Value) -> Option<String> {
    v.as_str().map(str::to_owned)
}

/// Checks an error against `{type, message, match}`.
fn check_error(id: &str, err: &ClusterError, expect: &Value) {
    let want_type = expect["type"].as_str().unwrap();
    let got = err.tf_exception().map(|t| t.name()).unwrap_or("<none>");
    assert_eq!(got, want_type, "{id}: exception class (error: {err:?})");
    if expect["match"] == "exact" {
        assert_eq!(err.detail(), expect["message"].as_str().unwrap(), "{id}: message");
    }
}

fn cluster_def_json(def: &[JobDef]) -> Value {
    serde_json::to_value(def).unwrap()
}

/// The 4-way check every TensorFlow test applies.
fn check_cluster_def(id: &str, spec: &ClusterSpec, want: &Value) {
    let ways = [
        ("spec", spec.clone()),
        ("ClusterSpec(spec)", ClusterSpec::from_spec(spec)),
        ("ClusterSpec(cluster_def)", ClusterSpec::from_cluster_def(spec.cluster_def()).unwrap()),
        ("ClusterSpec(as_dict)", ClusterSpec::from_json(&spec.as_dict()).unwrap()),
    ];
    for (how, s) in ways {
        assert_eq!(&cluster_def_json(&s.cluster_def()), want, "{id}: cluster_def via {how}");
    }
}

fn check_spec_expect(id: &str, spec: &ClusterSpec, expect: &Value) {
    if let Some(def) = expect.get("cluster_def") {
        check_cluster_def(id, spec, def);
    }
    if let Some(d) = expect.get("as_dict") {
        assert_eq!(&spec.as_dict(), d, "{id}: as_dict");
    }
    if let Some(jobs) = expect.get("jobs") {
        assert_eq!(&json!(spec.jobs().collect::<Vec<_>>()), jobs, "{id}: jobs");
    }
}

fn arg_str(args: &Value, k: &str) -> Option<String> {
    args.get(k).and_then(s)
}
fn arg_int(args: &Value, k: &str) -> Option<i64> {
    args.get(k).and_then(Value::as_i64)
}

/// Runs get/set/call/setenv/getenv steps on a resolver.
fn run_steps<R: Steppable>(id: &str, r: &mut R, steps: &[Value], devices: &[Device]) {
    for (n, step) in steps.iter().enumerate() {
        let id = format!("{id} step {n}");
        let id = id.as_str();
        match step["op"].as_str().unwrap() {
            "get" => {
                let attr = step["attr"].as_str().unwrap();
                let got = match attr {
                    "task_type" => json!(r.task_type().unwrap()),
                    "task_id" => json!(r.task_id().unwrap()),
                    "rpc_layer" => json!(r.rpc_layer().unwrap()),
                    "environment" => json!(r.environment()),
                    other => panic!("{id}: unknown attr {other}"),
                };
                assert_eq!(got, step["expect"], "{id}: get {attr}");
            }
            "set" => {
                let v = &step["value"];
                match step["attr"].as_str().unwrap() {
                    "task_type" => r.set_task_type(s(v)),
                    "task_id" => r.set_task_id(v.as_i64()),
                    "rpc_layer" => r.set_rpc_layer(s(v)),
                    other => panic!("{id}: unknown attr {other}"),
                }
            }
            "call" => {
                let args = step.get("args").cloned().unwrap_or(json!({}));
                let result: Result<Value, ClusterError> = match step["method"].as_str().unwrap() {
                    "master" => r
                        .master(
                            arg_str(&args, "task_type").as_deref(),
                            arg_int(&args, "task_id"),
                            arg_str(&args, "rpc_layer").as_deref(),
                        )
                        .map(Value::String),
                    "num_accelerators" => r
                        .num_accelerators(
                            arg_str(&args, "task_type").as_deref(),
                            arg_int(&args, "task_id"),
                            devices,
                        )
                        .map(|a| json!(a)),
                    "cluster_spec" => r
                        .cluster_spec()
                        .map(|spec| json!({"cluster_def": cluster_def_json(&spec.cluster_def())})),
                    other => panic!("{id}: unknown method {other}"),
                };
                match (result, step.get("expect_error")) {
                    (Err(e), Some(want)) => check_error(id, &e, want),
                    (Ok(v), None) => {
                        let want = &step["expect"];
                        if want.get("cluster_def").is_some() {
                            assert_eq!(v["cluster_def"], want["cluster_def"], "{id}");
                        } else {
                            assert_eq!(&v, want, "{id}");
                        }
                    }
                    (got, want) => panic!("{id}: got {got:?}, wanted {want:?}"),
                }
            }
            "setenv" => {
                r.setenv(&step["tf_config"]);
            }
            "getenv" => {
                let name = step["name"].as_str().unwrap();
                let updates = r.environment_updates().unwrap();
                assert_eq!(json!(updates.get(name)), step["expect"], "{id}: getenv {name}");
            }
            other => panic!("{id}: unknown op {other}"),
        }
    }
}

/// Resolvers the steps can drive; only TF_CONFIG's re-reads an environment variable.
trait Steppable: ClusterResolver {
    fn setenv(&mut self, _tf_config: &Value) {
        panic!("setenv applies to TF_CONFIG vectors only");
    }
}
impl Steppable for SimpleResolver {}
impl Steppable for UnionResolver<SimpleResolver> {}
impl Steppable for KubernetesResolver {}
impl Steppable for SlurmResolver {}
impl Steppable for TfConfigResolver {
    fn setenv(&mut self, tf_config: &Value) {
        let text = (!tf_config.is_null()).then(|| tf_config.to_string());
        self.set_tf_config(text.as_deref());
    }
}

fn devices_of(input: &Value) -> Vec<Device> {
    input.get("devices").map(|d| serde_json::from_value(d.clone()).unwrap()).unwrap_or_default()
}

fn simple_from(input: &Value) -> SimpleResolver {
    let spec = ClusterSpec::from_json(&input["cluster"]).unwrap();
    SimpleResolver::new(spec)
        .with_master(input.get("master").and_then(Value::as_str).unwrap_or(""))
        .with_task(input.get("task_type").and_then(s), input.get("task_id").and_then(Value::as_i64))
        .with_environment(input.get("environment").and_then(Value::as_str).unwrap_or(""))
        .with_num_accelerators(
            input.get("num_accelerators").map(|a| serde_json::from_value(a.clone()).unwrap()),
        )
        .with_rpc_layer(input.get("rpc_layer").and_then(s))
}

fn expect_top_error<T: std::fmt::Debug>(
    id: &str,
    v: &Value,
    result: Result<T, ClusterError>,
) -> Option<T> {
    match (result, v.get("expect_error")) {
        (Err(e), Some(want)) => {
            check_error(id, &e, want);
            None
        }
        (Ok(x), None) => Some(x),
        (got, want) => panic!("{id}: got {got:?}, wanted error {want:?}"),
    }
}

fn run_clusterspec(id: &str, v: &Value) {
    let input = &v["input"];
    if let Some(normalize) = input.get("normalize") {
        expect_top_error(id, v, ClusterSpec::normalize_json(normalize));
        return;
    }
    let dict = &input["cluster"];
    let spec = match input.get("construct_from").and_then(Value::as_str).unwrap_or("dict") {
        "dict" => ClusterSpec::normalize_json(dict),
        "cluster_def" => {
            // A ClusterDef built by hand with jobs in the dict's order.
            let base = ClusterSpec::from_json(dict).unwrap();
            let def: Vec<JobDef> = base
                .jobs()
                .map(|j| JobDef { name: j.to_owned(), tasks: base.tasks(j).unwrap().clone() })
                .collect();
            ClusterSpec::from_cluster_def(def)
        }
        // `normalize_cluster_spec` hands a ClusterSpec back unchanged.
        "clusterspec" => ClusterSpec::from_json(dict),
        other => panic!("{id}: construct_from {other}"),
    };
    let Some(spec) = expect_top_error(id, v, spec) else { return };
    if let Some(expect) = v.get("expect") {
        check_spec_expect(id, &spec, expect);
    }
    for (n, step) in v.get("steps").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let id = format!("{id} step {n}");
        let args = step.get("args").cloned().unwrap_or(json!({}));
        let job = args.get("job_name").and_then(Value::as_str).unwrap_or("");
        let other = || ClusterSpec::from_json(&args["other"]).unwrap();
        let result: Result<Value, ClusterError> = match step["method"].as_str().unwrap() {
            "repr" => Ok(json!(spec.py_repr())),
            "as_dict" => Ok(spec.as_dict()),
            "as_cluster_def" => Ok(cluster_def_json(&spec.cluster_def())),
            "bool" => Ok(json!(!spec.is_empty())),
            "eq" => Ok(json!(spec == other())),
            "ne" => Ok(json!(spec != other())),
            "jobs" => Ok(json!(spec.jobs().collect::<Vec<_>>())),
            "jobs_after_roundtrip" => Ok(json!(
                ClusterSpec::from_spec(&ClusterSpec::from_spec(&spec)).jobs().collect::<Vec<_>>()
            )),
            "num_tasks" => spec.num_tasks(job).map(|n| json!(n)),
            "task_indices" => spec.task_indices(job).map(|n| json!(n)),
            "task_address" => {
                spec.task_address(job, args["task_index"].as_i64().unwrap()).map(|a| json!(a))
            }
            "job_tasks" => spec.job_tasks(job).map(|t| json!(t)),
            m => panic!("{id}: unknown method {m}"),
        };
        match (result, step.get("expect_error")) {
            (Err(e), Some(want)) => check_error(&id, &e, want),
            (Ok(got), None) => assert_eq!(got, step["expect"], "{id}"),
            (got, want) => panic!("{id}: got {got:?}, wanted {want:?}"),
        }
    }
}

fn run_resolver<R: Steppable>(id: &str, v: &Value, r: &mut R, devices: &[Device]) {
    if let Some(expect) = v.get("expect") {
        let spec = r.cluster_spec().unwrap_or_else(|e| panic!("{id}: {e}"));
        check_spec_expect(id, &spec, expect);
    }
    let steps = v.get("steps").and_then(Value::as_array).cloned().unwrap_or_default();
    run_steps(id, r, &steps, devices);
}

fn run_tfconfig(id: &str, v: &Value) {
    let input = &v["input"];
    let text = match input.get("tf_config_raw") {
        Some(raw) => raw.as_str().map(str::to_owned),
        None => (!input["tf_config"].is_null()).then(|| input["tf_config"].to_string()),
    };
    let ctor = input.get("ctor").cloned().unwrap_or(json!({}));
    let mut r = TfConfigResolver::new(text.as_deref())
        .with_environment(ctor.get("environment").and_then(s))
        .with_device_match(DeviceMatch::Exact);
    r.set_task_type(ctor.get("task_type").and_then(s));
    r.set_task_id(ctor.get("task_id").and_then(Value::as_i64));
    r.set_rpc_layer(ctor.get("rpc_layer").and_then(s));
    let devices = devices_of(input);
    if let Some(expect) = v.get("expect") {
        check_spec_expect(id, &r.cluster_spec().unwrap(), expect);
    }
    let steps = v.get("steps").and_then(Value::as_array).cloned().unwrap_or_default();
    run_steps(id, &mut r, &steps, &devices);
}

fn kubernetes_spec(input: &Value, address: &str) -> KubernetesSpec {
    let mut body =
        json!({"address": address, "pods": input.get("pod_lists").cloned().unwrap_or(json!({}))});
    for k in ["job_to_label_mapping", "tf_server_port", "rpc_layer"] {
        if let Some(x) = input.get(k).filter(|x| !x.is_null()) {
            body[k] = x.clone();
        }
    }
    serde_json::from_value(body).unwrap()
}

fn run_k8s(id: &str, v: &Value) {
    let input = &v["input"];
    if input.get("executable_location").is_some_and(Value::is_null) {
        // TensorFlow validates `executable_location` when it loads credentials itself. In
        // Shardwise credentials are the gateway's (in-cluster first, then kubeconfig), so the
        // option does not exist and naming it is refused as an unknown field.
        let e = serde_json::from_value::<KubernetesSpec>(json!({"executable_location": null}));
        assert!(e.is_err(), "{id}");
        assert!(v.get("expect_error").is_some(), "{id}");
        return;
    }
    let (config, snapshot) = kubernetes_spec(input, "host_ip").build().unwrap();
    if let Some(calls) = v["expect"].get("list_calls") {
        let queried: Vec<String> =
            config.queries().iter().map(|q| q.selector.as_str().to_owned()).collect();
        assert_eq!(&json!(queried), calls, "{id}: list calls");
    }
    let mut r = KubernetesResolver::new(config).unwrap();
    r.set_snapshot(snapshot.unwrap());
    let mut expect = v.get("expect").cloned().unwrap_or(Value::Null);
    if let Some(e) = expect.as_object_mut() {
        e.remove("list_calls");
        e.remove("config_calls");
    }
    let mut v2 = v.clone();
    v2["expect"] = expect;
    if v2["expect"].is_null() {
        v2.as_object_mut().unwrap().remove("expect");
    }
    run_resolver(id, &v2, &mut r, &[]);
}

fn run_slurm(id: &str, v: &Value) {
    let input = &v["input"];
    if let Some(f) = input.get("function").and_then(Value::as_str) {
        let arg = input["arg"].as_str().unwrap();
        let result = match f {
            "expand_hostlist" => expand_hostlist(arg).map(|h| json!(h)),
            "expand_tasks_per_node" => expand_tasks_per_node(arg).map(|t| json!(t)),
            other => panic!("{id}: {other}"),
        };
        if let Some(r) = expect_top_error(id, v, result) {
            assert_eq!(r, v["expect"]["result"], "{id}");
        }
        return;
    }
    let mut ctor = input["ctor"].clone();
    ctor["env"] = input["env"].clone();
    let config: SlurmConfig = serde_json::from_value(ctor).unwrap();
    let r = SlurmResolver::new(config, &BTreeMap::new(), None);
    let Some(mut r) = expect_top_error(id, v, r) else { return };
    run_resolver(id, v, &mut r, &[]);
}

fn run_mwu(id: &str, v: &Value) {
    let input = &v["input"];
    let spec = ClusterSpec::from_json(&input["cluster"]).unwrap();
    let args = &input["args"];
    let t = args.get("task_type").and_then(Value::as_str);
    let i = args.get("task_id").and_then(Value::as_i64).unwrap_or(0);
    let result = match input["function"].as_str().unwrap() {
        "is_chief" => multi_worker::is_chief(&spec, t, i).map(|x| json!(x)),
        "worker_count" => multi_worker::worker_count(&spec, t).map(|x| json!(x)),
        "id_in_cluster" => multi_worker::id_in_cluster(&spec, t, i).map(|x| json!(x)),
        "collective_leader" => multi_worker::collective_leader(&spec, t, i).map(|x| json!(x)),
        "_validate_cluster_spec" => {
            multi_worker::validate_cluster_spec(&spec, t, i).map(|()| Value::Null)
        }
        other => panic!("{id}: {other}"),
    };
    if let Some(r) = expect_top_error(id, v, result) {
        assert_eq!(r, v["expect"]["result"], "{id}");
    }
}

#[test]
fn every_tensorflow_vector() {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for v in vectors() {
        let id = v["id"].as_str().unwrap();
        let kind = v["kind"].as_str().unwrap();
        match kind {
            "clusterspec" => run_clusterspec(id, &v),
            "num_accelerators" => {
                let devices = devices_of(&v["input"]);
                for (n, step) in v["steps"].as_array().unwrap().iter().enumerate() {
                    let args = &step["args"];
                    let got = count_accelerators(
                        &devices,
                        arg_str(args, "task_type").as_deref(),
                        arg_int(args, "task_id"),
                        DeviceMatch::Exact,
                    );
                    assert_eq!(json!(got), step["expect"], "{id} step {n}");
                }
            }
            "simple" => {
                let mut r = simple_from(&v["input"]);
                run_resolver(id, &v, &mut r, &[]);
            }
            "union" => {
                let members =
                    v["input"]["resolvers"].as_array().unwrap().iter().map(simple_from).collect();
                let mut u = UnionResolver::new(members).unwrap();
                if let Some(kw) = v["input"].get("kwargs") {
                    u.set_task_type(kw.get("task_type").and_then(s));
                    u.set_task_id(kw.get("task_id").and_then(Value::as_i64));
                    u.set_rpc_layer(kw.get("rpc_layer").and_then(s));
                }
                run_resolver(id, &v, &mut u, &[]);
            }
            "tfconfig" => run_tfconfig(id, &v),
            "k8s_resolve" => run_k8s(id, &v),
            "slurm" => run_slurm(id, &v),
            "multi_worker_util" => run_mwu(id, &v),
            other => panic!("{id}: unknown kind {other}"),
        }
        *counts.entry(kind.to_owned()).or_default() += 1;
    }
    let total: usize = counts.values().sum();
    assert_eq!(total, 104, "every vector ran: {counts:?}");
}

/// Deliberate difference: the Kubernetes resolver's default address is the pod IP.
#[test]
fn kubernetes_defaults_to_pod_ip_where_tensorflow_uses_host_ip() {
    let v = vectors().into_iter().find(|v| v["id"] == "k8s-multiple-selectors-and-jobs").unwrap();
    let (config, snapshot) = kubernetes_spec(&v["input"], "pod_ip").build().unwrap();
    let spec = config.resolve(&snapshot.unwrap()).unwrap();
    assert_eq!(spec.task_address("ps", 0).unwrap(), "172.16.0.15:8470");
    assert_eq!(spec.task_address("worker", 0).unwrap(), "172.16.0.11:8470");
}

/// Deliberate difference: devices are matched to a task exactly, not by substring.
#[test]
fn device_filter_is_exact() {
    let v =
        vectors().into_iter().find(|v| v["id"] == "base-num-accelerators-filter-tasks").unwrap();
    let devices = devices_of(&v["input"]);
    // TensorFlow: "/job:worker" is a substring of "/job:worker1" and "/job:worker2".
    let tf = count_accelerators(&devices, Some("worker"), Some(1), DeviceMatch::TfSubstring);
    assert_eq!(json!(tf), json!({"TPU": 1}));
    let ours = count_accelerators(&devices, Some("worker"), Some(1), DeviceMatch::Exact);
    assert_eq!(json!(ours), json!({}));
}
