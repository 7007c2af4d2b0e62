//! One task on a worker: the producer that drives its [`Pipeline`] and the bounded buffer
//! clients read from.
//!
//! The producer runs as a tokio task, started by the first read (as TensorFlow builds a task's
//! iterator on the first `GetElement`: a task no client reads takes no splits). It pauses
//! while `capacity` elements wait in the buffer (backpressure), reads files with tokio's fs,
//! and for DYNAMIC sharding fetches splits in batches with explicit acknowledgements: the ids
//! of a batch are acknowledged, and more splits asked for, only once every element produced
//! so far has been handed to a client. Elements still inside a transform's own buffer at that
//! point (a `shuffle` buffer or a partial `batch` spanning splits) are not covered: if the
//! worker dies before producing them they are lost, as in TensorFlow. A worker killed with
//! splits in flight loses nothing else: those splits were not acknowledged, so the dispatcher
//! hands them out again and their elements that clients had already read come again
//! (duplicates, never losses).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use shardwise_core::dataset::{Pipeline, Sharding, SourceDef, Step, approx_bytes};
use shardwise_core::dispatch::ShardingPolicy;
use shardwise_core::dispatch::wire::{
    GetSplits, SPLIT_RETRY_AFTER_MS, Split, SplitId, SplitsReply, TaskDef,
};
use shardwise_core::position::{OriginRun, SplitPositions};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Shared;
use crate::http::client::{Backoff, CallError};
use crate::http::{Code, Problem};

/// Elements produced per step of the producer before it looks at the buffer again.
const PRODUCE_CHUNK: usize = 256;
/// The most splits one get-split call asks for.
const MAX_SPLITS: usize = 64;

/// What a read found.
#[derive(Debug)]
pub(crate) struct ReadResult {
    pub(crate) elements: Vec<Value>,
    pub(crate) end_of_sequence: bool,
    /// Where `elements` come from (see [`crate::http::elements::Elements::origin`]).
    pub(crate) origin: Option<Vec<OriginRun>>,
}

/// A task the dispatcher assigned to this worker.
#[derive(Debug)]
pub(crate) struct Task {
    pub(crate) def: TaskDef,
    /// The most elements waiting in the buffer.
    capacity: usize,
    /// The most bytes (as `approx_bytes` weighs them) waiting in the buffer: production pauses
    /// there, though one element always fits (and a coordinated read's round must).
    capacity_bytes: u64,
    /// Elements a round of coordinated reads takes at once (1 otherwise).
    round_size: usize,
    state: Mutex<TaskState>,
    /// Elements arrived, a round advanced, or the task's status changed.
    readable: Notify,
    /// Room in the buffer, the buffer drained, or the task stopped.
    writable: Notify,
}

#[derive(Debug, Default)]
struct TaskState {
    started: bool,
    producer: Option<tokio::task::JoinHandle<()>>,
    /// Produced elements with their weights.
    buf: VecDeque<(Value, u64)>,
    /// The sum of the weights in `buf`.
    buf_bytes: u64,
    /// Where the elements of `buf` come from, as runs covering them in order: `Some` for a
    /// DYNAMIC task of a dataset whose read positions are exact (see [`Task::tracks_origins`]).
    origins: Option<VecDeque<OriginRun>>,
    produced: u64,
    served: u64,
    /// The pipeline ended (the buffer may still hold elements).
    ended: bool,
    /// The pipeline failed; served after the buffered elements.
    failure: Option<Problem>,
    /// The dispatcher acknowledged the completion report.
    acked: bool,
    stopped: bool,
    /// Coordinated reads.
    rounds: Option<Rounds>,
    /// DYNAMIC: splits fetched and not yet acknowledged (for the status page).
    splits_held: u64,
}

#[derive(Debug)]
struct Rounds {
    round: u64,
    slots: Option<Vec<Value>>,
    taken: Vec<bool>,
}

/// Takes the first `n` elements of `buf`, whose weights sum to `buf_bytes`.
fn take_front(buf: &mut VecDeque<(Value, u64)>, buf_bytes: &mut u64, n: usize) -> Vec<Value> {
    let n = n.min(buf.len());
    let mut taken = Vec::with_capacity(n);
    for (element, weight) in buf.drain(..n) {
        *buf_bytes = buf_bytes.saturating_sub(weight);
        taken.push(element);
    }
    taken
}

