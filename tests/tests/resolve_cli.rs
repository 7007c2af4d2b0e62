//! `shardwise resolve` as a black box: TensorFlow's vectors that the resolve contract can
//! express, and every kind of bad input.

use serde_json::{Value, json};
use shardwise_tests::{Run, run_shardwise};

const FIXTURE: &str = include_str!("../../core/tests/fixtures/tf_cluster_resolver_vectors.json");

fn resolve(request: &Value, env: &[(&str, &str)]) -> Run {
    run_shardwise(&["resolve", "--compact"], &request.to_string(), env)
}

/// The request state a vector's steps build up.
#[derive(Clone)]
struct State {
    resolver: Value,
    task_type: Option<Value>,
    task_id: Option<Value>,
    rpc_layer: Option<Value>,
    devices: Option<Value>,
}

impl State {
    fn request(&self) -> Value {
        let mut r = json!({"resolver": self.resolver, "device_match": "exact"});
        for (k, v) in [
            ("task_type", &self.task_type),
            ("task_id", &self.task_id),
            ("rpc_layer", &self.rpc_layer),
            ("devices", &self.devices),
        ] {
            if let Some(v) = v {
                r[k] = v.clone();
            }
        }
        r
    }
    fn run(&self) -> Run {
        resolve(&self.request(), &[])
    }
}

fn simple_body(input: &Value) -> Value {
    let mut body = json!({});
    for k in [
        "cluster",
        "master",
        "task_type",
        "task_id",
        "environment",
        "num_accelerators",
        "rpc_layer",
    ] {
        if let Some(v) = input.get(k).filter(|v| !v.is_null()) {
            body[k] = v.clone();
        }
    }
    json!({"simple": body})
}

fn tf_config_text(v: &Value) -> Option<String> {
    (!v.is_null()).then(|| v.to_string())
}

fn state_for(v: &Value) -> Option<State> {
    let input = &v["input"];
    let mut st = State {
        resolver: Value::Null,
        task_type: None,
        task_id: None,
        rpc_layer: None,
        devices: None,
    };
    match v["kind"].as_str().unwrap() {
        "simple" => st.resolver = simple_body(input),
        "union" => {
            let members: Vec<Value> =
                input["resolvers"].as_array().unwrap().iter().map(simple_body).collect();
            st.resolver = json!({"union": members});
            if let Some(kw) = input.get("kwargs") {
                st.task_type = kw.get("task_type").cloned();
                st.task_id = kw.get("task_id").cloned();
                st.rpc_layer = kw.get("rpc_layer").cloned();
            }
        }
        "tfconfig" => {
            let text = match input.get("tf_config_raw") {
                Some(raw) => raw.as_str().map(str::to_owned),
                None => tf_config_text(&input["tf_config"]),
            };
            let mut body = json!({});
            if let Some(t) = text {
                body["value"] = json!(t);
            }
            let ctor = input.get("ctor").cloned().unwrap_or(json!({}));
            if let Some(e) = ctor.get("environment") {
                body["environment"] = e.clone();
            }
            st.resolver = json!({"tf_config": body});
            st.task_type = ctor.get("task_type").cloned();
            st.task_id = ctor.get("task_id").cloned();
            st.rpc_layer = ctor.get("rpc_layer").cloned();
            st.devices = input.get("devices").cloned();
        }
        "k8s_resolve" => {
            if input.get("executable_location").is_some_and(Value::is_null) {
                return None;
            }
            let mut body = json!({"address": "host_ip", "pods": input["pod_lists"]});
            for k in ["job_to_label_mapping", "tf_server_port", "rpc_layer"] {
                if let Some(x) = input.get(k).filter(|x| !x.is_null()) {
                    body[k] = x.clone();
                }
            }
            st.resolver = json!({"kubernetes": body});
        }
        "slurm" => {
            input.get("env")?;
            let mut body = input["ctor"].clone();
            body["env"] = input["env"].clone();
            st.resolver = json!({"slurm": body});
        }
        _ => return None,
    }
    Some(st)
}

fn check_problem(id: &str, run: &Run, want: &Value) {
    assert_eq!(run.code, 1, "{id}: exit status; stdout {}", run.stdout);
    let p = run.json();
    assert_eq!(p["tf_exception"], want["type"], "{id}: {p}");
    if want["match"] == "exact" {
        assert_eq!(p["detail"], want["message"], "{id}: {p}");
    }
    for k in ["type", "title", "status", "detail", "code"] {
        assert!(p.get(k).is_some(), "{id}: problem lacks {k}");
    }
}

