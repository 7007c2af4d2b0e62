//! The resolver: a configuration with its pods, a snapshot or a live membership.

use crate::cluster::error::ClusterError;
use crate::cluster::resolver::{
    Accelerators, ClusterResolver, Device, DeviceMatch, count_accelerators, format_master_url,
};
use crate::cluster::spec::{ClusterSpec, TaskIndex};

use super::{KubernetesConfig, Membership, PodSnapshot};

/// Where a Kubernetes resolver's pods come from.
#[derive(Debug, Clone)]
enum Pods {
    /// One list per selector, resolved in TensorFlow's order on every call.
    Snapshot(PodSnapshot),
    /// A membership kept by a watch, with stable task indices.
    Live(Box<Membership>),
}

/// A Kubernetes resolver over a configuration and (once fetched) a pod snapshot, or a live
/// [`Membership`] kept current by a watch.
#[derive(Debug, Clone)]
pub struct KubernetesResolver {
    config: KubernetesConfig,
    snapshot: Option<Pods>,
    task_type: Option<String>,
    task_id: Option<TaskIndex>,
    rpc_layer: Option<String>,
    device_match: DeviceMatch,
}

impl KubernetesResolver {
    /// A resolver with no pods yet (attach them with [`KubernetesResolver::set_snapshot`]).
    pub fn new(config: KubernetesConfig) -> Result<Self, ClusterError> {
        config.validate()?;
        let rpc_layer = config.rpc_layer.clone();
        Ok(KubernetesResolver {
            config,
            snapshot: None,
            task_type: None,
            task_id: None,
            rpc_layer,
            device_match: DeviceMatch::default(),
        })
    }
    /// The configuration.
    pub fn config(&self) -> &KubernetesConfig {
        &self.config
    }
    /// Whether pods (a snapshot or a live membership) have been attached.
    pub fn has_snapshot(&self) -> bool {
        self.snapshot.is_some()
    }
    /// Attaches the pods the API returned.
    pub fn set_snapshot(&mut self, snapshot: PodSnapshot) {
        self.snapshot = Some(Pods::Snapshot(snapshot));
    }
    /// Attaches an (empty) live membership for this configuration, for a watch to feed
    /// through [`KubernetesResolver::membership_mut`]: task indices then stay stable as pods
    /// come and go, instead of being recomputed from each list.
    pub fn go_live(&mut self) -> Result<(), ClusterError> {
        self.snapshot = Some(Pods::Live(Box::new(Membership::new(self.config.clone())?)));
        Ok(())
    }
    /// The live membership, when [`KubernetesResolver::go_live`] attached one.
    pub fn membership(&self) -> Option<&Membership> {
        match &self.snapshot {
            Some(Pods::Live(m)) => Some(m),
            _ => None,
        }
    }
    /// The live membership, mutably (for the watch that feeds it).
    pub fn membership_mut(&mut self) -> Option<&mut Membership> {
        match &mut self.snapshot {
            Some(Pods::Live(m)) => Some(m),
            _ => None,
        }
    }
    /// Chooses how `num_accelerators` filters a device list.
    pub fn with_device_match(mut self, device_match: DeviceMatch) -> Self {
        self.device_match = device_match;
        self
    }
}

impl ClusterResolver for KubernetesResolver {
    fn cluster_spec(&self) -> Result<ClusterSpec, ClusterError> {
        match &self.snapshot {
            Some(Pods::Snapshot(s)) => self.config.resolve(s),
            Some(Pods::Live(m)) => m.cluster_spec(),
            None => Err(ClusterError::precondition(
                None,
                "the Kubernetes resolver has no pods to resolve: it needs a Kubernetes API or \
                 inline `pods`",
            )),
        }
    }

    /// Arguments override the resolver's task; `""` without a full task (no API call), else
    /// the task's address with the RPC layer.
    fn master(
        &self,
        task_type: Option<&str>,
        task_id: Option<TaskIndex>,
        rpc_layer: Option<&str>,
    ) -> Result<String, ClusterError> {
        let task_type = task_type.or(self.task_type.as_deref());
        let task_id = task_id.or(self.task_id);
        let (Some(t), Some(id)) = (task_type, task_id) else { return Ok(String::new()) };
        let spec = self.cluster_spec()?;
        let layer = rpc_layer.filter(|l| !l.is_empty()).or(self.rpc_layer.as_deref());
        Ok(format_master_url(spec.task_address(t, id)?, layer))
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
        Some(String::new())
    }
    fn num_accelerators(
        &self,
        task_type: Option<&str>,
        task_id: Option<TaskIndex>,
        devices: &[Device],
    ) -> Result<Accelerators, ClusterError> {
        Ok(count_accelerators(devices, task_type, task_id, self.device_match))
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
