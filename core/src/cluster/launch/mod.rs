//! Launcher environments: a resolved cluster as PyTorch's and JAX's process groups.
//!
//! TensorFlow names a task by job and index; PyTorch (`torchrun`, `init_process_group` with
//! `env://`) and JAX (`jax.distributed.initialize`) number processes `0..n` and need one
//! process, rank 0, to be the rendezvous point. The same Kubernetes, Slurm and TF_CONFIG
//! clusters serve both once the training tasks are put in one order:
//!
//! - The process group is the tasks of the training jobs, by default `chief` then `worker`
//!   (TensorFlow's convention: the chief is worker 0 of `multi_worker_util`'s numbering), each
//!   job's tasks in index order. `ps` and `evaluator` tasks are not ranks. The job list is the
//!   request's `launch.jobs`; a job the cluster does not have is skipped.
//! - A task's rank is its position in that order, so ranks are `0..n` even when a job has a
//!   hole (a Kubernetes pod that left); with dense jobs it equals `id_in_cluster`.
//! - The master (PyTorch's `MASTER_ADDR:MASTER_PORT`, JAX's coordinator) is rank 0's host
//!   with `launch.master_port`, or else rank 0's own port. The rendezvous uses that port while
//!   the TensorFlow server of the same task would too: the two are not run together.
//! - The local rank is the task's position among the group's tasks on the same host (in rank
//!   order), and the local world size their number. Hosts are compared as written, ignoring
//!   ASCII case (`W0` and `w0` are one host; `10.0.0.1` and a name resolving to it are two).
//!
//! A task outside the group (a `ps`, an `evaluator`, or no task at all) has no rank:
//! [`process_group`] answers `None` for it, and [`not_in_group`] says why, for callers that
//! need a rank. Everything else that makes a rank meaningless is an error: a task that is not
//! in the cluster, an address that cannot be split into host and port ([`address`]), a master
//! without a port.

pub mod address;

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::error::ClusterError;
use super::spec::{ClusterSpec, TaskIndex};
use crate::echo::{bare, echo};
use address::{HostPort, join_host_port, parse_address};

/// The training jobs when the request names none, in rank order.
pub const DEFAULT_JOBS: [&str; 2] = ["chief", "worker"];

/// The request's `launch` member: which jobs train and where the master listens.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchOptions {
    /// The training jobs, in rank order (default [`DEFAULT_JOBS`]). Not empty, no repeats.
    #[serde(default)]
    pub jobs: Option<Vec<String>>,
    /// The master's port (default: rank 0's port in its address). Not 0.
    #[serde(default)]
    pub master_port: Option<u16>,
}

/// A training task's place in its process group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessGroup {
    /// The task's rank, `0..world_size`.
    pub rank: usize,
    /// The number of tasks in the group.
    pub world_size: usize,
    /// The task's rank among the group's tasks on its host.
    pub local_rank: usize,
    /// The number of the group's tasks on the task's host.
    pub local_world_size: usize,
    /// Rank 0's host, without brackets (`fd00::1` for an IPv6 address).
    pub master_host: String,
    /// The master's port.
    pub master_port: u16,
}

/// What `init_process_group("...", init_method="env://")` and `torchrun` read, as strings
/// ready for the environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchEnv {
    /// `MASTER_ADDR`: rank 0's host (an IPv6 address without brackets).
    #[serde(rename = "MASTER_ADDR")]
    pub master_addr: String,
    /// `MASTER_PORT`.
    #[serde(rename = "MASTER_PORT")]
    pub master_port: String,
    /// `RANK`.
    #[serde(rename = "RANK")]
    pub rank: String,
    /// `WORLD_SIZE`.
    #[serde(rename = "WORLD_SIZE")]
    pub world_size: String,
    /// `LOCAL_RANK`.
    #[serde(rename = "LOCAL_RANK")]
    pub local_rank: String,
    /// `LOCAL_WORLD_SIZE`.
    #[serde(rename = "LOCAL_WORLD_SIZE")]
    pub local_world_size: String,
}

