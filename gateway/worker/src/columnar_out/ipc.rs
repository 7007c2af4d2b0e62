//! One read as one Arrow IPC stream: the schema (with the read's origin runs in its metadata),
//! the record batches, the end-of-stream marker; compressed as the client asked.
//!
//! The request side is defined with the client ([`shardwise_client::arrow_stream`]): `Accept:`
//! [`ARROW_STREAM`](shardwise_client::arrow_stream::ARROW_STREAM), and the optional header
//! [`COMPRESSION_HEADER`](shardwise_client::arrow_stream::COMPRESSION_HEADER) listing `lz4`,
//! `zstd` and `none` (read like `Accept-Encoding`: weights `;q=` honoured, the first listed
//! among equals; unknown values passed over when a known one is acceptable, a header naming
//! none acceptable refused; absent: uncompressed; see [`parse_compression`]). Compression
//! is per buffer inside the stream (Arrow's `LZ4_FRAME` and `ZSTD` codecs), so the body is
//! still one `application/vnd.apache.arrow.stream` and any Arrow reader decodes it.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ipc::CompressionType;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_schema::{Schema, SchemaRef};
pub use shardwise_client::arrow_stream::IpcCompression;
use shardwise_client::arrow_stream::ORIGIN_KEY;
use shardwise_core::position::OriginRun;
use shardwise_http::{Code, Problem};

use super::{Unwritten, check_same_columns};

/// Arrow's IPC codec of a compression the client asked for.
fn codec(compression: IpcCompression) -> CompressionType {
    match compression {
        IpcCompression::Lz4 => CompressionType::LZ4_FRAME,
        IpcCompression::Zstd => CompressionType::ZSTD,
    }
}

/// The compression a request asks for, from the values of its
/// [`COMPRESSION_HEADER`](shardwise_client::arrow_stream::COMPRESSION_HEADER) headers in order
/// (several headers read as one comma-separated list), read like `Accept-Encoding` (RFC
/// 9110): names are `lz4`, `zstd` and `none` (uncompressed), case-insensitive, each with an
/// optional weight `;q=` (0 to 1, default 1; 0 means "not this"). The known name of the
/// highest weight wins, the first listed among equals; `None` is uncompressed (`none`, or no
/// header, or only empty items). Names the worker does not know are passed over when a known
/// one is acceptable; a header that names none acceptable (`brotli`, `zstd;q=0`) is
/// `INVALID_ARGUMENT` naming the values the worker serves, not an uncompressed reply the
/// client did not ask for. So is a weight that is not one.
///
/// ```
/// use shardwise_worker::columnar_out::{IpcCompression, parse_compression};
/// assert_eq!(parse_compression(["brotli, ZSTD;q=0.9, lz4"]).unwrap(), Some(IpcCompression::Lz4));
/// assert_eq!(parse_compression(["none, lz4"]).unwrap(), None);
/// assert_eq!(parse_compression(["none;q=0.5, lz4"]).unwrap(), Some(IpcCompression::Lz4));
/// assert_eq!(parse_compression(std::iter::empty::<&str>()).unwrap(), None);
/// assert!(parse_compression(["brotli"]).is_err());
/// ```
pub fn parse_compression<'a>(
    values: impl IntoIterator<Item = &'a str>,
) -> Result<Option<IpcCompression>, Problem> {
    let mut best: Option<(f32, Option<IpcCompression>)> = None;
    let mut named = false;
    for value in values {
        for item in value.split(',') {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or_default().trim();
            if name.is_empty() {
                continue;
            }
            named = true;
            let q = weight(parts).map_err(|why| refused(value, &why))?;
            let codec = match name.to_ascii_lowercase().as_str() {
                "lz4" => Some(IpcCompression::Lz4),
                "zstd" => Some(IpcCompression::Zstd),
                "none" => None,
                _ => continue,
            };
            if q > 0.0 && best.is_none_or(|(b, _)| q > b) {
                best = Some((q, codec));
            }
        }
    }
    match best {
        Some((_, codec)) => Ok(codec),
        None if !named => Ok(None),
        None => Err(Problem::new(
            Code::InvalidArgument,
            format!(
                "{COMPRESSION}: names no compression this worker serves; ask for lz4, zstd or \
                 none (a comma-separated list, each with an optional ;q= weight)"
            ),
        )),
    }
}

/// The header's name in messages.
const COMPRESSION: &str = shardwise_client::arrow_stream::COMPRESSION_HEADER;

fn refused(value: &str, why: &str) -> Problem {
    Problem::new(
        Code::InvalidArgument,
        format!("{COMPRESSION}: {why} in {}", shardwise_core::echo::echo(value)),
    )
}

