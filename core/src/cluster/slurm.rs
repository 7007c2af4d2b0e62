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
//!   `cluster_spec()`; here [`ClusterResolver::environment_updates`] returns
//!   `{"CUDA_VISIBLE_DEVICES": <this rank's GPU list>}` when `auto_set_gpu` is on (and nothing
//!   when it is off), for the caller to apply.
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

use super::error::{ClusterError, TfException};
use super::resolver::{Accelerators, ClusterResolver, Device, format_master_url};
use super::spec::{ClusterSpec, TaskIndex, Tasks};
use crate::pyrepr::{python_int, repr_str};

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
    /// Whether [`ClusterResolver::environment_updates`] assigns this rank's GPUs through
    /// `CUDA_VISIBLE_DEVICES` (default true).
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

/// Why expanding one piece of a list failed.
enum Failure {
    /// TensorFlow's inner message (the caller adds TensorFlow's `Invalid ... format` prefix).
    Tf(String),
    /// A Shardwise limit; no TensorFlow class.
    Limit(String),
}

/// Running totals of an expansion, checked before anything is allocated.
struct Budget {
    entries: u64,
    bytes: u64,
    max_entries: u64,
}

impl Budget {
    fn new(max_entries: usize) -> Budget {
        Budget { entries: 0, bytes: 0, max_entries: len_u64(max_entries) }
    }

    /// Counts `entries` names of `bytes_each` bytes before any is built: a range such as
    /// `[0000000-0999999]` is refused from its bounds alone.
    fn reserve(&mut self, entries: u64, bytes_each: u64) -> Result<(), Failure> {
        let max = self.max_entries;
        let total = self.entries.checked_add(entries).filter(|&n| n <= max);
        let Some(total) = total else {
            return Err(Failure::Limit(format!(
                "it expands to more than {max} entries (the bound on resolved tasks; {RAISE_IT})"
            )));
        };
        let bytes = entries
            .checked_mul(bytes_each)
            .and_then(|b| b.checked_add(self.bytes))
            .filter(|&b| b <= EXPANSION_BYTES_LIMIT as u64);
        let Some(bytes) = bytes else {
            return Err(Failure::Limit(format!(
                "its expansion would take more than {EXPANSION_BYTES_LIMIT} bytes"
            )));
        };
        self.entries = total;
        self.bytes = bytes;
        Ok(())
    }
}

fn len_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Number of decimal digits of `n`.
fn decimal_len(n: u64) -> u64 {
    n.checked_ilog10().map_or(1, |d| u64::from(d) + 1)
}

/// Expands a Slurm hostlist such as `n[1-2],m5,o[009-011]` into host names, in order and
/// without de-duplication.
///
/// Parts are separated by commas outside brackets; each is a prefix with at most one
/// `[ranges]` group at its end. A range is `a` or `a-b` (inclusive; empty when `b < a`), and
/// numbers are zero-padded to the width of the range start as written (`o[009-011]` gives
/// `o009`, `o010`, `o011`; `n[8-11]` gives `n8` .. `n11`).
///
/// # Errors
///
/// A malformed hostlist is an `InvalidArgument` with TensorFlow's `ValueError` text, e.g.
/// `Invalid hostlist format "n[1-2": Invalid part: n[1-2`. More than [`DEFAULT_MAX_TASKS`]
/// names, more than [`EXPANSION_BYTES_LIMIT`] bytes of names, or a number beyond `i64` is an
/// `InvalidArgument` without a TensorFlow class.
pub fn expand_hostlist(hostlist: &str) -> Result<Vec<String>, ClusterError> {
    expand_hostlist_within(hostlist, DEFAULT_MAX_TASKS)
}

/// [`expand_hostlist`] with at most `max_names` names.
pub fn expand_hostlist_within(
    hostlist: &str,
    max_names: usize,
) -> Result<Vec<String>, ClusterError> {
    let fail = |failure: Failure| match failure {
        Failure::Tf(inner) => ClusterError::invalid(
            TfException::ValueError,
            format!("Invalid hostlist format \"{hostlist}\": {inner}"),
        ),
        Failure::Limit(why) => {
            ClusterError::invalid_input(format!("Hostlist \"{hostlist}\" is refused: {why}"))
        }
    };
    let mut hosts = Vec::new();
    let mut budget = Budget::new(max_names);
    let mut in_brackets = false;
    let mut start = 0;
    for (i, c) in hostlist.char_indices() {
        if in_brackets {
            match c {
                // TensorFlow asserts: no nested brackets (an empty AssertionError message).
                '[' => return Err(fail(Failure::Tf(String::new()))),
                ']' => in_brackets = false,
                _ => {}
            }
        } else if c == '[' {
            in_brackets = true;
        } else if c == ',' {
            let part = hostlist.get(start..i).unwrap_or_default();
            if part.is_empty() {
                // TensorFlow asserts: no empty part before a comma.
                return Err(fail(Failure::Tf(String::new())));
            }
            expand_part(part, &mut hosts, &mut budget).map_err(fail)?;
            start = i + c.len_utf8();
        }
    }
    let last = hostlist.get(start..).unwrap_or_default();
    if !last.is_empty() {
        expand_part(last, &mut hosts, &mut budget).map_err(fail)?;
    }
    Ok(hosts)
}

/// One part of a hostlist: `prefix` or `prefix[ranges]` (TensorFlow's regular expression
/// `([^,[\]]*)(\[([^\]]+)\])?$`, whose `$` also matches before a final newline).
fn expand_part(part: &str, hosts: &mut Vec<String>, budget: &mut Budget) -> Result<(), Failure> {
    let invalid = || Failure::Tf(format!("Invalid part: {part}"));
    let Some(open) = part.find([',', '[', ']']) else {
        budget.reserve(1, len_u64(part.len()))?;
        hosts.push(part.to_owned());
        return Ok(());
    };
    let (prefix, rest) = part.split_at(open);
    let Some(group) = rest.strip_prefix('[') else { return Err(invalid()) };
    let Some((ranges, tail)) = group.split_once(']') else { return Err(invalid()) };
    if ranges.is_empty() || !(tail.is_empty() || tail == "\n") {
        return Err(invalid());
    }
    for range in ranges.split(',') {
        expand_range(prefix, range, hosts, budget)?;
    }
    Ok(())
}

/// One range of a bracket group: `a` or `a-b`.
fn expand_range(
    prefix: &str,
    range: &str,
    hosts: &mut Vec<String>,
    budget: &mut Budget,
) -> Result<(), Failure> {
    let mut bounds = range.split('-');
    let first = bounds.next().unwrap_or_default();
    let last = match (bounds.next(), bounds.next()) {
        (None, _) => first,
        (Some(last), None) => last,
        // TensorFlow asserts: at most one dash.
        (Some(_), Some(_)) => return Err(Failure::Tf(String::new())),
    };
    let width = len_u64(first.chars().count());
    let lo = host_number(first)?;
    let hi = host_number(last)?;
    if hi < lo {
        return Ok(());
    }
    let count = (hi - lo).saturating_add(1);
    let bytes_each = len_u64(prefix.len()).saturating_add(width.max(decimal_len(hi)));
    budget.reserve(count, bytes_each)?;
    for n in lo..=hi {
        let digits = n.to_string();
        let mut name = String::with_capacity(prefix.len().saturating_add(digits.len()));
        name.push_str(prefix);
        for _ in len_u64(digits.len())..width {
            name.push('0');
        }
        name.push_str(&digits);
        hosts.push(name);
    }
    Ok(())
}

/// A range bound, parsed as Python's `int()` does.
fn host_number(text: &str) -> Result<u64, Failure> {
    match python_int(text) {
        Err(e) => Err(Failure::Tf(e.to_string())),
        Ok(Some(n)) => u64::try_from(n)
            .map_err(|_| Failure::Limit(format!("host number {} is negative", text.trim()))),
        Ok(None) => Err(Failure::Limit(format!("host number {} is too large", text.trim()))),
    }
}

