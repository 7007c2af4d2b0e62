//! The IO side of Shardwise: the `shardwise` command and everything that reads the host.
#![forbid(unsafe_code)]

pub mod host;
pub mod journal;
pub mod problem;
pub mod resolve;
