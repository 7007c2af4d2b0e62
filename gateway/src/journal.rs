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
//! offset. These rules hold at every crash point: `crash_points` below cuts the power at each
//! storage operation, in each way a file system may lose unsynced data, and replays.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
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

/// Creates `dir` (and its parents); an error names it, and says so when a file is in the way.
fn create_dir(dir: &Path, what: &str) -> io::Result<()> {
    fs::create_dir_all(dir).map_err(|e| {
        let why = if dir.exists() && !dir.is_dir() {
            "it is a file, not a directory".to_owned()
        } else {
            e.to_string()
        };
        io::Error::new(e.kind(), format!("cannot create {what} {}: {why}", dir.display()))
    })
}

/// The lock file in a work dir (beside `journal/`, never taken for a segment).
pub const LOCK_FILE: &str = "lock";

/// Why a work dir cannot be owned (each text names the path that failed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkDirError {
    /// The work dir (or its journal directory) cannot be created; the error names it.
    #[error("{0}")]
    Create(io::Error),
    /// The lock file cannot be opened.
    #[error("cannot open the lock file {}: {source}", path.display())]
    OpenLock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Another process holds the lock.
    #[error(
        "the work dir {} is in use by another dispatcher ({} holds {}): one dispatcher per work \
         dir; stop that one first",
        work_dir.display(),
        holder.map_or_else(|| "a process that has not written its pid yet".to_owned(), |p| format!("pid {p}")),
        lock.display()
    )]
    InUse {
        /// The work dir.
        work_dir: PathBuf,
        /// Its lock file.
        lock: PathBuf,
        /// The holder's pid, when it has written it.
        holder: Option<u32>,
    },
    /// Locking failed for another reason than another holder.
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The pid cannot be written into the lock file.
    #[error("cannot write the lock file {}: {source}", path.display())]
    WriteLock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// Why `shardwise journal dump` cannot print a journal (each text names the file).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DumpError {
    /// The work dir has no `journal` directory.
    #[error("{} has no journal directory", .0.display())]
    NoJournal(PathBuf),
    /// The journal directory cannot be listed (the error names it).
    #[error("{0}")]
    List(io::Error),
    /// A segment cannot be read or decoded, or one of its records is not JSON.
    #[error("{file}: {detail}")]
    Segment {
        /// The segment file.
        file: String,
        /// What is wrong, and where.
        detail: String,
    },
    /// The output cannot be written.
    #[error("cannot write the dump: {0}")]
    Write(io::Error),
}

/// The exclusive lock that makes one dispatcher the owner of a work dir: `flock` on
/// `<work_dir>/lock` (which holds the owner's pid), released when this value is dropped or the
/// process ends in any way.
#[derive(Debug)]
pub struct WorkDirLock {
    _file: File,
    path: PathBuf,
}

