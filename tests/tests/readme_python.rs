//! The README's "From PyTorch" and "From JAX" examples, run as written (their address replaced
//! by a dispatcher's on a free port, with a worker) in the torch venv, twice each: the first
//! run trains on every element and checkpoints; the second resumes from the last checkpoint and
//! trains on exactly the elements after it.

use std::time::Duration;

use shardwise_tests::pyenv::torch_python;
use shardwise_tests::{
    Dispatcher, TempDir, Worker, assert_ran, ok, poll_until, repo_root, run_bounded,
};

/// The only Python block of the README's section `title`.
fn readme_python_block(title: &str) -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let blocks = shardwise_tests::markdown::section_code(&readme, title, "python");
    assert_eq!(blocks.len(), 1, "one Python block in {title}");
    blocks.into_iter().next().unwrap_or_default()
}

/// Runs the example of `title` twice in one directory against a fresh dispatcher and worker;
/// the last lines both runs printed, and the elements the checkpoint the first run left covers
/// (the position's ranges and consumed offsets, read by `count` from the directory).
fn run_twice(title: &str, count: &str) -> ([String; 2], u64) {
    let example = readme_python_block(title);
    assert!(example.contains("\"http://127.0.0.1:5050\""), "the example names the default address");
    let d = Dispatcher::start(&[]);
    let _worker = Worker::start(&d.url, &["--heartbeat-interval", "200ms"]);
    poll_until("the worker registered", Duration::from_secs(20), || {
        let workers = ok(&d.call("GET", "/v1/workers", None));
        if workers["workers"].as_array().is_some_and(|w| w.len() == 1) {
            Ok(())
        } else {
            Err(workers.to_string())
        }
    });
    let dir = TempDir::new("readme-python");
    let script = std::path::Path::new(dir.path()).join("train.py");
    std::fs::write(&script, example.replace("http://127.0.0.1:5050", &d.url)).expect("write");
    let python = |args: &[&str]| {
        let mut cmd = torch_python(args);
        cmd.current_dir(dir.path());
        let run = run_bounded(&mut cmd, Duration::from_secs(300));
        assert_ran(&format!("the README's {title} example: python {args:?}"), &run);
        run.stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default().to_owned()
    };
    let script = script.to_str().expect("a UTF-8 path");
    let first = python(&[script]);
    let covered = python(&["-c", count]).parse().expect("a count");
    let second = python(&[script]);
    ([first, second], covered)
}

/// Python that prints how many elements the position `expr` (of the variable `saved`)
/// covers.
fn count_position(load: &str, expr: &str) -> String {
    format!(
        "{load}\np = {expr}\nn = sum(r['stop'] - r['start'] for r in p['done'])\n\
         n += sum(e['consumed'] + sum(m['stop'] - m['start'] for m in e.get('more', []))\n\
                  for e in p['partial'])\nprint(n)"
    )
}

#[test]
fn the_readme_pytorch_example_trains_and_resumes_from_its_checkpoint() {
    let load = "import torch\nsaved = torch.load('checkpoint.pt')";
    let ([first, second], covered) =
        run_twice("From PyTorch", &count_position(load, "saved['position']"));
    assert!(first.starts_with("trained on 10000 elements, loss "), "{first}");
    let loss: f64 = first.rsplit(' ').next().unwrap().parse().expect("a loss");
    assert!(loss < 0.05, "it learns: {first}");
    // The last checkpoint is taken after step 90 (of about 100): what it does not cover, and
    // only that, is read again.
    assert!((8_000..10_000).contains(&covered), "{covered}");
    assert!(second.starts_with(&format!("trained on {} elements", 10_000 - covered)), "{second}");
}

#[test]
fn the_readme_jax_example_trains_and_resumes_from_its_checkpoint() {
    let load = "import json\nsaved = json.load(open('checkpoint.json'))";
    let ([first, second], covered) =
        run_twice("From JAX", &count_position(load, "saved['input']['shardwise_position']"));
    assert!(first.starts_with("trained on 10000 elements, w = "), "{first}");
    // The last checkpoint is taken after 9,000 elements.
    assert_eq!(covered, 9_000);
    assert!(second.starts_with("trained on 1000 elements"), "{second}");
}
