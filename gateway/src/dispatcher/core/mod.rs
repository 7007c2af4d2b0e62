//! The driver handle: the dispatcher core and its journal; calls run inline, durability is
//! pipelined.
//!
//! The core's [`Driver`] sits behind one mutex. A request handler takes it, submits its
//! request (the state machine decides in microseconds), and lets go. The driver hands the
//! request's journal records to this module's sink, which queues them for the syncer thread
//! and answers [`Durability::Later`]; the reply then waits inside the driver, and the handler
//! waits on a oneshot channel for it. The syncer takes everything queued while the previous
//! commit was on disk as one batch: one fsync for many requests (group commit), and the state
//! machine never waits for the disk. When the batch is durable the syncer reports it to the
//! driver ([`Driver::handle_persisted`]), which releases the replies that waited for it; the
//! syncer hands each to its handler. Without a journal the sink answers [`Durability::Now`]
//! and the reply comes back from the submit itself: no thread hand-off, no wake-up.
//!
//! Ordering: records are queued under the core mutex, so the journal holds them in the order
//! they were applied. The core stamps every reply, reads included, with the last batch emitted
//! before it, so no reply reveals state that a crash could lose.
//!
//! Failure: if the journal cannot be written, no request waiting on that batch or any later
//! one is acknowledged, every later call is `UNAVAILABLE`, and a restart replays the journal.
//! A panic inside the state machine (a bug) poisons the mutex: the dispatcher then refuses
//! every call rather than serve a half-applied change.
//!
//! Compaction: when the current segment grows past `--compact-at-bytes`, the syncer takes the
//! core mutex only to copy the state (the snapshot) and the records queued so far; a thread of
//! its own encodes, writes and fsyncs the snapshot while the syncer goes on committing, and
//! the syncer then finishes the compaction (the records committed meanwhile follow the
//! snapshot in its segment). Requests wait for the copy, never for the disk.
//!
//! Timers: a task sleeps until the state machine's `poll_timeout` (woken early when a call
//! brings the deadline forward) and runs `handle_timeout` the same way a call runs.
//!
//! # Files
//!
//! * `handle`: [`DriverHandle`], what request handlers hold: calls, terms begun and ended,
//!   readiness.
//! * `term`: one term's state (the core mutex with the driver and the waiting handlers) and
//!   [`TermEnded`].
//! * `writer`: [`JournalWriter`] and [`SnapshotWriter`], the journal as the syncer uses it,
//!   and their implementation for the work-dir journal.
//! * `syncer`: the driver's sink, the queue and the syncer thread (group commit, fsync,
//!   releasing replies), and what a journal failure stops ([`JournalFailure`]).
//! * `compaction`: when and how a compaction begins beside the syncer.
//! * `timers`: the task that runs the state machine's timeouts.
//! * `lease`: [`LeaseClock`], a replica's leadership on the monotonic clock.
//!
//! [`Driver`]: shardwise_core::dispatch::Driver
//! [`Driver::handle_persisted`]: shardwise_core::dispatch::Driver::handle_persisted
//! [`Durability::Later`]: shardwise_core::dispatch::Durability::Later
//! [`Durability::Now`]: shardwise_core::dispatch::Durability::Now

mod compaction;
mod handle;
mod lease;
mod syncer;
mod term;
#[cfg(test)]
mod tests;
mod timers;
mod writer;

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use shardwise_core::dispatch::{Dispatcher, Millis};

pub use self::compaction::COMPACT_AT_BYTES;
pub use self::handle::DriverHandle;
pub use self::lease::LeaseClock;
pub use self::syncer::JournalFailure;
pub use self::term::TermEnded;
pub use self::writer::{JournalWriter, SnapshotWriter, StagedSnapshot};

/// Wall-clock milliseconds (journaled times must compare across restarts).
pub fn now() -> Millis {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    Millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// Counters the metrics endpoint reports.
#[derive(Debug, Default)]
pub struct Stats {
    /// Journal commits (fsync groups).
    pub commits: AtomicU64,
    /// Records written.
    pub records: AtomicU64,
    /// Commit durations.
    pub commit_latency: crate::http::metrics::Histogram,
    /// Requests handled.
    pub requests: AtomicU64,
    /// Bytes in the journal's current segment after the last commit (0 in memory mode).
    pub segment_bytes: AtomicU64,
    /// When the last compaction finished, in wall-clock milliseconds (0: none yet).
    pub last_compaction_ms: AtomicU64,
    /// How long the last commit took, in microseconds.
    pub last_commit_micros: AtomicU64,
}

/// How the dispatcher starts: built now, or recovered from a journal.
pub type Startup =
    Box<dyn FnOnce() -> Result<(Dispatcher, Option<Box<dyn JournalWriter>>), StartupError> + Send>;

/// Why the dispatcher could not be built or recovered at startup.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartupError {
    /// The journal cannot be replayed.
    #[error(transparent)]
    Journal(#[from] shardwise_journal::OpenError),
    /// The state machine refused its configuration or the replayed records.
    #[error(transparent)]
    Dispatch(#[from] shardwise_core::DispatchError),
}

fn write<T>(m: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
