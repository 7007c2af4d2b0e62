//! `shardwise journal dump DIR`: the records of a work dir's journal as JSON lines, read
//! without the lock and without modifying anything.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use shardwise_core::dispatch::framing::Tail;

use crate::segments::DirStorage;
use crate::storage::Storage;

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

/// `shardwise journal dump DIR`: every record of the journal in `work_dir`, one JSON object
/// per line (`{"segment", "offset", "update"}`), damage reported as it would be at startup
/// (nothing is modified: a torn tail is reported, not truncated).
pub fn dump(work_dir: &Path, out: &mut dyn Write) -> Result<usize, DumpError> {
    // Read only, and without the lock: a running dispatcher keeps its work dir.
    let storage = DirStorage::read_only(work_dir);
    if !storage.dir().is_dir() {
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
