//! The reader: one iteration's elements, read from the tasks the client heartbeats list.

use std::collections::{HashMap, VecDeque};

use crate::dispatch::wire::{ClientHeartbeat, ClientHeartbeatReply, TaskInfo};
use crate::dispatch::{ClientId, Millis, TargetWorkers, TaskId};

use serde_json::Value;

use super::{Backoff, Batch, Call, CallFailure, Event, ReadError, Reply, Rows, Transmit};

/// The shortest gap between heartbeats the reader asks for at the end of an epoch.
pub const NUDGE_GAP: Millis = Millis(20);
/// How long the reader waits before asking again to release its lease.
pub const RELEASE_RETRY: Millis = Millis(50);
/// How often the reader asks to release its lease at most.
pub const RELEASE_ATTEMPTS: u32 = 2;

/// What a [`Reader`] reads and how: the iteration lease it holds and the client's options.
#[derive(Debug, Clone)]
pub struct ReaderConfig {
    /// The client id of the iteration lease.
    pub client_id: ClientId,
    /// The dispatcher's incarnation when the lease was taken: a heartbeat answered by another
    /// one means the dispatcher restarted without its state.
    pub incarnation: String,
    /// Coordinated reads (`num_consumers`): this consumer's index. `None`: first come, first
    /// served.
    pub consumer_index: Option<u64>,
    /// Which workers to read.
    pub target_workers: TargetWorkers,
    /// With `LOCAL`: the addresses of the workers in this process.
    pub local_workers: Vec<String>,
    /// The most element reads in flight at once (at least 1).
    pub max_outstanding_requests: usize,
    /// The most elements asked for per read.
    pub elements_per_request: u32,
    /// How often to heartbeat.
    pub heartbeat_interval: Millis,
    /// How long a worker may answer `NOT_FOUND` for a task the dispatcher listed.
    pub unknown_task_timeout: Millis,
    /// How long retryable failures are retried.
    pub unavailable_timeout: Millis,
}

/// One task as this client reads it.
#[derive(Debug)]
struct TaskRead {
    info: TaskInfo,
    /// The address reads go to (the one the task was first listed with).
    address: String,
    done: bool,
    in_flight: bool,
    retry_at: Option<Millis>,
    backoff: Backoff,
    unknown_since: Option<Millis>,
    unavailable_since: Option<Millis>,
}

impl TaskRead {
    fn new(info: TaskInfo) -> TaskRead {
        TaskRead {
            address: info.worker_address.clone(),
            done: info.worker_lost,
            info,
            in_flight: false,
            retry_at: None,
            backoff: Backoff::new(Millis(5), Millis(500)),
            unknown_since: None,
            unavailable_since: None,
        }
    }

    fn ready(&self, now: Millis) -> bool {
        !self.done && !self.in_flight && self.retry_at.is_none_or(|at| at <= now)
    }

    fn succeeded(&mut self) {
        self.backoff.reset();
        self.unknown_since = None;
        self.unavailable_since = None;
    }

    /// Schedules a retry of a failed read, or says why it is over.
    fn retry_or_fail<E: CallFailure>(
        &mut self,
        config: &ReaderConfig,
        now: Millis,
        error: E,
    ) -> Result<(), ReadError<E>> {
        if self.done {
            return Ok(()); // its worker was declared lost meanwhile
        }
        let call = Call::Elements(self.info.task_id);
        let context = || {
            format!("GET /v1/tasks/{}/elements at {}", self.info.task_id, self.info.worker_address)
        };
        if error.is_not_found() {
            let since = *self.unknown_since.get_or_insert(now);
            if now.since(since) >= config.unknown_task_timeout {
                return Err(ReadError::Refused { call, context: context(), error });
            }
        } else if error.is_retryable() {
            let since = *self.unavailable_since.get_or_insert(now);
            if now.since(since) >= config.unavailable_timeout {
                let retried_for = now.since(since);
                return Err(ReadError::Unavailable {
                    call,
                    context: context(),
                    error,
                    retried_for,
                });
            }
        } else {
            return Err(ReadError::Refused { call, context: context(), error });
        }
        self.retry_at = Some(now.plus(self.backoff.next_delay()));
        Ok(())
    }
}

