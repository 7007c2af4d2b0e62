//! `UnionClusterResolver` (exported by TensorFlow as `UnionResolver`): several resolvers merged.

use std::collections::{BTreeMap, BTreeSet};

use super::error::{ClusterError, TfException};
use super::resolver::{Accelerators, ClusterResolver, Device, format_master_url};
use super::spec::{ClusterSpec, TaskIndex, Tasks};
use crate::pyrepr::repr_int_set;

/// Several resolvers whose clusters are merged, TensorFlow's rules:
///
/// * a job is merged as a list (tasks concatenated in resolver order) when every member's
///   `as_dict()` shows it as a list, and as a dict otherwise (a list member keeps its indices
///   `0..n`; overlapping indices are an error);
/// * task type, task id, RPC layer, environment and accelerators come from the first member
///   unless overridden on the union.
///
/// Differences from TensorFlow, on purpose: overrides count when they are set, even to `0` or
/// `""` (TensorFlow tests truthiness, so `task_id=0` is ignored); each member's cluster is
/// asked for once per call (TensorFlow asks twice, which doubles API load and fails with a bare
/// `KeyError` when the answers differ).
#[derive(Debug, Clone)]
pub struct UnionResolver<R> {
    members: Vec<R>,
    task_type: Option<String>,
    task_id: Option<TaskIndex>,
    rpc_layer: Option<String>,
}

enum Merged {
    List(Vec<String>),
    Dict(BTreeMap<TaskIndex, String>),
}

impl<R: ClusterResolver> UnionResolver<R> {
    /// A union of `members` (at least one).
    pub fn new(members: Vec<R>) -> Result<Self, ClusterError> {
        if members.is_empty() {
            return Err(ClusterError::invalid(
                TfException::ValueError,
                "At least one ClusterResolver is required.",
            ));
        }
        Ok(UnionResolver { members, task_type: None, task_id: None, rpc_layer: None })
    }

    /// The members, in order.
    pub fn members(&self) -> &[R] {
        &self.members
    }

    /// Mutable access to the members (to attach inputs such as pod snapshots).
    pub fn members_mut(&mut self) -> &mut [R] {
        &mut self.members
    }

    fn first(&self) -> &R {
        // `new` guarantees at least one member.
        &self.members[0]
    }
}

/// Merges clusters with TensorFlow's union rules (see [`UnionResolver`]).
pub fn merge_clusters(specs: &[ClusterSpec]) -> Result<ClusterSpec, ClusterError> {
    // Pass 1: list or dict per job, in first-seen order.
    let mut order: Vec<&str> = Vec::new();
    let mut as_list: BTreeMap<&str, bool> = BTreeMap::new();
    for spec in specs {
        for (job, tasks) in spec.iter() {
            let is_list = ClusterSpec::is_dense(tasks);
            match as_list.get_mut(job) {
                None => {
                    order.push(job);
                    as_list.insert(job, is_list);
                }
                Some(mode) => *mode = *mode && is_list,
            }
        }
    }
    // Pass 2: merge.
    let mut merged: BTreeMap<&str, Merged> = order
        .iter()
        .map(|&job| {
            let m =
                if as_list[job] { Merged::List(Vec::new()) } else { Merged::Dict(BTreeMap::new()) };
            (job, m)
        })
        .collect();
    for spec in specs {
        for (job, tasks) in spec.iter() {
            match merged.get_mut(job) {
                Some(Merged::List(list)) => list.extend(tasks.values().cloned()),
                Some(Merged::Dict(dict)) => {
                    let dup: BTreeSet<TaskIndex> =
                        tasks.keys().filter(|k| dict.contains_key(k)).copied().collect();
                    if !dup.is_empty() {
                        let dup: Vec<TaskIndex> = dup.into_iter().collect();
                        return Err(ClusterError::invalid(
                            TfException::KeyError,
                            format!(
                                "Duplicate keys detected when merging two ClusterSpecs: {}",
                                repr_int_set(&dup)
                            ),
                        ));
                    }
                    dict.extend(tasks.iter().map(|(i, a)| (*i, a.clone())));
                }
                None => {}
            }
        }
    }
    ClusterSpec::from_jobs(order.into_iter().map(|job| {
        let tasks = match merged.remove(job) {
            Some(Merged::List(list)) => Tasks::Dense(list),
            Some(Merged::Dict(dict)) => Tasks::Sparse(dict.into_iter().collect()),
            None => Tasks::Dense(Vec::new()),
        };
        (job.to_owned(), tasks)
    }))
}

