//! Arrow IPC files (the random-access `ARROW1` format): rows read a file batch at a time,
//! whole batches before the range skipped by their row counts, the batches at its ends
//! sliced.
//!
//! The footer and the blocks are read here, not by `arrow_ipc`'s `FileReader`: its block
//! reader trusts the footer's lengths (a negative one panics, a huge one is allocated), and
//! its decoder trusts a message's buffer offsets (one past the body panics) and the
//! decompressed lengths compressed buffers declare. So every block is checked against the
//! file, and every message against its own body, *on the bytes the decoder then reads*; the
//! decoding itself is `arrow_ipc`'s [`FileDecoder`], with its validation of the arrays on.

use std::fs::File;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_buffer::{Buffer, MutableBuffer};
use arrow_ipc::Block;
use arrow_ipc::reader::FileDecoder;
use arrow_schema::SchemaRef;
use shardwise_core::dataset::{FilesDef, RowsRequest};
use shardwise_http::Problem;

use super::schema::Plan;
use super::{
    ReadOptions, Source, Span, batch_bytes, corrupt, guarded, read_at, read_into, rows_of,
    too_large,
};

/// The magic at both ends of an Arrow IPC file.
const MAGIC: &[u8; 6] = b"ARROW1";
/// The marker before a message's length (IPC format 0.15 and later).
const CONTINUATION: [u8; 4] = [0xff; 4];

/// A block of the file (a message and its body), checked to lie within the file.
#[derive(Debug, Clone, Copy)]
struct Blk {
    block: Block,
    offset: u64,
    meta: u64,
    body: u64,
}

/// A record batch block and the rows it holds.
#[derive(Debug, Clone, Copy)]
struct BatchBlock {
    blk: Blk,
    first_row: u64,
    rows: u64,
}

/// The rows of a range of an Arrow IPC file.
pub(crate) struct ArrowRows {
    path: String,
    file: File,
    decoder: FileDecoder,
    plan: Plan,
    opts: ReadOptions,
    span: Span,
    /// The first row of the next chunk.
    next: u64,
    blocks: Vec<BatchBlock>,
    /// The next block to look at.
    block: usize,
    /// The decoded file batch the range is in, its first row and rows per chunk.
    current: Option<(RecordBatch, u64, u64)>,
}

