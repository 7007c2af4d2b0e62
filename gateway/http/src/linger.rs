//! Answers to a request whose body is refused before it was read to its end (`413`: larger
//! than `--max-body-bytes`), given so that the client reads them.
//!
//! A server that answers and closes while the client is still sending makes the kernel reset
//! the connection (unread data at the close): a client that writes its whole body before it
//! reads (Python's `requests` and `urllib`, a plain socket) gets a broken pipe or a reset, and
//! loses the answer. [`answer_then_discard`] answers at once and goes on reading what the
//! client sends of its body, discarding it, within the read timeout (`--read-timeout`) and up
//! to [`DISCARD_FACTOR`] times the body limit (64 MiB at the default 16 MiB); then it lets the
//! body go. A client past either bound is cut off, as before.
//!
//! - **HTTP/1.1**: the answer says `Connection: close`; the connection closes once the answer
//!   is written and the body was read to its end (or let go).
//! - **HTTP/2**: the request's stream stays open while its body is read, so a client that
//!   sends it all sees its upload end normally; let go early, the stream is reset with
//!   `NO_ERROR` after the answer (RFC 9113, section 8.1), as before.
//!
//! A request with `Expect: 100-continue` is not read: its client sends no body after a final
//! answer.

use std::pin::Pin;
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderValue, Version, header};
use axum::response::Response;

/// An HTTP/1.1 client may send this many times `--max-body-bytes` after its body was refused,
/// and read the answer.
pub const DISCARD_FACTOR: usize = 4;

/// How much of a refused body is read and discarded, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct Discard {
    /// Bytes at most.
    pub bytes: usize,
    /// Time at most, from the moment the answer was written.
    pub time: Duration,
}

impl Discard {
    /// For a server whose body limit is `max_body_bytes` and read timeout `read_timeout`.
    pub fn new(max_body_bytes: usize, read_timeout: Duration) -> Discard {
        Discard { bytes: max_body_bytes.saturating_mul(DISCARD_FACTOR), time: read_timeout }
    }
}

/// `res`, the answer refusing a request of `version` whose body `body` is not read to its end,
/// given so that the client reads it (see the [module](self)). `expects_continue`: the request
/// asked `Expect: 100-continue` (its client sends no body after a final answer).
pub fn answer_then_discard(
    res: Response,
    body: Body,
    version: Version,
    expects_continue: bool,
    discard: Discard,
) -> Response {
    let mut res = res;
    if version < Version::HTTP_2 {
        res.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if !expects_continue {
        // HTTP/1.1: the connection reads the body while it is wanted, and closes once the
        // answer is written and the body ended (or was let go). HTTP/2: the stream stays open
        // for the body as long as it is read.
        tokio::spawn(read_and_discard(body, discard));
    }
    res
}

/// Whether a request asked `Expect: 100-continue`.
pub fn expects_continue(headers: &axum::http::HeaderMap) -> bool {
    headers.get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Reads `body` to its end, or until `discard`'s bounds, and lets it go: the bytes read.
async fn read_and_discard(mut body: Body, discard: Discard) -> usize {
    let mut read = 0usize;
    let reading = async {
        while let Some(Ok(frame)) =
            std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            read += frame.data_ref().map_or(0, Bytes::len);
            if read > discard.bytes {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(discard.time, reading).await;
    read
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;
    use futures::StreamExt as _;

    /// A request body of `chunks` chunks of `size` bytes.
    fn request(chunks: usize, size: usize) -> Body {
        let stream = futures::stream::iter(0..chunks)
            .map(move |_| Ok::<_, std::io::Error>(Bytes::from(vec![0u8; size])));
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn a_refused_body_is_read_up_to_the_bounds() {
        let discard = Discard { bytes: 10 * 1024, time: Duration::from_secs(5) };
        assert_eq!(read_and_discard(request(8, 1024), discard).await, 8 * 1024);
        assert_eq!(read_and_discard(request(100, 1024), discard).await, 11 * 1024);
        // A stalled body: for the time bound only.
        let discard = Discard { bytes: 1 << 20, time: Duration::from_millis(200) };
        let stalled =
            Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        let started = std::time::Instant::now();
        assert_eq!(read_and_discard(stalled, discard).await, 0);
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(200) && took < Duration::from_secs(5), "{took:?}");
    }

    #[tokio::test]
    async fn the_answer_is_as_it_was_and_http1_closes_the_connection() {
        let discard = Discard { bytes: 1024, time: Duration::from_secs(5) };
        for version in [Version::HTTP_11, Version::HTTP_2] {
            let answer = (axum::http::StatusCode::PAYLOAD_TOO_LARGE, "too large").into_response();
            let res = answer_then_discard(answer, request(1, 10), version, false, discard);
            assert_eq!(
                res.headers().get(header::CONNECTION).is_some(),
                version == Version::HTTP_11,
                "{version:?}"
            );
            assert_eq!(res.body().size_hint().exact(), Some(9));
            let bytes = axum::body::to_bytes(res.into_body(), usize::MAX).await.unwrap();
            assert_eq!(&bytes[..], b"too large");
        }
    }
}
