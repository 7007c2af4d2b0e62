//! The dispatcher's timers: client leases, idle iterations and jobs, silent workers.

use crate::dispatch::state::Update;
use crate::dispatch::types::{ClientId, IterationId, JobId, Millis, ShardingPolicy};

use super::{Dispatcher, Event};

impl Dispatcher {
    /// Sets when a client lease expires without a heartbeat.
    pub(super) fn set_client_deadline(&mut self, client_id: ClientId, at: Millis) {
        if let Some(old) = self.client_deadline.insert(client_id, at) {
            self.client_expiry.remove(&(old, client_id));
        }
        self.client_expiry.insert((at, client_id));
    }

    /// A client lease ended: it has no deadline any more.
    pub(super) fn clear_client_deadline(&mut self, client_id: ClientId) {
        if let Some(old) = self.client_deadline.remove(&client_id) {
            self.client_expiry.remove(&(old, client_id));
        }
    }

    /// Files the iteration for garbage collection when it is idle (no clients, released at
    /// least once) and collectable (`job_gc_timeout` set; an unfinished DYNAMIC one only with
    /// `gc_dynamic_sharding_jobs`, as TensorFlow, since its split position would be lost: a
    /// finished one has none left to lose), and takes it out otherwise.
    pub(super) fn refresh_gc(&mut self, id: IterationId) {
        if let Some(due) = self.gc_due.remove(&id) {
            self.gc_queue.remove(&(due, id));
        }
        let Some(timeout) = self.config.job_gc_timeout else { return };
        let Some(it) = self.state.iterations.get(&id) else { return };
        let Some(released) = it.last_release.filter(|_| it.num_clients == 0) else { return };
        let dynamic =
            self.state.jobs.get(&it.job_id).is_some_and(|j| j.policy == ShardingPolicy::Dynamic);
        if dynamic && !it.finished && !self.config.gc_dynamic_sharding_jobs {
            return;
        }
        let due = released.plus(timeout);
        self.gc_due.insert(id, due);
        self.gc_queue.insert((due, id));
    }

    /// Files the job as idle (a tombstone) while it has no iteration, from now on.
    pub(super) fn refresh_idle_job(&mut self, job_id: JobId) {
        let idle = self.state.jobs.contains_key(&job_id)
            && !self.state.iterations_by_job.contains_key(&job_id);
        match (idle, self.idle_jobs.get(&job_id).copied()) {
            (true, None) => {
                self.idle_jobs.insert(job_id, self.clock);
                self.idle_queue.insert((self.clock, job_id));
            }
            (false, Some(since)) => {
                self.idle_jobs.remove(&job_id);
                self.idle_queue.remove(&(since, job_id));
            }
            _ => {}
        }
    }

    pub(super) fn run_timers(&mut self, now: Millis) {
        if now < self.next_check {
            return;
        }
        self.next_check = now.plus(self.config.check_interval());
        // Each step looks only at what is due (soonest first), never at everything there is.
        // 1. Silent clients, of finished iterations too (their lease would otherwise keep the
        // iteration forever).
        while let Some(&(deadline, client_id)) = self.client_expiry.first()
            && now > deadline
        {
            self.clear_client_deadline(client_id);
            if self.state.clients.contains_key(&client_id) {
                self.commit(Update::ReleaseClient { client_id, at: now });
            }
        }
        if let Some(timeout) = self.config.job_gc_timeout {
            // 2. Idle iterations, finished or not: freed with their tasks.
            while let Some(&(due, iteration_id)) = self.gc_queue.first()
                && due <= now
            {
                self.gc_queue.remove(&(due, iteration_id));
                self.gc_due.remove(&iteration_id);
                self.commit(Update::GarbageCollectIteration { iteration_id });
            }
            // 2b. Jobs left without iterations for the timeout: forgotten.
            while let Some(&(since, job_id)) = self.idle_queue.first()
                && since.plus(timeout) <= now
            {
                self.idle_queue.remove(&(since, job_id));
                self.idle_jobs.remove(&job_id);
                self.commit(Update::RemoveJob { job_id });
            }
        }
        // 3. Silent workers.
        let mut lost: Vec<String> = self
            .state
            .heartbeat_index
            .iter()
            .filter(|(_, w)| w.alive)
            .filter(|(_, w)| w.seen.is_none_or(|t| now.since(t) > self.config.worker_timeout))
            .map(|(address, _)| address.into_owned())
            .collect();
        // In address order, as `State::workers` lists them.
        lost.sort_unstable();
        for address in lost {
            self.commit(Update::WorkerLost { address: address.clone() });
            self.events.push_back(Event::WorkerLost { address });
        }
        // 4. Workers lost for another worker timeout that no task names any more: forgotten
        // (one that comes back registers as new). Not with `job_gc_timeout: None`, which
        // collects nothing.
        if self.config.job_gc_timeout.is_none() {
            return;
        }
        let forget: Vec<String> = self
            .lost_since
            .iter()
            .filter(|(_, since)| now >= since.plus(self.config.worker_timeout))
            .map(|(address, _)| address)
            .filter(|address| self.state.worker_forgettable(address))
            .cloned()
            .collect();
        for address in forget {
            self.commit(Update::RemoveWorker { address });
        }
    }
}