/// The heartbeat loop's state.
#[derive(Debug)]
struct Heartbeats {
    in_flight: bool,
    /// When the next one is due.
    next_at: Millis,
    /// Send the next one as soon as the one in flight (if any) is answered.
    nudged: bool,
    backoff: Backoff,
    failing_since: Option<Millis>,
    /// The last task list and its version: the dispatcher leaves an unchanged list out.
    known: Option<(u64, Vec<TaskInfo>)>,
}

impl Heartbeats {
    fn due(&self, now: Millis) -> bool {
        !self.in_flight && (self.nudged || self.next_at <= now)
    }
}

/// First come, first served reads of every task.
#[derive(Debug, Default)]
struct Spread {
    tasks: Vec<TaskRead>,
    index: HashMap<TaskId, usize>,
    /// A task was not read (`target_workers`).
    skipped_any: bool,
    /// The dispatcher said `iteration_finished`.
    finished: bool,
    /// Where the round robin goes on.
    next: usize,
    in_flight: usize,
    last_nudge: Option<Millis>,
    /// When to nudge the heartbeats again at the end of the epoch.
    nudge_at: Option<Millis>,
}

/// Coordinated reads: round by round, one element per task in task order, one read at a time.
#[derive(Debug, Default)]
struct Rounds {
    /// The next round to read.
    round: u64,
    /// The last round started, which is what the heartbeats report (a consumer waiting at a
    /// block at R reports R - 1).
    current: u64,
    /// The block this consumer agreed to.
    limit: Option<u64>,
    nudged_for: Option<u64>,
    /// The tasks of the round under way still to read after `read`.
    queue: VecDeque<TaskInfo>,
    /// The task being read in the round under way.
    read: Option<TaskRead>,
}

impl Rounds {
    /// TensorFlow's `TryBlockRound`: a block at `R` is taken when this consumer has not
    /// reached `R` yet (otherwise the dispatcher will move the target); no block lifts it.
    fn apply_block(&mut self, block_round: Option<u64>) {
        match block_round {
            Some(r) if self.current < r => self.limit = Some(r),
            Some(_) => {}
            None => self.limit = None,
        }
    }
}

#[derive(Debug)]
enum Phase {
    Reading,
    /// The read is over: releasing the lease, then the outcome.
    Releasing {
        in_flight: bool,
        attempts: u32,
        retry_at: Millis,
    },
    Done,
}

/// The client's reader of one iteration as a sans-IO state machine: see the
/// [module docs](super) for its loop.
///
/// It asks for calls with [`Reader::poll_transmit`] (heartbeats, element reads, the release
/// of the lease), is told their outcomes ([`Reader::handle_heartbeat`],
/// [`Reader::handle_elements`], [`Reader::handle_released`], [`Reader::handle_error`]) and the
/// time ([`Reader::handle_timeout`] at [`Reader::poll_timeout`]), and hands out what it read
/// with [`Reader::poll_event`]. `E` is the transport's error, handed back in a
/// [`ReadError`] when it ends the read; `P` is a read's payload (JSON elements by default),
/// which the reader only counts ([`Rows`]) and hands out as it came.
#[derive(Debug)]
pub struct Reader<E, P = Vec<Value>> {
    config: ReaderConfig,
    now: Millis,
    heartbeats: Heartbeats,
    /// The last heartbeat reply (its tasks kept when the dispatcher left them out).
    reply: Option<ClientHeartbeatReply>,
    spread: Spread,
    rounds: Rounds,
    phase: Phase,
    events: VecDeque<Event<E, P>>,
    /// The end or the error, handed out after the lease is released.
    outcome: Option<Event<E, P>>,
    /// The most element reads in flight the caller allows now ([`Reader::set_read_limit`]).
    read_limit: usize,
}

/// A task as the reader reads it ([`Reader::tasks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskReadInfo {
    /// The task.
    pub task_id: TaskId,
    /// The worker its reads go to.
    pub worker_address: String,
    /// It answered its end of sequence, or its worker was declared lost.
    pub done: bool,
}

