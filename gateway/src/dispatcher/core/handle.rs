//! [`DriverHandle`]: what request handlers hold. A call takes the core mutex, submits, and
//! waits for its reply, which the driver releases once its records are durable; a handle
//! serves one term at a time, begun and ended by the process (a replica: by its leadership).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use shardwise_core::dispatch::{Call, Dispatcher, Driver, Submitted};
use tokio::sync::{Notify, oneshot};

use super::compaction::COMPACT_AT_BYTES;
use super::lease::LeaseClock;
use super::syncer::{Sink, sync};
use super::term::{Core, Inner, TermEnded, journal_broken};
use super::timers::timers;
use super::writer::JournalWriter;
use super::{Startup, StartupError, Stats, lock, now, write};
use crate::http::{Code, Problem};

/// The answer to calls while no term is served, unless [`DriverHandle::set_idle_reason`] said
/// more.
const NOT_SERVING: &str = "Dispatcher is not serving: it is replaying its journal, or it does not \
                           lead (GET /v1/leader says which replica does).";

/// What every term shares: the current one, and the counters.
struct Shared {
    term: std::sync::RwLock<Option<Arc<Inner>>>,
    /// Why no term is served now (the answer to calls meanwhile).
    idle: std::sync::RwLock<String>,
    incarnation: std::sync::RwLock<String>,
    /// Why the last term ended, when its journal could not be written.
    ended: std::sync::RwLock<Option<String>>,
    compact_at_bytes: u64,
}

/// A handle to the dispatcher (cheap to clone). It serves one term at a time: a single
/// dispatcher has one term for its whole life; a replica of a replicated dispatcher has one
/// per leadership, and none while it follows.
#[derive(Clone)]
pub struct DriverHandle {
    shared: Arc<Shared>,
    /// Counters.
    pub stats: Arc<Stats>,
}

impl std::fmt::Debug for DriverHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverHandle").field("ready", &self.is_ready()).finish_non_exhaustive()
    }
}

impl DriverHandle {
    /// A handle without a term: calls answer UNAVAILABLE until [`DriverHandle::begin_term`].
    pub fn idle(compact_at_bytes: u64) -> DriverHandle {
        let stats = Arc::new(Stats::default());
        let shared = Arc::new(Shared {
            term: std::sync::RwLock::new(None),
            idle: std::sync::RwLock::new(NOT_SERVING.to_owned()),
            incarnation: std::sync::RwLock::new(String::new()),
            ended: std::sync::RwLock::new(None),
            compact_at_bytes,
        });
        DriverHandle { shared, stats }
    }

    /// Runs `startup` (replay) on a thread of its own, after which the dispatcher is ready;
    /// `on_started` receives the startup's error, or `None` when ready. Needs a tokio runtime
    /// (for the timer task).
    pub fn spawn(
        startup: Startup,
        on_started: impl FnOnce(Option<StartupError>) + Send + 'static,
    ) -> DriverHandle {
        Self::spawn_with(startup, COMPACT_AT_BYTES, on_started)
    }

    /// Like [`DriverHandle::spawn`], compacting the journal whenever its current segment grows past
    /// `compact_at_bytes`.
    pub fn spawn_with(
        startup: Startup,
        compact_at_bytes: u64,
        on_started: impl FnOnce(Option<StartupError>) + Send + 'static,
    ) -> DriverHandle {
        let handle = DriverHandle::idle(compact_at_bytes);
        let runtime = tokio::runtime::Handle::current();
        let h = handle.clone();
        std::thread::Builder::new()
            .name("shardwise-replay".into())
            .spawn(move || match startup() {
                Err(e) => on_started(Some(e)),
                Ok((d, journal)) => {
                    let _guard = runtime.enter();
                    // A single dispatcher's one term ends only with a journal failure, after
                    // which it refuses every call until restarted.
                    drop(h.begin_term(d, journal));
                    on_started(None);
                }
            })
            .expect("spawn the replay thread");
        handle
    }

    /// Starts serving `dispatcher` with `journal` (none: in memory) as the current term; the
    /// returned [`TermEnded`] resolves when the term ends. Must run inside a tokio runtime (the
    /// term's timer task). A current term is ended first.
    pub fn begin_term(
        &self,
        dispatcher: Dispatcher,
        journal: Option<Box<dyn JournalWriter>>,
    ) -> TermEnded {
        self.begin_leased_term(dispatcher, journal, None)
    }

    /// [`DriverHandle::begin_term`] for a replica's leadership: every call is refused once
    /// `lease` has passed.
    pub fn begin_leased_term(
        &self,
        dispatcher: Dispatcher,
        journal: Option<Box<dyn JournalWriter>>,
        lease: Option<LeaseClock>,
    ) -> TermEnded {
        self.end_term();
        let (ended, ended_rx) = tokio::sync::watch::channel(false);
        let inner = Arc::new(Inner {
            core: Mutex::new(None),
            broken: AtomicBool::new(false),
            failure: Mutex::new(None),
            pipe: Arc::default(),
            timer: Notify::new(),
            next_deadline: AtomicU64::new(u64::MAX),
            stats: self.stats.clone(),
            compact_at_bytes: self.shared.compact_at_bytes,
            ended,
            lease,
        });
        *write(&self.shared.incarnation) = dispatcher.incarnation().to_owned();
        let sink = match journal {
            None => Sink::Memory,
            Some(journal) => {
                let syncer = inner.clone();
                std::thread::Builder::new()
                    .name("shardwise-journal".into())
                    .spawn(move || sync(&syncer, journal))
                    .expect("spawn the journal thread");
                Sink::Syncer(inner.pipe.clone())
            }
        };
        // (A fresh dispatcher's start record goes with the first call's records.)
        let driver = Driver::new(dispatcher, sink);
        *lock(&inner.core) = Some(Core { driver, waiters: HashMap::new() });
        tokio::spawn(timers(inner.clone()));
        *write(&self.shared.term) = Some(inner);
        TermEnded(ended_rx)
    }

