//! The bytes of gRPC replies held in memory and not yet written (issue 22, point 4).
//!
//! A reply is held from the moment it is made until the peer has taken it: HTTP/2 flow control
//! lets a peer grant no window and never read, and each of its streams then keeps its whole
//! reply (a `GetDatasetDef` of a 15 MiB graph, 256 streams at once: 4 GB). So a large reply
//! first reserves its size from two budgets, its connection's
//! (`--max-reply-bytes-per-connection`) and the whole server's (`--max-reply-bytes`), waiting
//! for room (bounded by the call's 30 s; then `UNAVAILABLE`, retried by TensorFlow), and
//! gives it back when its body has been handed over to the connection and dropped. The body is
//! handed over in [`CHUNK`]-byte copies (each a separate allocation), so what the connection
//! buffers of it (at most its send buffer per stream, see `http::conn`) never pins the whole
//! reply. A reply larger than the connection's budget takes all of it (it is served, alone on its
//! connection).
//!
//! A reservation is made before the reply is materialized (the core's copy of the graph), from
//! the size it will have.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default of `--max-reply-bytes-per-connection`.
pub const DEFAULT_REPLY_BYTES_PER_CONNECTION: u64 = 64 << 20;
/// The default of `--max-reply-bytes`.
pub const DEFAULT_REPLY_BYTES: u64 = 512 << 20;
/// The size of the pieces a large reply is written in.
pub const CHUNK: usize = 64 << 10;
/// Budgets count KiB (a semaphore's permits are taken 2^32 - 1 at most at once).
const UNIT: usize = 1 << 10;

/// The whole server's budget, from which each connection's is made.
#[derive(Debug, Clone)]
pub struct ReplyBudgets {
    total: Arc<Semaphore>,
    total_units: u32,
    per_connection_units: u32,
}

/// Units of `bytes` (rounded up, at least 1, at most `u32::MAX`).
fn units(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(UNIT).max(1)).unwrap_or(u32::MAX)
}

impl ReplyBudgets {
    /// At most `total` bytes of replies held over all connections, `per_connection` on one.
    pub fn new(total: usize, per_connection: usize) -> ReplyBudgets {
        let total_units =
            units(total).min(u32::try_from(Semaphore::MAX_PERMITS).unwrap_or(u32::MAX));
        ReplyBudgets {
            total: Arc::new(Semaphore::new(total_units as usize)),
            total_units,
            per_connection_units: units(per_connection).min(total_units),
        }
    }

    /// The budget of a new connection.
    pub fn connection(&self) -> ConnectionBudget {
        ConnectionBudget {
            own: Arc::new(Semaphore::new(self.per_connection_units as usize)),
            own_units: self.per_connection_units,
            total: self.total.clone(),
            total_units: self.total_units,
        }
    }

    /// Bytes reserved now over all connections (for tests and diagnostics).
    pub fn reserved_bytes(&self) -> usize {
        (self.total_units as usize - self.total.available_permits()) * UNIT
    }
}

/// One connection's budget (a request extension of its gRPC calls).
#[derive(Debug, Clone)]
pub struct ConnectionBudget {
    own: Arc<Semaphore>,
    own_units: u32,
    total: Arc<Semaphore>,
    total_units: u32,
}

impl ConnectionBudget {
    /// Reserves `bytes` of reply (all of a budget when it is larger), waiting for room: first
    /// in the connection's own budget (a connection that reads nothing waits here, taking
    /// nothing more of the server's), then in the server's.
    pub async fn reserve(&self, bytes: usize) -> HeldReply {
        let n = units(bytes).min(self.own_units).min(self.total_units);
        let own = self.own.clone().acquire_many_owned(n).await;
        let total = self.total.clone().acquire_many_owned(n).await;
        // The semaphores are never closed.
        HeldReply(Arc::new((own.ok(), total.ok())))
    }
}

/// Bytes of reply reserved, given back when the last clone is dropped. A response extension
/// from the RPC that made the reply to the front that writes it ([`Metered`]).
#[derive(Debug, Clone)]
pub struct HeldReply(
    #[allow(dead_code)] Arc<(Option<OwnedSemaphorePermit>, Option<OwnedSemaphorePermit>)>,
);

/// A reply's body that holds its reservation until it ends (or the stream is dropped), and
/// hands its data over in [`CHUNK`]-byte copies.
#[derive(Debug)]
pub struct Metered<B> {
    inner: B,
    held: Option<HeldReply>,
    /// A large data frame of `inner`, being handed over.
    pending: Bytes,
}

impl<B> Metered<B> {
    /// `inner`, holding `held` until it ends.
    pub fn new(inner: B, held: HeldReply) -> Metered<B> {
        Metered { inner, held: Some(held), pending: Bytes::new() }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Metered<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if this.pending.is_empty() {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) if data.len() > CHUNK => this.pending = data,
                    Ok(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(other) => {
                    // The end (or a failure): nothing of the reply is held any more.
                    this.held = None;
                    return Poll::Ready(other);
                }
            }
        }
        let n = this.pending.len().min(CHUNK);
        let chunk = Bytes::copy_from_slice(&this.pending[..n]);
        this.pending = if n == this.pending.len() { Bytes::new() } else { this.pending.slice(n..) };
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.inner.size_hint();
        let pending = self.pending.len() as u64;
        hint.set_lower(hint.lower().saturating_add(pending));
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper.saturating_add(pending));
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    #[tokio::test]
    async fn a_connection_waits_for_room_and_a_reply_gives_it_back_when_its_body_ends() {
        let budgets = ReplyBudgets::new(10 << 20, 4 << 20);
        let conn = budgets.connection();
        let first = conn.reserve(3 << 20).await;
        assert_eq!(budgets.reserved_bytes(), 3 << 20);
        // A second 3 MiB reply on the same connection waits for the first.
        let mut second = std::pin::pin!(conn.reserve(3 << 20));
        assert!(futures::FutureExt::now_or_never(second.as_mut()).is_none());
        // Another connection is not held up by it.
        let other = budgets.connection().reserve(3 << 20).await;
        assert_eq!(budgets.reserved_bytes(), 6 << 20);
        // A reply larger than the connection's budget takes all of it.
        drop(other);
        let big = budgets.connection().reserve(100 << 20).await;
        assert_eq!(budgets.reserved_bytes(), 7 << 20);
        drop(big);

        // The first reply's body: given back once it has been read to its end, in chunks.
        let data = Bytes::from(vec![7u8; 3 * CHUNK + 5]);
        let mut body = Metered::new(http_body_util::Full::new(data.clone()), first);
        let mut chunks = Vec::new();
        while let Some(frame) = body.frame().await {
            let chunk = frame.unwrap().into_data().unwrap();
            assert!(chunk.len() <= CHUNK);
            chunks.extend_from_slice(&chunk);
        }
        assert_eq!(chunks, data);
        let second = tokio::time::timeout(std::time::Duration::from_secs(5), second)
            .await
            .expect("room once the first reply ended");
        assert_eq!(budgets.reserved_bytes(), 3 << 20);
        drop(second);
        drop(body);
        assert_eq!(budgets.reserved_bytes(), 0);
    }
}
