//! The Python package with PyTorch and JAX for real (torch, torchdata and jax from PyPI, on
//! CPU, in the venv `shardwise_tests::pyenv::torch_env` builds once): a read through
//! torchdata's `StatefulDataLoader` stopped on 2 ranks x 2 loader workers and resumed on
//! 3 ranks x 1 loader worker (ranks from `torch.distributed`) reads every record exactly once
//! over both runs; a JAX loop over Parquet rows checkpointed with `get_state()` on two
//! processes and resumed with `set_state()` on one reads every row exactly once; Arrow rows of a
//! declared tensor become torch tensors over the received buffer (no copy). All run against a
//! real `shardwise dispatcher` and real `shardwise worker`s on 127.0.0.1; and 2 ranks as the
//! consumers of a coordinated read over 3 workers take equal steps, round by round.

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use shardwise_tests::pyenv::torch_python;
use shardwise_tests::{Dispatcher, Process, TempDir, Worker, ok, poll_until, repo_root};

const WORKER_FLAGS: [&str; 2] = ["--heartbeat-interval", "200ms"];

/// `python python/tests/scenarios/SCRIPT ARGS` in the torch venv, from the target directory
/// (so that the installed package is imported), with `env`.
fn scenario(script: &str, args: &[&str], env: &[(&str, String)]) -> Command {
    let path = repo_root().join("python/tests/scenarios").join(script);
    let mut cmd = torch_python(&[path.to_str().expect("a UTF-8 path")]);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs the commands together; panics with the output of any that fails.
fn run_together(what: &str, mut commands: Vec<Command>) -> Vec<String> {
    let mut processes: Vec<Process> = commands.iter_mut().map(Process::spawn).collect();
    processes
        .iter_mut()
        .enumerate()
        .map(|(i, p)| {
            let run =
                p.finish(Duration::from_secs(300)).unwrap_or_else(|e| panic!("{what} {i}: {e}"));
            assert_eq!(
                run.code, 0,
                "{what} {i}:\nstdout:\n{}\nstderr:\n{}",
                run.stdout, run.stderr
            );
            run.stdout
        })
        .collect()
}

/// The JSON in `path`.
fn read_json(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The integers under `key` of every output file.
fn all_of(files: &[std::path::PathBuf], key: &str) -> Vec<i64> {
    files
        .iter()
        .flat_map(|f| {
            read_json(f)[key]
                .as_array()
                .unwrap_or_else(|| panic!("{} has {key}", f.display()))
                .iter()
                .map(|v| v.as_i64().expect("an integer"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits until the dispatcher lists `n` live workers.
fn await_workers(d: &Dispatcher, n: usize) {
    poll_until("the workers registered", Duration::from_secs(20), || {
        let workers = ok(&d.call("GET", "/v1/workers", None));
        let alive = workers["workers"].as_array().unwrap().iter().filter(|w| w["alive"] == true);
        if alive.count() == n { Ok(()) } else { Err(format!("{workers}")) }
    });
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("its address").port()
}

#[test]
fn a_stateful_dataloader_read_stopped_on_2x2_resumes_on_3x1_exactly_once() {
    // 6 JSON Lines files of 100 records (record j of file i is 1000 * i + j): a split is a
    // file, so the consumers share files and stop part way through several.
    let dir = TempDir::new("torch-resume");
    let paths: Vec<String> = (0..6)
        .map(|i| {
            let path = format!("{}/part-{i}.jsonl", dir.path());
            let text: String = (0..100).map(|j| format!("{}\n", 1000 * i + j)).collect();
            std::fs::write(&path, text).expect("write a part");
            path
        })
        .collect();
    let mut want: Vec<i64> = (0..6).flat_map(|i| (0..100).map(move |j| 1000 * i + j)).collect();
    want.sort_unstable();
    let dataset = json!({"source": {"files": {"paths": paths, "format": "jsonl"}}}).to_string();
    let d = Dispatcher::start(&[]);
    let worker = || {
        let mut flags = WORKER_FLAGS.to_vec();
        flags.extend(["--data-root", dir.path()]);
        Worker::start(&d.url, &flags)
    };
    let _workers = [worker(), worker()];
    await_workers(&d, 2);

    let out = |name: &str| std::path::Path::new(dir.path()).join(name);
    let first: Vec<_> = (0..2).map(|r| out(&format!("first-{r}.json"))).collect();
    let commands = (0..2)
        .map(|rank| {
            let args = [
                "first",
                &d.url,
                &dataset,
                "train",
                &rank.to_string(),
                "10",
                first[rank].to_str().unwrap(),
            ];
            scenario("torch_resume.py", &args, &[])
        })
        .collect();
    run_together("rank of the first run", commands);
    let yielded = all_of(&first, "records");
    assert_eq!(yielded.len(), 2 * 10 * 8, "10 batches of 8 on each rank");

    let merged = out("merged.json");
    let mut args = vec!["merge", merged.to_str().unwrap()];
    args.extend(first.iter().map(|f| f.to_str().unwrap()));
    run_together("merge", vec![scenario("torch_resume.py", &args, &[])]);
    let position = read_json(&merged);
    println!("merged position: {position}");

    let _third = worker();
    await_workers(&d, 3);
    let second: Vec<_> = (0..3).map(|r| out(&format!("second-{r}.json"))).collect();
    let master_port = free_port().to_string();
    let commands = (0..3)
        .map(|rank| {
            let env = [
                ("MASTER_ADDR", "127.0.0.1".to_owned()),
                ("MASTER_PORT", master_port.clone()),
                ("RANK", rank.to_string()),
                ("WORLD_SIZE", "3".to_owned()),
            ];
            let args = [
                "second",
                &d.url,
                &dataset,
                "train",
                merged.to_str().unwrap(),
                second[rank].to_str().unwrap(),
            ];
            scenario("torch_resume.py", &args, &env)
        })
        .collect();
    run_together("rank of the second run", commands);
    let rest = all_of(&second, "records");
    let mut got: Vec<i64> = yielded.into_iter().chain(rest).collect();
    got.sort_unstable();
    assert_eq!(got, want, "every record exactly once over both runs");
}

#[test]
fn a_jax_loop_checkpointed_with_get_state_resumes_with_set_state_exactly_once() {
    let dir = TempDir::new("jax-resume");
    let written = run_together(
        "write the Parquet files",
        vec![scenario("jax_resume.py", &["write", dir.path()], &[])],
    );
    let written: Value = serde_json::from_str(written[0].trim()).expect("the dataset");
    let dataset = written["dataset"].to_string();
    let rows = written["rows"].as_i64().expect("rows");
    // The dispatcher reads the files' row counts (split by rows) under its data root.
    let d = Dispatcher::start(&["--data-root", dir.path()]);
    let worker = || {
        let mut flags = WORKER_FLAGS.to_vec();
        flags.extend(["--data-root", dir.path()]);
        Worker::start(&d.url, &flags)
    };
    let _workers = [worker(), worker()];
    await_workers(&d, 2);

    let out = |name: &str| std::path::Path::new(dir.path()).join(name);
    let first: Vec<_> = (0..2).map(|i| out(&format!("first-{i}.json"))).collect();
    let commands = (0..2)
        .map(|index| {
            let args = [
                "first",
                &d.url,
                &dataset,
                "train",
                &index.to_string(),
                "2",
                "5",
                first[index].to_str().unwrap(),
            ];
            scenario("jax_resume.py", &args, &[])
        })
        .collect();
    run_together("process of the first run", commands);
    let before = all_of(&first, "rows");
    assert!(!before.is_empty() && (before.len() as i64) < rows, "stopped part way");

    let second = out("second.json");
    let mut args = vec!["second", &d.url, &dataset, "train", second.to_str().unwrap()];
    args.extend(first.iter().map(|f| f.to_str().unwrap()));
    run_together("the resumed process", vec![scenario("jax_resume.py", &args, &[])]);
    let mut got: Vec<i64> = before.into_iter().chain(all_of(&[second], "rows")).collect();
    got.sort_unstable();
    assert_eq!(got, (0..rows).collect::<Vec<_>>(), "every row exactly once over both runs");
}

#[test]
fn arrow_rows_become_tensors_without_a_copy_and_each_row_comes_once() {
    let dir = TempDir::new("torch-arrow");
    let d = Dispatcher::start(&[]);
    let mut flags = WORKER_FLAGS.to_vec();
    flags.extend(["--data-root", dir.path()]);
    let _workers = [Worker::start(&d.url, &flags), Worker::start(&d.url, &flags)];
    await_workers(&d, 2);
    let out = run_together(
        "torch_arrow.py",
        vec![scenario("torch_arrow.py", &[&d.url, dir.path()], &[])],
    );
    assert!(out[0].contains("\"rows\": 1200"), "{}", out[0]);
}

/// Coordinated reads from PyTorch: 2 ranks as the 2 consumers of one job over 3 workers
/// (`ShardwiseIterableDataset(coordinated=True)`) take the same number of steps, and each
/// round gives the ranks consecutive elements of one worker, the workers in turn (each worker
/// produces the whole endless range: round `r` is worker `r % 3`'s round `r / 3`).
#[test]
fn coordinated_reads_give_two_ranks_equal_steps_round_by_round_from_three_workers() {
    let d = Dispatcher::start(&[]);
    let _workers: Vec<Worker> =
        (0..3).map(|_| Worker::start(&d.url, &["--heartbeat-interval", "200ms"])).collect();
    await_workers(&d, 3);
    let dir = TempDir::new("torch-coordinated");
    let outs: Vec<std::path::PathBuf> =
        (0..2).map(|r| std::path::Path::new(dir.path()).join(format!("rank{r}.json"))).collect();
    let commands = (0..2)
        .map(|rank| {
            let (rank_s, out) = (rank.to_string(), outs[rank].to_str().unwrap().to_owned());
            scenario("torch_coordinated.py", &[&d.url, "coordinated", &rank_s, "6", &out], &[])
        })
        .collect();
    run_together("rank", commands);
    let batches: Vec<Vec<Vec<i64>>> = outs
        .iter()
        .map(|f| serde_json::from_value(read_json(f)["batches"].clone()).expect("batches"))
        .collect();
    assert_eq!(batches[0].len(), 6, "{batches:?}");
    assert_eq!(batches[1].len(), 6, "equal steps: {batches:?}");
    let flat = |b: &Vec<Vec<i64>>| b.iter().flatten().copied().collect::<Vec<i64>>();
    let (r0, r1) = (flat(&batches[0]), flat(&batches[1]));
    let rounds: Vec<i64> = (0..24).map(|r| 2 * (r / 3)).collect();
    assert_eq!(r0, rounds, "rank 0: the first element of each round");
    assert_eq!(r1, rounds.iter().map(|e| e + 1).collect::<Vec<_>>(), "rank 1: the second");
    for f in &outs {
        assert_eq!(read_json(f)["position"], Value::Null, "coordinated reads have no position");
    }
}
