//! HTTP load generator for `shardwise dispatcher`: the dispatcher benchmark.
//!
//! ```sh
//! cargo run --release -p shardwise-examples --example load -- [--seconds 3] [--workers 100]
//! ```
//!
//! It starts its own dispatcher (the release `shardwise` binary next to this executable, or
//! `--shardwise PATH`) on 127.0.0.1 port 0, once in memory and once with `--work-dir <tmp>
//! --fault-tolerant` (group-committed fsync), registers a dataset, `--workers` workers, a
//! DYNAMIC job (`distributed_epoch`, split_size 1) and an iteration, then drives each workload
//! at each concurrency: a fixed number of keep-alive HTTP/1.1 connections, one request in
//! flight per connection (closed loop), for `--seconds` each and at most `--max-requests`.
//!
//! Workloads: `healthz` (`GET /healthz`: no dispatcher work, the HTTP stack's own cost),
//! `worker_hb` (steady-state worker heartbeats reporting the current task, cycling over the
//! workers), `client_hb` (the iteration client's heartbeat) and `get_split` (each connection
//! is one worker with a task in the iteration, asking for one split and acknowledging the
//! previous one).
//!
//! Measured per run: calls/s, p50/p99 latency, errors (any non-200 or unexpected reply), the
//! dispatcher's CPU per call (utime+stime of `/proc/<pid>/stat`, all threads, in clock ticks
//! assumed to be 100 Hz, the Linux `USER_HZ`), the part of it spent on the journal thread
//! (`/proc/<pid>/task/*/stat`, thread `shardwise-journal`: the writes and fsyncs), and this process's own
//! CPU per call (it shares the machine's cores). Output: a Markdown table per mode and the
//! goals against TensorFlow 2.21's dispatcher, measured with the same workloads.
//!
//! `--compare` measures the REST front's cost per call against yardsticks, in one run: a bare axum server ([`shardwise_examples::bare`], started as `load --bare-server`: one
//! JSON route with trivial work), `/healthz` and the JSON workloads on this build's dispatcher,
//! in memory and fault-tolerant, and the same on a `--baseline PATH` binary (e.g. main's
//! release build) when given. Targets are interleaved and each is run `--repeat` times (default
//! 3, at 1 and 8 connections, 5 s each); the table reports the median dispatcher CPU µs per
//! call of each and the ratios (this build against the bare server, the baseline against this
//! build, TensorFlow's midpoint against this build).
//!
//! `--fleet` runs the fleet instead: `--fleet-workers` simulated workers (default
//! 10,000) and `--fleet-clients` clients (default 1,000, leased on one `distributed_epoch`
//! iteration) each heartbeating at `--rate` Hz (default 1), spread evenly over the second and
//! multiplexed over `--fleet-conns` keep-alive connections, open loop, for `--duration`
//! seconds (default 20; 300 with `SHARDWISE_LONG=1`, the soak) after `--fleet-warmup`
//! seconds. It reports errors, achieved rate, latency p50/p99/max from each request's due
//! time, the dispatcher's CPU (% of one core) and RSS (every `--report-every` seconds), and
//! this generator's own CPU. See [`shardwise_examples::fleet`].
//!
//! `--modes etcd` (or any list with `etcd`) adds a dispatcher whose journal is in etcd: a 3-member etcd cluster on loopback ports started for each run
//! ([`shardwise_tests::etcd::EtcdCluster`], the tests' helper; Debian's `etcd` on the PATH),
//! the measured dispatcher its leader (`--etcd URLS`: every group commit is one fenced etcd
//! transaction), and `--etcd-standbys` more replicas (default 2) following it as hot standbys.
//! Its table adds the CPU per call of the three etcd members (summed) and of the standbys
//! (summed). `--etcd` is the etcd journal's benchmark: durable get-split at 64 connections with the
//! journal in etcd against the work-dir journal (`--work-dir --fault-tolerant`), the two
//! interleaved `--repeat` times (default 3, 5 s each, fresh servers each run), then a summary
//! of medians and the ratio etcd ÷ work-dir of each round.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// Linux `USER_HZ`: the unit of utime/stime in `/proc/*/stat` (`getconf CLK_TCK`). Assumed,
/// not read (that needs `sysconf`, i.e. libc).
const CLK_TCK: f64 = 100.0;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// `/readyz` is polled at most this many times, this far apart.
const READY_POLLS: u32 = 200;
const READY_POLL_GAP: Duration = Duration::from_millis(25);
/// Elements of the benchmark's range: get-split (split_size 1) never runs out.
const RANGE_STOP: u64 = 1 << 40;

// TensorFlow 2.21 (peer_results.md, "Control plane"): dispatcher CPU µs/call ranges and the
// best calls/s at 8 threads.
const TF_BEST_8_THREADS: f64 = 10_654.0;
const GROUP_COMMIT_CEILING_64: (f64, f64) = (24_000.0, 73_500.0);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Workload {
    Healthz,
    WorkerHeartbeat,
    ClientHeartbeat,
    GetSplit,
}

impl Workload {
    const ALL: [Workload; 4] = [
        Workload::Healthz,
        Workload::WorkerHeartbeat,
        Workload::ClientHeartbeat,
        Workload::GetSplit,
    ];

    fn name(self) -> &'static str {
        match self {
            Workload::Healthz => "healthz",
            Workload::WorkerHeartbeat => "worker_hb",
            Workload::ClientHeartbeat => "client_hb",
            Workload::GetSplit => "get_split",
        }
    }

    /// TensorFlow's matching row: name and dispatcher CPU µs/call range.
    fn tf_row(self) -> (&'static str, f64, f64) {
        match self {
            Workload::Healthz => ("GetVersion", 60.0, 87.0),
            Workload::WorkerHeartbeat => ("WorkerHeartbeat", 63.0, 84.0),
            Workload::ClientHeartbeat => ("ClientHeartbeat", 66.0, 80.0),
            Workload::GetSplit => ("GetSplit", 69.0, 89.0),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Mode {
    Memory,
    FaultTolerant,
    /// The journal in a 3-member etcd cluster (`--etcd`), the measured dispatcher its leader.
    Etcd,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Memory => "in-memory",
            Mode::FaultTolerant => "fault-tolerant (--work-dir, group-commit fsync)",
            Mode::Etcd => "etcd (the journal in a 3-member etcd cluster, one txn per group commit)",
        }
    }
    fn short(self) -> &'static str {
        match self {
            Mode::Memory => "memory",
            Mode::FaultTolerant => "ft",
            Mode::Etcd => "etcd",
        }
    }
}

#[derive(Debug, Clone)]
struct Options {
    shardwise: Option<PathBuf>,
    workers: usize,
    seconds: f64,
    max_requests: u64,
    warmup: u64,
    concurrency: Vec<usize>,
    modes: Vec<Mode>,
    workloads: Vec<Workload>,
    client_threads: usize,
    tmp_dir: PathBuf,
    max_splits: u32,
    /// `--fleet`: the fleet run's options (its dispatcher pid is filled in per mode).
    fleet: Option<shardwise_examples::fleet::Options>,
    /// Extra arguments for `shardwise dispatcher` (A/B runs of its options).
    dispatcher_args: Vec<String>,
    /// `--compare`: the yardstick comparison.
    compare: bool,
    /// `--baseline PATH`: a second `shardwise` binary measured in the same run.
    baseline: Option<PathBuf>,
    /// `--repeat N`: runs of each measurement (medians reported).
    repeat: usize,
    /// `--fleet-compact LIST`: fault-tolerant fleet runs at each `--compact-at-bytes` (and on
    /// `--baseline` too), in one run.
    fleet_compact: Vec<u64>,
    /// `--etcd`: the etcd journal against the work-dir journal, interleaved.
    etcd: bool,
    /// `--etcd-standbys N`: replicas following the etcd mode's leader.
    etcd_standbys: usize,
}

