//! The `shardwise resolve` examples the README shows, run exactly as written there.

use serde_json::json;
use shardwise_tests::run_shardwise;

fn resolve_file(name: &str) -> serde_json::Value {
    let path = format!("{}/../examples/resolve/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let run = run_shardwise(&["resolve", "--input", &path], "", &[]);
    assert_eq!(run.code, 0, "{name}: {} {}", run.stdout, run.stderr);
    run.json()
}

#[test]
fn tf_config_example() {
    let r = resolve_file("tf_config");
    assert_eq!(r["master"], "grpc://trainer-2:2222");
    assert_eq!(r["role"]["id_in_cluster"], 2);
    assert_eq!(r["role"]["collective_leader"], "/job:chief/replica:0/task:0");
}

#[test]
fn slurm_example() {
    let r = resolve_file("slurm");
    assert_eq!(
        r["cluster"],
        json!({"chief": ["gpu007:8888"], "worker": ["gpu007:8889", "gpu008:8888", "gpu008:8889"]})
    );
    assert_eq!((r["task_type"].as_str(), r["task_id"].as_i64()), (Some("worker"), Some(1)));
    assert_eq!(r["environment_updates"], json!({"CUDA_VISIBLE_DEVICES": "0,1"}));
}

#[test]
fn kubernetes_example() {
    let r = resolve_file("kubernetes");
    // Sorted by pod name within the selector, addressed by pod IP.
    assert_eq!(
        r["cluster"],
        json!({"chief": ["10.4.0.12:8470"], "worker": ["10.4.0.13:8470", "10.4.1.7:8470"]})
    );
    assert_eq!(r["master"], "grpc://10.4.0.13:8470");
}

/// The README's two set-up commands, in order: the dispatcher, then the whole test suite.
fn readme_setup_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(shardwise_tests::repo_root().join("README.md")).unwrap();
    let setup = readme.split("## Set up").nth(1).expect("a Set up section");
    let setup = setup.split("\n## ").next().unwrap_or_default();
    setup
        .split("```sh\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap_or_default().trim().to_owned())
        .collect()
}

#[test]
fn the_readme_test_command_needs_only_cargo_and_nextest_and_is_what_ci_runs() {
    let commands = readme_setup_commands();
    assert_eq!(commands.len(), 2, "exactly two set-up commands: {commands:?}");
    assert_eq!(commands[0], "cargo run --release --bin shardwise -- dispatcher");
    let test = &commands[1];
    // Cargo subcommands a machine with the Rust toolchain and cargo-nextest has (what CI
    // starts from), and the doc tests, which nextest does not run.
    for part in test.split("&&") {
        let words: Vec<&str> = part.split_whitespace().collect();
        assert_eq!(words.first(), Some(&"cargo"), "{test}");
        assert!(
            ["test", "build", "run", "check", "nextest"].contains(&words[1]),
            "`cargo {}` is neither built into cargo nor cargo-nextest: {test}",
            words[1]
        );
    }
    assert!(test.contains("cargo test --workspace --doc"), "the doc tests run: {test}");
    let ci = std::fs::read_to_string(shardwise_tests::repo_root().join(".ci/run")).unwrap();
    let last = ci.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert_eq!(last.trim(), test, ".ci/run ends with the README's test command");
}
