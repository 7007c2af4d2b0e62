//! One owner per work dir: [`WorkDirLock`], an exclusive `flock` on `<work_dir>/lock`
//! (which names the holder's pid), taken before replay and held as long as the journal is
//! open; the kernel drops it when its holder exits, killed or not.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::segments::create_dir;

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
