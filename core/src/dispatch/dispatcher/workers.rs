//! Workers: heartbeats, task creation and updates, and who may speak for a task.

use std::collections::BTreeSet;

use crate::dispatch::address::check_plausible;
use crate::dispatch::error::DispatchError;
use crate::dispatch::state::{Task, Update};
use crate::dispatch::tensorflow::DatasetSpec;
use crate::dispatch::types::{IterationId, Millis, ShardingPolicy, TaskId};
use crate::dispatch::wire::{
    MAX_UID_LEN, TaskDef, WorkerHeartbeat, WorkerHeartbeatReply, WorkerUpdate, WorkerUpdateReply,
};
use crate::echo::echo;

use super::{Dispatcher, not_found_dataset, uid_mismatch, worker_not_found};

impl Dispatcher {
    pub(super) fn task_def(&self, task: &Task) -> Result<TaskDef, DispatchError> {
        let it = self.state.iterations.get(&task.iteration_id).ok_or_else(|| {
            DispatchError::NotFound(format!("Iteration id {} not found", task.iteration_id))
        })?;
        let job = self.state.jobs.get(&it.job_id).ok_or_else(|| {
            DispatchError::NotFound(format!("Job with id {} not found", it.job_id))
        })?;
        let dataset = self
            .state
            .datasets
            .get(&job.dataset_id)
            .ok_or_else(|| not_found_dataset(&job.dataset_id))?;
        let num_split_providers = match (&dataset.spec, job.policy) {
            (_, policy) if policy != ShardingPolicy::Dynamic => 0,
            (DatasetSpec::Declarative(_), _) => 1,
            (DatasetSpec::TensorFlow(tf), _) => {
                u32::try_from(tf.num_split_providers()).unwrap_or(u32::MAX)
            }
        };
        Ok(TaskDef {
            task_id: task.id,
            iteration_id: it.id,
            job_id: job.id,
            dataset_id: job.dataset_id.clone(),
            dataset: dataset.spec.clone(),
            processing_mode: job.policy,
            num_workers: task.shard.map(|s| s.0),
            worker_index: task.shard.map(|s| s.1),
            num_split_providers,
            split_size: job.split_size,
            num_consumers: job.num_consumers,
            starting_round: task.starting_round,
            cross_trainer_cache: job.cross_trainer_cache,
        })
    }

    pub(super) fn shard_of(
        &self,
        policy: ShardingPolicy,
        worker: &str,
    ) -> Result<Option<(u64, u64)>, DispatchError> {
        if !policy.is_static() {
            return Ok(None);
        }
        let list = &self.state.worker_list;
        match list.index_of(worker) {
            Some(i) => Ok(Some((list.len() as u64, i as u64))),
            None => Err(DispatchError::NotFound(format!(
                "Failed to shard dataset in tf.data service: Worker {worker} is not in the workers \
                 list. Got workers list [{}].",
                list.entries().join(", ")
            ))),
        }
    }

    /// Creates a task of `iteration` on `worker` (journaled). A coordinated-read iteration
    /// that already started gets a pending task instead, proposed to start one round after
    /// the furthest consumer's.
    pub(super) fn create_task(
        &mut self,
        iteration_id: IterationId,
        worker: &str,
        late: bool,
    ) -> Result<Option<TaskId>, DispatchError> {
        let Some(it) = self.state.iterations.get(&iteration_id) else { return Ok(None) };
        let policy = self.state.jobs.get(&it.job_id).map_or(ShardingPolicy::Off, |j| j.policy);
        let pending = late && it.num_consumers.is_some();
        let shard = self.shard_of(policy, worker)?;
        let starting_round = if pending {
            self.rounds.get(&iteration_id).and_then(|r| r.values().max()).map_or(0, |r| r + 1)
        } else {
            0
        };
        let id = TaskId(self.state.next_task_id);
        let task = Task {
            id,
            iteration_id,
            worker_address: worker.to_owned(),
            shard,
            starting_round,
            finished: false,
            abandoned: false,
        };
        if pending {
            self.commit(Update::CreatePendingTask { task });
        } else {
            self.commit(Update::CreateTask { task });
        }
        Ok(Some(id))
    }

    /// Whether the iteration's dataset is a TensorFlow dataset (whose tasks go only to
    /// TensorFlow workers; declarative datasets' tasks only to Shardwise workers).
    fn iteration_is_tf(&self, iteration_id: IterationId) -> bool {
        self.state
            .iterations
            .get(&iteration_id)
            .and_then(|it| self.state.jobs.get(&it.job_id))
            .and_then(|j| self.state.datasets.get(&j.dataset_id))
            .is_some_and(|d| d.spec.is_tensorflow())
    }

