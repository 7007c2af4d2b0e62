//! `ClusterSpec`: job name -> task index -> address, with TensorFlow's semantics.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::{ClusterError, TfException};
use crate::pyrepr::{python_int, repr, repr_str};

/// A task index. TensorFlow's `ClusterDef` stores indices as `int32`; construction rejects
/// anything outside that range, lookups accept any `i64`.
pub type TaskIndex = i64;

/// How `as_cluster_def()` orders jobs: sorted by name for a spec built from a dict (TensorFlow
/// sorts to make its protobuf deterministic), as given for a spec built from a `ClusterDef`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DefOrder {
    SortedByName,
    AsJobs,
}

/// One job of a `ClusterDef`: a name and its tasks by index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobDef {
    /// The job name.
    pub name: String,
    /// Task index -> address. In JSON the indices are decimal strings.
    #[serde(with = "index_map")]
    pub tasks: BTreeMap<TaskIndex, String>,
}

/// The tasks of one job as a dict-built `ClusterSpec` takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tasks {
    /// Addresses whose indices are their positions `0..n`.
    Dense(Vec<String>),
    /// `(index, address)` pairs; a later pair with the same index wins.
    Sparse(Vec<(TaskIndex, String)>),
}

/// A cluster: job name -> task index -> address, in TensorFlow's `tf.train.ClusterSpec` sense.
///
/// `jobs()` keeps the order the jobs were given in (a dict's insertion order, or the
/// `ClusterDef`'s order); [`ClusterSpec::cluster_def`] is sorted by job name for a dict-built
/// spec. Equality ignores job order and dense/sparse spelling, as TensorFlow's does.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    jobs: Vec<JobDef>,
    def_order: DefOrder,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec { jobs: Vec::new(), def_order: DefOrder::SortedByName }
    }
}

const INDEX_MIN: TaskIndex = i32::MIN as TaskIndex;
const INDEX_MAX: TaskIndex = i32::MAX as TaskIndex;

fn no_such_job(job: Option<&str>) -> ClusterError {
    let shown = job.map_or_else(|| "None".to_owned(), repr_str);
    ClusterError::not_found(format!("No such job in cluster: {shown}"))
}

fn check_index(index: TaskIndex) -> Result<(), ClusterError> {
    if (INDEX_MIN..=INDEX_MAX).contains(&index) {
        Ok(())
    } else {
        Err(ClusterError::invalid(TfException::ValueError, format!("Value out of range: {index}")))
    }
}

/// Checks indices and merges repeated job names (a later job replaces the earlier one's
/// tasks in the earlier one's position, as a Python dict does), in linear time.
fn dedup_jobs(jobs: impl IntoIterator<Item = JobDef>) -> Result<Vec<JobDef>, ClusterError> {
    let mut out: Vec<JobDef> = Vec::new();
    let mut position: HashMap<String, usize> = HashMap::new();
    for job in jobs {
        for &i in job.tasks.keys() {
            check_index(i)?;
        }
        match position.get(&job.name) {
            Some(&p) => out[p].tasks = job.tasks,
            None => {
                position.insert(job.name.clone(), out.len());
                out.push(job);
            }
        }
    }
    Ok(out)
}

impl ClusterSpec {
    /// An empty cluster (`ClusterSpec({})`).
    pub fn new() -> Self {
        Self::default()
    }

    /// `ClusterSpec(dict)`: jobs in the given order, `ClusterDef` sorted by name.
    pub fn from_jobs<I, S>(jobs: I) -> Result<Self, ClusterError>
    where
        I: IntoIterator<Item = (S, Tasks)>,
        S: Into<String>,
    {
        let jobs = jobs.into_iter().map(|(name, tasks)| {
            let tasks: BTreeMap<TaskIndex, String> = match tasks {
                Tasks::Dense(list) => (0..).zip(list).collect(),
                Tasks::Sparse(pairs) => pairs.into_iter().collect(),
            };
            JobDef { name: name.into(), tasks }
        });
        Ok(ClusterSpec { jobs: dedup_jobs(jobs)?, def_order: DefOrder::SortedByName })
    }

