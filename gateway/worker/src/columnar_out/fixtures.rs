//! Record batches of many column types, and rows of them, for the tests.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, BinaryArray, Float32Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray,
};
use arrow_schema::{DataType, Field, Schema};
use shardwise_core::dataset::{Chunk, Element, Row};

/// A `[2, 3]` float32 tensor field, as a fixed-size list with the extension metadata.
pub(super) fn tensor_field(name: &str) -> Field {
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let metadata = HashMap::from([
        ("ARROW:extension:name".to_owned(), "arrow.fixed_shape_tensor".to_owned()),
        ("ARROW:extension:metadata".to_owned(), r#"{"shape":[2,3]}"#.to_owned()),
    ]);
    Field::new(name, DataType::FixedSizeList(item, 6), false).with_metadata(metadata)
}

/// Rows `from..from + n`: `id` (int64, the row number), `x` (float32), `name` (utf8, null
/// for every third row), `blob` (binary), `t` (a `[2, 3]` tensor), `tags` (a list of int32,
/// null for every fifth row) and `p` (a struct of `a` int64 and `b` utf8).
pub(super) fn sample(from: i64, n: i64) -> RecordBatch {
    let ids = from..from + n;
    let id: ArrayRef = Arc::new(Int64Array::from_iter_values(ids.clone()));
    let x: ArrayRef = Arc::new(Float32Array::from_iter_values(ids.clone().map(|i| i as f32 / 4.0)));
    let name: ArrayRef = Arc::new(StringArray::from_iter(
        ids.clone().map(|i| (i % 3 != 0).then(|| format!("row {i}"))),
    ));
    let blob: ArrayRef =
        Arc::new(BinaryArray::from_iter_values(ids.clone().map(|i| i.to_le_bytes()[..2].to_vec())));
    let field = tensor_field("t");
    let DataType::FixedSizeList(item, _) = field.data_type() else { unreachable!() };
    let mut t = FixedSizeListBuilder::new(Float32Builder::new(), 6).with_field(Arc::clone(item));
    for i in ids.clone() {
        for k in 0..6 {
            t.values().append_value((i * 10 + k) as f32);
        }
        t.append(true);
    }
    let t: ArrayRef = Arc::new(t.finish());
    let tags: ArrayRef =
        Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(ids.clone().map(|i| {
            (i % 5 != 0).then(|| (0..i % 3).map(|k| Some(k as i32)).collect::<Vec<_>>())
        })));
    let a: ArrayRef = Arc::new(Int64Array::from_iter_values(ids.clone().map(|i| -i)));
    let b: ArrayRef = Arc::new(StringArray::from_iter_values(ids.clone().map(|i| format!("b{i}"))));
    let p: ArrayRef = Arc::new(StructArray::from(vec![
        (Arc::new(Field::new("a", DataType::Int64, false)), a),
        (Arc::new(Field::new("b", DataType::Utf8, false)), b),
    ]));
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("x", DataType::Float32, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("blob", DataType::Binary, false),
        field,
        Field::new("tags", tags.data_type().clone(), true),
        Field::new("p", p.data_type().clone(), false),
    ]);
    RecordBatch::try_new(Arc::new(schema), vec![id, x, name, blob, t, tags, p]).unwrap()
}

/// A chunk holding `batch`.
pub(super) fn chunk(batch: RecordBatch) -> Arc<Chunk> {
    let rows = batch.num_rows() as u64;
    let bytes = batch.get_array_memory_size() as u64;
    Arc::new(Chunk::new(rows, bytes, Arc::new(batch)))
}

/// Rows `indices` of `chunk`.
pub(super) fn rows(chunk: &Arc<Chunk>, indices: impl IntoIterator<Item = u64>) -> Vec<Row> {
    indices.into_iter().map(|index| Row { chunk: Arc::clone(chunk), index }).collect()
}

/// Each row an element.
pub(super) fn elements(rows: Vec<Row>) -> Vec<Element> {
    rows.into_iter().map(Element::Row).collect()
}

/// The batch of `chunk`.
pub(super) fn batch_of(chunk: &Chunk) -> &RecordBatch {
    chunk.data().downcast_ref::<RecordBatch>().unwrap()
}
