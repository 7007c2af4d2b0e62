//! The dispatcher state machine: requests and timer ticks in, journal records and replies out.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::Value;

use super::address::check_plausible;
use super::config::DispatcherConfig;
use super::error::DispatchError;
use super::protocol::{DeleteDataset, Output, Reply, Request, Response, Seq, Ticket};
use super::state::{
    Iteration, Job, SplitRef, State, Task, Update, apply, footprint_declarative, footprint_tf,
};
use super::tensorflow::{
    COMPRESSION_SNAPPY, CompressionDecision, DatasetSpec, DisableCompression, RegisterTfDataset,
    TfGetSplit, TfSplit,
};
use super::types::{ClientId, IterationId, JobId, Millis, ShardingPolicy, TaskId};
use super::wire::{
    ClientHeartbeat, ClientHeartbeatReply, CreateIteration, CreateJob, DatasetDeleted, DatasetInfo,
    DatasetRegistered, GetSplits, IterationInfo, IterationLease, JobCreated, JobInfo,
    MAX_JOB_NAME_LEN, MAX_SPLITS_PER_CALL, MAX_UID_LEN, MaybeRemove, MetricsFigures,
    PROTOCOL_VERSION, ProcessingMode, RegisterDataset, Released, Removed, Split, SplitId,
    SplitsReply, TaskDef, TaskInfo, VersionInfo, WorkerHeartbeat, WorkerHeartbeatReply, WorkerInfo,
    WorkerUpdate, WorkerUpdateReply, WorkersList,
};
use crate::code::Code;
use crate::dataset::{
    DEFAULT_SPLIT_SIZE, Sharding, SourceDef, chunk_at, num_splits, split_at, validate_sharding,
};
use crate::echo::{bare, echo};
use crate::position::{ResumePlan, SplitPositions};

/// What the gateway may want to know about, besides replies.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A worker was declared lost.
    WorkerLost {
        /// Address.
        address: String,
    },
    /// An iteration finished.
    IterationFinished {
        /// Iteration.
        iteration_id: IterationId,
    },
}

/// A consumer of a coordinated-read iteration: its index, or, for a client that gave none
/// (TensorFlow's clients), its client id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Consumer {
    Index(u64),
    Client(ClientId),
}

/// A computed reply waiting for the batch it depends on to be persisted.
#[derive(Debug)]
struct Held {
    /// The last batch emitted when the reply was computed.
    seq: Seq,
    ticket: Ticket,
    reply: Reply,
}

/// The dispatcher: a deterministic state machine. See the module docs for the run loop.
///
/// Methods come in groups: `handle_*` take inputs (a [`Request`], a timer tick, a report that
/// records are durable), `poll_*` give outputs ([`Output`]s, [`Event`]s, the next deadline).
/// A reply leaves [`Dispatcher::poll_output`] only once every record emitted before it was
/// computed is reported durable: there is no other way to get one.
#[derive(Debug)]
pub struct Dispatcher {
    config: DispatcherConfig,
    incarnation: String,
    /// The durable state. When each worker was last heard from is kept next to what its
    /// heartbeat checks, in the state's heartbeat index (not durable, not part of equality).
    state: State,
    /// When each client lease expires without a heartbeat ...
    client_deadline: BTreeMap<ClientId, Millis>,
    /// ... and the same, soonest first, so a timer tick looks only at the expired ones.
    client_expiry: BTreeSet<(Millis, ClientId)>,
    /// When each idle iteration (no clients, released at least once, collectable under the
    /// configuration) is due for garbage collection ...
    gc_due: BTreeMap<IterationId, Millis>,
    /// ... and the same, soonest first.
    gc_queue: BTreeSet<(Millis, IterationId)>,
    /// Since when each job has had no iteration (a tombstone that keeps its name and id for
    /// `job_gc_timeout`, then is forgotten) ...
    idle_jobs: BTreeMap<JobId, Millis>,
    /// ... and the same, soonest first.
    idle_queue: BTreeSet<(Millis, JobId)>,
    /// Since when each lost worker has been lost (not durable: a recovered dispatcher counts
    /// from its start). One without tasks is forgotten `worker_timeout` after it was lost.
    lost_since: BTreeMap<String, Millis>,
    /// The time of the input being handled (what the indexes above date things with).
    clock: Millis,
    /// Records of the handler running now, emitted as one batch when it returns.
    journal: Vec<Update>,
    /// Batches emitted and not yet taken by [`Dispatcher::poll_output`].
    persist: VecDeque<(Seq, Vec<Update>)>,
    /// The last batch emitted.
    emitted: Seq,
    /// The last batch reported durable.
    persisted: Seq,
    /// Replies in ticket order (their `seq` never decreases along the queue).
    replies: VecDeque<Held>,
    next_ticket: u64,
    events: VecDeque<Event>,
    next_check: Millis,
    /// Coordinated reads: per iteration, the latest round each consumer reported.
    rounds: BTreeMap<IterationId, BTreeMap<Consumer, u64>>,
    /// Coordinated reads: removal votes per task: the round and the consumers that voted.
    removal_votes: BTreeMap<TaskId, (u64, BTreeSet<u64>)>,
}

