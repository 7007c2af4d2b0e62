//! What `chief`, `worker`, `evaluator` and `ps` mean to TensorFlow's multi-worker strategies
//! (`tensorflow/python/distribute/multi_worker_util.py`), on a resolved cluster.

use serde::{Deserialize, Serialize};

use super::error::{ClusterError, TfException};
use super::spec::{ClusterSpec, TaskIndex};
use crate::pyrepr::repr_str;

/// Job names the strategies accept (plus "no task type").
pub const ALLOWED_TASK_TYPES: [&str; 4] = ["chief", "worker", "evaluator", "ps"];
const ALLOWED_REPR: &str = "('chief', 'worker', 'evaluator', 'ps', None)";

fn value_error(msg: String) -> ClusterError {
    ClusterError::invalid(TfException::ValueError, msg)
}

fn job_len(spec: &ClusterSpec, job: &str) -> usize {
    spec.num_tasks(job).unwrap_or(0)
}

/// `_validate_cluster_spec`: allowed job names, a known task type (an `evaluator` may be
/// absent from the cluster), at most one chief and one evaluator task, and a task id below the
/// job's task count.
pub fn validate_cluster_spec(
    spec: &ClusterSpec,
    task_type: Option<&str>,
    task_id: TaskIndex,
) -> Result<(), ClusterError> {
    if spec.jobs().any(|j| !ALLOWED_TASK_TYPES.contains(&j)) {
        return Err(value_error(format!(
            "Disallowed task type found in cluster spec. Allowed types are {ALLOWED_REPR} and the \
             cluster spec is {}.",
            spec.py_repr()
        )));
    }
    if let Some(t) = task_type.filter(|t| !ALLOWED_TASK_TYPES.contains(t)) {
        return Err(value_error(format!(
            "Unrecognized task_type: {t}, valid task types are: {ALLOWED_REPR}"
        )));
    }
    if let Some(t) = task_type.filter(|t| !t.is_empty() && *t != "evaluator" && !spec.has_job(t)) {
        return Err(value_error(format!("`task_type` {} not found in cluster_spec.", repr_str(t))));
    }
    if job_len(spec, "chief") > 1 {
        return Err(value_error("There must be at most one 'chief' job.".into()));
    }
    if job_len(spec, "evaluator") > 1 {
        return Err(value_error("There must be at most one 'evaluator' job.".into()));
    }
    if let Some(t) = task_type.filter(|t| spec.has_job(t)) {
        let len = job_len(spec, t);
        if usize::try_from(task_id).is_ok_and(|id| id >= len) {
            return Err(value_error(format!(
                "The `task_id` {task_id} exceeds the maximum id of {t}."
            )));
        }
    }
    Ok(())
}

/// `is_chief`: the chief and the evaluator are chiefs; without a chief job, worker 0 is.
pub fn is_chief(
    spec: &ClusterSpec,
    task_type: Option<&str>,
    task_id: TaskIndex,
) -> Result<bool, ClusterError> {
    validate_cluster_spec(spec, task_type, task_id)?;
    Ok(match task_type {
        Some("chief" | "evaluator") => true,
        Some("worker") => !spec.has_job("chief") && task_id == 0,
        _ => false,
    })
}

/// `worker_count`: chief + worker tasks for a chief or worker; evaluator tasks for an
/// evaluator; an error for any other task type.
pub fn worker_count(spec: &ClusterSpec, task_type: Option<&str>) -> Result<usize, ClusterError> {
    validate_cluster_spec(spec, task_type, 0)?;
    match task_type {
        Some("evaluator") => spec
            .num_tasks("evaluator")
            .map_err(|_| ClusterError::invalid(TfException::KeyError, "evaluator")),
        Some("chief" | "worker") => Ok(job_len(spec, "chief") + job_len(spec, "worker")),
        other => Err(value_error(format!(
            "Unexpected `task_type` {}",
            other.map_or_else(|| "None".to_owned(), repr_str)
        ))),
    }
}

/// `id_in_cluster`: chief 0, worker `task_id + #chief`, evaluator `task_id`; none for `ps`.
pub fn id_in_cluster(
    spec: &ClusterSpec,
    task_type: Option<&str>,
    task_id: TaskIndex,
) -> Result<TaskIndex, ClusterError> {
    validate_cluster_spec(spec, task_type, task_id)?;
    match task_type {
        Some("chief") => Ok(0),
        Some("worker") => Ok(task_id.saturating_add(job_len(spec, "chief") as TaskIndex)),
        Some("evaluator") => Ok(task_id),
        other => Err(value_error(format!(
            "There is no id for task_type {}",
            other.map_or_else(|| "None".to_owned(), repr_str)
        ))),
    }
}

