//! The `shardwise` binary's command line (this file also makes cargo build the binary for the
//! workspace's black-box tests).

use std::process::Command;

#[test]
fn version_and_usage_errors() {
    let bin = env!("CARGO_BIN_EXE_shardwise");
    let out = Command::new(bin).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("shardwise "));
    let out = Command::new(bin).arg("no-such-command").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out =
        Command::new(bin).args(["resolve", "--input", "/nonexistent/x.json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read --input"));
}

#[test]
fn help_opens_with_what_the_command_does() {
    let bin = env!("CARGO_BIN_EXE_shardwise");
    let out = Command::new(bin).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let first = help.lines().next().unwrap_or_default();
    // What the command does, not the crate's description ("Shardwise's IO layer: ...").
    assert!(first.starts_with("Coordinate distributed training input"), "{first}");
    assert!(!help.contains("IO layer"), "{help}");
    for sub in ["dispatcher", "worker", "resolve", "journal", "openapi"] {
        assert!(help.contains(sub), "--help lists {sub}: {help}");
    }
}
