//! The files `Dataset.list_files` names, as the dispatcher globs them (TensorFlow's
//! `MatchingFiles`), read only under its `--data-root` directories.
//!
//! A pattern is absolute; its components before the first wildcard (`*`, `?`, `[`, `\`) name a
//! directory that must resolve (through `..` and symlinks) under a data root, and every match
//! must too. Components match names as `fnmatch` with `FNM_PATHNAME` does (`*` and `?` never
//! match `/`, `[...]` classes with `!` or `^`, `\` escapes), as TensorFlow's local file
//! system matches them. A pattern's matches count once per pattern that matches them (as
//! `MatchingFiles` concatenates its patterns' matches).
//!
//! Every glob is bounded, whatever the patterns and the directories:
//! - a pattern is at most [`MAX_PATTERN_BYTES`] long (Linux's `PATH_MAX`), else refused;
//! - a component is compiled once ([`Component`]): consecutive `*` are one, and one whose
//!   characters (literals, `?`, classes) cannot fit in a file name (Linux's `NAME_MAX`, 255
//!   bytes) matches nothing without reading a name; a name is matched in one pass over its
//!   bytes, a few word operations per byte (a bit-parallel run of the pattern's automaton);
//! - one registration's globs read at most `--max-glob-entries` directory entries in all
//!   ([`Glob`]), each pattern counting for one entry per 256 bytes and each `[...]` class for
//!   one more (their compilation), each directory for one;
//! - a glob stops at the next directory entry once its registration is abandoned (the gRPC
//!   call was answered, its deadline passed or its client went away: [`Glob`]'s stop flag).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::{Component as PathComponent, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use shardwise_core::echo::echo;

use super::graph::Files;

/// The default of `--max-glob-entries`: the directory entries one registration's globs may
/// read.
pub const DEFAULT_MAX_GLOB_ENTRIES: u64 = 100_000;

/// The longest pattern globbed: Linux's `PATH_MAX` (a longer one is refused).
pub const MAX_PATTERN_BYTES: usize = 4096;

/// The longest file name: Linux's `NAME_MAX`. A component that needs more characters than
/// this matches nothing.
pub const MAX_NAME_BYTES: usize = 255;

/// A pattern counts for one directory entry per this many bytes.
const PATTERN_BYTES_PER_ENTRY: usize = 256;

/// The dispatcher's `--data-root` directories (resolved), and the bound of one registration's
/// globs (`--max-glob-entries`).
#[derive(Debug, Clone)]
pub struct DataRoots {
    roots: Vec<PathBuf>,
    max_entries: u64,
}

impl Default for DataRoots {
    fn default() -> Self {
        DataRoots { roots: Vec::new(), max_entries: DEFAULT_MAX_GLOB_ENTRIES }
    }
}

impl DataRoots {
    /// The roots, resolved, globbing at most `max_entries` directory entries per
    /// registration; an error names a root that does not resolve to a directory.
    pub fn new(roots: &[PathBuf], max_entries: u64) -> Result<DataRoots, String> {
        let mut resolved = Vec::new();
        for root in roots {
            let r =
                root.canonicalize().map_err(|e| format!("--data-root {}: {e}", root.display()))?;
            if !r.is_dir() {
                return Err(format!("--data-root {}: not a directory", root.display()));
            }
            resolved.push(r);
        }
        Ok(DataRoots { roots: resolved, max_entries })
    }

    /// The globs of one registration: they share one budget of `--max-glob-entries`, remember
    /// what each pattern matched, and stop once `stop` is set.
    pub fn glob<'a>(&'a self, stop: &'a AtomicBool) -> Glob<'a> {
        Glob { roots: self, stop, spent: Cell::new(0), counted: RefCell::new(HashMap::new()) }
    }

    fn under_a_root(&self, path: &Path) -> bool {
        self.roots.iter().any(|r| path.starts_with(r))
    }

