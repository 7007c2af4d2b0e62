//! A real etcd cluster for the tests: `n` `etcd` processes (Debian's `etcd-server`, which
//! `.ci/run` installs) on 127.0.0.1, data in a [`TempDir`], output captured and printed when a
//! test fails.
//!
//! Members are started without waiting; [`EtcdCluster::ready`] polls `GET /health` of every
//! running member, with a deadline, until each answers that it is healthy (which etcd reports
//! only when the member has a leader and can serve a linearizable read).

use std::process::Command;
use std::time::Duration;

use crate::{Process, TempDir, http, run_bounded, try_poll_until};

/// How long [`EtcdCluster::ready`] waits by default: an election takes about one election
/// timeout (500 ms here) on a quiet machine, much longer on a busy one.
pub const READY_DEADLINE: Duration = Duration::from_secs(20);

/// What the tests did to a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Stopped,
    Killed,
}

#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: std::path::PathBuf,
    process: Option<Process>,
    state: State,
    /// The output of its earlier processes (before a kill or restart).
    past_output: String,
}

/// `n` etcd members forming one cluster; every process is killed (SIGKILL) on drop, then the
/// data directories are removed.
#[derive(Debug)]
pub struct EtcdCluster {
    // Declared before `dir`: the processes die before their data directories go.
    members: Vec<Member>,
    initial_cluster: String,
    token: String,
    /// More flags of every member (e.g. `--quota-backend-bytes`).
    extra: Vec<String>,
    /// Whether the cluster has been ready once: until then a member that could not bind its
    /// port makes [`EtcdCluster::ready`] start every member again on new ports.
    formed: bool,
    dir: TempDir,
}

/// `n` distinct free ports on 127.0.0.1 for etcd to bind. etcd needs its peer URLs up front
/// (every member's `--initial-cluster` names all of them), so it cannot be told to pick a port
/// itself and report it: the ports are chosen here, checked by binding them all at once, and
/// closed again for etcd.
///
/// They come from below the kernel's ephemeral range, where the source ports of outgoing
/// connections (etcd's own peers, every client of every test) are drawn: a port released by
/// `bind(0)` is soon handed out again as one of those. Another test can still choose the same
/// port at the same moment; [`EtcdCluster::ready`] then forms the cluster again on new ports.
fn free_ports(n: usize) -> Vec<u16> {
    use std::hash::{BuildHasher, Hasher};
    // The ephemeral range starts at 32768 by default (`net.ipv4.ip_local_port_range`).
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let mut listeners: Vec<std::net::TcpListener> = Vec::new();
    if low > 12_000 {
        let span = u64::from(low - 10_000);
        let state = std::collections::hash_map::RandomState::new();
        for attempt in 0u64..10_000 {
            if listeners.len() == n {
                break;
            }
            let mut h = state.build_hasher();
            h.write_u64(attempt);
            let port = 10_000 + (h.finish() % span) as u16;
            if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
                listeners.push(l);
            }
        }
    }
    // A machine whose ephemeral range starts low: whatever the kernel hands out.
    while listeners.len() < n {
        listeners.push(std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"));
    }
    listeners.iter().map(|l| l.local_addr().expect("local addr").port()).collect()
}

/// How often [`EtcdCluster::ready`] forms a new cluster on new ports when a member of one that
/// never became ready could not bind its port.
const PORT_RETRIES: usize = 5;

impl EtcdCluster {
    /// Starts `n` members (without waiting: see [`EtcdCluster::ready`]).
    pub fn start(n: usize) -> EtcdCluster {
        EtcdCluster::start_with(n, &[])
    }

    /// Like [`EtcdCluster::start`], every member given the flags `extra` as well (e.g. a tiny
    /// `--quota-backend-bytes`).
    pub fn start_with(n: usize, extra: &[&str]) -> EtcdCluster {
        assert!(n > 0, "an etcd cluster needs a member");
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let k = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = TempDir::new("etcd");
        // Unique per cluster, so members of two test clusters can never join each other.
        let token = format!("shardwise-test-{}-{k}", std::process::id());
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let mut cluster = EtcdCluster {
            members: Vec::new(),
            initial_cluster: String::new(),
            token,
            extra,
            formed: false,
            dir,
        };
        cluster.form(n);
        cluster
    }

