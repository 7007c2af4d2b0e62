//! Rows as JSON objects, for clients that read JSON.
//!
//! A row is an object of its columns, in the schema's order; a `batch` element an array of such
//! objects. Each value is read where it lies in its chunk's arrays (no batch is sliced or
//! copied per row), and the forms are those a JSON reader expects:
//!
//! | Arrow | JSON |
//! |---|---|
//! | null (and any null value) | `null` |
//! | boolean | `true` / `false` |
//! | integers, every width | numbers (exact: 64-bit integers are not rounded) |
//! | float16, float32, float64 | numbers: the shortest decimal that reads back to the same float64, or float32 for both narrower widths; NaN and ±infinity, which JSON lacks, are the strings `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | UTF-8 strings (every variant) | strings |
//! | binary (every variant), fixed-size binary | base64 strings (standard alphabet, padded), as the `bytes` format |
//! | list, large list, fixed-size list | arrays; a fixed-size list column of the `arrow.fixed_shape_tensor` extension type is nested to its shape (from the field's `ARROW:extension:metadata` `{"shape": [...]}`, in stored order) |
//! | struct | objects |
//! | dictionary | its value |
//! | date32, date64 | `"YYYY-MM-DD"` (a date64 that is not a whole day: as a timestamp in milliseconds) |
//! | timestamp | `"YYYY-MM-DDTHH:MM:SS"` with as many fraction digits as the unit has (3, 6 or 9); with a time zone, the instant in UTC with `Z` |
//! | time32, time64 | `"HH:MM:SS"`, fraction digits as the unit has |
//! | decimal | strings (`"-12.345"`): exact, where a number would be rounded |
//!
//! Any other type (durations, intervals, maps, unions, run-end encoded, list views) has no
//! JSON form here, and a row with such a column is refused naming the column: Arrow serves it.
//! So are a row with two columns (or a struct with two fields) of one name, which one object
//! cannot hold, and types nested deeper than [`MAX_JSON_DEPTH`].

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Decimal32Type, Decimal64Type, Decimal128Type, Decimal256Type,
    Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
    Time32MillisecondType, Time32SecondType, Time64MicrosecondType, Time64NanosecondType,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrowPrimitiveType, OffsetSizeTrait, PrimitiveArray, RecordBatch};
use arrow_schema::{DataType, Field, Fields, TimeUnit};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Number, Value};
use shardwise_core::dataset::{Element, column};
use shardwise_http::{Code, Problem};

use super::locate;
use super::temporal;

/// The deepest nesting of lists, structs and dictionaries a column may have to be served as
/// JSON.
pub const MAX_JSON_DEPTH: usize = 64;

/// The extension metadata keys of the `arrow.fixed_shape_tensor` type.
const EXTENSION_NAME: &str = "ARROW:extension:name";
const EXTENSION_METADATA: &str = "ARROW:extension:metadata";
const FIXED_SHAPE_TENSOR: &str = "arrow.fixed_shape_tensor";

/// An element as JSON: a value as it is, a row as an object of its columns, a batch of rows as
/// an array of objects (see the module docs for each type's form).
///
/// `FAILED_PRECONDITION` for a column without a JSON form, naming it.
pub fn to_json(element: &Element) -> Result<Value, Problem> {
    match element {
        Element::Value(v) => Ok(v.clone()),
        Element::Row(row) => {
            let (batch, i) = locate(row)?;
            check_fields(batch.schema_ref().fields())?;
            row_object(batch, i)
        }
        Element::Rows(rows) => {
            let mut checked = None;
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                let (batch, i) = locate(row)?;
                let schema = batch.schema_ref();
                if !checked.is_some_and(|c| std::sync::Arc::ptr_eq(c, schema)) {
                    check_fields(schema.fields())?;
                    checked = Some(schema);
                }
                out.push(row_object(batch, i)?);
            }
            Ok(Value::Array(out))
        }
    }
}

fn row_object(batch: &RecordBatch, i: usize) -> Result<Value, Problem> {
    let fields = batch.schema_ref().fields();
    let mut object = Map::with_capacity(fields.len());
    for (field, array) in fields.iter().zip(batch.columns()) {
        if object.insert(field.name().clone(), value(field, array.as_ref(), i)?).is_some() {
            return Err(twice(field.name(), None));
        }
    }
    Ok(Value::Object(object))
}

