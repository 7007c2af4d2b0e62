//! TensorFlow's tf.data service: its protocol types and what Shardwise reads from a
//! TensorFlow dataset's graph.
//!
//! - [`proto`]: the messages and gRPC services of TensorFlow 2.21's tf.data service
//!   (`tensorflow.data.DispatcherService`, `tensorflow.data.WorkerService`) and the graph
//!   messages, generated from Shardwise's own `.proto` subsets under `gateway/proto/`.
//! - [`graph`]: the DYNAMIC split providers of a dataset, from its `GraphDef`.
//! - [`files`]: the files `list_files` names, globbed under the dispatcher's data roots.
//! - [`prepare`]: the graph edits TensorFlow's dispatcher makes before it stores a dataset
//!   (lookup tables shared by node name, devices cleared), made losslessly on the bytes.
//! - [`fingerprint`]: one fingerprint for every serialization of one dataset (TensorFlow
//!   writes protobuf maps in hash order) and for every build of one dataset ([`graph_hash`]:
//!   TensorFlow's `HashGraph`, by structure, not by node or function names).
//!
//! The dispatcher serves the protocol (its `grpc` module).

pub mod files;
pub mod fingerprint;
pub mod graph;
pub mod graph_hash;
pub mod prepare;
pub mod proto;
mod raw;

#[cfg(test)]
mod proto_tests;
