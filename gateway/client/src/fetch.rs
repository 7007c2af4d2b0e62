//! How a stream's reads of a task's elements are asked for and decoded: the one thing that
//! differs between [`crate::distribute`] (JSON elements) and [`crate::distribute_batches`]
//! (Arrow record batches). The drive loop ([`crate::driver`]) is the same for both: it is
//! generic over a [`Fetch`], whose payload the core's reader counts in rows.

use arrow_array::RecordBatch;
use futures::future::BoxFuture;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use serde_json::Value;
use shardwise_core::client::{Elements, Reply, Rows};

use crate::arrow_stream::{
    ARROW_STREAM, COMPRESSION_HEADER, END_OF_SEQUENCE_HEADER, IpcCompression, StreamLimits,
    decode_stream_within,
};
use crate::rest::{CallError, Rest};

/// The most characters of an unexpected content type an error quotes.
const MAX_QUOTED: usize = 100;

/// One way of reading a task's elements: what is asked for, and what the answer decodes to.
pub(crate) trait Fetch: Send + Sync + 'static {
    /// What one read holds: the rows the reader counts and the stream hands out.
    type Payload: Rows + Send + 'static;

    /// `GET path?query` from the worker `rest` calls, decoded: an answer of more than
    /// `max_rows` rows is refused (as [`CallError::Decode`]).
    fn get_elements(
        &self,
        rest: Rest,
        path: String,
        query: Vec<(&'static str, String)>,
        max_rows: usize,
    ) -> BoxFuture<'static, Result<Reply<Self::Payload>, CallError>>;
}

/// JSON elements: the answer is an [`Elements`] object of at most `max_bytes` bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Json {
    pub(crate) max_bytes: u64,
}

impl Fetch for Json {
    type Payload = Vec<Value>;

    fn get_elements(
        &self,
        rest: Rest,
        path: String,
        query: Vec<(&'static str, String)>,
        max_rows: usize,
    ) -> BoxFuture<'static, Result<Reply, CallError>> {
        let max_body = usize::try_from(self.max_bytes).unwrap_or(usize::MAX);
        Box::pin(async move {
            let decode = |_: &HeaderMap, body: &[u8]| {
                let e: Elements =
                    serde_json::from_slice(body).map_err(|e| CallError::Decode(e.to_string()))?;
                if e.elements.len() > max_rows {
                    return Err(CallError::Decode(format!(
                        "the answer holds {} elements; at most {max_rows} were asked for",
                        e.elements.len()
                    )));
                }
                Ok(Reply::from(e))
            };
            rest.get_with(&path, &query, &[], max_body, decode).await
        })
    }
}

/// Arrow record batches: `Accept:` [`ARROW_STREAM`], compressed as asked, a body of at most
/// `max_bytes` bytes whose buffers decompress to at most as many.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrow {
    pub(crate) max_bytes: u64,
    /// The codec asked for ([`COMPRESSION_HEADER`]); `None`: uncompressed.
    pub(crate) compression: Option<IpcCompression>,
}

/// The record batches of one read (none without a row) and how many rows they hold.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordBatches {
    pub(crate) batches: Vec<RecordBatch>,
    pub(crate) rows: usize,
}

impl Rows for RecordBatches {
    fn rows(&self) -> usize {
        self.rows
    }
}

impl Fetch for Arrow {
    type Payload = RecordBatches;

    fn get_elements(
        &self,
        rest: Rest,
        path: String,
        query: Vec<(&'static str, String)>,
        max_rows: usize,
    ) -> BoxFuture<'static, Result<Reply<RecordBatches>, CallError>> {
        let compression = self.compression;
        let limits = StreamLimits {
            max_decoded_bytes: self.max_bytes,
            max_rows: u64::try_from(max_rows).unwrap_or(u64::MAX),
            compression: Some(compression),
        };
        let max_body = usize::try_from(self.max_bytes).unwrap_or(usize::MAX);
        Box::pin(async move {
            let mut headers = vec![(ACCEPT.as_str(), ARROW_STREAM)];
            if let Some(c) = compression {
                headers.push((COMPRESSION_HEADER, c.as_str()));
            }
            let decode = |h: &HeaderMap, body: &[u8]| decode_read(h, body, &limits);
            rest.get_with(&path, &query, &headers, max_body, decode).await
        })
    }
}

