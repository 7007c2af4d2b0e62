//! Parquet files.

use std::collections::HashMap;
use std::sync::Arc;

use ::parquet::arrow::ArrowWriter;
use ::parquet::basic::{Compression, Encoding, ZstdLevel};
use ::parquet::file::properties::WriterProperties;
use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, ArrayRef, Int64Array, ListArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use shardwise_core::dataset::{DType, FileFormat};

use super::*;

/// A Parquet file of `batches`, in row groups of at most `group_rows` rows.
pub(super) fn parquet(batches: &[RecordBatch], group_rows: usize) -> Vec<u8> {
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(group_rows))
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    write(batches, props)
}

fn write(batches: &[RecordBatch], props: WriterProperties) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = ArrowWriter::try_new(&mut out, batches[0].schema(), Some(props)).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.close().unwrap();
    out
}

/// `a.parquet`: 30 sample rows in 3 row groups of 10.
fn thirty(name: &str) -> Root {
    let root = Root::new(name);
    root.write("a.parquet", &parquet(&[sample(0, 30)], 10));
    root
}

#[test]
fn whole_files_and_ranges_across_row_groups() {
    let root = thirty("pq-ranges");
    let d = def(FileFormat::Parquet);
    let all = read_one(&root, &d, &req("a.parquet", 0, None), &big()).unwrap();
    assert_eq!(ids(&all, "id"), (0..30).collect::<Vec<_>>());
    assert_eq!(all.schema().fields().len(), 4);
    assert_eq!(all.column_by_name("name").unwrap().as_string::<i32>().value(7), "row-7");
    // Mid row group to mid row group, and from mid row group to the end.
    let mid = read(&root, &d, &req("a.parquet", 5, Some(25)), &big()).unwrap();
    let rows: Vec<i64> = mid.iter().flat_map(|b| ids(b, "id")).collect();
    assert_eq!(rows, (5..25).collect::<Vec<_>>());
    assert_eq!(mid.len(), 3, "one chunk per row group: {mid:?}");
    let tail = read_one(&root, &d, &req("a.parquet", 12, None), &big()).unwrap();
    assert_eq!(ids(&tail, "id"), (12..30).collect::<Vec<_>>());
    let one = read_one(&root, &d, &req("a.parquet", 29, Some(30)), &big()).unwrap();
    assert_eq!(ids(&one, "id"), [29]);
    // No rows: one empty batch, the last.
    for (start, stop) in [(7, Some(7)), (30, None), (30, Some(30))] {
        let chunks = read(&root, &d, &req("a.parquet", start, stop), &big()).unwrap();
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].num_rows(), 0);
        assert_eq!(chunks[0].schema(), all.schema());
    }
}

#[test]
fn row_counts_that_changed_are_refused() {
    let root = thirty("pq-counts");
    let d = def(FileFormat::Parquet);
    let mut r = req("a.parquet", 0, Some(10));
    r.file_rows = Some(29);
    let e = RowReader::open(&root.roots, &d, &r, &big());
    fails(
        e,
        Code::FailedPrecondition,
        "file \"a.parquet\" has 30 rows; the dataset was registered with 29 (it changed since)",
    );
    r.file_rows = Some(30);
    assert_eq!(read_one(&root, &d, &r, &big()).unwrap().num_rows(), 10);
    let e = RowReader::open(&root.roots, &d, &req("a.parquet", 20, Some(31)), &big());
    fails(e, Code::FailedPrecondition, "file \"a.parquet\" has 30 rows; rows 20..31 were asked");
    let e = RowReader::open(&root.roots, &d, &req("a.parquet", 31, None), &big());
    fails(e, Code::FailedPrecondition, "rows 31.. were asked for");
    assert_eq!(parquet_row_counts(&root.roots, &["a.parquet".to_owned()]).unwrap(), [30]);
}

