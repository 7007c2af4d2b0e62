//! The tests' one HTTP/1.1 client, on a plain `TcpStream` (no client stack between a test and
//! the bytes on the wire), for the servers under test, the fake Kubernetes API server and
//! chromedriver.
//!
//! - One-shot ([`one_shot`], and [`crate::http`] on it): the request says `Connection: close`
//!   and the answer is read to the end of the stream.
//! - Keep-alive ([`Conn`]): requests on one connection, each answer read by its
//!   `Content-Length` or its chunks, so that the connection can carry the next request; a
//!   streamed (chunked) answer can also be read chunk by chunk ([`Conn::read_chunk`]).
//! - Raw bytes ([`send_bytes`], [`read_until_closed`]): for the tests that send malformed or
//!   partial requests and look at whatever comes back.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long a one-shot request waits for a byte of its answer.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// An HTTP answer.
#[derive(Debug)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Header lines, lower-cased names.
    pub headers: Vec<(String, String)>,
    /// Body text (de-chunked).
    pub body: String,
}

impl HttpResponse {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {} {}", self.status, self.body))
    }
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// `HOST:PORT` of `base` (`http://HOST:PORT`, a trailing `/` allowed, or `HOST:PORT` itself).
pub fn authority(base: &str) -> &str {
    base.trim_start_matches("http://").trim_end_matches('/')
}

/// A request to send: method, path, extra headers and body. `Host` and `Content-Length`
/// (always, `0` without a body) are added when it is written.
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<(String, Vec<u8>)>,
}

impl Request {
    /// `METHOD PATH`, no body.
    pub fn new(method: &str, path: &str) -> Request {
        Request { method: method.into(), path: path.into(), headers: Vec::new(), body: None }
    }

    /// With the header `name: value` (after `Host` and `Connection`, in the order added).
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// With `Authorization: Bearer TOKEN` when `token` is given.
    pub fn bearer(self, token: Option<&str>) -> Request {
        match token {
            Some(t) => self.header("Authorization", &format!("Bearer {t}")),
            None => self,
        }
    }

    /// With `text` as an `application/json` body (as it is: it need not be valid JSON).
    pub fn json_text(mut self, text: &str) -> Request {
        self.body = Some(("application/json".into(), text.as_bytes().to_vec()));
        self
    }

    /// With `body` as its JSON body when given.
    pub fn json(self, body: Option<&serde_json::Value>) -> Request {
        match body {
            Some(b) => self.json_text(&b.to_string()),
            None => self,
        }
    }

    /// Its bytes for `host`; `close` adds `Connection: close`.
    pub fn to_bytes(&self, host: &str, close: bool) -> Vec<u8> {
        let mut head = format!("{} {} HTTP/1.1\r\nHost: {host}\r\n", self.method, self.path);
        if close {
            head.push_str("Connection: close\r\n");
        }
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        let payload: &[u8] = match &self.body {
            Some((content_type, bytes)) => {
                head.push_str(&format!("Content-Type: {content_type}\r\n"));
                bytes
            }
            None => &[],
        };
        head.push_str(&format!("Content-Length: {}\r\n\r\n", payload.len()));
        let mut out = head.into_bytes();
        out.extend_from_slice(payload);
        out
    }
}

/// Connects to `base` and writes `bytes` as they are (a request, part of one, or garbage);
/// reads on the stream wait at most `read_timeout` for a byte.
pub fn send_bytes(base: &str, bytes: &[u8], read_timeout: Duration) -> std::io::Result<TcpStream> {
    let mut stream = TcpStream::connect(authority(base))?;
    stream.set_read_timeout(Some(read_timeout))?;
    stream.write_all(bytes)?;
    Ok(stream)
}

/// Connects to `base` and writes `request` with `Connection: close`, without waiting for the
/// answer (e.g. to a paused process, whose kernel still accepts the connection and the bytes):
/// [`read_response`] reads it.
pub fn send(base: &str, request: &Request) -> std::io::Result<TcpStream> {
    send_bytes(base, &request.to_bytes(authority(base), true), READ_TIMEOUT)
}

/// Everything the peer sends until it closes the stream, as text (lossy UTF-8).
pub fn read_to_end(mut stream: TcpStream) -> std::io::Result<String> {
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    Ok(String::from_utf8_lossy(&raw).into_owned())
}

/// What the peer sends until the stream ends, as text (lossy UTF-8), and how it ended: `Ok`
/// at a clean close, or the error that ended the read (a reset, the read timeout...).
pub fn read_until_closed(mut stream: TcpStream) -> (String, std::io::Result<()>) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        match stream.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    (String::from_utf8_lossy(&raw).into_owned(), end)
}

/// Reads the answer to a request [`send`] wrote, to the end of the stream.
pub fn read_response(stream: TcpStream) -> std::io::Result<HttpResponse> {
    parse(&read_to_end(stream)?)
}