impl TorchEnv {
    /// The variables, by name, in the order above.
    pub fn vars(&self) -> [(&'static str, &str); 6] {
        [
            ("MASTER_ADDR", &self.master_addr),
            ("MASTER_PORT", &self.master_port),
            ("RANK", &self.rank),
            ("WORLD_SIZE", &self.world_size),
            ("LOCAL_RANK", &self.local_rank),
            ("LOCAL_WORLD_SIZE", &self.local_world_size),
        ]
    }
}

/// The arguments of `jax.distributed.initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JaxArgs {
    /// `host:port` of process 0 (an IPv6 host in brackets).
    pub coordinator_address: String,
    /// The number of processes.
    pub num_processes: usize,
    /// This process's id.
    pub process_id: usize,
}

impl JaxArgs {
    /// As environment variables: `JAX_COORDINATOR_ADDRESS` (which JAX reads itself),
    /// `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID` (which JAX does not read: they are for a
    /// helper that passes them to `initialize`).
    pub fn vars(&self) -> [(&'static str, String); 3] {
        [
            ("JAX_COORDINATOR_ADDRESS", self.coordinator_address.clone()),
            ("JAX_NUM_PROCESSES", self.num_processes.to_string()),
            ("JAX_PROCESS_ID", self.process_id.to_string()),
        ]
    }
}

/// The reply's `launch` member: the same process group for PyTorch and for JAX.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    /// torchrun's environment.
    pub torch: TorchEnv,
    /// `jax.distributed.initialize`'s arguments.
    pub jax: JaxArgs,
}

impl ProcessGroup {
    /// `host:port` of the master (the host in brackets when it is an IPv6 address).
    pub fn master_address(&self) -> String {
        join_host_port(&self.master_host, self.master_port)
    }

    /// The group as PyTorch's environment and JAX's arguments.
    pub fn launch(&self) -> Launch {
        Launch {
            torch: TorchEnv {
                master_addr: self.master_host.clone(),
                master_port: self.master_port.to_string(),
                rank: self.rank.to_string(),
                world_size: self.world_size.to_string(),
                local_rank: self.local_rank.to_string(),
                local_world_size: self.local_world_size.to_string(),
            },
            jax: JaxArgs {
                coordinator_address: self.master_address(),
                num_processes: self.world_size,
                process_id: self.rank,
            },
        }
    }
}

impl LaunchOptions {
    /// The training jobs: the request's, checked (not empty, no empty name, no repeats), or
    /// [`DEFAULT_JOBS`].
    pub fn jobs(&self) -> Result<Vec<&str>, ClusterError> {
        let Some(jobs) = &self.jobs else { return Ok(DEFAULT_JOBS.to_vec()) };
        if jobs.is_empty() {
            return Err(ClusterError::invalid_input(
                "launch.jobs is empty: name the training jobs (default [\"chief\", \"worker\"])",
            ));
        }
        let mut seen = HashSet::with_capacity(jobs.len());
        for job in jobs {
            if job.is_empty() {
                return Err(ClusterError::invalid_input("launch.jobs has an empty job name"));
            }
            if !seen.insert(job.as_str()) {
                return Err(ClusterError::invalid_input(format!(
                    "launch.jobs names job {} twice",
                    echo(job)
                )));
            }
        }
        Ok(jobs.iter().map(String::as_str).collect())
    }
}

/// How an error names a task: `worker:1`.
fn task_name(job: &str, index: TaskIndex) -> String {
    format!("{}:{index}", bare(job))
}