    /// `ClusterSpec(cluster_def)`: the definition's job order is kept everywhere. A job name
    /// that repeats replaces the earlier job's tasks in its original position.
    pub fn from_cluster_def(def: Vec<JobDef>) -> Result<Self, ClusterError> {
        Ok(ClusterSpec { jobs: dedup_jobs(def)?, def_order: DefOrder::AsJobs })
    }

    /// `ClusterSpec(other)`: a copy built from `other.as_cluster_def()`, so its jobs follow
    /// the other spec's `ClusterDef` order.
    pub fn from_spec(other: &ClusterSpec) -> Self {
        ClusterSpec { jobs: other.cluster_def(), def_order: DefOrder::AsJobs }
    }

    /// `ClusterSpec(value)` for a JSON value, with TensorFlow's checks and messages: the value
    /// must be an object; each job a list (dense) or an object whose keys Python's `int()`
    /// accepts (sparse); each address a string.
    pub fn from_json(value: &Value) -> Result<Self, ClusterError> {
        let Value::Object(map) = value else {
            return Err(ClusterError::invalid(
                TfException::TypeError,
                "`cluster` must be a dictionary mapping one or more job names to lists of \
                 network addresses, or a `ClusterDef` protocol buffer",
            ));
        };
        // Pass 1 (TensorFlow's constructor loop): container types and index parsing, in
        // insertion order.
        let mut raw: Vec<(&str, BTreeMap<TaskIndex, &Value>)> = Vec::with_capacity(map.len());
        for (job, tasks) in map {
            let parsed: BTreeMap<TaskIndex, &Value> = match tasks {
                Value::Array(list) => (0..).zip(list.iter()).collect(),
                Value::Object(obj) => {
                    let mut m = BTreeMap::new();
                    for (k, v) in obj {
                        let index = python_int(k)
                            .map_err(|e| {
                                ClusterError::invalid(TfException::ValueError, e.to_string())
                            })?
                            .ok_or_else(|| {
                                ClusterError::invalid(
                                    TfException::ValueError,
                                    format!("Value out of range: {}", k.trim()),
                                )
                            })?;
                        m.insert(index, v);
                    }
                    m
                }
                _ => {
                    return Err(ClusterError::invalid(
                        TfException::TypeError,
                        format!(
                            "The tasks for job {} must be a list or a dictionary from integers \
                             to strings.",
                            repr_str(job)
                        ),
                    ));
                }
            };
            raw.push((job.as_str(), parsed));
        }
        // Pass 2 (TensorFlow's `_make_cluster_def`): jobs sorted by name, tasks by index.
        let mut order: Vec<usize> = (0..raw.len()).collect();
        order.sort_by(|&a, &b| raw[a].0.cmp(raw[b].0));
        let mut jobs: Vec<Option<JobDef>> = vec![None; raw.len()];
        for i in order {
            let (name, tasks) = &raw[i];
            let mut out = BTreeMap::new();
            for (&index, addr) in tasks {
                let Value::String(addr) = addr else {
                    return Err(ClusterError::invalid(
                        TfException::TypeError,
                        format!("Task address {} must be bytes or unicode", repr(addr)),
                    ));
                };
                check_index(index)?;
                out.insert(index, addr.clone());
            }
            jobs[i] = Some(JobDef { name: (*name).to_owned(), tasks: out });
        }
        Ok(ClusterSpec {
            jobs: jobs.into_iter().flatten().collect(),
            def_order: DefOrder::SortedByName,
        })
    }

