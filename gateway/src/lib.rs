//! The IO side of Shardwise: the `shardwise` command and everything that reads the host.
//!
//! HTTP between the processes (worker to dispatcher, client to dispatcher and workers) is
//! plain HTTP/1.1 over reqwest without a TLS stack: the servers only speak plain HTTP, and
//! leaving TLS out keeps one tokio and one hyper in the tree and no crypto provider to pick.
//! A TLS-terminating proxy in front of the servers is the way to encrypt today.
#![forbid(unsafe_code)]
// Handlers return `Result<_, Problem>`; a problem is built at most once per request, on the
// error path, so its size (an RFC 9457 object with optional members) costs nothing that matters.
#![allow(clippy::result_large_err)]

pub mod client;
pub mod host;
pub mod journal;
pub mod kubernetes;
pub mod live_cluster;
pub mod openapi;
pub mod problem;
pub mod resolve;
pub mod rest;
pub mod server;
pub mod tf;
pub mod worker;
