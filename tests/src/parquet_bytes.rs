//! Parquet files written byte by byte, for hostile-file tests: pages whose headers lie about
//! what their bodies inflate to, and footers of a million row groups. Thrift's compact
//! protocol is written here by hand (a few field types are all a footer needs), so a test
//! says exactly which bytes a file holds.
//!
//! Every file has one required INT64 column `x` (PLAIN values, no levels), so a page of `n`
//! rows is `8 n` bytes uncompressed.

/// The codec ids of Parquet's `CompressionCodec`.
pub mod codec {
    /// No compression.
    pub const UNCOMPRESSED: i32 = 0;
    /// GZIP (RFC 1952 members).
    pub const GZIP: i32 = 2;
    /// The deprecated LZ4 (Hadoop framing, an LZ4 frame or a raw block).
    pub const LZ4: i32 = 5;
    /// Zstandard.
    pub const ZSTD: i32 = 6;
}

/// Thrift compact protocol types.
const I32: u8 = 5;
const I64: u8 = 6;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const STRUCT: u8 = 12;

/// A writer of one Thrift compact-protocol value, struct by struct.
#[derive(Debug, Default)]
struct Thrift {
    out: Vec<u8>,
    /// The last field id of each open struct.
    last: Vec<i16>,
}

impl Thrift {
    fn varint(&mut self, mut n: u64) {
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.out.push(b);
                return;
            }
            self.out.push(b | 0x80);
        }
    }

    fn zigzag(&mut self, v: i64) {
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }

    fn field(&mut self, id: i16, ty: u8) {
        let last = self.last.last_mut().expect("inside a struct");
        let delta = id - std::mem::replace(last, id);
        if (1..=15).contains(&delta) {
            self.out.push(((delta as u8) << 4) | ty);
        } else {
            self.out.push(ty);
            self.zigzag(i64::from(id));
        }
    }

    fn begin(&mut self) {
        self.last.push(0);
    }

    fn end(&mut self) {
        self.out.push(0);
        self.last.pop();
    }

    fn i32(&mut self, id: i16, v: i32) {
        self.field(id, I32);
        self.zigzag(i64::from(v));
    }

    fn i64(&mut self, id: i16, v: i64) {
        self.field(id, I64);
        self.zigzag(v);
    }

    fn string(&mut self, id: i16, s: &str) {
        self.field(id, BINARY);
        self.varint(s.len() as u64);
        self.out.extend_from_slice(s.as_bytes());
    }

    fn list_header(&mut self, id: i16, n: usize, ty: u8) {
        self.field(id, LIST);
        if n < 15 {
            self.out.push(((n as u8) << 4) | ty);
        } else {
            self.out.push(0xf0 | ty);
            self.varint(n as u64);
        }
    }

    fn structure(&mut self, id: i16, f: impl FnOnce(&mut Thrift)) {
        self.field(id, STRUCT);
        self.begin();
        f(self);
        self.end();
    }

    fn structs(&mut self, id: i16, n: usize, mut f: impl FnMut(&mut Thrift, usize)) {
        self.list_header(id, n, STRUCT);
        for i in 0..n {
            self.begin();
            f(self, i);
            self.end();
        }
    }
}

/// A data page header: `declared` uncompressed bytes, a body of `compressed` bytes, `rows`
/// values (PLAIN, RLE levels).
fn page_header(declared: i32, compressed: usize, rows: i32) -> Vec<u8> {
    let mut t = Thrift::default();
    t.begin();
    t.i32(1, 0); // DATA_PAGE
    t.i32(2, declared);
    t.i32(3, i32::try_from(compressed).expect("a page under 2 GiB"));
    t.structure(5, |t| {
        t.i32(1, rows);
        t.i32(2, 0); // PLAIN
        t.i32(3, 3); // RLE
        t.i32(4, 3);
    });
    t.end();
    t.out
}

