//! The Python environments of the package's tests, each built once per target directory and
//! shared by every test process:
//!
//! - [`package_env`]: `<target>/pkg-venv`, `python/requirements-test.txt` (urllib3, NumPy,
//!   pyarrow) and the package;
//! - [`torch_env`]: `<target>/torch-venv`, `python/requirements-torch.txt` (the same and torch,
//!   torchdata, JAX, all on CPU; several GB, installed once) and the package.
//!
//! A venv is `python3 -m venv` and `pip install -r` of its pinned requirements, rebuilt when
//! the file changes (a stamp holds its text). The package is one wheel, built with maturin
//! (from `<target>/maturin-venv`, `python/requirements-build.txt`) in the `dev` profile into
//! `<target>/py-wheel`, again whenever a file of the package or of the Rust crates its native
//! module embeds changes (a stamp holds a hash of them), and installed into each venv whose
//! own stamp differs. Exclusive locks on `<target>/<name>.lock` serialise each setup (the
//! kernel releases them when a process dies; `.ci/run` holds the torch venv's with flock(1)
//! while it builds that venv in the background). Needs `python3` with `venv` and `pip`, PyPI
//! the first time, and the Rust toolchain.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::{assert_ran, poll_until, repo_root, run_bounded, target_dir};

/// `<target>/pkg-venv/bin/python`: urllib3, NumPy, pyarrow and the package.
pub fn package_env() -> &'static Path {
    static ENV: OnceLock<PathBuf> = OnceLock::new();
    ENV.get_or_init(|| build("pkg-venv", "requirements-test.txt", Duration::from_secs(600)))
}

/// `<target>/torch-venv/bin/python`: the package's requirements, torch, torchdata and JAX (CPU),
/// and the package.
pub fn torch_env() -> &'static Path {
    static ENV: OnceLock<PathBuf> = OnceLock::new();
    ENV.get_or_init(|| build("torch-venv", "requirements-torch.txt", Duration::from_secs(1500)))
}

/// What the package is built from: its Python files (`pyproject.toml`, `README.md`,
/// everything under `shardwise/` but bytecode) and the Rust its native module compiles (the
/// workspace's manifest and lock file, `python/native` and the crates it depends on), in path
/// order.
fn package_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if p.is_dir() {
                if name != "__pycache__" && name != "target" {
                    walk(&p, out);
                }
            } else if !name.ends_with(".pyc") {
                out.push(p);
            }
        }
    }
    let python = root.join("python");
    let mut files = vec![
        root.join("Cargo.toml"),
        root.join("Cargo.lock"),
        python.join("pyproject.toml"),
        python.join("README.md"),
    ];
    walk(&python.join("shardwise"), &mut files);
    for crate_dir in ["python/native", "core", "gateway/client"] {
        walk(&root.join(crate_dir), &mut files);
    }
    files
}

/// FNV-1a (64 bits) of `files`, by path relative to `root` and content.
fn package_hash(root: &Path, files: &[PathBuf]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in files {
        let rel = f.strip_prefix(root).expect("under the root").to_string_lossy().into_owned();
        let content = std::fs::read(f).unwrap_or_else(|e| panic!("read {}: {e}", f.display()));
        for b in rel.bytes().chain([0]).chain(content).chain([0]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x} over {} files\n", files.len())
}

/// Holds `<target>/NAME.lock` (waiting up to `wait` for another process's setup).
fn lock(name: &str, wait: Duration) -> std::fs::File {
    let lock_name = format!("{name}.lock");
    let lock = std::fs::File::create(target_dir().join(&lock_name)).expect("lock file");
    poll_until(&lock_name, wait, || match lock.try_lock() {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => Err("held by another process"),
        Err(std::fs::TryLockError::Error(e)) => panic!("lock {lock_name}: {e}"),
    });
    lock
}

/// `<target>/NAME` built from `python/REQUIREMENTS` unless its stamp says it is; its python.
/// The caller holds the venv's lock.
fn venv(name: &str, requirements: &str, pip_timeout: Duration) -> PathBuf {
    let venv = target_dir().join(name);
    let python = venv.join("bin/python");
    let requirements_file = repo_root().join("python").join(requirements);
    let want = std::fs::read_to_string(&requirements_file).expect("requirements");
    let stamp = venv.join("shardwise-requirements.txt");
    if !(std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) && python.exists()) {
        let started = Instant::now();
        crate::build_venv(&venv, &requirements_file, pip_timeout);
        std::fs::write(&stamp, &want).expect("venv stamp");
        eprintln!("pyenv: built {} in {:?}", venv.display(), started.elapsed());
    }
    python
}

