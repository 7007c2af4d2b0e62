//! A read's reply, written within the worker's `--max-reply-bytes`.
//!
//! What a task's buffer weighs is what its chunks hold in memory, and a reply can take far
//! more than that: JSON writes every row out (a dictionary of one 256 KiB string referenced by
//! 4,000 rows is 1 GB of JSON from a 279 KB file, and so is a `string_view` column whose views
//! share one buffer), and Arrow re-encodes what a reply's record batches point into. So the
//! reply is written *before* its elements are taken, under the task's lock, and a read of
//! `max` elements takes only as many as fit the budget: the rest stay buffered for the next
//! read, and the read's origin runs cover exactly what it took (nothing skipped or repeated).
//!
//! * JSON: elements are written one by one into the body; the first that does not fit ends the
//!   reply. An element that does not fit alone is refused with `RESOURCE_EXHAUSTED` naming it
//!   (its row in its file), and stays unread.
//! * Arrow: the stream of the elements that fit by their weights is written, stopping the
//!   moment it would pass the budget; then half as many are tried, and so on to one element,
//!   which fits or is refused the same way. The stream that fits is the reply.
//!
//! A coordinated read's element is taken with its round, then written: one too large for the
//! budget is refused the same way (asking again in the round gets the same element).

use std::sync::Arc;

use arrow_schema::SchemaRef;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use shardwise_client::arrow_stream::ARROW_STREAM;
use shardwise_core::dataset::Element;
use shardwise_core::position::OriginRun;
use shardwise_core::worker as machine;
use shardwise_http::{Code, Problem};

use super::columnar_out::{
    IpcCompression, JsonOut, Unwritten, element_name, record_batches, schema_of,
    write_stream_within,
};
use super::task::ReadResult;

/// How a read answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `{"elements": [...], "end_of_sequence": ..., "origin": ...}`.
    Json,
    /// One Arrow IPC stream, compressed or not.
    Arrow(Option<IpcCompression>),
}

/// A reply being written: the format, the budget and, once [`Reply::fit`] chose how many
/// elements to take, what it wrote of them.
#[derive(Debug)]
pub(crate) struct Reply {
    format: Format,
    budget: usize,
    /// JSON: the body up to the end of each element written (`{"elements":[` first).
    json: Option<(JsonOut, Vec<usize>)>,
    /// Arrow: the stream of the first `n` elements (with their origin runs).
    arrow: Option<(usize, Vec<u8>)>,
}

impl Reply {
    /// A reply in `format` of at most `budget` bytes (`--max-reply-bytes`).
    pub(crate) fn new(format: Format, budget: u64) -> Reply {
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
        Reply { format, budget, json: None, arrow: None }
    }

    /// Under the task's lock: how many of the buffered elements (at most `max`) this reply
    /// takes, written already. `max` when nothing is buffered (the read takes nothing, or
    /// answers the task's end or failure). `schema`: the task's columns, for a stream whose
    /// elements do not say.
    pub(crate) fn fit(
        &mut self,
        m: &machine::Task,
        max: usize,
        schema: Option<&SchemaRef>,
    ) -> Result<usize, Problem> {
        self.json = None;
        self.arrow = None;
        let Some((first, _)) = m.buffered().next() else { return Ok(max) };
        let index = m.view().elements_served;
        match self.format {
            Format::Json => {
                let mut out = JsonOut::new(self.budget);
                out.raw(b"{\"elements\":[").map_err(|_| self.too_large(first, index))?;
                let mut ends = Vec::new();
                for (e, _) in m.buffered().take(max) {
                    let mark = out.len();
                    let written = match ends.is_empty() {
                        true => out.element(e),
                        false => out.raw(b",").and_then(|()| out.element(e)),
                    };
                    match written {
                        Ok(()) => ends.push(out.len()),
                        Err(Unwritten::Over) if !ends.is_empty() => {
                            out.truncate(mark);
                            break;
                        }
                        Err(Unwritten::Over) => return Err(self.too_large(e, index)),
                        Err(Unwritten::Refused(p)) => return Err(p),
                    }
                }
                // The rest of the object (the origin runs) within the budget too, but for one
                // element, which is answered whatever its runs take.
                let mut n = ends.len();
                while n > 1
                    && ends[n - 1] + tail(false, m.buffered_origin(n).as_deref()).len()
                        > self.budget
                {
                    n -= 1;
                }
                ends.truncate(n);
                self.json = Some((out, ends));
                Ok(n)
            }
            Format::Arrow(compression) => {
                let peeked: Vec<(Element, u64)> =
                    m.buffered().take(max).map(|(e, w)| (e.clone(), w)).collect();
                // First try as many as fit by their weights (what their chunks hold).
                let mut weight = 0u64;
                let mut n = peeked
                    .iter()
                    .take_while(|(_, w)| {
                        weight = weight.saturating_add(*w);
                        weight <= self.budget as u64
                    })
                    .count()
                    .max(1);
                let elements: Vec<Element> = peeked.into_iter().map(|(e, _)| e).collect();
                loop {
                    let origin = m.buffered_origin(n);
                    match self.stream(&elements[..n], origin.as_deref(), compression, schema) {
                        Ok(body) => {
                            self.arrow = Some((n, body));
                            return Ok(n);
                        }
                        Err(Unwritten::Over) if n > 1 => n /= 2,
                        Err(Unwritten::Over) => return Err(self.too_large(first, index)),
                        Err(Unwritten::Refused(p)) => return Err(p),
                    }
                }
            }
        }
    }

