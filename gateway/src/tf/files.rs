//! The files `Dataset.list_files` names, as the dispatcher globs them (TensorFlow's
//! `MatchingFiles`), read only under its `--data-root` directories.
//!
//! A pattern is absolute; its components before the first wildcard (`*`, `?`, `[`, `\`) name a
//! directory that must resolve (through `..` and symlinks) under a data root, and every match
//! must too. Components match names as `fnmatch` with `FNM_PATHNAME` does (`*` and `?` never
//! match `/`, `[...]` classes with `!` or `^`, `\` escapes), as TensorFlow's local file
//! system matches them. A pattern's matches count once per pattern that matches them (as
//! `MatchingFiles` concatenates its patterns' matches). Every glob is bounded: at most
//! [`MAX_ENTRIES`] directory entries read in all.

use std::path::{Component, Path, PathBuf};

use super::graph::Files;

/// At most this many directory entries are read for one dataset's patterns.
pub const MAX_ENTRIES: usize = 100_000;

/// The dispatcher's `--data-root` directories (resolved).
#[derive(Debug, Clone, Default)]
pub struct DataRoots {
    roots: Vec<PathBuf>,
}

impl DataRoots {
    /// The roots, resolved; an error names a root that does not resolve to a directory.
    pub fn new(roots: &[PathBuf]) -> Result<DataRoots, String> {
        let mut resolved = Vec::new();
        for root in roots {
            let r =
                root.canonicalize().map_err(|e| format!("--data-root {}: {e}", root.display()))?;
            if !r.is_dir() {
                return Err(format!("--data-root {}: not a directory", root.display()));
            }
            resolved.push(r);
        }
        Ok(DataRoots { roots: resolved })
    }

    fn under_a_root(&self, path: &Path) -> bool {
        self.roots.iter().any(|r| path.starts_with(r))
    }

    /// The number of entries `pattern` matches; `entries` counts what was read.
    fn count(&self, pattern: &str, entries: &mut usize) -> Result<u64, String> {
        let path = Path::new(pattern);
        if !path.is_absolute() {
            return Err(format!("`{pattern}` is not an absolute path"));
        }
        let mut prefix = PathBuf::from("/");
        let mut rest: Vec<&str> = Vec::new();
        for component in path.components() {
            match component {
                Component::RootDir => {}
                Component::Normal(c) => {
                    let c = c.to_str().ok_or_else(|| format!("`{pattern}` is not UTF-8"))?;
                    if rest.is_empty() && !has_wildcard(c) {
                        prefix.push(c);
                    } else {
                        rest.push(c);
                    }
                }
                Component::CurDir | Component::ParentDir | Component::Prefix(_) => {
                    if rest.is_empty() {
                        prefix.push(component.as_os_str());
                    } else {
                        return Err(format!("`{pattern}` has `.` or `..` after a wildcard"));
                    }
                }
            }
        }
        let Ok(base) = prefix.canonicalize() else {
            // TensorFlow: a pattern whose directory does not exist matches nothing.
            return self.check_lexically(&prefix, pattern).map(|()| 0);
        };
        if !self.under_a_root(&base) {
            return Err(format!(
                "`{pattern}` is outside every --data-root of the dispatcher ({})",
                self.roots_text()
            ));
        }
        if rest.is_empty() {
            return Ok(1);
        }
        let mut current = vec![base];
        for (i, component) in rest.iter().enumerate() {
            let last = i + 1 == rest.len();
            let mut next = Vec::new();
            for dir in &current {
                let Ok(read) = std::fs::read_dir(dir) else { continue };
                for entry in read {
                    *entries += 1;
                    if *entries > MAX_ENTRIES {
                        return Err(format!(
                            "globbing reads more than {MAX_ENTRIES} directory entries"
                        ));
                    }
                    let Ok(entry) = entry else { continue };
                    let name = entry.file_name();
                    let Some(name) = name.to_str() else { continue };
                    if !fnmatch(component.as_bytes(), name.as_bytes()) {
                        continue;
                    }
                    let path = entry.path();
                    let resolved =
                        path.canonicalize().map_err(|e| format!("{}: {e}", path.display()))?;
                    if !self.under_a_root(&resolved) {
                        return Err(format!(
                            "`{pattern}` matches {}, outside every --data-root of the dispatcher",
                            path.display()
                        ));
                    }
                    if last || resolved.is_dir() {
                        next.push(path);
                    }
                }
            }
            current = next;
        }
        Ok(current.len() as u64)
    }

    /// A pattern whose directory does not exist: still refused when it names no root.
    fn check_lexically(&self, prefix: &Path, pattern: &str) -> Result<(), String> {
        if prefix.components().any(|c| c == Component::ParentDir) || !self.under_a_root(prefix) {
            return Err(format!(
                "`{pattern}` is outside every --data-root of the dispatcher ({})",
                self.roots_text()
            ));
        }
        Ok(())
    }

