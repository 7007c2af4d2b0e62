//! Columnar `files` sources (`parquet`, `arrow`, `tfrecord`): their options, and the rows a
//! pipeline moves without looking inside them.
//!
//! The core never decodes a columnar file. A pipeline asks its caller for the rows of a file
//! ([`Step::NeedRows`](super::Step::NeedRows) with a [`RowsRequest`]) and gets them back as
//! [`Chunk`]s: an opaque payload (the IO side puts an Arrow record batch there) with its row
//! count and its size in bytes. Rows then travel through `shuffle`, `take`, `skip` and the
//! shards as [`Row`]s (a chunk and an index), and `batch` gathers them into
//! [`Element::Rows`]. Whoever serves the elements turns rows back into record batches (or JSON
//! objects).
//!
//! **Positions.** A columnar file's rows are its output, like a `jsonl` file's records: a split
//! of whole files resumes part way by passing over its first rows. A Parquet source registered
//! with `"split": "rows"` has rows as its positions instead: the dispatcher reads the row count
//! of every file once (from the files' footers, when the dataset is registered) into
//! [`FilesDef::rows`], and DYNAMIC splits are ranges of `split_size` rows that may span files,
//! so a few large files are shared by many workers.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::error::{DatasetError, invalid, quoted};

/// The most columns a `columns` projection or `tensors` declaration may name.
pub const MAX_COLUMNS: usize = 10_000;
/// The longest column name (bytes).
pub const MAX_COLUMN_NAME_BYTES: usize = 1_024;
/// The most dimensions a declared tensor may have.
pub const MAX_TENSOR_DIMS: usize = 16;
/// The most values one declared tensor may hold (the product of its shape): what an Arrow
/// fixed-size list can hold.
pub const MAX_TENSOR_VALUES: u64 = i32::MAX as u64;

/// The element type of a declared tensor column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// `bool`.
    Bool,
    /// `int8`.
    Int8,
    /// `int16`.
    Int16,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `uint8`.
    UInt8,
    /// `uint16`.
    UInt16,
    /// `uint32`.
    UInt32,
    /// `uint64`.
    UInt64,
    /// `float16`.
    Float16,
    /// `float32`.
    Float32,
    /// `float64`.
    Float64,
    /// `string`: UTF-8 text (variable length).
    String,
    /// `binary`: bytes (variable length).
    Binary,
}

impl DType {
    /// Every dtype, in the order of their names in [`DType::NAMES`].
    pub const ALL: [DType; 14] = [
        DType::Bool,
        DType::Int8,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::UInt8,
        DType::UInt16,
        DType::UInt32,
        DType::UInt64,
        DType::Float16,
        DType::Float32,
        DType::Float64,
        DType::String,
        DType::Binary,
    ];

    /// The dtypes' names, as NumPy spells them (`string` and `binary` aside).
    pub const NAMES: [&'static str; 14] = [
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "string", "binary",
    ];

    /// The dtype's name, e.g. `float32`.
    pub fn as_str(self) -> &'static str {
        let i = DType::ALL.iter().position(|d| *d == self).unwrap_or(0);
        DType::NAMES.get(i).copied().unwrap_or("bool")
    }

    /// The dtype named `name`.
    pub fn from_name(name: &str) -> Option<DType> {
        let i = DType::NAMES.iter().position(|n| *n == name)?;
        DType::ALL.get(i).copied()
    }

    /// Whether values of this type have a fixed width (everything but `string` and `binary`).
    pub fn is_fixed_width(self) -> bool {
        !matches!(self, DType::String | DType::Binary)
    }
}

/// A declared tensor column: every row holds one tensor of this dtype and shape.
///
/// Shape `[]` is a scalar column; any other shape travels as an Arrow fixed-size list of
/// `product(shape)` values (with the `arrow.fixed_shape_tensor` extension type naming the
/// shape), which NumPy, PyTorch and JAX read without a copy. A worker refuses a file whose
/// column disagrees, naming the column. For `tfrecord` files, the declared tensors are the
/// `tf.train.Example` features decoded into columns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorDef {
    /// The column's (or feature's) name.
    pub name: String,
    /// The values' type (`string` and `binary` only as scalars).
    pub dtype: DType,
    /// The tensor's dimensions, each at least 1 (empty: a scalar).
    pub shape: Vec<u64>,
}

impl TensorDef {
    /// How many values one row's tensor holds: the product of the shape (1 for a scalar).
    pub fn num_values(&self) -> u64 {
        self.shape.iter().fold(1u64, |n, d| n.saturating_mul(*d))
    }
}

/// How DYNAMIC sharding cuts a `files` source into splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FileSplit {
    /// One split per file (the default); a file's records or rows are its output.
    #[default]
    Files,
    /// (Parquet) Ranges of `split_size` rows, across files: the positions are rows.
    Rows,
}

impl FileSplit {
    /// The JSON name: `files` or `rows`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileSplit::Files => "files",
            FileSplit::Rows => "rows",
        }
    }
}

