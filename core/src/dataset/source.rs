//! The source stage of a pipeline: produces the source's elements, either all of them (or a
//! static file shard) or, under DYNAMIC sharding, those of the splits the caller provides.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use serde_json::Value;

use super::columnar::{Chunk, Element, Row, RowsRequest};
use super::def::{FileFormat, SourceDef};
use super::error::{DatasetError, brief, precondition, quoted};
use super::files::{TextCursor, bytes_element};
use super::ops::{Need, Out};
use super::outputs::{Outputs, OutputsRequest};
use super::split::{self, SplitElements};
use crate::position::{ElementOrigin, OriginRun, SourceRange, SplitPositions};

/// Where the source's elements come from.
#[derive(Debug, Clone)]
pub(super) enum Feed {
    /// The whole source, except that a `files` source reads only files `first, first +
    /// stride, ...` (FILE sharding; `first = 0, stride = 1` otherwise).
    Static { first: u64, stride: u64 },
    /// Splits provided by the caller; for a `files` source, the set of valid paths.
    Dynamic { paths: Option<HashSet<String>> },
}

impl Feed {
    /// The feed for DYNAMIC sharding of `source`.
    pub(super) fn dynamic(source: &SourceDef) -> Feed {
        let paths = match source {
            SourceDef::Files(f) => Some(f.paths.iter().cloned().collect()),
            _ => None,
        };
        Feed::Dynamic { paths }
    }
}

/// Where the source is within its current chunk (the whole source, a file or a split).
#[derive(Debug, Clone, Default)]
enum Cursor {
    /// Nothing loaded.
    #[default]
    Empty,
    /// Element positions `next..stop`.
    Positions { next: u64, stop: u64 },
    /// One element left.
    Item(Value),
    /// Waiting for the bytes of this file.
    AwaitFile(String),
    /// Lines of a file.
    Text(TextCursor),
    /// Rows of a columnar file (or of several, for a split by rows).
    Rows(Box<RowsCursor>),
    /// The outputs of a split that the caller's producer makes.
    Outputs(Box<OutputsCursor>),
}

/// Where a split produced outside the core is: what to ask for next, the outputs in hand, how
/// many of the first ones are still to drop.
#[derive(Debug, Clone)]
struct OutputsCursor {
    request: OutputsRequest,
    /// Outputs consumed before (a split resumed part way): dropped as they come.
    skip_left: u64,
    pending: Pending,
    /// The producer said no outputs follow those in hand.
    last: bool,
}

/// Outputs handed in and not emitted yet.
#[derive(Debug, Clone, Default)]
enum Pending {
    #[default]
    None,
    Values(VecDeque<Value>),
    /// A chunk and the indices `next..end` of its rows still to emit.
    Rows(Arc<Chunk>, u64, u64),
}

impl OutputsCursor {
    fn new(seq: u64, split: Value, positions: Option<SplitPositions>) -> Box<OutputsCursor> {
        let skip_left = positions.map_or(0, |p| p.skip);
        let request = OutputsRequest { seq, split, positions, provided: 0 };
        Box::new(OutputsCursor { request, skip_left, pending: Pending::None, last: false })
    }

    /// The next output in hand, if any.
    fn pop(&mut self) -> Option<Element> {
        match &mut self.pending {
            Pending::None => None,
            Pending::Values(values) => values.pop_front().map(Element::Value),
            Pending::Rows(chunk, next, end) if *next < *end => {
                let row = Row { chunk: Arc::clone(chunk), index: *next };
                *next += 1;
                Some(Element::Row(row))
            }
            Pending::Rows(..) => None,
        }
    }

    /// No output is in hand.
    fn drained(&self) -> bool {
        match &self.pending {
            Pending::None => true,
            Pending::Values(values) => values.is_empty(),
            Pending::Rows(_, next, end) => next >= end,
        }
    }
}

/// Where a columnar read is: the rows asked for next, the chunk in hand, and (a split by rows
/// that spans files) the pieces of the later files.
#[derive(Debug, Clone)]
struct RowsCursor {
    /// The rows to ask for next: `start` moves on as chunks come.
    want: RowsRequest,
    /// The chunk in hand, and the indices `next..end` of its rows still to emit.
    chunk: Option<(Arc<Chunk>, u64, u64)>,
    /// The caller said no rows of `want` follow the chunk in hand.
    last: bool,
    /// The rows of later files (a split by rows).
    more: VecDeque<RowsRequest>,
}

