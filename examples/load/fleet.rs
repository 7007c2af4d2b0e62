//! Fleet mode of the load generator: a fleet of simulated workers and clients, each
//! heartbeating at a fixed rate (default 1 Hz), their sends spread evenly over the period and
//! multiplexed over a small pool of keep-alive HTTP/1.1 connections (so the file-descriptor
//! limit is not what is tested).
//!
//! The generator shares the machine's cores with the dispatcher, so it is built to be cheap:
//! a hand-rolled HTTP/1.1 client over a tokio `TcpStream`, every request's bytes built once
//! (again only when a worker's task list changes), one reused read buffer per connection,
//! no JSON parsing of steady-state replies, and latencies in a fixed log-linear histogram.
//!
//! Open loop: every request has a due time; its latency is measured from that due time, so a
//! dispatcher (or a connection) that falls behind shows up in the latency instead of slowing
//! the offered rate down (no coordinated omission). With `batch` > 0 a connection wakes every
//! `batch`, writes all the requests due by then at once (HTTP/1.1 pipelining) and reads the
//! replies in order; real workers do not pipeline, so this is the lower bound of the server's
//! per-request cost, not a realistic fleet.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Linux `USER_HZ`, the unit of utime/stime in `/proc/*/stat` (assumed, not read: that needs
/// `sysconf`).
const CLK_TCK: f64 = 100.0;
/// Elements of the clients' range dataset: the iteration never finishes during a run.
const RANGE_STOP: u64 = 1 << 40;
/// Setup calls and the whole run's slack past its schedule.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
const RUN_SLACK: Duration = Duration::from_secs(60);
/// Requests of the window not sent this long after its end are given up: the dispatcher fell
/// behind (they count in [`Report::behind`]).
const CATCH_UP: Duration = Duration::from_secs(10);

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Simulated workers (distinct addresses; the first heartbeat registers each).
    pub workers: usize,
    /// Clients, all leased on one iteration of one `distributed_epoch` job (0: no job).
    pub clients: usize,
    /// Heartbeats per second of each worker and each client.
    pub rate_hz: f64,
    /// Keep-alive connections the fleet is multiplexed over.
    pub connections: usize,
    /// Time before the measured window (registration and steady state).
    pub warmup: Duration,
    /// The measured window.
    pub duration: Duration,
    /// How often progress and RSS are printed (and sampled) during the run.
    pub report_every: Duration,
    /// 0: one request in flight per connection. Otherwise pipelining: each connection sends
    /// what is due every `batch`, all at once.
    pub batch: Duration,
    /// The dispatcher's process id, for its CPU and RSS (`/proc/<pid>`).
    pub dispatcher_pid: Option<u32>,
    /// Print progress lines on stderr.
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            workers: 10_000,
            clients: 1_000,
            rate_hz: 1.0,
            connections: 64,
            warmup: Duration::from_secs(5),
            duration: Duration::from_secs(20),
            report_every: Duration::from_secs(10),
            batch: Duration::ZERO,
            dispatcher_pid: None,
            verbose: true,
        }
    }
}

/// Latency summary of one kind of call, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Latency {
    /// Calls measured.
    pub count: u64,
    /// Median (upper edge of its histogram bucket: at most 1.6% high).
    pub p50: u64,
    /// 99th percentile (same resolution).
    pub p99: u64,
    /// Exact maximum.
    pub max: u64,
}

/// One RSS sample: seconds since the start of the measured window (negative: warm-up) and
/// kB.
pub type RssSample = (f64, u64);

