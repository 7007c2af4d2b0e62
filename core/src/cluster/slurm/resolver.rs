//! The resolver: one rank's view of a Slurm job step, from its environment.

use std::collections::BTreeMap;

use crate::cluster::error::{ClusterError, TfException};
use crate::cluster::resolver::{Accelerators, ClusterResolver, Device, format_master_url};
use crate::cluster::spec::{ClusterSpec, TaskIndex, Tasks};
use crate::pyrepr::{python_int, repr_str};

use super::hostlist::len_u64;
use super::{
    CUDA_VISIBLE_DEVICES, DEFAULT_MAX_TASKS, EXPANSION_BYTES_LIMIT, RAISE_IT, SlurmConfig,
    TasksPerNode, expand_hostlist_within, expand_tasks_per_node_within,
};

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
/// `SlurmClusterResolver`). See the [module documentation](super) for the rules and for where
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
