//! Get-or-create of jobs.

use crate::code::Code;
use crate::dataset::{DEFAULT_SPLIT_SIZE, Sharding, validate_sharding};
use crate::dispatch::error::DispatchError;
use crate::dispatch::state::{Job, Update};
use crate::dispatch::tensorflow::DatasetSpec;
use crate::dispatch::types::{JobId, ShardingPolicy};
use crate::dispatch::wire::{CreateJob, MAX_JOB_NAME_LEN};
use crate::echo::echo;

use super::{Dispatcher, not_found_dataset};

impl Dispatcher {
    /// Get-or-create a job. Reusing a name requires the same dataset and parameters.
    pub(super) fn create_job(&mut self, req: &CreateJob) -> Result<JobId, DispatchError> {
        if !self.state.datasets.contains_key(&req.dataset_id) {
            return Err(not_found_dataset(&req.dataset_id));
        }
        let policy = req.processing_mode.policy();
        let split_size = req.split_size.unwrap_or(DEFAULT_SPLIT_SIZE);
        if split_size == 0 {
            return Err(DispatchError::InvalidArgument("split_size must be at least 1".into()));
        }
        if req.num_consumers == Some(0) {
            return Err(DispatchError::InvalidArgument("num_consumers must be at least 1".into()));
        }
        if let Some(name) = &req.job_name {
            if name.is_empty() {
                return Err(DispatchError::InvalidArgument("`job_name` must not be empty".into()));
            }
            if name.len() > MAX_JOB_NAME_LEN || name.chars().any(char::is_control) {
                return Err(DispatchError::InvalidArgument(format!(
                    "`job_name` {} must be at most {MAX_JOB_NAME_LEN} bytes without control \
                     characters",
                    echo(name)
                )));
            }
        } else if req.num_consumers.is_some() {
            return Err(DispatchError::InvalidArgument(
                "coordinated reads (num_consumers) require a job_name".into(),
            ));
        } else if req.cross_trainer_cache {
            return Err(DispatchError::InvalidArgument(
                "Cross-trainer caching requires named jobs. Got empty `job_name`.".into(),
            ));
        }
        let n = self.state.worker_list.len() as u64;
        let spec = &self.state.datasets[&req.dataset_id].spec;
        let sharding = match policy {
            ShardingPolicy::Off => Sharding::Off,
            ShardingPolicy::Dynamic => Sharding::Dynamic,
            ShardingPolicy::File => Sharding::File { num_workers: n.max(1), worker_index: 0 },
            ShardingPolicy::Data => Sharding::Data { num_workers: n.max(1), worker_index: 0 },
            ShardingPolicy::FileOrData => {
                Sharding::FileOrData { num_workers: n.max(1), worker_index: 0 }
            }
            ShardingPolicy::Hint => Sharding::Hint { num_workers: n.max(1), worker_index: 0 },
        };
        match spec {
            DatasetSpec::Declarative(dataset) => {
                validate_sharding(dataset, sharding).map_err(|e| match e.code() {
                    Code::NotFound => DispatchError::NotFound(e.message().to_owned()),
                    Code::FailedPrecondition => {
                        DispatchError::FailedPrecondition(e.message().to_owned())
                    }
                    _ => DispatchError::InvalidArgument(e.message().to_owned()),
                })?;
            }
            // TensorFlow's workers shard graphs themselves; DYNAMIC needs split providers.
            DatasetSpec::TensorFlow(tf) => {
                if policy == ShardingPolicy::Dynamic
                    && let Err(why) = &tf.split_providers
                {
                    return Err(DispatchError::FailedPrecondition(why.clone()));
                }
            }
        }
        if policy.is_static() && self.state.worker_list.is_empty() {
            return Err(DispatchError::FailedPrecondition(format!(
                "Static sharding policy {} needs the dispatcher's fixed worker list \
                 (--worker-addresses); none is configured",
                policy.as_str()
            )));
        }
        if let Some(id) = req.job_name.as_ref().and_then(|n| self.state.jobs_by_name.get(n)) {
            let job = &self.state.jobs[id];
            let mut diff = String::new();
            if job.policy != policy {
                diff += &format!(
                    "Existing processing mode: <{}>; got <{}>. ",
                    job.policy.as_str(),
                    policy.as_str()
                );
            }
            if job.cross_trainer_cache != req.cross_trainer_cache {
                let s = |b: bool| if b { "enabled" } else { "disabled" };
                diff += &format!(
                    "Existing cross-trainer cache: <{}>; got <{}>. ",
                    s(job.cross_trainer_cache),
                    s(req.cross_trainer_cache)
                );
            }
            if job.target_workers != req.target_workers {
                diff += &format!(
                    "Existing target workers: <{}>; got <{}>. ",
                    job.target_workers.as_str(),
                    req.target_workers.as_str()
                );
            }
            if job.dataset_id != req.dataset_id {
                diff +=
                    &format!("Existing dataset: <{}>; got <{}>. ", job.dataset_id, req.dataset_id);
            }
            if job.num_consumers != req.num_consumers {
                diff += &format!(
                    "Existing num_consumers: <{:?}>; got <{:?}>. ",
                    job.num_consumers, req.num_consumers
                );
            }
            if job.split_size != split_size {
                diff += &format!("Existing split_size: <{}>; got <{split_size}>. ", job.split_size);
            }
            if diff.is_empty() {
                return Ok(job.id);
            }
            return Err(DispatchError::InvalidArgument(format!(
                "Tried to create job with name {}, but found an existing job with different \
                 parameters: {}",
                job.name,
                diff.trim_end()
            )));
        }
        let id = JobId(self.state.next_job_id);
        let name = req.job_name.clone().unwrap_or_else(|| format!("anonymous_job_{id}"));
        let job = Job {
            id,
            name,
            dataset_id: req.dataset_id.clone(),
            policy,
            num_consumers: req.num_consumers,
            target_workers: req.target_workers,
            cross_trainer_cache: req.cross_trainer_cache,
            split_size,
        };
        self.commit(Update::CreateJob { job });
        Ok(id)
    }
}
