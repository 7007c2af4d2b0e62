use std::sync::Arc;

use arrow_array::types::{Int8Type, Int32Type};
use arrow_array::{
    ArrayRef, BinaryArray, BinaryViewArray, BooleanArray, Date32Array, Date64Array,
    Decimal128Array, DictionaryArray, DurationSecondArray, FixedSizeBinaryArray,
    FixedSizeListArray, Float16Array, Float32Array, Float64Array, Int8Array, Int16Array,
    Int32Array, Int64Array, LargeBinaryArray, LargeListArray, LargeStringArray, ListArray,
    NullArray, StringArray, StringViewArray, StructArray, Time32SecondArray, Time64NanosecondArray,
    TimestampMicrosecondArray, TimestampMillisecondArray, UInt8Array, UInt16Array, UInt32Array,
    UInt64Array,
};
use arrow_schema::{Field, Schema};
use serde_json::json;
use shardwise_core::dataset::{Chunk, Row};

use super::super::fixtures::{chunk, rows, sample, tensor_field};
use super::*;
use crate::columnar_out::Unwritten;

/// Each row of a one-column batch of `array` (under `field`, or a plain nullable field), as
/// JSON: the column's values.
fn column_of(field: Option<Field>, array: ArrayRef) -> Vec<Value> {
    let field = field.unwrap_or_else(|| Field::new("c", array.data_type().clone(), true));
    let batch = RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![array]).unwrap();
    let c = chunk(batch);
    rows(&c, 0..c.rows())
        .into_iter()
        .map(|r| {
            let Value::Object(o) = to_json(&Element::Row(r)).unwrap() else { panic!() };
            o.into_iter().next().unwrap().1
        })
        .collect()
}

fn col(array: impl Array + 'static) -> Vec<Value> {
    column_of(None, Arc::new(array))
}

fn refusal(field: Field, array: ArrayRef) -> Problem {
    let batch = RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![array]).unwrap();
    let c = chunk(batch);
    to_json(&Element::Row(rows(&c, [0]).remove(0))).unwrap_err()
}

#[test]
fn a_row_is_an_object_of_its_columns_and_a_batch_an_array_of_them() {
    let c = chunk(sample(0, 10));
    let row = to_json(&Element::Row(rows(&c, [4]).remove(0))).unwrap();
    let want = json!({
        "id": 4, "x": 1.0, "name": "row 4", "blob": "BAA=",
        "t": [[40.0, 41.0, 42.0], [43.0, 44.0, 45.0]],
        "tags": [0], "p": {"a": -4, "b": "b4"}
    });
    assert_eq!(row, want);
    let keys: Vec<&String> = row.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["id", "x", "name", "blob", "t", "tags", "p"], "the schema's order");
    let batch = to_json(&Element::Rows(rows(&c, [3, 4, 5]))).unwrap();
    assert_eq!(batch[1], want);
    assert_eq!((batch[0]["name"].clone(), batch[0]["tags"].clone()), (Value::Null, json!([])));
    assert_eq!((batch[2]["name"].clone(), batch[2]["tags"].clone()), (json!("row 5"), Value::Null));
    assert_eq!(to_json(&Element::Value(json!([1, "a"]))).unwrap(), json!([1, "a"]));
    assert_eq!(to_json(&Element::Rows(vec![])).unwrap(), json!([]));
}

