//! `KubernetesClusterResolver`: jobs from the pods that label selectors match.
//!
//! Pure: the pods come in as values ([`PodSnapshot`], one `PodList` per selector, or
//! [`WatchEvent`](super::pods::WatchEvent)s for [`Membership`]). Fetching them is the
//! [`PodLister`] port's job, which the gateway implements against a real API;
//! [`fetch_snapshot`] is the runtime-agnostic driver.
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
use super::pods::{Pod, PodList};
use super::selector::LabelSelector;
use super::spec::{ClusterSpec, Tasks};
use crate::pyrepr::repr_str;

mod membership;
mod resolver;
mod spec;

pub use membership::Membership;
pub use resolver::KubernetesResolver;
pub use spec::KubernetesSpec;

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

#[cfg(test)]
mod tests;
