//! The read position of a stream: the origins of the elements handed to the caller, folded.
//!
//! Positions count rows (elements): a read's payload is whatever the stream hands out (JSON
//! values one by one, Arrow record batches of many rows), and the stream says how many rows
//! of the current read it holds back; the origin runs cover the rows in order either way.

use crate::dataset::DatasetDef;
use crate::dispatch::ShardingPolicy;
use crate::position::{OriginRun, PositionTracker, ReadPosition};

/// The origins of the elements a reader handed to its caller, folded into a [`ReadPosition`].
///
/// The fold is lazy, so handing out an element costs nothing here: a batch's runs are folded
/// when the next batch arrives (every element of the previous one was handed out by then), and
/// [`Positions::position`] folds the part of the current batch handed out so far.
#[derive(Debug, Clone)]
pub struct Positions {
    dataset_id: String,
    repetition: u64,
    /// Why this read has no position (`None`: it has one so far).
    unavailable: Option<String>,
    /// Every batch before the current one, folded.
    tracker: PositionTracker,
    /// The current batch's runs (`None`: it came without origins that cover it).
    runs: Option<Vec<OriginRun>>,
    /// The current batch's rows.
    batch_len: usize,
}

impl Positions {
    /// The positions of a read of `dataset` (registered as `dataset_id`) sharded by `policy`,
    /// coordinated or not, of iteration `repetition`, or resuming from `resume_from` (whose
    /// repetition it then is). Only an uncoordinated DYNAMIC read of a dataset whose positions
    /// are exact has positions; the others say why not.
    pub fn new(
        dataset: &DatasetDef,
        dataset_id: String,
        policy: ShardingPolicy,
        coordinated: bool,
        repetition: u64,
        resume_from: Option<&ReadPosition>,
    ) -> Positions {
        let unavailable = if policy != ShardingPolicy::Dynamic {
            Some(format!(
                "read positions need a distributed_epoch (DYNAMIC) read; this one shards {}",
                policy.as_str()
            ))
        } else if coordinated {
            Some("coordinated reads (num_consumers) have no read positions".to_owned())
        } else {
            dataset.check_resumable().err()
        };
        let (repetition, tracker) = match resume_from {
            Some(p) => (p.repetition, PositionTracker::resuming(p)),
            None => (repetition, PositionTracker::new()),
        };
        Positions { dataset_id, repetition, unavailable, tracker, runs: None, batch_len: 0 }
    }

    /// A new batch of `rows` rows whose origins are `origin` (every row of the previous one
    /// was handed out): the previous one is folded. Origins that do not cover exactly `rows`
    /// rows count as none.
    pub fn arrived(&mut self, rows: usize, origin: Option<&[OriginRun]>) {
        if self.unavailable.is_none() {
            self.unavailable = fold(&mut self.tracker, self.runs.as_deref(), self.batch_len);
        }
        self.batch_len = rows;
        self.runs = origin.map(<[OriginRun]>::to_vec).filter(|runs| {
            let covered = runs.iter().try_fold(0u64, |n, r| n.checked_add(r.count));
            covered == Some(self.batch_len as u64) && runs.iter().all(|r| r.count > 0)
        });
    }

    /// The rows of the current batch (the last read handed out from).
    pub fn batch_len(&self) -> usize {
        self.batch_len
    }

    /// The position, `pending` rows of the current batch not handed out yet; why there is
    /// none when the read has no exact positions.
    pub fn position(&self, pending: usize) -> Result<ReadPosition, String> {
        let mut tracker = self.tracker.clone();
        let handed = self.batch_len.saturating_sub(pending);
        let why =
            self.unavailable.clone().or_else(|| fold(&mut tracker, self.runs.as_deref(), handed));
        match why {
            Some(why) => Err(why),
            None => Ok(tracker.position(&self.dataset_id, self.repetition)),
        }
    }
}

/// Folds the first `handed` elements that `runs` cover into `tracker`; why the read has no
/// position when elements were handed out without origins.
fn fold(
    tracker: &mut PositionTracker,
    runs: Option<&[OriginRun]>,
    handed: usize,
) -> Option<String> {
    let Some(runs) = runs else {
        return (handed > 0).then(|| {
            "an element without origin was handed out (a worker that does not tag elements \
             with their origin, or origins that do not cover its elements)"
                .to_owned()
        });
    };
    let mut left = handed as u64;
    for run in runs {
        if left == 0 {
            break;
        }
        let taken = left.min(run.count);
        tracker.consumed(run, taken);
        left -= taken;
    }
    None
}
