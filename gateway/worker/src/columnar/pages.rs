//! A Parquet row group's column chunks in memory, their page headers checked before the
//! decoder reads them, and their pages handed to the decoder decompressed.
//!
//! The decoder would trust the sizes a page header declares: it allocates the uncompressed
//! size before decompressing, and the lengths of the statistics' values before reading them.
//! So every page header of the chunks to decode is parsed here first ([`scan`]: Thrift's
//! compact protocol; only the sizes are kept, the rest is skipped with every length checked
//! against the bytes left). The decoder then reads *the same bytes*, from memory, through
//! [`ColumnPages`]: a file changed in between cannot slip another header past the check. That
//! page reader parses each header again (the fields a page needs: its type, sizes, value
//! count and encodings; statistics are skipped), decompresses the body into exactly its
//! declared size (`codec`), and passes over a page the decoder skips without decompressing
//! it.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use parquet::arrow::arrow_reader::RowGroups;
use parquet::basic::{Compression, Encoding};
use parquet::column::page::{Page, PageIterator, PageMetadata, PageReader};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};

use super::codec::Codec;

/// How deep Thrift structures may nest in a page header (the format needs 3).
const MAX_DEPTH: u32 = 16;

/// Byte ranges of a file, read into memory; a column chunk is taken from any one of them.
#[derive(Debug, Clone)]
pub(crate) struct Ranges {
    /// Disjoint, sorted by start.
    parts: Vec<(u64, Bytes)>,
}

impl Ranges {
    /// `parts` (disjoint, sorted) of a file.
    pub(crate) fn new(parts: Vec<(u64, Bytes)>) -> Ranges {
        Ranges { parts }
    }

    /// The bytes of `range`, if one part holds them all.
    pub(crate) fn get(&self, range: Range<u64>) -> Option<Bytes> {
        let i = self.parts.partition_point(|(start, _)| *start <= range.start).checked_sub(1)?;
        let (start, bytes) = self.parts.get(i)?;
        let from = usize::try_from(range.start.checked_sub(*start)?).ok()?;
        let to = usize::try_from(range.end.checked_sub(*start)?).ok()?;
        (from <= to && to <= bytes.len()).then(|| bytes.slice(from..to))
    }
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
    /// The uncompressed size of its largest data page.
    pub(crate) largest: u64,
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
            out.largest = out.largest.max(uncompressed);
        }
        out.pages = out.pages.saturating_add(1);
        pos = pos.saturating_add(r.pos).saturating_add(body);
    }
    Ok(out)
}

/// What a page header declares: its type, sizes and the fields of its data, dictionary or
/// (v2) data page header.
#[derive(Debug, Default, Clone)]
pub(crate) struct Header {
    /// The page type (`DICTIONARY_PAGE`, or a data or index page).
    pub(crate) kind: i32,
    pub(crate) uncompressed: i32,
    pub(crate) compressed: i32,
    /// The value count of a data or dictionary page header.
    pub(crate) values: Option<i32>,
    /// Field 5, `DataPageHeader`.
    pub(crate) data: Option<Sub>,
    /// Field 7, `DictionaryPageHeader`.
    pub(crate) dictionary: Option<Sub>,
    /// Field 8, `DataPageHeaderV2`.
    pub(crate) data_v2: Option<Sub>,
}

/// The integer fields (ids 1 to 6) and the boolean (id 3 of a dictionary page header, 7 of a
/// v2 data page header) of a sub-header; statistics are skipped.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Sub {
    pub(crate) ints: [Option<i32>; 6],
    pub(crate) flag: Option<bool>,
}

impl Sub {
    /// Field `id` (1 to 6), if present.
    pub(crate) fn int(&self, id: usize) -> Option<i32> {
        self.ints.get(id.wrapping_sub(1)).copied().flatten()
    }
}

#[derive(Debug)]
pub(crate) struct Malformed(pub(crate) String);