#[test]
fn row_counts_come_from_footers() {
    let root = Root::new("pq-row-counts");
    root.write("a.parquet", &parquet(&[sample(0, 7)], 3));
    root.write("b.parquet", &parquet(&[sample(0, 0)], 3));
    root.write("c.parquet", &parquet(&[sample(0, 100)], 1000));
    let paths: Vec<String> = ["a", "b", "c", "a"].iter().map(|p| format!("{p}.parquet")).collect();
    assert_eq!(parquet_row_counts(&root.roots, &paths).unwrap(), [7, 0, 100, 7]);
    root.write("bad.parquet", b"PAR1 not really PAR1");
    let e = parquet_row_counts(&root.roots, &["a.parquet".to_owned(), "bad.parquet".to_owned()]);
    fails(e, CORRUPT, "file \"bad.parquet\"");
    // An empty file reads as no rows.
    let chunks = read(&root, &def(FileFormat::Parquet), &req("b.parquet", 0, None), &big());
    assert_eq!(chunks.unwrap()[0].num_rows(), 0);
}

/// Footers are walked before they are decoded: a footer over `max_footer_bytes`, or whose
/// decoded metadata would not fit a chunk's bound, is refused; a dispatcher's counts come
/// from the walk, are remembered while the file is unchanged, and stop when cancelled.
#[test]
fn footers_are_bounded_walked_and_remembered() {
    use std::sync::atomic::AtomicBool;
    let root = Root::new("pq-footers");
    root.write("a.parquet", &parquet(&[sample(0, 300)], 1));
    let d = def(FileFormat::Parquet);
    // 300 row groups of 4 column chunks: about 0.6 MB decoded.
    let e = RowReader::open(&root.roots, &d, &req("a.parquet", 0, None), &opts(64, 200_000));
    fails(e, Code::ResourceExhausted, "its footer (300 row groups of 1200 column chunks");
    let mut small = big();
    small.max_footer_bytes = 100;
    let e = RowReader::open(&root.roots, &d, &req("a.parquet", 0, None), &small);
    fails(e, Code::ResourceExhausted, "footers of at most 100 bytes are read (--max-footer-bytes)");
    assert!(RowReader::open(&root.roots, &d, &req("a.parquet", 0, None), &big()).is_ok());

    let counts = RowCounts::new(root.roots.clone(), 1 << 20, 3);
    let never = AtomicBool::new(false);
    let paths = |names: &[&str]| names.iter().map(|n| format!("{n}.parquet")).collect::<Vec<_>>();
    assert_eq!(counts.count(&paths(&["a", "a"]), &never).unwrap(), [300, 300]);
    // Another file of the same name is another identity: read again.
    root.write("a.parquet", &parquet(&[sample(0, 7)], 3));
    assert_eq!(counts.count(&paths(&["a"]), &never).unwrap(), [7]);
    let e = counts.count(&paths(&["a", "a", "a", "a"]), &never);
    fails(e, Code::ResourceExhausted, "at most 3 (--max-footer-files)");
    let e = counts.count(&paths(&["a"]), &AtomicBool::new(true));
    fails(e, Code::Unavailable, "the caller went away");
    let tight = RowCounts::new(root.roots.clone(), 100, 3);
    fails(tight.count(&paths(&["a"]), &never), Code::ResourceExhausted, "--max-footer-bytes");
}

#[test]
fn columns_are_projected_in_the_order_asked() {
    let root = thirty("pq-projection");
    let mut d = def(FileFormat::Parquet);
    d.columns = Some(vec!["name".into(), "id".into()]);
    let b = read_one(&root, &d, &req("a.parquet", 3, Some(14)), &big()).unwrap();
    let schema = b.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["name", "id"]);
    assert_eq!(ids(&b, "id"), (3..14).collect::<Vec<_>>());
    d.columns = Some(vec![]);
    let b = read_one(&root, &d, &req("a.parquet", 3, Some(14)), &big()).unwrap();
    assert_eq!((b.num_columns(), b.num_rows()), (0, 11));
    d.columns = Some(vec!["id".into(), "nope".into()]);
    let e = RowReader::open(&root.roots, &d, &req("a.parquet", 0, None), &big());
    fails(
        e,
        Code::InvalidArgument,
        "file \"a.parquet\" has no column \"nope\" (it has \"id\", \"name\", \"vec\", \"list\")",
    );
}

