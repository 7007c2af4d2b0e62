//! A worker's task as a sans-IO state machine: the bounded buffer clients read from, the
//! backpressure on its pipeline, DYNAMIC splits fetched in batches and acknowledged only once
//! clients took their elements, end of sequence, coordinated rounds, the origins (read
//! positions) of what it hands out, and its failures.
//!
//! # The shape
//!
//! [`Task`] does no IO and reads no clock. Everything that happens to it comes in as a value:
//!
//! * [`Task::handle_read`]: a client's read ([`Read`]), answered at once or `None` (nothing
//!   yet: ask again on [`Event::Readable`] until the client's wait is over);
//! * [`Task::handle_splits`] / [`Task::handle_split_error`]: the dispatcher's answer to a
//!   get-split;
//! * [`Task::handle_file`]: the contents of a file its `files` source asked for;
//! * [`Task::handle_timeout`]: time passed (a get-split's retry is due);
//! * [`Task::handle_completion_acked`] and [`Task::stop`]: what the dispatcher said of it.
//!
//! What it asks of its driver comes out as values: [`Task::poll_action`] (run the pipeline
//! for a chunk, fetch splits with the ids to acknowledge, read a file), [`Task::poll_event`]
//! (wake readers, wake the driver, report completion, heartbeat now) and
//! [`Task::poll_timeout`] (when to call [`Task::handle_timeout`]).
//!
//! # Guarantees
//!
//! * **Backpressure.** At most `capacity` elements (and about `max_buffered_bytes`, though
//!   one element always fits) wait in the buffer; [`Action::Produce`] is not handed out while
//!   it is full. A task no client reads takes no splits: the first read starts it (as
//!   TensorFlow builds a task's iterator on the first `GetElement`).
//! * **Acknowledgements.** The ids of a batch of splits are acknowledged, and more splits
//!   asked for, only once every element produced so far was handed to a client. Elements
//!   still inside a transform's own buffer at that point (a `shuffle` buffer or a partial
//!   `batch` spanning splits) are not covered: if the worker dies before producing them they
//!   are lost, as in TensorFlow. A worker killed with splits in flight loses nothing else:
//!   those splits were not acknowledged, so the dispatcher hands them out again and their
//!   elements that clients had already read come again (duplicates, never losses).
//! * **End of sequence** is answered only after the dispatcher acknowledged the completion
//!   report ([`Event::CompletionDue`], then [`Task::handle_completion_acked`]), so a client
//!   that saw the end of every task sees its iteration finished on its next heartbeat.
//! * **Failures are values.** A get-split that keeps failing is retried with backoff (10 ms
//!   doubling to 2 s; `retry_after_ms` when no split is free yet) while it is retryable, and
//!   fails the task otherwise; reads of a failed task answer its [`TaskError`] once the
//!   buffered elements are taken.
//!
//! # The run loop
//!
//! A driver performs the actions and waits for the next input. Here is one with a fake
//! dispatcher that hands out two splits of `range(6)` and then ends the repetition:
//!
//! ```
//! use serde_json::json;
//! use shardwise_core::dataset::Limits;
//! use shardwise_core::dispatch::Millis;
//! use shardwise_core::dispatch::wire::{Split, SplitsReply, TaskDef};
//! use shardwise_core::worker::{Action, Event, Read, Task};
//!
//! let def: TaskDef = serde_json::from_value(json!({
//!     "task_id": "7", "iteration_id": "2000", "job_id": "5000", "dataset_id": "1000",
//!     "dataset": {"source": {"range": {"stop": 6}}}, "processing_mode": "DYNAMIC",
//!     "num_workers": null, "worker_index": null, "num_split_providers": 1,
//!     "split_size": 3, "num_consumers": null, "starting_round": 0,
//!     "cross_trainer_cache": false,
//! }))?;
//! let mut task = Task::new(def, 16, Limits::default());
//! let mut fake_dispatcher = vec![(0, 3), (3, 6)].into_iter();
//! let mut now = Millis(0);
//! let mut read = Vec::new();
//! loop {
//!     // A client reads; the first read starts the task.
//!     match task.handle_read(now, Read::Elements { max: 100 }) {
//!         Some(Ok(reply)) if reply.end_of_sequence => break,
//!         Some(Ok(reply)) => read.extend(reply.elements.into_iter().filter_map(|e| e.into_value())),
//!         Some(Err(e)) => panic!("{e}"),
//!         None => {} // a real driver waits for `Event::Readable` or the client's deadline
//!     }
//!     // The driver performs what the task asks for.
//!     while let Some(action) = task.poll_action() {
//!         match action {
//!             Action::Produce => _ = task.produce(),
//!             Action::FetchSplits(fetch) => {
//!                 // POST /v1/iterations/{id}/splits with `fetch.request(address, uid)`.
//!                 let (splits, split_ids) = match fake_dispatcher.next() {
//!                     Some((start, stop)) => {
//!                         let id = serde_json::from_value(json!(format!("0:{start}")))?;
//!                         (vec![Split::Chunk { start, stop }], vec![id])
//!                     }
//!                     None => (vec![], vec![]),
//!                 };
//!                 let end_of_splits = splits.is_empty();
//!                 task.handle_splits(now, SplitsReply {
//!                     splits, split_ids, positions: vec![], end_of_splits,
//!                     retry_after_ms: None, incarnation: "inc-1".into(),
//!                 });
//!             }
//!             Action::ReadFile { path } => unreachable!("a range has no files: {path}"),
//!             Action::ReadRows(_) => unreachable!("a range has no columnar files"),
//!             Action::ProduceOutputs(_) => unreachable!("only `Task::with_producer` asks"),
//!         }
//!     }
//!     while let Some(event) = task.poll_event() {
//!         match event {
//!             // POST /v1/workers/update, then say the dispatcher acknowledged it.
//!             Event::CompletionDue if task.ready_to_report() => task.handle_completion_acked(),
//!             _ => {} // wake readers, wake the driver, heartbeat now
//!         }
//!     }
//!     // Sleep until the next deadline (or the next input), then run the timers.
//!     if let Some(deadline) = task.poll_timeout() {
//!         now = deadline;
//!         task.handle_timeout(now);
//!     }
//! }
//! assert_eq!(read, [0, 1, 2, 3, 4, 5]);
//! # Ok::<(), serde_json::Error>(())
//! ```

