//! Columnar `files` sources: their options, splits by rows, and pipelines moving rows they
//! cannot see (the fake files of [`provide_fake_rows`]: `{"file": path, "row": i}`).

use super::*;
use crate::code::Code;

fn parquet(paths: &[&str], extra: Value) -> DatasetDef {
    let mut files = json!({"paths": paths, "format": "parquet"});
    for (k, v) in extra.as_object().unwrap() {
        files[k] = v.clone();
    }
    def_json(json!({"source": {"files": files}}))
}

fn fake(files: &[(&str, u64)]) -> Files {
    files.iter().map(|(p, n)| ((*p).to_owned(), n.to_string().into_bytes())).collect()
}

fn row(path: &str, i: u64) -> Value {
    json!({"file": path, "row": i})
}

fn rows(path: &str, range: std::ops::Range<u64>) -> Vec<Value> {
    range.map(|i| row(path, i)).collect()
}

#[test]
fn options_decode_validate_and_encode_canonically() {
    let text = r#"{"source": {"files": {"paths": ["a.parquet"], "format": "parquet",
        "columns": ["image", "label"], "split": "rows", "rows": [10],
        "tensors": [{"name": "image", "dtype": "float32", "shape": [2, 3]},
                    {"name": "label", "dtype": "int64"}]}}}"#;
    let d = def(text);
    let SourceDef::Files(f) = &d.source else { panic!() };
    assert_eq!(f.format, FileFormat::Parquet);
    assert_eq!(f.columns.as_deref(), Some(&["image".to_owned(), "label".to_owned()][..]));
    assert_eq!(
        f.tensors[0],
        TensorDef { name: "image".into(), dtype: DType::Float32, shape: vec![2, 3] }
    );
    assert_eq!(f.tensors[1].shape, Vec::<u64>::new());
    assert_eq!(f.tensors[0].num_values(), 6);
    assert_eq!((f.split, f.row_positions()), (FileSplit::Rows, Some(&[10u64][..])));
    // The canonical form round-trips, and a text source keeps its old form (ids stay).
    assert_eq!(DatasetDef::from_json(&d.to_json()).unwrap(), d);
    let lines = def(r#"{"source": {"files": {"paths": ["a"], "format": "lines"}}}"#);
    assert_eq!(
        lines.to_json(),
        json!({"source": {"files": {"paths": ["a"], "format": "lines"}}, "transforms": []})
    );
    for name in FileFormat::NAMES {
        assert_eq!(FileFormat::from_name(name).unwrap().as_str(), name);
    }
    for name in DType::NAMES {
        assert_eq!(DType::from_name(name).unwrap().as_str(), name);
    }
}

#[test]
fn bad_options_are_refused_with_their_path() {
    let refused = |files: Value, needle: &str| {
        let err = DatasetDef::from_json(&json!({"source": {"files": files}})).unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");
        assert!(err.message().contains(needle), "{needle:?} not in {err}");
    };
    refused(json!({"paths": [], "format": "csv"}), "source.files.format must be one of");
    refused(json!({"paths": [], "format": "lines", "columns": ["a"]}), "applies to the columnar");
    refused(json!({"paths": [], "format": "jsonl", "tensors": []}), "applies to the columnar");
    refused(
        json!({"paths": [], "format": "arrow", "columns": ["a", "a"]}),
        "columns[1] names \"a\" a second time",
    );
    refused(
        json!({"paths": [], "format": "arrow", "columns": [""]}),
        "columns[0] must not be empty",
    );
    refused(json!({"paths": [], "format": "arrow", "columns": ["x".repeat(2000)]}), "bytes long");
    refused(json!({"paths": [], "format": "arrow", "split": "rows"}), "applies to parquet");
    refused(
        json!({"paths": [], "format": "parquet", "split": "bytes"}),
        "must be \"files\" or \"rows\"",
    );
    refused(
        json!({"paths": ["a"], "format": "parquet", "rows": [1]}),
        "only with \"split\": \"rows\"",
    );
    refused(
        json!({"paths": ["a"], "format": "parquet", "split": "rows", "rows": [1, 2]}),
        "2 entries for 1 paths",
    );
    refused(
        json!({"paths": ["a", "b"], "format": "parquet", "split": "rows", "rows": [u64::MAX, 1]}),
        "more than 2^64 - 1 rows",
    );
    let tensor = |t: Value| json!({"paths": [], "format": "parquet", "tensors": [t]});
    refused(tensor(json!({"name": "x", "dtype": "float8"})), "tensors[0].dtype must be one of");
    refused(
        tensor(json!({"name": "x", "dtype": "float32", "shape": [2, 0]})),
        "shape[1] must be at least 1",
    );
    refused(tensor(json!({"name": "x", "dtype": "float32", "shape": vec![1; 17]})), "at most 16");
    refused(
        tensor(json!({"name": "x", "dtype": "uint8", "shape": [65536, 65536]})),
        "values per row",
    );
    refused(tensor(json!({"name": "x", "dtype": "string", "shape": [2]})), "must be a scalar");
    refused(tensor(json!({"name": "x", "dtype": "int8", "extra": 1})), "unknown field");
    refused(
        json!({"paths": [], "format": "tfrecord", "columns": ["image"]}),
        "columns[0] is \"image\", which a tfrecord source does not have: its columns are \"record\"",
    );
    // A columnar source batches once: a batch of rows is a record batch.
    let d = def_json(json!({"source": {"files": {"paths": [], "format": "arrow"}},
        "transforms": [{"batch": {"size": 2}}, {"batch": {"size": 2}}]}));
    assert!(d.validate().unwrap_err().message().contains("a source of arrow files allows one"));
}

