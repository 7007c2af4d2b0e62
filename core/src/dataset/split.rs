//! Splits: how DYNAMIC sharding cuts a source into pieces the dispatcher hands out.
//!
//! The functions here are pure and O(1) for `range` and `list` sources (O(1) for `files` and
//! `splits` too, apart from cloning the split), so a dispatcher only needs to track counters
//! (repetition, splits handed out) and can recompute any split after a restart without
//! replaying a provider.

use serde_json::{Value, json};

use super::def::SourceDef;
use super::error::{DatasetError, brief, invalid};

/// What a worker must produce for one split (see [`elements_of_split`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitElements {
    /// The elements at positions `start..stop` of a `range` or `list` source (see
    /// [`element_at`]).
    Positions {
        /// The first position (inclusive).
        start: u64,
        /// The end position (exclusive).
        stop: u64,
    },
    /// The decoded contents of this file of a `files` source.
    File {
        /// The path, one of the source's paths.
        path: String,
    },
    /// A `splits` source's item, which is itself the single element.
    Item(Value),
    /// The rows `start..stop` of a source split by rows (counted across its files, in path
    /// order).
    Rows {
        /// The first row (inclusive).
        start: u64,
        /// The end row (exclusive).
        stop: u64,
    },
}

/// Checks a `split_size` job option: it must be at least 1.
pub fn validate_split_size(split_size: u64) -> Result<u64, DatasetError> {
    if split_size == 0 {
        return Err(invalid("split_size must be at least 1"));
    }
    Ok(split_size)
}

/// How many positions a source has when it is read element by element: the length of a
/// `range`, of a `list`'s elements, of a `splits` source's items; `None` for `files` (the
/// number of elements depends on the files' contents).
pub(super) fn positions(source: &SourceDef) -> Option<u64> {
    match source {
        SourceDef::Range(r) => Some(r.len()),
        SourceDef::List(l) => Some(len_u64(l.elements.len())),
        SourceDef::Splits(s) => Some(len_u64(s.items.len())),
        SourceDef::Files(_) => None,
    }
}

/// The rows of a source whose positions are rows (a Parquet source split by rows, its row
/// counts known), in all.
pub fn total_rows(source: &SourceDef) -> Option<u64> {
    match source {
        SourceDef::Files(f) => {
            f.row_positions().map(|rows| rows.iter().fold(0u64, |n, r| n.saturating_add(*r)))
        }
        _ => None,
    }
}

/// The number of positions split into chunks of `split_size`: elements of a `range` or
/// `list`, rows of a source split by rows.
fn chunked_positions(source: &SourceDef) -> Option<u64> {
    match source {
        SourceDef::Range(_) | SourceDef::List(_) => positions(source),
        SourceDef::Files(_) => total_rows(source),
        SourceDef::Splits(_) => None,
    }
}

fn len_u64(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX)
}

/// Split `index` of a range/list source (or of a source split by rows) as `(start, stop)`
/// without building JSON.
pub fn chunk_at(source: &SourceDef, split_size: u64, index: u64) -> Option<(u64, u64)> {
    let len = chunked_positions(source)?;
    let size = split_size.max(1);
    let start = index.checked_mul(size)?;
    if start >= len {
        return None;
    }
    Some((start, start.saturating_add(size).min(len)))
}

/// The element at `position` (0-based) of a `range` or `list` source, or the item at that
/// position of a `splits` source; `None` past the end and for `files`.
pub fn element_at(source: &SourceDef, position: u64) -> Option<Value> {
    match source {
        SourceDef::Range(r) => r.get(position).map(Value::from),
        SourceDef::List(l) => {
            usize::try_from(position).ok().and_then(|i| l.elements.get(i)).cloned()
        }
        SourceDef::Splits(s) => {
            usize::try_from(position).ok().and_then(|i| s.items.get(i)).cloned()
        }
        SourceDef::Files(_) => None,
    }
}

/// How many splits one pass over `source` has: `ceil(len / split_size)` chunks for `range`
/// and `list`, one per path for `files`, one per item for `splits`.
///
/// `split_size` is only used for `range` and `list`; a 0 (refused by
/// [`validate_split_size`]) is treated as 1.
pub fn num_splits(source: &SourceDef, split_size: u64) -> u64 {
    if let Some(rows) = total_rows(source) {
        return rows.div_ceil(split_size.max(1));
    }
    match source {
        SourceDef::Range(_) | SourceDef::List(_) => {
            positions(source).unwrap_or(0).div_ceil(split_size.max(1))
        }
        SourceDef::Files(f) => len_u64(f.paths.len()),
        SourceDef::Splits(s) => len_u64(s.items.len()),
    }
}

