//! Journal segment framing: how records are laid out in a segment file, and how a segment is
//! read back after a crash.
//!
//! This module is pure: it turns payloads into bytes ([`segment_header`], [`encode_record`]) and
//! bytes into payloads ([`decode_segment`], [`records`]). It never touches a file; payloads are
//! opaque (the caller serializes its own records).
//!
//! # Format, version 1
//!
//! A journal is a sequence of segment files. Every segment starts with a 16-byte header:
//!
//! | bytes  | field    | value                              |
//! |--------|----------|------------------------------------|
//! | 0..8   | magic    | [`MAGIC`], `b"SHARDWJ\0"`          |
//! | 8..12  | version  | [`FORMAT_VERSION`], `u32` LE       |
//! | 12..16 | reserved | `0u32`                             |
//!
//! followed by zero or more records, each [`RECORD_OVERHEAD`] bytes of framing plus the payload:
//!
//! | bytes       | field   | value                                                         |
//! |-------------|---------|---------------------------------------------------------------|
//! | 0..4        | len     | payload length, `u32` LE, `1..=`[`MAX_RECORD_LEN`]            |
//! | 4..8        | crc     | masked CRC32C of the 4 `len` bytes followed by the payload, LE |
//! | 8..8+len    | payload | the caller's bytes                                            |
//!
//! The CRC is masked as `LevelDB` and `TFRecord` mask theirs,
//! `((crc >> 15) | (crc << 17)).wrapping_add(0xa282ead8)`, so that a CRC stored inside a payload
//! does not verify itself. Because the length is covered by the CRC, a damaged length field is
//! caught like a damaged payload, and every payload this module returns has passed its CRC.
//!
//! # Reading a segment: good prefix, then a verdict on the rest
//!
//! The writer appends records and fsyncs each group before acknowledging it, so a crash can only
//! damage the *unacknowledged end* of the last segment. Reading therefore takes the longest
//! prefix of intact records (valid length, complete, CRC matches) and then judges what follows
//! it. Let `p` be the offset where the good prefix ends.
//!
//! * Nothing follows `p`: [`Tail::Clean`].
//! * Otherwise the record at `p` is damaged. Its *extent* is the bytes it claims: the 8 framing
//!   bytes if its length field is invalid (`0` or above [`MAX_RECORD_LEN`]), the framing and
//!   `len` payload bytes otherwise, cut at the end of the segment; fewer than 8 bytes left is an
//!   extent running to the end. The verdict is [`FramingError::Corrupt`] at offset `p` if either
//!   1. a non-zero byte lies after the extent (data was written after the damaged record, so it
//!      was not the last append: corruption in the middle), or
//!   2. an intact record (valid length, complete, CRC matches) starts anywhere inside the extent
//!      after `p` (a corrupted length field that claims to run off the end, or that swallowed the
//!      next record, would otherwise hide acknowledged records behind it);
//!
//!   and otherwise [`Tail::Torn`] at offset `p`, discarding everything from `p` to the end:
//!   the damage is an interrupted append, possibly padded with zero bytes by the filesystem.
//!
//! Concretely, what follows the last good record decides:
//!
//! * nothing: `Clean`;
//! * 1 to 7 bytes, whatever they are: `Torn`;
//! * only zero bytes (preallocation, or zero fill after a crash): `Torn`;
//! * a valid length that runs past the end of the segment: `Torn` (see below);
//! * a record whose CRC fails and that ends at the end of the segment, or is followed only by
//!   zero bytes: `Torn` (see below);
//! * an invalid length (`0` or above the maximum) whose 8 framing bytes are followed only by zero
//!   bytes: `Torn` (see below);
//! * an invalid length whose framing is followed by any non-zero byte: `Corrupt`;
//! * a record whose CRC fails and that is followed by any non-zero byte: `Corrupt`.
//!
//! The three `Torn` cases marked "see below" become `Corrupt` when an intact record starts
//! inside the damaged record's extent (rule 2).
//!
//! A torn write alone never yields a length above [`MAX_RECORD_LEN`]: the writer refuses such
//! records, and a partially written or zero-filled length field only loses bits. Hence an absurd
//! length followed by data is always corruption.
//!
//! The search of rule 2 spends at most 256 MiB of CRC work (candidates must first pass the
//! length checks, so ordinary payloads cost almost nothing); if that budget runs out the verdict
//! falls back to `Torn`, as if rule 2 had found nothing, and the reason says so. That keeps a
//! huge torn record with unlucky content from ever blocking a restart; exhausting the budget
//! over real data needs both a damaged length field and such content.
//!
//! Known limits, both erring toward refusing to start rather than losing acknowledged records:
//! after a power loss, a filesystem that persisted a later page of an unacknowledged group but
//! not an earlier one leaves a damaged record followed by data, which reads as `Corrupt`; and a
//! torn record whose payload happens to contain a whole framed record reads as `Corrupt`. In both
//! cases the offset reported is where an operator who knows the group was unacknowledged would
//! truncate.
//!
//! # The header
//!
//! A segment whose bytes are a prefix of the expected header (including the empty segment),
//! optionally followed by zero bytes only, holds no record: the process died right after creating
//! it. That is [`Tail::Torn`] at offset 0, not an error. Any other header that is short or has the
//! wrong magic is [`FramingError::BadHeader`]; another version is
//! [`FramingError::UnsupportedVersion`]; a non-zero reserved field is `BadHeader`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::fmt;
use std::iter::FusedIterator;

