//! Iterations and their clients: creation (and resumption), heartbeats, coordinated-read
//! task removal, release.

use std::collections::BTreeSet;

use crate::dataset::num_splits;
use crate::dispatch::error::DispatchError;
use crate::dispatch::state::{Iteration, Job, Update};
use crate::dispatch::tensorflow::DatasetSpec;
use crate::dispatch::types::{ClientId, IterationId, JobId, Millis, ShardingPolicy, TaskId};
use crate::dispatch::wire::{
    ClientHeartbeat, ClientHeartbeatReply, CreateIteration, IterationLease, TaskInfo,
};
use crate::echo::echo;
use crate::position::ResumePlan;

use super::{Consumer, Dispatcher, not_found_dataset};

impl Dispatcher {
    /// Get-or-create the iteration `(job, repetition)` and take a client lease on it.
    /// The splits left by `req.resume_from` on `job` (`None` without one), or why the
    /// position cannot be resumed there.
    fn resume_plan(
        &self,
        job_id: JobId,
        job: &Job,
        req: &CreateIteration,
    ) -> Result<Option<ResumePlan>, DispatchError> {
        let Some(position) = &req.resume_from else { return Ok(None) };
        if job.policy != ShardingPolicy::Dynamic {
            return Err(DispatchError::FailedPrecondition(format!(
                "resume_from needs a DYNAMIC (distributed_epoch) job; job {job_id} shards {}",
                job.policy.as_str()
            )));
        }
        if job.num_consumers.is_some() {
            return Err(DispatchError::FailedPrecondition(format!(
                "job {job_id} has coordinated reads (num_consumers): their rounds interleave \
                 the consumers' elements across tasks, so they have no read positions to resume"
            )));
        }
        if position.dataset_id != job.dataset_id {
            return Err(DispatchError::FailedPrecondition(format!(
                "the position is of dataset {}, but job {job_id} reads dataset {}",
                echo(&position.dataset_id),
                job.dataset_id
            )));
        }
        if position.repetition != req.repetition {
            return Err(DispatchError::InvalidArgument(format!(
                "the position is in repetition {}; create that repetition to resume it (this \
                 request creates repetition {})",
                position.repetition, req.repetition
            )));
        }
        let ds = self
            .state
            .datasets
            .get(&job.dataset_id)
            .ok_or_else(|| not_found_dataset(&job.dataset_id))?;
        let Some(def) = ds.spec.declarative() else {
            return Err(DispatchError::FailedPrecondition(format!(
                "dataset {} is a TensorFlow dataset: its reads have no positions to resume",
                job.dataset_id
            )));
        };
        def.check_resumable().map_err(|why| {
            DispatchError::FailedPrecondition(format!(
                "dataset {} cannot be resumed: {why}",
                job.dataset_id
            ))
        })?;
        ResumePlan::new(position, &def.source, job.split_size)
            .map(Some)
            .map_err(|e| DispatchError::InvalidArgument(format!("resume_from: {e}")))
    }

