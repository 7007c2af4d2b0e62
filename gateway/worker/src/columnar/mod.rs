//! Columnar `files` sources read into Arrow record batches: Parquet files, Arrow IPC files
//! (the random-access `ARROW1` format) and TFRecord files.
//!
//! The core never decodes a file: a pipeline asks for rows `start..stop` of a file (a
//! [`RowsRequest`]) and the worker answers with record batches, one chunk at a time. A
//! [`RowReader`] is that answer: opened on one request, it hands out chunks of about
//! [`ReadOptions::chunk_bytes`] decoded bytes until the range is done. It blocks (it reads the
//! file), so the worker runs it off its async threads.
//!
//! **Columns.** `columns` picks the file's columns in that order (all of them otherwise).
//! Declared `tensors` are checked against the file (see the `schema` module): a scalar must
//! have the dtype's own Arrow type, a shaped tensor must be a fixed-size list of exactly its
//! values or a list whose every row holds exactly that many; it leaves the reader as a
//! fixed-size list with the canonical `arrow.fixed_shape_tensor` extension type. The output
//! schema carries no metadata but those extension keys, so files of one layout give *equal*
//! schemas (a task serves one schema). For a TFRecord file the columns are either one
//! `binary` column `record` or the declared `tf.train.Example` features.
//!
//! **Hostile files.** A file is as untrusted as a request. Nothing a file declares is believed
//! before it is checked against what the file can hold, and a failure is an error naming the
//! file, never a panic or an allocation the file chose. The bounds:
//!
//! * Every read stays within the length the file had when it was opened (at most the
//!   worker's `--max-file-bytes`, checked by [`DataRoots`]).
//! * Parquet: the footer (at most `--max-footer-bytes`, [`ReadOptions::max_footer_bytes`])
//!   must lie within the file, is walked before it is decoded (its decoded size, estimated
//!   from its row groups and column chunks and measured after, must fit in
//!   [`ReadOptions::max_chunk_bytes`]; see the `footer` module), its row counts must add up,
//!   and every column chunk must lie within the file. A row group's
//!   selected column chunks are read into memory (at most the file's size) and every page
//!   header in them is parsed and checked *before* the decoder sees those same bytes: each
//!   page must fit in its chunk, the sizes the header declares must fit in the bytes left, and
//!   a page's declared uncompressed size (and its value count, at 8 bytes a value) must fit in
//!   [`ReadOptions::max_chunk_bytes`], and so must the pages the decoder holds at once (the
//!   largest page of each column read, with its dictionary). The decoder then gets its pages
//!   from this module already decompressed, each into exactly the size its header declares:
//!   a body that inflates past it is refused there, naming the file, row group, column and
//!   page, without inflating further (the `codec` module says why the `parquet` crate's own
//!   codecs are not used). Rows per chunk come from those checked page sizes (and, after the
//!   first chunk, from the decoded size of the previous one); a row group whose average row
//!   is larger than `max_chunk_bytes` is refused before it is decoded.
//! * Arrow IPC: the footer and every block must lie within the file; each block's message is
//!   verified (flatbuffers) and its buffers must lie within its body before the decoder runs,
//!   and the decompressed sizes a compressed block declares must fit, with the block, in
//!   `max_chunk_bytes` (a file batch is the unit the decoder reads whole). Dictionaries are
//!   bounded the same way, all together.
//! * TFRecord: a record's length must be covered by its CRC and fit in the rest of the file
//!   and in `max_chunk_bytes`; its data is read only then. Decoding a `tf.train.Example` takes
//!   memory proportional to the record.
//! * Every chunk is measured once decoded; one larger than `max_chunk_bytes` is refused.
//!
//! What these bounds leave to the last check is expansion *inside* a checked Parquet page:
//! dictionary indices repeating a large dictionary value, or run-length levels giving one row
//! of a list column many values. Such a chunk is refused once measured, but its decoding is
//! bounded only by the page sizes and the rows per chunk.
//!
//! The `parquet` crate's page decoders also *panic* on some malformed pages (found by
//! flipping every byte of small files, see the tests), and `arrow_ipc` has assertions a file
//! could reach in ways the checks here do not foresee. So the third-party decoding runs under
//! `catch_unwind`: such a panic is an error naming the file, and the reader fails from then
//! on.
//!
//! **Errors.** A malformed file (bad magic, truncated, a footer or record that does not
//! decode, a CRC mismatch) is [`CORRUPT`]; a file whose columns disagree with the dataset
//! (a missing column, a tensor of another dtype or shape) is `INVALID_ARGUMENT`; a file
//! whose row count is not what the dataset was registered with is `FAILED_PRECONDITION`; a
//! chunk, row or record larger than the limit is `RESOURCE_EXHAUSTED`. Every message names the
//! file (and the column, row group, batch or record).

mod arrow_file;
mod codec;
mod example;
mod footer;
mod pages;
mod parquet;
mod schema;
mod tfrecord;

