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

/// Each role reads its own variables: exporting the dispatcher's `SHARDWISE_PORT` (or
/// `SHARDWISE_AUTH_TOKENS`) for it leaves a worker in the same environment alone.
#[test]
fn every_flag_has_its_own_environment_name() {
    use clap::Args as _;
    use shardwise_gateway::dispatcher::DispatcherArgs;
    use shardwise_gateway::worker::WorkerArgs;
    fn envs(c: &clap::Command) -> Vec<String> {
        c.get_arguments()
            .filter(|a| a.get_long().is_some())
            .map(|a| {
                let env = a.get_env().unwrap_or_else(|| panic!("--{:?} has no env", a.get_id()));
                env.to_string_lossy().into_owned()
            })
            .collect()
    }
    let worker = envs(&WorkerArgs::augment_args(clap::Command::new("worker")));
    let dispatcher = envs(&DispatcherArgs::augment_args(clap::Command::new("dispatcher")));
    assert!(worker.contains(&"SHARDWISE_WORKER_PORT".to_owned()), "{worker:?}");
    for e in &worker {
        assert!(e.starts_with("SHARDWISE_WORKER_"), "{e}");
        assert!(!dispatcher.contains(e), "{e} is read by both roles");
    }
    for e in &dispatcher {
        assert!(e.starts_with("SHARDWISE_"), "{e}");
    }
}

/// The replication flags refuse what cannot work, as usage errors (exit 2) naming the flag,
/// before anything is bound or dialled.
#[test]
fn replication_flags_are_checked() {
    let bin = env!("CARGO_BIN_EXE_shardwise");
    let dispatcher = |args: &[&str]| {
        let out = Command::new(bin)
            .args(["dispatcher", "--port", "0"])
            .args(args)
            .env_remove("SHARDWISE_ETCD")
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let etcd = "http://127.0.0.1:1";
    for (args, says) in [
        (&["--etcd", etcd, "--work-dir", "/tmp/x"][..], "--work-dir"),
        (&["--etcd", "https://127.0.0.1:2379"][..], "--etcd"),
        (&["--etcd", "ftp://x"][..], "--etcd"),
        (&["--etcd", etcd, "--etcd-prefix", "no-slash"][..], "--etcd-prefix"),
        (&["--etcd", etcd, "--etcd-prefix", "/trailing/"][..], "--etcd-prefix"),
        (&["--etcd", etcd, "--leader-lease", "1s"][..], "--leader-lease"),
        (&["--etcd", etcd, "--leader-lease", "2500ms"][..], "--leader-lease"),
        (&["--etcd", etcd, "--host", "0.0.0.0"][..], "--advertise-url"),
        (&["--etcd", etcd, "--advertise-url", "ftp://x:1"][..], "--advertise-url"),
    ] {
        let (code, stderr) = dispatcher(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
