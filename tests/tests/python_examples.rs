//! The Python examples (`examples/python/`) run for real against `shardwise` processes on
//! 127.0.0.1 and ports bound with 0: `worker.py`, a worker in plain Python with `requests`,
//! processing a DYNAMIC `splits` dataset, and `seed_sdk.py`, the seed flow through a client
//! generated from `openapi/openapi.json` by `openapi-python-client`.
//!
//! The Python environment is built once per target directory and shared by every test
//! process: `<target>/py-venv` (`python3 -m venv` and `pip install -r
//! examples/python/requirements.txt`, all pinned) and the SDK generated into `<target>/py-sdk`
//! and installed into that venv. An exclusive lock on `<target>/py-setup.lock` serialises the
//! setup (the kernel releases it when a process dies, so a killed setup leaves no stale lock);
//! stamps (the requirements, the OpenAPI document) tell when either must be rebuilt. Needs
//! `python3` with `venv` and `pip`, and PyPI, the first time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use shardwise_tests::{
    Dispatcher, Process, TempDir, Worker, assert_ran, poll_until, repo_root, run_bounded,
    target_dir,
};

/// The shared Python environment.
#[derive(Debug)]
struct PyEnv {
    /// `<venv>/bin/python`.
    python: PathBuf,
}

/// The venv with the pinned requirements and the generated SDK, built at most once per
/// target directory (and again only when the requirements or the OpenAPI document change).
fn py_env() -> &'static PyEnv {
    static ENV: OnceLock<PyEnv> = OnceLock::new();
    ENV.get_or_init(|| {
        let target = target_dir();
        let venv = target.join("py-venv");
        let sdk = target.join("py-sdk");
        let python = venv.join("bin/python");
        let bin_path =
            format!("{}:{}", venv.join("bin").display(), std::env::var("PATH").unwrap_or_default());
        let requirements_file = repo_root().join("examples/python/requirements.txt");
        let requirements = std::fs::read_to_string(&requirements_file).expect("requirements");
        let doc_file = repo_root().join("openapi/openapi.json");
        let doc = std::fs::read_to_string(&doc_file).expect("openapi/openapi.json");
        let venv_stamp = venv.join("shardwise-requirements.txt");
        let sdk_stamp = target.join("py-sdk.openapi.json");

        std::fs::create_dir_all(&target).expect("target dir");
        let lock = std::fs::File::create(target.join("py-setup.lock")).expect("lock file");
        // Another test process may be building the environment (minutes, the first time).
        shardwise_tests::poll_until("py-setup.lock", Duration::from_secs(900), || {
            match lock.try_lock() {
                Ok(()) => Ok(()),
                Err(std::fs::TryLockError::WouldBlock) => Err("held by another test process"),
                Err(std::fs::TryLockError::Error(e)) => panic!("lock py-setup.lock: {e}"),
            }
        });
        let started = Instant::now();
        let stamped = |stamp: &Path, want: &str| {
            std::fs::read_to_string(stamp).is_ok_and(|s| s == want) && python.exists()
        };
        if !stamped(&venv_stamp, &requirements) {
            let _ = std::fs::remove_file(&sdk_stamp);
            shardwise_tests::build_venv(&venv, &requirements_file, Duration::from_secs(600));
            std::fs::write(&venv_stamp, &requirements).expect("venv stamp");
            eprintln!("python_examples: built {} in {:?}", venv.display(), started.elapsed());
        }
        if !stamped(&sdk_stamp, &doc) || !sdk.exists() {
            let generated = Instant::now();
            // `--fail-on-warning`: whatever the generator cannot express of our document is a
            // failure here, not a silently thinner SDK. Its ruff post-hooks need the venv's bin.
            let run = run_bounded(
                Command::new(venv.join("bin/openapi-python-client"))
                    .args(["generate", "--overwrite", "--fail-on-warning", "--path"])
                    .arg(&doc_file)
                    .arg("--output-path")
                    .arg(&sdk)
                    .env("PATH", &bin_path),
                Duration::from_secs(300),
            );
            assert_ran("openapi-python-client generate", &run);
            // Installed without build isolation: its build backend (poetry-core) is pinned in
            // the venv already, so this needs no index.
            assert_ran(
                "pip install the generated SDK",
                &run_bounded(
                    Command::new(&python)
                        .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input"])
                        .args(["--no-deps", "--no-build-isolation", "--force-reinstall"])
                        .arg(&sdk),
                    Duration::from_secs(300),
                ),
            );
            std::fs::write(&sdk_stamp, &doc).expect("sdk stamp");
            eprintln!("python_examples: generated {} in {:?}", sdk.display(), generated.elapsed());
        }
        drop(lock);
        PyEnv { python }
    })
}

