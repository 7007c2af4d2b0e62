//! `SimpleClusterResolver`: a fixed cluster with fixed properties.

use super::error::ClusterError;
use super::resolver::{Accelerators, ClusterResolver, Device, format_master_url};
use super::spec::{ClusterSpec, TaskIndex};

/// A resolver over a cluster given up front (TensorFlow's `SimpleClusterResolver`).
#[derive(Debug, Clone, PartialEq)]
pub struct SimpleResolver {
    cluster: ClusterSpec,
    master: String,
    task_type: Option<String>,
    task_id: Option<TaskIndex>,
    environment: String,
    num_accelerators: Option<Accelerators>,
    rpc_layer: Option<String>,
}

impl SimpleResolver {
    /// A resolver over `cluster` with TensorFlow's defaults: master `""`, environment `""`,
    /// no task, no accelerators, no RPC layer.
    pub fn new(cluster: ClusterSpec) -> Self {
        SimpleResolver {
            cluster,
            master: String::new(),
            task_type: None,
            task_id: None,
            environment: String::new(),
            num_accelerators: None,
            rpc_layer: None,
        }
    }

    /// Sets the master returned by `master()` without a task.
    pub fn with_master(mut self, master: impl Into<String>) -> Self {
        self.master = master.into();
        self
    }
    /// Sets the task.
    pub fn with_task(mut self, task_type: Option<String>, task_id: Option<TaskIndex>) -> Self {
        self.task_type = task_type;
        self.task_id = task_id;
        self
    }
    /// Sets the environment string.
    pub fn with_environment(mut self, environment: impl Into<String>) -> Self {
        self.environment = environment.into();
        self
    }
    /// Sets the accelerator counts returned by `num_accelerators`.
    pub fn with_num_accelerators(mut self, accelerators: Option<Accelerators>) -> Self {
        self.num_accelerators = accelerators;
        self
    }
    /// Sets the RPC layer.
    pub fn with_rpc_layer(mut self, rpc_layer: Option<String>) -> Self {
        self.rpc_layer = rpc_layer;
        self
    }
}

impl ClusterResolver for SimpleResolver {
    fn cluster_spec(&self) -> Result<ClusterSpec, ClusterError> {
        Ok(self.cluster.clone())
    }

    /// With both `task_type` and `task_id` (0 counts), that task's address; otherwise the
    /// stored master. The `rpc_layer` argument wins over the stored one when non-empty.
    fn master(
        &self,
        task_type: Option<&str>,
        task_id: Option<TaskIndex>,
        rpc_layer: Option<&str>,
    ) -> Result<String, ClusterError> {
        let master = match (task_type, task_id) {
            (Some(t), Some(id)) => self.cluster.task_address(t, id)?,
            _ => self.master.as_str(),
        };
        let layer = rpc_layer.filter(|l| !l.is_empty()).or(self.rpc_layer.as_deref());
        Ok(format_master_url(master, layer))
    }

    fn task_type(&self) -> Result<Option<String>, ClusterError> {
        Ok(self.task_type.clone())
    }
    fn task_id(&self) -> Result<Option<TaskIndex>, ClusterError> {
        Ok(self.task_id)
    }
    fn rpc_layer(&self) -> Result<Option<String>, ClusterError> {
        Ok(self.rpc_layer.clone())
    }
    fn environment(&self) -> Option<String> {
        Some(self.environment.clone())
    }
    /// The stored counts (`{}` when none were given); the arguments are ignored.
    fn num_accelerators(
        &self,
        _task_type: Option<&str>,
        _task_id: Option<TaskIndex>,
        _devices: &[Device],
    ) -> Result<Accelerators, ClusterError> {
        Ok(self.num_accelerators.clone().unwrap_or_default())
    }
    fn set_task_type(&mut self, task_type: Option<String>) {
        self.task_type = task_type;
    }
    fn set_task_id(&mut self, task_id: Option<TaskIndex>) {
        self.task_id = task_id;
    }
    fn set_rpc_layer(&mut self, rpc_layer: Option<String>) {
        self.rpc_layer = rpc_layer;
    }
}

impl SimpleResolver {
    /// Whether accelerator counts were given.
    pub fn has_num_accelerators(&self) -> bool {
        self.num_accelerators.is_some()
    }
}
