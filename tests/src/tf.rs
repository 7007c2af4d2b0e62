//! TensorFlow for the tests: a venv with `tensorflow-cpu` and TensorFlow's own tf.data service
//! processes (`tests/tf/service.py`).
//!
//! The venv is built once per target directory and shared by every test process:
//! `<target>/tf-venv` (`python3 -m venv` and `pip install -r tests/tf/requirements.txt`, all
//! pinned). An exclusive lock on `<target>/tf-setup.lock` serialises the setup (the kernel
//! releases it when a process dies, so a killed setup leaves no stale lock); a stamp (the
//! requirements) tells when it must be rebuilt. Needs `python3` with `venv` and `pip`, and
//! PyPI, the first time.
//!
//! TensorFlow logs a lot at import: every process here runs with its output captured, which a
//! failing test prints.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{Dispatcher, Process, Run, Worker, assert_ran, repo_root, run_bounded, target_dir};

/// The TensorFlow venv.
#[derive(Debug)]
pub struct TfEnv {
    /// `<venv>/bin/python`.
    pub python: PathBuf,
}

/// The venv with `tests/tf/requirements.txt`, built at most once per target directory (and
/// again only when the requirements change).
pub fn tf_env() -> &'static TfEnv {
    static ENV: OnceLock<TfEnv> = OnceLock::new();
    ENV.get_or_init(|| {
        let target = target_dir();
        let venv = target.join("tf-venv");
        let python = venv.join("bin/python");
        let requirements_file = repo_root().join("tests/tf/requirements.txt");
        let requirements = std::fs::read_to_string(&requirements_file).expect("requirements");
        let stamp = venv.join("shardwise-requirements.txt");

        std::fs::create_dir_all(&target).expect("target dir");
        let lock = std::fs::File::create(target.join("tf-setup.lock")).expect("lock file");
        let waited = Instant::now();
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    // Another test process is building the venv.
                    assert!(
                        waited.elapsed() < Duration::from_secs(900),
                        "tf-setup.lock held 15 min"
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(std::fs::TryLockError::Error(e)) => panic!("lock tf-setup.lock: {e}"),
            }
        }
        let stamped = std::fs::read_to_string(&stamp).is_ok_and(|s| s == requirements);
        if !stamped || !python.exists() {
            let started = Instant::now();
            crate::build_venv(&venv, &requirements_file, Duration::from_secs(900));
            std::fs::write(&stamp, &requirements).expect("venv stamp");
            eprintln!("tf: built {} in {:?}", venv.display(), started.elapsed());
        }
        drop(lock);
        TfEnv { python }
    })
}

/// `python tests/tf/SCRIPT ARGS` in the TensorFlow venv: unbuffered, no proxies (gRPC would
/// send loopback calls to one), no bytecode written into the repository.
pub fn script(script: &str, args: &[&str]) -> Command {
    python(&repo_root().join("tests/tf").join(script), args)
}

/// `python PATH ARGS` in the TensorFlow venv, set up as [`script`] says.
pub fn python(path: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(&tf_env().python);
    cmd.arg(path).args(args).env("PYTHONUNBUFFERED", "1").env("PYTHONDONTWRITEBYTECODE", "1");
    for proxy in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "grpc_proxy",
        "GRPC_PROXY",
        "all_proxy",
        "ALL_PROXY",
    ] {
        cmd.env_remove(proxy);
    }
    cmd
}

/// Runs `python tests/tf/SCRIPT ARGS` to its end within `timeout`; panics with its output when
/// it fails or takes longer.
pub fn run_script(name: &str, args: &[&str], timeout: Duration) -> Run {
    let run = run_bounded(&mut script(name, args), timeout);
    assert_ran(&format!("tests/tf/{name} {}", args.join(" ")), &run);
    run
}