    /// Whether the worker at `addr` is a TensorFlow worker.
    fn worker_is_tf(&self, addr: &str) -> bool {
        self.state.heartbeat_index.get(addr).is_some_and(|w| w.tensorflow)
    }

    /// Worker heartbeat: registers a new worker (giving it a task in every unfinished
    /// iteration), revives a lost one, and answers the tasks to start and to stop.
    pub(super) fn worker_heartbeat(
        &mut self,
        now: Millis,
        req: &WorkerHeartbeat,
    ) -> Result<WorkerHeartbeatReply, DispatchError> {
        let addr = req.worker_address.as_str();
        check_plausible(addr).map_err(|e| DispatchError::InvalidArgument(e.to_string()))?;
        if req.tags.iter().any(|t| t.is_empty()) {
            return Err(DispatchError::InvalidArgument(format!(
                "Worker tags cannot be empty. Got tags {}",
                echo(&format!("{{{}}}", req.tags.join(", ")))
            )));
        }
        if let Some(uid) = &req.worker_uid
            && (uid.is_empty()
                || uid.len() > MAX_UID_LEN
                || uid.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(DispatchError::InvalidArgument(format!(
                "worker_uid must be 1 to {MAX_UID_LEN} bytes without whitespace or control \
                 characters"
            )));
        }
        // Fast path: a live worker of this incarnation, same uid, reporting exactly its tasks.
        // One probe of the heartbeat index, whatever the number of workers.
        let tensorflow = req.tensorflow.is_some();
        if req.incarnation.as_ref().is_none_or(|i| *i == self.incarnation)
            && self.state.open_round_robin.is_empty()
            && let Some(w) = self.state.heartbeat_index.get_mut(addr)
            && w.alive
            && w.tensorflow == tensorflow
            && (req.worker_uid.is_none() || w.uid_is(req.worker_uid.as_deref()))
            && w.tasks().eq(req.current_tasks.iter().copied())
        {
            w.seen = Some(now);
            return Ok(WorkerHeartbeatReply {
                new_tasks: Vec::new(),
                tasks_to_delete: Vec::new(),
                incarnation: self.incarnation.clone(),
            });
        }
        if let Some(w) = self.state.heartbeat_index.get(addr)
            && w.tensorflow != tensorflow
        {
            let kind = |tf: bool| if tf { "TensorFlow" } else { "Shardwise" };
            return Err(DispatchError::FailedPrecondition(format!(
                "a {} worker is registered at {}: this heartbeat is from a {} worker. A worker's \
                 kind is fixed when it registers; run the other kind at another address",
                kind(w.tensorflow),
                echo(addr),
                kind(tensorflow)
            )));
        }
        let known = self.state.workers.get(addr).map(|w| (w.alive, w.uid.clone()));
        let uid = req.worker_uid.clone();
        match known {
            None => {
                self.state
                    .worker_list
                    .validate(addr)
                    .map_err(|e| DispatchError::FailedPrecondition(e.to_string()))?;
                self.commit(Update::RegisterWorker {
                    address: addr.to_owned(),
                    tags: req.tags.clone(),
                    uid,
                    tensorflow: req.tensorflow.clone(),
                });
                self.join_unfinished_iterations(addr, true)?;
            }
            Some((false, _)) => {
                self.commit(Update::WorkerRevived {
                    address: addr.to_owned(),
                    uid,
                    tensorflow: req.tensorflow.clone(),
                });
                self.join_unfinished_iterations(addr, false)?;
            }
            Some((true, old)) if uid.is_some() && old != uid => {
                self.commit(Update::WorkerRestarted {
                    address: addr.to_owned(),
                    uid,
                    tensorflow: req.tensorflow.clone(),
                });
                self.rejoin_round_robin(addr)?;
            }
            Some((true, _)) => self.rejoin_round_robin(addr)?,
        }
        if let Some(w) = self.state.heartbeat_index.get_mut(addr) {
            w.seen = Some(now);
        }
        let assigned: &BTreeSet<TaskId> = match self.state.workers.get(addr) {
            Some(w) => &w.tasks,
            None => {
                return Err(worker_not_found(addr));
            }
        };
        let current: BTreeSet<TaskId> = req.current_tasks.iter().copied().collect();
        let stale = req.incarnation.as_ref().is_some_and(|i| *i != self.incarnation);
        let (tasks_to_delete, new_ids): (Vec<TaskId>, Vec<TaskId>) = if stale {
            (current.iter().copied().collect(), assigned.iter().copied().collect())
        } else {
            (
                current.iter().filter(|t| !assigned.contains(t)).copied().collect(),
                assigned.iter().filter(|t| !current.contains(t)).copied().collect(),
            )
        };
        let mut new_tasks = Vec::with_capacity(new_ids.len());
        for id in new_ids {
            if let Some(task) = self.state.tasks.get(&id) {
                new_tasks.push(self.task_def(task)?);
            }
        }
        Ok(WorkerHeartbeatReply {
            new_tasks,
            tasks_to_delete,
            incarnation: self.incarnation.clone(),
        })
    }

