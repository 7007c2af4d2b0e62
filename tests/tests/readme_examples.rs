//! The `shardwise resolve` examples the README shows, run exactly as written there.

use serde_json::json;
use shardwise_tests::run_shardwise;

fn resolve_file(name: &str) -> serde_json::Value {
    let path = format!("{}/../examples/resolve/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let run = run_shardwise(&["resolve", "--input", &path], "", &[]);
    assert_eq!(run.code, 0, "{name}: {} {}", run.stdout, run.stderr);
    run.json()
}

#[test]
fn tf_config_example() {
    let r = resolve_file("tf_config");
    assert_eq!(r["master"], "grpc://trainer-2:2222");
    assert_eq!(r["role"]["id_in_cluster"], 2);
    assert_eq!(r["role"]["collective_leader"], "/job:chief/replica:0/task:0");
}

#[test]
fn slurm_example() {
    let r = resolve_file("slurm");
    assert_eq!(
        r["cluster"],
        json!({"chief": ["gpu007:8888"], "worker": ["gpu007:8889", "gpu008:8888", "gpu008:8889"]})
    );
    assert_eq!((r["task_type"].as_str(), r["task_id"].as_i64()), (Some("worker"), Some(1)));
    assert_eq!(r["environment_updates"], json!({"CUDA_VISIBLE_DEVICES": "0,1"}));
}

#[test]
fn kubernetes_example() {
    let r = resolve_file("kubernetes");
    // Sorted by pod name within the selector, addressed by pod IP.
    assert_eq!(
        r["cluster"],
        json!({"chief": ["10.4.0.12:8470"], "worker": ["10.4.0.13:8470", "10.4.1.7:8470"]})
    );
    assert_eq!(r["master"], "grpc://10.4.0.13:8470");
}
