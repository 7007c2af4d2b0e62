//! `Dispatcher`: the dispatcher's REST API through the Rust client's failover
//! (`shardwise_client::rest::Failover`): replicas tried in turn, redirects followed only within
//! the list, retryable failures retried with capped backoff for `unavailable_timeout`, answers
//! bounded. The Python class of the same name keeps the typed calls over [`Dispatcher::call`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use serde_json::Value;
use shardwise_client::rest::{DispatcherUrls, Failover, http_client_with};
use shardwise_client::{ClientError, retrying};
use tokio::runtime::Runtime;

use crate::errors::client_error;
use crate::runtime::runtime;

/// A duration of `seconds` (finite, not negative; `what` names it in the error).
pub(crate) fn duration(seconds: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        PyValueError::new_err(format!("{what} must be a number of seconds, not {seconds}"))
    })
}

/// One dispatcher, or the replicas of one.
///
/// Its HTTP client lives on the process's runtime: a process made by `fork` (a PyTorch
/// `DataLoader` worker) makes its own on its first call, as the reader does.
#[pyclass(module = "shardwise._native", frozen)]
pub(crate) struct Dispatcher {
    urls: DispatcherUrls,
    token: Option<String>,
    tls: rustls::ClientConfig,
    timeout: Duration,
    unavailable_timeout: Duration,
    /// The client of the process that made it (its id), on that process's runtime.
    live: Mutex<Option<(u32, Failover, Arc<Runtime>)>>,
}

impl Dispatcher {
    /// This process's client and runtime.
    fn live(&self) -> PyResult<(Failover, Arc<Runtime>)> {
        let mut live = self
            .live
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the dispatcher's lock is poisoned"))?;
        let pid = std::process::id();
        if let Some((owner, failover, runtime)) = live.as_ref()
            && *owner == pid
        {
            return Ok((failover.clone(), runtime.clone()));
        }
        let runtime = runtime()?;
        let http = http_client_with(self.timeout, self.tls.clone());
        let failover = Failover::new(http, self.urls.clone(), self.token.clone());
        *live = Some((pid, failover.clone(), runtime.clone()));
        Ok((failover, runtime))
    }
}

#[pymethods]
impl Dispatcher {
    /// `addresses`: base URLs (`http://host:port`, `host:port`, `https://host:port`), a list or
    /// a comma-separated string, checked
    /// (`ValueError`); `ca_file`: PEM certificates trusted besides the system's (`OSError`
    /// when it cannot be read); `timeout`: the most seconds one call may take, its answer read
    /// in full.
    #[new]
    #[pyo3(signature = (addresses, token=None, ca_file=None, timeout=30.0, unavailable_timeout=3600.0))]
    fn new(
        addresses: &Bound<'_, PyAny>,
        token: Option<String>,
        ca_file: Option<String>,
        timeout: f64,
        unavailable_timeout: f64,
    ) -> PyResult<Self> {
        let urls = match addresses.extract::<String>() {
            Ok(list) => DispatcherUrls::parse(&list),
            Err(_) => DispatcherUrls::new(addresses.extract::<Vec<String>>()?),
        };
        let urls = urls.map_err(|e| PyValueError::new_err(e.to_string()))?;
        let timeout = duration(timeout, "timeout")?;
        if timeout.is_zero() {
            return Err(PyValueError::new_err("timeout must be positive"));
        }
        let unavailable_timeout = duration(unavailable_timeout, "unavailable_timeout")?;
        let tls =
            shardwise_client::tls::client_config(ca_file.as_deref().map(std::path::Path::new))
                .map_err(|e| PyOSError::new_err(e.to_string()))?;
        let d =
            Dispatcher { urls, token, tls, timeout, unavailable_timeout, live: Mutex::new(None) };
        d.live()?;
        Ok(d)
    }

    /// The configured base URLs, in order.
    #[getter]
    fn addresses(&self) -> Vec<String> {
        self.urls.bases().to_vec()
    }

    /// The base URL calls go to first: the replica that answered last.
    #[getter]
    fn current(&self) -> PyResult<String> {
        Ok(self.live()?.0.current().to_owned())
    }

    /// `method path?query` with `body` (JSON text) when given: the JSON answer, as text.
    /// With `retry`, retryable failures are retried for up to `unavailable_timeout`; without,
    /// each replica is tried once. `ShardwiseError` when the call failed.
    #[pyo3(signature = (method, path, body=None, query=Vec::new(), retry=true))]
    fn call(
        &self,
        py: Python<'_>,
        method: &str,
        path: &str,
        body: Option<&str>,
        query: Vec<(String, String)>,
        retry: bool,
    ) -> PyResult<String> {
        let method = reqwest::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
            .map_err(|_| PyValueError::new_err(format!("not an HTTP method: {method:?}")))?;
        if !path.starts_with('/') || path.chars().any(|c| c.is_control() || c == ' ') {
            return Err(PyValueError::new_err(format!("not a path of the API: {path:?}")));
        }
        let body: Option<Value> = body
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| PyValueError::new_err(format!("the body is not JSON: {e}")))?;
        let query: Vec<(&str, String)> =
            query.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let what = format!("{method} {path}");
        let (failover, runtime) = self.live()?;
        let timeout = self.unavailable_timeout;
        let failover = &failover;
        let answer = py.detach(|| {
            runtime.block_on(async {
                let once =
                    || failover.request::<Value>(method.clone(), path, &query, body.as_ref());
                if retry {
                    retrying(&what, timeout, once).await
                } else {
                    once().await.map_err(|e| ClientError::of_call(what.clone(), e))
                }
            })
        });
        answer.map(|v| v.to_string()).map_err(|e| client_error(py, &e))
    }
}
