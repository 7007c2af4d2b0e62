//! The `shardwise` processes as an operator runs them: one owner per work dir, a listening
//! line that means serving, each role its own environment names, plain logs when stderr is
//! not a terminal, and bounded time to read a request (issue 11, points 1, 10, 11, 12, 13).

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use shardwise_tests::rawhttp::{self, Request};
use shardwise_tests::{
    Dispatcher, Process, TempDir, Worker, http, poll_until, run_bounded, run_shardwise,
    shardwise_bin,
};

const ADMIN: &str = "admin-token-0123456789";
const WORKER: &str = "worker-token-0123456789";
const MONITOR: &str = "monitor-token-0123456789";

/// `shardwise ARGS` with only `PATH` and `env` in its environment (nothing from the host's
/// own `SHARDWISE_*`), stdout and stderr captured.
fn spawn(args: &[&str], env: &[(&str, &str)]) -> Process {
    let mut cmd = Command::new(shardwise_bin());
    cmd.args(args).env_clear();
    if let Ok(path) = std::env::var("PATH") {
        cmd.env("PATH", path);
    }
    Process::spawn(cmd.envs(env.iter().copied()))
}

/// Waits for `shardwise ROLE listening on URL` and returns the URL.
fn listening(p: &Process, role: &str) -> String {
    let prefix = format!("shardwise {role} listening on ");
    let line = p
        .wait_for_line(|l| l.starts_with(&prefix), Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no listening line from the {role}: {:?}", p.output()));
    line[prefix.len()..].trim().to_owned()
}

/// A port the OS just handed out (bound with port 0, then released).
fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port().to_string()
}

/// A token file with admin, worker and monitor tokens, and the worker's `--token-file`.
fn token_files(dir: &TempDir) -> (String, String) {
    let file = dir.0.join("tokens.json");
    let tokens = json!({"tokens": [
        {"role": "admin", "token": ADMIN}, {"role": "worker", "token": WORKER},
        {"role": "monitor", "token": MONITOR}
    ]});
    std::fs::write(&file, tokens.to_string()).unwrap();
    let worker = dir.0.join("worker-token");
    std::fs::write(&worker, WORKER).unwrap();
    (file.to_str().unwrap().to_owned(), worker.to_str().unwrap().to_owned())
}

/// `GET path` with an optional bearer token; the status.
fn get_status(url: &str, path: &str, token: Option<&str>) -> u16 {
    let raw = rawhttp::one_shot_text(url, &Request::new("GET", path).bearer(token)).unwrap();
    rawhttp::status_of(&raw)
}

// ---- point 12: each role its own environment names ------------------------------------

