//! `SlurmClusterResolver`: the cluster of a Slurm job step, from the `SLURM_*` variables.
//!
//! The environment is an input: [`SlurmResolver::new`] takes the process environment as a map
//! (or the inline `env` of a [`SlurmConfig`]) and, where TensorFlow would run `nvidia-smi`, the
//! GPU count the caller detected. Nothing here reads the process, runs a program or writes a
//! variable.
//!
//! # What is read
//!
//! - `SLURM_PROCID` (always): this process's rank.
//! - `SLURM_STEP_NUM_TASKS` when `jobs` is not given: the default is `{"worker": n}`.
//! - `SLURM_STEP_NODELIST` (a hostlist, see [`expand_hostlist`]) unless `tasks_per_node` is a
//!   per-host map.
//! - `SLURM_STEP_TASKS_PER_NODE` (see [`expand_tasks_per_node`]) when `tasks_per_node` is not
//!   given.
//! - `CUDA_VISIBLE_DEVICES` when `gpus_per_node` is not given.
//!
//! A missing variable is a `FailedPrecondition` with TensorFlow's `RuntimeError` text
//! (`SLURM_PROCID not found in environment. Not running inside a SLURM step?`).
//!
//! # Resolution
//!
//! Hosts are sorted by name; on each host, local slot `k` gets the address
//! `<host>:<port_base + k>` and the GPUs `k * gpus_per_task .. (k + 1) * gpus_per_task`. The flat
//! task list is cut into consecutive slices, one per job, jobs sorted by name; the job whose
//! slice holds the rank is this process's task type, the rank's offset in it the task id.
//! Everything is computed once, at construction; no accessor changes anything observable.
//!
//! # Deliberate differences from TensorFlow 2.21
//!
//! - **Task type and id are known from construction, and overrides persist.** TensorFlow sets
//!   `task_type`/`task_id` as a side effect of `cluster_spec()` (so they read `None` until the
//!   first call, and every call, including the one inside `master()`, overwrites what the user
//!   set). Here the rank-derived values are there from the start, and `set_task_type` /
//!   `set_task_id` replace them until set again (setting `None` reads back as `None`, as an
//!   assignment of `None` does in Python).
//! - **No process mutation.** TensorFlow writes `os.environ['CUDA_VISIBLE_DEVICES']` in
//!   `cluster_spec()`; here
//!   [`ClusterResolver::environment_updates`](super::ClusterResolver::environment_updates)
//!   returns `{"CUDA_VISIBLE_DEVICES": <this rank's GPU list>}` when `auto_set_gpu` is on (and
//!   nothing when it is off), for the caller to apply.
//! - **CPU-only steps work.** `gpus_per_task == 0` (given, or derived from zero GPUs) gives every
//!   task the empty GPU list `""`; TensorFlow fails with `range() arg 3 must not be zero`
//!   (TF issue #56894).
//! - **An empty `CUDA_VISIBLE_DEVICES` means zero GPUs.** The count is the number of non-blank
//!   comma-separated entries; TensorFlow counts `len(value.split(','))`, so `""` is one GPU.
//! - **No GPU information means CPU-only.** Without `gpus_per_node` and `CUDA_VISIBLE_DEVICES`,
//!   the caller's `detected_gpus` (its `nvidia-smi --list-gpus` count) is used, and `None`
//!   counts as 0 GPUs instead of TensorFlow's `nvidia-smi` error.
//! - **Crashes become `InvalidArgument`.** A rank outside the step's tasks with `auto_set_gpu`
//!   (TensorFlow: `IndexError`) fails `cluster_spec()`, `master()` and `environment_updates()`
//!   with `SLURM_PROCID <rank> is outside the <n> tasks of this step`; an empty task
//!   configuration (TensorFlow: `max()` of an empty sequence) and a configuration whose hosts
//!   all have 0 tasks while `gpus_per_task` must be derived (TensorFlow: `ZeroDivisionError`)
//!   fail construction. A negative `SLURM_PROCID` is refused (Python would index the GPU list
//!   from its end).
//! - **Ports are checked.** `port_base` must be at least 1 and `port_base + tasks per node - 1`
//!   at most 65535; TensorFlow prints whatever number it computes.
//! - **Bounded expansion.** A hostlist or tasks-per-node list that expands to more than
//!   [`DEFAULT_MAX_TASKS`] entries (or the caller's bound), a step with more tasks than that, or names
//!   and GPU lists that would take more than [`EXPANSION_BYTES_LIMIT`] bytes are refused with an
//!   `InvalidArgument` (no TensorFlow class) instead of being allocated; so are numbers beyond
//!   `i64` in a hostlist, beyond `u32` in a tasks-per-node list, and a `SLURM_PROCID` or
//!   `SLURM_STEP_NUM_TASKS` beyond `i64` (Python's integers are unbounded).
//! - **ASCII digits only** in tasks-per-node lists (Python's `\d` also takes other Unicode
//!   decimal digits).
//!
//! Kept for parity, however odd: Python's `int()` rules for hostlist numbers and ranks
//! (surrounding whitespace, `+`, `_` between digits: `n[ 1]` is `n01`, padded to the width of
//! the range start as written); descending ranges (`n[5-3]`) expand to nothing; duplicate hosts
//! are kept by [`expand_hostlist`] and collapse in the task configuration (a later count wins);
//! the hostlist and the tasks-per-node list are zipped, so the longer one is truncated; a
//! single trailing newline after a bracket group or a tasks-per-node entry is ignored (Python's
//! `$` matches before a final newline); a negative `SLURM_STEP_NUM_TASKS` is accepted and then
//! fails the job-size check.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod hostlist;
mod resolver;

