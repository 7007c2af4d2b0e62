//! What a worker may read for a `files` dataset: regular files under the directories its
//! operator allowed (`--data-root`), at most `--max-file-bytes` each.
//!
//! A file is opened *beneath* its root, never by a name checked first and opened again (a
//! directory swapped for a symlink in between would let the open leave the root): the root is
//! opened once at start, and a path is opened relative to it with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)`, or, on kernels without
//! `openat2` (before Linux 5.6), one component at a time with `O_NOFOLLOW`. So `..` may not
//! climb out of the root, no symlink is followed (even one pointing inside the root), and no
//! mount point is crossed. The opened file itself is then checked: a regular file, with one
//! hard link (a hard link to a file outside the root is refused), on the root's filesystem
//! (a bind mount of another filesystem, such as `/proc`, is refused).
//!
//! An absolute path must lie under a root as written (`ROOT/a/b.txt`); a relative one is tried
//! under each root in the order given, and the first root under which it names an existing
//! file or directory wins. Paths under `/proc`, `/sys` and `/dev` are never read, whatever
//! the roots.
//!
//! A path that does not resolve beneath a root, or cannot be opened or read, gets one answer,
//! the same for all, so that a client learns nothing of the disk outside the roots (not even
//! whether a path exists). Only what is opened beneath a root gets a specific answer: a
//! directory, a FIFO or device (opened only as a path, `O_PATH`, so it cannot block the worker
//! or act on the device), a hard link, another filesystem, a file larger than the limit (never
//! read past the limit).

use std::io::Read as _;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::StartError;
use shardwise_http::{Code, Problem};

/// Filesystems a worker never reads from, even under a root.
const PSEUDO: &[&str] = &["/proc", "/sys", "/dev"];

/// The most characters of a path repeated in an error.
const SHOWN_PATH_CHARS: usize = 200;

/// One data root: its canonical path, a descriptor of it opened at start, and its filesystem.
#[derive(Debug)]
struct Root {
    path: PathBuf,
    /// The root as the operator wrote it (made absolute): clients may write paths under
    /// either spelling (a root given as a symlink to a disk, say).
    given: PathBuf,
    fd: OwnedFd,
    dev: u64,
}

/// The data roots of a worker and its file size limit: what opens the files of `files`
/// datasets (see the module documentation).
#[derive(Debug, Clone)]
pub struct DataRoots {
    roots: Arc<Vec<Root>>,
    max_file_bytes: u64,
}

/// What opening a path beneath a root found.
enum Opened {
    /// Nothing there (or a symlink, `..` out of the root, a mount point crossed).
    Missing,
    /// A file, directory or other object beneath the root, with its status.
    Found(OwnedFd, rustix::fs::Stat),
}

impl DataRoots {
    /// Canonicalizes and opens `dirs` (each must be an existing directory; the error names
    /// it).
    pub fn new(dirs: &[PathBuf], max_file_bytes: u64) -> Result<DataRoots, StartError> {
        let mut roots = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let canonical = std::fs::canonicalize(dir)
                .map_err(|source| StartError::DataRoot { path: dir.clone(), source })?;
            if !canonical.is_dir() {
                return Err(StartError::DataRootNotDirectory { path: dir.clone() });
            }
            let io = |e: Errno| StartError::DataRoot { path: dir.clone(), source: e.into() };
            let fd = rustix::fs::open(
                &canonical,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(io)?;
            let dev = rustix::fs::fstat(&fd).map_err(io)?.st_dev;
            let given = std::path::absolute(dir).unwrap_or_else(|_| canonical.clone());
            roots.push(Root { path: canonical, given, fd, dev });
        }
        Ok(DataRoots { roots: Arc::new(roots), max_file_bytes })
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
        let (file, len) = self.open_blocking(path)?;
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.take(self.max_file_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|_| refused(path))?;
        self.check_size(path, u64::try_from(bytes.len()).unwrap_or(u64::MAX))?;
        Ok(bytes)
    }