impl WorkDirLock {
    /// Creates the work dir if needed and takes its lock; an error names the path that failed,
    /// or the dir and the pid of the process holding it.
    pub fn acquire(work_dir: &Path) -> Result<WorkDirLock, WorkDirError> {
        create_dir(work_dir, "the work dir").map_err(WorkDirError::Create)?;
        let path = work_dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|source| WorkDirError::OpenLock { path: path.clone(), source })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                // The holder writes its pid right after it locked; it may not have yet.
                let mut text = String::new();
                let _ = (&file).take(32).read_to_string(&mut text);
                return Err(WorkDirError::InUse {
                    work_dir: work_dir.to_owned(),
                    lock: path,
                    holder: text.trim().parse::<u32>().ok(),
                });
            }
            Err(TryLockError::Error(source)) => return Err(WorkDirError::Lock { path, source }),
        }
        file.set_len(0)
            .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
            .map_err(|source| WorkDirError::WriteLock { path: path.clone(), source })?;
        Ok(WorkDirLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Segment files in a directory.
#[derive(Debug)]
pub struct DirStorage {
    dir: PathBuf,
    current: Option<File>,
    /// The work dir's lock, held as long as the journal is open (see [`DirStorage::exclusive`]).
    lock: Option<WorkDirLock>,
}

impl DirStorage {
    /// Uses (and creates) `<work_dir>/journal`. Errors name the path that failed.
    pub fn open(work_dir: &Path) -> io::Result<Self> {
        let dir = work_dir.join("journal");
        create_dir(&dir, "the journal directory")?;
        Ok(DirStorage { dir, current: None, lock: None })
    }

    /// Takes the work dir's lock ([`WorkDirLock::acquire`]), then opens it like
    /// [`DirStorage::open`]; the lock is held until the storage (the journal) is dropped.
    pub fn exclusive(work_dir: &Path) -> Result<Self, WorkDirError> {
        let lock = WorkDirLock::acquire(work_dir)?;
        let mut storage = DirStorage::open(work_dir).map_err(WorkDirError::Create)?;
        storage.lock = Some(lock);
        Ok(storage)
    }

    /// The work dir's lock, when this storage holds it.
    pub fn lock(&self) -> Option<&WorkDirLock> {
        self.lock.as_ref()
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
        let named = |e: io::Error| {
            io::Error::new(e.kind(), format!("cannot list {}: {e}", self.dir.display()))
        };
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(named)? {
            let name = entry.map_err(named)?.file_name();
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
        let path = self.path(segment);
        fs::read(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot read {}: {e}", path.display())))
    }

    fn create(&mut self, segment: u64, bytes: &[u8]) -> io::Result<()> {
        let path = self.path(segment);
        let named = |e: io::Error| {
            io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display()))
        };
        let mut f = OpenOptions::new().create_new(true).append(true).open(&path).map_err(named)?;
        f.write_all(bytes).map_err(named)?;
        f.sync_all().map_err(named)?;
        self.sync_dir().map_err(|e| {
            io::Error::new(e.kind(), format!("cannot sync {}: {e}", self.dir.display()))
        })?;
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
        let path = self.path(segment);
        let named = |e: io::Error| {
            io::Error::new(e.kind(), format!("cannot truncate {}: {e}", path.display()))
        };
        let f = OpenOptions::new().write(true).open(&path).map_err(named)?;
        f.set_len(len).map_err(named)?;
        f.sync_all().map_err(named)
    }

    fn remove(&mut self, segment: u64) -> io::Result<()> {
        let path = self.path(segment);
        fs::remove_file(&path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot remove {}: {e}", path.display()))
        })?;
        self.sync_dir()
    }

    fn describe(&self, segment: u64) -> String {
        self.path(segment).display().to_string()
    }

    fn stager(&self) -> Box<dyn Stager> {
        Box::new(DirStager { dir: self.dir.clone() })
    }

    fn install(&mut self, segment: u64, tail: &[u8]) -> io::Result<()> {
        let staged = staged_path(&self.dir, segment);
        let path = self.path(segment);
        let named = |e: io::Error| {
            io::Error::new(e.kind(), format!("cannot install {}: {e}", staged.display()))
        };
        let mut f = OpenOptions::new().append(true).open(&staged).map_err(named)?;
        f.write_all(tail).map_err(named)?;
        f.sync_all().map_err(named)?;
        if path.exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("cannot install {}: the segment exists", path.display()),
            ));
        }
        fs::rename(&staged, &path).map_err(named)?;
        self.sync_dir().map_err(|e| {
            io::Error::new(e.kind(), format!("cannot sync {}: {e}", self.dir.display()))
        })?;
        self.current = Some(f);
        Ok(())
    }

    fn discard_staged(&mut self) -> io::Result<()> {
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(STAGED_PREFIX) && name.ends_with(STAGED_SUFFIX) {
                fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }
}

const STAGED_PREFIX: &str = ".segment-";
const STAGED_SUFFIX: &str = ".swj.staged";

/// Where a staged segment is written: a hidden file beside the segments.
fn staged_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join(format!("{STAGED_PREFIX}{segment:012}{STAGED_SUFFIX}"))
}

/// [`DirStorage`]'s [`Stager`]: hidden files in the journal directory.
#[derive(Debug)]
struct DirStager {
    dir: PathBuf,
}

