//! Parquet page decompression bounded by the size the page declares.
//!
//! The `parquet` crate's own codecs trust the stream, not the page header: its GZIP codec
//! and the LZ4-frame fallback of its legacy LZ4 codec read to the end of the stream, however
//! much it inflates to (a 1 MB page declaring 24 bytes gave a 1 GB buffer before the size was
//! compared, and mimalloc kept much of it). Its page reader creates its codec itself, from the
//! column chunk's metadata, so no wrapper can bound it. The worker therefore decompresses
//! pages itself and hands the decoder uncompressed pages through the crate's public page
//! reader surface (`PageReader`, `PageIterator`, `RowGroups`; see `pages::ColumnPages`).
//!
//! Here every codec writes into a buffer of exactly the declared size and stops there: a
//! stream that has more to give after it is refused without inflating another byte, and one
//! that gives less is refused too. Block formats (Snappy, LZ4 raw and Hadoop-framed,
//! Zstandard's single-shot decoding, whose window is the output buffer) decode into that
//! buffer and fail when it is too small; stream formats (GZIP members, LZ4 frames) are read
//! into it, then asked for one byte more. Brotli and LZO are not built in: such a chunk is
//! refused, naming its codec.

use std::io::Read;

use parquet::basic::Compression;

/// A codec of a column chunk, with its state (Zstandard's context is reused across pages).
pub(crate) enum Codec {
    Uncompressed,
    Snappy,
    Gzip,
    /// The deprecated `LZ4` codec: Hadoop's framing, or an LZ4 frame (older parquet-rs), or
    /// a raw LZ4 block (older parquet-cpp), tried in that order as other readers do.
    Lz4Legacy,
    Lz4Raw,
    Zstd(Box<zstd::bulk::Decompressor<'static>>),
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a page did not decompress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Inflate {
    /// It gives more bytes than it declares.
    Over { declared: usize },
    /// It gives fewer bytes than it declares.
    Under { declared: usize, got: usize },
    /// It does not decode.
    Invalid(String),
}

impl std::fmt::Display for Inflate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Inflate::Over { declared } => {
                write!(f, "inflates past the {declared} bytes its header declares")
            }
            Inflate::Under { declared, got } => {
                write!(f, "inflates to {got} bytes, not the {declared} its header declares")
            }
            Inflate::Invalid(why) => write!(f, "does not decompress ({why})"),
        }
    }
}

impl Codec {
    /// The codec of a column chunk, or why it is not read.
    pub(crate) fn new(compression: Compression) -> Result<Codec, String> {
        Ok(match compression {
            Compression::UNCOMPRESSED => Codec::Uncompressed,
            Compression::SNAPPY => Codec::Snappy,
            Compression::GZIP(_) => Codec::Gzip,
            Compression::LZ4 => Codec::Lz4Legacy,
            Compression::LZ4_RAW => Codec::Lz4Raw,
            Compression::ZSTD(_) => {
                let context = zstd::bulk::Decompressor::new()
                    .map_err(|e| format!("the Zstandard decoder does not start: {e}"))?;
                Codec::Zstd(Box::new(context))
            }
            other => {
                return Err(format!("is compressed with {other}, which this worker does not read"));
            }
        })
    }

