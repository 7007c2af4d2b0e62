//! Read positions: where a trainer is in a `distributed_epoch`, as plain data it can save next
//! to a model checkpoint and hand back to resume.
//!
//! Every source has *positions* `0..n`: the elements of a `range` or `list` source, the paths
//! of a `files` source (a file is one position; its records are the elements it outputs), the
//! items of a `splits` source. A DYNAMIC split covers a [`SourceRange`] of them
//! ([`SplitPositions`] says which, as the dispatcher hands it out), and its *output* is the
//! elements the pipeline makes of it, in order.
//!
//! - A worker tags the elements it serves with [`OriginRun`]s: runs of consecutive elements
//!   from one split, with their offset in that split's output.
//! - A client folds the runs of the elements it handed to its caller into a
//!   [`ReadPosition`]: the ranges wholly consumed (`done`) and, per split under way, how many
//!   of its first output elements were (`partial`).
//! - The dispatcher turns a position into a [`ResumePlan`]: the splits of what is left, with
//!   the consumed prefix of each partial split skipped.
//!
//! A position is exact only for pipelines in which every element comes from one split and a
//! split's output does not depend on what came before it: a source with no transform but
//! `shard_hint` ([`DatasetDef::check_resumable`](crate::dataset::DatasetDef::check_resumable)). Buffering
//! across splits (`shuffle`, `batch`), counting across them (`take`, `skip`) or passing over
//! the source again (`repeat`) would make "the first K elements of a split" meaningless, so
//! such pipelines carry no origins and resuming over them is refused.

mod plan;
mod tracker;

pub use plan::{PlanError, ResumePlan};
pub use tracker::{MergeError, PositionTracker, merge_positions};

use serde::{Deserialize, Serialize};

/// The most `done` plus `partial` entries a position may hold: a position's size is bounded
/// by the splits a trainer read, and one this long means a hostile or broken caller.
pub const MAX_POSITION_ENTRIES: usize = 100_000;

/// A half-open range `start..stop` of a source's positions: `{"start": .., "stop": ..}` (an
/// object only, nothing else in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
// What the schema says (no other members); `Deserialize` below enforces it.
#[serde(deny_unknown_fields)]
pub struct SourceRange {
    /// The first position.
    pub start: u64,
    /// The end (exclusive).
    pub stop: u64,
}

impl<'de> Deserialize<'de> for SourceRange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Fields {
            start: u64,
            stop: u64,
        }
        // serde's derive would also read `[start, stop]`, which no position holds.
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = SourceRange;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of start and stop")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<SourceRange, A::Error> {
                let Fields { start, stop } =
                    Fields::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(SourceRange { start, stop })
            }
        }
        d.deserialize_map(Object)
    }
}

/// Where a split handed out by get-split lies in the source, and how many of its first output
/// elements the worker must skip (a split resumed part way; 0 otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SplitPositions {
    /// The first position.
    pub start: u64,
    /// The end (exclusive).
    pub stop: u64,
    /// Output elements of the split already consumed: the worker skips them, and the first
    /// element it produces has this offset.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skip: u64,
    /// The output offset at which the split stops (exclusive): what follows was consumed
    /// before (a part of a `files` split between two consumed ranges). `None`: its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
}

impl SplitPositions {
    /// The split's range of positions.
    pub fn range(&self) -> SourceRange {
        SourceRange { start: self.start, stop: self.stop }
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Consecutive elements of an element reply that come from one split: `count` elements,
/// starting at output offset `offset` of split `split`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OriginRun {
    /// The split's positions in the source.
    pub split: SourceRange,
    /// The offset, in the split's output, of the run's first element.
    pub offset: u64,
    /// Elements in the run (at least 1).
    pub count: u64,
    /// The run's last element is the split's last: once it is consumed, the whole split is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub end: bool,
}

/// A split under way: the output elements of it that were consumed, as a prefix and, when
/// several consumers read the split, further ranges after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PartialSplit {
    /// The split's positions in the source.
    pub split: SourceRange,
    /// Output elements of the split consumed, from its first.
    pub consumed: u64,
    /// Further ranges of output offsets consumed after the prefix (`start..stop` are offsets
    /// in the split's output, not source positions): sorted, disjoint, not touching each
    /// other or the prefix. Consumers sharing a task take its elements first come, first
    /// served, so one consumer's part of a split, or several consumers' parts merged
    /// ([`merge_positions`]), may have gaps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more: Vec<SourceRange>,
    /// The split's output length, once its last element was consumed (by any consumer).
    /// Absent when unknown (`null` is refused: a position never holds it).
    #[serde(default, deserialize_with = "some_u64", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub len: Option<u64>,
}

/// A present `u64` (not `null`) as `Some`.
fn some_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    u64::deserialize(d).map(Some)
}

impl PartialSplit {
    /// A split of which the first `consumed` output elements were consumed.
    pub fn prefix(split: SourceRange, consumed: u64) -> PartialSplit {
        PartialSplit { split, consumed, more: Vec::new(), len: None }
    }
}

/// Where a reader of a `distributed_epoch` is: save it with a model checkpoint, resume with
/// `{"resume_from": position}` when creating an iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReadPosition {
    /// The dataset read.
    pub dataset_id: String,
    /// The iteration's repetition (which pass over the job).
    pub repetition: u64,
    /// Ranges of source positions whose elements were all consumed.
    pub done: Vec<SourceRange>,
    /// Splits partly consumed.
    pub partial: Vec<PartialSplit>,
}