mod task;
#[cfg(test)]
mod tests;

pub use self::task::Task;
use crate::code::Code;
use crate::dispatch::TaskId;
use crate::dispatch::wire::{GetSplits, SplitId};
use crate::position::OriginRun;

/// Elements produced per [`Task::produce`] call at most.
pub const PRODUCE_CHUNK: usize = 256;

/// The most splits one get-split asks for.
pub const MAX_SPLITS: usize = 64;

/// The most consumers of a coordinated read a worker serves (a round holds one element per
/// consumer).
pub const MAX_CONSUMERS: u64 = 10_000;

/// What a task asks its driver to do ([`Task::poll_action`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Run the pipeline for one chunk: call [`Task::produce`] (on the driver's time, not a
    /// reader's), and poll again.
    Produce,
    /// Ask the dispatcher for splits (`POST /v1/iterations/{iteration_id}/splits`, the body
    /// [`FetchSplits::request`]) and hand the reply to [`Task::handle_splits`], or its failure
    /// to [`Task::handle_split_error`].
    FetchSplits(FetchSplits),
    /// Read this file of the `files` source (beneath the worker's data roots) and hand its
    /// contents, or why it could not be read, to [`Task::handle_file`].
    ReadFile {
        /// One of the source's paths, as the dataset names it.
        path: String,
    },
    /// Read these rows of a columnar file of the `files` source (beneath the worker's data
    /// roots) and hand the next chunk of them, or why they could not be read, to
    /// [`Task::handle_rows`]. The next request of the same file usually starts where the
    /// chunk ended: a driver keeps its reader open for it.
    ReadRows(crate::dataset::RowsRequest),
    /// Run the worker's producer on this split (from its start when its `seq` is new, else
    /// on from where it was) and hand its next outputs, or why it failed, to
    /// [`Task::handle_outputs`] ([`Task::with_producer`] tasks only).
    ProduceOutputs(crate::dataset::OutputsRequest),
}

/// What one [`Task::produce`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    /// Elements it put in the buffer.
    pub elements: usize,
    /// The pipeline went through a long stretch without an element (a large `skip`, say)
    /// and paused: the driver should let others run before it produces again.
    pub yielded: bool,
}

/// A get-split the task wants sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSplits {
    /// The pass over the source the splits are for.
    pub repetition: u64,
    /// How many splits at most.
    pub max_splits: u32,
    /// The splits fetched last, all of whose elements clients took (empty at first).
    pub acknowledge: Vec<SplitId>,
}

impl FetchSplits {
    /// The request body, from the worker `worker_address` whose process is `worker_uid`.
    pub fn request(&self, worker_address: &str, worker_uid: Option<&str>) -> GetSplits {
        GetSplits {
            worker_address: worker_address.to_owned(),
            worker_uid: worker_uid.map(str::to_owned),
            repetition: self.repetition,
            split_provider_index: 0,
            max_splits: Some(self.max_splits),
            acknowledge: Some(self.acknowledge.clone()),
        }
    }
}

/// Something the driver should know ([`Task::poll_event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// Elements arrived, a round advanced, or the task's status changed: wake the readers
    /// waiting on this task (they call [`Task::handle_read`] again).
    Readable,
    /// The task may have an action now (room in the buffer, the buffer drained, a retry due,
    /// an answer came, or it stopped): wake the driver (it calls [`Task::poll_action`]).
    Runnable,
    /// The task ended and every element was taken: report its completion to the dispatcher
    /// (if [`Task::ready_to_report`]), then call [`Task::handle_completion_acked`].
    CompletionDue,
    /// The dispatcher refused a get-split as if it did not know this worker: heartbeat now.
    Heartbeat,
}

