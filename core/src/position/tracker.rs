//! The reader's side: fold the origins of the elements handed to the caller into a
//! [`ReadPosition`], and merge the positions of several consumers of one iteration.

use std::collections::{BTreeMap, BTreeSet};

use super::{OriginRun, PartialSplit, ReadPosition, SourceRange};

/// Folds consumed elements, by their [`OriginRun`]s, into a [`ReadPosition`].
///
/// A split is *done* once every output element up to the one a worker marked as its last
/// ([`OriginRun::end`]) was consumed; until then it is *partial*: the ranges of its output
/// offsets consumed so far. One consumer reading a split alone consumes a prefix; consumers
/// sharing a task take its elements first come, first served, so each one's part of a split
/// may have gaps, which [`merge_positions`] fills from the others'. A split read twice
/// (handed out again after its worker was lost) counts once: what was consumed stays
/// consumed.
#[derive(Debug, Clone, Default)]
pub struct PositionTracker {
    /// Done ranges, merged: start -> stop, disjoint and not touching.
    done: BTreeMap<u64, u64>,
    /// Splits under way.
    partial: BTreeMap<SourceRange, SplitState>,
    /// Splits under way that overlap another one (never two splits of one read: a read's
    /// splits are disjoint or the same; only positions written by hand overlap), kept so that
    /// finding the splits a range overlaps costs a lookup, not a walk over every split.
    tangled: BTreeSet<SourceRange>,
}

/// Trackers are equal when they hold the same done ranges and splits under way.
impl PartialEq for PositionTracker {
    fn eq(&self, other: &Self) -> bool {
        self.done == other.done && self.partial == other.partial
    }
}

impl Eq for PositionTracker {}

/// What was consumed of one split under way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct SplitState {
    /// Consumed output offsets: start -> stop, disjoint and not touching.
    consumed: BTreeMap<u64, u64>,
    /// The split's output length, once its last element was consumed.
    len: Option<u64>,
}

impl SplitState {
    /// Adds the offsets `start..stop`, merging the ranges it overlaps or touches.
    fn add(&mut self, start: u64, stop: u64) {
        add_range(&mut self.consumed, start, stop);
    }

    /// Every output element, up to the last, was consumed.
    fn is_complete(&self) -> bool {
        self.len.is_some_and(|len| len == 0 || self.consumed.first_key_value() == Some((&0, &len)))
    }
}

/// `id` in single quotes, at most 80 characters of it (a dataset id from a caller's file).
fn quoted(id: &str) -> String {
    let shown: String = id.chars().take(80).collect();
    format!("'{}'", shown.escape_default())
}

/// Why positions cannot be merged (they are not of one read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MergeError(pub String);

/// The position of the union of what `positions` consumed: the positions of several consumers
/// of one iteration (say every rank and loader worker of a trainer), merged into the one to
/// resume from. They must be of the same dataset and repetition.
pub fn merge_positions<'a>(
    positions: impl IntoIterator<Item = &'a ReadPosition>,
) -> Result<ReadPosition, MergeError> {
    let mut tracker = PositionTracker::new();
    let mut first: Option<(&str, u64)> = None;
    for p in positions {
        match first {
            None => first = Some((&p.dataset_id, p.repetition)),
            Some((dataset_id, repetition))
                if dataset_id != p.dataset_id || repetition != p.repetition =>
            {
                return Err(MergeError(format!(
                    "positions of different reads cannot be merged: dataset {} repetition \
                     {repetition} and dataset {} repetition {}",
                    quoted(dataset_id),
                    quoted(&p.dataset_id),
                    p.repetition
                )));
            }
            Some(_) => {}
        }
        tracker.absorb(p);
    }
    let Some((dataset_id, repetition)) = first else {
        return Err(MergeError("no position to merge".to_owned()));
    };
    Ok(tracker.position(dataset_id, repetition))
}

impl PositionTracker {
    /// A tracker that has seen nothing consumed.
    pub fn new() -> Self {
        PositionTracker::default()
    }