impl RowsCursor {
    fn new(want: RowsRequest, more: VecDeque<RowsRequest>) -> Box<RowsCursor> {
        Box::new(RowsCursor { want, chunk: None, last: false, more })
    }

    /// The rows of `path` from `start` to the end of the file.
    fn file(path: String, start: u64, file_rows: Option<u64>) -> Box<RowsCursor> {
        RowsCursor::new(RowsRequest { path, start, stop: None, file_rows }, VecDeque::new())
    }
}

/// The state of one pass over the source.
#[derive(Debug, Clone, Default)]
struct Pass {
    /// (Static, non-files) whether the one chunk has been loaded.
    started: bool,
    /// (Static files) how many files of the shard have been requested.
    next_file: u64,
    /// (Dynamic) splits provided and not yet started, with where they lie when the caller
    /// said.
    queue: VecDeque<(Value, Option<SplitPositions>)>,
    /// (Dynamic) the current split's positions and the output offset of its next element,
    /// when the caller said where it lies.
    split: Option<(SourceRange, u64)>,
    /// (Dynamic) records of the awaited file to pass over (a `files` split resumed part way).
    skip_records: u64,
    /// (Dynamic) the output offset at which the current split stops (the rest of it was
    /// consumed before); `None`: its end.
    until: Option<u64>,
    /// (Dynamic) whether the caller said this repetition has no more splits.
    end_of_splits: bool,
    cursor: Cursor,
}

#[derive(Debug, Clone)]
pub(super) struct Source {
    def: SourceDef,
    /// (A source whose positions are rows) the first row of every file, and the total.
    row_starts: Option<(Vec<u64>, u64)>,
    feed: Feed,
    repetition: u64,
    split_requests: u64,
    pass: Pass,
    /// The origin runs of the elements emitted since the last [`Source::take_origins`], but
    /// the current split's, which `run_start` and the split's next offset delimit.
    runs: Vec<OriginRun>,
    /// The output offset of the current split's first element not in `runs`.
    run_start: u64,
    /// The last element emitted was its split's last.
    last_end: bool,
    /// Splits are produced by the caller ([`Source::external`]), cut this size under OFF.
    external: Option<u64>,
    /// Splits handed to the caller's producer so far.
    produced_splits: u64,
    /// The kind of the outputs the caller handed in first (a task yields one kind).
    outputs_kind: Option<&'static str>,
}

impl Source {
    /// A source whose splits' outputs the caller produces ([`super::outputs`]); under a
    /// static feed the source is cut into splits of `split_size` as the dispatcher cuts it.
    pub(super) fn external(def: SourceDef, feed: Feed, split_size: u64) -> Self {
        Source { external: Some(split_size.max(1)), ..Source::new(def, feed) }
    }

    pub(super) fn new(def: SourceDef, feed: Feed) -> Self {
        let row_starts = match &def {
            SourceDef::Files(f) => f.row_positions().map(|rows| {
                let mut starts = Vec::with_capacity(rows.len());
                let total = rows.iter().fold(0u64, |at, n| {
                    starts.push(at);
                    at.saturating_add(*n)
                });
                (starts, total)
            }),
            _ => None,
        };
        Source {
            def,
            row_starts,
            feed,
            repetition: 0,
            split_requests: 0,
            pass: Pass::default(),
            runs: Vec::new(),
            run_start: 0,
            last_end: false,
            external: None,
            produced_splits: 0,
            outputs_kind: None,
        }
    }

    /// A cursor over the outputs of `split`, the task's next split for the producer.
    fn outputs_of(&mut self, split: Value, positions: Option<SplitPositions>) -> Cursor {
        let seq = self.produced_splits;
        self.produced_splits = self.produced_splits.saturating_add(1);
        Cursor::Outputs(OutputsCursor::new(seq, split, positions))
    }

    pub(super) fn is_dynamic(&self) -> bool {
        matches!(self.feed, Feed::Dynamic { .. })
    }