/// A whole answer (head and body, as read to the end of the stream) parsed; a chunked body
/// is de-chunked.
pub fn parse(text: &str) -> std::io::Result<HttpResponse> {
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line in {head:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = header(&headers, "transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_owned() };
    Ok(HttpResponse { status, headers, body })
}

/// The status code of an answer's text (its status line's second word), 0 when there is
/// none.
pub fn status_of(text: &str) -> u16 {
    text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// One request with `Connection: close`, the answer read to the end of the stream (at most
/// [`READ_TIMEOUT`] without a byte).
pub fn one_shot(base: &str, request: &Request) -> std::io::Result<HttpResponse> {
    read_response(send(base, request)?)
}

/// [`one_shot`], the answer as the text it was (head and body): for tests that look at the
/// bytes themselves.
pub fn one_shot_text(base: &str, request: &Request) -> std::io::Result<String> {
    read_to_end(send(base, request)?)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The head of an answer on a [`Conn`].
#[derive(Debug)]
pub struct Head {
    /// The status line, as sent (without its CRLF).
    pub status_line: String,
    /// Status code.
    pub status: u16,
    /// Header lines, lower-cased names.
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

/// A keep-alive connection: requests go without `Connection: close`, and each answer is read
/// exactly (by `Content-Length`, or chunk by chunk), leaving the connection for the next one.
#[derive(Debug)]
pub struct Conn {
    host: String,
    reader: BufReader<TcpStream>,
}

impl Conn {
    /// Connects to `base`; reads wait at most `read_timeout` for a byte.
    pub fn open(base: &str, read_timeout: Duration) -> std::io::Result<Conn> {
        let host = authority(base).to_owned();
        let stream = TcpStream::connect(&host)?;
        stream.set_read_timeout(Some(read_timeout))?;
        Ok(Conn { host, reader: BufReader::new(stream) })
    }

    /// Writes `request` (without `Connection: close`).
    pub fn send(&mut self, request: &Request) -> std::io::Result<()> {
        self.reader.get_mut().write_all(&request.to_bytes(&self.host, false))
    }

    /// Sends `request` and reads its whole answer.
    pub fn request(&mut self, request: &Request) -> std::io::Result<HttpResponse> {
        self.send(request)?;
        let head = self.read_head()?;
        let body = self.read_body(&head)?;
        let Head { status, headers, .. } = head;
        Ok(HttpResponse { status, headers, body: String::from_utf8_lossy(&body).into_owned() })
    }

    /// One CRLF-terminated line, without the CRLF; `UnexpectedEof` when the stream ends (or
    /// a line ends without CR) first.
    pub fn read_line(&mut self) -> std::io::Result<String> {
        let mut s = String::new();
        if self.reader.read_line(&mut s)? == 0 || !s.ends_with("\r\n") {
            let cut = format!("cut at {s:?}");
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, cut));
        }
        s.truncate(s.len() - 2);
        Ok(s)
    }

    /// The status line and the headers of the next answer.
    pub fn read_head(&mut self) -> std::io::Result<Head> {
        let status_line = self.read_line()?;
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
        let mut headers = Vec::new();
        loop {
            let line = self.read_line()?;
            if line.is_empty() {
                break;
            }
            let (k, v) = line
                .split_once(':')
                .ok_or_else(|| std::io::Error::other(format!("bad header line {line:?}")))?;
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
        Ok(Head { status_line, status, headers })
    }

    /// The body of the answer whose head was just read: its `Content-Length` bytes, or all its
    /// chunks; an error when it has neither.
    pub fn read_body(&mut self, head: &Head) -> std::io::Result<Vec<u8>> {
        if head.header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            let mut body = Vec::new();
            while let Some(chunk) = self.read_chunk()? {
                body.extend(chunk);
            }
            return Ok(body);
        }
        let len: usize = head
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| std::io::Error::other("no Content-Length and not chunked"))?;
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body)?;
        Ok(body)
    }

    /// The next chunk of a chunked body; `None` at the last (empty) chunk, after which no
    /// trailers may follow. Each chunk must end with CRLF.
    pub fn read_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let size = self.read_line()?;
        let n = usize::from_str_radix(size.trim(), 16).map_err(std::io::Error::other)?;
        if n == 0 {
            let after = self.read_line()?;
            if !after.is_empty() {
                return Err(std::io::Error::other(format!("no trailers expected: {after:?}")));
            }
            return Ok(None);
        }
        let mut data = vec![0; n];
        self.reader.read_exact(&mut data)?;
        let after = self.read_line()?;
        if !after.is_empty() {
            return Err(std::io::Error::other(format!("chunk ends with {after:?}, not CRLF")));
        }
        Ok(Some(data))
    }
}
