//! A small, seeded, corpus-driven fuzzer on stable Rust for the `fuzz_*` tests.
//!
//! cargo-fuzz needs a nightly toolchain; this is the stable substitute: a deterministic
//! generator ([`Rng`], seeded from `SHARDWISE_FUZZ_SEED` or the clock, the seed always
//! printed), byte mutations of corpus entries (bit flips, byte inserts and deletes, interesting
//! values, splices of two entries, dictionary tokens) and JSON-aware mutations (a value replaced
//! by another type, a huge number, deep nesting, a long or non-ASCII string, a key removed or
//! added). [`run`] drives one target: it feeds inputs until the budget is spent, counts accepted
//! and rejected inputs, reports any panic with the input and how to reproduce it, and fails on
//! an input that takes too long.
//!
//! Budget: a few thousand inputs per target by default (CI smoke); with `SHARDWISE_LONG=1`,
//! 1,000,000 inputs per target, or `SHARDWISE_FUZZ_SECS` seconds per target when that is set.
//! `SHARDWISE_FUZZ_INPUTS` overrides the count in either mode.
//!
//! Seed corpora live in `tests/fuzz/<target>.jsonl`, one JSON value per line (a string for
//! text targets), copied from inputs already in the repository.

use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

/// Core's SplitMix64 generator (the same sequence for the same seed everywhere), with the
/// draws the fuzz targets and the crash harness use.
#[derive(Debug, Clone)]
pub struct Rng(shardwise_core::rng::SplitMix64);

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(shardwise_core::rng::SplitMix64::new(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        usize::try_from(self.next_u64() % u64::try_from(n).unwrap_or(u64::MAX)).unwrap_or(0)
    }

    /// A number in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo { lo } else { lo + self.next_u64() % (hi - lo) }
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// How many inputs a target gets, and from which seed.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// The seed of the input sequence.
    pub seed: u64,
    /// At most this many inputs.
    pub inputs: u64,
    /// At most this long (long mode with `SHARDWISE_FUZZ_SECS`).
    pub time: Option<Duration>,
}

impl Budget {
    /// The budget of a target whose smoke run feeds `smoke_inputs` inputs (see the module docs).
    pub fn from_env(smoke_inputs: u64) -> Budget {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let seed = match var("SHARDWISE_FUZZ_SEED") {
            Some(s) => s.trim().parse().unwrap_or_else(|_| panic!("SHARDWISE_FUZZ_SEED={s:?}")),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos() & u128::from(u64::MAX)).unwrap_or(0)),
        };
        let long = var("SHARDWISE_LONG").is_some_and(|v| v != "0");
        let secs = var("SHARDWISE_FUZZ_SECS")
            .filter(|_| long)
            .map(|s| s.trim().parse::<u64>().expect("SHARDWISE_FUZZ_SECS is a number of seconds"));
        let inputs = match var("SHARDWISE_FUZZ_INPUTS") {
            Some(n) => n.trim().parse().expect("SHARDWISE_FUZZ_INPUTS is a count"),
            None if secs.is_some() => u64::MAX,
            None if long => 1_000_000,
            None => smoke_inputs,
        };
        Budget { seed, inputs, time: secs.map(Duration::from_secs) }
    }
}

/// What a target made of one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The input was valid and everything checked about it held.
    Accepted,
    /// The input was refused with a typed error (which the target checked).
    Rejected,
}

/// The outcome of [`run`], also printed.
#[derive(Debug, Clone)]
pub struct Report {
    /// The target's name.
    pub target: String,
    /// The seed.
    pub seed: u64,
    /// Inputs fed.
    pub tried: u64,
    /// Inputs accepted.
    pub accepted: u64,
    /// Inputs rejected.
    pub rejected: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// The slowest input's time.
    pub slowest: Duration,
}

/// The longest one input may take before the run fails as a hang.
pub const HANG: Duration = Duration::from_secs(5);

/// An input slower than this (and slower than every earlier one) is printed.
pub const SLOW: Duration = Duration::from_millis(100);

