use std::collections::HashMap;

use arrow_array::types::{Int8Type, Int32Type};
use arrow_array::{ArrayRef, DictionaryArray, Int64Array, ListArray, StringArray, StructArray};
use arrow_ipc::CompressionType;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_schema::{DataType, Field};
use shardwise_core::position::SourceRange;

use super::*;

fn batch(schema: &SchemaRef, from: i64, n: i64) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(from..from + n));
    let names: ArrayRef =
        Arc::new(StringArray::from_iter_values((from..from + n).map(|i| format!("row {i}"))));
    RecordBatch::try_new(Arc::clone(schema), vec![ids, names]).unwrap()
}

fn schema(metadata: &[(&str, &str)]) -> SchemaRef {
    let fields =
        vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, true)];
    let metadata: HashMap<String, String> =
        metadata.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    Arc::new(Schema::new_with_metadata(fields, metadata))
}

fn write(schema: &SchemaRef, batches: &[RecordBatch], codec: Option<CompressionType>) -> Vec<u8> {
    let options = IpcWriteOptions::default().try_with_compression(codec).unwrap();
    let mut w = StreamWriter::try_new_with_options(Vec::new(), schema, options).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.into_inner().unwrap()
}

fn runs() -> Vec<OriginRun> {
    vec![
        OriginRun { split: SourceRange { start: 0, stop: 10 }, offset: 0, count: 10, end: true },
        OriginRun { split: SourceRange { start: 10, stop: 20 }, offset: 0, count: 5, end: false },
    ]
}

#[test]
fn streams_round_trip_with_their_origins_compressed_or_not() {
    let origin = serde_json::to_string(&runs()).unwrap();
    let sent = schema(&[(ORIGIN_KEY, &origin), ("pandas", "{}")]);
    let batches = [batch(&sent, 0, 10), batch(&sent, 100, 5)];
    for codec in [None, Some(CompressionType::LZ4_FRAME), Some(CompressionType::ZSTD)] {
        let bytes = write(&sent, &batches, codec);
        let (schema, got, origin) = decode_stream(&bytes).unwrap();
        assert_eq!(origin, Some(runs()), "{codec:?}");
        assert_eq!(schema.metadata().get(ORIGIN_KEY), None, "the origins are not the dataset's");
        assert_eq!(schema.metadata().get("pandas").map(String::as_str), Some("{}"));
        assert_eq!(schema.fields(), sent.fields());
        assert_eq!(got.len(), 2);
        for (g, b) in got.iter().zip(&batches) {
            assert_eq!(g.schema(), schema, "batches carry the schema without origins");
            assert_eq!(g.columns(), b.columns());
        }
    }
}

#[test]
fn a_stream_without_origins_or_batches_decodes() {
    let sent = schema(&[]);
    let (schema, batches, origin) = decode_stream(&write(&sent, &[], None)).unwrap();
    assert_eq!((schema, batches.len(), origin), (sent, 0, None));
    let (schema, batches, _) =
        decode_stream(&write(&Arc::new(Schema::empty()), &[], None)).unwrap();
    assert_eq!((schema.fields().len(), batches.len()), (0, 0));
}

#[test]
fn origins_that_are_not_runs_are_refused() {
    for bad in ["not json", "{}", r#"[{"split": 1}]"#] {
        let sent = schema(&[(ORIGIN_KEY, bad)]);
        let err = decode_stream(&write(&sent, &[batch(&sent, 0, 1)], None)).unwrap_err();
        assert!(matches!(err, StreamError::Origin(_)), "{bad}: {err}");
        assert!(err.to_string().contains("shardwise.origin"), "{err}");
        assert_eq!(CallError::from(err).code(), crate::Code::Internal);
    }
}

#[test]
fn broken_streams_are_typed_errors() {
    let sent = schema(&[]);
    let bytes = write(&sent, &[batch(&sent, 0, 50)], Some(CompressionType::ZSTD));
    // Every truncation, the empty body and a cut between two messages included: a worker
    // always ends its stream with the marker.
    for end in 0..bytes.len() {
        match decode_stream(&bytes[..end]) {
            Err(StreamError::Ipc(_)) => {}
            other => panic!("cut at {end}: {other:?}"),
        }
    }
    let mut trailing = bytes.clone();
    trailing.extend_from_slice(b"more");
    let err = decode_stream(&trailing).unwrap_err();
    assert!(err.to_string().contains("4 bytes follow the end-of-stream marker"), "{err}");
    for garbage in [
        &b"\xff\xff\xff\xff\x10\x00\x00\x00garbagegarbage!!"[..],
        b"\xff\xff\xff\xff\xf0\xff\xff\xff",
    ] {
        assert!(matches!(decode_stream(garbage), Err(StreamError::Ipc(_))));
    }
}