    /// Chooses ports for `n` members and starts them with empty data directories.
    fn form(&mut self, n: usize) {
        let ports = free_ports(2 * n);
        self.members = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                data_dir: self.dir.0.join(format!("m{i}")),
                process: None,
                state: State::Killed,
                past_output: String::new(),
            })
            .collect();
        self.initial_cluster = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        for i in 0..n {
            self.spawn(i);
        }
    }

    /// Kills every member of a cluster that was never ready, removes their data and starts them
    /// again on new ports, when one of them could not bind its port; false otherwise.
    fn reform_after_port_clash(&mut self) -> bool {
        let clash = self.members.iter().any(|m| {
            m.process.as_ref().is_some_and(|p| p.output().1.contains("address already in use"))
        });
        if self.formed || !clash {
            return false;
        }
        let n = self.members.len();
        self.members.clear();
        for i in 0..n {
            let _ = std::fs::remove_dir_all(self.dir.0.join(format!("m{i}")));
        }
        // A new token too: nothing of the first attempt can join the second.
        self.token.push('r');
        self.form(n);
        true
    }

    /// Starts member `i`'s process with its ports and data directory.
    fn spawn(&mut self, i: usize) {
        let m = &self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data_dir)
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            // Ignored by etcd once the data directory exists (a restart rejoins as before).
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.token])
            // Faster elections than the defaults (100 ms, 1 s) keep failover tests short.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(&self.extra);
        // The host's etcd settings (ETCD_*) must not leak into a test cluster.
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| k.starts_with("ETCD_")) {
                cmd.env_remove(k);
            }
        }
        let process = Process::spawn(&mut cmd);
        let m = &mut self.members[i];
        m.process = Some(process);
        m.state = State::Running;
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no members (never: [`EtcdCluster::start`] needs one).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// `http://127.0.0.1:PORT` of every member, in member order (stopped or killed ones too).
    pub fn client_urls(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.client_url(i)).collect()
    }

    /// The process ids of the members that have a process (running or stopped), in member
    /// order: e.g. to read their CPU time from `/proc/<pid>/stat`.
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().filter_map(|m| m.process.as_ref().map(|p| p.child.id())).collect()
    }

    /// `http://127.0.0.1:PORT` of member `i`.
    pub fn client_url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    /// Waits (at most [`READY_DEADLINE`]) until every running member reports itself healthy:
    /// the cluster has a leader and quorum. Panics with every member's output otherwise, or
    /// when a member exited.
    pub fn ready(&mut self) {
        self.ready_within(READY_DEADLINE)
    }

    /// [`EtcdCluster::ready`] with a deadline of its own.
    pub fn ready_within(&mut self, deadline: Duration) {
        if let Err(e) = self.try_ready_within(deadline) {
            panic!("{e}");
        }
    }

    /// [`EtcdCluster::ready_within`] that says why instead of panicking (for a tool that reports
    /// the failure its own way, e.g. the load generator): the error has every member's output.
    pub fn try_ready_within(&mut self, deadline: Duration) -> Result<(), String> {
        let mut result = self.poll_ready(deadline);
        for _ in 0..PORT_RETRIES {
            if !matches!(result, Ok(Err(_))) || !self.reform_after_port_clash() {
                break;
            }
            result = self.poll_ready(deadline);
        }
        match result {
            Ok(Ok(())) => {
                self.formed = true;
                Ok(())
            }
            Ok(Err(exited)) => Err(format!("etcd: {exited}\n{}", self.outputs())),
            Err(last) => {
                Err(format!("etcd not ready within {deadline:?}: {last}\n{}", self.outputs()))
            }
        }
    }

    /// Polls every running member's health until all are healthy (`Ok(Ok)`), one exited
    /// (`Ok(Err)`), or the deadline passed (`Err`, the last answers).
    fn poll_ready(&mut self, deadline: Duration) -> Result<Result<(), String>, String> {
        try_poll_until(deadline, || {
            let mut unhealthy = Vec::new();
            for i in 0..self.members.len() {
                if self.members[i].state != State::Running {
                    continue;
                }
                if let Some(status) =
                    self.members[i].process.as_mut().and_then(|p| p.child.try_wait().ok().flatten())
                {
                    return Ok(Err(format!("member {i} exited: {status}")));
                }
                if let Err(e) = self.health(i) {
                    unhealthy.push(format!("member {i}: {e}"));
                }
            }
            if unhealthy.is_empty() { Ok(Ok(())) } else { Err(unhealthy.join("; ")) }
        })
    }

    /// `GET /health` of member `i`: `Ok` when it answers `{"health":"true"}`.
    fn health(&self, i: usize) -> Result<(), String> {
        let r = http("GET", &self.client_url(i), "/health", None).map_err(|e| e.to_string())?;
        let healthy = r.status == 200
            && serde_json::from_str::<serde_json::Value>(&r.body)
                .is_ok_and(|v| v["health"] == "true");
        if healthy { Ok(()) } else { Err(format!("{} {}", r.status, r.body.trim())) }
    }

    /// SIGKILL member `i` and wait for it (its data directory stays, for [`restart`]).
    ///
    /// [`restart`]: EtcdCluster::restart
    pub fn kill(&mut self, i: usize) {
        let m = &mut self.members[i];
        if let Some(mut p) = m.process.take() {
            let _ = p.child.kill();
            let _ = p.finish(Duration::from_secs(10));
            let (stdout, stderr) = p.output();
            m.past_output.push_str(&stdout);
            m.past_output.push_str(&stderr);
            m.past_output.push_str("-- killed (SIGKILL)\n");
        }
        m.state = State::Killed;
    }

    /// SIGSTOP member `i`: it stays alive but does nothing (as a paused or partitioned machine).
    pub fn stop(&mut self, i: usize) {
        self.signal(i, "STOP");
        self.members[i].state = State::Stopped;
    }

    /// SIGCONT member `i` after [`EtcdCluster::stop`].
    pub fn cont(&mut self, i: usize) {
        self.signal(i, "CONT");
        self.members[i].state = State::Running;
    }

    /// Sends `SIG` to member `i` with `kill -SIG PID` (no `unsafe` in the tests).
    fn signal(&self, i: usize, sig: &str) {
        let p = self.members[i].process.as_ref().unwrap_or_else(|| panic!("member {i} is dead"));
        let run = run_bounded(
            Command::new("kill").arg(format!("-{sig}")).arg(p.child.id().to_string()),
            Duration::from_secs(10),
        );
        crate::assert_ran(&format!("kill -{sig} member {i}"), &run);
    }

    /// Kills member `i` if it runs and starts it again on the same ports and data directory
    /// (without waiting: see [`EtcdCluster::ready`]).
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
    }

    /// Everything every member printed so far (earlier processes included), for a failure
    /// message.
    pub fn outputs(&self) -> String {
        let mut all = String::new();
        for (i, m) in self.members.iter().enumerate() {
            let (stdout, stderr) = m.process.as_ref().map(|p| p.output()).unwrap_or_default();
            all.push_str(&format!(
                "== etcd member {i} ({}, client {}, peer {}, {:?}):\n{}{stdout}{stderr}\n",
                m.name, m.client_port, m.peer_port, m.state, m.past_output
            ));
        }
        all
    }

    /// The directory holding the members' data directories.
    pub fn dir(&self) -> &str {
        self.dir.path()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        // A failing test shows what etcd said.
        if std::thread::panicking() {
            eprintln!("{}", self.outputs());
        }
        // A stopped member dies of SIGKILL as well; `Process` kills and reaps on drop.
        self.members.clear();
    }
}
