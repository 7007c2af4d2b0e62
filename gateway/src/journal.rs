//! The dispatcher's durable journal: segment files in a work dir, behind a [`Storage`] trait
//! so that tests can inject write and fsync failures.
//!
//! Layout: `<work_dir>/journal/segment-<n>.swj`, `n` increasing. Every dispatcher run opens a
//! new segment; compaction writes a segment that starts with a snapshot record and then
//! deletes the older ones. Replay starts at the newest segment that begins with a snapshot
//! and requires every later segment to be present (a missing one is an error).
//!
//! Damage: a torn final record of the *last* segment (a crash mid-append; never
//! acknowledged) is truncated with a warning; anything else (a damaged record followed by
//! data, a torn record in an older segment, an undecodable record, a missing segment) refuses
//! to start with the file and byte offset.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use shardwise_core::dispatch::Update;
use shardwise_core::dispatch::framing::{FramingError, Tail, segment_header};
use shardwise_core::dispatch::journal::{JournalError, decode_updates, encode_update};

const PREFIX: &str = "segment-";
const SUFFIX: &str = ".swj";

/// Where segments live. [`DirStorage`] is the real one.
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
}

/// Segment files in a directory.
#[derive(Debug)]
pub struct DirStorage {
    dir: PathBuf,
    current: Option<File>,
}

impl DirStorage {
    /// Uses (and creates) `<work_dir>/journal`.
    pub fn open(work_dir: &Path) -> io::Result<Self> {
        let dir = work_dir.join("journal");
        fs::create_dir_all(&dir)?;
        Ok(DirStorage { dir, current: None })
    }

    fn path(&self, segment: u64) -> PathBuf {
        self.dir.join(format!("{PREFIX}{segment:012}{SUFFIX}"))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }
}

impl Storage for DirStorage {
    fn list(&self) -> io::Result<Vec<u64>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') {
                continue;
            }
            let n = name
                .strip_prefix(PREFIX)
                .and_then(|r| r.strip_suffix(SUFFIX))
                .and_then(|n| n.parse::<u64>().ok())
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "unexpected file {:?} in the journal directory {}",
                            name,
                            self.dir.display()
                        ),
                    )
                })?;
            out.push(n);
        }
        Ok(out)
    }

    fn read(&self, segment: u64) -> io::Result<Vec<u8>> {
        fs::read(self.path(segment))
    }

    fn create(&mut self, segment: u64, bytes: &[u8]) -> io::Result<()> {
        let mut f = OpenOptions::new().create_new(true).append(true).open(self.path(segment))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        self.sync_dir()?;
        self.current = Some(f);
        Ok(())
    }

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.current {
            Some(f) => f.write_all(bytes),
            None => Err(io::Error::other("no journal segment is open")),
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        match &mut self.current {
            Some(f) => f.sync_data(),
            None => Err(io::Error::other("no journal segment is open")),
        }
    }

    fn truncate(&mut self, segment: u64, len: u64) -> io::Result<()> {
        let f = OpenOptions::new().write(true).open(self.path(segment))?;
        f.set_len(len)?;
        f.sync_all()
    }

    fn remove(&mut self, segment: u64) -> io::Result<()> {
        fs::remove_file(self.path(segment))?;
        self.sync_dir()
    }

    fn describe(&self, segment: u64) -> String {
        self.path(segment).display().to_string()
    }
}

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
    #[error("cannot read the journal: {0}")]
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

