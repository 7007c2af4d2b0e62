//! The tf.data service protocol of TensorFlow 2.21: the core's messages
//! ([`shardwise_core::tensorflow::proto`]) and the tonic services over them.
//!
//! The services (`DispatcherService`, `WorkerService`: clients and servers) are generated from
//! the core's `.proto` files (`core/proto/`) by protox and tonic-prost-build and checked in
//! (so a build needs neither `protoc` nor a proto compiler); their messages are the core's
//! (tonic-prost-build's `extern_path`). The test `proto_codegen` regenerates both and fails
//! when either differs. Each package here holds the core's messages and its services, so one
//! path names both.
#![allow(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    clippy::all,
    clippy::pedantic
)]

/// Package `tensorflow`: graphs and tensors (messages only).
pub mod tensorflow {
    pub use shardwise_core::tensorflow::proto::tensorflow::*;

    /// Package `tensorflow.data`: the tf.data service.
    pub mod data {
        pub use shardwise_core::tensorflow::proto::tensorflow::data::*;

        include!("proto/tensorflow.data.rs");
    }
}