/// The package's wheel, built (when its files changed) by maturin in the `dev` profile into
/// `<target>/py-wheel`, with the workspace's target directory; its path and the stamp of what
/// it was built from.
fn wheel() -> (PathBuf, String) {
    static WHEEL: OnceLock<(PathBuf, String)> = OnceLock::new();
    WHEEL
        .get_or_init(|| {
            let target = target_dir();
            std::fs::create_dir_all(&target).expect("target dir");
            let root = repo_root();
            let hash = package_hash(&root, &package_files(&root));
            let _lock = lock("py-wheel", Duration::from_secs(1800));
            let out = target.join("py-wheel");
            let stamp = out.join("shardwise-package.stamp");
            let built = || {
                let wheels: Vec<PathBuf> = std::fs::read_dir(&out)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "whl"))
                    .collect();
                match wheels[..] {
                    [ref one] => Some(one.clone()),
                    _ => None,
                }
            };
            if !std::fs::read_to_string(&stamp).is_ok_and(|s| s == hash) || built().is_none() {
                let started = Instant::now();
                let maturin = {
                    let _venv_lock = lock("maturin-venv", Duration::from_secs(900));
                    venv("maturin-venv", "requirements-build.txt", Duration::from_secs(600))
                };
                let _ = std::fs::remove_dir_all(&out);
                assert_ran(
                    "maturin build",
                    &run_bounded(
                        Command::new(&maturin)
                            .args(["-m", "maturin", "build", "--profile", "dev", "--out"])
                            .arg(&out)
                            .current_dir(root.join("python"))
                            .env("CARGO_TARGET_DIR", &target),
                        Duration::from_secs(1800),
                    ),
                );
                std::fs::write(&stamp, &hash).expect("wheel stamp");
                eprintln!("pyenv: built the package's wheel in {:?}", started.elapsed());
            }
            (built().expect("maturin wrote one wheel"), hash)
        })
        .clone()
}

/// Builds (when needed) the venv `<target>/NAME` from `python/REQUIREMENTS` and installs the
/// package's wheel into it; its python.
fn build(name: &str, requirements: &str, pip_timeout: Duration) -> PathBuf {
    std::fs::create_dir_all(target_dir()).expect("target dir");
    let (wheel, hash) = wheel();
    // Another test process (or .ci/run) may be building the environment (minutes, the
    // first time; the torch venv downloads several GB).
    let lock = lock(name, pip_timeout + Duration::from_secs(300));
    let python = venv(name, requirements, pip_timeout);
    let package_stamp = target_dir().join(name).join("shardwise-package.stamp");
    if !std::fs::read_to_string(&package_stamp).is_ok_and(|s| s == hash) {
        let started = Instant::now();
        let _ = std::fs::remove_file(&package_stamp);
        assert_ran(
            "pip install the package's wheel",
            &run_bounded(
                Command::new(&python)
                    .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input"])
                    .args(["--no-deps", "--force-reinstall"])
                    .arg(&wheel)
                    .current_dir(target_dir()),
                Duration::from_secs(300),
            ),
        );
        std::fs::write(&package_stamp, &hash).expect("package stamp");
        eprintln!("pyenv: installed the package into {name} in {:?}", started.elapsed());
    }
    drop(lock);
    python
}

/// The package venv's `python ARGS` ([`package_env`]), unbuffered, run from the target
/// directory (never the source tree, so that the installed package is what is imported), with
/// no proxy and no `PYTHONPATH`.
pub fn python(args: &[&str]) -> Command {
    clean_python(package_env(), args)
}

/// [`python`] with the torch venv's interpreter ([`torch_env`]), JAX on its CPU backend.
pub fn torch_python(args: &[&str]) -> Command {
    let mut cmd = clean_python(torch_env(), args);
    cmd.env("JAX_PLATFORMS", "cpu");
    cmd
}

fn clean_python(interpreter: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(interpreter);
    cmd.args(args)
        .current_dir(target_dir())
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PYTHONPATH");
    for proxy in
        ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
    {
        cmd.env_remove(proxy);
    }
    cmd
}

/// The path of `python/tests/scenarios/SCRIPT`, as a string for a command line.
pub fn scenario_path(script: &str) -> String {
    let path = repo_root().join("python/tests/scenarios").join(script);
    path.to_str().expect("a UTF-8 path").to_owned()
}