/// An open journal: replayed, with a fresh segment for this run.
pub struct Journal<S: Storage> {
    storage: S,
    fsync: bool,
    segment: u64,
    segment_bytes: u64,
    buf: Vec<u8>,
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
        let mut decoded: Vec<(u64, Vec<Update>)> = Vec::with_capacity(segments.len());
        let mut replay = Replay::default();
        let last = segments.last().copied();
        for &seg in &segments {
            let bytes = storage.read(seg)?;
            let file = storage.describe(seg);
            let r = decode_updates(&bytes).map_err(|e| match e {
                JournalError::Framing(FramingError::Corrupt { offset, reason }) => {
                    OpenError::Corrupt { file: file.clone(), offset, reason }
                }
                JournalError::BadRecord { offset, reason } => {
                    OpenError::Corrupt { file: file.clone(), offset, reason }
                }
                other => {
                    OpenError::Corrupt { file: file.clone(), offset: 0, reason: other.to_string() }
                }
            })?;
            if let Tail::Torn { offset, discarded, reason } = &r.tail {
                if Some(seg) != last {
                    return Err(OpenError::Corrupt {
                        file,
                        offset: *offset,
                        reason: format!(
                            "a torn record in a segment that is not the newest: {reason}"
                        ),
                    });
                }
                storage.truncate(seg, *offset)?;
                replay.warnings.push(format!(
                    "journal file {file}: truncated a torn final record at byte offset {offset} \
                     ({discarded} bytes discarded: {reason}); it was never acknowledged"
                ));
            }
            decoded.push((seg, r.updates));
        }
        // Start at the newest snapshot; everything after it must be consecutive.
        let start = decoded.iter().rposition(|(_, u)| starts_with_snapshot(u)).unwrap_or(0);
        let mut expected = decoded.get(start).map(|(s, _)| *s);
        if start == 0 && decoded.first().is_some_and(|(s, u)| *s != 0 && !starts_with_snapshot(u)) {
            return Err(OpenError::MissingSegment { missing: 0, file: storage.describe(0) });
        }
        for (seg, updates) in decoded.drain(..).skip(start) {
            if let Some(want) = expected
                && seg != want
            {
                return Err(OpenError::MissingSegment {
                    missing: want,
                    file: storage.describe(want),
                });
            }
            expected = Some(seg + 1);
            replay.updates.extend(updates);
            replay.segments += 1;
        }
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
            },
            replay,
        ))
    }

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

    /// Compaction: a new segment starting with `snapshot`, made durable, then every older
    /// segment deleted. A crash in between leaves both; replay starts at the snapshot.
    pub fn compact(&mut self, snapshot: &Update) -> io::Result<()> {
        let mut bytes = segment_header().to_vec();
        encode_update(snapshot, &mut bytes).map_err(io::Error::other)?;
        let next = self.segment + 1;
        self.storage.create(next, &bytes)?;
        let old: Vec<u64> = self.storage.list()?.into_iter().filter(|s| *s < next).collect();
        self.segment = next;
        self.segment_bytes = bytes.len() as u64;
        for s in old {
            self.storage.remove(s)?;
        }
        Ok(())
    }
}

