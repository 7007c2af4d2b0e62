//! The storage seam: where segments live ([`Storage`]) and how a compaction's snapshot is
//! written beside the appends ([`Stager`]). [`DirStorage`](crate::DirStorage) is the real one;
//! tests put simulated disks behind it to inject write, fsync and power failures.

use std::io;

/// Where segments live. [`DirStorage`](crate::DirStorage) is the real one.
pub trait Storage: Send {
    /// Segment numbers present, in any order.
    fn list(&self) -> io::Result<Vec<u64>>;
    /// A segment's bytes.
    fn read(&self, segment: u64) -> io::Result<Vec<u8>>;
    /// Creates `segment` holding `bytes`, durably (file and directory entry), and makes it
    /// the one [`Storage::append`] writes to.
    fn create(&mut self, segment: u64, bytes: &[u8]) -> io::Result<()>;
    /// Appends to the current segment.
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Makes everything appended so far durable.
    fn sync(&mut self) -> io::Result<()>;
    /// Cuts a segment to `len` bytes, durably.
    fn truncate(&mut self, segment: u64, len: u64) -> io::Result<()>;
    /// Deletes a segment.
    fn remove(&mut self, segment: u64) -> io::Result<()>;
    /// How to name a segment in messages (its path).
    fn describe(&self, segment: u64) -> String;
    /// A writer of staged segments that works beside this storage (on another thread) while
    /// appends go on here: compaction writes its snapshot through it.
    fn stager(&self) -> Box<dyn Stager>;
    /// Completes a staged `segment` ([`Stager::stage`]): appends `tail` to it, makes it
    /// durable, gives it its segment name durably (an atomic rename), and makes it the one
    /// [`Storage::append`] writes to. Until the rename, replay does not see it.
    fn install(&mut self, segment: u64, tail: &[u8]) -> io::Result<()>;
    /// Deletes staged segments that were never installed (a compaction a crash cut short).
    fn discard_staged(&mut self) -> io::Result<()>;
}

/// Writes staged segments: files that are not segments yet, invisible to
/// [`Storage::list`] and to replay until [`Storage::install`] names them.
pub trait Stager: Send {
    /// Creates (or replaces) the staged `segment` holding `bytes`, durably.
    fn stage(&mut self, segment: u64, bytes: &[u8]) -> io::Result<()>;
}