/// The weight (`q=`) among an item's parameters: 1 when it has none; an error when it is
/// not a number from 0 to 1 (RFC 9110's qvalue, at most three decimals).
pub(crate) fn weight<'a>(params: impl Iterator<Item = &'a str>) -> Result<f32, String> {
    let mut q = 1.0;
    for p in params {
        let Some((key, v)) = p.split_once('=') else { continue };
        if key.trim().eq_ignore_ascii_case("q") {
            let v = v.trim();
            let decimals = v.split_once('.').map_or(0, |(_, d)| d.len());
            match v.parse::<f32>() {
                Ok(x) if (0.0..=1.0).contains(&x) && decimals <= 3 && !v.starts_with('+') => q = x,
                _ => {
                    return Err(format!(
                        "the weight q={} is not a number from 0 to 1",
                        shardwise_core::echo::echo(v)
                    ));
                }
            }
        }
    }
    Ok(q)
}

/// One Arrow IPC stream of `batches`: the schema, every batch, the end-of-stream marker.
///
/// * `schema`: the stream's schema; `None` takes the first batch's, and a read of no batches
///   whose schema is not known (no row read yet) has an empty schema of no fields. Its
///   metadata is kept, but for [`ORIGIN_KEY`], which only `origin` sets.
/// * `origin`: the read's origin runs, written as a JSON array under [`ORIGIN_KEY`] in the
///   schema's metadata (one stream is one read: its schema describes exactly its rows).
/// * `compression`: the batches' codec, if any ([`parse_compression`]).
///
/// `FAILED_PRECONDITION` when a batch's columns are not the schema's; `INTERNAL` when Arrow's
/// writer fails.
pub fn write_stream(
    schema: Option<&SchemaRef>,
    batches: &[RecordBatch],
    origin: Option<&[OriginRun]>,
    compression: Option<IpcCompression>,
) -> Result<Vec<u8>, Problem> {
    write_stream_within(schema, batches, origin, compression, usize::MAX).map_err(|e| match e {
        Unwritten::Refused(p) => p,
        Unwritten::Over => internal("the stream", &"past an unbounded buffer"),
    })
}

/// [`write_stream`] into at most `max` bytes: [`Unwritten::Over`] as soon as the stream would
/// grow past them (what Arrow's writer re-encodes, such as a dictionary per batch or the
/// buffers a view array points into, is counted as it is written).
pub fn write_stream_within(
    schema: Option<&SchemaRef>,
    batches: &[RecordBatch],
    origin: Option<&[OriginRun]>,
    compression: Option<IpcCompression>,
    max: usize,
) -> Result<Vec<u8>, Unwritten> {
    let base = match (schema, batches.first()) {
        (Some(s), _) => Arc::clone(s),
        (None, Some(b)) => b.schema(),
        (None, None) => Arc::new(Schema::empty()),
    };
    for b in batches {
        check_same_columns(base.fields(), b.schema_ref().fields())?;
    }
    let mut metadata = base.metadata().clone();
    // A file's own schema may carry the key: only the worker says where rows come from.
    metadata.remove(ORIGIN_KEY);
    if let Some(runs) = origin {
        let json = serde_json::to_string(runs).map_err(|e| internal("origin runs", &e))?;
        metadata.insert(ORIGIN_KEY.to_owned(), json);
    }
    let schema = Schema::new_with_metadata(base.fields().clone(), metadata);
    let options = IpcWriteOptions::default()
        .try_with_compression(compression.map(codec))
        .map_err(|e| internal("the IPC options", &e))?;
    let out = Bounded { buf: Vec::new(), max, over: false };
    let mut writer = StreamWriter::try_new_with_options(out, &schema, options).map_err(|e| {
        // The writer is gone with its error: its refusal's text says why.
        if e.to_string().contains(OVER) {
            Unwritten::Over
        } else {
            Unwritten::Refused(internal("the stream's schema", &e))
        }
    })?;
    let over = |w: &StreamWriter<Bounded>| w.get_ref().over;
    let stop = |over: bool, what: &str, e: &dyn std::fmt::Display| {
        if over { Unwritten::Over } else { Unwritten::Refused(internal(what, e)) }
    };
    for b in batches {
        if let Err(e) = writer.write(b) {
            return Err(stop(over(&writer), "a record batch", &e));
        }
    }
    if let Err(e) = writer.finish() {
        return Err(stop(over(&writer), "the end of the stream", &e));
    }
    let out = writer.into_inner().map_err(|e| internal("the stream", &e))?;
    Ok(out.buf)
}

/// What a [`Bounded`] writer's refusal says.
const OVER: &str = "past the reply's byte budget";

/// A buffer that refuses a write past `max` bytes.
#[derive(Debug)]
struct Bounded {
    buf: Vec<u8>,
    max: usize,
    over: bool,
}

impl std::io::Write for Bounded {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().checked_add(bytes.len()).is_none_or(|end| end > self.max) {
            self.over = true;
            return Err(std::io::Error::other(OVER));
        }
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn internal(what: &str, e: &dyn std::fmt::Display) -> Problem {
    Problem::new(Code::Internal, format!("writing {what} of an Arrow IPC stream failed: {e}"))
}

#[cfg(test)]
mod tests;
