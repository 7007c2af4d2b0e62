//! TensorFlow's tf.data service: its gRPC services, and the files a dataset's graph names.
//!
//! What needs no IO is in the core ([`shardwise_core::tensorflow`]) and re-exported here under
//! its old paths: the messages ([`proto`], with the services beside them), the DYNAMIC split
//! providers of a graph ([`graph`]), [`prepare`], [`fingerprint`] and [`graph_hash`].
//!
//! - [`proto`]: the gRPC services of TensorFlow 2.21's tf.data service
//!   (`tensorflow.data.DispatcherService`, `tensorflow.data.WorkerService`), generated over the
//!   core's messages.
//! - [`files`]: the files `list_files` names, globbed under the dispatcher's data roots (the
//!   core's [`graph::Files`]).
//!
//! The dispatcher serves the protocol (its `grpc` module).

pub mod files;
pub mod proto;

pub use shardwise_core::tensorflow::{fingerprint, graph, graph_hash, prepare};
