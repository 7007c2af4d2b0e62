//! The Rust client's errors as the package's one exception, `shardwise.errors.ShardwiseError`
//! (a Python class: it pickles across a `DataLoader`'s processes and carries the problem's
//! members as attributes).

use pyo3::prelude::*;
use pyo3::types::PyDict;
use shardwise_client::{ClientError, Problem};

/// A `ShardwiseError` of `code` and `detail`, and the keyword arguments `fill` sets.
fn shardwise_error(
    py: Python<'_>,
    code: &str,
    detail: &str,
    fill: impl FnOnce(&Bound<'_, PyDict>) -> PyResult<()>,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let class = py.import("shardwise.errors")?.getattr("ShardwiseError")?;
        let kwargs = PyDict::new(py);
        fill(&kwargs)?;
        Ok(PyErr::from_value(class.call((code, detail), Some(&kwargs))?))
    };
    build().unwrap_or_else(|e| e)
}

/// A problem answer's members as keyword arguments.
fn problem_kwargs(kwargs: &Bound<'_, PyDict>, context: &str, p: &Problem) -> PyResult<()> {
    kwargs.set_item("status", p.status)?;
    kwargs.set_item("title", &p.title)?;
    kwargs.set_item("type", &p.type_uri)?;
    kwargs.set_item("context", context)?;
    kwargs.set_item("kind", "problem")?;
    let extra = PyDict::new(kwargs.py());
    if let Some(tf) = &p.tf_exception {
        extra.set_item("tf_exception", tf)?;
    }
    if let Some(missing) = &p.missing {
        let m = PyDict::new(kwargs.py());
        for (job, n) in missing {
            m.set_item(job, n)?;
        }
        extra.set_item("missing", m)?;
    }
    if let Some(leader) = &p.leader {
        extra.set_item("leader", leader)?;
    }
    kwargs.set_item("extra", extra)
}

/// `e` as a `ShardwiseError`.
pub(crate) fn client_error(py: Python<'_>, e: &ClientError) -> PyErr {
    let code = e.code().to_string();
    match e {
        ClientError::Problem { context, problem } => {
            shardwise_error(py, &code, &problem.detail, |k| problem_kwargs(k, context, problem))
        }
        ClientError::Unavailable(detail) => {
            shardwise_error(py, &code, detail, |k| k.set_item("kind", "transport"))
        }
        ClientError::Tls { context, detail } => {
            shardwise_error(py, &code, &format!("TLS handshake failed: {detail}"), |k| {
                k.set_item("context", context)?;
                k.set_item("kind", "tls")
            })
        }
        ClientError::Protocol { context, detail } => {
            shardwise_error(py, &code, &format!("unexpected answer: {detail}"), |k| {
                k.set_item("context", context)?;
                k.set_item("kind", "protocol")
            })
        }
        other => shardwise_error(py, &code, &other.to_string(), |k| k.set_item("kind", "client")),
    }
}
