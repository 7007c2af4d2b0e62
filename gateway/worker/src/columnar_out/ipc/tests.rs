use arrow_array::{ArrayRef, Int64Array};
use arrow_schema::{DataType, Field};
use shardwise_client::arrow_stream::decode_stream;
use shardwise_core::dataset::Element;
use shardwise_core::position::SourceRange;

use super::super::fixtures::{chunk, elements, rows, sample};
use super::super::{record_batches, schema_of};
use super::*;
use shardwise_http::Code;

fn runs() -> Vec<OriginRun> {
    let split = |start, stop| SourceRange { start, stop };
    vec![
        OriginRun { split: split(0, 100), offset: 40, count: 60, end: true },
        OriginRun { split: split(300, 400), offset: 0, count: 3, end: false },
    ]
}

#[test]
fn the_compression_header_is_read_like_accept_encoding() {
    let cases: [(&[&str], Option<IpcCompression>); 13] = [
        (&[], None),
        (&["lz4"], Some(IpcCompression::Lz4)),
        (&["zstd"], Some(IpcCompression::Zstd)),
        (&[" ZSTD , lz4"], Some(IpcCompression::Zstd)),
        // Weights: the highest wins, the first listed among equals; 0 is "not this".
        (&["lz4;q=0.1, zstd"], Some(IpcCompression::Zstd)),
        (&["lz4;q=0.5, zstd;q=0.5"], Some(IpcCompression::Lz4)),
        (&["zstd;q=0, lz4;q=0.001"], Some(IpcCompression::Lz4)),
        (&["none;q=0.2, zstd; Q=1.0"], Some(IpcCompression::Zstd)),
        (&["br, gzip", "zstd"], Some(IpcCompression::Zstd)),
        (&["none, zstd"], None),
        (&["", ",,;", "Lz4"], Some(IpcCompression::Lz4)),
        (&["", " , "], None),
        (&["bogus, zstd"], Some(IpcCompression::Zstd)),
    ];
    for (values, want) in cases {
        assert_eq!(parse_compression(values.iter().copied()).unwrap(), want, "{values:?}");
    }
    // Nothing acceptable that the worker serves, or a weight that is not one: refused, naming
    // what it serves (or the weight).
    for values in [&["brotli"][..], &["lz4x, xzstd"], &["zstd;q=0"], &["none;q=0, gzip"]] {
        let e = parse_compression(values.iter().copied()).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument, "{values:?}");
        assert!(e.detail.contains("ask for lz4, zstd or none"), "{}", e.detail);
    }
    for bad in ["zstd;q=2", "zstd;q=-1", "zstd;q=0.1234", "zstd;q=x"] {
        let e = parse_compression([bad]).unwrap_err();
        assert!(e.detail.contains("is not a number from 0 to 1"), "{bad}: {}", e.detail);
    }
    assert_eq!((IpcCompression::Lz4.as_str(), IpcCompression::Zstd.as_str()), ("lz4", "zstd"));
}

/// A stream stops at its budget, wherever the bytes come from.
#[test]
fn streams_stop_at_their_budget() {
    let c = chunk(sample(0, 300));
    let batches = record_batches(&elements(rows(&c, 0..300))).unwrap();
    let whole = write_stream(None, &batches, None, None).unwrap();
    let exact = write_stream_within(None, &batches, None, None, whole.len()).unwrap();
    assert_eq!(exact, whole);
    for max in [0, 10, whole.len() / 2, whole.len() - 1] {
        let e = write_stream_within(None, &batches, None, None, max).unwrap_err();
        assert!(matches!(e, Unwritten::Over), "{max}: {e:?}");
    }
}

