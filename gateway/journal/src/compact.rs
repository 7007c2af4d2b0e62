//! Compaction beside the appends: [`Journal::begin_compaction`] keeps the records appended
//! from then on, a [`Compaction`] writes the snapshot to a staged segment (on any thread), and
//! [`Journal::finish_compaction`] appends those records to it, names it the newest segment in
//! one atomic rename, and deletes the older segments.

use std::io;

use shardwise_core::dispatch::Update;
use shardwise_core::dispatch::framing::segment_header;
use shardwise_core::dispatch::journal::encode_update;

use crate::append::Journal;
use crate::storage::{Stager, Storage};

impl<S: Storage> Journal<S> {
    /// Compaction in one go: [`Journal::begin_compaction`], the snapshot written at once,
    /// [`Journal::finish_compaction`].
    pub fn compact(&mut self, snapshot: &Update) -> io::Result<()> {
        let staged = self.begin_compaction()?.write(snapshot)?;
        self.finish_compaction(staged)
    }

    /// Begins a compaction whose snapshot covers exactly the records appended so far: the
    /// returned [`Compaction`] writes the snapshot (on any thread) while appends go on. Every
    /// record appended from now on is also kept, encoded, to follow the snapshot in its
    /// segment. One compaction at a time.
    pub fn begin_compaction(&mut self) -> io::Result<Compaction> {
        if self.tail.is_some() {
            return Err(io::Error::other("a journal compaction is already in flight"));
        }
        self.tail = Some(Vec::new());
        Ok(Compaction { stager: self.storage.stager(), segment: self.segment + 1 })
    }

    /// Finishes the compaction whose snapshot `staged` holds: the current segment is synced
    /// (even without fault tolerance: only the newest segment may end torn, or the next start
    /// could not tell a crash from damage); the records appended since the snapshot are
    /// appended to the staged segment, which is made durable and named the newest segment,
    /// and appends go to it from now on; then every older segment is deleted. A crash before
    /// the naming leaves the old segments whole (the staged file is discarded at the next
    /// start); after it, replay starts at the snapshot and deletes the older segments.
    pub fn finish_compaction(&mut self, staged: Staged) -> io::Result<()> {
        let Some(tail) = self.tail.take() else {
            return Err(io::Error::other("no journal compaction is in flight"));
        };
        if staged.segment != self.segment + 1 {
            return Err(io::Error::other(format!(
                "a staged journal segment {} does not follow the current one {}",
                staged.segment, self.segment
            )));
        }
        self.storage.sync()?;
        self.storage.install(staged.segment, &tail)?;
        let old: Vec<u64> =
            self.storage.list()?.into_iter().filter(|s| *s < staged.segment).collect();
        self.segment = staged.segment;
        self.segment_bytes = staged.bytes + tail.len() as u64;
        for s in old {
            self.storage.remove(s)?;
        }
        Ok(())
    }

    /// Gives up a compaction in flight (its staged segment is left to the next start).
    pub fn abandon_compaction(&mut self) {
        self.tail = None;
    }

    /// Whether a compaction is in flight.
    pub fn compacting(&self) -> bool {
        self.tail.is_some()
    }
}

/// A compaction in flight, from [`Journal::begin_compaction`]: writes the snapshot into the
/// staged segment, beside the journal's appends.
pub struct Compaction {
    stager: Box<dyn Stager>,
    segment: u64,
}

impl std::fmt::Debug for Compaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compaction").field("segment", &self.segment).finish_non_exhaustive()
    }
}

impl Compaction {
    /// Encodes `snapshot` (which must cover exactly the records appended before
    /// [`Journal::begin_compaction`]) after a segment header, and writes it durably to the
    /// staged segment.
    pub fn write(mut self, snapshot: &Update) -> io::Result<Staged> {
        let mut bytes = segment_header().to_vec();
        encode_update(snapshot, &mut bytes).map_err(io::Error::other)?;
        self.stager.stage(self.segment, &bytes)?;
        Ok(Staged { segment: self.segment, bytes: bytes.len() as u64 })
    }
}

/// A snapshot written to its staged segment, for [`Journal::finish_compaction`].
#[derive(Debug)]
pub struct Staged {
    segment: u64,
    bytes: u64,
}
