//! The journal as the syncer uses it: [`JournalWriter`] (appends, commits, compactions) and
//! [`SnapshotWriter`] (a compaction's snapshot, written off the syncer), object-safe over the
//! storage; implemented here for the work-dir journal, and by the etcd journal of a replica.

use shardwise_core::dispatch::Update;
use shardwise_journal::{Compaction, Journal, Staged, Storage};

/// A compaction's written snapshot, as the journal that wrote it knows it (a work-dir
/// journal's staged segment, or the etcd journal's written chunks): [`SnapshotWriter::write`]
/// makes it, the same journal's [`JournalWriter::finish_compaction`] takes it back.
pub type StagedSnapshot = Box<dyn std::any::Any + Send>;

/// The journal as the syncer uses it (object-safe over the storage type).
pub trait JournalWriter: Send {
    /// Appends records.
    fn append(&mut self, updates: &[Update]) -> std::io::Result<()>;
    /// Makes them durable.
    fn commit(&mut self) -> std::io::Result<()>;
    /// Bytes in the current segment.
    fn segment_bytes(&self) -> u64;
    /// Begins a compaction whose snapshot covers exactly the records appended so far; the
    /// returned writer writes the snapshot on another thread while appends and commits go on.
    fn begin_compaction(&mut self) -> std::io::Result<Box<dyn SnapshotWriter>>;
    /// Finishes the compaction with its written snapshot: the records appended since it
    /// began follow the snapshot in the new segment, older segments are deleted.
    fn finish_compaction(&mut self, staged: StagedSnapshot) -> std::io::Result<()>;
}

/// Writes a compaction's snapshot (encodes it, writes it and makes it durable) off the
/// syncer, beside the journal's appends.
pub trait SnapshotWriter: Send {
    /// Writes `snapshot`.
    fn write(self: Box<Self>, snapshot: &Update) -> std::io::Result<StagedSnapshot>;
}

impl SnapshotWriter for Compaction {
    fn write(self: Box<Self>, snapshot: &Update) -> std::io::Result<StagedSnapshot> {
        Ok(Box::new(Compaction::write(*self, snapshot)?))
    }
}

impl<S: Storage> JournalWriter for Journal<S> {
    fn append(&mut self, updates: &[Update]) -> std::io::Result<()> {
        Journal::append(self, updates)
    }
    fn commit(&mut self) -> std::io::Result<()> {
        Journal::commit(self)
    }
    fn segment_bytes(&self) -> u64 {
        Journal::segment_bytes(self)
    }
    fn begin_compaction(&mut self) -> std::io::Result<Box<dyn SnapshotWriter>> {
        Ok(Box::new(Journal::begin_compaction(self)?))
    }
    fn finish_compaction(&mut self, staged: StagedSnapshot) -> std::io::Result<()> {
        let staged = staged
            .downcast::<Staged>()
            .map_err(|_| std::io::Error::other("a snapshot written for another journal (a bug)"))?;
        Journal::finish_compaction(self, *staged)
    }
}
