//! Arrow IPC files.

use std::collections::HashMap;
use std::sync::Arc;

use ::arrow_ipc::CompressionType;
use ::arrow_ipc::writer::{FileWriter, IpcWriteOptions};
use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field};
use shardwise_core::dataset::{DType, FileFormat};

use super::*;

/// An Arrow IPC file of `batches`, compressed as asked.
pub(super) fn ipc(batches: &[RecordBatch], compression: Option<CompressionType>) -> Vec<u8> {
    let options = IpcWriteOptions::default().try_with_compression(compression).unwrap();
    let mut out = Vec::new();
    let mut w = FileWriter::try_new_with_options(&mut out, &batches[0].schema(), options).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
    drop(w);
    out
}

/// `a.arrow`: 30 sample rows in batches of 7, 7, 0, 7, 9.
fn thirty(name: &str, compression: Option<CompressionType>) -> Root {
    let root = Root::new(name);
    let batches = [sample(0, 7), sample(7, 7), sample(14, 0), sample(14, 7), sample(21, 9)];
    root.write("a.arrow", &ipc(&batches, compression));
    root
}

#[test]
fn whole_files_and_ranges_across_batches() {
    for compression in [None, Some(CompressionType::LZ4_FRAME), Some(CompressionType::ZSTD)] {
        let root = thirty("ipc-ranges", compression);
        let d = def(FileFormat::Arrow);
        let all = read(&root, &d, &req("a.arrow", 0, None), &big()).unwrap();
        assert_eq!(all.len(), 4, "one chunk per non-empty batch");
        let rows: Vec<i64> = all.iter().flat_map(|b| ids(b, "id")).collect();
        assert_eq!(rows, (0..30).collect::<Vec<_>>());
        let mid = read(&root, &d, &req("a.arrow", 3, Some(17)), &big()).unwrap();
        let sizes: Vec<usize> = mid.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, [4, 7, 3]);
        let rows: Vec<i64> = mid.iter().flat_map(|b| ids(b, "id")).collect();
        assert_eq!(rows, (3..17).collect::<Vec<_>>());
        let tail = read_one(&root, &d, &req("a.arrow", 14, None), &big()).unwrap();
        assert_eq!(ids(&tail, "id"), (14..30).collect::<Vec<_>>());
        let none = read(&root, &d, &req("a.arrow", 14, Some(14)), &big()).unwrap();
        assert_eq!(none.len(), 1);
        assert_eq!(none[0].num_rows(), 0);
        let mut r = req("a.arrow", 0, None);
        r.file_rows = Some(31);
        let e = RowReader::open(&root.roots, &d, &r, &big());
        fails(
            e,
            Code::FailedPrecondition,
            "file \"a.arrow\" has 30 rows; the dataset was registered with 31",
        );
        let e = RowReader::open(&root.roots, &d, &req("a.arrow", 0, Some(40)), &big());
        fails(e, Code::FailedPrecondition, "rows 0..40 were asked for");
    }
}

#[test]
fn projection_and_tensors() {
    let root = thirty("ipc-tensors", Some(CompressionType::LZ4_FRAME));
    let mut d = def(FileFormat::Arrow);
    d.columns = Some(vec!["list".into(), "id".into()]);
    d.tensors = vec![tensor("list", DType::Float32, &[1, 4]), tensor("vec", DType::Int8, &[4])];
    let b = read_one(&root, &d, &req("a.arrow", 5, Some(20)), &big()).unwrap();
    let f = b.schema().field(0).clone();
    assert_eq!(f.name(), "list");
    let item = Arc::new(Field::new_list_field(DataType::Float32, true));
    assert_eq!(f.data_type(), &DataType::FixedSizeList(item, 4));
    let shape = f.metadata().get("ARROW:extension:metadata").unwrap();
    assert_eq!(shape, "{\"shape\":[1,4]}");
    let row = b.column(0).as_fixed_size_list().value(1);
    assert_eq!(row.as_primitive::<Float32Type>().values(), &[6.0, 7.0, 8.0, 9.0]);
    assert_eq!(ids(&b, "id"), (5..20).collect::<Vec<_>>());
    d.columns = Some(vec!["vec".into()]);
    let e = RowReader::open(&root.roots, &d, &req("a.arrow", 0, None), &big());
    fails(
        e,
        Code::InvalidArgument,
        "file \"a.arrow\" column \"vec\": the dataset declares int8 [4] (4 values), the file has \
         fixed_size_list<float32>[4]",
    );
    d.columns = Some(vec!["id".into(), "x".into()]);
    let e = RowReader::open(&root.roots, &d, &req("a.arrow", 0, None), &big());
    fails(
        e,
        Code::InvalidArgument,
        "has no column \"x\" (it has \"id\", \"name\", \"vec\", \"list\")",
    );
}