/// The serialized `GraphDef` of each dataset of `tests/tf/graphs.py`, written once per target
/// directory into `<target>/tf-graphs/NAME.pb` (under the lock `<target>/tf-graphs.lock`).
pub fn graphs_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let target = target_dir();
        let dir = target.join("tf-graphs");
        // Written again when the script or TensorFlow changes.
        let script_text = std::fs::read_to_string(repo_root().join("tests/tf/graphs.py"))
            .expect("graphs.py")
            + &std::fs::read_to_string(repo_root().join("tests/tf/requirements.txt"))
                .expect("requirements");
        let stamp = dir.join("stamp");
        tf_env();
        let lock = std::fs::File::create(target.join("tf-graphs.lock")).expect("lock file");
        lock.lock().expect("lock tf-graphs.lock");
        if !std::fs::read_to_string(&stamp).is_ok_and(|s| s == script_text) {
            let _ = std::fs::remove_dir_all(&dir);
            let tmp = target.join("tf-graphs.tmp");
            let _ = std::fs::remove_dir_all(&tmp);
            let tmp_arg = tmp.to_str().expect("utf-8 target dir");
            let run = run_script("graphs.py", &[tmp_arg], Duration::from_secs(300));
            assert!(run.stdout.lines().any(|l| l == "done"), "graphs.py: {}", run.stdout);
            std::fs::write(tmp.join("stamp"), &script_text).expect("graphs stamp");
            std::fs::rename(&tmp, &dir).expect("tf-graphs");
        }
        drop(lock);
        dir
    })
}

