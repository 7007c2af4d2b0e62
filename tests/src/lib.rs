//! Helpers for Shardwise's black-box tests: find the real `shardwise` binary and run it.
#![forbid(unsafe_code)]

pub mod browser;
pub mod crash;
pub mod etcd;
pub mod fake_k8s;
pub mod fuzz;
pub mod graphs;
pub mod markdown;
pub mod parquet_bytes;
pub mod pyenv;
pub mod rawhttp;
pub mod tf;
pub mod tf_fake;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The longest pause between two polls of [`poll_until`] (it starts at 1 ms and doubles).
pub const MAX_POLL_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// Polls `f` until it answers `Ok`, for at most `deadline`, pausing briefly between polls
/// (1 ms, doubling up to [`MAX_POLL_PAUSE`]): the value, or the last state `f` observed
/// (its `Err`) when the deadline passed.
pub fn try_poll_until<T, S>(
    deadline: std::time::Duration,
    mut f: impl FnMut() -> Result<T, S>,
) -> Result<T, S> {
    let end = std::time::Instant::now() + deadline;
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        let state = match f() {
            Ok(v) => return Ok(v),
            Err(state) => state,
        };
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(state);
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(MAX_POLL_PAUSE);
    }
}

/// The one way the tests wait for a state: [`try_poll_until`], panicking when `deadline`
/// passes with `what` was waited for and the last state `f` observed (its `Err`).
pub fn poll_until<T, S: std::fmt::Display>(
    what: &str,
    deadline: std::time::Duration,
    f: impl FnMut() -> Result<T, S>,
) -> T {
    try_poll_until(deadline, f)
        .unwrap_or_else(|last| panic!("{what}: not within {deadline:?}; last seen: {last}"))
}

/// The `shardwise` binary of this build.
///
/// Cargo builds a package's binaries whenever that package's integration tests are built
/// (`shardwise-gateway` has some), so under `cargo test --workspace` and
/// `cargo nextest run --workspace` it sits next to the test executables. When this crate's tests
/// are run alone, the binary is built first with the same cargo; under nextest (which holds no
/// cargo lock while tests run) also when a source it is built from is newer than it, so that
/// `cargo nextest run -p shardwise-tests` after an edit never tests a stale binary. Under
/// `cargo test` the binary was just built by the same command (and cargo holds its lock: a
/// nested build would wait for ever).
///
/// `SHARDWISE_BIN=/path/to/shardwise` runs the tests against that binary instead, as it is
/// (nothing is built): e.g. an older build, to see a regression test fail on the code before
/// its fix.
pub fn shardwise_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("SHARDWISE_BIN").filter(|b| !b.is_empty()) {
            let bin = PathBuf::from(bin);
            assert!(bin.is_file(), "SHARDWISE_BIN={}: no such file", bin.display());
            return bin;
        }
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/<test> -> target/<profile>/shardwise
        let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target profile dir");
        let bin = profile_dir.join(format!("shardwise{}", std::env::consts::EXE_SUFFIX));
        let stale = || {
            let Ok(built) = std::fs::metadata(&bin).and_then(|m| m.modified()) else {
                return true;
            };
            let root = repo_root();
            let inputs = ["core", "gateway", "openapi", "Cargo.lock", "Cargo.toml"];
            inputs.iter().any(|p| newer_than(&root.join(p), built, 6))
        };
        if !bin.exists() || (std::env::var_os("NEXTEST").is_some() && stale()) {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "-p", "shardwise-gateway", "--bin", "shardwise"])
                .status()
                .expect("run cargo build");
            assert!(status.success(), "building the shardwise binary failed");
        }
        assert!(bin.exists(), "no shardwise binary at {}", bin.display());
        bin
    })
    .clone()
}

/// Whether `path` or a file below it (at most `depth` levels, `target` directories aside) was
/// modified after `when`.
fn newer_than(path: &std::path::Path, when: std::time::SystemTime, depth: usize) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return false };
    if meta.is_file() {
        return meta.modified().is_ok_and(|m| m > when);
    }
    if !meta.is_dir() || depth == 0 || path.file_name().is_some_and(|n| n == "target") {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(path) else { return false };
    entries.flatten().any(|e| newer_than(&e.path(), when, depth - 1))
}

/// The Rust client's options for tests, which each test starts from: a heartbeat every 50 ms
/// (new tasks and the end of a read noticed within it, not within the default second), and
/// `UNAVAILABLE` retried for a minute rather than an hour (a test that breaks its service ends
/// with the error, not a timeout of the harness). Everything else is the default.
pub fn fast_options() -> shardwise_gateway::client::DistributeOptions {
    shardwise_gateway::client::DistributeOptions {
        heartbeat_interval: std::time::Duration::from_millis(50),
        unavailable_timeout: std::time::Duration::from_secs(60),
        ..Default::default()
    }
}