    pub(super) fn create_iteration(
        &mut self,
        now: Millis,
        job_id: JobId,
        req: &CreateIteration,
    ) -> Result<IterationLease, DispatchError> {
        let job = self.job(job_id)?.clone();
        if let Some(n) = job.num_consumers {
            // Without an index (TensorFlow's clients) a consumer is known by its client id.
            if let Some(i) = req.consumer_index
                && i >= n
            {
                return Err(DispatchError::InvalidArgument(format!(
                    "consumer_index {i} is out of range for a job with {n} consumers"
                )));
            }
        } else if req.consumer_index.is_some() {
            return Err(DispatchError::InvalidArgument(
                "consumer_index needs a job with num_consumers".into(),
            ));
        }
        let resume = self.resume_plan(job_id, &job, req)?;
        let key = (job.name.clone(), req.repetition);
        let existing = self
            .state
            .iterations_by_key
            .get(&key)
            .filter(|id| self.state.iterations.get(id).is_some_and(|i| !i.garbage_collected))
            .copied();
        let mut pushed_tasks = Vec::new();
        let iteration_id = match existing {
            Some(id) => {
                if let Some(plan) = &resume {
                    let same = self
                        .state
                        .iterations
                        .get(&id)
                        .and_then(|i| i.splits.as_ref())
                        .is_some_and(|s| s.plan.as_ref() == Some(plan));
                    if !same {
                        return Err(DispatchError::FailedPrecondition(format!(
                            "iteration {id} (repetition {} of job {job_id}) is already under way \
                             from another position; resume in another repetition or job",
                            req.repetition
                        )));
                    }
                }
                id
            }
            None => {
                let id = IterationId(self.state.next_iteration_id);
                let ds = self
                    .state
                    .datasets
                    .get(&job.dataset_id)
                    .ok_or_else(|| not_found_dataset(&job.dataset_id))?;
                let tensorflow = ds.spec.is_tensorflow();
                let (mut total_splits, mut tf_split_providers) = (None, None);
                if job.policy == ShardingPolicy::Dynamic {
                    match &ds.spec {
                        DatasetSpec::Declarative(def) => {
                            total_splits = Some(match &resume {
                                Some(plan) => plan.num_splits(),
                                None => num_splits(&def.source, job.split_size),
                            });
                        }
                        DatasetSpec::TensorFlow(tf) => match &tf.split_providers {
                            Ok(p) => tf_split_providers = Some(p.len() as u64),
                            Err(why) => {
                                return Err(DispatchError::FailedPrecondition(why.clone()));
                            }
                        },
                    }
                }
                // Tasks of TensorFlow datasets go to TensorFlow workers only, and declarative
                // datasets' to Shardwise workers only. Validate shards before journaling.
                let workers: Vec<String> = self
                    .state
                    .workers
                    .values()
                    .filter(|w| w.alive && w.tensorflow.is_some() == tensorflow)
                    .map(|w| w.address.clone())
                    .collect();
                for w in &workers {
                    self.shard_of(job.policy, w)?;
                }
                self.commit(Update::CreateIteration {
                    iteration_id: id,
                    job_id,
                    repetition: req.repetition,
                    total_splits,
                    tf_split_providers,
                    resume,
                });
                for w in workers {
                    let task = self.create_task(id, &w, false)?;
                    if let Some(task) = task.and_then(|t| self.state.tasks.get(&t))
                        && tensorflow
                    {
                        pushed_tasks.push((w, self.task_def(task)?));
                    }
                }
                id
            }
        };
        let client_id = ClientId(self.state.next_client_id);
        self.commit(Update::AcquireClient {
            client_id,
            iteration_id,
            consumer_index: req.consumer_index,
        });
        self.set_client_deadline(client_id, now.plus(self.config.client_first_heartbeat_grace));
        Ok(IterationLease {
            iteration_id,
            client_id,
            incarnation: self.incarnation.clone(),
            pushed_tasks,
        })
    }

    fn client_iteration(&self, client_id: ClientId) -> Result<IterationId, DispatchError> {
        match self.state.clients.get(&client_id) {
            Some(c) => Ok(c.iteration_id),
            None if self.config.fault_tolerant => {
                Err(DispatchError::NotFound(format!("Iteration client id not found: {client_id}")))
            }
            None => Err(DispatchError::NotFound(format!(
                "Unknown iteration client id {client_id}. The dispatcher is not configured to be \
                 fault tolerant, so this could be caused by a dispatcher restart."
            ))),
        }
    }

    /// Client heartbeat: the iteration's tasks and whether it is finished. For coordinated
    /// reads it also negotiates the round a late task starts in (TensorFlow's pending-task
    /// protocol, with consumers identified by `consumer_index` rather than client id, so a
    /// restarted consumer replaces its predecessor instead of being counted twice).
    pub(super) fn client_heartbeat(
        &mut self,
        now: Millis,
        client_id: ClientId,
        req: &ClientHeartbeat,
    ) -> Result<ClientHeartbeatReply, DispatchError> {
        let iteration_id = self.client_iteration(client_id)?;
        let it = self.state.iterations.get(&iteration_id).ok_or_else(|| {
            DispatchError::NotFound(format!("Iteration id {iteration_id} not found"))
        })?;
        // Coordinated reads: a consumer is its index, or its client id when it has none.
        let consumer = match (it.num_consumers, self.state.clients.get(&client_id)) {
            (Some(_), Some(c)) => Some(match c.consumer_index {
                Some(i) => Consumer::Index(i),
                None => Consumer::Client(c.id),
            }),
            _ => None,
        };
        if it.garbage_collected {
            return Err(DispatchError::FailedPrecondition(
                "The requested iteration has been garbage collected due to inactivity. Consider \
                 configuring the dispatcher with a higher `job_gc_timeout`."
                    .into(),
            ));
        }
        // (The fields, not `set_client_deadline`: `it` borrows the state.)
        let deadline = now.plus(self.config.client_timeout);
        if let Some(old) = self.client_deadline.insert(client_id, deadline) {
            self.client_expiry.remove(&(old, client_id));
        }
        self.client_expiry.insert((deadline, client_id));
        if let (Some(consumer), Some(front)) = (consumer, it.pending.front()) {
            let round = self.rounds.entry(iteration_id).or_default().entry(consumer).or_insert(0);
            if let Some(r) = req.current_round {
                *round = (*round).max(r);
            }
            let estimate = *round;
            let mut target = front.target_round;
            let mut rejected_new_target = None;
            if req.current_round.is_some_and(|r| r >= target) {
                let step = 2u64.saturating_mul(1u64 << front.failures.min(32));
                target = estimate.saturating_add(step);
                rejected_new_target = Some(target);
            }
            let already = match consumer {
                Consumer::Index(i) => front.ready_consumers.contains(&i),
                Consumer::Client(c) => front.ready_clients.contains(&c),
            };
            let ready = rejected_new_target.is_none() && already;
            let accepted = !ready && req.blocked_round.is_some_and(|b| b <= target);
            if rejected_new_target.is_some() || accepted {
                let (consumer_index, client_id) = match consumer {
                    Consumer::Index(i) => (i, None),
                    Consumer::Client(c) => (0, Some(c)),
                };
                self.commit(Update::ConsumerRound {
                    iteration_id,
                    consumer_index,
                    client_id,
                    rejected_new_target,
                    accepted,
                });
            }
        } else if let (Some(consumer), Some(r)) = (consumer, req.current_round) {
            let round = self.rounds.entry(iteration_id).or_default().entry(consumer).or_insert(0);
            *round = (*round).max(r);
        }
        let it = &self.state.iterations[&iteration_id];
        let tasks_version = self.state.version;
        let tasks_unchanged = req.known_tasks_version == Some(tasks_version);
        let tasks = if tasks_unchanged { Vec::new() } else { self.task_infos(it) };
        Ok(ClientHeartbeatReply {
            tasks,
            tasks_version,
            tasks_unchanged,
            iteration_finished: it.finished,
            block_round: it.pending.front().map(|p| p.target_round),
            incarnation: self.incarnation.clone(),
        })
    }