/// The 8 bytes every segment starts with.
pub const MAGIC: [u8; 8] = *b"SHARDWJ\0";

/// The segment format version this module writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Length of the segment header: magic, version (`u32` LE), reserved (`u32` LE, zero).
pub const HEADER_LEN: usize = 16;

/// Framing bytes in front of every payload: length (`u32` LE) and masked CRC32C (`u32` LE).
pub const RECORD_OVERHEAD: usize = 8;

/// Largest payload a record may carry: 64 MiB.
pub const MAX_RECORD_LEN: usize = 64 * 1024 * 1024;

/// Added to the rotated CRC, as in `LevelDB` and `TFRecord`.
const CRC_MASK_DELTA: u32 = 0xa282_ead8;

/// Most CRC work (in bytes hashed) the search for an intact record after damage may do.
const RESYNC_CRC_BUDGET: usize = 4 * MAX_RECORD_LEN;

/// The 16-byte header that starts every segment of the current [`FORMAT_VERSION`].
#[must_use]
pub fn segment_header() -> [u8; HEADER_LEN] {
    let mut header = [0u8; HEADER_LEN];
    let (magic, rest) = header.split_at_mut(MAGIC.len());
    magic.copy_from_slice(&MAGIC);
    for (dst, src) in rest.iter_mut().zip(FORMAT_VERSION.to_le_bytes()) {
        *dst = src;
    }
    header
}

/// Number of bytes [`encode_record`] appends for a payload of `payload_len` bytes
/// (`payload_len + RECORD_OVERHEAD`, saturating). It does not check the length.
#[must_use]
pub fn encoded_len(payload_len: usize) -> usize {
    payload_len.saturating_add(RECORD_OVERHEAD)
}

/// Appends one framed record carrying `payload` to `out`.
///
/// # Errors
///
/// Refuses an empty payload ([`FramingError::EmptyRecord`]) and one longer than
/// [`MAX_RECORD_LEN`] ([`FramingError::RecordTooLarge`]); on refusal `out` is left unchanged.
pub fn encode_record(payload: &[u8], out: &mut Vec<u8>) -> Result<(), FramingError> {
    if payload.is_empty() {
        return Err(FramingError::EmptyRecord);
    }
    let too_large = FramingError::RecordTooLarge { len: payload.len() };
    if payload.len() > MAX_RECORD_LEN {
        return Err(too_large);
    }
    let len_field = u32::try_from(payload.len()).map_err(|_| too_large)?.to_le_bytes();
    let crc = record_crc(len_field, payload);
    out.reserve(encoded_len(payload.len()));
    out.extend_from_slice(&len_field);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// One intact record read from a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Offset of the record's length field from the start of the segment.
    pub offset: u64,
    /// The payload, which passed its CRC check.
    pub payload: &'a [u8],
}

impl Record<'_> {
    /// Offset just past this record: where the next record starts.
    #[must_use]
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(to_u64(encoded_len(self.payload.len())))
    }
}

/// How a segment ends after its last intact record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// The last record ends exactly at the end of the segment.
    Clean,
    /// The segment ends in an interrupted append (or zero fill): nothing after `offset` can
    /// have been acknowledged. Truncate the segment to `offset` bytes before appending to it.
    Torn {
        /// Where the good prefix ends: the length to truncate the segment to.
        offset: u64,
        /// Number of bytes after `offset`, all dropped.
        discarded: u64,
        /// What was found at `offset`, for the warning to log.
        reason: String,
    },
}