#[test]
fn declared_tensors_become_fixed_shape_tensors() {
    let root = thirty("pq-tensors");
    let mut d = def(FileFormat::Parquet);
    d.tensors = vec![
        tensor("vec", DType::Float32, &[2, 2]),
        tensor("list", DType::Float32, &[4]),
        tensor("id", DType::Int64, &[]),
        tensor("name", DType::String, &[]),
    ];
    let b = read_one(&root, &d, &req("a.parquet", 8, Some(23)), &big()).unwrap();
    let schema = b.schema();
    for (name, shape) in [("vec", "[2,2]"), ("list", "[4]")] {
        let f = schema.field_with_name(name).unwrap();
        let item = Arc::new(Field::new_list_field(DataType::Float32, true));
        assert_eq!(f.data_type(), &DataType::FixedSizeList(item, 4));
        assert!(!f.is_nullable());
        let expected = HashMap::from([
            ("ARROW:extension:name".to_owned(), "arrow.fixed_shape_tensor".to_owned()),
            ("ARROW:extension:metadata".to_owned(), format!("{{\"shape\":{shape}}}")),
        ]);
        assert_eq!(f.metadata(), &expected);
        let col = b.column_by_name(name).unwrap().as_fixed_size_list();
        let row = col.value(2);
        assert_eq!(row.as_primitive::<Float32Type>().values(), &[10.0, 11.0, 12.0, 13.0]);
    }
    assert!(schema.field_with_name("id").unwrap().metadata().is_empty());
    assert!(schema.metadata().is_empty());
    // A tensor not in the projection is neither read nor checked.
    d.columns = Some(vec!["id".into()]);
    d.tensors.push(tensor("absent", DType::Bool, &[]));
    assert_eq!(read_one(&root, &d, &req("a.parquet", 0, None), &big()).unwrap().num_columns(), 1);
    d.columns = None;
    let e = RowReader::open(&root.roots, &d, &req("a.parquet", 0, None), &big());
    fails(e, Code::InvalidArgument, "has no column \"absent\"");
}

#[test]
fn tensors_that_disagree_with_the_file_name_the_column() {
    let root = thirty("pq-mismatch");
    let mut d = def(FileFormat::Parquet);
    let cases = [
        (
            tensor("list", DType::Int64, &[2, 2]),
            "column \"list\": the dataset declares int64 [2, 2] (4 values), the file has \
             list<float32>",
        ),
        (
            tensor("vec", DType::Float32, &[5]),
            "column \"vec\": the dataset declares float32 [5] (5 values), the file has \
             fixed_size_list<float32>[4]",
        ),
        (
            tensor("id", DType::Float32, &[]),
            "column \"id\": the dataset declares float32 (a scalar), the file has int64",
        ),
        (
            tensor("name", DType::Binary, &[]),
            "column \"name\": the dataset declares binary (a scalar), the file has string",
        ),
        (
            tensor("id", DType::Int64, &[1]),
            "column \"id\": the dataset declares int64 [1] (1 value), the file has int64",
        ),
    ];
    for (t, message) in cases {
        d.tensors = vec![t];
        let e = RowReader::open(&root.roots, &d, &req("a.parquet", 0, None), &big());
        fails(e, Code::InvalidArgument, &format!("file \"a.parquet\" {message}"));
    }
    // A list whose rows hold other counts: refused at the row, only if the row is read.
    let item = Arc::new(Field::new_list_field(DataType::Float32, true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("image", DataType::List(item.clone()), true),
    ]));
    let lengths = [4, 4, 4, 3, 4, 4];
    let values = arrow_array::Float32Array::from(vec![0.5; 23]);
    let offsets = arrow_buffer::OffsetBuffer::from_lengths(lengths);
    let nulls = arrow_buffer::NullBuffer::from(vec![true, true, true, true, true, false]);
    let list = ListArray::try_new(item, offsets, Arc::new(values), Some(nulls)).unwrap();
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..6));
    let batch = RecordBatch::try_new(schema, vec![ids, Arc::new(list)]).unwrap();
    root.write("b.parquet", &parquet(&[batch], 2));
    d.tensors = vec![tensor("image", DType::Float32, &[2, 2])];
    let ok = read_one(&root, &d, &req("b.parquet", 0, Some(3)), &big()).unwrap();
    assert_eq!(ok.num_rows(), 3);
    let e = read(&root, &d, &req("b.parquet", 0, None), &big());
    fails(
        e,
        Code::InvalidArgument,
        "file \"b.parquet\" column \"image\": the dataset declares float32 [2, 2] (4 values), \
         row 3 has 3 values",
    );
    let e = read(&root, &d, &req("b.parquet", 4, None), &big());
    fails(e, Code::InvalidArgument, "row 5 is null");
}

