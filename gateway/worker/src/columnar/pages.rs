//! A Parquet row group's column chunks in memory, their page headers checked before the
//! decoder reads them.
//!
//! The decoder trusts the sizes a page header declares: it allocates the uncompressed size
//! before decompressing, and the lengths of the statistics' values before reading them. So
//! every page header of the chunks to decode is parsed here first (Thrift's compact
//! protocol; only the sizes are kept, the rest is skipped with every length checked against
//! the bytes left), and the decoder then reads *the same bytes*, from memory: a file changed
//! in between cannot slip another header past the check.

use std::ops::Range;

use bytes::{Buf as _, Bytes};
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

/// How deep Thrift structures may nest in a page header (the format needs 3).
const MAX_DEPTH: u32 = 16;

/// Byte ranges of a file, read into memory; the decoder may read within any one of them.
#[derive(Debug, Clone)]
pub(crate) struct Ranges {
    len: u64,
    /// Disjoint, sorted by start.
    parts: Vec<(u64, Bytes)>,
}

impl Ranges {
    /// `parts` (disjoint, sorted) of a file of `len` bytes.
    pub(crate) fn new(len: u64, parts: Vec<(u64, Bytes)>) -> Ranges {
        Ranges { len, parts }
    }

    /// The bytes of `range`, if one part holds them all.
    pub(crate) fn get(&self, range: Range<u64>) -> Option<Bytes> {
        let i = self.parts.partition_point(|(start, _)| *start <= range.start).checked_sub(1)?;
        let (start, bytes) = self.parts.get(i)?;
        let from = usize::try_from(range.start.checked_sub(*start)?).ok()?;
        let to = usize::try_from(range.end.checked_sub(*start)?).ok()?;
        (from <= to && to <= bytes.len()).then(|| bytes.slice(from..to))
    }

    /// The bytes from `start` to the end of the part holding it.
    fn rest(&self, start: u64) -> Option<Bytes> {
        let i = self.parts.partition_point(|(s, _)| *s <= start).checked_sub(1)?;
        let (s, bytes) = self.parts.get(i)?;
        let from = usize::try_from(start.checked_sub(*s)?).ok()?;
        (from <= bytes.len()).then(|| bytes.slice(from..))
    }
}

impl Length for Ranges {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for Ranges {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        self.rest(start).map(Bytes::reader).ok_or_else(|| outside(start, 0))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let end = u64::try_from(length).ok().and_then(|l| start.checked_add(l));
        end.and_then(|end| self.get(start..end)).ok_or_else(|| outside(start, length))
    }
}

fn outside(start: u64, length: usize) -> ParquetError {
    ParquetError::EOF(format!("{length} bytes at offset {start} are outside the column chunks"))
}

/// What the page headers of a column chunk declare.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ChunkPages {
    /// The uncompressed sizes of its data pages, added up.
    pub(crate) data_bytes: u64,
    /// The value counts of its data pages, added up.
    pub(crate) data_values: u64,
    /// The uncompressed size of its dictionary pages.
    pub(crate) dict_bytes: u64,
    /// The value count of its dictionary pages.
    pub(crate) dict_values: u64,
    /// How many pages it has.
    pub(crate) pages: u64,
}

/// Why a column chunk's pages were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PageError {
    /// The headers do not parse, or a page does not fit in the chunk.
    Malformed { page: u64, why: String },
    /// A page declares more (uncompressed bytes, or values at 8 bytes each) than the limit.
    TooLarge { page: u64, bytes: u64 },
}

/// Walks the pages of the column chunk `chunk` (its bytes, header to header), checking each
/// header and that a page declares at most `max_page` bytes.
pub(crate) fn scan(chunk: &[u8], max_page: u64) -> Result<ChunkPages, PageError> {
    let mut out = ChunkPages::default();
    let mut pos = 0usize;
    while pos < chunk.len() {
        let page = out.pages;
        let malformed = |why: String| PageError::Malformed { page, why };
        let rest = chunk.get(pos..).unwrap_or_default();
        let mut r = Reader { buf: rest, pos: 0 };
        let header = r.page_header().map_err(|e| malformed(e.0))?;
        let (Ok(compressed), Ok(uncompressed)) =
            (u64::try_from(header.compressed), u64::try_from(header.uncompressed))
        else {
            return Err(malformed("declares a negative size".to_owned()));
        };
        let values = u64::try_from(header.values.unwrap_or(0))
            .map_err(|_| malformed("declares a negative value count".to_owned()))?;
        let body = usize::try_from(compressed).unwrap_or(usize::MAX);
        if body > rest.len().saturating_sub(r.pos) {
            return Err(malformed(format!(
                "declares {compressed} bytes, more than its column chunk has left"
            )));
        }
        let bytes = uncompressed.max(values.saturating_mul(8));
        if bytes > max_page {
            return Err(PageError::TooLarge { page, bytes });
        }
        if header.kind == DICTIONARY_PAGE {
            out.dict_bytes = out.dict_bytes.saturating_add(uncompressed);
            out.dict_values = out.dict_values.saturating_add(values);
        } else {
            out.data_bytes = out.data_bytes.saturating_add(uncompressed);
            out.data_values = out.data_values.saturating_add(values);
        }
        out.pages = out.pages.saturating_add(1);
        pos = pos.saturating_add(r.pos).saturating_add(body);
    }
    Ok(out)
}

