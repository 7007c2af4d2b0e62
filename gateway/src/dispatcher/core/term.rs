//! One term: a dispatcher and its journal while it serves. The core mutex guards the driver
//! and the handlers waiting for their replies; the term ends on a journal failure or when a
//! replica stops leading, and then acknowledges nothing more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use shardwise_core::dispatch::{Driver, Event, JOURNAL_BROKEN, Reply, Ticket};
use tokio::sync::{Notify, oneshot};

use super::Stats;
use super::lease::LeaseClock;
use super::syncer::{Pipe, Sink};
use crate::http::{Code, Problem};

/// What the core mutex guards: the driver, and the handlers waiting for their replies.
pub(super) struct Core {
    pub(super) driver: Driver<Sink>,
    pub(super) waiters: HashMap<Ticket, oneshot::Sender<Reply>>,
}

impl Core {
    /// Logs the driver's events; stops everything if its sink failed.
    pub(super) fn after(&mut self, inner: &Inner) {
        while let Some(e) = self.driver.poll_event() {
            match e {
                Event::WorkerLost { address } => tracing::warn!(%address, "worker lost"),
                Event::IterationFinished { iteration_id } => {
                    tracing::info!(%iteration_id, "iteration finished");
                }
                other => tracing::debug!(?other, "event"),
            }
        }
        if let Some(e) = self.driver.failure()
            && !inner.broken.swap(true, Ordering::SeqCst)
        {
            tracing::error!(error = %e, "journal failed; refusing further requests");
            *inner.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(e.to_string());
            inner.end();
        }
        if inner.broken.load(Ordering::SeqCst) {
            // Dropping the senders answers every waiter: none of them is acknowledged.
            self.waiters.clear();
        }
        let deadline = self.driver.poll_timeout().0;
        if deadline < inner.next_deadline.load(Ordering::Relaxed) {
            inner.next_deadline.store(deadline, Ordering::Relaxed);
            inner.timer.notify_one();
        }
    }

    /// Hands released replies to their handlers.
    pub(super) fn deliver(&mut self, released: Vec<(Ticket, Reply)>) {
        for (ticket, reply) in released {
            if let Some(tx) = self.waiters.remove(&ticket) {
                let _ = tx.send(reply);
            }
        }
    }
}

/// One term: a dispatcher and its journal, from the moment it starts serving until it ends (a
/// journal failure, or [`DriverHandle::end_term`] when a replica loses its leadership). A term
/// that ended acknowledges nothing more; its syncer and timer task stop.
///
/// [`DriverHandle::end_term`]: super::DriverHandle::end_term
pub(super) struct Inner {
    pub(super) core: Mutex<Option<Core>>,
    pub(super) broken: AtomicBool,
    /// Why the journal could not be written, once it could not (for `/readyz`).
    pub(super) failure: Mutex<Option<String>>,
    pub(super) pipe: Arc<Pipe>,
    /// Wakes the timer task when a call brings the next deadline forward.
    pub(super) timer: Notify,
    pub(super) next_deadline: AtomicU64,
    pub(super) stats: Arc<Stats>,
    /// Compact when the current segment grows past this many bytes.
    pub(super) compact_at_bytes: u64,
    /// Turns true when the term ends.
    pub(super) ended: tokio::sync::watch::Sender<bool>,
    /// A replica's lease: calls are refused once it has passed.
    pub(super) lease: Option<LeaseClock>,
}

impl Inner {
    /// Whether the term's lease (if it has one) still holds.
    pub(super) fn holds(&self) -> bool {
        self.lease.as_ref().is_none_or(LeaseClock::holds)
    }

    /// Marks the term ended: nothing more is acknowledged.
    pub(super) fn end(&self) {
        self.broken.store(true, Ordering::SeqCst);
        self.ended.send_replace(true);
    }
}

impl Inner {
    /// Why a term that ended refuses calls: etcd at its space quota says so and its remedy
    /// (no restart is needed), anything else that the journal could not be written.
    pub(super) fn broken_problem(&self) -> Problem {
        let failure = self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match failure.as_deref() {
            Some(cause) if cause.contains(crate::etcd::SPACE_EXCEEDED_REMEDY) => Problem::new(
                Code::Unavailable,
                format!("The journal could not be written ({cause})."),
            ),
            _ => journal_broken(),
        }
    }
}

pub(super) fn journal_broken() -> Problem {
    Problem::new(Code::Unavailable, JOURNAL_BROKEN)
}

/// Ends when its term ends ([`DriverHandle::begin_term`]).
///
/// [`DriverHandle::begin_term`]: super::DriverHandle::begin_term
#[derive(Debug)]
pub struct TermEnded(pub(super) tokio::sync::watch::Receiver<bool>);

impl TermEnded {
    /// Waits for the term to end.
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|ended| *ended).await;
    }
}