/// Refuses a schema with a column that has no JSON form, whatever its values (two columns of
/// one name are refused as the object is built).
fn check_fields(fields: &Fields) -> Result<(), Problem> {
    for f in fields {
        check_type(f, f.data_type(), 0)?;
    }
    Ok(())
}

/// What an object that would hold two values under `name` answers; `within`: the struct
/// column whose fields they are.
fn twice(name: &str, within: Option<&Field>) -> Problem {
    let detail = match within {
        None => format!("{} appears twice; one JSON object cannot hold both", column(name)),
        Some(parent) => format!(
            "{} has two fields named {}; one JSON object cannot hold both",
            column(parent.name()),
            shardwise_core::echo::echo(name)
        ),
    };
    Problem::new(Code::FailedPrecondition, format!("{detail}: read it as Arrow"))
}

/// Refuses `ty` (within the column `top`) unless it has a JSON form, at most [`MAX_JSON_DEPTH`]
/// levels down.
fn check_type(top: &Field, ty: &DataType, depth: usize) -> Result<(), Problem> {
    if depth > MAX_JSON_DEPTH {
        return Err(Problem::new(
            Code::FailedPrecondition,
            format!(
                "{} is nested more than {MAX_JSON_DEPTH} levels deep for JSON; read it as Arrow",
                column(top.name())
            ),
        ));
    }
    match ty {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            check_type(top, f.data_type(), depth + 1)
        }
        DataType::Struct(fields) => {
            fields.iter().try_for_each(|f| check_type(top, f.data_type(), depth + 1))
        }
        DataType::Dictionary(_, values) => check_type(top, values, depth + 1),
        t if scalar(t) => Ok(()),
        t => {
            let detail = if t == top.data_type() {
                format!("{} of type {t} has no JSON form; read it as Arrow", column(top.name()))
            } else {
                format!(
                    "{} of type {} holds {t} values, which have no JSON form; read it as Arrow",
                    column(top.name()),
                    top.data_type()
                )
            };
            Err(Problem::new(Code::FailedPrecondition, detail))
        }
    }
}

/// The types that are one JSON scalar.
fn scalar(ty: &DataType) -> bool {
    use DataType as T;
    matches!(
        ty,
        T::Null
            | T::Boolean
            | T::Int8
            | T::Int16
            | T::Int32
            | T::Int64
            | T::UInt8
            | T::UInt16
            | T::UInt32
            | T::UInt64
            | T::Float16
            | T::Float32
            | T::Float64
            | T::Utf8
            | T::LargeUtf8
            | T::Utf8View
            | T::Binary
            | T::LargeBinary
            | T::BinaryView
            | T::FixedSizeBinary(_)
            | T::Date32
            | T::Date64
            | T::Timestamp(..)
            | T::Time32(TimeUnit::Second | TimeUnit::Millisecond)
            | T::Time64(TimeUnit::Microsecond | TimeUnit::Nanosecond)
            | T::Decimal32(..)
            | T::Decimal64(..)
            | T::Decimal128(..)
            | T::Decimal256(..)
    )
}

fn mismatch(array: &dyn Array) -> Problem {
    Problem::new(Code::Internal, format!("an array of type {} is not one", array.data_type()))
}

fn primitive<T: ArrowPrimitiveType>(array: &dyn Array) -> Result<&PrimitiveArray<T>, Problem> {
    array.as_primitive_opt::<T>().ok_or_else(|| mismatch(array))
}

/// A float as JSON: a number, or the name of a value JSON lacks.
fn float64(x: f64) -> Value {
    match Number::from_f64(x) {
        Some(n) => Value::Number(n),
        None if x.is_nan() => Value::from("NaN"),
        None if x > 0.0 => Value::from("Infinity"),
        None => Value::from("-Infinity"),
    }
}

/// A float32 as JSON: the shortest decimal that reads back to `x` as a float32 (which its
/// `Display` is), not the longer one of `x` widened (`0.1f32` widened is 0.10000000149011612).
fn float32(x: f32) -> Value {
    let wide = f64::from(x);
    if !wide.is_finite() {
        return float64(wide);
    }
    float64(x.to_string().parse::<f64>().unwrap_or(wide))
}

