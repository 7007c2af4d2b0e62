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
mod tests;
