//! The tokio runtime the module's readers run on: one per process, made on first use.
//!
//! A process made by `fork` (a PyTorch `DataLoader` worker) has none of its parent's threads:
//! the parent's runtime is dead there. So the runtime is keyed by the process id, and a child
//! makes its own (its parent's is leaked, never touched again: dropping it would join threads
//! that do not exist). A reader remembers the process it was made in and refuses to run in
//! another.

use std::sync::{Arc, Mutex, OnceLock};

use pyo3::PyResult;
use pyo3::exceptions::PyRuntimeError;
use tokio::runtime::Runtime;

/// A runtime and the process id it was made in.
type Owned = (u32, Arc<Runtime>);

/// The runtime of this process, made when first asked for.
pub(crate) fn runtime() -> PyResult<Arc<Runtime>> {
    static RUNTIME: OnceLock<Mutex<Option<Owned>>> = OnceLock::new();
    let mut slot = RUNTIME
        .get_or_init(|| Mutex::new(None))
        .lock()
        .map_err(|_| PyRuntimeError::new_err("the runtime's lock is poisoned"))?;
    let pid = std::process::id();
    if let Some((owner, runtime)) = slot.as_ref()
        && *owner == pid
    {
        return Ok(runtime.clone());
    }
    // A parent's runtime (after a fork) is leaked: its threads are not in this process.
    if let Some((_, inherited)) = slot.take() {
        std::mem::forget(inherited);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("shardwise-io")
        .enable_all()
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the reader's runtime: {e}")))?;
    let runtime = Arc::new(runtime);
    *slot = Some((pid, runtime.clone()));
    Ok(runtime)
}