pub use hostlist::{
    expand_hostlist, expand_hostlist_within, expand_tasks_per_node, expand_tasks_per_node_within,
};
pub use resolver::SlurmResolver;

/// The most entries a hostlist or tasks-per-node list may expand to, and the most tasks a step
/// may have, unless the caller sets its own bound ([`SlurmResolver::with_max_tasks`]; the
/// dispatcher's and `shardwise resolve`'s `--max-resolve-tasks`). A 200-byte request naming a
/// million tasks would otherwise build a reply of tens of megabytes.
pub const DEFAULT_MAX_TASKS: usize = 100_000;

/// What an expansion bound error tells the caller to do about it.
const RAISE_IT: &str = "raise the bound with --max-resolve-tasks for a larger cluster";

/// The most bytes the expanded host names (and, for a step, its addresses and GPU lists
/// together) may take.
pub const EXPANSION_BYTES_LIMIT: usize = 64 << 20;

/// The default first port on every host.
pub const DEFAULT_PORT_BASE: u16 = 8888;

const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// How many tasks run on each host, when not taken from `SLURM_STEP_TASKS_PER_NODE`.
///
/// In JSON an integer is [`TasksPerNode::Uniform`] and an object [`TasksPerNode::PerHost`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TasksPerNode {
    /// The same number of tasks on every host of `SLURM_STEP_NODELIST`.
    Uniform(u32),
    /// Host -> number of tasks; used as is (`SLURM_STEP_NODELIST` is not read).
    PerHost(BTreeMap<String, u32>),
}

/// The Slurm resolver's options: TensorFlow's constructor arguments plus the inline
/// environment. This is the `"slurm"` member of the resolve request; every field is optional.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlurmConfig {
    /// The environment to read; `None` uses the process environment the caller passes.
    pub env: Option<BTreeMap<String, String>>,
    /// Job name -> number of tasks; `None` means `{"worker": SLURM_STEP_NUM_TASKS}`.
    pub jobs: Option<BTreeMap<String, u64>>,
    /// The port of each host's first task (default 8888; must be at least 1).
    pub port_base: u16,
    /// GPUs on each host; `None` counts `CUDA_VISIBLE_DEVICES`, else uses the detected count.
    pub gpus_per_node: Option<u32>,
    /// GPUs of each task; `None` means `gpus_per_node / max_tasks_per_node`.
    pub gpus_per_task: Option<u32>,
    /// Tasks on each host; `None` takes `SLURM_STEP_TASKS_PER_NODE`.
    pub tasks_per_node: Option<TasksPerNode>,
    /// Whether
    /// [`ClusterResolver::environment_updates`](super::ClusterResolver::environment_updates)
    /// assigns this rank's GPUs through `CUDA_VISIBLE_DEVICES` (default true).
    pub auto_set_gpu: bool,
    /// The RPC layer (default `"grpc"`; JSON `null` means none).
    pub rpc_layer: Option<String>,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            env: None,
            jobs: None,
            port_base: DEFAULT_PORT_BASE,
            gpus_per_node: None,
            gpus_per_task: None,
            tasks_per_node: None,
            auto_set_gpu: true,
            rpc_layer: Some("grpc".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests;
