//! Helpers of the crash harness (`tests/tests/crash.rs`): a TCP forwarder that keeps one
//! address for a dispatcher that is killed and restarted on new ports, a seeded random number
//! generator, and a look into the journal's segment files.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;

use crate::{HttpResponse, http, ok, poll_until};

/// The seeded generator the fuzz targets use places the kills too.
pub use crate::fuzz::Rng;

/// The seed of a run: `SHARDWISE_CRASH_SEED` when set, else derived from the clock.
pub fn seed() -> u64 {
    match std::env::var("SHARDWISE_CRASH_SEED") {
        Ok(s) => s.trim().parse().unwrap_or_else(|_| panic!("SHARDWISE_CRASH_SEED={s:?}")),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            Rng::new(nanos as u64 ^ u64::from(std::process::id())).next_u64()
        }
    }
}

/// Whether the long run was asked for (`SHARDWISE_LONG=1`).
pub fn long_run() -> bool {
    std::env::var("SHARDWISE_LONG").is_ok_and(|v| v == "1")
}

struct Shared {
    /// The port connections are forwarded to; `None` while the dispatcher is down.
    target: Mutex<Option<u16>>,
    /// Both sockets of every open connection, to cut them.
    conns: Mutex<HashMap<u64, [TcpStream; 2]>>,
    next_id: AtomicU64,
    stop: AtomicBool,
    forwarded: AtomicU64,
    refused: AtomicU64,
}

/// A TCP forwarder on `127.0.0.1:<ephemeral>`: every accepted connection is forwarded to
/// `127.0.0.1:<target>`; while there is no target, connections are closed at once (the
/// callers see a transport failure and retry). Stops on drop.
pub struct Forwarder {
    port: u16,
    shared: Arc<Shared>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder").field("port", &self.port).finish_non_exhaustive()
    }
}

impl Forwarder {
    /// Binds `127.0.0.1:0` and starts accepting (no target yet).
    pub fn start() -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the forwarder");
        let port = listener.local_addr().expect("forwarder address").port();
        let shared = Arc::new(Shared {
            target: Mutex::new(None),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            forwarded: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let s = shared.clone();
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                forward(&s, conn);
            }
        });
        Forwarder { port, shared, accept: Some(accept) }
    }

    /// `http://127.0.0.1:<port>`: the one address workers and clients are given.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Forwards new connections to `port` from now on.
    pub fn set_target(&self, port: u16) {
        *lock(&self.shared.target) = Some(port);
    }

    /// Forwards nothing more and cuts every open connection (the dispatcher was killed).
    pub fn cut(&self) {
        *lock(&self.shared.target) = None;
        for (_, [a, b]) in lock(&self.shared.conns).drain() {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }

    /// (connections forwarded, connections closed for want of a dispatcher).
    pub fn counts(&self) -> (u64, u64) {
        (self.shared.forwarded.load(Ordering::SeqCst), self.shared.refused.load(Ordering::SeqCst))
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.cut();
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn forward(s: &Arc<Shared>, client: TcpStream) {
    let target = *lock(&s.target);
    let upstream = target.and_then(|p| TcpStream::connect(("127.0.0.1", p)).ok());
    let Some(upstream) = upstream else {
        s.refused.fetch_add(1, Ordering::SeqCst);
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(c2), Ok(u2), Ok(c3), Ok(u3)) =
        (client.try_clone(), upstream.try_clone(), client.try_clone(), upstream.try_clone())
    else {
        return;
    };
    let id = s.next_id.fetch_add(1, Ordering::SeqCst);
    {
        let mut conns = lock(&s.conns);
        // Cut meanwhile (the target is gone): drop this one too.
        if lock(&s.target).is_none() {
            let _ = client.shutdown(Shutdown::Both);
            let _ = upstream.shutdown(Shutdown::Both);
            return;
        }
        conns.insert(id, [c3, u3]);
    }
    s.forwarded.fetch_add(1, Ordering::SeqCst);
    let pipe = |mut from: TcpStream, mut to: TcpStream, s: Arc<Shared>| {
        move || {
            let mut buf = [0u8; 16 * 1024];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
            // One side ended: end the connection both ways.
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
            lock(&s.conns).remove(&id);
        }
    };
    std::thread::spawn(pipe(client, upstream, s.clone()));
    std::thread::spawn(pipe(u2, c2, s.clone()));
}

/// One journal segment file as it is on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Its number.
    pub number: u64,
    /// Whether its first record is a snapshot (a segment compaction wrote).
    pub snapshot: bool,
    /// Its intact records.
    pub records: usize,
}

/// The segments in `<work_dir>/journal`, oldest first. A segment that vanishes while it is
/// read (compaction deleted it) is left out.
pub fn segments(work_dir: &Path) -> Vec<Segment> {
    let Ok(entries) = std::fs::read_dir(work_dir.join("journal")) else { return Vec::new() };
    let mut out: Vec<Segment> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let number = name.strip_prefix("segment-")?.strip_suffix(".swj")?.parse().ok()?;
            let bytes = std::fs::read(e.path()).ok()?;
            let (snapshot, records) =
                match shardwise_core::dispatch::framing::decode_segment(&bytes) {
                    Ok(d) => {
                        let first = d.records.first().and_then(|r| {
                            serde_json::from_slice::<serde_json::Value>(r.payload).ok()
                        });
                        (first.is_some_and(|v| v.get("snapshot").is_some()), d.records.len())
                    }
                    Err(_) => (false, 0),
                };
            Some(Segment { number, snapshot, records })
        })
        .collect();
    out.sort_by_key(|s| s.number);
    out
}

