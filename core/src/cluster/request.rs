//! The resolve contract: one JSON request in, one JSON reply (or one typed error) out.
//!
//! This is what `shardwise resolve` and `POST /v1/cluster/resolve` share. Decoding is strict
//! (unknown fields and duplicate keys are refused); building validates everything (selectors,
//! ports, hostlists) before any API call; resolving is all-or-nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{ClusterError, TfException};
use super::kubernetes::{KubernetesResolver, KubernetesSpec, PodLister, fetch_snapshot};
use super::launch::{Launch, LaunchOptions, process_group};
use super::multi_worker::{Role, role};
use super::resolver::{Accelerators, ClusterResolver, Device, DeviceMatch};
use super::simple::SimpleResolver;
use super::slurm::{SlurmConfig, SlurmResolver};
use super::spec::{ClusterSpec, JobDef, TaskIndex};
use super::tfconfig::{TF_CONFIG_VAR, TfConfigResolver, render_tf_config};
use super::union::UnionResolver;

/// A resolve request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    /// Which resolver, with its inputs.
    pub resolver: ResolverSpec,
    /// Overrides the resolver's task type.
    #[serde(default)]
    pub task_type: Option<String>,
    /// Overrides the resolver's task id.
    #[serde(default)]
    pub task_id: Option<TaskIndex>,
    /// Overrides the resolver's RPC layer.
    #[serde(default)]
    pub rpc_layer: Option<String>,
    /// The runtime's device list, for `num_accelerators` of resolvers that count devices.
    #[serde(default)]
    pub devices: Option<Vec<Device>>,
    /// How devices are matched to the task (`exact`, or TensorFlow's `tf_substring`).
    #[serde(default)]
    pub device_match: DeviceMatch,
    /// Asks for the task's PyTorch and JAX process group too (the reply's `launch`).
    #[serde(default)]
    pub launch: Option<LaunchOptions>,
}

/// One resolver of the contract (externally tagged: `{"simple": {...}}`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResolverSpec {
    /// A fixed cluster.
    Simple(SimpleSpec),
    /// A TF_CONFIG value.
    TfConfig(TfConfigSpec),
    /// Pods selected by label.
    Kubernetes(KubernetesSpec),
    /// A Slurm step's environment.
    Slurm(SlurmConfig),
    /// Several resolvers merged.
    Union(Vec<ResolverSpec>),
}

/// `simple`: TensorFlow's `SimpleClusterResolver` arguments.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimpleSpec {
    /// The cluster, in `as_dict` form.
    pub cluster: Value,
    /// The master string (must be a string).
    #[serde(default)]
    pub master: Option<Value>,
    /// The task type.
    #[serde(default)]
    pub task_type: Option<String>,
    /// The task id.
    #[serde(default)]
    pub task_id: Option<TaskIndex>,
    /// The RPC layer.
    #[serde(default)]
    pub rpc_layer: Option<String>,
    /// The environment (default `""`).
    #[serde(default)]
    pub environment: Option<String>,
    /// Accelerator counts.
    #[serde(default)]
    pub num_accelerators: Option<Accelerators>,
}

/// `tf_config`: a TF_CONFIG value (absent: the process's `TF_CONFIG`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TfConfigSpec {
    /// The TF_CONFIG text, a JSON string.
    #[serde(default)]
    pub value: Option<String>,
    /// The environment (TensorFlow's constructor argument).
    #[serde(default)]
    pub environment: Option<String>,
}

/// What a resolver may read from the host when the request does not carry it inline. The
/// gateway fills it from the process; tests fill it by hand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostInputs {
    /// The process environment (`TF_CONFIG`, `SLURM_*`, `CUDA_VISIBLE_DEVICES`).
    pub env: BTreeMap<String, String>,
    /// GPUs found on the host (e.g. by `nvidia-smi`), for Slurm without `gpus_per_node`.
    pub detected_gpus: Option<u32>,
    /// The most tasks a Slurm step may expand to (`None`:
    /// [`DEFAULT_MAX_TASKS`](super::slurm::DEFAULT_MAX_TASKS)); the operator's
    /// `--max-resolve-tasks`.
    pub max_tasks: Option<usize>,
}

