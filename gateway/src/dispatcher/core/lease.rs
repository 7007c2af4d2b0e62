//! A replica's leadership on this process's monotonic clock ([`LeaseClock`]): a term with a
//! lease refuses every call once it has passed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Until when a term's leadership is known to hold, on this process's monotonic clock: a
/// replica extends it with every renewal of its etcd lease. Calls are refused once it has
/// passed, so a leader that was paused past its lease (and may have been replaced) serves
/// nothing, not even a read, before it notices and steps down.
#[derive(Debug, Clone)]
pub struct LeaseClock {
    base: std::time::Instant,
    until_ms: Arc<AtomicU64>,
}

impl LeaseClock {
    /// A clock that holds until `until`.
    pub fn until(until: std::time::Instant) -> LeaseClock {
        let base = std::time::Instant::now();
        let clock = LeaseClock { base, until_ms: Arc::new(AtomicU64::new(0)) };
        clock.extend_to(until);
        clock
    }

    /// Holds until `until` (if that is later than now).
    pub fn extend_to(&self, until: std::time::Instant) {
        let ms = u64::try_from(until.saturating_duration_since(self.base).as_millis())
            .unwrap_or(u64::MAX);
        self.until_ms.fetch_max(ms, Ordering::SeqCst);
    }

    /// Whether it holds now.
    pub fn holds(&self) -> bool {
        let now = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        now < self.until_ms.load(Ordering::SeqCst)
    }
}
