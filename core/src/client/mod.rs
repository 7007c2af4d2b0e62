//! The client's reader as a sans-IO state machine: what a trainer runs to read one iteration
//! of a job through the dispatcher and its workers.
//!
//! [`Reader`] holds the logic of a read: the task list from the client's heartbeats (kept when
//! the dispatcher leaves an unchanged list out), first-come-first-served reads round robin
//! over the tasks, at most [`ReaderConfig::max_outstanding_requests`] at a time; coordinated
//! reads (`num_consumers`), round by round, one element per task, honouring the dispatcher's
//! round blocks; retries with capped exponential backoff of retryable failures up to
//! [`ReaderConfig::unavailable_timeout`] and of a worker's `NOT_FOUND` for a listed task up to
//! [`ReaderConfig::unknown_task_timeout`]; skipping the tasks of lost workers; the end of the
//! read once the dispatcher says `iteration_finished` and every task read answered end of
//! sequence; and the release of the lease. [`Positions`] folds the origins of the elements
//! handed out into a read position.
//!
//! A read's payload is generic ([`Rows`]): JSON elements by default (the [`Elements`] answer),
//! or any other form of the same rows a client decodes (the Rust client's Arrow record
//! batches, many rows to a batch). The reader only counts a payload's rows (none: nothing
//! arrived, ask again) and hands it out whole; positions count rows.
//!
//! It does no IO and reads no clock: calls come out of [`Reader::poll_transmit`] as values,
//! their outcomes go back in with the time (`handle_*`), and the elements come out of
//! [`Reader::poll_event`]. The caller runs the loop; here over a fake transport (a dispatcher
//! with one task whose worker serves two batches), on a virtual clock:
//!
//! ```
//! use shardwise_core::Millis;
//! use shardwise_core::client::{
//!     Call, CallFailure, Elements, Event, Reader, ReaderConfig, Transmit,
//! };
//! use shardwise_core::dispatch::wire::{ClientHeartbeatReply, TaskInfo};
//! use shardwise_core::dispatch::{ClientId, IterationId, TargetWorkers, TaskId};
//!
//! /// The fake transport's failure: a refused connection, retried.
//! #[derive(Debug)]
//! struct Refused;
//! impl CallFailure for Refused {
//!     fn is_retryable(&self) -> bool { true }
//!     fn is_not_found(&self) -> bool { false }
//! }
//!
//! let config = ReaderConfig {
//!     client_id: ClientId(3000),
//!     incarnation: "inc-1".into(),
//!     consumer_index: None,
//!     target_workers: TargetWorkers::Auto,
//!     local_workers: vec![],
//!     max_outstanding_requests: 16,
//!     elements_per_request: 1024,
//!     heartbeat_interval: Millis(1_000),
//!     unknown_task_timeout: Millis(60_000),
//!     unavailable_timeout: Millis(3_600_000),
//! };
//! let task = TaskInfo {
//!     task_id: TaskId(8000),
//!     worker_address: "127.0.0.1:6000".into(),
//!     worker_tags: vec![],
//!     starting_round: 0,
//!     finished: false,
//!     worker_lost: false,
//!     iteration_id: IterationId(2000),
//!     transfer_servers: vec![],
//!     worker_uid: None,
//! };
//! // The worker's answers, in order: a refused connection (retried), two batches, the end.
//! let mut worker: Vec<Result<Elements, Refused>> = vec![
//!     Err(Refused),
//!     Ok(Elements { elements: vec![0.into(), 1.into()], end_of_sequence: false, origin: None }),
//!     Ok(Elements { elements: vec![2.into()], end_of_sequence: false, origin: None }),
//!     Ok(Elements { elements: vec![], end_of_sequence: true, origin: None }),
//! ];
//! worker.reverse();
//! let mut heartbeats = 0;
//!
//! let mut now = Millis(0);
//! let mut reader = Reader::<Refused>::new(config, now);
//! let mut read = Vec::new();
//! let mut ended = false;
//! while !reader.is_done() {
//!     // Make the calls it asks for. A real driver runs them concurrently and feeds each
//!     // outcome back when it arrives; this transport answers at once.
//!     while let Some(call) = reader.poll_transmit() {
//!         match call {
//!             Transmit::Heartbeat { .. } => {
//!                 heartbeats += 1;
//!                 let reply = ClientHeartbeatReply {
//!                     tasks: vec![task.clone()],
//!                     tasks_version: 1,
//!                     tasks_unchanged: false,
//!                     // Once the worker is at its end, so is the iteration.
//!                     iteration_finished: worker.is_empty(),
//!                     block_round: None,
//!                     incarnation: "inc-1".into(),
//!                 };
//!                 reader.handle_heartbeat(now, reply);
//!             }
//!             Transmit::GetElements { task, .. } => match worker.pop() {
//!                 Some(Ok(reply)) => reader.handle_elements(now, task, reply),
//!                 Some(Err(e)) => reader.handle_error(now, Call::Elements(task), e),
//!                 None => unreachable!("read after its end"),
//!             },
//!             Transmit::Release { .. } => reader.handle_released(now),
//!         }
//!     }
//!     // Hand out what it read.
//!     while let Some(event) = reader.poll_event() {
//!         match event {
//!             Event::Batch(batch) => read.extend(batch.elements),
//!             Event::End => ended = true,
//!             Event::Failed(e) => panic!("{e:?}"),
//!         }
//!     }
//!     // Wait for the next deadline (a retry, a heartbeat), then say what time it is.
//!     if let Some(at) = reader.poll_timeout() {
//!         now = now.max(at);
//!         reader.handle_timeout(now);
//!     }
//! }
//! assert_eq!(read, [0, 1, 2]);
//! assert!(ended);
//! assert_eq!(now, Millis(5), "one retry after the refused read, 5 ms later");
//! assert_eq!(heartbeats, 2, "the end of the tasks asks the dispatcher again at once");
//! ```

