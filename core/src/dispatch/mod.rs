//! The tf.data service dispatcher as a sans-IO state machine.
//!
//! # The promise
//!
//! The dispatcher is deterministic and does no IO: no sockets, no files, no clocks, no threads.
//! Time comes in as a value ([`Millis`]) and so does every request ([`Request`]); what it asks
//! of its caller comes out as values ([`Output`]): batches of journal records to make durable,
//! and replies to send. The same inputs give the same outputs, which is what the simulation
//! and the model test rely on.
//!
//! # The durability barrier
//!
//! A reply is released by [`Dispatcher::poll_output`] only after the caller reported, with
//! [`Dispatcher::handle_persisted`], every batch emitted before the reply was computed: its
//! own records and those of every earlier request. A read waits too, so no reply reveals state
//! a crash could lose. With nothing outstanding a reply is released at once. There is no other
//! way to get a reply.
//!
//! # The run loop
//!
//! [`Driver`] is this loop, written once, over a [`JournalSink`]; here it is by hand:
//!
//! ```
//! use shardwise_core::dispatch::{
//!     Dispatcher, DispatcherConfig, Millis, Output, Request, Response, WorkerHeartbeat,
//! };
//!
//! let mut dispatcher = Dispatcher::new(DispatcherConfig::default(), "inc-1".into(), Millis(0))?;
//! let mut journal = Vec::new(); // stands for a file: append, then fsync
//! let now = Millis(1_000);
//! let heartbeat = WorkerHeartbeat { worker_address: "w0:5000".into(), ..Default::default() };
//! let ticket = dispatcher.handle_request(now, Request::WorkerHeartbeat(heartbeat));
//! let mut answered = false;
//! while let Some(output) = dispatcher.poll_output() {
//!     match output {
//!         Output::Persist { seq, records } => {
//!             journal.extend(records); // write and fsync ...
//!             dispatcher.handle_persisted(seq); // ... then say so
//!         }
//!         Output::Reply { ticket: t, reply } => {
//!             assert_eq!(t, ticket);
//!             assert!(matches!(reply, Ok(Response::WorkerHeartbeat(_)))); // send it
//!             answered = true;
//!         }
//!     }
//! }
//! assert!(answered);
//! assert_eq!(journal.len(), 2); // the dispatcher's start and the worker's registration
//! // Sleep until the next deadline (or the next request), then run the timers.
//! let deadline = dispatcher.poll_timeout();
//! dispatcher.handle_timeout(deadline);
//! # Ok::<(), shardwise_core::dispatch::DispatchError>(())
//! ```
//!
//! Every state change is an [`Update`]; [`apply`] is the one function that performs it, on
//! the live path and in [`State::replay`], so replaying the journal rebuilds exactly the state
//! the replies were computed from. If making a record durable fails, the replies must not be
//! sent and the process must stop accepting requests: its memory is ahead of its journal
//! ([`Driver`] does this).

//! # Where Shardwise differs from TensorFlow's dispatcher, on purpose
//!
//! * **Lost workers act.** A worker silent for `worker_timeout` is declared lost
//!   ([`Update::WorkerLost`], journaled): its tasks stop blocking `iteration_finished`, new
//!   iterations do not get tasks on it, and the DYNAMIC splits it held are handed out again.
//!   TensorFlow only logs the loss, so an iteration with a task on a dead worker never ends
//!   and its in-flight splits are lost (at-most-once).
//! * **DYNAMIC splits are leased.** A split handed to a worker stays leased until the same
//!   worker asks for more splits of that iteration or finishes its task (that acknowledges
//!   it); a repetition ends for a worker only when no split of it is leased or queued
//!   anywhere, so a worker lost late cannot take splits with it. Elements of a split that
//!   was in flight on a lost worker may be produced twice; none is lost. A worker that sends
//!   a `worker_uid` is recognised when its process restarts at the same address, and gives
//!   its splits back at once. This is for declarative datasets: TensorFlow workers never
//!   acknowledge splits, so a DYNAMIC iteration of a TensorFlow dataset keeps TensorFlow's
//!   at-most-once meaning (one journaled cursor per split provider, no leases: the splits a
//!   lost TensorFlow worker held are not handed out again, and none is handed out twice in a
//!   repetition, across restarts too).
//! * **Splits are counters.** Datasets are declarative, so the split provider of a range,
//!   list, files or splits source is two numbers per iteration: nothing is fast-forwarded
//!   on recovery, and get-split hands out up to `max_splits` splits of `split_size` elements
//!   per call (TensorFlow: one split per call, one element per split for ranges).
//! * **Everything observable is journaled**, garbage collection included
//!   ([`Update::GarbageCollectIteration`]): a collected iteration does not come back after a
//!   restart. [`Update::Snapshot`] holds the whole state so a journal can be compacted.
//! * **Worker updates are per entry, from the holder.** An unknown task id is reported back
//!   (`unknown_tasks`) instead of failing the whole update, so one stale id cannot wedge a
//!   worker (TensorFlow issue #52252). An update or get-split must come from the worker
//!   holding the task (its address and, if it registered with one, its `worker_uid`); one
//!   entry naming another worker's task refuses the whole update, which changes nothing.
//! * **Datasets are deduplicated and bounded.** A dataset registered again without an id
//!   gets the id it has (TensorFlow's GetOrRegisterDataset fingerprint); `max_dataset_bytes`
//!   bounds what datasets hold, for new registrations only.
//! * **Job names are strict.** Reusing a job name with another dataset, `num_consumers` or
//!   `split_size` is an error (TensorFlow silently joins the first job). Static sharding
//!   without a worker list, an unshardable dataset, and `shard_hint` under a non-HINT
//!   policy are refused when the job is created, not when a worker first builds its task.
//! * **Coordinated reads key consumers by `consumer_index`**, not client id (TensorFlow
//!   keys its round estimates inconsistently), so a restarted consumer replaces its
//!   predecessor. Clients that give no index (TensorFlow's, whose `GetOrCreateIteration`
//!   has none) are counted by client id, as TensorFlow does. `maybe_remove_task` does not
//!   block: voters ask again until all agree.
//! * **No hidden infinite leases.** A new client has `client_first_heartbeat_grace`
//!   (default 30 min) to send its first heartbeat; TensorFlow waits forever. Every duration
//!   is validated (zero is an error); "never collect" is `job_gc_timeout: None`, not `-1`.
//! * **An incarnation id** (an input) is carried in replies so workers and clients detect a
//!   restart of a dispatcher that is not fault tolerant.
//! * Error texts name real options (`job_gc_timeout`, not TensorFlow's non-existent
//!   `iteration_gc_timeout_ms`).

