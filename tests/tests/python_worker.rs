//! Python workers (`shardwise.worker.serve`, `python/shardwise/worker.py`) for real: a
//! `shardwise dispatcher` process, `serve(fn, processes=N)` processes running
//! `python/tests/scenarios/worker_serve.py` (a `fn` mapping a range split to rows
//! `{"x": i, "y": i * i, "pid": its process}`), and readers: the Python package's
//! (`python/tests/scenarios/worker_read.py`) and the Rust client.
//!
//! * every element exactly once over two worker processes, as JSON and as Arrow, through the
//!   Python reader and the Rust client;
//! * one worker process SIGKILLed mid-epoch while the other finishes its splits (and, with
//!   restarts on, the process coming back at its address): every element at least once, the
//!   only duplicates elements of the killed process read before it died, and the reader's
//!   final position whole;
//! * a position taken mid-read resumed on another number of processes reads exactly the rest;
//! * `fn` raising fails the read with its text, and the workers serve the next job;
//! * the README's example runs as written, as a script and through `python -m shardwise
//!   worker`.
//!
//! The Python environment is `<target>/pkg-venv` ([`shardwise_tests::pyenv`]).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use futures::StreamExt;
use serde_json::{Value, json};
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::wire::{NamedMode, ProcessingMode};
use shardwise_gateway::client::{DistributeOptions, distribute, distribute_batches};
use shardwise_tests::markdown::blocks;
use shardwise_tests::pyenv::{python, scenario_path};
use shardwise_tests::{
    Dispatcher, Process, Run, TempDir, assert_ran, ok, poll_until, repo_root, run_bounded, runtime,
};

/// The elements of the test datasets (`range(N)`).
const N: i64 = 2000;
/// Elements per split (`worker_read.py`'s `SPLIT`).
const SPLIT: i64 = 20;
/// The most splits a worker process holds at once: `buffer=64` over splits of 20.
const HELD_SPLITS: i64 = 4;

/// `serve(squares, processes=N)` in a Python process, its workers registered.
struct PyWorkers {
    process: Process,
    /// The workers' URLs, in the order they printed their listening lines.
    urls: Vec<String>,
}

impl PyWorkers {
    /// Starts `worker_serve.py DISPATCHER PROCESSES ARGS` and waits for every listening line.
    fn start(dispatcher: &str, processes: usize, args: &[&str]) -> PyWorkers {
        let script = scenario_path("worker_serve.py");
        let n = processes.to_string();
        let mut all = vec![script.as_str(), dispatcher, n.as_str()];
        all.extend_from_slice(args);
        PyWorkers::spawn(&mut python(&all), processes)
    }

    /// Spawns `cmd` (a `serve` of `processes` processes) and waits for every listening line.
    fn spawn(cmd: &mut Command, processes: usize) -> PyWorkers {
        let process = Process::spawn(cmd);
        let mut urls = Vec::new();
        for _ in 0..processes {
            let line = process
                .wait_for_line(|l| l.starts_with(LISTENING), Duration::from_secs(60))
                .unwrap_or_else(|| panic!("no listening line: {:?}", process.output()));
            urls.push(line.trim_start_matches(LISTENING).to_owned());
        }
        let workers = PyWorkers { process, urls };
        // Each process's pid line comes first, but on stderr, read by another thread.
        poll_until("the pid lines", Duration::from_secs(10), || {
            let n = workers.pids().len();
            if n >= processes { Ok(()) } else { Err(format!("{n} of {processes}")) }
        });
        workers
    }

    /// `(url, pid)` of every worker process started so far, in order (from the line `serve`
    /// prints on stderr for each).
    fn pids(&self) -> Vec<(String, i64)> {
        let (_, stderr) = self.process.output();
        stderr
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("shardwise worker: pid ")?;
                let (pid, rest) = rest.split_once(" serves ")?;
                let url = rest.split_whitespace().next()?;
                Some((url.to_owned(), pid.parse().ok()?))
            })
            .collect()
    }

    /// SIGTERM, and a clean exit (status 0) within 30 s.
    fn stop(mut self) -> Run {
        signal(&self.process.child.id().to_string(), "TERM");
        let run = self.process.finish(Duration::from_secs(30)).expect("serve stops on SIGTERM");
        assert_ran("serve, stopped by SIGTERM", &run);
        run
    }
}

const LISTENING: &str = "shardwise worker listening on ";

