//! What a file's columns become: the projection, the declared tensors' checks and
//! conversions, and the output schema.
//!
//! A [`Plan`] is made once per file from its Arrow schema: which of the file's columns are
//! decoded (ascending, so that every format can decode them in file order) and what each
//! output column is made of. Type checks happen there, before any row is decoded; what only
//! the rows can tell (a list row with another number of values, a null) is checked on each
//! chunk by [`Plan::apply`].
//!
//! The output schema is *normalized*: no schema metadata (a Parquet file's `pandas` metadata
//! differs from file to file) and no field metadata at any depth (field ids), but for the
//! `arrow.fixed_shape_tensor` extension keys of declared shaped tensors. So two files of the
//! same layout give equal schemas, which is what lets a task serve several files as one
//! stream. Stripping nested metadata rebuilds the arrays around the same buffers.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::make_array;
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, GenericBinaryArray, GenericListArray, LargeListArray,
    ListArray, MapArray, OffsetSizeTrait, RecordBatch, RecordBatchOptions, StructArray,
};
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use shardwise_core::dataset::{DType, FilesDef, TensorDef, column};
use shardwise_http::{Code, Problem};

use crate::files::shown;

/// The extension type of declared shaped tensors (Arrow's canonical one).
pub(crate) const TENSOR_EXTENSION: &str = "arrow.fixed_shape_tensor";
/// The field metadata key naming an extension type.
pub(crate) const EXTENSION_NAME_KEY: &str = "ARROW:extension:name";
/// The field metadata key holding an extension type's parameters.
pub(crate) const EXTENSION_METADATA_KEY: &str = "ARROW:extension:metadata";

/// The most column names an error message lists.
const LISTED_COLUMNS: usize = 20;
/// How deep a type is spelled out in messages.
const DESCRIBED_DEPTH: usize = 4;

/// How a file's columns become the output's.
#[derive(Debug)]
pub(crate) struct Plan {
    path: String,
    schema: SchemaRef,
    /// The file's columns to decode, ascending.
    read: Vec<usize>,
    columns: Vec<Out>,
}

#[derive(Debug)]
struct Out {
    /// Its index in the decoded columns (an index into `Plan::read`).
    source: usize,
    conv: Conv,
}

#[derive(Debug)]
enum Conv {
    /// An undeclared column, with its metadata stripped.
    Pass(DataType),
    /// A declared scalar: checked for nulls.
    Scalar(TensorDef),
    /// A declared shaped tensor: a fixed-size list of `values` items.
    Shaped { tensor: TensorDef, values: i32, item: FieldRef },
}

impl Plan {
    /// The plan for a file of schema `file` read as `def` asks. `INVALID_ARGUMENT` for a
    /// missing column or a declared tensor the file's type contradicts.
    pub(crate) fn new(path: &str, file: &Schema, def: &FilesDef) -> Result<Plan, Problem> {
        let fields = file.fields();
        let index_of = |name: &str| fields.iter().position(|f| f.name() == name);
        let wanted: Vec<usize> = match &def.columns {
            Some(names) => names
                .iter()
                .map(|name| index_of(name).ok_or_else(|| no_column(path, name, file)))
                .collect::<Result<_, _>>()?,
            None => (0..fields.len()).collect(),
        };
        let mut read = wanted.clone();
        read.sort_unstable();
        read.dedup();
        let mut columns = Vec::with_capacity(wanted.len());
        let mut out_fields = Vec::with_capacity(wanted.len());
        for index in wanted {
            let field = fields.get(index).ok_or_else(|| internal("a column index"))?;
            let source = read.binary_search(&index).map_err(|_| internal("a decoded column"))?;
            let tensor = def.tensors.iter().find(|t| t.name == *field.name());
            let (conv, out) = match tensor {
                None => {
                    let t = strip(field.data_type());
                    // An extension type the file names (a tensor written by pyarrow, say)
                    // is what the column is: it is kept, the rest of the metadata is not.
                    let extension: HashMap<String, String> = field
                        .metadata()
                        .iter()
                        .filter(|(k, _)| *k == EXTENSION_NAME_KEY || *k == EXTENSION_METADATA_KEY)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    let out = Field::new(field.name(), t.clone(), field.is_nullable())
                        .with_metadata(extension);
                    (Conv::Pass(t), out)
                }
                Some(t) => declared(path, field, t)?,
            };
            columns.push(Out { source, conv });
            out_fields.push(out);
        }
        // A declared tensor not read is not checked; one read was checked above. One the file
        // lacks is an error only if it would be read.
        if def.columns.is_none()
            && let Some(t) = def.tensors.iter().find(|t| index_of(&t.name).is_none())
        {
            return Err(no_column(path, &t.name, file));
        }
        Ok(Plan { path: path.to_owned(), schema: Arc::new(Schema::new(out_fields)), read, columns })
    }