    pub(super) fn repetition(&self) -> u64 {
        self.repetition
    }

    pub(super) fn split_requests(&self) -> u64 {
        self.split_requests
    }

    /// Where the element the last [`Source::next`] emitted comes from (call it right after
    /// an emission): `None` unless it is from a DYNAMIC split provided with its positions.
    pub(super) fn origin(&self) -> Option<ElementOrigin> {
        self.pass.split.map(|(split, next)| ElementOrigin {
            split,
            offset: next.saturating_sub(1),
            end: self.last_end,
        })
    }

    /// The current split emitted its next element, its last when `end`: its output offset
    /// moves on. This is all an element costs; runs are made per batch ([`take_origins`]).
    ///
    /// [`take_origins`]: Source::take_origins
    fn emitted(&mut self, end: bool) {
        if let Some((_, next)) = &mut self.pass.split {
            *next = next.saturating_add(1);
            self.last_end = end;
        }
    }

    /// Moves the current split's elements emitted since the last call into `runs`.
    fn close_run(&mut self) {
        close_run(&mut self.runs, &mut self.run_start, self.pass.split, self.last_end);
    }

    /// The origin runs of the elements emitted since the last call, in order (elements of
    /// splits provided without positions have none).
    pub(super) fn take_origins(&mut self) -> Vec<OriginRun> {
        self.close_run();
        std::mem::take(&mut self.runs)
    }

    /// Starts the next pass (an enclosing `repeat` re-enters the source).
    pub(super) fn reset(&mut self) {
        self.close_run();
        self.repetition = self.repetition.saturating_add(1);
        self.pass = Pass::default();
    }