/// `python examples/python/SCRIPT ARGS` with unbuffered output.
fn python(script: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(&py_env().python);
    cmd.arg(repo_root().join("examples/python").join(script))
        .args(args)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    for proxy in ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"] {
        cmd.env_remove(proxy);
    }
    cmd
}

/// Starts `worker.py` and waits for its `registered` line.
fn start_python_worker(dispatcher: &str, address: &str, extra: &[&str]) -> Process {
    let mut args = vec!["--dispatcher", dispatcher, "--address", address];
    args.extend_from_slice(extra);
    let p = Process::spawn(&mut python("worker.py", &args));
    if p.wait_for_line(|l| l.starts_with("registered with "), Duration::from_secs(30)).is_none() {
        let (out, err) = p.output();
        panic!("worker.py {address} did not register:\nstdout:\n{out}\nstderr:\n{err}");
    }
    p
}

fn ok(what: &str, r: &shardwise_tests::HttpResponse) -> Value {
    assert_eq!(r.status, 200, "{what}: {}", r.body);
    r.json()
}

#[test]
fn python_worker_processes_every_split_of_a_dynamic_epoch_exactly_once() {
    let d = Dispatcher::start(&[]);
    let flags = ["--heartbeat-interval", "0.05", "--max-splits", "3", "--exit-after-tasks", "1"];
    let mut workers: Vec<(String, Process)> = (0..2)
        .map(|i| {
            let address = format!("python-worker-{i}:1");
            let p = start_python_worker(&d.url, &address, &flags);
            (address, p)
        })
        .collect();

    // The shards of a training set: a DYNAMIC job hands each to one worker.
    let items: Vec<Value> =
        (0..40).map(|i| json!(format!("gs://bucket/train-{i:05}-of-00040.tfrecord"))).collect();
    let ds = json!({"source": {"splits": {"items": items}}});
    let dataset = ok("register", &d.call("POST", "/v1/datasets", Some(json!({"dataset": ds}))));
    let job = ok(
        "job",
        &d.call(
            "POST",
            "/v1/jobs",
            Some(json!({"dataset_id": dataset["dataset_id"], "processing_mode": "distributed_epoch"})),
        ),
    );
    let job_id = job["job_id"].as_str().unwrap().to_owned();
    let lease =
        ok("iteration", &d.call("POST", &format!("/v1/jobs/{job_id}/iterations"), Some(json!({}))));
    let client = lease["client_id"].as_str().unwrap().to_owned();

    // The client heartbeats (as a trainer would) until the iteration is finished: bounded poll.
    let finished = shardwise_tests::try_poll_until(Duration::from_secs(60), || {
        let hb = ok(
            "client heartbeat",
            &d.call("POST", &format!("/v1/clients/{client}/heartbeat"), Some(json!({}))),
        );
        if hb["iteration_finished"] == true {
            Ok(hb["tasks"].as_array().unwrap().clone())
        } else {
            Err(hb)
        }
    });
    let tasks = finished.unwrap_or_else(|hb| {
        let outputs: Vec<_> = workers.iter().map(|(_, p)| p.output()).collect();
        panic!("the iteration did not finish: {hb}\nworkers: {outputs:?}");
    });
    assert_eq!(tasks.len(), 2, "a task per worker: {tasks:?}");
    ok("release", &d.call("DELETE", &format!("/v1/clients/{client}"), None));

    // Each worker completed its task and exited; together they processed every split once.
    let mut processed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut per_worker = Vec::new();
    for (address, p) in &mut workers {
        let run = p.finish(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{address}: {e}"));
        assert_eq!(run.code, 0, "{address}:\n{}\n{}", run.stdout, run.stderr);
        let task = tasks
            .iter()
            .find(|t| t["worker_address"] == address.as_str())
            .unwrap_or_else(|| panic!("no task for {address}: {tasks:?}"))["task_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let prefix = format!("task {task}: split ");
        let mut n = 0;
        for line in run.stdout.lines() {
            if let Some(rest) = line.strip_prefix(&prefix) {
                let (split_id, split) = rest.split_once(' ').expect("`split ID JSON`");
                let split: Value = serde_json::from_str(split).expect("a JSON split");
                processed
                    .entry(split.as_str().unwrap().to_owned())
                    .or_default()
                    .push(format!("{address} {split_id}"));
                n += 1;
            }
        }
        assert!(
            run.stdout.contains(&format!("task {task}: completed, {n} splits")),
            "{address}:\n{}",
            run.stdout
        );
        per_worker.push(n);
    }
    let want: Vec<String> = items.iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    assert_eq!(processed.keys().cloned().collect::<Vec<_>>(), want, "every split processed");
    let twice: Vec<_> = processed.iter().filter(|(_, by)| by.len() > 1).collect();
    assert!(twice.is_empty(), "splits processed more than once: {twice:?}");
    assert_eq!(per_worker.iter().sum::<usize>(), items.len(), "{per_worker:?}");
    let job = ok("job", &d.call("GET", &format!("/v1/jobs/{job_id}"), None));
    assert_eq!(job["iterations"][0]["finished"], true, "{job}");
}

/// Issue 11, point 2, for the Python worker: it names only files under its `--data-root`
/// (after `..` and symlinks), skips every other path with one message, and without a root
/// leaves a `files` task alone.
#[test]
fn python_worker_touches_files_only_under_its_data_roots() {
    let base = TempDir::new("pyroots");
    let root = base.0.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "a\n").unwrap();
    std::fs::write(base.0.join("secret.txt"), "s\n").unwrap();
    std::os::unix::fs::symlink(base.0.join("secret.txt"), root.join("escape")).unwrap();
    let r = root.to_str().unwrap().to_owned();
    let paths =
        [format!("{r}/a.txt"), "/etc/passwd".into(), format!("{r}/../secret.txt"), "escape".into()];

    let d = Dispatcher::start(&[]);
    let flags = ["--heartbeat-interval", "0.05", "--exit-after-tasks", "1", "--data-root", &r];
    let mut w = start_python_worker(&d.url, "python-worker-files:1", &flags);
    let ds = json!({"source": {"files": {"paths": paths, "format": "lines"}}});
    distributed_epoch_iteration(&d, ds);
    let run = w.finish(Duration::from_secs(60)).expect("the worker completes its task");
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let processed: Vec<&str> = run.stdout.lines().filter(|l| l.contains(": split ")).collect();
    assert_eq!(processed.len(), 1, "{}", run.stdout);
    assert!(processed[0].ends_with(&serde_json::to_string(&paths[0]).unwrap()), "{processed:?}");
    for refused in &paths[1..] {
        let quoted = serde_json::to_string(refused).unwrap();
        let text = format!("path {quoted} is not a readable file under this worker's data roots");
        assert!(run.stderr.contains(&text), "{refused}: {}", run.stderr);
    }
    assert!(run.stdout.contains("completed, 4 splits"), "{}", run.stdout);

    // Without a root, a files task is left alone.
    let w =
        start_python_worker(&d.url, "python-worker-noroot:1", &["--heartbeat-interval", "0.05"]);
    let ds = json!({"source": {"files": {"paths": [paths[0].clone()], "format": "lines"}}});
    distributed_epoch_iteration(&d, ds);
    poll_until("the worker refuses the files task", Duration::from_secs(30), || {
        let (stdout, stderr) = w.output();
        if stderr.contains("allows no data roots") {
            Ok(())
        } else {
            Err(format!("{stdout}\n{stderr}"))
        }
    });
    assert!(w.output().1.contains("--data-root DIR"), "{:?}", w.output());
    assert!(!w.output().0.contains(": split "), "{:?}", w.output());
}

#[test]
fn python_worker_prints_the_dispatchers_problem_and_uses_its_token() {
    let dir = TempDir::new("pyworker-auth");
    let tokens = dir.0.join("tokens.json");
    std::fs::write(
        &tokens,
        r#"{"tokens": [{"role": "worker", "token": "w-secret-0123456789abcdef"}]}"#,
    )
    .unwrap();
    let token_file = dir.0.join("worker.token");
    std::fs::write(&token_file, "w-secret-0123456789abcdef\n").unwrap();
    let d = Dispatcher::start(&["--auth-tokens", tokens.to_str().unwrap()]);

    // No token: the 401 problem, printed, and exit status 1.
    let run = run_bounded(
        &mut python("worker.py", &["--dispatcher", &d.url, "--address", "python-worker-0:1"]),
        Duration::from_secs(60),
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("POST /v1/workers/heartbeat: 401 UNAUTHENTICATED: "),
        "{}",
        run.stderr
    );

    // With the worker token it registers.
    let token = token_file.to_str().unwrap();
    let _w = start_python_worker(&d.url, "python-worker-1:1", &["--token-file", token]);
}

#[test]
fn seed_flow_through_the_generated_sdk_prints_the_range() {
    let env = py_env();
    let d = Dispatcher::start(&[]);
    let w = Worker::start(&d.url, &[]);
    let mut cmd = python("seed_sdk.py", &["--dispatcher", &d.url]);
    let run = run_bounded(&mut cmd, Duration::from_secs(90));
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (0, "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n"),
        "{}\n{}\nworker: {}\n(python {})",
        run.stdout,
        run.stderr,
        w.output(),
        env.python.display()
    );
    // The iteration finished and the SDK client released its lease.
    let job = ok("job", &d.call("GET", "/v1/jobs/5000", None));
    // The typed models sent the definition the script spells (in its canonical form).
    let id = job["dataset_id"].as_str().expect("dataset_id");
    let dataset = ok("dataset", &d.call("GET", &format!("/v1/datasets/{id}"), None));
    assert_eq!(
        dataset["dataset"],
        json!({"source": {"range": {"start": 0, "stop": 20, "step": 1}}, "transforms": [{"take": 10}]}),
        "{dataset}"
    );
    assert_eq!(job["iterations"][0]["finished"], true, "{job}");
    assert_eq!(job["iterations"][0]["num_clients"], 0, "{job}");
}

