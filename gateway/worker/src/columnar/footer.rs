//! Parquet footers: read within `--max-footer-bytes`, walked before anything decodes them.
//!
//! A footer is Thrift (compact protocol) that a file of any size may make large: a file of
//! 1,000,000 one-row row groups has a 31 MB footer, which the `parquet` crate decodes into
//! about half a gigabyte of metadata (some 500 bytes a column chunk), and a dispatcher that
//! read one for each registration of a Parquet source split by rows held 2.25 GB after four of
//! them. So a footer is read only up to `--max-footer-bytes`, and walked here first, field by
//! field with every length checked against the bytes left and nothing allocated
//! ([`shape`]): that gives its row counts and how many row groups and column chunks it
//! declares.
//!
//! * The dispatcher needs the row counts only, and takes them from the walk: it never decodes
//!   a footer ([`RowCounts`], which also remembers the counts of files by their identity, so
//!   identical footers are not read again, and stops between files when its caller is gone).
//! * A worker decodes the footer of each file it reads, once the walk's estimate of the
//!   decoded size (per row group and column chunk) fits the task's `--max-buffer-bytes`; the
//!   decoded metadata is measured again after.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use shardwise_http::{Code, Problem};

use super::pages::{I64, LIST, Malformed, Reader, STRUCT, malformed};
use super::{corrupt, read_at};
use crate::DataRoots;
use crate::files::shown;

/// The default `--max-footer-bytes`: 16 MiB (a footer of about 500,000 column chunks).
pub const DEFAULT_MAX_FOOTER_BYTES: u64 = 16 << 20;

/// The default `--max-footer-files` of a dispatcher: the most files whose footers one
/// registration reads.
pub const DEFAULT_MAX_FOOTER_FILES: usize = 10_000;

/// How many files' row counts a [`RowCounts`] remembers (about 100 bytes each).
const CACHE_ENTRIES: usize = 65_536;

/// The magic at both ends of a Parquet file.
const MAGIC: &[u8; 4] = b"PAR1";

/// What a footer declares, from a walk that decoded nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Shape {
    /// The file's rows (its row groups' counts, which add up to what the file declares).
    pub(crate) rows: u64,
    pub(crate) row_groups: u64,
    /// Column chunks, over all row groups.
    pub(crate) chunks: u64,
    /// Schema elements.
    pub(crate) schema: u64,
}

impl Shape {
    /// About what the `parquet` crate's decoded metadata takes (measured: some 100 bytes a
    /// row group and 420 a column chunk, without statistics; rounded up for the allocator).
    pub(crate) fn decoded_bytes(&self) -> u64 {
        self.row_groups
            .saturating_mul(128)
            .saturating_add(self.chunks.saturating_mul(512))
            .saturating_add(self.schema.saturating_mul(256))
    }
}

/// The footer of a Parquet file of `len` bytes: its bytes, at most `max` of them.
pub(crate) fn footer_bytes(
    path: &str,
    file: &File,
    len: u64,
    max: u64,
) -> Result<Vec<u8>, Problem> {
    let not_parquet = |why: &str| corrupt(path, format_args!("is not a Parquet file ({why})"));
    if len < 12 {
        return Err(not_parquet("it is too short"));
    }
    if read_at(path, file, 0, 4)? != MAGIC {
        return Err(not_parquet("no PAR1 magic at its start"));
    }
    let tail = read_at(path, file, len - 8, 8)?;
    let (size, magic) = tail.split_at(4);
    if magic == b"PARE" {
        return Err(corrupt(path, "has an encrypted footer, which this worker does not read"));
    }
    if magic != MAGIC {
        return Err(not_parquet("no PAR1 magic at its end"));
    }
    let size = u64::from(u32::from_le_bytes(size.try_into().unwrap_or_default()));
    if size > len - 12 {
        return Err(corrupt(
            path,
            format_args!("declares a footer of {size} bytes, more than the file holds"),
        ));
    }
    if size > max {
        return Err(Problem::new(
            Code::ResourceExhausted,
            format!(
                "file {} has a footer of {size} bytes; footers of at most {max} bytes are read \
                 (--max-footer-bytes)",
                shown(path)
            ),
        ));
    }
    read_at(path, file, len - 8 - size, size)
}

/// Walks a footer (`FileMetaData`): its row groups' row counts, which must add up to the
/// file's, and how many row groups, column chunks and schema elements it declares. Nothing is
/// allocated; the work is linear in the bytes.
pub(crate) fn shape(path: &str, bytes: &[u8]) -> Result<Shape, Problem> {
    let walked = walk(bytes)
        .map_err(|e| corrupt(path, format_args!("has a footer that does not decode ({})", e.0)))?;
    if let Some(group) = walked.negative {
        return Err(corrupt(path, format_args!("row group {group} has a negative row count")));
    }
    let Some(rows) = walked.sum else { return Err(corrupt(path, "has too many rows")) };
    if u64::try_from(walked.declared).ok() != Some(rows) {
        return Err(corrupt(
            path,
            format_args!("declares {} rows, but its row groups hold {rows}", walked.declared),
        ));
    }
    Ok(Shape { rows, ..walked.shape })
}