#[cfg(test)]
mod tests;

use std::fmt::Display;

use arrow_array::{Array, RecordBatch};
use arrow_schema::SchemaRef;
use shardwise_core::dataset::{FileFormat, FilesDef, RowsRequest};
use shardwise_http::{Code, Problem};

use crate::files::{DataRoots, shown};

pub use self::footer::{DEFAULT_MAX_FOOTER_BYTES, DEFAULT_MAX_FOOTER_FILES, RowCounts};
pub use self::parquet::parquet_row_counts;

/// The class of a file that does not decode (a bad magic, a truncation, a CRC mismatch).
///
/// It stands for gRPC's `DATA_LOSS`, which [`Code`] does not have: until it does, such a
/// file is `INVALID_ARGUMENT`, the class the core gives file contents that do not parse (a
/// `jsonl` line that is not JSON).
pub const CORRUPT: Code = Code::InvalidArgument;

/// How a [`RowReader`] cuts rows into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    /// The decoded size a chunk aims at, in bytes; a chunk holds at least one row.
    pub chunk_bytes: u64,
    /// The most a chunk (or one row or record) may decode to: more is refused with
    /// `RESOURCE_EXHAUSTED`. The worker passes its `--max-buffer-bytes`. A Parquet footer's
    /// decoded metadata is bounded by it too.
    pub max_chunk_bytes: u64,
    /// The largest Parquet footer read, in bytes (`--max-footer-bytes`).
    pub max_footer_bytes: u64,
}

/// The rows `start..stop` of one columnar file, read a chunk at a time.
#[derive(Debug)]
pub struct RowReader {
    inner: Inner,
    /// The first row (in the file) of the next chunk.
    position: u64,
    /// Whether the last chunk was handed out.
    done: bool,
    /// The error a chunk failed with: every later call fails with it too.
    failed: Option<Problem>,
}

#[derive(Debug)]
enum Inner {
    Parquet(Box<parquet::ParquetRows>),
    Arrow(Box<arrow_file::ArrowRows>),
    TfRecord(Box<tfrecord::TfRecordRows>),
}

impl RowReader {
    /// Opens `req.path` of `def` (whose format is columnar) beneath `roots` and positions at
    /// row `req.start`. Checks the columns, the declared tensors and (where the file says
    /// how many rows it has) the row range and `req.file_rows`.
    pub fn open(
        roots: &DataRoots,
        def: &FilesDef,
        req: &RowsRequest,
        opts: &ReadOptions,
    ) -> Result<RowReader, Problem> {
        let (file, len) = roots.open_blocking(&req.path)?;
        let source = Source { path: &req.path, file, len };
        let inner = match def.format {
            FileFormat::Parquet => {
                Inner::Parquet(Box::new(parquet::ParquetRows::open(source, def, req, opts)?))
            }
            FileFormat::Arrow => {
                Inner::Arrow(Box::new(arrow_file::ArrowRows::open(source, def, req, opts)?))
            }
            FileFormat::TfRecord => {
                Inner::TfRecord(Box::new(tfrecord::TfRecordRows::open(source, def, req, opts)?))
            }
            other => {
                return Err(Problem::new(
                    Code::InvalidArgument,
                    format!(
                        "file {} is a {} file, which is not read as rows",
                        shown(&req.path),
                        other.as_str()
                    ),
                ));
            }
        };
        Ok(RowReader { inner, position: req.start, done: false, failed: None })
    }

    /// The next chunk of the rows asked for, and whether it is the last one (no rows left
    /// before `stop` or the end of the file). A file with no rows in the range gives one
    /// empty batch (0 rows) with `last = true`; so does every call after the last chunk.
    /// After an error, every call fails with that error.
    pub fn next_chunk(&mut self) -> Result<(RecordBatch, bool), Problem> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.done {
            return Ok((RecordBatch::new_empty(self.schema()), true));
        }
        let chunk = match &mut self.inner {
            Inner::Parquet(r) => r.next_chunk(),
            Inner::Arrow(r) => r.next_chunk(),
            Inner::TfRecord(r) => r.next_chunk(),
        };
        let (batch, last) = chunk.inspect_err(|e| self.failed = Some(e.clone()))?;
        self.position = self.position.saturating_add(rows_of(&batch));
        self.done = last;
        Ok((batch, last))
    }

    /// The first row (in the file) the next chunk starts at.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The schema of every chunk.
    pub fn schema(&self) -> SchemaRef {
        match &self.inner {
            Inner::Parquet(r) => r.schema(),
            Inner::Arrow(r) => r.schema(),
            Inner::TfRecord(r) => r.schema(),
        }
    }
}

/// What a chunk weighs in memory: the bytes its columns' buffers hold *for its rows* (a
/// slice of a larger batch counts its share, not the whole buffers).
pub fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| {
            let data = c.to_data();
            let bytes = data.get_slice_memory_size().unwrap_or_else(|_| c.get_array_memory_size());
            u64::try_from(bytes).unwrap_or(u64::MAX)
        })
        .fold(0u64, u64::saturating_add)
}

