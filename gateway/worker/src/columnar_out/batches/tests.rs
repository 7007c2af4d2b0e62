use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, Int64Array};
use arrow_schema::{DataType, Field, Schema};
use arrow_select::concat::concat_batches;
use serde_json::json;

use super::super::fixtures::{batch_of, chunk, elements, rows, sample};
use super::*;

/// The address of row `row` of the `id` column's values.
fn id_ptr(batch: &RecordBatch, row: usize) -> *const u8 {
    let ids = batch.column(0).as_primitive::<Int64Type>();
    ids.values().inner().as_ptr().wrapping_add(row * 8)
}

/// The address of the `name` column's bytes (a slice shares them, offsets and all).
fn names_ptr(batch: &RecordBatch) -> *const u8 {
    batch.column(2).as_string::<i32>().values().as_ptr()
}

fn ids(batches: &[RecordBatch]) -> Vec<i64> {
    batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).collect()
}

/// What gathering `rows` must give: each row sliced, then copied into one batch.
fn expected(rows: &[Row]) -> RecordBatch {
    let slices: Vec<RecordBatch> =
        rows.iter().map(|r| batch_of(&r.chunk).slice(r.index as usize, 1)).collect();
    concat_batches(&batch_of(&rows[0].chunk).schema(), &slices).unwrap()
}

#[test]
fn consecutive_rows_of_a_chunk_are_a_slice_without_a_copy() {
    let c = chunk(sample(0, 1_000));
    let input = batch_of(&c);
    let out = record_batches(&elements(rows(&c, 10..20))).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0], input.slice(10, 10));
    assert_eq!(id_ptr(&out[0], 0), id_ptr(input, 10), "the id values are the chunk's");
    assert_eq!(names_ptr(&out[0]), names_ptr(input), "the name bytes are the chunk's");
    // A short run is sliced too when it is all there is.
    let out = record_batches(&elements(rows(&c, [7]))).unwrap();
    assert_eq!((out.len(), id_ptr(&out[0], 0)), (1, id_ptr(input, 7)));
}

#[test]
fn long_runs_of_several_chunks_are_one_slice_each() {
    let (a, b) = (chunk(sample(0, 500)), chunk(sample(1_000, 500)));
    let mut rs = rows(&a, 100..400);
    rs.extend(rows(&b, 0..MIN_SLICE_ROWS as u64));
    rs.extend(rows(&a, 0..50));
    let out = record_batches(&elements(rs.clone())).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(id_ptr(&out[0], 0), id_ptr(batch_of(&a), 100));
    assert_eq!(id_ptr(&out[1], 0), id_ptr(batch_of(&b), 0));
    assert_eq!(id_ptr(&out[2], 0), id_ptr(batch_of(&a), 0), "the last run, alone: a slice");
    assert_eq!(
        ids(&out),
        rs.iter()
            .map(|r| batch_of(&r.chunk).slice(r.index as usize, 1))
            .flat_map(|b| ids(&[b]))
            .collect::<Vec<_>>()
    );
}

#[test]
fn shuffled_rows_are_gathered_into_one_batch_in_their_order() {
    let (a, b) = (chunk(sample(0, 100)), chunk(sample(1_000, 100)));
    // A fixed shuffle of rows of both chunks, with short runs inside it.
    let order: Vec<Row> = [(0, 17), (1, 3), (1, 4), (0, 99), (0, 0), (1, 50), (0, 18), (1, 2)]
        .into_iter()
        .map(|(which, index)| Row { chunk: Arc::clone(if which == 0 { &a } else { &b }), index })
        .collect();
    let out = record_batches(&elements(order.clone())).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0], expected(&order), "every column, nested ones included");
    assert_eq!(ids(&out), [17, 1_003, 1_004, 99, 0, 1_050, 18, 1_002]);
}

#[test]
fn scattered_rows_between_long_runs_are_gathered_between_their_slices() {
    let c = chunk(sample(0, 1_000));
    let mut rs = rows(&c, 0..200);
    rs.extend(rows(&c, [500, 3, 700]));
    rs.extend(rows(&c, 800..1_000));
    let out = record_batches(&elements(rs.clone())).unwrap();
    let sizes: Vec<usize> = out.iter().map(RecordBatch::num_rows).collect();
    assert_eq!(sizes, [200, 3, 200]);
    assert_eq!(id_ptr(&out[2], 0), id_ptr(batch_of(&c), 800));
    assert_eq!(out[1], expected(&rs[200..203]));
    assert_eq!(ids(&out), rs.iter().map(|r| r.index as i64).collect::<Vec<_>>());
}

