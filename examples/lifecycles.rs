//! Job lifecycles against a long-lived dispatcher: does it stay flat?
//!
//! Spawns `shardwise dispatcher --work-dir DIR --fault-tolerant` (the binary next to this
//! example's profile directory, or `--shardwise PATH`) with short client and garbage-collection
//! timeouts, and runs job lifecycles over REST from `--clients` threads, as clients and a
//! worker do them: create a job, create an iteration (a client lease), heartbeat as the client,
//! read every split as the worker (get-split, acknowledging, to the end), report the task
//! done, release the client. Garbage collection frees each iteration and, after it, its job.
//!
//! Every `--report-every` lifecycles (default 100,000) it prints the dispatcher's resident
//! memory (`VmRSS`), the bytes of its work dir (snapshot and journal), the counts
//! `GET /v1/status` reports, and the p50 / p99 latency of each kind of request in that window.
//!
//! ```sh
//! cargo build --release -p shardwise-gateway --bin shardwise
//! cargo run --release -p shardwise-examples --example lifecycles -- --lifecycles 1000000
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use shardwise_tests::{TempDir, http, shardwise_bin};

const WORKER: &str = "127.0.0.1:1";
const KINDS: [&str; 6] = [
    "create_job",
    "create_iteration",
    "client_heartbeat",
    "get_splits",
    "worker_update",
    "release",
];

struct Options {
    lifecycles: u64,
    report_every: u64,
    clients: u64,
    shardwise: Option<PathBuf>,
}

fn options() -> Result<Options, String> {
    let mut o = Options { lifecycles: 200_000, report_every: 100_000, clients: 4, shardwise: None };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.replace('_', "").parse::<u64>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--lifecycles" => o.lifecycles = number(value()?)?,
            "--report-every" => o.report_every = number(value()?)?.max(1),
            "--clients" => o.clients = number(value()?)?.clamp(1, 64),
            "--shardwise" => o.shardwise = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                return Err("usage: lifecycles [--lifecycles N] [--report-every N] \
                            [--clients N] [--shardwise PATH]"
                    .into());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(o)
}

/// One request: its status, body and latency.
fn call(base: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value, Duration) {
    let start = Instant::now();
    let r =
        http(method, base, path, body.as_ref()).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let took = start.elapsed();
    let v = if r.body.is_empty() { Value::Null } else { r.json() };
    (r.status, v, took)
}

/// Latencies of one window, per kind of request.
type Window = BTreeMap<&'static str, Vec<Duration>>;

fn ok(
    base: &str,
    kind: &'static str,
    method: &str,
    path: &str,
    body: Value,
    w: &mut Window,
) -> Value {
    let (status, v, took) = call(base, method, path, Some(body));
    assert_eq!(status, 200, "{method} {path}: {v}");
    w.entry(kind).or_default().push(took);
    v
}

fn id(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_else(|| panic!("no {key} in {v}")).to_owned()
}

fn lifecycle(base: &str, dataset: &str, w: &mut Window) {
    let body =
        json!({"dataset_id": dataset, "processing_mode": "distributed_epoch", "split_size": 4});
    let job = id(&ok(base, "create_job", "POST", "/v1/jobs", body, w), "job_id");
    let lease =
        ok(base, "create_iteration", "POST", &format!("/v1/jobs/{job}/iterations"), json!({}), w);
    let (iteration, client) = (id(&lease, "iteration_id"), id(&lease, "client_id"));
    let path = format!("/v1/clients/{client}/heartbeat");
    let hb = ok(base, "client_heartbeat", "POST", &path, json!({}), w);
    let task = id(&hb["tasks"][0], "task_id");
    let mut acknowledge: Vec<Value> = Vec::new();
    loop {
        let body = json!({"worker_address": WORKER, "repetition": 0, "max_splits": 8,
                          "acknowledge": acknowledge});
        let path = format!("/v1/iterations/{iteration}/splits");
        let r = ok(base, "get_splits", "POST", &path, body, w);
        if r["end_of_splits"] == json!(true) {
            break;
        }
        acknowledge = r["split_ids"].as_array().cloned().unwrap_or_default();
    }
    let body = json!({"worker_address": WORKER, "updates": [{"task_id": task, "completed": true}]});
    ok(base, "worker_update", "POST", "/v1/workers/update", body, w);
    let (status, v, took) = call(base, "DELETE", &format!("/v1/clients/{client}"), None);
    assert_eq!(status, 200, "{v}");
    w.entry("release").or_default().push(took);
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter_map(|e| e.metadata().ok().map(|m| (e.path(), m)))
        .map(|(p, m)| if m.is_dir() { dir_bytes(&p) } else { m.len() })
        .sum()
}

