//! Parquet files: rows read a row group at a time, with projection and a row selection in
//! the first and last row groups of the range.
//!
//! The footer is read from the length the file had when opened and checked (see the module
//! above); a row group's selected column chunks are then read into memory, their page
//! headers checked ([`super::pages`]), and decoded by the `parquet` crate from those bytes.
//! The rows of a chunk come from the pages' declared sizes (a dictionary-encoded column
//! counts its average dictionary entry per value), then from the last chunk's decoded size.

use std::collections::VecDeque;
use std::fs::File;
use std::sync::Arc;

use arrow_schema::SchemaRef;
use bytes::Bytes;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader, RowSelection, RowSelector,
};
use parquet::arrow::{FieldLevels, ProjectionMask, parquet_to_arrow_field_levels};
use parquet::file::metadata::{
    PageIndexPolicy, ParquetMetaData, ParquetMetaDataOptions, ParquetMetaDataReader,
    ParquetStatisticsPolicy,
};
use shardwise_core::dataset::{FilesDef, RowsRequest};
use shardwise_http::{Code, Problem};

use super::footer::{DEFAULT_MAX_FOOTER_BYTES, RowCounts, footer_bytes, shape};
use super::pages::{self, GroupPages, PageError, Ranges};
use super::schema::{Plan, quoted};
use super::{
    ReadOptions, Source, Span, corrupt, guarded, read_at, rows_of, rows_per_chunk, too_large,
};
use crate::DataRoots;

/// How many empty batches in a row a row group's decoder may give.
const MAX_EMPTY_BATCHES: usize = 1 << 16;

/// Row counts of Parquet files from their footers (for splits by rows), in order: footers of
/// at most [`DEFAULT_MAX_FOOTER_BYTES`], walked, not decoded (see [`RowCounts`], which a
/// dispatcher keeps, with its flags and its cache).
pub fn parquet_row_counts(roots: &DataRoots, paths: &[String]) -> Result<Vec<u64>, Problem> {
    RowCounts::new(roots.clone(), DEFAULT_MAX_FOOTER_BYTES, usize::MAX)
        .count(paths, &std::sync::atomic::AtomicBool::new(false))
}

/// The rows of a range of a Parquet file.
pub(crate) struct ParquetRows {
    path: String,
    file: File,
    metadata: ArrowReaderMetadata,
    plan: Plan,
    /// The projected columns' Arrow fields and levels, for the decoder.
    levels: FieldLevels,
    /// The leaf columns of the projection.
    leaves: Vec<usize>,
    opts: ReadOptions,
    span: Span,
    /// The first row of the next chunk.
    next: u64,
    /// The row groups still to read: index, first row in the file, rows.
    groups: VecDeque<(usize, u64, u64)>,
    /// The row group being read: its reader, index and the end (in the file) of its rows
    /// in the span.
    current: Option<(ParquetRecordBatchReader, usize, u64)>,
    /// Decoded bytes a row, as the last chunk measured.
    row_bytes: Option<u64>,
}

