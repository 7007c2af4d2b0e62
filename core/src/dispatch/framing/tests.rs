//! The framing's tests: byte-exact encoding, torn tails, corruption, resynchronisation and
//! the iterator, with properties over arbitrary payloads and damage.

use super::*;
use proptest::prelude::*;

/// A segment holding `payloads`, and each record's offset.
fn segment(payloads: &[Vec<u8>]) -> (Vec<u8>, Vec<u64>) {
    let mut bytes = segment_header().to_vec();
    let mut offsets = Vec::new();
    for payload in payloads {
        offsets.push(bytes.len() as u64);
        encode_record(payload, &mut bytes).expect("valid payload");
    }
    (bytes, offsets)
}

fn payloads_of<'a>(decoded: &Decoded<'a>) -> Vec<&'a [u8]> {
    decoded.records.iter().map(|r| r.payload).collect()
}

fn three() -> Vec<Vec<u8>> {
    vec![b"first record".to_vec(), (0u8..=99).collect(), b"third".to_vec()]
}

/// Bitwise CRC32C (Castagnoli, reflected polynomial 0x82f63b78), independent of the crate.
fn reference_crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
        }
    }
    !crc
}

/// Checks what every successful decode must satisfy, whatever the input.
fn check_invariants(bytes: &[u8], decoded: &Decoded<'_>) {
    let mut expected_offset = HEADER_LEN as u64;
    for record in &decoded.records {
        assert_eq!(record.offset, expected_offset);
        let start = usize::try_from(record.offset).unwrap();
        let mut reencoded = Vec::new();
        encode_record(record.payload, &mut reencoded).unwrap();
        assert_eq!(&bytes[start..start + reencoded.len()], &reencoded[..]);
        expected_offset = record.end();
    }
    match &decoded.tail {
        Tail::Clean => {
            let end = if decoded.records.is_empty() { HEADER_LEN as u64 } else { expected_offset };
            assert_eq!(end, bytes.len() as u64);
        }
        Tail::Torn { offset, discarded, .. } => {
            assert_eq!(offset + discarded, bytes.len() as u64);
            if *offset != 0 {
                assert_eq!(*offset, expected_offset);
            }
        }
    }
    // The streaming form agrees with the collecting one.
    let mut iter = records(bytes).unwrap();
    let streamed: Vec<Record<'_>> = iter.by_ref().map(Result::unwrap).collect();
    assert_eq!(streamed, decoded.records);
    assert_eq!(iter.tail(), Some(&decoded.tail));
    assert!(iter.next().is_none());
}

fn decode_checked(bytes: &[u8]) -> Result<Decoded<'_>, FramingError> {
    let result = decode_segment(bytes);
    match &result {
        Ok(decoded) => check_invariants(bytes, decoded),
        Err(error) => {
            // The streaming form reports the same error (in the header check or in-stream).
            let streamed = match records(bytes) {
                Err(e) => e,
                Ok(mut iter) => {
                    let e = iter.find_map(Result::err).expect("stream reports the error");
                    assert!(iter.tail().is_none());
                    e
                }
            };
            assert_eq!(&streamed, error);
        }
    }
    result
}

fn assert_torn_at(result: &Result<Decoded<'_>, FramingError>, at: u64) {
    match result {
        Ok(Decoded { tail: Tail::Torn { offset, .. }, .. }) => assert_eq!(*offset, at),
        other => panic!("expected Torn at {at}, got {other:?}"),
    }
}

fn assert_corrupt_at(result: &Result<Decoded<'_>, FramingError>, at: u64) {
    match result {
        Err(FramingError::Corrupt { offset, .. }) => assert_eq!(*offset, at),
        other => panic!("expected Corrupt at {at}, got {other:?}"),
    }
}

#[test]
fn crc_matches_reference_and_known_vectors() {
    assert_eq!(reference_crc32c(b"123456789"), 0xe306_9283);
    assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8a91_36aa);
    assert_eq!(crc32c::crc32c(&[0xffu8; 32]), 0x62a8_ab43);
    let ascending: Vec<u8> = (0u8..32).collect();
    assert_eq!(crc32c::crc32c(&ascending), 0x46dd_794e);
    for data in [&b"a"[..], b"123456789", &[0u8; 40], &ascending] {
        assert_eq!(crc32c::crc32c(data), reference_crc32c(data));
    }
}

