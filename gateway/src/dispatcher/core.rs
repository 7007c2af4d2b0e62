//! The driver handle: the dispatcher core and its journal; calls run inline, durability is
//! pipelined.
//!
//! The core's [`Driver`] sits behind one mutex. A request handler takes it, submits its
//! request (the state machine decides in microseconds), and lets go. The driver hands the
//! request's journal records to this module's sink, which queues them for the syncer thread
//! and answers [`Durability::Later`]; the reply then waits inside the driver, and the handler
//! waits on a oneshot channel for it. The syncer takes everything queued while the previous
//! commit was on disk as one batch: one fsync for many requests (group commit), and the state
//! machine never waits for the disk. When the batch is durable the syncer reports it to the
//! driver ([`Driver::handle_persisted`]), which releases the replies that waited for it; the
//! syncer hands each to its handler. Without a journal the sink answers [`Durability::Now`]
//! and the reply comes back from the submit itself: no thread hand-off, no wake-up.
//!
//! Ordering: records are queued under the core mutex, so the journal holds them in the order
//! they were applied. The core stamps every reply, reads included, with the last batch emitted
//! before it, so no reply reveals state that a crash could lose.
//!
//! Failure: if the journal cannot be written, no request waiting on that batch or any later
//! one is acknowledged, every later call is `UNAVAILABLE`, and a restart replays the journal.
//! A panic inside the state machine (a bug) poisons the mutex: the dispatcher then refuses
//! every call rather than serve a half-applied change.
//!
//! Compaction: when the current segment grows past `--compact-at-bytes`, the syncer takes the
//! core mutex only to copy the state (the snapshot) and the records queued so far; a thread of
//! its own encodes, writes and fsyncs the snapshot while the syncer goes on committing, and
//! the syncer then finishes the compaction (the records committed meanwhile follow the
//! snapshot in its segment). Requests wait for the copy, never for the disk.
//!
//! Timers: a task sleeps until the state machine's `poll_timeout` (woken early when a call
//! brings the deadline forward) and runs `handle_timeout` the same way a call runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shardwise_core::dispatch::{
    Call, Dispatcher, Driver, Durability, Event, JOURNAL_BROKEN, JournalSink, Millis, Reply, Seq,
    Submitted, Ticket, Update,
};
use shardwise_journal::{Compaction, Journal, Staged, Storage};
use tokio::sync::{Notify, oneshot};

use crate::http::{Code, Problem};

/// A compaction's written snapshot, as the journal that wrote it knows it (a work-dir
/// journal's staged segment, or the etcd journal's written chunks): [`SnapshotWriter::write`]
/// makes it, the same journal's [`JournalWriter::finish_compaction`] takes it back.
pub type StagedSnapshot = Box<dyn std::any::Any + Send>;

