//! One input, one output: every request the dispatcher serves is a [`Request`], every answer a
//! [`Reply`], and everything the caller must do comes out of
//! [`Dispatcher::poll_output`](super::Dispatcher::poll_output) as an [`Output`].
//!
//! A caller that knows which request it sent wants its reply typed: [`Call`] ties each request
//! type to its reply type ([`Call::Output`]), so `driver.call(now, heartbeat)` gives a
//! [`WorkerHeartbeatReply`], with one [`Request`] / [`Response`] pair underneath.

use super::error::DispatchError;
use super::state::Update;
use super::status::{GetStatus, StatusReport};
use super::tensorflow::{
    CompressionDecision, DisableCompression, RegisterTfDataset, TfGetSplit, TfSplit,
};
use super::types::{ClientId, IterationId, JobId, TaskId};
use super::wire::{
    ClientHeartbeat, ClientHeartbeatReply, CreateIteration, CreateJob, DatasetDeleted, DatasetInfo,
    DatasetRegistered, GetSplits, IterationLease, JobCreated, JobInfo, MaybeRemove, MetricsFigures,
    RegisterDataset, Released, Removed, SplitsReply, VersionInfo, WorkerHeartbeat,
    WorkerHeartbeatReply, WorkerUpdate, WorkerUpdateReply, WorkersList,
};

/// Identifies a request handed to [`Dispatcher::handle_request`](super::Dispatcher::handle_request);
/// its reply carries the same ticket. Tickets increase by one per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub u64);

/// The sequence number of a batch of journal records ([`Output::Persist`]). Batches are
/// numbered 1, 2, ...; reporting `seq` persisted reports every batch up to it persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Seq(pub u64);

/// Every command and query the dispatcher serves. Path parameters travel beside their body.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Request {
    /// Register or heartbeat a worker.
    WorkerHeartbeat(WorkerHeartbeat),
    /// Task progress from a worker.
    WorkerUpdate(WorkerUpdate),
    /// Get-or-register a dataset.
    RegisterDataset(RegisterDataset),
    /// Get-or-create a job.
    CreateJob(CreateJob),
    /// Get-or-create an iteration of a job and take a client lease on it.
    CreateIteration(JobId, CreateIteration),
    /// A client's heartbeat on its lease.
    ClientHeartbeat(ClientId, ClientHeartbeat),
    /// Release a client lease.
    ReleaseClient(ReleaseClient),
    /// Get-split (DYNAMIC).
    GetSplits(IterationId, GetSplits),
    /// Coordinated reads: a vote to remove a task.
    MaybeRemoveTask(TaskId, MaybeRemove),
    /// The protocol version, incarnation and mode.
    Version(GetVersion),
    /// Every registered worker.
    Workers(ListWorkers),
    /// A registered dataset.
    Dataset(GetDataset),
    /// A job and its iterations.
    Job(GetJob),
    /// The figures `/metrics` reports.
    Metrics(GetMetrics),
    /// Get-or-register a TensorFlow dataset (answered like [`Request::RegisterDataset`]).
    RegisterTfDataset(RegisterTfDataset),
    /// TensorFlow's `DisableCompressionAtRuntime`.
    DisableCompression(DisableCompression),
    /// TensorFlow's `GetSplit` (one split of a TensorFlow DYNAMIC iteration).
    TfGetSplit(IterationId, TfGetSplit),
    /// The status snapshot (`GET /v1/status`).
    Status(GetStatus),
    /// Delete a dataset no job with iterations uses.
    DeleteDataset(DeleteDataset),
}

/// `DELETE /v1/datasets/{dataset_id}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteDataset {
    /// The dataset.
    pub dataset_id: String,
}

/// Release a client lease (`DELETE /v1/clients/{client_id}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseClient {
    /// The lease.
    pub client_id: ClientId,
}

/// `GET /v1/version`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GetVersion;

/// `GET /v1/workers`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListWorkers;

/// `GET /v1/datasets/{dataset_id}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetDataset {
    /// The dataset.
    pub dataset_id: String,
}

/// `GET /v1/jobs/{job_id}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetJob {
    /// The job.
    pub job_id: JobId,
}

/// The figures of `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GetMetrics;

/// A successful answer, one variant per [`Request`] variant. It serializes as the reply it
/// holds (the REST front's JSON).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum Response {
    /// To [`Request::WorkerHeartbeat`].
    WorkerHeartbeat(WorkerHeartbeatReply),
    /// To [`Request::WorkerUpdate`].
    WorkerUpdate(WorkerUpdateReply),
    /// To [`Request::RegisterDataset`].
    DatasetRegistered(DatasetRegistered),
    /// To [`Request::CreateJob`].
    JobCreated(JobCreated),
    /// To [`Request::CreateIteration`].
    IterationLease(IterationLease),
    /// To [`Request::ClientHeartbeat`].
    ClientHeartbeat(ClientHeartbeatReply),
    /// To [`Request::ReleaseClient`].
    Released(Released),
    /// To [`Request::GetSplits`].
    Splits(SplitsReply),
    /// To [`Request::MaybeRemoveTask`].
    Removed(Removed),
    /// To [`Request::Version`].
    Version(VersionInfo),
    /// To [`Request::Workers`].
    Workers(WorkersList),
    /// To [`Request::Dataset`].
    Dataset(DatasetInfo),
    /// To [`Request::Job`].
    Job(JobInfo),
    /// To [`Request::Metrics`].
    Metrics(MetricsFigures),
    /// To [`Request::DisableCompression`].
    CompressionDecision(CompressionDecision),
    /// To [`Request::TfGetSplit`].
    TfSplit(TfSplit),
    /// To [`Request::Status`] (boxed: it is far larger than every other reply).
    Status(Box<StatusReport>),
    /// To [`Request::DeleteDataset`].
    DatasetDeleted(DatasetDeleted),
}