#[test]
#[allow(clippy::manual_rotate)]
fn mask_is_the_leveldb_formula() {
    for crc in [0u32, 1, 0x8000_0000, 0xffff_ffff, 0xe306_9283, 0x1234_5678] {
        assert_eq!(mask_crc(crc), ((crc >> 15) | (crc << 17)).wrapping_add(0xa282_ead8));
    }
}

#[test]
fn encoding_is_byte_exact() {
    let mut out = vec![0xaa];
    encode_record(b"hello", &mut out).unwrap();
    let mut covered = 5u32.to_le_bytes().to_vec();
    covered.extend_from_slice(b"hello");
    let crc = reference_crc32c(&covered);
    let masked = crc.rotate_right(15).wrapping_add(0xa282_ead8);
    let mut expected = vec![0xaa, 5, 0, 0, 0];
    expected.extend_from_slice(&masked.to_le_bytes());
    expected.extend_from_slice(b"hello");
    assert_eq!(out, expected);
    assert_eq!(encoded_len(5), 13);
    assert_eq!(out.len() - 1, encoded_len(5));
    assert_eq!(encoded_len(usize::MAX), usize::MAX);
}

#[test]
fn header_layout() {
    let header = segment_header();
    assert_eq!(&header[..8], b"SHARDWJ\0");
    assert_eq!(&header[8..12], &1u32.to_le_bytes());
    assert_eq!(&header[12..], &[0; 4]);
    assert_eq!(FORMAT_VERSION, 1);
    assert_eq!(MAX_RECORD_LEN, 64 << 20);
}

#[test]
fn encode_refuses_empty_and_too_large() {
    let mut out = vec![1, 2, 3];
    assert_eq!(encode_record(&[], &mut out), Err(FramingError::EmptyRecord));
    let huge = vec![0u8; MAX_RECORD_LEN + 1];
    assert_eq!(
        encode_record(&huge, &mut out),
        Err(FramingError::RecordTooLarge { len: MAX_RECORD_LEN + 1 })
    );
    assert_eq!(out, [1, 2, 3]);
}

#[test]
fn largest_record_round_trips() {
    let payload: Vec<u8> = (0..MAX_RECORD_LEN).map(|i| (i % 251) as u8).collect();
    let (bytes, _) = segment(std::slice::from_ref(&payload));
    let decoded = decode_segment(&bytes).unwrap();
    assert_eq!(decoded.tail, Tail::Clean);
    assert_eq!(payloads_of(&decoded), [&payload[..]]);
}

#[test]
fn round_trip_varied_sizes() {
    let sizes = [1usize, 2, 7, 8, 9, 48, 255, 256, 4095, 4096, 65_537, 1 << 20, 3, 1];
    let payloads: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(n, &size)| (0..size).map(|i| (i * 31 + n * 7) as u8).collect())
        .collect();
    let (bytes, offsets) = segment(&payloads);
    let expected_len = HEADER_LEN + sizes.iter().map(|&s| encoded_len(s)).sum::<usize>();
    assert_eq!(bytes.len(), expected_len);
    let decoded = decode_checked(&bytes).unwrap();
    assert_eq!(decoded.tail, Tail::Clean);
    assert_eq!(payloads_of(&decoded), payloads.iter().map(Vec::as_slice).collect::<Vec<_>>());
    let got_offsets: Vec<u64> = decoded.records.iter().map(|r| r.offset).collect();
    assert_eq!(got_offsets, offsets);
}

#[test]
fn header_only_is_clean_and_empty() {
    let header = segment_header();
    let decoded = decode_checked(&header).unwrap();
    assert_eq!(decoded, Decoded { records: vec![], tail: Tail::Clean });
}

#[test]
fn empty_or_partial_header_is_torn_at_zero() {
    let header = segment_header();
    for n in 0..HEADER_LEN {
        let decoded = decode_checked(&header[..n]).unwrap();
        assert!(decoded.records.is_empty());
        assert!(matches!(decoded.tail, Tail::Torn { offset: 0, discarded, .. }
                if discarded == n as u64));
    }
    // Zero fill in place of (part of) the header, of any length.
    for bytes in [vec![0u8; 5], vec![0u8; 16], vec![0u8; 4096]] {
        assert_torn_at(&decode_checked(&bytes), 0);
    }
    let mut magic_then_zeros = MAGIC.to_vec();
    magic_then_zeros.resize(100, 0);
    assert_torn_at(&decode_checked(&magic_then_zeros), 0);
}

