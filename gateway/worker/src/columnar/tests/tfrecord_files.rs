//! TFRecord files, raw and as `tf.train.Example`s.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int64Type};
use arrow_schema::DataType;
use prost::Message as _;
use shardwise_core::dataset::{DType, FileFormat};

use super::super::example::{BytesList, Example, Feature, Features, FloatList, Int64List, Kind};
use super::super::tfrecord::masked_crc;
use super::*;

/// One record framed as TFRecord does.
pub(super) fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = len.to_vec();
    out.extend(masked_crc(&len).to_le_bytes());
    out.extend(data);
    out.extend(masked_crc(data).to_le_bytes());
    out
}

pub(super) fn records(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| frame(format!("record {i}").as_bytes())).collect()
}

fn feature(kind: Kind) -> Feature {
    Feature { kind: Some(kind) }
}

/// An Example with `image` (4 floats), `label` (an int64), `name` (a string) and `raw`.
pub(super) fn example(i: i64) -> Vec<u8> {
    let feature = HashMap::from([
        (
            "image".to_owned(),
            feature(Kind::Float(FloatList {
                value: (0..4).map(|k| (i * 10 + k) as f32).collect(),
            })),
        ),
        ("label".to_owned(), feature(Kind::Int64(Int64List { value: vec![i] }))),
        (
            "name".to_owned(),
            feature(Kind::Bytes(BytesList { value: vec![format!("n{i}").into_bytes()] })),
        ),
        ("raw".to_owned(), feature(Kind::Bytes(BytesList { value: vec![vec![0xff, i as u8]] }))),
    ]);
    Example { features: Some(Features { feature }) }.encode_to_vec()
}

fn record_column(batch: &RecordBatch) -> Vec<String> {
    let col = batch.column_by_name("record").unwrap().as_binary::<i32>();
    col.iter().map(|v| String::from_utf8(v.unwrap().to_vec()).unwrap()).collect()
}

#[test]
fn records_are_rows() {
    let root = Root::new("tfr-raw");
    root.write("t.tfrecord", &records(10));
    let d = def(FileFormat::TfRecord);
    let all = read_one(&root, &d, &req("t.tfrecord", 0, None), &big()).unwrap();
    let expected: Vec<String> = (0..10).map(|i| format!("record {i}")).collect();
    assert_eq!(record_column(&all), expected);
    let field = all.schema().field(0).clone();
    assert_eq!(
        (field.name().as_str(), field.data_type(), field.is_nullable()),
        ("record", &DataType::Binary, false)
    );
    let mid = read_one(&root, &d, &req("t.tfrecord", 3, Some(7)), &big()).unwrap();
    assert_eq!(record_column(&mid), expected[3..7]);
    let none = read(&root, &d, &req("t.tfrecord", 10, None), &big()).unwrap();
    assert_eq!(none.len(), 1);
    assert_eq!(none[0].num_rows(), 0);
    // Chunks of about 20 bytes: a record (7 or 8 bytes and its offset) or two each.
    let small = read(&root, &d, &req("t.tfrecord", 0, None), &opts(20, 1 << 20)).unwrap();
    assert_eq!(small.len(), 5);
    root.write("empty.tfrecord", b"");
    let e = read(&root, &d, &req("empty.tfrecord", 0, None), &big()).unwrap();
    assert_eq!(e[0].num_rows(), 0);
}

#[test]
fn row_counts_are_checked_where_the_file_ends() {
    let root = Root::new("tfr-counts");
    root.write("t.tfrecord", &records(10));
    let d = def(FileFormat::TfRecord);
    let mut r = req("t.tfrecord", 2, None);
    r.file_rows = Some(11);
    fails(
        read(&root, &d, &r, &big()),
        Code::FailedPrecondition,
        "file \"t.tfrecord\" has 10 rows; the dataset was registered with 11",
    );
    // A range that stops where the registered count says the file ends: the file must end there.
    let mut r = req("t.tfrecord", 2, Some(9));
    r.file_rows = Some(9);
    fails(
        read(&root, &d, &r, &big()),
        Code::FailedPrecondition,
        "has 10 rows; the dataset was registered with 9",
    );
    r.stop = Some(5);
    assert_eq!(read_one(&root, &d, &r, &big()).unwrap().num_rows(), 3);
    fails(
        read(&root, &d, &req("t.tfrecord", 4, Some(12)), &big()),
        Code::FailedPrecondition,
        "has 10 rows; rows 4..12 were asked for",
    );
    fails(
        RowReader::open(&root.roots, &d, &req("t.tfrecord", 12, None), &big()),
        Code::FailedPrecondition,
        "has 10 rows; rows 12.. were asked for",
    );
}

