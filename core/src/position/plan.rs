//! The dispatcher's side: a [`ReadPosition`] turned into the splits that are left to read.

use serde::{Deserialize, Serialize};

use super::{MAX_POSITION_ENTRIES, ReadPosition, SourceRange, SplitPositions};
use crate::dataset::SourceDef;

/// Why a position cannot be resumed over a source (INVALID_ARGUMENT).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

/// Consecutive splits of a resumed iteration: positions `start..stop` cut into splits of
/// `size` positions, the first of which is split number `first`; every split of the run skips
/// its first `skip` output elements and stops at output offset `until` (a part of a `files`
/// source's file that was not consumed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct PlanRun {
    start: u64,
    stop: u64,
    size: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    skip: u64,
    /// Every split of the run stops at this output offset (a part of a file between two
    /// consumed ranges); `None`: at its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    until: Option<u64>,
    first: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The splits of a resumed iteration: what a [`ReadPosition`] has not consumed, numbered
/// `0..num_splits()` like a fresh iteration's splits, each computed on demand in
/// O(log runs). Its size is bounded by the position's (one run per gap between consumed
/// ranges, one per file resumed part way), not by the source's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumePlan {
    runs: Vec<PlanRun>,
    total: u64,
}

impl ResumePlan {
    /// The splits `source` has left after `position`, for a job cutting `range` and `list`
    /// sources into splits of `split_size` elements.
    ///
    /// `done` ranges are consumed; a partial split's first `consumed` output elements are.
    /// For `range`, `list` and `splits` sources every position is one output element, so
    /// that prefix is the positions `start..start + consumed`; a `files` split is one file,
    /// resumed after its first `consumed` records. Ranges outside the source, a prefix
    /// longer than its split, or a partial `files` split of more than one file are refused.
    pub fn new(
        position: &ReadPosition,
        source: &SourceDef,
        split_size: u64,
    ) -> Result<ResumePlan, PlanError> {
        let entries = position
            .partial
            .iter()
            .fold(position.done.len().saturating_add(position.partial.len()), |n, p| {
                n.saturating_add(p.more.len())
            });
        if entries > MAX_POSITION_ENTRIES {
            return Err(PlanError(format!(
                "the position has {entries} done, partial and more entries; at most \
                 {MAX_POSITION_ENTRIES} are accepted"
            )));
        }
        let (n, files) = match source {
            SourceDef::Range(r) => (r.len(), false),
            SourceDef::List(l) => (len_u64(l.elements.len()), false),
            SourceDef::Splits(s) => (len_u64(s.items.len()), false),
            SourceDef::Files(f) => match f.row_positions() {
                // Positions are rows: resumed like a range.
                Some(rows) => (rows.iter().fold(0u64, |n, r| n.saturating_add(*r)), false),
                None => (len_u64(f.paths.len()), true),
            },
        };
        let check = |what: &str, r: &SourceRange| {
            if r.start >= r.stop || r.stop > n {
                return Err(PlanError(format!(
                    "{what} {{\"start\": {}, \"stop\": {}}} is not a non-empty range of the {} \
                     source's {n} positions",
                    r.start,
                    r.stop,
                    source.kind()
                )));
            }
            Ok(())
        };
        let mut consumed: Vec<(u64, u64)> = Vec::with_capacity(entries);
        for r in &position.done {
            check("done range", r)?;
            consumed.push((r.start, r.stop));
        }
        // Files resumed part way: the parts of each not consumed, as (file, skip, until).
        let mut file_parts: std::collections::BTreeMap<u64, FileConsumed> = Default::default();
        for p in &position.partial {
            check("partial split", &p.split)?;
            let len = p.split.stop - p.split.start;
            let mut at = p.consumed;
            for r in &p.more {
                if r.start <= at || r.start >= r.stop {
                    return Err(PlanError(format!(
                        "partial split {{\"start\": {}, \"stop\": {}}}: its \"more\" ranges must \
                         be non-empty, sorted, apart from each other and after the {} consumed \
                         elements; {{\"start\": {}, \"stop\": {}}} is not",
                        p.split.start, p.split.stop, p.consumed, r.start, r.stop
                    )));
                }
                at = r.stop;
            }
            if p.len.is_some_and(|l| l < at) {
                return Err(PlanError(format!(
                    "partial split {{\"start\": {}, \"stop\": {}}} has {} output elements \
                     consumed up to offset {at}, past its length",
                    p.split.start,
                    p.split.stop,
                    p.len.unwrap_or_default()
                )));
            }
            if files {
                if len != 1 {
                    return Err(PlanError(format!(
                        "partial split {{\"start\": {}, \"stop\": {}}} spans {len} files; a files \
                         source's split is one file",
                        p.split.start, p.split.stop
                    )));
                }
                let file = file_parts.entry(p.split.start).or_default();
                if p.consumed > 0 {
                    file.add(0, p.consumed);
                }
                for r in &p.more {
                    file.add(r.start, r.stop);
                }
                file.len = file.len.max(p.len);
            } else if at > len || p.len.is_some_and(|l| l > len) {
                return Err(PlanError(format!(
                    "partial split {{\"start\": {}, \"stop\": {}}} has {len} elements, not {at} \
                     consumed",
                    p.split.start, p.split.stop
                )));
            } else {
                // Every offset is a position: what was consumed is those positions.
                // at <= len, so these stay inside the split; saturate all the same.
                let to_positions = |a: u64, b: u64| {
                    (p.split.start.saturating_add(a), p.split.start.saturating_add(b))
                };
                if p.consumed > 0 {
                    consumed.push(to_positions(0, p.consumed));
                }
                consumed.extend(p.more.iter().map(|r| to_positions(r.start, r.stop)));
            }
        }
        let consumed = merge(consumed);
        // A file resumed part way is cut into the parts not consumed; one in a consumed
        // range is done.
        let file_parts: Vec<(u64, Vec<FilePart>)> = file_parts
            .into_iter()
            .filter(|(f, _)| !covered(&consumed, *f))
            .map(|(f, c)| (f, c.gaps()))
            .collect();
        let size =
            if files || matches!(source, SourceDef::Splits(_)) { 1 } else { split_size.max(1) };
        let mut plan = ResumePlan::default();
        let mut at = 0u64;
        let mut part_iter = file_parts.into_iter().peekable();
        for (start, stop) in consumed.into_iter().chain(std::iter::once((n, n))) {
            // The gap at..start is left to read; files resumed part way cut it.
            let mut from = at;
            while let Some((f, _)) = part_iter.peek() {
                if *f >= start {
                    break;
                }
                let Some((f, gaps)) = part_iter.next() else { break };
                plan.push(from, f, size, 0, None);
                // f < start <= n, so f + 1 cannot pass the source's end.
                for (skip, until) in gaps {
                    plan.push(f, f.saturating_add(1), 1, skip, until);
                }
                from = f.saturating_add(1);
            }
            plan.push(from, start, size, 0, None);
            at = at.max(stop);
        }
        Ok(plan)
    }