fn ok_reply(id: &str, run: &Run) -> Value {
    assert_eq!(run.code, 0, "{id}: {} {}", run.stdout, run.stderr);
    run.json()
}

/// Runs one vector; returns how many of its checks the contract could express.
fn run_vector(v: &Value) -> usize {
    let id = v["id"].as_str().unwrap();
    let Some(mut st) = state_for(v) else { return 0 };
    let mut checks = 0;
    let first = st.run();
    if let Some(want) = v.get("expect_error") {
        check_problem(id, &first, want);
        return 1;
    }
    if let Some(expect) = v.get("expect") {
        let reply = ok_reply(id, &first);
        if let Some(def) = expect.get("cluster_def") {
            assert_eq!(&reply["cluster_def"], def, "{id}");
            checks += 1;
        }
        if let Some(d) = expect.get("as_dict") {
            assert_eq!(&reply["cluster"], d, "{id}");
            checks += 1;
        }
    }
    for (n, step) in v.get("steps").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let sid = format!("{id} step {n}");
        let args = step.get("args").cloned().unwrap_or(json!({}));
        let no_args = args.as_object().is_none_or(|a| a.is_empty());
        match (step["op"].as_str().unwrap(), step.get("method").and_then(Value::as_str)) {
            ("set", _) => {
                let v = Some(step["value"].clone());
                match step["attr"].as_str().unwrap() {
                    "task_type" => st.task_type = v,
                    "task_id" => st.task_id = v,
                    _ => st.rpc_layer = v,
                }
            }
            ("get", _) => {
                let reply = ok_reply(&sid, &st.run());
                assert_eq!(reply[step["attr"].as_str().unwrap()], step["expect"], "{sid}");
                checks += 1;
            }
            ("call", Some("master")) if no_args => {
                let reply = ok_reply(&sid, &st.run());
                assert_eq!(reply["master"], step["expect"], "{sid}");
                checks += 1;
            }
            ("call", Some("num_accelerators")) if no_args => {
                let reply = ok_reply(&sid, &st.run());
                assert_eq!(reply["num_accelerators"], step["expect"], "{sid}");
                checks += 1;
            }
            ("call", Some("cluster_spec")) => {
                let run = st.run();
                match step.get("expect_error") {
                    Some(want) => check_problem(&sid, &run, want),
                    None => assert_eq!(
                        ok_reply(&sid, &run)["cluster_def"],
                        step["expect"]["cluster_def"],
                        "{sid}"
                    ),
                }
                checks += 1;
            }
            ("getenv", _) => {
                let reply = ok_reply(&sid, &st.run());
                let name = step["name"].as_str().unwrap();
                assert_eq!(reply["environment_updates"][name], step["expect"], "{sid}");
                checks += 1;
            }
            ("setenv", _) => {
                let mut body = json!({});
                if let Some(t) = tf_config_text(&step["tf_config"]) {
                    body["value"] = json!(t);
                }
                st.resolver = json!({"tf_config": body});
            }
            // master(...) / num_accelerators(...) with arguments have no contract form; the core
            // API runs them (core/tests/tf_vectors.rs).
            _ => {}
        }
    }
    checks
}

#[test]
fn tensorflow_vectors_through_the_contract() {
    let doc: Value = serde_json::from_str(FIXTURE).unwrap();
    let mut vectors_run = 0;
    let mut checks = 0;
    for v in doc["vectors"].as_array().unwrap() {
        let n = run_vector(v);
        if n > 0 {
            vectors_run += 1;
            checks += n;
        }
    }
    // Every resolver vector with a contract form: simple 2 (the other 3 only call
    // `master(task_type, task_id, ...)` with arguments), union 10, tfconfig 13, k8s 6 (the
    // seventh is about TensorFlow's credential loading), slurm 6 (the other 10 are the
    // hostlist functions, run through the core API).
    assert_eq!(vectors_run, 37, "vectors expressed through the contract ({checks} checks)");
    assert!(checks >= 69, "{checks} checks");
}

