//! Kubernetes label selectors (the string form `labels.Parse` accepts), parsed and matched.
//!
//! A selector is a comma-separated list of requirements, all of which must hold:
//!
//! | form                      | meaning                                        |
//! |---------------------------|------------------------------------------------|
//! | `key`                     | the label is present                           |
//! | `!key`                    | the label is absent                            |
//! | `key=value`, `key==value` | the label is present and equal to `value`      |
//! | `key!=value`              | the label is absent or different from `value`  |
//! | `key in (a,b)`            | the label is present and one of the values     |
//! | `key notin (a,b)`         | the label is absent or none of the values      |
//! | `key>3`, `key<3`          | the label is present, an integer, and compares |
//!
//! The empty selector matches everything. Whitespace between tokens is ignored; `in` and
//! `notin` are keywords only where an operator is expected. Keys are qualified names
//! (`[prefix/]name`, the prefix a DNS-1123 subdomain) and values are label values, as Kubernetes
//! validates them.
//!
//! Two deliberate differences from Kubernetes: `in`/`notin` are ordinary words where a key or a
//! value is expected (so `in=x` and `a in (in)` parse), and an empty value inside a set
//! (`a in (x,)`, `a in ()`) is an error rather than an implicit `""`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use super::error::ClusterError;

/// Longest name part of a key, and longest value, in characters.
const MAX_NAME_LEN: usize = 63;
/// Longest key prefix (a DNS-1123 subdomain), in characters.
const MAX_PREFIX_LEN: usize = 253;

/// A parsed label selector: its original text and its requirements, in the order written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector {
    text: String,
    requirements: Vec<Requirement>,
}

/// The relation a [`Requirement`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `key=value`: present and equal.
    Equals,
    /// `key==value`: present and equal (a synonym of [`Operator::Equals`], kept for display).
    DoubleEquals,
    /// `key!=value`: absent or different.
    NotEquals,
    /// `key in (a,b)`: present and in the set.
    In,
    /// `key notin (a,b)`: absent or not in the set.
    NotIn,
    /// `key`: present.
    Exists,
    /// `!key`: absent.
    DoesNotExist,
    /// `key>n`: present, an integer, and greater than `n`.
    GreaterThan,
    /// `key<n`: present, an integer, and less than `n`.
    LessThan,
}

impl Operator {
    /// The operator as written in a selector (`"="`, `"in"`, `"!"`, ...; `""` for
    /// [`Operator::Exists`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Exists => "",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        }
    }
}

/// One condition of a selector on one label.
///
/// `values` holds exactly one value for `=`, `==`, `!=`, `>` and `<`, none for
/// [`Operator::Exists`] and [`Operator::DoesNotExist`], and a non-empty, sorted, deduplicated
/// set for [`Operator::In`] and [`Operator::NotIn`] (as produced by [`LabelSelector::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// The label key, e.g. `app` or `example.com/role`.
    pub key: String,
    /// The relation checked.
    pub operator: Operator,
    /// The operand(s).
    pub values: Vec<String>,
}

impl Requirement {
    /// Whether `labels` satisfies this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let label = labels.get(&self.key);
        let listed = |v: &String| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In => label.is_some_and(listed),
            Operator::NotEquals | Operator::NotIn => !label.is_some_and(listed),
            Operator::Exists => label.is_some(),
            Operator::DoesNotExist => label.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(actual) = label.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let Some(bound) = self.values.first().and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan { actual > bound } else { actual < bound }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = self.values.join(",");
        match self.operator {
            Operator::Exists => f.write_str(&self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::In | Operator::NotIn => {
                write!(f, "{} {} ({values})", self.key, self.operator.as_str())
            }
            Operator::Equals
            | Operator::DoubleEquals
            | Operator::NotEquals
            | Operator::GreaterThan
            | Operator::LessThan => write!(f, "{}{}{values}", self.key, self.operator.as_str()),
        }
    }
}