    /// The next element, the end of this pass, or what the caller must provide.
    pub(super) fn next(&mut self) -> Out {
        loop {
            if let (Some(until), Some((_, next))) = (self.pass.until, self.pass.split)
                && next >= until
            {
                // The rest of the split was consumed before: it ends here (not at its end).
                self.pass.cursor = Cursor::Empty;
            }
            match std::mem::take(&mut self.pass.cursor) {
                Cursor::Empty => {}
                Cursor::Positions { next, stop } if next < stop => {
                    let Some(element) = split::element_at(&self.def, next) else {
                        return Out::Fail(precondition(format!(
                            "position {next} is outside the {} source",
                            self.def.kind()
                        )));
                    };
                    self.pass.cursor = Cursor::Positions { next: next + 1, stop };
                    self.emitted(next + 1 >= stop);
                    return Out::Emit(Element::Value(element));
                }
                Cursor::Positions { .. } => {}
                Cursor::Item(element) => {
                    self.emitted(true);
                    return Out::Emit(Element::Value(element));
                }
                Cursor::AwaitFile(path) => {
                    self.pass.cursor = Cursor::AwaitFile(path.clone());
                    return Out::Need(Need::File { path });
                }
                Cursor::Text(mut text) => match text.next_element() {
                    Some(Ok(element)) => {
                        let end = self.pass.split.is_some() && text.at_end();
                        self.pass.cursor = Cursor::Text(text);
                        self.emitted(end);
                        return Out::Emit(Element::Value(element));
                    }
                    Some(Err(e)) => return Out::Fail(e),
                    None => {}
                },
                Cursor::Outputs(mut outputs) => {
                    if let Some(element) = outputs.pop() {
                        let end = outputs.last && outputs.drained();
                        self.pass.cursor = Cursor::Outputs(outputs);
                        self.emitted(end);
                        return Out::Emit(element);
                    }
                    if !outputs.last {
                        let request = outputs.request.clone();
                        self.pass.cursor = Cursor::Outputs(outputs);
                        return Out::Need(Need::Outputs(request));
                    }
                }
                Cursor::Rows(mut rows) => {
                    if let Some((chunk, next, end)) = &mut rows.chunk
                        && *next < *end
                    {
                        let row = Row { chunk: Arc::clone(chunk), index: *next };
                        *next += 1;
                        let split_end = *next >= *end && rows.last && rows.more.is_empty();
                        self.pass.cursor = Cursor::Rows(rows);
                        self.emitted(split_end);
                        return Out::Emit(Element::Row(row));
                    }
                    rows.chunk = None;
                    let ask = if rows.last {
                        rows.last = false;
                        match rows.more.pop_front() {
                            Some(want) => {
                                rows.want = want;
                                true
                            }
                            None => false,
                        }
                    } else {
                        true
                    };
                    if ask {
                        let want = rows.want.clone();
                        self.pass.cursor = Cursor::Rows(rows);
                        return Out::Need(Need::Rows(want));
                    }
                }
            }
            // The current chunk is exhausted: load the next one.
            match &self.feed {
                Feed::Static { .. } if self.external.is_some() => {
                    let split_size = self.external.unwrap_or(1);
                    let index = self.pass.next_file;
                    let Some(split) = split::split_at(&self.def, split_size, index) else {
                        return Out::End;
                    };
                    self.pass.next_file = index.saturating_add(1);
                    self.pass.cursor = self.outputs_of(split, None);
                }
                Feed::Static { first, stride } => match &self.def {
                    SourceDef::Files(files) => {
                        let path = stride
                            .checked_mul(self.pass.next_file)
                            .and_then(|offset| offset.checked_add(*first))
                            .and_then(|index| usize::try_from(index).ok())
                            .and_then(|index| files.paths.get(index));
                        let Some(path) = path else { return Out::End };
                        let index = self.pass.next_file;
                        self.pass.next_file = self.pass.next_file.saturating_add(1);
                        self.pass.cursor = if files.format.is_columnar() {
                            let file_rows = files
                                .row_positions()
                                .and_then(|rows| rows.get(usize::try_from(index).ok()?).copied());
                            Cursor::Rows(RowsCursor::file(path.clone(), 0, file_rows))
                        } else {
                            Cursor::AwaitFile(path.clone())
                        };
                    }
                    _ if self.pass.started => return Out::End,
                    _ => {
                        self.pass.started = true;
                        let stop = split::positions(&self.def).unwrap_or(0);
                        self.pass.cursor = Cursor::Positions { next: 0, stop };
                    }
                },
                Feed::Dynamic { paths } => {
                    close_run(&mut self.runs, &mut self.run_start, self.pass.split, self.last_end);
                    self.pass.split = None;
                    let Some((split, at)) = self.pass.queue.pop_front() else {
                        if self.pass.end_of_splits {
                            return Out::End;
                        }
                        self.split_requests = self.split_requests.wrapping_add(1);
                        return Out::Need(Need::Split { repetition: self.repetition });
                    };
                    let known = |path: &str| paths.as_ref().is_some_and(|set| set.contains(path));
                    let skip = at.map_or(0, |at| at.skip);
                    self.pass.split = at.map(|at| (at.range(), skip));
                    self.run_start = skip;
                    self.last_end = false;
                    self.pass.skip_records = 0;
                    self.pass.until = at.and_then(|at| at.until);
                    // The first `skip` output elements were consumed before (a split resumed
                    // part way): pass over them without producing them.
                    let format = match &self.def {
                        SourceDef::Files(f) => Some(f.format),
                        _ => None,
                    };
                    let bytes_file = format == Some(FileFormat::Bytes);
                    let columnar = format.is_some_and(FileFormat::is_columnar);
                    if self.external.is_some() {
                        // The split is checked as any other; the producer makes its outputs.
                        if let Err(e) = split::elements_of_split_with(&self.def, &split, known) {
                            return Out::Fail(e);
                        }
                        self.pass.cursor = self.outputs_of(split, at);
                        continue;
                    }
                    self.pass.cursor = match split::elements_of_split_with(&self.def, &split, known)
                    {
                        Ok(SplitElements::Positions { start, stop }) => {
                            Cursor::Positions { next: start.saturating_add(skip).min(stop), stop }
                        }
                        Ok(SplitElements::File { .. }) if skip > 0 && bytes_file => Cursor::Empty,
                        Ok(SplitElements::File { path }) if columnar => {
                            Cursor::Rows(RowsCursor::file(path, skip, None))
                        }
                        Ok(SplitElements::Rows { start, stop }) => {
                            match self.row_pieces(start.saturating_add(skip).min(stop), stop) {
                                Some(rows) => Cursor::Rows(rows),
                                None => Cursor::Empty,
                            }
                        }
                        Ok(SplitElements::File { path }) => {
                            self.pass.skip_records = skip;
                            Cursor::AwaitFile(path)
                        }
                        Ok(SplitElements::Item(_)) if skip > 0 => Cursor::Empty,
                        Ok(SplitElements::Item(element)) => Cursor::Item(element),
                        Err(e) => return Out::Fail(e),
                    };
                }
            }
        }
    }