    /// The codec's name in messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Codec::Uncompressed => "uncompressed",
            Codec::Snappy => "snappy",
            Codec::Gzip => "gzip",
            Codec::Lz4Legacy => "lz4",
            Codec::Lz4Raw => "lz4_raw",
            Codec::Zstd(_) => "zstd",
        }
    }

    /// Whether pages are compressed at all.
    pub(crate) fn is_none(&self) -> bool {
        matches!(self, Codec::Uncompressed)
    }

    /// `input` decompressed: exactly `declared` bytes, or an error. Never holds more than
    /// `declared` bytes of output.
    pub(crate) fn decompress(&mut self, input: &[u8], declared: usize) -> Result<Vec<u8>, Inflate> {
        let mut out = Vec::new();
        self.decompress_into(input, declared, &mut out)?;
        Ok(out)
    }

    fn decompress_into(
        &mut self,
        input: &[u8],
        declared: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), Inflate> {
        out.clear();
        match self {
            Codec::Uncompressed => {
                if input.len() != declared {
                    return Err(Inflate::Under { declared, got: input.len() });
                }
                out.extend_from_slice(input);
                Ok(())
            }
            Codec::Snappy => {
                let len = snap::raw::decompress_len(input).map_err(invalid)?;
                if len > declared {
                    return Err(Inflate::Over { declared });
                }
                out.resize(declared, 0);
                let n = snap::raw::Decoder::new().decompress(input, out).map_err(invalid)?;
                exact(out, n, declared)
            }
            Codec::Gzip => read_exactly(flate2::read::MultiGzDecoder::new(input), declared, out),
            Codec::Lz4Raw => {
                out.resize(declared, 0);
                let n = lz4_flex::block::decompress_into(input, out).map_err(|e| {
                    // The block format cannot say which: a block that needs more room than
                    // the page declares fails as one that is malformed.
                    Inflate::Invalid(format!(
                        "{e}; it may inflate past the {declared} bytes declared"
                    ))
                })?;
                exact(out, n, declared)
            }
            Codec::Lz4Legacy => {
                if let Ok(()) = hadoop(input, declared, out) {
                    return Ok(());
                }
                let framed = read_exactly(lz4_flex::frame::FrameDecoder::new(input), declared, out);
                match framed {
                    Ok(()) => Ok(()),
                    // A stream that decoded as an LZ4 frame but says more than it declares
                    // is that, not a raw block.
                    Err(e @ Inflate::Over { .. }) => Err(e),
                    Err(_) => {
                        out.clear();
                        out.resize(declared, 0);
                        let n = lz4_flex::block::decompress_into(input, out).map_err(|e| {
                            Inflate::Invalid(format!(
                                "not Hadoop-framed LZ4, an LZ4 frame or an LZ4 block within the \
                                 {declared} bytes declared: {e}"
                            ))
                        })?;
                        exact(out, n, declared)
                    }
                }
            }
            Codec::Zstd(context) => {
                // Single-shot decompression into a buffer of the declared capacity: the output
                // is the window, so nothing else is sized by the frame, and a frame that needs
                // more room fails.
                *out = Vec::with_capacity(declared);
                match context.decompress_to_buffer(input, out) {
                    Ok(n) => exact(out, n, declared),
                    Err(e) => {
                        let text = e.to_string();
                        if text.contains("too small") {
                            Err(Inflate::Over { declared })
                        } else {
                            Err(Inflate::Invalid(text))
                        }
                    }
                }
            }
        }
    }
}

fn invalid(e: impl std::fmt::Display) -> Inflate {
    Inflate::Invalid(e.to_string())
}

/// `n` bytes were written of `declared`.
fn exact(out: &mut Vec<u8>, n: usize, declared: usize) -> Result<(), Inflate> {
    if n != declared || out.len() < n {
        return Err(Inflate::Under { declared, got: n });
    }
    out.truncate(n);
    Ok(())
}

/// Reads `stream` into `out` until `declared` bytes, then asks for one more: a stream with
/// more is refused without reading it.
fn read_exactly(mut stream: impl Read, declared: usize, out: &mut Vec<u8>) -> Result<(), Inflate> {
    out.clear();
    out.resize(declared, 0);
    let mut filled = 0;
    while filled < declared {
        match stream.read(out.get_mut(filled..).unwrap_or_default()) {
            Ok(0) => return Err(Inflate::Under { declared, got: filled }),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(invalid(e)),
        }
    }
    let mut more = [0u8; 1];
    loop {
        match stream.read(&mut more) {
            Ok(0) => return Ok(()),
            Ok(_) => return Err(Inflate::Over { declared }),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(invalid(e)),
        }
    }
}