impl std::fmt::Debug for ParquetRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetRows")
            .field("path", &self.path)
            .field("span", &self.span)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl ParquetRows {
    pub(crate) fn open(
        source: Source<'_>,
        def: &FilesDef,
        req: &RowsRequest,
        opts: &ReadOptions,
    ) -> Result<ParquetRows, Problem> {
        let Source { path, file, len } = source;
        let (metadata, rows) = footer(path, &file, len, opts)?;
        check_chunks(path, &metadata, len)?;
        let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Skip);
        let metadata = guarded(path, "its schema", || {
            ArrowReaderMetadata::try_new(Arc::new(metadata), options)
        })?
        .map_err(|e| corrupt(path, format_args!("has a schema Arrow cannot read: {e}")))?;
        let plan = Plan::new(path, metadata.schema(), def)?;
        let descr = metadata.parquet_schema();
        let roots = descr.root_schema().get_fields().len();
        if metadata.schema().fields().len() != roots || plan.read().iter().any(|i| *i >= roots) {
            return Err(corrupt(path, "has an Arrow schema that does not match its Parquet one"));
        }
        let mask = ProjectionMask::roots(descr, plan.read().iter().copied());
        let hint = metadata.schema().fields();
        let levels =
            guarded(path, "its schema", || parquet_to_arrow_field_levels(descr, mask, Some(hint)))?
                .map_err(|e| corrupt(path, format_args!("has a schema Arrow cannot read: {e}")))?;
        let leaves: Vec<usize> = (0..descr.num_columns())
            .filter(|leaf| plan.read().contains(&descr.get_column_root_idx(*leaf)))
            .collect();
        let span = super::span(path, rows, req)?;
        let mut groups = VecDeque::new();
        let mut first = 0u64;
        for (i, rg) in metadata.metadata().row_groups().iter().enumerate() {
            let n = u64::try_from(rg.num_rows()).unwrap_or(0);
            let end = first.saturating_add(n);
            if n > 0 && end > span.start && first < span.end {
                groups.push_back((i, first, n));
            }
            first = end;
        }
        Ok(ParquetRows {
            path: path.to_owned(),
            file,
            metadata,
            plan,
            levels,
            leaves,
            opts: *opts,
            span,
            next: span.start,
            groups,
            current: None,
            row_bytes: None,
        })
    }

    pub(crate) fn schema(&self) -> SchemaRef {
        self.plan.schema()
    }

    pub(crate) fn next_chunk(&mut self) -> Result<(arrow_array::RecordBatch, bool), Problem> {
        if self.next >= self.span.end {
            return Ok((arrow_array::RecordBatch::new_empty(self.plan.schema()), true));
        }
        // A decoder handing out empty batches forever would be a bug; bounded all the same.
        for _ in 0..MAX_EMPTY_BATCHES {
            let (reader, group, group_end) = match &mut self.current {
                Some(current) => current,
                None => {
                    let opened = self.open_group()?;
                    self.current.insert(opened)
                }
            };
            let (group, group_end) = (*group, *group_end);
            let what = format_args!("row group {group}");
            match super::guarded(&self.path, what, || reader.next())? {
                Some(Ok(batch)) if batch.num_rows() == 0 => {}
                Some(Ok(batch)) => {
                    let rows = rows_of(&batch);
                    let first = self.next;
                    let end = first.saturating_add(rows);
                    if end > group_end {
                        return Err(self.group_error(group, "gave more rows than it has"));
                    }
                    let out = self.plan.apply(batch.columns(), batch.num_rows(), first)?;
                    let bytes =
                        super::check_chunk(&self.path, &out, first, self.opts.max_chunk_bytes)?;
                    self.row_bytes = Some(bytes.div_ceil(rows.max(1)).max(1));
                    self.next = end;
                    if end == group_end {
                        self.current = None;
                    }
                    return Ok((out, end >= self.span.end));
                }
                Some(Err(e)) => {
                    return Err(self.group_error(group, format_args!("does not decode: {e}")));
                }
                None => return Err(self.group_error(group, "ended before its last row")),
            }
        }
        Err(corrupt(&self.path, "gives empty batches without end"))
    }

    fn group_error(&self, group: usize, what: impl std::fmt::Display) -> Problem {
        corrupt(&self.path, format_args!("row group {group} {what}"))
    }

    /// Reads the next row group's column chunks, checks their pages and starts decoding.
    fn open_group(&mut self) -> Result<(ParquetRecordBatchReader, usize, u64), Problem> {
        let Some((group, first, rows)) = self.groups.pop_front() else {
            return Err(Problem::new(Code::Internal, "the Parquet reader ran out of row groups"));
        };
        let path = self.path.as_str();
        let rg = self.metadata.metadata().row_group(group);
        let mut ranges: Vec<(u64, u64, usize)> = Vec::with_capacity(self.leaves.len());
        for &leaf in &self.leaves {
            let cc =
                rg.columns().get(leaf).ok_or_else(|| self.group_error(group, "lacks a column"))?;
            let (start, size) = chunk_range(cc).unwrap_or((0, 0));
            ranges.push((start, start.saturating_add(size), leaf));
        }
        let bytes = self.read_ranges(&ranges)?;
        let max = self.opts.max_chunk_bytes;
        let (mut estimate, mut held) = (0u64, 0u64);
        let descr = self.metadata.parquet_schema();
        for &(start, end, leaf) in &ranges {
            let name = descr.column(leaf).path().string();
            let chunk = bytes.get(start..end).unwrap_or_default();
            let pages = pages::scan(&chunk, max).map_err(|e| match e {
                PageError::Malformed { page, why } => corrupt(
                    path,
                    format_args!("row group {group} column {}: page {page} {why}", quoted(&name)),
                ),
                PageError::TooLarge { page, bytes } => too_large(
                    path,
                    format_args!("row group {group} column {} page {page}", quoted(&name)),
                    bytes,
                    max,
                ),
            })?;
            estimate = estimate.saturating_add(pages.estimate());
            held = held.saturating_add(pages.largest.saturating_add(pages.dict_bytes));
        }
        // The decoder holds one page of each column (and its dictionary) at a time.
        if held > max {
            let what = format!(
                "row group {group} (the largest page of each column read, and its dictionary, \
                 held at once while decoding)"
            );
            return Err(too_large(path, what, held, max));
        }
        let estimate = estimate.div_ceil(rows.max(1)).max(1);
        if estimate > max {
            let what = format!("row group {group} (a row, on average)");
            return Err(too_large(path, what, estimate, max));
        }
        let row_bytes = self.row_bytes.unwrap_or(estimate);
        let from = self.span.start.saturating_sub(first);
        let to = self.span.end.saturating_sub(first).min(rows);
        let batch = rows_per_chunk(self.opts.chunk_bytes, row_bytes, to.saturating_sub(from))
            .min(max / row_bytes.max(1))
            .max(1);
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        let selection = (from > 0 || to < rows).then(|| {
            let mut selectors =
                vec![RowSelector::skip(size(from)), RowSelector::select(size(to - from))];
            if to < rows {
                selectors.push(RowSelector::skip(size(rows - to)));
            }
            RowSelection::from(selectors)
        });
        // The decoder reads its pages from these chunks through `ColumnPages`, which
        // decompresses each into exactly the size its header declares (see `codec`).
        let mut chunks = vec![None; descr.num_columns()];
        for &(start, end, leaf) in &ranges {
            let name: Arc<str> =
                format!("column {}", quoted(&descr.column(leaf).path().string())).into();
            let compression = rg.column(leaf).compression();
            if let Some(slot) = chunks.get_mut(leaf) {
                *slot = Some((bytes.get(start..end).unwrap_or_default(), compression, name));
            }
        }
        let pages = GroupPages { metadata: Arc::clone(self.metadata.metadata()), group, chunks };
        let levels = &self.levels;
        let reader = super::guarded(path, format_args!("row group {group}"), || {
            ParquetRecordBatchReader::try_new_with_row_groups(
                levels,
                &pages,
                size(batch),
                selection,
            )
        })?
        .map_err(|e| self.group_error(group, format_args!("does not decode: {e}")))?;
        Ok((reader, group, first.saturating_add(to)))
    }

    /// Reads `ranges` (start, end, leaf) of the file into memory, each byte once.
    fn read_ranges(&self, ranges: &[(u64, u64, usize)]) -> Result<Ranges, Problem> {
        let mut sorted: Vec<(u64, u64)> = ranges.iter().map(|(s, e, _)| (*s, *e)).collect();
        sorted.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(sorted.len());
        for (start, end) in sorted {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        let mut parts = Vec::with_capacity(merged.len());
        for (start, end) in merged {
            let data = read_at(&self.path, &self.file, start, end - start)?;
            parts.push((start, Bytes::from(data)));
        }
        Ok(Ranges::new(parts))
    }
}

