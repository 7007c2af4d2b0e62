//! The tokio side of [`crate::distribute`] and [`crate::distribute_batches`]: sets the read up
//! (version, dataset, job, iteration), then drives the core's [`Reader`] until it is done: it
//! makes the calls the machine asks for, all at once (the machine bounds the element reads in
//! flight by `max_outstanding_requests`), feeds their outcomes and the time back, and hands
//! what it read to the stream, waiting for room in the stream's channel.
//!
//! The two streams share this loop; they differ only in how an element read is asked for and
//! decoded, a [`Fetch`] (JSON elements or Arrow record batches).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use serde::Deserialize;
use serde_json::Value;
use shardwise_core::Millis;
use shardwise_core::client::{
    Batch, Call, CallFailure, Event, ReadError, Reader, ReaderConfig, Reply, Rows, Transmit,
};
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::wire::{
    ClientHeartbeatReply, CreateIteration, CreateJob, IterationLease, RegisterDataset,
};
use shardwise_core::dispatch::{JobId, TaskId};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::fetch::Fetch;
use crate::handout::Control;
use crate::problem::{Code, Problem};
use crate::rest::{Backoff, CallError, DispatcherUrls, Failover, Rest, UrlListError};
use crate::{ClientError, DistributeOptions, ReadInfo, fingerprint, validate};

impl CallFailure for CallError {
    fn is_retryable(&self) -> bool {
        CallError::is_retryable(self)
    }
    fn is_not_found(&self) -> bool {
        matches!(self, CallError::Problem(p) if p.code == Code::NotFound)
    }
}

/// What the stream receives: the payloads of reads, or the error that ended the read.
pub(crate) type Item<P> = Result<Batch<P>, ClientError>;

/// The driver's side of a stream: the channel of reads, the read's ids once set up, and what
/// the two share.
pub(crate) struct Sides<P> {
    pub(crate) tx: mpsc::Sender<Item<P>>,
    pub(crate) info: oneshot::Sender<ReadInfo>,
    pub(crate) control: Arc<Control>,
}

/// Sets the read up and runs it, reading elements with `fetch`; its ids go to `sides.info`,
/// what it read, then its error if it failed, to `sides.tx`.
pub(crate) async fn read<F: Fetch>(
    urls: Result<DispatcherUrls, UrlListError>,
    dataset: DatasetDef,
    options: DistributeOptions,
    fetch: F,
    sides: Sides<F::Payload>,
) {
    let Sides { tx, info, control } = sides;
    match setup(urls, dataset, &options).await {
        Ok((reader, dispatcher, read_info)) => {
            // The stream may be gone already: the reader then releases its lease at once.
            let _ = info.send(read_info);
            drive(reader, dispatcher, fetch, tx, options.read_ahead, control).await
        }
        Err(e) => {
            drop(info);
            drop(tx.send(Err(e)).await)
        }
    }
}

#[derive(Debug, Deserialize)]
struct DatasetIdReply {
    dataset_id: String,
}

#[derive(Debug, Deserialize)]
struct JobIdReply {
    job_id: JobId,
}

#[derive(Debug, Deserialize)]
struct VersionReply {
    version: u32,
}

/// `f`'s call, retried while it fails with a retryable error ([`CallError::is_retryable`]),
/// with capped backoff (10 ms doubling to 1 s), for at most `timeout`: its answer, or the
/// error that ended it (`what` names the call).
pub async fn retrying<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CallError>>,
{
    let start = Instant::now();
    let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_retryable() => {
                if start.elapsed() >= timeout {
                    return Err(ClientError::Unavailable(format!(
                        "{what}: {e} (retried for {:?})",
                        start.elapsed()
                    )));
                }
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(e) => return Err(ClientError::of_call(what, e)),
        }
    }
}