/// A built resolver of any kind.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Resolver {
    /// See [`SimpleResolver`].
    Simple(SimpleResolver),
    /// See [`TfConfigResolver`].
    TfConfig(TfConfigResolver),
    /// See [`KubernetesResolver`].
    Kubernetes(KubernetesResolver),
    /// See [`SlurmResolver`].
    Slurm(SlurmResolver),
    /// See [`UnionResolver`].
    Union(UnionResolver<Resolver>),
}

macro_rules! each {
    ($self:expr, $r:ident => $body:expr) => {
        match $self {
            Resolver::Simple($r) => $body,
            Resolver::TfConfig($r) => $body,
            Resolver::Kubernetes($r) => $body,
            Resolver::Slurm($r) => $body,
            Resolver::Union($r) => $body,
        }
    };
}

impl ClusterResolver for Resolver {
    fn cluster_spec(&self) -> Result<ClusterSpec, ClusterError> {
        each!(self, r => r.cluster_spec())
    }
    fn master(
        &self,
        task_type: Option<&str>,
        task_id: Option<TaskIndex>,
        rpc_layer: Option<&str>,
    ) -> Result<String, ClusterError> {
        each!(self, r => r.master(task_type, task_id, rpc_layer))
    }
    fn task_type(&self) -> Result<Option<String>, ClusterError> {
        each!(self, r => r.task_type())
    }
    fn task_id(&self) -> Result<Option<TaskIndex>, ClusterError> {
        each!(self, r => r.task_id())
    }
    fn rpc_layer(&self) -> Result<Option<String>, ClusterError> {
        each!(self, r => r.rpc_layer())
    }
    fn environment(&self) -> Option<String> {
        each!(self, r => r.environment())
    }
    fn num_accelerators(
        &self,
        task_type: Option<&str>,
        task_id: Option<TaskIndex>,
        devices: &[Device],
    ) -> Result<Accelerators, ClusterError> {
        each!(self, r => r.num_accelerators(task_type, task_id, devices))
    }
    fn set_task_type(&mut self, task_type: Option<String>) {
        each!(self, r => r.set_task_type(task_type))
    }
    fn set_task_id(&mut self, task_id: Option<TaskIndex>) {
        each!(self, r => r.set_task_id(task_id))
    }
    fn set_rpc_layer(&mut self, rpc_layer: Option<String>) {
        each!(self, r => r.set_rpc_layer(rpc_layer))
    }
    fn environment_updates(&self) -> Result<BTreeMap<String, String>, ClusterError> {
        each!(self, r => r.environment_updates())
    }
}

impl Resolver {
    /// Every Kubernetes resolver in the tree that has no pods yet.
    pub fn kubernetes_without_pods(&mut self) -> Vec<&mut KubernetesResolver> {
        let mut out = Vec::new();
        self.collect_kubernetes(&mut out);
        out
    }

    /// Every Kubernetes resolver in the tree, in order (depth first).
    pub fn kubernetes_mut(&mut self) -> Vec<&mut KubernetesResolver> {
        let mut out = Vec::new();
        self.collect_all_kubernetes(&mut out);
        out
    }

    /// Every Kubernetes resolver in the tree, in the order of [`Resolver::kubernetes_mut`].
    pub fn kubernetes(&self) -> Vec<&KubernetesResolver> {
        match self {
            Resolver::Kubernetes(k) => vec![k],
            Resolver::Union(u) => u.members().iter().flat_map(Resolver::kubernetes).collect(),
            _ => Vec::new(),
        }
    }