/// Split number `index` (0-based) of one pass over `source`, or `None` when `index >=
/// num_splits(source, split_size)`.
///
/// `range`/`list`: `{"start": a, "stop": b}`, the half-open chunk of element positions
/// `a = index * split_size`, `b = min(a + split_size, len)`; `files`: the path as a JSON
/// string; `splits`: the item itself. `split_size` 0 is treated as 1.
pub fn split_at(source: &SourceDef, split_size: u64, index: u64) -> Option<Value> {
    if total_rows(source).is_some() {
        let (start, stop) = chunk_at(source, split_size, index)?;
        return Some(json!({"start": start, "stop": stop}));
    }
    match source {
        SourceDef::Range(_) | SourceDef::List(_) => {
            let len = positions(source)?;
            let size = split_size.max(1);
            let start = index.checked_mul(size)?;
            if start >= len {
                return None;
            }
            let stop = start.saturating_add(size).min(len);
            Some(json!({"start": start, "stop": stop}))
        }
        SourceDef::Files(f) => {
            usize::try_from(index).ok().and_then(|i| f.paths.get(i)).cloned().map(Value::String)
        }
        SourceDef::Splits(s) => usize::try_from(index).ok().and_then(|i| s.items.get(i)).cloned(),
    }
}

/// What a worker must produce for `split` (as handed out by [`split_at`]), after checking
/// that the split belongs to `source`: a chunk must lie inside the source, a path must be one
/// of its paths (a linear scan; a pipeline keeps a set instead). Any JSON value is an item of
/// a `splits` source.
pub fn elements_of_split(source: &SourceDef, split: &Value) -> Result<SplitElements, DatasetError> {
    elements_of_split_with(source, split, |path| match source {
        SourceDef::Files(f) => f.paths.iter().any(|p| p == path),
        _ => false,
    })
}

/// [`elements_of_split`] with the path membership test supplied by the caller.
pub(super) fn elements_of_split_with(
    source: &SourceDef,
    split: &Value,
    is_known_path: impl FnOnce(&str) -> bool,
) -> Result<SplitElements, DatasetError> {
    match source {
        SourceDef::Range(_) | SourceDef::List(_) => {
            let (start, stop) = chunk_of(source, split, "elements")?;
            Ok(SplitElements::Positions { start, stop })
        }
        SourceDef::Files(_) if total_rows(source).is_some() => {
            let (start, stop) = chunk_of(source, split, "rows")?;
            Ok(SplitElements::Rows { start, stop })
        }
        SourceDef::Files(_) => match split {
            Value::String(path) if is_known_path(path) => {
                Ok(SplitElements::File { path: path.clone() })
            }
            Value::String(_) => Err(invalid(format!(
                "split {} is not one of the files source's paths",
                brief(split)
            ))),
            _ => Err(invalid(format!(
                "invalid split {} for a files source: expected a path string",
                brief(split)
            ))),
        },
        SourceDef::Splits(_) => Ok(SplitElements::Item(split.clone())),
    }
}

