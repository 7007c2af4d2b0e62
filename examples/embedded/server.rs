//! The dispatcher core embedded without tokio: a plain `std::net` thread loop, a file journal
//! and the core's [`Driver`], nothing else. It proves the core needs no particular runtime.
//!
//! Protocol: one JSON object per line in, one per line out. A request names its operation and
//! carries the body the REST front would take, plus the path id where the REST route has one:
//!
//! ```text
//! {"op": "register_dataset", "body": {"dataset": {"source": {"range": {"stop": 10}}}}}
//! {"op": "create_iteration", "job_id": "5000", "body": {}}
//! {"op": "get_splits", "iteration_id": "2000", "body": {"worker_address": "w:1", "repetition": 0}}
//! {"op": "workers"}
//! ```
//!
//! The answer is `{"ok": <the REST reply>}` or `{"error": {"code": ..., "detail": ...}}`.
//! Operations: `worker_heartbeat`, `worker_update`, `register_dataset`, `create_job`,
//! `create_iteration`, `client_heartbeat`, `release_client`, `get_splits`, `maybe_remove`,
//! `version`, `workers`, `dataset`, `job`, `metrics`.
//!
//! Durability: the sink appends every batch to the gateway's segment files and fsyncs before
//! it returns ([`Durability::Now`]), so the driver releases each reply only after its records
//! are on disk. One connection thread at a time holds the driver's mutex; a timer thread runs
//! `handle_timeout` at the core's `poll_timeout`. A restart replays the journal.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use shardwise_core::dispatch::{
    DispatchError, Dispatcher, DispatcherConfig, Driver, Durability, GetDataset, GetJob,
    GetMetrics, GetVersion, JournalSink, ListWorkers, Millis, ReleaseClient, Request, Seq,
    Submitted, SyncSink, Update,
};
use shardwise_journal::{DirStorage, Journal};

/// The sink: append, then fsync, then report the batch durable.
#[derive(Debug)]
struct FileSink(Journal<DirStorage>);

impl JournalSink for FileSink {
    type Error = std::io::Error;
    fn persist(&mut self, _: Seq, records: Vec<Update>) -> std::io::Result<Durability> {
        self.0.append(&records)?;
        self.0.commit()?;
        Ok(Durability::Now)
    }
}
impl SyncSink for FileSink {}