const USAGE: &str = "\
usage: load [OPTIONS]
  --shardwise PATH       the shardwise binary (default: target/release/shardwise next to this
                         example; built with `cargo build --release -p shardwise-gateway` if missing)
  --workers N            workers to register (default 100)
  --seconds S            duration of each run (default 3)
  --max-requests N       at most this many requests per run (default 1000000)
  --warmup N             requests per connection before each timed run (default 20)
  --concurrency LIST     connection counts (default 1,8,64)
  --modes LIST           memory,ft,etcd (default memory,ft; etcd: the journal in a 3-member
                         etcd cluster started for the run, `etcd` on the PATH)
  --workloads LIST       healthz,worker_hb,client_hb,get_split (default all)
  --max-splits N         splits per get_split call (default 1)
  --client-threads N     this generator's tokio worker threads (default 1: current-thread)
  --tmp-dir DIR          where the fault-tolerant work dir is created (default: the system
                         temp dir; it must be a real disk for fsync to mean anything)
  --dispatcher-arg ARG   pass ARG to `shardwise dispatcher` (repeatable)
  --compare              CPU per call against a bare axum server (and --baseline), in one run;
                         defaults: --concurrency 1,8 --seconds 5 --repeat 3
  --baseline PATH        with --compare: also measure this shardwise binary (e.g. main's)
  --repeat N             with --compare: runs of each measurement, medians reported
  --etcd                 the etcd journal against the work-dir journal: modes ft,etcd,
                         interleaved --repeat times; defaults: --workloads get_split
                         --concurrency 64 --seconds 5 --repeat 3
  --etcd-standbys N      replicas following the etcd mode's leader as hot standbys (default 2)
  --bare-server          serve the bare axum yardstick on 127.0.0.1 port 0 and print its address
  --fleet                run the fleet instead (each worker and client heartbeating at --rate):
  --fleet-workers N      simulated workers (default 10000)
  --fleet-clients N      clients on one distributed_epoch iteration (default 1000; 0: no job)
  --fleet-conns N        keep-alive connections the fleet shares (default 64)
  --rate HZ              heartbeats per second of each worker and client (default 1)
  --duration S           measured seconds (default 20; 300 with SHARDWISE_LONG=1)
  --fleet-warmup S       seconds before the measured window (default 5)
  --report-every S       RSS and progress every S seconds (default 10)
  --batch-ms MS          pipelining: each connection sends what is due every MS ms at once
                         (default 0: one request in flight per connection, like real workers)
  --fleet-compact LIST   with --fleet: fault-tolerant runs at each --compact-at-bytes of LIST
                         (bytes, or `off` for 1 TiB), on this build and on --baseline PATH,
                         interleaved, with a summary table of worker heartbeat latency";

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        shardwise: None,
        workers: 100,
        seconds: 3.0,
        max_requests: 1_000_000,
        warmup: 20,
        concurrency: vec![1, 8, 64],
        modes: vec![Mode::Memory, Mode::FaultTolerant],
        workloads: Workload::ALL.to_vec(),
        client_threads: 1,
        tmp_dir: std::env::temp_dir(),
        max_splits: 1,
        fleet: None,
        dispatcher_args: Vec::new(),
        compare: false,
        baseline: None,
        repeat: 0,
        fleet_compact: Vec::new(),
        etcd: false,
        etcd_standbys: 2,
    };
    let mut concurrency_set = false;
    let mut seconds_set = false;
    let mut modes_set = false;
    let mut workloads_set = false;
    let long = std::env::var("SHARDWISE_LONG").is_ok_and(|v| v == "1");
    let mut fleet = shardwise_examples::fleet::Options {
        duration: Duration::from_secs(if long { 300 } else { 20 }),
        ..Default::default()
    };
    let mut is_fleet = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        let num =
            |v: String| v.parse::<u64>().map_err(|_| format!("{flag}: {v:?} is not a number"));
        match flag.as_str() {
            "--shardwise" => o.shardwise = Some(PathBuf::from(value()?)),
            "--workers" => o.workers = num(value()?)? as usize,
            "--seconds" => {
                let v = value()?;
                o.seconds = v.parse().map_err(|_| format!("--seconds: {v:?} is not a number"))?;
                seconds_set = true;
            }
            "--compare" => o.compare = true,
            "--etcd" => o.etcd = true,
            "--etcd-standbys" => {
                o.etcd_standbys = usize::try_from(num(value()?)?)
                    .ok()
                    .filter(|n| *n <= 8)
                    .ok_or("--etcd-standbys must be in 0..=8")?;
            }
            "--baseline" => o.baseline = Some(PathBuf::from(value()?)),
            "--repeat" => o.repeat = num(value()?)? as usize,
            "--max-requests" => o.max_requests = num(value()?)?,
            "--warmup" => o.warmup = num(value()?)?,
            "--client-threads" => o.client_threads = num(value()?)? as usize,
            "--tmp-dir" => o.tmp_dir = PathBuf::from(value()?),
            "--dispatcher-arg" => o.dispatcher_args.push(value()?),
            "--fleet" => is_fleet = true,
            "--fleet-workers" => fleet.workers = num(value()?)? as usize,
            "--fleet-clients" => fleet.clients = num(value()?)? as usize,
            "--fleet-conns" => fleet.connections = num(value()?)? as usize,
            "--rate" => fleet.rate_hz = secs_of(&flag, value()?)?,
            "--duration" => fleet.duration = Duration::from_secs_f64(secs_of(&flag, value()?)?),
            "--fleet-warmup" => {
                fleet.warmup = Duration::from_secs_f64(secs_of(&flag, value()?)?);
            }
            "--report-every" => {
                fleet.report_every = Duration::from_secs_f64(secs_of(&flag, value()?)?);
            }
            "--fleet-compact" => {
                o.fleet_compact = value()?
                    .split(',')
                    .map(|v| match v.trim() {
                        "off" => Ok(FLEET_COMPACT_OFF),
                        n => n.parse().map_err(|_| format!("--fleet-compact: {n:?}")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--batch-ms" => fleet.batch = Duration::from_millis(num(value()?)?),
            "--max-splits" => {
                o.max_splits = u32::try_from(num(value()?)?)
                    .ok()
                    .filter(|n| (1..=1024).contains(n))
                    .ok_or("--max-splits must be in 1..=1024")?;
            }
            "--concurrency" => {
                o.concurrency = value()?
                    .split(',')
                    .map(|c| c.trim().parse::<usize>().map_err(|_| format!("--concurrency: {c:?}")))
                    .collect::<Result<_, _>>()?;
                concurrency_set = true;
            }
            "--modes" => {
                o.modes = value()?
                    .split(',')
                    .map(|m| match m.trim() {
                        "memory" => Ok(Mode::Memory),
                        "ft" => Ok(Mode::FaultTolerant),
                        "etcd" => Ok(Mode::Etcd),
                        other => Err(format!("--modes: {other:?} (memory, ft or etcd)")),
                    })
                    .collect::<Result<_, _>>()?;
                modes_set = true;
            }
            "--workloads" => {
                o.workloads = value()?
                    .split(',')
                    .map(|w| {
                        Workload::ALL
                            .into_iter()
                            .find(|k| k.name() == w.trim())
                            .ok_or_else(|| format!("--workloads: unknown {w:?}"))
                    })
                    .collect::<Result<_, _>>()?;
                workloads_set = true;
            }
            other => return Err(format!("unknown option {other:?}\n{USAGE}")),
        }
    }
    if is_fleet {
        if fleet.connections == 0 || fleet.connections > 4096 {
            return Err("--fleet-conns must be in 1..=4096".into());
        }
        if fleet.workers + fleet.clients == 0 || fleet.workers > 1 << 24 {
            return Err("--fleet-workers must be at most 2^24, and the fleet not empty".into());
        }
        if fleet.report_every.is_zero() || fleet.duration.is_zero() {
            return Err("--duration and --report-every must be positive".into());
        }
        o.fleet = Some(fleet);
    }
    if o.etcd {
        if is_fleet || o.compare {
            return Err("--etcd, --compare and --fleet are different runs".into());
        }
        if o.baseline.is_some() {
            return Err("--baseline goes with --compare or --fleet-compact".into());
        }
        if !modes_set {
            o.modes = vec![Mode::FaultTolerant, Mode::Etcd];
        }
        if !workloads_set {
            o.workloads = vec![Workload::GetSplit];
        }
        if !concurrency_set {
            o.concurrency = vec![64];
        }
        if !seconds_set {
            o.seconds = 5.0;
        }
        if o.repeat == 0 {
            o.repeat = 3;
        }
        if o.repeat > 100 {
            return Err("--repeat must be in 1..=100".into());
        }
    } else if o.compare {
        if is_fleet {
            return Err("--compare and --fleet are different runs".into());
        }
        if !concurrency_set {
            o.concurrency = vec![1, 8];
        }
        if !seconds_set {
            o.seconds = 5.0;
        }
        if o.repeat == 0 {
            o.repeat = 3;
        }
    } else if !o.fleet_compact.is_empty() {
        if !is_fleet || o.repeat > 0 {
            return Err("--fleet-compact goes with --fleet (and --baseline)".into());
        }
    } else if o.baseline.is_some() || o.repeat > 0 {
        return Err("--baseline and --repeat go with --compare (or --fleet-compact, --etcd)".into());
    }
    if o.compare && o.repeat > 100 {
        return Err("--repeat must be in 1..=100".into());
    }
    if o.workers == 0 {
        return Err("--workers must be at least 1".into());
    }
    if !(o.seconds > 0.0 && o.seconds <= 600.0) {
        return Err("--seconds must be in (0, 600]".into());
    }
    if o.concurrency.iter().any(|&c| c == 0 || c > 1024) {
        return Err("--concurrency values must be in 1..=1024".into());
    }
    if o.client_threads == 0 || o.client_threads > 64 {
        return Err("--client-threads must be in 1..=64".into());
    }
    let max_conc = o.concurrency.iter().copied().max().unwrap_or(1);
    if o.workloads.contains(&Workload::GetSplit) && max_conc > o.workers {
        return Err(format!(
            "get_split runs one worker per connection: --workers ({}) must be at least the \
             largest --concurrency ({max_conc})",
            o.workers
        ));
    }
    Ok(o)
}

/// A non-negative finite number of seconds (or Hz) for `flag`.
fn secs_of(flag: &str, v: String) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0 && *x <= 86_400.0)
        .ok_or_else(|| format!("{flag}: {v:?} is not a number of seconds"))
}

// ---------------------------------------------------------------------------------------
// CPU accounting from /proc.

/// utime + stime, in clock ticks, of `/proc/<pid>/stat` (or a task's stat file).
fn ticks_of(stat_path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(stat_path).ok()?;
    // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[derive(Debug, Clone, Copy, Default)]
struct CpuSample {
    /// The whole dispatcher process.
    dispatcher: u64,
    /// Its journal thread (appends and fsyncs; requests run the state machine on the runtime's
    /// threads).
    actor: u64,
    /// This process.
    me: u64,
    /// The etcd members (summed), in etcd mode.
    etcd: u64,
    /// The standby replicas (summed), in etcd mode.
    standbys: u64,
    /// The whole machine: busy (user, nice, system, irq, softirq) ticks of `/proc/stat`.
    machine: u64,
}

/// The processes a run measures.
#[derive(Debug, Clone, Default)]
struct Pids {
    dispatcher: u32,
    etcd: Vec<u32>,
    standbys: Vec<u32>,
    /// The etcd members' client addresses (their `/metrics`).
    etcd_addrs: Vec<SocketAddr>,
}

fn sum_ticks(pids: &[u32]) -> u64 {
    pids.iter().map(|p| ticks_of(Path::new(&format!("/proc/{p}/stat"))).unwrap_or(0)).sum()
}

fn sample_cpu(pids: &Pids) -> CpuSample {
    let pid = pids.dispatcher;
    let dispatcher = ticks_of(Path::new(&format!("/proc/{pid}/stat"))).unwrap_or(0);
    let mut actor = 0;
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for entry in dir.flatten() {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            // `comm` keeps 15 bytes of the thread name `shardwise-journal`.
            if comm.trim_end().starts_with("shardwise-journ") {
                actor += ticks_of(&entry.path().join("stat")).unwrap_or(0);
            }
        }
    }
    let me = ticks_of(Path::new("/proc/self/stat")).unwrap_or(0);
    let machine = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| {
            let cpu = t.lines().next()?.strip_prefix("cpu ")?.to_owned();
            let f: Vec<u64> = cpu.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            // user nice system idle iowait irq softirq steal ...
            Some(f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)?)
        })
        .unwrap_or(0);
    let etcd = sum_ticks(&pids.etcd);
    let standbys = sum_ticks(&pids.standbys);
    CpuSample { dispatcher, actor, me, etcd, standbys, machine }
}