    /// `multi_worker_util.normalize_cluster_spec` for a JSON value: only an object is a
    /// cluster (TensorFlow also takes a `ClusterDef` or `ClusterSpec` object; from JSON those
    /// arrive through [`ClusterSpec::from_cluster_def`] / [`ClusterSpec::from_spec`]).
    pub fn normalize_json(value: &Value) -> Result<Self, ClusterError> {
        if !value.is_object() {
            return Err(ClusterError::invalid(
                TfException::ValueError,
                "`cluster_spec' should be dict or a `tf.train.ClusterSpec` or a \
                 `tf.train.ClusterDef` object",
            ));
        }
        Self::from_json(value)
    }

    /// Job names, in this spec's order.
    pub fn jobs(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.jobs.iter().map(|j| j.name.as_str())
    }

    /// Jobs with their tasks, in this spec's order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &BTreeMap<TaskIndex, String>)> + '_ {
        self.jobs.iter().map(|j| (j.name.as_str(), &j.tasks))
    }

    /// Whether the cluster has a job named `job`.
    pub fn has_job(&self, job: &str) -> bool {
        self.jobs.iter().any(|j| j.name == job)
    }

    /// Number of jobs.
    pub fn num_jobs(&self) -> usize {
        self.jobs.len()
    }

    /// `bool(spec)`: false only with no jobs at all (a job with no tasks makes it true).
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The tasks of `job`, by index.
    pub fn tasks(&self, job: &str) -> Result<&BTreeMap<TaskIndex, String>, ClusterError> {
        self.jobs
            .iter()
            .find(|j| j.name == job)
            .map(|j| &j.tasks)
            .ok_or_else(|| no_such_job(Some(job)))
    }

    /// Number of defined tasks in `job` (sparse-aware).
    pub fn num_tasks(&self, job: &str) -> Result<usize, ClusterError> {
        Ok(self.tasks(job)?.len())
    }

    /// Sorted task indices of `job`.
    pub fn task_indices(&self, job: &str) -> Result<Vec<TaskIndex>, ClusterError> {
        Ok(self.tasks(job)?.keys().copied().collect())
    }

    /// The address of task `index` of `job`.
    pub fn task_address(&self, job: &str, index: TaskIndex) -> Result<&str, ClusterError> {
        self.tasks(job)?.get(&index).map(String::as_str).ok_or_else(|| {
            ClusterError::not_found(format!("No task with index {index} in job {}", repr_str(job)))
        })
    }

    /// `task_address` with TensorFlow's messages for missing arguments (`None`).
    pub fn task_address_opt(
        &self,
        job: Option<&str>,
        index: Option<TaskIndex>,
    ) -> Result<&str, ClusterError> {
        let Some(job) = job else { return Err(no_such_job(None)) };
        let tasks = self.tasks(job)?;
        let found = index.and_then(|i| tasks.get(&i));
        found.map(String::as_str).ok_or_else(|| {
            let shown = index.map_or_else(|| "None".to_owned(), |i| i.to_string());
            ClusterError::not_found(format!("No task with index {shown} in job {}", repr_str(job)))
        })
    }

    /// `job_tasks(job)`: a list of length `max(index) + 1` with `None` holes.
    ///
    /// Differences from TensorFlow: an empty job gives an empty list (TensorFlow's `max()`
    /// fails), negative indices are left out (Python would write them from the end), and a job
    /// so sparse that the list would exceed 1,048,576 entries is refused instead of allocated.
    pub fn job_tasks(&self, job: &str) -> Result<Vec<Option<&str>>, ClusterError> {
        let tasks = self.tasks(job)?;
        let Some((&max, _)) = tasks.last_key_value() else { return Ok(Vec::new()) };
        if max < 0 {
            return Ok(Vec::new());
        }
        let len = usize::try_from(max).unwrap_or(usize::MAX).saturating_add(1);
        if len > 1 << 20 {
            return Err(ClusterError::invalid_input(format!(
                "job {} is too sparse to list densely (highest index {max}); use task_indices",
                repr_str(job)
            )));
        }
        let mut out = vec![None; len];
        for (&i, addr) in tasks.range(0..) {
            out[i as usize] = Some(addr.as_str());
        }
        Ok(out)
    }

    /// The number of entries `job_tasks(job)` would return, without building the list.
    pub fn job_tasks_len(&self, job: &str) -> Result<usize, ClusterError> {
        let tasks = self.tasks(job)?;
        Ok(match tasks.last_key_value() {
            Some((&max, _)) if max >= 0 => {
                usize::try_from(max).unwrap_or(usize::MAX).saturating_add(1)
            }
            _ => 0,
        })
    }

    /// Whether `job`'s indices are exactly `0..n` with `n > 0` (it renders as a JSON array).
    pub(crate) fn is_dense(tasks: &BTreeMap<TaskIndex, String>) -> bool {
        match (tasks.first_key_value(), tasks.last_key_value()) {
            (Some((&first, _)), Some((&last, _))) => {
                first >= 0 && usize::try_from(last).is_ok_and(|l| l + 1 == tasks.len())
            }
            _ => false,
        }
    }

    /// `as_dict()` as JSON: a job is an array when its indices are exactly `0..n`, `{}` when it
    /// has no tasks, and an object with decimal-string keys otherwise. Jobs in `jobs()` order.
    pub fn as_dict(&self) -> Value {
        let mut out = Map::with_capacity(self.jobs.len());
        for job in &self.jobs {
            out.insert(job.name.clone(), Self::job_json(&job.tasks));
        }
        Value::Object(out)
    }

    fn job_json(tasks: &BTreeMap<TaskIndex, String>) -> Value {
        if Self::is_dense(tasks) {
            Value::Array(tasks.values().cloned().map(Value::String).collect())
        } else {
            Value::Object(
                tasks.iter().map(|(i, a)| (i.to_string(), Value::String(a.clone()))).collect(),
            )
        }
    }

    /// `as_cluster_def()`: sorted by job name for a dict-built spec, the definition's order
    /// for a spec built from a `ClusterDef` or another spec.
    pub fn cluster_def(&self) -> Vec<JobDef> {
        let mut def = self.jobs.clone();
        if self.def_order == DefOrder::SortedByName {
            def.sort_by(|a, b| a.name.cmp(&b.name));
        }
        def
    }

    /// `repr(spec)`: Python syntax over `as_dict()` with job names sorted.
    pub fn py_repr(&self) -> String {
        let mut jobs: Vec<&JobDef> = self.jobs.iter().collect();
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
        let parts: Vec<String> = jobs
            .iter()
            .map(|j| {
                let tasks = if Self::is_dense(&j.tasks) {
                    let items: Vec<String> = j.tasks.values().map(|a| repr_str(a)).collect();
                    format!("[{}]", items.join(", "))
                } else {
                    let items: Vec<String> =
                        j.tasks.iter().map(|(i, a)| format!("{i}: {}", repr_str(a))).collect();
                    format!("{{{}}}", items.join(", "))
                };
                format!("{}: {tasks}", repr_str(&j.name))
            })
            .collect();
        format!("ClusterSpec({{{}}})", parts.join(", "))
    }

    /// Total number of tasks over all jobs.
    pub fn total_tasks(&self) -> usize {
        self.jobs.iter().map(|j| j.tasks.len()).sum()
    }
}

