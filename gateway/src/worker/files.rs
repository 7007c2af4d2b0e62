//! What a worker may read for a `files` dataset: regular files under the directories its
//! operator allowed (`--data-root`), at most `--max-file-bytes` each.
//!
//! A path from a definition is resolved to its canonical form (`..` and every symlink
//! followed) and read only if that form lies under a canonical data root. An absolute path is
//! taken as it is; a relative one is tried under each root in the order given, and the first
//! root under which it names an existing file or directory wins. Paths under `/proc`, `/sys`
//! and `/dev` are never read, whatever the roots (their files pass for regular ones and hold
//! the process's environment, for instance).
//!
//! A path that does not resolve, resolves outside the roots, or cannot be opened or read gets
//! one answer, the same for all, so that a client learns nothing of the disk outside the
//! roots (not even whether a path exists). Only what is under a root gets a specific answer:
//! a directory, a FIFO or device (never opened, so it cannot block the worker), a file larger
//! than the limit (never read past the limit).

use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::StartError;
use crate::http::{Code, Problem};

/// Filesystems a worker never reads from, even under a root.
const PSEUDO: &[&str] = &["/proc", "/sys", "/dev"];

/// The most characters of a path repeated in an error.
const SHOWN_PATH_CHARS: usize = 200;

/// The data roots of a worker and its file size limit.
#[derive(Debug, Clone)]
pub(crate) struct DataRoots {
    /// Canonical directories.
    roots: Vec<PathBuf>,
    max_file_bytes: u64,
}

impl DataRoots {
    /// Canonicalizes `dirs` (each must be an existing directory; the error names it).
    pub(crate) fn new(dirs: &[PathBuf], max_file_bytes: u64) -> Result<DataRoots, StartError> {
        let mut roots = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let canonical = std::fs::canonicalize(dir)
                .map_err(|source| StartError::DataRoot { path: dir.clone(), source })?;
            if !canonical.is_dir() {
                return Err(StartError::DataRootNotDirectory { path: dir.clone() });
            }
            roots.push(canonical);
        }
        Ok(DataRoots { roots, max_file_bytes })
    }

    /// Reads the file at `path` (a path of a `files` source), or says why not.
    pub(crate) async fn read(&self, path: &str) -> Result<Vec<u8>, Problem> {
        let this = self.clone();
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || this.read_blocking(&path)).await.unwrap_or_else(|e| {
            Err(Problem::new(Code::Internal, format!("the file reader stopped: {e}")))
        })
    }

    fn read_blocking(&self, path: &str) -> Result<Vec<u8>, Problem> {
        if self.roots.is_empty() {
            return Err(Problem::new(
                Code::FailedPrecondition,
                "this worker allows no data roots, so it reads no files: its operator must \
                 start it with --data-root DIR (or SHARDWISE_WORKER_DATA_ROOT) to serve files \
                 datasets",
            ));
        }
        let refused = || {
            Problem::new(
                Code::FailedPrecondition,
                format!(
                    "path {} is not a readable file under this worker's data roots",
                    shown(path)
                ),
            )
        };
        let canonical = self.resolve(path).ok_or_else(refused)?;
        let meta = std::fs::metadata(&canonical).map_err(|_| refused())?;
        if meta.is_dir() {
            return Err(Problem::new(
                Code::FailedPrecondition,
                format!("path {} is a directory, not a file", shown(path)),
            ));
        }
        if !meta.is_file() {
            return Err(not_regular(path));
        }
        self.check_size(path, meta.len())?;
        let file = std::fs::File::open(&canonical).map_err(|_| refused())?;
        // Replaced since the check? Still only a regular file is read.
        let len = match file.metadata() {
            Ok(m) if m.is_file() => m.len(),
            Ok(_) => return Err(not_regular(path)),
            Err(_) => return Err(refused()),
        };
        self.check_size(path, len)?;
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.take(self.max_file_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|_| refused())?;
        self.check_size(path, u64::try_from(bytes.len()).unwrap_or(u64::MAX))?;
        Ok(bytes)
    }

    /// The canonical form of `path` if it lies under a root (and not on a pseudo filesystem).
    fn resolve(&self, path: &str) -> Option<PathBuf> {
        if path.is_empty() || path.contains('\0') {
            return None;
        }
        let given = Path::new(path);
        let candidates: Vec<PathBuf> = if given.is_absolute() {
            vec![given.to_owned()]
        } else {
            self.roots.iter().map(|root| root.join(given)).collect()
        };
        let canonical = candidates.iter().find_map(|c| std::fs::canonicalize(c).ok())?;
        let allowed = self.roots.iter().any(|root| canonical.starts_with(root))
            && !PSEUDO.iter().any(|p| canonical.starts_with(p));
        allowed.then_some(canonical)
    }

    fn check_size(&self, path: &str, len: u64) -> Result<(), Problem> {
        if len > self.max_file_bytes {
            return Err(Problem::new(
                Code::ResourceExhausted,
                format!(
                    "path {} is larger than this worker's --max-file-bytes ({} bytes)",
                    shown(path),
                    self.max_file_bytes
                ),
            ));
        }
        Ok(())
    }
}