    fn push(&mut self, start: u64, stop: u64, size: u64, skip: u64, until: Option<u64>) {
        if start >= stop {
            return;
        }
        let count = (stop - start).div_ceil(size.max(1));
        self.runs.push(PlanRun { start, stop, size, skip, until, first: self.total });
        // The runs are disjoint ranges of at most u64::MAX positions with at least one
        // position per split: the total cannot overflow, but saturate rather than wrap.
        self.total = self.total.saturating_add(count);
    }

    /// How many splits are left.
    pub fn num_splits(&self) -> u64 {
        self.total
    }

    /// Split number `index` (`0..num_splits()`), or `None` past the end.
    pub fn split(&self, index: u64) -> Option<SplitPositions> {
        if index >= self.total {
            return None;
        }
        let i = self.runs.partition_point(|r| r.first <= index) - 1;
        let run = self.runs[i];
        // A split size may be as large as u64::MAX (a job asking for one split per pass):
        // every sum here saturates, so a split never ends before it starts.
        let start = run.start.saturating_add((index - run.first).saturating_mul(run.size));
        if start >= run.stop {
            return None;
        }
        let stop = start.saturating_add(run.size).min(run.stop);
        Some(SplitPositions { start, stop, skip: run.skip, until: run.until })
    }
}

fn len_u64(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX)
}

