//! Decoding the bytes of a file (handed in by the caller) into elements.

use serde_json::Value;

use super::error::{DatasetError, invalid, quoted};

/// A lazy line-by-line decoder over one file's bytes (`lines` and `jsonl` formats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TextCursor {
    path: String,
    bytes: Vec<u8>,
    offset: usize,
    line: u64,
    jsonl: bool,
}

impl TextCursor {
    /// A decoder for `path`, whose contents are `bytes`; `jsonl` selects JSON Lines.
    pub(super) fn new(path: String, bytes: &[u8], jsonl: bool) -> Self {
        TextCursor { path, bytes: bytes.to_vec(), offset: 0, line: 0, jsonl }
    }

    /// The next element, an error for an undecodable line, or `None` at the end of the file.
    pub(super) fn next_element(&mut self) -> Option<Result<Value, DatasetError>> {
        loop {
            let rest = self.bytes.get(self.offset..).filter(|rest| !rest.is_empty())?;
            let (line, consumed) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (rest.split_at_checked(i).map_or(rest, |(line, _)| line), i + 1),
                None => (rest, rest.len()),
            };
            self.offset = self.offset.saturating_add(consumed);
            self.line = self.line.saturating_add(1);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Ok(text) = std::str::from_utf8(line) else {
                return Some(Err(invalid(format!(
                    "file {} line {} is not valid UTF-8",
                    quoted(&self.path),
                    self.line
                ))));
            };
            if !self.jsonl {
                return Some(Ok(Value::String(text.to_owned())));
            }
            if text.trim().is_empty() {
                continue;
            }
            return Some(crate::json::from_str_strict::<Value>(text).map_err(|e| {
                invalid(format!(
                    "file {} line {} is not valid JSON: {e}",
                    quoted(&self.path),
                    self.line
                ))
            }));
        }
    }
}

impl TextCursor {
    /// The next line's bytes (without its `\n` or `\r\n`) and the bytes it takes up, from
    /// `offset`; `None` at the end of the file.
    fn line_at(&self, offset: usize) -> Option<(&[u8], usize)> {
        let rest = self.bytes.get(offset..).filter(|rest| !rest.is_empty())?;
        let (line, consumed) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (rest.split_at_checked(i).map_or(rest, |(line, _)| line), i + 1),
            None => (rest, rest.len()),
        };
        Some((line.strip_suffix(b"\r").unwrap_or(line), consumed))
    }

    /// Whether a JSON Lines line holds no record (blank lines are skipped).
    fn is_blank(line: &[u8]) -> bool {
        std::str::from_utf8(line).is_ok_and(|text| text.trim().is_empty())
    }

    /// Passes over the next `n` records without decoding them (they were read before: a
    /// split resumed part way); fewer when the file has fewer.
    pub(super) fn skip_records(&mut self, n: u64) {
        let mut left = n;
        while left > 0 {
            let Some((line, consumed)) = self.line_at(self.offset) else { return };
            let record = !self.jsonl || !Self::is_blank(line);
            self.offset = self.offset.saturating_add(consumed);
            self.line = self.line.saturating_add(1);
            if record {
                left -= 1;
            }
        }
    }

    /// Whether no record is left: the end of the file, or (JSON Lines) only blank lines,
    /// which it passes over.
    pub(super) fn at_end(&mut self) -> bool {
        if self.jsonl {
            while let Some((line, consumed)) = self.line_at(self.offset) {
                if !Self::is_blank(line) {
                    return false;
                }
                self.offset = self.offset.saturating_add(consumed);
                self.line = self.line.saturating_add(1);
            }
        }
        self.offset >= self.bytes.len()
    }
}

