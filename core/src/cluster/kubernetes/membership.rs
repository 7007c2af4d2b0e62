//! [`Membership`]: the incremental view fed by watch events, with stable task indices.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::cluster::error::ClusterError;
use crate::cluster::pods::{Pod, PodList, WatchEvent, WatchEventType};
use crate::cluster::selector::LabelSelector;
use crate::cluster::spec::{ClusterSpec, TaskIndex, Tasks};

use super::{KubernetesConfig, PodQuery};

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