/// Feeds `target` inputs made by `make` (from the generator and the input's number) until the
/// budget is spent. A panic in `make` or `target` is re-raised after printing the target, the
/// seed, the input number and the input (`show`), so that `SHARDWISE_FUZZ_SEED` reproduces it;
/// an input slower than [`HANG`] fails the run the same way. Prints and returns the counts.
pub fn run<I>(
    name: &str,
    budget: Budget,
    mut make: impl FnMut(&mut Rng, u64) -> I,
    show: impl Fn(&I) -> String,
    mut target: impl FnMut(&I) -> Verdict,
) -> Report {
    let mut rng = Rng::new(budget.seed);
    let started = Instant::now();
    let mut report = Report {
        target: name.to_owned(),
        seed: budget.seed,
        tried: 0,
        accepted: 0,
        rejected: 0,
        elapsed: Duration::ZERO,
        slowest: Duration::ZERO,
    };
    println!(
        "fuzz {name}: seed {} (SHARDWISE_FUZZ_SEED={} to reproduce)",
        budget.seed, budget.seed
    );
    while report.tried < budget.inputs && budget.time.is_none_or(|t| started.elapsed() < t) {
        let n = report.tried;
        let input = make(&mut rng, n);
        let t0 = Instant::now();
        let verdict = catch_unwind(AssertUnwindSafe(|| target(&input)));
        let took = t0.elapsed();
        let verdict = match verdict {
            Ok(v) => v,
            Err(panic) => {
                eprintln!(
                    "fuzz {name}: input #{n} failed (SHARDWISE_FUZZ_SEED={} reproduces it): {}",
                    budget.seed,
                    show(&input)
                );
                resume_unwind(panic);
            }
        };
        assert!(
            took < HANG,
            "fuzz {name}: input #{n} took {took:?} (SHARDWISE_FUZZ_SEED={}): {}",
            budget.seed,
            show(&input)
        );
        if took > report.slowest && took > SLOW {
            println!("fuzz {name}: input #{n} took {took:.1?}: {}", show(&input));
        }
        report.slowest = report.slowest.max(took);
        report.tried += 1;
        match verdict {
            Verdict::Accepted => report.accepted += 1,
            Verdict::Rejected => report.rejected += 1,
        }
    }
    report.elapsed = started.elapsed();
    println!(
        "fuzz {name}: {} inputs, {} accepted, {} rejected, seed {}, {:.1?} (slowest input {:.1?})",
        report.tried, report.accepted, report.rejected, report.seed, report.elapsed, report.slowest
    );
    report
}

/// An input for a log line: escaped, cut after 2,000 characters.
pub fn show_bytes(bytes: &[u8]) -> String {
    let escaped = bytes.escape_ascii().to_string();
    let mut out: String = escaped.chars().take(2_000).collect();
    if out.len() < escaped.len() {
        let _ = write!(out, "... ({} bytes)", bytes.len());
    }
    out
}

/// The seed corpus of a target: `tests/fuzz/<name>.jsonl`, one JSON value per line.
pub fn corpus(name: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz").join(format!("{name}.jsonl"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read the corpus {}: {e}", path.display()));
    let entries: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
        .collect();
    assert!(!entries.is_empty(), "the corpus {} is empty", path.display());
    entries
}

/// Every object key used anywhere in `values`, sorted: the dictionary of JSON-aware mutations.
pub fn keys_of(values: &[Value]) -> Vec<String> {
    fn walk(v: &Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            Value::Array(items) => items.iter().for_each(|x| walk(x, out)),
            Value::Object(map) => {
                for (k, x) in map {
                    out.insert(k.clone());
                    walk(x, out);
                }
            }
            _ => {}
        }
    }
    let mut out = std::collections::BTreeSet::new();
    values.iter().for_each(|v| walk(v, &mut out));
    out.into_iter().collect()
}

/// A text corpus: the string entries of [`corpus`].
pub fn text_corpus(name: &str) -> Vec<String> {
    corpus(name)
        .into_iter()
        .map(|v| match v {
            Value::String(s) => s,
            other => panic!("tests/fuzz/{name}.jsonl holds a non-string entry {other}"),
        })
        .collect()
}

/// Values that often sit at a boundary: as bytes, little-endian 32-bit words and numbers.
const INTERESTING_U32: [u32; 12] = [
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xffff,
    0x1_0000,
    0x400_0000,
    0x400_0001,
    0x7fff_ffff,
    0xffff_ffff,
];

/// Applies one to four byte mutations to a copy of a random corpus entry; `tokens` are
/// strings worth inserting (a target's dictionary).
pub fn mutate_bytes(rng: &mut Rng, corpus: &[Vec<u8>], tokens: &[&str]) -> Vec<u8> {
    let mut out = rng.pick(corpus).clone();
    for _ in 0..=rng.below(4) {
        mutate_once(rng, &mut out, corpus, tokens);
    }
    out
}