#[test]
fn bad_headers_are_errors() {
    let (good, _) = segment(&three());

    let mut wrong_magic = good.clone();
    wrong_magic[0] = b's';
    assert!(matches!(decode_checked(&wrong_magic), Err(FramingError::BadHeader { .. })));
    assert!(matches!(decode_checked(b"NOTAJOURNAL"), Err(FramingError::BadHeader { .. })));
    assert!(matches!(decode_checked(b"SHARDWJ\0\x02"), Err(FramingError::BadHeader { .. })));

    let mut v2 = good.clone();
    v2[8..12].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(decode_checked(&v2), Err(FramingError::UnsupportedVersion { version: 2 }));
    assert_eq!(decode_checked(&v2[..16]), Err(FramingError::UnsupportedVersion { version: 2 }));

    let mut reserved = good.clone();
    reserved[15] = 1;
    assert!(matches!(decode_checked(&reserved), Err(FramingError::BadHeader { .. })));
}

#[test]
fn truncation_at_every_byte_is_a_prefix_and_torn() {
    let payloads = three();
    let (bytes, offsets) = segment(&payloads);
    let ends: Vec<usize> =
        offsets.iter().zip(&payloads).map(|(&o, p)| o as usize + encoded_len(p.len())).collect();
    for cut in 0..=bytes.len() {
        let result = decode_checked(&bytes[..cut]);
        let complete = ends.iter().filter(|&&end| end <= cut).count();
        let decoded = result.unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        assert_eq!(
            payloads_of(&decoded),
            payloads[..complete].iter().map(Vec::as_slice).collect::<Vec<_>>(),
            "cut {cut}"
        );
        let good_end = if cut < HEADER_LEN {
            0
        } else {
            ends[..complete].last().copied().unwrap_or(HEADER_LEN)
        };
        if cut == good_end && cut >= HEADER_LEN {
            assert_eq!(decoded.tail, Tail::Clean, "cut {cut}");
        } else {
            assert!(
                matches!(decoded.tail, Tail::Torn { offset, discarded, .. }
                    if offset == good_end as u64 && discarded == (cut - good_end) as u64),
                "cut {cut}: {:?}",
                decoded.tail
            );
        }
    }
}

#[test]
fn any_damage_in_the_middle_record_is_corrupt() {
    let payloads = three();
    let (bytes, offsets) = segment(&payloads);
    let middle = offsets[1] as usize..offsets[2] as usize;
    for i in middle {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut damaged = bytes.clone();
            damaged[i] ^= flip;
            assert_corrupt_at(&decode_checked(&damaged), offsets[1]);
        }
    }
}

#[test]
fn damage_in_the_last_record_is_torn_and_keeps_earlier_records() {
    let payloads = three();
    let (bytes, offsets) = segment(&payloads);
    // Any byte of the CRC or payload of the last record.
    for i in offsets[2] as usize + 4..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[i] ^= 0x5a;
        let result = decode_checked(&damaged);
        assert_torn_at(&result, offsets[2]);
        assert_eq!(payloads_of(result.as_ref().unwrap()), [&payloads[0][..], &payloads[1]]);
    }
    // A length field that now runs off the end also reads as a torn append.
    let mut longer = bytes.clone();
    longer[offsets[2] as usize] ^= 0x40;
    assert_torn_at(&decode_checked(&longer), offsets[2]);
}

#[test]
fn crc_mismatch_followed_by_zeros_is_torn() {
    let payloads = three();
    let (mut bytes, offsets) = segment(&payloads);
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    bytes.extend_from_slice(&[0; 100]);
    let decoded = decode_checked(&bytes).unwrap();
    assert_eq!(decoded.records.len(), 2);
    assert!(matches!(decoded.tail, Tail::Torn { offset, discarded, .. }
        if offset == offsets[2] && discarded == bytes.len() as u64 - offsets[2]));
}

#[test]
fn trailing_zeros_are_torn() {
    let payloads = three();
    let (clean, _) = segment(&payloads);
    for zeros in [1usize, 7, 8, 9, 4096] {
        let mut bytes = clean.clone();
        bytes.resize(clean.len() + zeros, 0);
        let decoded = decode_checked(&bytes).unwrap();
        assert_eq!(decoded.records.len(), 3);
        assert!(matches!(decoded.tail, Tail::Torn { offset, discarded, .. }
            if offset == clean.len() as u64 && discarded == zeros as u64));
    }
    // Zeros straight after the header.
    let mut bytes = segment_header().to_vec();
    bytes.resize(4096, 0);
    let decoded = decode_checked(&bytes).unwrap();
    assert!(decoded.records.is_empty());
    assert_torn_at(&Ok(decoded), HEADER_LEN as u64);
}