impl TaskState {
    /// Produced elements no client has taken yet.
    fn unread(&self) -> usize {
        let in_round = self
            .rounds
            .as_ref()
            .and_then(|r| r.slots.as_ref().map(|_| r.taken.iter().filter(|t| !**t).count()))
            .unwrap_or(0);
        self.buf.len() + in_round
    }
}

/// Why a task the worker knew is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// It completed and the dispatcher deleted it: reads answer end of sequence.
    Completed,
    /// The dispatcher deleted it before it completed.
    Deleted,
    /// The dispatcher restarted with a new incarnation.
    Lost,
}

impl Gone {
    /// The answer to a read of a gone task.
    pub(crate) fn answer(self, task_id: impl std::fmt::Display) -> Result<ReadResult, Problem> {
        match self {
            Gone::Completed => {
                Ok(ReadResult { elements: Vec::new(), end_of_sequence: true, origin: None })
            }
            Gone::Deleted => Err(Problem::new(
                Code::FailedPrecondition,
                format!(
                    "task {task_id} was deleted by the dispatcher before it completed (its \
                     iteration finished, was released or was garbage collected)"
                ),
            )),
            Gone::Lost => Err(Problem::new(
                Code::FailedPrecondition,
                format!(
                    "task {task_id} was lost: the dispatcher restarted without its state (a new \
                     incarnation); start the iteration again"
                ),
            )),
        }
    }
}

/// The sharding a task definition asks for.
fn sharding_of(def: &TaskDef) -> Result<Sharding, Problem> {
    let shard = || match (def.num_workers, def.worker_index) {
        (Some(num_workers), Some(worker_index)) => Ok((num_workers, worker_index)),
        _ => Err(Problem::new(
            Code::FailedPrecondition,
            format!(
                "task {} has the static sharding policy {} but no worker index",
                def.task_id,
                def.processing_mode.as_str()
            ),
        )),
    };
    Ok(match def.processing_mode {
        ShardingPolicy::Off => Sharding::Off,
        ShardingPolicy::Dynamic => Sharding::Dynamic,
        ShardingPolicy::File => {
            let (num_workers, worker_index) = shard()?;
            Sharding::File { num_workers, worker_index }
        }
        ShardingPolicy::Data => {
            let (num_workers, worker_index) = shard()?;
            Sharding::Data { num_workers, worker_index }
        }
        ShardingPolicy::FileOrData => {
            let (num_workers, worker_index) = shard()?;
            Sharding::FileOrData { num_workers, worker_index }
        }
        ShardingPolicy::Hint => {
            let (num_workers, worker_index) = shard()?;
            Sharding::Hint { num_workers, worker_index }
        }
    })
}

fn task_failed(task_id: impl std::fmt::Display, code: Code, detail: &str) -> Problem {
    // A failed task is never `NOT_FOUND`: clients retry that code for tasks the worker does
    // not know yet.
    let code = if code == Code::NotFound { Code::FailedPrecondition } else { code };
    Problem::new(code, format!("task {task_id} failed: {detail}"))
}

/// The most consumers of a coordinated read a worker serves (a round holds one element per
/// consumer).
pub(crate) const MAX_CONSUMERS: u64 = 10_000;