    /// Ends the current term, if any: every call waiting for its reply is answered
    /// UNAVAILABLE (none of them is acknowledged), and so is every later call until the next
    /// term begins. The term's journal is dropped once its syncer notices.
    pub fn end_term(&self) {
        let Some(inner) = write(&self.shared.term).take() else { return };
        let failure =
            inner.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        *write(&self.shared.ended) = failure;
        inner.end();
        // Dropping the driver drops the senders of every waiter; the syncer and the timer
        // task find no core and stop.
        let core = lock(&inner.core).take();
        drop(core);
        // (Under the queue's lock: the syncer checks the flag under it before it waits.)
        let queue = lock(&inner.pipe.queue);
        inner.pipe.queued.notify_one();
        drop(queue);
        inner.timer.notify_one();
    }

    /// Why the last term ended, when it ended because its journal could not be written (the
    /// cause); `None` otherwise.
    pub fn last_term_failure(&self) -> Option<String> {
        self.shared.ended.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Says why no term is served (e.g. which replica leads): the answer to every call until
    /// the next term.
    pub fn set_idle_reason(&self, why: impl Into<String>) {
        *write(&self.shared.idle) = why.into();
    }

    fn current(&self) -> Option<Arc<Inner>> {
        self.shared.term.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The dispatcher's incarnation id (empty until a term began).
    pub fn incarnation(&self) -> String {
        self.shared.incarnation.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Why no term is served now, for `/readyz`: the journal could not be written (with the
    /// cause, e.g. no space left), the lease lapsed, or why the replica is idle (replaying
    /// its journal, following).
    pub fn unready_reason(&self) -> String {
        let Some(inner) = self.current() else {
            return self
                .shared
                .idle
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
        };
        let failure =
            inner.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        match failure {
            Some(cause) if cause.contains(crate::etcd::SPACE_EXCEEDED_REMEDY) => {
                format!("the journal could not be written ({cause})")
            }
            Some(cause) => format!(
                "the journal could not be written ({cause}); the dispatcher stopped accepting \
                 changes and acknowledges nothing more until it is restarted (free the disk, \
                 then restart: a restart replays the journal)"
            ),
            None if inner.broken.load(Ordering::SeqCst) => {
                "the dispatcher's term ended (it stopped leading); it accepts no changes".into()
            }
            None if !inner.holds() => "this replica could not renew its leadership in time; \
                                       another one may lead now"
                .into(),
            None => "ready".into(),
        }
    }

    /// Whether a leased term is on but its lease lapsed (e.g. the process was paused past
    /// it): the replica is stepping down.
    pub fn lease_lapsed(&self) -> bool {
        self.current().is_some_and(|t| !t.broken.load(Ordering::SeqCst) && !t.holds())
    }

    /// Whether a term is being served (replay finished, the journal writable).
    pub fn is_ready(&self) -> bool {
        self.current().is_some_and(|t| !t.broken.load(Ordering::SeqCst) && t.holds())
    }

    /// Submits `request` to the dispatcher; resolves with its reply, which the core releases
    /// once its journal records (and every record before them) are durable.
    pub async fn call<C: Call>(&self, request: C) -> Result<C::Output, Problem> {
        let Some(inner) = self.current() else {
            let why = self.shared.idle.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            return Err(Problem::new(Code::Unavailable, why.as_str()));
        };
        if inner.broken.load(Ordering::SeqCst) {
            return Err(inner.broken_problem());
        }
        if !inner.holds() {
            return Err(Problem::new(
                Code::Unavailable,
                "This dispatcher replica could not renew its leadership in time (another one \
                 may lead now); retry shortly.",
            ));
        }
        let submitted = {
            let mut guard = inner.core.lock().map_err(|_| {
                inner.end();
                Problem::new(
                    Code::Unavailable,
                    "the dispatcher stopped after an internal error; restart it (a restart \
                     replays the journal)",
                )
            })?;
            // (Checked under the lock: a term that ended takes its core out under it.)
            let core = guard.as_mut().ok_or_else(journal_broken)?;
            let submitted = match core.driver.submit(now(), request) {
                Submitted::Ready(reply) => Ok(reply),
                Submitted::Pending(ticket) => {
                    let (tx, rx) = oneshot::channel();
                    core.waiters.insert(ticket, tx);
                    Err(rx)
                }
            };
            core.after(&inner);
            submitted
        };
        inner.stats.requests.fetch_add(1, Ordering::Relaxed);
        let reply = match submitted {
            Ok(reply) => reply,
            Err(rx) => rx.await.map_err(|_| inner.broken_problem())?,
        };
        C::output(reply).map_err(|e| Problem::from(&e))
    }
}

impl DriverHandle {
    /// For tests and diagnostics: reads the dispatcher as it is now, records not yet durable
    /// included (this bypasses the durability barrier; replies never come from here).
    pub fn inspect<R>(&self, f: impl FnOnce(&Dispatcher) -> R) -> Result<R, Problem> {
        let inner = self.current().ok_or_else(|| Problem::new(Code::Unavailable, "not serving"))?;
        let guard = inner.core.lock().map_err(|_| Problem::new(Code::Unavailable, "stopped"))?;
        let core = guard.as_ref().ok_or_else(|| Problem::new(Code::Unavailable, "not started"))?;
        Ok(f(core.driver.dispatcher()))
    }
}