#[test]
fn splits_by_rows_cut_the_rows_of_all_files() {
    let d = parquet(&["a", "b", "c"], json!({"split": "rows", "rows": [7, 0, 5]}));
    assert_eq!(total_rows(&d.source), Some(12));
    assert_eq!(num_splits(&d.source, 5), 3);
    assert_eq!(split_at(&d.source, 5, 2), Some(json!({"start": 10, "stop": 12})));
    assert_eq!(chunk_at(&d.source, 5, 1), Some((5, 10)));
    assert_eq!(split_at(&d.source, 5, 3), None);
    assert_eq!(
        elements_of_split(&d.source, &json!({"start": 5, "stop": 10})),
        Ok(SplitElements::Rows { start: 5, stop: 10 })
    );
    let err = elements_of_split(&d.source, &json!({"start": 5, "stop": 13})).unwrap_err();
    assert!(err.message().contains("which has 12 rows"), "{err}");
    assert!(elements_of_split(&d.source, &json!("a")).is_err());
    // Without row counts (or split by files), a split is a file.
    let by_file = parquet(&["a", "b"], json!({}));
    assert_eq!(total_rows(&by_file.source), None);
    assert_eq!(num_splits(&by_file.source, 5), 2);
    assert_eq!(split_at(&by_file.source, 5, 1), Some(json!("b")));
}

#[test]
fn static_reads_give_every_row_of_every_file_in_chunks() {
    let files = fake(&[("a", 7), ("b", 0), ("c", 2)]);
    let d = parquet(&["a", "b", "c"], json!({}));
    let mut want = rows("a", 0..7);
    want.extend(rows("c", 0..2));
    assert_eq!(run_with(&d, Sharding::Off, &files).unwrap(), want);
    // FILE sharding: worker 1 of 2 reads file b only (empty).
    let shard = Sharding::File { num_workers: 2, worker_index: 1 };
    assert_eq!(run_with(&d, shard, &files).unwrap(), NONE);
    // shuffle and batch act on rows; a batch of rows is one element.
    let batched = with(d.clone(), json!([{"batch": {"size": 4}}]));
    let out = run_with(&batched, Sharding::Off, &files).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out[0], Value::Array(rows("a", 0..4)));
    assert_eq!(out[2], json!([row("c", 1)]));
    let shuffled = with(d, json!([{"shuffle": {"buffer": 4, "seed": 7}}]));
    let mut out = run_with(&shuffled, Sharding::Off, &files).unwrap();
    assert_ne!(out, want, "shuffled");
    out.sort_by_key(|v| (v["file"].as_str().unwrap().to_owned(), v["row"].as_u64().unwrap()));
    assert_eq!(out, want);
}

#[test]
fn dynamic_reads_by_rows_give_every_row_exactly_once_across_workers() {
    let files = fake(&[("a", 7), ("b", 0), ("c", 11), ("d", 1)]);
    let d = parquet(&["a", "b", "c", "d"], json!({"split": "rows", "rows": [7, 0, 11, 1]}));
    let mut want = rows("a", 0..7);
    want.extend(rows("c", 0..11));
    want.extend(rows("d", 0..1));
    for (workers, split_size) in [(1, 100), (2, 4), (3, 1), (3, 5)] {
        let outputs = run_dynamic_limited(&d, workers, split_size, &files, usize::MAX);
        let mut all: Vec<Value> = outputs.into_iter().flatten().collect();
        all.sort_by_key(|v| (v["file"].as_str().unwrap().to_owned(), v["row"].as_u64().unwrap()));
        assert_eq!(all, want, "{workers} workers, split_size {split_size}");
    }
    // Split by files, a worker reads whole files.
    let by_file = parquet(&["a", "b", "c", "d"], json!({}));
    let outputs = run_dynamic_limited(&by_file, 2, 1, &files, usize::MAX);
    let mut all: Vec<Value> = outputs.into_iter().flatten().collect();
    all.sort_by_key(|v| (v["file"].as_str().unwrap().to_owned(), v["row"].as_u64().unwrap()));
    assert_eq!(all, want);
}

