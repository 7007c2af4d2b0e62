//! The Python package (`python/`, `pip install ./python`) for real: its unit tests
//! (`python/tests/test_*.py`), and its scenarios (`python/tests/scenarios/`) against real
//! `shardwise dispatcher` and `shardwise worker` processes on 127.0.0.1 and ports bound with 0:
//! JSON and Arrow reads exactly once, a read stopped part way and resumed on more workers
//! through `python -m shardwise read --resume-from`, and problems as `ShardwiseError`s with
//! their code.
//!
//! The environment is `<target>/pkg-venv`, built once per target directory and shared by
//! every test process ([`shardwise_tests::pyenv`]).

use std::time::Duration;

use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_gateway::client::fingerprint;
use shardwise_tests::pyenv::{python, scenario_path};
use shardwise_tests::{
    Dispatcher, Run, TempDir, Worker, assert_ran, ok, poll_until, repo_root, run_bounded,
};

/// `python python/tests/scenarios/SCRIPT ARGS`, bounded; panics with its output unless it
/// exits 0.
fn scenario(script: &str, args: &[&str]) -> Run {
    let path = scenario_path(script);
    let mut all = vec![path.as_str()];
    all.extend_from_slice(args);
    let run = run_bounded(&mut python(&all), Duration::from_secs(180));
    assert_ran(script, &run);
    run
}

/// Waits until the dispatcher lists `n` live workers.
fn await_workers(d: &Dispatcher, n: usize) {
    poll_until("the workers registered", Duration::from_secs(20), || {
        let workers = ok(&d.call("GET", "/v1/workers", None));
        let alive = workers["workers"].as_array().unwrap().iter().filter(|w| w["alive"] == true);
        if alive.count() == n { Ok(()) } else { Err(format!("{workers}")) }
    });
}

/// A loopback URL nothing listens on (a port bound with 0, then released).
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

const WORKER: &[&str] = &["--heartbeat-interval", "200ms"];

#[test]
fn unit_tests_pass_against_the_installed_package() {
    let tests = repo_root().join("python/tests");
    let tests = tests.to_str().expect("a UTF-8 path");
    let run = run_bounded(
        &mut python(&["-m", "unittest", "discover", "-v", "-s", tests, "-t", tests]),
        Duration::from_secs(300),
    );
    assert_ran("python -m unittest", &run);
    assert!(run.stderr.contains("\nOK"), "{}", run.stderr);
    let ran = run.stderr.lines().find(|l| l.starts_with("Ran ")).unwrap_or_default();
    eprintln!("python unit tests: {ran}");
}

#[test]
fn the_installed_package_has_the_workspaces_version() {
    let run = run_bounded(
        &mut python(&[
            "-c",
            "import json, shardwise; print(json.dumps([shardwise.__file__, shardwise.__version__]))",
        ]),
        Duration::from_secs(60),
    );
    assert_ran("import shardwise", &run);
    let got: Value = serde_json::from_str(run.stdout.trim()).expect("JSON");
    let file = got[0].as_str().expect("a path");
    assert!(file.contains("site-packages"), "the installed package, not the source: {file}");
    let cargo = std::fs::read_to_string(repo_root().join("Cargo.toml")).expect("Cargo.toml");
    let workspace = cargo.split("[workspace.package]").nth(1).expect("[workspace.package]");
    let version = workspace
        .lines()
        .find_map(|l| l.trim().strip_prefix("version = "))
        .expect("a workspace version")
        .trim_matches('"');
    assert_eq!(got[1], version, "python/pyproject.toml's version is the workspace's");
}

#[test]
fn dataset_ids_are_the_rust_clients_for_canonical_definitions() {
    let definitions = [
        json!({"source": {"range": {"stop": 10}}}),
        json!({"source": {"list": {"elements": ["é", 1.5, {"b": 1, "a": [true, null]}]}},
               "transforms": [{"shard_hint": {}}]}),
        json!({"source": {"files": {"paths": ["/d/a.parquet"], "format": "parquet",
               "tensors": [{"name": "x", "dtype": "float32", "shape": [2, 3]}]}}}),
    ];
    let code = "import json, sys; from shardwise.reader import fingerprint; \
                print(fingerprint(json.loads(sys.argv[1])))";
    for definition in definitions {
        let def = DatasetDef::from_json(&definition).expect("a valid definition");
        let canonical = def.to_json().to_string();
        let run = run_bounded(&mut python(&["-c", code, &canonical]), Duration::from_secs(60));
        assert_ran("fingerprint", &run);
        assert_eq!(run.stdout.trim(), fingerprint(&def), "{canonical}");
    }
}

#[test]
fn help_answers() {
    for args in [&["-m", "shardwise", "--help"][..], &["-m", "shardwise", "read", "--help"]] {
        let run = run_bounded(&mut python(args), Duration::from_secs(60));
        assert_ran("python -m shardwise --help", &run);
        assert!(run.stdout.contains("usage: python -m shardwise"), "{}", run.stdout);
    }
    let run = run_bounded(&mut python(&["-m", "shardwise", "--help"]), Duration::from_secs(60));
    for command in ["version", "read", "merge"] {
        assert!(run.stdout.contains(command), "{command}: {}", run.stdout);
    }
    let run = run_bounded(&mut python(&["-m", "shardwise", "nope"]), Duration::from_secs(60));
    assert_eq!(run.code, 2, "a usage error: {run:?}");
}

