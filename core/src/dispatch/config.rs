//! The dispatcher's settings.

use serde::{Deserialize, Serialize};

use super::address::check_plausible;
use super::error::DispatchError;
use super::types::Millis;

const MINUTE: u64 = 60_000;

/// Dispatcher settings; defaults are TensorFlow's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatcherConfig {
    /// Journal records must be durable before replies (the gateway's side of the contract).
    pub fault_tolerant: bool,
    /// Static sharding's fixed worker list.
    pub worker_addresses: Vec<String>,
    /// A worker silent this long is lost: its tasks stop blocking and its splits are handed
    /// out again. Default 10 min.
    pub worker_timeout: Millis,
    /// A client silent this long is released. Default 5 min.
    pub client_timeout: Millis,
    /// How long a new client may take to send its first heartbeat. Default 30 min
    /// (TensorFlow: forever).
    pub client_first_heartbeat_grace: Millis,
    /// How often timeouts and garbage collection are checked. Default 10 min; checks also
    /// run at a quarter of the worker and client timeouts so that they act in time.
    pub job_gc_check_interval: Millis,
    /// How long an iteration without clients is kept; `None`: forever. Default 5 min.
    pub job_gc_timeout: Option<Millis>,
    /// Also collect DYNAMIC iterations (re-creating one revisits data). Default false.
    pub gc_dynamic_sharding_jobs: bool,
    /// The most bytes registered datasets may hold: their definitions and metadata, encoded
    /// as JSON, summed. A registration past it is refused (RESOURCE_EXHAUSTED); replay never
    /// is. Default [`DEFAULT_MAX_DATASET_BYTES`].
    #[serde(default = "default_max_dataset_bytes")]
    pub max_dataset_bytes: u64,
}

/// The default bound on what datasets hold: 32 MiB of encoded JSON, twice the default request
/// body limit. In memory a dataset takes more than its encoding, most for a `list` of tiny
/// values: measured as the dispatcher's RSS growth per encoded byte, about 36 for one-digit
/// numbers (`[0,0,...]`, every element a 72-byte JSON value), 9 for 7-digit numbers, under 2
/// for long strings. So the default holds at most about 1.2 GB, and about 300 MB of a list of
/// numbers like a 12 MB one seen in a trial; raise it where datasets are big on purpose.
pub const DEFAULT_MAX_DATASET_BYTES: u64 = 32 << 20;

fn default_max_dataset_bytes() -> u64 {
    DEFAULT_MAX_DATASET_BYTES
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            fault_tolerant: false,
            worker_addresses: Vec::new(),
            worker_timeout: Millis(10 * MINUTE),
            client_timeout: Millis(5 * MINUTE),
            client_first_heartbeat_grace: Millis(30 * MINUTE),
            job_gc_check_interval: Millis(10 * MINUTE),
            job_gc_timeout: Some(Millis(5 * MINUTE)),
            gc_dynamic_sharding_jobs: false,
            max_dataset_bytes: DEFAULT_MAX_DATASET_BYTES,
        }
    }
}

impl DispatcherConfig {
    /// Checks the settings: every duration must be positive.
    pub fn validate(&self) -> Result<(), DispatchError> {
        for (name, d) in [
            ("worker_timeout", self.worker_timeout),
            ("client_timeout", self.client_timeout),
            ("client_first_heartbeat_grace", self.client_first_heartbeat_grace),
            ("job_gc_check_interval", self.job_gc_check_interval),
        ] {
            if d.0 == 0 {
                return Err(DispatchError::InvalidArgument(format!("{name} must be positive")));
            }
        }
        if self.job_gc_timeout == Some(Millis(0)) {
            return Err(DispatchError::InvalidArgument(
                "job_gc_timeout must be positive (leave it unset to never collect)".into(),
            ));
        }
        if self.worker_addresses.iter().any(|a| a.trim().is_empty()) {
            return Err(DispatchError::InvalidArgument(
                "worker_addresses must not contain empty entries".into(),
            ));
        }
        for a in &self.worker_addresses {
            check_plausible(a)
                .map_err(|e| DispatchError::InvalidArgument(format!("worker_addresses: {e}")))?;
        }
        if self.max_dataset_bytes == 0 {
            return Err(DispatchError::InvalidArgument(
                "max_dataset_bytes must be positive".into(),
            ));
        }
        Ok(())
    }

    pub(crate) fn check_interval(&self) -> Millis {
        let quarter = |m: Millis| Millis((m.0 / 4).max(1));
        Millis(
            self.job_gc_check_interval
                .0
                .min(quarter(self.worker_timeout).0)
                .min(quarter(self.client_timeout).0)
                .max(1),
        )
    }
}