/// Hadoop's LZ4 framing: blocks, each behind its decompressed and compressed sizes (two
/// big-endian u32), which must fill `declared` exactly.
fn hadoop(input: &[u8], declared: usize, out: &mut Vec<u8>) -> Result<(), Inflate> {
    out.clear();
    out.resize(declared, 0);
    let (mut at, mut filled) = (0usize, 0usize);
    if input.len() < 8 {
        return Err(Inflate::Invalid("too short for Hadoop's framing".into()));
    }
    while at < input.len() {
        let size = |i: usize| {
            input
                .get(i..i + 4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(|b| u32::from_be_bytes(b) as usize)
                .ok_or_else(|| Inflate::Invalid("a Hadoop frame is cut short".into()))
        };
        let (raw, packed) = (size(at)?, size(at + 4)?);
        at += 8;
        let block = input
            .get(at..at.saturating_add(packed))
            .ok_or_else(|| Inflate::Invalid("a Hadoop frame is longer than the page".into()))?;
        let room =
            out.get_mut(filled..filled.saturating_add(raw)).ok_or(Inflate::Over { declared })?;
        let n = lz4_flex::block::decompress_into(block, room).map_err(invalid)?;
        if n != raw {
            return Err(Inflate::Invalid("a Hadoop frame inflates to another size".into()));
        }
        filled += n;
        at += packed;
    }
    exact(out, filled, declared)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn lz4_frame(data: &[u8]) -> Vec<u8> {
        let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn hadoop_frame(data: &[u8]) -> Vec<u8> {
        let block = lz4_flex::block::compress(data);
        let mut out = (data.len() as u32).to_be_bytes().to_vec();
        out.extend((block.len() as u32).to_be_bytes());
        out.extend(block);
        out
    }

    /// Every codec: the declared size decodes; one byte less is `Over` (and nothing past it
    /// is held); one byte more is refused.
    #[test]
    fn every_codec_stops_at_the_declared_size() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8 ^ (i / 4000) as u8).collect();
        let cases: Vec<(Compression, Vec<u8>)> = vec![
            (Compression::UNCOMPRESSED, data.clone()),
            (Compression::SNAPPY, snap::raw::Encoder::new().compress_vec(&data).unwrap()),
            (Compression::GZIP(Default::default()), gzip(&data)),
            (Compression::LZ4_RAW, lz4_flex::block::compress(&data)),
            (Compression::LZ4, hadoop_frame(&data)),
            (Compression::LZ4, lz4_frame(&data)),
            (Compression::LZ4, lz4_flex::block::compress(&data)),
            (Compression::ZSTD(Default::default()), zstd::bulk::compress(&data, 3).unwrap()),
        ];
        for (compression, input) in cases {
            let mut codec = Codec::new(compression).unwrap();
            let name = codec.name();
            let mut out = Vec::new();
            codec
                .decompress_into(&input, data.len(), &mut out)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(out, data, "{name}");
            let short = codec.decompress_into(&input, data.len() - 1, &mut out);
            assert!(short.is_err(), "{name}: a page inflating past its size is refused");
            assert!(out.capacity() < data.len() + 64, "{name}: held {} bytes", out.capacity());
            let long = codec.decompress_into(&input, data.len() + 1, &mut out);
            assert!(long.is_err(), "{name}: a page inflating short of its size is refused");
        }
        assert!(Codec::new(Compression::LZO).is_err());
    }

    /// Megabytes of zeros behind a page that declares 24 bytes are refused after 25 bytes.
    #[test]
    fn bombs_are_refused_at_the_declared_size() {
        let zeros = vec![0u8; 4 << 20];
        for (compression, input) in [
            (Compression::GZIP(Default::default()), gzip(&zeros)),
            (Compression::LZ4, lz4_frame(&zeros)),
            (Compression::ZSTD(Default::default()), zstd::bulk::compress(&zeros, 3).unwrap()),
            (Compression::SNAPPY, snap::raw::Encoder::new().compress_vec(&zeros).unwrap()),
            (Compression::LZ4_RAW, lz4_flex::block::compress(&zeros)),
        ] {
            let mut codec = Codec::new(compression).unwrap();
            let mut out = Vec::new();
            let e = codec.decompress_into(&input, 24, &mut out).unwrap_err();
            assert!(out.capacity() < 1024, "{}: {e}: held {}", codec.name(), out.capacity());
        }
    }
}