#[test]
fn numbers_are_exact_and_floats_shortest() {
    assert_eq!(col(NullArray::new(2)), [Value::Null, Value::Null]);
    assert_eq!(col(BooleanArray::from(vec![Some(true), None])), [json!(true), Value::Null]);
    assert_eq!(col(Int8Array::from(vec![i8::MIN])), [json!(-128)]);
    assert_eq!(col(Int16Array::from(vec![i16::MAX])), [json!(32767)]);
    assert_eq!(col(Int32Array::from(vec![Some(-7), None])), [json!(-7), Value::Null]);
    assert_eq!(col(Int64Array::from(vec![i64::MIN])), [json!(i64::MIN)]);
    assert_eq!(col(UInt8Array::from(vec![255])), [json!(255)]);
    assert_eq!(col(UInt16Array::from(vec![65_535])), [json!(65_535)]);
    assert_eq!(col(UInt32Array::from(vec![u32::MAX])), [json!(u32::MAX)]);
    assert_eq!(col(UInt64Array::from(vec![u64::MAX])), [json!(u64::MAX)]);
    let f32s = col(Float32Array::from(vec![0.1, f32::NAN, f32::INFINITY, -2.5]));
    assert_eq!(f32s, [json!(0.1), json!("NaN"), json!("Infinity"), json!(-2.5)]);
    assert_eq!(serde_json::to_string(&f32s[0]).unwrap(), "0.1", "not 0.10000000149011612");
    let f64s = col(Float64Array::from(vec![f64::NEG_INFINITY, 1e300, 0.1]));
    assert_eq!(f64s, [json!("-Infinity"), json!(1e300), json!(0.1)]);
    let halves = [0.5, -1.0, 65504.0].map(F16::from_f32);
    assert_eq!(col(Float16Array::from(halves.to_vec())), [json!(0.5), json!(-1.0), json!(65504.0)]);
}

/// Arrow's float16 (`half::f16`).
type F16 = <arrow_array::types::Float16Type as arrow_array::ArrowPrimitiveType>::Native;

#[test]
fn text_is_strings_and_bytes_base64() {
    let want = [json!("héllo"), Value::Null];
    assert_eq!(col(StringArray::from(vec![Some("héllo"), None])), want);
    assert_eq!(col(LargeStringArray::from(vec![Some("héllo"), None])), want);
    assert_eq!(col(StringViewArray::from(vec![Some("héllo"), None])), want);
    let want = [json!("AAH/"), json!("")];
    let raw: Vec<&[u8]> = vec![&[0, 1, 255], &[]];
    assert_eq!(col(BinaryArray::from(raw.clone())), want);
    assert_eq!(col(LargeBinaryArray::from(raw.clone())), want);
    assert_eq!(col(BinaryViewArray::from(raw)), want);
    let fixed = FixedSizeBinaryArray::try_from_iter([[104u8, 105], [0, 0]].into_iter()).unwrap();
    assert_eq!(col(fixed), [json!("aGk="), json!("AAA=")]);
}

#[test]
fn lists_are_arrays_and_tensors_are_nested_to_their_shape() {
    let lists = vec![Some(vec![Some(1), None]), None, Some(vec![])];
    let want = [json!([1, null]), Value::Null, json!([])];
    assert_eq!(col(ListArray::from_iter_primitive::<Int32Type, _, _>(lists.clone())), want);
    assert_eq!(col(LargeListArray::from_iter_primitive::<Int32Type, _, _>(lists)), want);
    // Sliced lists read their own rows.
    let sliced = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(1)]),
        Some(vec![Some(2), Some(3)]),
        Some(vec![Some(4)]),
    ])
    .slice(1, 2);
    assert_eq!(col(sliced), [json!([2, 3]), json!([4])]);
    let t = tensor_field("t").with_nullable(true);
    let DataType::FixedSizeList(item, _) = t.data_type().clone() else { unreachable!() };
    let values = Arc::new(Float32Array::from_iter_values((0..12).map(|v| v as f32)));
    let nulls = Some(vec![true, false].into());
    let array = FixedSizeListArray::try_new(Arc::clone(&item), 6, values, nulls).unwrap();
    let flat = col(array.clone());
    assert_eq!(flat, [json!([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]), Value::Null], "no extension");
    let nested = column_of(Some(t.clone()), Arc::new(array.clone()));
    assert_eq!(nested, [json!([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]), Value::Null]);
    let sliced = column_of(Some(t.clone()), Arc::new(array.slice(1, 1)));
    assert_eq!(sliced, [Value::Null]);
    // A shape that does not hold the list's values, or is not one: flat.
    for bad in
        [r#"{"shape":[4,2]}"#, r#"{"shape":[6,0]}"#, r#"{"shape":[]}"#, "{", r#"{"shape":[-6]}"#]
    {
        let mut metadata = t.metadata().clone();
        metadata.insert("ARROW:extension:metadata", bad);
        let field = t.clone().with_metadata(metadata);
        assert_eq!(column_of(Some(field), Arc::new(array.clone()))[0], flat[0], "{bad}");
    }
    let shape = r#"{"shape":[1,6,1]}"#;
    let mut metadata = t.metadata().clone();
    metadata.insert("ARROW:extension:metadata", shape);
    let field = t.with_metadata(metadata);
    let v = column_of(Some(field), Arc::new(array));
    assert_eq!(v[0], json!([[[0.0], [1.0], [2.0], [3.0], [4.0], [5.0]]]));
}

