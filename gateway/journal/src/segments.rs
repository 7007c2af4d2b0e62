//! Segment files in a work dir's `journal/` directory ([`DirStorage`]): their names
//! (`segment-<n>.swj`), creation, appends, fsyncs, truncation and removal, and the hidden
//! staged files (`.segment-<n>.swj.staged`) a compaction writes before it names them.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::lock::{WorkDirError, WorkDirLock};
use crate::storage::{Stager, Storage};

const PREFIX: &str = "segment-";
const SUFFIX: &str = ".swj";

/// Creates `dir` (and its parents); an error names it, and says so when a file is in the way.
pub(crate) fn create_dir(dir: &Path, what: &str) -> io::Result<()> {
    fs::create_dir_all(dir).map_err(|e| {
        let why = if dir.exists() && !dir.is_dir() {
            "it is a file, not a directory".to_owned()
        } else {
            e.to_string()
        };
        io::Error::new(e.kind(), format!("cannot create {what} {}: {why}", dir.display()))
    })
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

    /// `<work_dir>/journal` as it is, for reading only: nothing is created or locked.
    pub(crate) fn read_only(work_dir: &Path) -> Self {
        DirStorage { dir: work_dir.join("journal"), current: None, lock: None }
    }

    /// The journal directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
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
