//! The dispatcher core and its journal: calls run inline, durability is pipelined.
//!
//! The core [`Dispatcher`] sits behind one mutex. A request handler takes it, runs its
//! closure against the state machine (microseconds), moves the journal records the closure
//! produced onto the syncer's queue, and lets go. Without a journal the reply is sent at once:
//! no thread hand-off, no wake-up. With a journal the handler then waits until the syncer
//! thread reports its records written (and, in fault-tolerant mode, fsynced). The syncer takes
//! everything queued while the previous commit was on disk as one batch: one fsync for many
//! requests (group commit), and the state machine never waits for the disk.
//!
//! Ordering: records are queued under the core mutex, so the journal holds them in the order
//! they were applied. A call that only reads still waits for the records applied before it, so
//! no reply reveals state that a crash could lose.
//!
//! Failure: if the journal cannot be written, no request waiting on that batch or any later
//! one is acknowledged, every later call is `UNAVAILABLE`, and a restart replays the journal.
//! A panic inside the state machine (a bug) poisons the mutex: the dispatcher then refuses
//! every call rather than serve a half-applied change.
//!
//! Timers: a task sleeps until the state machine's `poll_timeout` (woken early when a call
//! brings the deadline forward) and runs `handle_timeout` the same way a call runs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shardwise_core::dispatch::{Dispatcher, Event, Millis, Update};
use tokio::sync::{Notify, watch};

use crate::journal::{Journal, Storage};
use crate::problem::Problem;

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
    pub commit_latency: super::metrics::Histogram,
    /// Requests handled.
    pub requests: AtomicU64,
}

/// How the actor starts: a dispatcher built now, or one recovered from a journal.
pub type Startup =
    Box<dyn FnOnce() -> Result<(Dispatcher, Option<Box<dyn JournalSink>>), String> + Send>;

/// The journal as the syncer uses it (object-safe over the storage type).
pub trait JournalSink: Send {
    /// Appends records.
    fn append(&mut self, updates: &[Update]) -> std::io::Result<()>;
    /// Makes them durable.
    fn commit(&mut self) -> std::io::Result<()>;
    /// Bytes in the current segment.
    fn segment_bytes(&self) -> u64;
    /// Compacts with a snapshot.
    fn compact(&mut self, snapshot: &Update) -> std::io::Result<()>;
}

impl<S: Storage> JournalSink for Journal<S> {
    fn append(&mut self, updates: &[Update]) -> std::io::Result<()> {
        Journal::append(self, updates)
    }
    fn commit(&mut self) -> std::io::Result<()> {
        Journal::commit(self)
    }
    fn segment_bytes(&self) -> u64 {
        Journal::segment_bytes(self)
    }
    fn compact(&mut self, snapshot: &Update) -> std::io::Result<()> {
        Journal::compact(self, snapshot)
    }
}

/// Compact when the current segment grows past this (the default of `--compact-at-bytes`).
pub const COMPACT_AT_BYTES: u64 = 64 << 20;
/// Records waiting for the syncer beyond which calls are refused (the disk cannot keep up).
const QUEUE_MAX_RECORDS: usize = 1 << 20;

struct Core {
    d: Dispatcher,
    /// Sequence number of the last batch of records queued for the syncer.
    queued: u64,
}

#[derive(Default)]
struct Queue {
    records: Vec<Update>,
    /// Sequence number of the last records in `records`.
    last: u64,
}

struct Inner {
    core: Mutex<Option<Core>>,
    ready: AtomicBool,
    broken: AtomicBool,
    journaled: AtomicBool,
    incarnation: OnceLock<String>,
    queue: Mutex<Queue>,
    queued: Condvar,
    /// The last sequence number on disk.
    durable: watch::Sender<u64>,
    /// Wakes the timer task when a call brings the next deadline forward.
    timer: Notify,
    next_deadline: AtomicU64,
    stats: Arc<Stats>,
    /// Compact when the current segment grows past this many bytes.
    compact_at_bytes: u64,
}

/// A handle to the dispatcher (cheap to clone).
#[derive(Clone)]
pub struct Actor {
    inner: Arc<Inner>,
    /// Counters.
    pub stats: Arc<Stats>,
}

