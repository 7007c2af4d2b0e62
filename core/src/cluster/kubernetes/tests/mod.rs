//! The Kubernetes resolver's tests, by feature; here the v1 API data they are built from.

use std::sync::Mutex;

use serde_json::json;

use super::*;
use crate::cluster::request::{HostInputs, ResolveRequest};
use crate::cluster::resolver::ClusterResolver;

mod building;
mod membership;
mod resolving;

// -----------------------------------------------------------------------------------------
// v1 API data

/// A v1 pod in namespace `ml`, labelled `job-name=tensorflow`, Ready.
fn pod_with(name: &str, phase: &str, pod_ip: &str, host_ip: &str) -> Value {
    json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                     "resourceVersion": "7", "labels": {"job-name": "tensorflow"}},
        "spec": {"containers": [{"name": "tf", "image": "tensorflow/tensorflow"}]},
        "status": {"phase": phase, "podIP": pod_ip, "hostIP": host_ip,
                   "conditions": [{"type": "Initialized", "status": "True"},
                                  {"type": "Ready", "status": "True"}]}
    })
}

/// A Running pod with pod IP `ip` on node `192.168.0.1`.
fn running(name: &str, ip: &str) -> Value {
    pod_with(name, "Running", ip, "192.168.0.1")
}

fn with_phase(name: &str, phase: &str) -> Value {
    pod_with(name, phase, "10.0.9.9", "192.168.0.1")
}

fn pod_list_json(items: Vec<Value>) -> Value {
    json!({"kind": "PodList", "apiVersion": "v1",
           "metadata": {"resourceVersion": "100"}, "items": items})
}

fn pod_list(items: Vec<Value>) -> PodList {
    PodList::from_json(&pod_list_json(items)).expect("a valid PodList")
}

fn spec_of(v: Value) -> KubernetesSpec {
    serde_json::from_value(v).expect("a decodable kubernetes spec")
}

fn build(v: Value) -> Result<(KubernetesConfig, Option<PodSnapshot>), ClusterError> {
    spec_of(v).build()
}

fn config(v: Value) -> KubernetesConfig {
    build(v).expect("a valid kubernetes spec").0
}

/// A resolver over a spec with inline `pods`.
fn resolver(v: Value) -> KubernetesResolver {
    let (config, snapshot) = build(v).expect("a valid kubernetes spec");
    let mut r = KubernetesResolver::new(config).expect("a valid config");
    r.set_snapshot(snapshot.expect("inline pods"));
    r
}

fn resolve(v: Value) -> Result<ClusterSpec, ClusterError> {
    resolver(v).cluster_spec()
}

fn dict(v: Value) -> Value {
    resolve(v).expect("resolves").as_dict()
}