    /// Accepts a split for `repetition` (`None`: that repetition has no more splits).
    ///
    /// Splits may be provided ahead of the request (they queue up); a split for an earlier
    /// repetition than the current one is stale and dropped.
    pub(super) fn provide_split(
        &mut self,
        repetition: u64,
        split: Option<(Value, Option<SplitPositions>)>,
    ) -> Result<(), DatasetError> {
        if !self.is_dynamic() {
            return Err(precondition(
                "a split was provided to a pipeline that does not use DYNAMIC sharding",
            ));
        }
        if repetition < self.repetition {
            return Ok(());
        }
        if repetition > self.repetition {
            return Err(precondition(format!(
                "a split was provided for repetition {repetition}, but the source is at \
                 repetition {}",
                self.repetition
            )));
        }
        match split {
            None => self.pass.end_of_splits = true,
            Some((split, _)) if self.pass.end_of_splits => {
                return Err(precondition(format!(
                    "split {} was provided after the end of splits of repetition {repetition}",
                    brief(&split)
                )));
            }
            Some(split) => self.pass.queue.push_back(split),
        }
        Ok(())
    }

    /// The rows `start..stop` of a source whose positions are rows, as pieces of its files
    /// (`None` when there are none).
    fn row_pieces(&self, start: u64, stop: u64) -> Option<Box<RowsCursor>> {
        let (SourceDef::Files(files), Some((starts, _))) = (&self.def, &self.row_starts) else {
            return None;
        };
        let rows = files.rows.as_deref()?;
        let first = starts.partition_point(|s| *s <= start).checked_sub(1)?;
        let mut pieces: VecDeque<RowsRequest> = VecDeque::new();
        for ((path, file_start), file_rows) in files.paths.iter().zip(starts).zip(rows).skip(first)
        {
            if *file_start >= stop {
                break;
            }
            let from = start.max(*file_start) - file_start;
            let to = stop.min(file_start.saturating_add(*file_rows)) - file_start;
            if from < to {
                pieces.push_back(RowsRequest {
                    path: path.clone(),
                    start: from,
                    stop: Some(to),
                    file_rows: Some(*file_rows),
                });
            }
        }
        let want = pieces.pop_front()?;
        Some(RowsCursor::new(want, pieces))
    }

    /// Accepts rows of the columnar file the source asked for: `chunk` holds rows from the
    /// request's `start` on, and `last` says none follow it (in the request's range). Rows
    /// past the request's `stop` are left out; a chunk that ends the file before `stop` is an
    /// error (the file changed since its rows were counted).
    pub(super) fn provide_rows(
        &mut self,
        path: &str,
        chunk: Chunk,
        last: bool,
    ) -> Result<(), DatasetError> {
        let rows = match &mut self.pass.cursor {
            Cursor::Rows(rows) if rows.chunk.is_none() && rows.want.path == path => rows,
            Cursor::Rows(rows) if rows.chunk.is_none() => {
                return Err(precondition(format!(
                    "rows of file {} were provided, but the pipeline asked for {}",
                    quoted(path),
                    quoted(&rows.want.path)
                )));
            }
            _ => {
                return Err(precondition(format!(
                    "rows of file {} were provided, but the pipeline did not ask for rows",
                    quoted(path)
                )));
            }
        };
        let mut n = chunk.rows();
        let mut last = last;
        if let Some(stop) = rows.want.stop {
            let left = stop.saturating_sub(rows.want.start);
            if n >= left {
                n = left;
                last = true;
            } else if last {
                return Err(precondition(format!(
                    "file {} ended at row {}, before row {stop} (it changed since its rows were \
                     counted)",
                    quoted(path),
                    rows.want.start.saturating_add(n)
                )));
            }
        }
        if n == 0 && !last {
            return Err(precondition(format!(
                "rows of file {} were provided without a row and without the end",
                quoted(path)
            )));
        }
        rows.want.start = rows.want.start.saturating_add(n);
        rows.chunk = Some((Arc::new(chunk), 0, n));
        rows.last = last;
        Ok(())
    }