fn is_ascii_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Expands a Slurm tasks-per-node list such as `3(x2),2,1` (`N` or `N(xR)`, meaning `N`
/// repeated `R` times) into `[3, 3, 2, 1]`.
///
/// # Errors
///
/// A malformed list is an `InvalidArgument` with TensorFlow's `ValueError` text, whose inner
/// message is empty: `Invalid tasks-per-node list format "x": `. A count beyond `u32`, or more
/// than [`DEFAULT_MAX_TASKS`] entries in all, is an `InvalidArgument` without a TensorFlow
/// class.
pub fn expand_tasks_per_node(tasks_per_node: &str) -> Result<Vec<u32>, ClusterError> {
    expand_tasks_per_node_within(tasks_per_node, DEFAULT_MAX_TASKS)
}

/// [`expand_tasks_per_node`] with at most `max_entries` entries (counted before any is
/// built: `1(x1000000)` is refused from its repetition alone).
pub fn expand_tasks_per_node_within(
    tasks_per_node: &str,
    max_entries: usize,
) -> Result<Vec<u32>, ClusterError> {
    let invalid = || {
        ClusterError::invalid(
            TfException::ValueError,
            format!("Invalid tasks-per-node list format \"{tasks_per_node}\": "),
        )
    };
    let refused = |why: String| {
        ClusterError::invalid_input(format!(
            "Tasks-per-node list \"{tasks_per_node}\" is refused: {why}"
        ))
    };
    let mut out: Vec<u32> = Vec::new();
    for part in tasks_per_node.split(',') {
        // TensorFlow's `(\d+)(\(x(\d+)\))?$`; `$` also matches before a final newline.
        let part = part.strip_suffix('\n').unwrap_or(part);
        let (count, repeat) = match part.split_once('(') {
            None => (part, None),
            Some((count, group)) => {
                let repeat = group.strip_prefix('x').and_then(|g| g.strip_suffix(')'));
                (count, Some(repeat.ok_or_else(invalid)?))
            }
        };
        if !is_ascii_digits(count) || repeat.is_some_and(|r| !is_ascii_digits(r)) {
            return Err(invalid());
        }
        let count: u32 =
            count.parse().map_err(|_| refused(format!("task count {count} is too large")))?;
        let repeat: u64 = match repeat {
            None => 1,
            Some(r) => r.parse().map_err(|_| refused(format!("repetition {r} is too large")))?,
        };
        let total = len_u64(out.len())
            .checked_add(repeat)
            .filter(|&n| n <= len_u64(max_entries))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                refused(format!(
                    "it expands to more than {max_entries} entries (the bound on resolved \
                     tasks; {RAISE_IT})"
                ))
            })?;
        out.resize(total, count);
    }
    Ok(out)
}

/// `_get_slurm_var`: a variable that must be set.
fn slurm_var<'a>(env: &'a BTreeMap<String, String>, name: &str) -> Result<&'a str, ClusterError> {
    env.get(name).map(String::as_str).ok_or_else(|| {
        ClusterError::precondition(
            Some(TfException::RuntimeError),
            format!("{name} not found in environment. Not running inside a SLURM step?"),
        )
    })
}

/// `int(os.environ[name])`, within `i64`.
fn slurm_int(env: &BTreeMap<String, String>, name: &str) -> Result<i64, ClusterError> {
    let text = slurm_var(env, name)?;
    python_int(text)
        .map_err(|e| ClusterError::invalid(TfException::ValueError, e.to_string()))?
        .ok_or_else(|| {
            ClusterError::invalid_input(format!("{name} {} is out of range", repr_str(text)))
        })
}

/// The number of GPUs `CUDA_VISIBLE_DEVICES` lists: its non-blank comma-separated entries.
fn count_visible_devices(value: &str) -> Result<u32, ClusterError> {
    let n = value.split(',').filter(|entry| !entry.trim().is_empty()).count();
    u32::try_from(n).map_err(|_| {
        ClusterError::invalid_input(format!("{CUDA_VISIBLE_DEVICES} lists too many devices"))
    })
}

/// The GPU list of local slot `slot`: `slot * per_task .. (slot + 1) * per_task`, joined by
/// commas (`""` when `per_task` is 0).
fn gpu_list(slot: u32, per_task: u32) -> String {
    let start = u64::from(slot).saturating_mul(u64::from(per_task));
    let ids: Vec<String> =
        (start..start.saturating_add(u64::from(per_task))).map(|id| id.to_string()).collect();
    ids.join(",")
}

/// The resolved cluster of one Slurm job step, seen from one rank (TensorFlow's
/// `SlurmClusterResolver`). See the [module documentation](self) for the rules and for where
/// it deliberately differs from TensorFlow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmResolver {
    rank: u64,
    task_configuration: BTreeMap<String, u32>,
    gpus_per_node: u32,
    gpus_per_task: u32,
    auto_set_gpu: bool,
    /// GPU list of every task of the flat task list.
    gpu_allocation: Vec<String>,
    cluster: ClusterSpec,
    /// The job and index that hold `rank`, if any.
    own_task: Option<(String, TaskIndex)>,
    task_type_override: Option<Option<String>>,
    task_id_override: Option<Option<TaskIndex>>,
    rpc_layer: Option<String>,
}

impl SlurmResolver {
    /// Resolves the step described by `config` and the environment: `config.env` when given,
    /// else `process_env`. `detected_gpus` is the caller's `nvidia-smi --list-gpus` count, used
    /// only when neither `gpus_per_node` nor `CUDA_VISIBLE_DEVICES` gives one (`None`: 0).
    ///
    /// # Errors
    ///
    /// In TensorFlow's order: a missing variable (`FailedPrecondition`, `RuntimeError`); a
    /// non-integer `SLURM_PROCID` or `SLURM_STEP_NUM_TASKS` (`ValueError`, Python's `int()`
    /// text); a malformed hostlist or tasks-per-node list (`ValueError`); `Requested more GPUs
    /// per node than available.` and `Requested <n> tasks but only <m> were assigned.`
    /// (`RuntimeError`). Shardwise's own checks (`InvalidArgument` without a TensorFlow class):
    /// a negative rank, an empty task configuration, `gpus_per_task` that cannot be derived
    /// because no host has a task, a `port_base` of 0 or a port above 65535, and the expansion
    /// limits.
    pub fn new(
        config: SlurmConfig,
        process_env: &BTreeMap<String, String>,
        detected_gpus: Option<u32>,
    ) -> Result<SlurmResolver, ClusterError> {
        SlurmResolver::with_max_tasks(config, process_env, detected_gpus, DEFAULT_MAX_TASKS)
    }

