//! The static-sharding worker list and its placeholder entries.

use serde::{Deserialize, Serialize};

/// A worker whose address matches no entry of the static-sharding worker list (TensorFlow's
/// words, which its tests read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Failed to assign an index for worker {address}. Configured workers list: [{}]. The \
     worker's address is not configured, or other workers are already running at the \
     configured host. If your worker has restarted, make sure it runs at the same address and \
     port.",
    entries.join(", ")
)]
pub struct NotInWorkerList {
    /// The address that asked to register.
    pub address: String,
    /// The list's entries (placeholders bound so far replaced by addresses).
    pub entries: Vec<String>,
}

/// The fixed worker list of static sharding, with placeholder entries bound to concrete
/// addresses in registration order (TensorFlow's `WorkerIndexResolver`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerList {
    entries: Vec<String>,
}

fn split_host_port(addr: &str) -> (&str, Option<&str>) {
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() => (host, Some(port)),
        _ => (addr, None),
    }
}

fn is_port_placeholder(port: &str) -> bool {
    port == "%port%" || (port.starts_with("%port_") && port.ends_with('%'))
}

impl WorkerList {
    /// The configured list (`host`, `host:port`, `host:%port%`, `host:%port_<name>%`).
    pub fn new(entries: Vec<String>) -> Self {
        WorkerList { entries }
    }
    /// Whether static sharding is configured at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// The number of shards.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// The entries, with bound placeholders replaced by addresses.
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    fn matching(&self, addr: &str) -> Option<usize> {
        if let Some(i) = self.entries.iter().position(|e| e == addr) {
            return Some(i);
        }
        let (host, port) = split_host_port(addr);
        port?;
        self.entries.iter().position(|e| {
            let (eh, ep) = split_host_port(e);
            eh == host && ep.is_none_or(is_port_placeholder)
        })
    }

    /// Whether `addr` may register: the list is empty, or an entry matches it.
    pub fn validate(&self, addr: &str) -> Result<(), NotInWorkerList> {
        if self.entries.is_empty() || self.matching(addr).is_some() {
            return Ok(());
        }
        Err(NotInWorkerList { address: addr.to_owned(), entries: self.entries.clone() })
    }

    /// Binds `addr` to its entry (replacing a placeholder entry by the address).
    pub fn bind(&mut self, addr: &str) {
        if let Some(i) = self.matching(addr) {
            self.entries[i] = addr.to_owned();
        }
    }

    /// The worker's shard index.
    pub fn index_of(&self, addr: &str) -> Option<usize> {
        self.entries.iter().position(|e| e == addr)
    }
}
