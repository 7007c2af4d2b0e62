//! The state's own edits: construction, the derived indexes (rebuilt and checked), and the
//! steps [`apply`](super::apply) is made of.

use crate::dispatch::heartbeat_index::HeartbeatIndex;
use crate::dispatch::types::{ClientId, FIRST_DATASET_ID, IterationId, JobId, TaskId};

use super::{Dataset, SplitState, State, Task, Worker, WorkerList, footprint};

/// A derived index of [`State`] that differs from what [`State::reindex`] rebuilds (found by
/// [`State::check_heartbeat_index`]): which index, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IndexDrift(pub String);

impl State {
    /// An empty state whose static sharding list is `worker_addresses`.
    pub fn new(worker_addresses: Vec<String>) -> Self {
        State {
            next_dataset_id: FIRST_DATASET_ID,
            next_job_id: JobId::FIRST,
            next_iteration_id: IterationId::FIRST,
            next_client_id: ClientId::FIRST,
            next_task_id: TaskId::FIRST,
            worker_list: WorkerList::new(worker_addresses),
            ..State::default()
        }
    }

    /// Rebuilds the indexes that are not serialized (after a snapshot is decoded). When the
    /// dispatcher last heard from each worker is kept.
    pub fn reindex(&mut self) {
        self.heartbeat_index = HeartbeatIndex::build(&self.workers, &self.heartbeat_index);
        self.datasets_by_fingerprint.clear();
        self.dataset_bytes = 0;
        for ds in self.datasets.values() {
            let (fingerprint, bytes) = footprint(&ds.spec, &ds.metadata);
            self.datasets_by_fingerprint.entry(fingerprint).or_default().insert(ds.id.clone());
            self.dataset_bytes += bytes;
        }
        self.jobs_by_name = self.jobs.values().map(|j| (j.name.clone(), j.id)).collect();
        self.jobs_by_dataset.clear();
        for j in self.jobs.values() {
            self.jobs_by_dataset.entry(j.dataset_id.clone()).or_default().insert(j.id);
        }
        self.iterations_by_key.clear();
        self.open_round_robin.clear();
        self.iterations_by_job.clear();
        self.leases_by_worker.clear();
        self.tasks_per_worker.clear();
        for t in self.tasks.values() {
            *self.tasks_per_worker.entry(t.worker_address.clone()).or_default() += 1;
        }
        for it in self.iterations.values() {
            self.iterations_by_key.insert((it.job_name.clone(), it.repetition), it.id);
            self.iterations_by_job.entry(it.job_id).or_default().insert(it.id);
            if it.num_consumers.is_some() && !it.finished {
                self.open_round_robin.insert(it.id);
            }
            for (worker, held) in it.splits.iter().flat_map(|s| &s.leases) {
                if !held.is_empty() {
                    self.leases_by_worker.entry(worker.clone()).or_default().insert(it.id);
                }
            }
        }
    }

    /// Checks that the derived indexes (not serialized) are what [`State::reindex`] rebuilds:
    /// the heartbeat index mirrors [`State::workers`] exactly, and the open coordinated-read
    /// iterations and name lookups agree, so that a dispatcher recovered from a snapshot
    /// behaves like the live one. For tests.
    pub fn check_heartbeat_index(&self) -> Result<(), IndexDrift> {
        self.heartbeat_index.check(&self.workers).map_err(IndexDrift)?;
        let mut rebuilt = self.clone();
        rebuilt.reindex();
        if rebuilt.open_round_robin != self.open_round_robin {
            return Err(IndexDrift(format!(
                "open coordinated-read iterations {:?}, rebuilt {:?}",
                self.open_round_robin, rebuilt.open_round_robin
            )));
        }
        if rebuilt.iterations_by_key != self.iterations_by_key {
            return Err(IndexDrift(
                "iterations by job name and repetition differ from a rebuild".into(),
            ));
        }
        if rebuilt.jobs_by_name != self.jobs_by_name {
            return Err(IndexDrift("jobs by name differ from a rebuild".into()));
        }
        if rebuilt.datasets_by_fingerprint != self.datasets_by_fingerprint {
            return Err(IndexDrift("datasets by fingerprint differ from a rebuild".into()));
        }
        if rebuilt.iterations_by_job != self.iterations_by_job {
            return Err(IndexDrift("iterations by job differ from a rebuild".into()));
        }
        if rebuilt.jobs_by_dataset != self.jobs_by_dataset {
            return Err(IndexDrift("jobs by dataset differ from a rebuild".into()));
        }
        if rebuilt.tasks_per_worker != self.tasks_per_worker {
            return Err(IndexDrift("tasks per worker differ from a rebuild".into()));
        }
        if rebuilt.leases_by_worker != self.leases_by_worker {
            return Err(IndexDrift(format!(
                "iterations with leases by worker {:?}, rebuilt {:?}",
                self.leases_by_worker, rebuilt.leases_by_worker
            )));
        }
        if rebuilt.dataset_bytes != self.dataset_bytes {
            return Err(IndexDrift(format!(
                "datasets hold {} bytes, rebuilt {}",
                self.dataset_bytes, rebuilt.dataset_bytes
            )));
        }
        Ok(())
    }