/// A worker that cannot be reached (its advertised host does not resolve) is named in the
/// script's error, with the URL it was reached at, instead of a bare resolver message.
#[test]
fn seed_sdk_names_a_worker_it_cannot_reach() {
    py_env();
    let d = Dispatcher::start(&[]);
    let _w = Worker::start(&d.url, &["--worker-address", "no-such-worker.invalid:%port%"]);
    let run =
        run_bounded(&mut python("seed_sdk.py", &["--dispatcher", &d.url]), Duration::from_secs(90));
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("seed_sdk: worker no-such-worker.invalid:")
            && run.stderr.contains("at http://no-such-worker.invalid:"),
        "{}",
        run.stderr
    );
}

/// Registers `ds`, a `distributed_epoch` job over it and an iteration of that job.
fn distributed_epoch_iteration(d: &Dispatcher, ds: serde_json::Value) {
    let dataset = ok("register", &d.call("POST", "/v1/datasets", Some(json!({"dataset": ds}))));
    let job = ok(
        "job",
        &d.call(
            "POST",
            "/v1/jobs",
            Some(json!({"dataset_id": dataset["dataset_id"], "processing_mode": "distributed_epoch"})),
        ),
    );
    let path = format!("/v1/jobs/{}/iterations", job["job_id"].as_str().unwrap());
    ok("iteration", &d.call("POST", &path, Some(json!({}))));
}
