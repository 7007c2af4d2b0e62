//! Strict JSON decoding shared by every surface that accepts JSON.
//!
//! `serde_json` silently keeps the last of two equal keys in one object; a TF_CONFIG or request
//! body with a repeated key is almost always a mistake (two `"cluster"` blocks, a job listed
//! twice), so Shardwise refuses it. Object key order is preserved (it is the order of
//! `ClusterSpec.jobs`, as in TensorFlow).
//!
//! Request bodies ([`from_slice_strict`]) also refuse an integer outside what a JSON number is
//! kept as exactly here, `-2^63` to `2^64 - 1` (`serde_json` reads a larger one as the nearest
//! float: `18446744073709551616` and `18446744073709551617` would be one value, and two `list`
//! datasets differing only there one dataset). A number written as a float (with a fraction or
//! an exponent) is a float, as asked.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A JSON document that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct JsonError {
    /// What went wrong, with the line and column where `serde_json` knows them.
    pub message: String,
}

impl JsonError {
    fn from_serde(err: &serde_json::Error) -> Self {
        JsonError { message: err.to_string() }
    }
}

/// How deeply a client's free-form JSON (dataset elements and split items, dataset metadata)
/// may nest arrays and objects. Such values are journaled inside a few levels of record
/// structure (up to about ten for a snapshot), and the journal decoder, like every
/// `serde_json` decoder, stops at 128 levels: a value admitted deeper could be acknowledged and
/// then never replayed. 64 leaves ample room while no real dataset comes close.
pub const MAX_NESTING: usize = 64;

/// Whether `value` nests arrays and objects more than `max` levels deep (a scalar has 0
/// levels, `[1]` and `{"a": 1}` have 1). Looks at most `max + 1` levels down.
pub fn nested_deeper_than(value: &Value, max: usize) -> bool {
    let children: Box<dyn Iterator<Item = &Value>> = match value {
        Value::Array(items) => Box::new(items.iter()),
        Value::Object(map) => Box::new(map.values()),
        _ => return false,
    };
    match max.checked_sub(1) {
        None => true,
        Some(rest) => children.into_iter().any(|v| nested_deeper_than(v, rest)),
    }
}

/// Parses `text` into a [`Value`], refusing duplicate keys in any object.
pub fn parse_strict(text: &str) -> Result<Value, JsonError> {
    let strict: Strict = serde_json::from_str(text).map_err(|e| JsonError::from_serde(&e))?;
    Ok(strict.0)
}

/// Parses `text` strictly (see [`parse_strict`]) and then decodes it into `T`.
pub fn from_str_strict<T: DeserializeOwned>(text: &str) -> Result<T, JsonError> {
    let value = parse_strict(text)?;
    serde_json::from_value(value).map_err(|e| JsonError::from_serde(&e))
}

/// Parses bytes strictly; invalid UTF-8 is reported like any other decoding error, and so is
/// an integer outside `-2^63..=2^64 - 1` ([`exact_integers`]).
pub fn from_slice_strict<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, JsonError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| JsonError { message: format!("request body is not valid UTF-8: {e}") })?;
    let value = parse_strict(text)?;
    exact_integers(text)?;
    serde_json::from_value(value).map_err(|e| JsonError::from_serde(&e))
}

/// The smallest integer a JSON number is kept as exactly, without its sign.
const MIN_INTEGER_MAGNITUDE: &str = "9223372036854775808";
/// The largest.
const MAX_INTEGER: &str = "18446744073709551615";