/// An Arrow read's answer: its content type must be [`ARROW_STREAM`] and its
/// [`END_OF_SEQUENCE_HEADER`] `true` or `false`; its body one whole stream within `limits`.
pub(crate) fn decode_read(
    headers: &HeaderMap,
    body: &[u8],
    limits: &StreamLimits,
) -> Result<Reply<RecordBatches>, CallError> {
    let content_type = headers.get(CONTENT_TYPE).map(|v| String::from_utf8_lossy(v.as_bytes()));
    let media_type = content_type.as_deref().and_then(|t| t.split(';').next()).map(str::trim);
    if !media_type.is_some_and(|t| t.eq_ignore_ascii_case(ARROW_STREAM)) {
        let got = match &content_type {
            Some(t) => format!("{:?}", t.chars().take(MAX_QUOTED).collect::<String>()),
            None => "none".to_owned(),
        };
        return Err(CallError::Decode(format!(
            "expected an Arrow IPC stream ({ARROW_STREAM}), got the content type {got}"
        )));
    }
    let end = headers.get(END_OF_SEQUENCE_HEADER).map(|v| v.as_bytes().trim_ascii());
    let end_of_sequence = match end {
        Some(v) if v.eq_ignore_ascii_case(b"true") => true,
        Some(v) if v.eq_ignore_ascii_case(b"false") => false,
        Some(v) => {
            let v = String::from_utf8_lossy(v).chars().take(MAX_QUOTED).collect::<String>();
            return Err(CallError::Decode(format!(
                "the {END_OF_SEQUENCE_HEADER} header is {v:?}, not true or false"
            )));
        }
        None => {
            return Err(CallError::Decode(format!("no {END_OF_SEQUENCE_HEADER} header")));
        }
    };
    let (_, mut batches, origin) = decode_stream_within(body, limits)?;
    batches.retain(|b| b.num_rows() > 0);
    let rows = batches.iter().fold(0usize, |n, b| n.saturating_add(b.num_rows()));
    Ok(Reply { elements: RecordBatches { batches, rows }, end_of_sequence, origin })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::Int64Array;
    use arrow_ipc::writer::StreamWriter;
    use arrow_schema::{DataType, Field, Schema};
    use reqwest::header::HeaderValue;

    use super::*;

    fn stream(rows: &[usize]) -> Vec<u8> {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let mut w = StreamWriter::try_new(Vec::new(), &schema).unwrap();
        for &n in rows {
            let column = Arc::new(Int64Array::from_iter_values(0..n as i64));
            w.write(&RecordBatch::try_new(Arc::clone(&schema), vec![column]).unwrap()).unwrap();
        }
        w.into_inner().unwrap()
    }

    fn headers(content_type: Option<&str>, end: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(t) = content_type {
            h.insert(CONTENT_TYPE, HeaderValue::from_str(t).unwrap());
        }
        if let Some(e) = end {
            h.insert(END_OF_SEQUENCE_HEADER, HeaderValue::from_str(e).unwrap());
        }
        h
    }

    fn any() -> StreamLimits {
        StreamLimits::default()
    }

    #[test]
    fn a_read_counts_its_rows_and_leaves_batches_without_rows_out() {
        let h = headers(Some("Application/vnd.apache.arrow.stream; charset=x"), Some(" TRUE "));
        let reply = decode_read(&h, &stream(&[3, 0, 2]), &any()).unwrap();
        assert!(reply.end_of_sequence);
        assert_eq!(reply.origin, None);
        assert_eq!(reply.elements.rows, 5);
        let rows: Vec<usize> = reply.elements.batches.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(rows, [3, 2]);
        let empty =
            decode_read(&headers(Some(ARROW_STREAM), Some("false")), &stream(&[]), &any()).unwrap();
        assert!(!empty.end_of_sequence);
        assert!(empty.elements.is_empty());
    }

    #[test]
    fn answers_that_are_not_arrow_reads_are_decode_errors() {
        let body = stream(&[1]);
        let bad = [
            (headers(Some("application/json"), Some("false")), &body[..], "application/json"),
            (headers(None, Some("false")), &body[..], "content type none"),
            (headers(Some(ARROW_STREAM), None), &body[..], "no shardwise-end-of-sequence"),
            (headers(Some(ARROW_STREAM), Some("yes")), &body[..], "\"yes\", not true or false"),
            (headers(Some(ARROW_STREAM), Some("true")), &body[..body.len() - 8], "Arrow IPC"),
            (headers(Some(ARROW_STREAM), Some("true")), &b"{}"[..], "Arrow IPC"),
        ];
        for (h, body, why) in bad {
            let e = decode_read(&h, body, &any()).unwrap_err();
            assert!(matches!(&e, CallError::Decode(d) if d.contains(why)), "{why}: {e}");
            assert!(!e.is_retryable());
        }
    }
}
