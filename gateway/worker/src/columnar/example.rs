//! `tf.train.Example` records decoded into the declared tensor columns.
//!
//! The messages are TensorFlow's (`tensorflow/core/example/{example,feature}.proto`), written
//! out here for `prost`: an `Example` holds `Features`, a map from names to `Feature`s, each
//! a list of bytes, floats or 64-bit integers. A declared tensor takes its feature's values:
//! `float32` from a `float_list`, `int64` from an `int64_list`, `string` (UTF-8) and `binary`
//! from a `bytes_list`, exactly `product(shape)` of them (one for a scalar).
//!
//! Decoding a record allocates in proportion to its length: every repeated value, map entry
//! or byte string `prost` decodes is backed by bytes of the record.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, FixedSizeListArray, Float32Array, Int64Array, StringArray,
};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field};
use prost::Message as _;
use shardwise_core::dataset::{DType, TensorDef};
use shardwise_http::{Code, Problem};

use super::schema::declared_text;
use crate::files::shown;

/// `tensorflow.Example`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Example {
    #[prost(message, optional, tag = "1")]
    pub(crate) features: Option<Features>,
}

/// `tensorflow.Features`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Features {
    #[prost(map = "string, message", tag = "1")]
    pub(crate) feature: HashMap<String, Feature>,
}

/// `tensorflow.Feature`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Feature {
    #[prost(oneof = "Kind", tags = "1, 2, 3")]
    pub(crate) kind: Option<Kind>,
}

/// The `kind` of a `tensorflow.Feature`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Kind {
    #[prost(message, tag = "1")]
    Bytes(BytesList),
    #[prost(message, tag = "2")]
    Float(FloatList),
    #[prost(message, tag = "3")]
    Int64(Int64List),
}

/// `tensorflow.BytesList`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BytesList {
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub(crate) value: Vec<Vec<u8>>,
}

/// `tensorflow.FloatList`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FloatList {
    #[prost(float, repeated, tag = "1")]
    pub(crate) value: Vec<f32>,
}

/// `tensorflow.Int64List`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Int64List {
    #[prost(int64, repeated, tag = "1")]
    pub(crate) value: Vec<i64>,
}

impl Kind {
    /// Its name, with an article.
    fn name(&self) -> &'static str {
        match self {
            Kind::Bytes(_) => "a bytes_list",
            Kind::Float(_) => "a float_list",
            Kind::Int64(_) => "an int64_list",
        }
    }
}

/// The dtypes a feature decodes to.
pub(crate) fn decodable(dtype: DType) -> bool {
    matches!(dtype, DType::Float32 | DType::Int64 | DType::String | DType::Binary)
}

/// The Arrow type a declared feature's column has.
pub(crate) fn column_type(t: &TensorDef) -> DataType {
    let value = match t.dtype {
        DType::Float32 => DataType::Float32,
        DType::Int64 => DataType::Int64,
        DType::String => DataType::Utf8,
        _ => DataType::Binary,
    };
    if t.shape.is_empty() {
        return value;
    }
    let n = i32::try_from(t.num_values()).unwrap_or(i32::MAX);
    DataType::FixedSizeList(Arc::new(Field::new_list_field(value, true)), n)
}

/// One feature's values in one record.
#[derive(Debug)]
pub(crate) enum Values {
    F32(Vec<f32>),
    I64(Vec<i64>),
    /// A string (checked UTF-8) or bytes.
    Bytes(Vec<u8>),
}

impl Values {
    /// The bytes it adds to a column (an offset, for a string or bytes).
    pub(crate) fn size(&self) -> u64 {
        let n = match self {
            Values::F32(v) => v.len().saturating_mul(4),
            Values::I64(v) => v.len().saturating_mul(8),
            Values::Bytes(v) => v.len().saturating_add(4),
        };
        u64::try_from(n).unwrap_or(u64::MAX)
    }
}