pub(crate) fn malformed(why: &str) -> Malformed {
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
pub(crate) const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
pub(crate) const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
pub(crate) const STRUCT: u8 = 12;

pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl Reader<'_> {
    /// `PageHeader`: 1 type, 2 uncompressed_page_size, 3 compressed_page_size, 5/7/8 the
    /// data (v1), dictionary and data (v2) page headers, whose field 1 is num_values.
    pub(crate) fn page_header(&mut self) -> Result<Header, Malformed> {
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
                    let sub = self.sub_header()?;
                    let slot = match id {
                        5 => &mut header.data,
                        7 => &mut header.dictionary,
                        _ => &mut header.data_v2,
                    };
                    if slot.replace(sub).is_some() {
                        return Err(malformed("repeats a field"));
                    }
                    let values = sub.int(1);
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

    /// A data, dictionary or v2 data page header: its i32 fields 1 to 6 and its boolean
    /// fields, the rest (statistics) skipped.
    fn sub_header(&mut self) -> Result<Sub, Malformed> {
        let mut sub = Sub::default();
        let mut last = 0i16;
        while let Some((id, ty)) = self.field(&mut last)? {
            match (usize::try_from(id), ty) {
                (Ok(i @ 1..=6), I32) => {
                    let v = self.i32()?;
                    if let Some(slot) = sub.ints.get_mut(i - 1)
                        && slot.replace(v).is_some()
                    {
                        return Err(malformed("repeats a field"));
                    }
                }
                (Ok(3 | 7), BOOL_TRUE | BOOL_FALSE) => {
                    if sub.flag.replace(ty == BOOL_TRUE).is_some() {
                        return Err(malformed("repeats a field"));
                    }
                }
                _ => self.skip(ty, 2, false)?,
            }
        }
        Ok(sub)
    }

    /// The next field header of a struct (its id and type), or `None` at its end.
    pub(crate) fn field(&mut self, last: &mut i16) -> Result<Option<(i16, u8)>, Malformed> {
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
    pub(crate) fn skip(&mut self, ty: u8, depth: u32, in_list: bool) -> Result<(), Malformed> {
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
                let (size, elem) = self.list_header()?;
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

    /// A list's (or set's) header: its size (at most the bytes left, as every element takes
    /// at least one) and its elements' type.
    pub(crate) fn list_header(&mut self) -> Result<(u64, u8), Malformed> {
        let head = self.byte()?;
        let elem = head & 0x0f;
        let size = match head >> 4 {
            15 => self.varint()?,
            n => u64::from(n),
        };
        if size > self.left() {
            return Err(malformed("declares a list longer than its bytes"));
        }
        Ok((size, elem))
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

    pub(crate) fn i64(&mut self) -> Result<i64, Malformed> {
        Ok(unzigzag(self.varint()?))
    }

    fn i32(&mut self) -> Result<i32, Malformed> {
        i32::try_from(unzigzag(self.varint()?)).map_err(|_| malformed("has an i32 out of range"))
    }
}

fn unzigzag(n: u64) -> i64 {
    let half = i64::try_from(n >> 1).unwrap_or(i64::MAX);
    if n & 1 == 0 { half } else { -half - 1 }
}

/// The page type of an index page (which readers pass over).
const INDEX_PAGE: i32 = 1;
/// The page types of data pages (v1, v2).
const DATA_PAGE: i32 = 0;
const DATA_PAGE_V2: i32 = 3;

/// The pages of one column chunk, for the decoder: each header parsed again from the bytes
/// [`scan`] checked, each body decompressed by [`Codec`] into exactly the size its header
/// declares (never more), or passed over unread when the decoder skips the page.
pub(crate) struct ColumnPages {
    /// The column chunk's bytes.
    chunk: Bytes,
    /// Where the next page header starts.
    pos: usize,
    codec: Codec,
    /// The next page's header and the range of its body, once peeked.
    next: Option<(Header, Range<usize>)>,
    /// Pages passed so far (for messages).
    page: u64,
    /// `column "name"`, for messages.
    column: Arc<str>,
}

impl std::fmt::Debug for ColumnPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColumnPages")
            .field("column", &self.column)
            .field("codec", &self.codec)
            .finish()
    }
}

impl ColumnPages {
    /// The pages of `chunk`, compressed with `codec`; `column` names it in messages.
    pub(crate) fn new(chunk: Bytes, codec: Codec, column: Arc<str>) -> ColumnPages {
        ColumnPages { chunk, pos: 0, codec, next: None, page: 0, column }
    }

    fn error(&self, what: impl std::fmt::Display) -> ParquetError {
        ParquetError::General(format!("{} page {} {what}", self.column, self.page))
    }

    /// The next page's header and body (index pages passed over), read once.
    fn peek(&mut self) -> parquet::errors::Result<Option<&(Header, Range<usize>)>> {
        while self.next.is_none() {
            let Some(rest) = self.chunk.get(self.pos..).filter(|r| !r.is_empty()) else {
                return Ok(None);
            };
            let mut r = Reader { buf: rest, pos: 0 };
            let header = r.page_header().map_err(|e| self.error(e.0))?;
            let body = usize::try_from(header.compressed)
                .ok()
                .and_then(|n| self.pos.checked_add(r.pos)?.checked_add(n).map(|end| (n, end)))
                .filter(|(_, end)| *end <= self.chunk.len());
            let Some((n, end)) = body else {
                return Err(self.error("does not fit in its column chunk"));
            };
            self.pos = end;
            if header.kind != INDEX_PAGE {
                self.next = Some((header, end - n..end));
            }
        }
        Ok(self.next.as_ref())
    }

    /// `body` decompressed (after its first `levels` bytes, which are not compressed) into
    /// the `declared` bytes of the page.
    fn inflate(
        &mut self,
        body: Bytes,
        levels: usize,
        declared: usize,
    ) -> parquet::errors::Result<Bytes> {
        if self.codec.is_none() {
            return Ok(body);
        }
        let Some(values) = declared.checked_sub(levels).filter(|_| levels <= body.len()) else {
            return Err(self.error("declares level bytes beyond its size"));
        };
        if values == 0 {
            return Ok(body.slice(..levels));
        }
        let compressed = body.get(levels..).unwrap_or_default();
        let name = self.codec.name();
        let inflated = self
            .codec
            .decompress(compressed, values)
            .map_err(|e| self.error(format_args!("({name}) {e}")))?;
        if levels == 0 {
            return Ok(Bytes::from(inflated));
        }
        let mut all = Vec::with_capacity(declared);
        all.extend_from_slice(body.get(..levels).unwrap_or_default());
        all.extend_from_slice(&inflated);
        Ok(Bytes::from(all))
    }

    fn decode(&mut self, header: &Header, body: Range<usize>) -> parquet::errors::Result<Page> {
        let body = self.chunk.slice(body);
        let declared = usize::try_from(header.uncompressed)
            .map_err(|_| self.error("declares a negative size"))?;
        let sub = match header.kind {
            DICTIONARY_PAGE => header.dictionary,
            DATA_PAGE => header.data,
            DATA_PAGE_V2 => header.data_v2,
            other => return Err(self.error(format_args!("is of an unknown type ({other})"))),
        };
        let sub = sub.ok_or_else(|| self.error("lacks the header of its type"))?;
        let count = |id: usize, what: &str| {
            sub.int(id)
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| self.error(format_args!("lacks a valid {what}")))
        };
        let encoding = |id: usize, what: &str| {
            let v = sub.int(id).ok_or_else(|| self.error(format_args!("lacks its {what}")))?;
            Encoding::VARIANTS
                .iter()
                .copied()
                .find(|e| *e as i32 == v)
                .ok_or_else(|| self.error(format_args!("has an unknown {what} ({v})")))
        };
        let num_values = count(1, "value count")?;
        Ok(match header.kind {
            DICTIONARY_PAGE => {
                let encoding = encoding(2, "encoding")?;
                let is_sorted = sub.flag.unwrap_or(false);
                Page::DictionaryPage {
                    buf: self.inflate(body, 0, declared)?,
                    num_values,
                    encoding,
                    is_sorted,
                }
            }
            DATA_PAGE => {
                let (encoding, def_level_encoding, rep_level_encoding) = (
                    encoding(2, "encoding")?,
                    encoding(3, "definition level encoding")?,
                    encoding(4, "repetition level encoding")?,
                );
                Page::DataPage {
                    buf: self.inflate(body, 0, declared)?,
                    num_values,
                    encoding,
                    def_level_encoding,
                    rep_level_encoding,
                    statistics: None,
                }
            }
            _ => {
                let (num_nulls, num_rows) = (count(2, "null count")?, count(3, "row count")?);
                let encoding = encoding(4, "encoding")?;
                let def_levels_byte_len = count(5, "definition levels length")?;
                let rep_levels_byte_len = count(6, "repetition levels length")?;
                let levels = usize::try_from(
                    u64::from(def_levels_byte_len) + u64::from(rep_levels_byte_len),
                )
                .unwrap_or(usize::MAX);
                if levels > declared || levels > body.len() {
                    return Err(self.error("declares level bytes beyond its size"));
                }
                let is_compressed = sub.flag.unwrap_or(true);
                let buf = if is_compressed { self.inflate(body, levels, declared)? } else { body };
                Page::DataPageV2 {
                    buf,
                    num_values,
                    encoding,
                    num_nulls,
                    num_rows,
                    def_levels_byte_len,
                    rep_levels_byte_len,
                    is_compressed,
                    statistics: None,
                }
            }
        })
    }
}

impl Iterator for ColumnPages {
    type Item = parquet::errors::Result<Page>;

    fn next(&mut self) -> Option<Self::Item> {
        self.get_next_page().transpose()
    }
}

impl PageReader for ColumnPages {
    fn get_next_page(&mut self) -> parquet::errors::Result<Option<Page>> {
        self.peek()?;
        let Some((header, body)) = self.next.take() else { return Ok(None) };
        let page = self.decode(&header, body);
        self.page += 1;
        page.map(Some)
    }

    fn peek_next_page(&mut self) -> parquet::errors::Result<Option<PageMetadata>> {
        let Some((header, _)) = self.peek()? else { return Ok(None) };
        let levels =
            |sub: Option<Sub>| sub.and_then(|s| s.int(1)).and_then(|v| usize::try_from(v).ok());
        Ok(Some(match header.kind {
            DICTIONARY_PAGE => PageMetadata { num_rows: None, num_levels: None, is_dict: true },
            DATA_PAGE_V2 => PageMetadata {
                num_rows: header
                    .data_v2
                    .and_then(|s| s.int(3))
                    .and_then(|v| usize::try_from(v).ok()),
                num_levels: levels(header.data_v2),
                is_dict: false,
            },
            _ => PageMetadata { num_rows: None, num_levels: levels(header.data), is_dict: false },
        }))
    }

    fn skip_next_page(&mut self) -> parquet::errors::Result<()> {
        self.peek()?;
        if self.next.take().is_some() {
            self.page += 1;
        }
        Ok(())
    }
}

/// One row group's selected column chunks, in memory, for the decoder: each leaf column's
/// pages come from a [`ColumnPages`].
pub(crate) struct GroupPages {
    pub(crate) metadata: Arc<ParquetMetaData>,
    pub(crate) group: usize,
    /// Per leaf column of the file: its chunk's bytes, codec and name, if it was read.
    pub(crate) chunks: Vec<Option<(Bytes, Compression, Arc<str>)>>,
}

impl RowGroups for GroupPages {
    fn num_rows(&self) -> usize {
        let rows = self.metadata.row_groups().get(self.group).map_or(0, |rg| rg.num_rows());
        usize::try_from(rows).unwrap_or(0)
    }

    fn column_chunks(&self, i: usize) -> parquet::errors::Result<Box<dyn PageIterator>> {
        let Some(Some((bytes, compression, column))) = self.chunks.get(i) else {
            return Err(ParquetError::General(format!("leaf column {i} was not read")));
        };
        let codec =
            Codec::new(*compression).map_err(|e| ParquetError::General(format!("{column} {e}")))?;
        let pages: Box<dyn PageReader> =
            Box::new(ColumnPages::new(bytes.clone(), codec, Arc::clone(column)));
        Ok(Box::new(OnePage(Some(pages))))
    }

    fn row_groups(&self) -> Box<dyn Iterator<Item = &RowGroupMetaData> + '_> {
        Box::new(self.metadata.row_groups().get(self.group).into_iter())
    }

    fn metadata(&self) -> &ParquetMetaData {
        &self.metadata
    }
}