mod positions;
mod reader;
#[cfg(test)]
mod tests;
pub mod wire;

pub use positions::Positions;
pub use reader::{NUDGE_GAP, RELEASE_ATTEMPTS, RELEASE_RETRY, Reader, ReaderConfig, TaskReadInfo};
pub use wire::{DEFAULT_MAX_ELEMENTS, Elements, MAX_ELEMENTS};

use serde_json::Value;

use crate::dispatch::wire::ClientHeartbeat;
use crate::dispatch::{ClientId, Millis, TaskId};
use crate::position::OriginRun;

/// A call the reader asks its caller to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// `POST /v1/clients/{client_id}/heartbeat` to the dispatcher; answer with
    /// [`Reader::handle_heartbeat`].
    Heartbeat {
        /// The client.
        client_id: ClientId,
        /// The body.
        request: ClientHeartbeat,
    },
    /// `GET /v1/tasks/{task}/elements` from the worker at `worker_address`; answer with
    /// [`Reader::handle_elements`].
    GetElements {
        /// The task.
        task: TaskId,
        /// Its worker's element server (`host:port`).
        worker_address: String,
        /// The query's `max` (first-come-first-served reads).
        max: Option<u32>,
        /// The query's `consumer_index` and `round` (coordinated reads).
        round: Option<(u64, u64)>,
    },
    /// `DELETE /v1/clients/{client_id}`: the read is over; answer with
    /// [`Reader::handle_released`].
    Release {
        /// The client.
        client_id: ClientId,
    },
}

/// Which call an outcome is of (for [`Reader::handle_error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// A heartbeat.
    Heartbeat,
    /// A read of a task's elements.
    Elements(TaskId),
    /// The release of the lease.
    Release,
}

/// What the transport's errors must say for the reader to decide on retries.
pub trait CallFailure {
    /// An `UNAVAILABLE` answer or a transport failure (a refused or reset connection, a
    /// follower's redirect): retried with backoff.
    fn is_retryable(&self) -> bool;
    /// A `NOT_FOUND` answer: a worker that does not know a listed task yet.
    fn is_not_found(&self) -> bool;
}

/// What a read's payload must say for the reader and [`Positions`]: how many rows (elements)
/// it holds. The reader is generic over its payload so that one state machine serves JSON
/// elements (`Vec<Value>`, one element per value) and other forms of the same rows (a client's
/// Arrow record batches, one element per row), without the core knowing those forms.
pub trait Rows {
    /// How many rows (elements) it holds: what read positions count.
    fn rows(&self) -> usize;
    /// It holds no row: a read that found nothing within the worker's wait.
    fn is_empty(&self) -> bool {
        self.rows() == 0
    }
}

impl Rows for Vec<Value> {
    fn rows(&self) -> usize {
        self.len()
    }
}

/// One read's reply as [`Reader::handle_elements`] takes it: its payload, the task's end and
/// the payload's origins. The JSON answer, [`Elements`], converts into a `Reply` of
/// `Vec<Value>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply<P = Vec<Value>> {
    /// The rows read, in order (none when nothing arrived within the worker's wait).
    pub elements: P,
    /// The task is over: nothing more will come (see [`Elements::end_of_sequence`]).
    pub end_of_sequence: bool,
    /// Where the rows come from, runs covering them in order (see [`Elements::origin`]).
    pub origin: Option<Vec<OriginRun>>,
}

impl From<Elements> for Reply {
    fn from(e: Elements) -> Reply {
        Reply { elements: e.elements, end_of_sequence: e.end_of_sequence, origin: e.origin }
    }
}

/// The rows of one read, with their origins when the worker gave them.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch<P = Vec<Value>> {
    /// The rows (elements), in order: never empty.
    pub elements: P,
    /// Where they come from (see [`Elements::origin`]).
    pub origin: Option<Vec<OriginRun>>,
}

/// What the reader hands out.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<E, P = Vec<Value>> {
    /// Rows read.
    Batch(Batch<P>),
    /// The read is over: every element was handed out. The last event.
    End,
    /// The read failed. The last event.
    Failed(ReadError<E>),
}

/// Why a read failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError<E> {
    /// A call failed with an error that is not retried (or a worker's `NOT_FOUND` outlasted
    /// [`ReaderConfig::unknown_task_timeout`]).
    Refused {
        /// Which call.
        call: Call,
        /// The call, as `METHOD path` (and `at worker` for reads).
        context: String,
        /// Its error.
        error: E,
    },
    /// Retries of a retryable failure ran out ([`ReaderConfig::unavailable_timeout`]).
    Unavailable {
        /// Which call.
        call: Call,
        /// The call, as `METHOD path` (and `at worker` for reads).
        context: String,
        /// The last error.
        error: E,
        /// How long it was retried.
        retried_for: Millis,
    },
    /// A heartbeat was answered by another incarnation: the dispatcher restarted without its
    /// state, and the iteration is gone.
    DispatcherRestarted {
        /// The incarnation the iteration was created in.
        was: String,
        /// The dispatcher's incarnation now.
        now: String,
    },
}

/// Capped exponential backoff: starts at `initial`, doubles up to `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Millis,
    initial: Millis,
    max: Millis,
}

impl Backoff {
    /// Starts at `initial`.
    pub fn new(initial: Millis, max: Millis) -> Backoff {
        Backoff { next: initial, initial, max }
    }
    /// The delay to wait now; the next one doubles.
    pub fn next_delay(&mut self) -> Millis {
        let d = self.next;
        self.next = Millis(self.next.0.saturating_mul(2).min(self.max.0));
        d
    }
    /// Back to `initial` after a success.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}
