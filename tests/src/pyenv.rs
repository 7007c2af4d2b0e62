//! The Python environments of the package's tests, each built once per target directory and
//! shared by every test process:
//!
//! - [`package_env`]: `<target>/pkg-venv`, `python/requirements-test.txt` (urllib3, NumPy,
//!   pyarrow) and the package;
//! - [`torch_env`]: `<target>/torch-venv`, `python/requirements-torch.txt` (the same and torch,
//!   torchdata, JAX, all on CPU; several GB, installed once) and the package.
//!
//! A venv is `python3 -m venv` and `pip install -r` of its pinned requirements, rebuilt when
//! the file changes (a stamp holds its text); the package is `pip install ./python` (from a
//! fresh copy in `<target>/<venv>-src`) without build isolation (its backend, setuptools, is
//! pinned in the requirements, so no index is needed), again whenever a file of the package
//! changes (a stamp holds a hash of them). An exclusive lock on `<target>/<venv>.lock`
//! serialises the setup (the kernel releases it when a process dies; `.ci/run` holds the same
//! lock with flock(1) while it builds the torch venv in the background). Needs `python3` with
//! `venv` and `pip`, and PyPI, the first time.

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

/// The package's files (`pyproject.toml`, `README.md`, everything under `shardwise/` but
/// bytecode), in path order.
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
                if name != "__pycache__" {
                    walk(&p, out);
                }
            } else if !name.ends_with(".pyc") {
                out.push(p);
            }
        }
    }
    let mut files = vec![root.join("pyproject.toml"), root.join("README.md")];
    walk(&root.join("shardwise"), &mut files);
    files
}

/// FNV-1a (64 bits) of the package's files, by relative path and content.
fn package_hash(root: &Path, files: &[PathBuf]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in files {
        let rel = f.strip_prefix(root).expect("under the package").to_string_lossy().into_owned();
        let content = std::fs::read(f).unwrap_or_else(|e| panic!("read {}: {e}", f.display()));
        for b in rel.bytes().chain([0]).chain(content).chain([0]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x} over {} files\n", files.len())
}

/// Builds (when needed) the venv `<target>/NAME` from `python/REQUIREMENTS` and installs the
/// package into it; its python.
fn build(name: &str, requirements: &str, pip_timeout: Duration) -> PathBuf {
    let target = target_dir();
    let venv = target.join(name);
    let python = venv.join("bin/python");
    let package = repo_root().join("python");
    let requirements_file = package.join(requirements);
    let requirements = std::fs::read_to_string(&requirements_file).expect("requirements");
    let venv_stamp = venv.join("shardwise-requirements.txt");
    let package_stamp = venv.join("shardwise-package.stamp");

    std::fs::create_dir_all(&target).expect("target dir");
    let lock_name = format!("{name}.lock");
    let lock = std::fs::File::create(target.join(&lock_name)).expect("lock file");
    // Another test process (or .ci/run) may be building the environment (minutes, the
    // first time; the torch venv downloads several GB).
    poll_until(&lock_name, pip_timeout + Duration::from_secs(300), || match lock.try_lock() {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => Err("held by another process"),
        Err(std::fs::TryLockError::Error(e)) => panic!("lock {lock_name}: {e}"),
    });
    let stamped = |stamp: &Path, want: &str| {
        std::fs::read_to_string(stamp).is_ok_and(|s| s == want) && python.exists()
    };
    if !stamped(&venv_stamp, &requirements) {
        let started = Instant::now();
        crate::build_venv(&venv, &requirements_file, pip_timeout);
        std::fs::write(&venv_stamp, &requirements).expect("venv stamp");
        eprintln!("pyenv: built {} in {:?}", venv.display(), started.elapsed());
    }
    let files = package_files(&package);
    let hash = package_hash(&package, &files);
    if !stamped(&package_stamp, &hash) {
        let started = Instant::now();
        let _ = std::fs::remove_file(&package_stamp);
        // Installed from a fresh copy: setuptools builds in the tree it is given, and a build
        // directory left from an older tree would bring back files since removed.
        let copy = target.join(format!("{name}-src"));
        let _ = std::fs::remove_dir_all(&copy);
        for f in &files {
            let to = copy.join(f.strip_prefix(&package).expect("under the package"));
            std::fs::create_dir_all(to.parent().expect("a parent")).expect("package copy");
            std::fs::copy(f, &to).unwrap_or_else(|e| panic!("copy {}: {e}", f.display()));
        }
        assert_ran(
            "pip install ./python",
            &run_bounded(
                Command::new(&python)
                    .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input"])
                    .args(["--no-deps", "--no-build-isolation", "--force-reinstall"])
                    .arg(&copy)
                    .current_dir(&target),
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
