//! The driver handle against journals that fail, fill up, stall or compact.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use shardwise_core::dispatch::wire::WorkerHeartbeat;
use shardwise_core::dispatch::{Call, Dispatcher, DispatcherConfig, ListWorkers, Update};

use super::{COMPACT_AT_BYTES, DriverHandle, JournalWriter, SnapshotWriter, StagedSnapshot, now};

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
        self.poisoned |= updates
            .iter()
            .any(|u| matches!(u, Update::RegisterWorker { address, .. } if address == self.poison));
        Ok(())
    }
    fn commit(&mut self) -> std::io::Result<()> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        if self.poisoned { Err(std::io::Error::other("injected fsync failure")) } else { Ok(()) }
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

/// A journal write refused at etcd's space quota tells callers and `/readyz` the
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