    /// The file's columns to decode, ascending: the decoded columns handed to
    /// [`Plan::apply`] are these, in this order.
    pub(crate) fn read(&self) -> &[usize] {
        &self.read
    }

    /// The output schema.
    pub(crate) fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The output chunk of `rows` decoded rows (`decoded`: the columns of [`Plan::read`]),
    /// the first of which is row `first_row` of the file.
    pub(crate) fn apply(
        &self,
        decoded: &[ArrayRef],
        rows: usize,
        first_row: u64,
    ) -> Result<RecordBatch, Problem> {
        let mut arrays = Vec::with_capacity(self.columns.len());
        for out in &self.columns {
            let array = decoded.get(out.source).ok_or_else(|| internal("a decoded column"))?;
            if array.len() != rows {
                return Err(internal("a decoded column of another length"));
            }
            let converted = match &out.conv {
                Conv::Pass(t) => retype(array, t).map_err(|e| {
                    super::corrupt(&self.path, format_args!("does not decode: {e}"))
                })?,
                Conv::Scalar(t) => {
                    if let Some(row) = first_null(array.as_ref()) {
                        let at = first_row.saturating_add(row);
                        return Err(self.row_error(t, format_args!("row {at} is null")));
                    }
                    array.clone()
                }
                Conv::Shaped { tensor, values, item } => {
                    self.shaped(array, tensor, *values, item, first_row)?
                }
            };
            arrays.push(converted);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(self.schema.clone(), arrays, &options)
            .map_err(|e| super::corrupt(&self.path, format_args!("does not decode: {e}")))
    }

    /// A shaped tensor column as a fixed-size list of `n` values a row, without nulls.
    fn shaped(
        &self,
        array: &ArrayRef,
        t: &TensorDef,
        n: i32,
        item: &FieldRef,
        first_row: u64,
    ) -> Result<ArrayRef, Problem> {
        let size = usize::try_from(n).map_err(|_| internal("a tensor size"))?;
        if let Some(row) = first_null(array.as_ref()) {
            let at = first_row.saturating_add(row);
            return Err(self.row_error(t, format_args!("row {at} is null")));
        }
        let rows = array.len();
        let values = match array.data_type() {
            DataType::FixedSizeList(..) => array
                .as_fixed_size_list_opt()
                .map(|a| a.values().clone())
                .ok_or_else(|| internal("a fixed-size list"))?,
            DataType::List(_) => {
                let list = array.as_list_opt::<i32>().ok_or_else(|| internal("a list"))?;
                self.list_values(list, t, size, first_row)?
            }
            DataType::LargeList(_) => {
                let list = array.as_list_opt::<i64>().ok_or_else(|| internal("a list"))?;
                self.list_values(list, t, size, first_row)?
            }
            DataType::FixedSizeBinary(_) => {
                let bytes = array
                    .as_fixed_size_binary_opt()
                    .ok_or_else(|| internal("a fixed-size binary"))?;
                // The values of a fixed-size binary array start at its first row.
                self.bytes_values(bytes.values(), 0, rows, size, item)?
            }
            DataType::Binary => {
                let bytes = array.as_binary_opt::<i32>().ok_or_else(|| internal("a binary"))?;
                self.binary_values(bytes, t, size, item, first_row)?
            }
            DataType::LargeBinary => {
                let bytes = array.as_binary_opt::<i64>().ok_or_else(|| internal("a binary"))?;
                self.binary_values(bytes, t, size, item, first_row)?
            }
            _ => return Err(internal("a tensor column of an unchecked type")),
        };
        if let Some(i) = first_null(values.as_ref()) {
            let at = first_row.saturating_add(i / u64::try_from(size).unwrap_or(1).max(1));
            return Err(self.row_error(t, format_args!("row {at} holds a null value")));
        }
        if values.len() != rows.saturating_mul(size) {
            return Err(internal("a fixed-size list of another length"));
        }
        FixedSizeListArray::try_new(item.clone(), n, values, None)
            .map(|a| Arc::new(a) as ArrayRef)
            .map_err(|e| super::corrupt(&self.path, format_args!("does not decode: {e}")))
    }

    /// The values of a list column whose every row holds `size` values, as one slice.
    fn list_values<O: OffsetSizeTrait>(
        &self,
        list: &GenericListArray<O>,
        t: &TensorDef,
        size: usize,
        first_row: u64,
    ) -> Result<ArrayRef, Problem> {
        if let Some((row, len)) = list.offsets().lengths().enumerate().find(|(_, l)| *l != size) {
            let at = first_row.saturating_add(u64::try_from(row).unwrap_or(u64::MAX));
            return Err(self.row_error(t, format_args!("row {at} has {len} values")));
        }
        let start = list.offsets().first().to_usize().ok_or_else(|| internal("a list offset"))?;
        let len = list.len().saturating_mul(size);
        if start.checked_add(len).is_none_or(|end| end > list.values().len()) {
            return Err(super::corrupt(&self.path, "has list offsets past its values"));
        }
        Ok(list.values().slice(start, len))
    }

    /// The values of a binary column whose every row holds the bytes of `size` values.
    fn binary_values<O: OffsetSizeTrait>(
        &self,
        bytes: &GenericBinaryArray<O>,
        t: &TensorDef,
        size: usize,
        item: &FieldRef,
        first_row: u64,
    ) -> Result<ArrayRef, Problem> {
        let width = item.data_type().primitive_width().ok_or_else(|| internal("a width"))?;
        let row_bytes = size.saturating_mul(width);
        let lengths = bytes.offsets().lengths();
        if let Some((row, len)) = lengths.enumerate().find(|(_, l)| *l != row_bytes) {
            let at = first_row.saturating_add(u64::try_from(row).unwrap_or(u64::MAX));
            return Err(
                self.row_error(t, format_args!("row {at} has {len} bytes, not {row_bytes}"))
            );
        }
        let start = bytes.offsets().first().as_usize();
        self.bytes_values(bytes.values(), start, bytes.len(), size, item)
    }

    /// `rows` rows of `size` values of `item`'s type, from byte `start` of `data`: a view of
    /// the same bytes (copied only when they are not aligned for the type).
    fn bytes_values(
        &self,
        data: &Buffer,
        start: usize,
        rows: usize,
        size: usize,
        item: &FieldRef,
    ) -> Result<ArrayRef, Problem> {
        let width = item.data_type().primitive_width().ok_or_else(|| internal("a width"))?;
        let values = rows.saturating_mul(size);
        let len = values.saturating_mul(width);
        if start.checked_add(len).is_none_or(|end| end > data.len()) {
            return Err(super::corrupt(&self.path, "has binary offsets past its bytes"));
        }
        ArrayData::builder(item.data_type().clone())
            .len(values)
            .add_buffer(data.slice_with_length(start, len))
            .align_buffers(true)
            .build()
            .map(make_array)
            .map_err(|e| super::corrupt(&self.path, format_args!("does not decode: {e}")))
    }

    fn row_error(&self, t: &TensorDef, what: std::fmt::Arguments<'_>) -> Problem {
        Problem::new(
            Code::InvalidArgument,
            format!(
                "file {} {}: the dataset declares {}, {what}",
                shown(&self.path),
                column(&t.name),
                declared_text(t)
            ),
        )
    }
}

/// The conversion and output field of a declared tensor column, if the file's type fits.
fn declared(path: &str, field: &Field, t: &TensorDef) -> Result<(Conv, Field), Problem> {
    let have = field.data_type();
    let mismatch = || {
        Problem::new(
            Code::InvalidArgument,
            format!(
                "file {} {}: the dataset declares {}, the file has {}",
                shown(path),
                column(&t.name),
                declared_text(t),
                describe(have, 0)
            ),
        )
    };
    if t.shape.is_empty() {
        if !scalar_fits(t.dtype, have) {
            return Err(mismatch());
        }
        let out = Field::new(field.name(), have.clone(), false);
        return Ok((Conv::Scalar(t.clone()), out));
    }
    let prim = primitive(t.dtype).ok_or_else(mismatch)?;
    let n = i32::try_from(t.num_values()).map_err(|_| mismatch())?;
    // Raw bytes hold a row's values little-endian, back to back (NumPy's `tobytes()`).
    let row_bytes = prim.primitive_width().and_then(|w| i32::try_from(w).ok()?.checked_mul(n));
    let fits = match have {
        DataType::FixedSizeList(f, size) => *f.data_type() == prim && *size == n,
        DataType::List(f) | DataType::LargeList(f) => *f.data_type() == prim,
        DataType::FixedSizeBinary(width) => row_bytes == Some(*width),
        DataType::Binary | DataType::LargeBinary => row_bytes.is_some(),
        _ => false,
    };
    if !fits {
        return Err(mismatch());
    }
    let item = Arc::new(Field::new_list_field(prim, true));
    let out = Field::new(field.name(), DataType::FixedSizeList(item.clone(), n), false)
        .with_metadata(tensor_metadata(&t.shape));
    Ok((Conv::Shaped { tensor: t.clone(), values: n, item }, out))
}

/// The field metadata of a shaped tensor: the canonical extension type and its shape.
pub(crate) fn tensor_metadata(shape: &[u64]) -> HashMap<String, String> {
    let shape = serde_json::json!({ "shape": shape }).to_string();
    HashMap::from([
        (EXTENSION_NAME_KEY.to_owned(), TENSOR_EXTENSION.to_owned()),
        (EXTENSION_METADATA_KEY.to_owned(), shape),
    ])
}

/// The Arrow type of a fixed-width dtype.
pub(crate) fn primitive(dtype: DType) -> Option<DataType> {
    Some(match dtype {
        DType::Bool => DataType::Boolean,
        DType::Int8 => DataType::Int8,
        DType::Int16 => DataType::Int16,
        DType::Int32 => DataType::Int32,
        DType::Int64 => DataType::Int64,
        DType::UInt8 => DataType::UInt8,
        DType::UInt16 => DataType::UInt16,
        DType::UInt32 => DataType::UInt32,
        DType::UInt64 => DataType::UInt64,
        DType::Float16 => DataType::Float16,
        DType::Float32 => DataType::Float32,
        DType::Float64 => DataType::Float64,
        DType::String | DType::Binary => return None,
    })
}

/// Whether a column of type `have` holds scalars of `dtype`.
fn scalar_fits(dtype: DType, have: &DataType) -> bool {
    match dtype {
        DType::String => {
            matches!(have, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
        }
        DType::Binary => matches!(
            have,
            DataType::Binary
                | DataType::LargeBinary
                | DataType::BinaryView
                | DataType::FixedSizeBinary(_)
        ),
        fixed => primitive(fixed).is_some_and(|p| p == *have),
    }
}

/// A declared tensor for messages: `float32 [224, 224, 3] (150528 values)`, `int64 (a
/// scalar)`.
pub(crate) fn declared_text(t: &TensorDef) -> String {
    if t.shape.is_empty() {
        return format!("{} (a scalar)", t.dtype.as_str());
    }
    let dims: Vec<String> = t.shape.iter().map(u64::to_string).collect();
    let n = t.num_values();
    let values = if n == 1 { "value" } else { "values" };
    format!("{} [{}] ({n} {values})", t.dtype.as_str(), dims.join(", "))
}

/// An Arrow type for messages, with the dtype names where there are some: `list<int64>`.
pub(crate) fn describe(t: &DataType, depth: usize) -> String {
    let inner = |f: &FieldRef| {
        if depth >= DESCRIBED_DEPTH { "…".to_owned() } else { describe(f.data_type(), depth + 1) }
    };
    let dtype = DType::ALL.iter().find(|d| primitive(**d).is_some_and(|p| p == *t));
    if let Some(d) = dtype {
        return d.as_str().to_owned();
    }
    match t {
        DataType::Utf8 => "string".to_owned(),
        DataType::LargeUtf8 => "large_string".to_owned(),
        DataType::Utf8View => "string_view".to_owned(),
        DataType::Binary => "binary".to_owned(),
        DataType::LargeBinary => "large_binary".to_owned(),
        DataType::BinaryView => "binary_view".to_owned(),
        DataType::FixedSizeBinary(n) => format!("fixed_size_binary[{n}]"),
        DataType::List(f) => format!("list<{}>", inner(f)),
        DataType::LargeList(f) => format!("large_list<{}>", inner(f)),
        DataType::FixedSizeList(f, n) => format!("fixed_size_list<{}>[{n}]", inner(f)),
        DataType::Struct(_) => "struct".to_owned(),
        DataType::Map(..) => "map".to_owned(),
        other => {
            let mut text = String::new();
            let _ = write!(text, "{other}");
            cut(text, 100)
        }
    }
}

/// `INVALID_ARGUMENT`: the file lacks a column (the message lists a bounded number of its
/// columns).
pub(crate) fn no_column(path: &str, name: &str, file: &Schema) -> Problem {
    let fields = file.fields();
    let mut listed: Vec<String> =
        fields.iter().take(LISTED_COLUMNS).map(|f| quoted(f.name())).collect();
    if fields.len() > LISTED_COLUMNS {
        listed.push(format!("… {} columns in all", fields.len()));
    }
    let has = if listed.is_empty() {
        "it has no columns".to_owned()
    } else {
        format!("it has {}", listed.join(", "))
    };
    Problem::new(
        Code::InvalidArgument,
        format!("file {} has no {} ({has})", shown(path), column(name)),
    )
}

pub(crate) fn quoted(name: &str) -> String {
    serde_json::Value::String(cut(name.to_owned(), 100)).to_string()
}

fn cut(mut text: String, max_chars: usize) -> String {
    if let Some((at, _)) = text.char_indices().nth(max_chars) {
        text.truncate(at);
        text.push('…');
    }
    text
}

/// The row (in the array) of its first null, if any.
fn first_null(array: &dyn Array) -> Option<u64> {
    let nulls = array.logical_nulls()?;
    if nulls.null_count() == 0 {
        return None;
    }
    nulls.iter().position(|valid| !valid).and_then(|i| u64::try_from(i).ok())
}

/// `t` without field metadata at any depth (of the nested types [`retype`] rebuilds).
pub(crate) fn strip(t: &DataType) -> DataType {
    match t {
        DataType::List(f) => DataType::List(strip_field(f)),
        DataType::LargeList(f) => DataType::LargeList(strip_field(f)),
        DataType::FixedSizeList(f, n) => DataType::FixedSizeList(strip_field(f), *n),
        DataType::Struct(fields) => {
            DataType::Struct(fields.iter().map(strip_field).collect::<Fields>())
        }
        DataType::Map(f, sorted) => DataType::Map(strip_field(f), *sorted),
        other => other.clone(),
    }
}

fn strip_field(f: &FieldRef) -> FieldRef {
    let t = strip(f.data_type());
    Arc::new(f.as_ref().clone().with_metadata(HashMap::new()).with_data_type(t))
}

/// `array` as type `to`, which differs from its own at most by nested field metadata (see
/// [`strip`]): the same buffers under other fields.
pub(crate) fn retype(array: &ArrayRef, to: &DataType) -> Result<ArrayRef, ArrowError> {
    if array.data_type() == to {
        return Ok(array.clone());
    }
    let wrong = || ArrowError::SchemaError(format!("cannot read {} as {to}", array.data_type()));
    Ok(match to {
        DataType::List(f) => {
            let a = array.as_list_opt::<i32>().ok_or_else(wrong)?;
            let values = retype(a.values(), f.data_type())?;
            Arc::new(ListArray::try_new(
                f.clone(),
                a.offsets().clone(),
                values,
                a.nulls().cloned(),
            )?)
        }
        DataType::LargeList(f) => {
            let a = array.as_list_opt::<i64>().ok_or_else(wrong)?;
            let values = retype(a.values(), f.data_type())?;
            Arc::new(LargeListArray::try_new(
                f.clone(),
                a.offsets().clone(),
                values,
                a.nulls().cloned(),
            )?)
        }
        DataType::FixedSizeList(f, n) => {
            let a = array.as_fixed_size_list_opt().ok_or_else(wrong)?;
            let values = retype(a.values(), f.data_type())?;
            let nulls = a.nulls().cloned();
            Arc::new(FixedSizeListArray::try_new_with_length(
                f.clone(),
                *n,
                values,
                nulls,
                a.len(),
            )?)
        }
        DataType::Struct(fields) => {
            let a = array.as_struct_opt().ok_or_else(wrong)?;
            let columns = a
                .columns()
                .iter()
                .zip(fields.iter())
                .map(|(c, f)| retype(c, f.data_type()))
                .collect::<Result<Vec<_>, _>>()?;
            let nulls = a.nulls().cloned();
            Arc::new(StructArray::try_new_with_length(fields.clone(), columns, nulls, a.len())?)
        }
        DataType::Map(f, sorted) => {
            let a = array.as_map_opt().ok_or_else(wrong)?;
            let entries: ArrayRef = Arc::new(a.entries().clone());
            let entries = retype(&entries, f.data_type())?;
            let entries = entries.as_struct_opt().ok_or_else(wrong)?.clone();
            Arc::new(MapArray::try_new(
                f.clone(),
                a.offsets().clone(),
                entries,
                a.nulls().cloned(),
                *sorted,
            )?)
        }
        _ => return Err(wrong()),
    })
}

fn internal(what: &str) -> Problem {
    Problem::new(Code::Internal, format!("the columnar reader lost track of {what}"))
}