    /// Gives a joining worker a task in every unfinished iteration it has none in.
    ///
    /// A worker registering for the first time has no task anywhere (tasks are only ever
    /// created for registered workers, and workers are never forgotten), so only a revived
    /// one needs the scan of every task: registering a fleet stays linear.
    fn join_unfinished_iterations(
        &mut self,
        addr: &str,
        first_registration: bool,
    ) -> Result<(), DispatchError> {
        let has_task: BTreeSet<IterationId> = if first_registration {
            BTreeSet::new()
        } else {
            self.state
                .tasks
                .values()
                .filter(|t| t.worker_address == addr)
                .map(|t| t.iteration_id)
                .collect()
        };
        let tensorflow = self.worker_is_tf(addr);
        let open: Vec<IterationId> = self
            .state
            .iterations
            .values()
            .filter(|i| !i.finished && !has_task.contains(&i.id))
            .map(|i| i.id)
            .filter(|i| self.iteration_is_tf(*i) == tensorflow)
            .collect();
        for it in open {
            self.create_task(it, addr, true)?;
        }
        Ok(())
    }

    /// A worker whose coordinated-read task was removed gets a pending task again.
    fn rejoin_round_robin(&mut self, addr: &str) -> Result<(), DispatchError> {
        if self.state.open_round_robin.is_empty() {
            return Ok(());
        }
        let Some(w) = self.state.workers.get(addr) else { return Ok(()) };
        let mine: BTreeSet<IterationId> = w
            .tasks
            .iter()
            .filter_map(|t| self.state.tasks.get(t))
            .map(|t| t.iteration_id)
            .collect();
        let tensorflow = w.tensorflow.is_some();
        let missing: Vec<IterationId> = self
            .state
            .open_round_robin
            .iter()
            .filter(|i| !mine.contains(i) && self.iteration_is_tf(**i) == tensorflow)
            .copied()
            .collect();
        for it in missing {
            self.create_task(it, addr, true)?;
        }
        Ok(())
    }

    /// Worker update, from the worker holding the tasks: its registered address and, when it
    /// registered with a `worker_uid`, the same uid. Every entry is checked before any is
    /// applied: a task held by another worker refuses the whole update (PERMISSION_DENIED) and
    /// changes nothing. Unknown ids are reported back.
    pub(super) fn worker_update(
        &mut self,
        now: Millis,
        req: &WorkerUpdate,
    ) -> Result<WorkerUpdateReply, DispatchError> {
        let addr = req.worker_address.as_str();
        self.check_worker_identity(addr, req.worker_uid.as_deref())?;
        let mut unknown_tasks = Vec::new();
        let mut finish = Vec::new();
        for u in &req.updates {
            match self.state.tasks.get(&u.task_id) {
                None => unknown_tasks.push(u.task_id),
                Some(t) if t.worker_address != addr => {
                    return Err(DispatchError::PermissionDenied(format!(
                        "task {} is not held by worker {}: a worker may report only its own \
                         tasks; nothing was changed",
                        u.task_id,
                        echo(addr)
                    )));
                }
                Some(t) if u.completed && !t.finished => finish.push(u.task_id),
                Some(_) => {}
            }
        }
        if let Some(w) = self.state.heartbeat_index.get_mut(addr) {
            w.seen = Some(now);
        }
        for task_id in finish {
            // A task listed twice is finished once.
            if self.state.tasks.get(&task_id).is_some_and(|t| !t.finished) {
                self.commit(Update::FinishTask { task_id });
            }
        }
        Ok(WorkerUpdateReply { unknown_tasks, incarnation: self.incarnation.clone() })
    }

    /// The caller is the worker registered at `addr`: NOT_FOUND when none is, and
    /// PERMISSION_DENIED when it registered with a uid and `uid` is another (or none). A
    /// worker that registered without a uid is known by its address alone, and so is a
    /// TensorFlow worker asking without one (TensorFlow's `WorkerUpdateRequest` has none).
    /// The registered uid is never quoted back: it is what proves a request comes from that
    /// worker.
    fn check_worker_identity(&self, addr: &str, uid: Option<&str>) -> Result<(), DispatchError> {
        let Some(w) = self.state.heartbeat_index.get(addr) else {
            return Err(worker_not_found(addr));
        };
        if !(w.holds_uid(uid) || (w.tensorflow && uid.is_none())) {
            return Err(uid_mismatch(addr, uid));
        }
        Ok(())
    }
}