#[test]
fn big_batches_are_cut_into_chunks() {
    let root = Root::new("ipc-chunks");
    let ids_col: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10_000));
    let batch = RecordBatch::try_from_iter([("id", ids_col)]).unwrap();
    root.write("big.arrow", &ipc(&[batch.clone(), batch], None));
    let d = def(FileFormat::Arrow);
    let chunks = read(&root, &d, &req("big.arrow", 500, Some(15_000)), &opts(8000, 1 << 20));
    let chunks = chunks.unwrap();
    assert!(chunks.iter().all(|c| c.num_rows() <= 1000), "8000 bytes: 1000 rows a chunk");
    assert!(chunks.len() >= 15);
    let rows: Vec<i64> = chunks.iter().flat_map(|b| ids(b, "id")).collect();
    let expected: Vec<i64> = (500..10_000).chain(0..5_000).collect();
    assert_eq!(rows, expected);
    assert!(chunks.iter().all(|c| batch_bytes(c) <= 8000));
}

#[test]
fn batches_larger_than_the_limit_are_refused() {
    let root = Root::new("ipc-limit");
    let zeros: ArrayRef = Arc::new(Int64Array::from(vec![0i64; 1 << 20]));
    let batch = RecordBatch::try_from_iter([("z", zeros)]).unwrap();
    let bytes = ipc(&[batch], Some(CompressionType::ZSTD));
    assert!(bytes.len() < 64 << 10, "{} bytes", bytes.len());
    root.write("z.arrow", &bytes);
    let d = def(FileFormat::Arrow);
    let e = read(&root, &d, &req("z.arrow", 0, None), &opts(1 << 20, 1 << 20));
    fails(e, Code::ResourceExhausted, "file \"z.arrow\": batch 0 decodes to");
    let all = read(&root, &d, &req("z.arrow", 0, None), &opts(1 << 20, 16 << 20)).unwrap();
    assert_eq!(all.iter().map(RecordBatch::num_rows).sum::<usize>(), 1 << 20);
}

#[test]
fn schemas_are_normalized() {
    let root = Root::new("ipc-normalized");
    let b = sample(0, 3);
    let md = HashMap::from([("k".to_owned(), "v".to_owned())]);
    let fields: Vec<Field> =
        b.schema().fields().iter().map(|f| f.as_ref().clone().with_metadata(md.clone())).collect();
    let schema = Arc::new(arrow_schema::Schema::new_with_metadata(fields, md));
    let b = RecordBatch::try_new(schema, b.columns().to_vec()).unwrap();
    root.write("m.arrow", &ipc(&[b], None));
    root.write("p.arrow", &ipc(&[sample(0, 3)], None));
    let d = def(FileFormat::Arrow);
    let m = read_one(&root, &d, &req("m.arrow", 0, None), &big()).unwrap();
    let p = read_one(&root, &d, &req("p.arrow", 0, None), &big()).unwrap();
    assert_eq!(m.schema(), p.schema());
    assert_eq!(m, p);
}
