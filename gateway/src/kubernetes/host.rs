//! Reading what resolvers need from the host: the environment and the GPU count.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::process::Command;

use shardwise_core::cluster::request::{HostInputs, ResolveRequest};
use shardwise_core::cluster::{ClusterError, TfException};

/// The process environment as resolver input (variables that are not UTF-8 are skipped).
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// Counts GPUs with `nvidia-smi --list-gpus`, as TensorFlow's Slurm resolver does. A host
/// without `nvidia-smi` has no NVIDIA GPUs: `Ok(0)` (TensorFlow fails; CPU-only Slurm
/// clusters are common). A `nvidia-smi` that runs and fails is an error with its output.
pub fn count_gpus() -> Result<u32, ClusterError> {
    match Command::new("nvidia-smi").arg("--list-gpus").output() {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(0),
        Err(e) => Err(gpu_error(&e.to_string())),
        Ok(out) if !out.status.success() => Err(gpu_error(&String::from_utf8_lossy(&out.stdout))),
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            Ok(text
                .lines()
                .filter(|l| l.starts_with("GPU "))
                .count()
                .try_into()
                .unwrap_or(u32::MAX))
        }
    }
}

fn gpu_error(output: &str) -> ClusterError {
    ClusterError::precondition(
        Some(TfException::RuntimeError),
        format!(
            "Could not get number of GPUs from nvidia-smi. Maybe it is missing?\nOutput: {output}"
        ),
    )
}

/// The host inputs `request` needs: the environment always (it is cheap), and the GPU count
/// only when a Slurm resolver has no other way to know it; a Slurm step may expand to at most
/// `max_tasks` tasks (`--max-resolve-tasks`).
pub fn host_inputs(request: &ResolveRequest, max_tasks: usize) -> Result<HostInputs, ClusterError> {
    let env = process_env();
    let detected_gpus =
        if request.resolver.needs_gpu_probe(&env) { Some(count_gpus()?) } else { None };
    Ok(HostInputs { env, detected_gpus, max_tasks: Some(max_tasks) })
}