fn ticks_to_micros(ticks: u64) -> f64 {
    ticks as f64 * 1e6 / CLK_TCK
}

// ---------------------------------------------------------------------------------------
// HTTP client: one hyper HTTP/1.1 connection per task, one request in flight.

type Conn = SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> Result<Conn, String> {
    let stream =
        tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| format!("set_nodelay: {e}"))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One request; `Ok((status, body))` or a transport error.
async fn send(
    conn: &mut Conn,
    method: &Method,
    uri: &Uri,
    body: Bytes,
) -> Result<(StatusCode, Bytes), String> {
    let fut = async {
        conn.ready().await.map_err(|e| format!("connection closed: {e}"))?;
        let req = Request::builder()
            .method(method.clone())
            .uri(uri.clone())
            .header(HOST, HeaderValue::from_static("127.0.0.1"))
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(Full::new(body))
            .map_err(|e| format!("request: {e}"))?;
        let res = conn.send_request(req).await.map_err(|e| format!("send: {e}"))?;
        let status = res.status();
        let body = res
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the reply: {e}"))?
            .to_bytes();
        Ok((status, body))
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(r) => r,
        Err(_) => Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
    }
}

/// A setup call that must answer 200 with JSON.
async fn call_json(
    conn: &mut Conn,
    method: Method,
    path: &str,
    body: Value,
) -> Result<Value, String> {
    let uri: Uri = path.parse().map_err(|e| format!("{path}: {e}"))?;
    let payload = if method == Method::GET { Bytes::new() } else { Bytes::from(body.to_string()) };
    let (status, reply) = send(conn, &method, &uri, payload).await?;
    if status != StatusCode::OK {
        return Err(format!(
            "{method} {path} answered {status}: {}",
            String::from_utf8_lossy(&reply)
        ));
    }
    serde_json::from_slice(&reply).map_err(|e| format!("{method} {path}: bad JSON reply: {e}"))
}

fn id_text(v: &Value, field: &str) -> Result<String, String> {
    match &v[field] {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(format!("reply field {field:?} is {other}, not an id (in {v})")),
    }
}

// ---------------------------------------------------------------------------------------
// The dispatcher process.

struct Dispatcher {
    child: Child,
    addr: SocketAddr,
    work_dir: Option<PathBuf>,
    /// Etcd mode: the replicas following this leader (killed after it, before etcd).
    standbys: Vec<Dispatcher>,
    /// Etcd mode: the cluster holding the journal (killed last, its data removed).
    etcd: Option<shardwise_tests::etcd::EtcdCluster>,
}

impl Dispatcher {
    fn pids(&self) -> Pids {
        Pids {
            dispatcher: self.child.id(),
            etcd: self.etcd.as_ref().map(|c| c.pids()).unwrap_or_default(),
            standbys: self.standbys.iter().map(|s| s.child.id()).collect(),
            etcd_addrs: self
                .etcd
                .as_ref()
                .map(|c| {
                    c.client_urls()
                        .iter()
                        .filter_map(|u| u.strip_prefix("http://")?.parse().ok())
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("pid", &self.child.id())
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.work_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn find_or_build_shardwise(opts: &Options) -> Result<PathBuf, String> {
    if let Some(p) = &opts.shardwise {
        return if p.is_file() {
            Ok(p.clone())
        } else {
            Err(format!("{} does not exist", p.display()))
        };
    }
    // This example runs as target/release/examples/load.
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let release = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("cannot find the target dir from {}", exe.display()))?
        .to_path_buf();
    let bin = release.join("shardwise");
    if bin.is_file() {
        return Ok(bin);
    }
    eprintln!(
        "load: {} is missing; building it: cargo build --release -p shardwise-gateway",
        bin.display()
    );
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "-p", "shardwise-gateway"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() || !bin.is_file() {
        return Err(format!(
            "`cargo build --release -p shardwise-gateway` failed ({status}); pass --shardwise PATH"
        ));
    }
    Ok(bin)
}

/// `shardwise dispatcher` on 127.0.0.1 port 0 with `extra`, and only those flags: no
/// SHARDWISE_* from the environment (its log filter aside).
fn dispatcher_command(bin: &Path, extra: &[String]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["dispatcher", "--host", "127.0.0.1", "--port", "0"]);
    cmd.args(extra);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SHARDWISE_") && k != "SHARDWISE_LOG" {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// How long a fresh etcd cluster may take to elect its leader (a busy machine is slow).
const ETCD_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Starts a dispatcher of `mode` (without waiting for it to be ready: see [`start_mode`]); in
/// etcd mode, first a fresh 3-member etcd cluster for its journal.
fn start_dispatcher(
    bin: &Path,
    mode: Mode,
    tmp: &Path,
    extra: &[String],
) -> Result<Dispatcher, String> {
    let mut cmd = dispatcher_command(bin, extra);
    let mut etcd = None;
    let work_dir = match mode {
        Mode::Memory => None,
        Mode::Etcd => {
            let mut cluster = shardwise_tests::etcd::EtcdCluster::start(3);
            cluster.try_ready_within(ETCD_READY_TIMEOUT)?;
            cmd.arg("--etcd").arg(cluster.client_urls().join(","));
            etcd = Some(cluster);
            None
        }
        Mode::FaultTolerant => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let dir = tmp.join(format!("shardwise-load-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            cmd.arg("--work-dir").arg(&dir).arg("--fault-tolerant");
            Some(dir)
        }
    };
    let mut d = spawn_server(cmd, work_dir, DISPATCHER_LISTENING)?;
    d.etcd = etcd;
    Ok(d)
}

/// What `shardwise dispatcher` prints, followed by its URL.
const DISPATCHER_LISTENING: &str = "shardwise dispatcher listening on http://";

/// Starts a dispatcher of `mode` and waits until it serves (`/readyz`); in etcd mode, then
/// `opts.etcd_standbys` more replicas on the same etcd, each waited for until it follows the
/// first (which therefore leads: it is the one measured).
async fn start_mode(bin: &Path, mode: Mode, opts: &Options) -> Result<Dispatcher, String> {
    let mut d = start_dispatcher(bin, mode, &opts.tmp_dir, &opts.dispatcher_args)?;
    wait_ready(d.addr).await?;
    let Some(endpoints) = d.etcd.as_ref().map(|c| c.client_urls().join(",")) else {
        return Ok(d);
    };
    for _ in 0..opts.etcd_standbys {
        let mut cmd = dispatcher_command(bin, &opts.dispatcher_args);
        cmd.arg("--etcd").arg(&endpoints);
        let standby = spawn_server(cmd, None, DISPATCHER_LISTENING)?;
        wait_following(standby.addr, d.addr).await?;
        d.standbys.push(standby);
    }
    Ok(d)
}

/// Waits until the replica at `addr` follows the leader at `leader` (`GET /v1/leader`).
async fn wait_following(addr: SocketAddr, leader: SocketAddr) -> Result<(), String> {
    let uri: Uri = "/v1/leader".parse().map_err(|e| format!("{e}"))?;
    let want = format!("http://{leader}");
    let mut last = String::new();
    for _ in 0..READY_POLLS {
        match connect(addr).await {
            Ok(mut c) => match send(&mut c, &Method::GET, &uri, Bytes::new()).await {
                Ok((StatusCode::OK, b)) => {
                    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                    if v["role"] == "follower" && v["leader"]["url"] == want.as_str() {
                        return Ok(());
                    }
                    last = String::from_utf8_lossy(&b).into_owned();
                }
                Ok((s, b)) => last = format!("{s}: {}", String::from_utf8_lossy(&b)),
                Err(e) => last = e,
            },
            Err(e) => last = e,
        }
        tokio::time::sleep(READY_POLL_GAP).await;
    }
    Err(format!("the standby at {addr} did not follow {want} in time (last: {last})"))
}

/// The bare axum yardstick: this executable with `--bare-server`.
fn start_bare() -> Result<Dispatcher, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--bare-server");
    spawn_server(cmd, None, BARE_LISTENING)
}

/// What `--bare-server` prints, followed by its address.
const BARE_LISTENING: &str = "bare axum listening on http://";

/// Starts `cmd` and waits for the line `listening` + its address on its stdout.
fn spawn_server(
    mut cmd: Command,
    work_dir: Option<PathBuf>,
    listening: &str,
) -> Result<Dispatcher, String> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).stdin(Stdio::null());
    let mut child = cmd.spawn().map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    // Reads (and keeps draining) the dispatcher's stdout.
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                // Nobody listens any more: keep draining so the child never blocks.
                continue;
            }
        }
    });
    let mut d = Dispatcher {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        work_dir,
        standbys: Vec::new(),
        etcd: None,
    };
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .map_err(|_| format!("{cmd:?} did not print its listening line"))?;
        eprintln!("load: [dispatcher] {line}");
        if let Some(url) = line.strip_prefix(listening) {
            d.addr = url.trim().parse().map_err(|e| format!("listening line {line:?}: {e}"))?;
            break;
        }
    }
    // Forward anything else it prints, off the measurement path.
    std::thread::spawn(move || {
        while let Ok(line) = rx.recv() {
            eprintln!("load: [dispatcher] {line}");
        }
    });
    Ok(d)
}