/// What a fleet run measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Requests scheduled (and answered) in the measured window.
    pub measured_requests: u64,
    /// Requests the whole run sent, warm-up included.
    pub total_requests: u64,
    /// Failed requests (transport errors, non-200 answers, unexpected replies), warm-up
    /// included: must be 0.
    pub errors: u64,
    /// The first error's text.
    pub first_error: Option<String>,
    /// Offered rate: (workers + clients) x rate.
    pub target_rate: f64,
    /// Requests of the window not answered by [`CATCH_UP`] after its end (the dispatcher, or
    /// the machine, could not keep up): 0 when the fleet's load was held.
    pub behind: u64,
    /// Answered requests of the window per second, from the window's start to its last
    /// answer (below the target when the dispatcher falls behind).
    pub achieved_rate: f64,
    /// Seconds from the window's start to its last answer.
    pub window_secs: f64,
    /// Worker heartbeats of the window.
    pub worker: Latency,
    /// Client heartbeats of the window.
    pub client: Latency,
    /// Worker replies in the window that changed a worker's tasks (0 in a steady state).
    pub task_changes: u64,
    /// Workers that had exactly one task after the warm-up (all of them when clients > 0).
    pub workers_with_a_task: u64,
    /// Mean client heartbeat reply size, bytes.
    pub client_reply_bytes: f64,
    /// Dispatcher CPU (utime+stime, all threads) over the window, in % of one core.
    pub dispatcher_cpu_pct: Option<f64>,
    /// This process's CPU over the window, in % of one core.
    pub generator_cpu_pct: Option<f64>,
    /// Dispatcher CPU per request of the window, µs.
    pub dispatcher_us_per_request: Option<f64>,
    /// The dispatcher's RSS over the run, kB.
    pub rss: Vec<RssSample>,
    /// This process's RSS at the end, kB.
    pub generator_rss_kb: Option<u64>,
    /// Seconds to register the fleet (every worker's and client's first heartbeat, one at a
    /// time per connection) before the schedule started.
    pub registration_secs: f64,
    /// Cores other processes kept busy during the window (above ~0.2 the figures are skewed:
    /// the machine was shared).
    pub other_cores: Option<f64>,
}