impl Stager for DirStager {
    fn stage(&mut self, segment: u64, bytes: &[u8]) -> io::Result<()> {
        let path = staged_path(&self.dir, segment);
        let named = |e: io::Error| {
            io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display()))
        };
        let mut f = File::create(&path).map_err(named)?;
        f.write_all(bytes).map_err(named)?;
        f.sync_all().map_err(named)
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

/// An open journal: replayed, with a fresh segment for this run.
pub struct Journal<S: Storage> {
    storage: S,
    fsync: bool,
    segment: u64,
    segment_bytes: u64,
    buf: Vec<u8>,
    /// While a compaction is in flight: the records appended since its snapshot was taken,
    /// encoded, to follow the snapshot in its segment.
    tail: Option<Vec<u8>>,
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

/// `shardwise journal dump DIR`: every record of the journal in `work_dir`, one JSON object
/// per line (`{"segment", "offset", "update"}`), damage reported as it would be at startup
/// (nothing is modified: a torn tail is reported, not truncated).
pub fn dump(work_dir: &Path, out: &mut dyn Write) -> Result<usize, DumpError> {
    // Read only, and without the lock: a running dispatcher keeps its work dir.
    let storage = DirStorage { dir: work_dir.join("journal"), current: None, lock: None };
    if !storage.dir.is_dir() {
        return Err(DumpError::NoJournal(work_dir.to_owned()));
    }
    let mut segments = storage.list().map_err(DumpError::List)?;
    segments.sort_unstable();
    let mut n = 0;
    for seg in segments {
        let file = storage.describe(seg);
        let failed = |detail: String| DumpError::Segment { file: file.clone(), detail };
        let bytes = storage.read(seg).map_err(|e| failed(e.to_string()))?;
        let decoded = shardwise_core::dispatch::framing::decode_segment(&bytes)
            .map_err(|e| failed(e.to_string()))?;
        for r in &decoded.records {
            let update: serde_json::Value = serde_json::from_slice(r.payload)
                .map_err(|e| failed(format!("record at byte offset {}: {e}", r.offset)))?;
            let line = serde_json::json!({"segment": seg, "offset": r.offset, "update": update});
            writeln!(out, "{line}").map_err(DumpError::Write)?;
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
        staged: Arc<Mutex<BTreeMap<u64, Vec<u8>>>>,
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
        fn stager(&self) -> Box<dyn Stager> {
            Box::new(self.clone())
        }
        fn install(&mut self, s: u64, tail: &[u8]) -> io::Result<()> {
            let mut bytes = self.staged.lock().unwrap().remove(&s).unwrap();
            bytes.extend_from_slice(tail);
            self.files.lock().unwrap().insert(s, bytes);
            self.current = Some(s);
            Ok(())
        }
        fn discard_staged(&mut self) -> io::Result<()> {
            self.staged.lock().unwrap().clear();
            Ok(())
        }
    }

    impl Stager for Mem {
        fn stage(&mut self, s: u64, b: &[u8]) -> io::Result<()> {
            self.staged.lock().unwrap().insert(s, b.to_vec());
            Ok(())
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

    /// Appends go on while the snapshot is written: they land in the old segment and, when
    /// the compaction finishes, after the snapshot in the new one; before that replay does
    /// not see the snapshot at all.
    #[test]
    fn a_compaction_in_flight_keeps_the_records_appended_meanwhile() {
        let mem = Mem::default();
        let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
        j.append(&[rec(1), rec(2)]).unwrap();
        j.commit().unwrap();
        let snap = Update::Snapshot { state: Box::new(State::new(vec!["at-2".into()])) };
        let compaction = j.begin_compaction().unwrap();
        assert!(j.begin_compaction().is_err(), "one compaction at a time");
        j.append(&[rec(3)]).unwrap();
        j.commit().unwrap();
        let staged = std::thread::scope(|s| s.spawn(|| compaction.write(&snap)).join()).unwrap();
        assert!(staged.is_ok(), "the snapshot is written on another thread");
        j.append(&[rec(4)]).unwrap();
        j.commit().unwrap();
        // Written, not installed: a restart replays the old segment only.
        let (_, r) = Journal::open(mem.clone(), true).unwrap();
        assert_eq!(r.updates, vec![rec(1), rec(2), rec(3), rec(4)]);
        // (That restart discarded the staged segment and opened segment 1, as a crash and a
        // restart would; start over on a journal of our own.)
        let mem = Mem::default();
        let (mut j, _) = Journal::open(mem.clone(), true).unwrap();
        j.append(&[rec(1), rec(2)]).unwrap();
        let compaction = j.begin_compaction().unwrap();
        j.append(&[rec(3)]).unwrap();
        let staged2 = compaction.write(&snap).unwrap();
        j.append(&[rec(4)]).unwrap();
        j.finish_compaction(staged2).unwrap();
        assert!(!j.compacting());
        j.append(&[rec(5)]).unwrap();
        assert_eq!(mem.files.lock().unwrap().keys().copied().collect::<Vec<_>>(), vec![1]);
        let (_, r) = Journal::open(mem.clone(), true).unwrap();
        assert_eq!(r.updates, vec![snap, rec(3), rec(4), rec(5)]);
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

    /// One owner per work dir: a second lock (another open file, as another process would
    /// have) is refused naming the dir and the pid; `dump` reads without it; dropping the
    /// journal releases it.
    #[test]
    fn a_work_dir_has_one_owner() {
        let dir = std::env::temp_dir().join(format!("shardwise-lock-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (mut j, _) = Journal::open(DirStorage::exclusive(&dir).unwrap(), true).unwrap();
        j.append(&[rec(1)]).unwrap();
        j.commit().unwrap();
        let pid = std::process::id().to_string();
        assert_eq!(fs::read_to_string(dir.join(LOCK_FILE)).unwrap().trim(), pid);
        let err = DirStorage::exclusive(&dir).unwrap_err().to_string();
        assert!(err.contains(&format!("pid {pid}")), "{err}");
        assert!(err.contains(&dir.display().to_string()), "{err}");
        // The lock file is not a segment: dump and replay never see it.
        let mut out = Vec::new();
        assert_eq!(dump(&dir, &mut out).unwrap(), 1);
        assert!(DirStorage::exclusive(&dir).is_err(), "dump left the lock alone");
        drop(j);
        let (_, r) = Journal::open(DirStorage::exclusive(&dir).unwrap(), true).unwrap();
        assert_eq!(r.updates, vec![rec(1)]);
        fs::remove_dir_all(&dir).unwrap();
    }
}

/// Crash consistency, checked exhaustively: a simulated disk that loses power at every
/// possible storage operation, in every way a file system may leave unsynced data.
#[cfg(test)]
mod crash_points {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use shardwise_core::dispatch::{ClientId, Millis, State};

    use super::*;

    /// What survives of data written but not yet synced when the power goes.
    #[derive(Debug, Clone, Copy)]
    enum Loss {
        /// Nothing unsynced survives (and an unsynced new file is gone).
        Everything,
        /// Everything survives.
        Nothing,
        /// Half of the unsynced bytes survive.
        Half,
        /// The file grew, but the unsynced bytes read as zeros.
        Zeros,
    }
    const LOSSES: [Loss; 4] = [Loss::Everything, Loss::Nothing, Loss::Half, Loss::Zeros];

    #[derive(Debug, Clone, Default)]
    struct File {
        durable: Vec<u8>,
        pending: Vec<u8>,
        /// The directory entry is durable.
        linked: bool,
    }

    /// An operation cut short by a crash: applied only if the crash loses nothing.
    type TornOp = Box<dyn FnOnce(&mut BTreeMap<u64, File>) + Send>;

    #[derive(Default)]
    struct Disk {
        files: BTreeMap<u64, File>,
        /// Staged segments, durable once staged (replay never reads them).
        staged: BTreeMap<u64, Vec<u8>>,
        current: Option<u64>,
        ops: usize,
        crash_at: Option<usize>,
        crashed: bool,
        torn_op: Option<TornOp>,
    }

    /// Storage over a shared [`Disk`].
    #[derive(Clone)]
    struct Sim(Arc<Mutex<Disk>>);

    impl Sim {
        fn new(files: BTreeMap<u64, File>, crash_at: Option<usize>) -> Sim {
            Sim(Arc::new(Mutex::new(Disk { files, crash_at, ..Disk::default() })))
        }

        /// Counts an operation; `Err` if the power went before or during it.
        fn step(
            &self,
            torn: impl FnOnce(&mut BTreeMap<u64, File>) + Send + 'static,
        ) -> io::Result<()> {
            let mut d = self.0.lock().unwrap();
            if d.crashed {
                return Err(io::Error::other("powered off"));
            }
            d.ops += 1;
            if d.crash_at == Some(d.ops) {
                d.crashed = true;
                d.torn_op = Some(Box::new(torn));
                return Err(io::Error::other("power failure"));
            }
            Ok(())
        }

        /// The files as they are after the power comes back.
        fn after_crash(&self, loss: Loss) -> BTreeMap<u64, File> {
            let mut d = self.0.lock().unwrap();
            let mut files = d.files.clone();
            if let (Some(op), Loss::Nothing) = (d.torn_op.take(), loss) {
                op(&mut files);
            }
            files
                .into_iter()
                .filter_map(|(n, f)| {
                    let kept = match loss {
                        Loss::Everything => Vec::new(),
                        Loss::Nothing => f.pending.clone(),
                        Loss::Half => f.pending[..f.pending.len() / 2].to_vec(),
                        Loss::Zeros => vec![0; f.pending.len()],
                    };
                    if !f.linked && matches!(loss, Loss::Everything) {
                        return None;
                    }
                    let mut durable = f.durable;
                    durable.extend_from_slice(&kept);
                    Some((n, File { durable, pending: Vec::new(), linked: true }))
                })
                .collect()
        }

        fn ops(&self) -> usize {
            self.0.lock().unwrap().ops
        }
    }

    impl Storage for Sim {
        fn list(&self) -> io::Result<Vec<u64>> {
            let d = self.0.lock().unwrap();
            if d.crashed {
                return Err(io::Error::other("powered off"));
            }
            Ok(d.files.keys().copied().collect())
        }
        fn read(&self, s: u64) -> io::Result<Vec<u8>> {
            let d = self.0.lock().unwrap();
            let f = d.files.get(&s).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
            Ok([f.durable.as_slice(), f.pending.as_slice()].concat())
        }
        fn create(&mut self, s: u64, b: &[u8]) -> io::Result<()> {
            let bytes = b.to_vec();
            let torn = bytes.clone();
            // Cut short: the file exists, unlinked, with its bytes unsynced.
            self.step(move |files| {
                files.insert(s, File { durable: Vec::new(), pending: torn, linked: false });
            })
            .inspect_err(|_| {
                self.0
                    .lock()
                    .unwrap()
                    .files
                    .insert(s, File { durable: Vec::new(), pending: b.to_vec(), linked: false });
            })?;
            let mut d = self.0.lock().unwrap();
            d.files.insert(s, File { durable: bytes, pending: Vec::new(), linked: true });
            d.current = Some(s);
            Ok(())
        }
        fn append(&mut self, b: &[u8]) -> io::Result<()> {
            let cur = self.0.lock().unwrap().current;
            let Some(cur) = cur else { return Err(io::Error::other("no segment")) };
            // Appended bytes are unsynced either way: a crash during the write leaves them
            // as pending as a completed write does.
            let r = self.step(|_| {});
            let mut d = self.0.lock().unwrap();
            if r.is_ok() || d.torn_op.is_some() {
                d.files.get_mut(&cur).unwrap().pending.extend_from_slice(b);
            }
            r
        }
        fn sync(&mut self) -> io::Result<()> {
            let cur = self.0.lock().unwrap().current;
            let Some(cur) = cur else { return Err(io::Error::other("no segment")) };
            self.step(move |files| {
                let f = files.get_mut(&cur).unwrap();
                let p = std::mem::take(&mut f.pending);
                f.durable.extend_from_slice(&p);
            })?;
            let mut d = self.0.lock().unwrap();
            let f = d.files.get_mut(&cur).unwrap();
            let p = std::mem::take(&mut f.pending);
            f.durable.extend_from_slice(&p);
            Ok(())
        }
        fn truncate(&mut self, s: u64, len: u64) -> io::Result<()> {
            let cut = move |files: &mut BTreeMap<u64, File>| {
                let f = files.get_mut(&s).unwrap();
                let mut all = std::mem::take(&mut f.durable);
                all.append(&mut f.pending);
                all.truncate(len as usize);
                f.durable = all;
            };
            self.step(cut)?;
            cut(&mut self.0.lock().unwrap().files);
            Ok(())
        }
        fn remove(&mut self, s: u64) -> io::Result<()> {
            self.step(move |files| {
                files.remove(&s);
            })?;
            self.0.lock().unwrap().files.remove(&s);
            Ok(())
        }
        fn describe(&self, s: u64) -> String {
            format!("sim/{s}")
        }
        fn stager(&self) -> Box<dyn Stager> {
            Box::new(self.clone())
        }
        fn install(&mut self, s: u64, tail: &[u8]) -> io::Result<()> {
            // Three operations: the tail appended to the staged file, its fsync, and the
            // rename with its directory fsync. Cut short, the first two leave the segments
            // as they were; the rename happens whole or not at all.
            self.step(|_| {})?;
            self.step(|_| {})?;
            let staged = self.0.lock().unwrap().staged.get(&s).cloned();
            let Some(mut bytes) = staged else { return Err(io::Error::other("not staged")) };
            bytes.extend_from_slice(tail);
            let renamed = File { durable: bytes, pending: Vec::new(), linked: true };
            let torn = renamed.clone();
            self.step(move |files| {
                files.insert(s, torn);
            })?;
            let mut d = self.0.lock().unwrap();
            d.staged.remove(&s);
            d.files.insert(s, renamed);
            d.current = Some(s);
            Ok(())
        }
        fn discard_staged(&mut self) -> io::Result<()> {
            let mut d = self.0.lock().unwrap();
            if d.crashed {
                return Err(io::Error::other("powered off"));
            }
            d.staged.clear();
            Ok(())
        }
    }

    impl Stager for Sim {
        fn stage(&mut self, s: u64, b: &[u8]) -> io::Result<()> {
            // Cut short, a staged file is as good as absent: nothing reads it.
            self.step(|_| {})?;
            self.0.lock().unwrap().staged.insert(s, b.to_vec());
            Ok(())
        }
    }

    fn rec(i: u64) -> Update {
        Update::ReleaseClient { client_id: ClientId(3000 + i), at: Millis(i) }
    }

    /// A snapshot standing for records `1..=k`.
    fn snap(k: u64) -> Update {
        Update::Snapshot { state: Box::new(State::new(vec![format!("covers-{k}")])) }
    }

    /// The record numbers a replay stands for.
    fn logical(updates: &[Update]) -> Vec<u64> {
        let mut out = Vec::new();
        for u in updates {
            match u {
                Update::ReleaseClient { client_id, .. } => out.push(client_id.0 - 3000),
                Update::Snapshot { .. } => {
                    let k = (0..=100).find(|k| snap(*k) == *u).expect("a known snapshot");
                    out = (1..=k).collect();
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        out
    }

    /// Like [`run`], but each compaction runs in the background as the dispatcher runs it:
    /// begun at every fifth record (the snapshot covering it), the snapshot staged one record
    /// later, and finished two records after that, with appends and commits in between.
    fn run_background(disk: &Sim, from: u64, to: u64) -> (u64, u64) {
        let Ok((mut j, replay)) = Journal::open(disk.clone(), true) else {
            return (0, 0);
        };
        let base = logical(&replay.updates);
        assert_eq!(base, (1..from).collect::<Vec<_>>(), "a run starts from the whole history");
        let (mut acked, mut written) = (from - 1, from - 1);
        let mut begun: Option<(Compaction, u64)> = None;
        let mut staged: Option<Staged> = None;
        for i in from..=to {
            written = i;
            if j.append(&[rec(i)]).is_err() {
                break;
            }
            if i % 2 == 0 {
                if j.commit().is_err() {
                    break;
                }
                acked = i;
            }
            if let Some((c, k)) = begun.take_if(|(_, k)| i == *k + 1) {
                match c.write(&snap(k)) {
                    Ok(s) => staged = Some(s),
                    Err(_) => break,
                }
            }
            if i % 5 == 3
                && let Some(s) = staged.take()
                && j.finish_compaction(s).is_err()
            {
                break;
            }
            if i % 5 == 0 {
                match j.begin_compaction() {
                    Ok(c) => begun = Some((c, i)),
                    Err(_) => break,
                }
            }
        }
        (acked, written)
    }

    /// One dispatcher run: replays, then appends `from..=to`, committing every second record
    /// and compacting every fifth, until the power fails. Returns the highest acknowledged
    /// record (what a reply was sent for) and the highest record handed to the journal.
    fn run(disk: &Sim, from: u64, to: u64) -> (u64, u64) {
        let Ok((mut j, replay)) = Journal::open(disk.clone(), true) else {
            return (0, 0);
        };
        let base = logical(&replay.updates);
        assert_eq!(base, (1..from).collect::<Vec<_>>(), "a run starts from the whole history");
        let (mut acked, mut written) = (from - 1, from - 1);
        for i in from..=to {
            // Handed to the journal: on disk or not, it may come back.
            written = i;
            if j.append(&[rec(i)]).is_err() {
                break;
            }
            if i % 2 == 0 {
                if j.commit().is_err() {
                    break;
                }
                acked = i;
            }
            if i % 5 == 0 && j.compact(&snap(i)).is_err() {
                break;
            }
        }
        (acked, written)
    }

    /// Replays what a crash left; every acknowledged record is there, in order, and nothing
    /// that was never written.
    fn check(files: BTreeMap<u64, File>, acked: u64, written: u64, what: &str) -> u64 {
        let disk = Sim::new(files, None);
        let (_, replay) = Journal::open(disk, true)
            .unwrap_or_else(|e| panic!("{what}: the journal does not open after a crash: {e}"));
        let got = logical(&replay.updates);
        let m = got.len() as u64;
        assert_eq!(got, (1..=m).collect::<Vec<_>>(), "{what}: records out of order or lost");
        assert!(m >= acked, "{what}: acknowledged record {acked} lost (replayed {m})");
        assert!(m <= written, "{what}: replayed {m} records but only {written} were written");
        m
    }

    #[test]
    fn power_loss_at_every_storage_operation_loses_nothing_acknowledged() {
        power_loss_at_every_operation(run);
    }

    /// The same for compactions written in the background ([`Journal::begin_compaction`]):
    /// every storage operation of the staging, the tail, the rename and the deletes.
    #[test]
    fn power_loss_during_a_background_compaction_loses_nothing_acknowledged() {
        power_loss_at_every_operation(run_background);
    }

    fn power_loss_at_every_operation(run: fn(&Sim, u64, u64) -> (u64, u64)) {
        // History from earlier runs: records 1..=6, one compaction.
        let history = Sim::new(BTreeMap::new(), None);
        assert_eq!(run(&history, 1, 6), (6, 6));
        let history = history.after_crash(Loss::Everything);

        let total = {
            let dry = Sim::new(history.clone(), None);
            run(&dry, 7, 23);
            dry.ops()
        };
        let mut cases = 0;
        for crash_at in 1..=total + 1 {
            for loss in LOSSES {
                let disk = Sim::new(history.clone(), Some(crash_at));
                let (acked, written) = run(&disk, 7, 23);
                let (acked, written) = (acked.max(6), written.max(6));
                let after = disk.after_crash(loss);
                let what = format!("crash at op {crash_at}/{total}, {loss:?} lost");
                let m = check(after.clone(), acked, written, &what);
                // The next start crashes too, at each of its own operations: nothing it
                // replayed (the state it would have served) is lost, and a third start works.
                for again in 1..=4 {
                    for loss2 in LOSSES {
                        let disk2 = Sim::new(after.clone(), Some(again));
                        let _ = Journal::open(disk2.clone(), true);
                        let what = format!("{what}, then at op {again} of the restart, {loss2:?}");
                        check(disk2.after_crash(loss2), m, written, &what);
                        cases += 1;
                    }
                }
            }
        }
        println!(
            "{total} storage operations; {} crashes, then {cases} crashed restarts",
            4 * (total + 1)
        );
        assert!(cases > 1000, "{cases} crash cases");
    }
}