impl<E: CallFailure, P: Rows> Reader<E, P> {
    /// A reader of the iteration `config` holds a lease of, created at `now`; its first
    /// heartbeat is due at once.
    pub fn new(mut config: ReaderConfig, now: Millis) -> Reader<E, P> {
        config.max_outstanding_requests = config.max_outstanding_requests.max(1);
        Reader {
            config,
            now,
            heartbeats: Heartbeats {
                in_flight: false,
                next_at: now,
                nudged: false,
                backoff: Backoff::new(Millis(10), Millis(1_000)),
                failing_since: None,
                known: None,
            },
            reply: None,
            spread: Spread::default(),
            rounds: Rounds::default(),
            phase: Phase::Reading,
            events: VecDeque::new(),
            outcome: None,
            read_limit: usize::MAX,
        }
    }

    /// Allows at most `limit` element reads in flight from now on (besides
    /// [`ReaderConfig::max_outstanding_requests`]): a caller that holds reads fetched ahead
    /// lowers it to keep no more than it wants ahead, 0 stops new reads until it is raised.
    /// Reads in flight go on; heartbeats are not limited.
    pub fn set_read_limit(&mut self, limit: usize) {
        self.read_limit = limit;
    }

    /// Asks for at most `count` elements (1 to [`MAX_ELEMENTS`](super::wire::MAX_ELEMENTS))
    /// per read from now on; reads in flight keep their size.
    pub fn set_elements_per_request(&mut self, count: u32) {
        self.config.elements_per_request = count.clamp(1, super::wire::MAX_ELEMENTS);
    }

    /// The tasks this reader reads (or read), in the order it learnt them.
    pub fn tasks(&self) -> Vec<TaskReadInfo> {
        let info = |t: &TaskRead| TaskReadInfo {
            task_id: t.info.task_id,
            worker_address: t.address.clone(),
            done: t.done,
        };
        if self.config.consumer_index.is_some() {
            let r = &self.rounds;
            r.read
                .iter()
                .map(info)
                .chain(r.queue.iter().map(|i| TaskReadInfo {
                    task_id: i.task_id,
                    worker_address: i.worker_address.clone(),
                    done: i.worker_lost,
                }))
                .collect()
        } else {
            self.spread.tasks.iter().map(info).collect()
        }
    }

    /// The most element reads in flight allowed now.
    fn max_reads(&self) -> usize {
        self.config.max_outstanding_requests.min(self.read_limit)
    }

    /// The configuration it reads with.
    pub fn config(&self) -> &ReaderConfig {
        &self.config
    }

    /// Still reading: element reads and heartbeats in flight are wanted. Once it is not, their
    /// outcomes are ignored (the caller may cancel them).
    pub fn is_reading(&self) -> bool {
        matches!(self.phase, Phase::Reading)
    }

    /// Over: the lease is released (or given up on) and nothing more will be asked; what
    /// [`Reader::poll_event`] still holds is the rest of the read.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// The last round this consumer started (coordinated reads).
    pub fn current_round(&self) -> u64 {
        self.rounds.current
    }