/// The page reader of a column in the one row group.
struct OnePage(Option<Box<dyn PageReader>>);

impl Iterator for OnePage {
    type Item = parquet::errors::Result<Box<dyn PageReader>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.take().map(Ok)
    }
}

impl PageIterator for OnePage {}

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
        let pages = ChunkPages {
            data_bytes: 30,
            data_values: 3,
            pages: 2,
            largest: 20,
            ..Default::default()
        };
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

    /// A v1 data page header (PLAIN values, RLE levels) then `body`.
    fn data_page(uncompressed: i32, values: i32, body: &[u8]) -> Vec<u8> {
        let compressed = i32::try_from(body.len()).unwrap();
        // Fields 2 to 4 of the data page header: encoding PLAIN (0), levels RLE (3, zigzag 6).
        let mut page = header(uncompressed, compressed, values, &[]);
        let at = page.len() - 2; // before the data page header's stop
        page.splice(at..at, [0x15, 0x00, 0x15, 0x06, 0x15, 0x06]);
        page.extend_from_slice(body);
        page
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn pages_are_decompressed_to_their_declared_size_and_no_further() {
        let values: Vec<u8> = (1..=3i64).flat_map(i64::to_le_bytes).collect();
        let mut chunk = data_page(24, 3, &gzip(&values));
        // A second page: 2 MiB of zeros that declares the same 24 bytes.
        chunk.extend(data_page(24, 3, &gzip(&vec![0u8; 2 << 20])));
        chunk.extend(data_page(24, 3, &gzip(&values)));
        let column: Arc<str> = "column \"x\"".into();
        let mut pages = ColumnPages::new(Bytes::from(chunk.clone()), Codec::Gzip, column.clone());
        let meta = pages.peek_next_page().unwrap().unwrap();
        assert_eq!((meta.num_rows, meta.num_levels, meta.is_dict), (None, Some(3), false));
        match pages.get_next_page().unwrap().unwrap() {
            Page::DataPage { buf, num_values: 3, encoding: Encoding::PLAIN, .. } => {
                assert_eq!(buf.as_ref(), values.as_slice());
            }
            other => panic!("{other:?}"),
        }
        let e = pages.get_next_page().unwrap_err().to_string();
        assert!(e.contains("column \"x\" page 1 (gzip) inflates past the 24 bytes"), "{e}");
        // Skipping a page never decompresses it.
        let mut pages = ColumnPages::new(Bytes::from(chunk), Codec::Gzip, column);
        pages.skip_next_page().unwrap();
        pages.skip_next_page().unwrap();
        assert!(pages.get_next_page().unwrap().is_some());
        assert!(pages.get_next_page().unwrap().is_none());
        // A page whose header lies about its body's length, or lacks its encodings.
        let mut lying = data_page(24, 3, &values);
        lying.truncate(lying.len() - 1);
        let mut pages = ColumnPages::new(Bytes::from(lying), Codec::Uncompressed, "c".into());
        assert!(pages.get_next_page().is_err());
        let mut bare = header(24, 24, 3, &[]);
        bare.extend_from_slice(&values);
        let mut pages = ColumnPages::new(Bytes::from(bare), Codec::Uncompressed, "c".into());
        let e = pages.get_next_page().unwrap_err().to_string();
        assert!(e.contains("lacks its encoding"), "{e}");
    }

    #[test]
    fn ranges_serve_reads_within_one_part() {
        let r = Ranges::new(vec![(10, Bytes::from_static(b"abcdef")), (50, Bytes::new())]);
        assert_eq!(r.get(11..14).unwrap().as_ref(), b"bcd");
        assert_eq!(r.get(12..16).unwrap().as_ref(), b"cdef");
        assert!(r.get(14..17).is_none());
        assert!(r.get(5..6).is_none());
        assert!(r.get(u64::MAX - 1..u64::MAX).is_none());
    }
}
