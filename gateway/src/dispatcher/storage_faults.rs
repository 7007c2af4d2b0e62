//! Storage faults under the running dispatcher: a full disk and a failed fsync, injected
//! through the journal's [`Storage`] trait over a real work dir. The documented outcome:
//! the call that met the fault and every call after it answer `UNAVAILABLE` (nothing more is
//! acknowledged; fsync is never retried), and a restart replays every acknowledged record.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use shardwise_core::dispatch::wire::WorkerHeartbeat;
use shardwise_core::dispatch::{Dispatcher, DispatcherConfig, ListWorkers};

use shardwise_journal::{DirStorage, Journal, Stager, Storage};

use super::core::{DriverHandle, JournalWriter, now};

/// A real directory whose disk can fill up and whose fsync can fail.
struct Faulty {
    dir: DirStorage,
    /// Bytes that still fit on the disk.
    room: Arc<AtomicU64>,
    fail_sync: Arc<AtomicBool>,
}

impl Storage for Faulty {
    fn list(&self) -> io::Result<Vec<u64>> {
        self.dir.list()
    }
    fn read(&self, segment: u64) -> io::Result<Vec<u8>> {
        self.dir.read(segment)
    }
    fn create(&mut self, segment: u64, bytes: &[u8]) -> io::Result<()> {
        self.dir.create(segment, bytes)
    }
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let room = self.room.load(Ordering::SeqCst);
        let fits = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        // As a full disk does: what fits is written, then ENOSPC.
        self.dir.append(&bytes[..fits])?;
        self.room.fetch_sub(fits as u64, Ordering::SeqCst);
        if fits < bytes.len() {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        if self.fail_sync.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected fsync failure (EIO)"));
        }
        self.dir.sync()
    }
    fn truncate(&mut self, segment: u64, len: u64) -> io::Result<()> {
        self.dir.truncate(segment, len)
    }
    fn remove(&mut self, segment: u64) -> io::Result<()> {
        self.dir.remove(segment)
    }
    fn describe(&self, segment: u64) -> String {
        self.dir.describe(segment)
    }
    fn stager(&self) -> Box<dyn Stager> {
        self.dir.stager()
    }
    fn install(&mut self, segment: u64, tail: &[u8]) -> io::Result<()> {
        if self.fail_sync.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected fsync failure (EIO)"));
        }
        self.dir.install(segment, tail)
    }
    fn discard_staged(&mut self) -> io::Result<()> {
        self.dir.discard_staged()
    }
}

fn config() -> DispatcherConfig {
    DispatcherConfig { fault_tolerant: true, ..Default::default() }
}

fn heartbeat(address: &str) -> WorkerHeartbeat {
    serde_json::from_value(serde_json::json!({"worker_address": address, "current_tasks": []}))
        .expect("heartbeat")
}

/// A fault-tolerant dispatcher over `storage`, replaying what is there.
async fn start(storage: Faulty) -> DriverHandle {
    let (journal, replay) = Journal::open(storage, true).expect("journal opens");
    let d = Dispatcher::recover(config(), "test".into(), now(), &replay.updates).expect("recover");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sink: Box<dyn JournalWriter> = Box::new(journal);
    let actor = DriverHandle::spawn(Box::new(move || Ok((d, Some(sink)))), move |e| {
        let _ = tx.send(e);
    });
    assert!(rx.await.expect("started").is_none());
    actor
}

/// Registers workers `prefix-0..` until one is refused; returns the acknowledged ones.
async fn register_until_refused(
    actor: &DriverHandle,
    prefix: &str,
    fault: impl Fn(usize),
) -> Vec<String> {
    let mut acked = Vec::new();
    for i in 0..1000 {
        fault(i);
        let address = format!("{prefix}-{i}:1");
        let hb = heartbeat(&address);
        match actor.call(hb).await {
            Ok(_) => acked.push(address),
            Err(p) => {
                assert_eq!(p.code, "UNAVAILABLE", "{p:?}");
                assert!(p.detail.contains("journal"), "{}", p.detail);
                // Nothing is acknowledged after the fault, not even a read.
                let r = actor.call(ListWorkers).await;
                assert_eq!(r.expect_err("refused").code, "UNAVAILABLE");
                return acked;
            }
        }
    }
    panic!("the fault never surfaced");
}

/// Restarts on the same dir without faults: every acknowledged worker is there.
async fn assert_replayed(dir: &std::path::Path, acked: &[String]) {
    let storage = Faulty {
        dir: DirStorage::open(dir).expect("dir"),
        room: Arc::new(AtomicU64::new(u64::MAX)),
        fail_sync: Arc::new(AtomicBool::new(false)),
    };
    let actor = start(storage).await;
    let listed = actor.call(ListWorkers).await.expect("read");
    let addresses: Vec<String> = listed.workers.into_iter().map(|w| w.worker_address).collect();
    for a in acked {
        assert!(addresses.contains(a), "acknowledged worker {a} lost after restart");
    }
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("shardwise-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[tokio::test]
async fn a_full_disk_acknowledges_nothing_more_and_loses_nothing_acknowledged() {
    let dir = temp_dir("disk-full");
    let room = Arc::new(AtomicU64::new(u64::MAX));
    let storage = Faulty {
        dir: DirStorage::open(&dir).unwrap(),
        room: room.clone(),
        fail_sync: Arc::new(AtomicBool::new(false)),
    };
    let actor = start(storage).await;
    // The disk fills up after 20 registrations, in the middle of a record.
    let acked = register_until_refused(&actor, "full", |i| {
        if i == 20 {
            room.store(30, Ordering::SeqCst);
        }
    })
    .await;
    assert_eq!(acked.len(), 20);
    // `/readyz` tells the real cause, not "replaying its journal".
    assert!(!actor.is_ready());
    let why = actor.unready_reason();
    println!("{why}");
    assert!(
        why.contains("the journal could not be written")
            && why.contains("no space left on the disk")
            && why.contains("stopped accepting changes"),
        "{why}"
    );
    drop(actor);
    // The restart truncates the partial record (a torn tail) and has all 20.
    assert_replayed(&dir, &acked).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_failed_fsync_acknowledges_nothing_more_and_loses_nothing_acknowledged() {
    let dir = temp_dir("fsync-fails");
    let fail_sync = Arc::new(AtomicBool::new(false));
    let storage = Faulty {
        dir: DirStorage::open(&dir).unwrap(),
        room: Arc::new(AtomicU64::new(u64::MAX)),
        fail_sync: fail_sync.clone(),
    };
    let actor = start(storage).await;
    let acked = register_until_refused(&actor, "eio", |i| {
        if i == 7 {
            fail_sync.store(true, Ordering::SeqCst);
        }
    })
    .await;
    assert_eq!(acked.len(), 7);
    drop(actor);
    assert_replayed(&dir, &acked).await;
    std::fs::remove_dir_all(&dir).unwrap();
}