/// What a request gets back: its response, or why it was refused.
pub type Reply = Result<Response, DispatchError>;

/// What the dispatcher asks its caller to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Make `records` durable, after every earlier batch, then report it with
    /// [`Dispatcher::handle_persisted`](super::Dispatcher::handle_persisted)`(seq)`.
    Persist {
        /// The batch's sequence number.
        seq: Seq,
        /// The records, in the order they were applied.
        records: Vec<Update>,
    },
    /// Send `reply` to whoever sent the request of `ticket`. Every record it depends on (every
    /// record emitted before it was computed) is durable.
    Reply {
        /// The request's ticket.
        ticket: Ticket,
        /// The answer.
        reply: Reply,
    },
}

/// A request whose reply type is known: `driver.call(now, request)` answers a `Self::Output`.
pub trait Call: Into<Request> {
    /// The reply.
    type Output;
    /// The typed reply inside `response`; `None` when it is another kind (never, for a
    /// response to a request of this type).
    fn from_response(response: Response) -> Option<Self::Output>;

    /// The typed reply to a request of this type.
    fn output(reply: Reply) -> Result<Self::Output, DispatchError> {
        reply.map(|r| {
            // `Dispatcher::handle_request` answers each request with its own variant (checked
            // for every request by the tests): another kind is a bug in this crate.
            Self::from_response(r).unwrap_or_else(|| unreachable!("a reply of another kind"))
        })
    }
}

macro_rules! call {
    ($($request:ty => $response:ident: $output:ty;)*) => {$(
        impl Call for $request {
            type Output = $output;
            fn from_response(response: Response) -> Option<$output> {
                match response {
                    Response::$response(r) => Some(r),
                    _ => None,
                }
            }
        }
    )*};
}

macro_rules! into_request {
    ($($request:ident => $variant:ident;)*) => {$(
        impl From<$request> for Request {
            fn from(r: $request) -> Request {
                Request::$variant(r)
            }
        }
    )*};
    ($($id:ident, $body:ident => $variant:ident;)*) => {$(
        impl From<($id, $body)> for Request {
            fn from((id, body): ($id, $body)) -> Request {
                Request::$variant(id, body)
            }
        }
    )*};
}

into_request! {
    WorkerHeartbeat => WorkerHeartbeat;
    WorkerUpdate => WorkerUpdate;
    RegisterDataset => RegisterDataset;
    CreateJob => CreateJob;
    ReleaseClient => ReleaseClient;
    GetVersion => Version;
    ListWorkers => Workers;
    GetDataset => Dataset;
    GetJob => Job;
    GetMetrics => Metrics;
    RegisterTfDataset => RegisterTfDataset;
    DisableCompression => DisableCompression;
    GetStatus => Status;
    DeleteDataset => DeleteDataset;
}

into_request! {
    JobId, CreateIteration => CreateIteration;
    ClientId, ClientHeartbeat => ClientHeartbeat;
    IterationId, GetSplits => GetSplits;
    TaskId, MaybeRemove => MaybeRemoveTask;
    IterationId, TfGetSplit => TfGetSplit;
}

call! {
    WorkerHeartbeat => WorkerHeartbeat: WorkerHeartbeatReply;
    WorkerUpdate => WorkerUpdate: WorkerUpdateReply;
    RegisterDataset => DatasetRegistered: DatasetRegistered;
    CreateJob => JobCreated: JobCreated;
    (JobId, CreateIteration) => IterationLease: IterationLease;
    (ClientId, ClientHeartbeat) => ClientHeartbeat: ClientHeartbeatReply;
    ReleaseClient => Released: Released;
    (IterationId, GetSplits) => Splits: SplitsReply;
    (TaskId, MaybeRemove) => Removed: Removed;
    GetVersion => Version: VersionInfo;
    ListWorkers => Workers: WorkersList;
    GetDataset => Dataset: DatasetInfo;
    GetJob => Job: JobInfo;
    GetMetrics => Metrics: MetricsFigures;
    RegisterTfDataset => DatasetRegistered: DatasetRegistered;
    DisableCompression => CompressionDecision: CompressionDecision;
    (IterationId, TfGetSplit) => TfSplit: TfSplit;
    GetStatus => Status: Box<StatusReport>;
    DeleteDataset => DatasetDeleted: DatasetDeleted;
}
