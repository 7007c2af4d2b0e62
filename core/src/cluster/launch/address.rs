//! A task address split into host and port, for launchers that take them apart.
//!
//! TensorFlow keeps a task address as one opaque string; PyTorch wants the host
//! (`MASTER_ADDR`) and the port (`MASTER_PORT`) separately, JAX wants `host:port` again, and
//! local ranks are counted per host. So the address is parsed, strictly: a host name or IPv4
//! address (`w0`, `10.0.0.1`, `w0.example.com`), or an IPv6 address in brackets (`[fd00::1]`,
//! `[fe80::1%eth0]`), optionally followed by `:port` (1 to 65535). Anything else is refused
//! rather than guessed at: an unbracketed IPv6 address with a port (`fd00::1:8470`, which
//! TensorFlow's Kubernetes resolver writes) cannot be split without guessing, a scheme
//! (`grpc://w0:2222`) is not an address, and a host with spaces, quotes or shell
//! metacharacters would end up in an environment variable.

use std::fmt;

/// The longest host accepted (DNS's limit for a name, in bytes).
pub const MAX_HOST_LEN: usize = 253;

/// An address split into host and port. `host` has no brackets (`fd00::1`, not `[fd00::1]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPort<'a> {
    /// The host name or IP address, without brackets.
    pub host: &'a str,
    /// The port, when the address has one.
    pub port: Option<u16>,
}

/// Why an address cannot be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressError {
    /// The address is empty.
    Empty,
    /// The address starts with a URL scheme (`grpc://`).
    Scheme,
    /// An IPv6 address with a port but without brackets.
    UnbracketedIpv6,
    /// A `[` without its `]`, or text after the `]` that is not `:port`.
    Brackets,
    /// A host that is empty, too long, or has characters a host cannot have.
    Host,
    /// A port that is not a decimal number from 1 to 65535.
    Port,
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressError::Empty => "it is empty",
            AddressError::Scheme => "an address is host:port, without a scheme",
            AddressError::UnbracketedIpv6 => {
                "an IPv6 address needs brackets to tell it from its port ([fd00::1]:2222)"
            }
            AddressError::Brackets => "its brackets are not [IPv6] or [IPv6]:port",
            AddressError::Host => {
                "its host is not a host name, an IPv4 address or a bracketed IPv6 address"
            }
            AddressError::Port => "its port is not a number from 1 to 65535",
        })
    }
}

/// Splits `address` into host and port (see the module documentation for what is accepted).
pub fn parse_address(address: &str) -> Result<HostPort<'_>, AddressError> {
    if address.is_empty() {
        return Err(AddressError::Empty);
    }
    if address.contains("://") {
        return Err(AddressError::Scheme);
    }
    if let Some(rest) = address.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or(AddressError::Brackets)?;
        if !is_ipv6_host(host) {
            return Err(AddressError::Host);
        }
        let port = match after {
            "" => None,
            _ => Some(parse_port(after.strip_prefix(':').ok_or(AddressError::Brackets)?)?),
        };
        return Ok(HostPort { host, port });
    }
    let (host, port) = match address.split_once(':') {
        None => (address, None),
        Some((_, port)) if port.contains(':') => return Err(AddressError::UnbracketedIpv6),
        Some((host, port)) => (host, Some(parse_port(port)?)),
    };
    if !is_name_host(host) {
        return Err(AddressError::Host);
    }
    Ok(HostPort { host, port })
}

/// `host:port`, the host in brackets when it is an IPv6 address: what gRPC (and so
/// `jax.distributed.initialize`) takes.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// A port: 1 to 5 ASCII digits, from 1 to 65535.
fn parse_port(text: &str) -> Result<u16, AddressError> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AddressError::Port);
    }
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(AddressError::Port),
        Ok(port) => Ok(port),
    }
}

/// A host name or IPv4 address: letters, digits, `-`, `.` and `_`, at most [`MAX_HOST_LEN`]
/// bytes.
fn is_name_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= MAX_HOST_LEN
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// An IPv6 address as written in brackets: hex digits, `:` and `.` (an embedded IPv4), with at
/// least one `:`, and an optional zone (`%eth0`) of letters, digits, `-`, `.` and `_`.
fn is_ipv6_host(host: &str) -> bool {
    let (address, zone) = match host.split_once('%') {
        Some((a, z)) => (a, Some(z)),
        None => (host, None),
    };
    host.len() <= MAX_HOST_LEN
        && address.contains(':')
        && address.bytes().all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
        && zone.is_none_or(|z| {
            !z.is_empty()
                && z.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        })
}
