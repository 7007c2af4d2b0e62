//! The messages of TensorFlow 2.21's tf.data service protocol, as prost messages.
//!
//! Generated from `core/proto/` by protox and tonic-prost-build and checked in (so a build
//! needs neither `protoc` nor a proto compiler); the gateway's test `proto_codegen`
//! regenerates it and fails when it differs. The services (`DispatcherService`,
//! `WorkerService`) are generated from the same files into the gateway, which has the
//! transport; their methods take and return these messages.
//!
//! The `.proto` files are Shardwise's subsets of TensorFlow's, with TensorFlow's package,
//! service, message and field names and numbers: fields left out are skipped on decode. A
//! dataset's graph travels as bytes (`data::DatasetDef::graph`), so it is kept and forwarded
//! exactly as sent; [`tensorflow::GraphDef`] reads it.
#![allow(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    clippy::all,
    clippy::pedantic
)]

/// Package `tensorflow`: graphs and tensors.
pub mod tensorflow {
    include!("proto/tensorflow.rs");

    /// Package `tensorflow.data`: the tf.data service.
    pub mod data {
        include!("proto/tensorflow.data.rs");
    }
}