#[test]
fn damaged_records_are_refused_with_their_index() {
    let root = Root::new("tfr-damage");
    let d = def(FileFormat::TfRecord);
    let good = records(6);
    let starts: Vec<usize> = (0..6)
        .map(|i| frame(format!("record {i}").as_bytes()).len())
        .scan(0, |at, n| {
            let s = *at;
            *at += n;
            Some(s)
        })
        .collect();
    // A data byte of record 3 flipped.
    let mut bad = good.clone();
    bad[starts[3] + 12] ^= 0x01;
    root.write("data.tfrecord", &bad);
    fails(
        read(&root, &d, &req("data.tfrecord", 0, None), &big()),
        CORRUPT,
        "file \"data.tfrecord\" record 3: data CRC mismatch",
    );
    // Passed over without reading the data: records after it still read.
    let tail = read_one(&root, &d, &req("data.tfrecord", 4, None), &big()).unwrap();
    assert_eq!(tail.num_rows(), 2);
    // A length byte flipped: caught even when passed over.
    let mut bad = good.clone();
    bad[starts[2]] ^= 0x01;
    root.write("len.tfrecord", &bad);
    fails(
        RowReader::open(&root.roots, &d, &req("len.tfrecord", 4, None), &big()),
        CORRUPT,
        "record 2: length CRC mismatch",
    );
    // A length (with a good CRC) past the end of the file.
    let mut bad = good[..starts[5]].to_vec();
    let len = 1000u64.to_le_bytes();
    bad.extend(len);
    bad.extend(masked_crc(&len).to_le_bytes());
    bad.extend([0; 8]);
    root.write("long.tfrecord", &bad);
    fails(
        read(&root, &d, &req("long.tfrecord", 0, None), &big()),
        CORRUPT,
        "record 5: its length (1000 bytes) is larger than the rest of the file",
    );
    // Truncated inside a record's data, and inside a header.
    for cut in [good.len() - 3, starts[5] + 5] {
        root.write("cut.tfrecord", &good[..cut]);
        fails(
            read(&root, &d, &req("cut.tfrecord", 0, None), &big()),
            CORRUPT,
            "file \"cut.tfrecord\" record 5",
        );
    }
    // A record larger than the limit.
    root.write("big.tfrecord", &frame(&[7; 5000]));
    fails(
        read(&root, &d, &req("big.tfrecord", 0, None), &opts(1, 4000)),
        Code::ResourceExhausted,
        "record 0 decodes to 5000 bytes",
    );
}

#[test]
fn examples_decode_into_declared_tensors() {
    let root = Root::new("tfr-examples");
    let file: Vec<u8> = (0..8).flat_map(|i| frame(&example(i))).collect();
    root.write("e.tfrecord", &file);
    let mut d = def(FileFormat::TfRecord);
    d.tensors = vec![
        tensor("label", DType::Int64, &[]),
        tensor("image", DType::Float32, &[2, 2]),
        tensor("name", DType::String, &[]),
        tensor("raw", DType::Binary, &[]),
    ];
    let b = read_one(&root, &d, &req("e.tfrecord", 2, Some(6)), &opts(30, 1 << 20)).unwrap();
    let schema = b.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["label", "image", "name", "raw"]);
    assert_eq!(b.column(0).as_primitive::<Int64Type>().values(), &[2, 3, 4, 5]);
    let image = b.column(1).as_fixed_size_list();
    assert_eq!(image.value_length(), 4);
    assert_eq!(image.value(1).as_primitive::<Float32Type>().values(), &[30.0, 31.0, 32.0, 33.0]);
    let f = b.schema().field(1).clone();
    assert_eq!(f.metadata().get("ARROW:extension:name").unwrap(), "arrow.fixed_shape_tensor");
    assert_eq!(f.metadata().get("ARROW:extension:metadata").unwrap(), "{\"shape\":[2,2]}");
    assert_eq!(b.column(2).as_string::<i32>().value(3), "n5");
    assert_eq!(b.column(3).as_binary::<i32>().value(0), &[0xff, 2]);
    // `columns` selects among the tensors, in its order.
    d.columns = Some(vec!["name".into(), "label".into()]);
    let b = read_one(&root, &d, &req("e.tfrecord", 0, None), &big()).unwrap();
    assert_eq!(b.num_columns(), 2);
    assert_eq!(b.column(1).as_primitive::<Int64Type>().values(), &[0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn examples_that_disagree_are_refused() {
    let root = Root::new("tfr-example-errors");
    let file: Vec<u8> = (0..4).flat_map(|i| frame(&example(i))).collect();
    root.write("e.tfrecord", &file);
    let mut d = def(FileFormat::TfRecord);
    let cases = [
        (
            tensor("missing", DType::Int64, &[]),
            "record 0: feature \"missing\" is missing; the dataset declares int64 (a scalar)",
        ),
        (
            tensor("label", DType::Float32, &[]),
            "record 0: feature \"label\" is an int64_list; the dataset declares float32 (a \
             scalar), a float_list",
        ),
        (
            tensor("image", DType::Float32, &[3]),
            "record 0: feature \"image\" has 4 values; the dataset declares float32 [3] (3 values)",
        ),
        (tensor("raw", DType::String, &[]), "record 0: feature \"raw\" is not UTF-8 text"),
    ];
    for (t, message) in cases {
        d.tensors = vec![t];
        fails(
            read(&root, &d, &req("e.tfrecord", 0, None), &big()),
            Code::InvalidArgument,
            &format!("file \"e.tfrecord\" {message}"),
        );
    }
    d.tensors = vec![tensor("label", DType::UInt8, &[])];
    fails(
        RowReader::open(&root.roots, &d, &req("e.tfrecord", 0, None), &big()),
        Code::InvalidArgument,
        "tfrecord features decode to float32, int64, string or binary",
    );
    // A record that is not an Example.
    let mut bad = file.clone();
    bad.extend(frame(&[0xff, 0xff, 0xff]));
    root.write("bad.tfrecord", &bad);
    d.tensors = vec![tensor("label", DType::Int64, &[])];
    fails(
        read(&root, &d, &req("bad.tfrecord", 0, None), &big()),
        CORRUPT,
        "record 4 is not a tf.train.Example",
    );
    // Raw, the same file reads.
    d.tensors = vec![];
    assert_eq!(read_one(&root, &d, &req("bad.tfrecord", 0, None), &big()).unwrap().num_rows(), 5);
}