/// The records of a segment, in order, and how it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// Every intact record before the tail, in segment order.
    pub records: Vec<Record<'a>>,
    /// Whether the segment ended cleanly or in a torn append.
    pub tail: Tail,
}

/// Why a segment could not be read or a record could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FramingError {
    /// The segment does not start with a valid header (and is not a torn, just-created one).
    #[error("bad journal segment header: {reason}")]
    BadHeader {
        /// What is wrong with the header.
        reason: String,
    },
    /// The segment was written in a format version this build does not read.
    #[error(
        "unsupported journal segment format version {version} (this build reads {FORMAT_VERSION})"
    )]
    UnsupportedVersion {
        /// The version found in the header.
        version: u32,
    },
    /// A damaged record is followed by more data, so it was not an interrupted final append:
    /// refuse to start.
    #[error("journal segment corrupt at byte offset {offset}: {reason}")]
    Corrupt {
        /// Offset of the damaged record's length field.
        offset: u64,
        /// What is damaged and what follows it.
        reason: String,
    },
    /// [`encode_record`] was given an empty payload.
    #[error("journal records must not be empty")]
    EmptyRecord,
    /// [`encode_record`] was given a payload longer than [`MAX_RECORD_LEN`].
    #[error("journal record of {len} bytes exceeds the maximum of {MAX_RECORD_LEN} bytes")]
    RecordTooLarge {
        /// Length of the refused payload.
        len: usize,
    },
}

/// Decodes a whole segment: every intact record, then the [`Tail`].
///
/// A torn final append is not an error: it is reported in [`Decoded::tail`].
///
/// # Errors
///
/// [`FramingError::BadHeader`] and [`FramingError::UnsupportedVersion`] for a header this build
/// cannot read, and [`FramingError::Corrupt`] for damage followed by more data; see the
/// [module documentation](self) for the exact rule.
pub fn decode_segment(bytes: &[u8]) -> Result<Decoded<'_>, FramingError> {
    let mut records = Vec::new();
    let mut pos = match check_header(bytes)? {
        HeaderCheck::Valid => HEADER_LEN,
        HeaderCheck::Torn(tail) => return Ok(Decoded { records, tail }),
    };
    loop {
        match step(bytes, pos) {
            Step::Record(record, next) => {
                records.push(record);
                pos = next;
            }
            Step::End(tail) => return Ok(Decoded { records, tail }),
            Step::Corrupt(error) => return Err(error),
        }
    }
}

/// Reads a segment's records one at a time, without collecting them.
///
/// Checks the header first (the same errors as [`decode_segment`]). The iterator then yields each
/// intact record in order; on corruption it yields one `Err(FramingError::Corrupt { .. })` and
/// stops. When it has returned `None` without an error, [`Records::tail`] tells how the segment
/// ends. It yields exactly what [`decode_segment`] returns.
///
/// # Errors
///
/// [`FramingError::BadHeader`] and [`FramingError::UnsupportedVersion`] for a header this build
/// cannot read (a torn, just-created header is not an error: the iterator is then empty and its
/// tail is torn at offset 0).
pub fn records(bytes: &[u8]) -> Result<Records<'_>, FramingError> {
    let state = match check_header(bytes)? {
        HeaderCheck::Valid => State::At(HEADER_LEN),
        HeaderCheck::Torn(tail) => State::Done(tail),
    };
    Ok(Records { bytes, state })
}

/// Iterator over the records of a segment; see [`records`].
pub struct Records<'a> {
    bytes: &'a [u8],
    state: State,
}

#[derive(Debug)]
enum State {
    /// The next record starts at this offset.
    At(usize),
    /// Finished without error.
    Done(Tail),
    /// Finished after yielding an error.
    Failed,
}

impl Records<'_> {
    /// How the segment ends: `Some` once the iterator has returned `None` without yielding an
    /// error, `None` before that or after an error.
    #[must_use]
    pub fn tail(&self) -> Option<&Tail> {
        match &self.state {
            State::Done(tail) => Some(tail),
            State::At(_) | State::Failed => None,
        }
    }
}