fn now() -> Millis {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    Millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

type Shared = Arc<Mutex<Driver<FileSink>>>;

fn lock(d: &Shared) -> MutexGuard<'_, Driver<FileSink>> {
    d.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Why the embedded dispatcher cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The work dir cannot be owned.
    #[error(transparent)]
    WorkDir(#[from] shardwise_journal::WorkDirError),
    /// The journal cannot be replayed.
    #[error(transparent)]
    Journal(#[from] shardwise_journal::OpenError),
    /// The state machine refused the replayed records.
    #[error(transparent)]
    Dispatch(#[from] shardwise_core::DispatchError),
    /// The journal cannot be written, or the listener has no address.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A running embedded dispatcher.
#[derive(Debug)]
pub struct Server {
    driver: Shared,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Replay's report: records replayed.
    pub replayed: usize,
}

impl Server {
    /// Replays the journal in `work_dir` (creating it), then serves on `listener`.
    pub fn start(listener: TcpListener, work_dir: &Path) -> Result<Server, StartError> {
        let storage = DirStorage::exclusive(work_dir)?;
        let (journal, replay) = Journal::open(storage, true)?;
        let config = DispatcherConfig { fault_tolerant: true, ..DispatcherConfig::default() };
        let incarnation = format!("embedded-{}", now().0);
        let d = Dispatcher::recover(config, incarnation, now(), &replay.updates)?;
        let mut driver = Driver::new(d, FileSink(journal));
        driver.flush(); // a fresh state's start record, on disk before anything is served
        if let Some(e) = driver.failure() {
            return Err(StartError::Io(std::io::Error::new(
                e.kind(),
                format!("the journal cannot be written: {e}"),
            )));
        }
        let driver: Shared = Arc::new(Mutex::new(driver));
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (driver, stop) = (driver.clone(), stop.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let driver = driver.clone();
                    std::thread::spawn(move || serve(&driver, conn));
                }
            })
        };
        let timers = {
            let (driver, stop) = (driver.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let deadline = lock(&driver).poll_timeout();
                    let wait = deadline.0.saturating_sub(now().0).min(100);
                    std::thread::sleep(Duration::from_millis(wait));
                    let t = now();
                    if t >= deadline {
                        lock(&driver).handle_timeout(t);
                    }
                }
            })
        };
        let threads = vec![accept, timers];
        Ok(Server { driver, addr, stop, threads, replayed: replay.updates.len() })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and the timers, waits (up to 10 s) for the open connections to end,
    /// and releases the journal and the work dir.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&self.driver) > 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Serves one connection: a line in, a line out.
fn serve(driver: &Shared, conn: TcpStream) {
    let Ok(mut out) = conn.try_clone() else { return };
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        let answer = match serde_json::from_str::<Value>(&line)
            .map_err(|e| DispatchError::InvalidArgument(format!("not JSON: {e}")))
            .and_then(request)
        {
            Err(e) => error(&e),
            Ok(req) => match lock(driver).submit(now(), req) {
                Submitted::Ready(Ok(r)) => json!({ "ok": r }),
                Submitted::Ready(Err(e)) => error(&e),
                // A synchronous sink releases every reply at once.
                Submitted::Pending(_) => error(&DispatchError::Unavailable("pending".into())),
            },
        };
        if writeln!(out, "{answer}").is_err() {
            return;
        }
    }
}

fn error(e: &DispatchError) -> Value {
    json!({"error": {"code": e.code(), "detail": e.detail()}})
}

/// A request line as a core [`Request`].
fn request(v: Value) -> Result<Request, DispatchError> {
    fn field<T: serde::de::DeserializeOwned>(v: &Value, k: &str) -> Result<T, DispatchError> {
        serde_json::from_value(v.get(k).cloned().unwrap_or(Value::Null))
            .map_err(|e| DispatchError::InvalidArgument(format!("{k}: {e}")))
    }
    // The body (an empty object when absent), under a key `field` can read.
    let b = json!({ "b": v.get("body").cloned().unwrap_or_else(|| json!({})) });
    Ok(match v.get("op").and_then(Value::as_str).unwrap_or("") {
        "worker_heartbeat" => Request::WorkerHeartbeat(field(&b, "b")?),
        "worker_update" => Request::WorkerUpdate(field(&b, "b")?),
        "register_dataset" => Request::RegisterDataset(field(&b, "b")?),
        "create_job" => Request::CreateJob(field(&b, "b")?),
        "create_iteration" => Request::CreateIteration(field(&v, "job_id")?, field(&b, "b")?),
        "client_heartbeat" => Request::ClientHeartbeat(field(&v, "client_id")?, field(&b, "b")?),
        "release_client" => {
            Request::ReleaseClient(ReleaseClient { client_id: field(&v, "client_id")? })
        }
        "get_splits" => Request::GetSplits(field(&v, "iteration_id")?, field(&b, "b")?),
        "maybe_remove" => Request::MaybeRemoveTask(field(&v, "task_id")?, field(&b, "b")?),
        "version" => Request::Version(GetVersion),
        "workers" => Request::Workers(ListWorkers),
        "dataset" => Request::Dataset(GetDataset { dataset_id: field(&v, "dataset_id")? }),
        "job" => Request::Job(GetJob { job_id: field(&v, "job_id")? }),
        "metrics" => Request::Metrics(GetMetrics),
        other => {
            return Err(DispatchError::InvalidArgument(format!(
                "unknown op {}",
                shardwise_core::echo::echo(other)
            )));
        }
    })
}
