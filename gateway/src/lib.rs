//! The IO side of Shardwise: the `shardwise` command and everything that reads the host.
#![forbid(unsafe_code)]
// Handlers return `Result<_, Problem>`; a problem is built at most once per request, on the
// error path, so its size (an RFC 9457 object with optional members) costs nothing that matters.
#![allow(clippy::result_large_err)]

pub mod host;
pub mod journal;
pub mod kubernetes;
pub mod live_cluster;
pub mod openapi;
pub mod problem;
pub mod resolve;
pub mod server;