/// Sorted, disjoint, non-touching ranges covering the same positions.
fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        match out.last_mut() {
            Some((_, last)) if s <= *last => *last = (*last).max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// A part of a file left to read: records from `.0` on, up to `.1` (`None`: its end).
type FilePart = (u64, Option<u64>);

/// What was consumed of one file of a `files` source (its records' output offsets).
#[derive(Debug, Default)]
struct FileConsumed {
    /// Consumed offset ranges, merged: start -> stop.
    ranges: std::collections::BTreeMap<u64, u64>,
    /// The file's number of records, when known.
    len: Option<u64>,
}

impl FileConsumed {
    fn add(&mut self, start: u64, stop: u64) {
        if start < stop {
            self.ranges.insert(start, stop);
        }
    }

    /// The parts not consumed, as (skip, until): from each consumed range's end to the next
    /// one's start, the last to the file's end (`None` when its length is unknown).
    fn gaps(&self) -> Vec<FilePart> {
        let merged = merge(self.ranges.iter().map(|(&s, &e)| (s, e)).collect());
        let mut gaps = Vec::with_capacity(merged.len() + 1);
        let mut at = 0;
        for (start, stop) in merged {
            if at < start {
                gaps.push((at, Some(start)));
            }
            at = at.max(stop);
        }
        if self.len.is_none_or(|len| at < len) {
            gaps.push((at, None));
        }
        gaps
    }
}

fn covered(merged: &[(u64, u64)], p: u64) -> bool {
    let i = merged.partition_point(|&(s, _)| s <= p);
    i > 0 && merged[i - 1].1 > p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::position::PartialSplit;

    fn source(json: &str) -> SourceDef {
        SourceDef::from_json(&serde_json::from_str(json).unwrap()).unwrap()
    }

    fn r(start: u64, stop: u64) -> SourceRange {
        SourceRange { start, stop }
    }

    fn pos(done: &[(u64, u64)], partial: &[((u64, u64), u64)]) -> ReadPosition {
        ReadPosition {
            dataset_id: "d".into(),
            repetition: 0,
            done: done.iter().map(|&(s, e)| r(s, e)).collect(),
            partial: partial
                .iter()
                .map(|&((s, e), consumed)| PartialSplit::prefix(r(s, e), consumed))
                .collect(),
        }
    }

    fn splits(plan: &ResumePlan) -> Vec<(u64, u64, u64)> {
        (0..plan.num_splits())
            .map(|i| plan.split(i).unwrap())
            .map(|s| (s.start, s.stop, s.skip))
            .collect()
    }

    #[test]
    fn an_empty_position_is_the_fresh_iterations_splits() {
        let plan =
            ResumePlan::new(&pos(&[], &[]), &source(r#"{"range": {"stop": 10}}"#), 4).unwrap();
        assert_eq!(splits(&plan), vec![(0, 4, 0), (4, 8, 0), (8, 10, 0)]);
        assert_eq!(plan.split(3), None);
    }

    #[test]
    fn ranges_skip_done_ranges_and_consumed_prefixes() {
        let p = pos(&[(0, 4), (8, 12)], &[((4, 8), 3), ((12, 16), 1), ((16, 20), 0)]);
        let plan = ResumePlan::new(&p, &source(r#"{"range": {"stop": 20}}"#), 4).unwrap();
        assert_eq!(splits(&plan), vec![(7, 8, 0), (13, 17, 0), (17, 20, 0)]);
        // Every position is either consumed or in exactly one split.
        let left: Vec<u64> = splits(&plan).iter().flat_map(|&(s, e, _)| s..e).collect();
        assert_eq!(left, [7].into_iter().chain(13..20).collect::<Vec<_>>());
    }

    fn partial(
        split: (u64, u64),
        consumed: u64,
        more: &[(u64, u64)],
        len: Option<u64>,
    ) -> PartialSplit {
        PartialSplit {
            split: r(split.0, split.1),
            consumed,
            more: more.iter().map(|&(s, e)| r(s, e)).collect(),
            len,
        }
    }

    #[test]
    fn gaps_in_a_split_of_positions_are_left_as_positions() {
        let mut p = pos(&[(0, 4)], &[]);
        p.partial = vec![partial((4, 12), 1, &[(3, 5), (7, 8)], None)];
        let plan = ResumePlan::new(&p, &source(r#"{"range": {"stop": 12}}"#), 8).unwrap();
        // Consumed: 0..5 (done and the prefix), 7..9 and 11: left 5..7 and 9..11.
        assert_eq!(splits(&plan), vec![(5, 7, 0), (9, 11, 0)]);
        assert!((0..plan.num_splits()).all(|i| plan.split(i).unwrap().until.is_none()));
    }

    #[test]
    fn gaps_in_a_file_are_parts_of_it_that_stop_at_the_next_consumed_range() {
        let src = source(r#"{"files": {"paths": ["a", "b", "c"], "format": "jsonl"}}"#);
        let mut p = pos(&[], &[]);
        p.partial = vec![
            partial((0, 1), 2, &[(5, 7), (9, 10)], Some(10)),
            partial((1, 2), 0, &[(3, 4)], None),
        ];
        let plan = ResumePlan::new(&p, &src, 1).unwrap();
        let got: Vec<_> = (0..plan.num_splits())
            .map(|i| plan.split(i).unwrap())
            .map(|s| (s.start, s.skip, s.until))
            .collect();
        assert_eq!(
            got,
            vec![(0, 2, Some(5)), (0, 7, Some(9)), (1, 0, Some(3)), (1, 4, None), (2, 0, None)],
            "file a's end is known (10): nothing after 9..10; b's is not"
        );
        // A plan survives its journal record with the parts.
        let json = serde_json::to_string(&plan).unwrap();
        assert_eq!(serde_json::from_str::<ResumePlan>(&json).unwrap(), plan);
        // Every consumed range known: the file is done.
        p.partial = vec![partial((0, 1), 4, &[(5, 10)], Some(10))];
        let plan = ResumePlan::new(&p, &src, 1).unwrap();
        assert_eq!(splits(&plan), vec![(0, 1, 4), (1, 2, 0), (2, 3, 0)]);
        assert_eq!(plan.split(0).unwrap().until, Some(5));
    }

    #[test]
    fn malformed_more_ranges_and_lengths_are_refused() {
        let src = source(r#"{"range": {"stop": 20}}"#);
        for (bad, why) in [
            (partial((0, 10), 3, &[(2, 5)], None), "after the 3 consumed"),
            (partial((0, 10), 3, &[(3, 5)], None), "after the 3 consumed"),
            (partial((0, 10), 0, &[(4, 6), (5, 7)], None), "sorted"),
            (partial((0, 10), 0, &[(6, 6)], None), "non-empty"),
            (partial((0, 10), 0, &[(6, 11)], None), "not 11 consumed"),
            (partial((0, 10), 0, &[(6, 8)], Some(7)), "past its length"),
            (partial((0, 10), 0, &[], Some(11)), "has 10 elements"),
        ] {
            let mut p = pos(&[], &[]);
            p.partial = vec![bad.clone()];
            let e = ResumePlan::new(&p, &src, 4).unwrap_err();
            assert!(e.0.contains(why), "{bad:?}: {e}");
        }
        // `more` counts towards the bound on a position's size.
        let mut p = pos(&[], &[]);
        let more: Vec<(u64, u64)> =
            (0..MAX_POSITION_ENTRIES as u64).map(|i| (2 * i + 1, 2 * i + 2)).collect();
        p.partial = vec![partial((0, 1 << 40), 0, &more, None)];
        let big = source(r#"{"range": {"stop": 1099511627776}}"#);
        assert!(ResumePlan::new(&p, &big, 4).unwrap_err().0.contains("more entries"));
    }

    #[test]
    fn a_consumed_source_has_no_splits_left() {
        let p = pos(&[(0, 5), (3, 10)], &[]);
        let plan = ResumePlan::new(&p, &source(r#"{"range": {"stop": 10}}"#), 3).unwrap();
        assert_eq!(plan.num_splits(), 0);
        assert_eq!(plan.split(0), None);
    }

    #[test]
    fn files_resume_part_way_with_a_skip_and_done_files_are_dropped() {
        let s = source(r#"{"files": {"paths": ["a", "b", "c", "d", "e"], "format": "lines"}}"#);
        let p = pos(&[(0, 1), (3, 4)], &[((1, 2), 7), ((3, 4), 2), ((4, 5), 0)]);
        let plan = ResumePlan::new(&p, &s, 1024).unwrap();
        assert_eq!(splits(&plan), vec![(1, 2, 7), (2, 3, 0), (4, 5, 0)]);
    }

    #[test]
    fn hostile_positions_are_refused_with_the_reason() {
        let s = source(r#"{"range": {"stop": 10}}"#);
        let err = |p: ReadPosition| ResumePlan::new(&p, &s, 4).unwrap_err().0;
        assert!(
            err(pos(&[(5, 11)], &[])).contains("10 positions"),
            "{}",
            err(pos(&[(5, 11)], &[]))
        );
        assert!(err(pos(&[(5, 5)], &[])).contains("non-empty"));
        assert!(err(pos(&[(7, 3)], &[])).contains("non-empty"));
        assert!(err(pos(&[], &[((0, 4), 5)])).contains("not 5 consumed"));
        let files = source(r#"{"files": {"paths": ["a", "b"], "format": "lines"}}"#);
        let e = ResumePlan::new(&pos(&[], &[((0, 2), 1)]), &files, 4).unwrap_err().0;
        assert!(e.contains("one file"), "{e}");
        let many = ReadPosition {
            done: vec![r(0, 1); MAX_POSITION_ENTRIES + 1],
            ..ReadPosition::default()
        };
        assert!(err(many).contains("at most"));
    }

    #[test]
    fn a_huge_split_size_resumes_to_valid_splits() {
        // A split size past the source's end (up to u64::MAX) once wrapped `start + size`
        // around to a split {5, 4}; every split must be a non-empty range inside the source.
        let s = source(r#"{"range": {"stop": 10}}"#);
        for size in [10, 11, u64::MAX / 2, u64::MAX - 5, u64::MAX - 1, u64::MAX] {
            let plan = ResumePlan::new(&pos(&[(0, 5)], &[]), &s, size).unwrap();
            assert_eq!(splits(&plan), vec![(5, 10, 0)], "split_size {size}");
            let plan = ResumePlan::new(&pos(&[(2, 4)], &[((6, 8), 1)]), &s, size).unwrap();
            assert_eq!(splits(&plan), vec![(0, 2, 0), (4, 6, 0), (7, 10, 0)], "split_size {size}");
        }
        // range(i64::MIN, i64::MAX) has u64::MAX positions.
        let big =
            source(r#"{"range": {"start": -9223372036854775808, "stop": 9223372036854775807}}"#);
        let plan = ResumePlan::new(&pos(&[(0, 5)], &[]), &big, u64::MAX).unwrap();
        assert_eq!(splits(&plan), vec![(5, u64::MAX, 0)]);
        let plan = ResumePlan::new(&pos(&[(0, 5)], &[]), &big, u64::MAX - 10).unwrap();
        assert_eq!(splits(&plan), vec![(5, u64::MAX - 5, 0), (u64::MAX - 5, u64::MAX, 0)]);
        for i in 0..plan.num_splits() {
            let s = plan.split(i).unwrap();
            assert!(s.start < s.stop, "{s:?}");
        }
    }

    #[test]
    fn a_huge_source_resumes_without_materializing_its_splits() {
        let s = source(r#"{"range": {"stop": 1000000000000}}"#);
        let p = pos(&[(0, 10)], &[((10, 20), 5)]);
        let plan = ResumePlan::new(&p, &s, 1).unwrap();
        assert_eq!(plan.num_splits(), 1_000_000_000_000 - 15);
        assert_eq!(plan.split(0).unwrap().range(), r(15, 16));
        let last = plan.split(plan.num_splits() - 1).unwrap();
        assert_eq!(last.range(), r(999_999_999_999, 1_000_000_000_000));
        assert!(plan.runs.len() <= 2);
    }
}
