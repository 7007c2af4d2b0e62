//! Slurm's compressed lists: hostlists (`n[1-2],m5`) and tasks-per-node (`2(x3),1`), expanded
//! within a budget.

use crate::cluster::error::{ClusterError, TfException};
use crate::pyrepr::python_int;

use super::{DEFAULT_MAX_TASKS, EXPANSION_BYTES_LIMIT, RAISE_IT};

/// Why expanding one piece of a list failed.
enum Failure {
    /// TensorFlow's inner message (the caller adds TensorFlow's `Invalid ... format` prefix).
    Tf(String),
    /// A Shardwise limit; no TensorFlow class.
    Limit(String),
}

/// Running totals of an expansion, checked before anything is allocated.
struct Budget {
    entries: u64,
    bytes: u64,
    max_entries: u64,
}

impl Budget {
    fn new(max_entries: usize) -> Budget {
        Budget { entries: 0, bytes: 0, max_entries: len_u64(max_entries) }
    }

    /// Counts `entries` names of `bytes_each` bytes before any is built: a range such as
    /// `[0000000-0999999]` is refused from its bounds alone.
    fn reserve(&mut self, entries: u64, bytes_each: u64) -> Result<(), Failure> {
        let max = self.max_entries;
        let total = self.entries.checked_add(entries).filter(|&n| n <= max);
        let Some(total) = total else {
            return Err(Failure::Limit(format!(
                "it expands to more than {max} entries (the bound on resolved tasks; {RAISE_IT})"
            )));
        };
        let bytes = entries
            .checked_mul(bytes_each)
            .and_then(|b| b.checked_add(self.bytes))
            .filter(|&b| b <= EXPANSION_BYTES_LIMIT as u64);
        let Some(bytes) = bytes else {
            return Err(Failure::Limit(format!(
                "its expansion would take more than {EXPANSION_BYTES_LIMIT} bytes"
            )));
        };
        self.entries = total;
        self.bytes = bytes;
        Ok(())
    }
}

pub(super) fn len_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Number of decimal digits of `n`.
fn decimal_len(n: u64) -> u64 {
    n.checked_ilog10().map_or(1, |d| u64::from(d) + 1)
}

/// Expands a Slurm hostlist such as `n[1-2],m5,o[009-011]` into host names, in order and
/// without de-duplication.
///
/// Parts are separated by commas outside brackets; each is a prefix with at most one
/// `[ranges]` group at its end. A range is `a` or `a-b` (inclusive; empty when `b < a`), and
/// numbers are zero-padded to the width of the range start as written (`o[009-011]` gives
/// `o009`, `o010`, `o011`; `n[8-11]` gives `n8` .. `n11`).
///
/// # Errors
///
/// A malformed hostlist is an `InvalidArgument` with TensorFlow's `ValueError` text, e.g.
/// `Invalid hostlist format "n[1-2": Invalid part: n[1-2`. More than [`DEFAULT_MAX_TASKS`]
/// names, more than [`EXPANSION_BYTES_LIMIT`] bytes of names, or a number beyond `i64` is an
/// `InvalidArgument` without a TensorFlow class.
pub fn expand_hostlist(hostlist: &str) -> Result<Vec<String>, ClusterError> {
    expand_hostlist_within(hostlist, DEFAULT_MAX_TASKS)
}

/// [`expand_hostlist`] with at most `max_names` names.
pub fn expand_hostlist_within(
    hostlist: &str,
    max_names: usize,
) -> Result<Vec<String>, ClusterError> {
    let fail = |failure: Failure| match failure {
        Failure::Tf(inner) => ClusterError::invalid(
            TfException::ValueError,
            format!("Invalid hostlist format \"{hostlist}\": {inner}"),
        ),
        Failure::Limit(why) => {
            ClusterError::invalid_input(format!("Hostlist \"{hostlist}\" is refused: {why}"))
        }
    };
    let mut hosts = Vec::new();
    let mut budget = Budget::new(max_names);
    let mut in_brackets = false;
    let mut start = 0;
    for (i, c) in hostlist.char_indices() {
        if in_brackets {
            match c {
                // TensorFlow asserts: no nested brackets (an empty AssertionError message).
                '[' => return Err(fail(Failure::Tf(String::new()))),
                ']' => in_brackets = false,
                _ => {}
            }
        } else if c == '[' {
            in_brackets = true;
        } else if c == ',' {
            let part = hostlist.get(start..i).unwrap_or_default();
            if part.is_empty() {
                // TensorFlow asserts: no empty part before a comma.
                return Err(fail(Failure::Tf(String::new())));
            }
            expand_part(part, &mut hosts, &mut budget).map_err(fail)?;
            start = i + c.len_utf8();
        }
    }
    let last = hostlist.get(start..).unwrap_or_default();
    if !last.is_empty() {
        expand_part(last, &mut hosts, &mut budget).map_err(fail)?;
    }
    Ok(hosts)
}