fn signal(pid: &str, sig: &str) {
    let status = Command::new("kill").arg(format!("-{sig}")).arg(pid).status().expect("kill");
    assert!(status.success(), "kill -{sig} {pid}");
}

/// Waits until the dispatcher lists `n` live workers.
fn await_workers(d: &Dispatcher, n: usize) {
    poll_until("the workers registered", Duration::from_secs(30), || {
        let workers = ok(&d.call("GET", "/v1/workers", None));
        let alive = workers["workers"].as_array().expect("a list").iter();
        if alive.filter(|w| w["alive"] == true).count() == n {
            Ok(())
        } else {
            Err(format!("{workers}"))
        }
    });
}

/// `worker_read.py ARGS`, bounded: the JSON line it printed.
fn read(args: &[&str]) -> Value {
    let script = scenario_path("worker_read.py");
    let mut all = vec![script.as_str()];
    all.extend_from_slice(args);
    let run = run_bounded(&mut python(&all), Duration::from_secs(180));
    assert_ran("worker_read.py", &run);
    serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

/// Rows `[x, y, pid]` from a reader's JSON.
fn rows(v: &Value) -> Vec<[i64; 3]> {
    v.as_array()
        .unwrap_or_else(|| panic!("rows: {v}"))
        .iter()
        .map(|r| {
            let r: Vec<i64> = r
                .as_array()
                .expect("a row")
                .iter()
                .map(|x| x.as_i64().expect("an integer"))
                .collect();
            [r[0], r[1], r[2]]
        })
        .collect()
}

/// Panics unless `xs` are `0..n`, each once.
fn exactly_once(what: &str, mut xs: Vec<i64>, n: i64) {
    xs.sort_unstable();
    let len = xs.len();
    xs.dedup();
    assert_eq!(len, xs.len(), "{what}: an element came twice");
    assert_eq!(xs, (0..n).collect::<Vec<_>>(), "{what}: every element");
}

/// The position of a read that consumed `range(n)` whole.
fn whole(position: &Value, n: i64) {
    assert_eq!(position["done"], json!([{"start": 0, "stop": n}]), "{position}");
    assert_eq!(position["partial"], json!([]), "{position}");
}

fn options() -> DistributeOptions {
    DistributeOptions {
        processing_mode: ProcessingMode::Named(NamedMode::DistributedEpoch),
        split_size: Some(SPLIT as u64),
        elements_per_request: 50,
        unknown_task_timeout: Duration::from_secs(30),
        ..shardwise_tests::fast_options()
    }
}

#[test]
fn two_processes_serve_every_element_exactly_once_as_json_and_arrow() {
    let d = Dispatcher::start(&[]);
    let workers = PyWorkers::start(&d.url, 2, &[]);
    await_workers(&d, 2);
    let pids = workers.pids();
    assert_eq!(pids.len(), 2, "two processes: {pids:?}");

    // The Python reader, JSON then Arrow.
    let got = read(&["both", &d.url, &N.to_string()]);
    for form in ["json", "arrow"] {
        let rows = rows(&got[form]);
        assert!(rows.iter().all(|[x, y, _]| *y == x * x), "{form}: y = x * x");
        exactly_once(form, rows.iter().map(|r| r[0]).collect(), N);
        let served: std::collections::BTreeSet<i64> = rows.iter().map(|r| r[2]).collect();
        assert_eq!(served.len(), 2, "{form}: both processes served: {served:?}");
    }
    let tasks = got["json_tasks"].as_array().expect("tasks");
    let mut addresses: Vec<&str> =
        tasks.iter().map(|t| t["worker_address"].as_str().unwrap()).collect();
    addresses.sort_unstable();
    let mut want: Vec<&str> =
        workers.urls.iter().map(|u| u.trim_start_matches("http://")).collect();
    want.sort_unstable();
    assert_eq!(addresses, want, "a task on each worker process");
    whole(&got["json_position"], N);

    // The Rust client, JSON and Arrow.
    let (values, batches) = rust_reads(&d.url, N);
    exactly_once("rust json", values.iter().map(|v| v["x"].as_i64().expect("x")).collect(), N);
    exactly_once("rust arrow", batches, N);
    workers.stop();
}

/// A JSON read and an Arrow read of `range(n)` by the Rust client: the JSON elements, and
/// the Arrow reads' `x` column.
fn rust_reads(url: &str, n: i64) -> (Vec<Value>, Vec<i64>) {
    let dataset = json!({"source": {"range": {"stop": n}}});
    let def = DatasetDef::from_json(&dataset).expect("a dataset");
    runtime().block_on(async {
        let mut values = Vec::new();
        let mut stream = distribute(url, def.clone(), options());
        while let Some(v) =
            tokio::time::timeout(Duration::from_secs(60), stream.next()).await.expect("within 60 s")
        {
            values.push(v.expect("an element"));
        }
        let mut xs = Vec::new();
        let mut stream = distribute_batches(url, def, options());
        while let Some(b) =
            tokio::time::timeout(Duration::from_secs(60), stream.next()).await.expect("within 60 s")
        {
            let b = b.expect("a batch");
            let col = b.column_by_name("x").expect("an x column");
            xs.extend(col.as_primitive::<Int64Type>().values().iter().copied());
        }
        (values, xs)
    })
}

/// One worker process SIGKILLed while a reader is part way through an epoch: the reader
/// finishes, every element at least once; the only duplicates are elements the killed
/// process served before it died (its splits in flight, never acknowledged), at most its
/// held splits' worth; the final position is whole.
fn killed_mid_epoch(serve_args: &[&str], dispatcher_args: &[&str]) -> (PyWorkers, i64) {
    const TAKE: usize = 300;
    let d = Dispatcher::start(dispatcher_args);
    let workers = PyWorkers::start(&d.url, 2, serve_args);
    await_workers(&d, 2);
    let script = scenario_path("worker_read.py");
    let args = ["pause", d.url.as_str(), &N.to_string(), &TAKE.to_string()];
    let mut reader =
        Process::spawn_piped(&mut python(&[&[script.as_str()][..], &args[..]].concat()));
    let paused = reader
        .wait_for_line(|l| l.starts_with("{\"paused\""), Duration::from_secs(120))
        .unwrap_or_else(|| panic!("the reader did not pause: {:?}", reader.output()));
    let paused: Value = serde_json::from_str(&paused).expect("JSON");
    let before = rows(&paused["paused"]);
    assert!(before.len() >= TAKE, "{} elements before the pause", before.len());

    // The reader paused part way through a split of this process: a split in flight.
    let killed = paused["victim"].as_i64().expect("a victim");
    assert!(workers.pids().iter().any(|(_, p)| *p == killed), "{killed} is a worker process");
    signal(&killed.to_string(), "KILL");
    reader.send_line("go").expect("resume the reader");
    let done = reader
        .wait_for_line(|l| l.starts_with("{\"rest\""), Duration::from_secs(120))
        .unwrap_or_else(|| panic!("the reader did not finish: {:?}", reader.output()));
    let run = reader.finish(Duration::from_secs(30)).expect("the reader exits");
    assert_ran("the reader", &run);
    let done: Value = serde_json::from_str(&done).expect("JSON");
    let after = rows(&done["rest"]);

    assert!(
        after.iter().all(|r| r[2] != killed),
        "nothing from the killed process after its death"
    );
    let mut copies: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for r in before.iter().chain(&after) {
        copies.entry(r[0]).or_default().push(r[2]);
    }
    assert_eq!(
        copies.keys().copied().collect::<Vec<_>>(),
        (0..N).collect::<Vec<_>>(),
        "nothing lost"
    );
    let twice: Vec<(&i64, &Vec<i64>)> = copies.iter().filter(|(_, p)| p.len() > 1).collect();
    for (x, pids) in &twice {
        assert!(pids.len() == 2 && pids.contains(&killed), "element {x} came from {pids:?}");
    }
    let dups = twice.len() as i64;
    assert!(dups > 0, "the killed process's split in flight came again");
    assert!(dups <= HELD_SPLITS * SPLIT, "{dups} duplicates: more than it held");
    whole(&done["position"], N);
    eprintln!("killed pid {killed} after {} elements: {dups} duplicates", before.len());
    (workers, killed)
}

#[test]
fn a_worker_process_killed_mid_epoch_loses_nothing_while_the_other_finishes() {
    let (workers, killed) = killed_mid_epoch(&["--no-restart"], &["--worker-timeout", "2s"]);
    let (_, stderr) = workers.process.output();
    assert!(stderr.contains(&format!("(pid {killed}) exited with -9; not restarted")), "{stderr}");
    workers.stop();
}

#[test]
fn a_killed_worker_process_comes_back_at_its_address_and_its_splits_go_out_at_once() {
    // The default worker timeout (10 minutes): the read finishes only because the process
    // that came back at the dead one's address made the dispatcher re-issue its splits.
    let (workers, killed) = killed_mid_epoch(&[], &[]);
    let (_, stderr) = workers.process.output();
    assert!(
        stderr.contains(&format!("(pid {killed}) exited with -9; starting it again")),
        "{stderr}"
    );
    let pids = workers.pids();
    let url = pids.iter().find(|(_, p)| *p == killed).map(|(u, _)| u.clone()).expect("its URL");
    assert!(
        pids.iter().any(|(u, p)| *u == url && *p != killed),
        "another process came back at {url}: {pids:?}"
    );
    workers.stop();
}

#[test]
fn a_position_taken_mid_read_resumes_on_another_number_of_processes() {
    const TAKE: i64 = 777;
    let d = Dispatcher::start(&["--worker-timeout", "2s"]);
    let two = PyWorkers::start(&d.url, 2, &[]);
    await_workers(&d, 2);
    let stopped = read(&["stop", &d.url, &N.to_string(), &TAKE.to_string()]);
    let before = rows(&stopped["before"]);
    let position = &stopped["position"];
    assert_ne!(position["partial"], json!([]), "stopped inside splits: {position}");
    two.stop();

    let three = PyWorkers::start(&d.url, 3, &[]);
    await_workers(&d, 3);
    let resumed = read(&["resume", &d.url, &N.to_string(), &position.to_string()]);
    let after = rows(&resumed["rest"]);
    exactly_once("before and after", before.iter().chain(&after).map(|r| r[0]).collect(), N);
    whole(&resumed["position"], N);
    three.stop();
}

#[test]
fn fn_raising_fails_the_read_with_its_text_and_the_workers_serve_the_next_job() {
    let d = Dispatcher::start(&[]);
    let workers = PyWorkers::start(&d.url, 2, &[]);
    await_workers(&d, 2);
    let failed = read(&["boom", &d.url]);
    assert_eq!(failed["code"], "INVALID_ARGUMENT", "{failed}");
    let detail = failed["detail"].as_str().expect("a detail");
    assert!(detail.contains("failed: fn raised ValueError: boom in split"), "{detail}");
    assert_eq!(
        failed["before"].as_array().map(Vec::len),
        Some(1),
        "the row before the error: {failed}"
    );

    let got = read(&["both", &d.url, "500"]);
    exactly_once("the next job", rows(&got["json"]).iter().map(|r| r[0]).collect(), 500);
    let run = workers.stop();
    assert!(run.stderr.contains("ValueError: boom in split"), "the worker logs fn's traceback");
}

/// The README's "Python workers" example as written (`python/README.md`): `prep.py` run as
/// a script (four processes), and its function served by `python -m shardwise worker` (two);
/// the Rust client reads `x_squared = x * x` exactly once from each.
#[test]
fn the_readmes_python_workers_example_runs_as_written() {
    let readme = std::fs::read_to_string(repo_root().join("python/README.md")).expect("README");
    let section = readme.split("\n## Python workers\n").nth(1).expect("the section");
    let section = section.split("\n## ").next().unwrap_or_default();
    let block = blocks(section).into_iter().find(|b| b.info == "python").expect("its example");
    let script = block.script();
    assert!(script.starts_with("# prep.py\n"), "{script}");
    let dir = TempDir::new("py-worker-readme");
    for (command, processes) in [(&["prep.py"][..], 4), (&["-m", "shardwise", "worker"][..], 2)] {
        let d = Dispatcher::start(&[]);
        std::fs::write(dir.0.join("prep.py"), script.replace("http://127.0.0.1:5050", &d.url))
            .expect("prep.py");
        let mut args = command.to_vec();
        if command.len() > 1 {
            args.extend([d.url.as_str(), "prep:squares", "--processes", "2"]);
        }
        let mut cmd = python(&args);
        cmd.current_dir(&dir.0);
        let workers = PyWorkers::spawn(&mut cmd, processes);
        await_workers(&d, processes);
        let (values, xs) = rust_reads(&d.url, 300);
        for v in &values {
            let x = v["x"].as_i64().expect("x");
            assert_eq!(v["x_squared"].as_i64(), Some(x * x), "{v}");
        }
        exactly_once("json", values.iter().map(|v| v["x"].as_i64().expect("x")).collect(), 300);
        exactly_once("arrow", xs, 300);
        workers.stop();
    }
}