    /// Opens the file at `path` (a path of a `files` source) for reading, or says why not:
    /// the open file and its length (at most `--max-file-bytes`) when it was opened. Blocking.
    ///
    /// A reader that reads the file in parts should read no further than that length: the
    /// file may grow (or shrink) after it was opened.
    pub fn open_blocking(&self, path: &str) -> Result<(std::fs::File, u64), Problem> {
        if self.roots.is_empty() {
            return Err(Problem::new(
                Code::FailedPrecondition,
                "this worker allows no data roots, so it reads no files: its operator must \
                 start it with --data-root DIR (or SHARDWISE_WORKER_DATA_ROOT) to serve files \
                 datasets",
            ));
        }
        let (root, rest) = self.locate(path).ok_or_else(|| refused(path))?;
        // Opened as a path only: a FIFO or device is never opened for reading.
        let Opened::Found(_, st) = open_beneath(root, &rest, OFlags::PATH)? else {
            return Err(refused(path));
        };
        check_status(path, root, &st)?;
        self.check_size(path, size(&st))?;
        // Opened again to read, beneath the root the same way; what was opened must be what
        // was checked (a swap in between is refused, not followed).
        let Opened::Found(fd, again) = open_beneath(root, &rest, OFlags::RDONLY)? else {
            return Err(refused(path));
        };
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
            return Err(refused(path));
        }
        check_status(path, root, &again)?;
        let len = size(&again);
        self.check_size(path, len)?;
        Ok((std::fs::File::from(fd), len))
    }

    /// The root `path` is under and its rest relative to that root: an absolute path under a
    /// root as written, or a relative path under the first root where it names something.
    fn locate(&self, path: &str) -> Option<(&Root, PathBuf)> {
        if path.is_empty() || path.contains('\0') {
            return None;
        }
        let given = Path::new(path);
        let pseudo = |full: &Path| PSEUDO.iter().any(|p| lexical(full).starts_with(p));
        if given.is_absolute() {
            if pseudo(given) {
                return None;
            }
            // The longest root that holds it (roots may nest).
            return self
                .roots
                .iter()
                .flat_map(|root| [(root, &root.path), (root, &root.given)])
                .filter_map(|(root, prefix)| Some((root, prefix, given.strip_prefix(prefix).ok()?)))
                .max_by_key(|(_, prefix, _)| prefix.as_os_str().len())
                .map(|(root, _, rest)| (root, rest.to_owned()));
        }
        self.roots.iter().find_map(|root| {
            if pseudo(&root.path.join(given)) {
                return None;
            }
            match open_beneath(root, given, OFlags::PATH) {
                Ok(Opened::Found(..)) => Some((root, given.to_owned())),
                _ => None,
            }
        })
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

/// `path` with `.` and `..` applied as text (no filesystem access).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn size(st: &rustix::fs::Stat) -> u64 {
    u64::try_from(st.st_size).unwrap_or(0)
}

/// What was opened beneath `root` must be a regular file with one link on the root's
/// filesystem.
fn check_status(path: &str, root: &Root, st: &rustix::fs::Stat) -> Result<(), Problem> {
    let precondition = |why: &str| {
        Err(Problem::new(Code::FailedPrecondition, format!("path {} {why}", shown(path))))
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {}
        FileType::Directory => return precondition("is a directory, not a file"),
        // Only the fallback opens a final symlink (as itself): refused like one openat2
        // will not follow.
        FileType::Symlink => {
            return precondition("is not a readable file under this worker's data roots");
        }
        _ => return Err(not_regular(path)),
    }
    if st.st_dev != root.dev {
        return precondition(
            "is on another filesystem than its data root (a mount under the root); a worker \
             reads only files of its roots' own filesystems",
        );
    }
    if st.st_nlink != 1 {
        return precondition(
            "has more than one hard link; a worker reads only files with one (a hard link \
             could name a file outside the data root)",
        );
    }
    Ok(())
}

/// Opens `rest` beneath `root` with `flags` (plus `O_NOFOLLOW`, `O_NOCTTY`, `O_CLOEXEC`),
/// following no symlink, leaving the root by no `..` and crossing no mount point.
/// [`Opened::Missing`] for whatever does not resolve so; an error only for a failure
/// of the machinery itself.
fn open_beneath(root: &Root, rest: &Path, flags: OFlags) -> Result<Opened, Problem> {
    // openat2 refuses O_PATH with any flag but O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC.
    let tty = if flags.contains(OFlags::PATH) { OFlags::empty() } else { OFlags::NOCTTY };
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | tty;
    let rest = if rest.as_os_str().is_empty() { Path::new(".") } else { rest };
    let resolve = ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV;
    let fd = match rustix::fs::openat2(&root.fd, rest, flags, Mode::empty(), resolve) {
        Ok(fd) => fd,
        Err(Errno::NOSYS) => match open_by_components(root, rest, flags) {
            Some(fd) => fd,
            None => return Ok(Opened::Missing),
        },
        // Also EAGAIN (a rename raced the lookup): refused, never retried outside the root.
        Err(_) => return Ok(Opened::Missing),
    };
    match rustix::fs::fstat(&fd) {
        Ok(st) => Ok(Opened::Found(fd, st)),
        Err(_) => Ok(Opened::Missing),
    }
}