    /// A pattern whose directory does not exist: still refused when it names no root.
    fn check_lexically(&self, prefix: &Path, pattern: &str) -> Result<(), String> {
        if prefix.components().any(|c| c == PathComponent::ParentDir) || !self.under_a_root(prefix)
        {
            return Err(self.outside(pattern));
        }
        Ok(())
    }

    fn outside(&self, pattern: &str) -> String {
        format!(
            "{} is outside every --data-root of the dispatcher ({})",
            echo(pattern),
            self.roots_text()
        )
    }

    fn roots_text(&self) -> String {
        self.roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ")
    }
}

/// The globs of one registration ([`DataRoots::glob`]): the core's [`Files`] for one walk of
/// a graph. Every `MatchingFiles` of the graph takes from one budget of directory entries,
/// and a pattern met twice is globbed once.
#[derive(Debug)]
pub struct Glob<'a> {
    roots: &'a DataRoots,
    /// Set when the registration is abandoned: the glob stops at its next directory entry.
    stop: &'a AtomicBool,
    /// Directory entries read (and patterns and classes compiled) so far.
    spent: Cell<u64>,
    /// What each pattern globbed so far matched.
    counted: RefCell<HashMap<String, Result<u64, String>>>,
}

impl Glob<'_> {
    /// Takes `n` entries from the budget, or says why the glob stops.
    fn spend(&self, n: u64) -> Result<(), String> {
        if self.stop.load(Ordering::Relaxed) {
            return Err("the registration was abandoned (its call was answered, its deadline \
                        passed or its client went away) before the glob ended"
                .into());
        }
        let spent = self.spent.get().saturating_add(n);
        self.spent.set(spent);
        if spent > self.roots.max_entries {
            return Err(format!(
                "globbing the dataset's list_files patterns reads more than {} directory \
                 entries (--max-glob-entries; a pattern counts for one per {PATTERN_BYTES_PER_ENTRY} \
                 bytes and a `[...]` class for one more)",
                self.roots.max_entries
            ));
        }
        Ok(())
    }

    /// The number of entries `pattern` matches.
    fn count(&self, pattern: &str) -> Result<u64, String> {
        self.spend(1 + (pattern.len() / PATTERN_BYTES_PER_ENTRY) as u64)?;
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(format!(
                "the pattern {} is longer than the {MAX_PATTERN_BYTES} bytes the dispatcher \
                 globs (Linux's PATH_MAX)",
                echo(pattern)
            ));
        }
        let path = Path::new(pattern);
        if !path.is_absolute() {
            return Err(format!("{} is not an absolute path", echo(pattern)));
        }
        let mut prefix = PathBuf::from("/");
        let mut rest: Vec<&str> = Vec::new();
        for component in path.components() {
            match component {
                PathComponent::RootDir => {}
                PathComponent::Normal(c) => {
                    let c = c.to_str().ok_or_else(|| format!("{} is not UTF-8", echo(pattern)))?;
                    if rest.is_empty() && !has_wildcard(c) {
                        prefix.push(c);
                    } else {
                        rest.push(c);
                    }
                }
                PathComponent::CurDir | PathComponent::ParentDir | PathComponent::Prefix(_) => {
                    if rest.is_empty() {
                        prefix.push(component.as_os_str());
                    } else {
                        return Err(format!("{} has `.` or `..` after a wildcard", echo(pattern)));
                    }
                }
            }
        }
        let roots = self.roots;
        let Ok(base) = prefix.canonicalize() else {
            // TensorFlow: a pattern whose directory does not exist matches nothing.
            return roots.check_lexically(&prefix, pattern).map(|()| 0);
        };
        if !roots.under_a_root(&base) {
            return Err(roots.outside(pattern));
        }
        if rest.is_empty() {
            return Ok(1);
        }
        // The directories (and at the last component, the entries) matched so far: each as
        // named by the pattern, and resolved.
        let mut current = vec![(base.clone(), base)];
        for (i, text) in rest.iter().enumerate() {
            if current.is_empty() {
                break;
            }
            let last = i + 1 == rest.len();
            let component = Component::compile(text.as_bytes());
            self.spend(component.cost)?;
            let mut next = Vec::new();
            for (dir, resolved_dir) in &current {
                self.spend(1)?;
                if component.never() {
                    continue;
                }
                let Ok(read) = std::fs::read_dir(dir) else { continue };
                for entry in read {
                    self.spend(1)?;
                    let Ok(entry) = entry else { continue };
                    let name = entry.file_name();
                    let Some(name) = name.to_str() else { continue };
                    if !component.matches(name.as_bytes()) {
                        continue;
                    }
                    let path = entry.path();
                    // An entry that is not a symlink resolves to its directory's resolved
                    // path and its name; a symlink is resolved.
                    let symlink = entry.file_type().map_or(true, |t| t.is_symlink());
                    let resolved = if symlink {
                        let resolved = path
                            .canonicalize()
                            .map_err(|e| format!("{}: {e}", echo(&path.display().to_string())))?;
                        if !roots.under_a_root(&resolved) {
                            return Err(format!(
                                "{} matches {}, outside every --data-root of the dispatcher",
                                echo(pattern),
                                echo(&path.display().to_string())
                            ));
                        }
                        resolved
                    } else {
                        resolved_dir.join(name)
                    };
                    if last {
                        next.push((path, resolved));
                    } else {
                        let is_dir = if symlink {
                            resolved.is_dir()
                        } else {
                            entry.file_type().is_ok_and(|t| t.is_dir())
                        };
                        if is_dir {
                            next.push((path, resolved));
                        }
                    }
                }
            }
            current = next;
        }
        Ok(current.len() as u64)
    }
}