/// Two records, then `framing`, then two more records.
fn with_bad_framing_in_middle(framing: [u8; 8]) -> (Vec<u8>, u64) {
    let (mut bytes, _) = segment(&three()[..2]);
    let bad_at = bytes.len() as u64;
    bytes.extend_from_slice(&framing);
    encode_record(b"valid after", &mut bytes).unwrap();
    encode_record(b"also valid", &mut bytes).unwrap();
    (bytes, bad_at)
}

#[test]
fn garbage_length_in_middle_is_corrupt() {
    let absurd = u32::MAX.to_le_bytes();
    let mut framing = [0u8; 8];
    framing[..4].copy_from_slice(&absurd);
    let (bytes, bad_at) = with_bad_framing_in_middle(framing);
    assert_corrupt_at(&decode_checked(&bytes), bad_at);

    // A zero length followed by data is corruption too.
    let (bytes, bad_at) = with_bad_framing_in_middle([0, 0, 0, 0, 1, 2, 3, 4]);
    assert_corrupt_at(&decode_checked(&bytes), bad_at);
}

#[test]
fn plausible_length_running_off_the_end_over_intact_records_is_corrupt() {
    // A length within the maximum but past the end: on its own that looks like a torn
    // append, but intact records follow, so acknowledged data would be lost.
    let mut framing = [0u8; 8];
    framing[..4].copy_from_slice(&1_000_000u32.to_le_bytes());
    let (bytes, bad_at) = with_bad_framing_in_middle(framing);
    let err = decode_checked(&bytes).unwrap_err();
    assert_corrupt_at(&Err(err.clone()), bad_at);
    assert!(err.to_string().contains("intact record"), "{err}");
}

#[test]
fn absurd_length_followed_only_by_zeros_is_torn() {
    let (mut bytes, _) = segment(&three());
    let end = bytes.len() as u64;
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    bytes.resize(bytes.len() + 64, 0);
    let decoded = decode_checked(&bytes).unwrap();
    assert_eq!(decoded.records.len(), 3);
    assert_torn_at(&Ok(decoded), end);
}

#[test]
fn short_garbage_after_last_record_is_torn() {
    let (mut bytes, _) = segment(&three());
    let end = bytes.len() as u64;
    bytes.extend_from_slice(&[0xff; 7]);
    assert_torn_at(&decode_checked(&bytes), end);
}