    /// A tracker that starts from `position` (a resumed read goes on from where it resumed).
    pub fn resuming(position: &ReadPosition) -> Self {
        let mut t = PositionTracker::new();
        t.absorb(position);
        t
    }

    /// Adds what `position` consumed to what this tracker has seen consumed.
    pub fn absorb(&mut self, position: &ReadPosition) {
        for r in &position.done {
            self.mark_done(*r);
        }
        for p in &position.partial {
            if p.split.start >= p.split.stop || self.is_done(p.split) {
                continue;
            }
            let state = self.partial_entry(p.split);
            if p.consumed > 0 {
                state.add(0, p.consumed);
            }
            for r in &p.more {
                state.add(r.start, r.stop);
            }
            if let Some(len) = p.len {
                state.len = Some(state.len.map_or(len, |l| l.max(len)));
            }
            self.settle(p.split);
        }
    }

    /// The first `taken` elements of `run` were handed to the caller (`taken <= run.count`;
    /// more is read as `run.count`).
    pub fn consumed(&mut self, run: &OriginRun, taken: u64) {
        let taken = taken.min(run.count);
        if taken == 0 || run.split.start >= run.split.stop || self.is_done(run.split) {
            return;
        }
        let state = self.partial_entry(run.split);
        state.add(run.offset, run.offset.saturating_add(taken));
        if run.end && taken == run.count {
            let len = run.offset.saturating_add(run.count);
            state.len = Some(state.len.map_or(len, |l| l.max(len)));
        }
        self.settle(run.split);
    }

    /// The position: `dataset_id` and `repetition` name what was read.
    pub fn position(&self, dataset_id: &str, repetition: u64) -> ReadPosition {
        ReadPosition {
            dataset_id: dataset_id.to_owned(),
            repetition,
            done: self.done.iter().map(|(&start, &stop)| SourceRange { start, stop }).collect(),
            partial: self
                .partial
                .iter()
                .filter(|(_, state)| !state.consumed.is_empty())
                .map(|(&split, state)| {
                    let mut ranges =
                        state.consumed.iter().map(|(&s, &e)| SourceRange { start: s, stop: e });
                    let mut more: Vec<SourceRange> = ranges.by_ref().collect();
                    let consumed = match more.first() {
                        Some(r) if r.start == 0 => more.remove(0).stop,
                        _ => 0,
                    };
                    PartialSplit { split, consumed, more, len: state.len }
                })
                .collect(),
        }
    }

    /// Marks `split` done when all of it was consumed: every output element up to its last,
    /// or (a split of positions resumed part way) its consumed elements and done ranges
    /// covering the rest.
    fn settle(&mut self, split: SourceRange) {
        let Some(state) = self.partial.get(&split) else { return };
        if state.is_complete() || self.rest_is_done(split, state) {
            self.remove_partial(split);
            self.mark_done(split);
        }
    }

    /// The state of `split`, a split under way (new: nothing consumed).
    fn partial_entry(&mut self, split: SourceRange) -> &mut SplitState {
        if !self.partial.contains_key(&split) {
            let others = self.overlapping(split);
            if !others.is_empty() {
                self.tangled.insert(split);
                self.tangled.extend(others);
            }
        }
        self.partial.entry(split).or_default()
    }

    fn remove_partial(&mut self, split: SourceRange) {
        self.partial.remove(&split);
        self.tangled.remove(&split);
    }

    /// The splits under way, `r` aside, that overlap the non-empty range `r`: those starting
    /// inside it, the one starting last before it (the only other one, were splits under way
    /// disjoint), and tangled ones.
    fn overlapping(&self, r: SourceRange) -> Vec<SourceRange> {
        let at = |start| SourceRange { start, stop: 0 };
        let before = self.partial.range(..at(r.start)).next_back().map(|(p, _)| *p);
        let mut found: BTreeSet<SourceRange> = before
            .into_iter()
            .chain(self.tangled.iter().copied().filter(|p| p.start < r.start))
            .filter(|p| p.stop > r.start)
            .collect();
        found.extend(self.partial.range(at(r.start)..at(r.stop)).map(|(p, _)| *p));
        found.remove(&r);
        found.into_iter().collect()
    }