impl fmt::Debug for Records<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Records")
            .field("segment_len", &self.bytes.len())
            .field("state", &self.state)
            .finish()
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, FramingError>;

    fn next(&mut self) -> Option<Self::Item> {
        let State::At(pos) = self.state else {
            return None;
        };
        match step(self.bytes, pos) {
            Step::Record(record, next) => {
                self.state = State::At(next);
                Some(Ok(record))
            }
            Step::End(tail) => {
                self.state = State::Done(tail);
                None
            }
            Step::Corrupt(error) => {
                self.state = State::Failed;
                Some(Err(error))
            }
        }
    }
}

impl FusedIterator for Records<'_> {}

enum HeaderCheck {
    Valid,
    Torn(Tail),
}

fn check_header(bytes: &[u8]) -> Result<HeaderCheck, FramingError> {
    let expected = segment_header();
    let first_mismatch = bytes.iter().zip(expected.iter()).position(|(found, want)| found != want);
    let Some(mismatch) = first_mismatch else {
        if bytes.len() >= HEADER_LEN {
            return Ok(HeaderCheck::Valid);
        }
        return Ok(HeaderCheck::Torn(Tail::Torn {
            offset: 0,
            discarded: to_u64(bytes.len()),
            reason: format!(
                "segment holds only {} of the {HEADER_LEN} header bytes (crash while creating it)",
                bytes.len()
            ),
        }));
    };
    if bytes.get(mismatch..).is_some_and(all_zero) {
        return Ok(HeaderCheck::Torn(Tail::Torn {
            offset: 0,
            discarded: to_u64(bytes.len()),
            reason: format!(
                "segment holds {mismatch} of the {HEADER_LEN} header bytes followed only by zero \
                 bytes (crash while creating it)"
            ),
        }));
    }
    let Some((&header, _)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        let magic_prefix = bytes.get(..MAGIC.len()).unwrap_or(bytes);
        let reason = if mismatch < MAGIC.len() {
            format!("wrong magic: segment starts with \"{}\"", magic_prefix.escape_ascii())
        } else {
            format!("segment is {} bytes, shorter than the {HEADER_LEN}-byte header", bytes.len())
        };
        return Err(FramingError::BadHeader { reason });
    };
    let [m0, m1, m2, m3, m4, m5, m6, m7, v0, v1, v2, v3, r0, r1, r2, r3] = header;
    let magic = [m0, m1, m2, m3, m4, m5, m6, m7];
    if magic != MAGIC {
        return Err(FramingError::BadHeader {
            reason: format!(
                "wrong magic \"{}\", expected \"{}\"",
                magic.escape_ascii(),
                MAGIC.escape_ascii()
            ),
        });
    }
    let version = u32::from_le_bytes([v0, v1, v2, v3]);
    if version != FORMAT_VERSION {
        return Err(FramingError::UnsupportedVersion { version });
    }
    let reserved = u32::from_le_bytes([r0, r1, r2, r3]);
    if reserved != 0 {
        return Err(FramingError::BadHeader {
            reason: format!("reserved header field is {reserved:#010x}, expected 0"),
        });
    }
    // Unreachable: a mismatch was found, yet every field matches.
    Ok(HeaderCheck::Valid)
}

/// The outcome of reading at one offset.
enum Step<'a> {
    /// An intact record, and the offset just past it.
    Record(Record<'a>, usize),
    /// No more records.
    End(Tail),
    /// Damage followed by data.
    Corrupt(FramingError),
}

/// Reads the record at `pos` (an offset after the header), or judges the damage found there.
fn step(bytes: &[u8], pos: usize) -> Step<'_> {
    let rest = bytes.get(pos..).unwrap_or_default();
    if rest.is_empty() {
        return Step::End(Tail::Clean);
    }
    if all_zero(rest) {
        return Step::End(torn(
            bytes,
            pos,
            format!("{} zero bytes after the last record (zero fill)", rest.len()),
        ));
    }
    let Some((&framing, after_framing)) = rest.split_first_chunk::<RECORD_OVERHEAD>() else {
        return Step::End(torn(
            bytes,
            pos,
            format!(
                "{} bytes after the last record, fewer than the {RECORD_OVERHEAD}-byte record \
                 framing",
                rest.len()
            ),
        ));
    };
    let (len_field, stored_crc) = split_framing(framing);
    let len = u32::from_le_bytes(len_field);
    let framing_end = pos.saturating_add(RECORD_OVERHEAD);
    let Some(len) = valid_len(len) else {
        let problem = format!("invalid length field {len} (must be 1..={MAX_RECORD_LEN})");
        return damaged(bytes, pos, framing_end, problem);
    };
    let Some(payload) = after_framing.get(..len) else {
        let problem = format!(
            "length field says {len} payload bytes but only {} remain",
            after_framing.len()
        );
        return damaged(bytes, pos, bytes.len(), problem);
    };
    let computed_crc = record_crc(len_field, payload);
    let end = framing_end.saturating_add(len);
    if computed_crc != stored_crc {
        let problem = format!(
            "CRC mismatch (stored {stored_crc:#010x}, computed {computed_crc:#010x}) over {len} \
             payload bytes"
        );
        return damaged(bytes, pos, end, problem);
    }
    Step::Record(Record { offset: to_u64(pos), payload }, end)
}