/// Row `i` of `array` (a column or a child array) as JSON; `field` is the array's field, for
/// its extension metadata.
fn value(field: &Field, array: &dyn Array, i: usize) -> Result<Value, Problem> {
    use DataType as T;
    if i >= array.len() {
        return Err(Problem::new(
            Code::Internal,
            format!("value {i} of an array of {} values", array.len()),
        ));
    }
    if array.is_null(i) {
        return Ok(Value::Null);
    }
    let v = match array.data_type() {
        T::Null => Value::Null,
        T::Boolean => Value::Bool(array.as_boolean_opt().ok_or_else(|| mismatch(array))?.value(i)),
        T::Int8 => Value::from(primitive::<Int8Type>(array)?.value(i)),
        T::Int16 => Value::from(primitive::<Int16Type>(array)?.value(i)),
        T::Int32 => Value::from(primitive::<Int32Type>(array)?.value(i)),
        T::Int64 => Value::from(primitive::<Int64Type>(array)?.value(i)),
        T::UInt8 => Value::from(primitive::<UInt8Type>(array)?.value(i)),
        T::UInt16 => Value::from(primitive::<UInt16Type>(array)?.value(i)),
        T::UInt32 => Value::from(primitive::<UInt32Type>(array)?.value(i)),
        T::UInt64 => Value::from(primitive::<UInt64Type>(array)?.value(i)),
        T::Float16 => float32(primitive::<Float16Type>(array)?.value(i).to_f32()),
        T::Float32 => float32(primitive::<Float32Type>(array)?.value(i)),
        T::Float64 => float64(primitive::<Float64Type>(array)?.value(i)),
        T::Utf8 => {
            Value::from(array.as_string_opt::<i32>().ok_or_else(|| mismatch(array))?.value(i))
        }
        T::LargeUtf8 => {
            Value::from(array.as_string_opt::<i64>().ok_or_else(|| mismatch(array))?.value(i))
        }
        T::Utf8View => {
            Value::from(array.as_string_view_opt().ok_or_else(|| mismatch(array))?.value(i))
        }
        T::Binary => bytes(array.as_binary_opt::<i32>().ok_or_else(|| mismatch(array))?.value(i)),
        T::LargeBinary => {
            bytes(array.as_binary_opt::<i64>().ok_or_else(|| mismatch(array))?.value(i))
        }
        T::BinaryView => bytes(array.as_binary_view_opt().ok_or_else(|| mismatch(array))?.value(i)),
        T::FixedSizeBinary(_) => {
            bytes(array.as_fixed_size_binary_opt().ok_or_else(|| mismatch(array))?.value(i))
        }
        T::Date32 => {
            Value::from(temporal::date(i64::from(primitive::<Date32Type>(array)?.value(i))))
        }
        T::Date64 => Value::from(temporal::date64(primitive::<Date64Type>(array)?.value(i))),
        T::Timestamp(unit, tz) => {
            let v = match unit {
                TimeUnit::Second => primitive::<TimestampSecondType>(array)?.value(i),
                TimeUnit::Millisecond => primitive::<TimestampMillisecondType>(array)?.value(i),
                TimeUnit::Microsecond => primitive::<TimestampMicrosecondType>(array)?.value(i),
                TimeUnit::Nanosecond => primitive::<TimestampNanosecondType>(array)?.value(i),
            };
            Value::from(temporal::timestamp(v, *unit, tz.is_some()))
        }
        T::Time32(unit @ TimeUnit::Second) => Value::from(temporal::time(
            i64::from(primitive::<Time32SecondType>(array)?.value(i)),
            *unit,
        )),
        T::Time32(unit @ TimeUnit::Millisecond) => Value::from(temporal::time(
            i64::from(primitive::<Time32MillisecondType>(array)?.value(i)),
            *unit,
        )),
        T::Time64(unit @ TimeUnit::Microsecond) => {
            Value::from(temporal::time(primitive::<Time64MicrosecondType>(array)?.value(i), *unit))
        }
        T::Time64(unit @ TimeUnit::Nanosecond) => {
            Value::from(temporal::time(primitive::<Time64NanosecondType>(array)?.value(i), *unit))
        }
        T::Decimal32(..) => Value::from(primitive::<Decimal32Type>(array)?.value_as_string(i)),
        T::Decimal64(..) => Value::from(primitive::<Decimal64Type>(array)?.value_as_string(i)),
        T::Decimal128(..) => Value::from(primitive::<Decimal128Type>(array)?.value_as_string(i)),
        T::Decimal256(..) => Value::from(primitive::<Decimal256Type>(array)?.value_as_string(i)),
        T::List(child) => list::<i32>(child, array, i)?,
        T::LargeList(child) => list::<i64>(child, array, i)?,
        T::FixedSizeList(child, _) => {
            let list = array.as_fixed_size_list_opt().ok_or_else(|| mismatch(array))?;
            let size = usize::try_from(list.value_length()).unwrap_or(0);
            let start = list.value_offset_at(i);
            let values = (start..start.saturating_add(size))
                .map(|j| value(child, list.values().as_ref(), j))
                .collect::<Result<Vec<_>, _>>()?;
            match tensor_shape(field, size) {
                Some(shape) => nest(&mut values.into_iter(), &shape),
                None => Value::Array(values),
            }
        }
        T::Struct(fields) => {
            let s = array.as_struct_opt().ok_or_else(|| mismatch(array))?;
            let mut object = Map::with_capacity(fields.len());
            for (f, child) in fields.iter().zip(s.columns()) {
                if object.insert(f.name().clone(), value(f, child.as_ref(), i)?).is_some() {
                    return Err(twice(f.name(), Some(field)));
                }
            }
            Value::Object(object)
        }
        T::Dictionary(..) => {
            let d = array.as_any_dictionary_opt().ok_or_else(|| mismatch(array))?;
            let key = key_at(d.keys(), i).ok_or_else(|| mismatch(array))?;
            value(field, d.values().as_ref(), key)?
        }
        t => {
            return Err(Problem::new(
                Code::FailedPrecondition,
                format!("{} of type {t} has no JSON form; read it as Arrow", column(field.name())),
            ));
        }
    };
    Ok(v)
}

