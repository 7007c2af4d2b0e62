//! Python `repr()` / `str()` renderings of JSON values.
//!
//! TensorFlow's error messages embed Python reprs (`No such job in cluster: 'worker'`,
//! `Task address None must be bytes or unicode`); Shardwise reproduces those texts exactly, so it
//! needs the same renderings of the values a JSON input can carry.

use serde_json::Value;

/// `repr(s)` for a Python `str`.
pub fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `repr(v)` for the Python object `json.loads` would produce for `v`.
pub fn repr(v: &Value) -> String {
    match v {
        Value::String(s) => repr_str(s),
        other => str_of(other),
    }
}

/// `str(v)` for the Python object `json.loads` would produce for `v` (strings unquoted).
pub fn str_of(v: &Value) -> String {
    match v {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => {
            if n.is_f64() {
                let f = n.as_f64().unwrap_or(f64::NAN);
                repr_float(f)
            } else {
                n.to_string()
            }
        }
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(repr).collect();
            format!("[{}]", parts.join(", "))
        }
        Value::Object(map) => {
            let parts: Vec<String> =
                map.iter().map(|(k, v)| format!("{}: {}", repr_str(k), repr(v))).collect();
            format!("{{{}}}", parts.join(", "))
        }
    }
}

/// Python's shortest round-trip float repr (`1.0`, `1e+16`, `0.1`).
pub fn repr_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    // Rust's `{:?}` gives the shortest round-trip digits; Python switches to exponent
    // notation below 1e-4 and from 1e16 on.
    let abs = f.abs();
    if abs != 0.0 && !(1e-4..1e16).contains(&abs) {
        let s = format!("{f:e}");
        let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mant}e{sign}{:02}", exp.abs());
    }
    let s = format!("{f:?}");
    if s.contains('.') || s.contains('e') { s } else { format!("{s}.0") }
}

/// Python's repr of a set of ints, as in `KeyError` texts: `{7}`, `{1, 3}`.
pub fn repr_int_set(items: &[i64]) -> String {
    let parts: Vec<String> = items.iter().map(|i| i.to_string()).collect();
    format!("{{{}}}", parts.join(", "))
}

/// A text Python's `int(s)` refuses in base 10, with Python's `ValueError` message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid literal for int() with base 10: {literal}")]
pub struct InvalidIntLiteral {
    /// The text, as Python's `repr` shows it.
    pub literal: String,
}

/// Parses a string the way Python's `int(s)` does for base 10.
///
/// Accepts surrounding whitespace, one sign, ASCII digits and single underscores between
/// digits. Values outside `i64` are reported as `None` in the `Ok` position's sibling:
/// the caller turns that into its own out-of-range error.
pub fn python_int(s: &str) -> Result<Option<i64>, InvalidIntLiteral> {
    let invalid = || InvalidIntLiteral { literal: repr_str(s) };
    let t = s.trim();
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') {
        return Err(invalid());
    }
    let mut value: i128 = 0;
    let mut overflow = false;
    let mut prev_underscore = false;
    for b in digits.bytes() {
        match b {
            b'0'..=b'9' => {
                prev_underscore = false;
                if !overflow {
                    value = value * 10 + i128::from(b - b'0');
                    if value > i128::from(i64::MAX) + 1 {
                        overflow = true;
                    }
                }
            }
            b'_' if !prev_underscore => prev_underscore = true,
            _ => return Err(invalid()),
        }
    }
    if overflow {
        return Ok(None);
    }
    let value = if neg { -value } else { value };
    Ok(i64::try_from(value).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reprs_match_python() {
        assert_eq!(repr_str("worker"), "'worker'");
        assert_eq!(repr_str("it's"), "\"it's\"");
        assert_eq!(repr_str("a'\"b"), "'a\\'\"b'");
        assert_eq!(repr_str("tab\there"), "'tab\\there'");
        assert_eq!(repr(&json!(null)), "None");
        assert_eq!(repr(&json!(123)), "123");
        assert_eq!(repr(&json!(1.5)), "1.5");
        assert_eq!(repr(&json!(2.0)), "2.0");
        assert_eq!(repr(&json!(["a", 1, true])), "['a', 1, True]");
        assert_eq!(repr(&json!({"a": null})), "{'a': None}");
        assert_eq!(repr_float(1e16), "1e+16");
        assert_eq!(repr_float(1.5e-5), "1.5e-05");
        assert_eq!(repr_int_set(&[1, 3]), "{1, 3}");
    }

    #[test]
    fn python_int_semantics() {
        assert_eq!(python_int("1"), Ok(Some(1)));
        assert_eq!(python_int(" -7 "), Ok(Some(-7)));
        assert_eq!(python_int("007"), Ok(Some(7)));
        assert_eq!(python_int("1_000"), Ok(Some(1000)));
        assert_eq!(python_int("99999999999999999999999"), Ok(None));
        assert_eq!(
            python_int("a").unwrap_err().to_string(),
            "invalid literal for int() with base 10: 'a'"
        );
        assert_eq!(python_int("a"), Err(InvalidIntLiteral { literal: "'a'".into() }));
        for bad in ["", " ", "1.5", "_1", "1_", "1__0", "+-1", "0x1"] {
            assert!(python_int(bad).is_err(), "{bad:?}");
        }
    }
}