/// The process group of `task_type`/`task_id` in `spec` (see the module documentation), or
/// `None` when the task has no rank: no task type or id, or a job that is not one of the
/// training jobs. Errors: invalid options, a training task missing from the cluster, a group
/// address that is not `host[:port]`, a master without a port.
pub fn process_group(
    spec: &ClusterSpec,
    task_type: Option<&str>,
    task_id: Option<TaskIndex>,
    options: &LaunchOptions,
) -> Result<Option<ProcessGroup>, ClusterError> {
    let jobs = options.jobs()?;
    if options.master_port == Some(0) {
        return Err(ClusterError::invalid_input(
            "launch.master_port must be a port from 1 to 65535, not 0",
        ));
    }
    let (Some(task_type), Some(task_id)) = (task_type, task_id) else { return Ok(None) };
    if !jobs.contains(&task_type) {
        return Ok(None);
    }
    // Jobs by name, so that a long job list over a cluster of many jobs stays linear.
    let by_name: HashMap<&str, &BTreeMap<TaskIndex, String>> = spec.iter().collect();
    let in_cluster = by_name.get(task_type).is_some_and(|tasks| tasks.contains_key(&task_id));
    if !in_cluster {
        return Err(ClusterError::not_found(format!(
            "task {} is not in the cluster, so it has no rank",
            task_name(task_type, task_id)
        )));
    }
    // The group in rank order, each address split (and so checked) once.
    let mut group: Vec<Member<'_>> = Vec::new();
    let mut rank = None;
    for job in jobs {
        let Some(tasks) = by_name.get(job) else { continue };
        for (&index, address) in *tasks {
            let split = parse_address(address).map_err(|e| {
                ClusterError::invalid_input(format!(
                    "the address {} of task {} cannot be used to launch: {e}",
                    echo(address),
                    task_name(job, index)
                ))
            })?;
            if job == task_type && index == task_id {
                rank = Some(group.len());
            }
            group.push(Member { job, index, address, split });
        }
    }
    let (Some(rank), Some(master)) = (rank, group.first()) else {
        // The task was found in the cluster above, so it is in the group.
        return Err(ClusterError::invalid_input("the task is missing from its process group"));
    };
    let Some(master_port) = options.master_port.or(master.split.port) else {
        return Err(ClusterError::invalid_input(format!(
            "the master, task {} at {}, has no port: give one in the address or as \
             launch.master_port",
            task_name(master.job, master.index),
            echo(master.address)
        )));
    };
    let host = group.get(rank).map(|m| m.split.host).unwrap_or_default();
    let same_host = |m: &&Member<'_>| m.split.host.eq_ignore_ascii_case(host);
    let local_rank = group.iter().take(rank).filter(same_host).count();
    let local_world_size = group.iter().filter(same_host).count();
    Ok(Some(ProcessGroup {
        rank,
        world_size: group.len(),
        local_rank,
        local_world_size,
        master_host: master.split.host.to_owned(),
        master_port,
    }))
}

/// One task of a process group being built.
struct Member<'a> {
    job: &'a str,
    index: TaskIndex,
    address: &'a str,
    split: HostPort<'a>,
}

/// Why `task_type`/`task_id` has no rank ([`process_group`] answered `None`): a
/// `FAILED_PRECONDITION` for callers that need one (`shardwise resolve --print torch-env`).
pub fn not_in_group(
    task_type: Option<&str>,
    task_id: Option<TaskIndex>,
    options: &LaunchOptions,
) -> ClusterError {
    let detail = match (task_type, task_id) {
        (Some(t), Some(i)) => {
            let jobs = options.jobs().unwrap_or_default();
            let jobs: Vec<String> = jobs.iter().map(|j| bare(j)).collect();
            format!(
                "task {} has no rank: only the jobs {} train (launch.jobs)",
                task_name(t, i),
                jobs.join(", ")
            )
        }
        _ => "this task has no rank: the request names no task (give task_type and task_id, \
              or use a resolver that knows this task)"
            .to_owned(),
    };
    ClusterError::precondition(None, detail)
}

#[cfg(test)]
mod tests;
