//! The IO side of Shardwise: the `shardwise` command and everything that reads the host.
//!
//! HTTP between the processes (worker to dispatcher, client to dispatcher and workers) is
//! HTTP/1.1 over reqwest, plain or TLS: `--tls-cert`/`--tls-key` make a server speak TLS only,
//! and `https://` URLs are trusted against the system's roots and a CA file
//! ([`http::tls`]). One crypto stack: rustls on ring, which kube brings already (reqwest gets
//! a preconfigured rustls config, no provider of its own), so one tokio, one hyper, one rustls.
//!
//! # Crates of the IO side
//!
//! The durable journal of the dispatcher is a crate of its own, `shardwise-journal`
//! (`gateway/journal/`): the work dir's segments, its lock, replay, compaction and
//! `journal dump`, on the standard library and `shardwise-core` only (no tokio, no HTTP), so
//! Cargo keeps it from using anything here. This crate depends on it; nothing here is part of
//! it.
//!
//! The Rust client is a crate of its own too, `shardwise-client` (`gateway/client/`): the
//! client ([`client::distribute`]) and what it stands on, the REST client with failover
//! ([`http::client`]), problem details ([`Problem`]) and the clients' TLS settings (in
//! [`http::tls`]). A training program depends on it without the servers: it has no axum,
//! tonic, kube, clap or utoipa (a test reads its manifest); its `axum` and `openapi` features,
//! which this crate turns on, make a problem an answer and give it its schema. This crate
//! re-exports it under the old paths ([`client`], [`http::client`], [`http::problem`]).
//!
//! # Modules by role, and which may use which
//!
//! * [`http`]: the HTTP kit every server and client shares (problem+json, the front services,
//!   the accept loop, auth, limits, metrics, the strict body extractor, the served OpenAPI
//!   document, and the client crate's REST client, problems and TLS). Uses nothing else in
//!   this crate.
//! * [`kubernetes`]: the Kubernetes API client, the live cluster of `--cluster-config` and the
//!   `shardwise resolve` plumbing. Uses [`http`] (problems).
//! * [`dispatcher`]: the dispatcher process: its arguments, start and run, the driver handle
//!   around the core, the REST front (each resource's routes in one file, merged once) and
//!   TensorFlow's `DispatcherService` over gRPC on the same port. Uses [`http`],
//!   [`kubernetes`], [`tf`], [`etcd`], and the work-dir journal ([`shardwise_journal`]).
//! * [`worker`]: the worker process and its data plane. Uses [`http`].
//! * [`openapi`]: the one document, assembled from the routes [`dispatcher`] and [`worker`]
//!   export. Uses [`http`], [`dispatcher`], [`worker`]; nothing uses it but the command (the
//!   servers serve the checked-in copy, which a test keeps equal to it).
//!
//! The direction is one way (a test, `modules_have_no_import_cycle`, checks it from the
//! sources): `http` <- `kubernetes` <- `dispatcher`; `tf`, `etcd` <- `dispatcher`; `http`
//! <- `worker`; `dispatcher`, `worker` <- `openapi`.
//!
//! * [`tf`]: TensorFlow's tf.data service: its gRPC services (generated over the core's
//!   messages) and the files a dataset's graph names, globbed under the data roots; the
//!   IO-free rest (messages, graph reading, fingerprints, conversions) is the core's
//!   `shardwise_core::tensorflow`, re-exported here. Uses nothing else in this crate.
//! * [`etcd`]: a client of etcd's v3 API (generated types of the project's own `.proto`
//!   subset, failover between members). Uses nothing else in this crate.
//!
//! # Errors
//!
//! Every error is a type, sorted into one [`Code`] (the status classes): an HTTP answer is a
//! [`Problem`] built from its code; a process that cannot start returns its
//! [`dispatcher::StartError`] or [`worker::StartError`], which knows its exit status and its
//! stderr line; the client's retry rules match on the code.
#![forbid(unsafe_code)]
// Handlers return `Result<_, Problem>`; a problem is built at most once per request, on the
// error path, so its size (an RFC 9457 object with optional members) costs nothing that matters.
#![allow(clippy::result_large_err)]

/// The Rust client ([`client::distribute`]): the `shardwise-client` crate, re-exported.
pub use shardwise_client as client;
pub mod dispatcher;
pub mod etcd;
pub mod http;
pub mod kubernetes;
pub mod openapi;
pub mod tf;
pub mod worker;

/// Problem details, the one error answer of every surface.
pub use crate::http::Problem;
/// The status classes of every error (defined in core, where the state machines use them).
pub use shardwise_core::Code;

#[cfg(test)]
mod layering;
