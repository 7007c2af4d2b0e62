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

/// Checks a worker's address: `host:port` (see the module docs). The error quotes at most a
/// short prefix of `addr`.
pub fn check_worker_address(addr: &str) -> Result<(), String> {
    check(addr, false).map_err(|why| {
        format!(
            "worker_address {} is not host:port ({why}); the host is a DNS name, an IPv4 \
             address or a bracketed IPv6 address, the port 1 to 65535",
            echo(addr)
        )
    })
}

/// Checks an entry of the static-sharding worker list: `host`, `host:port`, `host:%port%` or
/// `host:%port_<name>%`.
pub fn check_worker_list_entry(entry: &str) -> Result<(), String> {
    check(entry, true).map_err(|why| {
        format!("worker list entry {} is not host, host:port or host:%port% ({why})", echo(entry))
    })
}

/// What no address can be: empty, longer than [`MAX_ADDRESS_LEN`] bytes, or holding
/// whitespace or control characters.
pub fn check_plausible(addr: &str) -> Result<(), String> {
    if addr.is_empty() {
        return Err("worker_address must not be empty".into());
    }
    if addr.len() > MAX_ADDRESS_LEN {
        return Err(format!(
            "worker_address {} is longer than {MAX_ADDRESS_LEN} bytes",
            echo(addr)
        ));
    }
    if addr.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "worker_address {} holds whitespace or control characters",
            echo(addr)
        ));
    }
    Ok(())
}

fn check(addr: &str, list_entry: bool) -> Result<(), String> {
    if addr.is_empty() {
        return Err("it is empty".into());
    }
    if addr.len() > MAX_ADDRESS_LEN {
        return Err(format!("{} bytes, more than {MAX_ADDRESS_LEN}", addr.len()));
    }
    let (host, port) = if let Some(rest) = addr.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or("an IPv6 host lacks its `]`")?;
        v6.parse::<Ipv6Addr>().map_err(|_| "the bracketed host is not an IPv6 address")?;
        match after.strip_prefix(':') {
            Some(port) => (None, Some(port)),
            None if after.is_empty() => (None, None),
            None => return Err("the `]` is not followed by `:port`".into()),
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
        None => Err("no port".into()),
        Some(p) if list_entry && is_placeholder(p) => Ok(()),
        Some(p) => check_port(p),
    }
}

fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("no host".into());
    }
    if host.contains(':') {
        return Err("an IPv6 host must be in brackets".into());
    }
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return host
            .parse::<Ipv4Addr>()
            .map(|_| ())
            .map_err(|_| "the host is neither an IPv4 address nor a DNS name".into());
    }
    for label in host.split('.') {
        if label.is_empty() {
            return Err("the host has an empty label".into());
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(format!("a label of the host is longer than {MAX_LABEL_LEN} characters"));
        }
        if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err("the host may hold only letters, digits, `-` and `.`".into());
        }
    }
    Ok(())
}

fn check_port(port: &str) -> Result<(), String> {
    let valid = !port.is_empty()
        && port.len() <= 5
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u32>().is_ok_and(|p| (1..=65_535).contains(&p));
    if valid { Ok(()) } else { Err("the port is not 1 to 65535".into()) }
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
            let e = check_worker_address(bad).expect_err(bad);
            assert!(e.len() < 400, "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
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