/// Checks a column name (non-empty, at most [`MAX_COLUMN_NAME_BYTES`]).
pub(super) fn check_column_name(name: &str, path: &str) -> Result<(), DatasetError> {
    if name.is_empty() {
        return Err(invalid(format!("{path} must not be empty")));
    }
    if name.len() > MAX_COLUMN_NAME_BYTES {
        return Err(invalid(format!(
            "{path} is {} bytes long; at most {MAX_COLUMN_NAME_BYTES} are allowed",
            name.len()
        )));
    }
    Ok(())
}

/// Checks a declared tensor's shape and dtype together.
pub(super) fn check_tensor(t: &TensorDef, path: &str) -> Result<(), DatasetError> {
    if t.shape.len() > MAX_TENSOR_DIMS {
        return Err(invalid(format!(
            "{path}.shape has {} dimensions; at most {MAX_TENSOR_DIMS} are allowed",
            t.shape.len()
        )));
    }
    if let Some(i) = t.shape.iter().position(|d| *d == 0) {
        return Err(invalid(format!("{path}.shape[{i}] must be at least 1")));
    }
    let values = t.shape.iter().try_fold(1u64, |n, d| n.checked_mul(*d));
    if values.is_none_or(|n| n > MAX_TENSOR_VALUES) {
        return Err(invalid(format!(
            "{path}.shape holds more than {MAX_TENSOR_VALUES} values per row"
        )));
    }
    if !t.shape.is_empty() && !t.dtype.is_fixed_width() {
        return Err(invalid(format!(
            "{path}: a {} tensor must be a scalar (shape []); only fixed-width dtypes have \
             shapes",
            t.dtype.as_str()
        )));
    }
    Ok(())
}

/// Names a column for messages.
pub fn column(name: &str) -> String {
    format!("column {}", quoted(name))
}

/// What a pipeline asks its caller for ([`Step::NeedRows`](super::Step::NeedRows)): the rows
/// of a columnar file from `start` on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RowsRequest {
    /// One of the source's paths.
    pub path: String,
    /// The file's first row wanted (0-based, in the file).
    pub start: u64,
    /// The end (exclusive) of the rows wanted, or `None` for the rest of the file.
    pub stop: Option<u64>,
    /// How many rows the dataset says the file has (a source split by rows): a file with
    /// another count changed since it was registered, and must be refused.
    pub file_rows: Option<u64>,
}

/// Rows of a columnar file as the caller decoded them: an opaque payload (an Arrow record
/// batch, on a worker) with its row count and size. Compared by identity.
pub struct Chunk {
    rows: u64,
    bytes: u64,
    data: Arc<dyn Any + Send + Sync>,
}

impl Chunk {
    /// A chunk of `rows` rows taking `bytes` bytes of memory.
    pub fn new(rows: u64, bytes: u64, data: Arc<dyn Any + Send + Sync>) -> Chunk {
        Chunk { rows, bytes, data }
    }

    /// Its rows.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The memory it takes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The payload.
    pub fn data(&self) -> &Arc<dyn Any + Send + Sync> {
        &self.data
    }

    /// What one of its rows weighs: its share of the chunk's bytes (at least 1).
    pub fn row_bytes(&self) -> u64 {
        self.bytes.checked_div(self.rows).unwrap_or(self.bytes).max(1)
    }
}

impl fmt::Debug for Chunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk").field("rows", &self.rows).field("bytes", &self.bytes).finish()
    }
}

/// One row of a [`Chunk`].
#[derive(Debug, Clone)]
pub struct Row {
    /// The chunk.
    pub chunk: Arc<Chunk>,
    /// The row's index in the chunk.
    pub index: u64,
}

impl PartialEq for Row {
    fn eq(&self, other: &Row) -> bool {
        Arc::ptr_eq(&self.chunk, &other.chunk) && self.index == other.index
    }
}

/// An element of a pipeline: a JSON value, or (columnar sources) a row or a batch of rows.
#[derive(Debug, Clone, PartialEq)]
pub enum Element {
    /// A JSON value: what every source but a columnar `files` one yields.
    Value(Value),
    /// A row of a columnar file.
    Row(Row),
    /// A `batch` of rows, in order.
    Rows(Vec<Row>),
}

impl Element {
    /// The JSON value, if it is one.
    pub fn as_value(&self) -> Option<&Value> {
        match self {
            Element::Value(v) => Some(v),
            _ => None,
        }
    }

    /// The JSON value, if it is one.
    pub fn into_value(self) -> Option<Value> {
        match self {
            Element::Value(v) => Some(v),
            _ => None,
        }
    }

    /// What it weighs in a buffer: [`approx_bytes`](super::approx_bytes) of a value, a row's
    /// share of its chunk.
    pub fn approx_bytes(&self) -> u64 {
        match self {
            Element::Value(v) => super::approx_bytes(v),
            Element::Row(r) => r.chunk.row_bytes(),
            Element::Rows(rows) => {
                rows.iter().fold(16, |n: u64, r| n.saturating_add(r.chunk.row_bytes()))
            }
        }
    }
}

impl PartialEq<Value> for Element {
    fn eq(&self, other: &Value) -> bool {
        self.as_value() == Some(other)
    }
}

impl From<Value> for Element {
    fn from(value: Value) -> Element {
        Element::Value(value)
    }
}
