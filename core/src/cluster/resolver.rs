//! The resolver surface shared by every resolver, and the helpers TensorFlow's base module has.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::ClusterError;
use super::spec::{ClusterSpec, TaskIndex};

/// Accelerator counts by device type, e.g. `{"GPU": 4}`.
pub type Accelerators = BTreeMap<String, u64>;

/// One device as the runtime reports it (TensorFlow's `list_logical_devices()`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// Full device name, e.g. `/job:worker/replica:0/task:0/device:GPU:0`.
    pub name: String,
    /// Device type, e.g. `GPU`, `TPU`, `CPU`.
    pub device_type: String,
}

/// How a device list is filtered for one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceMatch {
    /// Shardwise's default: the name's `job:` and `task:` components must equal the task's
    /// type and id exactly.
    #[default]
    Exact,
    /// TensorFlow's behaviour: substring tests of `/job:<type>` and `/task:<id>`, so `worker`
    /// also matches `worker2` and `task:1` also matches `task:10`.
    TfSubstring,
}

/// `format_master_url`: `"<rpc_layer>://<master>"` when `rpc_layer` is non-empty, else `master`.
pub fn format_master_url(master: &str, rpc_layer: Option<&str>) -> String {
    match rpc_layer {
        Some(layer) if !layer.is_empty() => format!("{layer}://{master}"),
        _ => master.to_owned(),
    }
}

fn name_component<'a>(name: &'a str, key: &str) -> Option<&'a str> {
    name.split('/').find_map(|part| part.strip_prefix(key).and_then(|rest| rest.strip_prefix(':')))
}

/// The base `ClusterResolver.num_accelerators` algorithm over a device list: `CPU` and
/// `XLA_CPU` devices are dropped; when both `task_type` and `task_id` are given only that
/// task's devices count.
pub fn count_accelerators(
    devices: &[Device],
    task_type: Option<&str>,
    task_id: Option<TaskIndex>,
    matching: DeviceMatch,
) -> Accelerators {
    let mut out = Accelerators::new();
    for d in devices {
        if d.device_type == "CPU" || d.device_type == "XLA_CPU" {
            continue;
        }
        if let (Some(t), Some(id)) = (task_type, task_id) {
            let keep = match matching {
                DeviceMatch::TfSubstring => {
                    d.name.contains(&format!("/job:{t}")) && d.name.contains(&format!("/task:{id}"))
                }
                DeviceMatch::Exact => {
                    name_component(&d.name, "job") == Some(t)
                        && name_component(&d.name, "task").and_then(|s| s.parse::<TaskIndex>().ok())
                            == Some(id)
                }
            };
            if !keep {
                continue;
            }
        }
        *out.entry(d.device_type.clone()).or_insert(0) += 1;
    }
    out
}

/// What every cluster resolver answers, after TensorFlow's `ClusterResolver`.
///
/// Accessors return `Result` because some resolvers (TF_CONFIG) parse their input lazily, as
/// TensorFlow does: a malformed TF_CONFIG fails every accessor, not construction.
pub trait ClusterResolver {
    /// The cluster. Resolvers never cache a cluster they query; in core every input is
    /// already a value, so this is a pure function of the resolver's inputs.
    fn cluster_spec(&self) -> Result<ClusterSpec, ClusterError>;

    /// TensorFlow's `master(task_type, task_id, rpc_layer)` ("only useful for TF 1.x"; kept
    /// for parity). Each resolver documents its own rules.
    fn master(
        &self,
        task_type: Option<&str>,
        task_id: Option<TaskIndex>,
        rpc_layer: Option<&str>,
    ) -> Result<String, ClusterError>;

    /// This task's job name, if known.
    fn task_type(&self) -> Result<Option<String>, ClusterError>;
    /// This task's index in its job, if known.
    fn task_id(&self) -> Result<Option<TaskIndex>, ClusterError>;
    /// The RPC layer (`grpc`), if known.
    fn rpc_layer(&self) -> Result<Option<String>, ClusterError>;
    /// The environment (`""` for most resolvers; `None` when unset on TF_CONFIG's).
    fn environment(&self) -> Option<String>;

    /// Accelerators of a task. `devices` is the runtime's device list (core never probes
    /// hardware); resolvers that know their counts otherwise ignore it.
    fn num_accelerators(
        &self,
        task_type: Option<&str>,
        task_id: Option<TaskIndex>,
        devices: &[Device],
    ) -> Result<Accelerators, ClusterError>;

    /// Overrides the task type.
    fn set_task_type(&mut self, task_type: Option<String>);
    /// Overrides the task id.
    fn set_task_id(&mut self, task_id: Option<TaskIndex>);
    /// Overrides the RPC layer.
    fn set_rpc_layer(&mut self, rpc_layer: Option<String>);

    /// Environment variables TensorFlow's resolver would have set as a side effect of
    /// `cluster_spec()` (Slurm's `CUDA_VISIBLE_DEVICES`). Core returns them instead of
    /// touching the process; empty for most resolvers.
    fn environment_updates(&self) -> Result<BTreeMap<String, String>, ClusterError> {
        Ok(BTreeMap::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str, t: &str) -> Device {
        Device { name: name.into(), device_type: t.into() }
    }

    #[test]
    fn master_url() {
        assert_eq!(format_master_url("h:1", Some("grpc")), "grpc://h:1");
        assert_eq!(format_master_url("h:1", Some("")), "h:1");
        assert_eq!(format_master_url("", Some("grpc")), "grpc://");
        assert_eq!(format_master_url("h:1", None), "h:1");
    }

    #[test]
    fn exact_device_filter_differs_from_tf_substring() {
        let devices = [
            dev("/job:worker/replica:0/task:1/device:GPU:0", "GPU"),
            dev("/job:worker2/replica:0/task:1/device:GPU:0", "GPU"),
            dev("/job:worker/replica:0/task:10/device:GPU:0", "GPU"),
            dev("/job:worker/replica:0/task:1/device:CPU:0", "CPU"),
        ];
        let exact = count_accelerators(&devices, Some("worker"), Some(1), DeviceMatch::Exact);
        assert_eq!(exact, Accelerators::from([("GPU".into(), 1)]));
        let tf = count_accelerators(&devices, Some("worker"), Some(1), DeviceMatch::TfSubstring);
        assert_eq!(tf, Accelerators::from([("GPU".into(), 3)]));
        let all = count_accelerators(&devices, Some("worker"), None, DeviceMatch::Exact);
        assert_eq!(all, Accelerators::from([("GPU".into(), 3)]));
    }
}