#[test]
fn streams_round_trip_with_their_origins_for_every_codec() {
    let (a, b) = (chunk(sample(0, 300)), chunk(sample(1_000, 300)));
    // A slice (zero copy, at an offset), a gathered batch and a `batch` element.
    let mut es = elements(rows(&a, 20..220));
    es.extend(elements(rows(&b, [7, 3, 250])));
    es.push(Element::Rows(rows(&b, 10..14)));
    let batches = record_batches(&es).unwrap();
    assert_eq!(batches.len(), 3);
    let schema = schema_of(&es).unwrap();
    let mut sizes = Vec::new();
    for codec in [None, Some(IpcCompression::Lz4), Some(IpcCompression::Zstd)] {
        let bytes = write_stream(Some(&schema), &batches, Some(&runs()), codec).unwrap();
        sizes.push(bytes.len());
        let (got_schema, got, origin) = decode_stream(&bytes).unwrap();
        assert_eq!(origin, Some(runs()), "{codec:?}");
        assert_eq!(got_schema.fields(), schema.fields(), "tensor metadata included");
        assert_eq!(got.len(), batches.len());
        for (g, b) in got.iter().zip(&batches) {
            assert_eq!(g.columns(), b.columns(), "{codec:?}");
        }
    }
    assert!(sizes[1] < sizes[0] && sizes[2] < sizes[0], "compressed: {sizes:?}");
}

#[test]
fn an_empty_read_is_a_stream_of_its_schema_or_of_none() {
    let schema = sample(0, 1).schema();
    let bytes = write_stream(Some(&schema), &[], Some(&[]), None).unwrap();
    let (got, batches, origin) = decode_stream(&bytes).unwrap();
    assert_eq!((got.fields(), batches.len(), origin), (schema.fields(), 0, Some(vec![])));
    let bytes = write_stream(None, &[], None, Some(IpcCompression::Zstd)).unwrap();
    let (got, batches, origin) = decode_stream(&bytes).unwrap();
    assert_eq!((got.fields().len(), batches.len(), origin), (0, 0, None));
    // Without a schema, the first batch's.
    let batch = sample(5, 2);
    let (got, batches, _) =
        decode_stream(&write_stream(None, std::slice::from_ref(&batch), None, None).unwrap())
            .unwrap();
    assert_eq!((got.fields(), batches[0].columns()), (batch.schema().fields(), batch.columns()));
}

#[test]
fn only_the_worker_says_where_rows_come_from() {
    let id: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
    let metadata = std::collections::HashMap::from([
        (ORIGIN_KEY.to_owned(), "[]".to_owned()),
        ("owner".to_owned(), "data team".to_owned()),
    ]);
    let schema = Arc::new(Schema::new_with_metadata(
        vec![Field::new("id", DataType::Int64, false)],
        metadata,
    ));
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![id]).unwrap();
    let bytes = write_stream(Some(&schema), &[batch], None, None).unwrap();
    let (got, _, origin) = decode_stream(&bytes).unwrap();
    assert_eq!(origin, None, "the file's own key is dropped");
    assert_eq!(got.metadata().get("owner").map(String::as_str), Some("data team"));
}

#[test]
fn batches_of_other_columns_are_refused() {
    let schema = sample(0, 1).schema();
    let id: ArrayRef = Arc::new(Int64Array::from(vec![1]));
    let other = RecordBatch::try_from_iter([("id", id)]).unwrap();
    for batches in [vec![other.clone()], vec![sample(0, 2), other]] {
        let err = write_stream(Some(&schema), &batches, None, None).unwrap_err();
        assert_eq!(err.code, Code::FailedPrecondition);
        assert!(err.detail.contains("7 columns and 1"), "{}", err.detail);
    }
    // The same names and types, nullable where the schema is not.
    let nullable: ArrayRef = Arc::new(Int64Array::from(vec![Some(1)]));
    let loose = Schema::new(vec![Field::new("id", DataType::Int64, true)]);
    let strict = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(Arc::new(loose), vec![nullable]).unwrap();
    let err = write_stream(Some(&strict), &[batch], None, None).unwrap_err();
    assert!(
        err.detail.contains(r#"column "id" Int64 differs in nullability or metadata"#),
        "{}",
        err.detail
    );
}
