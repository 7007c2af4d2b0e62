//! Decoding of dataset definitions from JSON values, with path-naming error messages.

use std::num::{NonZeroI64, NonZeroU64};

use serde_json::{Map, Value};

use super::MAX_TRANSFORMS;
use super::columnar::{
    DType, FileSplit, MAX_COLUMNS, MAX_TENSOR_DIMS, TensorDef, check_column_name, check_tensor,
};
use super::def::{
    BatchDef, DatasetDef, FileFormat, FilesDef, ListDef, RangeDef, ShuffleDef, SourceDef,
    SplitsDef, TransformDef,
};
use super::error::{DatasetError, invalid, quoted};
use crate::json::{MAX_NESTING, nested_deeper_than};

const SOURCE_KINDS: &[&str] = &["range", "list", "files", "splits"];
const TRANSFORM_KINDS: &[&str] = &["repeat", "take", "skip", "shuffle", "batch", "shard_hint"];

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
        "files" => files(obj, &path),
        _ => {
            only_keys(obj, &path, &["items"])?;
            let items_path = format!("{path}.items");
            let items = array(required(obj, &path, "items")?, &items_path)?;
            shallow(items, &items_path)?;
            Ok(SourceDef::Splits(SplitsDef { items: items.clone() }))
        }
    }
}

/// Decodes the arguments of a `files` source.
fn files(obj: &Map<String, Value>, path: &str) -> Result<SourceDef, DatasetError> {
    only_keys(obj, path, &["paths", "format", "columns", "tensors", "split", "rows"])?;
    let paths = strings(required(obj, path, "paths")?, &format!("{path}.paths"))?;
    let format_path = format!("{path}.format");
    let format = match required(obj, path, "format")? {
        Value::String(s) => FileFormat::from_name(s),
        _ => None,
    };
    let Some(format) = format else {
        let got = match obj.get("format") {
            Some(Value::String(s)) => quoted(s),
            Some(v) => describe(v),
            None => String::new(),
        };
        return Err(invalid(format!(
            "{format_path} must be one of {}, got {got}",
            one_of(&FileFormat::NAMES)
        )));
    };
    let mut def = FilesDef::new(paths, format);
    let columnar_only = |key: &str| {
        invalid(format!(
            "{path}.{key} applies to the columnar formats (\"parquet\", \"arrow\", \
             \"tfrecord\"), not to {}",
            quoted(format.as_str())
        ))
    };
    if let Some(v) = obj.get("columns") {
        if !format.is_columnar() {
            return Err(columnar_only("columns"));
        }
        let columns_path = format!("{path}.columns");
        let columns = strings(v, &columns_path)?;
        check_names(columns.iter().map(String::as_str), &columns_path)?;
        def.columns = Some(columns);
    }
    if let Some(v) = obj.get("tensors") {
        if !format.is_columnar() {
            return Err(columnar_only("tensors"));
        }
        let tensors_path = format!("{path}.tensors");
        let items = array(v, &tensors_path)?;
        def.tensors = items
            .iter()
            .enumerate()
            .map(|(i, t)| tensor(t, &format!("{tensors_path}[{i}]")))
            .collect::<Result<_, _>>()?;
        check_names(def.tensors.iter().map(|t| t.name.as_str()), &tensors_path)?;
    }
    if format == FileFormat::TfRecord
        && let Some(columns) = &def.columns
    {
        let names: Vec<&str> = if def.tensors.is_empty() {
            vec!["record"]
        } else {
            def.tensors.iter().map(|t| t.name.as_str()).collect()
        };
        if let Some((i, c)) = columns.iter().enumerate().find(|(_, c)| !names.contains(&c.as_str()))
        {
            return Err(invalid(format!(
                "{path}.columns[{i}] is {}, which a tfrecord source does not have: its columns \
                 are {}",
                quoted(c),
                one_of(&names)
            )));
        }
    }
    if let Some(v) = obj.get("split") {
        def.split = match v {
            Value::String(s) if s == "files" => FileSplit::Files,
            Value::String(s) if s == "rows" && format == FileFormat::Parquet => FileSplit::Rows,
            Value::String(s) if s == "rows" => {
                return Err(invalid(format!(
                    "{path}.split \"rows\" applies to parquet files (whose footers give their \
                     row counts), not to {}",
                    quoted(format.as_str())
                )));
            }
            other => {
                return Err(invalid(format!(
                    "{path}.split must be \"files\" or \"rows\", got {}",
                    describe(other)
                )));
            }
        };
    }
    if let Some(v) = obj.get("rows") {
        let rows_path = format!("{path}.rows");
        if def.split != FileSplit::Rows {
            return Err(invalid(format!("{rows_path} applies only with \"split\": \"rows\"")));
        }
        let rows = array(v, &rows_path)?
            .iter()
            .enumerate()
            .map(|(i, n)| non_negative(n, &format!("{rows_path}[{i}]")))
            .collect::<Result<Vec<u64>, _>>()?;
        if rows.len() != def.paths.len() {
            return Err(invalid(format!(
                "{rows_path} has {} entries for {} paths: it gives the row count of every file",
                rows.len(),
                def.paths.len()
            )));
        }
        if rows.iter().try_fold(0u64, |sum, n| sum.checked_add(*n)).is_none() {
            return Err(invalid(format!("{rows_path} adds up to more than 2^64 - 1 rows")));
        }
        def.rows = Some(rows);
    }
    Ok(SourceDef::Files(Box::new(def)))
}

