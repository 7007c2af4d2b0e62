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
//! The IO side is split into crates by what they depend on; Cargo keeps each from using what
//! it does not list (tests read the manifests of the smaller ones):
//!
//! * `shardwise-journal` (`gateway/journal/`): the dispatcher's durable journal (the work
//!   dir's segments, its lock, replay, compaction and `journal dump`), on the standard library
//!   and `shardwise-core` only: no tokio, no HTTP.
//! * `shardwise-client` (`gateway/client/`): the Rust client ([`client::distribute`]) and
//!   what it stands on, the REST client with failover ([`http::client`]), problem details
//!   ([`Problem`]) and the clients' TLS settings (in [`http::tls`]). A training program
//!   depends on it without the servers: it has no axum, tonic, kube, clap or utoipa; its
//!   `axum` and `openapi` features, which the servers turn on, make a problem an answer and
//!   give it its schema.
//! * `shardwise-http` (`gateway/http/`): the HTTP kit every server shares (problem+json, the
//!   front services, the accept loop, auth, limits, budgets, metrics, the strict body
//!   extractor, the served OpenAPI document, the status page, the servers' TLS), on the core
//!   and the client crate; no tonic, kube or clap.
//! * `shardwise-worker` (`gateway/worker/`): `shardwise worker`, its tasks, its files under
//!   the data roots and its routes, on the core, the HTTP kit and the client crate; no tonic,
//!   kube, etcd or journal.
//! * This crate, `shardwise-gateway`: the dispatcher, etcd, Kubernetes, TensorFlow's
//!   protocol, the OpenAPI document's assembly and the `shardwise` command. It re-exports the
//!   client, the HTTP kit and the worker under their old paths ([`client`], [`http`],
//!   [`worker`]).
//!
//! # Modules by role, and which may use which
//!
//! * [`kubernetes`]: the Kubernetes API client, the live cluster of `--cluster-config` and the
//!   `shardwise resolve` plumbing. Uses [`http`] (problems).
//! * [`dispatcher`]: the dispatcher process: its arguments, start and run, the driver handle
//!   around the core, the REST front (each resource's routes in one file, merged once) and
//!   TensorFlow's `DispatcherService` over gRPC on the same port. Uses [`http`],
//!   [`kubernetes`], [`tf`], [`etcd`], and the work-dir journal ([`shardwise_journal`]).
//! * [`openapi`]: the one document, assembled from the routes [`dispatcher`] and [`worker`]
//!   export. Uses [`http`], [`dispatcher`], [`worker`]; nothing uses it but the command (the
//!   servers serve the checked-in copy, which a test keeps equal to it).
//!
//! The direction is one way (a test, `modules_have_no_import_cycle`, checks it from the
//! sources): `kubernetes` <- `dispatcher`; `tf`, `etcd` <- `dispatcher`; `dispatcher` <-
//! `openapi`. The re-exported crates ([`client`], [`http`], [`worker`]) cannot use this crate.
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
/// The HTTP server kit: the `shardwise-http` crate, re-exported.
pub use shardwise_http as http;
/// `shardwise worker`: the `shardwise-worker` crate, re-exported.
pub use shardwise_worker as worker;
pub mod dispatcher;
pub mod etcd;
pub mod kubernetes;
pub mod openapi;
pub mod tf;

/// Problem details, the one error answer of every surface.
pub use crate::http::Problem;
/// The status classes of every error (defined in core, where the state machines use them).
pub use shardwise_core::Code;

#[cfg(test)]
mod layering;
