//! The syncer: the driver's sink queues each request's records under the core mutex, and a
//! thread of its own takes everything queued while the previous commit was on disk as one
//! batch (group commit: one fsync for many requests), then reports it durable to the driver,
//! which releases the replies that waited for it. A failed write or fsync ends the term
//! ([`JournalFailure`]): nothing more is acknowledged.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

use shardwise_core::dispatch::{Durability, JournalSink, Seq, Update};

use super::compaction::begin_compaction;
use super::term::Inner;
use super::writer::{JournalWriter, StagedSnapshot};
use super::{lock, now};

/// Why the journal stopped: after it, nothing more is acknowledged until a restart.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalFailure {
    /// The syncer's queue is full: the disk cannot keep up.
    #[error("{QUEUE_MAX_RECORDS} journal records wait for the disk")]
    Behind,
    /// A write, fsync or compaction step failed.
    #[error("{what}: {source}")]
    Storage {
        /// The step that failed.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
}

/// Records waiting for the syncer beyond which calls are refused (the disk cannot keep up).
const QUEUE_MAX_RECORDS: usize = 1 << 20;

/// Records on their way to the syncer.
#[derive(Default)]
pub(super) struct Queue {
    pub(super) records: Vec<Update>,
    /// The batch the last of `records` belongs to.
    pub(super) last: Seq,
    /// A compaction's snapshot, written (or not) by the compaction thread.
    pub(super) staged: Option<std::io::Result<StagedSnapshot>>,
}

/// The syncer's queue and its wake-up.
#[derive(Default)]
pub(super) struct Pipe {
    pub(super) queue: Mutex<Queue>,
    pub(super) queued: Condvar,
}

/// The driver's sink: nothing (in-memory mode, durable at once) or the syncer's queue.
pub(super) enum Sink {
    Memory,
    Syncer(Arc<Pipe>),
}

impl JournalSink for Sink {
    type Error = JournalFailure;
    fn persist(
        &mut self,
        seq: Seq,
        mut records: Vec<Update>,
    ) -> Result<Durability, JournalFailure> {
        log_batch(&records);
        let Sink::Syncer(inner) = self else { return Ok(Durability::Now) };
        let mut q = lock(&inner.queue);
        if q.records.len() > QUEUE_MAX_RECORDS {
            // The state already changed: the disk cannot keep up, and acknowledging nothing
            // more is the only safe answer.
            return Err(JournalFailure::Behind);
        }
        q.records.append(&mut records);
        q.last = seq;
        inner.queued.notify_one();
        Ok(Durability::Later)
    }
}

/// Logs what an operator follows in a batch of records (one request's, or one timer pass's):
/// workers that register or come back, and what a garbage-collection pass freed, as one line
/// with its counts however many it freed. Everything else a request changes is not logged.
fn log_batch(records: &[Update]) {
    let (mut iterations, mut jobs, mut workers) = (0usize, 0usize, 0usize);
    for r in records {
        match r {
            Update::RegisterWorker { address, .. } => {
                tracing::info!(%address, "worker registered");
            }
            Update::WorkerRevived { address, .. } => {
                tracing::info!(%address, "lost worker registered again");
            }
            Update::WorkerRestarted { address, .. } => {
                tracing::info!(%address, "worker restarted (a new process at this address)");
            }
            Update::GarbageCollectIteration { .. } => iterations += 1,
            Update::RemoveJob { .. } => jobs += 1,
            Update::RemoveWorker { .. } => workers += 1,
            _ => {}
        }
    }
    if iterations + jobs + workers > 0 {
        tracing::info!(iterations, jobs, workers, "garbage collected");
    }
}

/// The syncer: writes and commits whatever is queued, one batch per commit, then releases the
/// replies that waited for it. Compaction runs beside it (see [`begin_compaction`](super::compaction::begin_compaction)): the
/// syncer only starts one and finishes it when its snapshot is written.
pub(super) fn sync(inner: &Inner, mut journal: Box<dyn JournalWriter>) {
    let stats = &inner.stats;
    let mut batch = Vec::new();
    let mut compacting = false;
    loop {
        let (last, staged) = {
            let mut q = lock(&inner.pipe.queue);
            while q.records.is_empty() && q.staged.is_none() {
                if inner.broken.load(Ordering::SeqCst) {
                    return;
                }
                q = inner.pipe.queued.wait(q).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if inner.broken.load(Ordering::SeqCst) {
                // The term ended: what is queued was never acknowledged and goes nowhere.
                return;
            }
            std::mem::swap(&mut batch, &mut q.records);
            (q.last, q.staged.take())
        };
        let committed = !batch.is_empty();
        if committed {
            let started = std::time::Instant::now();
            let r = journal.append(&batch).and_then(|()| journal.commit());
            stats.commits.fetch_add(1, Ordering::Relaxed);
            stats.records.fetch_add(batch.len() as u64, Ordering::Relaxed);
            stats.commit_latency.observe(started.elapsed());
            stats.last_commit_micros.store(
                u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            stats.segment_bytes.store(journal.segment_bytes(), Ordering::Relaxed);
            batch.clear();
            if let Err(e) = r {
                fail(inner, e, "journal write failed");
                return;
            }
            if !persisted(inner, last) {
                return;
            }
        }
        if let Some(staged) = staged {
            compacting = false;
            let bytes_before = journal.segment_bytes();
            let started = std::time::Instant::now();
            if let Err(e) = staged.and_then(|s| journal.finish_compaction(s)) {
                fail(inner, e, "journal compaction failed");
                return;
            }
            let finish_us = started.elapsed().as_micros();
            let bytes_after = journal.segment_bytes();
            tracing::info!(finish_us, bytes_before, bytes_after, "journal compacted");
            stats.last_compaction_ms.store(now().0, Ordering::Relaxed);
            stats.segment_bytes.store(journal.segment_bytes(), Ordering::Relaxed);
        }
        // After a commit only, as before: a snapshot bigger than the threshold does not
        // start the next compaction by itself.
        if committed && !compacting && journal.segment_bytes() > inner.compact_at_bytes {
            match begin_compaction(inner, journal.as_mut()) {
                Ok(true) => compacting = true,
                Ok(false) => return,
                Err(e) => {
                    fail(inner, e, "journal compaction failed");
                    return;
                }
            }
        }
    }
}

/// Reports batches up to `seq` durable and hands out the replies they release; false when the
/// core is gone (a panic poisoned it).
pub(super) fn persisted(inner: &Inner, seq: Seq) -> bool {
    let Ok(mut guard) = inner.core.lock() else { return false };
    let Some(core) = guard.as_mut() else { return false };
    let released = core.driver.handle_persisted(seq);
    core.deliver(released);
    true
}

fn fail(inner: &Inner, e: std::io::Error, what: &'static str) {
    let cause = if e.kind() == std::io::ErrorKind::StorageFull {
        format!("{what}: {e}: no space left on the disk")
    } else {
        format!("{what}: {e}")
    };
    tracing::error!(error = %e, "{what}; refusing further requests (the dispatcher stopped accepting changes)");
    *inner.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(cause);
    inner.end();
    if let Some(core) = lock(&inner.core).as_mut() {
        core.driver.handle_sink_failure(JournalFailure::Storage { what, source: e });
        // Dropping the senders answers every waiter: none of them is acknowledged.
        core.waiters.clear();
    }
}
