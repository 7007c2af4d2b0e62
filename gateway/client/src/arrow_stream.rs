//! Elements of columnar datasets (`parquet`, `arrow`, `tfrecord` sources) as Arrow IPC
//! streams: what a client asks a worker for, and how it decodes the answer.
//!
//! **The request.** `GET /v1/tasks/{task_id}/elements` with `Accept:` [`ARROW_STREAM`] answers
//! one Arrow IPC *stream* (a schema message, record batches, the end-of-stream marker) instead
//! of JSON. The optional request header [`COMPRESSION_HEADER`] asks for compressed record
//! batches: a comma-separated list of `lz4`, `zstd` and `none` in order of preference, read
//! like `Accept-Encoding` (the first value the worker supports wins, values it does not know
//! are passed over, parameters such as `;q=0.5` are ignored); without the header, or when no
//! value is known, the batches are not compressed. A compressed stream says so itself (each
//! record batch names its codec), so a reader needs nothing but the body.
//!
//! **The answer.** A 2xx answer is `Content-Type:` [`ARROW_STREAM`], its `max` counting rows,
//! with the response header [`END_OF_SEQUENCE_HEADER`] (`true` or `false`), the task's end as
//! the JSON answer's `end_of_sequence` says it. A read that found nothing within the worker's
//! wait is a valid stream of no record batch. Errors are problem details
//! (`application/problem+json`) with the usual statuses, as for every call.
//!
//! **Origins.** One stream answers one read, so its schema's metadata describes exactly its
//! rows: under [`ORIGIN_KEY`], the origin runs of the read's elements (a JSON array of
//! [`OriginRun`]s, the form the JSON answer uses), when the read has exact positions. The
//! worker drops any key of that name a data file's own schema carried.
//!
//! **Hostile bodies.** A stream that is not valid Arrow IPC is a typed error, never a panic
//! (the few malformations that trip an assertion inside Arrow's reader are caught). Memory is
//! bounded by the body, with one exception the format allows: a compressed buffer
//! declares its decompressed length, and Arrow's reader reserves that length before
//! decompressing; and a record batch declares its rows, which arrays without buffers (nulls)
//! and dictionaries turn into memory without a byte of body each. So the stream's frames are
//! walked first, and a stream whose compressed buffers declare more than a limit in all, holds
//! more rows than a read asked for, or is compressed with a codec the read did not ask for
//! ([`StreamLimits`], given to [`decode_stream_within`]) is refused before anything is
//! decompressed or decoded.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_ipc::reader::StreamReader;
use arrow_schema::{ArrowError, Schema, SchemaRef};
use shardwise_core::position::OriginRun;

use crate::rest::CallError;

/// The media type of an Arrow IPC stream (`Accept` and `Content-Type`).
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// The request header that asks for compressed record batches: `lz4`, `zstd` or `none`, a
/// list in order of preference (see the module docs).
pub const COMPRESSION_HEADER: &str = "shardwise-arrow-compression";

/// The schema metadata key of a stream's origin runs (a JSON array of [`OriginRun`]).
pub const ORIGIN_KEY: &str = "shardwise.origin";

/// The response header of an Arrow read that says whether the task is over: `true` or
/// `false`.
pub const END_OF_SEQUENCE_HEADER: &str = "shardwise-end-of-sequence";

/// A codec a client may ask for ([`COMPRESSION_HEADER`]): each record batch's buffers
/// compressed with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpcCompression {
    /// Arrow's `LZ4_FRAME`: fast, a modest ratio.
    Lz4,
    /// Arrow's `ZSTD`: a better ratio for more CPU.
    Zstd,
}

impl IpcCompression {
    /// Its name in [`COMPRESSION_HEADER`]: `lz4` or `zstd`.
    pub fn as_str(self) -> &'static str {
        match self {
            IpcCompression::Lz4 => "lz4",
            IpcCompression::Zstd => "zstd",
        }
    }
}

/// The most bytes the compressed buffers of one stream may declare they decompress to, in
/// all, for [`decode_stream`]: 4 GiB.
pub const DEFAULT_MAX_DECODED_BYTES: u64 = 4 << 30;

/// What a stream may hold ([`decode_stream_within`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// The most bytes its compressed buffers may declare they decompress to, in all.
    pub max_decoded_bytes: u64,
    /// The most rows its record batches may hold, in all (a read's `max`).
    pub max_rows: u64,
    /// The codecs its buffers may be compressed with: any (`None`), or only the one a read
    /// asked for (`Some(Some(codec))`), or none (`Some(None)`: a read that asked for
    /// uncompressed batches).
    pub compression: Option<Option<IpcCompression>>,
}

