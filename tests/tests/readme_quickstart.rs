//! The README's quick start run as written: its first 40 lines hold the prerequisites, the
//! install command, the dispatcher's start and a first curl call; the dispatcher block is what
//! this test starts itself (`shardwise dispatcher` on a port bound with 0), and every other `sh`
//! block of the section runs, in order, in one `sh -eu` (a POSIX shell: the README promises
//! nothing more) with `PORT` set to that dispatcher's port, the way the README says to pick
//! another port. Each block's output is checked against the `#>` lines the README shows, where
//! `...` stands for any text. curl 7.82 or newer (for `--json`) must be on `PATH`.

use std::process::Command;
use std::time::Duration;

use shardwise_tests::markdown::{Block, blocks, matches};
use shardwise_tests::{Dispatcher, TempDir, repo_root, run_bounded};

fn readme() -> String {
    std::fs::read_to_string(repo_root().join("README.md")).expect("read README.md")
}

/// The README's `## NAME` section, up to the next `## ` heading.
fn section(readme: &str, name: &str) -> String {
    let start = format!("\n## {name}\n");
    let body = readme.split(&start).nth(1).unwrap_or_else(|| panic!("a `## {name}` section"));
    body.split("\n## ").next().unwrap_or_default().to_owned()
}

/// curl's version as (major, minor), or a failure that says what to install.
fn curl_version() -> (u32, u32) {
    let out = Command::new("curl").arg("--version").output().unwrap_or_else(|e| {
        panic!(
            "curl is not on PATH ({e}): the README's quick start needs it (apt-get install curl)"
        )
    });
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .nth(1)
        .and_then(|v| {
            let mut it = v.split('.').map(|n| n.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or_else(|| panic!("cannot read curl's version from {text:?}"))
}

#[test]
fn the_first_40_lines_hold_prerequisites_install_dispatcher_start_and_a_first_call() {
    let readme = readme();
    let top: Vec<&str> = readme.lines().take(40).collect();
    let top = top.join("\n");
    // The Rust version the README names is the workspace's `rust-version`.
    let manifest = std::fs::read_to_string(repo_root().join("Cargo.toml")).expect("Cargo.toml");
    let rust_version = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_owned())
        .expect("the workspace's rust-version");
    for needle in [
        "## Prerequisites".to_owned(),
        format!("Rust {rust_version} or newer"),
        "curl 7.82 or newer".to_owned(),
        "## Install".to_owned(),
        "cargo install --locked --path gateway".to_owned(),
        "## Quick start".to_owned(),
        "shardwise dispatcher --port".to_owned(),
        "curl -s --json".to_owned(),
    ] {
        assert!(top.contains(&needle), "the README's first 40 lines hold {needle:?}:\n{top}");
    }
    // The install command installs the `shardwise` binary: the gateway package declares it.
    let gateway = std::fs::read_to_string(repo_root().join("gateway/Cargo.toml")).expect("read");
    assert!(gateway.contains("[[bin]]\nname = \"shardwise\""), "gateway/Cargo.toml: {gateway}");
}

#[test]
fn the_readme_quick_start_runs_as_written() {
    let (major, minor) = curl_version();
    assert!(
        (major, minor) >= (7, 82),
        "the README's quick start uses `curl --json` (curl 7.82 or newer); this is curl \
         {major}.{minor}"
    );
    let quick = section(&readme(), "Quick start");
    let all: Vec<Block> = blocks(&quick).into_iter().filter(|b| b.info == "sh").collect();
    assert!(all.len() >= 4, "the quick start's sh blocks: {all:?}");

    // The first block starts the dispatcher: this test does that itself, on a port of its own,
    // and checks the listening line it shows.
    let (start, runnable) = all.split_first().expect("blocks");
    assert_eq!(start.commands(), ["shardwise dispatcher --port \"${PORT:-5050}\""]);
    let d = Dispatcher::start(&[]);
    let port = d.url.rsplit(':').next().expect("a port").to_owned();
    let substitute = |l: &str| l.replace("127.0.0.1:5050", &format!("127.0.0.1:{port}"));
    assert_eq!(
        start.expected().iter().map(|l| substitute(l)).collect::<Vec<_>>(),
        [format!("shardwise dispatcher listening on {}", d.url)]
    );
    for b in runnable {
        assert!(
            !b.commands().iter().any(|l| l.contains("shardwise dispatcher")),
            "one block starts the dispatcher: {b:?}"
        );
    }

    let marker = |i: usize| format!("::quick start block {i}::");
    let mut script = String::new();
    for (i, b) in runnable.iter().enumerate() {
        script.push_str(&format!("echo '{}'\n", marker(i)));
        for l in b.commands() {
            script.push_str(l);
            script.push('\n');
        }
    }
    let dir = TempDir::new("readme-quickstart");
    let script_path = dir.0.join("quickstart.sh");
    std::fs::write(&script_path, &script).expect("write the script");
    let mut cmd = Command::new("sh");
    cmd.arg("-eu").arg(&script_path).current_dir(dir.path()).env("PORT", &port);
    for proxy in
        ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
    {
        cmd.env_remove(proxy);
    }
    let run = run_bounded(&mut cmd, Duration::from_secs(60));
    let context = || {
        format!(
            "\n--- script:\n{script}\n--- stdout:\n{}\n--- stderr:\n{}\n--- dispatcher:\n{}",
            run.stdout,
            run.stderr,
            d.output()
        )
    };
    assert_eq!(run.code, 0, "the quick start failed{}", context());

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
            "README.md's quick start block\n  {}\nprinted\n  {}\nwhere the README shows\n  {}{}",
            b.commands().join("\n  "),
            got.join("\n  "),
            want.join("\n  "),
            context()
        );
    }

    // What the quick start did is what the dispatcher holds: its job's one iteration handed
    // out every split and its client released its lease.
    let job = d.call("GET", "/v1/jobs/5000", None);
    assert_eq!(job.status, 200, "{}", job.body);
    let job = job.json();
    assert_eq!(job["iterations"].as_array().map(Vec::len), Some(1), "{job}");
    assert_eq!(job["iterations"][0]["num_clients"], 0, "{job}");
}

#[test]
fn the_pattern_matcher_treats_dots_as_any_text() {
    assert!(matches(r#"{"a":"...","b":1}"#, r#"{"a":"xyz","b":1}"#));
    assert!(matches("a...b...c", "a-b-c"));
    assert!(!matches("a...b", "ab-"));
    assert!(!matches("[0, 1]", "[0, 1, 2]"));
}