/// The serialized `GraphDef` of the dataset `name` of `tests/tf/graphs.py`.
pub fn graph(name: &str) -> Vec<u8> {
    let path = graphs_dir().join(format!("{name}.pb"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A TensorFlow server process of `tests/tf/service.py` (`dispatcher` or `worker`), serving on
/// the ports it printed. Killed on drop.
#[derive(Debug)]
pub struct TfServer {
    /// The process, output captured.
    pub process: Process,
    /// The port it serves on (the first worker's, for a process of several workers).
    pub port: u16,
    /// Every port it serves on: one per `WorkerServer` it hosts, in the order of `--port`.
    pub ports: Vec<u16>,
}

impl TfServer {
    /// Starts `service.py ROLE ARGS` and waits (at most 120 s: TensorFlow's import is slow on
    /// a busy machine) for its `PORT <port>` line.
    pub fn start(role: &str, args: &[&str]) -> TfServer {
        TfServer::ready(role, TfServer::spawn(role, args))
    }

    /// Starts `service.py ROLE ARGS` without waiting for it: [`TfServer::ready`] does, so that
    /// several TensorFlow processes import TensorFlow at the same time.
    pub fn spawn(role: &str, args: &[&str]) -> Process {
        let mut all = vec![role];
        all.extend_from_slice(args);
        Process::spawn(&mut script("service.py", &all))
    }

    /// Waits (at most 120 s) for the `PORT <port>` line of a server [`TfServer::spawn`]
    /// started; panics with its output when it exits or never prints it.
    pub fn ready(role: &str, process: Process) -> TfServer {
        TfServer::ready_n(role, process, 1)
    }

    /// [`TfServer::ready`] for a process hosting `n` servers (`service.py worker --port
    /// P,P,...`): waits for its `n` `PORT` lines.
    pub fn ready_n(role: &str, mut process: Process, n: usize) -> TfServer {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let mut ports = Vec::with_capacity(n);
        while ports.len() < n {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = process.wait_for_line(|l| l.starts_with("PORT "), left);
            match line.and_then(|l| l["PORT ".len()..].trim().parse().ok()) {
                Some(port) => ports.push(port),
                None => {
                    let _ = process.child.kill();
                    let (stdout, stderr) = process.output();
                    panic!(
                        "TensorFlow {role} did not start (ports so far: {ports:?}):\n\
                         stdout:\n{stdout}\nstderr:\n{stderr}"
                    );
                }
            }
        }
        TfServer { process, port: ports[0], ports }
    }

    /// TensorFlow's `DispatchServer`.
    pub fn dispatcher() -> TfServer {
        TfServer::start("dispatcher", &[])
    }

    /// TensorFlow's `WorkerServer`, registered with the dispatcher at `dispatcher`
    /// (`HOST:PORT`).
    pub fn worker(dispatcher: &str) -> TfServer {
        TfServer::start("worker", &[dispatcher])
    }

    /// `n` `WorkerServer`s in one process (one TensorFlow import), each on a port of its own,
    /// registered with the dispatcher at `dispatcher`, started without waiting:
    /// [`TfServer::ready_n`] does. `args`: more `service.py worker` options (e.g. `--tags`).
    pub fn spawn_workers(dispatcher: &str, ports: &[Option<u16>], args: &[&str]) -> Process {
        let ports: Vec<String> = ports.iter().map(|p| p.unwrap_or(0).to_string()).collect();
        let ports = ports.join(",");
        let mut all = vec![dispatcher, "--port", &ports];
        all.extend_from_slice(args);
        TfServer::spawn("worker", &all)
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT` of every server it hosts.
    pub fn addresses(&self) -> Vec<String> {
        self.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect()
    }

    /// Everything it printed so far: (stdout, stderr).
    pub fn output(&self) -> (String, String) {
        self.process.output()
    }
}

/// `python tests/tf/e2e.py read SERVICE ARGS`: a TensorFlow `distribute` client in its own
/// process, stdin piped (for `--pause-after`). It prints one JSON line ([`client_result`]).
pub fn client(service: &str, args: &[&str]) -> Process {
    let mut all = vec!["read", service];
    all.extend_from_slice(args);
    Process::spawn_piped(&mut script("e2e.py", &all))
}

/// The JSON line a [`client`] printed last (`{"elements": [...]}` or `{"error": ..., "code":
/// ...}`), `None` when it printed none.
pub fn client_result(stdout: &str) -> Option<serde_json::Value> {
    stdout.lines().rev().find(|l| l.starts_with('{')).and_then(|l| serde_json::from_str(l).ok())
}

/// How long a client may take to import TensorFlow, read and print (a busy 2-core machine).
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(180);

/// Which dispatcher a scenario runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// TensorFlow's `DispatchServer`, in its own Python process.
    TensorFlow,
    /// `shardwise dispatcher`.
    Shardwise,
}

/// How a dispatcher is started.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// The port (`None`: an ephemeral one).
    pub port: Option<u16>,
    /// `--work-dir`.
    pub work_dir: Option<String>,
    /// `--fault-tolerant`.
    pub fault_tolerant: bool,
    /// The static worker list (`HOST:PORT`s).
    pub worker_addresses: Vec<String>,
}

/// A running dispatcher of either kind.
#[derive(Debug)]
pub enum Running {
    /// TensorFlow's `DispatchServer`.
    TensorFlow(TfServer),
    /// `shardwise dispatcher`.
    Shardwise(Dispatcher),
}

/// A dispatcher, its TensorFlow workers and clients. When a test fails (panics) while it is
/// alive, it prints what every process printed.
#[derive(Debug)]
pub struct Cluster {
    /// Which dispatcher.
    pub kind: Kind,
    /// How it is started (again, after a kill).
    pub config: Config,
    /// The dispatcher (`None` while killed).
    pub dispatcher: Option<Running>,
    /// Its port.
    pub port: u16,
    /// TensorFlow worker processes: one per [`Cluster::add_workers`] call, hosting that call's
    /// workers.
    pub workers: Vec<TfServer>,
    /// How many workers a client waits for (GetWorkers) before it starts its iteration.
    pub expected_workers: usize,
    /// Client processes, by label.
    pub clients: Vec<(String, Process)>,
    /// `shardwise worker`s (a mixed fleet).
    pub shardwise_workers: Vec<Worker>,
    /// Output of processes that are gone (a killed dispatcher, finished clients).
    pub gone: Vec<String>,
}

impl Cluster {
    /// Starts the dispatcher (no workers yet).
    pub fn start(kind: Kind, config: Config) -> Cluster {
        let mut cluster = Cluster {
            kind,
            config,
            dispatcher: None,
            port: 0,
            workers: Vec::new(),
            expected_workers: 0,
            clients: Vec::new(),
            shardwise_workers: Vec::new(),
            gone: Vec::new(),
        };
        cluster.start_dispatcher();
        cluster
    }

    /// Starts the dispatcher as its configuration says.
    pub fn start_dispatcher(&mut self) {
        let c = &self.config;
        let port = c.port.unwrap_or(0).to_string();
        let addresses = c.worker_addresses.join(",");
        let mut args: Vec<&str> = Vec::new();
        if let Some(dir) = &c.work_dir {
            args.extend(["--work-dir", dir]);
        }
        if c.fault_tolerant {
            args.push("--fault-tolerant");
        }
        if !addresses.is_empty() {
            args.extend(["--worker-addresses", &addresses]);
        }
        let running = match self.kind {
            Kind::TensorFlow => {
                args.extend(["--port", &port]);
                Running::TensorFlow(TfServer::start("dispatcher", &args))
            }
            Kind::Shardwise => {
                // TensorFlow's test-speed garbage collection, as service.py sets it.
                args.extend(["--job-gc-check-interval", "200ms"]);
                let d = Dispatcher::try_start_on(&port, &args)
                    .unwrap_or_else(|e| panic!("shardwise dispatcher did not start: {e}"));
                Running::Shardwise(d)
            }
        };
        self.port = match &running {
            Running::TensorFlow(s) => s.port,
            Running::Shardwise(d) => {
                d.url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port in the URL")
            }
        };
        self.dispatcher = Some(running);
    }

    /// `127.0.0.1:PORT`, as workers are given it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `grpc://127.0.0.1:PORT`, as clients are given it.
    pub fn service(&self) -> String {
        format!("grpc://{}", self.address())
    }

    /// The Shardwise dispatcher; panics for another kind or while it is killed.
    pub fn shardwise(&self) -> &Dispatcher {
        match &self.dispatcher {
            Some(Running::Shardwise(d)) => d,
            _ => panic!("not a running shardwise dispatcher"),
        }
    }

    /// Starts TensorFlow workers, one per entry (`Some(port)`: on that port), in one process
    /// (one TensorFlow import); waits for them after `meanwhile` (e.g. starting the clients,
    /// which wait for every worker to register before they start their iteration).
    pub fn add_workers<T>(
        &mut self,
        ports: &[Option<u16>],
        meanwhile: impl FnOnce(&mut Self) -> T,
    ) -> T {
        self.add_workers_with(ports, &[], meanwhile)
    }

    /// [`Cluster::add_workers`] with more `service.py worker` arguments (e.g. `--tags A,B`).
    pub fn add_workers_with<T>(
        &mut self,
        ports: &[Option<u16>],
        args: &[&str],
        meanwhile: impl FnOnce(&mut Self) -> T,
    ) -> T {
        self.expected_workers += ports.len();
        let spawned = TfServer::spawn_workers(&self.address(), ports, args);
        let out = meanwhile(self);
        self.workers.push(TfServer::ready_n("worker", spawned, ports.len()));
        out
    }

    /// `127.0.0.1:PORT` of every TensorFlow worker, in the order they were added.
    pub fn worker_addresses(&self) -> Vec<String> {
        self.workers.iter().flat_map(TfServer::addresses).collect()
    }

    /// Starts `e2e.py read SERVICE ARGS`; [`Cluster::finish`] takes its result.
    pub fn spawn_client(&mut self, args: &[&str]) -> usize {
        let label = format!("client {}", args.join(" "));
        let wait = self.expected_workers.to_string();
        let mut all = args.to_vec();
        all.extend(["--wait-workers", &wait]);
        self.clients.push((label, client(&self.service(), &all)));
        self.clients.len() - 1
    }

    /// Starts `jobs.py SCENARIO SERVICE ARGS` (waiting for every worker first); [`Cluster::finish`]
    /// takes its result.
    pub fn spawn_jobs_client(&mut self, scenario: &str, args: &[&str]) -> usize {
        self.spawn_script_client("jobs.py", scenario, args)
    }

    /// Starts `tests/tf/SCRIPT SCENARIO SERVICE ARGS --wait-workers N` (N: every worker started
    /// so far); [`Cluster::finish`] takes its result.
    pub fn spawn_script_client(
        &mut self,
        script_name: &str,
        scenario: &str,
        args: &[&str],
    ) -> usize {
        let label = format!("{script_name} {scenario} {}", args.join(" "));
        let wait = self.expected_workers.to_string();
        let service = self.service();
        let mut all = vec![scenario, &service];
        all.extend_from_slice(args);
        all.extend(["--wait-workers", &wait]);
        let process = Process::spawn_piped(&mut script(script_name, &all));
        self.clients.push((label, process));
        self.clients.len() - 1
    }

    /// Waits for client `i` to print its result and exit.
    pub fn finish(&mut self, i: usize) -> Value {
        let (label, process) = &mut self.clients[i];
        let run = match process.finish(CLIENT_DEADLINE) {
            Ok(run) => run,
            Err(e) => panic!("{label}: {e}"),
        };
        let result = client_result(&run.stdout);
        match result {
            Some(v) if run.code == 0 => {
                self.gone.push(format!("{label}:\n{}\n{}", run.stdout, run.stderr));
                v
            }
            _ => panic!("{label} exited {}:\n{}\n{}", run.code, run.stdout, run.stderr),
        }
    }

    /// Runs one client to its end.
    pub fn read(&mut self, args: &[&str]) -> Value {
        let i = self.spawn_client(args);
        self.finish(i)
    }

    /// SIGKILL to the dispatcher (its output is kept for a failure report).
    pub fn kill_dispatcher(&mut self) {
        match self.dispatcher.take() {
            Some(Running::TensorFlow(mut s)) => {
                let _ = s.process.child.kill();
                let _ = s.process.child.wait();
                let (out, err) = s.output();
                self.gone.push(format!("killed TensorFlow dispatcher:\n{out}\n{err}"));
            }
            Some(Running::Shardwise(mut d)) => {
                d.kill();
                self.gone.push(format!("killed shardwise dispatcher:\n{}", d.output()));
            }
            None => {}
        }
    }

    /// Starts the dispatcher again on the port it had, with its configuration (and work dir).
    pub fn restart_dispatcher(&mut self) {
        self.config.port = Some(self.port);
        self.start_dispatcher();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        eprintln!("==== {:?} cluster on port {}", self.kind, self.port);
        for text in &self.gone {
            eprintln!("==== {text}");
        }
        match &self.dispatcher {
            Some(Running::TensorFlow(s)) => {
                let (out, err) = s.output();
                eprintln!("==== TensorFlow dispatcher:\n{out}\n{err}");
            }
            Some(Running::Shardwise(d)) => eprintln!("==== shardwise dispatcher:\n{}", d.output()),
            None => {}
        }
        for w in &self.workers {
            let (out, err) = w.output();
            eprintln!("==== TensorFlow workers {:?}:\n{out}\n{err}", w.ports);
        }
        for (label, p) in &self.clients {
            let (out, err) = p.output();
            eprintln!("==== {label}:\n{out}\n{err}");
        }
        for w in &self.shardwise_workers {
            eprintln!("==== shardwise worker {}:\n{}", w.url, w.output());
        }
    }
}
