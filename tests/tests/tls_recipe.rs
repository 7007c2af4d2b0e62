//! `docs/tls.md`'s recipe run as written: its `openssl` block in a fresh directory (a CA, and a
//! certificate it signs for `127.0.0.1` and `localhost` for the dispatcher and for the worker),
//! then the `shardwise dispatcher` and `shardwise worker` commands of its next block with the
//! files it made (the dispatcher on a port bound with 0 in place of the document's 5443, the
//! worker given that dispatcher), then its curl block against them; every block's output is
//! checked against the `#>` lines the document shows (`...` stands for any text). Last, the
//! Rust client reads a dataset through the TLS dispatcher and worker trusting the recipe's CA.
//! `openssl` and curl must be on `PATH`: without them the test fails saying so.

use std::process::Command;
use std::time::Duration;

use futures::TryStreamExt;
use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_gateway::client::{DistributeOptions, distribute};
use shardwise_tests::markdown::{Block, blocks, matches};
use shardwise_tests::{Dispatcher, TempDir, Worker, repo_root, run_bounded, runtime};

fn assert_lines(what: &str, want: &[String], got: &str) {
    let got: Vec<&str> = got.lines().collect();
    let ok = want.len() == got.len() && want.iter().zip(&got).all(|(w, g)| matches(w, g));
    assert!(
        ok,
        "{what} printed\n  {}\nwhere docs/tls.md shows\n  {}",
        got.join("\n  "),
        want.join("\n  ")
    );
}

/// Fails saying what to install unless `tool` is on `PATH`.
fn require(tool: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "`{tool}` is not on PATH: docs/tls.md's recipe needs it (Debian: apt-get install -y {tool})"
    );
}

/// Runs `script` with `sh -eu` in `dir`, bounded; the run's stdout.
fn sh(what: &str, script: &str, dir: &TempDir) -> String {
    let mut cmd = Command::new("sh");
    cmd.args(["-eu", "-c", script]).current_dir(dir.path());
    for proxy in
        ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
    {
        cmd.env_remove(proxy);
    }
    let run = run_bounded(&mut cmd, Duration::from_secs(60));
    assert_eq!(
        run.code, 0,
        "{what} failed:\n{script}\n--- stdout:\n{}\n--- stderr:\n{}",
        run.stdout, run.stderr
    );
    run.stdout
}

/// The words of the block's command that starts with `prefix` (`\` continuations joined).
fn command<'a>(joined: &'a str, prefix: &str) -> Vec<&'a str> {
    let line = joined
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("docs/tls.md runs `{prefix} ...`: {joined}"));
    line.split_whitespace().skip(prefix.split_whitespace().count()).collect()
}

#[test]
fn the_tls_recipe_makes_certificates_that_a_dispatcher_and_worker_serve_with() {
    require("openssl");
    require("curl");
    let doc = std::fs::read_to_string(repo_root().join("docs/tls.md")).expect("read docs/tls.md");
    let recipe = doc
        .split("\n## A recipe")
        .nth(1)
        .expect("docs/tls.md has a `## A recipe` section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    let all: Vec<Block> = blocks(recipe).into_iter().filter(|b| b.info == "sh").collect();
    let [certs, servers, check] = &all[..] else {
        panic!("the recipe's three sh blocks (certificates, servers, check): {all:?}");
    };

    // 1. The certificates, made by the commands as written.
    let dir = TempDir::new("tls-recipe");
    let out = sh("the recipe's openssl block", &certs.script(), &dir);
    assert_lines("the openssl block", &certs.expected(), &out);
    let file = |name: &str| {
        let path = dir.0.join(name);
        assert!(path.is_file(), "the recipe made {name}");
        path.to_string_lossy().into_owned()
    };
    // Files the servers block names are the recipe's, by absolute path (the harness runs the
    // servers from elsewhere).
    let absolute = |args: Vec<&str>| -> Vec<String> {
        args.into_iter()
            .map(|a| if dir.0.join(a).is_file() { file(a) } else { a.to_owned() })
            .collect()
    };

    // 2. The dispatcher and the worker as the servers block starts them.
    let joined = servers.script().replace("\\\n", " ");
    let mut d_args = command(&joined, "shardwise dispatcher");
    let at = d_args.iter().position(|a| *a == "--port").expect("the dispatcher's --port");
    assert_eq!(d_args.remove(at + 1), "5443", "the document's port");
    d_args.remove(at);
    let d_args = absolute(d_args);
    let d = Dispatcher::start_replica(&d_args.iter().map(String::as_str).collect::<Vec<_>>());
    let d_addr = d.url.trim_start_matches("https://").to_owned();
    let substitute = |l: &str| l.replace("127.0.0.1:5443", &d_addr);

    let mut w_args = command(&joined, "shardwise worker");
    let at = w_args.iter().position(|a| *a == "--dispatcher").expect("the worker's --dispatcher");
    assert_eq!(w_args.remove(at + 1), "https://127.0.0.1:5443", "the document's dispatcher");
    w_args.remove(at);
    let w_args = absolute(w_args);
    let w = Worker::start(&d.url, &w_args.iter().map(String::as_str).collect::<Vec<_>>());
    let listening = format!(
        "shardwise dispatcher listening on {}\nshardwise worker listening on {}",
        d.url, w.url
    );
    let want: Vec<String> = servers.expected().iter().map(|l| substitute(l)).collect();
    assert_lines("the dispatcher and the worker", &want, &listening);

    // 3. The check, as written, against them.
    let out = sh("the recipe's curl block", &substitute(&check.script()), &dir);
    let want: Vec<String> = check.expected().iter().map(|l| substitute(l)).collect();
    assert_lines("the curl block", &want, &out);
    // Without the recipe's CA the same call is refused: the certificates are what it trusts.
    let untrusted = Command::new("curl")
        .args(["-s", "-o", "/dev/null", &format!("{}/healthz", d.url)])
        .status()
        .expect("run curl");
    assert!(!untrusted.success(), "curl without --cacert must not trust the recipe's CA");

    // 4. The Rust client reads a dataset through them, trusting the recipe's CA.
    let ds = DatasetDef::from_json(&json!({"source": {"range": {"stop": 50}}})).unwrap();
    let options = DistributeOptions {
        ca_file: Some(file("ca.pem").into()),
        unknown_task_timeout: Duration::from_secs(20),
        unavailable_timeout: Duration::from_secs(20),
        ..shardwise_tests::fast_options()
    };
    let got: Vec<Value> = runtime().block_on(async {
        let read = distribute(d.url.as_str(), ds, options).try_collect::<Vec<Value>>();
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .expect("the epoch ends in time")
            .expect("a read over https")
    });
    let mut got: Vec<i64> = got.iter().map(|v| v.as_i64().expect("an integer")).collect();
    got.sort_unstable();
    assert_eq!(
        got,
        (0..50).collect::<Vec<i64>>(),
        "dispatcher:\n{}\nworker:\n{}",
        d.output(),
        w.output()
    );
}
