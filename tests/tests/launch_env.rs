//! `shardwise resolve --print torch-env|jax-env` as a black box: every task of a Slurm step,
//! a TF_CONFIG cluster and a Kubernetes pod list gets a consistent process group (ranks
//! `0..n` once each, local ranks per host, one master), and the printed environments start
//! real `torch.distributed` and `jax.distributed` process groups.
//!
//! The real-consumer tests run in the venv with torch and jax (CPU) that
//! `shardwise_tests::pyenv::torch_env` builds once per target directory.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use shardwise_tests::{Process, Run, assert_ran, repo_root, run_bounded, run_shardwise};

const TORCH_VARS: [&str; 6] =
    ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"];
const JAX_VARS: [&str; 3] = ["JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"];

fn print(format: &str, request: &Value, env: &[(&str, &str)]) -> Run {
    run_shardwise(&["resolve", "--print", format], &request.to_string(), env)
}

/// The variables `lines` sets when a POSIX shell `eval`s them (nothing else inherited).
fn eval_in_sh(lines: &str, names: &[&str]) -> BTreeMap<String, String> {
    let mut script = String::from("eval \"$0\"\n");
    for name in names {
        script.push_str(&format!("printf '%s=%s\\0' {name} \"${{{name}?}}\"\n"));
    }
    let run = run_bounded(
        Command::new("sh").env_clear().arg("-c").arg(script).arg(lines),
        Duration::from_secs(30),
    );
    assert_ran("sh eval", &run);
    run.stdout
        .split('\0')
        .filter(|v| !v.is_empty())
        .map(|v| {
            let (k, v) = v.split_once('=').expect("NAME=value");
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// One task's launcher view: the torch and jax environments as a shell sees them, checked
/// against the JSON reply's `launch`.
#[derive(Debug)]
struct TaskLaunch {
    torch: BTreeMap<String, String>,
    jax: BTreeMap<String, String>,
}

fn launch_of(request: &Value, env: &[(&str, &str)]) -> TaskLaunch {
    let mut out = Vec::new();
    for (format, names) in [("torch-env", &TORCH_VARS[..]), ("jax-env", &JAX_VARS[..])] {
        let run = print(format, request, env);
        assert_ran(&format!("resolve --print {format} {request}"), &run);
        assert!(run.stdout.lines().all(|l| l.starts_with("export ")), "{}", run.stdout);
        assert_eq!(run.stdout.lines().count(), names.len(), "{}", run.stdout);
        out.push(eval_in_sh(&run.stdout, names));
    }
    let jax = out.pop().unwrap_or_default();
    let torch = out.pop().unwrap_or_default();
    // The JSON reply says the same (with the request's launch options, else the defaults).
    let mut with_launch = request.clone();
    if request.get("launch").is_none() {
        with_launch["launch"] = json!({});
    }
    let run = run_shardwise(&["resolve", "--compact"], &with_launch.to_string(), env);
    assert_ran("resolve with launch", &run);
    let reply = run.json();
    let json_torch: BTreeMap<String, String> =
        serde_json::from_value(reply["launch"]["torch"].clone()).expect("launch.torch");
    assert_eq!(json_torch, torch);
    let j = &reply["launch"]["jax"];
    assert_eq!(j["coordinator_address"].as_str(), jax.get("JAX_COORDINATOR_ADDRESS").map(|s| &**s));
    assert_eq!(j["num_processes"].to_string(), jax["JAX_NUM_PROCESSES"]);
    assert_eq!(j["process_id"].to_string(), jax["JAX_PROCESS_ID"]);
    TaskLaunch { torch, jax }
}

/// The checks every cluster must pass: ranks `0..n` once each, one world size, one master
/// (torch's `MASTER_ADDR:MASTER_PORT` and JAX's coordinator the same endpoint), JAX's process
/// ids equal to the ranks, and per host local ranks `0..k` once each with `k` the local world
/// size. `hosts[i]` is task i's host.
fn check_group(tasks: &[TaskLaunch], hosts: &[&str], master: &str) {
    let n = tasks.len();
    let mut ranks = BTreeSet::new();
    let mut local: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (t, host) in tasks.iter().zip(hosts) {
        let rank = &t.torch["RANK"];
        assert!(ranks.insert(rank.parse::<usize>().expect("RANK")), "rank {rank} twice");
        assert_eq!(t.torch["WORLD_SIZE"], n.to_string());
        assert_eq!(t.jax["JAX_NUM_PROCESSES"], n.to_string());
        assert_eq!(&t.jax["JAX_PROCESS_ID"], rank);
        assert_eq!(t.jax["JAX_COORDINATOR_ADDRESS"], master);
        let torch_master = if t.torch["MASTER_ADDR"].contains(':') {
            format!("[{}]:{}", t.torch["MASTER_ADDR"], t.torch["MASTER_PORT"])
        } else {
            format!("{}:{}", t.torch["MASTER_ADDR"], t.torch["MASTER_PORT"])
        };
        assert_eq!(torch_master, master);
        assert!(local.entry(host).or_default().insert(t.torch["LOCAL_RANK"].clone()));
        let on_host = hosts.iter().filter(|h| *h == host).count();
        assert_eq!(t.torch["LOCAL_WORLD_SIZE"], on_host.to_string(), "{host}");
    }
    assert_eq!(ranks, (0..n).collect());
    for (host, locals) in local {
        let want: BTreeSet<String> = (0..locals.len()).map(|i| i.to_string()).collect();
        assert_eq!(locals, want, "{host}");
    }
}

#[test]
fn slurm_step_of_two_nodes_by_two_tasks() {
    let step = |procid: usize| {
        json!({"SLURM_PROCID": procid.to_string(), "SLURM_STEP_NUM_TASKS": "4",
               "SLURM_STEP_NODELIST": "node[07-08]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"})
    };
    let tasks: Vec<TaskLaunch> =
        (0..4).map(|p| launch_of(&json!({"resolver": {"slurm": {"env": step(p)}}}), &[])).collect();
    check_group(&tasks, &["node07", "node07", "node08", "node08"], "node07:8888");
    // The rank is SLURM_PROCID; the local rank Slurm's SLURM_LOCALID.
    for (p, t) in tasks.iter().enumerate() {
        assert_eq!(t.torch["RANK"], p.to_string());
        assert_eq!(t.torch["LOCAL_RANK"], (p % 2).to_string());
    }
    // The same from the process's own SLURM_* variables, and with a chief job and a port.
    let env = [
        ("SLURM_PROCID", "3"),
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_NODELIST", "node[07-08]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
    ];
    let t = launch_of(&json!({"resolver": {"slurm": {"jobs": {"chief": 1, "worker": 3}}}}), &env);
    assert_eq!(
        (t.torch["RANK"].as_str(), t.torch["LOCAL_RANK"].as_str(), t.torch["MASTER_ADDR"].as_str()),
        ("3", "1", "node07")
    );
}

#[test]
fn tf_config_cluster_with_ps_and_evaluator() {
    let cluster = json!({"chief": ["h0:2222"], "worker": ["h0:2223", "h1:2222", "h1:2223", "h2:2222"],
                         "ps": ["h3:2222"], "evaluator": ["h4:2222"]});
    let request = |job: &str, index: usize| {
        let tf_config = json!({"cluster": cluster, "task": {"type": job, "index": index}});
        json!({"resolver": {"tf_config": {"value": tf_config.to_string()}}})
    };
    let mut tasks = vec![launch_of(&request("chief", 0), &[])];
    tasks.extend((0..4).map(|i| launch_of(&request("worker", i), &[])));
    check_group(&tasks, &["h0", "h0", "h1", "h1", "h2"], "h0:2222");
    // ps and evaluator tasks have no rank: nothing on stdout (an `eval` sets nothing), the
    // reason on stderr, status 1; the JSON reply has `launch: null`.
    for (job, format) in [("ps", "torch-env"), ("evaluator", "jax-env")] {
        let run = print(format, &request(job, 0), &[]);
        assert_eq!((run.code, run.stdout.as_str()), (1, ""), "{}", run.stderr);
        assert_eq!(
            run.stderr.trim(),
            format!(
                "shardwise resolve: FAILED_PRECONDITION: task {job}:0 has no rank: only the \
                 jobs chief, worker train (launch.jobs)"
            )
        );
        let mut r = request(job, 0);
        r["launch"] = json!({});
        let reply = run_shardwise(&["resolve"], &r.to_string(), &[]).json();
        assert_eq!((reply["task_type"].as_str(), &reply["launch"]), (Some(job), &Value::Null));
    }
    // The evaluator trains when the request says so, after the workers.
    let mut r = request("evaluator", 0);
    r["launch"] = json!({"jobs": ["worker", "evaluator"], "master_port": 29500});
    let t = launch_of(&r, &[]);
    assert_eq!((t.torch["RANK"].as_str(), t.torch["WORLD_SIZE"].as_str()), ("4", "5"));
    assert_eq!(t.jax["JAX_COORDINATOR_ADDRESS"], "h0:29500");
}

#[test]
fn kubernetes_pod_list() {
    let pod = |name: &str, ip: &str, node: &str| {
        json!({"metadata": {"name": name, "namespace": "ml"},
               "status": {"phase": "Running", "podIP": ip, "hostIP": node}})
    };
    let pods = json!({
        "app=t,role=chief": {"items": [pod("t-chief-0", "10.4.0.12", "192.168.1.10")]},
        "app=t,role=worker": {"items": [
            pod("t-worker-1", "fd00::7", "192.168.1.11"),
            pod("t-worker-0", "10.4.0.13", "192.168.1.10"),
            pod("t-worker-2", "10.4.2.5", "192.168.1.12")]}
    });
    let request = |job: &str, index: usize| {
        json!({"resolver": {"kubernetes": {
                   "job_to_label_mapping": {"chief": ["app=t,role=chief"], "worker": ["app=t,role=worker"]},
                   "tf_server_port": 2222, "pods": pods}},
               "task_type": job, "task_id": index})
    };
    let reply = run_shardwise(&["resolve"], &request("chief", 0).to_string(), &[]).json();
    let mut tasks = vec![("chief", 0)];
    tasks.extend((0..3).map(|i| ("worker", i)));
    let addresses: Vec<String> = tasks
        .iter()
        .map(|(job, i)| reply["cluster"][*job][*i].as_str().expect("an address").to_owned())
        .collect();
    assert!(addresses.contains(&"[fd00::7]:2222".to_owned()), "{addresses:?}");
    let hosts: Vec<&str> = addresses
        .iter()
        .map(|a| a.rsplit_once(':').map_or("", |h| h.0).trim_matches(['[', ']']))
        .collect();
    let launches: Vec<TaskLaunch> =
        tasks.iter().map(|(j, i)| launch_of(&request(j, *i), &[])).collect();
    check_group(&launches, &hosts, "10.4.0.12:2222");
    // Pod IPs: one process per pod, so every local rank is 0 of 1. The IPv6 worker's
    // address is split at its brackets.
    assert!(launches.iter().all(|t| t.torch["LOCAL_WORLD_SIZE"] == "1"));
    // Node IPs (TensorFlow's `host_ip`): the chief and worker 0 share a node.
    let mut by_node = request("worker", 0);
    by_node["resolver"]["kubernetes"]["address"] = json!("host_ip");
    let t = launch_of(&by_node, &[]);
    assert_eq!((t.torch["LOCAL_RANK"].as_str(), t.torch["LOCAL_WORLD_SIZE"].as_str()), ("1", "2"));
}

#[test]
fn bad_launches_print_nothing_to_eval() {
    let simple = |cluster: Value, launch: Value| {
        json!({"resolver": {"simple": {"cluster": cluster, "task_type": "worker", "task_id": 0}},
               "launch": launch})
    };
    let cases = [
        ("not json", json!("{"), "INVALID_ARGUMENT"),
        (
            "shell in an address",
            simple(json!({"worker": ["w0:1", "$(touch /tmp/x):1"]}), json!({})),
            "INVALID_ARGUMENT",
        ),
        (
            "unbracketed IPv6",
            simple(json!({"worker": ["fd00::1:8470"]}), json!({})),
            "INVALID_ARGUMENT",
        ),
        ("master without a port", simple(json!({"worker": ["w0"]}), json!({})), "INVALID_ARGUMENT"),
        (
            "port 0",
            simple(json!({"worker": ["w0:1"]}), json!({"master_port": 0})),
            "INVALID_ARGUMENT",
        ),
        (
            "port too big",
            simple(json!({"worker": ["w0:1"]}), json!({"master_port": 65536})),
            "INVALID_ARGUMENT",
        ),
        (
            "unknown member",
            simple(json!({"worker": ["w0:1"]}), json!({"port": 1})),
            "INVALID_ARGUMENT",
        ),
        ("no jobs", simple(json!({"worker": ["w0:1"]}), json!({"jobs": []})), "INVALID_ARGUMENT"),
        ("not in the cluster", simple(json!({"worker": []}), json!({})), "NOT_FOUND"),
        (
            "no task",
            json!({"resolver": {"simple": {"cluster": {"worker": ["w0:1"]}}}}),
            "FAILED_PRECONDITION",
        ),
    ];
    for (name, request, code) in cases {
        let text = match &request {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        for format in ["torch-env", "jax-env"] {
            let run = run_shardwise(&["resolve", "--print", format], &text, &[]);
            assert_eq!((run.code, run.stdout.as_str()), (1, ""), "{name}: {}", run.stderr);
            assert!(
                run.stderr.starts_with(&format!("shardwise resolve: {code}: ")),
                "{name}: {}",
                run.stderr
            );
        }
        // In JSON the same problem, when the request asks for launch.
        if request.get("launch").is_some() || request.is_string() {
            let run = run_shardwise(&["resolve"], &text, &[]);
            assert_eq!(run.code, 1, "{name}");
            assert_eq!(run.json()["code"], code, "{name}");
        }
    }
    let run = run_shardwise(&["resolve", "--print", "yaml"], "{}", &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let run = print(
        "torch-env",
        &json!({"resolver": {"simple": {"cluster": {"worker": ["w0"]},
        "task_type": "worker", "task_id": 0}}}),
        &[],
    );
    assert!(run.stderr.contains("task worker:0 at \"w0\", has no port"), "{}", run.stderr);
}

// ---- Real consumers: torch.distributed and jax.distributed started from the printed env. ----

/// The venv with torch and jax ([`shardwise_tests::pyenv::torch_env`]).
fn torch_python() -> PathBuf {
    shardwise_tests::pyenv::torch_env().to_path_buf()
}

/// A port nothing listens on now (bound to `host` and released).
fn free_port(host: &str) -> Option<u16> {
    TcpListener::bind((host, 0)).ok()?.local_addr().ok().map(|a| a.port())
}

/// Starts one process per request, each `sh -c 'eval "$exports"; exec python SCRIPT'` with
/// the environment `--print FORMAT` printed for its task (and nothing else but `PATH`), waits
/// for all and returns each one's last stdout line as JSON.
fn run_group(python: &PathBuf, script: &str, format: &str, requests: &[Value]) -> Vec<Value> {
    let script = repo_root().join("tests/launch").join(script);
    let mut processes: Vec<Process> = requests
        .iter()
        .map(|request| {
            let run = print(format, request, &[]);
            assert_ran(&format!("resolve --print {format}"), &run);
            let mut cmd = Command::new("sh");
            cmd.env_clear()
                .arg("-c")
                .arg(format!("{}\nexec \"$0\" \"$1\"", run.stdout))
                .arg(python)
                .arg(&script)
                .env("PYTHONUNBUFFERED", "1")
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("JAX_PLATFORMS", "cpu");
            if let Ok(path) = std::env::var("PATH") {
                cmd.env("PATH", path);
            }
            Process::spawn(&mut cmd)
        })
        .collect();
    processes
        .iter_mut()
        .map(|p| {
            let run =
                p.finish(Duration::from_secs(300)).unwrap_or_else(|e| panic!("{script:?}: {e}"));
            assert_ran(&format!("{}", script.display()), &run);
            let last = run.stdout.lines().last().unwrap_or_default();
            serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
        })
        .collect()
}

/// A TF_CONFIG cluster of a chief and two workers on `host`, each at a free port, and one
/// `tf_config` request per task.
fn local_cluster(host: &str, bracketed: &str) -> Option<Vec<Value>> {
    let addr = |_| free_port(host).map(|p| format!("{bracketed}:{p}"));
    let addresses: Vec<String> = (0..3).map(addr).collect::<Option<_>>()?;
    let cluster = json!({"chief": [addresses[0]], "worker": [addresses[1], addresses[2]]});
    let tasks = [("chief", 0), ("worker", 0), ("worker", 1)];
    Some(
        tasks
            .iter()
            .map(|(job, index)| {
                let tf_config = json!({"cluster": cluster, "task": {"type": job, "index": index}});
                json!({"resolver": {"tf_config": {"value": tf_config.to_string()}}})
            })
            .collect(),
    )
}

fn check_torch(outputs: &[Value]) {
    let n = outputs.len();
    for (rank, out) in outputs.iter().enumerate() {
        assert_eq!(
            (out["rank"].as_u64(), out["world_size"].as_u64()),
            (Some(rank as u64), Some(n as u64))
        );
        assert_eq!(out["sum"].as_u64(), Some((n * (n + 1) / 2) as u64));
        // Every rank saw the same group: one master, local ranks 0..n on the one host.
        assert_eq!(out["group"], outputs[0]["group"]);
        let locals: Vec<u64> = (0..n).map(|i| out["group"][i][2].as_u64().unwrap_or(99)).collect();
        assert_eq!(locals, (0..n as u64).collect::<Vec<_>>());
    }
}

fn check_jax(outputs: &[Value]) {
    let n = outputs.len() as u64;
    for (i, out) in outputs.iter().enumerate() {
        assert_eq!(
            (out["process_index"].as_u64(), out["process_count"].as_u64()),
            (Some(i as u64), Some(n))
        );
        assert_eq!(out["device_processes"], json!((0..n).collect::<Vec<_>>()));
    }
}

#[test]
fn torch_distributed_starts_from_the_printed_env() {
    let python = torch_python();
    let requests = local_cluster("127.0.0.1", "127.0.0.1").expect("free ports on 127.0.0.1");
    check_torch(&run_group(&python, "torch_check.py", "torch-env", &requests));
    // IPv6: MASTER_ADDR without brackets, as PyTorch's store takes it.
    match local_cluster("::1", "[::1]") {
        Some(requests) => {
            check_torch(&run_group(&python, "torch_check.py", "torch-env", &requests))
        }
        None => eprintln!("SKIPPED the IPv6 group: cannot bind [::1]"),
    }
}

#[test]
fn jax_distributed_starts_from_the_printed_env() {
    let python = torch_python();
    let requests = local_cluster("127.0.0.1", "127.0.0.1").expect("free ports on 127.0.0.1");
    check_jax(&run_group(&python, "jax_check.py", "jax-env", &requests));
    // IPv6: the coordinator in brackets, as gRPC takes it.
    match local_cluster("::1", "[::1]") {
        Some(requests) => check_jax(&run_group(&python, "jax_check.py", "jax-env", &requests)),
        None => eprintln!("SKIPPED the IPv6 group: cannot bind [::1]"),
    }
}

#[test]
fn dispatcher_serves_the_same_launch() {
    let request = json!({"resolver": {"simple": {"cluster": {"worker": ["w0:2222", "w0:2223"]},
                                                 "task_type": "worker", "task_id": 1}},
                         "launch": {"master_port": 29500}});
    let cli = run_shardwise(&["resolve"], &request.to_string(), &[]).json();
    let dir = shardwise_tests::TempDir::new("launch-cluster");
    let config = dir.0.join("cluster.json");
    std::fs::write(&config, request.to_string()).expect("write --cluster-config");
    let config = config.to_str().expect("utf-8 path");
    let d = shardwise_tests::Dispatcher::start(&["--cluster-config", config]);
    let r = d.call("POST", "/v1/cluster/resolve", Some(request.clone()));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), cli);
    assert_eq!(cli["launch"]["torch"]["LOCAL_RANK"], "1");
    // The kept cluster of --cluster-config carries it too.
    let r = d.call("GET", "/v1/cluster", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["launch"], cli["launch"]);
    // The Python package asks the dispatcher for the same.
    let code = "import json, sys\nfrom shardwise.launch import jax_args, torch_env\n\
                request = json.loads(sys.argv[2])\n\
                print(json.dumps({'torch': torch_env(sys.argv[1], request), \
                                  'jax': jax_args(sys.argv[1], request)}))";
    let run = run_bounded(
        Command::new(torch_python()).args(["-c", code, &d.url, &request.to_string()]),
        Duration::from_secs(120),
    );
    assert_ran("shardwise.launch", &run);
    let from_python: Value = serde_json::from_str(run.stdout.trim()).expect("JSON");
    assert_eq!(from_python, cli["launch"]);
    // A launch that cannot be computed is the problem of the whole request.
    let mut bad = request.clone();
    bad["launch"]["master_port"] = json!(0);
    let r = d.call("POST", "/v1/cluster/resolve", Some(bad));
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["code"], "INVALID_ARGUMENT");
}