/// One part of a hostlist: `prefix` or `prefix[ranges]` (TensorFlow's regular expression
/// `([^,[\]]*)(\[([^\]]+)\])?$`, whose `$` also matches before a final newline).
fn expand_part(part: &str, hosts: &mut Vec<String>, budget: &mut Budget) -> Result<(), Failure> {
    let invalid = || Failure::Tf(format!("Invalid part: {part}"));
    let Some(open) = part.find([',', '[', ']']) else {
        budget.reserve(1, len_u64(part.len()))?;
        hosts.push(part.to_owned());
        return Ok(());
    };
    let (prefix, rest) = part.split_at(open);
    let Some(group) = rest.strip_prefix('[') else { return Err(invalid()) };
    let Some((ranges, tail)) = group.split_once(']') else { return Err(invalid()) };
    if ranges.is_empty() || !(tail.is_empty() || tail == "\n") {
        return Err(invalid());
    }
    for range in ranges.split(',') {
        expand_range(prefix, range, hosts, budget)?;
    }
    Ok(())
}

/// One range of a bracket group: `a` or `a-b`.
fn expand_range(
    prefix: &str,
    range: &str,
    hosts: &mut Vec<String>,
    budget: &mut Budget,
) -> Result<(), Failure> {
    let mut bounds = range.split('-');
    let first = bounds.next().unwrap_or_default();
    let last = match (bounds.next(), bounds.next()) {
        (None, _) => first,
        (Some(last), None) => last,
        // TensorFlow asserts: at most one dash.
        (Some(_), Some(_)) => return Err(Failure::Tf(String::new())),
    };
    let width = len_u64(first.chars().count());
    let lo = host_number(first)?;
    let hi = host_number(last)?;
    if hi < lo {
        return Ok(());
    }
    let count = (hi - lo).saturating_add(1);
    let bytes_each = len_u64(prefix.len()).saturating_add(width.max(decimal_len(hi)));
    budget.reserve(count, bytes_each)?;
    for n in lo..=hi {
        let digits = n.to_string();
        let mut name = String::with_capacity(prefix.len().saturating_add(digits.len()));
        name.push_str(prefix);
        for _ in len_u64(digits.len())..width {
            name.push('0');
        }
        name.push_str(&digits);
        hosts.push(name);
    }
    Ok(())
}

/// A range bound, parsed as Python's `int()` does.
fn host_number(text: &str) -> Result<u64, Failure> {
    match python_int(text) {
        Err(e) => Err(Failure::Tf(e.to_string())),
        Ok(Some(n)) => u64::try_from(n)
            .map_err(|_| Failure::Limit(format!("host number {} is negative", text.trim()))),
        Ok(None) => Err(Failure::Limit(format!("host number {} is too large", text.trim()))),
    }
}

fn is_ascii_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Expands a Slurm tasks-per-node list such as `3(x2),2,1` (`N` or `N(xR)`, meaning `N`
/// repeated `R` times) into `[3, 3, 2, 1]`.
///
/// # Errors
///
/// A malformed list is an `InvalidArgument` with TensorFlow's `ValueError` text, whose inner
/// message is empty: `Invalid tasks-per-node list format "x": `. A count beyond `u32`, or more
/// than [`DEFAULT_MAX_TASKS`] entries in all, is an `InvalidArgument` without a TensorFlow
/// class.
pub fn expand_tasks_per_node(tasks_per_node: &str) -> Result<Vec<u32>, ClusterError> {
    expand_tasks_per_node_within(tasks_per_node, DEFAULT_MAX_TASKS)
}

/// [`expand_tasks_per_node`] with at most `max_entries` entries (counted before any is
/// built: `1(x1000000)` is refused from its repetition alone).
pub fn expand_tasks_per_node_within(
    tasks_per_node: &str,
    max_entries: usize,
) -> Result<Vec<u32>, ClusterError> {
    let invalid = || {
        ClusterError::invalid(
            TfException::ValueError,
            format!("Invalid tasks-per-node list format \"{tasks_per_node}\": "),
        )
    };
    let refused = |why: String| {
        ClusterError::invalid_input(format!(
            "Tasks-per-node list \"{tasks_per_node}\" is refused: {why}"
        ))
    };
    let mut out: Vec<u32> = Vec::new();
    for part in tasks_per_node.split(',') {
        // TensorFlow's `(\d+)(\(x(\d+)\))?$`; `$` also matches before a final newline.
        let part = part.strip_suffix('\n').unwrap_or(part);
        let (count, repeat) = match part.split_once('(') {
            None => (part, None),
            Some((count, group)) => {
                let repeat = group.strip_prefix('x').and_then(|g| g.strip_suffix(')'));
                (count, Some(repeat.ok_or_else(invalid)?))
            }
        };
        if !is_ascii_digits(count) || repeat.is_some_and(|r| !is_ascii_digits(r)) {
            return Err(invalid());
        }
        let count: u32 =
            count.parse().map_err(|_| refused(format!("task count {count} is too large")))?;
        let repeat: u64 = match repeat {
            None => 1,
            Some(r) => r.parse().map_err(|_| refused(format!("repetition {r} is too large")))?,
        };
        let total = len_u64(out.len())
            .checked_add(repeat)
            .filter(|&n| n <= len_u64(max_entries))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                refused(format!(
                    "it expands to more than {max_entries} entries (the bound on resolved \
                     tasks; {RAISE_IT})"
                ))
            })?;
        out.resize(total, count);
    }
    Ok(out)
}
