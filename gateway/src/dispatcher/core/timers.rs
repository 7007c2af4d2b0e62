//! The state machine's timers: a task sleeps until `poll_timeout` (woken early when a call
//! brings the deadline forward) and runs `handle_timeout` the way a call runs.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::term::Inner;
use super::{lock, now};

/// Runs the state machine's timers.
pub(super) async fn timers(inner: Arc<Inner>) {
    loop {
        let deadline = {
            let guard = lock(&inner.core);
            let Some(core) = guard.as_ref() else { return };
            core.driver.poll_timeout().0
        };
        inner.next_deadline.store(deadline, Ordering::Relaxed);
        let wait = Duration::from_millis(deadline.saturating_sub(now().0));
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = inner.timer.notified() => continue,
        }
        if inner.broken.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut guard) = inner.core.lock() else { return };
        let Some(core) = guard.as_mut() else { return };
        let t = now();
        if t >= core.driver.poll_timeout() {
            core.driver.handle_timeout(t);
        }
        core.after(&inner);
    }
}