/// An array of strings.
fn strings(value: &Value, path: &str) -> Result<Vec<String>, DatasetError> {
    array(value, path)?
        .iter()
        .enumerate()
        .map(|(i, p)| match p {
            Value::String(s) => Ok(s.clone()),
            other => Err(invalid(format!("{path}[{i}] must be a string, got {}", describe(other)))),
        })
        .collect()
}

/// Column names: at most [`MAX_COLUMNS`], each valid, none twice.
fn check_names<'a>(
    names: impl ExactSizeIterator<Item = &'a str>,
    path: &str,
) -> Result<(), DatasetError> {
    if names.len() > MAX_COLUMNS {
        return Err(invalid(format!(
            "{path} has {} entries; at most {MAX_COLUMNS} are allowed",
            names.len()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, name) in names.enumerate() {
        check_column_name(name, &format!("{path}[{i}]"))?;
        if !seen.insert(name) {
            return Err(invalid(format!("{path}[{i}] names {} a second time", quoted(name))));
        }
    }
    Ok(())
}

/// A declared tensor: `{"name": ..., "dtype": ..., "shape"?: [...]}`.
fn tensor(value: &Value, path: &str) -> Result<TensorDef, DatasetError> {
    let obj = object(value, path)?;
    only_keys(obj, path, &["name", "dtype", "shape"])?;
    let name = match required(obj, path, "name")? {
        Value::String(s) => s.clone(),
        other => {
            return Err(invalid(format!("{path}.name must be a string, got {}", describe(other))));
        }
    };
    let dtype = match required(obj, path, "dtype")? {
        Value::String(s) => DType::from_name(s),
        _ => None,
    }
    .ok_or_else(|| {
        invalid(format!(
            "{path}.dtype must be one of {}, got {}",
            one_of(&DType::NAMES),
            obj.get("dtype").map(describe).unwrap_or_default()
        ))
    })?;
    let shape = match obj.get("shape") {
        None => Vec::new(),
        Some(v) => {
            let shape_path = format!("{path}.shape");
            let dims = array(v, &shape_path)?;
            if dims.len() > MAX_TENSOR_DIMS {
                return Err(invalid(format!(
                    "{shape_path} has {} dimensions; at most {MAX_TENSOR_DIMS} are allowed",
                    dims.len()
                )));
            }
            dims.iter()
                .enumerate()
                .map(|(i, d)| non_negative(d, &format!("{shape_path}[{i}]")))
                .collect::<Result<_, _>>()?
        }
    };
    let tensor = TensorDef { name, dtype, shape };
    check_tensor(&tensor, path)?;
    Ok(tensor)
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