impl Default for StreamLimits {
    /// [`DEFAULT_MAX_DECODED_BYTES`], any number of rows, any codec.
    fn default() -> Self {
        StreamLimits {
            max_decoded_bytes: DEFAULT_MAX_DECODED_BYTES,
            max_rows: u64::MAX,
            compression: None,
        }
    }
}

/// The IPC stream framing's continuation marker, before each message's metadata length.
const CONTINUATION: u32 = 0xFFFF_FFFF;

/// What every buffer's offset in its message's body is a multiple of.
const ALIGNMENT: usize = 8;

/// The bytes of a compressed buffer's prefix: its decompressed length (little-endian `i64`).
const LENGTH_PREFIX: usize = 8;

/// Why an Arrow IPC stream was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// Not a valid Arrow IPC stream: truncated, bytes after its end, a malformed message or
    /// array (Arrow's reason).
    #[error("not a valid Arrow IPC stream: {0}")]
    Ipc(String),
    /// The compressed buffers declare more decompressed bytes than the limit.
    #[error(
        "the Arrow IPC stream's compressed buffers declare at least {declared} bytes once \
         decompressed; at most {limit} are allowed"
    )]
    TooLarge {
        /// What they declare (counted up to the first buffer past the limit).
        declared: u64,
        /// The limit.
        limit: u64,
    },
    /// The record batches hold more rows than the limit.
    #[error("the Arrow IPC stream holds at least {declared} rows; at most {limit} were asked for")]
    TooManyRows {
        /// What they declare (counted up to the first batch past the limit).
        declared: u64,
        /// The limit.
        limit: u64,
    },
    /// A record batch is compressed with a codec that was not asked for.
    #[error(
        "the Arrow IPC stream is compressed with {got}, which the read did not ask for ({asked})"
    )]
    UnaskedCompression {
        /// The codec the batch names.
        got: String,
        /// What was asked for (`lz4`, `zstd` or `uncompressed batches`).
        asked: String,
    },
    /// The schema metadata's [`ORIGIN_KEY`] is not a JSON array of origin runs.
    #[error("the stream's schema metadata {ORIGIN_KEY:?} is not a JSON array of origin runs: {0}")]
    Origin(String),
}

impl From<StreamError> for CallError {
    /// A 2xx answer that is not what the API documents: [`CallError::Decode`].
    fn from(e: StreamError) -> CallError {
        CallError::Decode(e.to_string())
    }
}

/// A decoded stream: its schema (without [`ORIGIN_KEY`]), its record batches (with that
/// schema) and its origin runs, if it carried them.
pub type Decoded = (SchemaRef, Vec<RecordBatch>, Option<Vec<OriginRun>>);

/// Decodes one Arrow IPC stream (compressed with any codec, or not) with
/// [`DEFAULT_MAX_DECODED_BYTES`].
pub fn decode_stream(bytes: &[u8]) -> Result<Decoded, StreamError> {
    decode_stream_within(bytes, &StreamLimits::default())
}

