//! `KubernetesClusterResolver`: jobs from the pods that label selectors match.
//!
//! Pure: the pods come in as values ([`PodSnapshot`], one `PodList` per selector, or
//! [`WatchEvent`]s for [`Membership`]). Fetching them is the [`PodLister`] port's job, which the
//! gateway implements against a real API; [`fetch_snapshot`] is the runtime-agnostic driver.
//!
//! TensorFlow's rules are kept: for each job in mapping order, for each selector in order, the
//! selector's pods sorted by `metadata.name` (code-point order, so `w-10` < `w-2`), lists
//! concatenated without de-duplication, and a pod whose phase is not `Running` fails the whole
//! resolution with `Pod "<name>" is not running; phase: "<phase>"`.
//!
//! Beyond TensorFlow:
//! * `address`: the pod's own IP (`status.podIP`) by default; TensorFlow uses the node's IP
//!   (`status.hostIP`), so two pods on one node collide. `AddressSource::HostIp` restores it.
//!   IPv6 addresses are bracketed (`[fd00::1]:8470`).
//! * `namespace` scoping (TensorFlow lists all namespaces).
//! * `require_ready`: a pod must also have its `Ready` condition true and not be terminating.
//! * `expected` replica counts per job: pods that do not qualify yet are skipped instead of
//!   failing, and a job with fewer qualifying pods than expected makes the answer
//!   [`ClusterError::Unavailable`] with the missing counts (ask again later).
//! * [`Membership`]: an incremental view fed by watch events that keeps every staying pod's
//!   task index stable (a pod that leaves leaves a hole, which the next new pod fills).

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{ClusterError, TfException};
use super::pods::{Pod, PodList, WatchEvent, WatchEventType};
use super::resolver::{
    Accelerators, ClusterResolver, Device, DeviceMatch, count_accelerators, format_master_url,
};
use super::selector::LabelSelector;
use super::spec::{ClusterSpec, TaskIndex, Tasks};
use crate::pyrepr::repr_str;

/// TensorFlow's default port for servers found through Kubernetes.
pub const DEFAULT_PORT: u16 = 8470;
/// TensorFlow's default mapping: job `worker`, selector `job-name=tensorflow`.
pub const DEFAULT_JOB: &str = "worker";
/// TensorFlow's default label selector.
pub const DEFAULT_SELECTOR: &str = "job-name=tensorflow";

/// Which pod field becomes a task's host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AddressSource {
    /// `status.podIP` (Shardwise's default).
    #[default]
    PodIp,
    /// `status.hostIP` (TensorFlow's behaviour).
    HostIp,
}

/// What a Kubernetes resolver selects and how it turns pods into tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesConfig {
    /// Job name -> label selectors, in order.
    pub job_to_label_mapping: Vec<(String, Vec<LabelSelector>)>,
    /// The port every task listens on.
    pub tf_server_port: u16,
    /// The RPC layer (`grpc`).
    pub rpc_layer: Option<String>,
    /// Which IP a task's address uses.
    pub address: AddressSource,
    /// List pods in this namespace only (`None`: all namespaces, as TensorFlow).
    pub namespace: Option<String>,
    /// Also require the `Ready` condition and no deletion in progress.
    pub require_ready: bool,
    /// Job -> the number of qualifying pods the job needs before the cluster is complete.
    pub expected: BTreeMap<String, usize>,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        let default_selector = LabelSelector::parse(DEFAULT_SELECTOR);
        KubernetesConfig {
            job_to_label_mapping: vec![(
                DEFAULT_JOB.to_owned(),
                default_selector.into_iter().collect(),
            )],
            tf_server_port: DEFAULT_PORT,
            rpc_layer: Some("grpc".to_owned()),
            address: AddressSource::default(),
            namespace: None,
            require_ready: false,
            expected: BTreeMap::new(),
        }
    }
}

/// One list call a resolver needs answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodQuery {
    /// `None`: all namespaces (`GET /api/v1/pods`), else `GET /api/v1/namespaces/{ns}/pods`.
    pub namespace: Option<String>,
    /// The `labelSelector` query parameter.
    pub selector: LabelSelector,
}

/// The pods an API returned, per label selector (keyed by the selector's text as written in
/// the mapping).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSnapshot {
    lists: BTreeMap<String, PodList>,
}

