//! Rows as JSON objects, for clients that read JSON.
//!
//! A row is an object of its columns, in the schema's order; a `batch` element an array of such
//! objects. Each value is read where it lies in its chunk's arrays (no batch is sliced or
//! copied per row) and written straight into the reply ([`JsonOut`]), whose byte budget is
//! checked before every write: what a row takes as JSON is what is counted, never a tree of
//! values built first (a dictionary of one 256 KiB string referenced by every row is 256 KiB
//! per row here, however little the chunk holds). The forms are those a JSON reader expects:
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

use std::collections::HashSet;

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
use serde_json::{Number, Value};
use shardwise_core::dataset::{Element, column};
use shardwise_http::{Code, Problem};

use super::temporal;
use super::{Unwritten, locate};

/// The deepest nesting of lists, structs and dictionaries a column may have to be served as
/// JSON.
pub const MAX_JSON_DEPTH: usize = 64;

/// The extension metadata keys of the `arrow.fixed_shape_tensor` type.
const EXTENSION_NAME: &str = "ARROW:extension:name";
const EXTENSION_METADATA: &str = "ARROW:extension:metadata";
const FIXED_SHAPE_TENSOR: &str = "arrow.fixed_shape_tensor";

/// JSON text written into a buffer that never grows past `limit` bytes: a write that would
/// is refused ([`Unwritten::Over`]) before it allocates.
#[derive(Debug)]
pub struct JsonOut {
    buf: Vec<u8>,
    limit: usize,
    /// A write through `io::Write` was refused for the limit.
    over: bool,
}

impl JsonOut {
    /// An empty buffer of at most `limit` bytes.
    pub fn new(limit: usize) -> JsonOut {
        JsonOut { buf: Vec::new(), limit, over: false }
    }

    /// The bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Drops what was written after the first `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }

    /// The text written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// Writes `bytes` as they are (JSON punctuation, or text known to be JSON).
    pub fn raw(&mut self, bytes: &[u8]) -> Result<(), Unwritten> {
        self.room(bytes.len())?;
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    /// Writes `v` (serialized by serde_json).
    pub fn serialize<T: serde::Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Unwritten> {
        self.over = false;
        serde_json::to_writer(&mut *self, v).map_err(|e| {
            if std::mem::take(&mut self.over) {
                Unwritten::Over
            } else {
                Unwritten::Refused(Problem::new(Code::Internal, format!("writing JSON: {e}")))
            }
        })
    }

    /// Writes one element (see the module docs for each type's form). On failure the buffer
    /// is as it was: `Over` if it would not fit, the problem if it has no JSON form.
    pub fn element(&mut self, element: &Element) -> Result<(), Unwritten> {
        let mark = self.buf.len();
        let written = write_element(self, element);
        if written.is_err() {
            self.buf.truncate(mark);
        }
        written
    }

    fn room(&self, n: usize) -> Result<(), Unwritten> {
        match self.buf.len().checked_add(n) {
            Some(end) if end <= self.limit => Ok(()),
            _ => Err(Unwritten::Over),
        }
    }

    fn string(&mut self, s: &str) -> Result<(), Unwritten> {
        // Escaping only lengthens a string: one that cannot fit is refused before any of it is
        // written.
        self.room(s.len().saturating_add(2))?;
        self.serialize(s)
    }
}

impl std::io::Write for JsonOut {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.room(bytes.len()).is_err() {
            self.over = true;
            return Err(std::io::Error::other("past the reply's byte budget"));
        }
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An element as a JSON value: a value as it is, a row as an object of its columns, a batch of
/// rows as an array of objects (see the module docs for each type's form).
///
/// `FAILED_PRECONDITION` for a column without a JSON form, naming it.
pub fn to_json(element: &Element) -> Result<Value, Problem> {
    let mut out = JsonOut::new(usize::MAX);
    out.element(element).map_err(|e| match e {
        Unwritten::Refused(p) => p,
        Unwritten::Over => Problem::new(Code::Internal, "JSON past an unbounded buffer"),
    })?;
    serde_json::from_slice(&out.into_bytes())
        .map_err(|e| Problem::new(Code::Internal, format!("reading written JSON back: {e}")))
}

fn write_element(out: &mut JsonOut, element: &Element) -> Result<(), Unwritten> {
    match element {
        Element::Value(v) => out.serialize(v),
        Element::Row(row) => {
            let (batch, i) = locate(row)?;
            check_fields(batch.schema_ref().fields())?;
            row_object(out, batch, i)
        }
        Element::Rows(rows) => {
            let mut checked = None;
            out.raw(b"[")?;
            for (k, row) in rows.iter().enumerate() {
                let (batch, i) = locate(row)?;
                let schema = batch.schema_ref();
                if !checked.is_some_and(|c| std::sync::Arc::ptr_eq(c, schema)) {
                    check_fields(schema.fields())?;
                    checked = Some(schema);
                }
                if k > 0 {
                    out.raw(b",")?;
                }
                row_object(out, batch, i)?;
            }
            out.raw(b"]")
        }
    }
}

fn row_object(out: &mut JsonOut, batch: &RecordBatch, i: usize) -> Result<(), Unwritten> {
    out.raw(b"{")?;
    for (k, (field, array)) in batch.schema_ref().fields().iter().zip(batch.columns()).enumerate() {
        if k > 0 {
            out.raw(b",")?;
        }
        out.string(field.name())?;
        out.raw(b":")?;
        value(out, field, array.as_ref(), i)?;
    }
    out.raw(b"}")
}

/// Refuses a schema with a column that has no JSON form, whatever its values, or with two
/// columns (or two fields of a struct) of one name, which one object cannot hold.
fn check_fields(fields: &Fields) -> Result<(), Problem> {
    distinct(fields, None)?;
    for f in fields {
        check_type(f, f.data_type(), 0)?;
    }
    Ok(())
}

/// Refuses `fields` (of the struct column `within`, or the columns) if two share a name.
fn distinct(fields: &Fields, within: Option<&Field>) -> Result<(), Problem> {
    let mut seen = HashSet::with_capacity(fields.len());
    match fields.iter().find(|f| !seen.insert(f.name().as_str())) {
        Some(f) => Err(twice(f.name(), within)),
        None => Ok(()),
    }
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
            distinct(fields, Some(top))?;
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

fn mismatch(array: &dyn Array) -> Unwritten {
    Unwritten::Refused(Problem::new(
        Code::Internal,
        format!("an array of type {} is not one", array.data_type()),
    ))
}

fn primitive<T: ArrowPrimitiveType>(array: &dyn Array) -> Result<&PrimitiveArray<T>, Unwritten> {
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

/// Writes row `i` of `array` (a column or a child array) as JSON; `field` is the array's
/// field, for its extension metadata.
fn value(out: &mut JsonOut, field: &Field, array: &dyn Array, i: usize) -> Result<(), Unwritten> {
    use DataType as T;
    if i >= array.len() {
        return Err(Unwritten::Refused(Problem::new(
            Code::Internal,
            format!("value {i} of an array of {} values", array.len()),
        )));
    }
    if array.is_null(i) {
        return out.raw(b"null");
    }
    match array.data_type() {
        T::Null => out.raw(b"null"),
        T::Boolean => {
            let b = array.as_boolean_opt().ok_or_else(|| mismatch(array))?.value(i);
            out.raw(if b { b"true" } else { b"false" })
        }
        T::Int8 => out.serialize(&primitive::<Int8Type>(array)?.value(i)),
        T::Int16 => out.serialize(&primitive::<Int16Type>(array)?.value(i)),
        T::Int32 => out.serialize(&primitive::<Int32Type>(array)?.value(i)),
        T::Int64 => out.serialize(&primitive::<Int64Type>(array)?.value(i)),
        T::UInt8 => out.serialize(&primitive::<UInt8Type>(array)?.value(i)),
        T::UInt16 => out.serialize(&primitive::<UInt16Type>(array)?.value(i)),
        T::UInt32 => out.serialize(&primitive::<UInt32Type>(array)?.value(i)),
        T::UInt64 => out.serialize(&primitive::<UInt64Type>(array)?.value(i)),
        T::Float16 => out.serialize(&float32(primitive::<Float16Type>(array)?.value(i).to_f32())),
        T::Float32 => out.serialize(&float32(primitive::<Float32Type>(array)?.value(i))),
        T::Float64 => out.serialize(&float64(primitive::<Float64Type>(array)?.value(i))),
        T::Utf8 => {
            out.string(array.as_string_opt::<i32>().ok_or_else(|| mismatch(array))?.value(i))
        }
        T::LargeUtf8 => {
            out.string(array.as_string_opt::<i64>().ok_or_else(|| mismatch(array))?.value(i))
        }
        T::Utf8View => {
            out.string(array.as_string_view_opt().ok_or_else(|| mismatch(array))?.value(i))
        }
        T::Binary => {
            bytes(out, array.as_binary_opt::<i32>().ok_or_else(|| mismatch(array))?.value(i))
        }
        T::LargeBinary => {
            bytes(out, array.as_binary_opt::<i64>().ok_or_else(|| mismatch(array))?.value(i))
        }
        T::BinaryView => {
            bytes(out, array.as_binary_view_opt().ok_or_else(|| mismatch(array))?.value(i))
        }
        T::FixedSizeBinary(_) => {
            bytes(out, array.as_fixed_size_binary_opt().ok_or_else(|| mismatch(array))?.value(i))
        }
        T::Date32 => {
            out.string(&temporal::date(i64::from(primitive::<Date32Type>(array)?.value(i))))
        }
        T::Date64 => out.string(&temporal::date64(primitive::<Date64Type>(array)?.value(i))),
        T::Timestamp(unit, tz) => {
            let v = match unit {
                TimeUnit::Second => primitive::<TimestampSecondType>(array)?.value(i),
                TimeUnit::Millisecond => primitive::<TimestampMillisecondType>(array)?.value(i),
                TimeUnit::Microsecond => primitive::<TimestampMicrosecondType>(array)?.value(i),
                TimeUnit::Nanosecond => primitive::<TimestampNanosecondType>(array)?.value(i),
            };
            out.string(&temporal::timestamp(v, *unit, tz.is_some()))
        }
        T::Time32(unit @ TimeUnit::Second) => out.string(&temporal::time(
            i64::from(primitive::<Time32SecondType>(array)?.value(i)),
            *unit,
        )),
        T::Time32(unit @ TimeUnit::Millisecond) => out.string(&temporal::time(
            i64::from(primitive::<Time32MillisecondType>(array)?.value(i)),
            *unit,
        )),
        T::Time64(unit @ TimeUnit::Microsecond) => {
            out.string(&temporal::time(primitive::<Time64MicrosecondType>(array)?.value(i), *unit))
        }
        T::Time64(unit @ TimeUnit::Nanosecond) => {
            out.string(&temporal::time(primitive::<Time64NanosecondType>(array)?.value(i), *unit))
        }
        T::Decimal32(..) => out.string(&primitive::<Decimal32Type>(array)?.value_as_string(i)),
        T::Decimal64(..) => out.string(&primitive::<Decimal64Type>(array)?.value_as_string(i)),
        T::Decimal128(..) => out.string(&primitive::<Decimal128Type>(array)?.value_as_string(i)),
        T::Decimal256(..) => out.string(&primitive::<Decimal256Type>(array)?.value_as_string(i)),
        T::List(child) => list::<i32>(out, child, array, i),
        T::LargeList(child) => list::<i64>(out, child, array, i),
        T::FixedSizeList(child, _) => {
            let list = array.as_fixed_size_list_opt().ok_or_else(|| mismatch(array))?;
            let size = usize::try_from(list.value_length()).unwrap_or(0);
            let start = list.value_offset_at(i);
            let shape = tensor_shape(field, size).unwrap_or_else(|| vec![size]);
            nested(out, child, list.values().as_ref(), start, &shape)
        }
        T::Struct(fields) => {
            let s = array.as_struct_opt().ok_or_else(|| mismatch(array))?;
            out.raw(b"{")?;
            for (k, (f, child)) in fields.iter().zip(s.columns()).enumerate() {
                if k > 0 {
                    out.raw(b",")?;
                }
                out.string(f.name())?;
                out.raw(b":")?;
                value(out, f, child.as_ref(), i)?;
            }
            out.raw(b"}")
        }
        T::Dictionary(..) => {
            let d = array.as_any_dictionary_opt().ok_or_else(|| mismatch(array))?;
            let key = key_at(d.keys(), i).ok_or_else(|| mismatch(array))?;
            value(out, field, d.values().as_ref(), key)
        }
        t => Err(Unwritten::Refused(Problem::new(
            Code::FailedPrecondition,
            format!("{} of type {t} has no JSON form; read it as Arrow", column(field.name())),
        ))),
    }
}

/// Bytes as a base64 string, encoded straight into the reply (its length checked first).
fn bytes(out: &mut JsonOut, b: &[u8]) -> Result<(), Unwritten> {
    let len = base64::encoded_len(b.len(), true).ok_or(Unwritten::Over)?;
    out.room(len.saturating_add(2))?;
    out.buf.push(b'"');
    let at = out.buf.len();
    out.buf.resize(at + len, 0);
    let written = STANDARD.encode_slice(b, out.buf.get_mut(at..).unwrap_or_default());
    if written.ok() != Some(len) {
        return Err(Unwritten::Refused(Problem::new(Code::Internal, "base64 of another length")));
    }
    out.buf.push(b'"');
    Ok(())
}

/// Writes the values of list `i` of a (large) list array.
fn list<O: OffsetSizeTrait>(
    out: &mut JsonOut,
    child: &Field,
    array: &dyn Array,
    i: usize,
) -> Result<(), Unwritten> {
    let list = array.as_list_opt::<O>().ok_or_else(|| mismatch(array))?;
    let offsets = list.value_offsets();
    let (Some(start), Some(end)) = (offsets.get(i), offsets.get(i + 1)) else {
        return Err(mismatch(array));
    };
    out.raw(b"[")?;
    for (k, j) in (start.as_usize()..end.as_usize()).enumerate() {
        if k > 0 {
            out.raw(b",")?;
        }
        value(out, child, list.values().as_ref(), j)?;
    }
    out.raw(b"]")
}

/// Writes the values of `values` from `start`, row-major, nested into `shape` (whose product
/// is their count; `[n]`: one flat array).
fn nested(
    out: &mut JsonOut,
    child: &Field,
    values: &dyn Array,
    start: usize,
    shape: &[usize],
) -> Result<(), Unwritten> {
    let Some((n, rest)) = shape.split_first() else {
        return value(out, child, values, start);
    };
    let stride = rest.iter().product::<usize>();
    out.raw(b"[")?;
    for k in 0..*n {
        if k > 0 {
            out.raw(b",")?;
        }
        let at = start.saturating_add(k.saturating_mul(stride));
        if rest.is_empty() {
            value(out, child, values, at)?;
        } else {
            nested(out, child, values, at, rest)?;
        }
    }
    out.raw(b"]")
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

#[cfg(test)]
mod tests;