async fn wait_ready(addr: SocketAddr) -> Result<(), String> {
    let uri: Uri = "/readyz".parse().map_err(|e| format!("{e}"))?;
    let mut last = String::new();
    for _ in 0..READY_POLLS {
        match connect(addr).await {
            Ok(mut c) => match send(&mut c, &Method::GET, &uri, Bytes::new()).await {
                Ok((StatusCode::OK, _)) => return Ok(()),
                Ok((s, b)) => last = format!("{s}: {}", String::from_utf8_lossy(&b)),
                Err(e) => last = e,
            },
            Err(e) => last = e,
        }
        tokio::time::sleep(READY_POLL_GAP).await;
    }
    Err(format!("/readyz did not answer 200 in time (last: {last})"))
}

// ---------------------------------------------------------------------------------------
// Setup.

#[derive(Debug)]
struct Fixture {
    iteration_id: String,
    client_id: String,
    /// Per worker: its address and its steady-state heartbeat body.
    workers: Vec<(String, Bytes)>,
    /// Per worker: the split ids (raw JSON list items) to acknowledge next.
    acks: Vec<String>,
}

async fn setup(addr: SocketAddr, workers: usize) -> Result<Fixture, String> {
    let mut c = connect(addr).await?;
    let ds = call_json(
        &mut c,
        Method::POST,
        "/v1/datasets",
        json!({"dataset": {"source": {"range": {"stop": RANGE_STOP}}}}),
    )
    .await?;
    let dataset_id = id_text(&ds, "dataset_id")?;
    let addresses: Vec<String> =
        (0..workers).map(|i| format!("127.0.0.1:{}", 20_000 + i)).collect();
    for a in &addresses {
        call_json(&mut c, Method::POST, "/v1/workers/heartbeat", json!({"worker_address": a}))
            .await?;
    }
    let job = call_json(
        &mut c,
        Method::POST,
        "/v1/jobs",
        json!({"dataset_id": dataset_id, "processing_mode": "distributed_epoch", "split_size": 1}),
    )
    .await?;
    let job_id = id_text(&job, "job_id")?;
    let it = call_json(&mut c, Method::POST, &format!("/v1/jobs/{job_id}/iterations"), json!({}))
        .await?;
    let iteration_id = id_text(&it, "iteration_id")?;
    let client_id = id_text(&it, "client_id")?;
    // Each worker learns its task (steady state from then on: it reports it).
    let mut hb = Vec::with_capacity(workers);
    for a in &addresses {
        let r =
            call_json(&mut c, Method::POST, "/v1/workers/heartbeat", json!({"worker_address": a}))
                .await?;
        let tasks: Vec<Value> = r["new_tasks"]
            .as_array()
            .map(|t| t.iter().map(|t| t["task_id"].clone()).collect())
            .unwrap_or_default();
        if tasks.len() != 1 {
            return Err(format!("worker {a} should have exactly one task, got reply {r}"));
        }
        let body = json!({"worker_address": a, "current_tasks": tasks}).to_string();
        hb.push((a.clone(), Bytes::from(body)));
    }
    // Check the steady state once.
    let (first, body) = &hb[0];
    let uri: Uri = "/v1/workers/heartbeat".parse().map_err(|e| format!("{e}"))?;
    let (s, r) = send(&mut c, &Method::POST, &uri, body.clone()).await?;
    if s != StatusCode::OK || !steady_heartbeat(&r) {
        return Err(format!(
            "worker {first}'s heartbeat is not in steady state: {s} {}",
            String::from_utf8_lossy(&r)
        ));
    }
    Ok(Fixture { iteration_id, client_id, workers: hb, acks: vec![String::new(); workers] })
}

/// The bare server's fixture: steady-state heartbeat bodies of `workers` workers (it keeps no
/// state, so nothing is registered).
fn bare_fixture(workers: usize) -> Fixture {
    let workers = (0..workers)
        .map(|i| {
            let a = format!("127.0.0.1:{}", 20_000 + i);
            let body = json!({"worker_address": a, "current_tasks": [i]}).to_string();
            (a, Bytes::from(body))
        })
        .collect();
    Fixture { iteration_id: String::new(), client_id: String::new(), workers, acks: Vec::new() }
}

fn steady_heartbeat(body: &[u8]) -> bool {
    contains(body, b"\"new_tasks\":[]") && contains(body, b"\"tasks_to_delete\":[]")
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The raw items of the reply's `"split_ids":[...]` (e.g. `"0:17"`), without parsing the
/// whole reply (the generator's CPU counts: it shares the cores).
fn split_ids_raw(body: &[u8]) -> Option<&str> {
    const KEY: &[u8] = b"\"split_ids\":[";
    let start = body.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let len = body[start..].iter().position(|&b| b == b']')?;
    std::str::from_utf8(&body[start..start + len]).ok()
}

// ---------------------------------------------------------------------------------------
// One timed run.

#[derive(Debug)]
struct ConnResult {
    latencies_us: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
    end: Instant,
    /// get_split: (worker index, ids to acknowledge next).
    ack: Option<(usize, String)>,
}

#[derive(Debug, Clone)]
struct RunResult {
    workload: Workload,
    conns: usize,
    calls: u64,
    secs: f64,
    p50: u32,
    p99: u32,
    errors: u64,
    first_error: Option<String>,
    disp_us: f64,
    actor_us: f64,
    me_us: f64,
    /// Etcd mode: the etcd members' CPU per call (summed; NaN in other modes).
    etcd_us: f64,
    /// Etcd mode: the standby replicas' CPU per call (summed; NaN without standbys).
    standbys_us: f64,
    disp_cores: f64,
    /// Cores busy with anything else (other processes: a compiler would skew the run).
    other_cores: f64,
    hit_cap: bool,
    /// Etcd mode: WAL fsyncs of an etcd member during the run (mean over the members) and
    /// their mean duration in seconds (etcd's `etcd_disk_wal_fsync_duration_seconds`).
    wal_fsyncs: Option<(f64, f64)>,
    /// Etcd mode: how much etcd's database in use grew during the run, in bytes.
    etcd_db_growth: Option<f64>,
    /// Seconds the journal's commits took during the run (append, and fsync or the etcd
    /// transaction), from `/metrics`.
    commit_secs: Option<f64>,
    /// Journal commits (fsyncs in fault-tolerant mode) and records during the run, from
    /// `/metrics` (None when the server has no such metric).
    commits: Option<u64>,
    records: Option<u64>,
}

impl RunResult {
    fn rate(&self) -> f64 {
        self.calls as f64 / self.secs
    }
}

struct Shared {
    addr: SocketAddr,
    workload: Workload,
    iteration_id: String,
    client_id: String,
    workers: Vec<(String, Bytes)>,
    issued: AtomicU64,
    max_requests: u64,
    warmup: u64,
    max_splits: u32,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("workload", &self.workload).finish()
    }
}

/// What one request of a connection looks like.
struct Plan {
    method: Method,
    uri: Uri,
}

fn plan(sh: &Shared) -> Result<Plan, String> {
    let (method, path) = match sh.workload {
        Workload::Healthz => (Method::GET, "/healthz".to_string()),
        Workload::WorkerHeartbeat => (Method::POST, "/v1/workers/heartbeat".to_string()),
        Workload::ClientHeartbeat => {
            (Method::POST, format!("/v1/clients/{}/heartbeat", sh.client_id))
        }
        Workload::GetSplit => (Method::POST, format!("/v1/iterations/{}/splits", sh.iteration_id)),
    };
    Ok(Plan { method, uri: path.parse().map_err(|e| format!("{path}: {e}"))? })
}

fn split_body(worker: &str, max_splits: u32, ack: &str) -> Bytes {
    Bytes::from(format!(
        "{{\"worker_address\":\"{worker}\",\"repetition\":0,\"split_provider_index\":0,\
         \"max_splits\":{max_splits},\"acknowledge\":[{ack}]}}"
    ))
}

/// One connection's closed loop. `index` picks its worker(s).
async fn connection(
    sh: Arc<Shared>,
    index: usize,
    conns: usize,
    mut ack: String,
    barrier: Arc<tokio::sync::Barrier>,
    mut start: tokio::sync::watch::Receiver<Option<(Instant, Instant)>>,
) -> ConnResult {
    let mut res = ConnResult {
        latencies_us: Vec::new(),
        errors: 0,
        first_error: None,
        end: Instant::now(),
        ack: None,
    };
    let fail = |res: &mut ConnResult, e: String| {
        res.errors += 1;
        if res.first_error.is_none() {
            res.first_error = Some(e);
        }
    };
    let nworkers = sh.workers.len();
    let mut step = 0usize;
    let mut conn = None;
    let mut plan_ = None;
    match (connect(sh.addr).await, plan(&sh)) {
        (Ok(c), Ok(p)) => {
            conn = Some(c);
            plan_ = Some(p);
        }
        (Err(e), _) | (_, Err(e)) => fail(&mut res, e),
    }
    // One request; Ok(()) or the error text.
    macro_rules! one {
        ($conn:expr, $plan:expr) => {{
            let body = match sh.workload {
                Workload::Healthz => Bytes::new(),
                Workload::ClientHeartbeat => Bytes::from_static(b"{}"),
                Workload::WorkerHeartbeat => {
                    let w = (index + step * conns) % nworkers;
                    sh.workers[w].1.clone()
                }
                Workload::GetSplit => split_body(&sh.workers[index].0, sh.max_splits, &ack),
            };
            step += 1;
            match send($conn, &$plan.method, &$plan.uri, body).await {
                Err(e) => Err((e, true)),
                Ok((status, reply)) if status != StatusCode::OK => {
                    Err((format!("{status}: {}", String::from_utf8_lossy(&reply)), false))
                }
                Ok((_, reply)) => match sh.workload {
                    Workload::WorkerHeartbeat if !steady_heartbeat(&reply) => Err((
                        format!(
                            "heartbeat not in steady state: {}",
                            String::from_utf8_lossy(&reply)
                        ),
                        false,
                    )),
                    Workload::GetSplit => match split_ids_raw(&reply) {
                        Some(ids) if !ids.is_empty() && ids != ack => {
                            ack.clear();
                            ack.push_str(ids);
                            Ok(())
                        }
                        _ => Err((
                            format!(
                                "get-split gave no new split (acknowledged [{ack}]): {}",
                                String::from_utf8_lossy(&reply)
                            ),
                            false,
                        )),
                    },
                    _ => Ok(()),
                },
            }
        }};
    }
    // Warm-up (not measured).
    if let (Some(c), Some(p)) = (conn.as_mut(), plan_.as_ref()) {
        for _ in 0..sh.warmup {
            if let Err((e, fatal)) = one!(c, p) {
                fail(&mut res, format!("warm-up: {e}"));
                if fatal {
                    conn = None;
                }
                break;
            }
        }
    }
    barrier.wait().await;
    let Ok(times) = start.wait_for(Option::is_some).await.map(|v| *v) else {
        res.end = Instant::now();
        return res;
    };
    let Some((_, deadline)) = times else { unreachable!("waited for Some") };
    if res.errors == 0
        && let (Some(c), Some(p)) = (conn.as_mut(), plan_.as_ref())
    {
        loop {
            if Instant::now() >= deadline
                || sh.issued.fetch_add(1, Ordering::Relaxed) >= sh.max_requests
            {
                break;
            }
            let t0 = Instant::now();
            let r = one!(c, p);
            let us = u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX);
            match r {
                Ok(()) => res.latencies_us.push(us),
                Err((e, fatal)) => {
                    fail(&mut res, e);
                    if fatal {
                        break;
                    }
                }
            }
        }
    }
    res.end = Instant::now();
    if sh.workload == Workload::GetSplit {
        res.ack = Some((index, ack));
    }
    res
}

