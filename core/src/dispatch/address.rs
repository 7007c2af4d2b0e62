//! Worker addresses: what a worker may register as, and what the static-sharding list may hold.
//!
//! An address is stored, listed by `GET /v1/workers`, and sent to every client of every
//! iteration the worker has a task in, so it is checked where it enters: `host:port`, where
//! the host is a DNS name (letters, digits, `-` and `.`, labels of at most 63 characters), an
//! IPv4 literal or a bracketed IPv6 literal, and the port is 1 to 65535; at most
//! [`MAX_ADDRESS_LEN`] bytes in all. The REST surface applies [`check_worker_address`] to every
//! worker heartbeat, update and get-split; `--worker-addresses` entries pass
//! [`check_worker_list_entry`], which also allows the `%port%` placeholders and a bare host.
//!
//! The state machine itself ([`super::Dispatcher`]) only refuses what no address can be
//! ([`check_plausible`]: empty, longer than [`MAX_ADDRESS_LEN`], whitespace or control
//! characters), so that TensorFlow's own scenario names (`/worker/task/0`) keep working in
//! its tests.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::echo::echo;

/// The longest address, in bytes (the longest DNS name is 253).
pub const MAX_ADDRESS_LEN: usize = 255;

/// The longest DNS label.
const MAX_LABEL_LEN: usize = 63;

/// Why an address was refused. Each message quotes at most a short prefix of the address
/// (see [`echo`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// A worker's address that is not `host:port` ([`check_worker_address`]).
    #[error(
        "worker_address {address} is not host:port ({why}); the host is a DNS name, an IPv4 \
         address or a bracketed IPv6 address, the port 1 to 65535"
    )]
    NotHostPort {
        /// The address, quoted as [`echo`] quotes it.
        address: String,
        /// What is wrong with it.
        why: Malformed,
    },
    /// A worker list entry that is not `host`, `host:port` or `host:%port%`
    /// ([`check_worker_list_entry`]).
    #[error("worker list entry {entry} is not host, host:port or host:%port% ({why})")]
    NotListEntry {
        /// The entry, quoted as [`echo`] quotes it.
        entry: String,
        /// What is wrong with it.
        why: Malformed,
    },
    /// An empty address ([`check_plausible`]).
    #[error("worker_address must not be empty")]
    Empty,
    /// An address longer than [`MAX_ADDRESS_LEN`] bytes ([`check_plausible`]; quoted).
    #[error("worker_address {0} is longer than {MAX_ADDRESS_LEN} bytes")]
    TooLong(String),
    /// An address holding whitespace or control characters ([`check_plausible`]; quoted).
    #[error("worker_address {0} holds whitespace or control characters")]
    Unprintable(String),
}

/// What makes a string not an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Nothing at all.
    #[error("it is empty")]
    Empty,
    /// More than [`MAX_ADDRESS_LEN`] bytes (the length).
    #[error("{0} bytes, more than {MAX_ADDRESS_LEN}")]
    TooLong(usize),
    /// `[` without `]`.
    #[error("an IPv6 host lacks its `]`")]
    UnclosedBracket,
    /// `[...]` that is not an IPv6 address.
    #[error("the bracketed host is not an IPv6 address")]
    NotIpv6,
    /// `]` followed by something other than `:port`.
    #[error("the `]` is not followed by `:port`")]
    AfterBracket,
    /// No `:port` where one is needed.
    #[error("no port")]
    NoPort,
    /// Nothing before the `:port`.
    #[error("no host")]
    NoHost,
    /// An IPv6 literal without brackets.
    #[error("an IPv6 host must be in brackets")]
    UnbracketedIpv6,
    /// Digits and dots that are not an IPv4 address.
    #[error("the host is neither an IPv4 address nor a DNS name")]
    NotIpv4,
    /// `a..b` or `.a`.
    #[error("the host has an empty label")]
    EmptyLabel,
    /// A DNS label longer than 63 characters.
    #[error("a label of the host is longer than {MAX_LABEL_LEN} characters")]
    LongLabel,
    /// A character a DNS name cannot hold.
    #[error("the host may hold only letters, digits, `-` and `.`")]
    HostCharacters,
    /// A port that is not 1 to 65535.
    #[error("the port is not 1 to 65535")]
    Port,
}

/// Checks a worker's address: `host:port` (see the module docs). The error quotes at most a
/// short prefix of `addr`.
pub fn check_worker_address(addr: &str) -> Result<(), AddressError> {
    check(addr, false).map_err(|why| AddressError::NotHostPort { address: echo(addr), why })
}

/// Checks an entry of the static-sharding worker list: `host`, `host:port`, `host:%port%` or
/// `host:%port_<name>%`.
pub fn check_worker_list_entry(entry: &str) -> Result<(), AddressError> {
    check(entry, true).map_err(|why| AddressError::NotListEntry { entry: echo(entry), why })
}