fn not_regular(path: &str) -> Problem {
    Problem::new(
        Code::FailedPrecondition,
        format!("path {} is not a regular file (a FIFO, socket or device)", shown(path)),
    )
}

/// `path` as a JSON string literal, cut to a bounded length.
fn shown(path: &str) -> String {
    let mut cut: String = path.chars().take(SHOWN_PATH_CHARS).collect();
    if cut.len() < path.len() {
        cut.push('…');
    }
    serde_json::Value::String(cut).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("shardwise-roots-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    fn read(roots: &DataRoots, path: &str) -> Result<Vec<u8>, Problem> {
        roots.read_blocking(path)
    }

    #[test]
    fn only_files_under_the_roots_are_read() {
        let base = tempdir("unit");
        let root = base.join("root");
        let outside = base.join("outside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("sub/a.txt"), "inside").unwrap();
        std::fs::write(outside.join("secret"), "outside").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root.join("link")).unwrap();
        std::os::unix::fs::symlink(root.join("sub/a.txt"), root.join("good-link")).unwrap();
        let roots = DataRoots::new(std::slice::from_ref(&root), 10).unwrap();
        let r = root.to_str().unwrap();

        assert_eq!(read(&roots, &format!("{r}/sub/a.txt")).unwrap(), b"inside");
        assert_eq!(read(&roots, "sub/a.txt").unwrap(), b"inside", "relative to the root");
        assert_eq!(read(&roots, &format!("{r}/sub/../sub/a.txt")).unwrap(), b"inside");
        assert_eq!(read(&roots, "good-link").unwrap(), b"inside");

        let same = |p: &str| {
            let e = read(&roots, p).unwrap_err();
            assert_eq!(e.code, "FAILED_PRECONDITION", "{p}");
            let quoted = serde_json::Value::String(p.to_owned()).to_string();
            assert_eq!(
                e.detail,
                format!("path {quoted} is not a readable file under this worker's data roots")
            );
        };
        for p in [
            "/etc/passwd",
            "/proc/self/environ",
            "/dev/null",
            "/nonexistent/x",
            "../outside/secret",
            "link",
            "missing",
            "",
            "a\0b",
        ] {
            same(p);
        }
        same(&format!("{r}/../outside/secret"));
        same(outside.join("secret").to_str().unwrap());

        let e = read(&roots, "sub").unwrap_err();
        assert!(e.detail.ends_with("is a directory, not a file"), "{}", e.detail);
        std::fs::write(root.join("big"), "01234567890").unwrap();
        let e = read(&roots, "big").unwrap_err();
        assert_eq!(e.code, "RESOURCE_EXHAUSTED");
        assert!(e.detail.contains("--max-file-bytes (10 bytes)"), "{}", e.detail);
        // A FIFO is refused without being opened (opening it would block).
        let fifo = root.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let e = read(&roots, "fifo").unwrap_err();
            assert!(e.detail.contains("is not a regular file"), "{}", e.detail);
        }
        // Long paths are cut in messages.
        let long = "x".repeat(5000);
        assert!(read(&roots, &long).unwrap_err().detail.len() < 300);

        let none = DataRoots::new(&[], 10).unwrap();
        let e = read(&none, &format!("{r}/sub/a.txt")).unwrap_err();
        assert!(e.detail.contains("allows no data roots") && e.detail.contains("--data-root"));
        assert!(
            DataRoots::new(&[base.join("nope")], 1)
                .unwrap_err()
                .to_string()
                .contains("--data-root")
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_root_of_slash_still_hides_pseudo_filesystems() {
        let roots = DataRoots::new(&[PathBuf::from("/")], 1 << 20).unwrap();
        let e = read(&roots, "/proc/self/environ").unwrap_err();
        assert!(e.detail.contains("is not a readable file under"), "{}", e.detail);
        assert!(read(&roots, "proc/self/environ").is_err());
    }
}