/// The sizes a page header declares.
#[derive(Debug, Default)]
struct Header {
    /// The page type (`DICTIONARY_PAGE`, or a data or index page).
    kind: i32,
    uncompressed: i32,
    compressed: i32,
    /// The value count of a data or dictionary page header.
    values: Option<i32>,
}

#[derive(Debug)]
struct Malformed(String);

fn malformed(why: &str) -> Malformed {
    Malformed(why.to_owned())
}

/// The page type of a dictionary page.
const DICTIONARY_PAGE: i32 = 2;

/// Thrift compact protocol types.
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    /// `PageHeader`: 1 type, 2 uncompressed_page_size, 3 compressed_page_size, 5/7/8 the
    /// data (v1), dictionary and data (v2) page headers, whose field 1 is num_values.
    fn page_header(&mut self) -> Result<Header, Malformed> {
        let mut header = Header::default();
        let mut seen = [false; 3];
        let mut last = 0i16;
        while let Some((id, ty)) = self.field(&mut last)? {
            match (id, ty) {
                (1..=3, I32) => {
                    let slot = seen.get_mut(usize::from(id.unsigned_abs()) - 1);
                    match slot {
                        Some(s) if !*s => *s = true,
                        _ => return Err(malformed("repeats a field")),
                    }
                    let v = self.i32()?;
                    match id {
                        1 => header.kind = v,
                        2 => header.uncompressed = v,
                        3 => header.compressed = v,
                        _ => {}
                    }
                }
                (5 | 7 | 8, STRUCT) => {
                    let values = self.num_values()?;
                    header.values = Some(header.values.unwrap_or(0).max(values.unwrap_or(0)));
                }
                (1..=3 | 5 | 7 | 8, _) => return Err(malformed("has a field of the wrong type")),
                _ => self.skip(ty, 1, false)?,
            }
        }
        if seen != [true; 3] {
            return Err(malformed("lacks its type or sizes"));
        }
        Ok(header)
    }

    /// A data or dictionary page header: its field 1 (num_values), the rest skipped.
    fn num_values(&mut self) -> Result<Option<i32>, Malformed> {
        let mut values = None;
        let mut last = 0i16;
        while let Some((id, ty)) = self.field(&mut last)? {
            if id == 1 && ty == I32 {
                let v = self.i32()?;
                values = Some(values.unwrap_or(0).max(v));
            } else {
                self.skip(ty, 2, false)?;
            }
        }
        Ok(values)
    }

    /// The next field header of a struct (its id and type), or `None` at its end.
    fn field(&mut self, last: &mut i16) -> Result<Option<(i16, u8)>, Malformed> {
        let b = self.byte()?;
        if b == 0 {
            return Ok(None);
        }
        let ty = b & 0x0f;
        let delta = i16::from(b >> 4);
        let id = if delta == 0 {
            i16::try_from(unzigzag(self.varint()?)).map_err(|_| malformed("has a bad field id"))?
        } else {
            last.checked_add(delta).ok_or_else(|| malformed("has a bad field id"))?
        };
        *last = id;
        Ok(Some((id, ty)))
    }

    /// Skips a value of type `ty` (`in_list`: a list element, where booleans take a byte).
    fn skip(&mut self, ty: u8, depth: u32, in_list: bool) -> Result<(), Malformed> {
        if depth > MAX_DEPTH {
            return Err(malformed("nests too deep"));
        }
        match ty {
            BOOL_TRUE | BOOL_FALSE if !in_list => Ok(()),
            BOOL_TRUE | BOOL_FALSE | BYTE => self.take(1),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.take(8),
            BINARY => {
                let len = self.varint()?;
                self.take(usize::try_from(len).unwrap_or(usize::MAX))
            }
            LIST | SET => {
                let head = self.byte()?;
                let elem = head & 0x0f;
                let size = match head >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                // Every element takes at least one byte.
                if size > self.left() {
                    return Err(malformed("declares a list longer than its bytes"));
                }
                for _ in 0..size {
                    self.skip(elem, depth + 1, true)?;
                }
                Ok(())
            }
            MAP => {
                let size = self.varint()?;
                if size == 0 {
                    return Ok(());
                }
                let kinds = self.byte()?;
                if size > self.left() / 2 {
                    return Err(malformed("declares a map longer than its bytes"));
                }
                for _ in 0..size {
                    self.skip(kinds >> 4, depth + 1, true)?;
                    self.skip(kinds & 0x0f, depth + 1, true)?;
                }
                Ok(())
            }
            STRUCT => {
                let mut last = 0i16;
                while let Some((_, t)) = self.field(&mut last)? {
                    self.skip(t, depth + 1, false)?;
                }
                Ok(())
            }
            _ => Err(malformed("has a value of an unknown type")),
        }
    }

    fn left(&self) -> u64 {
        u64::try_from(self.buf.len().saturating_sub(self.pos)).unwrap_or(u64::MAX)
    }

    fn byte(&mut self) -> Result<u8, Malformed> {
        let b = self.buf.get(self.pos).copied().ok_or_else(|| malformed("is cut short"))?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<(), Malformed> {
        match self.pos.checked_add(n) {
            Some(end) if end <= self.buf.len() => {
                self.pos = end;
                Ok(())
            }
            _ => Err(malformed("is cut short")),
        }
    }

    fn varint(&mut self) -> Result<u64, Malformed> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(malformed("has a varint longer than 10 bytes"))
    }

    fn i32(&mut self) -> Result<i32, Malformed> {
        i32::try_from(unzigzag(self.varint()?)).map_err(|_| malformed("has an i32 out of range"))
    }
}

