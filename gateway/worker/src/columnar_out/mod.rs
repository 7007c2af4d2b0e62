//! The elements of columnar datasets (`parquet`, `arrow`, `tfrecord` sources) as a client
//! gets them: Arrow record batches in an IPC stream, or JSON objects.
//!
//! A pipeline over a columnar source moves rows without looking inside them
//! ([`Element::Row`], a chunk and an index; [`Element::Rows`], what `batch` makes of them), and
//! on a worker every chunk's payload is an Arrow [`RecordBatch`] read from a file. Serving them
//! is turning rows back into columns:
//!
//! * [`record_batches`]: the read's rows as few record batches as the rows allow, without
//!   copying where the rows are runs of one chunk (a slice shares the file's buffers) and
//!   gathering them where they are not (after `shuffle`); each `batch` element is one record
//!   batch.
//! * [`write_stream`]: one Arrow IPC stream per read (`Accept:
//!   application/vnd.apache.arrow.stream`), compressed as the client asked
//!   ([`parse_compression`]), with the read's origin runs in its schema metadata. The media
//!   type, header and metadata key are defined in [`shardwise_client::arrow_stream`], where
//!   clients decode the stream.
//! * [`to_json`]: an element as JSON, for clients that read JSON: a row is an object of its
//!   columns, a batch an array of them. Types without a faithful JSON form are refused, naming
//!   the column, rather than served approximately.
//!
//! A dataset whose elements are JSON values (every source but a columnar one) has no Arrow
//! form: [`record_batches`] refuses it with `FAILED_PRECONDITION` (409).

mod batches;
#[cfg(test)]
mod fixtures;
mod ipc;
mod json;
mod temporal;

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Fields, SchemaRef};
use shardwise_core::dataset::{Chunk, Element, Row};
use shardwise_http::{Code, Problem};

pub use self::batches::record_batches;
pub(crate) use self::ipc::weight;
pub use self::ipc::{IpcCompression, parse_compression, write_stream, write_stream_within};
pub use self::json::{JsonOut, MAX_JSON_DEPTH, to_json};

/// Why an element (or a stream) was not written into a reply.
#[derive(Debug)]
pub enum Unwritten {
    /// It would take the reply past its byte budget: nothing of it was kept.
    Over,
    /// It cannot be written (a column without a JSON form, batches of other columns).
    Refused(Problem),
}

impl From<Problem> for Unwritten {
    fn from(p: Problem) -> Unwritten {
        Unwritten::Refused(p)
    }
}

/// A chunk's payload on a worker: the record batch read, and where its rows lie (for
/// messages about a row).
#[derive(Debug)]
pub struct FileRows {
    /// The rows.
    pub batch: RecordBatch,
    /// The file, as the dataset names it.
    pub path: String,
    /// The row (in the file) of the batch's first row.
    pub first_row: u64,
}

/// The record batch of a chunk: a [`FileRows`]' batch, or a bare [`RecordBatch`].
pub fn batch_of(chunk: &Chunk) -> Option<&RecordBatch> {
    let data = chunk.data();
    data.downcast_ref::<FileRows>().map(|f| &f.batch).or_else(|| data.downcast_ref::<RecordBatch>())
}

/// Names a row in messages: its row in its file when its chunk says so.
pub fn row_name(row: &Row) -> String {
    match row.chunk.data().downcast_ref::<FileRows>() {
        Some(f) => format!(
            "row {} of file {}",
            f.first_row.saturating_add(row.index),
            crate::files::shown(&f.path)
        ),
        None => format!("row {} of a chunk", row.index),
    }
}

/// Names an element in messages: a row by its file, a batch by its first row, a value by
/// `index`, its place among the task's elements.
pub fn element_name(element: &Element, index: u64) -> String {
    match element {
        Element::Value(_) => format!("element {index} of the task"),
        Element::Row(row) => row_name(row),
        Element::Rows(rows) => match rows.first() {
            Some(first) => format!("a batch of {} rows from {}", rows.len(), row_name(first)),
            None => format!("element {index} of the task (an empty batch)"),
        },
    }
}

/// The schema of the first row of `elements`: `None` when they hold no row (an empty read, or
/// JSON values).
pub fn schema_of(elements: &[Element]) -> Option<SchemaRef> {
    elements.iter().find_map(|e| {
        let row = match e {
            Element::Row(row) => row,
            Element::Rows(rows) => rows.first()?,
            Element::Value(_) => return None,
        };
        batch_of(&row.chunk).map(|b| b.schema())
    })
}

/// What a dataset of JSON values answers a request for Arrow.
fn not_columnar() -> Problem {
    Problem::new(
        Code::FailedPrecondition,
        "elements of this task are JSON values: Arrow streams serve rows (of parquet, arrow and \
         tfrecord files, or a worker's own rows); read it as JSON",
    )
    .with_status(406, "Not Acceptable")
}

/// The record batch of a row's chunk, and the row's index in it (checked).
fn locate(row: &Row) -> Result<(&RecordBatch, usize), Problem> {
    let batch = batch_of(&row.chunk)
        .ok_or_else(|| Problem::new(Code::Internal, "a row's chunk holds no Arrow record batch"))?;
    match usize::try_from(row.index) {
        Ok(i) if i < batch.num_rows() => Ok((batch, i)),
        _ => Err(Problem::new(
            Code::Internal,
            format!("row {} of a chunk of {} rows", row.index, batch.num_rows()),
        )),
    }
}

/// Checks that every record batch of one answer has the same columns: the files of a columnar
/// dataset share one schema, and an answer that mixed two could not be one stream. Schemas
/// already seen equal are remembered by address, so a read of many rows of a few files
/// compares each schema once.
#[derive(Debug, Default)]
struct SameColumns {
    first: Option<SchemaRef>,
    seen: Vec<SchemaRef>,
}

impl SameColumns {
    fn check(&mut self, schema: &SchemaRef) -> Result<(), Problem> {
        let Some(first) = &self.first else {
            self.first = Some(Arc::clone(schema));
            return Ok(());
        };
        if Arc::ptr_eq(first, schema) || self.seen.iter().any(|s| Arc::ptr_eq(s, schema)) {
            return Ok(());
        }
        check_same_columns(first.fields(), schema.fields())?;
        // Bounded by the distinct schemas of one read (its chunks).
        self.seen.push(Arc::clone(schema));
        Ok(())
    }
}

/// Refuses `other` unless its columns are `expected` (names, types, nullability and field
/// metadata), naming the first difference.
fn check_same_columns(expected: &Fields, other: &Fields) -> Result<(), Problem> {
    if expected == other {
        return Ok(());
    }
    let differs = |what: String| {
        Err(Problem::new(
            Code::FailedPrecondition,
            format!(
                "rows of one read have different schemas ({what}); the files of a columnar \
                 dataset must share one schema"
            ),
        ))
    };
    if expected.len() != other.len() {
        return differs(format!("{} columns and {}", expected.len(), other.len()));
    }
    for (a, b) in expected.iter().zip(other.iter()) {
        if a.name() == b.name() && a.data_type() == b.data_type() && a != b {
            return differs(format!(
                "{} {} differs in nullability or metadata",
                shardwise_core::dataset::column(a.name()),
                a.data_type()
            ));
        }
        if a != b {
            return differs(format!(
                "{} {} and {} {}",
                shardwise_core::dataset::column(a.name()),
                a.data_type(),
                shardwise_core::dataset::column(b.name()),
                b.data_type()
            ));
        }
    }
    Ok(())
}