/// Decodes record `record` of the file as an `Example` and takes the features of
/// `tensors`, in order.
pub(crate) fn decode(
    path: &str,
    record: u64,
    data: &[u8],
    tensors: &[&TensorDef],
) -> Result<Vec<Values>, Problem> {
    let example = Example::decode(data).map_err(|e| {
        super::corrupt(path, format_args!("record {record} is not a tf.train.Example: {e}"))
    })?;
    let mut features = example.features.map(|f| f.feature).unwrap_or_default();
    let mut out = Vec::with_capacity(tensors.len());
    for t in tensors {
        let wrong = |what: String| {
            Problem::new(
                Code::InvalidArgument,
                format!(
                    "file {} record {record}: feature {} {what}",
                    shown(path),
                    super::schema::quoted(&t.name),
                ),
            )
        };
        let kind = features.remove(&t.name).and_then(|f| f.kind);
        let Some(kind) = kind else {
            return Err(wrong(format!("is missing; the dataset declares {}", declared_text(t))));
        };
        let wanted = match t.dtype {
            DType::Float32 => "a float_list",
            DType::Int64 => "an int64_list",
            _ => "a bytes_list",
        };
        let count =
            |n: usize| wrong(format!("has {n} values; the dataset declares {}", declared_text(t)));
        let expected = usize::try_from(t.num_values()).unwrap_or(usize::MAX);
        let values = match (t.dtype, kind) {
            (DType::Float32, Kind::Float(l)) if l.value.len() == expected => Values::F32(l.value),
            (DType::Int64, Kind::Int64(l)) if l.value.len() == expected => Values::I64(l.value),
            (DType::String | DType::Binary, Kind::Bytes(mut l)) if l.value.len() == 1 => {
                let bytes = l.value.pop().unwrap_or_default();
                if t.dtype == DType::String && std::str::from_utf8(&bytes).is_err() {
                    return Err(wrong(format!(
                        "is not UTF-8 text; the dataset declares {}",
                        declared_text(t)
                    )));
                }
                Values::Bytes(bytes)
            }
            (DType::Float32, Kind::Float(l)) => return Err(count(l.value.len())),
            (DType::Int64, Kind::Int64(l)) => return Err(count(l.value.len())),
            (DType::String | DType::Binary, Kind::Bytes(l)) => {
                return Err(count(l.value.len()));
            }
            (_, other) => {
                return Err(wrong(format!(
                    "is {}; the dataset declares {}, {wanted}",
                    other.name(),
                    declared_text(t)
                )));
            }
        };
        out.push(values);
    }
    Ok(out)
}

/// A column of decoded features being gathered.
#[derive(Debug)]
pub(crate) enum Column {
    F32(Vec<f32>),
    I64(Vec<i64>),
    Bytes { values: Vec<u8>, offsets: Vec<i32> },
}

impl Column {
    pub(crate) fn new(t: &TensorDef) -> Column {
        match t.dtype {
            DType::Float32 => Column::F32(Vec::new()),
            DType::Int64 => Column::I64(Vec::new()),
            _ => Column::Bytes { values: Vec::new(), offsets: vec![0] },
        }
    }

    /// Adds one record's values (of this column's kind, as [`decode`] made them; the
    /// caller bounds a chunk's bytes below `i32::MAX`).
    pub(crate) fn push(&mut self, values: Values) {
        match (self, values) {
            (Column::F32(c), Values::F32(v)) => c.extend(v),
            (Column::I64(c), Values::I64(v)) => c.extend(v),
            (Column::Bytes { values, offsets }, Values::Bytes(v)) => {
                values.extend(v);
                offsets.push(i32::try_from(values.len()).unwrap_or(i32::MAX));
            }
            _ => {}
        }
    }

    /// The column, as [`column_type`] says.
    pub(crate) fn finish(self, t: &TensorDef) -> Result<ArrayRef, arrow_schema::ArrowError> {
        let values: ArrayRef = match self {
            Column::F32(v) => Arc::new(Float32Array::new(ScalarBuffer::from(v), None)),
            Column::I64(v) => Arc::new(Int64Array::new(ScalarBuffer::from(v), None)),
            Column::Bytes { values, offsets } => {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
                let values = Buffer::from_vec(values);
                if t.dtype == DType::String {
                    Arc::new(StringArray::try_new(offsets, values, None)?)
                } else {
                    Arc::new(BinaryArray::try_new(offsets, values, None)?)
                }
            }
        };
        match column_type(t) {
            DataType::FixedSizeList(item, n) => {
                Ok(Arc::new(FixedSizeListArray::try_new(item, n, values, None)?))
            }
            _ => Ok(values),
        }
    }
}