/// `collective_leader`: `""` for an empty cluster or an evaluator, the chief when there is
/// one, else worker 0.
pub fn collective_leader(
    spec: &ClusterSpec,
    task_type: Option<&str>,
    task_id: TaskIndex,
) -> Result<String, ClusterError> {
    if spec.is_empty() {
        return Ok(String::new());
    }
    validate_cluster_spec(spec, task_type, task_id)?;
    if task_type == Some("evaluator") {
        return Ok(String::new());
    }
    if spec.has_job("chief") {
        return Ok("/job:chief/replica:0/task:0".into());
    }
    if spec.has_job("worker") {
        return Ok("/job:worker/replica:0/task:0".into());
    }
    Err(ClusterError::invalid_input(
        "the cluster has neither a 'chief' nor a 'worker' job, so it has no collective leader",
    ))
}

/// A task's role for the multi-worker strategies. Fields TensorFlow cannot compute for the
/// task (a `ps` has no worker count or id) are `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    /// `is_chief`.
    pub is_chief: bool,
    /// `worker_count`.
    pub worker_count: Option<usize>,
    /// `id_in_cluster`.
    pub id_in_cluster: Option<TaskIndex>,
    /// `collective_leader`.
    pub collective_leader: Option<String>,
}

/// The role of `task_type`/`task_id`, or `None` when TensorFlow's validation rejects the pair.
pub fn role(spec: &ClusterSpec, task_type: &str, task_id: TaskIndex) -> Option<Role> {
    let is_chief = is_chief(spec, Some(task_type), task_id).ok()?;
    Some(Role {
        is_chief,
        worker_count: worker_count(spec, Some(task_type)).ok(),
        id_in_cluster: id_in_cluster(spec, Some(task_type), task_id).ok(),
        collective_leader: collective_leader(spec, Some(task_type), task_id).ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> ClusterSpec {
        ClusterSpec::from_json(&v).unwrap()
    }

    #[test]
    fn disallowed_jobs_and_task_types() {
        let s = spec(json!({"master": ["a:1"]}));
        let e = validate_cluster_spec(&s, None, 0).unwrap_err();
        assert_eq!(
            e.detail(),
            "Disallowed task type found in cluster spec. Allowed types are ('chief', 'worker', \
             'evaluator', 'ps', None) and the cluster spec is ClusterSpec({'master': ['a:1']})."
        );
        let s = spec(json!({"worker": ["a:1"]}));
        let e = validate_cluster_spec(&s, Some("master"), 0).unwrap_err();
        assert_eq!(
            e.detail(),
            "Unrecognized task_type: master, valid task types are: ('chief', 'worker', \
             'evaluator', 'ps', None)"
        );
        let s = spec(json!({"evaluator": ["a:1", "b:1"]}));
        let e = validate_cluster_spec(&s, Some("evaluator"), 0).unwrap_err();
        assert_eq!(e.detail(), "There must be at most one 'evaluator' job.");
    }

    #[test]
    fn roles() {
        let s = spec(json!({"chief": ["c:1"], "worker": ["w:1", "w:2"], "ps": ["p:1"]}));
        assert_eq!(
            role(&s, "worker", 1),
            Some(Role {
                is_chief: false,
                worker_count: Some(3),
                id_in_cluster: Some(2),
                collective_leader: Some("/job:chief/replica:0/task:0".into()),
            })
        );
        let ps = role(&s, "ps", 0).unwrap();
        assert_eq!((ps.worker_count, ps.id_in_cluster), (None, None));
        // An evaluator outside the training cluster is valid but has no worker count.
        let ev = role(&s, "evaluator", 0).unwrap();
        assert!(ev.is_chief);
        assert_eq!(ev.worker_count, None);
        assert_eq!(ev.collective_leader.as_deref(), Some(""));
        assert_eq!(role(&s, "worker", 5), None);
        let only_ps = spec(json!({"ps": ["p:1"]}));
        assert_eq!(role(&only_ps, "ps", 0).unwrap().collective_leader, None);
    }
}
