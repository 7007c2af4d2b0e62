//! The Slurm resolver's tests, by feature; here their helpers.

use super::*;
use crate::cluster::error::{ClusterError, TfException};
use crate::cluster::resolver::{Accelerators, ClusterResolver};
use proptest::prelude::*;
use serde_json::{Value, json};

mod hostlist;
mod properties;
mod resolver;
mod tensorflow;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|&(k, v)| (k.to_owned(), v.to_owned())).collect()
}

fn config(value: Value) -> SlurmConfig {
    serde_json::from_value(value).expect("valid config")
}

fn resolve(vars: &[(&str, &str)], value: Value) -> Result<SlurmResolver, ClusterError> {
    SlurmResolver::new(config(value), &env(vars), None)
}

fn hosts(list: &str) -> Vec<String> {
    expand_hostlist(list).expect("valid hostlist")
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

const THREE_HOSTS: (&str, &str) = ("SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43");

fn ps_worker_cluster() -> Value {
    json!({"ps": ["t02n13:8888"], "worker": ["t02n41:8888", "t02n43:8888"]})
}

fn multi_task_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("SLURM_PROCID", "1"),
        ("SLURM_STEP_NUM_TASKS", "5"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2),1"),
        THREE_HOSTS,
        ("CUDA_VISIBLE_DEVICES", ""),
    ]
}

fn multi_task_cluster() -> Value {
    json!({
        "ps": ["t02n13:8888"],
        "worker": ["t02n13:8889", "t02n41:8888", "t02n41:8889", "t02n43:8888"],
    })
}
