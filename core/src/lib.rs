//! # shardwise-core
//!
//! The sans-IO heart of Shardwise: cluster resolution ([`cluster`]), the declarative datasets
//! ([`dataset`]), the tf.data service dispatcher ([`dispatch`], with the replicated journal's
//! layout and fold, `dispatch::replica_log`), a worker's task ([`worker`]) and the client's
//! reader of a job ([`client`]) as pure functions and state machines. With the `tensorflow`
//! feature, `tensorflow` adds TensorFlow's tf.data service messages, what is read from a
//! dataset's graph (split providers, fingerprints, TensorFlow's `HashGraph`) and the
//! conversion of the messages to and from the dispatcher's requests; the gateway serves them
//! over gRPC. Nothing
//! in this crate spawns a task, sleeps, reads a clock, opens a file or a
//! socket, or reads the process environment: every input (a TF_CONFIG string, the `SLURM_*`
//! variables, the pods a Kubernetes API returned, the current time) is passed in as a value, and
//! every output (a [`cluster::ClusterSpec`], a reply, an error) comes back as a value. The
//! `shardwise-gateway` crate does the waiting: it reads the environment, talks to Kubernetes and
//! serves HTTP.
//!
//! Where something must be fetched (the pods behind a label selector), core defines an async
//! port ([`cluster::kubernetes::PodLister`]) and a runtime-agnostic driver written with
//! `futures` only; the gateway implements the port.
//!
//! ```
//! use shardwise_core::cluster::{ClusterResolver, TfConfigResolver, multi_worker};
//!
//! // The caller reads TF_CONFIG from wherever it lives and hands the text in.
//! let tf_config = r#"{"cluster": {"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"]},
//!                     "task": {"type": "worker", "index": 1}}"#;
//! let resolver = TfConfigResolver::new(Some(tf_config));
//! let cluster = resolver.cluster_spec()?;
//! assert_eq!(resolver.master(None, None, Some("grpc"))?, "grpc://w1:2222");
//! assert_eq!(multi_worker::id_in_cluster(&cluster, Some("worker"), 1)?, 2);
//! # Ok::<(), shardwise_core::cluster::ClusterError>(())
//! ```
//!
//! # The promise
//!
//! Deterministic, no IO, no clocks, no threads: the same inputs give the same outputs. The
//! dispatcher takes requests and time as values and hands back what to persist and what to
//! answer; [`Driver`] is the one loop that runs it over a journal sink the caller implements
//! (see [`dispatch`] for the loop itself and the durability barrier):
//!
//! ```
//! use shardwise_core::{Dispatcher, DispatcherConfig, Driver, Millis, VecSink, WorkerHeartbeat};
//!
//! let dispatcher = Dispatcher::new(DispatcherConfig::default(), "inc-1".into(), Millis(0))?;
//! let mut driver = Driver::new(dispatcher, VecSink::default()); // a sink that keeps records
//! let heartbeat = WorkerHeartbeat { worker_address: "w0:5000".into(), ..Default::default() };
//! let reply = driver.call(Millis(1_000), heartbeat)?; // persisted, then answered
//! assert!(reply.new_tasks.is_empty());
//! assert_eq!(driver.sink().records.len(), 2); // the start record and the registration
//! driver.handle_timeout(driver.poll_timeout()); // when the next deadline comes
//! # Ok::<(), shardwise_core::DispatchError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod cluster;
pub mod code;
pub mod dataset;
pub mod dispatch;
pub mod echo;
pub mod json;
pub mod position;
pub mod pyrepr;
pub mod rng;
#[cfg(feature = "tensorflow")]
pub mod tensorflow;
pub mod worker;

pub use code::Code;
pub use dispatch::{
    Call, DispatchError, Dispatcher, DispatcherConfig, Driver, Durability, Event, JournalSink,
    MemorySink, Millis, Output, Reply, Request, Response, Seq, State, Submitted, SyncSink, Ticket,
    Update, VecSink, WorkerHeartbeat,
};
