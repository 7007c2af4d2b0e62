//! The dispatcher actor: one OS thread owns the core [`Dispatcher`] and the journal.
//!
//! Requests arrive as closures on a bounded channel. The thread takes every request that is
//! waiting (a batch), runs them in order against the state machine, appends the journal
//! records they produced, makes them durable with ONE commit (group commit: fsync in
//! fault-tolerant mode), and only then releases the replies. While it waits for the disk,
//! new requests queue up and form the next batch. Timers run when the state machine's
//! `poll_timeout` is due. If the journal cannot be written, no reply of that batch is sent as
//! a success and every later request gets `UNAVAILABLE`: memory is ahead of the disk, and a
//! restart replays the journal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shardwise_core::dispatch::{Dispatcher, Event, Millis, Update};
use tokio::sync::oneshot;

use crate::journal::{Journal, Storage};
use crate::problem::Problem;

/// Wall-clock milliseconds (journaled times must compare across restarts).
pub fn now() -> Millis {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    Millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

trait Job: Send {
    fn run(self: Box<Self>, d: &mut Dispatcher, now: Millis) -> Box<dyn Finish>;
    fn reject(self: Box<Self>, problem: Problem);
}

trait Finish: Send {
    fn ok(self: Box<Self>);
    fn fail(self: Box<Self>, problem: Problem);
}

struct Call<F, R> {
    f: F,
    tx: oneshot::Sender<Result<R, Problem>>,
}

struct Done<R> {
    value: R,
    tx: oneshot::Sender<Result<R, Problem>>,
}

impl<F, R> Job for Call<F, R>
where
    F: FnOnce(&mut Dispatcher, Millis) -> R + Send + 'static,
    R: Send + 'static,
{
    fn run(self: Box<Self>, d: &mut Dispatcher, now: Millis) -> Box<dyn Finish> {
        let value = (self.f)(d, now);
        Box::new(Done { value, tx: self.tx })
    }
    fn reject(self: Box<Self>, problem: Problem) {
        let _ = self.tx.send(Err(problem));
    }
}

impl<R: Send + 'static> Finish for Done<R> {
    fn ok(self: Box<Self>) {
        let _ = self.tx.send(Ok(self.value));
    }
    fn fail(self: Box<Self>, problem: Problem) {
        let _ = self.tx.send(Err(problem));
    }
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

/// A handle to the actor (cheap to clone).
#[derive(Debug, Clone)]
pub struct Actor {
    tx: SyncSender<Box<dyn Job>>,
    ready: Arc<AtomicBool>,
    incarnation: Arc<std::sync::OnceLock<String>>,
    broken: Arc<AtomicBool>,
    /// Counters.
    pub stats: Arc<Stats>,
}

/// How the actor starts: a dispatcher built now, or one recovered from a journal.
pub type Startup =
    Box<dyn FnOnce() -> Result<(Dispatcher, Option<Box<dyn JournalSink>>), String> + Send>;

/// The journal as the actor uses it (object-safe over the storage type).
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

/// Compact when the current segment grows past this.
const COMPACT_AT_BYTES: u64 = 64 << 20;
const BATCH_MAX: usize = 4096;
const QUEUE: usize = 16_384;

impl Actor {
    /// Starts the actor thread; `startup` (replay) runs on it, after which the actor is ready.
    /// `on_started` receives the startup's error, or `None` when ready.
    pub fn spawn(
        startup: Startup,
        on_started: impl FnOnce(Option<String>) + Send + 'static,
    ) -> Actor {
        let (tx, rx) = sync_channel::<Box<dyn Job>>(QUEUE);
        let ready = Arc::new(AtomicBool::new(false));
        let broken = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Stats::default());
        let incarnation = Arc::new(std::sync::OnceLock::new());
        let actor = Actor {
            tx,
            ready: ready.clone(),
            incarnation: incarnation.clone(),
            broken: broken.clone(),
            stats: stats.clone(),
        };
        std::thread::Builder::new()
            .name("shardwise-dispatcher".into())
            .spawn(move || match startup() {
                Err(e) => on_started(Some(e)),
                Ok((d, journal)) => {
                    let _ = incarnation.set(d.incarnation().to_owned());
                    ready.store(true, Ordering::SeqCst);
                    on_started(None);
                    run(d, journal, rx, broken, stats);
                }
            })
            .expect("spawn the dispatcher thread");
        actor
    }

    /// The dispatcher's incarnation id (empty until replay finished).
    pub fn incarnation(&self) -> &str {
        self.incarnation.get().map_or("", String::as_str)
    }

    /// Whether replay finished.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Runs `f` on the dispatcher; resolves once its journal records are durable.
    pub async fn call<R, F>(&self, f: F) -> Result<R, Problem>
    where
        F: FnOnce(&mut Dispatcher, Millis) -> R + Send + 'static,
        R: Send + 'static,
    {
        if !self.is_ready() {
            return Err(Problem::new(
                "UNAVAILABLE",
                "Dispatcher has not started yet: it is replaying its journal.",
            ));
        }
        if self.broken.load(Ordering::SeqCst) {
            return Err(journal_broken());
        }
        let (tx, rx) = oneshot::channel();
        match self.tx.try_send(Box::new(Call { f, tx })) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(Problem::new(
                    "UNAVAILABLE",
                    "the dispatcher is overloaded; retry shortly",
                ));
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(Problem::new("UNAVAILABLE", "the dispatcher is shutting down"));
            }
        }
        rx.await.unwrap_or_else(|_| Err(Problem::new("UNAVAILABLE", "the dispatcher stopped")))
    }
}