impl Event {
    const ALL: [Event; 4] =
        [Event::Readable, Event::Runnable, Event::CompletionDue, Event::Heartbeat];

    const fn bit(self) -> u8 {
        match self {
            Event::Readable => 1,
            Event::Runnable => 2,
            Event::CompletionDue => 4,
            Event::Heartbeat => 8,
        }
    }
}

/// A client's read of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// First come first served: up to `max` elements (at least 1).
    Elements {
        /// The most elements to answer.
        max: usize,
    },
    /// Coordinated reads: consumer `consumer`'s element of round `round`.
    Round {
        /// The consumer's index.
        consumer: u64,
        /// The round.
        round: u64,
    },
}

/// What a read found.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadReply {
    /// The elements, in order.
    pub elements: Vec<crate::dataset::Element>,
    /// The task is over and the dispatcher knows it.
    pub end_of_sequence: bool,
    /// Where `elements` come from (read positions), as runs covering them in order: a
    /// DYNAMIC task of a dataset whose positions are exact, read first come first served.
    pub origin: Option<Vec<OriginRun>>,
}

impl ReadReply {
    /// No element, and no end: the client's wait is over.
    pub fn empty() -> ReadReply {
        ReadReply { elements: Vec::new(), end_of_sequence: false, origin: None }
    }

    /// The end of the task's elements.
    pub fn end_of_sequence() -> ReadReply {
        ReadReply { elements: Vec::new(), end_of_sequence: true, origin: None }
    }
}

/// Why a read was refused or a task failed: a status class and a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct TaskError {
    /// The status class.
    pub code: Code,
    /// The message.
    pub detail: String,
}

impl TaskError {
    /// An error of class `code`.
    pub fn new(code: Code, detail: impl Into<String>) -> TaskError {
        TaskError { code, detail: detail.into() }
    }

    /// Task `task_id` failed with `detail`. A failed task is never `NOT_FOUND` (clients
    /// retry that code for tasks the worker does not know yet): that becomes
    /// `FAILED_PRECONDITION`.
    pub fn failed(task_id: TaskId, code: Code, detail: &str) -> TaskError {
        let code = if code == Code::NotFound { Code::FailedPrecondition } else { code };
        TaskError::new(code, format!("task {task_id} failed: {detail}"))
    }
}

/// Why a get-split gave no reply ([`Task::handle_split_error`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitFailure {
    /// The status class of the refusal (`UNAVAILABLE` when nothing answered).
    pub code: Code,
    /// Worth retrying as is (`UNAVAILABLE`, no answer, a follower's redirect).
    pub retryable: bool,
    /// What happened, for the task's error.
    pub message: String,
}

/// Why a task the worker knew is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gone {
    /// It completed and the dispatcher deleted it: reads answer end of sequence.
    Completed,
    /// The dispatcher deleted it before it completed.
    Deleted,
    /// The dispatcher restarted with a new incarnation.
    Lost,
}

impl Gone {
    /// The answer to a read of a gone task.
    pub fn answer(self, task_id: TaskId) -> Result<ReadReply, TaskError> {
        match self {
            Gone::Completed => Ok(ReadReply::end_of_sequence()),
            Gone::Deleted => Err(TaskError::new(
                Code::FailedPrecondition,
                format!(
                    "task {task_id} was deleted by the dispatcher before it completed (its \
                     iteration finished, was released or was garbage collected)"
                ),
            )),
            Gone::Lost => Err(TaskError::new(
                Code::FailedPrecondition,
                format!(
                    "task {task_id} was lost: the dispatcher restarted without its state (a new \
                     incarnation); start the iteration again"
                ),
            )),
        }
    }
}

/// How far a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunState {
    /// No client read it yet: it produces nothing until the first read.
    Waiting,
    /// Producing (or waiting for room in its buffer, or for splits).
    Running,
    /// Its pipeline ended (its buffer may still hold elements).
    Finished,
    /// Its pipeline failed.
    Failed,
}

/// What a status page shows of a task ([`Task::view`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskView {
    /// How far it is.
    pub state: RunState,
    /// Elements produced.
    pub elements_produced: u64,
    /// Elements handed to clients.
    pub elements_served: u64,
    /// Elements produced and not yet read.
    pub buffered_elements: u64,
    /// What the buffer's elements weigh, in approximate bytes.
    pub buffered_bytes: u64,
    /// The most elements the buffer holds.
    pub buffer_capacity: u64,
    /// The most bytes the buffer holds.
    pub buffer_capacity_bytes: u64,
    /// DYNAMIC: splits fetched and not yet acknowledged.
    pub splits_held: u64,
}
