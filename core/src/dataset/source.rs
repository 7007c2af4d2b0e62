//! The source stage of a pipeline: produces the source's elements, either all of them (or a
//! static file shard) or, under DYNAMIC sharding, those of the splits the caller provides.

use std::collections::{HashSet, VecDeque};

use serde_json::Value;

use super::def::{FileFormat, SourceDef};
use super::error::{DatasetError, brief, precondition, quoted};
use super::files::{TextCursor, bytes_element};
use super::ops::{Need, Out};
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
    /// (Dynamic) whether the caller said this repetition has no more splits.
    end_of_splits: bool,
    cursor: Cursor,
}

#[derive(Debug, Clone)]
pub(super) struct Source {
    def: SourceDef,
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
}

impl Source {
    pub(super) fn new(def: SourceDef, feed: Feed) -> Self {
        Source {
            def,
            feed,
            repetition: 0,
            split_requests: 0,
            pass: Pass::default(),
            runs: Vec::new(),
            run_start: 0,
            last_end: false,
        }
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
                    return Out::Emit(element);
                }
                Cursor::Positions { .. } => {}
                Cursor::Item(element) => {
                    self.emitted(true);
                    return Out::Emit(element);
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
                        return Out::Emit(element);
                    }
                    Some(Err(e)) => return Out::Fail(e),
                    None => {}
                },
            }
            // The current chunk is exhausted: load the next one.
            match &self.feed {
                Feed::Static { first, stride } => match &self.def {
                    SourceDef::Files(files) => {
                        let path = stride
                            .checked_mul(self.pass.next_file)
                            .and_then(|offset| offset.checked_add(*first))
                            .and_then(|index| usize::try_from(index).ok())
                            .and_then(|index| files.paths.get(index));
                        let Some(path) = path else { return Out::End };
                        self.pass.next_file = self.pass.next_file.saturating_add(1);
                        self.pass.cursor = Cursor::AwaitFile(path.clone());
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
                    // The first `skip` output elements were consumed before (a split resumed
                    // part way): pass over them without producing them.
                    let bytes_file =
                        matches!(&self.def, SourceDef::Files(f) if f.format == FileFormat::Bytes);
                    self.pass.cursor = match split::elements_of_split_with(&self.def, &split, known)
                    {
                        Ok(SplitElements::Positions { start, stop }) => {
                            Cursor::Positions { next: start.saturating_add(skip).min(stop), stop }
                        }
                        Ok(SplitElements::File { .. }) if skip > 0 && bytes_file => Cursor::Empty,
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