/// What no address can be: empty, longer than [`MAX_ADDRESS_LEN`] bytes, or holding
/// whitespace or control characters.
pub fn check_plausible(addr: &str) -> Result<(), AddressError> {
    if addr.is_empty() {
        return Err(AddressError::Empty);
    }
    if addr.len() > MAX_ADDRESS_LEN {
        return Err(AddressError::TooLong(echo(addr)));
    }
    if addr.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(AddressError::Unprintable(echo(addr)));
    }
    Ok(())
}

/// The most tags a worker may register with.
pub const MAX_WORKER_TAGS: usize = 64;

/// The longest worker tag, in bytes.
pub const MAX_TAG_LEN: usize = 255;

/// Why a worker's tags were refused ([`check_worker_tags`]). Each message names the bound and
/// quotes at most a short prefix of the tag (see [`echo`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TagError {
    /// More than [`MAX_WORKER_TAGS`] tags (how many).
    #[error("worker tags: {0} tags, more than the {MAX_WORKER_TAGS} a worker may have")]
    TooMany(usize),
    /// A tag longer than [`MAX_TAG_LEN`] bytes (quoted).
    #[error("worker tag {0} is longer than {MAX_TAG_LEN} bytes")]
    TooLong(String),
    /// A tag holding a control character (quoted).
    #[error(
        "worker tag {0} holds a control character (U+0000 to U+001F or U+007F to U+009F); \
         tags are printable text"
    )]
    Unprintable(String),
}

/// Checks a worker's tags where they enter (REST and gRPC worker heartbeats): at most
/// [`MAX_WORKER_TAGS`] tags, each at most [`MAX_TAG_LEN`] bytes of printable text: any
/// Unicode character but the control characters (U+0000 to U+001F, U+007F to U+009F, so no
/// newline, tab or NUL). Tags are copied into every client heartbeat of every iteration the
/// worker serves, so they are bounded like addresses. An empty tag is left to the dispatcher,
/// which refuses it with TensorFlow's message.
pub fn check_worker_tags(tags: &[String]) -> Result<(), TagError> {
    if tags.len() > MAX_WORKER_TAGS {
        return Err(TagError::TooMany(tags.len()));
    }
    for tag in tags {
        if tag.len() > MAX_TAG_LEN {
            return Err(TagError::TooLong(echo(tag)));
        }
        if tag.chars().any(char::is_control) {
            return Err(TagError::Unprintable(echo(tag)));
        }
    }
    Ok(())
}

fn check(addr: &str, list_entry: bool) -> Result<(), Malformed> {
    if addr.is_empty() {
        return Err(Malformed::Empty);
    }
    if addr.len() > MAX_ADDRESS_LEN {
        return Err(Malformed::TooLong(addr.len()));
    }
    let (host, port) = if let Some(rest) = addr.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or(Malformed::UnclosedBracket)?;
        v6.parse::<Ipv6Addr>().map_err(|_| Malformed::NotIpv6)?;
        match after.strip_prefix(':') {
            Some(port) => (None, Some(port)),
            None if after.is_empty() => (None, None),
            None => return Err(Malformed::AfterBracket),
        }
    } else {
        match addr.rsplit_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(addr), None),
        }
    };
    if let Some(host) = host {
        check_host(host)?;
    }
    match port {
        None if list_entry => Ok(()),
        None => Err(Malformed::NoPort),
        Some(p) if list_entry && is_placeholder(p) => Ok(()),
        Some(p) => check_port(p),
    }
}

fn check_host(host: &str) -> Result<(), Malformed> {
    if host.is_empty() {
        return Err(Malformed::NoHost);
    }
    if host.contains(':') {
        return Err(Malformed::UnbracketedIpv6);
    }
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return host.parse::<Ipv4Addr>().map(|_| ()).map_err(|_| Malformed::NotIpv4);
    }
    for label in host.split('.') {
        if label.is_empty() {
            return Err(Malformed::EmptyLabel);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(Malformed::LongLabel);
        }
        if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(Malformed::HostCharacters);
        }
    }
    Ok(())
}

fn check_port(port: &str) -> Result<(), Malformed> {
    let valid = !port.is_empty()
        && port.len() <= 5
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u32>().is_ok_and(|p| (1..=65_535).contains(&p));
    if valid { Ok(()) } else { Err(Malformed::Port) }
}