impl Report {
    /// The report as Markdown lines.
    pub fn render(&self, opts: &Options) -> String {
        let f = |x: Option<f64>, p: usize| x.map_or_else(|| "-".into(), |v| format!("{v:.p$}"));
        let rss_first = self.rss.first().map(|s| s.1);
        let rss_start = self.rss.iter().find(|s| s.0 >= 0.0).map(|s| s.1).or(rss_first);
        let rss_end = self.rss.last().map(|s| s.1);
        let kb = |x: Option<u64>| x.map_or_else(|| "-".into(), |v| format!("{v} kB"));
        let mut out = String::new();
        out.push_str(&format!(
            "fleet: {} workers + {} clients at {} Hz over {} connections ({}); window {:.1} s \
             after {:.1} s warm-up\n",
            opts.workers,
            opts.clients,
            opts.rate_hz,
            opts.connections,
            if opts.batch.is_zero() {
                "one request in flight each".to_string()
            } else {
                format!("pipelined, batches every {} ms", opts.batch.as_millis())
            },
            opts.duration.as_secs_f64(),
            opts.warmup.as_secs_f64(),
        ));
        out.push_str(&format!(
            "| errors | target /s | achieved /s | worker p50/p99/max µs | client p50/p99/max µs \
             | dispatcher CPU % of a core | dispatcher µs/request | generator CPU % | RSS \
             start -> end | task changes |\n|---:|---:|---:|---|---|---:|---:|---:|---|---:|\n\
             | {} | {:.0} | {:.0} | {}/{}/{} | {}/{}/{} | {} | {} | {} | {} -> {} | {} |\n",
            self.errors,
            self.target_rate,
            self.achieved_rate,
            self.worker.p50,
            self.worker.p99,
            self.worker.max,
            self.client.p50,
            self.client.p99,
            self.client.max,
            f(self.dispatcher_cpu_pct, 1),
            f(self.dispatcher_us_per_request, 1),
            f(self.generator_cpu_pct, 1),
            kb(rss_start),
            kb(rss_end),
            self.task_changes,
        ));
        if opts.clients > 0 {
            out.push_str(&format!(
                "client heartbeat replies: {:.0} bytes on average\n",
                self.client_reply_bytes
            ));
        }
        out.push_str(&format!(
            "registration of the fleet: {:.1} s; other processes kept {} cores busy during the \
             window\n",
            self.registration_secs,
            f(self.other_cores, 2)
        ));
        if self.behind > 0 {
            out.push_str(&format!(
                "NOT HELD: {} requests of the window were not answered within {} s of its end \
                 (the dispatcher fell behind)\n",
                self.behind,
                CATCH_UP.as_secs()
            ));
        }
        if let Some(e) = &self.first_error {
            out.push_str(&format!("first error: {e}\n"));
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// /proc.

/// utime + stime of `/proc/<pid>/stat`, clock ticks.
fn cpu_ticks(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let text = std::fs::read_to_string(path).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Busy ticks of the whole machine (user, nice, system, irq, softirq of `/proc/stat`).
fn machine_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<u64> = text
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    Some(f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)?)
}

/// `VmRSS` of `/proc/<pid>/status`, kB.
fn rss_kb(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".to_owned(),
    };
    let text = std::fs::read_to_string(Path::new(&path)).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

// ---------------------------------------------------------------------------------------
// Latency histogram: log-linear, 64 buckets per power of two (at most 1/64 high).

const SUB: u64 = 64;

#[derive(Debug, Clone)]
struct Histogram {
    counts: Vec<u64>,
    max: u64,
    total: u64,
}

impl Histogram {
    fn new() -> Histogram {
        // 64 exact buckets, then 64 per power of two up to 2^40 µs.
        Histogram { counts: vec![0; (SUB as usize) * 36], max: 0, total: 0 }
    }

    fn bucket(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        let exp = 63 - u64::from(v.leading_zeros()); // >= 6
        let shift = exp - 6;
        ((shift + 1) * SUB + ((v >> shift) - SUB)) as usize
    }

    /// The largest value of bucket `i`.
    fn upper(i: usize) -> u64 {
        let i = i as u64;
        if i < SUB {
            return i;
        }
        let shift = i / SUB - 1;
        let mantissa = i % SUB + SUB;
        ((mantissa + 1) << shift) - 1
    }

    fn record(&mut self, micros: u64) {
        let i = Self::bucket(micros).min(self.counts.len() - 1);
        self.counts[i] += 1;
        self.max = self.max.max(micros);
        self.total += 1;
    }

    fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.max = self.max.max(other.max);
        self.total += other.total;
    }

    fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::upper(i).min(self.max);
            }
        }
        self.max
    }

    fn summary(&self) -> Latency {
        Latency {
            count: self.total,
            p50: self.quantile(0.50),
            p99: self.quantile(0.99),
            max: self.max,
        }
    }
}

// ---------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client connection: pre-built requests in, (status, body range) out.

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

/// One parsed reply: status and where its body is in the connection's buffer.
struct Reply {
    status: u16,
    body: std::ops::Range<usize>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Status and `Content-Length` of a response head (without the blank line).
fn parse_head(head: &[u8]) -> Result<(u16, usize), String> {
    let text = std::str::from_utf8(head).map_err(|_| "a reply head is not UTF-8".to_owned())?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    for line in lines {
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            return value
                .trim()
                .parse()
                .map(|n| (status, n))
                .map_err(|_| format!("bad Content-Length {value:?}"));
        }
    }
    Err(format!("a reply without Content-Length (status {status})"))
}

