//! Journal framing benchmarks: 1,000,000 records with 48-byte payloads in one segment buffer.
//!
//! * `encode`: header plus 1,000,000 [`encode_record`] calls into a reused buffer.
//! * `decode_segment`: decode that segment, collecting every record.
//! * `records_iter`: stream the same segment with [`records`] without collecting.
//!
//! Throughput is reported both in records/s and in bytes/s of framed segment.
//!
//! `cargo bench -p shardwise-core --bench framing`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use shardwise_core::dispatch::framing::{
    Tail, decode_segment, encode_record, encoded_len, records, segment_header,
};

const RECORDS: usize = 1_000_000;
const PAYLOAD_LEN: usize = 48;

/// `RECORDS` distinct 48-byte payloads, back to back.
fn payloads() -> Vec<u8> {
    let mut flat = Vec::with_capacity(RECORDS * PAYLOAD_LEN);
    for i in 0..RECORDS as u64 {
        for word in 0..(PAYLOAD_LEN / 8) as u64 {
            let x =
                i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ word.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            flat.extend_from_slice(&x.to_le_bytes());
        }
    }
    flat
}

fn encode_all(flat: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&segment_header());
    for payload in flat.chunks_exact(PAYLOAD_LEN) {
        encode_record(payload, out).expect("48-byte payloads are valid");
    }
}

fn framing(c: &mut Criterion) {
    let flat = payloads();
    let segment_len = segment_header().len() + RECORDS * encoded_len(PAYLOAD_LEN);
    let mut segment = Vec::with_capacity(segment_len);
    encode_all(&flat, &mut segment);
    assert_eq!(segment.len(), segment_len);

    let mut group = c.benchmark_group("framing_1M_x_48B");
    group.sample_size(10);
    group.throughput(Throughput::ElementsAndBytes {
        elements: RECORDS as u64,
        bytes: segment_len as u64,
    });

    let mut out = Vec::with_capacity(segment_len);
    group.bench_function("encode", |b| {
        b.iter(|| {
            encode_all(black_box(&flat), &mut out);
            black_box(out.len())
        })
    });

    group.bench_function("decode_segment", |b| {
        b.iter(|| {
            let decoded = decode_segment(black_box(&segment)).expect("clean segment");
            assert_eq!(decoded.tail, Tail::Clean);
            black_box(decoded.records.len())
        })
    });

    group.bench_function("records_iter", |b| {
        b.iter(|| {
            let mut iter = records(black_box(&segment)).expect("valid header");
            let mut bytes = 0usize;
            for record in iter.by_ref() {
                bytes += record.expect("intact record").payload.len();
            }
            assert_eq!(iter.tail(), Some(&Tail::Clean));
            black_box(bytes)
        })
    });

    group.finish();
}

criterion_group!(benches, framing);
criterion_main!(benches);