#[test]
fn structs_are_objects_and_dictionaries_their_values() {
    let a: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None]));
    let inner: ArrayRef = Arc::new(StructArray::from(vec![(
        Arc::new(Field::new("s", DataType::Utf8, true)),
        Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef,
    )]));
    let s = StructArray::from(vec![
        (Arc::new(Field::new("a", DataType::Int64, true)), a),
        (Arc::new(Field::new("in", inner.data_type().clone(), false)), inner),
    ]);
    assert_eq!(col(s), [json!({"a": 1, "in": {"s": "x"}}), json!({"a": null, "in": {"s": "y"}})]);
    let keys = Int8Array::from(vec![Some(1), None, Some(0), Some(1)]);
    let values = Arc::new(StringArray::from(vec![Some("cat"), None]));
    let dict = DictionaryArray::<Int8Type>::try_new(keys, values).unwrap();
    assert_eq!(col(dict), [Value::Null, Value::Null, json!("cat"), Value::Null]);
    let dict: DictionaryArray<Int8Type> = ["b", "a", "b"].into_iter().collect();
    assert_eq!(col(dict.slice(1, 2)), [json!("a"), json!("b")]);
}

#[test]
fn dates_times_and_decimals_are_strings() {
    assert_eq!(col(Date32Array::from(vec![19_782])), [json!("2024-02-29")]);
    assert_eq!(
        col(Date64Array::from(vec![86_400_000, 1])),
        [json!("1970-01-02"), json!("1970-01-01T00:00:00.001")]
    );
    assert_eq!(
        col(TimestampMillisecondArray::from(vec![1_500])),
        [json!("1970-01-01T00:00:01.500")]
    );
    let utc = TimestampMicrosecondArray::from(vec![1]).with_timezone("+02:00");
    assert_eq!(col(utc), [json!("1970-01-01T00:00:00.000001Z")], "the instant, in UTC");
    assert_eq!(col(Time32SecondArray::from(vec![3_661])), [json!("01:01:01")]);
    assert_eq!(col(Time64NanosecondArray::from(vec![5])), [json!("00:00:00.000000005")]);
    let d =
        Decimal128Array::from(vec![Some(-12_345), None]).with_precision_and_scale(10, 3).unwrap();
    assert_eq!(col(d), [json!("-12.345"), Value::Null]);
}

