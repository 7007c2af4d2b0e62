//! Files that are not what they claim: garbage, truncations, and every byte of valid files
//! flipped. Each is an error of a known class, never a panic or a hang.

use shardwise_core::dataset::{DType, FileFormat};

use super::arrow_files::ipc;
use super::parquet_files::parquet;
use super::tfrecord_files::{example, frame};
use super::*;

const FORMATS: [(FileFormat, &str); 3] = [
    (FileFormat::Parquet, "f.parquet"),
    (FileFormat::Arrow, "f.arrow"),
    (FileFormat::TfRecord, "f.tfrecord"),
];

/// Deterministic noise.
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Reads all of `name` as `d`: an error must be of a class a file can cause.
fn survives(root: &Root, d: &FilesDef, name: &str, bytes: &[u8]) -> Option<Problem> {
    root.write(name, bytes);
    match read(root, d, &req(name, 0, None), &opts(64, 1 << 20)) {
        Ok(_) => None,
        Err(e) => {
            let known =
                [CORRUPT, Code::InvalidArgument, Code::ResourceExhausted, Code::FailedPrecondition];
            assert!(known.contains(&e.code), "{:?}: {}", e.code, e.detail);
            assert!(e.detail.contains(name), "{}", e.detail);
            Some(e)
        }
    }
}

#[test]
fn garbage_is_corrupt() {
    let root = Root::new("hostile-garbage");
    for (format, name) in FORMATS {
        let d = def(format);
        let mut garbage = vec![b"PAR1".to_vec(), b"ARROW1\0\0ARROW1".to_vec(), noise(1, 1000)];
        let mut framed = b"PAR1".to_vec();
        framed.extend(noise(2, 300));
        framed.extend(b"PAR1");
        garbage.push(framed);
        let mut framed = b"ARROW1\0\0".to_vec();
        framed.extend(noise(3, 300));
        framed.extend(b"ARROW1");
        garbage.push(framed);
        for bytes in garbage {
            let e = survives(&root, &d, name, &bytes).expect("an error");
            assert_eq!(e.code, CORRUPT, "{}", e.detail);
        }
        let empty = survives(&root, &d, name, b"");
        assert_eq!(empty.is_none(), format == FileFormat::TfRecord, "{empty:?}");
    }
    let e = survives(&root, &def(FileFormat::Parquet), "f.parquet", b"PAR1PAR1").unwrap();
    assert!(e.detail.contains("is not a Parquet file (it is too short)"), "{}", e.detail);
    let e = survives(&root, &def(FileFormat::Arrow), "f.arrow", &noise(4, 100)).unwrap();
    assert!(e.detail.contains("is not an Arrow IPC file (no ARROW1 magic at its start)"));
}

/// Small valid files of each format (with a declared tensor, so that its checks run too).
fn valid() -> Vec<(FilesDef, &'static str, Vec<u8>)> {
    let mut pq = def(FileFormat::Parquet);
    pq.tensors = vec![tensor("list", DType::Float32, &[4])];
    let mut ar = def(FileFormat::Arrow);
    ar.tensors = vec![tensor("vec", DType::Float32, &[2, 2])];
    let mut tf = def(FileFormat::TfRecord);
    tf.tensors = vec![tensor("image", DType::Float32, &[4]), tensor("name", DType::String, &[])];
    vec![
        (pq, "f.parquet", parquet(&[sample(0, 5)], 3)),
        (
            ar,
            "f.arrow",
            ipc(&[sample(0, 2), sample(2, 3)], Some(::arrow_ipc::CompressionType::LZ4_FRAME)),
        ),
        (tf, "f.tfrecord", (0..3).flat_map(|i| frame(&example(i))).collect()),
    ]
}

#[test]
fn truncated_files_are_refused() {
    let root = Root::new("hostile-truncated");
    for (d, name, bytes) in valid() {
        assert!(survives(&root, &d, name, &bytes).is_none(), "{name} reads whole");
        for cut in 1..bytes.len() {
            let e = survives(&root, &d, name, &bytes[..cut]);
            let at_record_end = d.format == FileFormat::TfRecord && e.is_none();
            assert!(e.is_some() || at_record_end, "{name} cut at {cut} of {} reads", bytes.len());
        }
    }
}

/// Every byte of every valid file, flipped three ways: an error or rows, never a panic.
#[test]
fn flipped_bytes_never_panic() {
    let root = Root::new("hostile-flipped");
    for (d, name, bytes) in valid() {
        let mut refused = 0;
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[at] ^= flip;
                refused += usize::from(survives(&root, &d, name, &bad).is_some());
            }
        }
        assert!(refused > 0, "{name}: some flips are noticed");
    }
}