/// Wall-clock milliseconds (journaled times must compare across restarts).
pub fn now() -> Millis {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    Millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// Counters the metrics endpoint reports.
#[derive(Debug, Default)]
pub struct Stats {
    /// Journal commits (fsync groups).
    pub commits: AtomicU64,
    /// Records written.
    pub records: AtomicU64,
    /// Commit durations.
    pub commit_latency: crate::http::metrics::Histogram,
    /// Requests handled.
    pub requests: AtomicU64,
    /// Bytes in the journal's current segment after the last commit (0 in memory mode).
    pub segment_bytes: AtomicU64,
    /// When the last compaction finished, in wall-clock milliseconds (0: none yet).
    pub last_compaction_ms: AtomicU64,
    /// How long the last commit took, in microseconds.
    pub last_commit_micros: AtomicU64,
}

/// How the dispatcher starts: built now, or recovered from a journal.
pub type Startup =
    Box<dyn FnOnce() -> Result<(Dispatcher, Option<Box<dyn JournalWriter>>), StartupError> + Send>;

/// Why the dispatcher could not be built or recovered at startup.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartupError {
    /// The journal cannot be replayed.
    #[error(transparent)]
    Journal(#[from] shardwise_journal::OpenError),
    /// The state machine refused its configuration or the replayed records.
    #[error(transparent)]
    Dispatch(#[from] shardwise_core::DispatchError),
}

/// Why the journal stopped: after it, nothing more is acknowledged until a restart.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalFailure {
    /// The syncer's queue is full: the disk cannot keep up.
    #[error("{QUEUE_MAX_RECORDS} journal records wait for the disk")]
    Behind,
    /// A write, fsync or compaction step failed.
    #[error("{what}: {source}")]
    Storage {
        /// The step that failed.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
}

/// The journal as the syncer uses it (object-safe over the storage type).
pub trait JournalWriter: Send {
    /// Appends records.
    fn append(&mut self, updates: &[Update]) -> std::io::Result<()>;
    /// Makes them durable.
    fn commit(&mut self) -> std::io::Result<()>;
    /// Bytes in the current segment.
    fn segment_bytes(&self) -> u64;
    /// Begins a compaction whose snapshot covers exactly the records appended so far; the
    /// returned writer writes the snapshot on another thread while appends and commits go on.
    fn begin_compaction(&mut self) -> std::io::Result<Box<dyn SnapshotWriter>>;
    /// Finishes the compaction with its written snapshot: the records appended since it
    /// began follow the snapshot in the new segment, older segments are deleted.
    fn finish_compaction(&mut self, staged: StagedSnapshot) -> std::io::Result<()>;
}

/// Writes a compaction's snapshot (encodes it, writes it and makes it durable) off the
/// syncer, beside the journal's appends.
pub trait SnapshotWriter: Send {
    /// Writes `snapshot`.
    fn write(self: Box<Self>, snapshot: &Update) -> std::io::Result<StagedSnapshot>;
}

impl SnapshotWriter for Compaction {
    fn write(self: Box<Self>, snapshot: &Update) -> std::io::Result<StagedSnapshot> {
        Ok(Box::new(Compaction::write(*self, snapshot)?))
    }
}

impl<S: Storage> JournalWriter for Journal<S> {
    fn append(&mut self, updates: &[Update]) -> std::io::Result<()> {
        Journal::append(self, updates)
    }
    fn commit(&mut self) -> std::io::Result<()> {
        Journal::commit(self)
    }
    fn segment_bytes(&self) -> u64 {
        Journal::segment_bytes(self)
    }
    fn begin_compaction(&mut self) -> std::io::Result<Box<dyn SnapshotWriter>> {
        Ok(Box::new(Journal::begin_compaction(self)?))
    }
    fn finish_compaction(&mut self, staged: StagedSnapshot) -> std::io::Result<()> {
        let staged = staged
            .downcast::<Staged>()
            .map_err(|_| std::io::Error::other("a snapshot written for another journal (a bug)"))?;
        Journal::finish_compaction(self, *staged)
    }
}

/// The answer to calls while no term is served, unless [`DriverHandle::set_idle_reason`] said
/// more.
const NOT_SERVING: &str = "Dispatcher is not serving: it is replaying its journal, or it does not \
                           lead (GET /v1/leader says which replica does).";

/// Compact when the current segment grows past this (the default of `--compact-at-bytes`).
pub const COMPACT_AT_BYTES: u64 = 64 << 20;
/// Records waiting for the syncer beyond which calls are refused (the disk cannot keep up).
const QUEUE_MAX_RECORDS: usize = 1 << 20;

/// Records on their way to the syncer.
#[derive(Default)]
struct Queue {
    records: Vec<Update>,
    /// The batch the last of `records` belongs to.
    last: Seq,
    /// A compaction's snapshot, written (or not) by the compaction thread.
    staged: Option<std::io::Result<StagedSnapshot>>,
}

/// The syncer's queue and its wake-up.
#[derive(Default)]
struct Pipe {
    queue: Mutex<Queue>,
    queued: Condvar,
}

/// The driver's sink: nothing (in-memory mode, durable at once) or the syncer's queue.
enum Sink {
    Memory,
    Syncer(Arc<Pipe>),
}

impl JournalSink for Sink {
    type Error = JournalFailure;
    fn persist(
        &mut self,
        seq: Seq,
        mut records: Vec<Update>,
    ) -> Result<Durability, JournalFailure> {
        let Sink::Syncer(inner) = self else { return Ok(Durability::Now) };
        let mut q = lock(&inner.queue);
        if q.records.len() > QUEUE_MAX_RECORDS {
            // The state already changed: the disk cannot keep up, and acknowledging nothing
            // more is the only safe answer.
            return Err(JournalFailure::Behind);
        }
        q.records.append(&mut records);
        q.last = seq;
        inner.queued.notify_one();
        Ok(Durability::Later)
    }
}

/// What the core mutex guards: the driver, and the handlers waiting for their replies.
struct Core {
    driver: Driver<Sink>,
    waiters: HashMap<Ticket, oneshot::Sender<Reply>>,
}

impl Core {
    /// Logs the driver's events; stops everything if its sink failed.
    fn after(&mut self, inner: &Inner) {
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
    fn deliver(&mut self, released: Vec<(Ticket, Reply)>) {
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
struct Inner {
    core: Mutex<Option<Core>>,
    broken: AtomicBool,
    /// Why the journal could not be written, once it could not (for `/readyz`).
    failure: Mutex<Option<String>>,
    pipe: Arc<Pipe>,
    /// Wakes the timer task when a call brings the next deadline forward.
    timer: Notify,
    next_deadline: AtomicU64,
    stats: Arc<Stats>,
    /// Compact when the current segment grows past this many bytes.
    compact_at_bytes: u64,
    /// Turns true when the term ends.
    ended: tokio::sync::watch::Sender<bool>,
    /// A replica's lease: calls are refused once it has passed.
    lease: Option<LeaseClock>,
}

impl Inner {
    /// Whether the term's lease (if it has one) still holds.
    fn holds(&self) -> bool {
        self.lease.as_ref().is_none_or(LeaseClock::holds)
    }

    /// Marks the term ended: nothing more is acknowledged.
    fn end(&self) {
        self.broken.store(true, Ordering::SeqCst);
        self.ended.send_replace(true);
    }
}

/// What every term shares: the current one, and the counters.
struct Shared {
    term: std::sync::RwLock<Option<Arc<Inner>>>,
    /// Why no term is served now (the answer to calls meanwhile).
    idle: std::sync::RwLock<String>,
    incarnation: std::sync::RwLock<String>,
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

/// Until when a term's leadership is known to hold, on this process's monotonic clock: a
/// replica extends it with every renewal of its etcd lease. Calls are refused once it has
/// passed, so a leader that was paused past its lease (and may have been replaced) serves
/// nothing, not even a read, before it notices and steps down.
#[derive(Debug, Clone)]
pub struct LeaseClock {
    base: std::time::Instant,
    until_ms: Arc<AtomicU64>,
}

impl LeaseClock {
    /// A clock that holds until `until`.
    pub fn until(until: std::time::Instant) -> LeaseClock {
        let base = std::time::Instant::now();
        let clock = LeaseClock { base, until_ms: Arc::new(AtomicU64::new(0)) };
        clock.extend_to(until);
        clock
    }

    /// Holds until `until` (if that is later than now).
    pub fn extend_to(&self, until: std::time::Instant) {
        let ms = u64::try_from(until.saturating_duration_since(self.base).as_millis())
            .unwrap_or(u64::MAX);
        self.until_ms.fetch_max(ms, Ordering::SeqCst);
    }

    /// Whether it holds now.
    pub fn holds(&self) -> bool {
        let now = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        now < self.until_ms.load(Ordering::SeqCst)
    }
}

/// Ends when its term ends ([`DriverHandle::begin_term`]).
#[derive(Debug)]
pub struct TermEnded(tokio::sync::watch::Receiver<bool>);

impl TermEnded {
    /// Waits for the term to end.
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|ended| *ended).await;
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

fn write<T>(m: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Inner {
    /// Why a term that ended refuses calls: etcd at its space quota says so and its remedy
    /// (no restart is needed), anything else that the journal could not be written.
    fn broken_problem(&self) -> Problem {
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

fn journal_broken() -> Problem {
    Problem::new(Code::Unavailable, JOURNAL_BROKEN)
}

/// The syncer: writes and commits whatever is queued, one batch per commit, then releases the
/// replies that waited for it. Compaction runs beside it (see [`begin_compaction`]): the
/// syncer only starts one and finishes it when its snapshot is written.
fn sync(inner: &Inner, mut journal: Box<dyn JournalWriter>) {
    let stats = &inner.stats;
    let mut batch = Vec::new();
    let mut compacting = false;
    loop {
        let (last, staged) = {
            let mut q = lock(&inner.pipe.queue);
            while q.records.is_empty() && q.staged.is_none() {
                if inner.broken.load(Ordering::SeqCst) {
                    return;
                }
                q = inner.pipe.queued.wait(q).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if inner.broken.load(Ordering::SeqCst) {
                // The term ended: what is queued was never acknowledged and goes nowhere.
                return;
            }
            std::mem::swap(&mut batch, &mut q.records);
            (q.last, q.staged.take())
        };
        let committed = !batch.is_empty();
        if committed {
            let started = std::time::Instant::now();
            let r = journal.append(&batch).and_then(|()| journal.commit());
            stats.commits.fetch_add(1, Ordering::Relaxed);
            stats.records.fetch_add(batch.len() as u64, Ordering::Relaxed);
            stats.commit_latency.observe(started.elapsed());
            stats.last_commit_micros.store(
                u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            stats.segment_bytes.store(journal.segment_bytes(), Ordering::Relaxed);
            batch.clear();
            if let Err(e) = r {
                fail(inner, e, "journal write failed");
                return;
            }
            if !persisted(inner, last) {
                return;
            }
        }
        if let Some(staged) = staged {
            compacting = false;
            let started = std::time::Instant::now();
            if let Err(e) = staged.and_then(|s| journal.finish_compaction(s)) {
                fail(inner, e, "journal compaction failed");
                return;
            }
            let finish_us = started.elapsed().as_micros();
            tracing::info!(finish_us, "journal compacted");
            stats.last_compaction_ms.store(now().0, Ordering::Relaxed);
            stats.segment_bytes.store(journal.segment_bytes(), Ordering::Relaxed);
        }
        // After a commit only, as before: a snapshot bigger than the threshold does not
        // start the next compaction by itself.
        if committed && !compacting && journal.segment_bytes() > inner.compact_at_bytes {
            match begin_compaction(inner, journal.as_mut()) {
                Ok(true) => compacting = true,
                Ok(false) => return,
                Err(e) => {
                    fail(inner, e, "journal compaction failed");
                    return;
                }
            }
        }
    }
}

/// Reports batches up to `seq` durable and hands out the replies they release; false when the
/// core is gone (a panic poisoned it).
fn persisted(inner: &Inner, seq: Seq) -> bool {
    let Ok(mut guard) = inner.core.lock() else { return false };
    let Some(core) = guard.as_mut() else { return false };
    let released = core.driver.handle_persisted(seq);
    core.deliver(released);
    true
}

fn fail(inner: &Inner, e: std::io::Error, what: &'static str) {
    let cause = if e.kind() == std::io::ErrorKind::StorageFull {
        format!("{what}: {e}: no space left on the disk")
    } else {
        format!("{what}: {e}")
    };
    tracing::error!(error = %e, "{what}; refusing further requests (the dispatcher stopped accepting changes)");
    *inner.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(cause);
    inner.end();
    if let Some(core) = lock(&inner.core).as_mut() {
        core.driver.handle_sink_failure(JournalFailure::Storage { what, source: e });
        // Dropping the senders answers every waiter: none of them is acknowledged.
        core.waiters.clear();
    }
}

/// Begins a compaction. Under the core mutex, only the capture: a copy of the state and the
/// records queued so far, which the snapshot covers exactly (records are queued under the
/// same mutex, in the order they were applied). Then, with the mutex released, the syncer
/// writes and commits those records (their replies are released as usual) and begins the
/// journal's compaction; a thread of its own encodes, writes and fsyncs the snapshot while
/// the syncer goes on committing later records, and hands the written snapshot back through
/// the queue, where [`sync`] finishes the compaction. False when the core is gone.
fn begin_compaction(inner: &Inner, journal: &mut dyn JournalWriter) -> std::io::Result<bool> {
    let started = std::time::Instant::now();
    let (snapshot, rest, last) = {
        let Ok(guard) = inner.core.lock() else { return Ok(false) };
        let Some(core) = guard.as_ref() else { return Ok(false) };
        let snapshot = core.driver.dispatcher().snapshot();
        let mut q = lock(&inner.pipe.queue);
        (snapshot, std::mem::take(&mut q.records), q.last)
    };
    let capture_us = started.elapsed().as_micros();
    if !rest.is_empty() {
        journal.append(&rest)?;
        journal.commit()?;
        if !persisted(inner, last) {
            return Ok(false);
        }
    }
    let writer = journal.begin_compaction()?;
    let pipe = inner.pipe.clone();
    std::thread::Builder::new().name("shardwise-compact".into()).spawn(move || {
        let started = std::time::Instant::now();
        let r = writer.write(&snapshot);
        let write_ms = started.elapsed().as_millis();
        drop(snapshot);
        tracing::info!(capture_us, write_ms, "journal snapshot written");
        let mut q = lock(&pipe.queue);
        q.staged = Some(r);
        pipe.queued.notify_one();
    })?;
    Ok(true)
}

/// Runs the state machine's timers.
async fn timers(inner: Arc<Inner>) {
    loop {
        let deadline = {
            let guard = lock(&inner.core);
            let Some(core) = guard.as_ref() else { return };
            core.driver.poll_timeout().0
        };
        inner.next_deadline.store(deadline, Ordering::Relaxed);
        let wait = Duration::from_millis(deadline.saturating_sub(now().0));
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = inner.timer.notified() => continue,
        }
        if inner.broken.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut guard) = inner.core.lock() else { return };
        let Some(core) = guard.as_mut() else { return };
        let t = now();
        if t >= core.driver.poll_timeout() {
            core.driver.handle_timeout(t);
        }
        core.after(&inner);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use shardwise_core::dispatch::wire::WorkerHeartbeat;
    use shardwise_core::dispatch::{DispatcherConfig, ListWorkers};

    use super::*;

    /// A journal whose commits fail from the `fail_from`-th on, counting what it was given.
    /// A journal whose commit fails from the first batch that registers the worker at
    /// `poison` on (the dispatcher's start record may be committed alone or with the first
    /// request, depending on when the syncer wakes: the failure is tied to a record, not to a
    /// commit count).
    struct Flaky {
        commits: Arc<AtomicUsize>,
        records: Arc<AtomicUsize>,
        poison: &'static str,
        poisoned: bool,
    }

    impl JournalWriter for Flaky {
        fn append(&mut self, updates: &[Update]) -> std::io::Result<()> {
            self.records.fetch_add(updates.len(), Ordering::SeqCst);
            self.poisoned |= updates.iter().any(
                |u| matches!(u, Update::RegisterWorker { address, .. } if address == self.poison),
            );
            Ok(())
        }
        fn commit(&mut self) -> std::io::Result<()> {
            self.commits.fetch_add(1, Ordering::SeqCst);
            if self.poisoned {
                Err(std::io::Error::other("injected fsync failure"))
            } else {
                Ok(())
            }
        }
        fn segment_bytes(&self) -> u64 {
            0
        }
        fn begin_compaction(&mut self) -> std::io::Result<Box<dyn SnapshotWriter>> {
            Err(std::io::Error::other("never compacts"))
        }
        fn finish_compaction(&mut self, _: StagedSnapshot) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A journal in an etcd at its space quota: every commit is refused, as the replica's
    /// journal words it.
    struct QuotaFull;

    impl JournalWriter for QuotaFull {
        fn append(&mut self, _: &[Update]) -> std::io::Result<()> {
            Ok(())
        }
        fn commit(&mut self) -> std::io::Result<()> {
            Err(std::io::Error::other(format!(
                "etcd: etcd refused the request (ResourceExhausted): etcdserver: mvcc: database \
                 space exceeded; {}",
                crate::etcd::SPACE_EXCEEDED_REMEDY
            )))
        }
        fn segment_bytes(&self) -> u64 {
            0
        }
        fn begin_compaction(&mut self) -> std::io::Result<Box<dyn SnapshotWriter>> {
            Err(std::io::Error::other("never compacts"))
        }
        fn finish_compaction(&mut self, _: StagedSnapshot) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Issue 22: a journal write refused at etcd's space quota tells callers and `/readyz` the
    /// cause and the remedy (compact, defragment, `etcdctl alarm disarm`), not to restart.
    #[tokio::test]
    async fn etcd_at_its_quota_names_the_remedy_not_a_restart() {
        let actor = started(Some(Box::new(QuotaFull))).await;
        for _ in 0..2 {
            let p = actor.call(heartbeat("w1:1")).await.expect_err("not acknowledged");
            assert_eq!(p.code, "UNAVAILABLE");
            assert!(p.detail.contains("database space exceeded"), "{}", p.detail);
            assert!(p.detail.contains("etcdctl alarm disarm"), "{}", p.detail);
            assert!(!p.detail.contains("until it is restarted"), "{}", p.detail);
        }
        let why = actor.unready_reason();
        assert!(why.contains("etcdctl alarm disarm"), "{why}");
        assert!(!why.contains("then restart"), "{why}");
    }

    fn heartbeat(address: &str) -> WorkerHeartbeat {
        serde_json::from_value(serde_json::json!({"worker_address": address, "current_tasks": []}))
            .expect("heartbeat")
    }

    async fn started(journal: Option<Box<dyn JournalWriter>>) -> DriverHandle {
        let config = DispatcherConfig { fault_tolerant: journal.is_some(), ..Default::default() };
        let d = Dispatcher::new(config, "test".into(), now()).expect("dispatcher");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let actor = DriverHandle::spawn(Box::new(move || Ok((d, journal))), move |e| {
            let _ = tx.send(e);
        });
        assert!(rx.await.expect("started").is_none());
        actor
    }

    #[tokio::test]
    async fn replies_wait_for_their_records_and_a_failed_commit_acknowledges_nothing() {
        let commits = Arc::new(AtomicUsize::new(0));
        let records = Arc::new(AtomicUsize::new(0));
        let journal = Flaky {
            commits: commits.clone(),
            records: records.clone(),
            poison: "w2:1",
            poisoned: false,
        };
        let actor = started(Some(Box::new(journal))).await;
        // The first registration is committed before its reply.
        let r = actor.call(heartbeat("w1:1")).await;
        r.expect("acknowledged");
        // (The dispatcher's `Started` record and the registration.)
        assert_eq!(records.load(Ordering::SeqCst), 2);
        assert!(commits.load(Ordering::SeqCst) >= 1);
        // The commit of the next registration fails: it is not acknowledged...
        let r = actor.call(heartbeat("w2:1")).await;
        let p = r.expect_err("not acknowledged");
        assert_eq!(p.code, "UNAVAILABLE");
        assert!(p.detail.contains("journal"), "{}", p.detail);
        // ...and nothing after it, even a read.
        let r = actor.call(ListWorkers).await;
        assert_eq!(r.expect_err("refused").code, "UNAVAILABLE");
    }

    /// A journal whose segment grows 1,000 bytes per record and is emptied by compaction.
    struct Growing {
        bytes: u64,
        compactions: Arc<AtomicUsize>,
    }

    impl JournalWriter for Growing {
        fn append(&mut self, updates: &[Update]) -> std::io::Result<()> {
            self.bytes += 1_000 * updates.len() as u64;
            Ok(())
        }
        fn commit(&mut self) -> std::io::Result<()> {
            Ok(())
        }
        fn segment_bytes(&self) -> u64 {
            self.bytes
        }
        fn begin_compaction(&mut self) -> std::io::Result<Box<dyn SnapshotWriter>> {
            self.compactions.fetch_add(1, Ordering::SeqCst);
            Ok(Box::new(Gate::default()))
        }
        fn finish_compaction(&mut self, _: StagedSnapshot) -> std::io::Result<()> {
            self.bytes = 0;
            Ok(())
        }
    }

    /// A snapshot writer that waits until its gate opens, then reports how many workers the
    /// snapshot held.
    #[derive(Clone, Default)]
    struct Gate {
        open: Arc<(Mutex<bool>, Condvar)>,
        workers: Arc<Mutex<Option<usize>>>,
    }

    impl Gate {
        fn open(&self) {
            *self.open.0.lock().unwrap() = true;
            self.open.1.notify_all();
        }
    }

    impl SnapshotWriter for Gate {
        fn write(self: Box<Self>, snapshot: &Update) -> std::io::Result<StagedSnapshot> {
            let mut open = self.open.0.lock().unwrap();
            while !*open {
                open = self.open.1.wait(open).unwrap();
            }
            let Update::Snapshot { state } = snapshot else { panic!("not a snapshot") };
            *self.workers.lock().unwrap() = Some(state.workers().len());
            Ok(Box::new(()))
        }
    }

    /// A journal counting registrations, whose compaction waits for a [`Gate`].
    struct Gated {
        bytes: u64,
        registrations: Arc<AtomicUsize>,
        /// Registrations appended when the compaction began.
        at_begin: Arc<Mutex<Option<usize>>>,
        finished: Arc<AtomicUsize>,
        gate: Gate,
    }

    impl JournalWriter for Gated {
        fn append(&mut self, updates: &[Update]) -> std::io::Result<()> {
            self.bytes += 1_000 * updates.len() as u64;
            let n = updates.iter().filter(|u| matches!(u, Update::RegisterWorker { .. })).count();
            self.registrations.fetch_add(n, Ordering::SeqCst);
            Ok(())
        }
        fn commit(&mut self) -> std::io::Result<()> {
            Ok(())
        }
        fn segment_bytes(&self) -> u64 {
            self.bytes
        }
        fn begin_compaction(&mut self) -> std::io::Result<Box<dyn SnapshotWriter>> {
            *self.at_begin.lock().unwrap() = Some(self.registrations.load(Ordering::SeqCst));
            Ok(Box::new(self.gate.clone()))
        }
        fn finish_compaction(&mut self, _: StagedSnapshot) -> std::io::Result<()> {
            self.bytes = 0;
            self.finished.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    /// Issue 12, point 6: while a snapshot is being written, requests are applied and made
    /// durable and their replies go out; the snapshot covers exactly the records written
    /// before the compaction began, and the compaction finishes once it is written.
    #[tokio::test]
    async fn requests_are_acknowledged_while_a_snapshot_is_written() {
        let gate = Gate::default();
        let registrations = Arc::new(AtomicUsize::new(0));
        let at_begin = Arc::new(Mutex::new(None));
        let finished = Arc::new(AtomicUsize::new(0));
        let journal: Box<dyn JournalWriter> = Box::new(Gated {
            bytes: 0,
            registrations: registrations.clone(),
            at_begin: at_begin.clone(),
            finished: finished.clone(),
            gate: gate.clone(),
        });
        let config = DispatcherConfig { fault_tolerant: true, ..Default::default() };
        let d = Dispatcher::new(config, "test".into(), now()).expect("dispatcher");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let actor = DriverHandle::spawn_with(Box::new(move || Ok((d, Some(journal)))), 1_500, {
            move |e| {
                let _ = tx.send(e);
            }
        });
        assert!(rx.await.expect("started").is_none());
        // The first commit crosses the threshold: the compaction begins, and its snapshot
        // write waits for the gate.
        actor.call(heartbeat("w0:1")).await.expect("acknowledged");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while at_begin.lock().unwrap().is_none() {
            assert!(std::time::Instant::now() < deadline, "the compaction never began");
            tokio::task::yield_now().await;
        }
        // Registrations are acknowledged (committed) while the snapshot is being written.
        for i in 1..50 {
            let a = format!("w{i}:1");
            let call = actor.call(heartbeat(&a));
            tokio::time::timeout(Duration::from_secs(10), call)
                .await
                .expect("a call waited for the snapshot")
                .expect("acknowledged");
        }
        assert_eq!(registrations.load(Ordering::SeqCst), 50);
        assert_eq!(finished.load(Ordering::SeqCst), 0, "the snapshot is still being written");
        gate.open();
        while finished.load(Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "the compaction never finished");
            tokio::task::yield_now().await;
        }
        let covered = *gate.workers.lock().unwrap();
        assert_eq!(covered, *at_begin.lock().unwrap(), "the snapshot covers what was written");
        assert_eq!(actor.call(ListWorkers).await.expect("read").workers.len(), 50);
    }

    #[tokio::test]
    async fn the_journal_compacts_past_the_threshold_only() {
        for (threshold, want) in [(1_500, true), (COMPACT_AT_BYTES, false)] {
            let compactions = Arc::new(AtomicUsize::new(0));
            let journal: Box<dyn JournalWriter> =
                Box::new(Growing { bytes: 0, compactions: compactions.clone() });
            let config = DispatcherConfig { fault_tolerant: true, ..Default::default() };
            let d = Dispatcher::new(config, "test".into(), now()).expect("dispatcher");
            let (tx, rx) = tokio::sync::oneshot::channel();
            let actor =
                DriverHandle::spawn_with(Box::new(move || Ok((d, Some(journal)))), threshold, {
                    move |e| {
                        let _ = tx.send(e);
                    }
                });
            assert!(rx.await.expect("started").is_none());
            for i in 0..3 {
                let a = format!("w{i}:1");
                actor.call(heartbeat(&a)).await.expect("acknowledged");
            }
            // The syncer compacts right after the commit that crossed the threshold, before
            // it takes the next batch: one more acknowledged call has seen it happen.
            let _ = actor.call(heartbeat("w9:1")).await;
            let n = compactions.load(Ordering::SeqCst);
            assert_eq!(n > 0, want, "threshold {threshold}: {n} compactions");
        }
    }

    /// A replica's leadership is a term: ending it answers the calls waiting for their records
    /// UNAVAILABLE (none is acknowledged) and every later call too, until the next term.
    #[tokio::test]
    async fn an_ended_term_acknowledges_nothing_and_the_next_one_serves() {
        /// A journal whose commits wait for a gate that never opens.
        struct Stuck(Gate);
        impl JournalWriter for Stuck {
            fn append(&mut self, _: &[Update]) -> std::io::Result<()> {
                Ok(())
            }
            fn commit(&mut self) -> std::io::Result<()> {
                let mut open = self.0.open.0.lock().unwrap();
                while !*open {
                    open = self.0.open.1.wait(open).unwrap();
                }
                Ok(())
            }
            fn segment_bytes(&self) -> u64 {
                0
            }
            fn begin_compaction(&mut self) -> std::io::Result<Box<dyn SnapshotWriter>> {
                Err(std::io::Error::other("never compacts"))
            }
            fn finish_compaction(&mut self, _: StagedSnapshot) -> std::io::Result<()> {
                Ok(())
            }
        }
        let handle = DriverHandle::idle(COMPACT_AT_BYTES);
        assert!(!handle.is_ready());
        let r = handle.call(ListWorkers).await;
        assert_eq!(r.expect_err("no term").code, "UNAVAILABLE");
        let config = DispatcherConfig { fault_tolerant: true, ..Default::default() };
        let d = Dispatcher::new(config.clone(), "inc".into(), now()).expect("dispatcher");
        let gate = Gate::default();
        let ended = handle.begin_term(d, Some(Box::new(Stuck(gate.clone()))));
        assert!(handle.is_ready());
        assert_eq!(handle.incarnation(), "inc");
        let h = handle.clone();
        let waiting = tokio::spawn(async move { h.call(heartbeat("w1:1")).await });
        // The call is submitted and waits for its commit, which never comes.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while handle.stats.requests.load(Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "the call was never submitted");
            tokio::task::yield_now().await;
        }
        handle.end_term();
        tokio::time::timeout(Duration::from_secs(10), ended.wait()).await.expect("ended");
        let r = waiting.await.expect("joined");
        assert_eq!(r.expect_err("never acknowledged").code, "UNAVAILABLE");
        assert!(!handle.is_ready());
        let r = handle.call(ListWorkers).await;
        assert_eq!(r.expect_err("between terms").code, "UNAVAILABLE");
        gate.open();
        // The next term (here in memory) serves again.
        let d = Dispatcher::new(config, "inc".into(), now()).expect("dispatcher");
        let _ended = handle.begin_term(d, None);
        handle.call(heartbeat("w2:1")).await.expect("served");
        assert_eq!(handle.call(ListWorkers).await.expect("read").workers.len(), 1);
    }

    #[tokio::test]
    async fn without_a_journal_calls_answer_at_once() {
        let actor = started(None).await;
        for i in 0..100 {
            let a = format!("w{i}:1");
            actor.call(heartbeat(&a)).await.expect("answered");
        }
        assert_eq!(actor.call(ListWorkers).await.expect("read").workers.len(), 100);
        assert_eq!(actor.stats.requests.load(Ordering::Relaxed), 101);
        assert_eq!(actor.stats.commits.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_panic_in_the_state_machine_stops_the_dispatcher() {
        /// A request whose conversion panics: it runs inside the driver, under the core lock,
        /// as a bug in the state machine would.
        struct Bug;
        impl From<Bug> for shardwise_core::dispatch::Request {
            fn from(_: Bug) -> Self {
                panic!("a bug")
            }
        }
        impl Call for Bug {
            type Output = ();
            fn from_response(_: shardwise_core::dispatch::Response) -> Option<()> {
                None
            }
        }
        let actor = started(None).await;
        let a = actor.clone();
        let joined = tokio::spawn(async move { a.call(Bug).await }).await;
        assert!(joined.is_err(), "the panic propagates to the caller's task");
        let r = actor.call(ListWorkers).await;
        assert_eq!(r.expect_err("refused").code, "UNAVAILABLE");
    }
}
