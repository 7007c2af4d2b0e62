//! Caller input quoted back in error texts, capped.
//!
//! An error names the value it refuses, so the caller can find it; but an answer must never
//! grow with the junk it was sent (a 10,000-character id, a megabyte address). [`echo`] quotes
//! a value the way `{:?}` does (control characters escaped) and keeps at most
//! [`ECHO_CHARS`] characters of it, followed by `…` and the whole length. [`cap_quotes`] does
//! the same to the quoted values inside a message someone else wrote (serde's texts quote
//! unknown fields and variants in backticks and strings in double quotes).

/// How many characters of a caller's value an error text quotes.
pub const ECHO_CHARS: usize = 64;

/// The longest message [`cap_quotes`] lets through, in bytes (it ends in `…` and the length
/// beyond that).
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// `value` quoted as `{:?}` does, cut to [`ECHO_CHARS`] characters: `"abc"`, or
/// `"abc…"… (10000 bytes)` for a longer one.
pub fn echo(value: &str) -> String {
    match value.char_indices().nth(ECHO_CHARS) {
        None => format!("{value:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &value[..cut], value.len()),
    }
}

/// `value` as it is when it is short and plain (printable ASCII without spaces or quotes),
/// else quoted and cut like [`echo`]: for texts that name a value the way TensorFlow's do
/// (`Dataset id my_dataset not found`).
pub fn bare(value: &str) -> String {
    let plain = !value.is_empty()
        && value.len() <= ECHO_CHARS
        && value.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'`' | b'\\'));
    if plain { value.to_owned() } else { echo(value) }
}

/// `message` with every quoted run (between backticks, or a double-quoted string with its
/// escapes) longer than [`ECHO_CHARS`] characters cut like [`echo`] cuts, and the whole cut to
/// [`MAX_MESSAGE_BYTES`].
pub fn cap_quotes(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MAX_MESSAGE_BYTES + 32));
    let mut rest = message;
    while let Some(at) = rest.find(['`', '"']) {
        out.push_str(&rest[..at]);
        let quote = rest.as_bytes()[at];
        let inner = &rest[at + 1..];
        let Some(end) = closing(inner, quote) else {
            // Unterminated: the rest is the quoted value.
            push_capped(&mut out, quote, inner, false);
            rest = "";
            break;
        };
        push_capped(&mut out, quote, &inner[..end], true);
        rest = &inner[end + 1..];
    }
    out.push_str(rest);
    if out.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        let total = out.len();
        out.truncate(cut);
        out.push_str(&format!("… ({total} bytes)"));
    }
    out
}

/// The byte offset of the quote closing a run that starts at `s` (backslash escapes count
/// inside double quotes).
fn closing(s: &str, quote: u8) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quote == b'"' => i += 2,
            b if b == quote => return Some(i),
            _ => i += 1,
        }
    }
    None
}

fn push_capped(out: &mut String, quote: u8, inner: &str, closed: bool) {
    let q = char::from(quote);
    out.push(q);
    match inner.char_indices().nth(ECHO_CHARS) {
        None => {
            out.push_str(inner);
            if closed {
                out.push(q);
            }
        }
        Some((cut, _)) => {
            out.push_str(&inner[..cut]);
            out.push(q);
            out.push_str(&format!("… ({} bytes)", inner.len()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_quoted_whole() {
        assert_eq!(echo("w1:1"), "\"w1:1\"");
        assert_eq!(echo("a\nb"), "\"a\\nb\"");
        assert_eq!(echo(""), "\"\"");
    }

    #[test]
    fn long_values_keep_a_prefix_and_the_length() {
        let long = "x".repeat(10_000);
        let e = echo(&long);
        assert_eq!(e, format!("\"{}\"… (10000 bytes)", "x".repeat(ECHO_CHARS)));
        // Multi-byte characters are cut at a character boundary.
        let e = echo(&"é".repeat(100));
        assert!(e.starts_with(&format!("\"{}\"…", "é".repeat(ECHO_CHARS))), "{e}");
        assert!(e.ends_with("(200 bytes)"), "{e}");
        // Exactly ECHO_CHARS characters are not cut.
        assert!(!echo(&"y".repeat(ECHO_CHARS)).contains('…'));
    }

    #[test]
    fn bare_values_are_plain_and_short() {
        assert_eq!(bare("missing_dataset_id"), "missing_dataset_id");
        assert_eq!(bare("w1:1"), "w1:1");
        assert_eq!(bare("a b"), "\"a b\"");
        assert_eq!(bare(""), "\"\"");
        assert_eq!(bare("x\ny"), "\"x\\ny\"");
        assert!(bare(&"z".repeat(1000)).ends_with("(1000 bytes)"));
    }

    #[test]
    fn quoted_runs_in_messages_are_capped() {
        let long = "v".repeat(5_000);
        let m = format!("unknown variant `{long}`, expected one of `OFF`, `DYNAMIC`");
        let c = cap_quotes(&m);
        assert!(c.len() < 200, "{c}");
        assert!(c.ends_with("… (5000 bytes), expected one of `OFF`, `DYNAMIC`"), "{c}");
        let m = format!("invalid type: string \"{long}\\\"{long}\", expected u64 at line 1");
        let c = cap_quotes(&m);
        assert!(c.len() < 200, "{c}");
        assert!(c.ends_with(", expected u64 at line 1"), "{c}");
        // Short quotes and unquoted text are left alone.
        let m = "unknown field `foo`, expected `bar` or \"baz\"";
        assert_eq!(cap_quotes(m), m);
        // An unterminated quote is capped too, and any message is bounded.
        assert!(cap_quotes(&format!("`{long}")).len() < 200);
        let c = cap_quotes(&"word ".repeat(1_000));
        assert!(c.len() <= MAX_MESSAGE_BYTES + 20 && c.ends_with("(5000 bytes)"), "{c}");
    }
}