    /// The response to `read`, the machine's answer to a read for as many elements as
    /// [`Reply::fit`] chose (or to a coordinated read, or a gone task's answer).
    pub(crate) fn finish(
        mut self,
        read: ReadResult,
        schema: Option<&SchemaRef>,
        index: u64,
    ) -> Result<Response, Problem> {
        let ReadResult { elements, end_of_sequence, origin } = read;
        let n = elements.len();
        match self.format {
            Format::Json => {
                let (mut out, ends) = match self.json.take() {
                    Some((out, ends)) if ends.len() == n && n > 0 => (out, ends),
                    _ => self.json_of(&elements, index)?,
                };
                out.truncate(ends.last().copied().unwrap_or(out.len()));
                let mut body = out.into_bytes();
                body.extend_from_slice(&tail(end_of_sequence, origin.as_deref()));
                let json = HeaderValue::from_static("application/json");
                Ok(([(header::CONTENT_TYPE, json)], body).into_response())
            }
            Format::Arrow(compression) => {
                let body = match self.arrow.take() {
                    Some((taken, body)) if taken == n && n > 0 => body,
                    _ => self.stream(&elements, origin.as_deref(), compression, schema).map_err(
                        |e| match e {
                            Unwritten::Refused(p) => p,
                            Unwritten::Over => match elements.first() {
                                Some(first) => self.too_large(first, index),
                                None => {
                                    Problem::new(Code::Internal, "an empty stream is too large")
                                }
                            },
                        },
                    )?,
                };
                let end = HeaderValue::from_static(if end_of_sequence { "true" } else { "false" });
                let headers = [
                    (header::CONTENT_TYPE, HeaderValue::from_static(ARROW_STREAM)),
                    (header::HeaderName::from_static("shardwise-end-of-sequence"), end),
                ];
                Ok((headers, body).into_response())
            }
        }
    }

    /// The budget of a reply of `n` elements: a reply of none (an empty read, the end, a gone
    /// task's answer) is always written.
    fn budget_for(&self, n: usize) -> usize {
        if n == 0 { usize::MAX } else { self.budget }
    }

    /// `elements` as the start of a JSON body, all of them within the budget.
    fn json_of(&self, elements: &[Element], index: u64) -> Result<(JsonOut, Vec<usize>), Problem> {
        let mut out = JsonOut::new(self.budget_for(elements.len()));
        let mut ends = Vec::with_capacity(elements.len());
        let over = |e: Option<&Element>| match e {
            Some(e) => self.too_large(e, index),
            None => Problem::new(Code::Internal, "a reply budget too small for an empty reply"),
        };
        out.raw(b"{\"elements\":[").map_err(|_| over(elements.first()))?;
        for (k, e) in elements.iter().enumerate() {
            let written = match k {
                0 => out.element(e),
                _ => out.raw(b",").and_then(|()| out.element(e)),
            };
            match written {
                Ok(()) => ends.push(out.len()),
                Err(Unwritten::Over) => return Err(over(Some(e))),
                Err(Unwritten::Refused(p)) => return Err(p),
            }
        }
        Ok((out, ends))
    }

    /// `elements` as one Arrow IPC stream within the budget.
    fn stream(
        &self,
        elements: &[Element],
        origin: Option<&[OriginRun]>,
        compression: Option<IpcCompression>,
        schema: Option<&SchemaRef>,
    ) -> Result<Vec<u8>, Unwritten> {
        let schema = schema_of(elements).or_else(|| schema.map(Arc::clone));
        let batches = record_batches(elements)?;
        let budget = self.budget_for(elements.len());
        write_stream_within(schema.as_ref(), &batches, origin, compression, budget)
    }

    /// An element that does not fit alone in a reply.
    fn too_large(&self, element: &Element, index: u64) -> Problem {
        let (form, remedy) = match self.format {
            Format::Json => {
                ("as JSON", "read it as Arrow, or raise the worker's --max-reply-bytes")
            }
            Format::Arrow(_) => ("as an Arrow stream", "raise the worker's --max-reply-bytes"),
        };
        Problem::new(
            Code::ResourceExhausted,
            format!(
                "{} takes more than {} bytes {form}, the most this worker answers in one read \
                 (its --max-reply-bytes); it stays unread: {remedy}",
                element_name(element, index),
                self.budget
            ),
        )
    }
}

/// The end of a JSON body after its elements: `],"end_of_sequence":...` and the origin runs.
fn tail(end_of_sequence: bool, origin: Option<&[OriginRun]>) -> Vec<u8> {
    let mut out = format!("],\"end_of_sequence\":{end_of_sequence}").into_bytes();
    if let Some(runs) = origin {
        out.extend_from_slice(b",\"origin\":");
        // Runs are plain numbers and booleans: they always serialize.
        out.extend(serde_json::to_vec(runs).unwrap_or_else(|_| b"[]".to_vec()));
    }
    out.push(b'}');
    out
}