    /// [`SlurmResolver::new`] for steps of at most `max_tasks` tasks (and hostlists and
    /// tasks-per-node lists of at most that many entries): more is refused, naming the bound,
    /// before the hosts, addresses or GPU lists are built.
    pub fn with_max_tasks(
        config: SlurmConfig,
        process_env: &BTreeMap<String, String>,
        detected_gpus: Option<u32>,
        max_tasks: usize,
    ) -> Result<SlurmResolver, ClusterError> {
        let SlurmConfig {
            env,
            jobs,
            port_base,
            gpus_per_node,
            gpus_per_task,
            tasks_per_node,
            auto_set_gpu,
            rpc_layer,
        } = config;
        let env = env.as_ref().unwrap_or(process_env);

        // 1. The rank.
        let rank = slurm_int(env, "SLURM_PROCID")?;
        let rank = u64::try_from(rank).map_err(|_| {
            ClusterError::invalid_input(format!("SLURM_PROCID must not be negative, got {rank}"))
        })?;

        // 2. The jobs (a negative default count is kept: it fails the job-size check, as in
        //    TensorFlow).
        let jobs: BTreeMap<String, i128> = match jobs {
            Some(jobs) => jobs.into_iter().map(|(name, n)| (name, i128::from(n))).collect(),
            None => {
                let n = slurm_int(env, "SLURM_STEP_NUM_TASKS")?;
                BTreeMap::from([("worker".to_owned(), i128::from(n))])
            }
        };

        // 3. The task configuration.
        let task_configuration: BTreeMap<String, u32> = match tasks_per_node {
            None => {
                let hosts =
                    expand_hostlist_within(slurm_var(env, "SLURM_STEP_NODELIST")?, max_tasks)?;
                let counts = expand_tasks_per_node_within(
                    slurm_var(env, "SLURM_STEP_TASKS_PER_NODE")?,
                    max_tasks,
                )?;
                hosts.into_iter().zip(counts).collect()
            }
            Some(TasksPerNode::PerHost(map)) => map,
            Some(TasksPerNode::Uniform(n)) => {
                let hosts =
                    expand_hostlist_within(slurm_var(env, "SLURM_STEP_NODELIST")?, max_tasks)?;
                hosts.into_iter().map(|host| (host, n)).collect()
            }
        };

        // 4. Tasks per node and in all.
        let Some(&max_tasks_per_node) = task_configuration.values().max() else {
            return Err(ClusterError::invalid_input(
                "the task configuration is empty: the step has no hosts",
            ));
        };
        let num_tasks = task_configuration
            .values()
            .try_fold(0_u64, |sum, &n| sum.checked_add(u64::from(n)))
            .ok_or_else(|| ClusterError::invalid_input("the number of tasks overflows"))?;

        // 5. GPUs.
        let gpus_per_node = match gpus_per_node {
            Some(n) => n,
            None => match env.get(CUDA_VISIBLE_DEVICES) {
                Some(value) => count_visible_devices(value)?,
                None => detected_gpus.unwrap_or(0),
            },
        };
        let gpus_per_task = match gpus_per_task {
            Some(n) => n,
            None => gpus_per_node.checked_div(max_tasks_per_node).ok_or_else(|| {
                ClusterError::invalid_input(
                    "gpus_per_task cannot be derived: no host has a task (TensorFlow divides \
                     by zero)",
                )
            })?,
        };

        // 6. Enough GPUs.
        if u64::from(max_tasks_per_node) * u64::from(gpus_per_task) > u64::from(gpus_per_node) {
            return Err(ClusterError::invalid(
                TfException::RuntimeError,
                "Requested more GPUs per node than available.",
            ));
        }

        // 7. Job sizes add up.
        let requested = jobs
            .values()
            .try_fold(0_i128, |sum, &n| sum.checked_add(n))
            .ok_or_else(|| ClusterError::invalid_input("the job sizes overflow"))?;
        if requested != i128::from(num_tasks) {
            return Err(ClusterError::invalid(
                TfException::RuntimeError,
                format!("Requested {requested} tasks but only {num_tasks} were assigned."),
            ));
        }

        // 8. Ports, then the size of the result.
        if port_base == 0 {
            return Err(ClusterError::invalid_input("port_base must be at least 1"));
        }
        if let Some(last_slot) = max_tasks_per_node.checked_sub(1) {
            let last_port = u64::from(port_base) + u64::from(last_slot);
            if last_port > u64::from(u16::MAX) {
                return Err(ClusterError::invalid_input(format!(
                    "port {last_port} (port_base {port_base} + {max_tasks_per_node} tasks on one \
                     host - 1) is above 65535"
                )));
            }
        }
        let num_tasks =
            usize::try_from(num_tasks).ok().filter(|&n| n <= max_tasks).ok_or_else(|| {
                ClusterError::invalid_input(format!(
                    "the step has {num_tasks} tasks; at most {max_tasks} are resolved ({RAISE_IT})"
                ))
            })?;
        let too_large = || {
            ClusterError::invalid_input(format!(
                "the step's addresses and GPU lists would take more than \
                 {EXPANSION_BYTES_LIMIT} bytes"
            ))
        };
        // Every GPU id has at most 10 digits and a comma.
        let slot_bytes = u64::from(max_tasks_per_node)
            .saturating_mul(u64::from(gpus_per_task))
            .saturating_mul(11);
        if slot_bytes > EXPANSION_BYTES_LIMIT as u64 {
            return Err(too_large());
        }
        let slot_gpus: Vec<String> =
            (0..max_tasks_per_node).map(|slot| gpu_list(slot, gpus_per_task)).collect();
        let mut bytes: u64 = 0;
        for (host, &n) in &task_configuration {
            // `host:port`: at most 6 bytes after the host.
            let addresses = u64::from(n).saturating_mul(len_u64(host.len()).saturating_add(6));
            let gpus: u64 = slot_gpus
                .iter()
                .take(usize::try_from(n).unwrap_or(usize::MAX))
                .map(|g| len_u64(g.len()))
                .sum();
            bytes = bytes.saturating_add(addresses).saturating_add(gpus);
            if bytes > EXPANSION_BYTES_LIMIT as u64 {
                return Err(too_large());
            }
        }

        // The flat task list: hosts sorted by name, local slots in order.
        let mut addresses: Vec<String> = Vec::with_capacity(num_tasks);
        let mut gpu_allocation: Vec<String> = Vec::with_capacity(num_tasks);
        for (host, &n) in &task_configuration {
            for (slot, gpus) in (0..n).zip(&slot_gpus) {
                addresses.push(format!("{host}:{}", u32::from(port_base) + slot));
                gpu_allocation.push(gpus.clone());
            }
        }

        // Consecutive slices, one per job, jobs sorted by name.
        let mut remaining = addresses.into_iter();
        let mut start: u64 = 0;
        let mut own_task = None;
        let mut cluster_jobs = Vec::with_capacity(jobs.len());
        for (name, &size) in &jobs {
            let size = u64::try_from(size)
                .map_err(|_| ClusterError::invalid_input(format!("job {name} has {size} tasks")))?;
            let end = start
                .checked_add(size)
                .ok_or_else(|| ClusterError::invalid_input("the job sizes overflow"))?;
            if (start..end).contains(&rank) {
                let id = TaskIndex::try_from(rank - start)
                    .map_err(|_| ClusterError::invalid_input("SLURM_PROCID is out of range"))?;
                own_task = Some((name.clone(), id));
            }
            let tasks: Vec<String> =
                remaining.by_ref().take(usize::try_from(size).unwrap_or(usize::MAX)).collect();
            cluster_jobs.push((name.clone(), Tasks::Dense(tasks)));
            start = end;
        }
        let cluster = ClusterSpec::from_jobs(cluster_jobs)?;

        Ok(SlurmResolver {
            rank,
            task_configuration,
            gpus_per_node,
            gpus_per_task,
            auto_set_gpu,
            gpu_allocation,
            cluster,
            own_task,
            task_type_override: None,
            task_id_override: None,
            rpc_layer,
        })
    }

    /// This process's rank (`SLURM_PROCID`).
    pub fn rank(&self) -> u64 {
        self.rank
    }

    /// GPUs on each host, as given or counted.
    pub fn gpus_per_node(&self) -> u32 {
        self.gpus_per_node
    }

    /// GPUs of each task, as given or derived (`gpus_per_node / max_tasks_per_node`).
    pub fn gpus_per_task(&self) -> u32 {
        self.gpus_per_task
    }

    /// The GPU list (e.g. `"2,3"`, `""` without GPUs) of every task, in flat task order: hosts
    /// sorted by name, local slots in order. Index it with a rank.
    pub fn gpu_allocation(&self) -> &[String] {
        &self.gpu_allocation
    }

    /// Host -> number of tasks on it.
    pub fn task_configuration(&self) -> &BTreeMap<String, u32> {
        &self.task_configuration
    }