#[test]
fn types_without_a_json_form_are_refused_naming_the_column() {
    let durations: ArrayRef = Arc::new(DurationSecondArray::from(vec![None::<i64>]));
    let err = refusal(Field::new("wait", durations.data_type().clone(), true), durations);
    assert_eq!(err.code, Code::FailedPrecondition);
    assert_eq!(
        err.detail,
        r#"column "wait" of type Duration(s) has no JSON form; read it as Arrow"#
    );
    // Inside a list, and even when every value is null or the list is empty.
    let item =
        Arc::new(Field::new("item", DataType::Duration(arrow_schema::TimeUnit::Second), true));
    let lists: ArrayRef = Arc::new(ListArray::new_null(item, 1));
    let err = refusal(Field::new("waits", lists.data_type().clone(), true), lists);
    assert!(err.detail.starts_with(r#"column "waits" of type List("#), "{}", err.detail);
    assert!(
        err.detail.contains("holds Duration(s) values, which have no JSON form"),
        "{}",
        err.detail
    );
}

#[test]
fn objects_that_would_lose_a_column_are_refused() {
    let one: ArrayRef = Arc::new(Int64Array::from(vec![1]));
    let schema = Schema::new(vec![
        Field::new("a", DataType::Int64, false),
        Field::new("a", DataType::Int64, false),
    ]);
    let c = chunk(
        RecordBatch::try_new(Arc::new(schema), vec![Arc::clone(&one), Arc::clone(&one)]).unwrap(),
    );
    let err = to_json(&Element::Rows(rows(&c, [0]))).unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition);
    assert!(err.detail.starts_with(r#"column "a" appears twice"#), "{}", err.detail);
    let f = Arc::new(Field::new("x", DataType::Int64, false));
    let s: ArrayRef =
        Arc::new(StructArray::from(vec![(Arc::clone(&f), Arc::clone(&one)), (f, one)]));
    let err = refusal(Field::new("s", s.data_type().clone(), false), s);
    assert!(err.detail.starts_with(r#"column "s" has two fields named "x""#), "{}", err.detail);
}

#[test]
fn nesting_is_bounded() {
    let mut array: ArrayRef = Arc::new(Int32Array::from(vec![1]));
    for _ in 0..=MAX_JSON_DEPTH {
        let field = Arc::new(Field::new("item", array.data_type().clone(), true));
        let offsets = arrow_buffer::OffsetBuffer::from_lengths([1]);
        array = Arc::new(ListArray::new(field, offsets, array, None));
    }
    let err = refusal(Field::new("deep", array.data_type().clone(), true), array);
    assert!(err.detail.contains("nested more than 64 levels"), "{}", err.detail);
}

#[test]
fn rows_outside_their_chunk_are_internal_errors() {
    let c = chunk(sample(0, 3));
    let err = to_json(&Element::Row(Row { chunk: c, index: 3 })).unwrap_err();
    assert_eq!(err.code, Code::Internal);
    let opaque = Arc::new(Chunk::new(1, 1, Arc::new(7u8)));
    let err = to_json(&Element::Rows(vec![Row { chunk: opaque, index: 0 }])).unwrap_err();
    assert_eq!(err.code, Code::Internal);
}

/// What a row takes as JSON is what is counted: a dictionary of one 256 KiB string that every
/// row references weighs 256 KiB a row here, and the budget stops the reply before it is
/// passed, leaving the buffer as it was.
#[test]
fn a_reply_counts_what_it_writes_and_stops_at_its_budget() {
    let big = "x".repeat(256 << 10);
    let keys = Int8Array::from(vec![0i8; 100]);
    let dict: ArrayRef = Arc::new(
        DictionaryArray::<Int8Type>::try_new(keys, Arc::new(StringArray::from(vec![big.as_str()])))
            .unwrap(),
    );
    let field = Field::new("s", dict.data_type().clone(), false);
    let c = chunk(RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![dict]).unwrap());
    let budget = 1 << 20;
    let mut out = JsonOut::new(budget);
    let mut written = 0;
    for r in rows(&c, 0..100) {
        match out.element(&Element::Row(r)) {
            Ok(()) => written += 1,
            Err(Unwritten::Over) => break,
            Err(Unwritten::Refused(p)) => panic!("{p:?}"),
        }
    }
    assert_eq!(written, 3, "four rows of 256 KiB are more than 1 MiB");
    let before = out.len();
    assert!(before <= budget && before > 3 * (256 << 10), "{before}");
    let again = out.element(&Element::Row(rows(&c, [3]).remove(0)));
    assert!(matches!(again, Err(Unwritten::Over)));
    assert_eq!(out.len(), before, "nothing of a refused row is kept");
    // Bytes are checked before they are encoded, and a value or a batch the same way.
    let mut small = JsonOut::new(10);
    assert!(matches!(small.element(&Element::Value(json!("0123456789"))), Err(Unwritten::Over)));
    assert!(small.is_empty());
    assert!(matches!(small.element(&Element::Rows(rows(&c, [0, 1]))), Err(Unwritten::Over)));
    assert!(small.is_empty());
}
