//! TFRecord files: a stream of records, each framed as
//! `length (u64 LE) | masked CRC-32C of the length (u32 LE) | data | masked CRC-32C of the
//! data (u32 LE)`, read front to back; rows are records.
//!
//! The length is believed only once its CRC matches, and only if the rest of the file (as
//! long as when it was opened) holds it; the data is read only then, and its CRC checked.
//! Records before the range are passed over by their lengths (their length CRCs checked,
//! their data not read). A record is one `binary` column `record`, or, with declared
//! tensors, a `tf.train.Example` decoded into them ([`super::example`]).
//!
//! The file's row count is known only at its end: a range that stops before the end checks
//! the count the dataset was registered with only if it stops exactly there.

use std::fs::File;
use std::io::{BufReader, Read as _};

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use shardwise_core::dataset::{FilesDef, RowsRequest, TensorDef};
use shardwise_http::{Code, Problem};

use super::example::{self, Column, Values};
use super::schema::{Plan, quoted};
use super::{ReadOptions, Source, changed, corrupt, short, too_large};
use crate::files::shown;

/// The column of a record without declared tensors.
pub(crate) const RECORD_COLUMN: &str = "record";

/// The masking TFRecord applies to its CRCs.
pub(crate) fn masked_crc(data: &[u8]) -> u32 {
    let c = crc32c::crc32c(data);
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// The rows of a range of a TFRecord file.
pub(crate) struct TfRecordRows {
    path: String,
    reader: BufReader<File>,
    len: u64,
    /// The offset of the next record's header.
    pos: u64,
    /// The index of the next record to read.
    record: u64,
    /// A record read but left for the next chunk (it did not fit in this one).
    pending: Option<Vec<Values>>,
    plan: Plan,
    /// The declared features decoded, in the order of the plan's columns; `None`: records
    /// are raw bytes.
    features: Option<Vec<TensorDef>>,
    opts: ReadOptions,
    req: RowsRequest,
    done: bool,
}

impl std::fmt::Debug for TfRecordRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TfRecordRows")
            .field("path", &self.path)
            .field("pos", &self.pos)
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

impl TfRecordRows {
    pub(crate) fn open(
        source: Source<'_>,
        def: &FilesDef,
        req: &RowsRequest,
        opts: &ReadOptions,
    ) -> Result<TfRecordRows, Problem> {
        let Source { path, file, len } = source;
        let fields: Vec<Field> = if def.tensors.is_empty() {
            vec![Field::new(RECORD_COLUMN, DataType::Binary, false)]
        } else {
            if let Some(t) = def.tensors.iter().find(|t| !example::decodable(t.dtype)) {
                return Err(Problem::new(
                    Code::InvalidArgument,
                    format!(
                        "file {}: tfrecord features decode to float32, int64, string or \
                         binary; tensor {} is {}",
                        shown(path),
                        quoted(&t.name),
                        t.dtype.as_str()
                    ),
                ));
            }
            def.tensors
                .iter()
                .map(|t| Field::new(&t.name, example::column_type(t), false))
                .collect()
        };
        let plan = Plan::new(path, &Schema::new(fields), def)?;
        let features = (!def.tensors.is_empty())
            .then(|| plan.read().iter().filter_map(|i| def.tensors.get(*i)).cloned().collect());
        let mut rows = TfRecordRows {
            path: path.to_owned(),
            reader: BufReader::with_capacity(64 << 10, file),
            len,
            pos: 0,
            record: 0,
            pending: None,
            plan,
            features,
            opts: *opts,
            req: req.clone(),
            done: false,
        };
        while rows.record < req.start {
            if !rows.skip_record()? {
                return Err(rows.ended_early());
            }
        }
        Ok(rows)
    }

    pub(crate) fn schema(&self) -> SchemaRef {
        self.plan.schema()
    }

    pub(crate) fn next_chunk(&mut self) -> Result<(RecordBatch, bool), Problem> {
        if self.done {
            return Ok((RecordBatch::new_empty(self.plan.schema()), true));
        }
        let first = self.record - u64::from(self.pending.is_some());
        let cap = self.opts.max_chunk_bytes.min(i32::MAX as u64);
        let mut columns = self.new_columns();
        let (mut rows, mut bytes) = (0u64, 0u64);
        let mut at_end = false;
        loop {
            let index = first + rows;
            if self.req.stop.is_some_and(|stop| index >= stop) {
                break;
            }
            let values = match self.pending.take() {
                Some(values) => values,
                None => match self.read_record()? {
                    Some(values) => values,
                    None => {
                        at_end = true;
                        break;
                    }
                },
            };
            let size = values.iter().map(Values::size).fold(4u64, u64::saturating_add);
            if size > cap {
                return Err(too_large(&self.path, format_args!("record {index}"), size, cap));
            }
            if rows > 0 && bytes.saturating_add(size) > cap {
                self.pending = Some(values);
                break;
            }
            push(&mut columns, values);
            rows += 1;
            bytes = bytes.saturating_add(size);
            if bytes >= self.opts.chunk_bytes {
                break;
            }
        }
        let next = first + rows;
        let stopped = self.req.stop.is_some_and(|stop| next >= stop);
        if !at_end && !stopped && self.pending.is_none() && self.pos >= self.len {
            at_end = true;
        }
        if at_end {
            self.check_end(next)?;
        } else if stopped && self.req.file_rows == self.req.stop {
            // The range ends where the file should: it must end there.
            let stop = next;
            while self.skip_record()? {}
            if self.record != stop {
                return Err(changed(&self.path, self.record, stop));
            }
        }
        self.done = at_end || stopped;
        let batch = self.finish(columns, rows, first)?;
        Ok((batch, self.done))
    }

    fn new_columns(&self) -> Gathered {
        match &self.features {
            Some(f) => Gathered::Features(f.iter().map(Column::new).collect()),
            None => Gathered::Raw(Column::Bytes { values: Vec::new(), offsets: vec![0] }),
        }
    }

    /// The chunk of `rows` rows gathered in `columns` (raw records in the one column).
    fn finish(&self, columns: Gathered, rows: u64, first: u64) -> Result<RecordBatch, Problem> {
        let failed = |e: arrow_schema::ArrowError| corrupt(&self.path, format_args!("{e}"));
        let arrays: Vec<ArrayRef> = match (columns, &self.features) {
            (Gathered::Features(columns), Some(features)) => columns
                .into_iter()
                .zip(features)
                .map(|(c, t)| c.finish(t))
                .collect::<Result<_, _>>()
                .map_err(failed)?,
            (Gathered::Raw(column), _) => {
                if self.plan.read().is_empty() {
                    Vec::new()
                } else {
                    let t = TensorDef {
                        name: RECORD_COLUMN.to_owned(),
                        dtype: shardwise_core::dataset::DType::Binary,
                        shape: Vec::new(),
                    };
                    vec![column.finish(&t).map_err(failed)?]
                }
            }
            _ => return Err(Problem::new(Code::Internal, "the tfrecord reader lost its columns")),
        };
        let rows = usize::try_from(rows).unwrap_or(usize::MAX);
        let batch = self.plan.apply(&arrays, rows, first)?;
        super::check_chunk(&self.path, &batch, first, self.opts.max_chunk_bytes)?;
        Ok(batch)
    }

    /// At the end of the file, `records` records in: the range and the registered count
    /// must agree with it.
    fn check_end(&self, records: u64) -> Result<(), Problem> {
        if let Some(registered) = self.req.file_rows
            && registered != records
        {
            return Err(changed(&self.path, records, registered));
        }
        if self.req.stop.is_some_and(|stop| stop > records) {
            return Err(short(&self.path, records, &self.req));
        }
        Ok(())
    }

    fn ended_early(&self) -> Problem {
        match self.req.file_rows {
            Some(registered) if registered != self.record => {
                changed(&self.path, self.record, registered)
            }
            _ => short(&self.path, self.record, &self.req),
        }
    }

    /// Reads the next record's header: its data length, or `None` at the end of the file.
    fn header(&mut self) -> Result<Option<u64>, Problem> {
        let rest = self.len.saturating_sub(self.pos);
        if rest == 0 {
            return Ok(None);
        }
        let i = self.record;
        if rest < 16 {
            return Err(self.bad(format_args!("is cut short ({rest} bytes left in the file)")));
        }
        let mut head = [0u8; 12];
        self.read(&mut head)?;
        let (length, crc) = head.split_at(8);
        if masked_crc(length) != le_u32(crc) {
            return Err(self.bad("length CRC mismatch"));
        }
        let length = u64::from_le_bytes(length.try_into().unwrap_or_default());
        if length > rest - 16 {
            return Err(corrupt(
                &self.path,
                format_args!(
                    "record {i}: its length ({length} bytes) is larger than the rest of the file"
                ),
            ));
        }
        Ok(Some(length))
    }

    /// Passes over the next record; false at the end of the file.
    fn skip_record(&mut self) -> Result<bool, Problem> {
        let Some(length) = self.header()? else {
            return Ok(false);
        };
        let skip = i64::try_from(length.saturating_add(4)).unwrap_or(i64::MAX);
        self.reader.seek_relative(skip).map_err(|e| self.io(e))?;
        self.pos = self.pos.saturating_add(16).saturating_add(length);
        self.record += 1;
        Ok(true)
    }

    /// Reads and decodes the next record; `None` at the end of the file.
    fn read_record(&mut self) -> Result<Option<Vec<Values>>, Problem> {
        let Some(length) = self.header()? else {
            return Ok(None);
        };
        let i = self.record;
        let cap = self.opts.max_chunk_bytes.min(i32::MAX as u64);
        if length > cap {
            return Err(too_large(&self.path, format_args!("record {i}"), length, cap));
        }
        let mut data = vec![0u8; usize::try_from(length).unwrap_or(usize::MAX)];
        self.read(&mut data)?;
        let mut crc = [0u8; 4];
        self.read(&mut crc)?;
        if masked_crc(&data) != le_u32(&crc) {
            return Err(self.bad("data CRC mismatch"));
        }
        self.pos = self.pos.saturating_add(16).saturating_add(length);
        self.record += 1;
        let values = match &self.features {
            None => vec![Values::Bytes(data)],
            Some(features) if features.is_empty() => Vec::new(),
            Some(features) => {
                let features: Vec<&TensorDef> = features.iter().collect();
                example::decode(&self.path, i, &data, &features)?
            }
        };
        Ok(Some(values))
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<(), Problem> {
        self.reader.read_exact(buf).map_err(|e| self.io(e))
    }

    fn io(&self, e: std::io::Error) -> Problem {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            self.bad("is cut short (the file is shorter than when it was opened)")
        } else {
            Problem::new(
                Code::FailedPrecondition,
                format!("file {} cannot be read: {e}", shown(&self.path)),
            )
        }
    }

    fn bad(&self, what: impl std::fmt::Display) -> Problem {
        corrupt(&self.path, format_args!("record {}: {what}", self.record))
    }
}

/// A chunk's columns being gathered: the declared features, or the raw records.
enum Gathered {
    Features(Vec<Column>),
    Raw(Column),
}

fn push(columns: &mut Gathered, values: Vec<Values>) {
    match columns {
        Gathered::Features(columns) => {
            for (c, v) in columns.iter_mut().zip(values) {
                c.push(v);
            }
        }
        Gathered::Raw(column) => {
            for v in values {
                column.push(v);
            }
        }
    }
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes.try_into().unwrap_or_default())
}
