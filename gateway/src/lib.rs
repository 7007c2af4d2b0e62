//! The IO side of Shardwise.
