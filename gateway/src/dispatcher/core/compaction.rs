//! When the current segment grows past `--compact-at-bytes`, the syncer begins a compaction:
//! under the core mutex only a copy of the state and of the records queued so far; a thread of
//! its own writes the snapshot while the syncer goes on committing, and the syncer finishes
//! the compaction when the snapshot comes back through the queue.

use super::lock;
use super::syncer::persisted;
use super::term::Inner;
use super::writer::JournalWriter;

/// Compact when the current segment grows past this (the default of `--compact-at-bytes`).
pub const COMPACT_AT_BYTES: u64 = 64 << 20;

/// Begins a compaction. Under the core mutex, only the capture: a copy of the state and the
/// records queued so far, which the snapshot covers exactly (records are queued under the
/// same mutex, in the order they were applied). Then, with the mutex released, the syncer
/// writes and commits those records (their replies are released as usual) and begins the
/// journal's compaction; a thread of its own encodes, writes and fsyncs the snapshot while
/// the syncer goes on committing later records, and hands the written snapshot back through
/// the queue, where [`sync`](super::syncer::sync) finishes the compaction. False when the core is gone.
pub(super) fn begin_compaction(
    inner: &Inner,
    journal: &mut dyn JournalWriter,
) -> std::io::Result<bool> {
    let started = std::time::Instant::now();
    let (snapshot, rest, last) = {
        let Ok(guard) = inner.core.lock() else { return Ok(false) };
        let Some(core) = guard.as_ref() else { return Ok(false) };
        let snapshot = core.driver.dispatcher().snapshot();
        let mut q = lock(&inner.pipe.queue);
        (snapshot, std::mem::take(&mut q.records), q.last)
    };
    let capture_us = started.elapsed().as_micros();
    if !rest.is_empty() {
        journal.append(&rest)?;
        journal.commit()?;
        if !persisted(inner, last) {
            return Ok(false);
        }
    }
    let writer = journal.begin_compaction()?;
    let pipe = inner.pipe.clone();
    std::thread::Builder::new().name("shardwise-compact".into()).spawn(move || {
        let started = std::time::Instant::now();
        let r = writer.write(&snapshot);
        let write_ms = started.elapsed().as_millis();
        drop(snapshot);
        tracing::debug!(capture_us, write_ms, "journal snapshot written");
        let mut q = lock(&pipe.queue);
        q.staged = Some(r);
        pipe.queued.notify_one();
    })?;
    Ok(true)
}