/// multi_worker_util vectors through the reply's `role`.
#[test]
fn roles_through_the_contract() {
    let doc: Value = serde_json::from_str(FIXTURE).unwrap();
    let mut n = 0;
    for v in doc["vectors"].as_array().unwrap().iter().filter(|v| v["kind"] == "multi_worker_util")
    {
        let input = &v["input"];
        let function = input["function"].as_str().unwrap();
        let args = &input["args"];
        let (Some(task_type), field) = (args["task_type"].as_str(), function) else { continue };
        let task_id = args.get("task_id").and_then(Value::as_i64).unwrap_or(0);
        let request = json!({"resolver": {"simple": {"cluster": input["cluster"]}},
                             "task_type": task_type, "task_id": task_id});
        let reply = ok_reply(v["id"].as_str().unwrap(), &resolve(&request, &[]));
        let role = &reply["role"];
        let id = v["id"].as_str().unwrap();
        if field == "_validate_cluster_spec" {
            assert_eq!(role.is_null(), v.get("expect_error").is_some(), "{id}: {role}");
        } else if let Some(want) = v["expect"].get("result") {
            assert_eq!(&role[field], want, "{id}: {role}");
        } else {
            // TensorFlow raises: either validation fails (no role) or this field has no value.
            assert!(role.is_null() || role[field].is_null(), "{id}: {role}");
        }
        n += 1;
    }
    assert_eq!(n, 27);
}

fn problem(request: &str, env: &[(&str, &str)]) -> Value {
    let run = run_shardwise(&["resolve"], request, env);
    assert_eq!(run.code, 1, "{request}: {} {}", run.stdout, run.stderr);
    let p = run.json();
    assert!(p["detail"].as_str().is_some_and(|d| !d.is_empty()), "{p}");
    p
}