    /// Whether the parts of `split` that `state` has not consumed lie in done ranges, for
    /// splits whose output elements are their positions (a split of more than one position
    /// whose consumed offsets all lie within it: a one-position `files` split counts records,
    /// not positions, and its rest is never a range of positions).
    fn rest_is_done(&self, split: SourceRange, state: &SplitState) -> bool {
        let len = split.stop - split.start;
        if len <= 1 || state.consumed.last_key_value().is_some_and(|(_, &stop)| stop > len) {
            return false;
        }
        let mut at = 0;
        for (&start, &stop) in state.consumed.iter().chain(std::iter::once((&len, &len))) {
            if at < start
                && !self.is_done(SourceRange { start: split.start + at, stop: split.start + start })
            {
                return false;
            }
            at = at.max(stop);
        }
        true
    }

    /// Whether all of `r` lies in one done range.
    fn is_done(&self, r: SourceRange) -> bool {
        self.done.range(..=r.start).next_back().is_some_and(|(_, &stop)| stop >= r.stop)
    }

    /// Adds `r` to the done ranges, merging it with those it overlaps or touches; splits
    /// under way that this completes are done too.
    fn mark_done(&mut self, r: SourceRange) {
        if r.start >= r.stop {
            return;
        }
        let (start, stop) = add_range(&mut self.done, r.start, r.stop);
        // Splits under way that overlap the grown range: inside it, they are done; their
        // unconsumed rest inside it (a split resumed part way was read to its end), they are
        // done, and their consumed part joins the done ranges.
        let grown = SourceRange { start, stop };
        let touched = self.overlapping(grown);
        for p in touched.into_iter().chain(self.partial.contains_key(&grown).then_some(grown)) {
            if self.is_done(p) {
                self.remove_partial(p);
            } else {
                self.settle(p);
            }
        }
    }
}

