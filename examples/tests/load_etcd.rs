//! The load generator's etcd mode (`load --etcd`, the etcd journal's benchmark) at a tiny scale, so
//! that it cannot rot: one round of get-split against a dispatcher whose journal is in a real
//! 3-member etcd cluster (its leader, and one standby following it) and against the work-dir
//! journal; every call is answered, and every figure of the etcd run is measured.
//!
//! The `load` example runs as a process, as a user runs it: `cargo test` (and nextest) build a
//! package's examples with its tests, so it sits in `<target>/<profile>/examples/`; run alone,
//! the test builds it first. etcd is Debian's `etcd-server` (installed by `.ci/run`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The `load` example of this build.
fn load_example() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // <target>/<profile>/deps/<test> -> <target>/<profile>/examples/load
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target profile dir");
    let bin = profile_dir.join("examples").join(format!("load{}", std::env::consts::EXE_SUFFIX));
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "shardwise-examples", "--example", "load"]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build");
        assert!(status.success(), "building the load example failed");
    }
    assert!(bin.exists(), "no load example at {}", bin.display());
    bin
}

/// The cells of the summary row of `mode` (`| mode | get_split | 4 | ...`), trimmed.
fn summary_row<'a>(stdout: &'a str, mode: &str) -> Vec<&'a str> {
    let start = format!("| {mode} | get_split | 4 | 1 |");
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&start))
        .unwrap_or_else(|| panic!("no summary row {start:?} in:\n{stdout}"));
    line.trim_matches('|').split('|').map(str::trim).collect()
}

/// A figure of the tables (`1,234`, `5.6`).
fn number(cell: &str) -> f64 {
    cell.replace(',', "").parse().unwrap_or_else(|_| panic!("{cell:?} is not a number"))
}

#[test]
fn the_etcd_mode_measures_get_split_against_the_work_dir_journal() {
    let shardwise = shardwise_tests::shardwise_bin();
    let run = shardwise_tests::run_bounded(
        Command::new(load_example())
            .args(["--etcd", "--shardwise"])
            .arg(&shardwise)
            .args(["--seconds", "1", "--repeat", "1", "--concurrency", "4", "--workers", "4"])
            .args(["--warmup", "2", "--etcd-standbys", "1"]),
        Duration::from_secs(180),
    );
    assert_eq!(run.code, 0, "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let out = &run.stdout;
    // Columns: mode, workload, conns, runs, calls/s, p50, p99, errors, dispatcher CPU, etcd
    // CPU, standbys CPU, records per commit, commits/s, commit mean, WAL fsyncs/s per member,
    // WAL fsync mean.
    let etcd = summary_row(out, "etcd");
    assert!(number(etcd[4]) > 0.0, "calls/s: {etcd:?}");
    assert_eq!(etcd[7], "0", "errors: {etcd:?}");
    for (i, what) in [(8, "dispatcher CPU"), (9, "etcd CPU"), (10, "standbys CPU")] {
        assert!(number(etcd[i]) >= 0.0, "{what} is measured: {etcd:?}");
    }
    // Group commit: each commit is one etcd transaction carrying at least one record, and
    // etcd's members fsync their WAL for them.
    assert!(number(etcd[11]) >= 1.0, "records per commit: {etcd:?}");
    assert!(number(etcd[12]) > 0.0 && number(etcd[13]) > 0.0, "commits: {etcd:?}");
    assert!(number(etcd[14]) > 0.0 && number(etcd[15]) > 0.0, "WAL fsyncs: {etcd:?}");

    let ft = summary_row(out, "ft");
    assert!(number(ft[4]) > 0.0, "calls/s: {ft:?}");
    assert_eq!(ft[7], "0", "errors: {ft:?}");
    assert!(number(ft[11]) >= 1.0 && number(ft[13]) > 0.0, "commits: {ft:?}");
    assert_eq!((ft[9], ft[10], ft[14]), ("-", "-", "-"), "no etcd in the work-dir run: {ft:?}");

    // The ratio of the round's pair (after the per-run tables, whose rows start alike).
    let pairs = out.find("### etcd ÷ work-dir").map(|i| &out[i..]);
    let ratio = pairs
        .unwrap_or_else(|| panic!("no ratio section in:\n{out}"))
        .lines()
        .find(|l| l.starts_with("| get_split | 4 |"))
        .unwrap_or_else(|| panic!("no ratio row in:\n{out}"));
    let cells: Vec<&str> = ratio.trim_matches('|').split('|').map(str::trim).collect();
    let median = number(cells[3]);
    let expected = number(etcd[4]) / number(ft[4]);
    assert!(median > 0.0 && (median - expected).abs() <= 0.01 * expected.max(1.0), "{cells:?}");
}
