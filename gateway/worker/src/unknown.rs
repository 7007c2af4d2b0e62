//! Reads of task ids the worker does not have. Tasks reach a worker only in heartbeat
//! replies, and each reply brings every task the dispatcher assigned to the worker that the
//! heartbeat did not list as current. So a task id read before the task arrived may still
//! come with the next reply (the read is retryable), but once a heartbeat sent after the first
//! read of an id came back without it, the dispatcher had not assigned that task to this
//! worker: the read is answered as such, for good, and asks for no more heartbeats.
//!
//! Only within one dispatcher incarnation: after a restart without state, task ids start over,
//! so what was learnt about them is forgotten ([`Unknown::clear`]).

use std::collections::{HashMap, VecDeque};

use shardwise_core::dispatch::TaskId;

/// How many unknown task ids a worker remembers the first read of; the oldest is forgotten
/// beyond it (its next read counts as a first one again: retryable, never wrongly final).
pub(super) const REMEMBERED: usize = 10_000;

/// Heartbeats numbered in the order they are sent, and the first read of each unknown id.
#[derive(Debug, Default)]
pub(super) struct Unknown {
    /// Unknown id -> the number of the last heartbeat sent before its first read.
    first_read: HashMap<TaskId, u64>,
    /// Ids in the order of their first read (an id may be here after it left `first_read`).
    order: VecDeque<TaskId>,
    /// Heartbeats sent so far (the last one's number).
    sent: u64,
    /// The number of the latest heartbeat whose reply was applied.
    applied: u64,
}

impl Unknown {
    /// A heartbeat is being sent (its current task list was just taken): its number.
    pub(super) fn sending(&mut self) -> u64 {
        self.sent += 1;
        self.sent
    }

    /// The reply to heartbeat `n` was applied: every task it brought is live.
    pub(super) fn applied(&mut self, n: u64) {
        self.applied = self.applied.max(n);
    }

    /// Task `id` arrived: reads of it are no longer reads of an unknown id.
    pub(super) fn arrived(&mut self, id: TaskId) {
        self.first_read.remove(&id);
    }

    /// The dispatcher's incarnation changed: its task ids start over.
    pub(super) fn clear(&mut self) {
        self.first_read.clear();
        self.order.clear();
    }

    /// A read of `id`, which the worker does not have: true when a heartbeat sent after the
    /// first read of it came back without it (the dispatcher has not assigned it here), false
    /// while it may still arrive (this read is the first, or no such heartbeat came back yet).
    pub(super) fn read(&mut self, id: TaskId) -> bool {
        if let Some(&before) = self.first_read.get(&id) {
            return self.applied > before;
        }
        self.first_read.insert(id, self.sent);
        self.order.push_back(id);
        while self.first_read.len() > REMEMBERED {
            match self.order.pop_front() {
                Some(old) => {
                    self.first_read.remove(&old);
                }
                None => break,
            }
        }
        // `order` keeps ids that arrived since; bound it too.
        while self.order.len() > 2 * REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.first_read.remove(&old);
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_until_a_heartbeat_sent_after_the_first_read_comes_back() {
        let mut u = Unknown::default();
        let first = u.sending();
        u.applied(first);
        // A heartbeat in flight when the id is first read does not count: it was sent before.
        let in_flight = u.sending();
        assert!(!u.read(TaskId(7)), "a first read may come before the task");
        u.applied(in_flight);
        assert!(!u.read(TaskId(7)), "the reply in flight was asked before the read");
        let after = u.sending();
        assert!(!u.read(TaskId(7)), "sent, not answered yet");
        u.applied(after);
        assert!(u.read(TaskId(7)), "a heartbeat sent after the first read came back without it");
        assert!(u.read(TaskId(7)), "and stays so");
        // Another id read now is a first read again.
        assert!(!u.read(TaskId(8)));
    }

    #[test]
    fn an_arrived_task_or_a_new_incarnation_forgets_the_reads() {
        let mut u = Unknown::default();
        assert!(!u.read(TaskId(1)));
        assert!(!u.read(TaskId(2)));
        let n = u.sending();
        u.arrived(TaskId(1));
        u.applied(n);
        assert!(u.read(TaskId(2)));
        // Task 1 arrived, then went (its tombstone was dropped): its next read is a first one.
        assert!(!u.read(TaskId(1)));
        u.clear();
        assert!(!u.read(TaskId(2)), "ids start over in a new incarnation");
        let n = u.sending();
        u.applied(n);
        assert!(u.read(TaskId(2)));
    }

    #[test]
    fn remembered_reads_are_bounded() {
        let mut u = Unknown::default();
        for i in 0..(REMEMBERED as u64 + 5) {
            assert!(!u.read(TaskId(i)));
        }
        assert_eq!(u.first_read.len(), REMEMBERED);
        let n = u.sending();
        u.applied(n);
        assert!(!u.read(TaskId(0)), "forgotten: a first read again, never wrongly final");
        assert!(u.read(TaskId(REMEMBERED as u64 + 4)));
        for i in 0..(3 * REMEMBERED as u64) {
            u.arrived(TaskId(i));
            u.read(TaskId(i + 100_000));
        }
        assert!(u.order.len() <= 2 * REMEMBERED && u.first_read.len() <= REMEMBERED);
    }
}