fn mutate_once(rng: &mut Rng, out: &mut Vec<u8>, corpus: &[Vec<u8>], tokens: &[&str]) {
    let len = out.len();
    let at = rng.below(len + 1);
    match rng.below(10) {
        0 if len > 0 => {
            let i = rng.below(len);
            out[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            out[i] = u8::try_from(rng.pick(&INTERESTING_U32) & 0xff).unwrap_or(0);
        }
        2 => {
            let n = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..n).map(|_| (rng.next_u64() & 0xff) as u8).collect();
            out.splice(at..at, bytes);
        }
        3 if len > 0 => {
            let n = 1 + rng.below(len.min(32));
            let end = (at + n).min(len);
            out.drain(at.min(len)..end);
        }
        4 if len >= 4 => {
            let i = rng.below(len - 3);
            out[i..i + 4].copy_from_slice(&rng.pick(&INTERESTING_U32).to_le_bytes());
        }
        5 => {
            let other = rng.pick(corpus);
            let from = rng.below(other.len() + 1);
            out.truncate(at);
            out.extend_from_slice(&other[from..]);
        }
        6 if len > 0 => {
            let start = rng.below(len);
            let end = start + 1 + rng.below((len - start).min(64));
            let chunk = out[start..end].to_vec();
            for _ in 0..=rng.below(4) {
                out.splice(at..at, chunk.iter().copied());
            }
        }
        7 if !tokens.is_empty() => {
            let token = rng.pick(tokens).as_bytes().to_vec();
            out.splice(at..at, token);
        }
        8 => out.truncate(at),
        _ => {
            let i = rng.below(len + 1);
            let b = *rng.pick(&[0u8, b' ', b'"', b'\\', b',', b'{', b'[', b'(', 0xc3, 0xff]);
            out.insert(i, b);
        }
    }
}

/// Applies a byte mutation to a text and keeps the valid UTF-8 (lossily).
pub fn mutate_text(rng: &mut Rng, corpus: &[String], tokens: &[&str]) -> String {
    let bytes: Vec<Vec<u8>> = corpus.iter().map(|s| s.clone().into_bytes()).collect();
    String::from_utf8_lossy(&mutate_bytes(rng, &bytes, tokens)).into_owned()
}

/// A hostile JSON leaf or subtree.
pub fn hostile_value(rng: &mut Rng) -> Value {
    match rng.below(16) {
        0 => Value::Null,
        1 => Value::Bool(rng.one_in(2)),
        2 => Value::from(i64::MIN),
        3 => Value::from(u64::MAX),
        4 => Value::from(-1),
        5 => Value::from(1e300),
        6 => Value::from(0.5),
        7 => Value::from(*rng.pick(&INTERESTING_U32)),
        8 => Value::String(String::new()),
        9 => Value::String("x".repeat(1 + rng.below(20_000))),
        10 => Value::String(
            (*rng.pick(&["é", "\u{1F600}", "\u{202e}", "\0", "\u{fffd}", "ǅ"]))
                .repeat(1 + rng.below(300)),
        ),
        11 => Value::Array(Vec::new()),
        12 => Value::Object(Map::new()),
        13 => nested(rng.below(200), rng.one_in(2)),
        14 => Value::Array((0..rng.below(2_000)).map(Value::from).collect()),
        _ => Value::String(rng.next_u64().to_string()),
    }
}

/// `depth` levels of arrays (or objects) around a number.
pub fn nested(depth: usize, objects: bool) -> Value {
    let mut v = Value::from(1);
    for _ in 0..depth {
        v = if objects {
            Value::Object(Map::from_iter([("a".to_owned(), v)]))
        } else {
            Value::Array(vec![v])
        };
    }
    v
}

/// Number of nodes of a JSON value.
fn size(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(size).sum(),
        Value::Object(o) => o.values().map(size).sum(),
        _ => 0,
    }
}

/// Applies one to three JSON-aware mutations to a copy of a random corpus entry: a node is
/// replaced by a value of another type or a hostile one ([`hostile_value`]), by another
/// entry's subtree, removed from its parent, or given an unknown sibling key; strings get
/// byte mutations; numbers get their neighbours.
pub fn mutate_json(rng: &mut Rng, corpus: &[Value], keys: &[&str]) -> Value {
    let mut out = rng.pick(corpus).clone();
    let rounds = if rng.one_in(2) { 1 } else { 2 + rng.below(2) };
    for _ in 0..rounds {
        let n = rng.below(size(&out));
        let donor = rng.pick(corpus).clone();
        mutate_node(rng, &mut out, n, &donor, keys);
    }
    out
}