#[test]
fn files_of_one_layout_give_equal_schemas() {
    let root = Root::new("pq-normalized");
    let with_metadata = |pandas: &str, id: &str| {
        let b = sample(0, 5);
        let fields: Vec<Field> = b
            .schema()
            .fields()
            .iter()
            .map(|f| {
                let md = HashMap::from([("PARQUET:field_id".to_owned(), id.to_owned())]);
                f.as_ref().clone().with_metadata(md)
            })
            .collect();
        let md = HashMap::from([("pandas".to_owned(), pandas.to_owned())]);
        let schema = Arc::new(Schema::new_with_metadata(fields, md));
        RecordBatch::try_new(schema, b.columns().to_vec()).unwrap()
    };
    root.write("a.parquet", &parquet(&[with_metadata("{\"a\":1}", "1")], 10));
    root.write("b.parquet", &parquet(&[with_metadata("{\"b\":2}", "7")], 10));
    let d = def(FileFormat::Parquet);
    let a = read_one(&root, &d, &req("a.parquet", 0, None), &big()).unwrap();
    let b = read_one(&root, &d, &req("b.parquet", 0, None), &big()).unwrap();
    assert_eq!(a.schema(), b.schema());
    assert!(a.schema().metadata().is_empty());
    assert!(a.schema().fields().iter().all(|f| f.metadata().is_empty()));
    assert_eq!(a, b);
}

#[test]
fn chunks_follow_chunk_bytes() {
    let root = Root::new("pq-chunks");
    let n = 20_000;
    let id: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n));
    let names: ArrayRef =
        Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("name-{i:08}"))));
    let batch = RecordBatch::try_from_iter([("id", id), ("name", names)]).unwrap();
    root.write("big.parquet", &parquet(&[batch], 8_000));
    let d = def(FileFormat::Parquet);
    let chunks = read(&root, &d, &req("big.parquet", 100, Some(19_900)), &opts(16 << 10, 1 << 20));
    let chunks = chunks.unwrap();
    assert!(chunks.len() > 20, "{} chunks", chunks.len());
    let rows: Vec<i64> = chunks.iter().flat_map(|b| ids(b, "id")).collect();
    assert_eq!(rows, (100..19_900).collect::<Vec<_>>());
    for c in &chunks[..chunks.len() - 1] {
        let bytes = batch_bytes(c);
        assert!(bytes <= 64 << 10, "a chunk of {bytes} bytes for a target of 16 KiB");
    }
}

#[test]
fn rows_larger_than_the_limit_are_refused() {
    let root = Root::new("pq-large-rows");
    let names: ArrayRef =
        Arc::new(StringArray::from_iter_values((0..10).map(|i| "x".repeat(5000 + i))));
    let batch = RecordBatch::try_from_iter([("name", names)]).unwrap();
    let props = WriterProperties::builder().set_dictionary_enabled(false).build();
    root.write("a.parquet", &write(&[batch], props));
    let d = def(FileFormat::Parquet);
    assert_eq!(
        read_one(&root, &d, &req("a.parquet", 0, None), &opts(1, 1 << 20)).unwrap().num_rows(),
        10
    );
    let e = read(&root, &d, &req("a.parquet", 0, None), &opts(1, 4000));
    fails(
        e,
        Code::ResourceExhausted,
        "file \"a.parquet\": row group 0 column \"name\" page 0 decodes to",
    );
}