impl<R: ClusterResolver> ClusterResolver for UnionResolver<R> {
    fn cluster_spec(&self) -> Result<ClusterSpec, ClusterError> {
        let specs: Vec<ClusterSpec> =
            self.members.iter().map(ClusterResolver::cluster_spec).collect::<Result<_, _>>()?;
        merge_clusters(&specs)
    }

    /// With both `task_type` and `task_id`: the address in the merged cluster, with the
    /// argument's RPC layer or the union's own override. Otherwise the first member's
    /// `master(rpc_layer=...)`, as in TensorFlow.
    fn master(
        &self,
        task_type: Option<&str>,
        task_id: Option<TaskIndex>,
        rpc_layer: Option<&str>,
    ) -> Result<String, ClusterError> {
        match (task_type, task_id) {
            (Some(t), Some(id)) => {
                let spec = self.cluster_spec()?;
                let layer = rpc_layer.filter(|l| !l.is_empty()).or(self.rpc_layer.as_deref());
                Ok(format_master_url(spec.task_address(t, id)?, layer))
            }
            _ => self.first().master(None, None, rpc_layer),
        }
    }

    fn task_type(&self) -> Result<Option<String>, ClusterError> {
        match &self.task_type {
            Some(t) => Ok(Some(t.clone())),
            None => self.first().task_type(),
        }
    }
    fn task_id(&self) -> Result<Option<TaskIndex>, ClusterError> {
        match self.task_id {
            Some(i) => Ok(Some(i)),
            None => self.first().task_id(),
        }
    }
    fn rpc_layer(&self) -> Result<Option<String>, ClusterError> {
        match &self.rpc_layer {
            Some(l) => Ok(Some(l.clone())),
            None => self.first().rpc_layer(),
        }
    }
    fn environment(&self) -> Option<String> {
        self.first().environment()
    }
    fn num_accelerators(
        &self,
        task_type: Option<&str>,
        task_id: Option<TaskIndex>,
        devices: &[Device],
    ) -> Result<Accelerators, ClusterError> {
        self.first().num_accelerators(task_type, task_id, devices)
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
    fn environment_updates(&self) -> Result<BTreeMap<String, String>, ClusterError> {
        let mut out = BTreeMap::new();
        for m in &self.members {
            out.extend(m.environment_updates()?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::simple::SimpleResolver;
    use serde_json::json;

    fn simple(v: serde_json::Value) -> SimpleResolver {
        SimpleResolver::new(ClusterSpec::from_json(&v).unwrap())
    }

    #[test]
    fn empty_job_forces_dict_mode() {
        let u =
            UnionResolver::new(vec![simple(json!({"w": []})), simple(json!({"w": ["a", "b"]}))])
                .unwrap();
        let spec = u.cluster_spec().unwrap();
        assert_eq!(spec.as_dict(), json!({"w": ["a", "b"]}));
    }

    #[test]
    fn list_dict_list_collides_at_zero() {
        let u = UnionResolver::new(vec![
            simple(json!({"w": ["a"]})),
            simple(json!({"w": {"5": "b"}})),
            simple(json!({"w": ["c"]})),
        ])
        .unwrap();
        let e = u.cluster_spec().unwrap_err();
        assert_eq!(e.detail(), "Duplicate keys detected when merging two ClusterSpecs: {0}");
        assert_eq!(e.tf_exception(), Some(TfException::KeyError));
    }

    #[test]
    fn falsy_overrides_count() {
        let mut u = UnionResolver::new(vec![
            simple(json!({"w": ["a", "b"]})).with_task(Some("w".into()), Some(1)),
        ])
        .unwrap();
        u.set_task_id(Some(0));
        assert_eq!(u.task_id().unwrap(), Some(0));
        u.set_task_type(Some(String::new()));
        assert_eq!(u.task_type().unwrap().as_deref(), Some(""));
    }

    #[test]
    fn needs_a_member() {
        let e = UnionResolver::<SimpleResolver>::new(vec![]).unwrap_err();
        assert_eq!(e.detail(), "At least one ClusterResolver is required.");
    }
}