impl std::fmt::Debug for ArrowRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrowRows")
            .field("path", &self.path)
            .field("span", &self.span)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl ArrowRows {
    pub(crate) fn open(
        source: Source<'_>,
        def: &FilesDef,
        req: &RowsRequest,
        opts: &ReadOptions,
    ) -> Result<ArrowRows, Problem> {
        let Source { path, file, len } = source;
        let not_arrow = |why: &str| corrupt(path, format_args!("is not an Arrow IPC file ({why})"));
        if len < 18 {
            return Err(not_arrow("it is too short"));
        }
        if read_at(path, &file, 0, 6)? != MAGIC {
            return Err(not_arrow("no ARROW1 magic at its start"));
        }
        let tail = read_at(path, &file, len - 10, 10)?;
        let (size, magic) = tail.split_at(4);
        if magic != MAGIC {
            return Err(not_arrow("no ARROW1 magic at its end"));
        }
        let size = size.try_into().map(i32::from_le_bytes).unwrap_or(-1);
        // The blocks lie between the leading magic (8 bytes with its padding) and the footer.
        let data_end = u64::try_from(size)
            .ok()
            .and_then(|s| (len - 10).checked_sub(s))
            .filter(|end| *end >= 8)
            .ok_or_else(|| not_arrow("its footer length does not fit in it"))?;
        let footer_bytes = read_at(path, &file, data_end, len - 10 - data_end)?;
        let footer = arrow_ipc::root_as_footer(&footer_bytes)
            .map_err(|e| corrupt(path, format_args!("has a footer that does not decode: {e}")))?;
        let fb_schema = footer.schema().ok_or_else(|| not_arrow("its footer has no schema"))?;
        if !fb_schema.endianness().equals_to_target_endianness() {
            return Err(corrupt(path, "was written big-endian, which this worker does not read"));
        }
        let schema =
            guarded(path, "its schema", || arrow_ipc::convert::try_fb_to_schema(fb_schema))?
                .map_err(|e| {
                    corrupt(path, format_args!("has a schema that does not decode: {e}"))
                })?;
        let plan = Plan::new(path, &schema, def)?;
        let mut dictionaries = Vec::new();
        for (i, block) in footer.dictionaries().iter().flatten().enumerate() {
            let blk = check_block(block, data_end).ok_or_else(|| {
                corrupt(path, format_args!("dictionary block {i} lies outside the file"))
            })?;
            dictionaries.push(blk);
        }
        let mut blocks = Vec::new();
        let mut rows = 0u64;
        for (i, block) in footer.recordBatches().iter().flatten().enumerate() {
            let blk = check_block(block, data_end)
                .ok_or_else(|| corrupt(path, format_args!("batch {i} lies outside the file")))?;
            let meta = read_at(path, &file, blk.offset, blk.meta)?;
            let n = message(&meta)
                .and_then(|m| record_batch(&m, false).map(|rb| rb.length()))
                .and_then(|n| u64::try_from(n).map_err(|_| "has a negative length".to_owned()))
                .map_err(|why| corrupt(path, format_args!("batch {i} {why}")))?;
            blocks.push(BatchBlock { blk, first_row: rows, rows: n });
            rows = rows.checked_add(n).ok_or_else(|| corrupt(path, "has too many rows"))?;
        }
        let span = super::span(path, rows, req)?;
        let mut decoder = FileDecoder::new(Arc::new(schema), footer.version())
            .with_projection(plan.read().to_vec());
        // Dictionaries are held for the whole read: bounded together.
        let mut held = 0u64;
        for (i, blk) in dictionaries.into_iter().enumerate() {
            let what = format!("dictionary block {i}");
            let (bytes, size) = read_block(path, &file, blk, &what, opts, held, true)?;
            held = held.saturating_add(size);
            guarded(path, &what, || decoder.read_dictionary(&blk.block, &bytes))?
                .map_err(|e| corrupt(path, format_args!("{what} does not decode: {e}")))?;
        }
        Ok(ArrowRows {
            path: path.to_owned(),
            file,
            decoder,
            plan,
            opts: *opts,
            span,
            next: span.start,
            blocks,
            block: 0,
            current: None,
        })
    }

    pub(crate) fn schema(&self) -> SchemaRef {
        self.plan.schema()
    }

    pub(crate) fn next_chunk(&mut self) -> Result<(RecordBatch, bool), Problem> {
        if self.next >= self.span.end {
            return Ok((RecordBatch::new_empty(self.plan.schema()), true));
        }
        let current = match self.current.take() {
            Some((batch, first, per)) if self.next < first.saturating_add(rows_of(&batch)) => {
                (batch, first, per)
            }
            _ => self.read_batch()?,
        };
        let (batch, first, per_chunk) = &current;
        let end = first.saturating_add(rows_of(batch)).min(self.span.end);
        let n = (*per_chunk).min(end.saturating_sub(self.next)).max(1);
        let offset = usize::try_from(self.next - first).unwrap_or(usize::MAX);
        let piece = batch.slice(offset, usize::try_from(n).unwrap_or(usize::MAX));
        let out = self.plan.apply(piece.columns(), piece.num_rows(), self.next)?;
        super::check_chunk(&self.path, &out, self.next, self.opts.max_chunk_bytes)?;
        self.next = self.next.saturating_add(n);
        self.current = Some(current);
        Ok((out, self.next >= self.span.end))
    }

    /// Decodes the file batch that holds row `next`, and how many of its rows make a chunk.
    fn read_batch(&mut self) -> Result<(RecordBatch, u64, u64), Problem> {
        while let Some(b) = self.blocks.get(self.block) {
            if b.first_row.saturating_add(b.rows) > self.next {
                break;
            }
            self.block += 1;
        }
        let index = self.block;
        let b = *self
            .blocks
            .get(index)
            .ok_or_else(|| corrupt(&self.path, "ended before its last row"))?;
        self.block += 1;
        let what = format!("batch {index}");
        let (bytes, _) = read_block(&self.path, &self.file, b.blk, &what, &self.opts, 0, false)?;
        let decoder = &self.decoder;
        let batch = guarded(&self.path, &what, || decoder.read_record_batch(&b.blk.block, &bytes))?
            .map_err(|e| corrupt(&self.path, format_args!("{what} does not decode: {e}")))?
            .ok_or_else(|| corrupt(&self.path, format_args!("{what} is not a record batch")))?;
        if rows_of(&batch) != b.rows {
            return Err(corrupt(&self.path, format_args!("{what} changed while it was read")));
        }
        let row_bytes = batch_bytes(&batch).div_ceil(b.rows.max(1));
        let per_chunk = super::rows_per_chunk(self.opts.chunk_bytes, row_bytes, b.rows);
        Ok((batch, b.first_row, per_chunk))
    }
}