    /// This rank's GPU list, or the `auto_set_gpu` error when the rank has no task.
    fn own_gpus(&self) -> Result<&str, ClusterError> {
        usize::try_from(self.rank)
            .ok()
            .and_then(|rank| self.gpu_allocation.get(rank))
            .map(String::as_str)
            .ok_or_else(|| {
                ClusterError::invalid_input(format!(
                    "SLURM_PROCID {} is outside the {} tasks of this step",
                    self.rank,
                    self.gpu_allocation.len()
                ))
            })
    }
}

impl ClusterResolver for SlurmResolver {
    /// The step's cluster: jobs sorted by name, each a dense list of addresses. With
    /// `auto_set_gpu`, a rank outside the step's tasks is an error (TensorFlow: `IndexError`).
    fn cluster_spec(&self) -> Result<ClusterSpec, ClusterError> {
        if self.auto_set_gpu {
            self.own_gpus()?;
        }
        Ok(self.cluster.clone())
    }

    /// The address of the given task (arguments default to this process's task type and id),
    /// as `<rpc_layer>://<address>`; `""` when the task type or id is unknown. An empty
    /// `rpc_layer` argument falls back to the resolver's layer, as TensorFlow's
    /// `rpc_layer or self.rpc_layer` does.
    fn master(
        &self,
        task_type: Option<&str>,
        task_id: Option<TaskIndex>,
        rpc_layer: Option<&str>,
    ) -> Result<String, ClusterError> {
        let task_type = match task_type {
            Some(t) => Some(t.to_owned()),
            None => self.task_type()?,
        };
        let task_id = match task_id {
            Some(id) => Some(id),
            None => self.task_id()?,
        };
        let (Some(task_type), Some(task_id)) = (task_type, task_id) else {
            return Ok(String::new());
        };
        let cluster = self.cluster_spec()?;
        let address = cluster.task_address(&task_type, task_id)?;
        let layer = rpc_layer.filter(|l| !l.is_empty()).or(self.rpc_layer.as_deref());
        Ok(format_master_url(address, layer))
    }

    /// The override if one was set, else the job that holds this rank.
    fn task_type(&self) -> Result<Option<String>, ClusterError> {
        Ok(match &self.task_type_override {
            Some(t) => t.clone(),
            None => self.own_task.as_ref().map(|(t, _)| t.clone()),
        })
    }

    /// The override if one was set, else this rank's index in its job.
    fn task_id(&self) -> Result<Option<TaskIndex>, ClusterError> {
        Ok(match self.task_id_override {
            Some(id) => id,
            None => self.own_task.as_ref().map(|&(_, id)| id),
        })
    }

    fn rpc_layer(&self) -> Result<Option<String>, ClusterError> {
        Ok(self.rpc_layer.clone())
    }

    fn environment(&self) -> Option<String> {
        Some(String::new())
    }

    /// `{"GPU": gpus_per_task}`; the arguments are ignored.
    fn num_accelerators(
        &self,
        _task_type: Option<&str>,
        _task_id: Option<TaskIndex>,
        _devices: &[Device],
    ) -> Result<Accelerators, ClusterError> {
        Ok(Accelerators::from([("GPU".to_owned(), u64::from(self.gpus_per_task))]))
    }

    fn set_task_type(&mut self, task_type: Option<String>) {
        self.task_type_override = Some(task_type);
    }

    fn set_task_id(&mut self, task_id: Option<TaskIndex>) {
        self.task_id_override = Some(task_id);
    }

    fn set_rpc_layer(&mut self, rpc_layer: Option<String>) {
        self.rpc_layer = rpc_layer;
    }