/// Refuses an integer literal of the JSON document `text` (valid JSON) that no 64-bit
/// integer holds: `serde_json` would read it as the nearest float, silently another value.
/// The error quotes the integer (cut short) and says where it is and what is allowed.
pub fn exact_integers(text: &str) -> Result<(), JsonError> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // A string: to its closing quote, past escapes.
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                let negative = bytes[i] == b'-';
                if negative {
                    i += 1;
                }
                let digits = i;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                let integer = &text[digits..i];
                let float = matches!(bytes.get(i), Some(b'.' | b'e' | b'E'));
                while i < bytes.len()
                    && matches!(bytes[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let bound = if negative { MIN_INTEGER_MAGNITUDE } else { MAX_INTEGER };
                // Without leading zeros (JSON has none), a longer integer is a larger one.
                let too_large = integer.len() > bound.len()
                    || (integer.len() == bound.len() && integer > bound);
                if !float && too_large {
                    let line = 1 + bytes[..start].iter().filter(|&&b| b == b'\n').count();
                    let line_start =
                        bytes[..start].iter().rposition(|&b| b == b'\n').map_or(0, |n| n + 1);
                    return Err(JsonError {
                        message: format!(
                            "the integer {} at line {line} column {} is outside the integers a \
                             JSON number is kept as exactly (-{MIN_INTEGER_MAGNITUDE} to \
                             {MAX_INTEGER}); write it as a string, or as a float (with a \
                             fraction or an exponent) to keep it approximately",
                            crate::echo::echo(&text[start..i]),
                            start - line_start + 1
                        ),
                    });
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// A [`Value`] whose decoding rejects duplicate object keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Strict(pub Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Strict::deserialize(d).map(|s| s.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate key {key:?} in a JSON object"
                )));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn nesting_depth() {
        use super::nested_deeper_than;
        use serde_json::json;
        assert!(!nested_deeper_than(&json!(1), 0));
        assert!(nested_deeper_than(&json!([]), 0));
        assert!(!nested_deeper_than(&json!([1, {"a": 2}]), 2));
        assert!(nested_deeper_than(&json!([1, {"a": [2]}]), 2));
        assert!(!nested_deeper_than(&json!([1, {"a": [2]}]), 3));
    }

    use super::*;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        let err = parse_strict(r#"{"a": {"b": 1, "b": 2}}"#).unwrap_err();
        assert!(err.message.contains("duplicate key \"b\""), "{}", err.message);
        assert!(parse_strict(r#"{"a": 1, "a": 1}"#).is_err());
        assert!(parse_strict(r#"[{"x": 1}, {"x": 2}]"#).is_ok());
    }

    #[test]
    fn key_order_is_preserved() {
        let v = parse_strict(r#"{"worker": [], "ps": [], "chief": []}"#).unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["worker", "ps", "chief"]);
    }

    #[test]
    fn integers_past_64_bits_are_refused_not_rounded() {
        let ok = |t: &str| from_slice_strict::<Value>(t.as_bytes());
        for fits in [
            "[18446744073709551615, -9223372036854775808, 0, -0, 1e300, 1.5, 18446744073709551616.0]",
            r#"{"a": "18446744073709551616", "b\"99999999999999999999": 1}"#,
            "[1E30, 123456789012345678901234567890e0, -99999999999999999999.5]",
        ] {
            assert!(ok(fits).is_ok(), "{fits}: {:?}", ok(fits));
        }
        assert_eq!(ok("[18446744073709551615]").unwrap()[0].as_u64(), Some(u64::MAX));
        for (past, quoted) in [
            ("[18446744073709551616]", "\"18446744073709551616\" at line 1 column 2"),
            (
                "{\"a\":\n  [1, -9223372036854775809]}",
                "\"-9223372036854775809\" at line 2 column 7",
            ),
            ("[100000000000000000000000]", "\"100000000000000000000000\""),
        ] {
            let err = ok(past).unwrap_err().message;
            assert!(err.contains(quoted) && err.contains("-9223372036854775808 to"), "{err}");
        }
        let long = format!("[{}]", "9".repeat(10_000));
        let err = ok(&long).unwrap_err().message;
        assert!(err.len() < 400, "{err}");
        // Other surfaces keep serde_json's reading.
        assert!(parse_strict("[18446744073709551616]").is_ok());
    }

    #[test]
    fn trailing_garbage_and_bad_utf8_are_errors() {
        assert!(parse_strict("{} x").is_err());
        assert!(from_slice_strict::<Value>(b"\xff").is_err());
    }
}