/// `block` if it lies within the file's blocks (before `data_end`), with a message of at
/// least its 8-byte prefix.
fn check_block(block: &Block, data_end: u64) -> Option<Blk> {
    let offset = u64::try_from(block.offset()).ok()?;
    let meta = u64::try_from(block.metaDataLength()).ok()?;
    let body = u64::try_from(block.bodyLength()).ok()?;
    let end = offset.checked_add(meta)?.checked_add(body)?;
    (offset >= 8 && meta >= 8 && end <= data_end).then_some(Blk {
        block: *block,
        offset,
        meta,
        body,
    })
}

/// Reads a block whose memory, with what it decompresses to and `held` already, must fit in
/// `max_chunk_bytes`, and checks its message against its body: the block's bytes (aligned,
/// for the decoder to slice) and the memory it takes.
fn read_block(
    path: &str,
    file: &File,
    blk: Blk,
    what: &str,
    opts: &ReadOptions,
    held: u64,
    dictionary: bool,
) -> Result<(Buffer, u64), Problem> {
    let max = opts.max_chunk_bytes;
    let total = blk.meta.saturating_add(blk.body);
    if held.saturating_add(total) > max {
        return Err(too_large(path, what, held.saturating_add(total), max));
    }
    let mut buf = MutableBuffer::from_len_zeroed(usize::try_from(total).unwrap_or(usize::MAX));
    read_into(path, file, blk.offset, buf.as_slice_mut())?;
    let meta_len = usize::try_from(blk.meta).unwrap_or(usize::MAX);
    let (meta, body) = buf.as_slice().split_at_checked(meta_len).unwrap_or_default();
    let decompressed = message(meta)
        .and_then(|m| check_buffers(&record_batch(&m, dictionary)?, body))
        .map_err(|why| corrupt(path, format_args!("{what} {why}")))?;
    let size = total.saturating_add(decompressed);
    if held.saturating_add(size) > max {
        return Err(too_large(path, what, held.saturating_add(size), max));
    }
    Ok((buf.into(), size))
}

/// The message of a block's metadata (after the continuation marker and length).
fn message(meta: &[u8]) -> Result<arrow_ipc::Message<'_>, String> {
    let fb = if meta.get(..4) == Some(&CONTINUATION[..]) { meta.get(8..) } else { meta.get(4..) };
    let fb = fb.ok_or_else(|| "has a message shorter than its prefix".to_owned())?;
    arrow_ipc::root_as_message(fb).map_err(|e| format!("has a message that does not decode: {e}"))
}

/// The record batch a message holds (a dictionary batch's, for a dictionary block).
fn record_batch<'a>(
    message: &arrow_ipc::Message<'a>,
    dictionary: bool,
) -> Result<arrow_ipc::RecordBatch<'a>, String> {
    let batch = if dictionary {
        message.header_as_dictionary_batch().and_then(|d| d.data())
    } else {
        message.header_as_record_batch()
    };
    batch.ok_or_else(|| {
        let kind = if dictionary { "dictionary batch" } else { "record batch" };
        format!("is not a {kind}")
    })
}

/// Checks that the batch's buffers lie within `body`; what compressed buffers declare they
/// decompress to (added up).
fn check_buffers(batch: &arrow_ipc::RecordBatch<'_>, body: &[u8]) -> Result<u64, String> {
    let compressed = batch.compression().is_some();
    let mut decompressed = 0u64;
    for (i, b) in batch.buffers().iter().flatten().enumerate() {
        let range = usize::try_from(b.offset())
            .ok()
            .zip(usize::try_from(b.length()).ok())
            .and_then(|(start, len)| Some(start..start.checked_add(len)?))
            .filter(|r| r.end <= body.len())
            .ok_or_else(|| format!("has buffer {i} outside its body"))?;
        if !compressed || range.is_empty() {
            continue;
        }
        let prefix: [u8; 8] = body
            .get(range.start..range.start.saturating_add(8))
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| format!("has compressed buffer {i} shorter than its length prefix"))?;
        let declared = i64::from_le_bytes(prefix);
        // -1: stored uncompressed (already counted with the block).
        if declared != -1 {
            let n = u64::try_from(declared)
                .map_err(|_| format!("has compressed buffer {i} of a negative length"))?;
            decompressed = decompressed.saturating_add(n);
        }
    }
    Ok(decompressed)
}