impl Files for Glob<'_> {
    fn count_matching(&self, patterns: &[String]) -> Result<u64, String> {
        if self.roots.roots.is_empty() {
            return super::graph::NoFiles.count_matching(patterns);
        }
        let mut total = 0u64;
        for pattern in patterns {
            let known = self.counted.borrow().get(pattern).cloned();
            let count = match known {
                Some(count) => count,
                None => {
                    let count = self.count(pattern);
                    self.counted.borrow_mut().insert(pattern.clone(), count.clone());
                    count
                }
            };
            total = total.saturating_add(count?);
        }
        Ok(total)
    }
}

/// A glob that is never abandoned (tests, and callers without a call to follow).
impl Files for DataRoots {
    fn count_matching(&self, patterns: &[String]) -> Result<u64, String> {
        let never = AtomicBool::new(false);
        self.glob(&never).count_matching(patterns)
    }
}

fn has_wildcard(component: &str) -> bool {
    component.bytes().any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
}

/// The words of a component's automaton state: one bit per position 0..=[`MAX_NAME_BYTES`].
const WORDS: usize = (MAX_NAME_BYTES + 1).div_ceil(64);

/// A set of positions, or of bytes.
type Bits = [u64; WORDS];

/// One component of a pattern, compiled once, matched against each name in one pass.
///
/// A component is a run of characters (a literal byte, `?` or a class: each matches one byte)
/// with `*` between them. Its automaton is at position `i` once `i` characters have matched;
/// a byte moves it from `i` to `i + 1` when character `i` matches the byte, and keeps it at `i`
/// when a `*` stands before character `i` (consecutive `*` are one). The set of positions it
/// may be at is a bit set of at most 256 bits, so a name of `n` bytes costs `n` times a few
/// word operations, whatever the pattern.
#[derive(Debug, Clone)]
pub struct Component {
    /// For each byte, the positions it moves to: bit `i + 1` when character `i` matches it.
    next: Box<[Bits; 256]>,
    /// The positions a `*` holds.
    stars: Bits,
    /// The number of characters; `None` when more than a file name holds (it matches
    /// nothing).
    len: Option<usize>,
    /// The classes compiled and the bytes their scans read, in entries of the glob budget.
    cost: u64,
}

