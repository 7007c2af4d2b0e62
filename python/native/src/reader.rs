//! A read of a dataset for Python: the Rust client's stream (`shardwise_client::distribute`
//! or `distribute_batches`) on the module's runtime, handed out one item at a time with the
//! GIL released while it waits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_pyarrow::ToPyArrow;
use futures::StreamExt;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;
use shardwise_client::arrow_stream::IpcCompression;
use shardwise_client::{
    ClientError, DistributeOptions, ElementStream, ReadInfo, RecordBatchStream, distribute,
    distribute_batches,
};
use shardwise_core::dispatch::TargetWorkers;
use shardwise_core::dispatch::wire::ProcessingMode;
use tokio::runtime::Runtime;

use crate::errors::client_error;
use crate::positions::{definition_of, parse_position, position_text};
use crate::runtime::runtime;
use crate::value::{from_py, to_py};

/// The stream of one format.
enum Stream {
    Json(ElementStream),
    Arrow(RecordBatchStream),
}

/// What a `__next__` got.
enum Next {
    Json(Value),
    Arrow(RecordBatch),
}

impl Stream {
    async fn next(&mut self) -> Option<Result<Next, ClientError>> {
        match self {
            Stream::Json(s) => s.next().await.map(|r| r.map(Next::Json)),
            Stream::Arrow(s) => s.next().await.map(|r| r.map(Next::Arrow)),
        }
    }
}

impl Stream {
    fn is_over(&self) -> bool {
        match self {
            Stream::Json(s) => s.is_over(),
            Stream::Arrow(s) => s.is_over(),
        }
    }

    async fn close(&mut self) {
        match self {
            Stream::Json(s) => s.close().await,
            Stream::Arrow(s) => s.close().await,
        }
    }
}

/// One reader's read (see `shardwise.reader.Reader`, the Python class over it).
#[pyclass(module = "shardwise._native", skip_from_py_object)]
pub(crate) struct Reader {
    /// The stream (kept once closed: its positions still answer).
    stream: Mutex<Option<Stream>>,
    /// How long `close` waits for the lease's release.
    close_timeout: Duration,
    closed: std::sync::atomic::AtomicBool,
    runtime: Arc<Runtime>,
    /// The process the reader was made in (a fork's child cannot use it).
    pid: u32,
    info: ReadInfo,
}

/// `options[key]` when present and not `None`, extracted.
fn opt<'py, T>(options: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<T>>
where
    T: for<'a> FromPyObject<'a, 'py>,
    for<'a> <T as FromPyObject<'a, 'py>>::Error: Into<PyErr>,
{
    let Some(v) = options.get_item(key)? else { return Ok(None) };
    if v.is_none() {
        return Ok(None);
    }
    v.extract::<T>().map(Some).map_err(|e| PyValueError::new_err(format!("{key}: {}", e.into())))
}

fn seconds(options: &Bound<'_, PyDict>, key: &str) -> PyResult<Option<Duration>> {
    opt::<f64>(options, key)?
        .map(|s| {
            Duration::try_from_secs_f64(s)
                .map_err(|_| PyValueError::new_err(format!("{key}: {s} is not a duration")))
        })
        .transpose()
}