#[test]
fn each_batch_element_is_one_record_batch() {
    let (a, b) = (chunk(sample(0, 100)), chunk(sample(1_000, 100)));
    let shuffled =
        vec![rows(&a, [5])[0].clone(), rows(&b, [9])[0].clone(), rows(&a, [6])[0].clone()];
    let mut es = vec![Element::Rows(rows(&a, 10..14)), Element::Rows(shuffled.clone())];
    es.extend(elements(rows(&b, 0..2)));
    es.push(Element::Rows(rows(&b, 40..41)));
    let out = record_batches(&es).unwrap();
    let sizes: Vec<usize> = out.iter().map(RecordBatch::num_rows).collect();
    assert_eq!(sizes, [4, 3, 2, 1]);
    assert_eq!(id_ptr(&out[0], 0), id_ptr(batch_of(&a), 10), "one run: a slice");
    assert_eq!(out[1], expected(&shuffled));
    assert_eq!(id_ptr(&out[3], 0), id_ptr(batch_of(&b), 40));
    // A batch of no rows (which `batch` does not make) is still one, empty, batch.
    let out =
        record_batches(&[Element::Rows(vec![]), Element::Row(rows(&a, [1])[0].clone())]).unwrap();
    assert_eq!((out.len(), out[0].num_rows(), out[0].schema()), (2, 0, batch_of(&a).schema()));
    assert!(record_batches(&[Element::Rows(vec![])]).is_err(), "no schema to give it");
    assert!(record_batches(&[]).unwrap().is_empty());
}

#[test]
fn json_values_have_no_arrow_form() {
    let c = chunk(sample(0, 10));
    let mut es = elements(rows(&c, 0..2));
    es.push(Element::Value(json!({"a": 1})));
    let err = record_batches(&es).unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition);
    assert_eq!(err.status, 406);
    assert!(err.detail.starts_with("elements of this task are JSON values"), "{}", err.detail);
}

#[test]
fn rows_of_different_schemas_are_refused() {
    let a = chunk(sample(0, 10));
    let other = Schema::new(vec![Field::new("id", DataType::Int32, false)]);
    let ids: Arc<dyn Array> = Arc::new(arrow_array::Int32Array::from(vec![1, 2]));
    let b = chunk(RecordBatch::try_new(Arc::new(other), vec![ids]).unwrap());
    // The same columns under another name.
    let renamed = Schema::new(vec![Field::new("ID", DataType::Int64, false)]);
    let c = chunk(
        RecordBatch::try_new(Arc::new(renamed), vec![Arc::new(Int64Array::from(vec![1]))]).unwrap(),
    );
    let one = |c: &Arc<Chunk>| rows(c, [0]).remove(0);
    let cases = [
        vec![Element::Row(one(&a)), Element::Row(one(&b))],
        vec![Element::Rows(vec![one(&b), one(&a)])],
        vec![Element::Rows(vec![one(&b)]), Element::Row(one(&c))],
        vec![Element::Row(one(&a)), Element::Rows(vec![one(&a), one(&a)]), Element::Row(one(&b))],
    ];
    for es in cases {
        let err = record_batches(&es).unwrap_err();
        assert_eq!(err.code, Code::FailedPrecondition, "{}", err.detail);
        assert!(err.detail.contains("different schemas"), "{}", err.detail);
    }
    let err = record_batches(&[Element::Row(one(&b)), Element::Row(one(&c))]).unwrap_err();
    assert!(err.detail.contains(r#"column "id" Int32 and column "ID" Int64"#), "{}", err.detail);
}

#[test]
fn rows_that_are_not_in_their_chunk_are_internal_errors() {
    let c = chunk(sample(0, 10));
    for bad in
        [Row { chunk: Arc::clone(&c), index: 10 }, Row { chunk: Arc::clone(&c), index: u64::MAX }]
    {
        assert_eq!(record_batches(&[Element::Row(bad)]).unwrap_err().code, Code::Internal);
    }
    let opaque = Arc::new(Chunk::new(1, 1, Arc::new("not a batch")));
    let err = record_batches(&[Element::Row(Row { chunk: opaque, index: 0 })]).unwrap_err();
    assert_eq!(err.code, Code::Internal);
}
