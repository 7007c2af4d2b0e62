//! Decoding of dataset definitions from JSON values, with path-naming error messages.

use std::num::{NonZeroI64, NonZeroU64};

use serde_json::{Map, Value};

use super::MAX_TRANSFORMS;
use super::def::{
    BatchDef, DatasetDef, FileFormat, FilesDef, ListDef, RangeDef, ShuffleDef, SourceDef,
    SplitsDef, TransformDef,
};
use super::error::{DatasetError, invalid, quoted};
use crate::json::{MAX_NESTING, nested_deeper_than};

const SOURCE_KINDS: &[&str] = &["range", "list", "files", "splits"];
const TRANSFORM_KINDS: &[&str] = &["repeat", "take", "skip", "shuffle", "batch", "shard_hint"];
const FORMATS: &[&str] = &["lines", "jsonl", "bytes"];

/// Decodes a whole definition.
pub(super) fn dataset(value: &Value) -> Result<DatasetDef, DatasetError> {
    const ROOT: &str = "dataset definition";
    let obj = object(value, ROOT)?;
    only_keys(obj, ROOT, &["source", "transforms"])?;
    let source = match obj.get("source") {
        Some(v) => source(v, "source")?,
        None => return Err(invalid("dataset definition is missing \"source\"")),
    };
    let transforms = match obj.get("transforms") {
        None => Vec::new(),
        Some(v) => {
            let items = array(v, "transforms")?;
            if items.len() > MAX_TRANSFORMS {
                return Err(invalid(format!(
                    "transforms has {} entries; at most {MAX_TRANSFORMS} are allowed",
                    items.len()
                )));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, t)| transform(t, &format!("transforms[{i}]")))
                .collect::<Result<Vec<_>, _>>()?
        }
    };
    Ok(DatasetDef { source, transforms })
}

/// Decodes a source found at `path`.
pub(super) fn source(value: &Value, path: &str) -> Result<SourceDef, DatasetError> {
    let (kind, body) = single_entry(value, path, SOURCE_KINDS, "source type")?;
    let path = format!("{path}.{kind}");
    let obj = object(body, &path)?;
    match kind {
        "range" => {
            only_keys(obj, &path, &["start", "stop", "step"])?;
            let start = match obj.get("start") {
                Some(v) => integer(v, &format!("{path}.start"))?,
                None => 0,
            };
            let stop = integer(required(obj, &path, "stop")?, &format!("{path}.stop"))?;
            let step = match obj.get("step") {
                Some(v) => {
                    let step_path = format!("{path}.step");
                    NonZeroI64::new(integer(v, &step_path)?)
                        .ok_or_else(|| invalid(format!("{step_path} must not be 0")))?
                }
                None => STEP_ONE,
            };
            Ok(SourceDef::Range(RangeDef { start, stop, step }))
        }
        "list" => {
            only_keys(obj, &path, &["elements"])?;
            let elements_path = format!("{path}.elements");
            let elements = array(required(obj, &path, "elements")?, &elements_path)?;
            shallow(elements, &elements_path)?;
            Ok(SourceDef::List(ListDef { elements: elements.clone() }))
        }
        "files" => {
            only_keys(obj, &path, &["paths", "format"])?;
            let paths_path = format!("{path}.paths");
            let paths = array(required(obj, &path, "paths")?, &paths_path)?
                .iter()
                .enumerate()
                .map(|(i, p)| match p {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(invalid(format!(
                        "{paths_path}[{i}] must be a string, got {}",
                        describe(other)
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let format_path = format!("{path}.format");
            let format = match required(obj, &path, "format")? {
                Value::String(s) if s == "lines" => FileFormat::Lines,
                Value::String(s) if s == "jsonl" => FileFormat::Jsonl,
                Value::String(s) if s == "bytes" => FileFormat::Bytes,
                other => {
                    let got = match other {
                        Value::String(s) => quoted(s),
                        v => describe(v),
                    };
                    return Err(invalid(format!(
                        "{format_path} must be one of {}, got {got}",
                        one_of(FORMATS)
                    )));
                }
            };
            Ok(SourceDef::Files(FilesDef { paths, format }))
        }
        _ => {
            only_keys(obj, &path, &["items"])?;
            let items_path = format!("{path}.items");
            let items = array(required(obj, &path, "items")?, &items_path)?;
            shallow(items, &items_path)?;
            Ok(SourceDef::Splits(SplitsDef { items: items.clone() }))
        }
    }
}

/// Refuses an element nested more than [`MAX_NESTING`] levels deep: the journal could not
/// replay the dataset's registration (see [`crate::json::MAX_NESTING`]).
fn shallow(values: &[Value], path: &str) -> Result<(), DatasetError> {
    match values.iter().position(|v| nested_deeper_than(v, MAX_NESTING)) {
        None => Ok(()),
        Some(i) => Err(invalid(format!(
            "{path}[{i}] nests arrays and objects more than {MAX_NESTING} levels deep"
        ))),
    }
}

/// Decodes a transform found at `path`.
pub(super) fn transform(value: &Value, path: &str) -> Result<TransformDef, DatasetError> {
    let (kind, body) = single_entry(value, path, TRANSFORM_KINDS, "transform")?;
    let path = format!("{path}.{kind}");
    match kind {
        "repeat" => match body {
            Value::Null => Ok(TransformDef::Repeat(None)),
            v => match v.as_u64() {
                Some(n) => Ok(TransformDef::Repeat(Some(n))),
                None => Err(invalid(format!(
                    "{path} must be a non-negative integer or null (forever), got {}",
                    describe(v)
                ))),
            },
        },
        "take" => Ok(TransformDef::Take(non_negative(body, &path)?)),
        "skip" => Ok(TransformDef::Skip(non_negative(body, &path)?)),
        "shuffle" => {
            let obj = object(body, &path)?;
            only_keys(obj, &path, &["buffer", "seed"])?;
            let buffer = positive(required(obj, &path, "buffer")?, &format!("{path}.buffer"))?;
            let seed = non_negative(required(obj, &path, "seed")?, &format!("{path}.seed"))?;
            Ok(TransformDef::Shuffle(ShuffleDef { buffer, seed }))
        }
        "batch" => {
            let obj = object(body, &path)?;
            only_keys(obj, &path, &["size", "drop_remainder"])?;
            let size = positive(required(obj, &path, "size")?, &format!("{path}.size"))?;
            let drop_remainder = match obj.get("drop_remainder") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(invalid(format!(
                        "{path}.drop_remainder must be a boolean, got {}",
                        describe(other)
                    )));
                }
            };
            Ok(TransformDef::Batch(BatchDef { size, drop_remainder }))
        }
        _ => {
            let obj = object(body, &path)?;
            only_keys(obj, &path, &[])?;
            Ok(TransformDef::ShardHint)
        }
    }
}

/// The default step of a range.
const STEP_ONE: NonZeroI64 = match NonZeroI64::new(1) {
    Some(one) => one,
    None => NonZeroI64::MAX,
};

/// A short description of a value for "got ..." in messages: numbers and booleans verbatim,
/// other values by type.
pub(super) fn describe(value: &Value) -> String {
    match value {
        Value::Null => String::from("null"),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(_) => String::from("a string"),
        Value::Array(_) => String::from("an array"),
        Value::Object(_) => String::from("an object"),
    }
}

/// `"a", "b" or "c"`.
fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    match quoted.split_last() {
        None => String::from("nothing"),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

fn object<'a>(value: &'a Value, path: &str) -> Result<&'a Map<String, Value>, DatasetError> {
    value
        .as_object()
        .ok_or_else(|| invalid(format!("{path} must be an object, got {}", describe(value))))
}

fn array<'a>(value: &'a Value, path: &str) -> Result<&'a Vec<Value>, DatasetError> {
    value
        .as_array()
        .ok_or_else(|| invalid(format!("{path} must be an array, got {}", describe(value))))
}