impl pages::ChunkPages {
    /// What the chunk's values take decoded, as its pages declare: their uncompressed bytes,
    /// or, for a dictionary-encoded chunk, its values at the dictionary's average entry if
    /// that is more (plus the dictionary).
    pub(crate) fn estimate(&self) -> u64 {
        let entry = self.dict_bytes.checked_div(self.dict_values).unwrap_or(0);
        self.data_bytes.max(entry.saturating_mul(self.data_values)).saturating_add(self.dict_bytes)
    }
}

/// The byte range of a column chunk (its dictionary page, if any, and data pages), if its
/// offsets are not negative.
fn chunk_range(cc: &parquet::file::metadata::ColumnChunkMetaData) -> Option<(u64, u64)> {
    let start = cc.dictionary_page_offset().unwrap_or_else(|| cc.data_page_offset());
    Some((u64::try_from(start).ok()?, u64::try_from(cc.compressed_size()).ok()?))
}

/// Every column chunk must lie within the file (the decoder would panic on a negative
/// offset, and read what is not there past the end).
fn check_chunks(path: &str, md: &ParquetMetaData, len: u64) -> Result<(), Problem> {
    let columns = md.file_metadata().schema_descr().num_columns();
    for (i, rg) in md.row_groups().iter().enumerate() {
        if rg.columns().len() != columns {
            return Err(corrupt(
                path,
                format_args!(
                    "row group {i} has {} column chunks for {columns} columns",
                    rg.columns().len()
                ),
            ));
        }
        for (c, cc) in rg.columns().iter().enumerate() {
            let inside =
                chunk_range(cc).is_some_and(|(s, n)| s.checked_add(n).is_some_and(|e| e <= len));
            if !inside {
                return Err(corrupt(
                    path,
                    format_args!("row group {i} column chunk {c} lies outside the file"),
                ));
            }
        }
    }
    Ok(())
}