/// The dispatcher's Prometheus counters (`name value` lines).
async fn scrape_metrics(conn: &mut Option<Conn>) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    let (Some(c), Ok(uri)) = (conn.as_mut(), "/metrics".parse::<Uri>()) else { return out };
    if let Ok((StatusCode::OK, body)) = send(c, &Method::GET, &uri, Bytes::new()).await {
        for line in String::from_utf8_lossy(&body).lines().filter(|l| !l.starts_with('#')) {
            if let Some((k, v)) = line.split_once(' ')
                && let Ok(v) = v.trim().parse::<f64>()
            {
                out.insert(k.to_owned(), v);
            }
        }
    }
    out
}

/// The etcd members' WAL fsyncs so far, summed: (count, seconds) of etcd's histogram
/// `etcd_disk_wal_fsync_duration_seconds` on each member's `/metrics`; and the largest
/// member's database in use (`etcd_mvcc_db_total_size_in_use_in_bytes`: etcd keeps every
/// revision until its history is compacted). None without members or when one does not answer.
async fn wal_fsyncs(members: &[SocketAddr]) -> Option<(f64, f64, f64)> {
    if members.is_empty() {
        return None;
    }
    let uri: Uri = "/metrics".parse().ok()?;
    let (mut count, mut secs, mut db) = (0.0, 0.0, 0.0_f64);
    for &m in members {
        let mut c = connect(m).await.ok()?;
        let (status, body) = send(&mut c, &Method::GET, &uri, Bytes::new()).await.ok()?;
        if status != StatusCode::OK {
            return None;
        }
        let text = String::from_utf8_lossy(&body);
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
        };
        count += value("etcd_disk_wal_fsync_duration_seconds_count")?;
        secs += value("etcd_disk_wal_fsync_duration_seconds_sum")?;
        db = db.max(value("etcd_mvcc_db_total_size_in_use_in_bytes")?);
    }
    Some((count, secs, db))
}

fn percentile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

async fn run_one(
    fx: &mut Fixture,
    addr: SocketAddr,
    pids: &Pids,
    workload: Workload,
    conns: usize,
    opts: &Options,
) -> RunResult {
    let sh = Arc::new(Shared {
        addr,
        workload,
        iteration_id: fx.iteration_id.clone(),
        client_id: fx.client_id.clone(),
        workers: fx.workers.clone(),
        issued: AtomicU64::new(0),
        max_requests: opts.max_requests,
        warmup: opts.warmup,
        max_splits: opts.max_splits,
    });
    let mut metrics_conn = connect(addr).await.ok();
    let barrier = Arc::new(tokio::sync::Barrier::new(conns + 1));
    let (start_tx, start_rx) = tokio::sync::watch::channel(None);
    let mut tasks = Vec::with_capacity(conns);
    for i in 0..conns {
        let ack = if workload == Workload::GetSplit { fx.acks[i].clone() } else { String::new() };
        tasks.push(tokio::spawn(connection(
            sh.clone(),
            i,
            conns,
            ack,
            barrier.clone(),
            start_rx.clone(),
        )));
    }
    // Every connection is up and warm (bounded by the request timeout per warm-up request).
    barrier.wait().await;
    let m0 = scrape_metrics(&mut metrics_conn).await;
    let w0 = wal_fsyncs(&pids.etcd_addrs).await;
    let before = sample_cpu(pids);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(opts.seconds);
    let _ = start_tx.send(Some((start, deadline)));
    let mut lat = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    let mut end = start;
    for t in tasks {
        match t.await {
            Ok(r) => {
                lat.extend_from_slice(&r.latencies_us);
                errors += r.errors;
                if first_error.is_none() {
                    first_error = r.first_error;
                }
                end = end.max(r.end);
                if let Some((i, ack)) = r.ack {
                    fx.acks[i] = ack;
                }
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert_with(|| format!("connection task failed: {e}"));
            }
        }
    }
    let after = sample_cpu(pids);
    let w1 = wal_fsyncs(&pids.etcd_addrs).await;
    let m1 = scrape_metrics(&mut metrics_conn).await;
    let delta_f = |k: &str| match (m0.get(k), m1.get(k)) {
        (Some(a), Some(b)) => Some((b - a).max(0.0)),
        _ => None,
    };
    let delta = |k: &str| delta_f(k).map(|d| d as u64);
    let secs = end.duration_since(start).as_secs_f64().max(1e-9);
    lat.sort_unstable();
    let calls = lat.len() as u64;
    let per = |a: u64, b: u64| {
        if calls == 0 { f64::NAN } else { ticks_to_micros(a.saturating_sub(b)) / calls as f64 }
    };
    RunResult {
        workload,
        conns,
        calls,
        secs,
        p50: percentile(&lat, 0.50),
        p99: percentile(&lat, 0.99),
        errors,
        first_error,
        disp_us: per(after.dispatcher, before.dispatcher),
        actor_us: per(after.actor, before.actor),
        me_us: per(after.me, before.me),
        etcd_us: if pids.etcd.is_empty() { f64::NAN } else { per(after.etcd, before.etcd) },
        standbys_us: if pids.standbys.is_empty() {
            f64::NAN
        } else {
            per(after.standbys, before.standbys)
        },
        disp_cores: ticks_to_micros(after.dispatcher.saturating_sub(before.dispatcher))
            / 1e6
            / secs,
        other_cores: ticks_to_micros(after.machine.saturating_sub(before.machine).saturating_sub(
            after.dispatcher.saturating_sub(before.dispatcher)
                + after.me.saturating_sub(before.me)
                + after.etcd.saturating_sub(before.etcd)
                + after.standbys.saturating_sub(before.standbys),
        )) / 1e6
            / secs,
        hit_cap: sh.issued.load(Ordering::Relaxed) >= opts.max_requests,
        wal_fsyncs: match (w0, w1) {
            (Some((n0, s0, _)), Some((n1, s1, _))) if n1 > n0 => {
                Some(((n1 - n0) / pids.etcd_addrs.len() as f64, (s1 - s0) / (n1 - n0)))
            }
            _ => None,
        },
        etcd_db_growth: match (w0, w1) {
            (Some((_, _, d0)), Some((_, _, d1))) => Some(d1 - d0),
            _ => None,
        },
        commit_secs: delta_f("shardwise_journal_commit_duration_seconds_sum"),
        commits: delta("shardwise_journal_commits_total"),
        records: delta("shardwise_journal_records_total"),
    }
}

// ---------------------------------------------------------------------------------------
// Output.

fn fmt_int(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let s = format!("{:.0}", x);
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    format!("{sign}{out}")
}

fn fmt_f(x: f64, prec: usize) -> String {
    if x.is_finite() { format!("{x:.prec$}") } else { "-".into() }
}

fn print_table(mode: Mode, results: &[RunResult]) {
    println!("\n### {}\n", mode.name());
    // Etcd mode: two more columns, the etcd members' and the standbys' CPU per call.
    let etcd = mode == Mode::Etcd;
    println!(
        "| workload | conns | calls | calls/s | p50 µs | p99 µs | errors | dispatcher CPU µs/call \
         | of which journal thread | dispatcher cores busy | load generator CPU µs/call \
         | other processes, cores | journal commits | records per commit |{}",
        if etcd {
            " journal commit mean µs | etcd CPU µs/call (3 members) | standbys CPU µs/call \
             | etcd WAL fsyncs/s per member | etcd WAL fsync mean µs |"
        } else {
            ""
        }
    );
    println!(
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|{}",
        if etcd { "---:|---:|---:|---:|---:|" } else { "" }
    );
    for r in results {
        let extra = if etcd {
            let (rate, mean) = wal_figures(r);
            format!(
                " {} | {} | {} | {} | {} |",
                fmt_int(commit_mean_us(r)),
                fmt_f(r.etcd_us, 1),
                fmt_f(r.standbys_us, 1),
                fmt_int(rate),
                fmt_int(mean)
            )
        } else {
            String::new()
        };
        println!(
            "| {} | {} | {}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |{extra}",
            r.workload.name(),
            r.conns,
            fmt_int(r.calls as f64),
            if r.hit_cap { " (cap)" } else { "" },
            fmt_int(r.rate()),
            r.p50,
            r.p99,
            r.errors,
            fmt_f(r.disp_us, 1),
            fmt_f(r.actor_us, 1),
            fmt_f(r.disp_cores, 2),
            fmt_f(r.me_us, 1),
            fmt_f(r.other_cores, 2),
            r.commits.filter(|&c| c > 0).map_or_else(|| "-".to_string(), |c| fmt_int(c as f64)),
            match (r.commits, r.records) {
                (Some(c), Some(n)) if c > 0 => fmt_f(n as f64 / c as f64, 1),
                _ => "-".to_string(),
            },
        );
    }
    for r in results.iter().filter(|r| r.errors > 0) {
        println!(
            "\n{} x {} conns: {} errors; first: {}",
            r.workload.name(),
            r.conns,
            r.errors,
            r.first_error.as_deref().unwrap_or("?")
        );
    }
}