fn bytes(b: &[u8]) -> Value {
    Value::String(STANDARD.encode(b))
}

/// The values of list `i` of a (large) list array.
fn list<O: OffsetSizeTrait>(child: &Field, array: &dyn Array, i: usize) -> Result<Value, Problem> {
    let list = array.as_list_opt::<O>().ok_or_else(|| mismatch(array))?;
    let offsets = list.value_offsets();
    let (Some(start), Some(end)) = (offsets.get(i), offsets.get(i + 1)) else {
        return Err(mismatch(array));
    };
    (start.as_usize()..end.as_usize())
        .map(|j| value(child, list.values().as_ref(), j))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// A dictionary key as an index into its values.
fn key_at(keys: &dyn Array, i: usize) -> Option<usize> {
    use DataType as T;
    let k: i128 = match keys.data_type() {
        T::Int8 => keys.as_primitive_opt::<Int8Type>()?.value(i).into(),
        T::Int16 => keys.as_primitive_opt::<Int16Type>()?.value(i).into(),
        T::Int32 => keys.as_primitive_opt::<Int32Type>()?.value(i).into(),
        T::Int64 => keys.as_primitive_opt::<Int64Type>()?.value(i).into(),
        T::UInt8 => keys.as_primitive_opt::<UInt8Type>()?.value(i).into(),
        T::UInt16 => keys.as_primitive_opt::<UInt16Type>()?.value(i).into(),
        T::UInt32 => keys.as_primitive_opt::<UInt32Type>()?.value(i).into(),
        T::UInt64 => keys.as_primitive_opt::<UInt64Type>()?.value(i).into(),
        _ => return None,
    };
    usize::try_from(k).ok()
}

/// The shape of a fixed-shape tensor column of `size` values per row: its extension metadata's
/// `shape` when the field is of that extension type and the shape holds `size` values.
fn tensor_shape(field: &Field, size: usize) -> Option<Vec<usize>> {
    let metadata = field.metadata();
    if metadata.get(EXTENSION_NAME).map(String::as_str) != Some(FIXED_SHAPE_TENSOR) {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Params {
        shape: Vec<usize>,
    }
    let params: Params = serde_json::from_str(metadata.get(EXTENSION_METADATA)?).ok()?;
    let values = params.shape.iter().try_fold(1usize, |n, d| n.checked_mul(*d))?;
    // No dimension of 0: nesting is then bounded by the values (times the dimensions).
    let fits = values == size
        && !params.shape.is_empty()
        && params.shape.len() <= MAX_JSON_DEPTH
        && !params.shape.contains(&0);
    fits.then_some(params.shape)
}

/// Row-major nesting of `values` into `shape` (whose product is their count).
fn nest(values: &mut impl Iterator<Item = Value>, shape: &[usize]) -> Value {
    match shape {
        [] => values.next().unwrap_or(Value::Null),
        [n] => Value::Array(values.take(*n).collect()),
        [n, rest @ ..] => Value::Array((0..*n).map(|_| nest(values, rest)).collect()),
    }
}

#[cfg(test)]
mod tests;