/// The footer of a Parquet file of `len` bytes, decoded, and its row count: at most
/// `--max-footer-bytes` of it read, and decoded only once its walk's estimate of the decoded
/// size fits `max_chunk_bytes` (a task's `--max-buffer-bytes`; see the `footer` module).
fn footer(
    path: &str,
    file: &File,
    len: u64,
    opts: &ReadOptions,
) -> Result<(ParquetMetaData, u64), Problem> {
    let bytes = footer_bytes(path, file, len, opts.max_footer_bytes)?;
    let shape = shape(path, &bytes)?;
    let max = opts.max_chunk_bytes;
    let what = format_args!(
        "its footer ({} row groups of {} column chunks in all, decoded)",
        shape.row_groups, shape.chunks
    );
    if shape.decoded_bytes() > max {
        return Err(too_large(path, what, shape.decoded_bytes(), max));
    }
    let options = ParquetMetaDataOptions::new()
        .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_encoding_stats_policy(ParquetStatisticsPolicy::SkipAll);
    let md = guarded(path, "its footer", || {
        ParquetMetaDataReader::decode_metadata_with_options(&bytes, Some(&options))
    })?
    .map_err(|e| corrupt(path, format_args!("has a footer that does not decode: {e}")))?;
    drop(bytes);
    let decoded = u64::try_from(md.memory_size()).unwrap_or(u64::MAX);
    if decoded > max {
        return Err(too_large(path, what, decoded, max));
    }
    let mut rows = 0u64;
    for (i, rg) in md.row_groups().iter().enumerate() {
        let n = u64::try_from(rg.num_rows())
            .map_err(|_| corrupt(path, format_args!("row group {i} has a negative row count")))?;
        rows = rows.checked_add(n).ok_or_else(|| corrupt(path, "has too many rows"))?;
    }
    if u64::try_from(md.file_metadata().num_rows()).ok() != Some(rows) {
        return Err(corrupt(
            path,
            format_args!(
                "declares {} rows, but its row groups hold {rows}",
                md.file_metadata().num_rows()
            ),
        ));
    }
    Ok((md, rows))
}