impl LabelSelector {
    /// Parses a selector in Kubernetes' string syntax.
    ///
    /// Fails with an `INVALID_ARGUMENT` error naming the selector, what was wrong and the
    /// (1-based, in characters) column where it was found.
    pub fn parse(text: &str) -> Result<Self, ClusterError> {
        let mut parser = Parser { text, tokens: lex(text), pos: 0 };
        let requirements = parser.selector()?;
        Ok(LabelSelector { text: text.to_owned(), requirements })
    }

    /// The text the selector was parsed from, unchanged.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The requirements, in the order written.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether `labels` satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this is the empty selector, which matches every label set.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical form: requirements in the order written, joined by `,`, without
    /// whitespace except around `in`/`notin`, sets sorted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl FromStr for LabelSelector {
    type Err = ClusterError;

    fn from_str(text: &str) -> Result<Self, ClusterError> {
        LabelSelector::parse(text)
    }
}

// ---------------------------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a str),
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
}

impl Tok<'_> {
    fn describe(self) -> String {
        let symbol = match self {
            Tok::Word(word) => return format!("{word:?}"),
            Tok::Bang => "!",
            Tok::Eq => "=",
            Tok::DoubleEq => "==",
            Tok::NotEq => "!=",
            Tok::Gt => ">",
            Tok::Lt => "<",
            Tok::Open => "(",
            Tok::Close => ")",
            Tok::Comma => ",",
        };
        format!("'{symbol}'")
    }
}

#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    tok: Tok<'a>,
    /// Byte offset of the token's first character.
    at: usize,
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_symbol(c: char) -> bool {
    matches!(c, '!' | '=' | '>' | '<' | '(' | ')' | ',')
}

/// Splits `text` into tokens. Never fails: any run of characters that are neither whitespace
/// nor symbols is a word, validated later as a key or a value.
fn lex(text: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let tok = match c {
            c if is_space(c) => continue,
            '!' if chars.next_if(|&(_, d)| d == '=').is_some() => Tok::NotEq,
            '!' => Tok::Bang,
            '=' if chars.next_if(|&(_, d)| d == '=').is_some() => Tok::DoubleEq,
            '=' => Tok::Eq,
            '>' => Tok::Gt,
            '<' => Tok::Lt,
            '(' => Tok::Open,
            ')' => Tok::Close,
            ',' => Tok::Comma,
            _ => {
                let mut end = at + c.len_utf8();
                while let Some((next_at, d)) =
                    chars.next_if(|&(_, d)| !is_space(d) && !is_symbol(d))
                {
                    end = next_at + d.len_utf8();
                }
                Tok::Word(text.get(at..end).unwrap_or_default())
            }
        };
        tokens.push(Token { tok, at });
    }
    tokens
}