/// What a walk found: the shape (without its rows), the file's declared row count, the sum of
/// its row groups' (`None` past `u64`), the first row group of a negative count.
struct Walked {
    shape: Shape,
    declared: i64,
    sum: Option<u64>,
    negative: Option<u64>,
}

fn walk(bytes: &[u8]) -> Result<Walked, Malformed> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let mut shape = Shape::default();
    let (mut declared, mut sum, mut negative) = (None, Some(0u64), None);
    let mut last = 0i16;
    while let Some((id, ty)) = r.field(&mut last)? {
        match (id, ty) {
            (2, LIST) => {
                let (n, elem) = r.list_header()?;
                shape.schema = n;
                for _ in 0..n {
                    r.skip(elem, 1, true)?;
                }
            }
            (3, I64) => declared = Some(r.i64()?),
            (4, LIST) => {
                let (n, elem) = r.list_header()?;
                if n > 0 && elem != STRUCT {
                    return Err(malformed("its row groups are not structs"));
                }
                shape.row_groups = n;
                for group in 0..n {
                    let mut rows = None;
                    let mut last = 0i16;
                    while let Some((id, ty)) = r.field(&mut last)? {
                        match (id, ty) {
                            (1, LIST) => {
                                let (c, elem) = r.list_header()?;
                                shape.chunks = shape.chunks.saturating_add(c);
                                for _ in 0..c {
                                    r.skip(elem, 3, true)?;
                                }
                            }
                            (3, I64) => rows = Some(r.i64()?),
                            _ => r.skip(ty, 2, false)?,
                        }
                    }
                    let Some(rows) = rows else {
                        return Err(Malformed(format!("row group {group} lacks its row count")));
                    };
                    match u64::try_from(rows) {
                        Ok(rows) => sum = sum.and_then(|s| s.checked_add(rows)),
                        Err(_) => {
                            negative.get_or_insert(group);
                        }
                    }
                }
            }
            _ => r.skip(ty, 1, false)?,
        }
    }
    let declared = declared.ok_or_else(|| malformed("it lacks the file's row count"))?;
    Ok(Walked { shape, declared, sum, negative })
}

/// Row counts of Parquet files from their footers, for a dispatcher: each footer read within
/// `max_footer_bytes` and walked, never decoded; at most `max_files` files a call; the counts
/// of files remembered by their identity (device, inode, size, modification and change times)
/// so that a footer is not read again while its file is unchanged.
#[derive(Debug)]
pub struct RowCounts {
    roots: DataRoots,
    max_footer_bytes: u64,
    max_files: usize,
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    counts: HashMap<Identity, u64>,
    order: VecDeque<Identity>,
}

/// A file's identity: device, inode, size, modification and change times (s, ns).
type Identity = (u64, u64, u64, i64, i64, i64, i64);

fn identity(file: &File) -> Option<Identity> {
    use std::os::unix::fs::MetadataExt as _;
    let m = file.metadata().ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()))
}

impl RowCounts {
    /// Counts under `roots` (opened as a worker opens them), footers of at most
    /// `max_footer_bytes`, at most `max_files` files a call.
    pub fn new(roots: DataRoots, max_footer_bytes: u64, max_files: usize) -> RowCounts {
        RowCounts { roots, max_footer_bytes, max_files, cache: Mutex::default() }
    }

    /// The row counts of `paths`, in order. Stops (`UNAVAILABLE`) at the next file once
    /// `cancel` is set (its caller went away).
    pub fn count(&self, paths: &[String], cancel: &AtomicBool) -> Result<Vec<u64>, Problem> {
        if paths.len() > self.max_files {
            return Err(Problem::new(
                Code::ResourceExhausted,
                format!(
                    "{} files are counted by their footers; a registration may name at most {} \
                     (--max-footer-files)",
                    paths.len(),
                    self.max_files
                ),
            ));
        }
        let mut counts = Vec::with_capacity(paths.len());
        for (i, path) in paths.iter().enumerate() {
            if cancel.load(Ordering::Relaxed) {
                tracing::info!(
                    files = paths.len(),
                    counted = i,
                    "footer reads stopped: their caller went away"
                );
                return Err(Problem::new(Code::Unavailable, "the caller went away"));
            }
            counts.push(self.count_one(path)?);
        }
        Ok(counts)
    }

    fn count_one(&self, path: &str) -> Result<u64, Problem> {
        let (file, len) = self.roots.open_blocking(path)?;
        let before = identity(&file);
        if let Some(id) = before
            && let Some(rows) = self.lock().counts.get(&id)
        {
            return Ok(*rows);
        }
        let bytes = footer_bytes(path, &file, len, self.max_footer_bytes)?;
        let rows = shape(path, &bytes)?.rows;
        // Remembered only if the file did not change while it was read.
        if let Some(id) = before
            && identity(&file) == before
        {
            let mut cache = self.lock();
            if cache.counts.insert(id, rows).is_none() {
                cache.order.push_back(id);
            }
            while cache.order.len() > CACHE_ENTRIES {
                if let Some(old) = cache.order.pop_front() {
                    cache.counts.remove(&old);
                }
            }
        }
        Ok(rows)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