/// The mean duration of a journal commit during the run, in µs (NaN when not measured).
fn commit_mean_us(r: &RunResult) -> f64 {
    match (r.commit_secs, r.commits) {
        (Some(secs), Some(n)) if n > 0 => secs / n as f64 * 1e6,
        _ => f64::NAN,
    }
}

/// Etcd mode: WAL fsyncs a second of a member (mean over the members) and their mean duration
/// in µs (NaN when not measured).
fn wal_figures(r: &RunResult) -> (f64, f64) {
    r.wal_fsyncs.map_or((f64::NAN, f64::NAN), |(n, mean)| (n / r.secs, mean * 1e6))
}

fn met(ok: bool) -> &'static str {
    if ok { "**met**" } else { "**missed**" }
}

/// Other processes kept the machine busy during the run: its figures are skewed.
const BUSY_MACHINE: f64 = 0.2;

fn busy_note(r: &RunResult) -> String {
    if r.other_cores > BUSY_MACHINE {
        format!(" (machine busy: {:.2} other cores)", r.other_cores)
    } else {
        String::new()
    }
}

fn print_goals(all: &HashMap<&'static str, Vec<RunResult>>, opts: &Options) {
    println!("\n## Goals against TensorFlow 2.21 (peer_results.md)\n");
    println!(
        "1. Dispatcher CPU per call at most a fifth of TensorFlow's (midpoint of the matching \
         row's range; TensorFlow measured at 1 and 8 client threads, its fault-tolerant journal \
         unsynced; healthz is compared with GetVersion as the do-nothing baseline):\n"
    );
    println!(
        "| mode | workload | TF row (µs/call, midpoint) | conns | Shardwise µs/call | ratio | goal <= 0.20 |"
    );
    println!("|---|---|---|---:|---:|---:|---|");
    for mode in &opts.modes {
        let Some(rs) = all.get(mode.short()) else { continue };
        for r in rs {
            let (row, lo, hi) = r.workload.tf_row();
            let mid = (lo + hi) / 2.0;
            let ratio = r.disp_us / mid;
            println!(
                "| {} | {} | {row} ({lo:.0}-{hi:.0}, {mid:.1}) | {} | {} | {} | {}{} |",
                mode.short(),
                r.workload.name(),
                r.conns,
                fmt_f(r.disp_us, 1),
                fmt_f(ratio, 3),
                met(ratio <= 0.2),
                busy_note(r)
            );
        }
    }
    let goal2 = 5.0 * TF_BEST_8_THREADS;
    println!(
        "\n2. In-memory calls/s at 8 connections at least 5x TensorFlow's best \
         ({} /s at 8 threads), i.e. >= {} /s:\n",
        fmt_int(TF_BEST_8_THREADS),
        fmt_int(goal2)
    );
    println!(
        "| workload | calls/s at 8 conns | x TF best | goal >= 5x | dispatcher-only bound \
         (2 cores / dispatcher CPU per call) |"
    );
    println!("|---|---:|---:|---|---:|");
    if let Some(rs) = all.get(Mode::Memory.short()) {
        for r in rs.iter().filter(|r| r.conns == 8) {
            let x = r.rate() / TF_BEST_8_THREADS;
            let goal = if r.workload == Workload::Healthz { "(baseline)" } else { met(x >= 5.0) };
            println!(
                "| {} | {} | {} | {goal}{} | {} /s |",
                r.workload.name(),
                fmt_int(r.rate()),
                fmt_f(x, 2),
                busy_note(r),
                fmt_int(2e6 / r.disp_us)
            );
        }
    }
    let (lo, hi) = GROUP_COMMIT_CEILING_64;
    println!(
        "\n3. Fault-tolerant get-split at 64 connections at least half the group-commit ceiling \
         measured on this machine ({}-{} req/s at 64 conns), i.e. >= {} /s (half the low end; \
         {} /s is half the high end):\n",
        fmt_int(lo),
        fmt_int(hi),
        fmt_int(lo / 2.0),
        fmt_int(hi / 2.0)
    );
    if let Some(r) = all
        .get(Mode::FaultTolerant.short())
        .and_then(|rs| rs.iter().find(|r| r.workload == Workload::GetSplit && r.conns == 64))
    {
        println!(
            "fault-tolerant get_split at 64 conns: {} /s = {} of half the low end, {} of half the \
             high end: {}{}",
            fmt_int(r.rate()),
            fmt_f(r.rate() / (lo / 2.0), 2),
            fmt_f(r.rate() / (hi / 2.0), 2),
            met(r.rate() >= lo / 2.0),
            busy_note(r)
        );
    } else {
        println!("(not run: needs --modes ft, --workloads get_split and --concurrency 64)");
    }
}

// ---------------------------------------------------------------------------------------

async fn bench_mode(bin: &Path, mode: Mode, opts: &Options) -> Result<Vec<RunResult>, String> {
    let d = start_mode(bin, mode, opts).await?;
    bench_server(d, mode.short(), &opts.workloads, false, opts).await
}

/// Runs `workloads` at each concurrency against a started server (`bare`: the bare axum
/// yardstick, which needs no setup), then stops it.
async fn bench_server(
    d: Dispatcher,
    label: &str,
    workloads: &[Workload],
    bare: bool,
    opts: &Options,
) -> Result<Vec<RunResult>, String> {
    let pids = d.pids();
    let pid = pids.dispatcher;
    wait_ready(d.addr).await?;
    // healthz alone needs no dispatcher state (and works against any server that answers
    // /readyz and /healthz, e.g. a trivial axum server as a baseline of the HTTP stack).
    let mut fx = if bare {
        bare_fixture(opts.workers)
    } else if workloads.iter().all(|w| *w == Workload::Healthz) {
        Fixture {
            iteration_id: String::new(),
            client_id: String::new(),
            workers: Vec::new(),
            acks: Vec::new(),
        }
    } else {
        setup(d.addr, opts.workers).await?
    };
    eprintln!(
        "load: {label} server pid {pid} at {}: {} workers, iteration {}, client {}",
        d.addr, opts.workers, fx.iteration_id, fx.client_id
    );
    if !pids.etcd.is_empty() {
        eprintln!(
            "load: {label} etcd members (pids {:?}) at {:?}; standbys (pids {:?}) at {:?}",
            pids.etcd,
            pids.etcd_addrs,
            pids.standbys,
            d.standbys.iter().map(|s| s.addr).collect::<Vec<_>>()
        );
    }
    let mut results = Vec::new();
    for &w in workloads {
        for &c in &opts.concurrency {
            let r = run_one(&mut fx, d.addr, &pids, w, c, opts).await;
            eprintln!(
                "load: {label} {} x {c}: {} calls/s, p50 {} µs, p99 {} µs, {} errors, server {} µs/call",
                w.name(),
                fmt_int(r.rate()),
                r.p50,
                r.p99,
                r.errors,
                fmt_f(r.disp_us, 1)
            );
            results.push(r);
        }
    }
    if let Some(dir) = &d.work_dir {
        let bytes = tree_bytes(dir, 3);
        eprintln!("load: journal in {}: {} bytes", dir.display(), fmt_int(bytes as f64));
    }
    // Metrics of the run (journal commits vs records tell the group-commit batch size).
    if let Ok(mut c) = connect(d.addr).await
        && let Ok(uri) = "/metrics".parse::<Uri>()
        && let Ok((StatusCode::OK, body)) = send(&mut c, &Method::GET, &uri, Bytes::new()).await
    {
        let text = String::from_utf8_lossy(&body);
        let vals: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with('#') && l.starts_with("shardwise_"))
            .map(str::to_owned)
            .collect();
        eprintln!("load: {label} /metrics: {}", vals.join("; "));
    }
    drop(d);
    Ok(results)
}

/// The fleet against a fresh dispatcher of `mode`: its report as Markdown, and whether it
/// had errors.
async fn fleet_mode(bin: &Path, mode: Mode, opts: &Options) -> Result<(String, bool), String> {
    let Some(fleet) = &opts.fleet else { return Err("not a fleet run".into()) };
    let d = start_mode(bin, mode, opts).await?;
    let fleet =
        shardwise_examples::fleet::Options { dispatcher_pid: Some(d.child.id()), ..fleet.clone() };
    let report = shardwise_examples::fleet::run(d.addr, &fleet).await?;
    let mut out = format!("\n### {}\n\n", mode.name());
    out.push_str(&report.render(&fleet));
    out.push_str(&format!(
        "dispatcher RSS (s: kB): {}\nload generator RSS at the end: {} kB\n",
        report.rss.iter().map(|(t, kb)| format!("{t:.0}: {kb}")).collect::<Vec<_>>().join(", "),
        report.generator_rss_kb.unwrap_or(0)
    ));
    drop(d);
    Ok((out, report.errors > 0 || report.behind > 0))
}

/// Registrations a second during `--fleet-compact` runs.
const FLEET_CHURN_HZ: u32 = 20;

/// `--fleet-compact off`: a threshold no run reaches.
const FLEET_COMPACT_OFF: u64 = 1 << 40;