    fn collect_kubernetes<'a>(&'a mut self, out: &mut Vec<&'a mut KubernetesResolver>) {
        match self {
            Resolver::Kubernetes(k) if !k.has_snapshot() => out.push(k),
            Resolver::Union(u) => {
                for m in u.members_mut() {
                    m.collect_kubernetes(out);
                }
            }
            _ => {}
        }
    }

    fn collect_all_kubernetes<'a>(&'a mut self, out: &mut Vec<&'a mut KubernetesResolver>) {
        match self {
            Resolver::Kubernetes(k) => out.push(k),
            Resolver::Union(u) => {
                for m in u.members_mut() {
                    m.collect_all_kubernetes(out);
                }
            }
            _ => {}
        }
    }

    /// Whether `num_accelerators` has an answer without a device list.
    fn knows_accelerators(&self) -> bool {
        match self {
            Resolver::Slurm(_) => true,
            Resolver::Simple(s) => s.has_num_accelerators(),
            Resolver::Union(u) => u.members().first().is_some_and(Resolver::knows_accelerators),
            _ => false,
        }
    }

    /// Fetches the pods of every Kubernetes resolver that has none yet, through `lister`.
    pub async fn attach_pods(&mut self, lister: &dyn PodLister) -> Result<(), ClusterError> {
        for k in self.kubernetes_without_pods() {
            let snapshot = fetch_snapshot(lister, &k.config().queries()).await?;
            k.set_snapshot(snapshot);
        }
        Ok(())
    }
}

impl ResolverSpec {
    /// Validates and builds the resolver (no IO: host inputs are passed in).
    pub fn build(
        self,
        host: &HostInputs,
        device_match: DeviceMatch,
    ) -> Result<Resolver, ClusterError> {
        Ok(match self {
            ResolverSpec::Simple(s) => {
                let cluster = ClusterSpec::from_json(&s.cluster)?;
                let master = match s.master {
                    None => String::new(),
                    Some(Value::String(m)) => m,
                    Some(_) => {
                        return Err(ClusterError::invalid(
                            TfException::TypeError,
                            "master must be a string.",
                        ));
                    }
                };
                Resolver::Simple(
                    SimpleResolver::new(cluster)
                        .with_master(master)
                        .with_task(s.task_type, s.task_id)
                        .with_environment(s.environment.unwrap_or_default())
                        .with_num_accelerators(s.num_accelerators)
                        .with_rpc_layer(s.rpc_layer),
                )
            }
            ResolverSpec::TfConfig(t) => {
                let value = t.value.as_deref().or(host.env.get(TF_CONFIG_VAR).map(String::as_str));
                Resolver::TfConfig(
                    TfConfigResolver::new(value)
                        .with_environment(t.environment)
                        .with_device_match(device_match),
                )
            }
            ResolverSpec::Kubernetes(k) => {
                let (config, snapshot) = k.build()?;
                let mut r = KubernetesResolver::new(config)?.with_device_match(device_match);
                if let Some(s) = snapshot {
                    r.set_snapshot(s);
                }
                Resolver::Kubernetes(r)
            }
            ResolverSpec::Slurm(s) => {
                let max = host.max_tasks.unwrap_or(super::slurm::DEFAULT_MAX_TASKS);
                Resolver::Slurm(SlurmResolver::with_max_tasks(
                    s,
                    &host.env,
                    host.detected_gpus,
                    max,
                )?)
            }
            ResolverSpec::Union(members) => {
                let built = members
                    .into_iter()
                    .map(|m| m.build(host, device_match))
                    .collect::<Result<Vec<_>, _>>()?;
                Resolver::Union(UnionResolver::new(built)?)
            }
        })
    }

    /// Whether any resolver in the tree reads host inputs not given inline.
    pub fn reads_host(&self) -> bool {
        match self {
            ResolverSpec::TfConfig(t) => t.value.is_none(),
            ResolverSpec::Slurm(s) => s.env.is_none(),
            ResolverSpec::Union(m) => m.iter().any(ResolverSpec::reads_host),
            _ => false,
        }
    }

    /// Whether the tree has a Slurm resolver that would need the host's GPU count.
    pub fn needs_gpu_probe(&self, host_env: &BTreeMap<String, String>) -> bool {
        match self {
            ResolverSpec::Slurm(s) => {
                s.env.is_none()
                    && s.gpus_per_node.is_none()
                    && !host_env.contains_key("CUDA_VISIBLE_DEVICES")
            }
            ResolverSpec::Union(m) => m.iter().any(|r| r.needs_gpu_probe(host_env)),
            _ => false,
        }
    }
}