impl std::fmt::Debug for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Actor")
            .field("ready", &self.is_ready())
            .field("broken", &self.inner.broken.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Actor {
    /// Runs `startup` (replay) on a thread of its own, after which the dispatcher is ready;
    /// `on_started` receives the startup's error, or `None` when ready. Needs a tokio runtime
    /// (for the timer task).
    pub fn spawn(
        startup: Startup,
        on_started: impl FnOnce(Option<String>) + Send + 'static,
    ) -> Actor {
        Self::spawn_with(startup, COMPACT_AT_BYTES, on_started)
    }

    /// Like [`Actor::spawn`], compacting the journal whenever its current segment grows past
    /// `compact_at_bytes`.
    pub fn spawn_with(
        startup: Startup,
        compact_at_bytes: u64,
        on_started: impl FnOnce(Option<String>) + Send + 'static,
    ) -> Actor {
        let stats = Arc::new(Stats::default());
        let inner = Arc::new(Inner {
            core: Mutex::new(None),
            ready: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            journaled: AtomicBool::new(false),
            incarnation: OnceLock::new(),
            queue: Mutex::new(Queue::default()),
            queued: Condvar::new(),
            durable: watch::Sender::new(0),
            timer: Notify::new(),
            next_deadline: AtomicU64::new(u64::MAX),
            stats: stats.clone(),
            compact_at_bytes,
        });
        let actor = Actor { inner: inner.clone(), stats };
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("shardwise-replay".into())
            .spawn(move || match startup() {
                Err(e) => on_started(Some(e)),
                Ok((d, journal)) => {
                    let _ = inner.incarnation.set(d.incarnation().to_owned());
                    *lock(&inner.core) = Some(Core { d, queued: 0 });
                    if let Some(journal) = journal {
                        inner.journaled.store(true, Ordering::SeqCst);
                        let syncer = inner.clone();
                        std::thread::Builder::new()
                            .name("shardwise-journal".into())
                            .spawn(move || sync(&syncer, journal))
                            .expect("spawn the journal thread");
                    }
                    inner.ready.store(true, Ordering::SeqCst);
                    runtime.spawn(timers(inner));
                    on_started(None);
                }
            })
            .expect("spawn the replay thread");
        actor
    }

    /// The dispatcher's incarnation id (empty until replay finished).
    pub fn incarnation(&self) -> &str {
        self.inner.incarnation.get().map_or("", String::as_str)
    }

    /// Whether replay finished.
    pub fn is_ready(&self) -> bool {
        self.inner.ready.load(Ordering::SeqCst)
    }

    /// Runs `f` on the dispatcher; resolves once its journal records (and every record
    /// before them) are durable.
    pub async fn call<R, F>(&self, f: F) -> Result<R, Problem>
    where
        F: FnOnce(&mut Dispatcher, Millis) -> R + Send + 'static,
        R: Send + 'static,
    {
        let inner = &self.inner;
        if !self.is_ready() {
            return Err(Problem::new(
                "UNAVAILABLE",
                "Dispatcher has not started yet: it is replaying its journal.",
            ));
        }
        if inner.broken.load(Ordering::SeqCst) {
            return Err(journal_broken());
        }
        let (value, seq) = inner.apply(f)?;
        inner.stats.requests.fetch_add(1, Ordering::Relaxed);
        if inner.journaled.load(Ordering::Relaxed) && *inner.durable.borrow() < seq {
            let mut rx = inner.durable.subscribe();
            let broken = &inner.broken;
            let _ = rx.wait_for(|d| *d >= seq || broken.load(Ordering::SeqCst)).await;
            if *rx.borrow() < seq {
                return Err(journal_broken());
            }
        }
        Ok(value)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Inner {
    /// Runs `f` under the core mutex; returns its value and the sequence number the reply
    /// must wait for.
    fn apply<R>(&self, f: impl FnOnce(&mut Dispatcher, Millis) -> R) -> Result<(R, u64), Problem> {
        let mut guard = self.core.lock().map_err(|_| {
            Problem::new(
                "UNAVAILABLE",
                "the dispatcher stopped after an internal error; restart it (a restart \
                 replays the journal)",
            )
        })?;
        let core = guard.as_mut().ok_or_else(|| Problem::new("UNAVAILABLE", "not started"))?;
        let value = f(&mut core.d, now());
        let seq = self.drain(core)?;
        let deadline = core.d.poll_timeout().0;
        if deadline < self.next_deadline.load(Ordering::Relaxed) {
            self.next_deadline.store(deadline, Ordering::Relaxed);
            self.timer.notify_one();
        }
        Ok((value, seq))
    }

    /// Moves the core's journal records to the syncer and logs its events; returns the
    /// sequence number to wait for.
    fn drain(&self, core: &mut Core) -> Result<u64, Problem> {
        let journaled = self.journaled.load(Ordering::Relaxed);
        let mut records = Vec::new();
        while let Some(u) = core.d.poll_journal() {
            if journaled {
                records.push(u);
            }
        }
        while let Some(e) = core.d.poll_event() {
            match e {
                Event::WorkerLost { address } => tracing::warn!(%address, "worker lost"),
                Event::IterationFinished { iteration_id } => {
                    tracing::info!(%iteration_id, "iteration finished");
                }
                other => tracing::debug!(?other, "event"),
            }
        }
        if !records.is_empty() {
            let mut q = lock(&self.queue);
            if q.records.len() > QUEUE_MAX_RECORDS {
                // The state already changed: the disk cannot keep up, and acknowledging
                // nothing more is the only safe answer.
                self.broken.store(true, Ordering::SeqCst);
                drop(q);
                self.durable.send_modify(|_| {});
                return Err(journal_broken());
            }
            core.queued += 1;
            q.records.append(&mut records);
            q.last = core.queued;
            self.queued.notify_one();
        }
        Ok(core.queued)
    }
}

fn journal_broken() -> Problem {
    Problem::new(
        "UNAVAILABLE",
        "the journal could not be written; the dispatcher acknowledges nothing more until it is \
         restarted (restart replays the journal)",
    )
}

/// The syncer: writes and commits whatever is queued, one batch per commit.
fn sync(inner: &Inner, mut journal: Box<dyn JournalSink>) {
    let stats = &inner.stats;
    let mut batch = Vec::new();
    loop {
        let last = {
            let mut q = lock(&inner.queue);
            while q.records.is_empty() {
                q = inner.queued.wait(q).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            std::mem::swap(&mut batch, &mut q.records);
            q.last
        };
        let started = std::time::Instant::now();
        let r = journal.append(&batch).and_then(|()| journal.commit());
        stats.commits.fetch_add(1, Ordering::Relaxed);
        stats.records.fetch_add(batch.len() as u64, Ordering::Relaxed);
        stats.commit_latency.observe(started.elapsed());
        batch.clear();
        if let Err(e) = r {
            fail(inner, &e, "journal write failed");
            return;
        }
        inner.durable.send_replace(last);
        if journal.segment_bytes() > inner.compact_at_bytes
            && let Err(e) = compact(inner, journal.as_mut())
        {
            fail(inner, &e, "journal compaction failed");
            return;
        }
    }
}

fn fail(inner: &Inner, e: &std::io::Error, what: &str) {
    tracing::error!(error = %e, "{what}; refusing further requests");
    inner.broken.store(true, Ordering::SeqCst);
    // Wake every waiter: none of them is acknowledged.
    inner.durable.send_modify(|_| {});
}

/// Snapshots the state and compacts, with the core held so that the snapshot covers exactly
/// the records written.
fn compact(inner: &Inner, journal: &mut dyn JournalSink) -> std::io::Result<()> {
    let mut guard = lock(&inner.core);
    let Some(core) = guard.as_mut() else { return Ok(()) };
    let (rest, last) = {
        let mut q = lock(&inner.queue);
        (std::mem::take(&mut q.records), q.last)
    };
    if !rest.is_empty() {
        journal.append(&rest)?;
        journal.commit()?;
    }
    journal.compact(&core.d.snapshot())?;
    inner.durable.send_replace(last);
    tracing::info!("journal compacted");
    Ok(())
}

/// Runs the state machine's timers.
async fn timers(inner: Arc<Inner>) {
    loop {
        let deadline = {
            let guard = lock(&inner.core);
            let Some(core) = guard.as_ref() else { return };
            core.d.poll_timeout().0
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
        let r = inner.apply(|d, t| {
            if t >= d.poll_timeout() {
                d.handle_timeout(t);
            }
        });
        if r.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use shardwise_core::dispatch::DispatcherConfig;
    use shardwise_core::dispatch::dispatcher::WorkerHeartbeat;

    use super::*;

    /// A journal whose commits fail from the `fail_from`-th on, counting what it was given.
    struct Flaky {
        commits: Arc<AtomicUsize>,
        records: Arc<AtomicUsize>,
        fail_from: usize,
    }

    impl JournalSink for Flaky {
        fn append(&mut self, updates: &[Update]) -> std::io::Result<()> {
            self.records.fetch_add(updates.len(), Ordering::SeqCst);
            Ok(())
        }
        fn commit(&mut self) -> std::io::Result<()> {
            if self.commits.fetch_add(1, Ordering::SeqCst) + 1 >= self.fail_from {
                Err(std::io::Error::other("injected fsync failure"))
            } else {
                Ok(())
            }
        }
        fn segment_bytes(&self) -> u64 {
            0
        }
        fn compact(&mut self, _: &Update) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn heartbeat(address: &str) -> WorkerHeartbeat {
        serde_json::from_value(serde_json::json!({"worker_address": address, "current_tasks": []}))
            .expect("heartbeat")
    }

    async fn started(journal: Option<Box<dyn JournalSink>>) -> Actor {
        let config = DispatcherConfig { fault_tolerant: journal.is_some(), ..Default::default() };
        let d = Dispatcher::new(config, "test".into(), now()).expect("dispatcher");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let actor = Actor::spawn(Box::new(move || Ok((d, journal))), move |e| {
            let _ = tx.send(e);
        });
        assert_eq!(rx.await.expect("started"), None);
        actor
    }

    #[tokio::test]
    async fn replies_wait_for_their_records_and_a_failed_commit_acknowledges_nothing() {
        let commits = Arc::new(AtomicUsize::new(0));
        let records = Arc::new(AtomicUsize::new(0));
        let journal = Flaky { commits: commits.clone(), records: records.clone(), fail_from: 2 };
        let actor = started(Some(Box::new(journal))).await;
        // The first registration is committed before its reply.
        let r = actor.call(|d, t| d.worker_heartbeat(t, &heartbeat("w1:1"))).await;
        assert!(r.expect("acknowledged").is_ok());
        // (The dispatcher's `Started` record and the registration, in one commit.)
        assert_eq!(records.load(Ordering::SeqCst), 2);
        assert_eq!(commits.load(Ordering::SeqCst), 1);
        // The second commit fails: that registration is not acknowledged...
        let r = actor.call(|d, t| d.worker_heartbeat(t, &heartbeat("w2:1"))).await;
        let p = r.expect_err("not acknowledged");
        assert_eq!(p.code, "UNAVAILABLE");
        assert!(p.detail.contains("journal"), "{}", p.detail);
        // ...and nothing after it, even a read.
        let r = actor.call(|d, _| d.workers().count()).await;
        assert_eq!(r.expect_err("refused").code, "UNAVAILABLE");
    }

    /// A journal whose segment grows 1,000 bytes per record and is emptied by compaction.
    struct Growing {
        bytes: u64,
        compactions: Arc<AtomicUsize>,
    }

    impl JournalSink for Growing {
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
        fn compact(&mut self, _: &Update) -> std::io::Result<()> {
            self.bytes = 0;
            self.compactions.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_journal_compacts_past_the_threshold_only() {
        for (threshold, want) in [(1_500, true), (COMPACT_AT_BYTES, false)] {
            let compactions = Arc::new(AtomicUsize::new(0));
            let journal: Box<dyn JournalSink> =
                Box::new(Growing { bytes: 0, compactions: compactions.clone() });
            let config = DispatcherConfig { fault_tolerant: true, ..Default::default() };
            let d = Dispatcher::new(config, "test".into(), now()).expect("dispatcher");
            let (tx, rx) = tokio::sync::oneshot::channel();
            let actor = Actor::spawn_with(Box::new(move || Ok((d, Some(journal)))), threshold, {
                move |e| {
                    let _ = tx.send(e);
                }
            });
            assert_eq!(rx.await.expect("started"), None);
            for i in 0..3 {
                let a = format!("w{i}:1");
                let r = actor.call(move |d, t| d.worker_heartbeat(t, &heartbeat(&a))).await;
                assert!(r.expect("acknowledged").is_ok());
            }
            // The syncer compacts right after the commit that crossed the threshold, before
            // it takes the next batch: one more acknowledged call has seen it happen.
            let _ = actor.call(|d, t| d.worker_heartbeat(t, &heartbeat("w9:1"))).await;
            let n = compactions.load(Ordering::SeqCst);
            assert_eq!(n > 0, want, "threshold {threshold}: {n} compactions");
        }
    }

    #[tokio::test]
    async fn without_a_journal_calls_answer_at_once() {
        let actor = started(None).await;
        for i in 0..100 {
            let a = format!("w{i}:1");
            let r = actor.call(move |d, t| d.worker_heartbeat(t, &heartbeat(&a))).await;
            assert!(r.expect("answered").is_ok());
        }
        assert_eq!(actor.call(|d, _| d.workers().count()).await.expect("read"), 100);
        assert_eq!(actor.stats.requests.load(Ordering::Relaxed), 101);
        assert_eq!(actor.stats.commits.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_panic_in_the_state_machine_stops_the_dispatcher() {
        let actor = started(None).await;
        let a = actor.clone();
        let joined = tokio::spawn(async move { a.call(|_, _| panic!("a bug")).await }).await;
        assert!(joined.is_err(), "the panic propagates to the caller's task");
        let r = actor.call(|d, _| d.workers().count()).await;
        assert_eq!(r.expect_err("refused").code, "UNAVAILABLE");
    }
}