/// `--fleet-compact`: the fault-tolerant fleet at each compaction threshold, on this build and
/// the baseline, interleaved; prints each run's report, then one table of the worker
/// heartbeats' latency. True when a run failed or had errors.
async fn fleet_compact_runs(bin: &Path, opts: &Options) -> bool {
    let mut bins = vec![("this build", bin.to_path_buf())];
    if let Some(b) = &opts.baseline {
        bins.push(("baseline", b.clone()));
    }
    let mut rows = Vec::new();
    let mut failed = false;
    for &at in &opts.fleet_compact {
        for (name, b) in &bins {
            let setting =
                if at == FLEET_COMPACT_OFF { "off".to_owned() } else { format!("{at} bytes") };
            let mut o = opts.clone();
            o.dispatcher_args.extend(["--compact-at-bytes".to_owned(), at.to_string()]);
            println!("\n## {name} ({}), compaction at {setting}", b.display());
            let Some(fleet) = &o.fleet else { return true };
            let d = match start_dispatcher(b, Mode::FaultTolerant, &o.tmp_dir, &o.dispatcher_args) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("load: {name} fleet failed: {e}");
                    failed = true;
                    continue;
                }
            };
            if let Err(e) = wait_ready(d.addr).await {
                eprintln!("load: {name} fleet failed: {e}");
                failed = true;
                continue;
            }
            let fleet = shardwise_examples::fleet::Options {
                dispatcher_pid: Some(d.child.id()),
                ..fleet.clone()
            };
            // The fleet's steady heartbeats write nothing: a trickle of registrations
            // (FLEET_CHURN_HZ a second) gives the journal records, so compaction runs.
            let addr = d.addr;
            let churn = tokio::spawn(async move {
                let Ok(mut conn) = connect(addr).await else { return 0u64 };
                let mut tick = tokio::time::interval(Duration::from_secs(1) / FLEET_CHURN_HZ);
                let mut n = 0u64;
                loop {
                    tick.tick().await;
                    let body =
                        json!({"worker_address": format!("churn-{n}:1"), "current_tasks": []});
                    if call_json(&mut conn, Method::POST, "/v1/workers/heartbeat", body)
                        .await
                        .is_err()
                    {
                        return n;
                    }
                    n += 1;
                }
            });
            let result = shardwise_examples::fleet::run(d.addr, &fleet).await;
            churn.abort();
            match result {
                Ok(r) => {
                    println!("{}", r.render(&fleet));
                    failed |= r.errors > 0 || r.behind > 0;
                    rows.push(format!(
                        "| {name} | {setting} | {} | {} | {} | {} | {} | {} |",
                        r.worker.p50,
                        r.worker.p99,
                        r.worker.max,
                        r.client.p99,
                        r.client.max,
                        r.errors
                    ));
                }
                Err(e) => {
                    eprintln!("load: {name} fleet failed: {e}");
                    failed = true;
                }
            }
            drop(d);
        }
    }
    println!(
        "\n## Summary (fault-tolerant)\n\n| binary | compaction | worker p50 µs | worker p99 µs \
         | worker max µs | client p99 µs | client max µs | errors |\n|---|---|---|---|---|---|\
         ---|---|"
    );
    for row in rows {
        println!("{row}");
    }
    failed
}

// ---------------------------------------------------------------------------------------
// --compare: the REST front's cost per call against a bare axum server and a baseline binary.

/// One measured target of `--compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Target {
    /// The bare axum server (`--bare-server`).
    Bare,
    /// `--baseline PATH`.
    Baseline,
    /// This build's `shardwise` (`--shardwise PATH` or next to this executable).
    Current,
}

/// Median of the finite values (NaN when there are none).
fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

type Samples = HashMap<(Target, &'static str, &'static str, usize), Vec<RunResult>>;

/// Every target, interleaved, `opts.repeat` times.
async fn compare_runs(bin: &Path, opts: &Options) -> Samples {
    let mut samples: Samples = HashMap::new();
    let keep = |samples: &mut Samples, t: Target, mode: &'static str, rs: Vec<RunResult>| {
        for r in rs {
            samples.entry((t, mode, r.workload.name(), r.conns)).or_default().push(r);
        }
    };
    // The bare server has the two shapes of call: a GET of a small JSON object, and a JSON
    // body decoded and answered.
    let bare_workloads = [Workload::Healthz, Workload::WorkerHeartbeat];
    for rep in 1..=opts.repeat {
        eprintln!("load: --compare round {rep} of {}", opts.repeat);
        match start_bare() {
            Ok(d) => match bench_server(d, "bare", &bare_workloads, true, opts).await {
                Ok(rs) => keep(&mut samples, Target::Bare, "-", rs),
                Err(e) => eprintln!("load: bare server failed: {e}"),
            },
            Err(e) => eprintln!("load: bare server failed to start: {e}"),
        }
        for &mode in &opts.modes {
            let mut targets = vec![(Target::Current, bin.to_path_buf())];
            if let Some(b) = &opts.baseline {
                // Alternate which goes first: neither always runs on a warmer machine.
                let at = if rep % 2 == 1 { 0 } else { 1 };
                targets.insert(at, (Target::Baseline, b.clone()));
            }
            for (t, path) in targets {
                match bench_mode(&path, mode, opts).await {
                    Ok(rs) => keep(&mut samples, t, mode.short(), rs),
                    Err(e) => eprintln!("load: {t:?} {} failed: {e}", mode.short()),
                }
            }
        }
    }
    samples
}

/// The comparison table (Markdown); `true` when a run had errors or a target is missing.
fn print_compare(samples: &Samples, opts: &Options) -> bool {
    let med = |t: Target, mode: &'static str, w: &'static str, c: usize| -> (f64, usize, u64) {
        samples.get(&(t, mode, w, c)).map_or((f64::NAN, 0, 0), |rs| {
            let us: Vec<f64> = rs.iter().map(|r| r.disp_us).collect();
            (median(&us), rs.len(), rs.iter().map(|r| r.errors).sum())
        })
    };
    let mut failed = false;
    let ratio = |a: f64, b: f64| fmt_f(a / b, 2);
    println!(
        "\n## Dispatcher CPU µs per call: bare axum, baseline and this build, in one run\n\n\
         Medians of {} runs of {} s each (interleaved). The bare axum row of `healthz` is its \
         `GET /healthz`; of the JSON workloads, its `POST /v1/workers/heartbeat` (decode a \
         body, answer JSON). TensorFlow: midpoint of peer_results.md's matching row.\n",
        opts.repeat, opts.seconds
    );
    println!(
        "| mode | workload | conns | bare axum | baseline | this build | this / bare | \
         baseline / this | TF midpoint / this |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for &mode in &opts.modes {
        for &w in &opts.workloads {
            for &c in &opts.concurrency {
                let bare_w = if w == Workload::Healthz { "healthz" } else { "worker_hb" };
                let (bare, nb, eb) = med(Target::Bare, "-", bare_w, c);
                let (base, _, ea) = med(Target::Baseline, mode.short(), w.name(), c);
                let (this, nt, et) = med(Target::Current, mode.short(), w.name(), c);
                failed |= eb + ea + et > 0 || nb == 0 || nt == 0;
                let (_, lo, hi) = w.tf_row();
                println!(
                    "| {} | {} | {c} | {} | {} | {} | {} | {} | {} |",
                    mode.short(),
                    w.name(),
                    fmt_f(bare, 1),
                    if opts.baseline.is_some() { fmt_f(base, 1) } else { "-".into() },
                    fmt_f(this, 1),
                    ratio(this, bare),
                    if opts.baseline.is_some() { ratio(base, this) } else { "-".into() },
                    ratio((lo + hi) / 2.0, this),
                );
            }
        }
    }
    println!("\nEvery run (µs per call; calls/s; errors):\n");
    let mut keys: Vec<_> = samples.keys().collect();
    keys.sort_by_key(|k| (format!("{:?}", k.0), k.1, k.2, k.3));
    for k in keys {
        let rs = &samples[k];
        let runs: Vec<String> = rs
            .iter()
            .map(|r| {
                format!("{} ({} /s, {} err)", fmt_f(r.disp_us, 1), fmt_int(r.rate()), r.errors)
            })
            .collect();
        println!("- {:?} {} {} x {}: {}", k.0, k.1, k.2, k.3, runs.join("; "));
        for r in rs.iter().filter(|r| r.errors > 0) {
            println!("  first error: {}", r.first_error.as_deref().unwrap_or("?"));
        }
    }
    failed
}

// ---------------------------------------------------------------------------------------
// --etcd: the journal in etcd against the work-dir journal.

/// Every run of `--etcd`, by (mode, workload, conns): (round, result).
type EtcdSamples = HashMap<(Mode, Workload, usize), Vec<(usize, RunResult)>>;

/// Every mode, `opts.repeat` rounds, the order rotated each round (no mode always runs first on
/// a fresh machine or last on a tired one); each run on fresh servers (and a fresh etcd
/// cluster). Prints each run's table; `true` when one failed or had errors.
async fn etcd_runs(bin: &Path, opts: &Options) -> (EtcdSamples, bool) {
    let mut samples = EtcdSamples::new();
    let mut failed = false;
    for round in 1..=opts.repeat {
        let mut modes = opts.modes.clone();
        let shift = (round - 1) % modes.len().max(1);
        modes.rotate_left(shift);
        println!("\n## Round {round} of {}", opts.repeat);
        for mode in modes {
            eprintln!("load: --etcd round {round}: {}", mode.short());
            match bench_mode(bin, mode, opts).await {
                Ok(rs) => {
                    print_table(mode, &rs);
                    for r in rs {
                        failed |= r.errors > 0;
                        samples.entry((mode, r.workload, r.conns)).or_default().push((round, r));
                    }
                }
                Err(e) => {
                    eprintln!("load: round {round}: {} failed: {e}", mode.short());
                    println!("\n{}: failed: {e}", mode.name());
                    failed = true;
                }
            }
        }
    }
    (samples, failed)
}