fn millis(d: Duration) -> Millis {
    Millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Checks the options and the dispatcher's protocol, registers the dataset, gets or creates
/// the job and the iteration: a reader of its lease.
async fn setup<P: Rows>(
    urls: Result<DispatcherUrls, UrlListError>,
    dataset: DatasetDef,
    options: &DistributeOptions,
) -> Result<(Reader<CallError, P>, Failover, ReadInfo), ClientError> {
    validate(options)?;
    let urls = urls.map_err(|e| ClientError::InvalidArgument(format!("dispatcher: {e}")))?;
    let tls = crate::tls::client_config(options.ca_file.as_deref())
        .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
    let http = crate::rest::http_client_with(options.request_timeout, tls);
    let rest = Failover::new(http, urls, options.token.clone());
    let timeout = options.unavailable_timeout;
    let version: VersionReply =
        retrying("GET /v1/version", timeout, || rest.get("/v1/version", &[])).await?;
    let ours = shardwise_core::dispatch::wire::PROTOCOL_VERSION;
    if version.version != ours {
        return Err(ClientError::Problem {
            context: "GET /v1/version".into(),
            problem: Box::new(Problem::new(
                Code::FailedPrecondition,
                format!(
                    "Version mismatch with the dispatcher: it speaks protocol version {}, this \
                     client {ours}",
                    version.version
                ),
            )),
        });
    }
    let dataset_id = options.dataset_id.clone().unwrap_or_else(|| fingerprint(&dataset));
    let register =
        RegisterDataset { dataset, dataset_id: Some(dataset_id.clone()), metadata: None };
    let ds: DatasetIdReply =
        retrying("POST /v1/datasets", timeout, || rest.post("/v1/datasets", &register)).await?;
    let job = CreateJob {
        dataset_id: ds.dataset_id.clone(),
        processing_mode: options.processing_mode,
        job_name: options.job_name.clone(),
        num_consumers: options.num_consumers,
        target_workers: options.target_workers,
        cross_trainer_cache: false,
        split_size: options.split_size,
    };
    let job: JobIdReply =
        retrying("POST /v1/jobs", timeout, || rest.post("/v1/jobs", &job)).await?;
    let repetition = options.resume_from.as_ref().map_or(options.repetition, |p| p.repetition);
    let dataset_id = ds.dataset_id;
    let iteration = CreateIteration {
        repetition,
        consumer_index: options.consumer_index,
        resume_from: options.resume_from.clone(),
    };
    let path = format!("/v1/jobs/{}/iterations", job.job_id);
    let lease: IterationLease =
        retrying(&format!("POST {path}"), timeout, || rest.post(&path, &iteration)).await?;
    let info = ReadInfo {
        dataset_id,
        job_id: job.job_id,
        iteration_id: lease.iteration_id,
        client_id: lease.client_id,
        repetition,
    };
    let config = ReaderConfig {
        client_id: lease.client_id,
        incarnation: lease.incarnation,
        // Validated: coordinated reads have both.
        consumer_index: options.num_consumers.and(options.consumer_index),
        target_workers: options.target_workers,
        local_workers: options.local_workers.clone(),
        max_outstanding_requests: options.max_outstanding_requests,
        elements_per_request: options.elements_per_request,
        heartbeat_interval: millis(options.heartbeat_interval).max(Millis(1)),
        unknown_task_timeout: millis(options.unknown_task_timeout),
        unavailable_timeout: millis(options.unavailable_timeout),
    };
    Ok((Reader::new(config, Millis(0)), rest, info))
}

/// A call's outcome.
enum Outcome<P> {
    Heartbeat(Result<ClientHeartbeatReply, CallError>),
    Elements(TaskId, Result<Reply<P>, CallError>),
    Release(Result<Value, CallError>),
}

type Pending<P> = Pin<Box<dyn Future<Output = Outcome<P>> + Send>>;

/// The call `t` asks for, to run (element reads with `fetch`).
fn perform<F: Fetch>(dispatcher: &Failover, fetch: &F, t: Transmit) -> Pending<F::Payload> {
    match t {
        Transmit::Heartbeat { client_id, request } => {
            let rest = dispatcher.clone();
            Box::pin(async move {
                let path = format!("/v1/clients/{client_id}/heartbeat");
                Outcome::Heartbeat(rest.post(&path, &request).await)
            })
        }
        Transmit::GetElements { task, worker_address, max, round } => {
            let rest = worker_rest(dispatcher, &worker_address);
            let query: Vec<(&'static str, String)> = match round {
                Some((consumer, round)) => {
                    vec![("consumer_index", consumer.to_string()), ("round", round.to_string())]
                }
                None => max.map(|m| ("max", m.to_string())).into_iter().collect(),
            };
            // A round's read is one element.
            let max_rows = max.map_or(1, |m| usize::try_from(m).unwrap_or(usize::MAX));
            let path = format!("/v1/tasks/{task}/elements");
            let read = fetch.get_elements(rest, path, query, max_rows);
            Box::pin(async move { Outcome::Elements(task, read.await) })
        }
        Transmit::Release { client_id } => {
            let rest = dispatcher.clone();
            Box::pin(async move {
                Outcome::Release(rest.delete(&format!("/v1/clients/{client_id}")).await)
            })
        }
    }
}

/// A worker's element server: over `https://` when the dispatcher is (a TLS cluster is TLS
/// throughout: workers started with --tls-cert), else plain HTTP.
fn worker_rest(dispatcher: &Failover, address: &str) -> Rest {
    let scheme = if dispatcher.current().starts_with("https://") { "https" } else { "http" };
    dispatcher.with_base(format!("{scheme}://{address}"))
}

fn feed<P: Rows>(reader: &mut Reader<CallError, P>, now: Millis, outcome: Outcome<P>) {
    match outcome {
        Outcome::Heartbeat(Ok(reply)) => reader.handle_heartbeat(now, reply),
        Outcome::Heartbeat(Err(e)) => reader.handle_error(now, Call::Heartbeat, e),
        Outcome::Elements(task, Ok(reply)) => reader.handle_elements(now, task, reply),
        Outcome::Elements(task, Err(e)) => reader.handle_error(now, Call::Elements(task), e),
        Outcome::Release(Ok(_)) => reader.handle_released(now),
        Outcome::Release(Err(e)) => {
            if !e.is_retryable() {
                tracing::debug!(error = %e, "releasing the client failed");
            }
            reader.handle_error(now, Call::Release, e);
        }
    }
}

/// The stream's error for the reader's.
fn client_error(e: ReadError<CallError>) -> ClientError {
    match e {
        ReadError::Refused { context, error, .. } => ClientError::of_call(context, error),
        ReadError::Unavailable { call: Call::Heartbeat, context, error, retried_for } => {
            let retried = Duration::from_millis(retried_for.0);
            ClientError::Unavailable(format!("{context}: {error} (retried for {retried:?})"))
        }
        ReadError::Unavailable { context, error, .. } => {
            ClientError::Unavailable(format!("{context}: {error}"))
        }
        ReadError::DispatcherRestarted { was, now } => {
            ClientError::DispatcherRestarted { was, now }
        }
    }
}

/// Runs `reader` until it is done, reading elements with `fetch`. Dropping the stream closes
/// `tx`: the reader stops and releases its lease.
async fn drive<F: Fetch>(
    mut reader: Reader<CallError, F::Payload>,
    dispatcher: Failover,
    fetch: F,
    tx: mpsc::Sender<Item<F::Payload>>,
    read_ahead: Option<usize>,
    control: Arc<Control>,
) {
    let start = Instant::now();
    let clock = || millis(start.elapsed());
    let mut calls: FuturesUnordered<Pending<F::Payload>> = FuturesUnordered::new();
    // An item the stream's channel had no room for.
    let mut held: Option<Item<F::Payload>> = None;
    let mut closed = false;
    let mut reading = true;
    loop {
        // Hand out what was read while the channel has room.
        while held.is_none() && !closed {
            held = match reader.poll_event() {
                None => break,
                Some(Event::Batch(batch)) => Some(Ok(batch)),
                Some(Event::End) => None,
                Some(Event::Failed(e)) => Some(Err(client_error(e))),
            };
            match held.take().map(|item| tx.try_send(item)) {
                None | Some(Ok(())) => {}
                Some(Err(TrySendError::Full(item))) => held = Some(item),
                Some(Err(TrySendError::Closed(_))) => {
                    closed = true;
                    reader.close(clock());
                }
            }
        }
        if reading && !reader.is_reading() {
            // Over: the reads and heartbeats in flight are no longer wanted.
            reading = false;
            calls.clear();
        }
        let count = control.elements_per_request.swap(0, Ordering::Relaxed);
        if count > 0 {
            reader.set_elements_per_request(count);
        }
        if let Some(ahead) = read_ahead {
            // Reads ready (in the channel, or held for it) count against what may be read ahead.
            let ready = tx.max_capacity() - tx.capacity() + usize::from(held.is_some());
            let limit = match ahead {
                0 => usize::from(ready == 0 && control.waiting.load(Ordering::Acquire)),
                n => n.saturating_sub(ready),
            };
            reader.set_read_limit(limit);
        }
        while let Some(t) = reader.poll_transmit() {
            calls.push(perform(&dispatcher, &fetch, t));
        }
        if reader.is_done() && (held.is_none() || closed) {
            return;
        }
        let deadline =
            reader.poll_timeout().and_then(|at| start.checked_add(Duration::from_millis(at.0)));
        tokio::select! {
            Some(outcome) = calls.next(), if !calls.is_empty() => {
                feed(&mut reader, clock(), outcome);
                // The reader forgets its tasks when the read ends: the list as it was stays.
                if reader.is_reading() && let Ok(mut tasks) = control.tasks.lock() {
                    *tasks = reader.tasks();
                }
            }
            () = control.wake.notified() => {}
            permit = tx.reserve(), if held.is_some() && !closed => match (permit, held.take()) {
                (Ok(permit), Some(item)) => permit.send(item),
                (Ok(_), None) => {}
                (Err(_), _) => {
                    closed = true;
                    reader.close(clock());
                }
            },
            () = tokio::time::sleep_until(deadline.unwrap_or(start)), if deadline.is_some() => {
                reader.handle_timeout(clock());
            }
            () = tx.closed(), if !closed => {
                closed = true;
                held = None;
                reader.close(clock());
            }
        }
    }
}