/// The dispatcher's `SHARDWISE_HOST`, `SHARDWISE_PORT` and `SHARDWISE_AUTH_TOKENS` are
/// exported; a worker started in the same environment binds its own free port and has no
/// auth. `SHARDWISE_WORKER_*` configure the worker.
#[test]
fn each_role_reads_its_own_environment_names() {
    let dir = TempDir::new("env-names");
    let (tokens, worker_token) = token_files(&dir);
    let port = free_port();
    let dispatcher_env = [
        ("SHARDWISE_HOST", "127.0.0.1"),
        ("SHARDWISE_PORT", &port),
        ("SHARDWISE_AUTH_TOKENS", &tokens),
    ];
    let d = spawn(&["dispatcher"], &dispatcher_env);
    let d_url = listening(&d, "dispatcher");
    assert_eq!(d_url, format!("http://127.0.0.1:{port}"), "the dispatcher read SHARDWISE_PORT");
    assert_eq!(get_status(&d_url, "/v1/version", None), 401, "and SHARDWISE_AUTH_TOKENS");

    // The same environment, a worker: the dispatcher's names do not reach it.
    let w =
        spawn(&["worker", "--dispatcher", &d_url, "--token-file", &worker_token], &dispatcher_env);
    let w_url = listening(&w, "worker");
    assert_ne!(w_url, d_url, "{:?}", w.output());
    assert_eq!(get_status(&w_url, "/metrics", None), 200, "the worker has no auth");

    // Its own names do.
    let w_port = free_port();
    let mut env = dispatcher_env.to_vec();
    env.extend([
        ("SHARDWISE_WORKER_DISPATCHER", d_url.as_str()),
        ("SHARDWISE_WORKER_HOST", "127.0.0.1"),
        ("SHARDWISE_WORKER_PORT", &w_port),
        ("SHARDWISE_WORKER_TOKEN_FILE", &worker_token),
        ("SHARDWISE_WORKER_AUTH_TOKENS", &tokens),
        ("SHARDWISE_WORKER_TAGS", "COLOCATED"),
    ]);
    let w2 = spawn(&["worker"], &env);
    let w2_url = listening(&w2, "worker");
    assert_eq!(w2_url, format!("http://127.0.0.1:{w_port}"));
    assert_eq!(get_status(&w2_url, "/metrics", None), 401, "SHARDWISE_WORKER_AUTH_TOKENS");
    assert_eq!(get_status(&w2_url, "/metrics", Some(MONITOR)), 200);
    let r = rawhttp::one_shot_text(&d_url, &Request::new("GET", "/v1/workers").bearer(Some(ADMIN)))
        .unwrap();
    let body: serde_json::Value = serde_json::from_str(r.split_once("\r\n\r\n").unwrap().1)
        .unwrap_or_else(|e| panic!("{e}: {r}"));
    let w2_addr = w2_url.trim_start_matches("http://");
    let entry = body["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["worker_address"] == w2_addr)
        .unwrap_or_else(|| panic!("{w2_addr} not registered: {body}"));
    assert_eq!(entry["tags"], json!(["COLOCATED"]), "SHARDWISE_WORKER_TAGS");
}

// ---- point 13: no colour in logs that are not a terminal -------------------------------

/// With stderr piped, the logs of both servers are plain text: no ANSI escape.
#[test]
fn logs_have_no_colour_when_stderr_is_not_a_terminal() {
    let env = [("SHARDWISE_LOG", "debug")];
    let d = spawn(&["dispatcher", "--port", "0"], &env);
    let d_url = listening(&d, "dispatcher");
    let w = spawn(&["worker", "--port", "0", "--dispatcher", &d_url], &env);
    let w_url = listening(&w, "worker");
    let (d_err, w_err) = poll_until("debug logs of both", Duration::from_secs(30), || {
        // Requests make both log (at debug, every request is).
        assert_eq!(http("GET", &d_url, "/healthz", None).unwrap().status, 200);
        assert_eq!(http("GET", &w_url, "/healthz", None).unwrap().status, 200);
        let (d_err, w_err) = (d.output().1, w.output().1);
        if d_err.contains("DEBUG") && w_err.contains("DEBUG") {
            Ok((d_err, w_err))
        } else {
            Err(format!("{d_err:?} {w_err:?}"))
        }
    });
    assert!(!d_err.contains('\x1b'), "the dispatcher's log has ANSI escapes: {d_err:?}");
    assert!(!w_err.contains('\x1b'), "the worker's log has ANSI escapes: {w_err:?}");
}

// ---- point 1: one owner per work dir ---------------------------------------------------

/// Registers a dataset of `stop` elements; its id (acknowledged: 200).
fn register(d: &Dispatcher, stop: u64) -> String {
    let r = d.call(
        "POST",
        "/v1/datasets",
        Some(json!({"dataset": {"source": {"range": {"stop": stop}}}})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["dataset_id"].as_str().unwrap().to_owned()
}

fn assert_has(d: &Dispatcher, id: &str, stop: u64) {
    let r = d.call("GET", &format!("/v1/datasets/{id}"), None);
    assert_eq!(r.status, 200, "dataset {id} lost: {}", r.body);
    assert_eq!(r.json()["dataset"]["source"]["range"]["stop"], stop, "dataset {id}");
}

/// The scenario: a second dispatcher on a work dir in use (fault-tolerant or not) is
/// refused, naming the dir and the holder's pid; the first keeps serving, `journal dump`
/// reads the journal meanwhile without breaking the lock, and everything the first
/// acknowledged is there after its restart.
#[test]
fn a_second_dispatcher_on_a_work_dir_is_refused_naming_the_holder() {
    let dir = TempDir::new("one-owner");
    let first = Dispatcher::start(&["--work-dir", dir.path(), "--fault-tolerant"]);
    let pid = first.child.id();
    let a = register(&first, 7);
    for extra in [&["--fault-tolerant"][..], &[]] {
        let mut args = vec!["--work-dir", dir.path()];
        args.extend_from_slice(extra);
        let err = Dispatcher::try_start(&args).map(|_| ()).unwrap_err();
        assert!(err.contains("exited with Some(1)"), "{err}");
        assert!(err.contains(&format!("pid {pid}")), "names the holder: {err}");
        assert!(err.contains(dir.path()), "names the dir: {err}");
    }
    // The lock file names the holder, and is no journal segment: `journal dump` reads the
    // journal while the dispatcher runs, and leaves the lock alone.
    let lock = std::fs::read_to_string(dir.0.join("lock")).unwrap();
    assert_eq!(lock.trim(), pid.to_string());
    let dump = run_shardwise(&["journal", "dump", dir.path()], "", &[]);
    assert_eq!(dump.code, 0, "{}", dump.stderr);
    assert!(dump.stdout.contains(&format!("\"{a}\"")), "{}", dump.stdout);
    let err = Dispatcher::try_start(&["--work-dir", dir.path()]).map(|_| ()).unwrap_err();
    assert!(err.contains(&format!("pid {pid}")), "still locked after the dump: {err}");
    // The first one kept serving; after its restart, all it acknowledged is there.
    let b = register(&first, 8);
    assert_has(&first, &a, 7);
    stop(first);
    let again = Dispatcher::start(&["--work-dir", dir.path(), "--fault-tolerant"]);
    assert_has(&again, &a, 7);
    assert_has(&again, &b, 8);
}

/// `shardwise journal dump DIR | head`: the reader closes the pipe after its first bytes; the
/// dump stops there and exits 0 without printing an error (it used to print
/// `Broken pipe (os error 32)` and exit 1).
#[test]
fn a_journal_dump_into_a_closed_pipe_ends_quietly() {
    use std::io::Read as _;
    use std::process::Stdio;

    let dir = TempDir::new("dump-pipe");
    let d = Dispatcher::start(&["--work-dir", dir.path(), "--fault-tolerant"]);
    // About 250 KB of records, several times what a pipe holds.
    for i in 0..8u64 {
        let list: Vec<u64> = (0..4_000).map(|n| n * 1_000 + i).collect();
        let r = d.call(
            "POST",
            "/v1/datasets",
            Some(json!({"dataset": {"source": {"list": {"elements": list}}}})),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let mut dump = Command::new(shardwise_bin())
        .args(["journal", "dump", dir.path()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 100];
    dump.stdout.take().unwrap().read_exact(&mut head).unwrap();
    // The read end is closed here (dropped), as `head` closes it.
    let status = poll_until("the dump exits", Duration::from_secs(30), || {
        dump.try_wait().unwrap().ok_or("still running")
    });
    let mut stderr = String::new();
    dump.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert_eq!((status.code(), stderr.as_str()), (Some(0), ""), "the dump's exit and stderr");
}

/// SIGTERM, and wait for a clean exit.
fn stop(mut d: Dispatcher) {
    let pid = d.child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let status = poll_until("an exit after SIGTERM", Duration::from_secs(30), || {
        d.child.try_wait().unwrap().ok_or("still running")
    });
    assert_eq!(status.code(), Some(0), "{}", d.output());
}

/// A lock left by a SIGKILLed dispatcher does not block the next start (the kernel drops a
/// `flock` with its holder).
#[test]
fn a_dispatcher_killed_with_sigkill_leaves_no_lock_behind() {
    let dir = TempDir::new("kill-lock");
    let mut first = Dispatcher::start(&["--work-dir", dir.path(), "--fault-tolerant"]);
    let a = register(&first, 3);
    first.kill();
    let again = Dispatcher::try_start(&["--work-dir", dir.path(), "--fault-tolerant"])
        .unwrap_or_else(|e| panic!("restart after kill -9: {e}"));
    assert_has(&again, &a, 3);
    let lock = std::fs::read_to_string(dir.0.join("lock")).unwrap();
    assert_eq!(lock.trim(), again.child.id().to_string(), "the new owner's pid");
}

// ---- point 11: the listening line means serving ----------------------------------------

/// Runs `shardwise dispatcher --port 0 --work-dir DIR` to its end: it must refuse to start,
/// exit 1, print no listening line, and name `failed` (the exact path) on stderr.
fn assert_refused(work_dir: &std::path::Path, failed: &std::path::Path) {
    let mut cmd = Command::new(shardwise_bin());
    cmd.args(["dispatcher", "--port", "0", "--fault-tolerant", "--work-dir"]).arg(work_dir);
    let run = run_bounded(cmd.env_remove("SHARDWISE_LOG"), Duration::from_secs(60));
    assert_eq!(run.code, 1, "{run:?}");
    assert!(!run.stdout.contains("listening on"), "a listening line: {run:?}");
    let failed = failed.to_str().unwrap();
    assert!(run.stderr.contains(&format!("{failed}:")), "does not name {failed}: {run:?}");
}

/// Each way a work dir can be unusable: no listening line, exit 1, the path that failed.
#[test]
fn a_start_that_fails_prints_no_listening_line_and_names_the_path() {
    let dir = TempDir::new("bad-start");
    // A file where the work dir should be, and a work dir under a file.
    let file = dir.0.join("a-file");
    std::fs::write(&file, "x").unwrap();
    assert_refused(&file, &file);
    assert_refused(&file.join("wd"), &file.join("wd"));
    // A file named `journal` in the work dir: that file is named, not the work dir.
    let wd = dir.0.join("journal-file");
    std::fs::create_dir(&wd).unwrap();
    std::fs::write(wd.join("journal"), "x").unwrap();
    assert_refused(&wd, &wd.join("journal"));
    // A segment that cannot be read (a directory where the file should be).
    let wd = dir.0.join("unreadable");
    let seg = wd.join("journal").join("segment-000000000000.swj");
    std::fs::create_dir_all(&seg).unwrap();
    assert_refused(&wd, &seg);
    // The lock file cannot be opened.
    let wd = dir.0.join("lock-dir");
    std::fs::create_dir_all(wd.join("lock")).unwrap();
    assert_refused(&wd, &wd.join("lock"));
    // A work dir it may not write (not for root, who may write anywhere).
    let wd = dir.0.join("read-only");
    std::fs::create_dir(&wd).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&wd, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(wd.join("probe"), "x").is_err() {
        assert_refused(&wd, &wd.join("lock"));
    }
    std::fs::set_permissions(&wd, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The listening line comes after the replay: the dispatcher serves its journal's state at
/// once (no `/readyz` wait needed).
#[test]
fn the_listening_line_comes_after_the_replay() {
    let dir = TempDir::new("listening-after-replay");
    let a = {
        let d = Dispatcher::start(&["--work-dir", dir.path()]);
        register(&d, 5)
    };
    let p = spawn(&["dispatcher", "--port", "0", "--work-dir", dir.path()], &[]);
    let url = listening(&p, "dispatcher");
    let (out, _) = p.output();
    let replayed = out.find("replayed").unwrap_or_else(|| panic!("{out}"));
    assert!(replayed < out.find("listening on").unwrap(), "{out}");
    assert_eq!(http("GET", &url, "/readyz", None).unwrap().status, 200);
    let r = http("GET", &url, &format!("/v1/datasets/{a}"), None).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
}

// ---- point 10: bounded time to read headers and body -----------------------------------

/// Connects, sends `bytes`, then nothing; reads until the server closes the connection (at
/// most 10 s). Returns how long that took and what it answered.
fn stall(url: &str, bytes: &str) -> (Duration, String) {
    let s = rawhttp::send_bytes(url, bytes.as_bytes(), Duration::from_secs(10)).unwrap();
    let started = std::time::Instant::now();
    let (out, end) = rawhttp::read_until_closed(s);
    match end {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("neither answered nor closed within 10 s ({e}) after {bytes:?}: {out:?}"),
    }
    (started.elapsed(), out)
}

/// Half the headers, nothing at all, or full headers and half a declared body, then a stall:
/// the dispatcher and the worker close the connection (no request to answer yet) or answer
/// 408 within `--read-timeout`. A long poll, which has no body, outlives it.
#[test]
fn a_stalled_request_is_answered_or_closed_within_the_read_timeout() {
    let dir = TempDir::new("read-timeout");
    let cluster = dir.0.join("cluster.json");
    let simple = json!({"resolver": {"simple": {"cluster": {"worker": ["a:1"]}}}});
    std::fs::write(&cluster, simple.to_string()).unwrap();
    let d = Dispatcher::start(&[
        "--read-timeout",
        "300ms",
        "--cluster-config",
        cluster.to_str().unwrap(),
    ]);
    let w = Worker::start(&d.url, &["--read-timeout", "300ms"]);
    let bound = Duration::from_secs(5);
    for (url, body_route) in [(&d.url, "POST /v1/datasets"), (&w.url, "GET /healthz")] {
        for half in ["", "GET /healthz HTTP/1.1\r\nHost: x\r\nAccept: appli"] {
            let (took, answer) = stall(url, half);
            assert!(took < bound, "{url} {half:?}: closed after {took:?}");
            assert!(
                answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
                "{url} {half:?}: {answer}"
            );
        }
        let half_body = format!(
            "{body_route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: 100\r\n\r\n{{\"dataset\": "
        );
        let (took, answer) = stall(url, &half_body);
        assert!(took < bound, "{url}: answered after {took:?}");
        assert!(answer.starts_with("HTTP/1.1 408"), "{url}: {answer}");
        assert!(answer.contains("application/problem+json"), "{answer}");
        assert!(answer.contains("--read-timeout"), "{answer}");
        // A whole request still works (and the timeout is not from the start of the body).
        assert_eq!(http("GET", url, "/healthz", None).unwrap().status, 200);
    }
    // A long poll without a body waits past the read timeout and is answered.
    let started = std::time::Instant::now();
    let r = http("GET", &d.url, "/v1/cluster?after=1000&wait=1s", None).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(started.elapsed() >= Duration::from_millis(900), "{:?}", started.elapsed());
    // A body that arrives in time, sent in two parts, is read.
    let answer = {
        use std::io::Write;
        let body = json!({"dataset": {"source": {"range": {"stop": 3}}}}).to_string();
        let (first, second) = body.split_at(10);
        let head = format!(
            "POST /v1/datasets HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{first}",
            body.len()
        );
        let mut s = rawhttp::send_bytes(&d.url, head.as_bytes(), Duration::from_secs(30)).unwrap();
        s.flush().unwrap();
        s.write_all(second.as_bytes()).unwrap();
        rawhttp::read_to_end(s).unwrap()
    };
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

// ---- the default log level: events, not requests -------------------------------------

/// The non-empty lines of a log.
fn log_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.trim().is_empty()).collect()
}

/// Without `SHARDWISE_LOG`, a dispatcher logs its events at info (its start, a worker that
/// registers, is lost and is forgotten), one line each, and nothing for plain requests.
#[test]
fn the_default_log_level_shows_events_and_not_requests() {
    let d = spawn(&["dispatcher", "--port", "0", "--worker-timeout", "200ms"], &[]);
    let url = listening(&d, "dispatcher");
    let address = "127.0.0.1:45123";
    let stderr = |what: &str, pred: &dyn Fn(&str) -> bool| -> String {
        poll_until(what, Duration::from_secs(30), || {
            let err = d.output().1;
            match log_lines(&err).into_iter().find(|l| pred(l)) {
                Some(line) => Ok(line.to_owned()),
                None => Err(format!("{err:?}")),
            }
        })
    };
    stderr("the start-up line", &|l| l.contains(" INFO ") && l.contains("dispatcher serving"));
    let beat = json!({"worker_address": address, "current_tasks": []});
    let r = http("POST", &url, "/v1/workers/heartbeat", Some(&beat)).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    stderr("an info line for the registration", &|l| {
        l.contains(" INFO ") && l.contains("worker registered") && l.contains(address)
    });
    stderr("a line for the loss", &|l| l.contains("worker lost") && l.contains(address));
    // Lost for another worker timeout without tasks: forgotten, in one collection line.
    stderr("a line for the collection", &|l| {
        l.contains(" INFO ") && l.contains("garbage collected") && l.contains("workers=1")
    });
    let before = log_lines(&d.output().1).len();
    for _ in 0..100 {
        assert_eq!(http("GET", &url, "/v1/workers", None).unwrap().status, 200);
    }
    // Give a log line time to reach the pipe.
    std::thread::sleep(Duration::from_millis(300));
    let err = d.output().1;
    let after = log_lines(&err);
    assert_eq!(after.len(), before, "requests logged at the default level: {:?}", &after[before..]);
}