/// A page that decompresses to far more than the file (zeros, zstd): refused from its
/// header, before it is decompressed.
#[test]
fn a_page_declaring_more_than_the_limit_is_refused_before_decompression() {
    let root = Root::new("pq-bomb");
    let zeros: ArrayRef = Arc::new(Int64Array::from(vec![0i64; 1 << 20]));
    let batch = RecordBatch::try_from_iter([("z", zeros)]).unwrap();
    let props = WriterProperties::builder()
        .set_dictionary_enabled(false)
        .set_encoding(Encoding::PLAIN)
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_data_page_size_limit(16 << 20)
        .set_data_page_row_count_limit(1 << 21)
        .set_write_batch_size(1 << 21)
        .build();
    let bytes = write(&[batch], props);
    assert!(bytes.len() < 64 << 10, "{} bytes", bytes.len());
    root.write("z.parquet", &bytes);
    let d = def(FileFormat::Parquet);
    let e = read(&root, &d, &req("z.parquet", 0, None), &opts(1 << 20, 1 << 20));
    fails(e, Code::ResourceExhausted, "row group 0 column \"z\" page 0 decodes to 8388608 bytes");
    let all = read(&root, &d, &req("z.parquet", 0, None), &opts(1 << 20, 64 << 20)).unwrap();
    assert_eq!(all.iter().map(RecordBatch::num_rows).sum::<usize>(), 1 << 20);
    assert!(all.len() >= 8, "about 1 MiB a chunk: {} chunks", all.len());
    let _ = all[0].column(0).len();
}

/// Whether a type carries field metadata at any depth.
fn has_metadata(t: &DataType) -> bool {
    let field = |f: &Arc<Field>| !f.metadata().is_empty() || has_metadata(f.data_type());
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => field(f),
        DataType::Map(f, _) => field(f),
        DataType::Struct(fields) => fields.iter().any(field),
        _ => false,
    }
}

/// Structs, lists and maps pass through, without the field metadata they carry at any depth
/// (Parquet and Arrow IPC files alike).
#[test]
fn nested_columns_pass_through_without_metadata() {
    use arrow_array::builder::{Int64Builder, MapBuilder, StringBuilder};
    use arrow_array::{Int32Array, StructArray};

    let root = Root::new("pq-nested");
    let md = HashMap::from([("PARQUET:field_id".to_owned(), "9".to_owned())]);
    let item = Arc::new(Field::new_list_field(DataType::Utf8, true).with_metadata(md.clone()));
    let tags = ListArray::try_new(
        item.clone(),
        arrow_buffer::OffsetBuffer::from_lengths([2, 0, 1]),
        Arc::new(StringArray::from(vec!["a", "b", "c"])),
        None,
    )
    .unwrap();
    let fields = vec![
        Arc::new(Field::new("n", DataType::Int32, false).with_metadata(md.clone())),
        Arc::new(Field::new("tags", DataType::List(item), false)),
    ];
    let columns: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(vec![1, 2, 3])), Arc::new(tags)];
    let s = StructArray::try_new(fields.into(), columns, None).unwrap();
    let mut m = MapBuilder::new(None, StringBuilder::new(), Int64Builder::new());
    for i in 0..3 {
        m.keys().append_value(format!("k{i}"));
        m.values().append_value(i);
        m.append(true).unwrap();
    }
    let batch =
        RecordBatch::try_from_iter([("s", Arc::new(s) as ArrayRef), ("m", Arc::new(m.finish()))])
            .unwrap();
    assert!(has_metadata(batch.schema().field(0).data_type()));
    root.write("n.parquet", &parquet(std::slice::from_ref(&batch), 2));
    root.write("n.arrow", &super::arrow_files::ipc(std::slice::from_ref(&batch), None));
    for (format, name) in [(FileFormat::Parquet, "n.parquet"), (FileFormat::Arrow, "n.arrow")] {
        let out = read_one(&root, &def(format), &req(name, 0, None), &big()).unwrap();
        for (f, (column, original)) in
            out.schema().fields().iter().zip(out.columns().iter().zip(batch.columns()))
        {
            assert!(!has_metadata(f.data_type()) && f.metadata().is_empty(), "{name}: {f:?}");
            let stripped = super::super::schema::strip(original.data_type());
            let expected = super::super::schema::retype(original, &stripped).unwrap();
            assert_eq!(column, &expected, "{name}");
        }
    }
}