impl PodSnapshot {
    /// An empty snapshot.
    pub fn new() -> Self {
        Self::default()
    }
    /// Records the list returned for `selector`.
    pub fn insert(&mut self, selector: impl Into<String>, list: PodList) {
        self.lists.insert(selector.into(), list);
    }
    /// The list for `selector`, if one was recorded.
    pub fn get(&self, selector: &str) -> Option<&PodList> {
        self.lists.get(selector)
    }
    /// Parses `{selector: <v1 PodList JSON>}`.
    pub fn from_json(value: &Value) -> Result<Self, ClusterError> {
        let Value::Object(map) = value else {
            return Err(ClusterError::invalid_input(
                "`pods` must be an object mapping label selectors to v1 PodList objects",
            ));
        };
        let mut out = PodSnapshot::new();
        for (selector, list) in map {
            let list = PodList::from_json(list)
                .map_err(|e| e.context(&format!("pods for selector {selector:?}")))?;
            out.insert(selector.clone(), list);
        }
        Ok(out)
    }
}

/// The port that answers [`PodQuery`]s: implemented by the gateway over the Kubernetes API,
/// and by tests with canned lists.
#[async_trait]
pub trait PodLister: Send + Sync {
    /// Lists the pods matching `query.selector` (in `query.namespace`, or everywhere).
    async fn list_pods(&self, query: &PodQuery) -> Result<PodList, ClusterError>;
}

/// Asks `lister` for every query concurrently and collects the answers into a snapshot. The
/// first error fails the whole fetch (no partial cluster).
pub async fn fetch_snapshot(
    lister: &dyn PodLister,
    queries: &[PodQuery],
) -> Result<PodSnapshot, ClusterError> {
    let lists = futures::future::try_join_all(queries.iter().map(|q| lister.list_pods(q))).await?;
    let mut snapshot = PodSnapshot::new();
    for (q, list) in queries.iter().zip(lists) {
        snapshot.insert(q.selector.as_str(), list);
    }
    Ok(snapshot)
}