fn journal_broken() -> Problem {
    Problem::new(
        "UNAVAILABLE",
        "the journal could not be written; the dispatcher acknowledges nothing more until it is \
         restarted (restart replays the journal)",
    )
}

fn run(
    mut d: Dispatcher,
    mut journal: Option<Box<dyn JournalSink>>,
    rx: Receiver<Box<dyn Job>>,
    broken: Arc<AtomicBool>,
    stats: Arc<Stats>,
) {
    let mut records: Vec<Update> = Vec::new();
    let mut finished: Vec<Box<dyn Finish>> = Vec::new();
    loop {
        let wait = d.poll_timeout().0.saturating_sub(now().0);
        let first = match rx.recv_timeout(Duration::from_millis(wait.max(1))) {
            Ok(job) => Some(job),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let t = now();
        if t >= d.poll_timeout() {
            d.handle_timeout(t);
        }
        if let Some(job) = first {
            finished.push(job.run(&mut d, t));
            while finished.len() < BATCH_MAX {
                match rx.try_recv() {
                    Ok(job) => finished.push(job.run(&mut d, t)),
                    Err(_) => break,
                }
            }
        }
        stats.requests.fetch_add(finished.len() as u64, Ordering::Relaxed);
        while let Some(u) = d.poll_journal() {
            records.push(u);
        }
        while let Some(e) = d.poll_event() {
            match e {
                Event::WorkerLost { address } => tracing::warn!(%address, "worker lost"),
                Event::IterationFinished { iteration_id } => {
                    tracing::info!(%iteration_id, "iteration finished");
                }
                other => tracing::debug!(?other, "event"),
            }
        }
        let durable = match (&mut journal, records.is_empty()) {
            (Some(j), false) => {
                let started = std::time::Instant::now();
                let r = j.append(&records).and_then(|()| j.commit());
                stats.commits.fetch_add(1, Ordering::Relaxed);
                stats.records.fetch_add(records.len() as u64, Ordering::Relaxed);
                stats.commit_latency.observe(started.elapsed());
                r
            }
            _ => Ok(()),
        };
        records.clear();
        match durable {
            Ok(()) => finished.drain(..).for_each(|f| f.ok()),
            Err(e) => {
                tracing::error!(error = %e, "journal write failed; refusing further requests");
                broken.store(true, Ordering::SeqCst);
                finished.drain(..).for_each(|f| f.fail(journal_broken()));
                // Drain and refuse whatever is queued, then keep refusing.
                while let Ok(job) = rx.recv() {
                    job.reject(journal_broken());
                }
                return;
            }
        }
        if let Some(j) = &mut journal
            && j.segment_bytes() > COMPACT_AT_BYTES
        {
            match j.compact(&d.snapshot()) {
                Ok(()) => tracing::info!("journal compacted"),
                Err(e) => {
                    tracing::error!(error = %e, "journal compaction failed; refusing further requests");
                    broken.store(true, Ordering::SeqCst);
                    return;
                }
            }
        }
    }
}