#[test]
fn search_budget_falls_back_to_torn() {
    // A torn 64 MiB record whose written prefix is 20 MiB of 0x01: every offset in it reads
    // as a plausible 16 MiB record, so the search runs out of budget and the tail is torn.
    let mut bytes = segment_header().to_vec();
    bytes.extend_from_slice(&u32::try_from(MAX_RECORD_LEN).unwrap().to_le_bytes());
    bytes.extend_from_slice(&[0x01; 4]);
    bytes.resize(HEADER_LEN + RECORD_OVERHEAD + (20 << 20), 0x01);
    match decode_checked(&bytes) {
        Ok(Decoded { records, tail: Tail::Torn { offset, reason, .. } }) => {
            assert!(records.is_empty());
            assert_eq!(offset, HEADER_LEN as u64);
            assert!(reason.contains("stopped"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn iterator_stops_after_corruption() {
    let (mut bytes, offsets) = segment(&three());
    bytes[offsets[1] as usize + 9] ^= 1;
    let mut iter = records(&bytes).unwrap();
    assert_eq!(iter.next().unwrap().unwrap().payload, b"first record");
    assert!(matches!(iter.next(), Some(Err(FramingError::Corrupt { .. }))));
    assert!(iter.next().is_none());
    assert!(iter.tail().is_none());
    assert!(format!("{iter:?}").contains("Failed"));
}

#[test]
fn errors_display() {
    let err = FramingError::Corrupt { offset: 42, reason: "CRC mismatch".into() };
    assert_eq!(err.to_string(), "journal segment corrupt at byte offset 42: CRC mismatch");
    let err = FramingError::UnsupportedVersion { version: 2 };
    assert!(err.to_string().contains("version 2"));
}

fn payload_lists() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 1..300), 0..20)
}

proptest! {
    #[test]
    fn prop_round_trip(payloads in payload_lists()) {
        let (bytes, offsets) = segment(&payloads);
        let decoded = decode_checked(&bytes).unwrap();
        prop_assert_eq!(&decoded.tail, &Tail::Clean);
        prop_assert_eq!(decoded.records.len(), payloads.len());
        for ((record, payload), offset) in decoded.records.iter().zip(&payloads).zip(offsets) {
            prop_assert_eq!(record.payload, &payload[..]);
            prop_assert_eq!(record.offset, offset);
        }
    }

    #[test]
    fn prop_truncation_gives_prefix_and_torn(
        payloads in payload_lists(),
        cut in any::<prop::sample::Index>(),
    ) {
        let (bytes, offsets) = segment(&payloads);
        let cut = cut.index(bytes.len() + 1);
        let decoded = decode_checked(&bytes[..cut]).unwrap();
        let complete = offsets.iter().zip(&payloads)
            .take_while(|&(&o, p)| o as usize + encoded_len(p.len()) <= cut).count();
        prop_assert_eq!(decoded.records.len(), complete);
        for (record, payload) in decoded.records.iter().zip(&payloads) {
            prop_assert_eq!(record.payload, &payload[..]);
        }
        let boundary = cut >= HEADER_LEN
            && (cut == HEADER_LEN
                || decoded.records.last().is_some_and(|r| r.end() == cut as u64));
        if boundary {
            prop_assert_eq!(&decoded.tail, &Tail::Clean);
        } else {
            let is_torn = matches!(decoded.tail, Tail::Torn { .. });
            prop_assert!(is_torn);
        }
    }

    #[test]
    fn prop_single_byte_damage_never_returns_a_wrong_payload(
        payloads in payload_lists(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let (mut bytes, offsets) = segment(&payloads);
        let at = at.index(bytes.len());
        bytes[at] ^= flip;
        let result = decode_checked(&bytes);
        // Which record (if any) holds the damaged byte.
        let hit = offsets.iter().rposition(|&o| o as usize <= at);
        if let Ok(decoded) = &result {
            let originals = payloads.iter().zip(&offsets);
            for (record, (payload, offset)) in decoded.records.iter().zip(originals) {
                prop_assert_eq!(record.payload, &payload[..]);
                prop_assert_eq!(record.offset, *offset);
            }
            prop_assert!(decoded.records.len() <= hit.unwrap_or(0));
        }
        match hit {
            None => {
                // Damage in the header is an error, except that a header-only segment whose
                // damage left a header prefix followed by zeros reads as just created (and
                // loses nothing): a segment with records never does, their lengths are not 0.
                let ok = match &result {
                    Err(FramingError::BadHeader { .. }) => true,
                    Err(FramingError::UnsupportedVersion { .. }) => true,
                    Ok(Decoded { records, tail: Tail::Torn { offset: 0, .. } }) => {
                        payloads.is_empty() && records.is_empty()
                    }
                    _ => false,
                };
                prop_assert!(ok, "{:?}", result);
            }
            Some(k) if k + 1 < payloads.len() => {
                let is_corrupt_here = matches!(
                    result,
                    Err(FramingError::Corrupt { offset, .. }) if offset == offsets[k]
                );
                prop_assert!(is_corrupt_here, "{:?}", result);
            }
            Some(k) => {
                // The last record: torn, or (a damaged length field) refused as corrupt.
                let ok = match &result {
                    Ok(Decoded { records, tail: Tail::Torn { offset, .. } }) => {
                        records.len() == k && *offset == offsets[k]
                    }
                    Err(FramingError::Corrupt { offset, .. }) => {
                        *offset == offsets[k] && at < offsets[k] as usize + 4
                    }
                    _ => false,
                };
                prop_assert!(ok, "{:?}", result);
            }
        }
    }

    #[test]
    fn prop_arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = decode_checked(&bytes);
    }

    #[test]
    fn prop_arbitrary_records_after_a_valid_header_never_panic(
        body in prop::collection::vec(any::<u8>(), 0..2048),
        small in prop::collection::vec((1u8..64, any::<u8>()), 0..32),
    ) {
        // Mix random bytes with plausible small length fields so records get past the length
        // check and exercise the CRC and search paths.
        let mut bytes = segment_header().to_vec();
        bytes.extend_from_slice(&body);
        for (len, fill) in small {
            bytes.extend_from_slice(&[len, 0, 0, 0, fill, fill, fill, fill]);
            bytes.extend(std::iter::repeat_n(fill, usize::from(len) / 2));
        }
        let _ = decode_checked(&bytes);
    }
}
