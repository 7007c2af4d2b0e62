//! [`Task`]: one task on a worker, as a state machine.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;

use super::{Action, Event, FetchSplits, Gone, Read, ReadReply, RunState, SplitFailure, TaskError};
use super::{MAX_CONSUMERS, MAX_SPLITS, PRODUCE_CHUNK, Produced, TaskView};
use crate::code::Code;
use crate::dataset::{
    Chunk, Element, Limits, Outputs, OutputsRequest, Pipeline, RowsRequest, Sharding, SourceDef,
    Step,
};
use crate::dispatch::wire::{SPLIT_RETRY_AFTER_MS, SplitId, SplitsReply, TaskDef};
use crate::dispatch::{Millis, ShardingPolicy};
use crate::position::OriginRun;

/// The first wait after a get-split failed (then doubling).
const BACKOFF_INITIAL: Millis = Millis(10);
/// The longest wait between get-split attempts that failed.
const BACKOFF_MAX: Millis = Millis(2_000);
/// The longest `retry_after_ms` a get-split reply may ask for.
const RETRY_AFTER_MAX_MS: u64 = 10_000;
/// How often in a row a get-split refused with `FAILED_PRECONDITION` is retried (after a
/// heartbeat: the dispatcher may have declared this worker lost) before the task fails.
const MAX_PRECONDITION_RETRIES: u32 = 5;

/// One task of a worker: its pipeline, its bounded buffer, its DYNAMIC splits and its reads.
///
/// See [the module](super) for the inputs, the outputs and the run loop.
#[derive(Debug)]
pub struct Task {
    def: Arc<TaskDef>,
    /// The most elements waiting in the buffer.
    capacity: usize,
    /// The most bytes (as `approx_bytes` weighs them) waiting in the buffer: production
    /// pauses there, though one element always fits (and a coordinated read's round must).
    capacity_bytes: u64,
    /// Elements a round of coordinated reads takes at once (1 otherwise).
    round_size: usize,
    limits: Limits,
    /// A read came: the pipeline runs.
    started: bool,
    stopped: bool,
    /// Built by the first read; dropped once the task stopped.
    pipeline: Option<Pipeline>,
    /// What the pipeline waits for.
    need: Need,
    /// Elements get origins: a DYNAMIC task of a dataset whose read positions are exact,
    /// until a split without positions came.
    tracked: bool,
    /// DYNAMIC: the ids of the splits fetched last, acknowledged by the next get-split.
    held: Vec<SplitId>,
    /// No get-split before this time (a retry's backoff, or the dispatcher's `retry_after_ms`).
    retry_at: Option<Millis>,
    /// The next backoff after a failed get-split.
    backoff: Millis,
    /// Get-splits refused with `FAILED_PRECONDITION` in a row.
    preconditions: u32,
    /// Produced elements with their weights.
    buf: VecDeque<(Element, u64)>,
    /// The sum of the weights in `buf`.
    buf_bytes: u64,
    /// Where the elements of `buf` come from, as runs covering them in order (`Some` while
    /// `tracked`).
    origins: Option<VecDeque<OriginRun>>,
    produced: u64,
    served: u64,
    /// The pipeline ended (the buffer may still hold elements).
    ended: bool,
    /// The pipeline failed; served after the buffered elements.
    failure: Option<TaskError>,
    /// The dispatcher acknowledged the completion report.
    acked: bool,
    /// Coordinated reads.
    rounds: Option<Rounds>,
    /// The splits' outputs come from the driver's producer ([`Task::with_producer`]).
    external: bool,
    /// Events not yet polled (a set: at most one of each).
    events: u8,
}

/// What the pipeline waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Need {
    /// Nothing: it runs while the buffer has room.
    Nothing,
    /// The next splits of this repetition (`asked`: a get-split is under way).
    Splits { repetition: u64, asked: bool },
    /// This file's contents (`asked`: its read is under way).
    File { path: String, asked: bool },
    /// Rows of this columnar file (`asked`: their read is under way).
    Rows { request: RowsRequest, asked: bool },
    /// A split's next outputs from the driver's producer (`asked`: under way).
    Outputs { request: OutputsRequest, asked: bool },
}

