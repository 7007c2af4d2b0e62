//! Helpers for Shardwise's black-box tests: find the real `shardwise` binary and run it.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The `shardwise` binary of this build.
///
/// Cargo builds a package's binaries whenever that package's integration tests are built
/// (`shardwise-gateway` has some), so under `cargo test --workspace` and
/// `cargo nextest run --workspace` it sits next to the test executables. When this crate's tests
/// are run alone, the binary is built first with the same cargo.
pub fn shardwise_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/<test> -> target/<profile>/shardwise
        let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target profile dir");
        let bin = profile_dir.join(format!("shardwise{}", std::env::consts::EXE_SUFFIX));
        if !bin.exists() {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "-p", "shardwise-gateway", "--bin", "shardwise"])
                .status()
                .expect("run cargo build");
            assert!(status.success(), "building the shardwise binary failed");
        }
        assert!(bin.exists(), "no shardwise binary at {}", bin.display());
        bin
    })
    .clone()
}

/// The result of one `shardwise` run.
#[derive(Debug)]
pub struct Run {
    /// Exit status code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// Standard output parsed as JSON (panics with the output when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("stdout is not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr)
        })
    }
}

/// Runs `shardwise ARGS` with `stdin` as input and `env` as the whole environment (plus
/// `PATH`), so that the host's own `TF_CONFIG` or `SLURM_*` never leak into a test.
pub fn run_shardwise(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(shardwise_bin());
    cmd.args(args).env_clear().stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Ok(path) = std::env::var("PATH") {
        cmd.env("PATH", path);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn shardwise");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write stdin");
    let out = child.wait_with_output().expect("wait for shardwise");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