/// The footer of a file whose `groups` row groups of `rows` rows each all point at the one
/// column chunk `[4, 4 + chunk)` (whose pages hold `declared` bytes), compressed with `codec`.
fn footer(groups: usize, rows: i64, codec: i32, chunk: usize, declared: i64) -> Vec<u8> {
    let mut t = Thrift::default();
    t.begin();
    t.i32(1, 1); // version
    t.structs(2, 2, |t, i| {
        if i == 0 {
            t.string(4, "schema");
            t.i32(5, 1); // num_children
        } else {
            t.i32(1, 2); // INT64
            t.i32(3, 0); // REQUIRED
            t.string(4, "x");
        }
    });
    t.i64(3, rows * groups as i64);
    t.structs(4, groups, |t, _| {
        t.structs(1, 1, |t, _| {
            t.i64(2, 4); // file_offset
            t.structure(3, |t| {
                t.i32(1, 2); // INT64
                t.list_header(2, 1, I32);
                t.zigzag(0); // PLAIN
                t.list_header(3, 1, BINARY);
                t.varint(1);
                t.out.push(b'x');
                t.i32(4, codec);
                t.i64(5, rows);
                t.i64(6, declared);
                t.i64(7, chunk as i64);
                t.i64(9, 4); // data_page_offset
            });
        });
        t.i64(2, declared);
        t.i64(3, rows);
    });
    t.end();
    t.out
}

/// `PAR1`, the column chunk, the footer, its length and `PAR1`.
fn file(chunk: &[u8], footer: &[u8]) -> Vec<u8> {
    let mut out = b"PAR1".to_vec();
    out.extend_from_slice(chunk);
    out.extend_from_slice(footer);
    out.extend((footer.len() as u32).to_le_bytes());
    out.extend_from_slice(b"PAR1");
    out
}

/// A file of one row group of `rows` rows whose one data page, compressed with `codec`, has
/// the body `body` and declares `8 * rows` uncompressed bytes, whatever `body` inflates to.
pub fn one_page(codec: i32, body: &[u8], rows: i32) -> Vec<u8> {
    let declared = rows * 8;
    let mut chunk = page_header(declared, body.len(), rows);
    chunk.extend_from_slice(body);
    file(&chunk, &footer(1, i64::from(rows), codec, chunk.len(), i64::from(declared)))
}

/// A valid uncompressed file of `groups` row groups of one row each (`x` is 7 in every row),
/// every row group's column chunk the same one page: about 31 footer bytes per row group.
pub fn many_row_groups(groups: usize) -> Vec<u8> {
    let mut chunk = page_header(8, 8, 1);
    chunk.extend(7i64.to_le_bytes());
    file(&chunk, &footer(groups, 1, codec::UNCOMPRESSED, chunk.len(), 8))
}

/// GZIP members that inflate to `mib` MiB of zeros, about 1 KiB of members per MiB (a GZIP
/// reader reads every member of a stream).
pub fn gzip_bomb(mib: usize) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(&vec![0u8; 1 << 20]).expect("in memory");
    let member = e.finish().expect("in memory");
    member.repeat(mib)
}

/// One LZ4 frame (independent 64 KiB blocks, no checksums) that inflates to `mib` MiB of
/// zeros, about 4.2 KiB per MiB: the frame of one block of zeros, that block repeated.
pub fn lz4_frame_bomb(mib: usize) -> Vec<u8> {
    use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
    use std::io::Write as _;
    let info = FrameInfo::new().block_size(BlockSize::Max64KB).block_mode(BlockMode::Independent);
    let mut e = FrameEncoder::with_frame_info(info, Vec::new());
    e.write_all(&[0u8; 64 << 10]).expect("in memory");
    let one = e.finish().expect("in memory");
    // The header (magic, FLG, BD, checksum), one block (its length and bytes), the end mark.
    let (header, rest) = one.split_at(7);
    let block = &rest[..rest.len() - 4];
    let mut out = header.to_vec();
    for _ in 0..mib * 16 {
        out.extend_from_slice(block);
    }
    out.extend(0u32.to_le_bytes());
    out
}
