//! Cluster resolution benchmarks.
//!
//! * Kubernetes: 10,000 pods across 4 jobs and 8 selectors, resolved from an in-memory
//!   snapshot, and from the raw PodList JSON the API would send (parse + resolve).
//! * TF_CONFIG: parse (cluster + task) and render, for a 2-job, 64-task cluster.
//!
//! `cargo bench -p shardwise-core --bench cluster`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use shardwise_core::cluster::kubernetes::{KubernetesSpec, PodSnapshot};
use shardwise_core::cluster::{ClusterResolver, TfConfigResolver, render_tf_config};

const PODS: usize = 10_000;
const SELECTORS: usize = 8;

fn pod_lists() -> Value {
    let per = PODS / SELECTORS;
    let mut lists = serde_json::Map::new();
    for s in 0..SELECTORS {
        let items: Vec<Value> = (0..per)
            .map(|i| {
                // Names deliberately out of order so the sort does real work.
                let n = (i * 7919) % per;
                json!({
                    "metadata": {"name": format!("job{s}-pod-{n:05}"), "namespace": "ml",
                                 "labels": {"sel": format!("s{s}")}},
                    "status": {"phase": "Running", "podIP": format!("10.{s}.{}.{}", n / 250, n % 250),
                               "hostIP": "192.168.0.1",
                               "conditions": [{"type": "Ready", "status": "True"}]}
                })
            })
            .collect();
        lists.insert(
            format!("sel=s{s}"),
            json!({"apiVersion": "v1", "kind": "PodList", "items": items}),
        );
    }
    Value::Object(lists)
}

fn mapping() -> Value {
    let mut m = serde_json::Map::new();
    for j in 0..4 {
        m.insert(
            format!("job{j}"),
            json!([format!("sel=s{}", 2 * j), format!("sel=s{}", 2 * j + 1)]),
        );
    }
    Value::Object(m)
}

fn kubernetes(c: &mut Criterion) {
    let lists = pod_lists();
    let text = lists.to_string();
    let spec: KubernetesSpec = serde_json::from_value(json!({
        "job_to_label_mapping": mapping(), "require_ready": true, "pods": lists
    }))
    .unwrap();
    let (config, snapshot) = spec.build().unwrap();
    let snapshot = snapshot.unwrap();
    assert_eq!(config.resolve(&snapshot).unwrap().total_tasks(), PODS);

    let mut g = c.benchmark_group("kubernetes_10k_pods");
    g.bench_function("resolve_snapshot", |b| {
        b.iter(|| black_box(config.resolve(black_box(&snapshot))))
    });
    g.bench_function("parse_json_and_resolve", |b| {
        b.iter(|| {
            let v: Value = serde_json::from_str(black_box(&text)).unwrap();
            let snap = PodSnapshot::from_json(&v).unwrap();
            black_box(config.resolve(&snap).unwrap())
        })
    });
    g.finish();
}

fn tf_config(c: &mut Criterion) {
    let workers: Vec<String> =
        (0..60).map(|i| format!("worker-{i}.svc.cluster.local:2222")).collect();
    let ps: Vec<String> = (0..4).map(|i| format!("ps-{i}.svc.cluster.local:2222")).collect();
    let text = json!({"cluster": {"worker": workers, "ps": ps, "chief": ["chief-0:2222"]},
                      "task": {"type": "worker", "index": 7}, "rpc_layer": "grpc"})
    .to_string();
    let mut g = c.benchmark_group("tf_config_65_tasks");
    g.bench_function("parse", |b| {
        b.iter(|| {
            let r = TfConfigResolver::new(Some(black_box(&text)));
            black_box((r.cluster_spec().unwrap(), r.task_type().unwrap(), r.task_id().unwrap()))
        })
    });
    let spec = TfConfigResolver::new(Some(&text)).cluster_spec().unwrap();
    g.bench_function("render", |b| {
        b.iter(|| {
            black_box(render_tf_config(black_box(&spec), Some("worker"), Some(7), Some("grpc")))
        })
    });
    g.finish();
}

criterion_group!(benches, kubernetes, tf_config);
criterion_main!(benches);
