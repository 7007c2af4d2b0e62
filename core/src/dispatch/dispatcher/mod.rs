//! The dispatcher state machine: requests and timer ticks in, journal records and replies out.
//!
//! Here: the [`Dispatcher`] itself, its inputs and outputs, and the one place a request meets
//! its handler and a record is applied. The handlers live by concern in the submodules:
//! workers, datasets, jobs, iterations (and their clients), splits, read-only queries, and
//! the timers.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::config::DispatcherConfig;
use super::error::DispatchError;
use super::protocol::{Output, Reply, Request, Response, Seq, Ticket};
use super::state::{State, Update, apply};
use super::types::{ClientId, IterationId, JobId, Millis, TaskId};
use super::wire::{
    DatasetRegistered, JobCreated, MaybeRemove, PROTOCOL_VERSION, Released, Removed, VersionInfo,
};
use crate::echo::{bare, echo};

mod datasets;
mod iterations;
mod jobs;
mod queries;
mod splits;
mod timers;
mod workers;

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
}
