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