/// An opened file: its path as the dataset names it, the file and its length when opened.
pub(crate) struct Source<'a> {
    pub(crate) path: &'a str,
    pub(crate) file: std::fs::File,
    pub(crate) len: u64,
}

/// The rows of a file a request covers, once the file's row count is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: u64,
    pub(crate) end: u64,
}

/// Checks `req` against a file of `rows` rows: the count the dataset was registered with,
/// and the range asked for.
pub(crate) fn span(path: &str, rows: u64, req: &RowsRequest) -> Result<Span, Problem> {
    if let Some(registered) = req.file_rows
        && registered != rows
    {
        return Err(changed(path, rows, registered));
    }
    let end = req.stop.unwrap_or(rows);
    if end > rows || req.start > rows {
        return Err(short(path, rows, req));
    }
    Ok(Span { start: req.start, end: end.max(req.start) })
}

/// A file with another row count than the dataset was registered with.
pub(crate) fn changed(path: &str, rows: u64, registered: u64) -> Problem {
    Problem::new(
        Code::FailedPrecondition,
        format!(
            "file {} has {rows} rows; the dataset was registered with {registered} (it changed \
             since)",
            shown(path)
        ),
    )
}

/// A file with fewer rows than a request covers.
pub(crate) fn short(path: &str, rows: u64, req: &RowsRequest) -> Problem {
    let range = match req.stop {
        Some(stop) => format!("{}..{stop}", req.start),
        None => format!("{}..", req.start),
    };
    Problem::new(
        Code::FailedPrecondition,
        format!(
            "file {} has {rows} rows; rows {range} were asked for (it changed since the \
             dataset was registered)",
            shown(path)
        ),
    )
}

/// A file that does not decode.
pub(crate) fn corrupt(path: &str, detail: impl Display) -> Problem {
    Problem::new(CORRUPT, format!("file {} {detail}", shown(path)))
}

/// Runs third-party decoding of file contents. The `parquet` crate's decoders panic on some
/// malformed pages (an `expect` a flipped encoding byte reaches), and `arrow_ipc` asserts on
/// some inconsistent messages the checks here do not foresee: a panic there is an error
/// naming the file, not a dead worker thread. (It relies on `panic = "unwind"`, the default.)
pub(crate) fn guarded<T>(
    path: &str,
    what: impl Display,
    decode: impl FnOnce() -> T,
) -> Result<T, Problem> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode)).map_err(|panic| {
        let text = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let text: String = text.chars().take(200).collect();
        corrupt(path, format_args!("{what} does not decode ({text})"))
    })
}

/// A chunk, row or record larger than `max_chunk_bytes`.
pub(crate) fn too_large(path: &str, what: impl Display, bytes: u64, max: u64) -> Problem {
    Problem::new(
        Code::ResourceExhausted,
        format!(
            "file {}: {what} decodes to {bytes} bytes, more than this worker holds in one \
             chunk ({max} bytes, its --max-buffer-bytes)",
            shown(path)
        ),
    )
}

/// Refuses a decoded chunk larger than `max`.
pub(crate) fn check_chunk(
    path: &str,
    batch: &RecordBatch,
    first_row: u64,
    max: u64,
) -> Result<u64, Problem> {
    let bytes = batch_bytes(batch);
    if bytes > max {
        let rows = rows_of(batch);
        let what = if rows == 1 {
            format!("row {first_row}")
        } else {
            format!("rows {first_row}..{}", first_row.saturating_add(rows))
        };
        return Err(too_large(path, what, bytes, max));
    }
    Ok(bytes)
}

/// How many rows fit in a chunk of `target` bytes at `row_bytes` a row: at least 1, at most
/// `left`.
pub(crate) fn rows_per_chunk(target: u64, row_bytes: u64, left: u64) -> u64 {
    (target / row_bytes.max(1)).clamp(1, left.max(1))
}

pub(crate) fn rows_of(batch: &RecordBatch) -> u64 {
    u64::try_from(batch.num_rows()).unwrap_or(u64::MAX)
}

/// Reads `len` bytes of `file` at `offset`, which the caller checked lie within the length
/// the file had when opened.
pub(crate) fn read_at(
    path: &str,
    file: &std::fs::File,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, Problem> {
    let mut buf = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
    read_into(path, file, offset, &mut buf)?;
    Ok(buf)
}

/// Fills `buf` from `file` at `offset`.
pub(crate) fn read_into(
    path: &str,
    file: &std::fs::File,
    offset: u64,
    buf: &mut [u8],
) -> Result<(), Problem> {
    use std::os::unix::fs::FileExt as _;
    file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            corrupt(path, "is shorter than when it was opened")
        } else {
            Problem::new(
                Code::FailedPrecondition,
                format!("file {} cannot be read: {e}", shown(path)),
            )
        }
    })
}