/// Adds `start..stop` to the disjoint, non-touching ranges `ranges`, merging those it
/// overlaps or touches; the merged range.
fn add_range(ranges: &mut BTreeMap<u64, u64>, start: u64, stop: u64) -> (u64, u64) {
    let (mut start, mut stop) = (start, stop);
    if start >= stop {
        return (start, stop);
    }
    if let Some((&s, &e)) = ranges.range(..=start).next_back()
        && e >= start
    {
        start = s;
        stop = stop.max(e);
    }
    let absorbed: Vec<u64> = ranges.range(start..=stop).map(|(&s, _)| s).collect();
    for s in absorbed {
        if let Some(e) = ranges.remove(&s) {
            stop = stop.max(e);
        }
    }
    ranges.insert(start, stop);
    (start, stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(start: u64, stop: u64, offset: u64, count: u64, end: bool) -> OriginRun {
        OriginRun { split: SourceRange { start, stop }, offset, count, end }
    }

    fn r(start: u64, stop: u64) -> SourceRange {
        SourceRange { start, stop }
    }

    /// Done ranges find the splits under way they touch whatever else is under way: a split
    /// spanning much of the source before them, splits nested in others (which no read
    /// writes, but a position may say), each settled as a walk over all of them would.
    #[test]
    fn done_ranges_settle_the_splits_they_touch_among_many_and_tangled_ones() {
        let position = |done: Vec<SourceRange>, partial: Vec<PartialSplit>| ReadPosition {
            dataset_id: "d".into(),
            repetition: 0,
            done,
            partial,
        };
        let big = 1_000_000_000_000;
        let n = 20_000;
        let mut under_way = vec![PartialSplit::prefix(r(0, big), 1)];
        under_way
            .extend((0..n).map(|i| PartialSplit::prefix(r(big + 10 * i, big + 10 * i + 10), 5)));
        // Each small split's rest: positions 5..10 of it, which completes it.
        let rests = (0..n).map(|i| r(big + 10 * i + 5, big + 10 * i + 10)).collect();
        let merged =
            merge_positions(&[position(vec![], under_way), position(rests, vec![])]).unwrap();
        assert_eq!(merged.done, vec![r(big, big + 10 * n)]);
        assert_eq!(merged.partial, vec![PartialSplit::prefix(r(0, big), 1)]);
        // Nested splits: the inner one's rest done completes it, then the outer one's.
        let nested = position(
            vec![r(2, 4), r(6, 10)],
            vec![PartialSplit::prefix(r(0, 10), 2), PartialSplit::prefix(r(4, 8), 0)],
        );
        let mut t = PositionTracker::resuming(&nested);
        t.consumed(&run(4, 8, 0, 2, false), 2);
        let p = t.position("d", 0);
        assert_eq!((p.done, p.partial), (vec![r(0, 10)], vec![]));
        // Overlapping splits, one covered by a done range: removed; the other stays.
        let mut t = PositionTracker::resuming(&position(
            vec![],
            vec![PartialSplit::prefix(r(0, 6), 1), PartialSplit::prefix(r(4, 12), 1)],
        ));
        t.absorb(&position(vec![r(3, 13)], vec![]));
        let p = t.position("d", 0);
        assert_eq!(p.done, vec![r(3, 13)]);
        assert_eq!(p.partial, vec![PartialSplit::prefix(r(0, 6), 1)]);
    }

    #[test]
    fn splits_are_partial_until_their_last_element_then_merge_into_done_ranges() {
        let mut t = PositionTracker::new();
        t.consumed(&run(0, 10, 0, 4, false), 4);
        t.consumed(&run(20, 30, 0, 10, true), 10);
        let p = t.position("ds", 2);
        assert_eq!(p.dataset_id, "ds");
        assert_eq!(p.repetition, 2);
        assert_eq!(p.done, vec![r(20, 30)]);
        assert_eq!(p.partial, vec![PartialSplit::prefix(r(0, 10), 4)]);
        t.consumed(&run(0, 10, 4, 6, true), 6);
        t.consumed(&run(10, 20, 0, 10, true), 10);
        let p = t.position("ds", 2);
        assert_eq!(p.done, vec![r(0, 30)]);
        assert!(p.partial.is_empty());
    }

    #[test]
    fn a_run_taken_in_part_counts_what_was_taken_and_not_its_end() {
        let mut t = PositionTracker::new();
        t.consumed(&run(0, 10, 5, 5, true), 3);
        // Offsets 0..5 went to another consumer (or are still in its buffers): not ours.
        let p = t.position("d", 0);
        assert_eq!(
            p.partial,
            vec![PartialSplit { split: r(0, 10), consumed: 0, more: vec![r(5, 8)], len: None }]
        );
        assert!(p.done.is_empty());
        t.consumed(&run(0, 10, 5, 5, true), 0);
        assert_eq!(t.position("d", 0), p);
        // The last element consumed: the length is known, the split still has gaps.
        t.consumed(&run(0, 10, 8, 2, true), 2);
        let p = t.position("d", 0);
        assert_eq!(
            p.partial,
            vec![PartialSplit {
                split: r(0, 10),
                consumed: 0,
                more: vec![r(5, 10)],
                len: Some(10)
            }]
        );
        // The gaps filled: done.
        t.consumed(&run(0, 10, 0, 5, false), 5);
        assert_eq!(t.position("d", 0).done, vec![r(0, 10)]);
        assert!(t.position("d", 0).partial.is_empty());
    }

    #[test]
    fn consumers_sharing_splits_merge_into_one_exact_position() {
        // Two consumers took a task's elements first come, first served: A the offsets
        // 0..4 and 8..10 of split 0..10 (its end) and 0..3 of file 7, B 4..6 of split 0..10 and
        // 3..5 of file 7; 6..8 of split 0..10 are in a buffer nobody handed out.
        let mut a = PositionTracker::new();
        a.consumed(&run(0, 10, 0, 4, false), 4);
        a.consumed(&run(0, 10, 8, 2, true), 2);
        a.consumed(&run(7, 8, 0, 3, false), 3);
        a.consumed(&run(20, 30, 0, 10, true), 10);
        let mut b = PositionTracker::new();
        b.consumed(&run(0, 10, 4, 4, false), 2);
        b.consumed(&run(7, 8, 3, 2, true), 2);
        let (pa, pb) = (a.position("d", 1), b.position("d", 1));
        let merged = merge_positions([&pa, &pb]).unwrap();
        assert_eq!(merged.done, vec![r(7, 8), r(20, 30)], "file 7: 0..3 and its end 3..5");
        assert_eq!(
            merged.partial,
            vec![PartialSplit {
                split: r(0, 10),
                consumed: 6,
                more: vec![r(8, 10)],
                len: Some(10)
            }]
        );
        // Merging is a union: order and repetition of positions do not matter.
        assert_eq!(merge_positions([&pb, &pa, &pb]).unwrap(), merged);
        // A third consumer's 6..8 completes the split.
        let mut c = PositionTracker::new();
        c.consumed(&run(0, 10, 6, 2, false), 2);
        let all = merge_positions([&merged, &c.position("d", 1)]).unwrap();
        assert_eq!(all.done, vec![r(0, 10), r(20, 30)]);
        assert!(all.partial.is_empty());
        // Positions of different reads are not merged.
        let other = PositionTracker::new().position("d", 2);
        assert!(merge_positions([&pa, &other]).unwrap_err().0.contains("repetition 2"));
        assert!(merge_positions([]).is_err());
    }

    #[test]
    fn a_split_of_positions_with_gaps_is_done_once_its_gaps_are_read_as_splits() {
        let p = ReadPosition {
            dataset_id: "d".into(),
            repetition: 0,
            done: vec![],
            partial: vec![PartialSplit {
                split: r(10, 20),
                consumed: 2,
                more: vec![r(5, 7)],
                len: None,
            }],
        };
        let mut t = PositionTracker::resuming(&p);
        // The resume plan hands out positions 12..15 and 17..20.
        t.consumed(&run(12, 15, 0, 3, true), 3);
        assert_eq!(t.position("d", 0).partial.len(), 1);
        t.consumed(&run(17, 20, 0, 3, true), 3);
        let got = t.position("d", 0);
        assert_eq!(got.done, vec![r(10, 20)]);
        assert!(got.partial.is_empty(), "{got:?}");
    }

    #[test]
    fn a_split_read_again_never_moves_back() {
        let mut t = PositionTracker::new();
        t.consumed(&run(0, 10, 0, 7, false), 7);
        t.consumed(&run(0, 10, 0, 3, false), 3); // handed out again after a lost worker
        assert_eq!(t.position("d", 0).partial[0].consumed, 7);
        t.consumed(&run(0, 10, 0, 10, true), 10);
        t.consumed(&run(0, 10, 0, 2, false), 2);
        assert_eq!(t.position("d", 0).done, vec![r(0, 10)]);
        assert!(t.position("d", 0).partial.is_empty());
    }

    #[test]
    fn resuming_goes_on_from_the_position() {
        let p = ReadPosition {
            dataset_id: "d".into(),
            repetition: 0,
            done: vec![r(0, 10), r(10, 20), r(40, 50)],
            partial: vec![PartialSplit::prefix(r(5, 6), 3), PartialSplit::prefix(r(20, 30), 4)],
        };
        let mut t = PositionTracker::resuming(&p);
        let got = t.position("d", 0);
        assert_eq!(got.done, vec![r(0, 20), r(40, 50)]);
        assert_eq!(got.partial, vec![PartialSplit::prefix(r(20, 30), 4)]);
        // The resumed split [24, 30) ends the original split's range: its consumed prefix
        // [20, 24) and the rest make the whole split done.
        t.consumed(&run(24, 30, 0, 6, true), 6);
        t.consumed(&run(30, 40, 0, 10, true), 10);
        let got = t.position("d", 0);
        assert_eq!(got.done, vec![r(0, 50)]);
        assert!(got.partial.is_empty(), "{got:?}");
    }

    #[test]
    fn a_partial_split_whose_rest_was_read_after_a_resume_is_done() {
        let p = ReadPosition {
            dataset_id: "d".into(),
            repetition: 0,
            done: vec![r(0, 10)],
            partial: vec![PartialSplit::prefix(r(10, 20), 4)],
        };
        let mut t = PositionTracker::resuming(&p);
        t.consumed(&run(14, 20, 0, 3, false), 3);
        assert_eq!(
            t.position("d", 0).partial,
            vec![PartialSplit::prefix(r(10, 20), 4), PartialSplit::prefix(r(14, 20), 3)]
        );
        t.consumed(&run(14, 20, 3, 3, true), 3);
        let got = t.position("d", 0);
        assert_eq!(got.done, vec![r(0, 20)], "the consumed prefix joins the rest");
        assert!(got.partial.is_empty(), "{got:?}");
        // A position saved before this rule (the rest done, the split partial) resumes alike.
        let saved = ReadPosition {
            done: vec![r(0, 10), r(14, 30)],
            partial: vec![PartialSplit::prefix(r(10, 20), 4)],
            ..p.clone()
        };
        assert_eq!(PositionTracker::resuming(&saved).position("d", 0).done, vec![r(0, 30)]);
        assert!(PositionTracker::resuming(&saved).position("d", 0).partial.is_empty());
        // A file (one position) counts records: its rest is never a range of positions.
        let mut t = PositionTracker::new();
        t.consumed(&run(3, 4, 0, 5, false), 5);
        t.consumed(&run(4, 5, 0, 1, true), 1);
        assert_eq!(t.position("d", 0).partial, vec![PartialSplit::prefix(r(3, 4), 5)]);
    }

    #[test]
    fn empty_and_inverted_splits_are_ignored() {
        let mut t = PositionTracker::new();
        t.consumed(&run(5, 5, 0, 1, true), 1);
        t.consumed(&run(9, 3, 0, 1, true), 1);
        assert_eq!(t, PositionTracker::new());
    }
}

/// The cases in `vectors.json`, which the Python package checks its fold against too.
#[cfg(test)]
mod vectors {
    use serde_json::Value;

    use super::*;

    #[test]
    fn the_shared_cases_fold_and_merge_as_written() {
        let doc: Value = serde_json::from_str(include_str!("vectors.json")).unwrap();
        for case in doc["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let mut positions = Vec::new();
            for consumer in case["consumers"].as_array().unwrap() {
                let mut t = PositionTracker::new();
                for run in consumer.as_array().unwrap() {
                    let [start, stop, offset, count, end, taken] =
                        run.as_array().unwrap().as_slice()
                    else {
                        panic!("{name}: a run has six fields");
                    };
                    let u = |v: &Value| v.as_u64().unwrap();
                    let origin = OriginRun {
                        split: SourceRange { start: u(start), stop: u(stop) },
                        offset: u(offset),
                        count: u(count),
                        end: end.as_bool().unwrap(),
                    };
                    t.consumed(&origin, u(taken));
                }
                positions.push(t.position("d", 0));
            }
            let want: Vec<ReadPosition> =
                serde_json::from_value(case["positions"].clone()).unwrap();
            assert_eq!(positions, want, "{name}");
            let merged: ReadPosition = serde_json::from_value(case["merged"].clone()).unwrap();
            assert_eq!(merge_positions(&positions).unwrap(), merged, "{name}");
            // Merging the merge with any of its parts changes nothing.
            for p in &positions {
                assert_eq!(merge_positions([&merged, p]).unwrap(), merged, "{name}");
            }
        }
    }
}