/// Where one element a pipeline produced comes from (see
/// [`Pipeline::origin`](crate::dataset::Pipeline::origin)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElementOrigin {
    /// The split's positions in the source.
    pub split: SourceRange,
    /// The element's offset in the split's output.
    pub offset: u64,
    /// It is the split's last output element.
    pub end: bool,
}

impl OriginRun {
    /// Appends `origin` to `runs`: it extends the last run when it is the next element of the
    /// same split, else it starts a new run.
    pub fn push(runs: &mut Vec<OriginRun>, origin: ElementOrigin) {
        if let Some(last) = runs.last_mut()
            && !last.end
            && last.split == origin.split
            && last.offset.checked_add(last.count) == Some(origin.offset)
        {
            last.count += 1;
            last.end = origin.end;
            return;
        }
        runs.push(OriginRun {
            split: origin.split,
            offset: origin.offset,
            count: 1,
            end: origin.end,
        });
    }

    /// The runs covering the first `n` elements covered by `runs` (fewer when `runs` covers
    /// fewer), as [`OriginRun::take_front`] would take them, leaving `runs` as they are.
    pub fn front(runs: &std::collections::VecDeque<OriginRun>, n: u64) -> Vec<OriginRun> {
        let mut out = Vec::new();
        let mut left = n;
        for run in runs {
            if left == 0 {
                break;
            }
            if run.count <= left {
                left -= run.count;
                out.push(*run);
            } else {
                out.push(OriginRun { count: left, end: false, ..*run });
                left = 0;
            }
        }
        out
    }

    /// Takes the runs covering the first `n` elements covered by `runs` (fewer when `runs`
    /// covers fewer), cutting the run in which the `n`th element falls in two.
    pub fn take_front(runs: &mut std::collections::VecDeque<OriginRun>, n: u64) -> Vec<OriginRun> {
        let mut taken = Vec::new();
        let mut left = n;
        while left > 0 {
            let Some(front) = runs.front_mut() else { break };
            if front.count <= left {
                left -= front.count;
                taken.extend(runs.pop_front());
            } else {
                taken.push(OriginRun { count: left, end: false, ..*front });
                front.offset = front.offset.saturating_add(left);
                front.count -= left;
                left = 0;
            }
        }
        taken
    }
}

#[cfg(test)]
mod run_tests {
    use super::*;

    fn o(start: u64, offset: u64, end: bool) -> ElementOrigin {
        ElementOrigin { split: SourceRange { start, stop: start + 10 }, offset, end }
    }

    #[test]
    fn a_source_range_is_an_object_of_start_and_stop() {
        let read = |text: &str| serde_json::from_str::<SourceRange>(text);
        assert_eq!(read(r#"{"start":1,"stop":4}"#).unwrap(), SourceRange { start: 1, stop: 4 });
        assert!(read("[1,4]").is_err());
        assert!(read(r#"{"start":1}"#).is_err());
        assert!(read(r#"{"start":1,"stop":4,"step":1}"#).is_err());
        assert!(read(r#"{"start":-1,"stop":4}"#).is_err());
    }

    #[test]
    fn a_partial_splits_len_is_absent_or_a_number() {
        let read = |text: &str| serde_json::from_str::<PartialSplit>(text);
        let split = r#""split":{"start":0,"stop":4},"consumed":1"#;
        assert_eq!(read(&format!("{{{split}}}")).unwrap().len, None);
        assert_eq!(read(&format!("{{{split},\"len\":3}}")).unwrap().len, Some(3));
        assert!(read(&format!("{{{split},\"len\":null}}")).is_err());
    }

    #[test]
    fn consecutive_elements_of_a_split_form_one_run() {
        let mut runs = Vec::new();
        for (start, offset, end) in
            [(0, 0, false), (0, 1, false), (0, 2, true), (10, 0, false), (10, 2, false)]
        {
            OriginRun::push(&mut runs, o(start, offset, end));
        }
        // A split read again (after a lost worker) starts a new run even at a fitting offset.
        OriginRun::push(&mut runs, o(0, 3, false));
        let r = |start, offset, count, end| OriginRun {
            split: SourceRange { start, stop: start + 10 },
            offset,
            count,
            end,
        };
        assert_eq!(
            runs,
            [r(0, 0, 3, true), r(10, 0, 1, false), r(10, 2, 1, false), r(0, 3, 1, false)]
        );
        let mut q: std::collections::VecDeque<_> = runs.into();
        // Looking at the front takes nothing, and answers what taking it would.
        for n in 0..7 {
            let mut taken = q.clone();
            assert_eq!(OriginRun::front(&q, n), OriginRun::take_front(&mut taken, n), "{n}");
        }
        assert_eq!(OriginRun::take_front(&mut q, 2), [r(0, 0, 2, false)]);
        assert_eq!(
            OriginRun::take_front(&mut q, 3),
            [r(0, 2, 1, true), r(10, 0, 1, false), r(10, 2, 1, false)]
        );
        assert_eq!(OriginRun::take_front(&mut q, 0), []);
        assert_eq!(OriginRun::take_front(&mut q, 9), [r(0, 3, 1, false)]);
        assert!(q.is_empty());
    }
}