#[test]
fn json_reads_of_a_range_over_two_workers_are_exactly_once() {
    let d = Dispatcher::start(&[]);
    let _workers = [Worker::start(&d.url, WORKER), Worker::start(&d.url, WORKER)];
    await_workers(&d, 2);
    let run = scenario("json_exactly_once.py", &[&d.url]);
    eprint!("{}", run.stdout);
    assert!(run.stdout.contains("2000 elements exactly once over 2 workers"), "{}", run.stdout);

    // The CLI prints the dispatcher's version.
    let run =
        run_bounded(&mut python(&["-m", "shardwise", "version", &d.url]), Duration::from_secs(60));
    assert_ran("python -m shardwise version", &run);
    let version: Value = serde_json::from_str(run.stdout.trim()).expect("JSON");
    assert_eq!(version["version"], 1, "{version}");
}

#[test]
fn arrow_reads_of_parquet_files_are_exactly_once_and_resume() {
    let dir = TempDir::new("pkg-parquet");
    let d = Dispatcher::start(&[]);
    let args = [WORKER, &["--data-root", dir.path()][..]].concat();
    let _workers = [Worker::start(&d.url, &args), Worker::start(&d.url, &args)];
    await_workers(&d, 2);
    let run = scenario("arrow_parquet.py", &[&d.url, dir.path()]);
    eprint!("{}", run.stdout);
    assert!(run.stdout.contains("4500 rows of 3 files exactly once"), "{}", run.stdout);
    assert!(run.stdout.contains("exactly once\n"), "{}", run.stdout);
}

#[test]
fn a_read_stopped_part_way_resumes_on_three_workers_with_the_cli() {
    const N: i64 = 5000;
    let out = TempDir::new("pkg-resume");
    let d = Dispatcher::start(&[]);
    let _workers = [Worker::start(&d.url, WORKER), Worker::start(&d.url, WORKER)];
    await_workers(&d, 2);
    let run = scenario("resume_stop.py", &[&d.url, out.path(), &N.to_string(), "100", "1234"]);
    eprint!("{}", run.stdout);
    let _third = Worker::start(&d.url, WORKER);
    await_workers(&d, 3);

    let position = out.0.join("position.json");
    let dataset = json!({"source": {"range": {"stop": N}}}).to_string();
    let run = run_bounded(
        &mut python(&[
            "-m",
            "shardwise",
            "read",
            &d.url,
            &dataset,
            "--resume-from",
            position.to_str().expect("a UTF-8 path"),
            "--split-size",
            "100",
        ]),
        Duration::from_secs(120),
    );
    assert_ran("python -m shardwise read --resume-from", &run);
    let before: Vec<i64> = serde_json::from_str(
        &std::fs::read_to_string(out.0.join("before.json")).expect("before.json"),
    )
    .expect("JSON");
    let after: Vec<i64> = run
        .stdout
        .lines()
        .map(|l| l.parse().unwrap_or_else(|_| panic!("an integer line: {l:?}")))
        .collect();
    let mut all: Vec<i64> = before.iter().chain(&after).copied().collect();
    assert_eq!(all.len(), N as usize, "{} before, {} after", before.len(), after.len());
    all.sort_unstable();
    all.dedup();
    assert_eq!(all, (0..N).collect::<Vec<_>>(), "every element exactly once");
    // The final position (stderr) covers the whole range, what was read before included.
    let end: Value = serde_json::from_str(run.stderr.trim()).expect("the position on stderr");
    assert_eq!(end["done"], json!([{"start": 0, "stop": N}]), "{end}");
    assert_eq!(end["partial"], json!([]), "{end}");
    // The resumed iteration had a task on each of the three workers, finished, and the CLI
    // released its lease.
    let job = ok(&d.call("GET", "/v1/jobs/5001", None));
    let iteration = &job["iterations"][0];
    assert_eq!(iteration["tasks"].as_array().map(Vec::len), Some(3), "{job}");
    assert_eq!(
        (&iteration["finished"], &iteration["num_clients"]),
        (&json!(true), &json!(0)),
        "{job}"
    );
}

#[test]
fn problems_surface_as_shardwise_errors_with_their_code() {
    let d = Dispatcher::start(&[]);
    let _worker = Worker::start(&d.url, WORKER);
    await_workers(&d, 1);
    let run = scenario("errors.py", &[&d.url, &dead_url()]);
    eprint!("{}", run.stdout);
    assert!(
        run.stdout
            .contains("an unknown dataset id: GET /v1/datasets/no-such-dataset: NOT_FOUND (404)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("the dead replica passed over"), "{}", run.stdout);
}

#[test]
fn a_consumer_idle_for_longer_than_the_client_timeout_keeps_its_lease() {
    let d = Dispatcher::start(&["--client-timeout", "1s"]);
    let _workers = [Worker::start(&d.url, WORKER), Worker::start(&d.url, WORKER)];
    await_workers(&d, 2);
    // The pause models a training step three times the client timeout.
    let run = scenario("idle_consumer.py", &[&d.url, "3"]);
    assert_eq!(run.stdout.trim(), "ok", "{}", run.stderr);
}