/// The summary of `--etcd`: medians per mode, then etcd ÷ work-dir per round.
fn print_etcd_summary(samples: &EtcdSamples, opts: &Options) {
    let med = |rs: &[(usize, RunResult)], f: &dyn Fn(&RunResult) -> f64| {
        median(&rs.iter().map(|(_, r)| f(r)).collect::<Vec<_>>())
    };
    let per_commit = |r: &RunResult| match (r.commits, r.records) {
        (Some(c), Some(n)) if c > 0 => n as f64 / c as f64,
        _ => f64::NAN,
    };
    println!(
        "\n## Summary: the journal in etcd against the work-dir journal\n\n\
         Medians of {} interleaved runs of {} s each (fresh servers, and a fresh 3-member etcd \
         cluster, for each run); the etcd leader with {} standby replica(s). CPU per call: \
         utime+stime of the process(es) over the calls answered.\n",
        opts.repeat, opts.seconds, opts.etcd_standbys
    );
    println!(
        "| mode | workload | conns | runs | calls/s | p50 µs | p99 µs | errors | dispatcher CPU \
         µs/call | etcd CPU µs/call (3 members) | standbys CPU µs/call | records per commit | \
         commits/s | journal commit mean µs | etcd WAL fsyncs/s per member | etcd WAL fsync mean \
         µs | etcd db growth, bytes/call |"
    );
    println!(
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for &mode in &opts.modes {
        for &w in &opts.workloads {
            for &c in &opts.concurrency {
                let Some(rs) = samples.get(&(mode, w, c)) else { continue };
                println!(
                    "| {} | {} | {c} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    mode.short(),
                    w.name(),
                    rs.len(),
                    fmt_int(med(rs, &RunResult::rate)),
                    fmt_int(med(rs, &|r| f64::from(r.p50))),
                    fmt_int(med(rs, &|r| f64::from(r.p99))),
                    rs.iter().map(|(_, r)| r.errors).sum::<u64>(),
                    fmt_f(med(rs, &|r| r.disp_us), 1),
                    fmt_f(med(rs, &|r| r.etcd_us), 1),
                    fmt_f(med(rs, &|r| r.standbys_us), 1),
                    fmt_f(med(rs, &per_commit), 1),
                    fmt_int(med(rs, &|r| r.commits.map_or(f64::NAN, |c| c as f64 / r.secs))),
                    fmt_int(med(rs, &commit_mean_us)),
                    fmt_int(med(rs, &|r| wal_figures(r).0)),
                    fmt_int(med(rs, &|r| wal_figures(r).1)),
                    fmt_int(med(rs, &|r| {
                        r.etcd_db_growth.map_or(f64::NAN, |b| b / r.calls.max(1) as f64)
                    })),
                );
            }
        }
    }
    if !(opts.modes.contains(&Mode::Etcd) && opts.modes.contains(&Mode::FaultTolerant)) {
        return;
    }
    println!(
        "\n### etcd ÷ work-dir (fault-tolerant), each round's pair\n\n\
         calls/s and p50: etcd's figure over the work-dir's. CPU: the etcd-mode dispatcher's \
         over the work-dir dispatcher's; with etcd: the dispatcher and the 3 etcd members \
         together (standbys left out) over the work-dir dispatcher.\n"
    );
    println!(
        "| workload | conns | calls/s ratio (per round) | median | p50 ratio (median) | \
         dispatcher CPU ratio (median) | dispatcher + etcd CPU ratio (median) |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|");
    for &w in &opts.workloads {
        for &c in &opts.concurrency {
            let (Some(e), Some(f)) =
                (samples.get(&(Mode::Etcd, w, c)), samples.get(&(Mode::FaultTolerant, w, c)))
            else {
                continue;
            };
            // Pairs of the same round.
            let pairs: Vec<(&RunResult, &RunResult)> = e
                .iter()
                .filter_map(|(round, re)| {
                    f.iter().find(|(r2, _)| r2 == round).map(|(_, rf)| (re, rf))
                })
                .collect();
            let ratios = |g: &dyn Fn(&RunResult, &RunResult) -> f64| -> Vec<f64> {
                pairs.iter().map(|(re, rf)| g(re, rf)).collect()
            };
            let rate = ratios(&|re, rf| re.rate() / rf.rate());
            println!(
                "| {} | {c} | {} | {} | {} | {} | {} |",
                w.name(),
                rate.iter().map(|x| fmt_f(*x, 3)).collect::<Vec<_>>().join(", "),
                fmt_f(median(&rate), 3),
                fmt_f(median(&ratios(&|re, rf| f64::from(re.p50) / f64::from(rf.p50))), 2),
                fmt_f(median(&ratios(&|re, rf| re.disp_us / rf.disp_us)), 2),
                fmt_f(median(&ratios(&|re, rf| (re.disp_us + re.etcd_us) / rf.disp_us)), 2),
            );
        }
    }
}

/// `--bare-server`: serves the bare axum yardstick until killed.
fn bare_server_main() -> ! {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("load --bare-server: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let r = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("{BARE_LISTENING}{}", listener.local_addr()?);
        shardwise_examples::bare::serve(listener).await
    });
    eprintln!("load --bare-server: {r:?}");
    std::process::exit(1);
}

/// `etcd --version`'s first line (the etcd the etcd mode starts), or why there is none.
fn etcd_version() -> String {
    match Command::new("etcd").arg("--version").stdin(Stdio::null()).output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("etcd ?").into(),
        Err(e) => format!("no etcd on the PATH ({e})"),
    }
}

/// Bytes of the files under `dir`, `depth` levels down at most.
fn tree_bytes(dir: &Path, depth: u32) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() && depth > 0 => tree_bytes(&e.path(), depth - 1),
            Ok(m) if m.is_file() => m.len(),
            _ => 0,
        })
        .sum()
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--bare-server") {
        bare_server_main();
    }
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("load: {e}");
            std::process::exit(2);
        }
    };
    let bin = match find_or_build_shardwise(&opts) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("load: {e}");
            std::process::exit(1);
        }
    };
    let runtime = if opts.client_threads == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(opts.client_threads)
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("load: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let age = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .map_or_else(|| "?".to_string(), |d| fmt_int(d.as_secs_f64()));
    if opts.fleet.is_some() {
        println!(
            "# Shardwise fleet load test\n\nbinary {} (built {age} s ago); extra dispatcher \
             arguments {:?}; {} CPUs; CPU from /proc/*/stat utime+stime at an assumed {} ticks/s.",
            bin.display(),
            opts.dispatcher_args,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            CLK_TCK
        );
        if !opts.fleet_compact.is_empty() {
            let failed = runtime.block_on(fleet_compact_runs(&bin, &opts));
            std::process::exit(i32::from(failed));
        }
        let mut failed = false;
        for &mode in &opts.modes {
            match runtime.block_on(fleet_mode(&bin, mode, &opts)) {
                Ok((text, errors)) => {
                    println!("{text}");
                    failed |= errors;
                }
                Err(e) => {
                    eprintln!("load: {} fleet failed: {e}", mode.short());
                    failed = true;
                }
            }
        }
        std::process::exit(i32::from(failed));
    }
    if opts.etcd {
        println!(
            "# Shardwise: the journal in etcd against the work-dir journal\n\nbinary {} (built \
             {age} s ago); {}; {} workers; get_split asks for {} split(s) per call; {} warm-up \
             requests per connection; load generator on {} tokio thread(s); {} CPUs; CPU from \
             /proc/*/stat utime+stime at an assumed {} ticks/s. \"other processes\" is the rest \
             of the machine's busy time (etcd and the standbys excluded): above {BUSY_MACHINE} \
             cores the run is skewed.",
            bin.display(),
            etcd_version(),
            opts.workers,
            opts.max_splits,
            opts.warmup,
            opts.client_threads,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            CLK_TCK
        );
        let (samples, failed) = runtime.block_on(etcd_runs(&bin, &opts));
        print_etcd_summary(&samples, &opts);
        std::process::exit(i32::from(failed));
    }
    if opts.compare {
        println!(
            "# Shardwise REST front: CPU per call against a bare axum server\n\nthis build {} \
             (built {age} s ago); baseline {}; {} workers; {} CPUs; CPU from /proc/*/stat \
             utime+stime at an assumed {} ticks/s.",
            bin.display(),
            opts.baseline.as_ref().map_or_else(|| "none".into(), |b| b.display().to_string()),
            opts.workers,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            CLK_TCK
        );
        let samples = runtime.block_on(compare_runs(&bin, &opts));
        let failed = print_compare(&samples, &opts);
        std::process::exit(i32::from(failed));
    }
    let mut all: HashMap<&'static str, Vec<RunResult>> = HashMap::new();
    println!("# Shardwise dispatcher load test\n");
    println!(
        "binary {} (built {age} s ago); {} workers; {} s per run (at most {} requests); \
         {} warm-up requests per connection; get_split asks for {} split(s) per call; load \
         generator on {} tokio thread(s); {} CPUs; CPU from /proc/*/stat utime+stime at an \
         assumed {} ticks/s (resolution {} ms per sample). \"other processes\" is the rest of \
         the machine's busy time during the run: above {BUSY_MACHINE} cores the run is skewed.",
        bin.display(),
        opts.workers,
        opts.seconds,
        fmt_int(opts.max_requests as f64),
        opts.warmup,
        opts.max_splits,
        opts.client_threads,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        CLK_TCK,
        1000.0 / CLK_TCK
    );
    let mut failed = false;
    for &mode in &opts.modes {
        match runtime.block_on(bench_mode(&bin, mode, &opts)) {
            Ok(rs) => {
                print_table(mode, &rs);
                failed |= rs.iter().any(|r| r.errors > 0);
                all.insert(mode.short(), rs);
            }
            Err(e) => {
                eprintln!("load: {} mode failed: {e}", mode.short());
                failed = true;
            }
        }
    }
    print_goals(&all, &opts);
    if failed {
        std::process::exit(1);
    }
}
