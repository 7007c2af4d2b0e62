//! The dispatcher's durable journal: segment files in a work dir, behind a [`Storage`] trait
//! so that tests can inject write and fsync failures.
//!
//! Owner: one dispatcher at a time. [`WorkDirLock`] holds an exclusive lock (`flock`) on
//! `<work_dir>/lock`, which names the holder's pid, from before replay for as long as the journal
//! is open; a second dispatcher on the same work dir refuses to start. The kernel drops the lock
//! when its holder exits, killed or not. `journal dump` reads without it.
//!
//! Layout: `<work_dir>/journal/segment-<n>.swj`, `n` increasing. Every dispatcher run opens a
//! new segment; compaction writes a segment that starts with a snapshot record and then
//! deletes the older ones. Replay starts at the newest segment that begins with a snapshot
//! and requires every later segment to be present (a missing one is an error).
//!
//! Compaction runs beside the appends ([`Journal::begin_compaction`]): the snapshot is written
//! to a hidden staged file (`.segment-<n>.swj.staged`, which replay never reads and the next
//! start deletes) while records go on being appended to the current segment and kept in
//! memory; then those records are appended to the staged file, it is synced and renamed into
//! place (one atomic step: before it the old segments hold everything, after it the new one
//! does), appends switch to it, and the older segments are deleted.
//!
//! Crashes: a torn final record of the *last* segment (a crash mid-append; never
//! acknowledged) is truncated with a warning; a last segment cut short while it was created
//! (less than a header) is removed and its number reused; segments older than the newest
//! snapshot (a compaction that crashed before deleting them) are deleted. Compaction syncs the
//! current segment before it starts the next one, so only the last segment can end torn.
//!
//! Damage: anything else (a damaged record followed by data, a torn record in an older
//! segment, an undecodable record, a missing segment) refuses to start with the file and byte
//! offset. These rules hold at every crash point: the `crash_points` tests cut the power at each
//! storage operation, in each way a file system may lose unsynced data, and replays.
//!
//! # Modules
//!
//! Each file holds one concern; the API is what this root exports.
//!
//! * `storage`: the [`Storage`] and [`Stager`] traits, the seam tests inject failures through.
//! * `segments`: [`DirStorage`], segment and staged files in `<work_dir>/journal`.
//! * `lock`: [`WorkDirLock`], one owner per work dir.
//! * `append`: the open [`Journal`]: appends and commits.
//! * `replay`: [`Journal::open`], reading the segments back ([`Replay`], [`OpenError`]).
//! * `compact`: compaction beside the appends ([`Compaction`], [`Staged`]).
//! * `dump`: [`dump`], the journal as JSON lines.
//!
//! The crate depends on the standard library and `shardwise-core` (the record format) only: no
//! async runtime, no HTTP.
#![forbid(unsafe_code)]

mod append;
mod compact;
mod dump;
mod lock;
mod replay;
mod segments;
mod storage;

#[cfg(test)]
mod crash_points;
#[cfg(test)]
mod tests;

pub use crate::append::Journal;
pub use crate::compact::{Compaction, Staged};
pub use crate::dump::{DumpError, dump};
pub use crate::lock::{LOCK_FILE, WorkDirError, WorkDirLock};
pub use crate::replay::{OpenError, Replay};
pub use crate::segments::DirStorage;
pub use crate::storage::{Stager, Storage};