/// Judges a damaged record at `pos` whose claimed bytes end at `extent`; see the module docs.
fn damaged(bytes: &[u8], pos: usize, extent: usize, problem: String) -> Step<'_> {
    let corrupt = |detail: String| {
        Step::Corrupt(FramingError::Corrupt {
            offset: to_u64(pos),
            reason: format!("{problem}; {detail}"),
        })
    };
    let after = bytes.get(extent..).unwrap_or_default();
    if let Some(i) = after.iter().position(|&b| b != 0) {
        let at = extent.saturating_add(i);
        return corrupt(format!("non-zero data follows the damaged record at offset {at}"));
    }
    let follows = if after.is_empty() { "it runs to the end" } else { "only zero bytes follow it" };
    match find_intact_record(bytes, pos.saturating_add(1), extent) {
        Search::Found(at) => corrupt(format!("an intact record starts inside it at offset {at}")),
        Search::NotFound => {
            Step::End(torn(bytes, pos, format!("record at offset {pos}: {problem}; {follows}")))
        }
        Search::GaveUp => Step::End(torn(
            bytes,
            pos,
            format!(
                "record at offset {pos}: {problem}; {follows} (the search for intact records \
                 inside it stopped after {RESYNC_CRC_BUDGET} bytes of CRC work)"
            ),
        )),
    }
}

enum Search {
    Found(usize),
    NotFound,
    GaveUp,
}

/// Looks for an intact record starting at any offset in `from..until`.
fn find_intact_record(bytes: &[u8], from: usize, until: usize) -> Search {
    let mut budget = RESYNC_CRC_BUDGET;
    for at in from..until {
        let Some((&framing, after_framing)) =
            bytes.get(at..).and_then(<[u8]>::split_first_chunk::<RECORD_OVERHEAD>)
        else {
            break;
        };
        let (len_field, stored_crc) = split_framing(framing);
        let Some(len) = valid_len(u32::from_le_bytes(len_field)) else {
            continue;
        };
        let Some(payload) = after_framing.get(..len) else {
            continue;
        };
        let cost = len.saturating_add(len_field.len());
        let Some(left) = budget.checked_sub(cost) else {
            return Search::GaveUp;
        };
        budget = left;
        if record_crc(len_field, payload) == stored_crc {
            return Search::Found(at);
        }
    }
    Search::NotFound
}

fn torn(bytes: &[u8], pos: usize, reason: String) -> Tail {
    Tail::Torn { offset: to_u64(pos), discarded: to_u64(bytes.len().saturating_sub(pos)), reason }
}

fn split_framing(framing: [u8; RECORD_OVERHEAD]) -> ([u8; 4], u32) {
    let [l0, l1, l2, l3, c0, c1, c2, c3] = framing;
    ([l0, l1, l2, l3], u32::from_le_bytes([c0, c1, c2, c3]))
}

/// The payload length if the length field is valid (`1..=MAX_RECORD_LEN`).
fn valid_len(len: u32) -> Option<usize> {
    usize::try_from(len).ok().filter(|len| (1..=MAX_RECORD_LEN).contains(len))
}

fn record_crc(len_field: [u8; 4], payload: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c_append(crc32c::crc32c(&len_field), payload))
}

/// The `LevelDB`/`TFRecord` mask: `((crc >> 15) | (crc << 17)).wrapping_add(0xa282ead8)`.
fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(CRC_MASK_DELTA)
}

fn all_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
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
                let end =
                    if decoded.records.is_empty() { HEADER_LEN as u64 } else { expected_offset };
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
        let ends: Vec<usize> = offsets
            .iter()
            .zip(&payloads)
            .map(|(&o, p)| o as usize + encoded_len(p.len()))
            .collect();
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
}