fn percentile(v: &mut [Duration], p: usize) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort_unstable();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let dir = TempDir::new("lifecycles");
    let args = [
        "--work-dir",
        dir.path(),
        "--fault-tolerant",
        "--client-timeout",
        "10s",
        "--job-gc-timeout",
        "1s",
        "--job-gc-check-interval",
        "100ms",
        "--gc-dynamic-sharding-jobs",
        "--compact-at-bytes",
        "1048576",
    ];
    // By default the binary next to this example's profile directory.
    let process = start(o.shardwise.clone().unwrap_or_else(shardwise_bin).as_path(), &args);
    let base = process.url.clone();
    let pid = process.child.id();
    let (status, v, _) =
        call(&base, "POST", "/v1/workers/heartbeat", Some(json!({"worker_address": WORKER})));
    assert_eq!(status, 200, "{v}");
    let (status, v, _) = call(
        &base,
        "POST",
        "/v1/datasets",
        Some(json!({"dataset": {"source": {"range": {"stop": 16}}}})),
    );
    assert_eq!(status, 200, "{v}");
    let dataset = id(&v, "dataset_id");
    println!(
        "{} lifecycles from {} clients, a report every {} (latency p50 / p99 in ms)",
        o.lifecycles, o.clients, o.report_every
    );
    let started = Instant::now();
    let mut done = 0;
    while done < o.lifecycles {
        let window = o.report_every.min(o.lifecycles - done);
        // The worker stays alive.
        call(&base, "POST", "/v1/workers/heartbeat", Some(json!({"worker_address": WORKER})));
        let per_client = window.div_ceil(o.clients);
        let windows: Vec<Window> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..o.clients)
                .map(|c| {
                    let (base, dataset) = (base.as_str(), dataset.as_str());
                    let n = per_client.min(window.saturating_sub(c * per_client));
                    scope.spawn(move || {
                        let mut w = Window::new();
                        for _ in 0..n {
                            lifecycle(base, dataset, &mut w);
                        }
                        w
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("client thread")).collect()
        });
        done += window;
        let mut merged = Window::new();
        for w in windows {
            for (k, v) in w {
                merged.entry(k).or_default().extend(v);
            }
        }
        let (_, status, _) = call(&base, "GET", "/v1/status", None);
        let t = &status["state"]["totals"];
        let latencies: Vec<String> = KINDS
            .iter()
            .map(|k| {
                let v = merged.entry(k).or_default();
                let (p50, p99) = (percentile(v, 50), percentile(v, 99));
                format!("{k} {:.1}/{:.1}", p50.as_secs_f64() * 1e3, p99.as_secs_f64() * 1e3)
            })
            .collect();
        println!(
            "{done:>9} lifecycles {:>6.0} s: RSS {:>7} KiB, work dir {:>9} bytes, jobs {} \
             iterations {} tasks {} clients {}; {}",
            started.elapsed().as_secs_f64(),
            rss_kib(pid),
            dir_bytes(Path::new(dir.path())),
            t["jobs"],
            t["iterations"],
            t["tasks"],
            t["clients"],
            latencies.join(", ")
        );
    }
}

/// A dispatcher process, killed on drop.
struct Server {
    child: std::process::Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `PATH dispatcher --port 0 ARGS` and waits for its listening line.
fn start(path: &Path, args: &[&str]) -> Server {
    use std::io::BufRead;
    let mut child = std::process::Command::new(path)
        .args(["dispatcher", "--port", "0"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let url = loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            panic!("{} exited before listening", path.display());
        }
        if let Some(url) = line.trim().strip_prefix("shardwise dispatcher listening on ") {
            break url.to_owned();
        }
    };
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    Server { child, url }
}