fn format_address(ip: &str, port: u16) -> String {
    if ip.contains(':') && !ip.starts_with('[') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// Why a pod is not a task (yet).
enum Disqualified {
    NotRunning(String),
    NotReady,
}

impl KubernetesConfig {
    /// The distinct list calls this configuration needs, in mapping order.
    pub fn queries(&self) -> Vec<PodQuery> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for (_, selectors) in &self.job_to_label_mapping {
            for s in selectors {
                if seen.insert(s.as_str().to_owned()) {
                    out.push(PodQuery { namespace: self.namespace.clone(), selector: s.clone() });
                }
            }
        }
        out
    }

    /// Checks what the type system cannot: `expected` names mapped jobs, ports are in range.
    pub fn validate(&self) -> Result<(), ClusterError> {
        if self.tf_server_port == 0 {
            return Err(ClusterError::invalid_input("tf_server_port must be in 1..=65535, not 0"));
        }
        for job in self.expected.keys() {
            if !self.job_to_label_mapping.iter().any(|(j, _)| j == job) {
                return Err(ClusterError::invalid_input(format!(
                    "expected names job {job:?}, which job_to_label_mapping does not map"
                )));
            }
        }
        Ok(())
    }

    fn in_namespace(&self, pod: &Pod) -> bool {
        match (&self.namespace, &pod.namespace) {
            (Some(want), Some(ns)) => want == ns,
            _ => true,
        }
    }

    fn qualify(&self, pod: &Pod) -> Result<(), Disqualified> {
        if pod.phase.as_deref() != Some("Running") {
            return Err(Disqualified::NotRunning(
                pod.phase.clone().unwrap_or_else(|| "None".into()),
            ));
        }
        if self.require_ready && (pod.ready != Some(true) || pod.is_terminating()) {
            return Err(Disqualified::NotReady);
        }
        Ok(())
    }

    fn address_of(&self, pod: &Pod) -> Result<String, ClusterError> {
        let (ip, field) = match self.address {
            AddressSource::PodIp => (&pod.pod_ip, "status.podIP"),
            AddressSource::HostIp => (&pod.host_ip, "status.hostIP"),
        };
        match ip.as_deref().filter(|ip| !ip.is_empty()) {
            Some(ip) => Ok(format_address(ip, self.tf_server_port)),
            None => Err(ClusterError::invalid_input(format!(
                "Pod {:?} has no {field}, which address {:?} needs",
                pod.name,
                match self.address {
                    AddressSource::PodIp => "pod_ip",
                    AddressSource::HostIp => "host_ip",
                }
            ))),
        }
    }

    /// The qualifying pods of `job`, in TensorFlow's order, with their addresses. Pods that do
    /// not qualify fail the call unless the job has an `expected` count.
    fn job_members<'a>(
        &self,
        job: &str,
        selectors: &[LabelSelector],
        lists: impl Fn(&str) -> Option<Vec<&'a Pod>>,
    ) -> Result<Vec<(usize, &'a Pod, String)>, ClusterError> {
        let tolerant = self.expected.contains_key(job);
        let mut out = Vec::new();
        for (si, selector) in selectors.iter().enumerate() {
            let Some(mut pods) = lists(selector.as_str()) else {
                return Err(ClusterError::precondition(
                    None,
                    format!(
                        "no pod list for label selector {:?}: resolving needs a Kubernetes API \
                         or inline `pods`",
                        selector.as_str()
                    ),
                ));
            };
            pods.retain(|p| self.in_namespace(p));
            pods.sort_by(|a, b| a.name.cmp(&b.name));
            for pod in pods {
                match self.qualify(pod) {
                    Ok(()) => out.push((si, pod, self.address_of(pod)?)),
                    Err(_) if tolerant => {}
                    Err(Disqualified::NotRunning(phase)) => {
                        return Err(ClusterError::precondition(
                            Some(TfException::RuntimeError),
                            format!("Pod \"{}\" is not running; phase: \"{phase}\"", pod.name),
                        ));
                    }
                    Err(Disqualified::NotReady) => {
                        return Err(ClusterError::precondition(
                            None,
                            format!("Pod \"{}\" is not ready", pod.name),
                        ));
                    }
                }
            }
        }
        Ok(out)
    }

    fn incomplete(&self, counts: &BTreeMap<&str, usize>) -> Result<(), ClusterError> {
        let mut missing = BTreeMap::new();
        let mut parts = Vec::new();
        for (job, &want) in &self.expected {
            let have = counts.get(job.as_str()).copied().unwrap_or(0);
            if have < want {
                missing.insert(job.clone(), want - have);
                parts.push(format!("job {} has {have} of {want} expected pods", repr_str(job)));
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(ClusterError::Unavailable {
                detail: format!("the cluster is not complete yet: {}", parts.join(", ")),
                missing,
            })
        }
    }

    /// Resolves a cluster from a snapshot (see the module docs for the rules).
    pub fn resolve(&self, snapshot: &PodSnapshot) -> Result<ClusterSpec, ClusterError> {
        let mut jobs = Vec::with_capacity(self.job_to_label_mapping.len());
        let mut counts = BTreeMap::new();
        for (job, selectors) in &self.job_to_label_mapping {
            let members = self.job_members(job, selectors, |s| {
                snapshot.get(s).map(|l| l.items.iter().collect())
            })?;
            counts.insert(job.as_str(), members.len());
            jobs.push((job.clone(), Tasks::Dense(members.into_iter().map(|m| m.2).collect())));
        }
        self.incomplete(&counts)?;
        ClusterSpec::from_jobs(jobs)
    }
}