    /// What a client is told about an iteration's tasks.
    fn task_infos(&self, it: &Iteration) -> Vec<TaskInfo> {
        it.tasks
            .iter()
            .filter_map(|t| self.state.tasks.get(t))
            .map(|t| {
                let worker = self.state.workers.get(&t.worker_address);
                TaskInfo {
                    task_id: t.id,
                    worker_address: t.worker_address.clone(),
                    worker_tags: worker.map(|w| w.tags.clone()).unwrap_or_default(),
                    starting_round: t.starting_round,
                    finished: t.finished,
                    worker_lost: t.abandoned,
                    iteration_id: t.iteration_id,
                    transfer_servers: worker
                        .and_then(|w| w.tensorflow.as_ref())
                        .map(|tf| tf.transfer_servers.clone())
                        .unwrap_or_default(),
                    worker_uid: worker.and_then(|w| w.uid.clone()),
                }
            })
            .collect()
    }

    /// Coordinated reads: a consumer that cannot read `task_id` in `round` votes to drop it;
    /// when every consumer voted for the same round the task is removed (journaled) and the
    /// answer is `true`. Votes for another round start a new vote. Unknown tasks count as
    /// removed. (TensorFlow blocks the callers up to 10 s; here each caller asks again.)
    pub(super) fn maybe_remove_task(
        &mut self,
        task_id: TaskId,
        consumer_index: u64,
        round: u64,
    ) -> Result<bool, DispatchError> {
        let Some(task) = self.state.tasks.get(&task_id) else { return Ok(true) };
        let n = self.state.iterations.get(&task.iteration_id).and_then(|i| i.num_consumers);
        let Some(n) = n else {
            return Err(DispatchError::FailedPrecondition(
                "MaybeRemoveTask called on a non-round-robin task.".into(),
            ));
        };
        if consumer_index >= n {
            return Err(DispatchError::InvalidArgument(format!(
                "consumer_index {consumer_index} is out of range for a job with {n} consumers"
            )));
        }
        let vote = self.removal_votes.entry(task_id).or_insert_with(|| (round, BTreeSet::new()));
        if vote.0 != round {
            *vote = (round, BTreeSet::new());
        }
        vote.1.insert(consumer_index);
        if (vote.1.len() as u64) < n {
            return Ok(false);
        }
        self.removal_votes.remove(&task_id);
        self.commit(Update::RemoveTask { task_id });
        Ok(true)
    }

    /// Releases a client lease.
    pub(super) fn release_client(
        &mut self,
        now: Millis,
        client_id: ClientId,
    ) -> Result<(), DispatchError> {
        if !self.state.clients.contains_key(&client_id) {
            return Err(DispatchError::NotFound(format!(
                "Iteration client id not found: {client_id}"
            )));
        }
        self.clear_client_deadline(client_id);
        self.commit(Update::ReleaseClient { client_id, at: now });
        Ok(())
    }
}