    /// With `auto_set_gpu`, `{"CUDA_VISIBLE_DEVICES": <this rank's GPU list>}` (what TensorFlow
    /// writes into the process environment); empty otherwise.
    fn environment_updates(&self) -> Result<BTreeMap<String, String>, ClusterError> {
        if !self.auto_set_gpu {
            return Ok(BTreeMap::new());
        }
        let gpus = self.own_gpus()?;
        Ok(BTreeMap::from([(CUDA_VISIBLE_DEVICES.to_owned(), gpus.to_owned())]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

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

    // --- TensorFlow vectors -------------------------------------------------------------------

    #[test]
    fn tf_expand_hostlist() {
        assert_eq!(hosts("n1"), strings(&["n1"]));
        assert_eq!(hosts("n[1,3]"), strings(&["n1", "n3"]));
        assert_eq!(hosts("n[1-3]"), strings(&["n1", "n2", "n3"]));
        assert_eq!(
            hosts("n[1-2],m5,o[3-4,6,7-9]"),
            strings(&["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"])
        );
        assert_eq!(
            hosts("n[0001-0003],m5,o[009-011]"),
            strings(&["n0001", "n0002", "n0003", "m5", "o009", "o010", "o011"])
        );
        let err = expand_hostlist("n[1-2").unwrap_err();
        assert_eq!(err.detail(), "Invalid hostlist format \"n[1-2\": Invalid part: n[1-2");
        assert_eq!(err.tf_exception(), Some(TfException::ValueError));
        assert_eq!(err.code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn tf_expand_tasks_per_node() {
        let expand = |s: &str| expand_tasks_per_node(s).unwrap();
        assert_eq!(expand("2"), [2]);
        assert_eq!(expand("2,1,3"), [2, 1, 3]);
        assert_eq!(expand("3(x2),2,1"), [3, 3, 2, 1]);
        assert_eq!(expand("3(x2),2,11(x4)"), [3, 3, 2, 11, 11, 11, 11]);
        assert_eq!(expand("13(x10)"), [13; 10]);
        let err = expand_tasks_per_node("x").unwrap_err();
        assert_eq!(err.detail(), "Invalid tasks-per-node list format \"x\": ");
        assert_eq!(err.tf_exception(), Some(TfException::ValueError));
    }

    #[test]
    fn tf_simple_retrieval_from_env() {
        let vars = [
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_NUM_TASKS", "3"),
            ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
            THREE_HOSTS,
            ("CUDA_VISIBLE_DEVICES", "0"),
        ];
        let r = resolve(&vars, json!({})).unwrap();
        let spec = r.cluster_spec().unwrap();
        assert_eq!(
            spec.as_dict(),
            json!({"worker": ["t02n13:8888", "t02n41:8888", "t02n43:8888"]})
        );
        assert_eq!(r.master(Some("worker"), Some(0), Some("grpc")).unwrap(), "grpc://t02n13:8888");
        assert_eq!(
            r.num_accelerators(None, None, &[]).unwrap(),
            Accelerators::from([("GPU".to_owned(), 1)])
        );
        assert_eq!(r.environment_updates().unwrap(), env(&[("CUDA_VISIBLE_DEVICES", "0")]));
        // Known from construction, not only after cluster_spec().
        assert_eq!(r.task_type().unwrap().as_deref(), Some("worker"));
        assert_eq!(r.task_id().unwrap(), Some(0));
        assert_eq!(r.rpc_layer().unwrap().as_deref(), Some("grpc"));
        assert_eq!(r.environment().as_deref(), Some(""));
        assert_eq!((r.gpus_per_node(), r.gpus_per_task(), r.rank()), (1, 1, 0));
    }

    #[test]
    fn tf_simple_successful_retrieval_and_master() {
        let vars = [("SLURM_PROCID", "0"), ("SLURM_STEP_NUM_TASKS", "3"), THREE_HOSTS];
        let mut r = resolve(
            &vars,
            json!({"jobs": {"ps": 1, "worker": 2}, "port_base": 8888, "tasks_per_node": 1,
                   "gpus_per_node": 1, "gpus_per_task": 1, "auto_set_gpu": false}),
        )
        .unwrap();
        let spec = r.cluster_spec().unwrap();
        assert_eq!(spec.as_dict(), ps_worker_cluster());
        let def: Vec<String> = spec.cluster_def().into_iter().map(|j| j.name).collect();
        assert_eq!(def, ["ps", "worker"]);
        assert!(r.environment_updates().unwrap().is_empty());

        r.set_task_type(Some("worker".to_owned()));
        r.set_task_id(Some(1));
        assert_eq!(r.master(None, None, None).unwrap(), "grpc://t02n43:8888");
        r.set_rpc_layer(Some("ab".to_owned()));
        assert_eq!(r.master(Some("ps"), Some(0), None).unwrap(), "ab://t02n13:8888");
        assert_eq!(r.master(Some("ps"), Some(0), Some("test")).unwrap(), "test://t02n13:8888");
        // Overrides persist across cluster_spec() (TensorFlow overwrites them).
        r.cluster_spec().unwrap();
        assert_eq!(r.task_type().unwrap().as_deref(), Some("worker"));
        assert_eq!(r.task_id().unwrap(), Some(1));
    }

    #[test]
    fn tf_tasks_per_node_from_env() {
        let vars = [
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_NUM_TASKS", "3"),
            THREE_HOSTS,
            ("SLURM_STEP_TASKS_PER_NODE", "1(x3)"),
        ];
        let r = resolve(
            &vars,
            json!({"jobs": {"ps": 1, "worker": 2}, "port_base": 8888, "gpus_per_node": 1,
                   "gpus_per_task": 1, "auto_set_gpu": false}),
        )
        .unwrap();
        assert_eq!(r.cluster_spec().unwrap().as_dict(), ps_worker_cluster());
        assert_eq!(r.task_type().unwrap().as_deref(), Some("ps"));
        assert_eq!(r.task_id().unwrap(), Some(0));
    }

    #[test]
    fn tf_multi_task_per_node() {
        let r = resolve(
            &multi_task_env(),
            json!({"jobs": {"ps": 1, "worker": 4}, "port_base": 8888, "gpus_per_node": 2,
                   "gpus_per_task": 1, "auto_set_gpu": true}),
        )
        .unwrap();
        assert_eq!(r.cluster_spec().unwrap().as_dict(), multi_task_cluster());
        assert_eq!(r.environment_updates().unwrap(), env(&[("CUDA_VISIBLE_DEVICES", "1")]));
        assert_eq!(r.task_type().unwrap().as_deref(), Some("worker"));
        assert_eq!(r.task_id().unwrap(), Some(0));
        assert_eq!(r.gpu_allocation(), strings(&["0", "1", "0", "1", "0"]));
        let tasks = BTreeMap::from([
            ("t02n13".to_owned(), 2),
            ("t02n41".to_owned(), 2),
            ("t02n43".to_owned(), 1),
        ]);
        assert_eq!(r.task_configuration(), &tasks);
        assert_eq!(r.master(None, None, None).unwrap(), "grpc://t02n13:8889");
    }

    #[test]
    fn tf_multiple_gpus_per_task() {
        let r = resolve(
            &multi_task_env(),
            json!({"jobs": {"ps": 1, "worker": 4}, "port_base": 8888, "gpus_per_node": 4,
                   "gpus_per_task": 2, "auto_set_gpu": true}),
        )
        .unwrap();
        assert_eq!(r.cluster_spec().unwrap().as_dict(), multi_task_cluster());
        assert_eq!(r.environment_updates().unwrap(), env(&[("CUDA_VISIBLE_DEVICES", "2,3")]));
        assert_eq!(r.gpu_allocation(), strings(&["0,1", "2,3", "0,1", "2,3", "0,1"]));
        assert_eq!(
            r.num_accelerators(Some("ps"), Some(0), &[]).unwrap(),
            Accelerators::from([("GPU".to_owned(), 2)])
        );
    }

    // --- Hostlist and tasks-per-node details --------------------------------------------------

    #[test]
    fn hostlist_padding_order_and_duplicates() {
        assert_eq!(hosts("b04-[09-10]"), strings(&["b04-09", "b04-10"]));
        assert_eq!(hosts("n[8-11]"), strings(&["n8", "n9", "n10", "n11"]));
        assert_eq!(hosts("n[1-3,2-4]"), strings(&["n1", "n2", "n3", "n2", "n3", "n4"]));
        assert_eq!(hosts("a,a,b"), strings(&["a", "a", "b"]));
        assert_eq!(hosts("n[5-3]"), Vec::<String>::new());
        assert_eq!(hosts("[1-2]"), strings(&["1", "2"]));
        assert_eq!(hosts(""), Vec::<String>::new());
        assert_eq!(hosts("a,"), strings(&["a"]));
        // Python int() rules, padded to the start as written.
        assert_eq!(hosts("n[ 1]"), strings(&["n01"]));
        assert_eq!(hosts("n[+1-2]"), strings(&["n01", "n02"]));
        assert_eq!(hosts("n[1_0]"), strings(&["n010"]));
        // Python's `$` matches before a final newline.
        assert_eq!(hosts("n[1-2]\n"), strings(&["n1", "n2"]));
        assert_eq!(hosts("n1\n"), strings(&["n1\n"]));
    }

    #[test]
    fn hostlist_errors() {
        let detail = |s: &str| expand_hostlist(s).unwrap_err().detail().to_owned();
        assert_eq!(detail("a[1]b"), "Invalid hostlist format \"a[1]b\": Invalid part: a[1]b");
        assert_eq!(detail("n[]"), "Invalid hostlist format \"n[]\": Invalid part: n[]");
        assert_eq!(detail("a]b"), "Invalid hostlist format \"a]b\": Invalid part: a]b");
        assert_eq!(detail("n[1,2"), "Invalid hostlist format \"n[1,2\": Invalid part: n[1,2");
        assert_eq!(detail("n[[1]]"), "Invalid hostlist format \"n[[1]]\": ");
        assert_eq!(detail(",a"), "Invalid hostlist format \",a\": ");
        assert_eq!(detail("a,,b"), "Invalid hostlist format \"a,,b\": ");
        assert_eq!(detail("n[1-2-3]"), "Invalid hostlist format \"n[1-2-3]\": ");
        assert_eq!(
            detail("n[1,]"),
            "Invalid hostlist format \"n[1,]\": invalid literal for int() with base 10: ''"
        );
        assert_eq!(
            detail("n[x]"),
            "Invalid hostlist format \"n[x]\": invalid literal for int() with base 10: 'x'"
        );
        // Errors come in order: the bad range of an earlier part wins over a later empty part.
        assert_eq!(
            detail("n[y],,b"),
            "Invalid hostlist format \"n[y],,b\": invalid literal for int() with base 10: 'y'"
        );
    }

    #[test]
    fn huge_hostlists_are_refused_not_allocated() {
        for list in ["n[0-999999999]", "n[0-999999],m1", "n[0-9223372036854775807]"] {
            let err = expand_hostlist(list).unwrap_err();
            assert_eq!(err.code(), "INVALID_ARGUMENT");
            assert_eq!(err.tf_exception(), None, "{list}");
            assert!(err.detail().contains("more than 100000 entries"), "{}", err.detail());
        }
        let err = expand_hostlist("n[99999999999999999999]").unwrap_err();
        assert_eq!(err.tf_exception(), None);
        assert!(err.detail().contains("too large"), "{}", err.detail());
        // Long names: the byte budget.
        let long = format!("{}[0-99999]", "h".repeat(1000));
        let err = expand_hostlist(&long).unwrap_err();
        assert!(err.detail().contains("bytes"), "{}", err.detail());
        let wide = format!("n[{}1-99999]", " ".repeat(1000));
        assert!(expand_hostlist(&wide).unwrap_err().detail().contains("bytes"));
        // Exactly at the limit is fine.
        assert_eq!(expand_hostlist("n[1-100000]").unwrap().len(), DEFAULT_MAX_TASKS);
        let e = expand_hostlist("n[0000000-0999999]").unwrap_err().detail().to_owned();
        assert!(e.contains("more than 100000 entries") && e.contains("--max-resolve-tasks"), "{e}");
        assert_eq!(expand_hostlist_within("n[1-1000000]", 1_000_000).unwrap().len(), 1_000_000);
        assert!(expand_hostlist_within("n[1-11]", 10).is_err());
    }

    #[test]
    fn tasks_per_node_details() {
        assert_eq!(expand_tasks_per_node("3(x0),2").unwrap(), [2]);
        assert_eq!(expand_tasks_per_node("02(x02)").unwrap(), [2, 2]);
        assert_eq!(expand_tasks_per_node("2\n,1(x2)\n").unwrap(), [2, 1, 1]);
        for bad in ["", "1,", ",1", "1(x)", "1(2)", "(x2)", "1(x2", "1(x2))", "-1", "1 ", "1(x-1)"]
        {
            let err = expand_tasks_per_node(bad).unwrap_err();
            assert_eq!(err.detail(), format!("Invalid tasks-per-node list format \"{bad}\": "));
            assert_eq!(err.tf_exception(), Some(TfException::ValueError));
        }
        for huge in ["4294967296", "1(x1000001)", "1(x99999999999999999999999)", "1(x999999),1,1"] {
            let err = expand_tasks_per_node(huge).unwrap_err();
            assert_eq!(err.tf_exception(), None, "{huge}");
            assert_eq!(err.code(), "INVALID_ARGUMENT");
        }
        assert_eq!(expand_tasks_per_node("1(x100000)").unwrap().len(), DEFAULT_MAX_TASKS);
        let e = expand_tasks_per_node("1(x1000000)").unwrap_err().detail().to_owned();
        assert!(e.contains("more than 100000 entries") && e.contains("--max-resolve-tasks"), "{e}");
        assert_eq!(expand_tasks_per_node_within("1(x3),2", 4).unwrap(), [1, 1, 1, 2]);
        assert!(expand_tasks_per_node_within("1(x3),2", 3).is_err());
    }

    // --- Resolver behaviour -------------------------------------------------------------------

    #[test]
    fn zero_gpus_work_and_assign_empty_lists() {
        let base = [
            ("SLURM_PROCID", "2"),
            ("SLURM_STEP_NUM_TASKS", "3"),
            ("SLURM_STEP_TASKS_PER_NODE", "2,1"),
            ("SLURM_STEP_NODELIST", "a,b"),
        ];
        let empty_cuda: Vec<_> =
            base.iter().copied().chain([("CUDA_VISIBLE_DEVICES", "")]).collect();
        let cases = [
            (base.to_vec(), json!({})),
            (empty_cuda, json!({})),
            (base.to_vec(), json!({"gpus_per_node": 0})),
            (base.to_vec(), json!({"gpus_per_node": 4, "gpus_per_task": 0})),
        ];
        for (vars, value) in cases {
            let r = resolve(&vars, value.clone()).unwrap();
            assert_eq!(r.gpus_per_task(), 0, "{value}");
            assert_eq!(r.gpu_allocation(), strings(&["", "", ""]));
            assert_eq!(r.environment_updates().unwrap(), env(&[("CUDA_VISIBLE_DEVICES", "")]));
            assert_eq!(
                r.num_accelerators(None, None, &[]).unwrap(),
                Accelerators::from([("GPU".to_owned(), 0)])
            );
            assert_eq!(
                r.cluster_spec().unwrap().as_dict(),
                json!({"worker": ["a:8888", "a:8889", "b:8888"]})
            );
            assert_eq!(r.master(None, None, None).unwrap(), "grpc://b:8888");
        }
        // Blank entries do not count; the detected count is used only without other sources.
        let vars: Vec<_> =
            base.iter().copied().chain([("CUDA_VISIBLE_DEVICES", "0,,1, ")]).collect();
        let r = SlurmResolver::new(SlurmConfig::default(), &env(&vars), Some(8)).unwrap();
        assert_eq!((r.gpus_per_node(), r.gpus_per_task()), (2, 1));
        let r = SlurmResolver::new(SlurmConfig::default(), &env(&base), Some(8)).unwrap();
        assert_eq!((r.gpus_per_node(), r.gpus_per_task()), (8, 4));
        assert_eq!(r.gpu_allocation(), strings(&["0,1,2,3", "4,5,6,7", "0,1,2,3"]));
    }

    #[test]
    fn missing_variables_are_failed_preconditions() {
        let err = resolve(&[], json!({})).unwrap_err();
        assert_eq!(
            err.detail(),
            "SLURM_PROCID not found in environment. Not running inside a SLURM step?"
        );
        assert_eq!(err.code(), "FAILED_PRECONDITION");
        assert_eq!(err.tf_exception(), Some(TfException::RuntimeError));
        let err = resolve(&[("SLURM_PROCID", "0")], json!({})).unwrap_err();
        assert!(err.detail().starts_with("SLURM_STEP_NUM_TASKS not found"));
        // The hostlist is read before the tasks-per-node list.
        let err = resolve(&[("SLURM_PROCID", "0")], json!({"jobs": {}})).unwrap_err();
        assert!(err.detail().starts_with("SLURM_STEP_NODELIST not found"));
        let err =
            resolve(&[("SLURM_PROCID", "0"), ("SLURM_STEP_NODELIST", "a")], json!({"jobs": {}}))
                .unwrap_err();
        assert!(err.detail().starts_with("SLURM_STEP_TASKS_PER_NODE not found"));
        // A per-host configuration reads no hostlist.
        let r = resolve(
            &[("SLURM_PROCID", "0")],
            json!({"jobs": {"w": 1}, "tasks_per_node": {"h": 1}}),
        )
        .unwrap();
        assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"w": ["h:8888"]}));
    }

    #[test]
    fn non_integer_and_negative_ranks() {
        let vars = |rank: &'static str| [("SLURM_PROCID", rank), ("SLURM_STEP_NUM_TASKS", "1")];
        let err = resolve(&vars("x"), json!({})).unwrap_err();
        assert_eq!(err.detail(), "invalid literal for int() with base 10: 'x'");
        assert_eq!(err.tf_exception(), Some(TfException::ValueError));
        let err = resolve(&vars(""), json!({})).unwrap_err();
        assert_eq!(err.detail(), "invalid literal for int() with base 10: ''");
        let err = resolve(&vars("-1"), json!({})).unwrap_err();
        assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
        let err = resolve(&vars("99999999999999999999"), json!({})).unwrap_err();
        assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
        let err = resolve(&[("SLURM_PROCID", "0"), ("SLURM_STEP_NUM_TASKS", "3.0")], json!({}))
            .unwrap_err();
        assert_eq!(err.detail(), "invalid literal for int() with base 10: '3.0'");
        // Python int() accepts surrounding whitespace.
        let r = resolve(
            &[
                ("SLURM_PROCID", " 1 "),
                ("SLURM_STEP_NUM_TASKS", "2"),
                ("SLURM_STEP_NODELIST", "a"),
                ("SLURM_STEP_TASKS_PER_NODE", "2"),
            ],
            json!({}),
        )
        .unwrap();
        assert_eq!(r.rank(), 1);
        assert_eq!(r.task_id().unwrap(), Some(1));
    }

    #[test]
    fn too_many_gpus_requested() {
        let err = resolve(
            &multi_task_env(),
            json!({"jobs": {"ps": 1, "worker": 4},
            "gpus_per_node": 2, "gpus_per_task": 2}),
        )
        .unwrap_err();
        assert_eq!(err.detail(), "Requested more GPUs per node than available.");
        assert_eq!(err.tf_exception(), Some(TfException::RuntimeError));
        assert_eq!(err.code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn job_sum_mismatch() {
        let err = resolve(
            &multi_task_env(),
            json!({"jobs": {"ps": 1, "worker": 2},
            "gpus_per_node": 2}),
        )
        .unwrap_err();
        assert_eq!(err.detail(), "Requested 3 tasks but only 5 were assigned.");
        assert_eq!(err.tf_exception(), Some(TfException::RuntimeError));
        // The default job takes SLURM_STEP_NUM_TASKS, negative included (as TensorFlow).
        let mut vars = multi_task_env();
        vars[1] = ("SLURM_STEP_NUM_TASKS", "-4");
        let err = resolve(&vars, json!({})).unwrap_err();
        assert_eq!(err.detail(), "Requested -4 tasks but only 5 were assigned.");
        // The GPU check comes first.
        let err = resolve(
            &multi_task_env(),
            json!({"jobs": {"w": 1}, "gpus_per_node": 1,
            "gpus_per_task": 1}),
        )
        .unwrap_err();
        assert_eq!(err.detail(), "Requested more GPUs per node than available.");
    }

    #[test]
    fn duplicate_hosts_collapse_later_count_wins() {
        let vars = [
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_NODELIST", "b,a,b"),
            ("SLURM_STEP_TASKS_PER_NODE", "1,2,3"),
        ];
        let r = resolve(&vars, json!({"jobs": {"w": 5}, "gpus_per_node": 0})).unwrap();
        let expected = BTreeMap::from([("a".to_owned(), 2), ("b".to_owned(), 3)]);
        assert_eq!(r.task_configuration(), &expected);
        assert_eq!(
            r.cluster_spec().unwrap().as_dict(),
            json!({"w": ["a:8888", "a:8889", "b:8888", "b:8889", "b:8890"]})
        );
        // Uniform: every (distinct) host gets the count.
        let r = resolve(&vars, json!({"jobs": {"w": 4}, "tasks_per_node": 2})).unwrap();
        assert_eq!(r.task_configuration().len(), 2);
        // Zip truncates to the shorter list.
        let vars = [
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_NODELIST", "a,b,c"),
            ("SLURM_STEP_TASKS_PER_NODE", "1,1"),
        ];
        let r = resolve(&vars, json!({"jobs": {"w": 2}})).unwrap();
        assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"w": ["a:8888", "b:8888"]}));
    }

    #[test]
    fn per_host_configuration() {
        let r = resolve(
            &[("SLURM_PROCID", "3")],
            json!({"jobs": {"chief": 1, "worker": 3, "evaluator": 0},
                   "tasks_per_node": {"z": 1, "m": 3}, "gpus_per_node": 6, "port_base": 2000}),
        )
        .unwrap();
        assert_eq!(r.gpus_per_task(), 2);
        assert_eq!(
            r.cluster_spec().unwrap().as_dict(),
            json!({"chief": ["m:2000"], "evaluator": {}, "worker": ["m:2001", "m:2002", "z:2000"]})
        );
        assert_eq!(r.task_type().unwrap().as_deref(), Some("worker"));
        assert_eq!(r.task_id().unwrap(), Some(2));
        assert_eq!(r.environment_updates().unwrap(), env(&[("CUDA_VISIBLE_DEVICES", "0,1")]));
        assert_eq!(r.master(Some("chief"), Some(0), Some("")).unwrap(), "grpc://m:2000");
        let err = r.master(Some("ps"), None, None).unwrap_err();
        assert_eq!(err.code(), "NOT_FOUND");
        // An empty configuration is refused (TensorFlow: max() of an empty sequence).
        let err = resolve(&[("SLURM_PROCID", "0")], json!({"tasks_per_node": {}, "jobs": {}}))
            .unwrap_err();
        assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
        let err = resolve(
            &[("SLURM_PROCID", "0"), ("SLURM_STEP_NODELIST", "")],
            json!({"tasks_per_node": 1, "jobs": {}}),
        )
        .unwrap_err();
        assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
        // No host with a task: gpus_per_task cannot be derived (TensorFlow divides by zero) ...
        let err =
            resolve(&[("SLURM_PROCID", "0")], json!({"tasks_per_node": {"a": 0}, "jobs": {}}))
                .unwrap_err();
        assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
        // ... but given, an empty step resolves (as in TensorFlow).
        let r = resolve(
            &[("SLURM_PROCID", "0")],
            json!({"tasks_per_node": {"a": 0}, "jobs": {"w": 0}, "gpus_per_task": 0,
                   "auto_set_gpu": false}),
        )
        .unwrap();
        assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"w": {}}));
        assert_eq!(r.task_type().unwrap(), None);
    }

    #[test]
    fn rank_outside_the_step() {
        let vars = [
            ("SLURM_PROCID", "7"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("SLURM_STEP_NODELIST", "a"),
            ("SLURM_STEP_TASKS_PER_NODE", "2"),
        ];
        let r = resolve(&vars, json!({})).unwrap();
        assert_eq!(r.task_type().unwrap(), None);
        assert_eq!(r.task_id().unwrap(), None);
        for err in [r.cluster_spec().unwrap_err(), r.environment_updates().unwrap_err()] {
            assert_eq!(err.detail(), "SLURM_PROCID 7 is outside the 2 tasks of this step");
            assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
        }
        assert_eq!(r.master(None, None, None).unwrap(), "");
        assert!(r.master(Some("worker"), Some(0), None).is_err());
        // Without auto_set_gpu TensorFlow does not index the GPU list: no error.
        let r = resolve(&vars, json!({"auto_set_gpu": false})).unwrap();
        assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"worker": ["a:8888", "a:8889"]}));
        assert!(r.environment_updates().unwrap().is_empty());
        assert_eq!(r.master(Some("worker"), Some(1), None).unwrap(), "grpc://a:8889");
        assert_eq!(r.master(Some("worker"), None, None).unwrap(), "");
    }

    #[test]
    fn overrides_and_rpc_layer() {
        let vars = [("SLURM_PROCID", "1"), ("SLURM_STEP_NODELIST", "a,b")];
        let mut r =
            resolve(&vars, json!({"jobs": {"w": 2}, "tasks_per_node": 1, "rpc_layer": null}))
                .unwrap();
        assert_eq!(r.rpc_layer().unwrap(), None);
        assert_eq!(r.master(None, None, None).unwrap(), "b:8888");
        assert_eq!(r.master(None, None, Some("")).unwrap(), "b:8888");
        assert_eq!(r.master(None, Some(0), Some("x")).unwrap(), "x://a:8888");
        r.set_task_type(None);
        assert_eq!(r.task_type().unwrap(), None);
        assert_eq!(r.master(None, None, None).unwrap(), "");
        r.set_task_type(Some("w".to_owned()));
        r.set_task_id(Some(5));
        assert_eq!(r.master(None, None, None).unwrap_err().code(), "NOT_FOUND");
    }

    #[test]
    fn ports_are_checked() {
        let vars = [("SLURM_PROCID", "0"), ("SLURM_STEP_NODELIST", "a")];
        let r = resolve(&vars, json!({"jobs": {"w": 2}, "tasks_per_node": 2, "port_base": 65534}))
            .unwrap();
        assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"w": ["a:65534", "a:65535"]}));
        let err =
            resolve(&vars, json!({"jobs": {"w": 3}, "tasks_per_node": 3, "port_base": 65534}))
                .unwrap_err();
        assert_eq!((err.code().as_str(), err.tf_exception()), ("INVALID_ARGUMENT", None));
        assert!(err.detail().contains("65536"), "{}", err.detail());
        let err = resolve(
            &vars,
            json!({"jobs": {"w": 4000000000_u64}, "tasks_per_node": 4000000000_u32,
                   "gpus_per_task": 0}),
        )
        .unwrap_err();
        assert!(err.detail().contains("above 65535"), "{}", err.detail());
        let err = resolve(&vars, json!({"jobs": {"w": 1}, "tasks_per_node": 1, "port_base": 0}))
            .unwrap_err();
        assert_eq!(err.detail(), "port_base must be at least 1");
    }

    #[test]
    fn huge_steps_are_refused() {
        let vars = [("SLURM_PROCID", "0"), ("SLURM_STEP_NODELIST", "n[1-1000]")];
        let err = resolve(
            &vars,
            json!({"jobs": {"w": 2000000}, "tasks_per_node": 2000, "gpus_per_task": 0,
                   "port_base": 1}),
        )
        .unwrap_err();
        assert!(err.detail().contains("at most 100000 are resolved"), "{}", err.detail());
        let err = resolve(
            &vars,
            json!({"jobs": {"w": 1000}, "tasks_per_node": 1, "gpus_per_node": 4000000000_u32}),
        )
        .unwrap_err();
        assert!(err.detail().contains("bytes"), "{}", err.detail());
        let long = "h".repeat(100_000);
        let err = resolve(
            &[("SLURM_PROCID", "0")],
            json!({"jobs": {"w": 1000}, "tasks_per_node": {long: 1000}, "gpus_per_task": 0,
                   "port_base": 1}),
        )
        .unwrap_err();
        assert!(err.detail().contains("bytes"), "{}", err.detail());
    }

    #[test]
    fn inline_env_replaces_the_process_env() {
        let process = env(&[("SLURM_PROCID", "0"), ("SLURM_STEP_NUM_TASKS", "9")]);
        let mut cfg = config(json!({"env": {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_STEP_NODELIST": "x[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}}));
        let r = SlurmResolver::new(cfg.clone(), &process, Some(2)).unwrap();
        assert_eq!(r.rank(), 1);
        assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"worker": ["x1:8888", "x2:8888"]}));
        assert_eq!(r.environment_updates().unwrap(), env(&[("CUDA_VISIBLE_DEVICES", "0,1")]));
        cfg.env = None;
        let err = SlurmResolver::new(cfg, &process, None).unwrap_err();
        assert!(err.detail().starts_with("SLURM_STEP_NODELIST not found"));
    }

    #[test]
    fn serde_contract() {
        assert_eq!(config(json!({})), SlurmConfig::default());
        let d = SlurmConfig::default();
        assert_eq!(d.port_base, 8888);
        assert!(d.auto_set_gpu);
        assert_eq!(d.rpc_layer.as_deref(), Some("grpc"));
        assert_eq!(
            (d.env, d.jobs, d.gpus_per_node, d.gpus_per_task, d.tasks_per_node),
            (None, None, None, None, None)
        );
        assert_eq!(config(json!({"rpc_layer": null})).rpc_layer, None);
        assert_eq!(
            config(json!({"tasks_per_node": 2})).tasks_per_node,
            Some(TasksPerNode::Uniform(2))
        );
        assert_eq!(
            config(json!({"tasks_per_node": {"a": 1, "b": 2}})).tasks_per_node,
            Some(TasksPerNode::PerHost(BTreeMap::from([("a".to_owned(), 1), ("b".to_owned(), 2)])))
        );
        for bad in [
            json!({"unknown": 1}),
            json!({"tasks_per_node": "2"}),
            json!({"tasks_per_node": -1}),
            json!({"tasks_per_node": {"a": "1"}}),
            json!({"port_base": 70000}),
            json!({"jobs": {"w": -1}}),
            json!({"env": {"A": 1}}),
        ] {
            assert!(serde_json::from_value::<SlurmConfig>(bad.clone()).is_err(), "{bad}");
        }
        let full = json!({"env": {"SLURM_PROCID": "0"}, "jobs": {"w": 1}, "port_base": 1,
            "gpus_per_node": 2, "gpus_per_task": 1, "tasks_per_node": {"h": 1},
            "auto_set_gpu": false, "rpc_layer": "x"});
        let cfg = config(full.clone());
        assert_eq!(serde_json::to_value(&cfg).unwrap(), full);
        let strict: SlurmConfig =
            crate::json::from_str_strict(r#"{"tasks_per_node": 3, "auto_set_gpu": false}"#)
                .unwrap();
        assert_eq!(strict.tasks_per_node, Some(TasksPerNode::Uniform(3)));
    }

    proptest! {
        #[test]
        fn expansion_never_panics_on_any_string(s in any::<String>()) {
            let _ = expand_hostlist(&s);
            let _ = expand_tasks_per_node(&s);
        }

        #[test]
        fn expansion_never_panics_on_list_like_strings(s in "[a-c0-9\\[\\],x() _+\n-]{0,40}") {
            if let Err(e) = expand_hostlist(&s) {
                prop_assert_eq!(e.code(), "INVALID_ARGUMENT");
            }
            if let Ok(counts) = expand_tasks_per_node(&s) {
                prop_assert!(counts.len() <= DEFAULT_MAX_TASKS);
            }
        }

        #[test]
        fn plain_names_round_trip(
            names in proptest::collection::vec("[a-z][a-z0-9.-]{0,8}", 1..8),
        ) {
            prop_assert_eq!(expand_hostlist(&names.join(",")).unwrap(), names);
        }

        #[test]
        fn ranges_match_a_model(lo in 0_u64..300, len in 0_u64..40, pad in 0_usize..4) {
            let hi = lo + len;
            let start = format!("{}{lo}", "0".repeat(pad));
            let width = start.len();
            let got = expand_hostlist(&format!("p[{start}-{hi}]")).unwrap();
            let want: Vec<String> = (lo..=hi).map(|n| format!("p{n:0width$}")).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn resolver_never_panics(
            rank in prop_oneof![
                6 => (0_u32..10).prop_map(|r| r.to_string()),
                1 => "[0-9]{2}|-1|x| 3",
            ],
            num_tasks in "[0-9]{1,2}",
            matching_jobs in any::<bool>(),
            nodelist in "[ab](\\[[0-9](-[0-9])?\\])?(,[a-c][0-9]?){0,3}",
            tasks in "[0-3](\\(x[0-3]\\))?(,[0-3](\\(x[0-3]\\))?){0,3}",
            cuda in proptest::option::of("[0-3]?(,[0-3]){0,3}"),
            gpus_per_node in proptest::option::of(0_u32..9),
            gpus_per_task in proptest::option::of(0_u32..3),
            port_base in any::<u16>(),
            detected in proptest::option::of(0_u32..9),
        ) {
            // A model of the task configuration, to make the job sizes add up half the time.
            let model: BTreeMap<String, u32> = expand_hostlist(&nodelist)
                .unwrap_or_default()
                .into_iter()
                .zip(expand_tasks_per_node(&tasks).unwrap_or_default())
                .collect();
            let model_total: u64 = model.values().map(|&n| u64::from(n)).sum();
            let num_tasks = if matching_jobs { model_total.to_string() } else { num_tasks };
            let mut vars = env(&[
                ("SLURM_PROCID", &rank),
                ("SLURM_STEP_NUM_TASKS", &num_tasks),
                ("SLURM_STEP_NODELIST", &nodelist),
                ("SLURM_STEP_TASKS_PER_NODE", &tasks),
            ]);
            if let Some(cuda) = cuda {
                vars.insert(CUDA_VISIBLE_DEVICES.to_owned(), cuda);
            }
            let cfg =
                SlurmConfig { gpus_per_node, gpus_per_task, port_base, ..SlurmConfig::default() };
            if let Ok(r) = SlurmResolver::new(cfg, &vars, detected) {
                prop_assert_eq!(r.task_configuration(), &model);
                prop_assert_eq!(r.gpu_allocation().len() as u64, model_total);
                let inside = r.rank() < model_total;
                prop_assert_eq!(r.cluster_spec().is_ok(), inside);
                prop_assert_eq!(r.environment_updates().is_ok(), inside);
                prop_assert_eq!(r.task_type().unwrap().is_some(), inside);
                let per_task = u64::from(r.gpus_per_task());
                for gpus in r.gpu_allocation() {
                    let count = gpus.split(',').filter(|g| !g.is_empty()).count() as u64;
                    prop_assert_eq!(count, per_task);
                }
                if let Ok(spec) = r.cluster_spec() {
                    prop_assert_eq!(spec.total_tasks() as u64, model_total);
                    let master = r.master(None, None, None).unwrap();
                    prop_assert!(master.starts_with("grpc://"), "{}", master);
                }
            }
        }
    }
}