impl Conn {
    async fn open(addr: SocketAddr) -> Result<Conn, String> {
        let stream = TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| format!("set_nodelay: {e}"))?;
        Ok(Conn { stream, buf: vec![0; 64 * 1024], start: 0, end: 0 })
    }

    /// Writes all of `bytes` (tokio's readiness API: no `io-util` feature needed).
    async fn write(&mut self, mut bytes: &[u8]) -> Result<(), String> {
        while !bytes.is_empty() {
            match self.stream.try_write(bytes) {
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.stream.writable().await.map_err(|e| format!("write: {e}"))?;
                }
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        Ok(())
    }

    /// Reads more bytes, making room for at least `need` unconsumed ones.
    async fn fill(&mut self, need: usize) -> Result<(), String> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.buf.len() - self.start < need {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() < need {
                self.buf.resize(need.next_power_of_two(), 0);
            }
        }
        if self.end == self.buf.len() {
            let grow = self.buf.len() * 2;
            self.buf.resize(grow, 0);
        }
        let n = loop {
            match self.stream.try_read(&mut self.buf[self.end..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.stream.readable().await.map_err(|e| format!("read: {e}"))?;
                }
                Err(e) => return Err(format!("read: {e}")),
            }
        };
        if n == 0 {
            return Err("the dispatcher closed the connection".into());
        }
        self.end += n;
        Ok(())
    }

    /// The next reply; its body stays valid until the next call.
    async fn read_reply(&mut self) -> Result<Reply, String> {
        loop {
            let pending = &self.buf[self.start..self.end];
            if let Some(h) = find(pending, b"\r\n\r\n") {
                let (status, len) = parse_head(&pending[..h])?;
                let total = h + 4 + len;
                if pending.len() >= total {
                    let body = self.start + h + 4..self.start + total;
                    self.start += total;
                    return Ok(Reply { status, body });
                }
                self.fill(total).await?;
            } else {
                self.fill(0).await?;
            }
        }
    }

    /// One request and its reply (setup only: allocates).
    async fn call(&mut self, method: &str, path: &str, body: &Value) -> Result<Value, String> {
        let payload = if method == "GET" { String::new() } else { body.to_string() };
        self.write(&request_bytes(method, path, payload.as_bytes())).await?;
        let r = tokio::time::timeout(SETUP_TIMEOUT, self.read_reply())
            .await
            .map_err(|_| format!("{method} {path}: no reply within {SETUP_TIMEOUT:?}"))??;
        let text = &self.buf[r.body];
        if r.status != 200 {
            return Err(format!(
                "{method} {path} answered {}: {}",
                r.status,
                String::from_utf8_lossy(text)
            ));
        }
        serde_json::from_slice(text).map_err(|e| format!("{method} {path}: bad JSON: {e}"))
    }
}

