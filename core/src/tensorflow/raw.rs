//! Protobuf's wire format, read field by field: what the graph walkers of [`prepare`](super::prepare)
//! and [`fingerprint`](super::fingerprint) share. Every read is bounded by the input (no length
//! is trusted before it is checked against what is left); groups, invalid wire types and
//! field number 0 are [`Malformed`].

/// The bytes are not the protobuf the walker expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the graph is not a serialized GraphDef")
    }
}

impl std::error::Error for Malformed {}

pub(crate) const WIRE_VARINT: u8 = 0;
pub(crate) const WIRE_I64: u8 = 1;
pub(crate) const WIRE_LEN: u8 = 2;
pub(crate) const WIRE_I32: u8 = 5;

/// The largest field number protobuf allows.
pub(crate) const MAX_FIELD_NUMBER: u64 = (1 << 29) - 1;

/// One field of a message, by position in its bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    pub(crate) number: u64,
    pub(crate) wire: u8,
    /// Where its tag starts.
    pub(crate) start: usize,
    /// Where its tag ends (a length-delimited field's length starts).
    pub(crate) tag_end: usize,
    /// Where its payload starts (after the length of a length-delimited field).
    pub(crate) payload_start: usize,
    /// Where it ends.
    pub(crate) end: usize,
    /// A varint field's value.
    pub(crate) varint: u64,
}

impl Field {
    pub(crate) fn payload<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        &bytes[self.payload_start..self.end]
    }
}

pub(crate) fn varint(bytes: &[u8], at: &mut usize) -> Result<u64, Malformed> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at).ok_or(Malformed)?;
        *at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(Malformed)
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The field at `*at`, which moves past it. Groups, invalid wire types, field number 0 and
/// fields running past the end are [`Malformed`].
pub(crate) fn next_field(bytes: &[u8], at: &mut usize) -> Result<Field, Malformed> {
    let start = *at;
    let tag = varint(bytes, at)?;
    let (number, wire) = (tag >> 3, (tag & 7) as u8);
    if number == 0 || number > MAX_FIELD_NUMBER {
        return Err(Malformed);
    }
    let tag_end = *at;
    let mut value = 0;
    match wire {
        WIRE_VARINT => value = varint(bytes, at)?,
        WIRE_I64 | WIRE_I32 => {
            let n = if wire == WIRE_I64 { 8 } else { 4 };
            *at = at.checked_add(n).filter(|&e| e <= bytes.len()).ok_or(Malformed)?;
        }
        WIRE_LEN => {
            let len = varint(bytes, at)?;
            let len = usize::try_from(len).map_err(|_| Malformed)?;
            let end = at.checked_add(len).filter(|&e| e <= bytes.len()).ok_or(Malformed)?;
            let payload_start = *at;
            *at = end;
            return Ok(Field { number, wire, start, tag_end, payload_start, end, varint: 0 });
        }
        // Groups (3, 4: long deprecated, never in a graph) and wire types 6 and 7.
        _ => return Err(Malformed),
    }
    Ok(Field { number, wire, start, tag_end, payload_start: tag_end, end: *at, varint: value })
}