/// Whether the segments after a kill show a compaction that had begun but not finished in
/// the run whose own segment was `run_segment`: a segment newer than it exists (compaction
/// creates it), and it is not yet a complete snapshot or older segments are not yet deleted.
pub fn compaction_interrupted(after: &[Segment], run_segment: u64) -> bool {
    let Some(newest) = after.last() else { return false };
    newest.number > run_segment && (!newest.snapshot || after.len() > 1)
}

/// Seconds since midnight (UTC) of a log line's RFC 3339 timestamp
/// (`2026-11-29T22:24:41.123456Z  INFO ...`), if it starts with one.
pub fn log_time_of_day(line: &str) -> Option<f64> {
    let t = line.split_whitespace().next()?;
    let (_, time) = t.split_once('T')?;
    let time = time.trim_end_matches('Z');
    let mut parts = time.splitn(3, ':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

/// Seconds since midnight (UTC) now.
pub fn time_of_day_now() -> f64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (d.as_secs() % 86_400) as f64 + f64::from(d.subsec_micros()) / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_seeded_and_ranges_hold() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        assert_eq!(xs, (0..5).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert_ne!(xs[0], xs[1]);
        assert!((0..1000).all(|_| (10..20).contains(&a.range(10, 20))));
        assert_eq!(a.range(5, 5), 5);
    }

    #[test]
    fn log_timestamps_parse() {
        let t = log_time_of_day("2026-11-29T22:24:41.500000Z  INFO x: journal compacted");
        assert_eq!(t, Some(22.0 * 3600.0 + 24.0 * 60.0 + 41.5));
        assert_eq!(log_time_of_day("shardwise dispatcher replayed 3 records"), None);
    }

    #[test]
    fn an_interrupted_compaction_is_recognised() {
        let seg = |number, snapshot| Segment { number, snapshot, records: 1 };
        // The run's own segment 3 only: no compaction began.
        assert!(!compaction_interrupted(&[seg(2, true), seg(3, false)], 3));
        // A finished compaction: one snapshot segment newer than the run's.
        assert!(!compaction_interrupted(&[seg(4, true)], 3));
        // Created, older ones not yet deleted; or created without its snapshot yet.
        assert!(compaction_interrupted(&[seg(3, false), seg(4, true)], 3));
        assert!(compaction_interrupted(&[seg(4, false)], 3));
    }
}

/// What the harness's own calls were acknowledged.
#[derive(Debug, Default)]
pub struct Acked {
    /// (dataset id, canonical definition).
    pub datasets: Vec<(String, Value)>,
    /// (job id, job name, dataset id).
    pub jobs: Vec<(String, String, String)>,
    /// (job id, iteration id, client id, attempts it took, release acknowledged).
    pub iterations: Vec<(String, String, String, usize, bool)>,
}

impl Acked {
    pub fn records(&self) -> usize {
        self.datasets.len()
            + self.jobs.len()
            + self.iterations.len() * 2
            + self.iterations.iter().filter(|i| i.4).count()
    }
}

/// One call retried until it is answered (transport failures and 503 while the dispatcher
/// is down are retried); returns the answer and how many attempts it took. With several
/// `urls` (replicas), a failure moves on to the next one, and a redirect (307) to a replica
/// of the list is followed.
pub fn answered(
    urls: &[String],
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (HttpResponse, usize) {
    let mut attempts = 0;
    let mut at = 0;
    let what = format!("{method} {path} answered");
    let r = poll_until(&what, Duration::from_secs(60), || {
        attempts += 1;
        let url = &urls[at % urls.len()];
        match http(method, url, path, body) {
            Ok(r) if r.status == 307 => {
                let to = r.header("location").unwrap_or_default();
                match urls.iter().position(|u| to.starts_with(&format!("{u}/"))) {
                    Some(i) => at = i,
                    None => at += 1,
                }
                Err(format!("307 to {to}"))
            }
            Ok(r) if r.status != 503 => Ok(r),
            Ok(r) => {
                at += 1;
                Err(format!("{} {}", r.status, r.body))
            }
            Err(e) => {
                at += 1;
                Err(e.to_string())
            }
        }
    });
    (r, attempts)
}

/// Registers datasets, jobs and iterations and releases the leases, one after another,
/// until `stop`; records what was acknowledged.
pub fn churn(url: &[String], stop: &AtomicBool) -> Acked {
    let mut acked = Acked::default();
    for i in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let name = format!("churn-{i}");
        let def = json!({"source": {"list": {"elements": [{"churn": i}]}}});
        let (r, _) = answered(
            url,
            "POST",
            "/v1/datasets",
            Some(&json!({"dataset": def, "dataset_id": name})),
        );
        assert_eq!(ok(&r)["dataset_id"], name.as_str());
        acked
            .datasets
            .push((name.clone(), DatasetDef::from_json(&def).expect("a valid dataset").to_json()));
        let job =
            json!({"dataset_id": name, "processing_mode": "parallel_epochs", "job_name": name});
        let (r, _) = answered(url, "POST", "/v1/jobs", Some(&job));
        let job_id = ok(&r)["job_id"].as_str().expect("job id").to_owned();
        acked.jobs.push((job_id.clone(), name.clone(), name.clone()));
        let path = format!("/v1/jobs/{job_id}/iterations");
        let (r, attempts) = answered(url, "POST", &path, Some(&json!({})));
        let lease = ok(&r);
        let iteration = lease["iteration_id"].as_str().expect("iteration id").to_owned();
        let client = lease["client_id"].as_str().expect("client id").to_owned();
        // A retried release whose first answer was lost finds the lease gone: applied, but
        // not acknowledged.
        let (r, release_attempts) = answered(url, "DELETE", &format!("/v1/clients/{client}"), None);
        let released = match r.status {
            200 => true,
            404 if release_attempts > 1 => false,
            _ => panic!("DELETE /v1/clients/{client}: {} {}", r.status, r.body),
        };
        acked.iterations.push((job_id, iteration, client, attempts, released));
        // Paced: each iteration gives every worker a task.
        std::thread::sleep(Duration::from_millis(20));
    }
    acked
}

/// Checks every acknowledged reply of [`churn`] against the dispatcher's (replayed) state;
/// returns how many records it checked.
pub fn check_acked(url: &str, acked: &Acked) -> usize {
    for (id, def) in &acked.datasets {
        let v = ok(&http("GET", url, &format!("/v1/datasets/{id}"), None).expect("answer"));
        assert_eq!(&v["dataset"], def, "dataset {id} survived with its definition");
    }
    let mut jobs = BTreeMap::new();
    for (id, name, ds) in &acked.jobs {
        let v = ok(&http("GET", url, &format!("/v1/jobs/{id}"), None).expect("answer"));
        assert_eq!((&v["job_name"], &v["dataset_id"]), (&json!(name), &json!(ds)), "job {id}");
        jobs.insert(id.clone(), v);
    }
    for (job, iteration, client, attempts, released) in &acked.iterations {
        let its = jobs[job]["iterations"].as_array().expect("iterations");
        let it = its
            .iter()
            .find(|i| i["iteration_id"] == json!(iteration))
            .unwrap_or_else(|| panic!("iteration {iteration} of job {job} lost: {its:?}"));
        if *released {
            // Leases whose creation was retried may have been created twice: the extra ones
            // were never acknowledged and stay.
            let clients = it["num_clients"].as_u64().expect("num_clients") as usize;
            assert!(clients < *attempts, "client {client} released, yet {clients} clients remain");
        }
    }
    // Ids acknowledged once are never handed out again (a lost record would reuse them).
    let unique = |what: &str, ids: Vec<&String>| {
        let n = ids.len();
        let set: BTreeSet<&String> = ids.into_iter().collect();
        assert_eq!(set.len(), n, "every acknowledged {what} id is distinct");
    };
    unique("job", acked.jobs.iter().map(|j| &j.0).collect());
    unique("iteration", acked.iterations.iter().map(|i| &i.1).collect());
    unique("client", acked.iterations.iter().map(|i| &i.2).collect());
    acked.records()
}
