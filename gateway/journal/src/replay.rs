//! Replay: [`Journal::open`] reads the segments back from the newest snapshot on, repairs
//! what a crash may leave (a torn final record, a segment cut short while created, segments a
//! compaction had still to delete), refuses anything else as damage ([`OpenError`], naming the
//! file and byte offset), and opens this run's fresh segment.

use std::io;

use shardwise_core::dispatch::Update;
use shardwise_core::dispatch::framing::{FramingError, Tail, segment_header};
use shardwise_core::dispatch::journal::{JournalError, decode_updates};

use crate::append::Journal;
use crate::storage::Storage;

/// Why a journal cannot be replayed. The dispatcher refuses to start (`DATA_LOSS`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// A damaged or undecodable record.
    #[error("journal file {file} is corrupt at byte offset {offset}: {reason}")]
    Corrupt {
        /// The segment file.
        file: String,
        /// Byte offset in it.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A segment is missing between the snapshot and the newest segment.
    #[error("journal segment {missing} is missing ({file}): segments must be consecutive")]
    MissingSegment {
        /// Its number.
        missing: u64,
        /// Its path.
        file: String,
    },
    /// The storage failed.
    #[error("journal: {0}")]
    Io(#[from] io::Error),
}

/// What replay found.
#[derive(Debug, Default)]
pub struct Replay {
    /// The updates to apply, in order.
    pub updates: Vec<Update>,
    /// Warnings to log (a truncated torn tail).
    pub warnings: Vec<String>,
    /// Segments read.
    pub segments: usize,
}

/// A segment that cannot be decoded, with its file and offset.
fn corrupt(file: &str, e: JournalError) -> OpenError {
    let file = file.to_owned();
    match e {
        JournalError::Framing(FramingError::Corrupt { offset, reason })
        | JournalError::BadRecord { offset, reason } => OpenError::Corrupt { file, offset, reason },
        other => OpenError::Corrupt { file, offset: 0, reason: other.to_string() },
    }
}

fn starts_with_snapshot(updates: &[Update]) -> bool {
    matches!(updates.first(), Some(Update::Snapshot { .. }))
}

impl<S: Storage> Journal<S> {
    /// Replays the journal in `storage` and opens a new segment after it. With `fsync` every
    /// [`Journal::commit`] waits for the disk; without, records survive a process crash but
    /// not necessarily a machine crash.
    pub fn open(mut storage: S, fsync: bool) -> Result<(Self, Replay), OpenError> {
        let mut segments = storage.list()?;
        segments.sort_unstable();
        // A compaction a crash cut short: its staged segment was never named, and is not
        // part of the journal.
        storage.discard_staged()?;
        let mut replay = Replay::default();
        // Newest first, back to the newest segment that starts with a snapshot: nothing
        // older is needed (it is what an interrupted compaction had still to delete).
        let mut decoded: Vec<(u64, Vec<Update>)> = Vec::with_capacity(segments.len());
        let mut snapshot_at = None;
        for (i, &seg) in segments.iter().enumerate().rev() {
            let newest = decoded.is_empty();
            let bytes = storage.read(seg)?;
            let file = storage.describe(seg);
            let r = decode_updates(&bytes).map_err(|e| corrupt(&file, e))?;
            if let Tail::Torn { offset, discarded, reason } = &r.tail {
                if !newest {
                    return Err(OpenError::Corrupt {
                        file,
                        offset: *offset,
                        reason: format!(
                            "a torn record in a segment that is not the newest: {reason}"
                        ),
                    });
                }
                if *offset == 0 {
                    // Not even a whole header: a crash while creating the segment. Its
                    // number is reused, so the segments stay consecutive.
                    storage.remove(seg)?;
                    replay.warnings.push(format!(
                        "journal file {file}: removed a segment cut short while it was created \
                         ({discarded} bytes: {reason}); it held no records"
                    ));
                    continue;
                }
                storage.truncate(seg, *offset)?;
                replay.warnings.push(format!(
                    "journal file {file}: truncated a torn final record at byte offset {offset} \
                     ({discarded} bytes discarded: {reason}); it was never acknowledged"
                ));
            }
            let snapshot = starts_with_snapshot(&r.updates);
            decoded.push((seg, r.updates));
            if snapshot {
                snapshot_at = Some(i);
                break;
            }
        }
        decoded.reverse();
        match (snapshot_at, decoded.first()) {
            // Finish an interrupted compaction.
            (Some(i), _) => {
                for &old in &segments[..i] {
                    storage.remove(old)?;
                }
            }
            // Without a snapshot the history must start at segment 0.
            (None, Some((first, _))) if *first != 0 => {
                return Err(OpenError::MissingSegment { missing: 0, file: storage.describe(0) });
            }
            (None, _) => {}
        }
        let mut expected = decoded.first().map(|(s, _)| *s);
        for (seg, updates) in decoded.iter_mut() {
            if let Some(want) = expected
                && *seg != want
            {
                return Err(OpenError::MissingSegment {
                    missing: want,
                    file: storage.describe(want),
                });
            }
            expected = Some(*seg + 1);
            replay.updates.append(updates);
            replay.segments += 1;
        }
        let last = decoded.last().map(|(s, _)| *s);
        let segment = last.map_or(0, |l| l + 1);
        let header = segment_header();
        storage.create(segment, &header)?;
        Ok((
            Journal {
                storage,
                fsync,
                segment,
                segment_bytes: header.len() as u64,
                buf: Vec::new(),
                tail: None,
            },
            replay,
        ))
    }
}