impl Task {
    /// A task that buffers at most `capacity` elements and about `capacity_bytes` bytes (but
    /// always one round of a coordinated read, of at most [`MAX_CONSUMERS`] elements).
    pub(crate) fn new(def: TaskDef, capacity: usize, capacity_bytes: u64) -> Task {
        let round_size =
            usize::try_from(def.num_consumers.unwrap_or(1).clamp(1, MAX_CONSUMERS)).unwrap_or(1);
        let capacity = capacity.max(round_size).max(1);
        Task {
            def,
            capacity,
            capacity_bytes,
            round_size,
            state: Mutex::default(),
            readable: Notify::new(),
            writable: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, TaskState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `(buffered, produced, served)` for the metrics.
    pub(crate) fn counters(&self) -> (u64, u64, u64) {
        let st = self.lock();
        (st.unread() as u64, st.produced, st.served)
    }

    /// Starts the producer if no read did yet.
    fn ensure_started(self: &Arc<Self>, shared: &Arc<Shared>) {
        let mut st = self.lock();
        if !st.started && !st.stopped {
            st.started = true;
            st.producer = Some(tokio::spawn(Arc::clone(self).produce(Arc::clone(shared))));
        }
    }

    /// Stops the producer and wakes every reader (they answer as `gone` says).
    pub(crate) fn stop(&self) {
        let mut st = self.lock();
        st.stopped = true;
        if let Some(p) = st.producer.take() {
            p.abort();
        }
        drop(st);
        self.readable.notify_waiters();
        self.writable.notify_waiters();
    }

    /// What the worker's status route shows of this task.
    pub(crate) fn status(&self) -> super::routes::TaskStatus {
        use super::routes::{TaskRunState, TaskStatus};
        let st = self.lock();
        let state = if st.failure.is_some() {
            TaskRunState::Failed
        } else if st.ended {
            TaskRunState::Finished
        } else if st.started {
            TaskRunState::Running
        } else {
            TaskRunState::Waiting
        };
        TaskStatus {
            task_id: self.def.task_id,
            iteration_id: self.def.iteration_id,
            job_id: self.def.job_id,
            dataset_id: self.def.dataset_id.clone(),
            sharding_policy: self.def.processing_mode,
            state,
            elements_produced: st.produced,
            elements_served: st.served,
            buffered_elements: st.unread() as u64,
            buffered_bytes: st.buf_bytes,
            buffer_capacity: self.capacity as u64,
            buffer_capacity_bytes: self.capacity_bytes,
            splits_held: st.splits_held,
        }
    }

    /// How a deleted task reads: completed if it ended and every element was taken.
    pub(crate) fn gone_kind(&self) -> Gone {
        let st = self.lock();
        if st.acked || (st.ended && st.unread() == 0 && st.failure.is_none()) {
            Gone::Completed
        } else {
            Gone::Deleted
        }
    }

    /// Ended, every element taken, not yet acknowledged: the completion report is due.
    pub(crate) fn ready_to_report(&self) -> bool {
        let st = self.lock();
        st.ended && !st.acked && st.failure.is_none() && st.unread() == 0 && !st.stopped
    }

    /// The dispatcher acknowledged the completion report: end of sequence may be served.
    pub(crate) fn mark_acked(&self) {
        self.lock().acked = true;
        self.readable.notify_waiters();
    }

    /// Runs `attempt` under the task's lock, again each time the task becomes readable,
    /// until it answers or `wait` is over (an empty read). A stopped task answers that it is
    /// gone.
    async fn await_readable(
        &self,
        wait: Duration,
        mut attempt: impl FnMut(&mut TaskState) -> Option<Result<ReadResult, Problem>>,
    ) -> Result<ReadResult, Problem> {
        let deadline = Instant::now() + wait;
        loop {
            let notified = self.readable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.lock();
                if st.stopped {
                    drop(st);
                    return self.gone_kind().answer(self.def.task_id);
                }
                if let Some(answer) = attempt(&mut st) {
                    return answer;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(ReadResult {
                    elements: Vec::new(),
                    end_of_sequence: false,
                    origin: None,
                });
            }
        }
    }

    /// First-come-first-served read of up to `max` elements, waiting at most `wait` for one.
    pub(crate) async fn read(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        max: usize,
        wait: Duration,
    ) -> Result<ReadResult, Problem> {
        self.ensure_started(shared);
        self.await_readable(wait, |st| {
            if !st.buf.is_empty() {
                let elements = take_front(&mut st.buf, &mut st.buf_bytes, max);
                let n = elements.len() as u64;
                let origin = st.origins.as_mut().map(|runs| OriginRun::take_front(runs, n));
                st.served += elements.len() as u64;
                self.writable.notify_waiters();
                if st.ended && st.buf.is_empty() && st.failure.is_none() {
                    shared.report_now.notify_one();
                }
                return Some(Ok(ReadResult { elements, end_of_sequence: false, origin }));
            }
            if let Some(p) = &st.failure {
                return Some(Err(p.clone()));
            }
            if st.ended {
                if st.acked {
                    return Some(Ok(ReadResult {
                        elements: Vec::new(),
                        end_of_sequence: true,
                        origin: None,
                    }));
                }
                shared.report_now.notify_one();
            }
            None
        })
        .await
    }

    /// Coordinated read: consumer `consumer`'s element of round `round`. The first request
    /// sets the first round (every consumer reads a task from the same round on). A round starts when
    /// `num_consumers` elements are buffered; each consumer gets its own (asking again in the
    /// same round gets the same one), and the next round starts once every consumer took
    /// its element.
    pub(crate) async fn read_round(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        consumer: u64,
        round: u64,
        wait: Duration,
    ) -> Result<ReadResult, Problem> {
        self.ensure_started(shared);
        let n = self.def.num_consumers.unwrap_or(1).max(1);
        if n > MAX_CONSUMERS {
            return Err(Problem::new(
                Code::ResourceExhausted,
                format!(
                    "this worker serves coordinated reads of at most {MAX_CONSUMERS} consumers; \
                     the job has num_consumers {n}"
                ),
            ));
        }
        let (Ok(n_us), Ok(i)) = (usize::try_from(n), usize::try_from(consumer)) else {
            return Err(Problem::new(Code::InvalidArgument, "consumer_index is out of range"));
        };
        self.await_readable(wait, |st| {
            // The first request names the first round: a task that joined late is promoted at
            // a round negotiated after its definition was sent, so the definition's
            // `starting_round` may be stale.
            let rr = st.rounds.get_or_insert_with(|| Rounds {
                round,
                slots: None,
                taken: vec![false; n_us],
            });
            if round < rr.round {
                return Some(Err(Problem::new(
                    Code::FailedPrecondition,
                    format!(
                        "Consumer {consumer} requested data for round {round}, but the current \
                         round has already reached {}. This may indicate that the consumer was \
                         restarted with the same iteration name.",
                        rr.round
                    ),
                )));
            }
            if round > rr.round {
                return None;
            }
            if rr.slots.is_none() {
                if st.buf.len() >= n_us {
                    rr.slots = Some(take_front(&mut st.buf, &mut st.buf_bytes, n_us));
                    self.writable.notify_waiters();
                } else if let Some(p) = &st.failure {
                    return Some(Err(p.clone()));
                } else if st.ended {
                    return Some(Err(Problem::new(
                        Code::FailedPrecondition,
                        "Encountered end of sequence on a round-robin read iterator. Please \
                         ensure that the dataset used for round-robin reading has infinite \
                         cardinality, e.g. by adding a .repeat() transformation at the end.",
                    )));
                }
            }
            let slots = rr.slots.as_ref()?;
            let element = slots.get(i).cloned().unwrap_or(Value::Null);
            if let Some(t) = rr.taken.get_mut(i)
                && !*t
            {
                *t = true;
                st.served += 1;
            }
            if rr.taken.iter().all(|t| *t) {
                rr.round += 1;
                rr.slots = None;
                rr.taken.iter_mut().for_each(|t| *t = false);
                self.readable.notify_waiters();
            }
            Some(Ok(ReadResult { elements: vec![element], end_of_sequence: false, origin: None }))
        })
        .await
    }

    fn fail(&self, problem: Problem) {
        tracing::warn!(task_id = %self.def.task_id, detail = %problem.detail, "task failed");
        self.lock().failure = Some(problem);
        self.readable.notify_waiters();
    }

    /// Buffers produced `elements` weighing `weight`, which `runs` cover when origins are
    /// tracked (`None`: an element without origin came, and origins are no longer tracked).
    fn push(&self, elements: Vec<(Value, u64)>, weight: u64, runs: Option<Vec<OriginRun>>) {
        let mut st = self.lock();
        st.produced += elements.len() as u64;
        st.buf_bytes = st.buf_bytes.saturating_add(weight);
        st.buf.extend(elements);
        match (runs, st.origins.as_mut()) {
            (Some(runs), Some(origins)) => origins.extend(runs),
            _ => st.origins = None,
        }
        drop(st);
        self.readable.notify_waiters();
    }

    fn end(&self, shared: &Shared) {
        let mut st = self.lock();
        st.ended = true;
        let drained = st.unread() == 0;
        drop(st);
        self.readable.notify_waiters();
        if drained {
            shared.report_now.notify_one();
        }
    }

    /// Waits on `writable` until `check` answers. The notification is armed before the state
    /// is checked (under the lock), so a change in between is never missed.
    async fn wait_writable<T>(&self, check: impl Fn(&TaskState) -> Option<T>) -> T {
        loop {
            let notified = self.writable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(answer) = check(&self.lock()) {
                return answer;
            }
            notified.await;
        }
    }

    /// Waits for room in the buffer (see [`Room`]).
    async fn room(&self) -> Room {
        self.wait_writable(|st| {
            if st.stopped {
                return Some(Room::Stopped);
            }
            let len = st.buf.len();
            if len >= self.capacity {
                return None;
            }
            if st.buf_bytes < self.capacity_bytes || len == 0 {
                return Some(Room::Fits {
                    elements: self.capacity - len,
                    bytes: self.capacity_bytes - st.buf_bytes.min(self.capacity_bytes),
                });
            }
            if len < self.round_size {
                // The round still needs elements but the buffer is full: it would never start.
                return Some(Room::Failed(task_failed(
                    self.def.task_id,
                    Code::ResourceExhausted,
                    &format!(
                        "a round of {} coordinated reads weighs more than this worker's \
                         --max-buffer-bytes ({} bytes)",
                        self.round_size, self.capacity_bytes
                    ),
                )));
            }
            None
        })
        .await
    }

    /// Waits until clients took every element produced so far; `false` once the task stopped.
    async fn drained(&self) -> bool {
        self.wait_writable(|st| {
            if st.stopped { Some(false) } else { (st.unread() == 0).then_some(true) }
        })
        .await
    }

    fn is_stopped(&self) -> bool {
        self.lock().stopped
    }

    async fn until_stopped(&self) {
        self.wait_writable(|st| st.stopped.then_some(())).await;
    }

    /// The producer: drives the pipeline into the buffer until it ends, fails or is stopped.
    async fn produce(self: Arc<Self>, shared: Arc<Shared>) {
        let id = self.def.task_id;
        let mut pipeline = match sharding_of(&self.def).and_then(|s| {
            // The dispatcher sends TensorFlow datasets' tasks to TensorFlow workers only.
            let def = self.def.dataset.declarative().ok_or_else(|| {
                task_failed(id, Code::FailedPrecondition, "a TensorFlow dataset's task")
            })?;
            Pipeline::with_limits(def, s, shared.limits)
                .map_err(|e| task_failed(id, e.code(), e.message()))
        }) {
            Ok(p) => p,
            Err(p) => return self.fail(p),
        };
        let coordinated = self.def.num_consumers.is_some();
        let mut tracked = self.tracks_origins();
        if tracked {
            self.lock().origins = Some(VecDeque::new());
        }
        let mut held: Vec<SplitId> = Vec::new();
        loop {
            let (room, room_bytes) = match self.room().await {
                Room::Fits { elements, bytes } => (elements, bytes),
                Room::Stopped => return,
                Room::Failed(p) => return self.fail(p),
            };
            // Up to `room` elements, stopping once they weigh `room_bytes` (at least one).
            let (mut elements, mut weight, mut stop) = (Vec::new(), 0u64, None);
            while elements.len() < room.min(PRODUCE_CHUNK) && weight < room_bytes {
                match pipeline.next() {
                    Step::Element(e) => {
                        let w = approx_bytes(&e);
                        weight = weight.saturating_add(w);
                        elements.push((e, w));
                    }
                    other => {
                        stop = Some(other);
                        break;
                    }
                }
            }
            // The chunk's origins, made once per chunk by the pipeline.
            let runs = pipeline.take_origins();
            if tracked {
                let covered = runs.as_ref().map(|r| r.iter().map(|r| r.count).sum::<u64>());
                // Elements of a split without positions (an older dispatcher): no origins.
                tracked = covered == Some(elements.len() as u64);
            }
            if !elements.is_empty() {
                self.push(elements, weight, if tracked { runs } else { None });
            }
            match stop {
                None | Some(Step::Element(_)) => {}
                // A long stretch without an element (a large skip): let the runtime serve
                // others, and let a stopped task end here.
                Some(Step::Yield) => tokio::task::yield_now().await,
                Some(Step::End) => return self.end(&shared),
                Some(Step::Error(e)) => return self.fail(task_failed(id, e.code(), e.message())),
                Some(Step::NeedFile { path }) => match shared.files.read(&path).await {
                    Ok(bytes) => pipeline.provide_file(&path, &bytes),
                    Err(p) => return self.fail(task_failed(id, p.code, &p.detail)),
                },
                Some(Step::NeedSplit { repetition }) => {
                    // Acknowledge the previous splits only once clients took their elements
                    // (coordinated reads take whole rounds, which may span splits: they
                    // acknowledge at once).
                    if !coordinated && !self.drained().await {
                        return;
                    }
                    let fetched = self.get_splits(&shared, repetition, &mut held).await;
                    self.lock().splits_held = held.len() as u64;
                    match fetched {
                        SplitFetch::Splits(splits, positions) => {
                            // Positions are parallel to the splits (none from older
                            // dispatchers).
                            let mut positions = positions.into_iter();
                            for s in splits {
                                let at = positions.next();
                                pipeline.provide_split_at(repetition, Some((Value::from(s), at)));
                            }
                        }
                        SplitFetch::EndOfSplits => pipeline.provide_split(repetition, None),
                        SplitFetch::Stopped => return,
                        SplitFetch::Failed(p) => return self.fail(p),
                    }
                }
            }
        }
    }

    /// Whether the task's elements get origins (read positions): a DYNAMIC task of a
    /// dataset whose positions are exact, read first come first served (a coordinated read's
    /// rounds interleave consumers, whose positions would not be the reader's).
    fn tracks_origins(&self) -> bool {
        self.def.processing_mode == ShardingPolicy::Dynamic
            && self.def.num_consumers.is_none()
            && self.def.dataset.declarative().is_some_and(|d| d.check_resumable().is_ok())
    }

    fn max_splits(&self) -> u32 {
        let n = match self.def.dataset.declarative().map(|d| &d.source) {
            None | Some(SourceDef::Files(_)) => 1,
            Some(SourceDef::Splits(_)) => self.capacity.min(MAX_SPLITS),
            Some(SourceDef::Range(_) | SourceDef::List(_)) => self
                .capacity
                .div_ceil(usize::try_from(self.def.split_size.max(1)).unwrap_or(usize::MAX))
                .clamp(1, MAX_SPLITS),
        };
        u32::try_from(n).unwrap_or(1)
    }

    /// Get-split with the previous batch acknowledged, retried while no split is free or the
    /// dispatcher is unavailable (see [`SplitFetch`]).
    async fn get_splits(
        &self,
        shared: &Shared,
        repetition: u64,
        held: &mut Vec<SplitId>,
    ) -> SplitFetch {
        let path = format!("/v1/iterations/{}/splits", self.def.iteration_id);
        let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(2));
        let mut preconditions = 0;
        loop {
            if self.is_stopped() {
                return SplitFetch::Stopped;
            }
            let req = GetSplits {
                worker_address: shared.address.clone(),
                worker_uid: Some(shared.uid.clone()),
                repetition,
                split_provider_index: 0,
                max_splits: Some(self.max_splits()),
                acknowledge: Some(held.clone()),
            };
            let wait = match shared.dispatcher.post::<_, SplitsReply>(&path, &req).await {
                Ok(reply) => {
                    // Whatever we held is acknowledged now.
                    held.clear();
                    if !reply.splits.is_empty() {
                        *held = reply.split_ids;
                        return SplitFetch::Splits(reply.splits, reply.positions);
                    }
                    if reply.end_of_splits {
                        return SplitFetch::EndOfSplits;
                    }
                    backoff.reset();
                    let after = reply.retry_after_ms.unwrap_or(SPLIT_RETRY_AFTER_MS);
                    Duration::from_millis(after.clamp(1, 10_000))
                }
                Err(e) if e.is_retryable() => {
                    tracing::debug!(task_id = %self.def.task_id, error = %e, "get-split: retrying");
                    backoff.next_delay()
                }
                // A worker the dispatcher declared lost must heartbeat to rejoin; anything else
                // that persists fails the task.
                Err(CallError::Problem(p))
                    if p.code == Code::FailedPrecondition && preconditions < 5 =>
                {
                    preconditions += 1;
                    tracing::warn!(task_id = %self.def.task_id, detail = %p.detail, "get-split refused; heartbeating and retrying");
                    shared.heartbeat_now.notify_one();
                    backoff.next_delay()
                }
                Err(e) => {
                    let detail = format!("get-split failed: {e}");
                    return SplitFetch::Failed(task_failed(self.def.task_id, e.code(), &detail));
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.until_stopped() => return SplitFetch::Stopped,
            }
        }
    }
}

/// What [`Task::room`] found: room for this many elements and bytes, or why production ends.
#[derive(Debug)]
enum Room {
    /// The buffer takes up to `elements` more elements weighing up to `bytes`.
    Fits { elements: usize, bytes: u64 },
    /// The task stopped meanwhile.
    Stopped,
    /// The task cannot go on (a coordinated read's round does not fit in the byte bound).
    Failed(Problem),
}

/// What one get-split round trip (with its retries) gave the producer.
#[derive(Debug)]
enum SplitFetch {
    /// Splits to read (the previous batch is acknowledged), and where they lie (parallel to
    /// them; empty from older dispatchers).
    Splits(Vec<Split>, Vec<SplitPositions>),
    /// The repetition is over for this worker.
    EndOfSplits,
    /// The task stopped meanwhile.
    Stopped,
    /// The dispatcher refused in a way that is not retried: the task fails with this.
    Failed(Problem),
}