fn fake_chunk(rows: u64) -> Chunk {
    Chunk::new(rows, rows * 8, std::sync::Arc::new(()))
}

#[test]
fn rows_are_asked_for_piece_by_piece_and_checked() {
    let d = parquet(&["a", "b"], json!({"split": "rows", "rows": [4, 6]}));
    let mut p = Pipeline::new(&d, Sharding::Dynamic).unwrap();
    assert_eq!(p.next(), Step::NeedSplit { repetition: 0 });
    p.provide_split(0, Some(json!({"start": 2, "stop": 8})));
    let want = |path: &str, start, stop| {
        Step::NeedRows(RowsRequest {
            path: path.into(),
            start,
            stop: Some(stop),
            file_rows: Some(if path == "a" { 4 } else { 6 }),
        })
    };
    assert_eq!(p.next(), want("a", 2, 4));
    assert_eq!(p.next(), want("a", 2, 4), "asked again until answered");
    // Rows past the request's stop are left out: the chunk ends the piece.
    p.provide_rows("a", fake_chunk(5), false);
    assert!(matches!(p.next(), Step::Element(Element::Row(Row { index: 0, .. }))));
    assert!(matches!(p.next(), Step::Element(Element::Row(Row { index: 1, .. }))));
    assert_eq!(p.next(), want("b", 0, 4));
    p.provide_rows("b", fake_chunk(3), false);
    for _ in 0..3 {
        assert!(matches!(p.next(), Step::Element(Element::Row(_))));
    }
    assert_eq!(p.next(), want("b", 3, 4));
    // A file that ends before the rows it was counted with is an error.
    p.provide_rows("b", fake_chunk(0), true);
    let Step::Error(e) = p.next() else { panic!() };
    assert!(e.message().contains("file \"b\" ended at row 3, before row 4"), "{e}");

    // Rows of another file, or rows nobody asked for, fail the pipeline.
    let d = parquet(&["a"], json!({}));
    let mut p = Pipeline::new(&d, Sharding::Off).unwrap();
    p.provide_rows("a", fake_chunk(1), true);
    let Step::Error(e) = p.next() else { panic!() };
    assert!(e.message().contains("did not ask for rows"), "{e}");
    let mut p = Pipeline::new(&d, Sharding::Off).unwrap();
    assert!(matches!(p.next(), Step::NeedRows(RowsRequest { start: 0, stop: None, .. })));
    p.provide_rows("b", fake_chunk(1), true);
    let Step::Error(e) = p.next() else { panic!() };
    assert!(e.message().contains("asked for \"a\""), "{e}");
    // An empty chunk that is not the last is refused.
    let mut p = Pipeline::new(&d, Sharding::Off).unwrap();
    p.next();
    p.provide_rows("a", fake_chunk(0), false);
    assert!(matches!(p.next(), Step::Error(_)));
    // A whole file split resumed part way starts at the rows already read.
    let mut p = Pipeline::new(&d, Sharding::Dynamic).unwrap();
    p.next();
    p.provide_split_at(
        0,
        Some((
            json!("a"),
            Some(crate::position::SplitPositions { start: 0, stop: 1, skip: 5, until: None }),
        )),
    );
    assert_eq!(
        p.next(),
        Step::NeedRows(RowsRequest { path: "a".into(), start: 5, stop: None, file_rows: None })
    );
}

#[test]
fn rows_weigh_their_share_of_the_chunk() {
    let chunk = std::sync::Arc::new(Chunk::new(4, 1000, std::sync::Arc::new(())));
    let row = |index| Row { chunk: chunk.clone(), index };
    assert_eq!(Element::Row(row(0)).approx_bytes(), 250);
    assert_eq!(Element::Rows(vec![row(0), row(1)]).approx_bytes(), 516);
    assert_eq!(Chunk::new(0, 0, std::sync::Arc::new(())).row_bytes(), 1);
    assert_eq!(row(1), row(1));
    assert_ne!(
        row(1),
        Row { chunk: std::sync::Arc::new(Chunk::new(4, 1000, std::sync::Arc::new(()))), index: 1 }
    );
    // A shuffle buffer of rows is bounded by the pipeline's byte budget like any other.
    let d = with(parquet(&["a"], json!({})), json!([{"shuffle": {"buffer": 1000, "seed": 1}}]));
    let mut p =
        Pipeline::with_limits(&d, Sharding::Off, Limits { max_buffered_bytes: 1000 }).unwrap();
    p.next();
    p.provide_rows("a", Chunk::new(10, 10_000, std::sync::Arc::new(())), true);
    let Step::Error(e) = p.next() else { panic!() };
    assert_eq!(e.code(), Code::ResourceExhausted);
}