/// Decodes one Arrow IPC stream within `limits` (checked before anything is decoded).
///
/// The stream must be whole: it ends with its end-of-stream marker (which the format makes
/// optional, but a worker always writes: without it, a body cut between two messages would
/// pass for a shorter read), and nothing may follow the marker.
pub fn decode_stream_within(bytes: &[u8], limits: &StreamLimits) -> Result<Decoded, StreamError> {
    check_frames(bytes, limits)?;
    let (schema, batches) = read(bytes)?;
    let origin = match schema.metadata().get(ORIGIN_KEY) {
        None => None,
        Some(text) => Some(
            serde_json::from_str::<Vec<OriginRun>>(text)
                .map_err(|e| StreamError::Origin(e.to_string()))?,
        ),
    };
    if origin.is_none() {
        return Ok((schema, batches, None));
    }
    // The batches carry the stream's schema: give them the dataset's, without the origins.
    let mut metadata = schema.metadata().clone();
    metadata.remove(ORIGIN_KEY);
    let bare = Arc::new(Schema::new_with_metadata(schema.fields().clone(), metadata));
    let batches = batches
        .into_iter()
        .map(|b| {
            let options = RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
            RecordBatch::try_new_with_options(Arc::clone(&bare), b.columns().to_vec(), &options)
                .map_err(|e| StreamError::Ipc(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((bare, batches, origin))
}

/// The schema and record batches of a stream whose frames [`check_frames`] passed.
///
/// Arrow's reader validates what it decodes, but a few malformed inputs still reach an
/// assertion inside it (a buffer whose length is no multiple of its values' width, say):
/// such a panic is caught here and becomes the stream's error, like any other malformation.
fn read(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>), StreamError> {
    let decode = || {
        let reader = StreamReader::try_new(bytes, None)?;
        let schema = reader.schema();
        let batches = reader.collect::<Result<Vec<_>, _>>()?;
        Ok::<_, ArrowError>((schema, batches))
    };
    match std::panic::catch_unwind(decode) {
        Ok(decoded) => decoded.map_err(|e| StreamError::Ipc(e.to_string())),
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            Err(StreamError::Ipc(format!("Arrow's reader failed on it: {why}")))
        }
    }
}

fn truncated(what: &str) -> StreamError {
    StreamError::Ipc(format!("the stream ends within {what}"))
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let word: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_le_bytes(word))
}

/// Walks the stream's frames (without decoding any array): each message whole, the
/// end-of-stream marker last, and what its batches declare within `limits`.
fn check_frames(bytes: &[u8], limits: &StreamLimits) -> Result<(), StreamError> {
    let limit = limits.max_decoded_bytes;
    let mut at = 0usize;
    let mut declared = 0u64;
    let mut rows = 0u64;
    while at < bytes.len() {
        let mut len = read_u32(bytes, at).ok_or_else(|| truncated("a message length"))?;
        at += 4;
        if len == CONTINUATION {
            len = read_u32(bytes, at).ok_or_else(|| truncated("a message length"))?;
            at += 4;
        }
        // Lengths are signed 32-bit: a negative one is malformed.
        let len = usize::try_from(i32::from_le_bytes(len.to_le_bytes()))
            .map_err(|_| StreamError::Ipc("a negative message length".into()))?;
        if len == 0 {
            if at < bytes.len() {
                return Err(StreamError::Ipc(format!(
                    "{} bytes follow the end-of-stream marker",
                    bytes.len() - at
                )));
            }
            return Ok(());
        }
        let meta_end = at.checked_add(len).ok_or_else(|| truncated("a message"))?;
        let meta = bytes.get(at..meta_end).ok_or_else(|| truncated("a message"))?;
        let message = arrow_ipc::root_as_message(meta)
            .map_err(|e| StreamError::Ipc(format!("a malformed message: {e}")))?;
        let body_len = usize::try_from(message.bodyLength())
            .map_err(|_| StreamError::Ipc("a negative message body length".into()))?;
        let body_end = meta_end.checked_add(body_len).ok_or_else(|| truncated("a message body"))?;
        let body = bytes.get(meta_end..body_end).ok_or_else(|| truncated("a message body"))?;
        if let Some(batch) = message.header_as_record_batch() {
            rows = rows.saturating_add(u64::try_from(batch.length()).unwrap_or(u64::MAX));
            if rows > limits.max_rows {
                return Err(StreamError::TooManyRows { declared: rows, limit: limits.max_rows });
            }
        }
        let batch = message
            .header_as_record_batch()
            .or_else(|| message.header_as_dictionary_batch().and_then(|d| d.data()));
        if let Some(batch) = batch {
            let codec = batch.compression().map(|c| c.codec());
            if let (Some(asked), Some(got)) = (limits.compression, codec) {
                let named = match got {
                    arrow_ipc::CompressionType::LZ4_FRAME => Some(IpcCompression::Lz4),
                    arrow_ipc::CompressionType::ZSTD => Some(IpcCompression::Zstd),
                    _ => None,
                };
                if named.is_none() || named != asked {
                    return Err(StreamError::UnaskedCompression {
                        got: named.map_or_else(|| format!("{got:?}"), |c| c.as_str().to_owned()),
                        asked: asked
                            .map_or("uncompressed batches", IpcCompression::as_str)
                            .to_owned(),
                    });
                }
            }
            let compressed = codec.is_some();
            for buffer in batch.buffers().into_iter().flatten() {
                // Arrow's reader slices the body where a buffer says, and panics out of it.
                let span = usize::try_from(buffer.offset())
                    .ok()
                    .zip(usize::try_from(buffer.length()).ok());
                // The format aligns every buffer to 8 bytes; Arrow's reader panics on some
                // that are not.
                let data = span
                    .filter(|(start, _)| start % ALIGNMENT == 0)
                    .and_then(|(start, len)| body.get(start..start.checked_add(len)?))
                    .ok_or_else(|| {
                    StreamError::Ipc(format!(
                        "a buffer ({} bytes at {}) out of its message's body of {body_len} bytes",
                        buffer.length(),
                        buffer.offset()
                    ))
                })?;
                // What Arrow's reader reserves before decompressing (a buffer too short for
                // its prefix is its to refuse).
                let prefix = data.get(..LENGTH_PREFIX).and_then(|p| p.try_into().ok());
                let Some(prefix) = prefix.filter(|_| compressed) else { continue };
                let n = u64::try_from(i64::from_le_bytes(prefix)).unwrap_or(0);
                declared = declared.saturating_add(n);
                if declared > limit {
                    return Err(StreamError::TooLarge { declared, limit });
                }
            }
        }
        at = body_end;
    }
    Err(StreamError::Ipc("the stream ends without its end-of-stream marker".into()))
}

#[cfg(test)]
mod tests;