#[derive(Debug)]
struct Rounds {
    round: u64,
    slots: Option<Vec<Element>>,
    taken: Vec<bool>,
}

/// Takes the first `n` elements of `buf`, whose weights sum to `buf_bytes`.
fn take_front(buf: &mut VecDeque<(Element, u64)>, buf_bytes: &mut u64, n: usize) -> Vec<Element> {
    let n = n.min(buf.len());
    let mut taken = Vec::with_capacity(n);
    for (element, weight) in buf.drain(..n) {
        *buf_bytes = buf_bytes.saturating_sub(weight);
        taken.push(element);
    }
    taken
}

/// The sharding a task definition asks for.
fn sharding_of(def: &TaskDef) -> Result<Sharding, TaskError> {
    let shard = || match (def.num_workers, def.worker_index) {
        (Some(num_workers), Some(worker_index)) => Ok((num_workers, worker_index)),
        _ => Err(TaskError::new(
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

impl Task {
    /// A task that buffers at most `capacity` elements and about `limits.max_buffered_bytes`
    /// bytes (but always one round of a coordinated read, of at most [`MAX_CONSUMERS`]
    /// elements); its pipeline runs with `limits`. Nothing runs before the first read.
    pub fn new(def: impl Into<Arc<TaskDef>>, capacity: usize, limits: Limits) -> Task {
        let def = def.into();
        let round_size =
            usize::try_from(def.num_consumers.unwrap_or(1).clamp(1, MAX_CONSUMERS)).unwrap_or(1);
        let capacity = capacity.max(round_size).max(1);
        Task {
            def,
            capacity,
            capacity_bytes: limits.max_buffered_bytes,
            round_size,
            limits,
            started: false,
            stopped: false,
            pipeline: None,
            need: Need::Nothing,
            tracked: false,
            held: Vec::new(),
            retry_at: None,
            backoff: BACKOFF_INITIAL,
            preconditions: 0,
            buf: VecDeque::new(),
            buf_bytes: 0,
            origins: None,
            produced: 0,
            served: 0,
            ended: false,
            failure: None,
            acked: false,
            rounds: None,
            events: 0,
            external: false,
        }
    }

    /// [`Task::new`] for a worker whose own producer (a user's function) makes each split's
    /// outputs instead of the dataset's pipeline ([`Pipeline::external`]): the task asks for
    /// them with [`Action::ProduceOutputs`]. Served as other tasks, with read positions under
    /// DYNAMIC sharding; coordinated reads, static sharding policies and datasets with
    /// transforms fail the task when it starts.
    pub fn with_producer(def: impl Into<Arc<TaskDef>>, capacity: usize, limits: Limits) -> Task {
        Task { external: true, ..Task::new(def, capacity, limits) }
    }

    /// The task's definition.
    pub fn def(&self) -> &Arc<TaskDef> {
        &self.def
    }

    // --- outputs ------------------------------------------------------------------------------

    /// The next thing the driver should do for this task, if any. An action is handed out
    /// once; its answer comes back through [`Task::handle_splits`] /
    /// [`Task::handle_split_error`] or [`Task::handle_file`] ([`Action::Produce`] is handed out
    /// while the buffer has room: call [`Task::produce`]). `None`: wait for the next input
    /// (a read, or [`Task::poll_timeout`]).
    pub fn poll_action(&mut self) -> Option<Action> {
        if !self.started || self.stopped || self.ended || self.failure.is_some() {
            return None;
        }
        match &mut self.need {
            Need::Nothing => self.room().map(|_| Action::Produce),
            Need::File { asked: true, .. }
            | Need::Splits { asked: true, .. }
            | Need::Rows { asked: true, .. }
            | Need::Outputs { asked: true, .. } => None,
            Need::Outputs { request, asked } => {
                *asked = true;
                Some(Action::ProduceOutputs(request.clone()))
            }
            Need::Rows { request, asked } => {
                *asked = true;
                Some(Action::ReadRows(request.clone()))
            }
            Need::File { path, asked } => {
                *asked = true;
                Some(Action::ReadFile { path: path.clone() })
            }
            Need::Splits { repetition, asked } => {
                // Acknowledge the previous splits only once clients took their elements
                // (coordinated reads take whole rounds, which may span splits: they
                // acknowledge at once).
                let coordinated = self.def.num_consumers.is_some();
                let unread = self.buf.len() + round_unread(self.rounds.as_ref());
                if (!coordinated && unread > 0) || self.retry_at.is_some() {
                    return None;
                }
                *asked = true;
                let repetition = *repetition;
                Some(Action::FetchSplits(FetchSplits {
                    repetition,
                    max_splits: self.max_splits(),
                    acknowledge: self.held.clone(),
                }))
            }
        }
    }

    /// The next event for the driver, if any (each is reported once until it happens again).
    pub fn poll_event(&mut self) -> Option<Event> {
        let bit = self.events & self.events.wrapping_neg();
        self.events &= !bit;
        Event::ALL.into_iter().find(|e| e.bit() == bit && bit != 0)
    }

    /// When [`Task::handle_timeout`] is next due (a get-split waits for its retry), if ever.
    pub fn poll_timeout(&self) -> Option<Millis> {
        if self.stopped { None } else { self.retry_at }
    }

    fn emit(&mut self, event: Event) {
        self.events |= event.bit();
    }

    // --- inputs -------------------------------------------------------------------------------

    /// Time passed: a get-split whose retry is due may go out.
    pub fn handle_timeout(&mut self, now: Millis) {
        if self.retry_at.is_some_and(|at| at <= now) {
            self.retry_at = None;
            self.emit(Event::Runnable);
        }
    }

    /// Runs the pipeline for one chunk ([`PRODUCE_CHUNK`] elements at most, fewer when the
    /// buffer's room ends first or the pipeline asks for something, ends, fails or yields).
    /// Does nothing unless [`Action::Produce`] is due.
    pub fn produce(&mut self) -> Produced {
        let mut produced = Produced { elements: 0, yielded: false };
        if !self.started || self.stopped || self.ended || self.failure.is_some() {
            return produced;
        }
        if self.need != Need::Nothing {
            return produced;
        }
        let Some((room, room_bytes)) = self.room() else { return produced };
        let Some(pipeline) = self.pipeline.as_mut() else { return produced };
        // Up to `room` elements, stopping once they weigh `room_bytes` (at least one).
        let (mut elements, mut weight, mut stop) = (Vec::new(), 0u64, None);
        while elements.len() < room.min(PRODUCE_CHUNK) && weight < room_bytes {
            match pipeline.next() {
                Step::Element(e) => {
                    let w = e.approx_bytes();
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
        if self.tracked {
            let covered = runs.as_ref().map(|r| r.iter().map(|r| r.count).sum::<u64>());
            // Elements of a split without positions (an older dispatcher): no origins.
            self.tracked = covered == Some(elements.len() as u64);
        }
        produced.elements = elements.len();
        if !elements.is_empty() {
            let runs = if self.tracked { runs } else { None };
            self.push(elements, weight, runs);
        }
        let id = self.def.task_id;
        match stop {
            None | Some(Step::Element(_)) => {}
            // A long stretch without an element (a large skip): the driver lets others run.
            Some(Step::Yield) => produced.yielded = true,
            Some(Step::End) => {
                self.ended = true;
                self.emit(Event::Readable);
                if self.unread() == 0 {
                    self.emit(Event::CompletionDue);
                }
            }
            Some(Step::Error(e)) => self.fail(TaskError::failed(id, e.code(), e.message())),
            Some(Step::NeedFile { path }) => self.need = Need::File { path, asked: false },
            Some(Step::NeedRows(request)) => self.need = Need::Rows { request, asked: false },
            Some(Step::NeedOutputs(request)) => self.need = Need::Outputs { request, asked: false },
            Some(Step::NeedSplit { repetition }) => {
                self.need = Need::Splits { repetition, asked: false };
            }
        }
        produced
    }

    /// The answer to [`Action::FetchSplits`]: the splits it named are acknowledged, and the
    /// new ones (with their positions) go to the pipeline, or the repetition is over, or
    /// none is free yet (asked again after the reply's `retry_after_ms`). An answer no
    /// get-split is waiting for is ignored.
    pub fn handle_splits(&mut self, now: Millis, reply: SplitsReply) {
        let Need::Splits { repetition, asked: true } = self.need else { return };
        if self.stopped {
            return;
        }
        // Whatever we held is acknowledged now.
        self.held.clear();
        self.emit(Event::Runnable);
        if reply.splits.is_empty() && !reply.end_of_splits {
            let after = reply.retry_after_ms.unwrap_or(SPLIT_RETRY_AFTER_MS);
            self.backoff = BACKOFF_INITIAL;
            self.retry_at = Some(now.plus(Millis(after.clamp(1, RETRY_AFTER_MAX_MS))));
            self.need = Need::Splits { repetition, asked: false };
            return;
        }
        self.backoff = BACKOFF_INITIAL;
        self.preconditions = 0;
        self.need = Need::Nothing;
        let Some(pipeline) = self.pipeline.as_mut() else { return };
        if reply.splits.is_empty() {
            pipeline.provide_split(repetition, None);
            return;
        }
        self.held = reply.split_ids;
        // Positions are parallel to the splits (none from older dispatchers).
        let mut positions = reply.positions.into_iter();
        for s in reply.splits {
            let at = positions.next();
            pipeline.provide_split_at(repetition, Some((Value::from(s), at)));
        }
    }

    /// A get-split of [`Action::FetchSplits`] got no answer, or a refusal: retried with
    /// backoff while it is retryable (and, after a heartbeat, up to five refusals with
    /// `FAILED_PRECONDITION` in a row: the dispatcher may have declared this worker lost);
    /// anything else fails the task. Ignored unless a get-split is under way.
    pub fn handle_split_error(&mut self, now: Millis, error: SplitFailure) {
        let Need::Splits { repetition, asked: true } = self.need else { return };
        if self.stopped {
            return;
        }
        self.need = Need::Splits { repetition, asked: false };
        let precondition =
            error.code == Code::FailedPrecondition && self.preconditions < MAX_PRECONDITION_RETRIES;
        if !error.retryable && !precondition {
            let detail = format!("get-split failed: {}", error.message);
            return self.fail(TaskError::failed(self.def.task_id, error.code, &detail));
        }
        if !error.retryable {
            self.preconditions += 1;
            self.emit(Event::Heartbeat);
        }
        self.retry_at = Some(now.plus(self.backoff));
        self.backoff = Millis(self.backoff.0.saturating_mul(2).min(BACKOFF_MAX.0));
    }

    /// The answer to [`Action::ReadFile`]: the file's bytes, or why it could not be read
    /// (the task fails). An answer for another path than the one asked for is ignored.
    pub fn handle_file(&mut self, _now: Millis, path: &str, contents: Result<&[u8], TaskError>) {
        let Need::File { path: wanted, asked: true } = &self.need else { return };
        if wanted != path || self.stopped {
            return;
        }
        self.need = Need::Nothing;
        match contents {
            Ok(bytes) => {
                if let Some(p) = self.pipeline.as_mut() {
                    p.provide_file(path, bytes);
                }
                self.emit(Event::Runnable);
            }
            Err(e) => self.fail(TaskError::failed(self.def.task_id, e.code, &e.detail)),
        }
    }

    /// The answer to [`Action::ReadRows`]: a chunk of the rows asked for and whether it is
    /// the last (see [`Pipeline::provide_rows`]), or why they could not be read (the task
    /// fails). An answer for another path or start than asked for is ignored.
    pub fn handle_rows(
        &mut self,
        _now: Millis,
        request: &RowsRequest,
        rows: Result<(Chunk, bool), TaskError>,
    ) {
        let Need::Rows { request: wanted, asked: true } = &self.need else { return };
        if wanted != request || self.stopped {
            return;
        }
        self.need = Need::Nothing;
        match rows {
            Ok((chunk, last)) => {
                if let Some(p) = self.pipeline.as_mut() {
                    p.provide_rows(&request.path, chunk, last);
                }
                self.emit(Event::Runnable);
            }
            Err(e) => self.fail(TaskError::failed(self.def.task_id, e.code, &e.detail)),
        }
    }

    /// The answer to [`Action::ProduceOutputs`]: the split's next outputs and whether they are
    /// its last (see [`Pipeline::provide_outputs`]), or why the producer failed (the task
    /// fails). An answer to another request than the one under way is ignored.
    pub fn handle_outputs(
        &mut self,
        _now: Millis,
        request: &OutputsRequest,
        outputs: Result<(Outputs, bool), TaskError>,
    ) {
        let Need::Outputs { request: wanted, asked: true } = &self.need else { return };
        if wanted != request || self.stopped {
            return;
        }
        self.need = Need::Nothing;
        match outputs {
            Ok((outputs, last)) => {
                if let Some(p) = self.pipeline.as_mut() {
                    p.provide_outputs(request.seq, outputs, last);
                }
                self.emit(Event::Runnable);
            }
            Err(e) => self.fail(TaskError::failed(self.def.task_id, e.code, &e.detail)),
        }
    }

    /// A client's read. The first read starts the task (a task no client reads takes no
    /// splits). `None`: nothing to answer yet; ask again on [`Event::Readable`], and answer
    /// an empty read when the client's wait is over. A stopped task answers as
    /// [`Task::gone_kind`] says.
    pub fn handle_read(
        &mut self,
        _now: Millis,
        read: Read,
    ) -> Option<Result<ReadReply, TaskError>> {
        self.start();
        if self.stopped {
            return Some(self.gone_kind().answer(self.def.task_id));
        }
        match read {
            Read::Elements { max } => self.read_elements(max),
            Read::Round { consumer, round } => self.read_round(consumer, round),
        }
    }

    /// The dispatcher acknowledged the completion report: end of sequence may be served.
    pub fn handle_completion_acked(&mut self) {
        self.acked = true;
        self.emit(Event::Readable);
    }

    /// Stops the task (the dispatcher deleted it, or the worker shuts down): nothing more is
    /// produced or fetched, its pipeline is dropped, and reads answer as
    /// [`Task::gone_kind`] says.
    pub fn stop(&mut self) {
        self.stopped = true;
        self.pipeline = None;
        self.retry_at = None;
        self.emit(Event::Readable);
        self.emit(Event::Runnable);
    }

    // --- queries ------------------------------------------------------------------------------

    /// Whether the task started (a read came).
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// Whether the task will never hand out an action again: it stopped, ended or failed.
    pub fn is_finished(&self) -> bool {
        self.stopped || self.ended || self.failure.is_some()
    }

    /// Why the task failed, if it did.
    pub fn failure(&self) -> Option<&TaskError> {
        self.failure.as_ref()
    }

    /// Whether the task stopped.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// How a deleted task reads: completed if it ended and every element was taken.
    pub fn gone_kind(&self) -> Gone {
        if self.acked || (self.ended && self.unread() == 0 && self.failure.is_none()) {
            Gone::Completed
        } else {
            Gone::Deleted
        }
    }

    /// Ended, every element taken, not yet acknowledged: the completion report is due.
    pub fn ready_to_report(&self) -> bool {
        self.ended && !self.acked && self.failure.is_none() && self.unread() == 0 && !self.stopped
    }

    /// Produced elements no client has taken yet.
    pub fn unread(&self) -> usize {
        self.buf.len() + round_unread(self.rounds.as_ref())
    }

    /// The buffered elements a read of [`Read::Elements`] would take, front first, with their
    /// weights: a reader that answers fewer than `max` (a reply's byte budget) looks at them
    /// and then reads exactly the number it chose, in the same critical section.
    pub fn buffered(&self) -> impl Iterator<Item = (&Element, u64)> + '_ {
        self.buf.iter().map(|(e, w)| (e, *w))
    }

    /// The origin runs a read of the first `n` buffered elements would answer (`None` when
    /// origins are not tracked), without taking them.
    pub fn buffered_origin(&self, n: usize) -> Option<Vec<OriginRun>> {
        self.origins.as_ref().map(|runs| OriginRun::front(runs, n as u64))
    }

    /// The ids of the splits fetched last and not yet acknowledged.
    pub fn held_splits(&self) -> &[SplitId] {
        &self.held
    }

    /// What a status page shows of the task.
    pub fn view(&self) -> TaskView {
        let state = if self.failure.is_some() {
            RunState::Failed
        } else if self.ended {
            RunState::Finished
        } else if self.started {
            RunState::Running
        } else {
            RunState::Waiting
        };
        TaskView {
            state,
            elements_produced: self.produced,
            elements_served: self.served,
            buffered_elements: self.unread() as u64,
            buffered_bytes: self.buf_bytes,
            buffer_capacity: self.capacity as u64,
            buffer_capacity_bytes: self.capacity_bytes,
            splits_held: self.held.len() as u64,
        }
    }

    // --- internals ----------------------------------------------------------------------------

    /// Builds the pipeline on the first read.
    fn start(&mut self) {
        if self.started || self.stopped {
            return;
        }
        self.started = true;
        self.emit(Event::Runnable);
        let id = self.def.task_id;
        let built = sharding_of(&self.def).and_then(|s| {
            // The dispatcher sends TensorFlow datasets' tasks to TensorFlow workers only.
            let def = self.def.dataset.declarative().ok_or_else(|| {
                TaskError::failed(id, Code::FailedPrecondition, "a TensorFlow dataset's task")
            })?;
            if self.external && self.def.num_consumers.is_some() {
                return Err(TaskError::failed(
                    id,
                    Code::FailedPrecondition,
                    "a worker that produces splits with its own function does not serve \
                     coordinated reads (num_consumers)",
                ));
            }
            let built = if self.external {
                Pipeline::external(def, s, self.def.split_size, self.limits)
            } else {
                Pipeline::with_limits(def, s, self.limits)
            };
            built.map_err(|e| TaskError::failed(id, e.code(), e.message()))
        });
        match built {
            Ok(p) => {
                self.pipeline = Some(p);
                self.tracked = self.tracks_origins();
                if self.tracked {
                    self.origins = Some(VecDeque::new());
                }
            }
            Err(e) => self.fail(e),
        }
    }

    /// Whether the task's elements get origins (read positions): a DYNAMIC task of a
    /// dataset whose positions are exact, read first come first served (a coordinated read's
    /// rounds interleave consumers, whose positions would not be the reader's).
    fn tracks_origins(&self) -> bool {
        self.def.processing_mode == ShardingPolicy::Dynamic
            && self.def.num_consumers.is_none()
            && (self.external
                || self.def.dataset.declarative().is_some_and(|d| d.check_resumable().is_ok()))
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

    /// Room in the buffer: `(elements, bytes)` it takes now, or `None`. A coordinated read's
    /// round that cannot fit in the byte bound fails the task.
    fn room(&mut self) -> Option<(usize, u64)> {
        let len = self.buf.len();
        if len >= self.capacity {
            return None;
        }
        if self.buf_bytes < self.capacity_bytes || len == 0 {
            return Some((
                self.capacity - len,
                self.capacity_bytes - self.buf_bytes.min(self.capacity_bytes),
            ));
        }
        if len < self.round_size {
            // The round still needs elements but the buffer is full: it would never start.
            let detail = format!(
                "a round of {} coordinated reads weighs more than this worker's \
                 --max-buffer-bytes ({} bytes)",
                self.round_size, self.capacity_bytes
            );
            self.fail(TaskError::failed(self.def.task_id, Code::ResourceExhausted, &detail));
        }
        None
    }

    fn fail(&mut self, error: TaskError) {
        self.failure = Some(error);
        self.emit(Event::Readable);
    }

    /// Buffers produced `elements` weighing `weight`, which `runs` cover when origins are
    /// tracked (`None`: an element without origin came, and origins are no longer tracked).
    fn push(&mut self, elements: Vec<(Element, u64)>, weight: u64, runs: Option<Vec<OriginRun>>) {
        self.produced += elements.len() as u64;
        self.buf_bytes = self.buf_bytes.saturating_add(weight);
        self.buf.extend(elements);
        match (runs, self.origins.as_mut()) {
            (Some(runs), Some(origins)) => origins.extend(runs),
            _ => self.origins = None,
        }
        self.emit(Event::Readable);
    }

    fn read_elements(&mut self, max: usize) -> Option<Result<ReadReply, TaskError>> {
        if !self.buf.is_empty() {
            let elements = take_front(&mut self.buf, &mut self.buf_bytes, max.max(1));
            let n = elements.len() as u64;
            let origin = self.origins.as_mut().map(|runs| OriginRun::take_front(runs, n));
            self.served += n;
            self.emit(Event::Runnable);
            if self.ended && self.buf.is_empty() && self.failure.is_none() {
                self.emit(Event::CompletionDue);
            }
            return Some(Ok(ReadReply { elements, end_of_sequence: false, origin }));
        }
        if let Some(e) = &self.failure {
            return Some(Err(e.clone()));
        }
        if self.ended {
            if self.acked {
                return Some(Ok(ReadReply::end_of_sequence()));
            }
            self.emit(Event::CompletionDue);
        }
        None
    }

    /// Consumer `consumer`'s element of round `round`. The first request sets the first
    /// round (every consumer reads a task from the same round on). A round starts when
    /// `num_consumers` elements are buffered; each consumer gets its own (asking again in the
    /// same round gets the same one), and the next round starts once every consumer took
    /// its element.
    fn read_round(&mut self, consumer: u64, round: u64) -> Option<Result<ReadReply, TaskError>> {
        let n = self.def.num_consumers.unwrap_or(1).max(1);
        if n > MAX_CONSUMERS {
            return Some(Err(TaskError::new(
                Code::ResourceExhausted,
                format!(
                    "this worker serves coordinated reads of at most {MAX_CONSUMERS} consumers; \
                     the job has num_consumers {n}"
                ),
            )));
        }
        let (Ok(n_us), Ok(i)) = (usize::try_from(n), usize::try_from(consumer)) else {
            return Some(Err(TaskError::new(
                Code::InvalidArgument,
                "consumer_index is out of range",
            )));
        };
        // The first request names the first round: a task that joined late is promoted at a
        // round negotiated after its definition was sent, so the definition's
        // `starting_round` may be stale.
        let rr = self.rounds.get_or_insert_with(|| Rounds {
            round,
            slots: None,
            taken: vec![false; n_us],
        });
        if round < rr.round {
            return Some(Err(TaskError::new(
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
            if self.buf.len() >= n_us {
                rr.slots = Some(take_front(&mut self.buf, &mut self.buf_bytes, n_us));
                self.events |= Event::Runnable.bit();
            } else if let Some(e) = &self.failure {
                return Some(Err(e.clone()));
            } else if self.ended {
                return Some(Err(TaskError::new(
                    Code::FailedPrecondition,
                    "Encountered end of sequence on a round-robin read iterator. Please ensure \
                     that the dataset used for round-robin reading has infinite cardinality, \
                     e.g. by adding a .repeat() transformation at the end.",
                )));
            }
        }
        let slots = rr.slots.as_ref()?;
        let element = slots.get(i).cloned().unwrap_or(Element::Value(Value::Null));
        if let Some(t) = rr.taken.get_mut(i)
            && !*t
        {
            *t = true;
            self.served += 1;
        }
        if rr.taken.iter().all(|t| *t) {
            rr.round += 1;
            rr.slots = None;
            rr.taken.iter_mut().for_each(|t| *t = false);
            self.events |= Event::Readable.bit();
        }
        Some(Ok(ReadReply { elements: vec![element], end_of_sequence: false, origin: None }))
    }
}

/// Elements of the current round no consumer took yet.
fn round_unread(rounds: Option<&Rounds>) -> usize {
    rounds
        .and_then(|r| r.slots.as_ref().map(|_| r.taken.iter().filter(|t| !**t).count()))
        .unwrap_or(0)
}