    /// Accepts the next outputs of the split the source asked for (`request.seq`): `last` says
    /// none follow them. Those consumed before (the split's `skip`) are dropped here.
    pub(super) fn provide_outputs(
        &mut self,
        seq: u64,
        outputs: Outputs,
        last: bool,
    ) -> Result<(), DatasetError> {
        let cursor = match &mut self.pass.cursor {
            Cursor::Outputs(o) if o.request.seq == seq && !o.last && o.drained() => o,
            Cursor::Outputs(o) if o.request.seq != seq => {
                return Err(precondition(format!(
                    "outputs of split {seq} were provided, but the pipeline asked for split {}",
                    o.request.seq
                )));
            }
            _ => {
                return Err(precondition(format!(
                    "outputs of split {seq} were provided, but the pipeline did not ask for them"
                )));
            }
        };
        if outputs.is_empty() && !last {
            return Err(precondition(format!(
                "outputs of split {seq} were provided without an output and without the end"
            )));
        }
        if !outputs.is_empty() {
            match self.outputs_kind {
                Some(kind) if kind != outputs.kind() => {
                    return Err(super::error::invalid(format!(
                        "the producer made {} after {kind}: one task's outputs are of one kind",
                        outputs.kind()
                    )));
                }
                _ => self.outputs_kind = Some(outputs.kind()),
            }
        }
        let n = outputs.len();
        cursor.request.provided = cursor.request.provided.saturating_add(n);
        let drop = cursor.skip_left.min(n);
        cursor.skip_left -= drop;
        cursor.pending = match outputs {
            Outputs::Values(values) => {
                let mut values = VecDeque::from(values);
                values.drain(..usize::try_from(drop).unwrap_or(usize::MAX).min(values.len()));
                Pending::Values(values)
            }
            Outputs::Rows(chunk) => {
                let end = chunk.rows();
                Pending::Rows(Arc::new(chunk), drop, end)
            }
        };
        cursor.last = last;
        Ok(())
    }

    /// Accepts the bytes of the file the source asked for.
    pub(super) fn provide_file(&mut self, path: &str, bytes: &[u8]) -> Result<(), DatasetError> {
        let format = match (&self.pass.cursor, &self.def) {
            (Cursor::AwaitFile(wanted), SourceDef::Files(files)) if wanted == path => files.format,
            (Cursor::AwaitFile(wanted), _) => {
                return Err(precondition(format!(
                    "file {} was provided, but the pipeline asked for {}",
                    quoted(path),
                    quoted(wanted)
                )));
            }
            _ => {
                return Err(precondition(format!(
                    "file {} was provided, but the pipeline did not ask for a file",
                    quoted(path)
                )));
            }
        };
        self.pass.cursor = match format {
            FileFormat::Parquet | FileFormat::Arrow | FileFormat::TfRecord => {
                return Err(precondition(format!(
                    "file {} was provided whole, but a {} file is read as rows",
                    quoted(path),
                    format.as_str()
                )));
            }
            FileFormat::Bytes => Cursor::Item(bytes_element(bytes)),
            FileFormat::Lines | FileFormat::Jsonl => {
                let jsonl = format == FileFormat::Jsonl;
                let mut text = TextCursor::new(path.to_owned(), bytes, jsonl);
                text.skip_records(std::mem::take(&mut self.pass.skip_records));
                Cursor::Text(text)
            }
        };
        Ok(())
    }
}

/// Moves the elements of `split` (with its next output offset) emitted from `*run_start` on
/// into `runs`, the last of them its split's last when `last_end`.
fn close_run(
    runs: &mut Vec<OriginRun>,
    run_start: &mut u64,
    split: Option<(SourceRange, u64)>,
    last_end: bool,
) {
    if let Some((split, next)) = split
        && next > *run_start
    {
        runs.push(OriginRun { split, offset: *run_start, count: next - *run_start, end: last_end });
        *run_start = next;
    }
}
