//! Rows to record batches: slices where the rows are runs of one chunk, gathers where not.
//!
//! A read's rows come in three shapes. Rows read in file order are long runs of consecutive
//! rows of one chunk: each run is a [`RecordBatch::slice`] of its chunk, which shares the
//! chunk's buffers (nothing is copied until the IPC writer writes them out). Rows after a
//! `shuffle` come one from here, one from there: slicing them would make one-row batches,
//! so they are gathered with Arrow's `interleave` into one batch, a copy of just those rows.
//! Between the two, a read mixes long runs and scattered rows: runs of at least
//! [`MIN_SLICE_ROWS`] rows go out as slices, and the scattered rows between them are gathered,
//! so the answer keeps its order and is a few batches rather than one copied batch or many
//! tiny ones. A `batch` element ([`Element::Rows`]) is always exactly one record batch of its
//! rows: a slice when they are one run, else a gather.

use std::collections::HashMap;

use arrow_array::RecordBatch;
use arrow_select::interleave::interleave_record_batch;
use shardwise_core::dataset::{Chunk, Element, Row};
use shardwise_http::{Code, Problem};

use super::{SameColumns, locate, not_columnar, schema_of};

/// The fewest consecutive rows of one chunk that go out as a batch of their own (a slice);
/// shorter runs are gathered with the rows around them. An IPC record batch costs a message
/// header and a few buffers' padding: below a hundred rows or so, copying the rows is cheaper
/// for both ends than a batch of their own.
pub(super) const MIN_SLICE_ROWS: usize = 128;

/// Consecutive rows of one chunk.
#[derive(Debug)]
struct Run<'a> {
    chunk: *const Chunk,
    batch: &'a RecordBatch,
    start: usize,
    len: usize,
}

impl Run<'_> {
    /// The run's rows, sharing the chunk's buffers.
    fn slice(&self) -> RecordBatch {
        // In range: the run was built from rows `locate` checked.
        self.batch.slice(self.start, self.len)
    }
}

/// The record batches of a read's elements, in order: consecutive [`Element::Row`]s in as few
/// batches as their runs allow (see the module docs), each [`Element::Rows`] as one batch.
///
/// `FAILED_PRECONDITION` for JSON values (a dataset that is not columnar) and for rows whose
/// chunks have different columns.
pub fn record_batches(elements: &[Element]) -> Result<Vec<RecordBatch>, Problem> {
    let mut out = Vec::new();
    let mut same = SameColumns::default();
    let mut loose: Vec<&Row> = Vec::new();
    for element in elements {
        match element {
            Element::Row(row) => loose.push(row),
            Element::Rows(rows) => {
                loose_rows(&loose, &mut same, &mut out)?;
                loose.clear();
                out.push(one_batch(rows, &mut same, elements)?);
            }
            Element::Value(_) => return Err(not_columnar()),
        }
    }
    loose_rows(&loose, &mut same, &mut out)?;
    Ok(out)
}

/// The runs of `rows`, in order.
fn runs<'a>(
    rows: impl IntoIterator<Item = &'a Row>,
    same: &mut SameColumns,
) -> Result<Vec<Run<'a>>, Problem> {
    let mut runs: Vec<Run<'a>> = Vec::new();
    for row in rows {
        let (batch, index) = locate(row)?;
        let chunk = std::sync::Arc::as_ptr(&row.chunk);
        if let Some(last) = runs.last_mut()
            && last.chunk == chunk
            && last.start + last.len == index
        {
            last.len += 1;
            continue;
        }
        same.check(batch.schema_ref())?;
        runs.push(Run { chunk, batch, start: index, len: 1 });
    }
    Ok(runs)
}

/// Consecutive [`Element::Row`]s: long runs as slices, the rows between them gathered.
fn loose_rows(
    rows: &[&Row],
    same: &mut SameColumns,
    out: &mut Vec<RecordBatch>,
) -> Result<(), Problem> {
    let runs = runs(rows.iter().copied(), same)?;
    let mut short: Vec<&Run<'_>> = Vec::new();
    for run in &runs {
        if run.len >= MIN_SLICE_ROWS {
            out.extend(gather(&short)?);
            short.clear();
            out.push(run.slice());
        } else {
            short.push(run);
        }
    }
    out.extend(gather(&short)?);
    Ok(())
}

/// One `batch` element's rows as one record batch. A batch of no rows (which `batch` never
/// makes) is an empty batch of the read's schema.
fn one_batch(
    rows: &[Row],
    same: &mut SameColumns,
    elements: &[Element],
) -> Result<RecordBatch, Problem> {
    let runs = runs(rows, same)?;
    let runs: Vec<&Run<'_>> = runs.iter().collect();
    if let Some(batch) = gather(&runs)? {
        return Ok(batch);
    }
    let schema = schema_of(elements)
        .ok_or_else(|| Problem::new(Code::Internal, "a batch of no rows in a read of no rows"))?;
    Ok(RecordBatch::new_empty(schema))
}

/// The rows of `runs` as one batch: a slice when they are one run, else a copy of just those
/// rows; `None` for no runs.
fn gather(runs: &[&Run<'_>]) -> Result<Option<RecordBatch>, Problem> {
    match runs {
        [] => return Ok(None),
        [run] => return Ok(Some(run.slice())),
        _ => {}
    }
    let mut batches: Vec<&RecordBatch> = Vec::new();
    let mut which: HashMap<*const Chunk, usize> = HashMap::new();
    let mut indices = Vec::with_capacity(runs.iter().map(|r| r.len).sum());
    for run in runs {
        let b = *which.entry(run.chunk).or_insert_with(|| {
            batches.push(run.batch);
            batches.len() - 1
        });
        indices.extend((run.start..run.start + run.len).map(|i| (b, i)));
    }
    let batch = interleave_record_batch(&batches, &indices).map_err(|e| {
        Problem::new(Code::Internal, format!("gathering {} rows failed: {e}", indices.len()))
    })?;
    Ok(Some(batch))
}

#[cfg(test)]
mod tests;