    /// Changes the worker at `address` and mirrors it into the heartbeat index. Every change
    /// [`apply`](super::apply) makes to a worker goes through here, or syncs the index right
    /// after it where the borrows do not allow this.
    pub(super) fn update_worker<R>(
        &mut self,
        address: &str,
        f: impl FnOnce(&mut Worker) -> R,
    ) -> Option<R> {
        let w = self.workers.get_mut(address)?;
        let r = f(w);
        self.heartbeat_index.sync(address, w);
        Some(r)
    }

    /// Adds (or, never in practice, replaces) a dataset and keeps its derived indexes.
    pub(super) fn insert_dataset(&mut self, ds: Dataset) {
        let (fingerprint, bytes) = footprint(&ds.spec, &ds.metadata);
        let id = ds.id.clone();
        // (The dispatcher never registers an id twice; replay of any journal stays exact.)
        if let Some(old) = self.datasets.insert(id.clone(), ds) {
            let (old_fingerprint, old_bytes) = footprint(&old.spec, &old.metadata);
            if let Some(ids) = self.datasets_by_fingerprint.get_mut(&old_fingerprint) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.datasets_by_fingerprint.remove(&old_fingerprint);
                }
            }
            self.dataset_bytes = self.dataset_bytes.saturating_sub(old_bytes);
        }
        self.datasets_by_fingerprint.entry(fingerprint).or_default().insert(id);
        self.dataset_bytes += bytes;
        while self.datasets.contains_key(&self.next_dataset_id.to_string()) {
            self.next_dataset_id += 1;
        }
    }

    /// The next generated dataset id that is not taken.
    pub fn peek_dataset_id(&self) -> String {
        let mut n = self.next_dataset_id;
        while self.datasets.contains_key(&n.to_string()) {
            n += 1;
        }
        n.to_string()
    }

    pub(super) fn recompute_finished(&mut self, iteration_id: IterationId) {
        let Some(it) = self.iterations.get(&iteration_id) else { return };
        // Cheapest checks first: this runs on every get-split.
        if it.finished || it.tasks.is_empty() || it.splits.as_ref().is_some_and(SplitState::pending)
        {
            return;
        }
        let mut some_finished = false;
        for t in it.tasks.iter().filter_map(|t| self.tasks.get(t)) {
            if !(t.finished || t.abandoned) {
                return;
            }
            some_finished |= t.finished;
        }
        if some_finished && let Some(it) = self.iterations.get_mut(&iteration_id) {
            it.finished = true;
            // As `reindex` has it: a finished iteration takes no more coordinated-read
            // consumers (a rejoining worker gets no pending task in it).
            self.open_round_robin.remove(&iteration_id);
        }
    }

    pub(super) fn release_leases(
        &mut self,
        iteration_id: IterationId,
        worker: &str,
        requeue: bool,
    ) {
        if let Some(s) = self.iterations.get_mut(&iteration_id).and_then(|i| i.splits.as_mut())
            && let Some(leased) = s.leases.remove(worker)
        {
            if requeue {
                s.requeue.extend(leased);
            }
            self.unindex_leases(worker, iteration_id);
        }
    }

    /// Hands the splits `worker` holds in every iteration out again: only the iterations
    /// where it holds some are looked at.
    pub(super) fn release_all_leases(&mut self, worker: &str) {
        let Some(iterations) = self.leases_by_worker.remove(worker) else { return };
        for it in iterations {
            self.release_leases(it, worker, true);
        }
    }

    /// `worker` holds no more leases in `iteration_id`.
    pub(super) fn unindex_leases(&mut self, worker: &str, iteration_id: IterationId) {
        if let Some(its) = self.leases_by_worker.get_mut(worker) {
            its.remove(&iteration_id);
            if its.is_empty() {
                self.leases_by_worker.remove(worker);
            }
        }
    }

    /// Adds `task` to the open tasks of the worker at `address` (and to its heartbeat-index
    /// entry, one task at a time: never a copy of the whole list).
    pub(super) fn worker_add_task(&mut self, address: &str, task: TaskId) {
        if let Some(w) = self.workers.get_mut(address)
            && w.tasks.insert(task)
        {
            self.heartbeat_index.add_task(address, task);
        }
    }

    /// Removes `task` from the open tasks of the worker at `address`.
    pub(super) fn worker_remove_task(&mut self, address: &str, task: TaskId) {
        if let Some(w) = self.workers.get_mut(address)
            && w.tasks.remove(&task)
        {
            self.heartbeat_index.remove_task(address, task);
        }
    }

    /// Frees a collected iteration and everything that is only its: its tasks (from the task
    /// map, their workers and the heartbeat index), its split state (leases, resume plan), its
    /// key and its place among its job's iterations. The client count is zero (only idle
    /// iterations are collected), so no client refers to it.
    pub(super) fn collect_iteration(&mut self, id: IterationId) {
        self.open_round_robin.remove(&id);
        let Some(it) = self.iterations.remove(&id) else { return };
        for t in it.tasks.iter().copied().chain(it.pending.iter().map(|p| p.task_id)) {
            if let Some(task) = self.remove_task(t) {
                self.worker_remove_task(&task.worker_address, t);
            }
        }
        if let Some(s) = &it.splits {
            for worker in s.leases.keys() {
                self.unindex_leases(worker, id);
            }
        }
        self.splits_handed_out_collected =
            self.splits_handed_out_collected.saturating_add(it.splits_handed_out());
        let key = (it.job_name, it.repetition);
        if self.iterations_by_key.get(&key) == Some(&id) {
            self.iterations_by_key.remove(&key);
        }
        if let Some(its) = self.iterations_by_job.get_mut(&it.job_id) {
            its.remove(&id);
            if its.is_empty() {
                self.iterations_by_job.remove(&it.job_id);
            }
        }
    }

    /// Forgets a job that has no iteration left (a job with iterations stays).
    pub(super) fn remove_job(&mut self, job_id: JobId) {
        if self.iterations_by_job.contains_key(&job_id) {
            return;
        }
        let Some(job) = self.jobs.remove(&job_id) else { return };
        if self.jobs_by_name.get(&job.name) == Some(&job_id) {
            self.jobs_by_name.remove(&job.name);
        }
        if let Some(jobs) = self.jobs_by_dataset.get_mut(&job.dataset_id) {
            jobs.remove(&job_id);
            if jobs.is_empty() {
                self.jobs_by_dataset.remove(&job.dataset_id);
            }
        }
    }

    /// Forgets a dataset: its bytes leave the `max_dataset_bytes` budget and its fingerprint
    /// the deduplication index.
    pub(super) fn remove_dataset(&mut self, dataset_id: &str) {
        let Some(old) = self.datasets.remove(dataset_id) else { return };
        let (fingerprint, bytes) = footprint(&old.spec, &old.metadata);
        if let Some(ids) = self.datasets_by_fingerprint.get_mut(&fingerprint) {
            ids.remove(dataset_id);
            if ids.is_empty() {
                self.datasets_by_fingerprint.remove(&fingerprint);
            }
        }
        self.dataset_bytes = self.dataset_bytes.saturating_sub(bytes);
    }

    /// Adds a task to the task map.
    pub(super) fn insert_task(&mut self, task: Task) {
        let worker = task.worker_address.clone();
        if self.tasks.insert(task.id, task).is_none() {
            *self.tasks_per_worker.entry(worker).or_default() += 1;
        }
    }

    /// Removes a task from the task map (not from its worker's open tasks).
    pub(super) fn remove_task(&mut self, task_id: TaskId) -> Option<Task> {
        let task = self.tasks.remove(&task_id)?;
        if let Some(n) = self.tasks_per_worker.get_mut(&task.worker_address) {
            *n -= 1;
            if *n == 0 {
                self.tasks_per_worker.remove(&task.worker_address);
            }
        }
        Some(task)
    }

    /// Whether the worker at `address` is lost and no task (finished or not) names it: then
    /// it can be forgotten, and if it comes back it registers as new.
    pub fn worker_forgettable(&self, address: &str) -> bool {
        self.workers.get(address).is_some_and(|w| !w.alive && w.tasks.is_empty())
            && !self.tasks_per_worker.contains_key(address)
    }

    /// Forgets a lost worker that no task names (any other worker stays).
    pub(super) fn remove_worker(&mut self, address: &str) {
        if !self.worker_forgettable(address) {
            return;
        }
        self.workers.remove(address);
        self.heartbeat_index.remove(address);
        if let Some(its) = self.leases_by_worker.remove(address) {
            for it in its {
                self.release_leases(it, address, true);
            }
        }
    }
}
