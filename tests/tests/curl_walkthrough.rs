//! `examples/curl.md` run for real: its `sh` blocks, in order, in one `bash -euo pipefail`
//! against a `shardwise dispatcher` and a `shardwise worker` on ports bound with 0, each
//! block's output checked against the `#>` lines the document shows.
//!
//! The `sh servers` blocks (building, starting the processes and setting `D` and `W`) are what
//! this test does itself: it starts the processes through the harness and sets `D` and `W` to
//! their URLs. The document's addresses `127.0.0.1:5050` and `127.0.0.1:6000` in `#>` lines
//! stand for the dispatcher's and the worker's real ones, and `...` for any text. curl (7.82 or
//! newer, for `--json`), bash and python3 must be on `PATH`: without them the test fails.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use shardwise_tests::markdown::{Block, blocks, matches};
use shardwise_tests::{Dispatcher, TempDir, Worker, repo_root, run_bounded};

/// A tool the walkthrough needs: its `--version` output, or a failure that says what to install.
fn require(tool: &str, install: &str) -> String {
    match Command::new(tool).arg("--version").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(out) => panic!("`{tool} --version` failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!(
            "`{tool}` is not on PATH ({e}): the curl walkthrough (examples/curl.md) needs it; \
             install it ({install})"
        ),
    }
}

#[test]
fn curl_walkthrough_runs_as_documented() {
    let version = require("curl", "apt-get install -y curl");
    let (major, minor) = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| {
            let mut it = v.split('.').map(|n| n.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or_else(|| panic!("cannot read curl's version from {version:?}"));
    assert!(
        (major, minor) >= (7, 82),
        "examples/curl.md uses `curl --json` (curl 7.82 or newer); this is curl {major}.{minor}"
    );
    require("python3", "apt-get install -y python3");
    require("bash", "apt-get install -y bash");

    let doc_path = repo_root().join("examples/curl.md");
    let doc = std::fs::read_to_string(&doc_path).expect("read examples/curl.md");
    let all = blocks(&doc);
    let servers: Vec<&Block> = all.iter().filter(|b| b.info == "sh servers").collect();
    let runnable: Vec<&Block> = all.iter().filter(|b| b.info == "sh").collect();
    assert!(runnable.len() >= 8, "the walkthrough's sh blocks: {runnable:?}");
    let server_text: Vec<&str> =
        servers.iter().flat_map(|b| b.lines.iter().map(|l| l.as_str())).collect();
    for line in ["D=http://127.0.0.1:5050", "W=http://127.0.0.1:6000"] {
        assert!(server_text.contains(&line), "the servers blocks set {line}: {server_text:?}");
    }

    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, &[]);
    let d_addr = d.url.trim_start_matches("http://").to_owned();
    let substitute =
        |l: &str| l.replace("127.0.0.1:5050", &d_addr).replace("127.0.0.1:6000", w.address());

    // The listening lines the servers blocks show are the ones the processes printed.
    let listening: Vec<String> = servers.iter().flat_map(|b| b.expected()).collect();
    assert_eq!(
        listening.iter().map(|l| substitute(l)).collect::<Vec<_>>(),
        [
            format!("shardwise dispatcher listening on {}", d.url),
            format!("shardwise worker listening on {}", w.url)
        ]
    );

    let marker = |i: usize| format!("::curl.md block {i}::");
    let mut script = String::new();
    for (i, b) in runnable.iter().enumerate() {
        script.push_str(&format!("echo '{}'\n", marker(i)));
        for l in &b.lines {
            script.push_str(l);
            script.push('\n');
        }
    }
    let dir = TempDir::new("curl-walkthrough");
    let script_path = dir.0.join("walkthrough.sh");
    std::fs::write(&script_path, &script).expect("write the script");
    let mut cmd = Command::new("bash");
    cmd.arg("-euo")
        .arg("pipefail")
        .arg(&script_path)
        .current_dir(dir.path())
        .env("D", &d.url)
        .env("W", &w.url);
    // The document's `field` helper runs python3 a few dozen times: call the interpreter
    // itself rather than a version manager's shim in front of it (pyenv's costs ~0.2 s a call).
    let python = run_bounded(
        Command::new("python3").args(["-c", "import sys; print(sys.executable)"]),
        Duration::from_secs(30),
    );
    if let Some(bin) = Path::new(python.stdout.trim()).parent().filter(|_| python.code == 0) {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let dirs = std::iter::once(bin.to_owned()).chain(std::env::split_paths(&path));
        cmd.env("PATH", std::env::join_paths(dirs).expect("PATH"));
    }
    for proxy in
        ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
    {
        cmd.env_remove(proxy);
    }
    let run = run_bounded(&mut cmd, Duration::from_secs(120));
    let context = || {
        format!(
            "\n--- stdout:\n{}\n--- stderr:\n{}\n--- dispatcher:\n{}\n--- worker:\n{}",
            run.stdout,
            run.stderr,
            d.output(),
            w.output()
        )
    };
    assert_eq!(run.code, 0, "the walkthrough failed{}", context());

    // Each block's output, between the markers.
    let mut outputs: Vec<Vec<&str>> = Vec::new();
    for line in run.stdout.lines() {
        if line == marker(outputs.len()) {
            outputs.push(Vec::new());
        } else {
            outputs.last_mut().expect("output before the first block").push(line);
        }
    }
    assert_eq!(outputs.len(), runnable.len(), "every block ran{}", context());
    for (b, got) in runnable.iter().zip(&outputs) {
        let want: Vec<String> = b.expected().iter().map(|l| substitute(l)).collect();
        let ok = want.len() == got.len() && want.iter().zip(got).all(|(w, g)| matches(w, g));
        assert!(
            ok,
            "examples/curl.md:{}: the block printed\n  {}\nwhere the document shows\n  {}{}",
            b.line,
            got.join("\n  "),
            want.join("\n  "),
            context()
        );
    }

    // Both clients released their leases and both iterations finished.
    for job in ["5000", "5001"] {
        let j = d.call("GET", &format!("/v1/jobs/{job}"), None).json();
        assert_eq!(j["iterations"][0]["finished"], true, "{j}");
        assert_eq!(j["iterations"][0]["num_clients"], 0, "{j}");
    }
}

#[test]
fn the_pattern_matcher_treats_dots_as_any_text() {
    assert!(matches(r#"{"a":"...","b":1}"#, r#"{"a":"xyz","b":1}"#));
    assert!(matches("a...b...c", "a-b-c"));
    assert!(matches("...", ""));
    assert!(!matches("a...b", "ab-"));
    assert!(!matches("aa...aa", "aaa"));
    assert!(!matches("[0, 1]", "[0, 1, 2]"));
}