/// The single element of a file in the `bytes` format: its bytes, whatever they are, as one
/// base64 string (RFC 4648 standard alphabet, with padding), so that the element has one type.
pub(super) fn bytes_element(bytes: &[u8]) -> Value {
    use base64::Engine as _;
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lines(bytes: &[u8], jsonl: bool) -> Vec<Result<Value, DatasetError>> {
        let mut cursor = TextCursor::new("f.txt".into(), bytes, jsonl);
        std::iter::from_fn(|| cursor.next_element()).collect()
    }

    fn ok_lines(bytes: &[u8], jsonl: bool) -> Vec<Value> {
        lines(bytes, jsonl).into_iter().map(Result::unwrap).collect()
    }

    #[test]
    fn line_splitting() {
        assert_eq!(ok_lines(b"", false), Vec::<Value>::new());
        assert_eq!(ok_lines(b"a", false), [json!("a")]);
        assert_eq!(ok_lines(b"a\n", false), [json!("a")]);
        assert_eq!(ok_lines(b"a\r\nb\r\n", false), [json!("a"), json!("b")]);
        assert_eq!(ok_lines(b"a\n\nb", false), [json!("a"), json!(""), json!("b")]);
        assert_eq!(ok_lines(b"\n", false), [json!("")]);
        assert_eq!(ok_lines(b"x\r", false), [json!("x")]);
    }

    #[test]
    fn jsonl_values_and_errors() {
        assert_eq!(
            ok_lines(b"{\"a\": 1}\r\n\n  \n[1,2]\n\"s\"", true),
            [json!({"a": 1}), json!([1, 2]), json!("s")]
        );
        let out = lines(b"1\n\n{bad\n2\n", true);
        assert_eq!(out[0], Ok(json!(1)));
        let err = out[1].clone().unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert!(err.message().starts_with("file \"f.txt\" line 3 is not valid JSON"), "{err}");
        let err = lines(b"{\"k\": 1, \"k\": 2}", true)[0].clone().unwrap_err();
        assert!(err.message().contains("duplicate key"), "{err}");
        let err = lines(b"ok\n\xff\n", false)[1].clone().unwrap_err();
        assert!(err.message().contains("line 2 is not valid UTF-8"), "{err}");
    }

    #[test]
    fn records_are_skipped_and_the_end_is_seen_early() {
        let mut c = TextCursor::new("f".into(), b"a\r\nb\n\nc\n", false);
        assert!(!c.at_end());
        c.skip_records(2);
        assert_eq!(c.next_element(), Some(Ok(json!(""))));
        assert!(!c.at_end());
        assert_eq!(c.next_element(), Some(Ok(json!("c"))));
        assert!(c.at_end());
        c.skip_records(5);
        assert_eq!(c.next_element(), None);
        // JSON Lines: blank lines are not records, and trailing ones are the end.
        let mut c = TextCursor::new("f".into(), b"\n1\n \n2\n3\n\n  \r\n", true);
        c.skip_records(2);
        assert_eq!(c.next_element(), Some(Ok(json!(3))));
        assert!(c.at_end());
        assert_eq!(c.next_element(), None);
        let mut c = TextCursor::new("f".into(), b"1\n\n{bad\n", true);
        assert_eq!(c.next_element(), Some(Ok(json!(1))));
        assert!(!c.at_end(), "an undecodable line is not the end");
        let err = c.next_element().unwrap().unwrap_err();
        assert!(err.message().contains("line 3"), "{err}");
        let mut c = TextCursor::new("f".into(), b"", true);
        assert!(c.at_end());
    }

    #[test]
    fn bytes_format_is_always_base64() {
        // UTF-8 or not, a file is one base64 string (RFC 4648 test vectors and binary).
        assert_eq!(bytes_element(b"hi\n"), json!("aGkK"));
        assert_eq!(bytes_element(&[0xff, 0, 7]), json!("/wAH"));
        assert_eq!(bytes_element(&[0xfb, 0xff]), json!("+/8="));
        assert_eq!(bytes_element(b""), json!(""));
        for (text, encoded) in
            [("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foobar", "Zm9vYmFy")]
        {
            assert_eq!(bytes_element(text.as_bytes()), json!(encoded));
        }
    }
}