impl Component {
    /// Compiles `pattern` (one component, no `/`).
    pub fn compile(pattern: &[u8]) -> Component {
        let mut next = Box::new([[0u64; WORDS]; 256]);
        let mut stars = [0u64; WORDS];
        let mut any = [0u64; WORDS];
        let (mut p, mut len) = (0, 0);
        let (mut classes, mut scanned) = (0u64, 0usize);
        while p < pattern.len() {
            if pattern[p] == b'*' {
                set(&mut stars, len);
                p += 1;
                continue;
            }
            if len == MAX_NAME_BYTES {
                // A character more than a name can hold.
                let cost = classes + (scanned / PATTERN_BYTES_PER_ENTRY) as u64;
                return Component { next, stars, len: None, cost };
            }
            let bit = len + 1;
            match pattern[p] {
                b'?' => {
                    set(&mut any, bit);
                    p += 1;
                }
                b'[' => {
                    let (class, end) = class(pattern, p);
                    scanned += end.unwrap_or(pattern.len()) - p;
                    match (class, end) {
                        (Some(class), Some(end)) => {
                            classes += 1;
                            for (c, bytes) in next.iter_mut().enumerate() {
                                if has(&class, c) {
                                    set(bytes, bit);
                                }
                            }
                            p = end;
                        }
                        // An unclosed `[` is a literal.
                        _ => {
                            set(&mut next[usize::from(b'[')], bit);
                            p += 1;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    set(&mut next[usize::from(pattern[p + 1])], bit);
                    p += 2;
                }
                c => {
                    set(&mut next[usize::from(c)], bit);
                    p += 1;
                }
            }
            len += 1;
        }
        if any.iter().any(|&w| w != 0) {
            for bytes in next.iter_mut() {
                for (w, a) in bytes.iter_mut().zip(any) {
                    *w |= a;
                }
            }
        }
        let cost = classes + (scanned / PATTERN_BYTES_PER_ENTRY) as u64;
        Component { next, stars, len: Some(len), cost }
    }

    /// Whether it matches nothing (it has more characters than a file name).
    pub fn never(&self) -> bool {
        self.len.is_none()
    }

    /// Whether `name` matches: one pass over its bytes.
    pub fn matches(&self, name: &[u8]) -> bool {
        let Some(len) = self.len else { return false };
        if name.len() < len {
            return false;
        }
        let words = len / 64 + 1;
        let mut at = [0u64; WORDS];
        at[0] = 1;
        for &c in name {
            let next = &self.next[usize::from(c)];
            let (mut carry, mut live) = (0, 0);
            for w in 0..words {
                let here = at[w];
                let moved = ((here << 1) | carry) & next[w];
                carry = here >> 63;
                at[w] = moved | (here & self.stars[w]);
                live |= at[w];
            }
            if live == 0 {
                return false;
            }
        }
        has(&at, len)
    }
}

fn set(bits: &mut Bits, i: usize) {
    bits[i / 64] |= 1 << (i % 64);
}

/// Sets the bits `lo..=hi` (none when `lo > hi`), a word at a time.
fn set_range(bits: &mut Bits, lo: u8, hi: u8) {
    let (lo, hi) = (usize::from(lo), usize::from(hi));
    for (w, word) in bits.iter_mut().enumerate() {
        let (first, last) = (lo.max(w * 64), hi.min(w * 64 + 63));
        if first > last {
            continue;
        }
        let width = last - first + 1;
        let ones = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
        *word |= ones << (first - w * 64);
    }
}

fn has(bits: &Bits, i: usize) -> bool {
    bits[i / 64] >> (i % 64) & 1 == 1
}

/// Whether `name` (one path component) matches `pattern` as `fnmatch(3)` with
/// `FNM_PATHNAME` matches it ([`Component`]: one pass over the name).
pub fn fnmatch(pattern: &[u8], name: &[u8]) -> bool {
    Component::compile(pattern).matches(name)
}

/// A `[...]` class at `pattern[p]`: the bytes in it and where it ends; `(None, None)` when it
/// does not close (then it was read to the end of the pattern).
fn class(pattern: &[u8], p: usize) -> (Option<Bits>, Option<usize>) {
    let mut i = p + 1;
    let negated = matches!(pattern.get(i), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let mut bytes = [0u64; WORDS];
    let mut first = true;
    loop {
        let Some(&lo) = pattern.get(i) else { return (None, None) };
        if lo == b']' && !first {
            if negated {
                for w in &mut bytes {
                    *w = !*w;
                }
            }
            return (Some(bytes), Some(i + 1));
        }
        first = false;
        let lo = if lo == b'\\' {
            i += 1;
            let Some(&escaped) = pattern.get(i) else { return (None, None) };
            escaped
        } else {
            lo
        };
        if pattern.get(i + 1) == Some(&b'-') && pattern.get(i + 2).is_some_and(|&h| h != b']') {
            let hi = pattern[i + 2];
            set_range(&mut bytes, lo, hi);
            i += 3;
        } else {
            set(&mut bytes, usize::from(lo));
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
        assert!(m("[]a]", "]"));
        assert!(m("[^a]", "b"));
        assert!(m("a\\", "a\\"));
        assert!(m("[a-]", "-"));
        assert!(m("*", ""));
        // Bounded on a hostile pattern.
        let long = "a".repeat(10_000);
        let started = std::time::Instant::now();
        assert!(!m(&"*a".repeat(100).to_string().replace("**", "*"), &format!("{long}b")));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    /// `fnmatch` by backtracking, as its definition reads (exponential: small inputs only).
    fn reference(p: &[u8], n: &[u8]) -> bool {
        match p.first() {
            None => n.is_empty(),
            Some(b'*') => (0..=n.len()).any(|i| reference(&p[1..], &n[i..])),
            Some(b'?') => !n.is_empty() && reference(&p[1..], &n[1..]),
            Some(b'[') => match class(p, 0) {
                (Some(bytes), Some(end)) => {
                    !n.is_empty() && has(&bytes, usize::from(n[0])) && reference(&p[end..], &n[1..])
                }
                _ => n.first() == Some(&b'[') && reference(&p[1..], &n[1..]),
            },
            Some(b'\\') if p.len() > 1 => n.first() == Some(&p[1]) && reference(&p[2..], &n[1..]),
            Some(&c) => n.first() == Some(&c) && reference(&p[1..], &n[1..]),
        }
    }

    #[test]
    fn the_compiled_automaton_agrees_with_backtracking() {
        // A small deterministic generator (xorshift).
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let pieces = ["a", "b", "*", "?", "[ab]", "[!a]", "\\*", "[", "]", "-", "[a-b]", "**"];
        let letters = b"ab*[]-";
        for _ in 0..20_000 {
            let pattern: String = (0..next(6)).map(|_| pieces[next(pieces.len())]).collect();
            let name: Vec<u8> = (0..next(7)).map(|_| letters[next(letters.len())]).collect();
            assert_eq!(
                fnmatch(pattern.as_bytes(), &name),
                reference(pattern.as_bytes(), &name),
                "{pattern:?} against {:?}",
                String::from_utf8_lossy(&name)
            );
        }
    }

    #[test]
    fn a_component_is_compiled_to_at_most_a_name_of_characters() {
        // 100,000 `*` are one.
        let stars = Component::compile("*".repeat(100_000).as_bytes());
        assert!(stars.matches(b"anything") && stars.matches(b""));
        // More characters than a name holds: nothing, and no name is read.
        for too_long in ["*a".repeat(256), "?".repeat(256), "[ab]".repeat(300)] {
            let c = Component::compile(too_long.as_bytes());
            assert!(c.never() && !c.matches(&[b'a'; 255]), "{}", &too_long[..8]);
        }
        let fits = Component::compile("*a".repeat(255).as_bytes());
        assert!(!fits.never() && fits.matches(&[b'a'; 255]) && !fits.matches(&[b'a'; 254]));
        // The worst name against the worst pattern that fits: a few word operations a byte.
        let started = std::time::Instant::now();
        let c = Component::compile(format!("{}b", "*?".repeat(254)).as_bytes());
        for _ in 0..10_000 {
            assert!(!c.matches(&[b'a'; 255]));
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        // Classes are charged to the glob's budget, and so are unclosed `[` read to the end.
        assert_eq!(Component::compile(b"[ab][!c]x*").cost, 2);
        assert!(Component::compile("[".repeat(4000).as_bytes()).cost > 3000);
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
        let roots = DataRoots::new(std::slice::from_ref(&d), DEFAULT_MAX_GLOB_ENTRIES).unwrap();
        let count = |p: &str| roots.count_matching(&[p.to_owned()]);
        let at = |p: &str| format!("{}/{p}", d.display());
        assert_eq!(count(&at("*.txt")), Ok(2));
        assert_eq!(count(&at("*")), Ok(4), "the sub directory too");
        assert_eq!(count(&at("*/*.txt")), Ok(1));
        assert_eq!(count(&at("s*/*.txt")), Ok(1));
        assert_eq!(count(&at("a.txt")), Ok(1));
        assert_eq!(count(&at("nothing/*.txt")), Ok(0));
        assert_eq!(roots.count_matching(&[at("*.txt"), at("a.*")]), Ok(3));
        assert_eq!(roots.count_matching(&[at("*.txt"), at("*.txt")]), Ok(4));
        for outside in ["/etc/*", "/*", &at("../*"), "relative/*.txt", &at("sub/../../*")] {
            let err = count(outside).expect_err(outside);
            assert!(err.contains("outside every --data-root") || err.contains("absolute"), "{err}");
        }
        // A symlink out of the root is refused; one inside it counts.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(d.join("a.txt"), d.join("sub/a-link.txt")).unwrap();
            assert_eq!(count(&at("sub/*.txt")), Ok(2));
            std::os::unix::fs::symlink("/etc", d.join("sub/etc")).unwrap();
            assert!(count(&at("sub/*")).unwrap_err().contains("outside every --data-root"));
        }
        let none = DataRoots::new(&[], DEFAULT_MAX_GLOB_ENTRIES).unwrap();
        assert!(none.count_matching(&[at("*")]).unwrap_err().contains("--data-root"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn one_registration_reads_a_bounded_number_of_entries_and_stops_when_abandoned() {
        let d = dir("budget");
        for i in 0..100 {
            std::fs::write(d.join(format!("f{i}")), "x").unwrap();
        }
        let at = |p: &str| format!("{}/{p}", d.display());
        // 104 entries: one pattern fits in 110 (1 for the pattern, 1 for the directory)...
        let roots = DataRoots::new(std::slice::from_ref(&d), 110).unwrap();
        let never = AtomicBool::new(false);
        let glob = roots.glob(&never);
        assert_eq!(glob.count_matching(&[at("f*")]), Ok(100));
        // ...and is not read again when met again in the same registration...
        assert_eq!(glob.count_matching(&[at("f*"), at("f*")]), Ok(200));
        // ...but another pattern takes from the same budget.
        let err = glob.count_matching(&[at("f1*")]).unwrap_err();
        assert!(err.contains("more than 110 directory entries (--max-glob-entries"), "{err}");
        // A new registration has the whole budget again.
        assert_eq!(roots.glob(&never).count_matching(&[at("f1*")]), Ok(11));
        // A pattern longer than PATH_MAX is refused, echoed short.
        let long = at(&"?".repeat(MAX_PATTERN_BYTES));
        let err = roots.glob(&never).count_matching(&[long]).unwrap_err();
        assert!(err.contains("longer than the 4096 bytes") && err.len() < 300, "{err}");
        // An abandoned registration's glob stops at once.
        let stop = AtomicBool::new(true);
        let err = roots.glob(&stop).count_matching(&[at("f*")]).unwrap_err();
        assert!(err.contains("abandoned"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
