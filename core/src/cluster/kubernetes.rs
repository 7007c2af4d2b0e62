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

    /// Checks what the type system cannot: `expected` names mapped jobs, ports are in range, a
    /// namespace is not empty.
    pub fn validate(&self) -> Result<(), ClusterError> {
        if self.tf_server_port == 0 {
            return Err(ClusterError::invalid_input("tf_server_port must be in 1..=65535, not 0"));
        }
        if self.namespace.as_deref() == Some("") {
            // It would list `/api/v1/namespaces//pods` and keep no namespaced pod.
            return Err(ClusterError::invalid_input(
                "namespace must not be empty (omit it to list pods in all namespaces)",
            ));
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

/// Identity of a task slot: which selector of the job matched which pod.
type SlotKey = (usize, Option<String>, String);

/// A held task slot: its identity and the address the pod had when last seen.
type Slot = (SlotKey, String);

/// An incrementally maintained membership, fed by list results and watch events, that keeps
/// task indices stable.
///
/// Every staying pod keeps its index; a pod that stops qualifying (deleted, no longer running,
/// not ready) frees its index, leaving a hole (the job becomes sparse); a new qualifying pod
/// takes the lowest free index, in TensorFlow's order. Starting from nothing, the indices are
/// exactly TensorFlow's, whatever order the lists arrive in: a job's indices are assigned once
/// every selector of the job has a list (from [`Membership::reset`], or events of its watch),
/// and until then [`Membership::cluster_spec`] is `FAILED_PRECONDITION`. Pods that do not
/// qualify are never an error here: a watch is long lived, and a starting pod is normal.
#[derive(Debug, Clone)]
pub struct Membership {
    config: KubernetesConfig,
    /// Per selector text: (namespace, name) -> pod.
    pods: BTreeMap<String, BTreeMap<(Option<String>, String), Pod>>,
    /// Per job: index -> slot.
    slots: BTreeMap<String, BTreeMap<TaskIndex, Slot>>,
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
        // The list replaces everything known, the version to resume from included: a version
        // from before the list would replay events the list already reflects.
        match &list.resource_version {
            Some(rv) => self.resource_versions.insert(selector.to_owned(), rv.clone()),
            None => self.resource_versions.remove(selector),
        };
        self.reassign()
    }

    /// Applies one watch event received on `selector`'s watch. Returns whether the cluster
    /// changed. An `ERROR` event (such as `410 Gone`) is returned as an error for the caller
    /// to re-list; nothing is changed.
    pub fn apply(&mut self, selector: &str, event: &WatchEvent) -> Result<bool, ClusterError> {
        match event.kind {
            WatchEventType::Bookmark => {
                self.record_version(selector, event);
                Ok(false)
            }
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
                self.record_version(selector, event);
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

    fn record_version(&mut self, selector: &str, event: &WatchEvent) {
        if let Some(rv) = &event.resource_version {
            self.resource_versions.insert(selector.to_owned(), rv.clone());
        }
    }

    /// The first selector of the mapping that has no list yet.
    fn unlisted<'a>(&self, selectors: &'a [LabelSelector]) -> Option<&'a LabelSelector> {
        selectors.iter().find(|s| !self.pods.contains_key(s.as_str()))
    }

    fn reassign(&mut self) -> bool {
        let mut changed = false;
        for (job, selectors) in &self.config.job_to_label_mapping {
            // Assigning before every selector of the job is listed would make the indices
            // depend on the order the lists arrive in.
            if self.unlisted(selectors).is_some() {
                continue;
            }
            // Qualifying pods in TensorFlow order, with their addresses.
            let mut wanted: Vec<Slot> = Vec::new();
            for (si, selector) in selectors.iter().enumerate() {
                let Some(pods) = self.pods.get(selector.as_str()) else { continue };
                let mut pods: Vec<&Pod> =
                    pods.values().filter(|p| self.config.in_namespace(p)).collect();
                pods.sort_by(|a, b| a.name.cmp(&b.name));
                for p in pods {
                    if self.config.qualify(p).is_err() {
                        continue;
                    }
                    if let Ok(address) = self.config.address_of(p) {
                        wanted.push(((si, p.namespace.clone(), p.name.clone()), address));
                    }
                }
            }
            let slots = self.slots.entry(job.clone()).or_default();
            let wanted_by_key: BTreeMap<&SlotKey, &String> =
                wanted.iter().map(|(key, address)| (key, address)).collect();
            // Staying pods keep their index (and take their current address); leaving pods
            // free theirs.
            slots.retain(|_, (key, address)| match wanted_by_key.get(key) {
                None => {
                    changed = true;
                    false
                }
                Some(&now) => {
                    if now != address {
                        address.clone_from(now);
                        changed = true;
                    }
                    true
                }
            });
            let held: BTreeSet<SlotKey> = slots.values().map(|(key, _)| key.clone()).collect();
            let mut next: TaskIndex = 0;
            for (key, address) in wanted {
                if held.contains(&key) {
                    continue;
                }
                while slots.contains_key(&next) {
                    next += 1;
                }
                slots.insert(next, (key, address));
                changed = true;
            }
        }
        changed
    }

    /// The current cluster (sparse where pods left). `FAILED_PRECONDITION` while a selector
    /// has no list yet, `Unavailable` while a job has fewer members than `expected`.
    pub fn cluster_spec(&self) -> Result<ClusterSpec, ClusterError> {
        for (_, selectors) in &self.config.job_to_label_mapping {
            if let Some(selector) = self.unlisted(selectors) {
                return Err(ClusterError::precondition(
                    None,
                    format!(
                        "no pod list for label selector {:?} yet: the membership needs its list \
                         (or its watch's events) first",
                        selector.as_str()
                    ),
                ));
            }
        }
        let mut jobs = Vec::new();
        let mut counts = BTreeMap::new();
        for (job, _) in &self.config.job_to_label_mapping {
            let tasks: Vec<(TaskIndex, String)> = self
                .slots
                .get(job)
                .map(|slots| slots.iter().map(|(&i, (_, address))| (i, address.clone())).collect())
                .unwrap_or_default();
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::cluster::request::{HostInputs, ResolveRequest};

    // -----------------------------------------------------------------------------------------
    // v1 API data

    /// A v1 pod in namespace `ml`, labelled `job-name=tensorflow`, Ready.
    fn pod_with(name: &str, phase: &str, pod_ip: &str, host_ip: &str) -> Value {
        json!({
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                         "resourceVersion": "7", "labels": {"job-name": "tensorflow"}},
            "spec": {"containers": [{"name": "tf", "image": "tensorflow/tensorflow"}]},
            "status": {"phase": phase, "podIP": pod_ip, "hostIP": host_ip,
                       "conditions": [{"type": "Initialized", "status": "True"},
                                      {"type": "Ready", "status": "True"}]}
        })
    }

    /// A Running pod with pod IP `ip` on node `192.168.0.1`.
    fn running(name: &str, ip: &str) -> Value {
        pod_with(name, "Running", ip, "192.168.0.1")
    }

    fn with_phase(name: &str, phase: &str) -> Value {
        pod_with(name, phase, "10.0.9.9", "192.168.0.1")
    }

    fn pod_list_json(items: Vec<Value>) -> Value {
        json!({"kind": "PodList", "apiVersion": "v1",
               "metadata": {"resourceVersion": "100"}, "items": items})
    }

    fn pod_list(items: Vec<Value>) -> PodList {
        PodList::from_json(&pod_list_json(items)).expect("a valid PodList")
    }

    fn spec_of(v: Value) -> KubernetesSpec {
        serde_json::from_value(v).expect("a decodable kubernetes spec")
    }

    fn build(v: Value) -> Result<(KubernetesConfig, Option<PodSnapshot>), ClusterError> {
        spec_of(v).build()
    }

    fn config(v: Value) -> KubernetesConfig {
        build(v).expect("a valid kubernetes spec").0
    }

    /// A resolver over a spec with inline `pods`.
    fn resolver(v: Value) -> KubernetesResolver {
        let (config, snapshot) = build(v).expect("a valid kubernetes spec");
        let mut r = KubernetesResolver::new(config).expect("a valid config");
        r.set_snapshot(snapshot.expect("inline pods"));
        r
    }

    fn resolve(v: Value) -> Result<ClusterSpec, ClusterError> {
        resolver(v).cluster_spec()
    }

    fn dict(v: Value) -> Value {
        resolve(v).expect("resolves").as_dict()
    }

    // -----------------------------------------------------------------------------------------
    // TensorFlow's ordering and failure

    #[test]
    fn a_live_resolver_resolves_from_its_membership_with_stable_indices() {
        let mut r = KubernetesResolver::new(KubernetesConfig::default()).expect("resolver");
        assert!(!r.has_snapshot());
        r.go_live().expect("live");
        assert!(r.has_snapshot() && r.membership().is_some());
        assert!(matches!(r.cluster_spec(), Err(ClusterError::FailedPrecondition { .. })));
        let m = r.membership_mut().expect("membership");
        m.reset(
            DEFAULT_SELECTOR,
            &pod_list(vec![running("b", "10.0.0.2"), running("a", "10.0.0.1")]),
        );
        assert_eq!(
            r.cluster_spec().expect("cluster").as_dict(),
            json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470"]})
        );
        // "a" leaves: "b" keeps index 1 (a snapshot would renumber it to 0).
        let m = r.membership_mut().expect("membership");
        m.reset(DEFAULT_SELECTOR, &pod_list(vec![running("b", "10.0.0.2")]));
        assert_eq!(
            r.cluster_spec().expect("cluster").as_dict(),
            json!({"worker": {"1": "10.0.0.2:8470"}})
        );
        assert_eq!(
            r.master(Some("worker"), Some(1), None).expect("master"),
            "grpc://10.0.0.2:8470"
        );
    }

    #[test]
    fn sorts_each_selectors_pods_by_name_in_code_point_order() {
        let pods = pod_list_json(vec![
            running("w-2", "10.0.0.2"),
            running("w-10", "10.0.0.10"),
            running("W-9", "10.0.0.99"),
            running("w-1", "10.0.0.1"),
        ]);
        let cluster = dict(json!({"pods": {"job-name=tensorflow": pods}}));
        // `W` (U+0057) sorts before `w`, and `w-10` before `w-2`.
        assert_eq!(
            cluster,
            json!({"worker": ["10.0.0.99:8470", "10.0.0.1:8470", "10.0.0.10:8470", "10.0.0.2:8470"]})
        );
    }

    #[test]
    fn selectors_concatenate_in_order_without_deduplication() {
        let cluster = dict(json!({
            "job_to_label_mapping": {"worker": ["app=b", "tier=x"], "ps": ["app=ps"],
                                     "chief": ["app=chief"]},
            "pods": {
                "app=b": pod_list_json(vec![running("s-0", "10.0.0.5"), running("b-1", "10.0.0.4")]),
                // `a-1` sorts before both pods of the first selector, yet comes after them.
                "tier=x": pod_list_json(vec![running("s-0", "10.0.0.5"), running("a-1", "10.0.0.3")]),
                "app=ps": pod_list_json(vec![running("ps-0", "10.0.1.1")]),
                "app=chief": pod_list_json(vec![]),
            }
        }));
        assert_eq!(
            cluster,
            json!({
                "worker": ["10.0.0.4:8470", "10.0.0.5:8470", "10.0.0.3:8470", "10.0.0.5:8470"],
                "ps": ["10.0.1.1:8470"],
                "chief": {}
            })
        );
        // Jobs keep the mapping's order; the job with no pods exists with no tasks.
        let r = resolver(json!({
            "job_to_label_mapping": {"z": ["a=1"], "a": ["a=1"]},
            "pods": {"a=1": {"items": []}}
        }));
        let spec = r.cluster_spec().unwrap();
        assert_eq!(spec.jobs().collect::<Vec<_>>(), ["z", "a"]);
        assert_eq!(spec.as_dict(), json!({"z": {}, "a": {}}));
        assert_eq!(spec.num_tasks("z").unwrap(), 0);
    }

    #[test]
    fn the_first_non_running_pod_in_name_order_fails_the_call() {
        let e = resolve(json!({"pods": {"job-name=tensorflow": pod_list_json(vec![
            with_phase("w-3", "Pending"),
            with_phase("w-1", "Failed"),
            running("w-0", "10.0.0.1"),
            with_phase("w-2", "Succeeded"),
        ])}}))
        .unwrap_err();
        assert_eq!(e.detail(), "Pod \"w-1\" is not running; phase: \"Failed\"");
        assert_eq!(e.code(), "FAILED_PRECONDITION");
        assert_eq!(e.tf_exception(), Some(TfException::RuntimeError));

        // A pod without a phase reads as Python's None.
        let e = resolve(json!({"pods": {"job-name=tensorflow": {"items": [
            {"metadata": {"name": "w-0"}, "status": {"podIP": "10.0.0.1"}}
        ]}}}))
        .unwrap_err();
        assert_eq!(e.detail(), "Pod \"w-0\" is not running; phase: \"None\"");

        // Selector order comes before name order.
        let e = resolve(json!({
            "job_to_label_mapping": {"worker": ["app=z", "app=a"]},
            "pods": {"app=z": pod_list_json(vec![with_phase("z-0", "Unknown")]),
                     "app=a": pod_list_json(vec![with_phase("a-0", "Pending")])}
        }))
        .unwrap_err();
        assert_eq!(e.detail(), "Pod \"z-0\" is not running; phase: \"Unknown\"");

        // Phase names are case-sensitive, as in TensorFlow.
        let e = resolve(json!({"pods": {"job-name=tensorflow": pod_list_json(vec![
            with_phase("w-0", "running"),
        ])}}))
        .unwrap_err();
        assert_eq!(e.detail(), "Pod \"w-0\" is not running; phase: \"running\"");
    }

    // -----------------------------------------------------------------------------------------
    // Addresses

    #[test]
    fn address_is_the_pod_ip_by_default_and_the_host_ip_on_request() {
        // Two pods on one node.
        let pods = pod_list_json(vec![
            pod_with("w-0", "Running", "10.0.0.1", "192.168.0.7"),
            pod_with("w-1", "Running", "10.0.0.2", "192.168.0.7"),
        ]);
        let by_pod = dict(json!({"pods": {"job-name=tensorflow": pods.clone()}}));
        assert_eq!(by_pod, json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470"]}));
        let explicit =
            dict(json!({"address": "pod_ip", "pods": {"job-name=tensorflow": pods.clone()}}));
        assert_eq!(explicit, by_pod);
        let by_host = dict(json!({"address": "host_ip", "pods": {"job-name=tensorflow": pods}}));
        assert_eq!(by_host, json!({"worker": ["192.168.0.7:8470", "192.168.0.7:8470"]}));
        assert_eq!(AddressSource::default(), AddressSource::PodIp);
    }

    #[test]
    fn ipv6_addresses_are_bracketed() {
        let pods = pod_list_json(vec![pod_with("w-0", "Running", "fd00::5", "fd00:1::7")]);
        assert_eq!(
            dict(json!({"pods": {"job-name=tensorflow": pods.clone()}})),
            json!({"worker": ["[fd00::5]:8470"]})
        );
        assert_eq!(
            dict(json!({"address": "host_ip", "tf_server_port": 2222,
                        "pods": {"job-name=tensorflow": pods}})),
            json!({"worker": ["[fd00:1::7]:2222"]})
        );
    }

    #[test]
    fn custom_port() {
        let pods = pod_list_json(vec![running("w-0", "10.0.0.1")]);
        for (port, want) in [(1, "10.0.0.1:1"), (2222, "10.0.0.1:2222"), (65535, "10.0.0.1:65535")]
        {
            let cluster = dict(json!({"tf_server_port": port,
                                      "pods": {"job-name=tensorflow": pods.clone()}}));
            assert_eq!(cluster, json!({"worker": [want]}), "port {port}");
        }
    }

    #[test]
    fn a_pod_without_the_address_field_in_use_is_invalid() {
        let no_pod_ip = json!({"metadata": {"name": "w-1"},
                               "status": {"phase": "Running", "hostIP": "192.168.0.1"}});
        let pods = pod_list_json(vec![running("w-0", "10.0.0.1"), no_pod_ip]);
        let e = resolve(json!({"pods": {"job-name=tensorflow": pods.clone()}})).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert_eq!(e.detail(), "Pod \"w-1\" has no status.podIP, which address \"pod_ip\" needs");
        // The host IP is there, so TensorFlow's mode resolves.
        assert_eq!(
            dict(json!({"address": "host_ip", "pods": {"job-name=tensorflow": pods}})),
            json!({"worker": ["192.168.0.1:8470", "192.168.0.1:8470"]})
        );

        let no_host_ip = json!({"metadata": {"name": "w-0"},
                                "status": {"phase": "Running", "podIP": "10.0.0.1", "hostIP": ""}});
        let e = resolve(json!({"address": "host_ip",
                               "pods": {"job-name=tensorflow": {"items": [no_host_ip]}}}))
        .unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert_eq!(e.detail(), "Pod \"w-0\" has no status.hostIP, which address \"host_ip\" needs");
    }

    // -----------------------------------------------------------------------------------------
    // Shardwise's options

    #[test]
    fn namespace_scopes_pods_and_queries() {
        let mut other = running("w-1", "10.0.0.2");
        other["metadata"]["namespace"] = json!("other");
        let mut unscoped = running("w-2", "10.0.0.3");
        unscoped["metadata"].as_object_mut().unwrap().remove("namespace");
        let pods = pod_list_json(vec![running("w-0", "10.0.0.1"), other, unscoped]);

        let scoped =
            resolver(json!({"namespace": "ml", "pods": {"job-name=tensorflow": pods.clone()}}));
        assert_eq!(
            scoped.cluster_spec().unwrap().as_dict(),
            json!({"worker": ["10.0.0.1:8470", "10.0.0.3:8470"]})
        );
        assert_eq!(
            scoped.config().queries(),
            vec![PodQuery {
                namespace: Some("ml".to_owned()),
                selector: LabelSelector::parse("job-name=tensorflow").unwrap()
            }]
        );
        // Without a namespace every pod counts, as in TensorFlow.
        let everywhere = resolver(json!({"pods": {"job-name=tensorflow": pods}}));
        assert_eq!(
            everywhere.cluster_spec().unwrap().as_dict(),
            json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470", "10.0.0.3:8470"]})
        );
        assert_eq!(everywhere.config().queries()[0].namespace, None);
    }

    #[test]
    fn require_ready_refuses_unready_and_terminating_pods() {
        let mut unready = running("w-1", "10.0.0.2");
        unready["status"]["conditions"][1]["status"] = json!("False");
        let mut terminating = running("w-2", "10.0.0.3");
        terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let mut no_condition = running("w-3", "10.0.0.4");
        no_condition["status"].as_object_mut().unwrap().remove("conditions");
        let ready = running("w-0", "10.0.0.1");

        for (bad, name) in [(unready, "w-1"), (terminating, "w-2"), (no_condition, "w-3")] {
            let pods = pod_list_json(vec![ready.clone(), bad]);
            let e = resolve(
                json!({"require_ready": true, "pods": {"job-name=tensorflow": pods.clone()}}),
            )
            .unwrap_err();
            assert_eq!(e.code(), "FAILED_PRECONDITION", "{name}");
            assert_eq!(e.detail(), format!("Pod \"{name}\" is not ready"));
            assert_eq!(e.tf_exception(), None);
            // Without require_ready a Running pod is enough.
            assert_eq!(
                resolve(json!({"pods": {"job-name=tensorflow": pods}}))
                    .unwrap()
                    .num_tasks("worker")
                    .unwrap(),
                2
            );
        }
        // Not running is reported as such, before readiness.
        let pods = pod_list_json(vec![with_phase("w-0", "Pending")]);
        let e = resolve(json!({"require_ready": true, "pods": {"job-name=tensorflow": pods}}))
            .unwrap_err();
        assert_eq!(e.detail(), "Pod \"w-0\" is not running; phase: \"Pending\"");
    }

    #[test]
    fn expected_skips_pods_that_do_not_qualify_and_reports_the_shortfall() {
        let mut unready = running("w-1", "10.0.0.2");
        unready["status"]["conditions"][1]["status"] = json!("Unknown");
        let pods = pod_list_json(vec![
            running("w-2", "10.0.0.3"),
            with_phase("w-0", "Pending"),
            unready,
            running("w-3", "10.0.0.4"),
        ]);
        let base = json!({
            "job_to_label_mapping": {"worker": ["job-name=tensorflow"], "ps": ["app=ps"]},
            "require_ready": true,
            "pods": {"job-name=tensorflow": pods, "app=ps": pod_list_json(vec![])}
        });
        let with_expected = |expected: Value| {
            let mut v = base.clone();
            v["expected"] = expected;
            resolve(v)
        };
        // Exactly enough: the two qualifying pods, in name order.
        let spec = with_expected(json!({"worker": 2})).unwrap();
        assert_eq!(spec.as_dict(), json!({"worker": ["10.0.0.3:8470", "10.0.0.4:8470"], "ps": {}}));
        // More than expected: all are kept.
        assert_eq!(with_expected(json!({"worker": 1})).unwrap(), spec);
        assert_eq!(with_expected(json!({"worker": 0, "ps": 0})).unwrap(), spec);
        // Fewer: Unavailable, with the shortfall of each short job.
        let e = with_expected(json!({"worker": 4, "ps": 2})).unwrap_err();
        assert_eq!(e.code(), "UNAVAILABLE");
        let ClusterError::Unavailable { missing, detail } = e else { unreachable!() };
        assert_eq!(missing, BTreeMap::from([("ps".to_owned(), 2), ("worker".to_owned(), 2)]));
        assert_eq!(
            detail,
            "the cluster is not complete yet: job 'ps' has 0 of 2 expected pods, job 'worker' \
             has 2 of 4 expected pods"
        );
        let e = with_expected(json!({"worker": 2, "ps": 1})).unwrap_err();
        let ClusterError::Unavailable { missing, .. } = e else { unreachable!() };
        assert_eq!(missing, BTreeMap::from([("ps".to_owned(), 1)]));
        // A job without an expected count still fails on a pod that does not qualify.
        let e = with_expected(json!({"ps": 0})).unwrap_err();
        assert_eq!(e.detail(), "Pod \"w-0\" is not running; phase: \"Pending\"");
    }

    // -----------------------------------------------------------------------------------------
    // Building

    #[test]
    fn the_default_mapping_applies_when_absent_or_empty() {
        let default = KubernetesConfig::default();
        assert_eq!(
            default.job_to_label_mapping,
            vec![("worker".to_owned(), vec![LabelSelector::parse("job-name=tensorflow").unwrap()])]
        );
        assert_eq!(default.tf_server_port, 8470);
        assert_eq!(default.rpc_layer.as_deref(), Some("grpc"));
        assert_eq!(config(json!({})), default);
        assert_eq!(config(json!({"job_to_label_mapping": {}})), default);
        assert_eq!(config(json!({"job_to_label_mapping": null})), default);
        assert_eq!(config(json!({"rpc_layer": null})).rpc_layer, None);
        let c = config(json!({"expected": {"worker": 2}}));
        assert_eq!(c.expected, BTreeMap::from([("worker".to_owned(), 2)]));
        // A job mapped to no selectors exists with no tasks.
        let r = resolver(json!({"job_to_label_mapping": {"worker": []}, "pods": {}}));
        assert_eq!(r.cluster_spec().unwrap().as_dict(), json!({"worker": {}}));
        assert!(r.config().queries().is_empty());
    }

    #[test]
    fn invalid_specs_are_refused_at_build_time() {
        let invalid = |v: Value| build(v).expect_err("refused");
        for port in [json!(0), json!(70000), json!(-1), json!(65536)] {
            let e = invalid(json!({"tf_server_port": port}));
            assert_eq!(e.code(), "INVALID_ARGUMENT");
            assert_eq!(e.detail(), format!("tf_server_port must be in 1..=65535, not {port}"));
        }
        let e = invalid(json!({"namespace": ""}));
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert_eq!(
            e.detail(),
            "namespace must not be empty (omit it to list pods in all namespaces)"
        );
        let e = invalid(json!({"expected": {"ps": 1}}));
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert_eq!(
            e.detail(),
            "expected names job \"ps\", which job_to_label_mapping does not map"
        );
        let e = invalid(json!({"job_to_label_mapping": {"worker": ["app in (a"]}}));
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        assert!(e.detail().contains("app in (a"), "{}", e.detail());
        let e = invalid(json!({"job_to_label_mapping": {"worker": "app=a"}}));
        assert_eq!(
            e.detail(),
            "job_to_label_mapping[\"worker\"] must be a list of label selectors"
        );
        let e = invalid(json!({"job_to_label_mapping": {"worker": [1]}}));
        assert_eq!(e.detail(), "job_to_label_mapping[\"worker\"] must hold strings, not 1");
        let e = invalid(json!({"pods": []}));
        assert_eq!(e.code(), "INVALID_ARGUMENT");
        let e = invalid(json!({"pods": {"job-name=tensorflow": {"items": [{"metadata": {}}]}}}));
        assert_eq!(
            e.detail(),
            "pods for selector \"job-name=tensorflow\": pod list item 0: metadata.name is missing"
        );
        // Unknown fields (TensorFlow's `executable_location`) and unknown addresses.
        assert!(
            serde_json::from_value::<KubernetesSpec>(json!({"executable_location": null})).is_err()
        );
        assert!(serde_json::from_value::<KubernetesSpec>(json!({"address": "node_ip"})).is_err());

        // The same checks guard configurations built in code.
        let zero_port = KubernetesConfig { tf_server_port: 0, ..KubernetesConfig::default() };
        let empty_namespace =
            KubernetesConfig { namespace: Some(String::new()), ..KubernetesConfig::default() };
        let unmapped = KubernetesConfig {
            expected: BTreeMap::from([("chief".to_owned(), 1)]),
            ..KubernetesConfig::default()
        };
        for c in [zero_port, empty_namespace, unmapped] {
            assert_eq!(KubernetesResolver::new(c.clone()).unwrap_err().code(), "INVALID_ARGUMENT");
            assert_eq!(Membership::new(c).unwrap_err().code(), "INVALID_ARGUMENT");
        }
    }

    #[test]
    fn an_invalid_selector_fails_the_request_before_any_api_call() {
        let request = ResolveRequest::from_json(
            r#"{"resolver": {"kubernetes": {"job_to_label_mapping": {"worker": ["a=1", "=x"]}}}}"#,
        )
        .unwrap();
        let e = request.build(&HostInputs::default()).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn a_selector_without_a_list_is_a_failed_precondition() {
        let e = resolve(json!({
            "job_to_label_mapping": {"worker": ["a=1", "b=2"]},
            "pods": {"a=1": pod_list_json(vec![running("w-0", "10.0.0.1")])}
        }))
        .unwrap_err();
        assert_eq!(e.code(), "FAILED_PRECONDITION");
        assert_eq!(e.tf_exception(), None);
        assert!(e.detail().starts_with("no pod list for label selector \"b=2\""), "{}", e.detail());
        // Lists are keyed by the selector as written.
        let e = resolve(json!({"pods": {"job-name == tensorflow": pod_list_json(vec![])}}))
            .unwrap_err();
        assert_eq!(e.code(), "FAILED_PRECONDITION");
        // No snapshot at all.
        let (config, _) = build(json!({})).unwrap();
        let r = KubernetesResolver::new(config).unwrap();
        assert!(!r.has_snapshot());
        assert_eq!(r.cluster_spec().unwrap_err().code(), "FAILED_PRECONDITION");
    }

    #[test]
    fn queries_are_the_distinct_selectors_in_mapping_order() {
        let c = config(json!({
            "namespace": "ml",
            "job_to_label_mapping": {"ps": ["app=ps"], "worker": ["app=w", "app=ps", "app=w"],
                                     "chief": ["app=c"], "evaluator": []}
        }));
        let queries = c.queries();
        let selectors: Vec<&str> = queries.iter().map(|q| q.selector.as_str()).collect();
        assert_eq!(selectors, ["app=ps", "app=w", "app=c"]);
        assert!(queries.iter().all(|q| q.namespace.as_deref() == Some("ml")));
        // Distinct by text: `a=1` and `a==1` are two calls.
        let c = config(json!({"job_to_label_mapping": {"w": ["a=1", "a==1"]}}));
        assert_eq!(c.queries().len(), 2);
    }

    // -----------------------------------------------------------------------------------------
    // Fetching

    /// Canned lists per selector; records every call as `namespace/selector`.
    #[derive(Debug, Default)]
    struct FakeLister {
        lists: BTreeMap<String, PodList>,
        calls: Mutex<Vec<String>>,
    }

    impl FakeLister {
        fn with(lists: Vec<(&str, Vec<Value>)>) -> Self {
            FakeLister {
                lists: lists
                    .into_iter()
                    .map(|(s, items)| (s.to_owned(), pod_list(items)))
                    .collect(),
                calls: Mutex::default(),
            }
        }
        fn calls(&self) -> Vec<String> {
            let mut calls = self.calls.lock().unwrap().clone();
            calls.sort();
            calls
        }
    }

    #[async_trait]
    impl PodLister for FakeLister {
        async fn list_pods(&self, query: &PodQuery) -> Result<PodList, ClusterError> {
            let ns = query.namespace.as_deref().unwrap_or("*");
            self.calls.lock().unwrap().push(format!("{ns}/{}", query.selector.as_str()));
            self.lists.get(query.selector.as_str()).cloned().ok_or_else(|| {
                ClusterError::precondition(None, format!("403 for {}", query.selector.as_str()))
            })
        }
    }

    #[test]
    fn fetch_snapshot_asks_every_query_once() {
        let lister = FakeLister::with(vec![
            ("app=ps", vec![running("ps-0", "10.0.1.1")]),
            ("app=w", vec![running("w-1", "10.0.0.2"), running("w-0", "10.0.0.1")]),
            ("app=unused", vec![]),
        ]);
        let c = config(json!({
            "namespace": "ml",
            "job_to_label_mapping": {"ps": ["app=ps"], "worker": ["app=w", "app=ps"]}
        }));
        let snapshot = futures::executor::block_on(fetch_snapshot(&lister, &c.queries())).unwrap();
        assert_eq!(lister.calls(), ["ml/app=ps", "ml/app=w"]);
        assert_eq!(snapshot.get("app=w"), lister.lists.get("app=w"));
        assert_eq!(snapshot.get("app=unused"), None);
        assert_eq!(
            c.resolve(&snapshot).unwrap().as_dict(),
            json!({"ps": ["10.0.1.1:8470"],
                   "worker": ["10.0.0.1:8470", "10.0.0.2:8470", "10.0.1.1:8470"]})
        );
    }

    #[test]
    fn a_lister_error_fails_the_fetch() {
        let lister = FakeLister::with(vec![("app=w", vec![running("w-0", "10.0.0.1")])]);
        let c =
            config(json!({"job_to_label_mapping": {"worker": ["app=w"], "ps": ["app=denied"]}}));
        let e = futures::executor::block_on(fetch_snapshot(&lister, &c.queries())).unwrap_err();
        assert_eq!(e, ClusterError::precondition(None, "403 for app=denied"));
        assert!(lister.calls().contains(&"*/app=denied".to_owned()));
        // No query: an empty snapshot, no call.
        let snapshot = futures::executor::block_on(fetch_snapshot(&lister, &[])).unwrap();
        assert_eq!(snapshot, PodSnapshot::new());
    }

    #[test]
    fn attach_pods_fills_every_kubernetes_resolver_of_a_union() {
        let lister = FakeLister::with(vec![
            ("app=w", vec![running("w-1", "10.0.0.2"), running("w-0", "10.0.0.1")]),
            ("app=ps", vec![running("ps-0", "10.0.1.1")]),
        ]);
        let request = ResolveRequest::from_json(
            r#"{"resolver": {"union": [
                {"kubernetes": {"job_to_label_mapping": {"worker": ["app=w"]}}},
                {"kubernetes": {"job_to_label_mapping": {"ps": ["app=ps"]}, "namespace": "ml"}},
                {"kubernetes": {"job_to_label_mapping": {"chief": ["app=c"]},
                                "pods": {"app=c": {"items": [{"metadata": {"name": "c-0"},
                                    "status": {"phase": "Running", "podIP": "10.0.2.1"}}]}}}}
            ]}, "task_type": "worker", "task_id": 1}"#,
        )
        .unwrap();
        let mut r = request.build(&HostInputs::default()).unwrap();
        assert_eq!(r.kubernetes_without_pods().len(), 2);
        assert_eq!(r.cluster_spec().unwrap_err().code(), "FAILED_PRECONDITION");
        futures::executor::block_on(r.attach_pods(&lister)).unwrap();
        // The member with inline pods was not fetched.
        assert_eq!(lister.calls(), ["*/app=w", "ml/app=ps"]);
        assert!(r.kubernetes_without_pods().is_empty());
        let reply = request.resolve_with(&r).unwrap();
        assert_eq!(
            reply.cluster,
            json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470"], "ps": ["10.0.1.1:8470"],
                   "chief": ["10.0.2.1:8470"]})
        );
        assert_eq!((reply.task_type.as_deref(), reply.task_id), (Some("worker"), Some(1)));
        assert_eq!(
            r.master(Some("worker"), Some(1), Some("grpc")).unwrap(),
            "grpc://10.0.0.2:8470"
        );

        // A failing member fails the attach.
        let mut r = request.build(&HostInputs::default()).unwrap();
        let empty = FakeLister::default();
        assert!(futures::executor::block_on(r.attach_pods(&empty)).is_err());
    }

    // -----------------------------------------------------------------------------------------
    // The resolver surface

    #[test]
    fn master_is_empty_without_a_full_task_and_needs_no_snapshot() {
        let mut r = KubernetesResolver::new(KubernetesConfig::default()).unwrap();
        assert_eq!(r.master(None, None, None).unwrap(), "");
        r.set_task_type(Some("worker".to_owned()));
        assert_eq!(r.master(None, None, None).unwrap(), "");
        assert_eq!(r.master(None, None, Some("grpc")).unwrap(), "");
        r.set_task_type(None);
        r.set_task_id(Some(0));
        assert_eq!(r.master(None, None, None).unwrap(), "");
        // With a full task the pods are needed.
        assert_eq!(r.master(Some("worker"), None, None).unwrap_err().code(), "FAILED_PRECONDITION");
        assert_eq!(r.environment().as_deref(), Some(""));
    }

    #[test]
    fn master_is_the_tasks_address_with_the_rpc_layer() {
        let mut r = resolver(json!({"pods": {"job-name=tensorflow": pod_list_json(vec![
            running("w-0", "10.0.0.1"), running("w-1", "10.0.0.2"),
        ])}}));
        assert_eq!(r.rpc_layer().unwrap().as_deref(), Some("grpc"));
        assert_eq!(
            r.master(Some("worker"), Some(1), Some("grpc")).unwrap(),
            "grpc://10.0.0.2:8470"
        );
        r.set_task_type(Some("worker".to_owned()));
        r.set_task_id(Some(0));
        assert_eq!(r.task_type().unwrap().as_deref(), Some("worker"));
        assert_eq!(r.task_id().unwrap(), Some(0));
        assert_eq!(r.master(None, None, None).unwrap(), "grpc://10.0.0.1:8470");
        // Arguments override the resolver's task and RPC layer.
        assert_eq!(r.master(None, Some(1), None).unwrap(), "grpc://10.0.0.2:8470");
        assert_eq!(r.master(None, None, Some("http")).unwrap(), "http://10.0.0.1:8470");
        // TensorFlow's `rpc_layer or self.rpc_layer`: an empty argument does not override.
        assert_eq!(r.master(None, None, Some("")).unwrap(), "grpc://10.0.0.1:8470");
        // A task that is not in the cluster.
        assert_eq!(r.master(None, Some(2), None).unwrap_err().code(), "NOT_FOUND");
        assert_eq!(r.master(Some("ps"), None, None).unwrap_err().code(), "NOT_FOUND");
        // Removing the RPC layer removes the scheme.
        r.set_rpc_layer(None);
        assert_eq!(r.rpc_layer().unwrap(), None);
        assert_eq!(r.master(None, None, None).unwrap(), "10.0.0.1:8470");
        assert_eq!(r.master(None, None, Some("grpc")).unwrap(), "grpc://10.0.0.1:8470");
        // Or a spec without one.
        let r =
            resolver(json!({"rpc_layer": null, "pods": {"job-name=tensorflow": pod_list_json(vec![
                running("w-0", "10.0.0.1"),
            ])}}));
        assert_eq!(r.master(Some("worker"), Some(0), None).unwrap(), "10.0.0.1:8470");
    }

    // -----------------------------------------------------------------------------------------
    // Membership

    const SEL: &str = "job-name=tensorflow";

    fn event(kind: &str, object: Value) -> WatchEvent {
        WatchEvent::from_json(&json!({"type": kind, "object": object})).expect("a valid event")
    }

    fn gone() -> WatchEvent {
        event(
            "ERROR",
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "too old resource version: 100 (250)", "reason": "Expired",
                   "code": 410}),
        )
    }

    fn membership(v: Value) -> Membership {
        Membership::new(config(v)).expect("a valid config")
    }

    fn members(m: &Membership) -> Value {
        m.cluster_spec().expect("a complete cluster").as_dict()
    }

    /// `w-0` .. `w-{n-1}` at `10.0.0.1` .. `10.0.0.n`, Running.
    fn workers(n: usize) -> Vec<Value> {
        (0..n).map(|i| running(&format!("w-{i}"), &format!("10.0.0.{}", i + 1))).collect()
    }

    #[test]
    fn membership_starts_with_tensorflows_indices() {
        let items = vec![
            running("w-2", "10.0.0.3"),
            running("w-10", "10.0.0.11"),
            running("w-1", "10.0.0.2"),
        ];
        let mut m = membership(json!({}));
        assert_eq!(m.queries(), KubernetesConfig::default().queries());
        assert!(m.reset(SEL, &pod_list(items.clone())));
        let mut snapshot = PodSnapshot::new();
        snapshot.insert(SEL, pod_list(items));
        let tf = KubernetesConfig::default().resolve(&snapshot).unwrap();
        assert_eq!(m.cluster_spec().unwrap(), tf);
        assert_eq!(
            members(&m),
            json!({"worker": ["10.0.0.2:8470", "10.0.0.11:8470", "10.0.0.3:8470"]})
        );
        assert_eq!(m.resource_version(SEL), Some("100"));
        // The same list again changes nothing.
        assert!(!m.reset(
            SEL,
            &pod_list(vec![
                running("w-1", "10.0.0.2"),
                running("w-2", "10.0.0.3"),
                running("w-10", "10.0.0.11"),
            ])
        ));
    }

    #[test]
    fn membership_matches_tensorflow_with_shared_selectors_whatever_the_list_order() {
        let v =
            json!({"job_to_label_mapping": {"ps": ["role=ps"], "worker": ["role=w", "role=ps"]}});
        let lists = [
            ("role=ps", pod_list(vec![running("ps-1", "10.0.1.2"), running("ps-0", "10.0.1.1")])),
            ("role=w", pod_list(vec![running("w-1", "10.0.0.2"), running("w-0", "10.0.0.1")])),
        ];
        let mut snapshot = PodSnapshot::new();
        for (s, l) in &lists {
            snapshot.insert(*s, l.clone());
        }
        let tf = config(v.clone()).resolve(&snapshot).unwrap();
        assert_eq!(
            tf.as_dict(),
            json!({"ps": ["10.0.1.1:8470", "10.0.1.2:8470"],
                   "worker": ["10.0.0.1:8470", "10.0.0.2:8470", "10.0.1.1:8470", "10.0.1.2:8470"]})
        );
        // In query order (`role=ps` first, although worker lists it second) and reversed.
        for order in [[0, 1], [1, 0]] {
            let mut m = membership(v.clone());
            let (first, list) = &lists[order[0]];
            assert!(m.reset(first, list) == (*first == "role=ps"), "{first}");
            let e = m.cluster_spec().unwrap_err();
            assert_eq!(e.code(), "FAILED_PRECONDITION");
            let (second, list) = &lists[order[1]];
            assert!(e.detail().contains(&format!("{second:?}")), "{}", e.detail());
            assert!(m.reset(second, list));
            assert_eq!(m.cluster_spec().unwrap().as_dict(), tf.as_dict(), "{order:?}");
        }
    }

    #[test]
    fn membership_added_pods_take_the_next_index() {
        let mut m = membership(json!({}));
        assert!(m.reset(SEL, &pod_list(workers(2))));
        // A pod that sorts first still goes to the end: nobody moves.
        assert_eq!(m.apply(SEL, &event("ADDED", running("a-0", "10.0.0.9"))), Ok(true));
        assert_eq!(
            members(&m),
            json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470", "10.0.0.9:8470"]})
        );
        // A pod that does not qualify yet changes nothing.
        assert_eq!(m.apply(SEL, &event("ADDED", with_phase("w-5", "Pending"))), Ok(false));
        assert_eq!(m.cluster_spec().unwrap().num_tasks("worker").unwrap(), 3);
        // It joins once running.
        assert_eq!(m.apply(SEL, &event("MODIFIED", running("w-5", "10.0.0.6"))), Ok(true));
        assert_eq!(m.cluster_spec().unwrap().task_address("worker", 3).unwrap(), "10.0.0.6:8470");
        // A repeated ADDED is not a new member.
        assert_eq!(m.apply(SEL, &event("ADDED", running("w-5", "10.0.0.6"))), Ok(false));
        assert_eq!(m.resource_version(SEL), Some("7"));
    }

    #[test]
    fn membership_deleted_pods_leave_holes_that_new_pods_fill_lowest_first() {
        let mut m = membership(json!({}));
        assert!(m.reset(SEL, &pod_list(workers(4))));
        assert_eq!(m.apply(SEL, &event("DELETED", running("w-1", "10.0.0.2"))), Ok(true));
        assert_eq!(
            members(&m),
            json!({"worker": {"0": "10.0.0.1:8470", "2": "10.0.0.3:8470", "3": "10.0.0.4:8470"}})
        );
        assert_eq!(m.apply(SEL, &event("DELETED", running("w-2", "10.0.0.3"))), Ok(true));
        assert_eq!(members(&m), json!({"worker": {"0": "10.0.0.1:8470", "3": "10.0.0.4:8470"}}));
        // Deleting a pod that is not a member changes nothing.
        assert_eq!(m.apply(SEL, &event("DELETED", running("w-7", "10.0.0.8"))), Ok(false));
        // Two new pods: the lowest hole first, in the order they arrive.
        assert_eq!(m.apply(SEL, &event("ADDED", running("w-9", "10.0.0.10"))), Ok(true));
        assert_eq!(
            members(&m),
            json!({"worker": {"0": "10.0.0.1:8470", "1": "10.0.0.10:8470", "3": "10.0.0.4:8470"}})
        );
        assert_eq!(m.apply(SEL, &event("ADDED", running("w-8", "10.0.0.9"))), Ok(true));
        assert_eq!(
            members(&m),
            json!({"worker": ["10.0.0.1:8470", "10.0.0.10:8470", "10.0.0.9:8470", "10.0.0.4:8470"]})
        );
        // The last member leaving leaves an empty job.
        for name in ["w-0", "w-9", "w-8", "w-3"] {
            assert_eq!(m.apply(SEL, &event("DELETED", running(name, "1.1.1.1"))), Ok(true));
        }
        assert_eq!(members(&m), json!({"worker": {}}));
    }

    #[test]
    fn membership_modified_pods_leave_and_rejoin() {
        let mut m = membership(json!({}));
        assert!(m.reset(SEL, &pod_list(workers(3))));
        assert_eq!(m.apply(SEL, &event("MODIFIED", with_phase("w-1", "Failed"))), Ok(true));
        assert_eq!(members(&m), json!({"worker": {"0": "10.0.0.1:8470", "2": "10.0.0.3:8470"}}));
        assert_eq!(m.apply(SEL, &event("MODIFIED", running("w-1", "10.0.0.2"))), Ok(true));
        assert_eq!(
            members(&m),
            json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470", "10.0.0.3:8470"]})
        );
        // A change that does not touch membership (labels, resource version).
        let mut relabelled = running("w-0", "10.0.0.1");
        relabelled["metadata"]["labels"]["extra"] = json!("yes");
        relabelled["metadata"]["resourceVersion"] = json!("120");
        assert_eq!(m.apply(SEL, &event("MODIFIED", relabelled)), Ok(false));
        assert_eq!(m.resource_version(SEL), Some("120"));
        assert_eq!(
            members(&m),
            json!({"worker": ["10.0.0.1:8470", "10.0.0.2:8470", "10.0.0.3:8470"]})
        );
    }

    #[test]
    fn membership_readiness_and_namespace() {
        let mut m = membership(json!({"require_ready": true, "namespace": "ml"}));
        assert!(!m.reset(SEL, &pod_list(vec![])));
        assert_eq!(members(&m), json!({"worker": {}}));
        let mut unready = running("w-0", "10.0.0.1");
        unready["status"]["conditions"][1]["status"] = json!("False");
        assert_eq!(m.apply(SEL, &event("ADDED", unready)), Ok(false));
        assert_eq!(m.apply(SEL, &event("MODIFIED", running("w-0", "10.0.0.1"))), Ok(true));
        let mut elsewhere = running("w-1", "10.0.0.2");
        elsewhere["metadata"]["namespace"] = json!("other");
        assert_eq!(m.apply(SEL, &event("ADDED", elsewhere)), Ok(false));
        assert_eq!(members(&m), json!({"worker": ["10.0.0.1:8470"]}));
        let mut terminating = running("w-0", "10.0.0.1");
        terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(m.apply(SEL, &event("MODIFIED", terminating)), Ok(true));
        assert_eq!(members(&m), json!({"worker": {}}));
    }

    #[test]
    fn membership_bookmark_records_the_version_and_changes_nothing() {
        let mut m = membership(json!({}));
        assert!(m.reset(SEL, &pod_list(workers(2))));
        let before = m.cluster_spec().unwrap();
        let bookmark = event(
            "BOOKMARK",
            json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "250"}}),
        );
        assert_eq!(m.apply(SEL, &bookmark), Ok(false));
        assert_eq!(m.resource_version(SEL), Some("250"));
        assert_eq!(m.cluster_spec().unwrap(), before);
        assert_eq!(m.resource_version("other"), None);
    }

    #[test]
    fn membership_error_events_are_errors_and_change_nothing() {
        let mut m = membership(json!({}));
        assert!(m.reset(SEL, &pod_list(workers(2))));
        let before = members(&m);
        let e = m.apply(SEL, &gone()).unwrap_err();
        assert_eq!(e.code(), "UNAVAILABLE");
        assert!(e.detail().contains("410"), "{}", e.detail());
        assert!(e.detail().contains(SEL), "{}", e.detail());
        assert_eq!(members(&m), before);
        assert_eq!(m.resource_version(SEL), Some("100"));
        // Even an ERROR event that carries a version does not move the resume point.
        let mut odd = gone();
        odd.resource_version = Some("999".to_owned());
        assert!(m.apply(SEL, &odd).is_err());
        assert_eq!(m.resource_version(SEL), Some("100"));
        // Nor does a pod event without a pod.
        let broken = WatchEvent {
            kind: WatchEventType::Added,
            pod: None,
            resource_version: Some("998".to_owned()),
            status: None,
        };
        assert_eq!(m.apply(SEL, &broken).unwrap_err().code(), "INVALID_ARGUMENT");
        assert_eq!(m.resource_version(SEL), Some("100"));
        assert_eq!(members(&m), before);
    }

    #[test]
    fn membership_relist_after_gone_keeps_the_indices_of_staying_pods() {
        let mut m = membership(json!({}));
        assert!(m.reset(SEL, &pod_list(workers(4))));
        assert_eq!(m.apply(SEL, &event("DELETED", running("w-1", "10.0.0.2"))), Ok(true));
        assert!(m.apply(SEL, &gone()).unwrap_err().detail().contains("Expired"));
        // While the watch was down: w-2 left, w-7 came. The re-list is in API order.
        let mut relist = pod_list_json(vec![
            running("w-3", "10.0.0.4"),
            running("w-7", "10.0.0.8"),
            running("w-0", "10.0.0.1"),
        ]);
        relist["metadata"]["resourceVersion"] = json!("300");
        assert!(m.reset(SEL, &PodList::from_json(&relist).unwrap()));
        assert_eq!(
            members(&m),
            json!({"worker": {"0": "10.0.0.1:8470", "1": "10.0.0.8:8470", "3": "10.0.0.4:8470"}})
        );
        assert_eq!(m.resource_version(SEL), Some("300"));
        // A re-list without a version forgets the old one rather than resuming from it.
        let unversioned = PodList::from_json(&json!({"items": relist["items"].clone()})).unwrap();
        assert!(!m.reset(SEL, &unversioned));
        assert_eq!(m.resource_version(SEL), None);
    }

    #[test]
    fn membership_reports_a_changed_address() {
        // A StatefulSet pod re-created under the same name while the watch was down.
        let mut m = membership(json!({}));
        assert!(m.reset(SEL, &pod_list(workers(2))));
        assert!(
            m.reset(SEL, &pod_list(vec![running("w-0", "10.0.0.1"), running("w-1", "10.0.5.5")]))
        );
        assert_eq!(members(&m), json!({"worker": ["10.0.0.1:8470", "10.0.5.5:8470"]}));
        // Or moved to another node, in TensorFlow's host_ip mode.
        let mut m = membership(json!({"address": "host_ip"}));
        assert!(
            m.reset(SEL, &pod_list(vec![pod_with("w-0", "Running", "10.0.0.1", "192.168.0.1")]))
        );
        let moved = pod_with("w-0", "Running", "10.0.0.1", "192.168.0.2");
        assert_eq!(m.apply(SEL, &event("MODIFIED", moved)), Ok(true));
        assert_eq!(members(&m), json!({"worker": ["192.168.0.2:8470"]}));
    }

    #[test]
    fn membership_waits_for_expected_members() {
        let mut m = membership(json!({"expected": {"worker": 3}}));
        assert!(
            m.reset(SEL, &pod_list(vec![running("w-0", "10.0.0.1"), with_phase("w-1", "Pending")]))
        );
        let e = m.cluster_spec().unwrap_err();
        let ClusterError::Unavailable { missing, .. } = e else { unreachable!("{e:?}") };
        assert_eq!(missing, BTreeMap::from([("worker".to_owned(), 2)]));
        assert_eq!(m.apply(SEL, &event("ADDED", running("w-2", "10.0.0.3"))), Ok(true));
        let ClusterError::Unavailable { missing, .. } = m.cluster_spec().unwrap_err() else {
            unreachable!()
        };
        assert_eq!(missing, BTreeMap::from([("worker".to_owned(), 1)]));
        assert_eq!(m.apply(SEL, &event("MODIFIED", running("w-1", "10.0.0.2"))), Ok(true));
        assert_eq!(
            members(&m),
            json!({"worker": ["10.0.0.1:8470", "10.0.0.3:8470", "10.0.0.2:8470"]})
        );
        // Losing one makes it incomplete again.
        assert_eq!(m.apply(SEL, &event("DELETED", running("w-0", "10.0.0.1"))), Ok(true));
        assert_eq!(m.cluster_spec().unwrap_err().code(), "UNAVAILABLE");
    }

    #[test]
    fn membership_tracks_pods_matched_by_two_selectors_twice() {
        let mut m = membership(json!({"job_to_label_mapping": {"worker": ["a=1", "b=2"]}}));
        assert!(!m.reset("a=1", &pod_list(vec![running("s-0", "10.0.0.5")])));
        assert!(m.reset("b=2", &pod_list(vec![running("s-0", "10.0.0.5")])));
        assert_eq!(members(&m), json!({"worker": ["10.0.0.5:8470", "10.0.0.5:8470"]}));
        // Leaving one selector frees one slot only.
        assert_eq!(m.apply("a=1", &event("DELETED", running("s-0", "10.0.0.5"))), Ok(true));
        assert_eq!(members(&m), json!({"worker": {"1": "10.0.0.5:8470"}}));
        // Events on a selector no job maps are kept apart.
        assert_eq!(m.apply("c=3", &event("ADDED", running("x-0", "10.0.0.6"))), Ok(false));
        assert_eq!(members(&m), json!({"worker": {"1": "10.0.0.5:8470"}}));
    }

    #[test]
    fn membership_can_start_from_a_watch_alone() {
        // A watch without a prior list sends the existing pods as ADDED events.
        let mut m = membership(json!({}));
        assert_eq!(m.cluster_spec().unwrap_err().code(), "FAILED_PRECONDITION");
        assert_eq!(m.apply(SEL, &event("ADDED", running("w-1", "10.0.0.2"))), Ok(true));
        assert_eq!(m.apply(SEL, &event("ADDED", running("w-0", "10.0.0.1"))), Ok(true));
        assert_eq!(members(&m), json!({"worker": ["10.0.0.2:8470", "10.0.0.1:8470"]}));
    }
}