/// Every byte of streams of nested, dictionary and compressed columns altered in turn: an
/// error or a stream, never a panic (a few of these trip assertions inside Arrow's reader).
#[test]
fn altered_streams_never_panic() {
    let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(1), None]),
        None,
        Some(vec![]),
        Some(vec![Some(4)]),
    ]));
    let dict: ArrayRef =
        Arc::new(["a", "b", "a", "c"].into_iter().collect::<DictionaryArray<Int8Type>>());
    let x = Arc::new(Field::new("x", DataType::Int64, true));
    let values: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None, Some(3), Some(4)]));
    let st: ArrayRef = Arc::new(StructArray::from(vec![(x, values)]));
    let b = RecordBatch::try_from_iter(vec![("l", list), ("d", dict), ("s", st)]).unwrap();
    for codec in [None, Some(CompressionType::LZ4_FRAME), Some(CompressionType::ZSTD)] {
        let bytes = write(&b.schema(), &[b.clone(), b.slice(1, 2)], codec);
        assert_eq!(decode_stream(&bytes).unwrap().1.len(), 2);
        for i in 0..bytes.len() {
            for x in [0x01, 0xff] {
                let mut altered = bytes.clone();
                altered[i] ^= x;
                let _ = decode_stream(&altered);
            }
        }
    }
}

#[test]
fn decompressed_lengths_are_bounded_before_decompressing() {
    let sent = schema(&[]);
    let batches = [batch(&sent, 0, 1_000)];
    let bytes = write(&sent, &batches, Some(CompressionType::LZ4_FRAME));
    // 8,000 bytes of ids and at least 4,000 of names.
    let within = |max_decoded_bytes| StreamLimits { max_decoded_bytes, ..Default::default() };
    let err = decode_stream_within(&bytes, &within(10_000)).unwrap_err();
    assert!(matches!(err, StreamError::TooLarge { limit: 10_000, .. }), "{err}");
    assert!(decode_stream_within(&bytes, &within(100_000)).is_ok());
    // Uncompressed streams declare nothing: the body is their bound.
    assert!(decode_stream_within(&write(&sent, &batches, None), &within(0)).is_ok());
}

#[test]
fn rows_past_what_a_read_asked_for_are_refused_before_decoding() {
    let sent = schema(&[]);
    let batches = [batch(&sent, 0, 600), batch(&sent, 600, 500)];
    let bytes = write(&sent, &batches, None);
    let within = |max_rows| StreamLimits { max_rows, ..Default::default() };
    let err = decode_stream_within(&bytes, &within(1_000)).unwrap_err();
    assert_eq!(err, StreamError::TooManyRows { declared: 1_100, limit: 1_000 });
    assert!(err.to_string().contains("at most 1000 were asked for"), "{err}");
    let (_, got, _) = decode_stream_within(&bytes, &within(1_100)).unwrap();
    assert_eq!(got.iter().map(RecordBatch::num_rows).sum::<usize>(), 1_100);
}

#[test]
fn only_the_codec_a_read_asked_for_is_accepted() {
    let sent = schema(&[]);
    let batches = [batch(&sent, 0, 10)];
    let lz4 = write(&sent, &batches, Some(CompressionType::LZ4_FRAME));
    let asked = |compression| StreamLimits { compression: Some(compression), ..Default::default() };
    let err = decode_stream_within(&lz4, &asked(None)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the Arrow IPC stream is compressed with lz4, which the read did not ask for \
         (uncompressed batches)"
    );
    let err = decode_stream_within(&lz4, &asked(Some(IpcCompression::Zstd))).unwrap_err();
    assert!(matches!(err, StreamError::UnaskedCompression { .. }), "{err}");
    assert!(decode_stream_within(&lz4, &asked(Some(IpcCompression::Lz4))).is_ok());
    // A worker that does not support the codec asked for answers uncompressed.
    let plain = write(&sent, &batches, None);
    assert!(decode_stream_within(&plain, &asked(Some(IpcCompression::Zstd))).is_ok());
    // Without a limit, any codec.
    assert!(decode_stream(&lz4).is_ok());
}
