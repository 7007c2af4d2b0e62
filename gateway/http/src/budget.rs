//! Bytes held in memory per connection and in total: the bytes of gRPC replies not
//! yet written, and the bytes of request bodies being read.
//!
//! **Replies.**
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
//!
//! **Requests.** A request body is read whole before its handler runs (REST and gRPC alike),
//! so one HTTP/2 connection could have each of its 256 streams upload a body of
//! `--max-body-bytes` at once (4 GiB), and many connections multiply it. A body being read
//! reserves its bytes as they arrive ([`Growing`], from the connection's [`RequestBudget`], a
//! request extension `http::conn` puts on every request): from its connection's budget
//! (`--max-request-bytes-per-connection`) and the server's (`--max-request-bytes`). A body
//! that finds no room stops being read (HTTP/2 flow control then stops its sender) and waits,
//! within the read timeout; the reader then refuses it (503 / `RESOURCE_EXHAUSTED`, naming the
//! flag of the budget it waited for). The bytes are given back when the request is done. A body
//! larger than a budget takes all of it and goes on (it is read alone on its connection).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use axum::body::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default of `--max-reply-bytes-per-connection`.
pub const DEFAULT_REPLY_BYTES_PER_CONNECTION: u64 = 64 << 20;
/// The default of `--max-reply-bytes`.
pub const DEFAULT_REPLY_BYTES: u64 = 512 << 20;
/// The default of `--max-request-bytes-per-connection`.
pub const DEFAULT_REQUEST_BYTES_PER_CONNECTION: u64 = 64 << 20;
/// The default of `--max-request-bytes`.
pub const DEFAULT_REQUEST_BYTES: u64 = 512 << 20;
/// The size of the pieces a large reply is written in.
pub const CHUNK: usize = 64 << 10;
/// Budgets count KiB (a semaphore's permits are taken 2^32 - 1 at most at once).
const UNIT: usize = 1 << 10;

/// The whole server's budget, from which each connection's is made (one for replies, another
/// for requests).
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

/// The budget of request bodies of the connection a request came on (a request extension).
#[derive(Debug, Clone)]
pub struct RequestBudget(pub ConnectionBudget);

/// Which budget a [`Growing`] reservation is waiting for room in, if any (kept where the
/// reader can see it after giving up).
#[derive(Debug, Default)]
pub struct Waiting(AtomicU8);

/// What [`Waiting`] holds.
const NOT_WAITING: u8 = 0;
const WAITING_CONNECTION: u8 = 1;
const WAITING_TOTAL: u8 = 2;

/// A budget that had no room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// The connection's own.
    Connection,
    /// The whole server's.
    Total,
}

impl Waiting {
    /// The budget being waited for now.
    pub fn short(&self) -> Option<Short> {
        match self.0.load(Ordering::SeqCst) {
            WAITING_CONNECTION => Some(Short::Connection),
            WAITING_TOTAL => Some(Short::Total),
            _ => None,
        }
    }
}

/// Bytes reserved as they arrive (a request body being read), given back when dropped.
#[derive(Debug)]
pub struct Growing {
    budget: ConnectionBudget,
    units: u32,
    own: Option<OwnedSemaphorePermit>,
    total: Option<OwnedSemaphorePermit>,
}

/// `n` permits of `sem`, at once or after waiting (noted in `waiting` as `short`).
async fn take(
    sem: &Arc<Semaphore>,
    n: u32,
    waiting: &Waiting,
    short: u8,
) -> Option<OwnedSemaphorePermit> {
    if let Ok(permit) = sem.clone().try_acquire_many_owned(n) {
        return Some(permit);
    }
    waiting.0.store(short, Ordering::SeqCst);
    // The semaphores are never closed.
    let permit = sem.clone().acquire_many_owned(n).await.ok();
    waiting.0.store(NOT_WAITING, Ordering::SeqCst);
    permit
}

/// `permit` added to `slot`.
fn merge(slot: &mut Option<OwnedSemaphorePermit>, permit: OwnedSemaphorePermit) {
    match slot {
        Some(held) => held.merge(permit),
        None => *slot = Some(permit),
    }
}

impl ConnectionBudget {
    /// An empty reservation, to grow as a body arrives.
    pub fn growing(&self) -> Growing {
        Growing { budget: self.clone(), units: 0, own: None, total: None }
    }
}

impl Growing {
    /// Grows the reservation to `bytes` in all (at most all of a budget), waiting for room:
    /// first in the connection's own budget, then in the server's; `waiting` says which while
    /// it waits (and still says it when the wait is given up: the future dropped). Dropped
    /// while waiting, it keeps what it held before.
    pub async fn cover(&mut self, bytes: usize, waiting: &Waiting) {
        waiting.0.store(NOT_WAITING, Ordering::SeqCst);
        let want = u32::try_from(bytes.div_ceil(UNIT))
            .unwrap_or(u32::MAX)
            .min(self.budget.own_units)
            .min(self.budget.total_units);
        if want <= self.units {
            return;
        }
        let n = want - self.units;
        let Some(own) = take(&self.budget.own, n, waiting, WAITING_CONNECTION).await else {
            return;
        };
        let Some(total) = take(&self.budget.total, n, waiting, WAITING_TOTAL).await else {
            return;
        };
        merge(&mut self.own, own);
        merge(&mut self.total, total);
        self.units = want;
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

    #[tokio::test]
    async fn a_body_reserves_as_it_arrives_and_waits_for_room_naming_the_budget() {
        let budgets = ReplyBudgets::new(6 << 20, 4 << 20);
        let conn = budgets.connection();
        let waiting = Waiting::default();
        let mut first = conn.growing();
        first.cover(100, &waiting).await;
        assert_eq!(budgets.reserved_bytes(), 1 << 10);
        first.cover(3 << 20, &waiting).await;
        assert_eq!(budgets.reserved_bytes(), 3 << 20);
        first.cover(1 << 20, &waiting).await;
        assert_eq!(budgets.reserved_bytes(), 3 << 20, "never shrinks");
        // A second body on the same connection waits for the connection's room.
        let mut second = conn.growing();
        {
            let mut more = std::pin::pin!(second.cover(2 << 20, &waiting));
            assert!(futures::FutureExt::now_or_never(more.as_mut()).is_none());
            assert_eq!(waiting.short(), Some(Short::Connection));
        }
        // Given up: it holds nothing more.
        assert_eq!(budgets.reserved_bytes(), 3 << 20);
        // Another connection's body waits for the server's room.
        let other = budgets.connection();
        let mut third = other.growing();
        let waiting_total = Waiting::default();
        {
            let mut more = std::pin::pin!(third.cover(4 << 20, &waiting_total));
            assert!(futures::FutureExt::now_or_never(more.as_mut()).is_none());
            assert_eq!(waiting_total.short(), Some(Short::Total));
        }
        assert_eq!(budgets.reserved_bytes(), 3 << 20);
        // Once the first is done, there is room.
        drop(first);
        assert_eq!(budgets.reserved_bytes(), 0);
        third.cover(100 << 20, &waiting_total).await;
        assert_eq!(budgets.reserved_bytes(), 4 << 20, "all of a budget, no more");
        assert_eq!(waiting_total.short(), None);
        second.cover(2 << 20, &waiting).await;
        assert_eq!(budgets.reserved_bytes(), 6 << 20);
        drop((second, third));
        assert_eq!(budgets.reserved_bytes(), 0);
    }
}
