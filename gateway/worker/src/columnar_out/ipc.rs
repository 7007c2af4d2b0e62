//! One read as one Arrow IPC stream: the schema (with the read's origin runs in its metadata),
//! the record batches, the end-of-stream marker; compressed as the client asked.
//!
//! The request side is defined with the client ([`shardwise_client::arrow_stream`]): `Accept:`
//! [`ARROW_STREAM`](shardwise_client::arrow_stream::ARROW_STREAM), and the optional header
//! [`COMPRESSION_HEADER`](shardwise_client::arrow_stream::COMPRESSION_HEADER) listing `lz4`, `zstd` and `none` in order of preference (read like
//! `Accept-Encoding`: the first value the worker supports wins, unknown values are passed over,
//! parameters such as `;q=0.5` are ignored; absent or none known: uncompressed). Compression
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

use super::check_same_columns;

/// Arrow's IPC codec of a compression the client asked for.
fn codec(compression: IpcCompression) -> CompressionType {
    match compression {
        IpcCompression::Lz4 => CompressionType::LZ4_FRAME,
        IpcCompression::Zstd => CompressionType::ZSTD,
    }
}

/// The compression a request asks for, from the values of its
/// [`COMPRESSION_HEADER`](shardwise_client::arrow_stream::COMPRESSION_HEADER) headers
/// in order (several headers read as one comma-separated list): the first of `lz4`, `zstd` or
/// `none` (case-insensitive, parameters after `;` ignored); `None` (uncompressed) for `none`,
/// for no header and when no value is known.
///
/// ```
/// use shardwise_worker::columnar_out::{IpcCompression, parse_compression};
/// assert_eq!(parse_compression(["brotli, ZSTD;q=0.9, lz4"]), Some(IpcCompression::Zstd));
/// assert_eq!(parse_compression(["none, lz4"]), None);
/// assert_eq!(parse_compression(std::iter::empty::<&str>()), None);
/// ```
pub fn parse_compression<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<IpcCompression> {
    for value in values {
        for item in value.split(',') {
            let name = item.split(';').next().unwrap_or_default().trim();
            if name.eq_ignore_ascii_case("lz4") {
                return Some(IpcCompression::Lz4);
            }
            if name.eq_ignore_ascii_case("zstd") {
                return Some(IpcCompression::Zstd);
            }
            if name.eq_ignore_ascii_case("none") {
                return None;
            }
        }
    }
    None
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
    let mut writer = StreamWriter::try_new_with_options(Vec::new(), &schema, options)
        .map_err(|e| internal("the stream's schema", &e))?;
    for b in batches {
        writer.write(b).map_err(|e| internal("a record batch", &e))?;
    }
    writer.finish().map_err(|e| internal("the end of the stream", &e))?;
    writer.into_inner().map_err(|e| internal("the stream", &e))
}

fn internal(what: &str, e: &dyn std::fmt::Display) -> Problem {
    Problem::new(Code::Internal, format!("writing {what} of an Arrow IPC stream failed: {e}"))
}

#[cfg(test)]
mod tests;
