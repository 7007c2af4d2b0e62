//! The reader's side: fold the origins of the elements handed to the caller into a
//! [`ReadPosition`].

use std::collections::BTreeMap;

use super::{OriginRun, PartialSplit, ReadPosition, SourceRange};

/// Folds consumed elements, by their [`OriginRun`]s, into a [`ReadPosition`].
///
/// A split is *done* once the element a worker marked as its last ([`OriginRun::end`]) was
/// consumed; until then it is *partial*, with the longest prefix of its output consumed. A
/// split read twice (handed out again after its worker was lost) counts once: prefixes and
/// ends only grow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PositionTracker {
    /// Done ranges, merged: start -> stop, disjoint and not touching.
    done: BTreeMap<u64, u64>,
    /// Splits under way: their consumed prefix.
    partial: BTreeMap<SourceRange, u64>,
}

impl PositionTracker {
    /// A tracker that has seen nothing consumed.
    pub fn new() -> Self {
        PositionTracker::default()
    }

    /// A tracker that starts from `position` (a resumed read goes on from where it resumed).
    pub fn resuming(position: &ReadPosition) -> Self {
        let mut t = PositionTracker::new();
        for r in &position.done {
            t.mark_done(*r);
        }
        for p in &position.partial {
            if t.rest_is_done(p.split, p.consumed) {
                // Resumed part way and read to its end since: its prefix was consumed before.
                t.mark_done(p.split);
            } else if p.consumed > 0 && !t.is_done(p.split) {
                let k = t.partial.entry(p.split).or_default();
                *k = (*k).max(p.consumed);
            }
        }
        t
    }

    /// The first `taken` elements of `run` were handed to the caller (`taken <= run.count`;
    /// more is read as `run.count`).
    pub fn consumed(&mut self, run: &OriginRun, taken: u64) {
        let taken = taken.min(run.count);
        if taken == 0 || run.split.start >= run.split.stop || self.is_done(run.split) {
            return;
        }
        if run.end && taken == run.count {
            self.partial.remove(&run.split);
            self.mark_done(run.split);
            return;
        }
        let prefix = run.offset.saturating_add(taken);
        let k = self.partial.entry(run.split).or_default();
        *k = (*k).max(prefix);
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
                .map(|(&split, &consumed)| PartialSplit { split, consumed })
                .collect(),
        }
    }

    /// Whether what is left of `split` after its first `consumed` elements lies in one done
    /// range (see [`rest_start`]).
    fn rest_is_done(&self, split: SourceRange, consumed: u64) -> bool {
        rest_start(split, consumed)
            .is_some_and(|start| self.is_done(SourceRange { start, ..split }))
    }

    /// Whether all of `r` lies in one done range.
    fn is_done(&self, r: SourceRange) -> bool {
        self.done.range(..=r.start).next_back().is_some_and(|(_, &stop)| stop >= r.stop)
    }

    /// Adds `r` to the done ranges, merging it with those it overlaps or touches.
    fn mark_done(&mut self, r: SourceRange) {
        if r.start >= r.stop {
            return;
        }
        let (mut start, mut stop) = (r.start, r.stop);
        if let Some((&s, &e)) = self.done.range(..=start).next_back()
            && e >= start
        {
            start = s;
            stop = stop.max(e);
        }
        let absorbed: Vec<u64> = self.done.range(start..=stop).map(|(&s, _)| s).collect();
        for s in absorbed {
            if let Some(e) = self.done.remove(&s) {
                stop = stop.max(e);
            }
        }
        self.done.insert(start, stop);
        // Partial splits now inside a done range are done too, and so are those whose
        // unconsumed rest is (a split resumed part way was read to its end): their consumed
        // prefix joins the done ranges.
        let inside: Vec<SourceRange> = self
            .partial
            .range(..SourceRange { start: stop, stop: 0 })
            .rev()
            .take_while(|(p, _)| p.stop > start)
            .filter(|(p, k)| {
                p.stop <= stop
                    && (p.start >= start || rest_start(**p, **k).is_some_and(|r| r >= start))
            })
            .map(|(p, _)| *p)
            .collect();
        let mut rests = Vec::new();
        for p in inside {
            self.partial.remove(&p);
            if p.start < start {
                rests.push(p);
            }
        }
        for p in rests {
            self.mark_done(p);
        }
    }
}

