//! TensorFlow's tf.data service, without the transport: its protocol messages, what Shardwise
//! reads from a TensorFlow dataset's graph, and the conversion of the messages to and from the
//! dispatcher's requests and replies. Behind the `tensorflow` feature.
//!
//! - [`proto`]: the messages of TensorFlow 2.21's tf.data service and the graph messages,
//!   generated from Shardwise's own `.proto` subsets under `core/proto/`. The gRPC services
//!   (clients and servers) are generated in the gateway, over these messages.
//! - [`graph`]: the DYNAMIC split providers of a dataset, from its `GraphDef`; the files
//!   `list_files` names come from a [`graph::Files`] the caller implements.
//! - [`prepare`]: the graph edits TensorFlow's dispatcher makes before it stores a dataset
//!   (lookup tables shared by node name, devices cleared), made losslessly on the bytes.
//! - [`fingerprint`]: one fingerprint for every serialization of one dataset (TensorFlow
//!   writes protobuf maps in hash order) and for every build of one dataset ([`graph_hash`]:
//!   TensorFlow's `HashGraph`, by structure, not by node or function names).
//! - [`convert`]: every conversion between the service's messages and the dispatcher's
//!   requests and replies, with its validation; a refusal is a [`convert::ConvertError`]
//!   (a [`Code`](crate::Code) and a message) that the gRPC front turns into a status.

pub mod convert;
pub mod fingerprint;
pub mod graph;
pub mod graph_hash;
pub mod prepare;
pub mod proto;
mod raw;

#[cfg(test)]
mod proto_tests;
