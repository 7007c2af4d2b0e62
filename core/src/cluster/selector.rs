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
mod tests;