/// The client's options from the Python reader's keyword arguments (checked there).
fn options_of(options: &Bound<'_, PyDict>) -> PyResult<DistributeOptions> {
    let mut o = DistributeOptions::default();
    if let Some(mode) = options.get_item("processing_mode")? {
        o.processing_mode =
            serde_json::from_value::<ProcessingMode>(from_py(&mode, "processing_mode")?)
                .map_err(|e| PyValueError::new_err(format!("processing_mode: {e}")))?;
    }
    o.job_name = opt(options, "job_name")?;
    o.num_consumers = opt(options, "num_consumers")?;
    o.consumer_index = opt(options, "consumer_index")?;
    if let Some(t) = opt::<String>(options, "target_workers")? {
        o.target_workers = serde_json::from_value::<TargetWorkers>(Value::String(t))
            .map_err(|e| PyValueError::new_err(format!("target_workers: {e}")))?;
    }
    o.local_workers = opt(options, "local_workers")?.unwrap_or_default();
    if let Some(n) = opt(options, "max_outstanding_requests")? {
        o.max_outstanding_requests = n;
    }
    if let Some(n) = opt(options, "elements_per_request")? {
        o.elements_per_request = n;
    }
    o.split_size = opt(options, "split_size")?;
    if let Some(r) = opt(options, "repetition")? {
        o.repetition = r;
    }
    o.dataset_id = opt(options, "dataset_id")?;
    o.token = opt(options, "token")?;
    o.ca_file = opt::<String>(options, "ca_file")?.map(Into::into);
    if let Some(d) = seconds(options, "heartbeat_interval")? {
        o.heartbeat_interval = d;
    }
    if let Some(d) = seconds(options, "unknown_task_timeout")? {
        o.unknown_task_timeout = d;
    }
    if let Some(d) = seconds(options, "unavailable_timeout")? {
        o.unavailable_timeout = d;
    }
    if let Some(d) = seconds(options, "request_timeout")? {
        o.request_timeout = d;
    }
    if let Some(text) = opt::<String>(options, "resume_from")? {
        o.resume_from = Some(parse_position(&text, "resume_from")?);
    }
    o.arrow_compression = match opt::<String>(options, "arrow_compression")?.as_deref() {
        None => None,
        Some("lz4") => Some(IpcCompression::Lz4),
        Some("zstd") => Some(IpcCompression::Zstd),
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "arrow_compression must be None, 'lz4' or 'zstd', not {other:?}"
            )));
        }
    };
    o.read_ahead = opt(options, "read_ahead")?;
    if let Some(n) = opt(options, "max_read_bytes")? {
        o.max_read_bytes = n;
    }
    Ok(o)
}

impl Reader {
    /// The stream, in the process it was made in; `None` once closed.
    fn with_stream<T>(&self, f: impl FnOnce(&mut Option<Stream>) -> T) -> PyResult<T> {
        if std::process::id() != self.pid {
            return Err(PyRuntimeError::new_err(
                "this reader was made in another process (before a fork): make readers in the \
                 process that reads, e.g. in an IterableDataset's __iter__",
            ));
        }
        let mut stream = self
            .stream
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the reader's lock is poisoned"))?;
        Ok(f(&mut stream))
    }
}

#[pymethods]
impl Reader {
    /// Sets the read up (registers the dataset, gets or creates the job and the iteration),
    /// waiting with the GIL released; `ShardwiseError` when that fails.
    #[new]
    fn new(
        py: Python<'_>,
        dispatchers: Vec<String>,
        dataset: &Bound<'_, PyAny>,
        format: &str,
        options: &Bound<'_, PyDict>,
    ) -> PyResult<Self> {
        let def = definition_of(dataset)?;
        let options = options_of(options)?;
        let close_timeout = options.request_timeout.saturating_add(Duration::from_secs(5));
        let runtime = runtime()?;
        let arrow = match format {
            "json" => false,
            "arrow" => true,
            other => {
                return Err(PyValueError::new_err(format!(
                    "format must be 'json' or 'arrow', not {other:?}"
                )));
            }
        };
        let started = py.detach(|| {
            runtime.block_on(async move {
                if arrow {
                    let mut s = distribute_batches(dispatchers, def, options);
                    s.ready().await.map(|info| (Stream::Arrow(s), info))
                } else {
                    let mut s = distribute(dispatchers, def, options);
                    s.ready().await.map(|info| (Stream::Json(s), info))
                }
            })
        });
        let (stream, info) = started.map_err(|e| client_error(py, &e))?;
        Ok(Reader {
            stream: Mutex::new(Some(stream)),
            close_timeout,
            closed: std::sync::atomic::AtomicBool::new(false),
            runtime,
            pid: std::process::id(),
            info,
        })
    }