/// A chunk split `{"start": a, "stop": b}` of a source cut into chunks, checked against the
/// source's positions (`what` names them in messages).
fn chunk_of(source: &SourceDef, split: &Value, what: &str) -> Result<(u64, u64), DatasetError> {
    let len = chunked_positions(source).unwrap_or(0);
    let chunk = split.as_object().and_then(|obj| {
        if obj.len() != 2 {
            return None;
        }
        Some((obj.get("start")?.as_u64()?, obj.get("stop")?.as_u64()?))
    });
    let Some((start, stop)) = chunk else {
        return Err(invalid(format!(
            "invalid split {} for a {} source: expected {{\"start\": a, \"stop\": b}} with \
             non-negative integers a <= b",
            brief(split),
            source.kind()
        )));
    };
    if start > stop || stop > len {
        return Err(invalid(format!(
            "split {} is outside the {} source, which has {len} {what}",
            brief(split),
            source.kind()
        )));
    }
    Ok((start, stop))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::DatasetDef;

    fn source(json: &str) -> SourceDef {
        SourceDef::from_json(&serde_json::from_str(json).unwrap()).unwrap()
    }

    #[test]
    fn range_chunks() {
        let s = source(r#"{"range": {"stop": 10}}"#);
        assert_eq!(num_splits(&s, 3), 4);
        assert_eq!(split_at(&s, 3, 0), Some(json!({"start": 0, "stop": 3})));
        assert_eq!(split_at(&s, 3, 3), Some(json!({"start": 9, "stop": 10})));
        assert_eq!(split_at(&s, 3, 4), None);
        assert_eq!(split_at(&s, 3, u64::MAX), None);
        assert_eq!(num_splits(&s, 1024), 1);
        assert_eq!(num_splits(&s, 0), 10);
        assert_eq!(validate_split_size(0).unwrap_err().code(), "INVALID_ARGUMENT");
        assert_eq!(validate_split_size(7), Ok(7));
    }

    #[test]
    fn huge_range_is_o1() {
        let s =
            source(r#"{"range": {"start": -9223372036854775808, "stop": 9223372036854775807}}"#);
        assert_eq!(num_splits(&s, 1), u64::MAX);
        let last = split_at(&s, 1, u64::MAX - 1).unwrap();
        assert_eq!(last, json!({"start": u64::MAX - 1, "stop": u64::MAX}));
        assert_eq!(element_at(&s, u64::MAX - 1), Some(json!(i64::MAX - 1)));
        assert_eq!(element_at(&s, u64::MAX), None);
        let s = source(
            r#"{"range": {"start": 9223372036854775807, "stop": -9223372036854775808,
                                     "step": -9223372036854775808}}"#,
        );
        assert_eq!(num_splits(&s, 5), 1);
        assert_eq!(element_at(&s, 1), Some(json!(-1)));
    }

    #[test]
    fn splits_of_files_and_items() {
        let f = source(r#"{"files": {"paths": ["a", "b"], "format": "lines"}}"#);
        assert_eq!(num_splits(&f, 1), 2);
        assert_eq!(split_at(&f, 99, 1), Some(json!("b")));
        assert_eq!(
            elements_of_split(&f, &json!("b")),
            Ok(SplitElements::File { path: "b".into() })
        );
        let err = elements_of_split(&f, &json!("c")).unwrap_err();
        assert!(err.message().contains("not one of"), "{err}");
        assert!(elements_of_split(&f, &json!(1)).is_err());

        let s = source(r#"{"splits": {"items": [{"uri": "gs://x"}, 3]}}"#);
        assert_eq!(num_splits(&s, 1), 2);
        assert_eq!(split_at(&s, 1, 0), Some(json!({"uri": "gs://x"})));
        assert_eq!(elements_of_split(&s, &json!(3)), Ok(SplitElements::Item(json!(3))));
    }

    #[test]
    fn chunks_are_validated() {
        let s = source(r#"{"list": {"elements": ["a", "b", "c"]}}"#);
        assert_eq!(
            elements_of_split(&s, &json!({"start": 1, "stop": 3})),
            Ok(SplitElements::Positions { start: 1, stop: 3 })
        );
        for bad in [
            json!({"start": 1, "stop": 4}),
            json!({"start": 2, "stop": 1}),
            json!({"start": -1, "stop": 1}),
            json!({"start": 0}),
            json!({"start": 0, "stop": 1, "x": 2}),
            json!("a"),
        ] {
            let err = elements_of_split(&s, &bad).unwrap_err();
            assert_eq!(err.code(), "INVALID_ARGUMENT", "{bad}");
        }
        let err = elements_of_split(&s, &json!({"start": 1, "stop": 4})).unwrap_err();
        assert!(err.message().contains("outside the list source, which has 3 elements"), "{err}");
    }

    #[test]
    fn positions_are_not_values() {
        let def: DatasetDef =
            r#"{"source": {"range": {"start": 100, "stop": 90, "step": -2}}}"#.parse().unwrap();
        assert_eq!(split_at(&def.source, 2, 1), Some(json!({"start": 2, "stop": 4})));
        assert_eq!(element_at(&def.source, 2), Some(json!(96)));
        assert_eq!(element_at(&def.source, 4), Some(json!(92)));
        assert_eq!(element_at(&def.source, 5), None);
    }
}