/// `%port%` or `%port_<name>%` (letters, digits, `_`, `-`).
fn is_placeholder(port: &str) -> bool {
    port == "%port%"
        || port.strip_prefix("%port_").and_then(|p| p.strip_suffix('%')).is_some_and(|name| {
            !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_bounded_in_count_length_and_charset() {
        let tags = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(check_worker_tags(&[]), Ok(()));
        assert_eq!(check_worker_tags(&tags(&["COLOCATED", "zone a", "gpu-ü", ""])), Ok(()));
        assert_eq!(check_worker_tags(&vec!["t".to_owned(); MAX_WORKER_TAGS]), Ok(()));
        let e = check_worker_tags(&vec!["t".to_owned(); MAX_WORKER_TAGS + 1]).unwrap_err();
        assert_eq!(e, TagError::TooMany(MAX_WORKER_TAGS + 1));
        assert!(e.to_string().contains("64"), "{e}");
        assert_eq!(check_worker_tags(&["x".repeat(MAX_TAG_LEN)]), Ok(()));
        let e = check_worker_tags(&["x".repeat(MAX_TAG_LEN + 1)]).unwrap_err().to_string();
        assert!(e.contains("longer than 255 bytes") && e.len() < 200, "{e}");
        for bad in ["a\nb", "a\0b", "\t", "x\u{7f}", "x\u{85}"] {
            let e = check_worker_tags(&tags(&["ok", bad])).unwrap_err();
            assert!(matches!(e, TagError::Unprintable(_)), "{bad:?}: {e}");
        }
    }

    #[test]
    fn addresses_that_are_host_port() {
        for ok in [
            "w1:1",
            "127.0.0.1:7001",
            "localhost:65535",
            "worker-0.workers.default.svc.cluster.local:5050",
            "[::1]:5000",
            "[2001:db8::7]:80",
            "A-b.C9:8080",
            &format!("{}:1", "a".repeat(63)),
        ] {
            assert_eq!(check_worker_address(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn everything_else_is_refused() {
        let long_label = format!("{}:1", "a".repeat(64));
        let too_long = format!("{}:1", vec!["a".repeat(60); 5].join("."));
        let megabyte = "a".repeat(1 << 20);
        for bad in [
            "",
            "w1",
            "w1:",
            ":5000",
            "w1:0",
            "w1:65536",
            "w1:+80",
            "w1:080000",
            "w1:port",
            "w1:%port%",
            "w 1:1",
            "w1:1\nX-Injected: yes",
            "w1\r:1",
            "under_score:1",
            "a..b:1",
            ".a:1",
            "300.1.1.1:1",
            "1.2.3:1",
            "::1:5000",
            "[::1]",
            "[::1]5000",
            "[zz]:1",
            "[::1:1",
            "http://w1:1",
            "w1:1/path",
            "é:1",
            long_label.as_str(),
            too_long.as_str(),
            megabyte.as_str(),
        ] {
            let e = check_worker_address(bad).expect_err(bad).to_string();
            assert!(e.len() < 400, "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    /// The refusals are typed (a caller can tell why without reading the text) and their
    /// texts are the ones users and TensorFlow's tests read.
    #[test]
    fn refusals_say_why_in_types_and_words() {
        assert_eq!(
            check_worker_address("w1"),
            Err(AddressError::NotHostPort { address: "\"w1\"".into(), why: Malformed::NoPort })
        );
        assert_eq!(
            check_worker_address("w1").unwrap_err().to_string(),
            "worker_address \"w1\" is not host:port (no port); the host is a DNS name, an IPv4 \
             address or a bracketed IPv6 address, the port 1 to 65535"
        );
        assert_eq!(
            check_worker_list_entry("w1:0").unwrap_err().to_string(),
            "worker list entry \"w1:0\" is not host, host:port or host:%port% (the port is not 1 \
             to 65535)"
        );
        assert_eq!(check_plausible(""), Err(AddressError::Empty));
        assert_eq!(
            check_plausible("a b").unwrap_err().to_string(),
            "worker_address \"a b\" holds whitespace or control characters"
        );
        assert!(matches!(check_plausible(&"a".repeat(256)), Err(AddressError::TooLong(_))));
    }

    #[test]
    fn list_entries_allow_placeholders_and_bare_hosts() {
        for ok in ["w1", "w1:1", "localhost:%port%", "h:%port_grpc%", "[::1]", "[::1]:%port%"] {
            assert_eq!(check_worker_list_entry(ok), Ok(()), "{ok}");
        }
        for bad in ["", "w1:%port", "h:%port_%", "h:%port_a b%", "a b", "w1:0", "/worker/task/0"] {
            assert!(check_worker_list_entry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plausible_is_the_floor() {
        assert!(check_plausible("/worker/task/0:20000").is_ok());
        assert!(check_plausible("w1").is_ok());
        for bad in ["", "a b", "a\n", &"a".repeat(256)] {
            assert!(check_plausible(bad).is_err(), "{bad:?}");
        }
    }
}