    /// The next element (a JSON value as Python objects, or a `pyarrow.RecordBatch`); `None`
    /// at the end of the read (and once closed); `ShardwiseError` when the read failed, after
    /// everything read before.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let runtime = self.runtime.clone();
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(None);
        }
        let got = self.with_stream(|slot| {
            let stream = slot.as_mut()?;
            py.detach(|| runtime.block_on(stream.next()))
        })?;
        match got {
            None => Ok(None),
            Some(Err(e)) => Err(client_error(py, &e)),
            Some(Ok(Next::Json(v))) => to_py(py, &v).map(Some),
            Some(Ok(Next::Arrow(batch))) => batch.to_pyarrow(py).map(Some),
        }
    }

    /// The JSON text of the position of what was handed out, the last `held_back` rows of
    /// the current read aside; `ShardwiseError` `FAILED_PRECONDITION` when the read has none.
    fn position(&self, py: Python<'_>, held_back: usize) -> PyResult<String> {
        let position = self.with_stream(|slot| match slot.as_ref() {
            Some(Stream::Json(s)) => Some(s.position_holding_back(held_back)),
            Some(Stream::Arrow(s)) => Some(s.position_holding_back(held_back)),
            None => None,
        })?;
        match position {
            Some(Ok(p)) => position_text(&p),
            Some(Err(ClientError::InvalidArgument(why))) => Err(PyValueError::new_err(why)),
            Some(Err(e)) => Err(client_error(py, &e)),
            None => Err(PyRuntimeError::new_err("the reader is closed")),
        }
    }

    /// Asks for at most `count` elements (rows) per read from now on.
    fn set_elements_per_request(&self, count: u32) -> PyResult<()> {
        self.with_stream(|slot| match slot.as_ref() {
            Some(Stream::Json(s)) => s.set_elements_per_request(count),
            Some(Stream::Arrow(s)) => s.set_elements_per_request(count),
            None => {}
        })
    }

    /// The tasks read, as dicts `{"task_id", "worker_address", "done"}`.
    fn tasks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let tasks = self.with_stream(|slot| match slot.as_ref() {
            Some(Stream::Json(s)) => s.tasks(),
            Some(Stream::Arrow(s)) => s.tasks(),
            None => Vec::new(),
        })?;
        let list = PyList::empty(py);
        for t in tasks {
            let d = PyDict::new(py);
            d.set_item("task_id", t.task_id.to_string())?;
            d.set_item("worker_address", t.worker_address)?;
            d.set_item("done", t.done)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// Stops reading and releases the client lease, waiting for the release (at most the
    /// request timeout and 5 s); what was not handed out is dropped. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Ok(());
        }
        let (runtime, timeout) = (self.runtime.clone(), self.close_timeout);
        self.with_stream(|slot| {
            if let Some(stream) = slot.as_mut() {
                py.detach(|| {
                    runtime.block_on(async {
                        let _ = tokio::time::timeout(timeout, stream.close()).await;
                    })
                });
            }
        })
    }

    /// The read is over: ended, failed or closed (items not handed out may remain).
    #[getter]
    fn over(&self) -> PyResult<bool> {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(true);
        }
        self.with_stream(|slot| slot.as_ref().is_none_or(Stream::is_over))
    }

    #[getter]
    fn dataset_id(&self) -> String {
        self.info.dataset_id.clone()
    }

    #[getter]
    fn job_id(&self) -> String {
        self.info.job_id.to_string()
    }

    #[getter]
    fn iteration_id(&self) -> String {
        self.info.iteration_id.to_string()
    }

    #[getter]
    fn client_id(&self) -> String {
        self.info.client_id.to_string()
    }

    #[getter]
    fn repetition(&self) -> u64 {
        self.info.repetition
    }
}