/// Finds node `n` (pre-order) and mutates it (or, one time in four, its entry in its parent).
fn mutate_node(rng: &mut Rng, v: &mut Value, n: usize, donor: &Value, keys: &[&str]) {
    let mut left = n;
    walk(rng, v, &mut left, donor, keys);
}

fn walk(rng: &mut Rng, v: &mut Value, left: &mut usize, donor: &Value, keys: &[&str]) -> bool {
    if *left == 0 {
        replace(rng, v, donor, keys);
        return true;
    }
    *left -= 1;
    match v {
        Value::Array(items) => {
            for i in 0..items.len() {
                if *left == 0 && rng.one_in(4) {
                    match rng.below(3) {
                        0 => {
                            items.remove(i);
                        }
                        1 => items.insert(i, hostile_value(rng)),
                        _ => {
                            let copy = items[i].clone();
                            items.insert(i, copy);
                        }
                    }
                    return true;
                }
                if walk(rng, &mut items[i], left, donor, keys) {
                    return true;
                }
            }
            false
        }
        Value::Object(map) => {
            let names: Vec<String> = map.keys().cloned().collect();
            for name in names {
                if *left == 0 && rng.one_in(4) {
                    if rng.one_in(2) {
                        map.remove(&name);
                    } else {
                        let key = if keys.is_empty() || rng.one_in(3) {
                            format!("{name}_x")
                        } else {
                            (*rng.pick(keys)).to_owned()
                        };
                        map.insert(key, hostile_value(rng));
                    }
                    return true;
                }
                let Some(child) = map.get_mut(&name) else { continue };
                if walk(rng, child, left, donor, keys) {
                    return true;
                }
            }
            false
        }
        _ => false,
    }
}

fn replace(rng: &mut Rng, v: &mut Value, donor: &Value, keys: &[&str]) {
    match rng.below(8) {
        0 | 1 => *v = hostile_value(rng),
        2 => {
            let k = rng.below(size(donor));
            *v = subtree(donor, k).clone();
        }
        3 => {
            if let Value::String(s) = v {
                let t = mutate_text(rng, std::slice::from_ref(s), keys);
                *s = t;
            } else {
                *v = Value::String(v.to_string());
            }
        }
        4 => {
            if let Some(i) = v.as_i64() {
                let d = *rng.pick(&[-1i64, 1, i64::MAX, i64::MIN]);
                *v = Value::from(i.wrapping_add(d));
            } else if let Some(u) = v.as_u64() {
                *v = Value::from(u.wrapping_add(1));
            } else {
                *v = Value::from(-1);
            }
        }
        5 => {
            if let Value::Object(map) = v {
                let key = if keys.is_empty() {
                    "unknown".to_owned()
                } else {
                    (*rng.pick(keys)).to_owned()
                };
                map.insert(key, hostile_value(rng));
            } else {
                *v = Value::Object(Map::new());
            }
        }
        6 => *v = Value::Array(vec![v.take()]),
        _ => {
            let key = if keys.is_empty() { "k".to_owned() } else { (*rng.pick(keys)).to_owned() };
            *v = Value::Object(Map::from_iter([(key, v.take())]));
        }
    }
}

/// The node with pre-order number `n` of `v` (the root when `n` is out of range).
fn subtree(v: &Value, n: usize) -> &Value {
    fn go<'a>(v: &'a Value, left: &mut usize) -> Option<&'a Value> {
        if *left == 0 {
            return Some(v);
        }
        *left -= 1;
        match v {
            Value::Array(items) => items.iter().find_map(|c| go(c, left)),
            Value::Object(map) => map.values().find_map(|c| go(c, left)),
            _ => None,
        }
    }
    let mut left = n;
    go(v, &mut left).unwrap_or(v)
}

/// Text from JSON: one time in four the serialized mutation gets byte mutations too (broken
/// syntax, repeated keys, stray bytes), and one time in thirty it is deep nesting as text.
pub fn mutate_json_text(rng: &mut Rng, corpus: &[Value], keys: &[&str]) -> String {
    if rng.one_in(30) {
        let depth = 1 + rng.below(20_000);
        let (open, close) = if rng.one_in(2) { ("[", "]") } else { ("{\"a\":", "}") };
        return format!("{}1{}", open.repeat(depth), close.repeat(depth));
    }
    let text = mutate_json(rng, corpus, keys).to_string();
    if rng.one_in(4) {
        let tokens: Vec<&str> = keys
            .iter()
            .copied()
            .chain(["\"", "{", "}", "[", "]", ":", ",", "1e999", "-0", "\\u0000", "\\ud800"])
            .collect();
        return mutate_text(rng, &[text], &tokens);
    }
    text
}
