//! Read-only answers: a dataset, the workers, a job, the metrics.

use crate::dispatch::error::DispatchError;
use crate::dispatch::state::Job;
use crate::dispatch::types::JobId;
use crate::dispatch::wire::{
    DatasetInfo, IterationInfo, JobInfo, MetricsFigures, ProcessingMode, WorkerInfo, WorkersList,
};

use super::{Dispatcher, not_found_dataset};

impl Dispatcher {
    pub(super) fn dataset(&self, dataset_id: &str) -> Result<DatasetInfo, DispatchError> {
        let ds =
            self.state.datasets.get(dataset_id).ok_or_else(|| not_found_dataset(dataset_id))?;
        // The metadata as the client sent it, also after workers disabled compression: as
        // TensorFlow's GetDataServiceMetadata, whose clients read each element's own form.
        Ok(DatasetInfo {
            dataset_id: ds.id.clone(),
            dataset: ds.spec.clone(),
            metadata: ds.metadata.clone(),
            compression_disabled: ds.compression_disabled,
        })
    }

    pub(super) fn workers(&self) -> WorkersList {
        let workers = self
            .state
            .workers
            .values()
            .map(|w| WorkerInfo {
                worker_address: w.address.clone(),
                tags: w.tags.clone(),
                tasks: w.tasks.iter().copied().collect(),
                alive: w.alive,
                tensorflow: w.tensorflow.clone(),
            })
            .collect();
        WorkersList { workers }
    }

    pub(super) fn job(&self, job_id: JobId) -> Result<&Job, DispatchError> {
        self.state
            .jobs
            .get(&job_id)
            .ok_or_else(|| DispatchError::NotFound(format!("Job with id {job_id} not found")))
    }

    pub(super) fn job_info(&self, job_id: JobId) -> Result<JobInfo, DispatchError> {
        let job = self.job(job_id)?;
        let iterations = self
            .state
            .iterations_of_job(job_id)
            .map(|i| IterationInfo {
                iteration_id: i.id,
                repetition: i.repetition,
                finished: i.finished,
                garbage_collected: i.garbage_collected,
                num_clients: i.num_clients,
                tasks: i.tasks.clone(),
            })
            .collect();
        Ok(JobInfo {
            job_id: job.id,
            job_name: job.name.clone(),
            dataset_id: job.dataset_id.clone(),
            processing_mode: ProcessingMode::Policy { sharding_policy: job.policy },
            num_consumers: job.num_consumers,
            target_workers: job.target_workers,
            cross_trainer_cache: job.cross_trainer_cache,
            split_size: job.split_size,
            iterations,
        })
    }

    pub(super) fn metrics(&self) -> MetricsFigures {
        let st = &self.state;
        MetricsFigures {
            workers_alive: st.workers.values().filter(|w| w.alive).count() as u64,
            iterations_open: st.iterations.values().filter(|i| !i.finished).count() as u64,
            splits_handed_out: st.splits_handed_out_total(),
        }
    }
}