#[test]
fn tensors_stored_as_raw_bytes_become_fixed_shape_tensors() {
    // A row's six float32 values, little-endian, as fixed-size binary and as binary.
    let root = Root::new("pq-raw-bytes");
    let row = |i: i64| -> Vec<u8> {
        (0..6).flat_map(|k| (i as f32 * 10.0 + k as f32).to_le_bytes()).collect()
    };
    let rows: Vec<Vec<u8>> = (0..8).map(row).collect();
    let fixed = arrow_array::FixedSizeBinaryArray::try_from_iter(rows.iter()).unwrap();
    let binary = arrow_array::BinaryArray::from_iter_values(rows.iter());
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("fixed", DataType::FixedSizeBinary(24), false),
        Field::new("binary", DataType::Binary, false),
    ]));
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..8));
    let batch = RecordBatch::try_new(schema, vec![ids, Arc::new(fixed), Arc::new(binary)]);
    root.write("raw.parquet", &parquet(&[batch.unwrap()], 3));
    let mut d = def(FileFormat::Parquet);
    d.tensors =
        vec![tensor("fixed", DType::Float32, &[2, 3]), tensor("binary", DType::Float32, &[6])];
    // From row 2 (inside the first row group) on: the values start part way into the bytes.
    let all = read(&root, &d, &req("raw.parquet", 2, None), &big()).unwrap();
    let got: Vec<RecordBatch> = all;
    for name in ["fixed", "binary"] {
        let values: Vec<f32> = got
            .iter()
            .flat_map(|b| {
                let col = b.column_by_name(name).unwrap().as_fixed_size_list();
                assert_eq!(col.value_length(), 6, "{name}");
                col.values().as_primitive::<Float32Type>().values().to_vec()
            })
            .collect();
        let want: Vec<f32> =
            (2..8).flat_map(|i| (0..6).map(move |k| i as f32 * 10.0 + k as f32)).collect();
        assert_eq!(values, want, "{name}");
    }
    // Declared with another size, or rows of other lengths: refused, naming the column.
    d.tensors = vec![tensor("fixed", DType::Float32, &[5])];
    let e = RowReader::open(&root.roots, &d, &req("raw.parquet", 0, None), &big());
    fails(
        e,
        Code::InvalidArgument,
        "column \"fixed\": the dataset declares float32 [5] (5 values), the file has \
         fixed_size_binary",
    );
    d.tensors = vec![tensor("binary", DType::Float64, &[6])];
    let e = read(&root, &d, &req("raw.parquet", 0, None), &big());
    fails(e, Code::InvalidArgument, "row 0 has 24 bytes, not 48");
}

#[test]
fn raw_bytes_tensors_are_views_of_the_decoded_bytes() {
    let rows: Vec<[u8; 8]> = (0..4u8).map(|i| [i; 8]).collect();
    let fixed = arrow_array::FixedSizeBinaryArray::try_from_iter(rows.iter()).unwrap();
    let schema = Schema::new(vec![Field::new("x", DataType::FixedSizeBinary(8), false)]);
    let mut d = def(FileFormat::Parquet);
    d.tensors = vec![tensor("x", DType::Int32, &[2])];
    let plan = crate::columnar::schema::Plan::new("m.parquet", &schema, &d).unwrap();
    let input: ArrayRef = Arc::new(fixed.slice(1, 3));
    let out = plan.apply(std::slice::from_ref(&input), 3, 1).unwrap();
    let values = out.column(0).as_fixed_size_list().values().to_data();
    let bytes = input.as_fixed_size_binary().value_data().as_ptr();
    assert_eq!(values.buffers()[0].as_ptr(), bytes, "no copy of the values");
    assert_eq!(
        out.column(0)
            .as_fixed_size_list()
            .value(0)
            .as_primitive::<arrow_array::types::Int32Type>()
            .values(),
        &[0x0101_0101, 0x0101_0101]
    );
}
