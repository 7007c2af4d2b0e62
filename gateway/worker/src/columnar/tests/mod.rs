//! Tests of the columnar readers: files written with the Arrow and Parquet writers (and
//! TFRecord framed by hand) into a data root, read back through [`RowReader`].

mod arrow_files;
mod hostile;
mod parquet_files;
mod tfrecord_files;

use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{
    ArrayRef, FixedSizeListArray, Float32Array, Int64Array, ListArray, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema};
use shardwise_core::dataset::{DType, FileFormat, FilesDef, RowsRequest, TensorDef};
use shardwise_http::Problem;

use super::*;
use crate::DataRoots;

/// A data root in a fresh temporary directory, removed on drop.
pub(super) struct Root {
    pub(super) dir: PathBuf,
    pub(super) roots: DataRoots,
}

impl Root {
    pub(super) fn new(name: &str) -> Root {
        Root::with_max(name, 64 << 20)
    }

    pub(super) fn with_max(name: &str, max_file_bytes: u64) -> Root {
        let dir =
            std::env::temp_dir().join(format!("shardwise-columnar-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let roots = DataRoots::new(std::slice::from_ref(&dir), max_file_bytes).unwrap();
        Root { dir, roots }
    }

    pub(super) fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.dir.join(name), bytes).unwrap();
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(super) fn opts(chunk_bytes: u64, max_chunk_bytes: u64) -> ReadOptions {
    ReadOptions {
        chunk_bytes,
        max_chunk_bytes,
        max_footer_bytes: crate::columnar::DEFAULT_MAX_FOOTER_BYTES,
    }
}

/// Generous options: one chunk per row group or batch (for small files).
pub(super) fn big() -> ReadOptions {
    opts(1 << 20, 64 << 20)
}

pub(super) fn req(path: &str, start: u64, stop: Option<u64>) -> RowsRequest {
    RowsRequest { path: path.to_owned(), start, stop, file_rows: None }
}

pub(super) fn def(format: FileFormat) -> FilesDef {
    FilesDef::new(vec![], format)
}

pub(super) fn tensor(name: &str, dtype: DType, shape: &[u64]) -> TensorDef {
    TensorDef { name: name.to_owned(), dtype, shape: shape.to_vec() }
}

/// Every chunk of a range, checking `position` and that only the final chunk is `last`.
pub(super) fn read(
    root: &Root,
    def: &FilesDef,
    req: &RowsRequest,
    opts: &ReadOptions,
) -> Result<Vec<RecordBatch>, Problem> {
    let mut reader = RowReader::open(&root.roots, def, req, opts)?;
    assert_eq!(reader.position(), req.start);
    let mut chunks = Vec::new();
    for _ in 0..1_000_000 {
        let before = reader.position();
        let (batch, last) = reader.next_chunk()?;
        assert_eq!(reader.position(), before + batch.num_rows() as u64);
        assert_eq!(batch.schema(), reader.schema());
        chunks.push(batch);
        if last {
            let (after, still_last) = reader.next_chunk()?;
            assert!(still_last && after.num_rows() == 0, "after the last chunk");
            return Ok(chunks);
        }
        assert!(chunks.last().unwrap().num_rows() > 0, "a chunk that is not the last has rows");
    }
    panic!("no last chunk");
}

/// The chunks of a range as one batch.
pub(super) fn read_one(
    root: &Root,
    def: &FilesDef,
    req: &RowsRequest,
    opts: &ReadOptions,
) -> Result<RecordBatch, Problem> {
    let chunks = read(root, def, req, opts)?;
    let schema = chunks[0].schema();
    Ok(arrow_select::concat::concat_batches(&schema, &chunks).unwrap())
}

pub(super) fn ids(batch: &RecordBatch, column: &str) -> Vec<i64> {
    batch.column_by_name(column).unwrap().as_primitive::<Int64Type>().values().to_vec()
}

/// The error of `result`, whose code and message must be as given (`detail` a substring).
#[track_caller]
pub(super) fn fails<T: std::fmt::Debug>(result: Result<T, Problem>, code: Code, detail: &str) {
    let e = result.expect_err("an error");
    assert_eq!(e.code, code, "{}", e.detail);
    assert!(e.detail.contains(detail), "{:?} does not contain {detail:?}", e.detail);
}

/// A batch of `n` rows from row `first`: `id` (int64), `name` (string), `vec`
/// (fixed_size_list<float32>[4], row i holding i..i+4) and `list` (list<float32>, 4 values a
/// row).
pub(super) fn sample(first: i64, n: usize) -> RecordBatch {
    let ids: Vec<i64> = (first..first + n as i64).collect();
    let names: Vec<String> = ids.iter().map(|i| format!("row-{i}")).collect();
    let values: Vec<f32> = ids.iter().flat_map(|i| (0..4).map(move |k| (*i + k) as f32)).collect();
    let item = Arc::new(Field::new_list_field(DataType::Float32, true));
    let vec = FixedSizeListArray::try_new(
        item.clone(),
        4,
        Arc::new(Float32Array::from(values.clone())),
        None,
    )
    .unwrap();
    let offsets = arrow_buffer::OffsetBuffer::from_lengths(std::iter::repeat_n(4, n));
    let list =
        ListArray::try_new(item, offsets, Arc::new(Float32Array::from(values)), None).unwrap();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids)),
        Arc::new(StringArray::from(names)),
        Arc::new(vec),
        Arc::new(list),
    ];
    RecordBatch::try_new(sample_schema(), columns).unwrap()
}

pub(super) fn sample_schema() -> Arc<Schema> {
    let item = Arc::new(Field::new_list_field(DataType::Float32, true));
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("vec", DataType::FixedSizeList(item.clone(), 4), false),
        Field::new("list", DataType::List(item), false),
    ]))
}

#[test]
fn a_reader_can_move_between_threads() {
    fn send<T: Send>() {}
    send::<RowReader>();
}

#[test]
fn non_columnar_formats_are_refused() {
    let root = Root::new("not-columnar");
    root.write("a.txt", b"x\n");
    let e = RowReader::open(&root.roots, &def(FileFormat::Lines), &req("a.txt", 0, None), &big());
    fails(e, Code::InvalidArgument, "is not read as rows");
}

#[test]
fn files_outside_the_roots_and_too_large_are_refused() {
    let root = Root::with_max("roots", 10);
    root.write("big.parquet", &[0; 11]);
    let e = RowReader::open(
        &root.roots,
        &def(FileFormat::Parquet),
        &req("big.parquet", 0, None),
        &big(),
    );
    fails(e, Code::ResourceExhausted, "--max-file-bytes");
    let e = RowReader::open(
        &root.roots,
        &def(FileFormat::Parquet),
        &req("/etc/passwd", 0, None),
        &big(),
    );
    fails(e, Code::FailedPrecondition, "not a readable file under");
    let e = parquet_row_counts(&root.roots, &["missing.parquet".to_owned()]);
    fails(e, Code::FailedPrecondition, "not a readable file under");
}