/// The fallback of [`open_beneath`] for kernels without `openat2`: one component at a time,
/// each directory opened with `O_NOFOLLOW` from the last, `..` going back up the ones opened
/// (never above the root), every directory on the root's filesystem.
fn open_by_components(root: &Root, rest: &Path, flags: OFlags) -> Option<OwnedFd> {
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in rest.components() {
        match c {
            Component::Normal(name) => parts.push(name),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    let Some((last, dirs)) = parts.split_last() else {
        return rustix::fs::openat(&root.fd, ".", flags, Mode::empty()).ok();
    };
    let mut held: Option<OwnedFd> = None;
    for name in dirs {
        let at = held.as_ref().map_or(root.fd.as_fd(), AsFd::as_fd);
        let next = rustix::fs::openat(at, *name, dir_flags, Mode::empty()).ok()?;
        if rustix::fs::fstat(&next).ok()?.st_dev != root.dev {
            return None;
        }
        held = Some(next);
    }
    let at = held.as_ref().map_or(root.fd.as_fd(), AsFd::as_fd);
    rustix::fs::openat(at, *last, flags, Mode::empty()).ok()
}

/// The one answer for a path that does not resolve to something beneath a root.
fn refused(path: &str) -> Problem {
    Problem::new(
        Code::FailedPrecondition,
        format!("path {} is not a readable file under this worker's data roots", shown(path)),
    )
}

fn not_regular(path: &str) -> Problem {
    Problem::new(
        Code::FailedPrecondition,
        format!("path {} is not a regular file (a FIFO, socket or device)", shown(path)),
    )
}

/// `path` as a JSON string literal, cut to a bounded length.
pub(crate) fn shown(path: &str) -> String {
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
        // A root given through a symlink: paths under either spelling are read.
        std::os::unix::fs::symlink(&root, base.join("alias")).unwrap();
        let aliased = DataRoots::new(&[base.join("alias")], 10).unwrap();
        let a = base.join("alias");
        let a = a.to_str().unwrap();
        assert_eq!(read(&aliased, &format!("{a}/sub/a.txt")).unwrap(), b"inside");
        assert_eq!(read(&aliased, &format!("{r}/sub/a.txt")).unwrap(), b"inside");
        // No symlink is followed, even one that stays inside the root.
        assert!(read(&roots, "good-link").is_err());
        // A hard link (here to a file outside the root) is refused.
        std::fs::hard_link(outside.join("secret"), root.join("hard")).unwrap();
        let e = read(&roots, "hard").unwrap_err();
        assert!(e.detail.contains("more than one hard link"), "{}", e.detail);

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
            "good-link",
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

    /// A directory and a symlink to a directory outside the root swapped atomically
    /// (`renameat2(RENAME_EXCHANGE)`) while `dir/f` is read: every read is the file inside
    /// or refused, never the file outside. Also through the component-by-component fallback.
    #[test]
    fn a_swap_of_a_directory_and_a_symlink_never_leaks_a_file_outside() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let base = tempdir("race");
        let root = base.join("root");
        let outside = base.join("outside");
        std::fs::create_dir_all(root.join("dir")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("dir/f"), "inside").unwrap();
        std::fs::write(outside.join("f"), "SENTINEL").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let roots = DataRoots::new(std::slice::from_ref(&root), 1 << 20).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, root) = (stop.clone(), root.clone());
            std::thread::spawn(move || {
                let dir = rustix::fs::open(&root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
                    .unwrap();
                let mut swaps = 0u64;
                // Bounded: at most 10 million swaps, or until the reads are done.
                while !stop.load(Ordering::Relaxed) && swaps < 10_000_000 {
                    rustix::fs::renameat_with(
                        &dir,
                        "dir",
                        &dir,
                        "link",
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                    swaps += 1;
                }
                swaps
            })
        };
        let (mut inside, mut leaks, mut refused) = (0, 0, 0);
        for i in 0..4_000 {
            let path = if i % 2 == 0 {
                "dir/f".to_owned()
            } else {
                format!("{}/dir/f", root.to_str().unwrap())
            };
            match read(&roots, &path) {
                Ok(b) if b == b"inside" => inside += 1,
                Ok(b) => {
                    assert_eq!(b, b"SENTINEL");
                    leaks += 1;
                }
                Err(_) => refused += 1,
            }
            // The fallback, on the same swapping directory.
            let r = &roots.roots[0];
            if let Some(fd) = open_by_components(r, Path::new("dir/f"), OFlags::RDONLY) {
                let mut text = String::new();
                std::fs::File::from(fd).read_to_string(&mut text).unwrap();
                if text == "SENTINEL" {
                    leaks += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().unwrap();
        println!("{inside} read inside, {refused} refused, {leaks} leaked, {swaps} swaps");
        assert_eq!(leaks, 0);
        assert!(inside > 0 && swaps > 0, "the race ran: {inside} inside, {swaps} swaps");
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
