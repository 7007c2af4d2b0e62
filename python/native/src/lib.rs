//! `shardwise._native`: the Rust the `shardwise` Python package runs, so that every rule
//! (read positions, the reader's protocol, bounds) lives once, in the workspace's crates.
//!
//! The Python package (`python/shardwise`) is a thin layer over this module: it keeps the
//! public API, the PyTorch and JAX adapters and the command line; this module converts values
//! and errors and calls the crates:
//!
//! * `value`: JSON values between `serde_json` and Python objects, bounded in nesting;
//! * `dispatcher`: the dispatcher's REST calls, with the client's failover and retries;
//! * `reader`: the Rust client's reads, as an iterator's steps;
//! * `positions`: read positions (the core's tracker, merge and checks) and a definition's
//!   fingerprint.
#![deny(unsafe_code)]

mod dispatcher;
mod errors;
mod positions;
mod reader;
mod runtime;
mod value;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<positions::PositionTracker>()?;
    m.add_class::<reader::Reader>()?;
    m.add_class::<dispatcher::Dispatcher>()?;
    m.add_function(wrap_pyfunction!(positions::merge_positions, m)?)?;
    m.add_function(wrap_pyfunction!(positions::check_runs, m)?)?;
    m.add_function(wrap_pyfunction!(positions::fingerprint, m)?)?;
    Ok(())
}