// ---------------------------------------------------------------------------------------------
// Parser

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token<'a>>,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Token<'a>> {
        self.tokens.get(self.pos).copied()
    }

    fn bump(&mut self) -> Option<Token<'a>> {
        let token = self.peek();
        if token.is_some() {
            self.pos += 1;
        }
        token
    }

    /// 1-based column, in characters, of the byte offset `at`.
    fn column(&self, at: usize) -> usize {
        self.text.get(..at).map_or(0, |s| s.chars().count()) + 1
    }

    fn error(&self, what: impl fmt::Display) -> ClusterError {
        ClusterError::invalid_input(format!("invalid label selector {:?}: {what}", self.text))
    }

    /// "expected X but found Y at column N" / "expected X but reached the end".
    fn unexpected(&self, expected: &str, found: Option<Token<'_>>) -> ClusterError {
        match found {
            Some(token) => self.error(format_args!(
                "expected {expected} but found {} at column {}",
                token.tok.describe(),
                self.column(token.at)
            )),
            None => self.error(format_args!("expected {expected} but reached the end")),
        }
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, ClusterError> {
        let mut requirements = Vec::new();
        if self.tokens.is_empty() {
            return Ok(requirements);
        }
        loop {
            let requirement = self.requirement(!requirements.is_empty())?;
            match self.bump() {
                None => {
                    requirements.push(requirement);
                    return Ok(requirements);
                }
                Some(Token { tok: Tok::Comma, .. }) => requirements.push(requirement),
                other => {
                    let expected = format!("',' or the end after \"{requirement}\"");
                    return Err(self.unexpected(&expected, other));
                }
            }
        }
    }

    fn requirement(&mut self, after_comma: bool) -> Result<Requirement, ClusterError> {
        let first = self.bump();
        let (key, key_at, negated) = match first {
            Some(Token { tok: Tok::Word(word), at }) => (word, at, false),
            Some(Token { tok: Tok::Bang, .. }) => match self.bump() {
                Some(Token { tok: Tok::Word(word), at }) => (word, at, true),
                other => return Err(self.unexpected("a key after '!'", other)),
            },
            other => {
                let expected = if after_comma { "a key or '!' after ','" } else { "a key or '!'" };
                return Err(self.unexpected(expected, other));
            }
        };
        if let Err(why) = check_key(key) {
            return Err(self.error(format_args!(
                "invalid key {key:?} at column {}: {why}",
                self.column(key_at)
            )));
        }
        let key = key.to_owned();
        if negated {
            return Ok(Requirement { key, operator: Operator::DoesNotExist, values: Vec::new() });
        }

        let operator = match self.peek().map(|t| t.tok) {
            None | Some(Tok::Comma) => {
                return Ok(Requirement { key, operator: Operator::Exists, values: Vec::new() });
            }
            Some(Tok::Eq) => Operator::Equals,
            Some(Tok::DoubleEq) => Operator::DoubleEquals,
            Some(Tok::NotEq) => Operator::NotEquals,
            Some(Tok::Gt) => Operator::GreaterThan,
            Some(Tok::Lt) => Operator::LessThan,
            Some(Tok::Word("in")) => Operator::In,
            Some(Tok::Word("notin")) => Operator::NotIn,
            Some(_) => {
                let expected = format!(
                    "an operator ('=', '==', '!=', 'in', 'notin', '>', '<'), ',' or the end \
                     after key {key:?}"
                );
                return Err(self.unexpected(&expected, self.peek()));
            }
        };
        self.pos += 1;
        let op = operator.as_str();

        let values = match operator {
            Operator::In | Operator::NotIn => self.value_set(op)?,
            Operator::GreaterThan | Operator::LessThan => match self.bump() {
                Some(Token { tok: Tok::Word(word), at }) => {
                    if check_value(word).is_err() || word.parse::<i64>().is_err() {
                        return Err(self.error(format_args!(
                            "the value {word:?} after '{op}' at column {} must be a \
                             non-negative integer that fits in 64 bits",
                            self.column(at)
                        )));
                    }
                    vec![word.to_owned()]
                }
                other => {
                    return Err(self.unexpected(&format!("an integer after '{op}'"), other));
                }
            },
            _ => match self.peek() {
                // `key=` (end or `,` follows) compares with the empty value.
                None | Some(Token { tok: Tok::Comma, .. }) => vec![String::new()],
                Some(Token { tok: Tok::Word(word), at }) => {
                    self.pos += 1;
                    vec![self.value(word, at)?]
                }
                other => {
                    let expected = format!("a value, ',' or the end after '{op}'");
                    return Err(self.unexpected(&expected, other));
                }
            },
        };
        Ok(Requirement { key, operator, values })
    }

    /// `( value (, value)* )`, after `in`/`notin`.
    fn value_set(&mut self, op: &str) -> Result<Vec<String>, ClusterError> {
        match self.bump() {
            Some(Token { tok: Tok::Open, .. }) => {}
            other => return Err(self.unexpected(&format!("'(' after '{op}'"), other)),
        }
        let mut values = BTreeSet::new();
        match self.bump() {
            Some(Token { tok: Tok::Word(word), at }) => {
                values.insert(self.value(word, at)?);
            }
            Some(Token { tok: Tok::Close, at }) => {
                return Err(self.error(format_args!(
                    "the set of values after '{op}' is empty at column {}; it needs at \
                     least one value",
                    self.column(at)
                )));
            }
            other => return Err(self.unexpected("a value or ')'", other)),
        }
        loop {
            match self.bump() {
                Some(Token { tok: Tok::Close, .. }) => return Ok(values.into_iter().collect()),
                Some(Token { tok: Tok::Comma, .. }) => match self.bump() {
                    Some(Token { tok: Tok::Word(word), at }) => {
                        values.insert(self.value(word, at)?);
                    }
                    other => return Err(self.unexpected("a value after ','", other)),
                },
                other => return Err(self.unexpected("',' or ')'", other)),
            }
        }
    }

    fn value(&self, word: &str, at: usize) -> Result<String, ClusterError> {
        match check_value(word) {
            Ok(()) => Ok(word.to_owned()),
            Err(why) => Err(self.error(format_args!(
                "invalid value {word:?} at column {}: {why}",
                self.column(at)
            ))),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation of keys and values

const NAME_CHARSET: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must \
                            start and end with an alphanumeric character";

/// A qualified name: `[prefix/]name`.
fn check_key(key: &str) -> Result<(), String> {
    let name = match key.split_once('/') {
        None => key,
        Some((prefix, name)) => {
            if name.contains('/') {
                return Err("a key may contain at most one '/'".to_owned());
            }
            if prefix.is_empty() {
                return Err("the prefix before '/' must not be empty".to_owned());
            }
            check_prefix(prefix)?;
            name
        }
    };
    if name.is_empty() {
        return Err("the name part must not be empty".to_owned());
    }
    if !is_name(name) {
        return Err(format!("the name part {NAME_CHARSET}"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "the name part must be no more than {MAX_NAME_LEN} characters (it has {})",
            name.len()
        ));
    }
    Ok(())
}

/// A DNS-1123 subdomain.
fn check_prefix(prefix: &str) -> Result<(), String> {
    let lower_alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let label_ok = |label: &str| {
        label.starts_with(lower_alnum)
            && label.ends_with(lower_alnum)
            && label.chars().all(|c| lower_alnum(c) || c == '-')
    };
    if !prefix.split('.').all(label_ok) {
        return Err(format!(
            "the prefix {prefix:?} must be a DNS-1123 subdomain: lowercase alphanumeric \
             characters, '-' or '.', each '.'-separated part starting and ending with an \
             alphanumeric character"
        ));
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(format!(
            "the prefix must be no more than {MAX_PREFIX_LEN} characters (it has {})",
            prefix.len()
        ));
    }
    Ok(())
}

/// Non-empty, alphanumeric at both ends, alphanumerics, `-`, `_` and `.` inside.
fn is_name(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
}

/// A label value: empty, or a name of at most 63 characters.
fn check_value(value: &str) -> Result<(), String> {
    if !value.is_empty() && !is_name(value) {
        return Err(format!("a value {NAME_CHARSET}"));
    }
    if value.len() > MAX_NAME_LEN {
        return Err(format!(
            "a value must be no more than {MAX_NAME_LEN} characters (it has {})",
            value.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.to_owned(),
            operator,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    fn parse_err(text: &str) -> ClusterError {
        match LabelSelector::parse(text) {
            Ok(s) => panic!("{text:?} parsed as {s:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn parses_valid_selectors() {
        use Operator::*;
        let cases: Vec<(&str, Vec<Requirement>, &str)> = vec![
            ("", vec![], ""),
            ("   ", vec![], ""),
            ("app", vec![req("app", Exists, &[])], "app"),
            ("!app", vec![req("app", DoesNotExist, &[])], "!app"),
            ("! app", vec![req("app", DoesNotExist, &[])], "!app"),
            ("app=web", vec![req("app", Equals, &["web"])], "app=web"),
            (" app = web ", vec![req("app", Equals, &["web"])], "app=web"),
            ("app==web", vec![req("app", DoubleEquals, &["web"])], "app==web"),
            ("app!=web", vec![req("app", NotEquals, &["web"])], "app!=web"),
            ("app=", vec![req("app", Equals, &[""])], "app="),
            ("a==", vec![req("a", DoubleEquals, &[""])], "a=="),
            ("app!=", vec![req("app", NotEquals, &[""])], "app!="),
            ("app=,tier", vec![req("app", Equals, &[""]), req("tier", Exists, &[])], "app=,tier"),
            ("tier in (b,a,b)", vec![req("tier", In, &["a", "b"])], "tier in (a,b)"),
            ("app in ( a , b )", vec![req("app", In, &["a", "b"])], "app in (a,b)"),
            ("app in(a)", vec![req("app", In, &["a"])], "app in (a)"),
            ("app notin (x)", vec![req("app", NotIn, &["x"])], "app notin (x)"),
            ("x>3", vec![req("x", GreaterThan, &["3"])], "x>3"),
            ("x < 10", vec![req("x", LessThan, &["10"])], "x<10"),
            ("in=x", vec![req("in", Equals, &["x"])], "in=x"),
            ("notin", vec![req("notin", Exists, &[])], "notin"),
            ("in in (in,notin)", vec![req("in", In, &["in", "notin"])], "in in (in,notin)"),
            (
                "example.com/role=ps",
                vec![req("example.com/role", Equals, &["ps"])],
                "example.com/role=ps",
            ),
            (
                "k8s.io/a-b_c.D=V.1-x_y",
                vec![req("k8s.io/a-b_c.D", Equals, &["V.1-x_y"])],
                "k8s.io/a-b_c.D=V.1-x_y",
            ),
            (
                "app=web,tier in (a,b),!legacy,env!=prod,x>3",
                vec![
                    req("app", Equals, &["web"]),
                    req("tier", In, &["a", "b"]),
                    req("legacy", DoesNotExist, &[]),
                    req("env", NotEquals, &["prod"]),
                    req("x", GreaterThan, &["3"]),
                ],
                "app=web,tier in (a,b),!legacy,env!=prod,x>3",
            ),
            (
                "\tapp = web ,\n tier notin ( x ) , ! legacy ",
                vec![
                    req("app", Equals, &["web"]),
                    req("tier", NotIn, &["x"]),
                    req("legacy", DoesNotExist, &[]),
                ],
                "app=web,tier notin (x),!legacy",
            ),
        ];
        for (text, requirements, display) in cases {
            let selector = LabelSelector::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(selector.requirements(), requirements.as_slice(), "{text:?}");
            assert_eq!(selector.as_str(), text);
            assert_eq!(selector.to_string(), display, "{text:?}");
            assert_eq!(selector.is_everything(), requirements.is_empty());
            let from_str: LabelSelector = text.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(from_str, selector);
            let reparsed = LabelSelector::parse(display).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(reparsed.requirements(), selector.requirements());
        }
    }

    #[test]
    fn accepts_limits() {
        let name63 = "a".repeat(63);
        let prefix253 = format!("{}.b", "a".repeat(251));
        let key = format!("{prefix253}/{name63}");
        let text = format!("{key}={name63}");
        let selector = LabelSelector::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(selector.requirements(), [req(&key, Operator::Equals, &[&name63])]);
        assert!(LabelSelector::parse("x>9223372036854775807").is_ok());
        assert!(LabelSelector::parse("x>0000000000000000000000000001").is_ok());
    }

    #[test]
    fn matches_labels() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
        let cases: &[Case<'_>] = &[
            ("", &[], true),
            ("", &[("a", "b")], true),
            ("app", &[("app", "")], true),
            ("app", &[("other", "x")], false),
            ("!app", &[], true),
            ("!app", &[("app", "x")], false),
            ("app=web", &[("app", "web")], true),
            ("app=web", &[("app", "db")], false),
            ("app=web", &[], false),
            ("app==web", &[("app", "web")], true),
            ("app=", &[("app", "")], true),
            ("app=", &[], false),
            ("app!=web", &[], true),
            ("app!=web", &[("app", "db")], true),
            ("app!=web", &[("app", "web")], false),
            ("t in (a,b)", &[("t", "a")], true),
            ("t in (a,b)", &[("t", "c")], false),
            ("t in (a,b)", &[], false),
            ("t notin (a,b)", &[], true),
            ("t notin (a,b)", &[("t", "c")], true),
            ("t notin (a,b)", &[("t", "b")], false),
            ("x>3", &[("x", "4")], true),
            ("x>3", &[("x", "3")], false),
            ("x>3", &[("x", "abc")], false),
            ("x>3", &[], false),
            ("x>3", &[("x", "-4")], false),
            ("x<3", &[("x", "-4")], true),
            ("x<3", &[("x", "2")], true),
            ("x<3", &[("x", "3")], false),
            ("x<03", &[("x", "2")], true),
            ("app=web,!legacy", &[("app", "web")], true),
            ("app=web,!legacy", &[("app", "web"), ("legacy", "1")], false),
            ("app=web,tier in (a,b),env!=prod", &[("app", "web"), ("tier", "b")], true),
            (
                "app=web,tier in (a,b),env!=prod",
                &[("app", "web"), ("tier", "b"), ("env", "prod")],
                false,
            ),
        ];
        for (text, pairs, expected) in cases {
            let selector = LabelSelector::parse(text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(selector.matches(&labels(pairs)), *expected, "{text:?} vs {pairs:?}");
        }
    }

    #[test]
    fn rejects_invalid_selectors() {
        let long_name = "a".repeat(64);
        let long_key = format!("{long_name}=x");
        let long_value = format!("a={long_name}");
        let long_prefix = format!("{}/a", "a".repeat(254));
        let cases: Vec<(&str, &str)> = vec![
            ("app in (", "expected a value or ')' but reached the end"),
            ("app in ()", "the set of values after 'in' is empty at column 9"),
            ("app notin ( )", "the set of values after 'notin' is empty at column 13"),
            ("=x", "expected a key or '!' but found '=' at column 1"),
            ("a=b=c", "expected ',' or the end after \"a=b\" but found '=' at column 4"),
            ("a b", "after key \"a\" but found \"b\" at column 3"),
            ("!", "expected a key after '!' but reached the end"),
            ("!!a", "expected a key after '!' but found '!' at column 2"),
            ("!a=b", "expected ',' or the end after \"!a\" but found '=' at column 3"),
            ("a,", "expected a key or '!' after ',' but reached the end"),
            (",a", "expected a key or '!' but found ',' at column 1"),
            ("a,,b", "expected a key or '!' after ',' but found ',' at column 3"),
            ("a in (x y)", "expected ',' or ')' but found \"y\" at column 9"),
            ("a in (x,)", "expected a value after ',' but found ')' at column 9"),
            ("a in (x", "expected ',' or ')' but reached the end"),
            ("a in x", "expected '(' after 'in' but found \"x\" at column 6"),
            ("a in", "expected '(' after 'in' but reached the end"),
            ("a notin", "expected '(' after 'notin' but reached the end"),
            ("a in (x),", "expected a key or '!' after ','"),
            (&long_key, "the name part must be no more than 63 characters (it has 64)"),
            (&long_value, "a value must be no more than 63 characters (it has 64)"),
            (&long_prefix, "the prefix must be no more than 253 characters (it has 254)"),
            ("a$=b", "invalid key \"a$\" at column 1: the name part must consist of"),
            ("a=b$", "invalid value \"b$\" at column 3: a value must consist of"),
            ("a in (b,-c)", "invalid value \"-c\" at column 9"),
            ("-a", "invalid key \"-a\" at column 1"),
            ("a-", "invalid key \"a-\" at column 1"),
            ("Example.com/a", "the prefix \"Example.com\" must be a DNS-1123 subdomain"),
            ("a..b/c", "the prefix \"a..b\" must be a DNS-1123 subdomain"),
            ("/a", "the prefix before '/' must not be empty"),
            ("a/", "the name part must not be empty"),
            ("a/b/c", "a key may contain at most one '/'"),
            ("x>abc", "the value \"abc\" after '>' at column 3 must be a non-negative integer"),
            ("x<-1", "the value \"-1\" after '<' at column 3 must be a non-negative integer"),
            ("x>99999999999999999999", "must be a non-negative integer that fits in 64 bits"),
            ("x>", "expected an integer after '>' but reached the end"),
            ("x>,y", "expected an integer after '>' but found ',' at column 3"),
            ("a=(", "expected a value, ',' or the end after '=' but found '(' at column 3"),
            ("a!==b", "expected a value, ',' or the end after '!=' but found '=' at column 4"),
            ("a(b)", "after key \"a\" but found '(' at column 2"),
            ("a >= 1", "expected an integer after '>' but found '=' at column 4"),
            ("ü=b", "invalid key \"ü\" at column 1"),
            ("a=bü", "invalid value \"bü\" at column 3"),
        ];
        for (text, fragment) in cases {
            let err = parse_err(text);
            assert_eq!(err.code(), "INVALID_ARGUMENT");
            assert_eq!(err.tf_exception(), None);
            let prefix = format!("invalid label selector {text:?}: ");
            assert!(err.detail().starts_with(&prefix), "{text:?}: {}", err.detail());
            assert!(err.detail().contains(fragment), "{text:?}: {}", err.detail());
        }
        assert_eq!(
            parse_err("app in (").detail(),
            "invalid label selector \"app in (\": expected a value or ')' but reached the end"
        );
    }

    #[test]
    fn requirement_display_and_match_tolerate_hand_built_values() {
        let weird = req("x", Operator::GreaterThan, &[]);
        assert_eq!(weird.to_string(), "x>");
        assert!(!weird.matches(&labels(&[("x", "1")])));
        let unsorted = req("t", Operator::In, &["b", "a"]);
        assert!(unsorted.matches(&labels(&[("t", "a")])));
        assert_eq!(Operator::Exists.as_str(), "");
    }

    // --- property tests -----------------------------------------------------------------------

    const KEYS: &[&str] = &["app", "tier", "x", "in", "example.com/role", "k8s.io/a-b_c.d"];
    const VALUES: &[&str] = &["", "a", "b", "web", "0", "3", "42", "007", "A.b-c_d", "notin"];

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => proptest::sample::select(KEYS).prop_map(str::to_owned),
            1 => "([a-z0-9]([a-z0-9-]{0,5}[a-z0-9])?\\.){0,2}[a-z]{1,4}/[A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?",
            1 => "[A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?",
        ]
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => proptest::sample::select(VALUES).prop_map(str::to_owned),
            1 => "([A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?)?",
        ]
    }

    fn integer() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => (0i64..100).prop_map(|n| n.to_string()),
            1 => "[0-9]{1,18}",
        ]
    }

    fn requirement() -> impl Strategy<Value = Requirement> {
        let nonempty = value().prop_filter("set values are non-empty", |v| !v.is_empty());
        let set = proptest::collection::btree_set(nonempty, 1..4)
            .prop_map(|s| s.into_iter().collect::<Vec<_>>());
        prop_oneof![
            key().prop_map(|k| Requirement { key: k, operator: Operator::Exists, values: vec![] }),
            key().prop_map(|k| Requirement {
                key: k,
                operator: Operator::DoesNotExist,
                values: vec![]
            }),
            (
                key(),
                proptest::sample::select(vec![
                    Operator::Equals,
                    Operator::DoubleEquals,
                    Operator::NotEquals
                ]),
                value()
            )
                .prop_map(|(key, operator, v)| Requirement {
                    key,
                    operator,
                    values: vec![v]
                }),
            (key(), proptest::sample::select(vec![Operator::In, Operator::NotIn]), set)
                .prop_map(|(key, operator, values)| Requirement { key, operator, values }),
            (
                key(),
                proptest::sample::select(vec![Operator::GreaterThan, Operator::LessThan]),
                integer()
            )
                .prop_map(|(key, operator, v)| Requirement {
                    key,
                    operator,
                    values: vec![v]
                }),
        ]
    }

    /// Writes `r` with optional whitespace between tokens (`spaces` says where).
    fn spaced(r: &Requirement, spaces: &[bool]) -> String {
        let ws = |i: usize| {
            if spaces.get(i).copied().unwrap_or(false) { " " } else { "" }
        };
        let op = r.operator.as_str();
        match r.operator {
            Operator::Exists => format!("{}{}{}", ws(0), r.key, ws(1)),
            Operator::DoesNotExist => format!("{}!{}{}{}", ws(0), ws(1), r.key, ws(2)),
            Operator::In | Operator::NotIn => {
                let inner: Vec<String> = r
                    .values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| format!("{}{v}{}", ws(i + 4), ws(i + 5)))
                    .collect();
                format!("{}{} {op} {}({}){}", ws(0), r.key, ws(1), inner.join(","), ws(2))
            }
            _ => {
                let v = r.values.join(",");
                format!("{}{}{}{op}{}{v}{}", ws(0), r.key, ws(1), ws(2), ws(3))
            }
        }
    }

    fn label_map() -> impl Strategy<Value = BTreeMap<String, String>> {
        proptest::collection::btree_map(key(), prop_oneof![value(), integer()], 0..6)
    }

    proptest! {
        #[test]
        fn arbitrary_strings_never_panic(text in any::<String>()) {
            let _ = LabelSelector::parse(&text);
        }

        #[test]
        fn selector_like_strings_never_panic(text in "[a-z0-9=!(),<> .\\-_/]{0,40}") {
            if let Ok(selector) = LabelSelector::parse(&text) {
                // Whatever parses displays to something that parses to the same requirements.
                let reparsed = LabelSelector::parse(&selector.to_string());
                prop_assert_eq!(reparsed.as_ref().map(|s| s.requirements()), Ok(selector.requirements()));
            }
        }

        #[test]
        fn mixed_unicode_strings_never_panic(text in "[a-zé\\u{1F600}=!(),<> \t\n.\\-_/]{0,40}") {
            let _ = LabelSelector::parse(&text);
        }

        #[test]
        fn valid_selectors_round_trip(
            requirements in proptest::collection::vec(requirement(), 0..5),
            spaces in proptest::collection::vec(any::<bool>(), 16),
            maps in proptest::collection::vec(label_map(), 1..6),
        ) {
            let text = requirements
                .iter()
                .map(|r| spaced(r, &spaces))
                .collect::<Vec<_>>()
                .join(",");
            let parsed = LabelSelector::parse(&text);
            prop_assert!(parsed.is_ok(), "{:?}: {:?}", text, parsed);
            let parsed = parsed.unwrap_or_else(|_| unreachable!());
            prop_assert_eq!(parsed.requirements(), requirements.as_slice());
            prop_assert_eq!(parsed.as_str(), text.as_str());

            let display = parsed.to_string();
            let reparsed = LabelSelector::parse(&display);
            prop_assert!(reparsed.is_ok(), "{:?}: {:?}", display, reparsed);
            let reparsed = reparsed.unwrap_or_else(|_| unreachable!());
            prop_assert_eq!(reparsed.requirements(), parsed.requirements());
            prop_assert_eq!(reparsed.to_string(), display);

            for labels in &maps {
                prop_assert_eq!(reparsed.matches(labels), parsed.matches(labels));
                let each = requirements.iter().all(|r| r.matches(labels));
                prop_assert_eq!(parsed.matches(labels), each);
            }
        }
    }
}