/// The result of one `shardwise` run.
#[derive(Debug)]
pub struct Run {
    /// Exit status code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// Standard output parsed as JSON (panics with the output when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("stdout is not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr)
        })
    }
}

/// Runs `shardwise ARGS` with `stdin` as input and `env` as the whole environment (plus
/// `PATH`), so that the host's own `TF_CONFIG` or `SLURM_*` never leak into a test.
pub fn run_shardwise(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(shardwise_bin());
    cmd.args(args).env_clear().stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Ok(path) = std::env::var("PATH") {
        cmd.env("PATH", path);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn shardwise");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write stdin");
    let out = child.wait_with_output().expect("wait for shardwise");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub use rawhttp::HttpResponse;

/// One HTTP/1.1 request to `127.0.0.1` (`Connection: close`), with a JSON body when given:
/// [`rawhttp::one_shot`]. A tiny client is enough for black-box tests and keeps them free of a
/// client stack.
pub fn http(
    method: &str,
    base: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> std::io::Result<HttpResponse> {
    rawhttp::one_shot(base, &rawhttp::Request::new(method, path).json(body))
}

/// The first half of [`http`]: connects and writes the whole request, without waiting for
/// the answer (e.g. to a paused process, whose kernel still accepts the connection and the
/// bytes). [`http_answer`] reads the answer.
pub fn http_send(
    method: &str,
    base: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> std::io::Result<std::net::TcpStream> {
    rawhttp::send(base, &rawhttp::Request::new(method, path).json(body))
}

/// The second half of [`http`]: reads the answer to the request [`http_send`] wrote (at most
/// 30 s without a byte).
pub fn http_answer(stream: std::net::TcpStream) -> std::io::Result<HttpResponse> {
    rawhttp::read_response(stream)
}

/// The body of a 200 answer as JSON (panics with the body otherwise).
pub fn ok(r: &HttpResponse) -> serde_json::Value {
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

/// JSON integers as `i64` (panics on anything else).
pub fn ints(values: &[serde_json::Value]) -> Vec<i64> {
    values.iter().map(|v| v.as_i64().unwrap_or_else(|| panic!("not an integer: {v}"))).collect()
}

/// How often each value occurs.
pub fn counts(values: &[i64]) -> std::collections::BTreeMap<i64, usize> {
    let mut m = std::collections::BTreeMap::new();
    for v in values {
        *m.entry(*v).or_insert(0) += 1;
    }
    m
}

/// A fresh temporary directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// `$TMPDIR/shardwise-<name>-<pid>-<n>`.
    pub fn new(name: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("shardwise-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    /// The path as a string.
    pub fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The tokio runtime the tests drive the Rust client on: two worker threads (the machine's
/// cores are shared with the processes under test).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A `shardwise dispatcher` process on an ephemeral port, killed (SIGKILL) on drop.
#[derive(Debug)]
pub struct Dispatcher {
    /// The child process.
    pub child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Lines it printed before it listened.
    pub startup: Vec<String>,
    output: std::sync::Arc<std::sync::Mutex<String>>,
}

/// A started `shardwise` server process: its child, URL, startup lines and output.
struct Spawned {
    child: std::process::Child,
    url: String,
    startup: Vec<String>,
    output: std::sync::Arc<std::sync::Mutex<String>>,
}

/// Starts `shardwise SUBCOMMAND --port PORT ARGS` and waits for the line `shardwise SUBCOMMAND
/// listening on URL`; afterwards its stdout and stderr are collected in the background.
/// `wrap` is a command line that runs it (`WRAP... shardwise SUBCOMMAND ...`; it must `exec`
/// shardwise, so the child is shardwise itself), or empty.
fn spawn_server(
    wrap: &[&str],
    subcommand: &str,
    port: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<Spawned, String> {
    use std::io::BufRead;
    let mut cmd = match wrap.split_first() {
        Some((first, rest)) => {
            let mut cmd = Command::new(first);
            cmd.args(rest).arg(shardwise_bin());
            cmd
        }
        None => Command::new(shardwise_bin()),
    };
    let mut child = cmd
        .arg(subcommand)
        .args(["--port", port])
        .args(args)
        .env_remove("TF_CONFIG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    // Collect stderr from the start (a worker may log while it registers).
    let output = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    if let Some(err) = child.stderr.take() {
        let out = output.clone();
        std::thread::spawn(move || {
            let mut reader = std::io::BufReader::new(err);
            let mut line = String::new();
            while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                out.lock().expect("output lock").push_str(&line);
                line.clear();
            }
        });
    }
    let stdout = child.stdout.take().expect("stdout");
    let mut reader = std::io::BufReader::new(stdout);
    let mut startup = Vec::new();
    let prefix = format!("shardwise {subcommand} listening on ");
    let url = loop {
        let mut line = String::new();
        if reader.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            let status = child.wait().map_err(|e| e.to_string())?;
            // Let the stderr reader finish (bounded: what it has is enough for the error).
            let _ = try_poll_until(std::time::Duration::from_millis(200), || {
                if std::sync::Arc::strong_count(&output) == 1 { Ok(()) } else { Err(()) }
            });
            let err = output.lock().map(|o| o.clone()).unwrap_or_default();
            return Err(format!("exited with {:?}: {}{err}", status.code(), startup.join("")));
        }
        if let Some(rest) = line.trim().strip_prefix(&prefix) {
            break rest.to_owned();
        }
        startup.push(line);
    };
    output.lock().expect("output lock").insert_str(0, &startup.concat());
    // Keep draining stdout (so the child never blocks on a full pipe) into `output`.
    let out = output.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            out.lock().expect("output lock").push_str(&line);
            line.clear();
        }
    });
    Ok(Spawned { child, url, startup, output })
}

impl Dispatcher {
    /// Starts `shardwise dispatcher --port 0 ARGS` and waits for its listening line and for
    /// `/readyz` to answer 200.
    pub fn start(args: &[&str]) -> Dispatcher {
        Self::try_start(args).unwrap_or_else(|e| panic!("dispatcher did not start: {e}"))
    }

    /// Like [`Dispatcher::start`] but returns what it printed when it exits instead.
    pub fn try_start(args: &[&str]) -> Result<Dispatcher, String> {
        Self::try_start_env(args, &[])
    }

    /// Like [`Dispatcher::try_start`], with extra environment variables.
    pub fn try_start_env(args: &[&str], env: &[(&str, &str)]) -> Result<Dispatcher, String> {
        Self::try_start_on_env("0", args, env)
    }

    /// Like [`Dispatcher::try_start`] on a given port (e.g. the port of one that was killed).
    pub fn try_start_on(port: &str, args: &[&str]) -> Result<Dispatcher, String> {
        Self::try_start_on_env(port, args, &[])
    }

    /// Like [`Dispatcher::try_start_on`], with extra environment variables.
    pub fn try_start_on_env(
        port: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Dispatcher, String> {
        Self::try_start_wrapped(&[], port, args, env)
    }

    /// Like [`Dispatcher::try_start`], the process limited to files of at most `bytes`
    /// (`RLIMIT_FSIZE`, with `SIGXFSZ` ignored): a write past it fails with `EFBIG`, as a
    /// write to a full disk fails with `ENOSPC`, without a small filesystem to mount.
    pub fn try_start_file_size_limited(args: &[&str], bytes: u64) -> Result<Dispatcher, String> {
        let fsize = format!("--fsize={bytes}:{bytes}");
        // `trap '' XFSZ` ignores the signal, and an ignored signal stays ignored across exec.
        let wrap = ["sh", "-c", "trap '' XFSZ; exec prlimit \"$0\" -- \"$@\"", &fsize];
        Self::try_start_wrapped(&wrap, "0", args, &[])
    }

    fn try_start_wrapped(
        wrap: &[&str],
        port: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Dispatcher, String> {
        let Spawned { child, url, startup, output } =
            spawn_server(wrap, "dispatcher", port, args, env)?;
        let mut d = Dispatcher { child, url, startup, output };
        // Ready when replay finished: poll /readyz, bounded (10 s); stop if it exits.
        let ready = try_poll_until(std::time::Duration::from_secs(10), || {
            if http("GET", &d.url, "/readyz", None).is_ok_and(|r| r.status == 200) {
                return Ok(None);
            }
            match d.child.try_wait() {
                Ok(Some(status)) => Ok(Some(status)),
                _ => Err(()),
            }
        });
        match ready {
            Ok(None) => Ok(d),
            Ok(Some(status)) => {
                // Let the pipe readers finish.
                let _ = try_poll_until(std::time::Duration::from_millis(200), || {
                    if std::sync::Arc::strong_count(&d.output) == 1 { Ok(()) } else { Err(()) }
                });
                Err(format!("exited with {:?}: {}", status.code(), d.output()))
            }
            Err(()) => Err("never became ready".into()),
        }
    }

    /// Starts a replica (`shardwise dispatcher --port 0 --etcd ... ARGS`) and waits for its
    /// listening line only: a replica that follows is never ready (`/readyz` 503).
    pub fn start_replica(args: &[&str]) -> Dispatcher {
        Self::start_replica_on("0", args)
    }

    /// Like [`Dispatcher::start_replica`] on a given port (e.g. the port of one that was killed).
    pub fn start_replica_on(port: &str, args: &[&str]) -> Dispatcher {
        let Spawned { child, url, startup, output } =
            spawn_server(&[], "dispatcher", port, args, &[])
                .unwrap_or_else(|e| panic!("replica did not start: {e}"));
        Dispatcher { child, url, startup, output }
    }

    /// Everything it printed so far (stdout and stderr).
    pub fn output(&self) -> String {
        self.output.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// A request to this dispatcher.
    pub fn call(&self, method: &str, path: &str, body: Option<serde_json::Value>) -> HttpResponse {
        http(method, &self.url, path, body.as_ref())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// SIGKILL, and wait for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `shardwise worker` process on an ephemeral port, killed (SIGKILL) on drop.
#[derive(Debug)]
pub struct Worker {
    /// The child process.
    pub child: std::process::Child,
    /// `http://HOST:PORT`, its advertised address.
    pub url: String,
    output: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Worker {
    /// Starts `shardwise worker --port 0 --dispatcher DISPATCHER ARGS` and waits for its
    /// listening line, which it prints once it registered with the dispatcher.
    pub fn start(dispatcher: &str, args: &[&str]) -> Worker {
        Self::try_start(dispatcher, args).unwrap_or_else(|e| panic!("worker did not start: {e}"))
    }

    /// Like [`Worker::start`] but returns what it printed when it exits instead.
    pub fn try_start(dispatcher: &str, args: &[&str]) -> Result<Worker, String> {
        let mut all = vec!["--dispatcher", dispatcher];
        all.extend_from_slice(args);
        let Spawned { child, url, output, .. } = spawn_server(&[], "worker", "0", &all, &[])?;
        Ok(Worker { child, url, output })
    }

    /// Waits (bounded, 10 s) until its output contains `text`; false if it never does.
    pub fn wait_for_output(&self, text: &str) -> bool {
        try_poll_until(std::time::Duration::from_secs(10), || {
            if self.output().contains(text) { Ok(()) } else { Err(()) }
        })
        .is_ok()
    }

    /// Its address as the dispatcher knows it (`HOST:PORT`).
    pub fn address(&self) -> &str {
        self.url.trim_start_matches("http://").trim_start_matches("https://")
    }

    /// Everything it printed so far (stdout and stderr).
    pub fn output(&self) -> String {
        self.output.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// A request to this worker.
    pub fn call(&self, method: &str, path: &str) -> HttpResponse {
        http(method, &self.url, path, None).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// SIGKILL, and wait for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A line of `/proc/PID/status` (`VmHWM`, `VmRSS`: in KiB there), in MiB.
fn status_mib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("a live process");
    let line = status.lines().find(|l| l.starts_with(key)).expect("the key");
    let kib: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("KiB");
    kib >> 10
}

/// The peak resident memory of a live process so far (`VmHWM`), in MiB.
pub fn peak_rss_mib(pid: u32) -> u64 {
    status_mib(pid, "VmHWM:")
}

/// The resident memory of a live process now (`VmRSS`), in MiB.
pub fn rss_mib(pid: u32) -> u64 {
    status_mib(pid, "VmRSS:")
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root").to_owned()
}

/// The cargo target directory this test executable was built in
/// (`<target>/<profile>/deps/<test>` -> `<target>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors().nth(3).expect("target dir above <profile>/deps").to_owned()
}

/// A child process with captured output: stdout line by line (also on a channel, to wait for
/// a line) and stderr whole. Killed (SIGKILL) on drop.
#[derive(Debug)]
pub struct Process {
    /// The child process.
    pub child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    stdout: std::sync::Arc<std::sync::Mutex<String>>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    stdin: Option<std::process::ChildStdin>,
}

impl Process {
    /// Spawns `cmd` with no stdin and piped stdout and stderr.
    pub fn spawn(cmd: &mut Command) -> Process {
        Self::spawn_with_stdin(cmd.stdin(Stdio::null()))
    }

    /// Spawns `cmd` with piped stdin (see [`Process::send_line`]), stdout and stderr.
    pub fn spawn_piped(cmd: &mut Command) -> Process {
        let mut p = Self::spawn_with_stdin(cmd.stdin(Stdio::piped()));
        p.stdin = p.child.stdin.take();
        p
    }

    /// Writes `line` and a newline to its stdin (spawned with [`Process::spawn_piped`]).
    pub fn send_line(&mut self, line: &str) -> std::io::Result<()> {
        let stdin = self.stdin.as_mut().ok_or_else(|| std::io::Error::other("no stdin pipe"))?;
        stdin.write_all(format!("{line}\n").as_bytes())?;
        stdin.flush()
    }

    fn spawn_with_stdin(cmd: &mut Command) -> Process {
        use std::io::{BufRead, Read};
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (out, mut pipe) =
            (stdout.clone(), std::io::BufReader::new(child.stdout.take().expect("stdout")));
        let out_reader = std::thread::spawn(move || {
            let mut line = String::new();
            while pipe.read_line(&mut line).is_ok_and(|n| n > 0) {
                out.lock().expect("stdout lock").push_str(&line);
                let _ = tx.send(line.trim_end_matches('\n').to_owned());
                line.clear();
            }
        });
        let (err, mut pipe) = (stderr.clone(), child.stderr.take().expect("stderr"));
        let err_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut buf) {
                err.lock().expect("stderr lock").push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Process { child, lines, stdout, stderr, readers: vec![out_reader, err_reader], stdin: None }
    }

    /// Waits (at most `timeout`) for a stdout line `pred` accepts, skipping the others.
    pub fn wait_for_line(
        &self,
        pred: impl Fn(&str) -> bool,
        timeout: std::time::Duration,
    ) -> Option<String> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if pred(&line) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Everything it printed so far: (stdout, stderr).
    pub fn output(&self) -> (String, String) {
        let get = |s: &std::sync::Mutex<String>| s.lock().map(|s| s.clone()).unwrap_or_default();
        (get(&self.stdout), get(&self.stderr))
    }

    /// Waits (at most `timeout`) for it to exit and returns its status and whole output; on
    /// a timeout it is killed and the error tells what it printed.
    pub fn finish(&mut self, timeout: std::time::Duration) -> Result<Run, String> {
        let child = &mut self.child;
        let exited = try_poll_until(timeout, || match child.try_wait() {
            Ok(Some(status)) => Ok(Ok(status)),
            Ok(None) => Err(()),
            Err(e) => Ok(Err(e)),
        });
        let Ok(Ok(status)) = exited else {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let (stdout, stderr) = self.output();
            return Err(format!(
                "still running after {timeout:?}; killed.\nstdout:\n{stdout}\nstderr:\n{stderr}"
            ));
        };
        // The pipes close when it exits, unless a child of its own still holds them: give
        // the readers a bounded time to see the end of its output.
        let readers = &self.readers;
        let _ = try_poll_until(std::time::Duration::from_secs(5), || {
            if readers.iter().all(|r| r.is_finished()) { Ok(()) } else { Err(()) }
        });
        let (stdout, stderr) = self.output();
        Ok(Run { code: status.code().unwrap_or(-1), stdout, stderr })
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cmd` to its end within `timeout`, output captured; panics (with its output) when it
/// takes longer.
pub fn run_bounded(cmd: &mut Command, timeout: std::time::Duration) -> Run {
    let what = format!("{cmd:?}");
    Process::spawn(cmd).finish(timeout).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Builds a Python venv at `venv` (removing what was there) and `pip install -r
/// requirements_file` into it, each step bounded (`pip_timeout` for the install); panics with the
/// step's output when one fails. The caller holds its setup lock and keeps its own stamp.
pub fn build_venv(
    venv: &std::path::Path,
    requirements_file: &std::path::Path,
    pip_timeout: std::time::Duration,
) {
    let _ = std::fs::remove_dir_all(venv);
    assert_ran(
        "python3 -m venv",
        &run_bounded(
            Command::new("python3").arg("-m").arg("venv").arg(venv),
            std::time::Duration::from_secs(120),
        ),
    );
    assert_ran(
        &format!("pip install -r {}", requirements_file.display()),
        &run_bounded(
            Command::new(venv.join("bin/python"))
                .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input"])
                .arg("-r")
                .arg(requirements_file),
            pip_timeout,
        ),
    );
}

/// Panics with `what`, the exit status and both outputs unless `run` exited 0.
pub fn assert_ran(what: &str, run: &Run) {
    assert_eq!(run.code, 0, "{what} failed:\nstdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
}