/// A complete HTTP/1.1 request.
fn request_bytes(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn id_text(v: &Value, field: &str) -> Result<String, String> {
    match &v[field] {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(format!("reply field {field:?} is {other}, not an id (in {v})")),
    }
}

// ---------------------------------------------------------------------------------------
// The fleet.

/// The simulated worker `i`'s address (distinct for every i < 2^24).
pub fn worker_address(i: usize) -> String {
    format!("10.{}.{}.{}:7070", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

#[derive(Debug)]
enum Kind {
    Worker {
        address: String,
        tasks: Vec<String>,
    },
    /// A client keeps the task list of its last full reply and sends its version back, as
    /// the Rust client does, so an unchanged list is left out of the reply.
    Client {
        path: String,
    },
}

#[derive(Debug)]
struct Entity {
    /// Offset of its sends within the period, ns.
    offset_ns: u64,
    kind: Kind,
    request: Vec<u8>,
}

fn worker_request(address: &str, tasks: &[String], incarnation: &str) -> Vec<u8> {
    let body = json!({
        "worker_address": address,
        "current_tasks": tasks,
        "worker_uid": format!("fleet-{address}"),
        "incarnation": incarnation,
    });
    request_bytes("POST", "/v1/workers/heartbeat", body.to_string().as_bytes())
}

/// A steady-state worker reply: nothing to start, nothing to stop.
/// The unsigned integer right after `key` in a JSON body.
fn number_after(body: &[u8], key: &[u8]) -> Option<u64> {
    let at = find(body, key)? + key.len();
    let digits = body[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&body[at..at + digits]).ok()?.parse().ok()
}

fn steady(body: &[u8]) -> bool {
    find(body, b"\"new_tasks\":[]").is_some() && find(body, b"\"tasks_to_delete\":[]").is_some()
}

/// A task id as the wire has it (a string of digits).
fn task_id(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The worker's task list after a reply that changes it.
fn apply_reply(tasks: &mut Vec<String>, body: &[u8]) -> Result<(), String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("bad heartbeat reply JSON: {e}"))?;
    let ids = |key: &str, item: &dyn Fn(&Value) -> Option<String>| -> Result<Vec<String>, String> {
        v[key]
            .as_array()
            .ok_or_else(|| format!("heartbeat reply without {key}: {v}"))?
            .iter()
            .map(|t| item(t).ok_or_else(|| format!("bad {key} item {t}")))
            .collect()
    };
    let new = ids("new_tasks", &|t| task_id(&t["task_id"]))?;
    let gone = ids("tasks_to_delete", &task_id)?;
    tasks.retain(|t| !gone.contains(t));
    tasks.extend(new);
    tasks.sort_unstable();
    tasks.dedup();
    Ok(())
}

struct Shared {
    incarnation: String,
    /// Start of tick 0.
    t0: Instant,
    period: Duration,
    warmup_ticks: u64,
    total_ticks: u64,
    batch: Duration,
    done: AtomicU64,
    errors: AtomicU64,
    /// Send nothing more (set when the run is too far behind its schedule).
    stop: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
struct ConnStats {
    worker: Histogram,
    client: Histogram,
    first_error: Option<String>,
    task_changes: u64,
    client_reply_bytes: u64,
    /// Last answer of a measured request.
    last: Option<Instant>,
    entities: Vec<Entity>,
}

impl ConnStats {
    fn fail(&mut self, sh: &Shared, e: String) {
        sh.errors.fetch_add(1, Ordering::Relaxed);
        if self.first_error.is_none() {
            self.first_error = Some(e);
        }
    }
}

/// Checks one reply and updates the entity: whether it changed a worker's tasks.
fn handle_reply(
    e: &mut Entity,
    reply: &[u8],
    status: u16,
    incarnation: &str,
) -> Result<bool, String> {
    if status != 200 {
        return Err(format!("{status}: {}", String::from_utf8_lossy(reply)));
    }
    match &mut e.kind {
        Kind::Client { path } => {
            if find(reply, b"\"tasks_unchanged\":true").is_none() {
                let version = number_after(reply, b"\"tasks_version\":")
                    .ok_or_else(|| "client heartbeat reply without tasks_version".to_owned())?;
                let body = json!({"known_tasks_version": version}).to_string();
                e.request = request_bytes("POST", path, body.as_bytes());
            }
            Ok(false)
        }
        Kind::Worker { address, tasks } => {
            if steady(reply) {
                return Ok(false);
            }
            apply_reply(tasks, reply)?;
            e.request = worker_request(address, tasks, incarnation);
            Ok(true)
        }
    }
}

/// One connection's share of the fleet, in due order, until the last tick.
async fn drive(sh: Arc<Shared>, mut conn: Conn, entities: Vec<Entity>) -> ConnStats {
    let mut st = ConnStats {
        worker: Histogram::new(),
        client: Histogram::new(),
        first_error: None,
        task_changes: 0,
        client_reply_bytes: 0,
        last: None,
        entities,
    };
    let n = st.entities.len();
    // (tick, index) of the next request to send; `batch` holds what is sent together.
    let mut tick = 0u64;
    let mut next = 0usize;
    let mut batch: Vec<(usize, Instant, bool)> = Vec::with_capacity(n.max(1));
    let mut out: Vec<u8> = Vec::new();
    let due_of = |tick: u64, e: &Entity| {
        sh.t0 + sh.period.mul_f64(tick as f64) + Duration::from_nanos(e.offset_ns)
    };
    while n > 0 && tick < sh.total_ticks && !sh.stop.load(Ordering::Relaxed) {
        tokio::time::sleep_until(due_of(tick, &st.entities[next]) + sh.batch).await;
        let now = Instant::now();
        // Everything due by now (just the one without pipelining).
        batch.clear();
        out.clear();
        while tick < sh.total_ticks {
            let due = due_of(tick, &st.entities[next]);
            if !batch.is_empty() && (sh.batch.is_zero() || due > now) {
                break;
            }
            batch.push((next, due, tick >= sh.warmup_ticks));
            out.extend_from_slice(&st.entities[next].request);
            next += 1;
            if next == n {
                next = 0;
                tick += 1;
            }
        }
        if let Err(e) = conn.write(&out).await {
            st.fail(&sh, e);
            return st;
        }
        for &(i, due, measured) in &batch {
            let r = match conn.read_reply().await {
                Ok(r) => r,
                Err(e) => {
                    st.fail(&sh, e);
                    return st;
                }
            };
            let answered = Instant::now();
            let ent = &mut st.entities[i];
            let is_worker = matches!(ent.kind, Kind::Worker { .. });
            let reply = &conn.buf[r.body];
            let bytes = reply.len() as u64;
            match handle_reply(ent, reply, r.status, &sh.incarnation) {
                Ok(changed) => {
                    sh.done.fetch_add(1, Ordering::Relaxed);
                    if measured {
                        let us = u64::try_from(answered.duration_since(due).as_micros())
                            .unwrap_or(u64::MAX);
                        if is_worker {
                            st.worker.record(us);
                        } else {
                            st.client.record(us);
                            st.client_reply_bytes += bytes;
                        }
                        st.task_changes += u64::from(changed);
                        st.last = Some(answered);
                    }
                }
                Err(e) => st.fail(&sh, e),
            }
        }
    }
    st
}

/// Sends every entity's first heartbeat (registering each worker, which learns its task),
/// one at a time per connection, before the schedule starts.
async fn register(
    incarnation: &str,
    conn: &mut Conn,
    entities: &mut [Entity],
) -> Result<(), String> {
    for e in entities.iter_mut() {
        conn.write(&e.request).await?;
        let r = tokio::time::timeout(SETUP_TIMEOUT, conn.read_reply())
            .await
            .map_err(|_| format!("registration: no reply within {SETUP_TIMEOUT:?}"))??;
        handle_reply(e, &conn.buf[r.body], r.status, incarnation)
            .map_err(|err| format!("registration: {err}"))?;
    }
    Ok(())
}

/// Creates the clients' dataset, job, iteration and leases: the client ids.
async fn setup_clients(c: &mut Conn, clients: usize) -> Result<Vec<String>, String> {
    if clients == 0 {
        return Ok(Vec::new());
    }
    let ds = c
        .call(
            "POST",
            "/v1/datasets",
            &json!({"dataset": {"source": {"range": {"stop": RANGE_STOP}}}}),
        )
        .await?;
    let dataset_id = id_text(&ds, "dataset_id")?;
    let job = c
        .call(
            "POST",
            "/v1/jobs",
            &json!({"dataset_id": dataset_id, "processing_mode": "distributed_epoch"}),
        )
        .await?;
    let job_id = id_text(&job, "job_id")?;
    let mut ids = Vec::with_capacity(clients);
    let mut iteration = None;
    for _ in 0..clients {
        let lease = c.call("POST", &format!("/v1/jobs/{job_id}/iterations"), &json!({})).await?;
        let it = id_text(&lease, "iteration_id")?;
        if iteration.get_or_insert_with(|| it.clone()) != &it {
            return Err(format!("the clients got different iterations: {iteration:?} and {it}"));
        }
        ids.push(id_text(&lease, "client_id")?);
    }
    Ok(ids)
}

/// Runs the fleet against the dispatcher at `addr`.
pub async fn run(addr: SocketAddr, opts: &Options) -> Result<Report, String> {
    if !(opts.rate_hz > 0.0 && opts.rate_hz <= 1000.0) {
        return Err("the rate must be in (0, 1000] Hz".into());
    }
    if opts.connections == 0 || opts.workers + opts.clients == 0 {
        return Err("a fleet needs connections and at least one worker or client".into());
    }
    let mut setup = Conn::open(addr).await?;
    let version = setup.call("GET", "/v1/version", &Value::Null).await?;
    let incarnation = id_text(&version, "incarnation")?;
    let client_ids = setup_clients(&mut setup, opts.clients).await?;
    let period = Duration::from_secs_f64(1.0 / opts.rate_hz);
    let period_ns = period.as_nanos() as u64;
    // Every entity's phase: workers and clients each spread evenly over the period.
    let mut entities: Vec<Entity> = Vec::with_capacity(opts.workers + opts.clients);
    for i in 0..opts.workers {
        let address = worker_address(i);
        entities.push(Entity {
            offset_ns: period_ns * i as u64 / opts.workers as u64,
            request: worker_request(&address, &[], &incarnation),
            kind: Kind::Worker { address, tasks: Vec::new() },
        });
    }
    for (j, id) in client_ids.iter().enumerate() {
        entities.push(Entity {
            offset_ns: period_ns * (2 * j as u64 + 1) / (2 * opts.clients as u64),
            request: request_bytes("POST", &format!("/v1/clients/{id}/heartbeat"), b"{}"),
            kind: Kind::Client { path: format!("/v1/clients/{id}/heartbeat") },
        });
    }
    entities.sort_by_key(|e| e.offset_ns);
    let conns = opts.connections.min(entities.len());
    let mut shares: Vec<Vec<Entity>> = (0..conns).map(|_| Vec::new()).collect();
    for (k, e) in entities.into_iter().enumerate() {
        shares[k % conns].push(e);
    }
    let mut pool = Vec::with_capacity(conns);
    for _ in 0..conns {
        pool.push(Conn::open(addr).await?);
    }
    let ticks = |d: Duration| (d.as_secs_f64() * opts.rate_hz).ceil() as u64;
    let warmup_ticks = ticks(opts.warmup);
    let total_ticks = warmup_ticks + ticks(opts.duration).max(1);
    let started = std::time::Instant::now();
    let incarnation: Arc<str> = incarnation.into();
    let registering: Vec<_> = pool
        .into_iter()
        .zip(shares)
        .map(|(mut c, mut share)| {
            let inc = incarnation.clone();
            tokio::spawn(
                async move { register(&inc, &mut c, &mut share).await.map(|()| (c, share)) },
            )
        })
        .collect();
    let mut registered = Vec::with_capacity(conns);
    for r in registering {
        registered.push(r.await.map_err(|e| format!("a connection task failed: {e}"))??);
    }
    let registration_secs = started.elapsed().as_secs_f64();
    if opts.verbose {
        eprintln!(
            "fleet: {} workers and {} clients registered in {registration_secs:.1} s",
            opts.workers, opts.clients
        );
    }
    // The schedule starts now.
    let t0 = Instant::now() + Duration::from_millis(50);
    let sh = Arc::new(Shared {
        incarnation: incarnation.to_string(),
        t0,
        period,
        warmup_ticks,
        total_ticks,
        batch: opts.batch,
        done: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        stop: Default::default(),
    });
    let tasks: Vec<_> = registered
        .into_iter()
        .map(|(c, share)| tokio::spawn(drive(sh.clone(), c, share)))
        .collect();
    // The monitor: CPU at the window's edges, RSS every `report_every`.
    let m0 = t0 + period.mul_f64(warmup_ticks as f64);
    let m1 = t0 + period.mul_f64(total_ticks as f64);
    let pid = opts.dispatcher_pid;
    let mut rss = vec![(-(m0 - Instant::now()).as_secs_f64(), rss_kb(pid).unwrap_or(0))];
    tokio::time::sleep_until(m0).await;
    let cpu0 = (cpu_ticks(pid), cpu_ticks(None), Instant::now(), machine_ticks());
    let done0 = sh.done.load(Ordering::Relaxed);
    rss.push((0.0, rss_kb(pid).unwrap_or(0)));
    let mut next_report = m0 + opts.report_every;
    while next_report < m1 {
        tokio::time::sleep_until(next_report).await;
        let at = (next_report - m0).as_secs_f64();
        let kb = rss_kb(pid).unwrap_or(0);
        rss.push((at, kb));
        if opts.verbose {
            eprintln!(
                "fleet: t={at:.0}s dispatcher RSS {kb} kB, {} requests answered, {} errors",
                sh.done.load(Ordering::Relaxed),
                sh.errors.load(Ordering::Relaxed)
            );
        }
        next_report += opts.report_every;
    }
    tokio::time::sleep_until(m1).await;
    let cpu1 = (cpu_ticks(pid), cpu_ticks(None), Instant::now(), machine_ticks());
    let done_in_window = sh.done.load(Ordering::Relaxed) - done0;
    rss.push(((m1 - m0).as_secs_f64(), rss_kb(pid).unwrap_or(0)));
    let mut report = Report {
        target_rate: (opts.workers + client_ids.len()) as f64 * opts.rate_hz,
        rss,
        ..Report::default()
    };
    let mut worker = Histogram::new();
    let mut client = Histogram::new();
    let mut last = m0;
    let deadline = m1 + RUN_SLACK;
    let stopper = {
        let sh = sh.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(m1 + CATCH_UP).await;
            sh.stop.store(true, Ordering::Relaxed);
        })
    };
    for t in tasks {
        let st = match tokio::time::timeout_at(deadline, t).await {
            Ok(Ok(st)) => st,
            Ok(Err(e)) => return Err(format!("a connection task failed: {e}")),
            Err(_) => {
                return Err(format!("the run did not finish {RUN_SLACK:?} after its schedule"));
            }
        };
        worker.merge(&st.worker);
        client.merge(&st.client);
        report.task_changes += st.task_changes;
        report.client_reply_bytes += st.client_reply_bytes as f64;
        if report.first_error.is_none() {
            report.first_error = st.first_error;
        }
        last = last.max(st.last.unwrap_or(m0));
        report.workers_with_a_task += st
            .entities
            .iter()
            .filter(|e| matches!(&e.kind, Kind::Worker { tasks, .. } if tasks.len() == 1))
            .count() as u64;
    }
    stopper.abort();
    report.errors = sh.errors.load(Ordering::Relaxed);
    report.total_requests = sh.done.load(Ordering::Relaxed) + report.errors;
    report.worker = worker.summary();
    report.client = client.summary();
    report.measured_requests = report.worker.count + report.client.count;
    report.behind = ((opts.workers + client_ids.len()) as u64 * (total_ticks - warmup_ticks))
        .saturating_sub(report.measured_requests);
    report.client_reply_bytes /= report.client.count.max(1) as f64;
    report.window_secs = (last - m0).as_secs_f64().max(1e-9);
    report.achieved_rate = report.measured_requests as f64 / report.window_secs;
    let secs = (cpu1.2 - cpu0.2).as_secs_f64().max(1e-9);
    let pct = |a: Option<u64>, b: Option<u64>| {
        Some((b?.saturating_sub(a?)) as f64 / CLK_TCK / secs * 100.0)
    };
    report.dispatcher_cpu_pct = pid.and(pct(cpu0.0, cpu1.0));
    report.generator_cpu_pct = pct(cpu0.1, cpu1.1);
    // Per request answered during the window (when behind schedule, those are not the
    // requests scheduled in it).
    report.dispatcher_us_per_request =
        report.dispatcher_cpu_pct.map(|p| p / 100.0 * secs * 1e6 / done_in_window.max(1) as f64);
    report.registration_secs = registration_secs;
    report.other_cores = (|| {
        let busy = cpu1.3?.saturating_sub(cpu0.3?);
        let ours = cpu1.0?.saturating_sub(cpu0.0?) + cpu1.1?.saturating_sub(cpu0.1?);
        Some(busy.saturating_sub(ours) as f64 / CLK_TCK / secs)
    })();
    report.generator_rss_kb = rss_kb(None);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_bound_their_values() {
        for v in [0u64, 1, 63, 64, 65, 127, 128, 1000, 123_456, 9_999_999] {
            let b = Histogram::bucket(v);
            assert!(Histogram::upper(b) >= v, "{v}");
            assert!(Histogram::upper(b) <= v + v / 64, "{v}: {}", Histogram::upper(b));
            assert!(b == 0 || Histogram::upper(b - 1) < v, "{v}");
        }
    }
}
