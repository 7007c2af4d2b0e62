//! The `shardwise` processes as an operator runs them: one owner per work dir, a listening
//! line that means serving, each role its own environment names, plain logs when stderr is
//! not a terminal, and bounded time to read a request (issue 11, points 1, 10, 11, 12, 13).

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use shardwise_tests::{Process, TempDir, http, shardwise_bin};

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
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{auth}\r\n").unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let out = String::from_utf8_lossy(&out);
    out.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
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
    let r = {
        use std::io::{Read, Write};
        let host = d_url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(host).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET /v1/workers HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
             Authorization: Bearer {ADMIN}\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
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
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        // Requests make both log (at debug, every request is).
        assert_eq!(http("GET", &d_url, "/healthz", None).unwrap().status, 200);
        assert_eq!(http("GET", &w_url, "/healthz", None).unwrap().status, 200);
        let (d_err, w_err) = (d.output().1, w.output().1);
        if d_err.contains("DEBUG") && w_err.contains("DEBUG") {
            assert!(!d_err.contains('\x1b'), "the dispatcher's log has ANSI escapes: {d_err:?}");
            assert!(!w_err.contains('\x1b'), "the worker's log has ANSI escapes: {w_err:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no debug logs: {d_err:?} {w_err:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