/// A Kubernetes resolver over a configuration and (once fetched) a pod snapshot.
#[derive(Debug, Clone)]
pub struct KubernetesResolver {
    config: KubernetesConfig,
    snapshot: Option<PodSnapshot>,
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
    /// Whether pods have been attached.
    pub fn has_snapshot(&self) -> bool {
        self.snapshot.is_some()
    }
    /// Attaches the pods the API returned.
    pub fn set_snapshot(&mut self, snapshot: PodSnapshot) {
        self.snapshot = Some(snapshot);
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
            Some(s) => self.config.resolve(s),
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

/// Identity of a task slot: which selector of the job matched which pod.
type SlotKey = (usize, Option<String>, String);

/// An incrementally maintained membership, fed by list results and watch events, that keeps
/// task indices stable.
///
/// Every staying pod keeps its index; a pod that stops qualifying (deleted, no longer running,
/// not ready) frees its index, leaving a hole (the job becomes sparse); a new qualifying pod
/// takes the lowest free index, in TensorFlow's order. Starting from nothing, the indices are
/// exactly TensorFlow's. Pods that do not qualify are never an error here: a watch is long
/// lived, and a starting pod is normal.
#[derive(Debug, Clone)]
pub struct Membership {
    config: KubernetesConfig,
    /// Per selector text: (namespace, name) -> pod.
    pods: BTreeMap<String, BTreeMap<(Option<String>, String), Pod>>,
    /// Per job: index -> slot.
    slots: BTreeMap<String, BTreeMap<TaskIndex, SlotKey>>,
    /// Per selector text: the last resource version seen (where to resume a watch).
    resource_versions: BTreeMap<String, String>,
}

impl Membership {
    /// An empty membership for `config`.
    pub fn new(config: KubernetesConfig) -> Result<Self, ClusterError> {
        config.validate()?;
        Ok(Membership {
            config,
            pods: BTreeMap::new(),
            slots: BTreeMap::new(),
            resource_versions: BTreeMap::new(),
        })
    }

    /// The list calls to start (or restart, after `410 Gone`) from.
    pub fn queries(&self) -> Vec<PodQuery> {
        self.config.queries()
    }

    /// The resource version to resume `selector`'s watch from.
    pub fn resource_version(&self, selector: &str) -> Option<&str> {
        self.resource_versions.get(selector).map(String::as_str)
    }

    /// Replaces what is known about `selector` with a fresh list (the initial list, or a
    /// re-list after the watch expired). Pods that are still there keep their indices.
    /// Returns whether the cluster changed.
    pub fn reset(&mut self, selector: &str, list: &PodList) -> bool {
        let pods =
            list.items.iter().map(|p| ((p.namespace.clone(), p.name.clone()), p.clone())).collect();
        self.pods.insert(selector.to_owned(), pods);
        if let Some(rv) = &list.resource_version {
            self.resource_versions.insert(selector.to_owned(), rv.clone());
        }
        self.reassign()
    }

    /// Applies one watch event received on `selector`'s watch. Returns whether the cluster
    /// changed. An `ERROR` event (such as `410 Gone`) is returned as an error for the caller
    /// to re-list; nothing is changed.
    pub fn apply(&mut self, selector: &str, event: &WatchEvent) -> Result<bool, ClusterError> {
        if let Some(rv) = &event.resource_version {
            self.resource_versions.insert(selector.to_owned(), rv.clone());
        }
        match event.kind {
            WatchEventType::Bookmark => Ok(false),
            WatchEventType::Error => Err(ClusterError::Unavailable {
                detail: format!(
                    "the watch for selector {selector:?} failed: {}",
                    event.status.as_ref().map_or_else(|| "no status".to_owned(), Value::to_string)
                ),
                missing: BTreeMap::new(),
            }),
            WatchEventType::Added | WatchEventType::Modified | WatchEventType::Deleted => {
                let Some(pod) = &event.pod else {
                    return Err(ClusterError::invalid_input("a pod watch event carries no pod"));
                };
                let key = (pod.namespace.clone(), pod.name.clone());
                let pods = self.pods.entry(selector.to_owned()).or_default();
                if event.kind == WatchEventType::Deleted {
                    pods.remove(&key);
                } else {
                    pods.insert(key, pod.clone());
                }
                Ok(self.reassign())
            }
        }
    }

    fn reassign(&mut self) -> bool {
        let mut changed = false;
        for (job, selectors) in &self.config.job_to_label_mapping {
            // Qualifying pods in TensorFlow order, with their addresses.
            let mut wanted: Vec<SlotKey> = Vec::new();
            for (si, selector) in selectors.iter().enumerate() {
                let Some(pods) = self.pods.get(selector.as_str()) else { continue };
                let mut pods: Vec<&Pod> =
                    pods.values().filter(|p| self.config.in_namespace(p)).collect();
                pods.sort_by(|a, b| a.name.cmp(&b.name));
                for p in pods {
                    if self.config.qualify(p).is_ok() && self.config.address_of(p).is_ok() {
                        wanted.push((si, p.namespace.clone(), p.name.clone()));
                    }
                }
            }
            let slots = self.slots.entry(job.clone()).or_default();
            let wanted_set: BTreeSet<&SlotKey> = wanted.iter().collect();
            let before = slots.len();
            slots.retain(|_, key| wanted_set.contains(key));
            changed |= slots.len() != before;
            let held: BTreeSet<SlotKey> = slots.values().cloned().collect();
            let mut next: TaskIndex = 0;
            for key in wanted {
                if held.contains(&key) {
                    continue;
                }
                while slots.contains_key(&next) {
                    next += 1;
                }
                slots.insert(next, key);
                changed = true;
            }
        }
        changed
    }

    fn pod(&self, job: &str, key: &SlotKey) -> Option<&Pod> {
        let selectors = &self.config.job_to_label_mapping.iter().find(|(j, _)| j == job)?.1;
        let selector = selectors.get(key.0)?;
        self.pods.get(selector.as_str())?.get(&(key.1.clone(), key.2.clone()))
    }

    /// The current cluster (sparse where pods left). `Unavailable` while a job has fewer
    /// members than `expected`.
    pub fn cluster_spec(&self) -> Result<ClusterSpec, ClusterError> {
        let mut jobs = Vec::new();
        let mut counts = BTreeMap::new();
        for (job, _) in &self.config.job_to_label_mapping {
            let mut tasks = Vec::new();
            if let Some(slots) = self.slots.get(job) {
                for (&i, key) in slots {
                    if let Some(pod) = self.pod(job, key) {
                        tasks.push((i, self.config.address_of(pod)?));
                    }
                }
            }
            counts.insert(job.as_str(), tasks.len());
            jobs.push((job.clone(), Tasks::Sparse(tasks)));
        }
        self.config.incomplete(&counts)?;
        ClusterSpec::from_jobs(jobs)
    }
}

/// The `kubernetes` resolver of the resolve contract, as JSON gives it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSpec {
    /// Job -> list of label selectors (TensorFlow's default when absent or empty).
    #[serde(default)]
    pub job_to_label_mapping: Option<serde_json::Map<String, Value>>,
    /// The port (default 8470).
    #[serde(default)]
    pub tf_server_port: Option<i64>,
    /// The RPC layer (default `grpc`; `null` for none).
    #[serde(default = "default_grpc")]
    pub rpc_layer: Option<String>,
    /// `pod_ip` (default) or `host_ip`.
    #[serde(default)]
    pub address: AddressSource,
    /// Namespace scope.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Require the `Ready` condition.
    #[serde(default)]
    pub require_ready: bool,
    /// Expected replicas per job.
    #[serde(default)]
    pub expected: Option<BTreeMap<String, usize>>,
    /// Inline pods (`{selector: <v1 PodList>}`): resolve offline.
    #[serde(default)]
    pub pods: Option<Value>,
}

fn default_grpc() -> Option<String> {
    Some("grpc".to_owned())
}

impl KubernetesSpec {
    /// Validates the JSON form (selectors parsed before any API call) into a configuration
    /// and, when given, the inline snapshot.
    pub fn build(self) -> Result<(KubernetesConfig, Option<PodSnapshot>), ClusterError> {
        let mut config = KubernetesConfig::default();
        if let Some(mapping) = self.job_to_label_mapping.filter(|m| !m.is_empty()) {
            let mut out = Vec::with_capacity(mapping.len());
            for (job, selectors) in mapping {
                let Value::Array(items) = selectors else {
                    return Err(ClusterError::invalid_input(format!(
                        "job_to_label_mapping[{job:?}] must be a list of label selectors"
                    )));
                };
                let mut parsed = Vec::with_capacity(items.len());
                for item in items {
                    let Value::String(text) = item else {
                        return Err(ClusterError::invalid_input(format!(
                            "job_to_label_mapping[{job:?}] must hold strings, not {item}"
                        )));
                    };
                    parsed.push(LabelSelector::parse(&text)?);
                }
                out.push((job, parsed));
            }
            config.job_to_label_mapping = out;
        }
        if let Some(port) = self.tf_server_port {
            config.tf_server_port =
                u16::try_from(port).ok().filter(|p| *p != 0).ok_or_else(|| {
                    ClusterError::invalid_input(format!(
                        "tf_server_port must be in 1..=65535, not {port}"
                    ))
                })?;
        }
        config.rpc_layer = self.rpc_layer;
        config.address = self.address;
        config.namespace = self.namespace;
        config.require_ready = self.require_ready;
        config.expected = self.expected.unwrap_or_default();
        config.validate()?;
        let snapshot = self.pods.as_ref().map(PodSnapshot::from_json).transpose()?;
        Ok((config, snapshot))
    }
}