fn not_found_dataset(id: &str) -> DispatchError {
    DispatchError::NotFound(format!("Dataset id {} not found", bare(id)))
}

fn worker_not_found(addr: &str) -> DispatchError {
    DispatchError::NotFound(format!(
        "Worker with address {} not found: a worker registers with its first heartbeat.",
        bare(addr)
    ))
}

fn uid_mismatch(addr: &str, uid: Option<&str>) -> DispatchError {
    DispatchError::PermissionDenied(format!(
        "worker {} registered with a worker_uid and this request {}: only the worker holding \
         a task may change it (a restarted worker heartbeats with its new uid first)",
        echo(addr),
        if uid.is_some() { "has another one" } else { "has none" }
    ))
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 256
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'=' | b'/'))
}

impl Dispatcher {
    /// A fresh dispatcher. `incarnation` identifies its state in every reply.
    pub fn new(
        config: DispatcherConfig,
        incarnation: String,
        now: Millis,
    ) -> Result<Self, DispatchError> {
        config.validate()?;
        let state = State::new(config.worker_addresses.clone());
        Ok(Self::with_state(config, incarnation, state, now))
    }

    /// A dispatcher recovered from its journal. It keeps the journal's incarnation id
    /// (`incarnation` is used only when the journal is empty). Every known worker and client
    /// counts as heard from at `now`.
    pub fn recover<'a>(
        config: DispatcherConfig,
        incarnation: String,
        now: Millis,
        journal: impl IntoIterator<Item = &'a Update>,
    ) -> Result<Self, DispatchError> {
        config.validate()?;
        let state = State::replay(config.worker_addresses.clone(), journal);
        Ok(Self::with_state(config, incarnation, state, now))
    }

    /// A dispatcher that takes over `state`: the fold of a journal that a standby kept up to
    /// date (with [`apply`](super::state::apply)) while another dispatcher wrote it. Like
    /// [`Dispatcher::recover`] without the replay.
    pub fn resume(
        config: DispatcherConfig,
        incarnation: String,
        now: Millis,
        state: State,
    ) -> Result<Self, DispatchError> {
        config.validate()?;
        Ok(Self::with_state(config, incarnation, state, now))
    }

    fn with_state(
        config: DispatcherConfig,
        incarnation: String,
        mut state: State,
        now: Millis,
    ) -> Self {
        for e in state.heartbeat_index.values_mut() {
            e.seen = Some(now);
        }
        let next_check = now.plus(config.check_interval());
        let mut d = Dispatcher {
            config,
            incarnation,
            state,
            client_deadline: BTreeMap::new(),
            client_expiry: BTreeSet::new(),
            gc_due: BTreeMap::new(),
            gc_queue: BTreeSet::new(),
            idle_jobs: BTreeMap::new(),
            idle_queue: BTreeSet::new(),
            lost_since: BTreeMap::new(),
            clock: now,
            journal: Vec::new(),
            persist: VecDeque::new(),
            emitted: Seq(0),
            persisted: Seq(0),
            replies: VecDeque::new(),
            next_ticket: 0,
            events: VecDeque::new(),
            next_check,
            rounds: BTreeMap::new(),
            removal_votes: BTreeMap::new(),
        };
        // The timers' indexes, from the recovered state (every deadline counts from `now`).
        let clients: Vec<ClientId> = d.state.clients.keys().copied().collect();
        for c in clients {
            d.set_client_deadline(c, now.plus(d.config.client_timeout));
        }
        let iterations: Vec<IterationId> = d.state.iterations.keys().copied().collect();
        for i in iterations {
            d.refresh_gc(i);
        }
        let jobs: Vec<JobId> = d.state.jobs.keys().copied().collect();
        for j in jobs {
            d.refresh_idle_job(j);
        }
        d.lost_since = d
            .state
            .workers
            .values()
            .filter(|w| !w.alive)
            .map(|w| (w.address.clone(), now))
            .collect();
        if d.state.incarnation.is_empty() {
            let incarnation = d.incarnation.clone();
            d.commit(Update::Started { incarnation });
            d.seal();
        } else {
            d.incarnation = d.state.incarnation.clone();
        }
        d
    }

    // --- inputs -------------------------------------------------------------------------------

    /// Takes a request: decides it at `now` (records it causes are applied at once and emitted
    /// as one [`Output::Persist`] batch) and queues its reply, which [`Dispatcher::poll_output`]
    /// gives back, under the returned ticket, once the records emitted so far are persisted.
    pub fn handle_request(&mut self, now: Millis, request: Request) -> Ticket {
        self.clock = self.clock.max(now);
        let reply = self.decide(now, request);
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        self.seal();
        self.replies.push_back(Held { seq: self.emitted, ticket, reply });
        ticket
    }

    /// Runs the timers: releases silent clients, collects idle iterations, and declares
    /// silent workers lost. Call at or after [`Dispatcher::poll_timeout`]; earlier does nothing.
    pub fn handle_timeout(&mut self, now: Millis) {
        self.clock = self.clock.max(now);
        self.run_timers(now);
        self.seal();
    }

    /// The caller made every batch up to `seq` durable: the replies waiting for them can go.
    /// A `seq` never emitted counts as the last one emitted.
    pub fn handle_persisted(&mut self, seq: Seq) {
        self.persisted = self.persisted.max(seq.min(self.emitted));
    }

    // --- outputs ------------------------------------------------------------------------------

    /// The next thing to do: batches to persist first, in order, then the replies whose
    /// records are persisted, in ticket order. `None`: wait for a persisted report or for a
    /// new input.
    pub fn poll_output(&mut self) -> Option<Output> {
        if let Some((seq, records)) = self.persist.pop_front() {
            return Some(Output::Persist { seq, records });
        }
        if self.replies.front().is_some_and(|h| h.seq <= self.persisted) {
            let h = self.replies.pop_front()?;
            return Some(Output::Reply { ticket: h.ticket, reply: h.reply });
        }
        None
    }

    /// The next event (informational: a worker lost, an iteration finished).
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Dispatcher::handle_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Millis {
        self.next_check
    }

    // --- views --------------------------------------------------------------------------------

    /// The state (read-only; for tests and tools: fronts ask with a [`Request`]).
    pub fn state(&self) -> &State {
        &self.state
    }
    /// The configuration.
    pub fn config(&self) -> &DispatcherConfig {
        &self.config
    }
    /// This run's incarnation id.
    pub fn incarnation(&self) -> &str {
        &self.incarnation
    }
    /// The last batch emitted (every reply computed now waits for it).
    pub fn emitted(&self) -> Seq {
        self.emitted
    }
    /// A snapshot record of the whole state (for compaction). It covers every batch up to
    /// [`Dispatcher::emitted`].
    pub fn snapshot(&self) -> Update {
        Update::Snapshot { state: Box::new(self.state.clone()) }
    }

    /// Emits the records of the handler that just ran as one batch.
    fn seal(&mut self) {
        if !self.journal.is_empty() {
            self.emitted = Seq(self.emitted.0 + 1);
            self.persist.push_back((self.emitted, std::mem::take(&mut self.journal)));
        }
    }

    /// The one place a request meets its handler.
    fn decide(&mut self, now: Millis, request: Request) -> Reply {
        Ok(match request {
            Request::WorkerHeartbeat(r) => {
                Response::WorkerHeartbeat(self.worker_heartbeat(now, &r)?)
            }
            Request::WorkerUpdate(r) => Response::WorkerUpdate(self.worker_update(now, &r)?),
            Request::RegisterDataset(r) => Response::DatasetRegistered(DatasetRegistered {
                dataset_id: self.register_dataset(&r)?,
                incarnation: self.incarnation.clone(),
            }),
            Request::CreateJob(r) => Response::JobCreated(JobCreated {
                job_id: self.create_job(&r)?,
                incarnation: self.incarnation.clone(),
            }),
            Request::CreateIteration(job_id, r) => {
                Response::IterationLease(self.create_iteration(now, job_id, &r)?)
            }
            Request::ClientHeartbeat(client_id, r) => {
                Response::ClientHeartbeat(self.client_heartbeat(now, client_id, &r)?)
            }
            Request::ReleaseClient(r) => {
                self.release_client(now, r.client_id)?;
                Response::Released(Released {
                    released: true,
                    incarnation: self.incarnation.clone(),
                })
            }
            Request::GetSplits(iteration_id, r) => {
                Response::Splits(self.get_splits(now, iteration_id, &r)?)
            }
            Request::MaybeRemoveTask(task_id, MaybeRemove { consumer_index, round }) => {
                Response::Removed(Removed {
                    removed: self.maybe_remove_task(task_id, consumer_index, round)?,
                    incarnation: self.incarnation.clone(),
                })
            }
            Request::Version(_) => Response::Version(VersionInfo {
                version: PROTOCOL_VERSION,
                incarnation: self.incarnation.clone(),
                fault_tolerant: self.config.fault_tolerant,
            }),
            Request::Workers(_) => Response::Workers(self.workers()),
            Request::Dataset(r) => Response::Dataset(self.dataset(&r.dataset_id)?),
            Request::Job(r) => Response::Job(self.job_info(r.job_id)?),
            Request::Metrics(_) => Response::Metrics(self.metrics()),
            Request::RegisterTfDataset(r) => Response::DatasetRegistered(DatasetRegistered {
                dataset_id: self.register_tf_dataset(r)?,
                incarnation: self.incarnation.clone(),
            }),
            Request::DisableCompression(r) => {
                Response::CompressionDecision(self.disable_compression(&r)?)
            }
            Request::Status(_) => {
                let seen = |a: &str| self.state.heartbeat_index.get(a).and_then(|e| e.seen);
                Response::Status(Box::new(super::status::report(&self.state, now, seen)))
            }
            Request::TfGetSplit(iteration_id, r) => {
                Response::TfSplit(self.tf_get_split(iteration_id, r)?)
            }
            Request::DeleteDataset(r) => Response::DatasetDeleted(self.delete_dataset(&r)?),
        })
    }

    fn commit(&mut self, update: Update) {
        // Which iterations this update may finish (to report them as events).
        let is_open =
            |s: &State, i: &IterationId| s.iterations.get(i).is_some_and(|it| !it.finished);
        // The common cases watch one iteration: no allocation.
        let one: Option<IterationId> = match &update {
            Update::ProduceSplits { iteration_id, .. } => Some(*iteration_id),
            Update::FinishTask { task_id } => self.state.tasks.get(task_id).map(|t| t.iteration_id),
            _ => None,
        }
        .filter(|i| is_open(&self.state, i));
        // A lost worker's tasks stop blocking their iterations: only those may finish.
        let many: BTreeSet<IterationId> = match &update {
            Update::WorkerLost { address } => self
                .state
                .workers
                .get(address)
                .into_iter()
                .flat_map(|w| &w.tasks)
                .filter_map(|t| self.state.tasks.get(t))
                .map(|t| t.iteration_id)
                .filter(|i| is_open(&self.state, i))
                .collect(),
            _ => BTreeSet::new(),
        };
        // What the timers' indexes must look at again afterwards.
        let mut iteration = None;
        let mut jobs: Vec<JobId> = Vec::new();
        match &update {
            Update::AcquireClient { iteration_id, .. } => iteration = Some(*iteration_id),
            Update::ReleaseClient { client_id, .. } => {
                iteration = self.state.clients.get(client_id).map(|c| c.iteration_id);
            }
            Update::CreateIteration { iteration_id, job_id, .. } => {
                iteration = Some(*iteration_id);
                jobs.push(*job_id);
            }
            Update::GarbageCollectIteration { iteration_id } => {
                iteration = Some(*iteration_id);
                if let Some(it) = self.state.iterations.get(iteration_id) {
                    jobs.push(it.job_id);
                    self.rounds.remove(iteration_id);
                    for t in it.tasks.iter().chain(it.pending.iter().map(|p| &p.task_id)) {
                        self.removal_votes.remove(t);
                    }
                }
            }
            Update::CreateJob { job } => jobs.push(job.id),
            Update::RemoveJob { job_id } => jobs.push(*job_id),
            Update::DeleteDataset { dataset_id } => {
                jobs.extend(self.state.jobs_by_dataset.get(dataset_id).into_iter().flatten());
            }
            Update::WorkerRevived { address, .. } | Update::RemoveWorker { address } => {
                self.lost_since.remove(address);
            }
            Update::WorkerLost { address } => {
                self.lost_since.insert(address.clone(), self.clock);
            }
            _ => {}
        }
        apply(&mut self.state, &update);
        for id in one.into_iter().chain(many) {
            if self.state.iterations.get(&id).is_some_and(|it| it.finished && !it.garbage_collected)
            {
                self.events.push_back(Event::IterationFinished { iteration_id: id });
                // A finished DYNAMIC iteration becomes collectable.
                self.refresh_gc(id);
            }
        }
        if let Some(i) = iteration {
            self.refresh_gc(i);
        }
        for j in jobs {
            self.refresh_idle_job(j);
        }
        self.journal.push(update);
    }

    /// Sets when a client lease expires without a heartbeat.
    fn set_client_deadline(&mut self, client_id: ClientId, at: Millis) {
        if let Some(old) = self.client_deadline.insert(client_id, at) {
            self.client_expiry.remove(&(old, client_id));
        }
        self.client_expiry.insert((at, client_id));
    }

    /// A client lease ended: it has no deadline any more.
    fn clear_client_deadline(&mut self, client_id: ClientId) {
        if let Some(old) = self.client_deadline.remove(&client_id) {
            self.client_expiry.remove(&(old, client_id));
        }
    }

    /// Files the iteration for garbage collection when it is idle (no clients, released at
    /// least once) and collectable (`job_gc_timeout` set; an unfinished DYNAMIC one only with
    /// `gc_dynamic_sharding_jobs`, as TensorFlow, since its split position would be lost: a
    /// finished one has none left to lose), and takes it out otherwise.
    fn refresh_gc(&mut self, id: IterationId) {
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
    fn refresh_idle_job(&mut self, job_id: JobId) {
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

    fn task_def(&self, task: &Task) -> Result<TaskDef, DispatchError> {
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

    fn shard_of(
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
    fn create_task(
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
    fn worker_heartbeat(
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
    fn worker_update(
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

    /// Get-or-register a dataset. With an explicit id that exists, the definitions and
    /// metadata must match. Without an id, a dataset equal to a registered one (definition
    /// and metadata) gets that one's id. A new dataset must fit in `max_dataset_bytes`.
    fn register_dataset(&mut self, req: &RegisterDataset) -> Result<String, DispatchError> {
        // Bounds no definition may exceed (shuffle buffers, batch sizes): refused here rather
        // than failing every task of the dataset on its workers.
        req.dataset
            .validate()
            .map_err(|e| DispatchError::InvalidArgument(e.message().to_owned()))?;
        let metadata = req.metadata.clone().unwrap_or(Value::Null);
        if crate::json::nested_deeper_than(&metadata, crate::json::MAX_NESTING) {
            // Journaled inside a record, deeper metadata could not be replayed.
            return Err(DispatchError::InvalidArgument(format!(
                "metadata nests arrays and objects more than {} levels deep",
                crate::json::MAX_NESTING
            )));
        }
        if let Some(id) = &req.dataset_id {
            if !valid_id(id) {
                return Err(DispatchError::InvalidArgument(format!(
                    "dataset_id {} must be 1 to 256 characters of A-Z a-z 0-9 - _ . = /",
                    echo(id)
                )));
            }
            if let Some(existing) = self.state.datasets.get(id) {
                if existing.spec == req.dataset && existing.metadata == metadata {
                    return Ok(id.clone());
                }
                return Err(DispatchError::InvalidArgument(format!(
                    "Datasets with the same ID should have the same structure, got diff for \
                     dataset ID {id}: the {} differs. To fix this error, make sure you're \
                     registering the same dataset with the same ID.",
                    if existing.spec.is_tensorflow() {
                        "kind (a TensorFlow dataset has this id)"
                    } else if existing.spec == req.dataset {
                        "metadata"
                    } else {
                        "definition"
                    }
                )));
            }
        }
        let (fingerprint, bytes) = footprint_declarative(&req.dataset, &metadata);
        if req.dataset_id.is_none()
            && let Some(id) = self.state.datasets_by_fingerprint.get(&fingerprint).and_then(|ids| {
                ids.iter().find(|id| {
                    self.state
                        .datasets
                        .get(*id)
                        .is_some_and(|d| d.spec == req.dataset && d.metadata == metadata)
                })
            })
        {
            // The same dataset again (TensorFlow's GetOrRegisterDataset): nothing changes.
            return Ok(id.clone());
        }
        self.check_dataset_bytes(bytes)?;
        let id = req.dataset_id.clone().unwrap_or_else(|| self.state.peek_dataset_id());
        self.commit(Update::RegisterDataset {
            dataset_id: id.clone(),
            def: req.dataset.clone(),
            metadata,
        });
        Ok(id)
    }

    /// A new dataset of `bytes` must fit in `max_dataset_bytes`.
    fn check_dataset_bytes(&self, bytes: u64) -> Result<(), DispatchError> {
        let max = self.config.max_dataset_bytes;
        let total = self.state.dataset_bytes.saturating_add(bytes);
        if total > max {
            return Err(DispatchError::ResourceExhausted(format!(
                "the dispatcher's datasets are full: they hold {} bytes (definitions and \
                 metadata encoded as JSON, TensorFlow graphs and element specs) and this \
                 dataset has {bytes} more, past max_dataset_bytes = {max}. Raise it (shardwise \
                 dispatcher --max-dataset-bytes), or register smaller datasets (a `files` \
                 source rather than a long `list`)",
                self.state.dataset_bytes
            )));
        }
        Ok(())
    }

    /// Get-or-register a TensorFlow dataset. An explicit id that exists is the answer when
    /// the metadata matches (TensorFlow's get-or-register compares the metadata, not the
    /// graph, which differs between clients of the same pipeline). Without an id, the same
    /// graph and metadata get the id they have. A new dataset must fit in `max_dataset_bytes`
    /// (its graph and element spec).
    fn register_tf_dataset(&mut self, req: RegisterTfDataset) -> Result<String, DispatchError> {
        let new = req.dataset;
        if let Some(id) = &req.dataset_id {
            if !valid_id(id) {
                return Err(DispatchError::InvalidArgument(format!(
                    "dataset_id {} must be 1 to 256 characters of A-Z a-z 0-9 - _ . = /",
                    echo(id)
                )));
            }
            if let Some(existing) = self.state.datasets.get(id) {
                let what = match existing.spec.tensorflow() {
                    None => "kind (a declarative dataset has this id)",
                    Some(t) if t.element_spec != new.element_spec => "element_spec",
                    Some(t) if t.compression != new.compression => "compression",
                    Some(t) if t.cardinality != new.cardinality => "cardinality",
                    Some(_) => return Ok(id.clone()),
                };
                return Err(DispatchError::InvalidArgument(format!(
                    "Datasets with the same ID should have the same structure, got diff for \
                     dataset ID {id}: the {what} differs. To fix this error, make sure you're \
                     registering the same dataset with the same ID."
                )));
            }
        }
        let (fingerprint, bytes) = footprint_tf(&new);
        if req.dataset_id.is_none()
            && let Some(id) = self.state.datasets_by_fingerprint.get(&fingerprint).and_then(|ids| {
                ids.iter().find(|id| {
                    self.state
                        .datasets
                        .get(*id)
                        .and_then(|d| d.spec.tensorflow())
                        .is_some_and(|t| t.same_content(&new))
                })
            })
        {
            return Ok(id.clone());
        }
        self.check_dataset_bytes(bytes)?;
        let id = req.dataset_id.unwrap_or_else(|| self.state.peek_dataset_id());
        self.commit(Update::RegisterTfDataset { dataset_id: id.clone(), dataset: Box::new(new) });
        Ok(id)
    }

    /// TensorFlow's `DisableCompressionAtRuntime`: the first proposal for a SNAPPY dataset
    /// decides (journaled); later ones get that decision. Other datasets have no compression
    /// to disable (`None`).
    fn disable_compression(
        &mut self,
        req: &DisableCompression,
    ) -> Result<CompressionDecision, DispatchError> {
        let ds = self
            .state
            .datasets
            .get(&req.dataset_id)
            .ok_or_else(|| not_found_dataset(&req.dataset_id))?;
        if ds.spec.tensorflow().is_none_or(|t| t.compression != COMPRESSION_SNAPPY) {
            return Ok(CompressionDecision { compression_disabled: None });
        }
        if let Some(decided) = ds.compression_disabled {
            return Ok(CompressionDecision { compression_disabled: Some(decided) });
        }
        self.commit(Update::DecideCompression {
            dataset_id: req.dataset_id.clone(),
            disabled: req.disable,
        });
        Ok(CompressionDecision { compression_disabled: Some(req.disable) })
    }

    /// TensorFlow's `GetSplit`: the next split of one provider of a TensorFlow DYNAMIC
    /// iteration, journaled before it is answered, so a restarted dispatcher never hands it
    /// out again (at-most-once: TensorFlow workers do not acknowledge splits). A repetition
    /// above the provider's starts it at index 0; one below it, or past the last split, is
    /// `end_of_splits` (`None`).
    fn tf_get_split(
        &mut self,
        iteration_id: IterationId,
        req: TfGetSplit,
    ) -> Result<TfSplit, DispatchError> {
        let it = self.state.iterations.get(&iteration_id).ok_or_else(|| {
            DispatchError::NotFound(format!("Iteration id {iteration_id} not found"))
        })?;
        let Some(cursors) = &it.tf_splits else {
            return Err(DispatchError::FailedPrecondition(if it.splits.is_some() {
                format!(
                    "iteration {iteration_id} is of a declarative dataset: its Shardwise workers \
                     get splits with POST /v1/iterations/{iteration_id}/splits"
                )
            } else {
                format!(
                    "Cannot get split for iteration {iteration_id}, since it is not a \
                     distributed_epoch iteration."
                )
            }));
        };
        let index = usize::try_from(req.split_provider_index)
            .ok()
            .filter(|i| *i < cursors.len())
            .ok_or_else(|| {
            DispatchError::InvalidArgument(format!(
                "split_provider_index {} is out of range: iteration {iteration_id} has {} \
                     split providers",
                req.split_provider_index,
                cursors.len()
            ))
        })?;
        let cursor = cursors[index];
        let provider = self
            .state
            .jobs
            .get(&it.job_id)
            .and_then(|j| self.state.datasets.get(&j.dataset_id))
            .and_then(|d| d.spec.tensorflow())
            .and_then(|t| t.split_providers.as_ref().ok())
            .and_then(|p| p.get(index))
            .copied();
        let Some(provider) = provider else {
            return Err(DispatchError::FailedPrecondition(format!(
                "iteration {iteration_id} has no split provider {index}"
            )));
        };
        if req.repetition < cursor.repetition {
            return Ok(TfSplit { split: None });
        }
        let next = if req.repetition > cursor.repetition { 0 } else { cursor.next_index };
        let Some(split) = provider.split(next) else { return Ok(TfSplit { split: None }) };
        self.commit(Update::TfSplitHandedOut {
            iteration_id,
            split_provider_index: req.split_provider_index,
            repetition: req.repetition,
            index: next,
        });
        Ok(TfSplit { split: Some(split) })
    }

    /// Get-or-create a job. Reusing a name requires the same dataset and parameters.
    fn create_job(&mut self, req: &CreateJob) -> Result<JobId, DispatchError> {
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

    /// Deletes a dataset that no job with iterations uses (jobs without iterations that name
    /// it, tombstones, go with it): its bytes leave the `max_dataset_bytes` budget and its
    /// definition the deduplication index. Journaled.
    fn delete_dataset(&mut self, req: &DeleteDataset) -> Result<DatasetDeleted, DispatchError> {
        let id = req.dataset_id.as_str();
        if !valid_id(id) {
            return Err(DispatchError::InvalidArgument(format!(
                "dataset_id {} must be 1 to 256 characters of A-Z a-z 0-9 - _ . = /",
                echo(id)
            )));
        }
        let ds = self.state.datasets.get(id).ok_or_else(|| not_found_dataset(id))?;
        if let Some(job_id) = self.state.dataset_in_use(id) {
            return Err(DispatchError::FailedPrecondition(format!(
                "dataset {id} is used by job {job_id}, which has iterations: delete it once \
                 every job reading it is garbage-collected (job_gc_timeout after its last \
                 client leaves)"
            )));
        }
        let (_, freed_bytes) = super::state::footprint(&ds.spec, &ds.metadata);
        self.commit(Update::DeleteDataset { dataset_id: id.to_owned() });
        Ok(DatasetDeleted {
            dataset_id: id.to_owned(),
            freed_bytes,
            incarnation: self.incarnation.clone(),
        })
    }

    fn dataset(&self, dataset_id: &str) -> Result<DatasetInfo, DispatchError> {
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

    fn workers(&self) -> WorkersList {
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

    fn job(&self, job_id: JobId) -> Result<&Job, DispatchError> {
        self.state
            .jobs
            .get(&job_id)
            .ok_or_else(|| DispatchError::NotFound(format!("Job with id {job_id} not found")))
    }

    fn job_info(&self, job_id: JobId) -> Result<JobInfo, DispatchError> {
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

    fn metrics(&self) -> MetricsFigures {
        let st = &self.state;
        MetricsFigures {
            workers_alive: st.workers.values().filter(|w| w.alive).count() as u64,
            iterations_open: st.iterations.values().filter(|i| !i.finished).count() as u64,
            splits_handed_out: st.splits_handed_out_total(),
        }
    }

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

    fn create_iteration(
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
    fn client_heartbeat(
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
    fn maybe_remove_task(
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
    fn release_client(&mut self, now: Millis, client_id: ClientId) -> Result<(), DispatchError> {
        if !self.state.clients.contains_key(&client_id) {
            return Err(DispatchError::NotFound(format!(
                "Iteration client id not found: {client_id}"
            )));
        }
        self.clear_client_deadline(client_id);
        self.commit(Update::ReleaseClient { client_id, at: now });
        Ok(())
    }

    /// Get-split (DYNAMIC): acknowledges the worker's finished splits of this iteration
    /// (`acknowledge`, or all it holds), sends again any it still holds, else hands out up to
    /// `max_splits` more: splits of lost workers first, then fresh ones.
    /// The repetition ends for a worker only when none of its splits is in flight anywhere,
    /// so a worker lost later cannot take splits with it.
    fn get_splits(
        &mut self,
        now: Millis,
        iteration_id: IterationId,
        req: &GetSplits,
    ) -> Result<SplitsReply, DispatchError> {
        let max = req.max_splits.unwrap_or(1);
        if max == 0 || max > MAX_SPLITS_PER_CALL {
            return Err(DispatchError::InvalidArgument(format!(
                "max_splits must be in 1..={MAX_SPLITS_PER_CALL}, not {max}"
            )));
        }
        let it = self.state.iterations.get(&iteration_id).ok_or_else(|| {
            DispatchError::NotFound(format!("Iteration id {iteration_id} not found"))
        })?;
        let Some(splits) = &it.splits else {
            return Err(DispatchError::FailedPrecondition(if it.tf_splits.is_some() {
                format!(
                    "iteration {iteration_id} is of a TensorFlow dataset: its TensorFlow workers \
                     get splits with TensorFlow's GetSplit, not this route"
                )
            } else {
                format!(
                    "Cannot get split for iteration {iteration_id}, since it is not a \
                     distributed_epoch iteration."
                )
            }));
        };
        if req.split_provider_index != 0 {
            return Err(DispatchError::InvalidArgument(format!(
                "split_provider_index {} is out of range: iteration {iteration_id} has 1 split \
                 provider",
                req.split_provider_index
            )));
        }
        let worker = req.worker_address.as_str();
        // One probe for the checks and, when they pass, for the last-seen time.
        let Some(w) = self.state.heartbeat_index.get_mut(worker) else {
            return Err(worker_not_found(worker));
        };
        if !w.holds_uid(req.worker_uid.as_deref()) {
            return Err(uid_mismatch(worker, req.worker_uid.as_deref()));
        }
        if !w.alive {
            return Err(DispatchError::FailedPrecondition(format!(
                "worker {worker} was declared lost (no heartbeat for the worker timeout) and \
                 its splits were handed to other workers; send a heartbeat to rejoin"
            )));
        }
        // The worker's open tasks first (a handful), the iteration's whole task list only
        // when none matches (a finished task still entitles the worker to ask).
        let has_task = w
            .tasks()
            .any(|t| self.state.tasks.get(&t).is_some_and(|t| t.iteration_id == iteration_id))
            || it
                .tasks
                .iter()
                .filter_map(|t| self.state.tasks.get(t))
                .any(|t| t.worker_address == worker);
        if !has_task {
            return Err(DispatchError::FailedPrecondition(format!(
                "worker {worker} has no task in iteration {iteration_id}"
            )));
        }
        let r = req.repetition;
        if r > splits.repetition {
            return Err(DispatchError::FailedPrecondition(format!(
                "repetition {r} is ahead of iteration {iteration_id}'s split provider, which is at \
                 repetition {}",
                splits.repetition
            )));
        }
        w.seen = Some(now);
        let held: &[SplitRef] = splits.leases.get(worker).map_or(&[], Vec::as_slice);
        let acked: Vec<SplitRef> = match &req.acknowledge {
            None => held.to_vec(),
            Some(ids) => {
                let parsed: Vec<SplitRef> = ids.iter().map(|id| id.0).collect();
                if parsed.as_slice() == held {
                    parsed // the usual case: the ids of the last reply, in order
                } else if parsed.len() > 16 {
                    let held_set: std::collections::HashSet<&SplitRef> = held.iter().collect();
                    let mut seen = std::collections::HashSet::with_capacity(parsed.len());
                    parsed.into_iter().filter(|s| held_set.contains(s) && seen.insert(*s)).collect()
                } else {
                    let mut out = Vec::with_capacity(parsed.len());
                    for s in parsed {
                        if held.contains(&s) && !out.contains(&s) {
                            out.push(s);
                        }
                    }
                    out
                }
            }
        };
        let still_held: Vec<SplitRef> = if acked.len() == held.len() {
            Vec::new() // acked is a duplicate-free subset of held
        } else if held.len() > 16 {
            let acked_set: std::collections::HashSet<&SplitRef> = acked.iter().collect();
            held.iter().filter(|s| !acked_set.contains(s)).copied().collect()
        } else {
            held.iter().filter(|s| !acked.contains(s)).copied().collect()
        };
        let mut assigned: Vec<SplitRef> = Vec::new();
        let mut advance_to = None;
        let mut end_of_splits = false;
        let mut retry_after_ms = None;
        if still_held.is_empty() {
            assigned.extend(
                splits.requeue.iter().filter(|s| s.repetition == r).take(max as usize).copied(),
            );
            if r == splits.repetition {
                let mut next = splits.next_index;
                while assigned.len() < max as usize && next < splits.total {
                    assigned.push(SplitRef { repetition: r, index: next });
                    next += 1;
                }
            }
            if assigned.is_empty() {
                // Is any split of this repetition leased elsewhere or waiting to go again?
                let pending_elsewhere = splits.requeue.iter().any(|s| s.repetition == r)
                    || splits
                        .leases
                        .iter()
                        .any(|(w, l)| w != worker && l.iter().any(|s| s.repetition == r));
                if pending_elsewhere {
                    retry_after_ms = Some(super::wire::SPLIT_RETRY_AFTER_MS);
                } else {
                    end_of_splits = true;
                    if r == splits.repetition {
                        advance_to = Some(r + 1);
                    }
                }
            }
        }
        // Unacknowledged splits are sent again (a retried request whose reply was lost gets
        // the same splits); otherwise the newly assigned ones.
        let sent: &[SplitRef] = if still_held.is_empty() { &assigned } else { &still_held };
        let job_split_size =
            self.state.jobs.get(&it.job_id).map_or(DEFAULT_SPLIT_SIZE, |j| j.split_size);
        let dataset_id = self.state.jobs.get(&it.job_id).map_or("", |j| j.dataset_id.as_str());
        let Some(ds) = self.state.datasets.get(dataset_id) else {
            return Err(not_found_dataset(dataset_id));
        };
        let (values, positions): (Vec<Split>, Vec<SplitPositions>) = match ds.spec.declarative() {
            Some(def) => sent
                .iter()
                .filter_map(|s| {
                    split_of(&def.source, job_split_size, splits.plan.as_ref(), s.index)
                })
                .unzip(),
            None => (Vec::new(), Vec::new()),
        };
        let split_ids = sent.iter().map(|s| SplitId(*s)).collect();
        if !assigned.is_empty() || !acked.is_empty() || advance_to.is_some() {
            self.commit(Update::ProduceSplits {
                iteration_id,
                worker_address: worker.to_owned(),
                acked,
                assigned,
                advance_to,
            });
        }
        Ok(SplitsReply {
            splits: values,
            split_ids,
            positions,
            end_of_splits,
            retry_after_ms,
            incarnation: self.incarnation.clone(),
        })
    }

    fn run_timers(&mut self, now: Millis) {
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

/// Split `index` of a DYNAMIC iteration over `source` (of `plan`'s splits when it was resumed)
/// and where it lies in the source's positions.
fn split_of(
    source: &SourceDef,
    split_size: u64,
    plan: Option<&ResumePlan>,
    index: u64,
) -> Option<(Split, SplitPositions)> {
    let at = match plan {
        Some(plan) => plan.split(index)?,
        None => match chunk_at(source, split_size, index) {
            Some((start, stop)) => SplitPositions { start, stop, skip: 0 },
            None => SplitPositions { start: index, stop: index.checked_add(1)?, skip: 0 },
        },
    };
    let split = match source {
        SourceDef::Range(_) | SourceDef::List(_) => Split::Chunk { start: at.start, stop: at.stop },
        // One position per split: the path or item at it.
        SourceDef::Files(_) | SourceDef::Splits(_) => Split::Item(split_at(source, 1, at.start)?),
    };
    Some((split, at))
}