/// The reply: the cluster in both TensorFlow forms, this task, and what follows from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolveReply {
    /// `ClusterSpec.as_dict()`.
    pub cluster: Value,
    /// The `ClusterDef` form.
    pub cluster_def: Vec<JobDef>,
    /// This task's type.
    pub task_type: Option<String>,
    /// This task's id.
    pub task_id: Option<TaskIndex>,
    /// The RPC layer.
    pub rpc_layer: Option<String>,
    /// TensorFlow's `master()` (no arguments); `null` when it needs a task that is unknown or
    /// not in the cluster (TensorFlow raises there).
    pub master: Option<String>,
    /// The environment string.
    pub environment: Option<String>,
    /// Accelerators of this task, when the resolver or a device list says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_accelerators: Option<Accelerators>,
    /// The TF_CONFIG this task should be started with.
    pub tf_config: String,
    /// The task's role for TensorFlow's multi-worker strategies.
    pub role: Option<Role>,
    /// Variables TensorFlow's resolver would have set in the process (Slurm's
    /// `CUDA_VISIBLE_DEVICES`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment_updates: BTreeMap<String, String>,
    /// The task's PyTorch environment and JAX arguments, when the request has `launch`
    /// (absent otherwise, so replies to requests without it are unchanged); `Some(None)`,
    /// `null` in JSON, for a task that has no rank (a `ps`, an `evaluator`, no task).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_or_null"
    )]
    pub launch: Option<Option<Launch>>,
}

/// A member that may be absent (`None`, through `default`), `null` (`Some(None)`) or a value.
fn present_or_null<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

impl ResolveRequest {
    /// Decodes a request strictly.
    pub fn from_json(text: &str) -> Result<Self, ClusterError> {
        crate::json::from_str_strict(text)
            .map_err(|e| ClusterError::invalid_input(format!("invalid resolve request: {e}")))
    }

    /// Builds the resolver and applies the request's overrides.
    pub fn build(&self, host: &HostInputs) -> Result<Resolver, ClusterError> {
        let mut r = self.resolver.clone().build(host, self.device_match)?;
        if let Some(t) = &self.task_type {
            r.set_task_type(Some(t.clone()));
        }
        if let Some(i) = self.task_id {
            r.set_task_id(Some(i));
        }
        if let Some(l) = &self.rpc_layer {
            r.set_rpc_layer(Some(l.clone()));
        }
        Ok(r)
    }

    /// Resolves with a built resolver (pods attached where needed).
    pub fn resolve_with(&self, resolver: &Resolver) -> Result<ResolveReply, ClusterError> {
        let cluster = resolver.cluster_spec()?;
        let task_type = resolver.task_type()?;
        let task_id = resolver.task_id()?;
        let rpc_layer = resolver.rpc_layer()?;
        let master = match resolver.master(None, None, None) {
            Ok(m) => Some(m),
            Err(ClusterError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        let num_accelerators = match &self.devices {
            Some(devices) => Some(resolver.num_accelerators(None, None, devices)?),
            None if resolver.knows_accelerators() => {
                Some(resolver.num_accelerators(None, None, &[])?)
            }
            None => None,
        };
        let role = match (&task_type, task_id) {
            (Some(t), Some(i)) => role(&cluster, t, i),
            _ => None,
        };
        let launch = match &self.launch {
            Some(options) => Some(
                process_group(&cluster, task_type.as_deref(), task_id, options)?
                    .map(|g| g.launch()),
            ),
            None => None,
        };
        Ok(ResolveReply {
            cluster: cluster.as_dict(),
            cluster_def: cluster.cluster_def(),
            tf_config: render_tf_config(
                &cluster,
                task_type.as_deref(),
                task_id,
                rpc_layer.as_deref(),
            ),
            task_type,
            task_id,
            rpc_layer,
            master,
            environment: resolver.environment(),
            num_accelerators,
            role,
            environment_updates: resolver.environment_updates()?,
            launch,
        })
    }

    /// Builds and resolves in one step (offline: every Kubernetes resolver needs inline pods).
    pub fn resolve(&self, host: &HostInputs) -> Result<ResolveReply, ClusterError> {
        let resolver = self.build(host)?;
        self.resolve_with(&resolver)
    }
}
