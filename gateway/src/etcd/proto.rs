//! etcd's v3 API as prost messages and tonic clients.
//!
//! Generated from `gateway/proto/etcd/` by protox and tonic-prost-build and checked in (so a
//! build needs neither `protoc` nor a proto compiler); the test `proto_codegen` regenerates it
//! and fails when it differs. The `.proto` files are Shardwise's subset of etcd's API with
//! etcd's package, service, message and field names and numbers: fields left out are skipped
//! on decode. Clients only.
#![allow(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    clippy::all,
    clippy::pedantic
)]

/// Package `mvccpb`: keys, values and watch events.
pub mod mvccpb {
    include!("proto/mvccpb.rs");
}

/// Package `etcdserverpb`: the `KV`, `Lease` and `Watch` services.
pub mod etcdserverpb {
    include!("proto/etcdserverpb.rs");
}