/// `shardwise journal dump DIR`: every record of the journal in `work_dir`, one JSON object
/// per line (`{"segment", "offset", "update"}`), damage reported as it would be at startup
/// (nothing is modified: a torn tail is reported, not truncated).
pub fn dump(work_dir: &Path, out: &mut dyn Write) -> Result<usize, String> {
    let storage = DirStorage { dir: work_dir.join("journal"), current: None };
    if !storage.dir.is_dir() {
        return Err(format!("{} has no journal directory", work_dir.display()));
    }
    let mut segments = storage.list().map_err(|e| e.to_string())?;
    segments.sort_unstable();
    let mut n = 0;
    for seg in segments {
        let file = storage.describe(seg);
        let bytes = storage.read(seg).map_err(|e| format!("{file}: {e}"))?;
        let decoded = shardwise_core::dispatch::framing::decode_segment(&bytes)
            .map_err(|e| format!("{file}: {e}"))?;
        for r in &decoded.records {
            let update: serde_json::Value = serde_json::from_slice(r.payload)
                .map_err(|e| format!("{file}: record at byte offset {}: {e}", r.offset))?;
            let line = serde_json::json!({"segment": seg, "offset": r.offset, "update": update});
            writeln!(out, "{line}").map_err(|e| e.to_string())?;
            n += 1;
        }
        if let Tail::Torn { offset, reason, .. } = decoded.tail {
            eprintln!("{file}: torn final record at byte offset {offset}: {reason}");
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use shardwise_core::dispatch::{ClientId, Millis, State};

    use super::*;

    /// In-memory storage whose failures tests switch on.
    #[derive(Clone, Default)]
    struct Mem {
        files: Arc<Mutex<BTreeMap<u64, Vec<u8>>>>,
        current: Option<u64>,
        fail_append: bool,
        fail_sync: bool,
    }

    impl Storage for Mem {
        fn list(&self) -> io::Result<Vec<u64>> {
            Ok(self.files.lock().unwrap().keys().copied().collect())
        }
        fn read(&self, s: u64) -> io::Result<Vec<u8>> {
            Ok(self.files.lock().unwrap()[&s].clone())
        }
        fn create(&mut self, s: u64, b: &[u8]) -> io::Result<()> {
            self.files.lock().unwrap().insert(s, b.to_vec());
            self.current = Some(s);
            Ok(())
        }
        fn append(&mut self, b: &[u8]) -> io::Result<()> {
            if self.fail_append {
                return Err(io::Error::other("disk full"));
            }
            let s = self.current.unwrap();
            self.files.lock().unwrap().get_mut(&s).unwrap().extend_from_slice(b);
            Ok(())
        }
        fn sync(&mut self) -> io::Result<()> {
            if self.fail_sync { Err(io::Error::other("fsync failed")) } else { Ok(()) }
        }
        fn truncate(&mut self, s: u64, len: u64) -> io::Result<()> {
            self.files.lock().unwrap().get_mut(&s).unwrap().truncate(len as usize);
            Ok(())
        }
        fn remove(&mut self, s: u64) -> io::Result<()> {
            self.files.lock().unwrap().remove(&s);
            Ok(())
        }
        fn describe(&self, s: u64) -> String {
            format!("mem/{s}")
        }
    }

    fn rec(i: u64) -> Update {
        Update::ReleaseClient { client_id: ClientId(3000 + i), at: Millis(i) }
    }

    #[test]
    fn every_run_gets_its_own_segment_and_replay_reads_them_all() {
        let mem = Mem::default();
        let (mut j, r) = Journal::open(mem.clone(), true).unwrap();
        assert!(r.updates.is_empty());
        j.append(&[rec(1), rec(2)]).unwrap();
        j.commit().unwrap();
        let (mut j2, r) = Journal::open(mem.clone(), true).unwrap();
        assert_eq!(r.updates, vec![rec(1), rec(2)]);
        assert_eq!(j2.segment(), 1);
        j2.append(&[rec(3)]).unwrap();
        let (_, r) = Journal::open(mem.clone(), true).unwrap();
        assert_eq!(r.updates, vec![rec(1), rec(2), rec(3)]);
        assert_eq!(mem.files.lock().unwrap().len(), 3);
    }

    #[test]
    fn torn_tail_is_truncated_with_a_warning() {
        let mem = Mem::default();
        let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
        j.append(&[rec(1), rec(2)]).unwrap();
        {
            let mut files = mem.files.lock().unwrap();
            let seg = files.get_mut(&0).unwrap();
            let len = seg.len();
            seg.truncate(len - 3);
        }
        // The torn segment is the newest one: truncated, the first record kept.
        let (_, r) = Journal::open(mem.clone(), true).unwrap();
        assert_eq!(r.updates, vec![rec(1)]);
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(r.warnings[0].contains("truncated a torn final record"));
    }

    #[test]
    fn corruption_in_the_middle_refuses_with_file_and_offset() {
        let mem = Mem::default();
        let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
        j.append(&[rec(1), rec(2), rec(3)]).unwrap();
        mem.files.lock().unwrap().get_mut(&0).unwrap()[30] ^= 0x40;
        let e = Journal::open(mem.clone(), true).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("journal file mem/0 is corrupt at byte offset 16"), "{msg}");
    }

    #[test]
    fn a_missing_segment_refuses() {
        let mem = Mem::default();
        for _ in 0..3 {
            let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
            j.append(&[rec(1)]).unwrap();
        }
        mem.files.lock().unwrap().remove(&1);
        let e = Journal::open(mem.clone(), true).unwrap_err();
        assert!(matches!(e, OpenError::MissingSegment { missing: 1, .. }), "{e}");
    }

    #[test]
    fn write_and_fsync_failures_surface() {
        let mut mem = Mem::default();
        let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
        j.storage.fail_sync = true;
        j.append(&[rec(1)]).unwrap();
        assert!(j.commit().is_err(), "a failed fsync is reported, never acknowledged");
        mem.fail_append = true;
        let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
        assert!(j.append(&[rec(2)]).is_err());
        // Without fault tolerance commit does not sync.
        let (mut j, _) = Journal::open(Mem { fail_sync: true, ..Mem::default() }, false).unwrap();
        assert!(j.commit().is_ok());
    }

    #[test]
    fn compaction_keeps_only_the_snapshot_and_what_follows() {
        let mem = Mem::default();
        let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
        j.append(&[rec(1), rec(2)]).unwrap();
        let snap = Update::Snapshot { state: Box::new(State::new(vec![])) };
        j.compact(&snap).unwrap();
        j.append(&[rec(3)]).unwrap();
        assert_eq!(mem.files.lock().unwrap().keys().copied().collect::<Vec<_>>(), vec![1]);
        let (_, r) = Journal::open(mem.clone(), true).unwrap();
        assert_eq!(r.updates, vec![snap, rec(3)]);
    }

    #[test]
    fn dir_storage_round_trip() {
        let dir = std::env::temp_dir().join(format!("shardwise-journal-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (mut j, _) = Journal::open(DirStorage::open(&dir).unwrap(), true).unwrap();
        j.append(&[rec(1)]).unwrap();
        j.commit().unwrap();
        let (_, r) = Journal::open(DirStorage::open(&dir).unwrap(), true).unwrap();
        assert_eq!(r.updates, vec![rec(1)]);
        fs::write(dir.join("journal").join("stray.txt"), b"x").unwrap();
        assert!(Journal::open(DirStorage::open(&dir).unwrap(), true).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