fn unzigzag(n: u64) -> i64 {
    let half = i64::try_from(n >> 1).unwrap_or(i64::MAX);
    if n & 1 == 0 { half } else { -half - 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compact-protocol page header with the given sizes and a data page header of
    /// `values` values, then `extra` (raw field bytes) before the stop.
    fn header(uncompressed: i32, compressed: i32, values: i32, extra: &[u8]) -> Vec<u8> {
        fn zz(v: i32) -> Vec<u8> {
            let mut n = ((v << 1) ^ (v >> 31)) as u32 as u64;
            let mut out = Vec::new();
            loop {
                let b = (n & 0x7f) as u8;
                n >>= 7;
                if n == 0 {
                    out.push(b);
                    return out;
                }
                out.push(b | 0x80);
            }
        }
        let mut h = vec![0x15];
        h.extend(zz(0));
        h.push(0x15);
        h.extend(zz(uncompressed));
        h.push(0x15);
        h.extend(zz(compressed));
        h.push(0x2c); // field 5, struct
        h.push(0x15);
        h.extend(zz(values));
        h.push(0);
        h.extend_from_slice(extra);
        h.push(0);
        h
    }

    #[test]
    fn page_headers_are_walked_and_bounded() {
        let mut chunk = header(10, 3, 2, &[]);
        chunk.extend([1, 2, 3]);
        chunk.extend(header(20, 0, 1, &[]));
        let pages = ChunkPages { data_bytes: 30, data_values: 3, pages: 2, ..Default::default() };
        assert_eq!(scan(&chunk, 100), Ok(pages));
        assert_eq!(scan(&chunk, 19), Err(PageError::TooLarge { page: 1, bytes: 20 }));
        // Values count at 8 bytes each.
        let many = header(1, 0, 1000, &[]);
        assert_eq!(scan(&many, 7999), Err(PageError::TooLarge { page: 0, bytes: 8000 }));
        // A page longer than the chunk, a header cut short, a negative size.
        assert!(matches!(scan(&header(10, 4, 1, &[]), 100), Err(PageError::Malformed { .. })));
        let whole = header(10, 0, 1, &[]);
        let cut = &whole[..whole.len() - 1];
        assert!(matches!(scan(cut, 100), Err(PageError::Malformed { .. })));
        assert!(matches!(scan(&header(-1, 0, 1, &[]), 100), Err(PageError::Malformed { .. })));
        // A binary field (statistics) declaring more bytes than there are.
        let lying = header(1, 0, 1, &[0x18, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(scan(&lying, 100), Err(PageError::Malformed { .. })));
        // A list declaring a billion elements in a few bytes.
        let list = header(1, 0, 1, &[0x19, 0xf5, 0x80, 0x94, 0xeb, 0xdc, 0x03]);
        assert!(matches!(scan(&list, 100), Err(PageError::Malformed { .. })));
        // Garbage never panics.
        for seed in 0u32..2000 {
            let bytes: Vec<u8> =
                (0..64u32).map(|i| (seed.wrapping_mul(2654435761) >> (i % 24)) as u8).collect();
            let _ = scan(&bytes, 1 << 20);
        }
    }

    #[test]
    fn ranges_serve_reads_within_one_part() {
        let r = Ranges::new(100, vec![(10, Bytes::from_static(b"abcdef")), (50, Bytes::new())]);
        assert_eq!(r.get_bytes(11, 3).unwrap().as_ref(), b"bcd");
        assert!(r.get_bytes(14, 3).is_err());
        assert!(r.get_bytes(5, 1).is_err());
        assert!(r.get_bytes(u64::MAX, 2).is_err());
        let mut s = String::new();
        std::io::Read::read_to_string(&mut r.get_read(12).unwrap(), &mut s).unwrap();
        assert_eq!(s, "cdef");
        assert!(r.get_read(17).is_err());
        assert_eq!(r.len(), 100);
    }
}