#[test]
fn bad_input_is_a_typed_problem() {
    let cases: &[(&str, &str, &str)] = &[
        ("not json", "{", "INVALID_ARGUMENT"),
        ("empty body", "", "INVALID_ARGUMENT"),
        ("unknown resolver", r#"{"resolver": {"mesos": {}}}"#, "INVALID_ARGUMENT"),
        (
            "two resolvers",
            r#"{"resolver": {"simple": {"cluster": {}}, "tf_config": {}}}"#,
            "INVALID_ARGUMENT",
        ),
        (
            "unknown field",
            r#"{"resolver": {"simple": {"cluster": {}, "clutser": {}}}}"#,
            "INVALID_ARGUMENT",
        ),
        (
            "unknown top field",
            r#"{"resolver": {"simple": {"cluster": {}}}, "taks_id": 1}"#,
            "INVALID_ARGUMENT",
        ),
        (
            "duplicate key",
            r#"{"resolver": {"simple": {"cluster": {"w": ["a:1"], "w": ["b:1"]}}}}"#,
            "INVALID_ARGUMENT",
        ),
        (
            "task id not int",
            r#"{"resolver": {"simple": {"cluster": {}}}, "task_id": "one"}"#,
            "INVALID_ARGUMENT",
        ),
        (
            "port 0",
            r#"{"resolver": {"kubernetes": {"tf_server_port": 0, "pods": {}}}}"#,
            "INVALID_ARGUMENT",
        ),
        (
            "port 70000",
            r#"{"resolver": {"kubernetes": {"tf_server_port": 70000, "pods": {}}}}"#,
            "INVALID_ARGUMENT",
        ),
        (
            "bad selector",
            r#"{"resolver": {"kubernetes": {"job_to_label_mapping": {"worker": ["app in ("]}, "pods": {}}}}"#,
            "INVALID_ARGUMENT",
        ),
        ("no pods, no api", r#"{"resolver": {"kubernetes": {}}}"#, "FAILED_PRECONDITION"),
        (
            "pod without podIP",
            r#"{"resolver": {"kubernetes": {"pods": {"job-name=tensorflow": {"items": [{"metadata": {"name": "p"}, "status": {"phase": "Running", "hostIP": "10.0.0.1"}}]}}}}}"#,
            "INVALID_ARGUMENT",
        ),
        (
            "pods not a list",
            r#"{"resolver": {"kubernetes": {"pods": {"job-name=tensorflow": {"items": 3}}}}}"#,
            "INVALID_ARGUMENT",
        ),
        (
            "tf_config not json",
            r#"{"resolver": {"tf_config": {"value": "{cluster"}}}"#,
            "INVALID_ARGUMENT",
        ),
        (
            "tf_config wrong type",
            r#"{"resolver": {"tf_config": {"value": "{\"cluster\": {\"w\": 5}}"}}}"#,
            "INVALID_ARGUMENT",
        ),
        ("slurm outside slurm", r#"{"resolver": {"slurm": {"env": {}}}}"#, "FAILED_PRECONDITION"),
        (
            "slurm bad hostlist",
            r#"{"resolver": {"slurm": {"env": {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_NODELIST": "n[1-", "SLURM_STEP_TASKS_PER_NODE": "1"}}}}"#,
            "INVALID_ARGUMENT",
        ),
        (
            "slurm bad procid",
            r#"{"resolver": {"slurm": {"env": {"SLURM_PROCID": "x"}}}}"#,
            "INVALID_ARGUMENT",
        ),
        ("empty union", r#"{"resolver": {"union": []}}"#, "INVALID_ARGUMENT"),
        (
            "master not a string",
            r#"{"resolver": {"simple": {"cluster": {}, "master": 5}}}"#,
            "INVALID_ARGUMENT",
        ),
    ];
    for (name, body, code) in cases {
        let p = problem(body, &[]);
        assert_eq!(p["code"], *code, "{name}: {p}");
        let status = p["status"].as_u64().unwrap();
        assert!((400..500).contains(&status), "{name}: {p}");
    }
    let p = problem(r#"{"resolver": {"simple": {"cluster": {}, "master": 5}}}"#, &[]);
    assert_eq!(p["detail"], "master must be a string.");
    let p = problem(r#"{"resolver": {"slurm": {"env": {}}}}"#, &[]);
    assert_eq!(
        p["detail"],
        "SLURM_PROCID not found in environment. Not running inside a SLURM step?"
    );
}

#[test]
fn reads_tf_config_and_slurm_from_the_environment() {
    let tf_config = r#"{"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"]}, "task": {"type": "worker", "index": 1}}"#;
    let run = resolve(&json!({"resolver": {"tf_config": {}}}), &[("TF_CONFIG", tf_config)]);
    let reply = ok_reply("tf_config env", &run);
    assert_eq!(reply["task_type"], "worker");
    assert_eq!(
        reply["role"],
        json!({"is_chief": false, "worker_count": 3, "id_in_cluster": 2,
                                    "collective_leader": "/job:chief/replica:0/task:0"})
    );
    // No TF_CONFIG at all: an empty cluster.
    let reply = ok_reply("no tf_config", &resolve(&json!({"resolver": {"tf_config": {}}}), &[]));
    assert_eq!(reply["cluster"], json!({}));
    assert_eq!(reply["master"], "");

    let env = [
        ("SLURM_PROCID", "2"),
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_NODELIST", "gpu[01-02]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
    ];
    let reply = ok_reply("slurm env", &resolve(&json!({"resolver": {"slurm": {}}}), &env));
    assert_eq!(
        reply["cluster"],
        json!({"worker": ["gpu01:8888", "gpu01:8889", "gpu02:8888", "gpu02:8889"]})
    );
    assert_eq!((reply["task_type"].as_str(), reply["task_id"].as_i64()), (Some("worker"), Some(2)));
    assert_eq!(reply["environment_updates"], json!({"CUDA_VISIBLE_DEVICES": "0"}));
    assert_eq!(reply["num_accelerators"], json!({"GPU": 1}));
    // CPU-only Slurm (no CUDA_VISIBLE_DEVICES, no nvidia-smi on PATH) works: TF crashes.
    let reply = ok_reply("slurm cpu", &resolve(&json!({"resolver": {"slurm": {}}}), &env[..4]));
    assert_eq!(reply["num_accelerators"], json!({"GPU": 0}));
}

#[test]
fn reply_tf_config_round_trips() {
    let request = json!({"resolver": {"simple": {"cluster": {"ps": {"3": "p:1"}, "worker": ["a:1", "b:1"], "evaluator": []}}},
                         "task_type": "worker", "task_id": 0, "rpc_layer": "grpc"});
    let first = ok_reply("first", &resolve(&request, &[]));
    let again = json!({"resolver": {"tf_config": {"value": first["tf_config"]}}});
    let second = ok_reply("second", &resolve(&again, &[]));
    for k in ["cluster", "cluster_def", "task_type", "task_id", "rpc_layer", "role", "tf_config"] {
        assert_eq!(first[k], second[k], "{k}");
    }
}

#[test]
fn expected_replicas_answer_unavailable_with_missing_counts() {
    let pods = json!({"app=w": {"items": [
        {"metadata": {"name": "w-0"}, "status": {"phase": "Running", "podIP": "10.0.0.1"}},
        {"metadata": {"name": "w-1"}, "status": {"phase": "Pending"}}
    ]}});
    let request = json!({"resolver": {"kubernetes": {"job_to_label_mapping": {"worker": ["app=w"]},
                                                      "expected": {"worker": 3}, "pods": pods}}});
    let p = problem(&request.to_string(), &[]);
    assert_eq!(p["code"], "UNAVAILABLE");
    assert_eq!(p["status"], 503);
    assert_eq!(p["missing"], json!({"worker": 2}));
}