impl PartialEq for ClusterSpec {
    /// Equality of the normalized `job -> {index: address}` maps: job order and dense/sparse
    /// spelling do not matter.
    fn eq(&self, other: &Self) -> bool {
        self.jobs.len() == other.jobs.len()
            && self
                .jobs
                .iter()
                .all(|j| other.jobs.iter().any(|o| o.name == j.name && o.tasks == j.tasks))
    }
}

impl Eq for ClusterSpec {}

impl fmt::Display for ClusterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.py_repr())
    }
}

impl Serialize for ClusterSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_dict().serialize(s)
    }
}

impl<'de> Deserialize<'de> for ClusterSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = crate::json::Strict::deserialize(d)?.0;
        ClusterSpec::from_json(&v).map_err(serde::de::Error::custom)
    }
}

mod index_map {
    use std::collections::BTreeMap;

    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::TaskIndex;

    pub(super) fn serialize<S: Serializer>(
        map: &BTreeMap<TaskIndex, String>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let as_strings: serde_json::Map<String, serde_json::Value> = map
            .iter()
            .map(|(i, a)| (i.to_string(), serde_json::Value::String(a.clone())))
            .collect();
        as_strings.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<TaskIndex, String>, D::Error> {
        let raw = BTreeMap::<String, String>::deserialize(d)?;
        raw.into_iter()
            .map(|(k, v)| {
                k.parse::<TaskIndex>()
                    .map(|i| (i, v))
                    .map_err(|_| D::Error::custom(format!("task index {k:?} is not an integer")))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> ClusterSpec {
        ClusterSpec::from_json(&v).unwrap()
    }

    #[test]
    fn as_dict_dense_sparse_empty() {
        let s = spec(json!({"w": {"1": "b", "0": "a"}, "s": {"0": "x", "3": "y"}, "e": []}));
        assert_eq!(s.as_dict(), json!({"w": ["a", "b"], "s": {"0": "x", "3": "y"}, "e": {}}));
        assert_eq!(s.jobs().collect::<Vec<_>>(), ["w", "s", "e"]);
        let def: Vec<_> = s.cluster_def().into_iter().map(|j| j.name).collect();
        assert_eq!(def, ["e", "s", "w"]);
        assert_eq!(ClusterSpec::from_spec(&s).jobs().collect::<Vec<_>>(), ["e", "s", "w"]);
    }

    #[test]
    fn negative_indices_are_sparse_and_accepted() {
        let s = spec(json!({"w": {"-1": "a", "0": "b"}}));
        assert_eq!(s.as_dict(), json!({"w": {"-1": "a", "0": "b"}}));
        assert_eq!(s.job_tasks("w").unwrap(), vec![Some("b")]);
    }

    #[test]
    fn errors_follow_tensorflow_order_and_text() {
        // A container error in a later job wins over an address error in an earlier one.
        let e = ClusterSpec::from_json(&json!({"a": [1], "b": "x"})).unwrap_err();
        assert_eq!(
            e.detail(),
            "The tasks for job 'b' must be a list or a dictionary from integers to strings."
        );
        assert_eq!(e.tf_exception(), Some(TfException::TypeError));
        // Address errors are found in sorted job order.
        let e = ClusterSpec::from_json(&json!({"z": [null], "a": [123]})).unwrap_err();
        assert_eq!(e.detail(), "Task address 123 must be bytes or unicode");
        let e = ClusterSpec::from_json(&json!({"w": {"a": "x"}})).unwrap_err();
        assert_eq!(e.detail(), "invalid literal for int() with base 10: 'a'");
        let e = ClusterSpec::from_json(&json!({"w": {"2147483648": "x"}})).unwrap_err();
        assert_eq!(e.detail(), "Value out of range: 2147483648");
        let e = ClusterSpec::from_json(&json!(["a"])).unwrap_err();
        assert!(e.detail().starts_with("`cluster` must be a dictionary"));
    }

    #[test]
    fn too_sparse_job_tasks_is_refused_not_allocated() {
        let s = spec(json!({"w": {"2000000000": "a"}}));
        assert!(s.job_tasks("w").is_err());
        assert_eq!(s.job_tasks_len("w").unwrap(), 2_000_000_001);
    }

    #[test]
    fn equality_ignores_order_and_spelling() {
        assert_eq!(spec(json!({"a": ["x"], "b": []})), spec(json!({"b": {}, "a": {"0": "x"}})));
        assert_ne!(spec(json!({"a": ["x", "y"]})), spec(json!({"a": ["y", "x"]})));
    }
}