//! # Scenario coverage
//!
//! Every scenario of TensorFlow's dispatcher tests (`dispatcher_scenarios.md`) that this
//! model can express is a test named after its id: ST-* and JR-* in `tests/dispatch_basics.rs`
//! and [`journal`]; SV-*, FT-*, JS-*, DY-*, AS-*, IM-* in `tests/dispatch_scenarios.rs`
//! (driven by the virtual-clock simulation of `tests/support`); IM-03 and the dispatcher's
//! side of coordinated reads in `tests/dispatch_coordinated.rs`. Out of scope, with why:
//!
//! * SV-17 (distributed snapshots), group J / CT-* (cross-trainer cache): TensorFlow
//!   graph-runtime features the declarative dataset model does not have. Run-time
//!   compression exists for TensorFlow datasets ([`tensorflow`], `tests/dispatch_tensorflow.rs`).
//!
//! TensorFlow datasets ([`TfDataset`]: a serialized graph and the client's metadata, stored as
//! sent) and TensorFlow workers ([`TfWorkerInfo`]) live beside declarative datasets and
//! Shardwise workers: tasks of a TensorFlow dataset go to TensorFlow workers only, a
//! declarative dataset's to Shardwise workers only, and a worker's kind is fixed when it
//! registers.
//! * SV-16, AS-04, AS-09, AS-10 and the LOCAL halves of SV-03 / SV-05: deployment modes and
//!   in-process (LOCAL) workers, which a REST service has no equivalent of.
//! * DY-05..DY-08, DY-10, the interleave halves of DY-01 / DY-11, the zip half of JS-14,
//!   explicit `shard(n, i)` and file-level HINT in AS-03 / AS-05 / AS-06: zip, interleave,
//!   sampling, `enumerate`, snapshot and nested-service datasets are TensorFlow graph ops.
//! * JS-18's `service`, `protocol` and `compression` checks: Python API arguments.
//! * Group H (CR-*) and group I (WT-*) need the worker's round-robin runner and the client's
//!   `target_workers` filtering: they are end-to-end tests of the worker and client in
//!   `tests/tests/worker_http.rs`, named after their ids: CR-01, CR-06, CR-09, WT-01 with
//!   WT-02, and WT-07. Not covered: CR-02 (a second set of consumers on an advanced job; the
//!   worker refuses it, untested end to end), CR-03 (a bucketizing pipeline: `group_by_window`
//!   is a TensorFlow graph op), CR-04 and CR-05 (cardinality: the dataset model has none to
//!   check or report), CR-07 and CR-08 (workers and the dispatcher stopped and restarted
//!   under coordinated reads: long process choreography, not yet written), WT-03 and WT-05
//!   (a LOCAL worker in the client's process: a REST service has none), WT-04 and WT-06
//!   (DYNAMIC with tags, remote workers added mid-job: expressible, not yet written).

pub mod address;
mod config;
mod dispatcher;
mod driver;
pub mod error;
pub mod framing;
mod heartbeat_index;
pub mod journal;
mod protocol;
pub mod replica_log;
pub mod state;
pub mod status;
pub mod tensorflow;
pub mod types;
pub mod wire;

pub use config::{DEFAULT_MAX_DATASET_BYTES, DispatcherConfig};
pub use dispatcher::{Dispatcher, Event};
pub use driver::{
    Driver, Durability, JOURNAL_BROKEN, JournalSink, MemorySink, Submitted, SyncSink, VecSink,
};
pub use error::DispatchError;
pub use protocol::{
    Call, DeleteDataset, GetDataset, GetJob, GetMetrics, GetVersion, ListWorkers, Output,
    ReleaseClient, Reply, Request, Response, Seq, Ticket,
};
pub use state::{IndexDrift, NotInWorkerList, State, Update, apply};
pub use status::{GetStatus, STATUS_LIST_CAP, StatusReport};
pub use tensorflow::{
    CompressionDecision, DatasetSpec, DisableCompression, RegisterTfDataset, SplitProviderDef,
    TfDataset, TfDatasetSummary, TfDatasetView, TfGetSplit, TfSplit, TfSplitProviders,
    TfWorkerInfo, TransferServer,
};
pub use types::{
    ClientId, IdError, IterationId, JobId, Millis, ShardingPolicy, TargetWorkers, TaskId,
};
pub use wire::{
    ClientHeartbeat, ClientHeartbeatReply, CreateIteration, CreateJob, DatasetDeleted, DatasetInfo,
    DatasetRegistered, GetSplits, IterationLease, JobCreated, JobInfo, MaybeRemove, MetricsFigures,
    RegisterDataset, Released, Removed, SplitsReply, TaskProgress, VersionInfo, WorkerHeartbeat,
    WorkerHeartbeatReply, WorkerUpdate, WorkerUpdateReply, WorkersList,
};