fn only_keys(obj: &Map<String, Value>, path: &str, allowed: &[&str]) -> Result<(), DatasetError> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(key) if allowed.is_empty() => {
            Err(invalid(format!("{path} has an unknown field {}; it takes no fields", quoted(key))))
        }
        Some(key) => Err(invalid(format!(
            "{path} has an unknown field {}; expected {}",
            quoted(key),
            one_of(allowed)
        ))),
    }
}

fn required<'a>(
    obj: &'a Map<String, Value>,
    path: &str,
    key: &str,
) -> Result<&'a Value, DatasetError> {
    obj.get(key).ok_or_else(|| invalid(format!("{path}.{key} is required")))
}

/// An object with exactly one key, which must be one of `kinds`.
fn single_entry<'a>(
    value: &'a Value,
    path: &str,
    kinds: &[&str],
    what: &str,
) -> Result<(&'a str, &'a Value), DatasetError> {
    let expected = one_of(kinds);
    let Some(obj) = value.as_object() else {
        return Err(invalid(format!(
            "{path} must be an object with exactly one key ({expected}), got {}",
            describe(value)
        )));
    };
    let mut entries = obj.iter();
    let (Some((key, body)), None) = (entries.next(), entries.next()) else {
        return Err(invalid(format!(
            "{path} must be an object with exactly one key ({expected}), got {} keys",
            obj.len()
        )));
    };
    if !kinds.contains(&key.as_str()) {
        return Err(invalid(format!(
            "{path}: unknown {what} {}; expected {expected}",
            quoted(key)
        )));
    }
    Ok((key.as_str(), body))
}

fn integer(value: &Value, path: &str) -> Result<i64, DatasetError> {
    value.as_i64().ok_or_else(|| {
        invalid(format!("{path} must be a 64-bit signed integer, got {}", describe(value)))
    })
}

fn non_negative(value: &Value, path: &str) -> Result<u64, DatasetError> {
    value.as_u64().ok_or_else(|| {
        invalid(format!("{path} must be a non-negative integer, got {}", describe(value)))
    })
}

fn positive(value: &Value, path: &str) -> Result<NonZeroU64, DatasetError> {
    if let Some(n) = value.as_u64() {
        return NonZeroU64::new(n).ok_or_else(|| invalid(format!("{path} must be at least 1")));
    }
    if value.as_i64().is_some() {
        return Err(invalid(format!("{path} must be at least 1")));
    }
    Err(invalid(format!("{path} must be a positive integer, got {}", describe(value))))
}
