//! The open journal ([`Journal`]): appends records to the current segment and commits them
//! (fsync when fault tolerant). Opening it is replay (the `replay` module); compaction is the
//! `compact` module.

use std::io;

use shardwise_core::dispatch::Update;
use shardwise_core::dispatch::journal::encode_update;

use crate::storage::Storage;

/// An open journal: replayed, with a fresh segment for this run.
pub struct Journal<S: Storage> {
    pub(crate) storage: S,
    pub(crate) fsync: bool,
    pub(crate) segment: u64,
    pub(crate) segment_bytes: u64,
    pub(crate) buf: Vec<u8>,
    /// While a compaction is in flight: the records appended since its snapshot was taken,
    /// encoded, to follow the snapshot in its segment.
    pub(crate) tail: Option<Vec<u8>>,
}

impl<S: Storage> std::fmt::Debug for Journal<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("fsync", &self.fsync)
            .field("segment", &self.segment)
            .field("segment_bytes", &self.segment_bytes)
            .finish()
    }
}

impl<S: Storage> Journal<S> {
    /// Appends records (written, not yet synced).
    pub fn append(&mut self, updates: &[Update]) -> io::Result<()> {
        if updates.is_empty() {
            return Ok(());
        }
        self.buf.clear();
        for u in updates {
            encode_update(u, &mut self.buf).map_err(io::Error::other)?;
        }
        self.storage.append(&self.buf)?;
        self.segment_bytes += self.buf.len() as u64;
        if let Some(tail) = &mut self.tail {
            tail.extend_from_slice(&self.buf);
        }
        Ok(())
    }

    /// Makes the appended records durable (fsync) when fault tolerant; a no-op otherwise.
    pub fn commit(&mut self) -> io::Result<()> {
        if self.fsync { self.storage.sync() } else { Ok(()) }
    }

    /// Bytes in the current segment.
    pub fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }

    /// The current segment's number.
    pub fn segment(&self) -> u64 {
        self.segment
    }
}
