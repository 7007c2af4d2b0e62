//! The README's "From TensorFlow" example, run as written against `shardwise dispatcher`: the
//! Python block of that section, with its address replaced by the address of a dispatcher
//! started on a free port, in the TensorFlow venv.

use std::time::Duration;

use shardwise_tests::tf::tf_env;
use shardwise_tests::{Dispatcher, TempDir, assert_ran, repo_root, run_bounded};

/// The only Python block of the README's "From TensorFlow" section.
fn readme_python_example() -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let blocks = shardwise_tests::markdown::section_code(&readme, "From TensorFlow", "python");
    assert_eq!(blocks.len(), 1, "one Python block in From TensorFlow");
    blocks.into_iter().next().unwrap_or_default()
}

#[test]
fn the_readme_tensorflow_example_reads_range_10_through_shardwise() {
    let example = readme_python_example();
    assert!(example.contains("\"127.0.0.1:5050\""), "the example names the default address");
    let dispatcher = Dispatcher::start(&[]);
    let address = dispatcher.url.trim_start_matches("http://").to_owned();
    let dir = TempDir::new("readme-tf");
    let script = std::path::Path::new(dir.path()).join("seed.py");
    std::fs::write(&script, example.replace("127.0.0.1:5050", &address)).expect("write script");

    let mut cmd = std::process::Command::new(&tf_env().python);
    cmd.arg(&script)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("grpc_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("GRPC_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY");
    let run = run_bounded(&mut cmd, Duration::from_secs(180));
    assert_ran("the README's From TensorFlow example", &run);
    let last = run.stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    assert_eq!(last, "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]", "stderr: {}", run.stderr);
}