/// Where the unconsumed rest of a split with `consumed` elements consumed starts, for splits
/// whose elements are their positions (longer than what was consumed: a one-position `files`
/// split counts records, not positions, and has none).
fn rest_start(split: SourceRange, consumed: u64) -> Option<u64> {
    let len = split.stop.checked_sub(split.start)?;
    (consumed < len).then(|| split.start + consumed)
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

    #[test]
    fn splits_are_partial_until_their_last_element_then_merge_into_done_ranges() {
        let mut t = PositionTracker::new();
        t.consumed(&run(0, 10, 0, 4, false), 4);
        t.consumed(&run(20, 30, 0, 10, true), 10);
        let p = t.position("ds", 2);
        assert_eq!(p.dataset_id, "ds");
        assert_eq!(p.repetition, 2);
        assert_eq!(p.done, vec![r(20, 30)]);
        assert_eq!(p.partial, vec![PartialSplit { split: r(0, 10), consumed: 4 }]);
        t.consumed(&run(0, 10, 4, 6, true), 6);
        t.consumed(&run(10, 20, 0, 10, true), 10);
        let p = t.position("ds", 2);
        assert_eq!(p.done, vec![r(0, 30)]);
        assert!(p.partial.is_empty());
    }

    #[test]
    fn a_run_taken_in_part_counts_its_prefix_and_not_its_end() {
        let mut t = PositionTracker::new();
        t.consumed(&run(0, 10, 5, 5, true), 3);
        assert_eq!(t.position("d", 0).partial, vec![PartialSplit { split: r(0, 10), consumed: 8 }]);
        assert!(t.position("d", 0).done.is_empty());
        t.consumed(&run(0, 10, 5, 5, true), 0);
        assert_eq!(t.position("d", 0).partial[0].consumed, 8);
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
            partial: vec![
                PartialSplit { split: r(5, 6), consumed: 3 },
                PartialSplit { split: r(20, 30), consumed: 4 },
            ],
        };
        let mut t = PositionTracker::resuming(&p);
        let got = t.position("d", 0);
        assert_eq!(got.done, vec![r(0, 20), r(40, 50)]);
        assert_eq!(got.partial, vec![PartialSplit { split: r(20, 30), consumed: 4 }]);
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
            partial: vec![PartialSplit { split: r(10, 20), consumed: 4 }],
        };
        let mut t = PositionTracker::resuming(&p);
        t.consumed(&run(14, 20, 0, 3, false), 3);
        assert_eq!(
            t.position("d", 0).partial,
            vec![
                PartialSplit { split: r(10, 20), consumed: 4 },
                PartialSplit { split: r(14, 20), consumed: 3 }
            ]
        );
        t.consumed(&run(14, 20, 3, 3, true), 3);
        let got = t.position("d", 0);
        assert_eq!(got.done, vec![r(0, 20)], "the consumed prefix joins the rest");
        assert!(got.partial.is_empty(), "{got:?}");
        // A position saved before this rule (the rest done, the split partial) resumes alike.
        let saved = ReadPosition {
            done: vec![r(0, 10), r(14, 30)],
            partial: vec![PartialSplit { split: r(10, 20), consumed: 4 }],
            ..p.clone()
        };
        assert_eq!(PositionTracker::resuming(&saved).position("d", 0).done, vec![r(0, 30)]);
        assert!(PositionTracker::resuming(&saved).position("d", 0).partial.is_empty());
        // A file (one position) counts records: its rest is never a range of positions.
        let mut t = PositionTracker::new();
        t.consumed(&run(3, 4, 0, 5, false), 5);
        t.consumed(&run(4, 5, 0, 1, true), 1);
        assert_eq!(t.position("d", 0).partial, vec![PartialSplit { split: r(3, 4), consumed: 5 }]);
    }

    #[test]
    fn empty_and_inverted_splits_are_ignored() {
        let mut t = PositionTracker::new();
        t.consumed(&run(5, 5, 0, 1, true), 1);
        t.consumed(&run(9, 3, 0, 1, true), 1);
        assert_eq!(t, PositionTracker::new());
    }
}