    fn roots_text(&self) -> String {
        self.roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ")
    }
}

impl Files for DataRoots {
    fn count_matching(&self, patterns: &[String]) -> Result<u64, String> {
        if self.roots.is_empty() {
            return super::graph::NoFiles.count_matching(patterns);
        }
        let mut entries = 0;
        let mut total = 0u64;
        for pattern in patterns {
            total = total.saturating_add(self.count(pattern, &mut entries)?);
        }
        Ok(total)
    }
}

fn has_wildcard(component: &str) -> bool {
    component.bytes().any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
}

/// Whether `name` (one path component) matches `pattern` as `fnmatch(3)` with
/// `FNM_PATHNAME` matches it. Linear backtracking over the last `*`: O(len^2) at worst.
pub fn fnmatch(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    // Where to resume after the last `*`: (pattern after it, name position).
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p + 1, n));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => match class(pattern, p, name[n]) {
                Some((true, end)) => Some(end),
                Some((false, _)) => None,
                // An unclosed `[` is a literal.
                None => (name[n] == b'[').then_some(p + 1),
            },
            Some(b'\\') if p + 1 < pattern.len() => (pattern[p + 1] == name[n]).then_some(p + 2),
            Some(&c) => (c == name[n]).then_some(p + 1),
            None => None,
        };
        match step {
            Some(next) => {
                p = next;
                n += 1;
            }
            None => match star {
                Some((sp, sn)) => {
                    star = Some((sp, sn + 1));
                    p = sp;
                    n = sn + 1;
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// A `[...]` class at `pattern[p]`: whether `c` is in it and where it ends; `None` when it
/// does not close.
fn class(pattern: &[u8], p: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = p + 1;
    let negated = matches!(pattern.get(i), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let mut found = false;
    let mut first = true;
    loop {
        let &lo = pattern.get(i)?;
        if lo == b']' && !first {
            return Some((found != negated, i + 1));
        }
        first = false;
        let lo = if lo == b'\\' {
            i += 1;
            *pattern.get(i)?
        } else {
            lo
        };
        if pattern.get(i + 1) == Some(&b'-') && pattern.get(i + 2).is_some_and(|&h| h != b']') {
            let hi = pattern[i + 2];
            found |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            found |= lo == c;
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnmatch_matches_as_tensorflow_matches_names() {
        let m = |p: &str, n: &str| fnmatch(p.as_bytes(), n.as_bytes());
        assert!(m("*.txt", "a.txt"));
        assert!(m("*.txt", ".txt"));
        assert!(!m("*.txt", "a.txt.gz"));
        assert!(m("part-??", "part-01"));
        assert!(!m("part-??", "part-1"));
        assert!(m("[ab]*", "b1"));
        assert!(!m("[!ab]*", "b1"));
        assert!(m("[a-c]", "b"));
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
        assert!(m("[", "["));
        assert!(m("*a*b*c", "xxaxxbxxc"));
        assert!(!m("*a*b*c", "xxaxxbxx"));
        // Bounded on a hostile pattern.
        let long = "a".repeat(10_000);
        let started = std::time::Instant::now();
        assert!(!m(&"*a".repeat(100).to_string().replace("**", "*"), &format!("{long}b")));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("shardwise-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("sub")).unwrap();
        for f in ["a.txt", "b.txt", "c.csv", "sub/d.txt"] {
            std::fs::write(d.join(f), "x").unwrap();
        }
        d
    }

    #[test]
    fn globs_count_files_under_the_roots_only() {
        let d = dir("roots");
        let roots = DataRoots::new(std::slice::from_ref(&d)).unwrap();
        let count = |p: &str| roots.count_matching(&[p.to_owned()]);
        let at = |p: &str| format!("{}/{p}", d.display());
        assert_eq!(count(&at("*.txt")), Ok(2));
        assert_eq!(count(&at("*")), Ok(4), "the sub directory too");
        assert_eq!(count(&at("*/*.txt")), Ok(1));
        assert_eq!(count(&at("a.txt")), Ok(1));
        assert_eq!(count(&at("nothing/*.txt")), Ok(0));
        assert_eq!(roots.count_matching(&[at("*.txt"), at("a.*")]), Ok(3));
        for outside in ["/etc/*", "/*", &at("../*"), "relative/*.txt", &at("sub/../../*")] {
            let err = count(outside).expect_err(outside);
            assert!(err.contains("outside every --data-root") || err.contains("absolute"), "{err}");
        }
        // A symlink out of the root is refused.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", d.join("sub/etc")).unwrap();
            assert!(count(&at("sub/*")).unwrap_err().contains("outside every --data-root"));
        }
        let none = DataRoots::new(&[]).unwrap();
        assert!(none.count_matching(&[at("*")]).unwrap_err().contains("--data-root"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