    /// The next call to make, if one is due now.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let now = self.now;
        match &mut self.phase {
            Phase::Done => return None,
            Phase::Releasing { in_flight, attempts, retry_at } => {
                if *in_flight || *attempts >= RELEASE_ATTEMPTS || *retry_at > now {
                    return None;
                }
                *in_flight = true;
                *attempts += 1;
                return Some(Transmit::Release { client_id: self.config.client_id });
            }
            Phase::Reading => {}
        }
        if self.heartbeats.due(now) {
            return Some(self.heartbeat());
        }
        if !self.events.is_empty() {
            // The caller has not taken what was read yet: no more reads until it does.
            return None;
        }
        if self.config.consumer_index.is_some() {
            self.next_round_read()
        } else {
            self.next_spread_read()
        }
    }

    fn heartbeat(&mut self) -> Transmit {
        let hb = &mut self.heartbeats;
        hb.in_flight = true;
        hb.nudged = false;
        let mut request = if self.config.consumer_index.is_some() {
            ClientHeartbeat {
                current_round: Some(self.rounds.current),
                blocked_round: self.rounds.limit,
                ..ClientHeartbeat::default()
            }
        } else {
            ClientHeartbeat::default()
        };
        request.known_tasks_version = hb.known.as_ref().map(|(v, _)| *v);
        Transmit::Heartbeat { client_id: self.config.client_id, request }
    }

    /// Round robin over the tasks that are ready.
    fn next_spread_read(&mut self) -> Option<Transmit> {
        let max_reads = self.max_reads();
        let s = &mut self.spread;
        let n = s.tasks.len();
        if s.in_flight >= max_reads || n == 0 {
            return None;
        }
        let i = (0..n).map(|k| (s.next + k) % n).find(|&i| s.tasks[i].ready(self.now))?;
        let t = &mut s.tasks[i];
        t.in_flight = true;
        t.retry_at = None;
        s.in_flight += 1;
        s.next = (i + 1) % n;
        Some(Transmit::GetElements {
            task: t.info.task_id,
            worker_address: t.address.clone(),
            max: Some(self.config.elements_per_request),
            round: None,
        })
    }

    /// The read of the round under way, starting the next round when it may.
    fn next_round_read(&mut self) -> Option<Transmit> {
        let consumer_index = self.config.consumer_index?;
        let r = &mut self.rounds;
        let t = r.read.as_mut()?;
        if !t.ready(self.now) || self.read_limit == 0 {
            return None;
        }
        t.in_flight = true;
        t.retry_at = None;
        Some(Transmit::GetElements {
            task: t.info.task_id,
            worker_address: t.address.clone(),
            max: None,
            round: Some((consumer_index, r.round)),
        })
    }

    /// What was read, then the end of the read or why it failed (after the lease is
    /// released).
    pub fn poll_event(&mut self) -> Option<Event<E, P>> {
        self.events.pop_front()
    }

    /// When [`Reader::handle_timeout`] is next due (`None`: nothing is timed; wait for the
    /// calls in flight). A deadline at or before the current time means a call is due now.
    pub fn poll_timeout(&self) -> Option<Millis> {
        match &self.phase {
            Phase::Done => return None,
            Phase::Releasing { in_flight, attempts, retry_at } => {
                return (!*in_flight && *attempts < RELEASE_ATTEMPTS).then_some(*retry_at);
            }
            Phase::Reading => {}
        }
        if self.transmit_ready() {
            return Some(self.now);
        }
        let hb = &self.heartbeats;
        let mut at = (!hb.in_flight).then_some(hb.next_at);
        let mut earliest = |t: Option<Millis>| {
            if let Some(t) = t {
                at = Some(at.map_or(t, |a| a.min(t)));
            }
        };
        if self.config.consumer_index.is_some() {
            earliest(self.rounds.read.as_ref().filter(|t| !t.in_flight).and_then(|t| t.retry_at));
        } else {
            earliest(self.spread.nudge_at);
            for t in self.spread.tasks.iter().filter(|t| !t.done && !t.in_flight) {
                earliest(t.retry_at);
            }
        }
        at
    }

    /// Whether [`Reader::poll_transmit`] has a call now (while reading).
    fn transmit_ready(&self) -> bool {
        if self.heartbeats.due(self.now) {
            return true;
        }
        if !self.events.is_empty() {
            return false;
        }
        if self.config.consumer_index.is_some() {
            self.read_limit > 0 && self.rounds.read.as_ref().is_some_and(|t| t.ready(self.now))
        } else {
            let s = &self.spread;
            s.in_flight < self.max_reads() && s.tasks.iter().any(|t| t.ready(self.now))
        }
    }

    /// Time passed: `now` is the caller's clock.
    pub fn handle_timeout(&mut self, now: Millis) {
        self.tick(now);
        self.update();
    }

    /// A heartbeat's reply.
    pub fn handle_heartbeat(&mut self, now: Millis, mut reply: ClientHeartbeatReply) {
        self.tick(now);
        if !self.is_reading() || !self.heartbeats.in_flight {
            return;
        }
        let hb = &mut self.heartbeats;
        hb.in_flight = false;
        match &hb.known {
            Some((v, tasks)) if reply.tasks_unchanged && *v == reply.tasks_version => {
                reply.tasks.clone_from(tasks);
            }
            _ => hb.known = Some((reply.tasks_version, reply.tasks.clone())),
        }
        hb.failing_since = None;
        hb.backoff.reset();
        if reply.incarnation != self.config.incarnation {
            let was = self.config.incarnation.clone();
            return self.fail(ReadError::DispatcherRestarted { was, now: reply.incarnation });
        }
        hb.next_at = now.plus(self.config.heartbeat_interval);
        if self.config.consumer_index.is_some() {
            self.rounds.apply_block(reply.block_round);
        } else {
            self.merge_tasks(&reply);
        }
        self.reply = Some(reply);
        self.update();
    }

    /// A read's reply from the worker of `task` (an [`Elements`](super::Elements) answer, or a
    /// [`Reply`] of another payload).
    pub fn handle_elements(&mut self, now: Millis, task: TaskId, reply: impl Into<Reply<P>>) {
        let reply = reply.into();
        self.tick(now);
        if !self.is_reading() {
            return;
        }
        if self.config.consumer_index.is_some() {
            let r = &mut self.rounds;
            let Some(t) = r.read.as_mut().filter(|t| t.info.task_id == task && t.in_flight) else {
                return;
            };
            t.in_flight = false;
            if !reply.elements.is_empty() {
                let batch = Batch { elements: reply.elements, origin: None };
                self.events.push_back(Event::Batch(batch));
                self.next_task();
            } else if reply.end_of_sequence {
                self.next_task();
            }
            // Nothing within the worker's wait: ask again.
        } else {
            let s = &mut self.spread;
            let Some(t) = s.index.get(&task).map(|&i| &mut s.tasks[i]).filter(|t| t.in_flight)
            else {
                return;
            };
            t.in_flight = false;
            s.in_flight -= 1;
            t.succeeded();
            if reply.end_of_sequence {
                t.done = true;
            }
            if !reply.elements.is_empty() {
                let batch = Batch { elements: reply.elements, origin: reply.origin };
                self.events.push_back(Event::Batch(batch));
            }
        }
        self.update();
    }

    /// The lease was released.
    pub fn handle_released(&mut self, now: Millis) {
        self.tick(now);
        if let Phase::Releasing { in_flight: true, .. } = self.phase {
            self.done();
        }
    }

    /// `call` failed with `error`.
    pub fn handle_error(&mut self, now: Millis, call: Call, error: E) {
        self.tick(now);
        match call {
            Call::Release => {
                if let Phase::Releasing { in_flight, attempts, retry_at } = &mut self.phase {
                    if !*in_flight {
                        return;
                    }
                    *in_flight = false;
                    if error.is_retryable() && *attempts < RELEASE_ATTEMPTS {
                        *retry_at = now.plus(RELEASE_RETRY);
                    } else {
                        self.done(); // best effort
                    }
                }
            }
            _ if !self.is_reading() => {}
            Call::Heartbeat => {
                let hb = &mut self.heartbeats;
                if !hb.in_flight {
                    return;
                }
                hb.in_flight = false;
                let client = self.config.client_id;
                let context = format!("POST /v1/clients/{client}/heartbeat");
                if !error.is_retryable() {
                    return self.fail(ReadError::Refused { call, context, error });
                }
                let since = *hb.failing_since.get_or_insert(now);
                if now.since(since) >= self.config.unavailable_timeout {
                    let retried_for = now.since(since);
                    return self.fail(ReadError::Unavailable { call, context, error, retried_for });
                }
                hb.next_at = now.plus(hb.backoff.next_delay());
                self.update();
            }
            Call::Elements(task) => {
                let outcome = if self.config.consumer_index.is_some() {
                    let lost = self.reply.as_ref().is_some_and(|r| {
                        r.tasks.iter().any(|x| x.task_id == task && x.worker_lost)
                    });
                    let r = &mut self.rounds;
                    let Some(t) = r.read.as_mut().filter(|t| t.info.task_id == task && t.in_flight)
                    else {
                        return;
                    };
                    t.in_flight = false;
                    if lost {
                        self.next_task();
                        Ok(())
                    } else {
                        t.retry_or_fail(&self.config, now, error)
                    }
                } else {
                    let s = &mut self.spread;
                    let Some(t) =
                        s.index.get(&task).map(|&i| &mut s.tasks[i]).filter(|t| t.in_flight)
                    else {
                        return;
                    };
                    t.in_flight = false;
                    s.in_flight -= 1;
                    t.retry_or_fail(&self.config, now, error)
                };
                match outcome {
                    Ok(()) => self.update(),
                    Err(e) => self.fail(e),
                }
            }
        }
    }

    /// The caller is gone (it dropped the stream): stop reading and release the lease, with
    /// no outcome to hand out.
    pub fn close(&mut self, now: Millis) {
        self.tick(now);
        if self.is_reading() {
            self.end(None);
        }
    }

    fn tick(&mut self, now: Millis) {
        self.now = self.now.max(now);
    }

    fn fail(&mut self, error: ReadError<E>) {
        self.end(Some(Event::Failed(error)));
    }

    fn end(&mut self, outcome: Option<Event<E, P>>) {
        self.outcome = outcome;
        self.heartbeats.in_flight = false;
        self.spread = Spread::default();
        self.rounds.read = None;
        self.rounds.queue.clear();
        self.phase = Phase::Releasing { in_flight: false, attempts: 0, retry_at: self.now };
    }

    fn done(&mut self) {
        self.phase = Phase::Done;
        self.events.extend(self.outcome.take());
    }

    /// Folds a heartbeat's tasks into the tasks read.
    fn merge_tasks(&mut self, reply: &ClientHeartbeatReply) {
        let s = &mut self.spread;
        s.finished |= reply.iteration_finished;
        for info in &reply.tasks {
            match s.index.get(&info.task_id) {
                Some(&i) => {
                    let t = &mut s.tasks[i];
                    if info.worker_lost {
                        t.done = true;
                    }
                    t.info = info.clone();
                }
                None if should_read(&self.config, info) => {
                    s.index.insert(info.task_id, s.tasks.len());
                    s.tasks.push(TaskRead::new(info.clone()));
                }
                None => s.skipped_any = true,
            }
        }
    }

    /// After every input: the end of the read, the end-of-epoch nudges, the next round.
    fn update(&mut self) {
        if !self.is_reading() {
            return;
        }
        if self.config.consumer_index.is_some() {
            self.start_round();
            return;
        }
        if self.reply.is_none() {
            return; // no heartbeat answered yet
        }
        let s = &mut self.spread;
        s.nudge_at = None;
        if !s.tasks.is_empty() && s.tasks.iter().all(|t| t.done) && s.in_flight == 0 {
            if s.finished || s.skipped_any {
                return self.end(Some(Event::End));
            }
            // Every task read is over, so the dispatcher acknowledged their completion: ask it
            // now (at most every NUDGE_GAP) whether the iteration finished.
            let due = s.last_nudge.map_or(self.now, |t| t.plus(NUDGE_GAP));
            if self.now >= due {
                s.last_nudge = Some(self.now);
                self.heartbeats.nudged = true;
            } else {
                s.nudge_at = Some(due);
            }
        } else if s.tasks.is_empty() && (s.finished || s.skipped_any) {
            // An iteration without tasks, or every task skipped by `target_workers`.
            self.end(Some(Event::End));
        }
    }

    /// Coordinated reads: the task after the current one, or the end of the round.
    fn next_task(&mut self) {
        let r = &mut self.rounds;
        r.read = r.queue.pop_front().map(TaskRead::new);
        if r.read.is_none() {
            r.round += 1;
            self.start_round();
        }
    }

    /// Coordinated reads: starts the next round when none is under way and it may.
    fn start_round(&mut self) {
        let r = &mut self.rounds;
        if r.read.is_some() {
            return;
        }
        let blocked = r.limit.is_some_and(|limit| r.round >= limit);
        let round = r.round;
        let mut tasks: VecDeque<TaskInfo> = self
            .reply
            .as_ref()
            .map(|reply| {
                reply
                    .tasks
                    .iter()
                    .filter(|t| t.starting_round <= round && !t.worker_lost)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if blocked || tasks.is_empty() {
            // Tell the dispatcher at once that this consumer reached the block (once).
            if blocked && r.nudged_for != r.limit {
                r.nudged_for = r.limit;
                self.heartbeats.nudged = true;
            }
            return; // until the next heartbeat
        }
        r.current = round;
        r.read = tasks.pop_front().map(TaskRead::new);
        r.queue = tasks;
    }
}

/// Whether `target_workers` lets this client read `info`'s worker.
fn should_read(config: &ReaderConfig, info: &TaskInfo) -> bool {
    match config.target_workers {
        TargetWorkers::Any => true,
        TargetWorkers::Local => config.local_workers.contains(&info.worker_address),
        TargetWorkers::Auto => {
            config.consumer_index.is_some()
                || !info.worker_tags.iter().any(|t| t.eq_ignore_ascii_case("COLOCATED"))
        }
    }
}
