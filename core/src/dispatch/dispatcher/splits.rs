//! Handing out splits: DYNAMIC leases of declarative datasets and TensorFlow's `GetSplit`.

use crate::dataset::{DEFAULT_SPLIT_SIZE, SourceDef, chunk_at, split_at};
use crate::dispatch::error::DispatchError;
use crate::dispatch::state::{SplitRef, Update};
use crate::dispatch::tensorflow::{TfGetSplit, TfSplit};
use crate::dispatch::types::{IterationId, Millis};
use crate::dispatch::wire::{GetSplits, MAX_SPLITS_PER_CALL, Split, SplitId, SplitsReply};
use crate::position::{ResumePlan, SplitPositions};

use super::{Dispatcher, not_found_dataset, uid_mismatch, worker_not_found};

impl Dispatcher {
    /// TensorFlow's `GetSplit`: the next split of one provider of a TensorFlow DYNAMIC
    /// iteration, journaled before it is answered, so a restarted dispatcher never hands it
    /// out again (at-most-once: TensorFlow workers do not acknowledge splits). A repetition
    /// above the provider's starts it at index 0; one below it, or past the last split, is
    /// `end_of_splits` (`None`).
    pub(super) fn tf_get_split(
        &mut self,
        iteration_id: IterationId,
        req: TfGetSplit,
    ) -> Result<TfSplit, DispatchError> {
        let it = self.state.iterations.get(&iteration_id).ok_or_else(|| {
            DispatchError::NotFound(format!("Iteration id {iteration_id} not found"))
        })?;
        let Some(cursors) = &it.tf_splits else {
            return Err(DispatchError::FailedPrecondition(if it.splits.is_some() {
                format!(
                    "iteration {iteration_id} is of a declarative dataset: its Shardwise workers \
                     get splits with POST /v1/iterations/{iteration_id}/splits"
                )
            } else {
                format!(
                    "Cannot get split for iteration {iteration_id}, since it is not a \
                     distributed_epoch iteration."
                )
            }));
        };
        let index = usize::try_from(req.split_provider_index)
            .ok()
            .filter(|i| *i < cursors.len())
            .ok_or_else(|| {
            DispatchError::InvalidArgument(format!(
                "split_provider_index {} is out of range: iteration {iteration_id} has {} \
                     split providers",
                req.split_provider_index,
                cursors.len()
            ))
        })?;
        let cursor = cursors[index];
        let provider = self
            .state
            .jobs
            .get(&it.job_id)
            .and_then(|j| self.state.datasets.get(&j.dataset_id))
            .and_then(|d| d.spec.tensorflow())
            .and_then(|t| t.split_providers.as_ref().ok())
            .and_then(|p| p.get(index))
            .copied();
        let Some(provider) = provider else {
            return Err(DispatchError::FailedPrecondition(format!(
                "iteration {iteration_id} has no split provider {index}"
            )));
        };
        if req.repetition < cursor.repetition {
            return Ok(TfSplit { split: None });
        }
        let next = if req.repetition > cursor.repetition { 0 } else { cursor.next_index };
        let Some(split) = provider.split(next) else { return Ok(TfSplit { split: None }) };
        self.commit(Update::TfSplitHandedOut {
            iteration_id,
            split_provider_index: req.split_provider_index,
            repetition: req.repetition,
            index: next,
        });
        Ok(TfSplit { split: Some(split) })
    }

    /// Get-split (DYNAMIC): acknowledges the worker's finished splits of this iteration
    /// (`acknowledge`, or all it holds), sends again any it still holds, else hands out up to
    /// `max_splits` more: splits of lost workers first, then fresh ones.
    /// The repetition ends for a worker only when none of its splits is in flight anywhere,
    /// so a worker lost later cannot take splits with it.
    pub(super) fn get_splits(
        &mut self,
        now: Millis,
        iteration_id: IterationId,
        req: &GetSplits,
    ) -> Result<SplitsReply, DispatchError> {
        let max = req.max_splits.unwrap_or(1);
        if max == 0 || max > MAX_SPLITS_PER_CALL {
            return Err(DispatchError::InvalidArgument(format!(
                "max_splits must be in 1..={MAX_SPLITS_PER_CALL}, not {max}"
            )));
        }
        let it = self.state.iterations.get(&iteration_id).ok_or_else(|| {
            DispatchError::NotFound(format!("Iteration id {iteration_id} not found"))
        })?;
        let Some(splits) = &it.splits else {
            return Err(DispatchError::FailedPrecondition(if it.tf_splits.is_some() {
                format!(
                    "iteration {iteration_id} is of a TensorFlow dataset: its TensorFlow workers \
                     get splits with TensorFlow's GetSplit, not this route"
                )
            } else {
                format!(
                    "Cannot get split for iteration {iteration_id}, since it is not a \
                     distributed_epoch iteration."
                )
            }));
        };
        if req.split_provider_index != 0 {
            return Err(DispatchError::InvalidArgument(format!(
                "split_provider_index {} is out of range: iteration {iteration_id} has 1 split \
                 provider",
                req.split_provider_index
            )));
        }
        let worker = req.worker_address.as_str();
        // One probe for the checks and, when they pass, for the last-seen time.
        let Some(w) = self.state.heartbeat_index.get_mut(worker) else {
            return Err(worker_not_found(worker));
        };
        if !w.holds_uid(req.worker_uid.as_deref()) {
            return Err(uid_mismatch(worker, req.worker_uid.as_deref()));
        }
        if !w.alive {
            return Err(DispatchError::FailedPrecondition(format!(
                "worker {worker} was declared lost (no heartbeat for the worker timeout) and \
                 its splits were handed to other workers; send a heartbeat to rejoin"
            )));
        }
        // The worker's open tasks first (a handful), the iteration's whole task list only
        // when none matches (a finished task still entitles the worker to ask).
        let has_task = w
            .tasks()
            .any(|t| self.state.tasks.get(&t).is_some_and(|t| t.iteration_id == iteration_id))
            || it
                .tasks
                .iter()
                .filter_map(|t| self.state.tasks.get(t))
                .any(|t| t.worker_address == worker);
        if !has_task {
            return Err(DispatchError::FailedPrecondition(format!(
                "worker {worker} has no task in iteration {iteration_id}"
            )));
        }
        let r = req.repetition;
        if r > splits.repetition {
            return Err(DispatchError::FailedPrecondition(format!(
                "repetition {r} is ahead of iteration {iteration_id}'s split provider, which is at \
                 repetition {}",
                splits.repetition
            )));
        }
        w.seen = Some(now);
        let held: &[SplitRef] = splits.leases.get(worker).map_or(&[], Vec::as_slice);
        let acked: Vec<SplitRef> = match &req.acknowledge {
            None => held.to_vec(),
            Some(ids) => {
                let parsed: Vec<SplitRef> = ids.iter().map(|id| id.0).collect();
                if parsed.as_slice() == held {
                    parsed // the usual case: the ids of the last reply, in order
                } else if parsed.len() > 16 {
                    let held_set: std::collections::HashSet<&SplitRef> = held.iter().collect();
                    let mut seen = std::collections::HashSet::with_capacity(parsed.len());
                    parsed.into_iter().filter(|s| held_set.contains(s) && seen.insert(*s)).collect()
                } else {
                    let mut out = Vec::with_capacity(parsed.len());
                    for s in parsed {
                        if held.contains(&s) && !out.contains(&s) {
                            out.push(s);
                        }
                    }
                    out
                }
            }
        };
        let still_held: Vec<SplitRef> = if acked.len() == held.len() {
            Vec::new() // acked is a duplicate-free subset of held
        } else if held.len() > 16 {
            let acked_set: std::collections::HashSet<&SplitRef> = acked.iter().collect();
            held.iter().filter(|s| !acked_set.contains(s)).copied().collect()
        } else {
            held.iter().filter(|s| !acked.contains(s)).copied().collect()
        };
        let mut assigned: Vec<SplitRef> = Vec::new();
        let mut advance_to = None;
        let mut end_of_splits = false;
        let mut retry_after_ms = None;
        if still_held.is_empty() {
            assigned.extend(
                splits.requeue.iter().filter(|s| s.repetition == r).take(max as usize).copied(),
            );
            if r == splits.repetition {
                let mut next = splits.next_index;
                while assigned.len() < max as usize && next < splits.total {
                    assigned.push(SplitRef { repetition: r, index: next });
                    next += 1;
                }
            }
            if assigned.is_empty() {
                // Is any split of this repetition leased elsewhere or waiting to go again?
                let pending_elsewhere = splits.requeue.iter().any(|s| s.repetition == r)
                    || splits
                        .leases
                        .iter()
                        .any(|(w, l)| w != worker && l.iter().any(|s| s.repetition == r));
                if pending_elsewhere {
                    retry_after_ms = Some(crate::dispatch::wire::SPLIT_RETRY_AFTER_MS);
                } else {
                    end_of_splits = true;
                    if r == splits.repetition {
                        advance_to = Some(r + 1);
                    }
                }
            }
        }
        // Unacknowledged splits are sent again (a retried request whose reply was lost gets
        // the same splits); otherwise the newly assigned ones.
        let sent: &[SplitRef] = if still_held.is_empty() { &assigned } else { &still_held };
        let job_split_size =
            self.state.jobs.get(&it.job_id).map_or(DEFAULT_SPLIT_SIZE, |j| j.split_size);
        let dataset_id = self.state.jobs.get(&it.job_id).map_or("", |j| j.dataset_id.as_str());
        let Some(ds) = self.state.datasets.get(dataset_id) else {
            return Err(not_found_dataset(dataset_id));
        };
        let (values, positions): (Vec<Split>, Vec<SplitPositions>) = match ds.spec.declarative() {
            Some(def) => sent
                .iter()
                .filter_map(|s| {
                    split_of(&def.source, job_split_size, splits.plan.as_ref(), s.index)
                })
                .unzip(),
            None => (Vec::new(), Vec::new()),
        };
        let split_ids = sent.iter().map(|s| SplitId(*s)).collect();
        if !assigned.is_empty() || !acked.is_empty() || advance_to.is_some() {
            self.commit(Update::ProduceSplits {
                iteration_id,
                worker_address: worker.to_owned(),
                acked,
                assigned,
                advance_to,
            });
        }
        Ok(SplitsReply {
            splits: values,
            split_ids,
            positions,
            end_of_splits,
            retry_after_ms,
            incarnation: self.incarnation.clone(),
        })
    }
}

/// Split `index` of a DYNAMIC iteration over `source` (of `plan`'s splits when it was resumed)
/// and where it lies in the source's positions.
fn split_of(
    source: &SourceDef,
    split_size: u64,
    plan: Option<&ResumePlan>,
    index: u64,
) -> Option<(Split, SplitPositions)> {
    let at = match plan {
        Some(plan) => plan.split(index)?,
        None => match chunk_at(source, split_size, index) {
            Some((start, stop)) => SplitPositions { start, stop, skip: 0, until: None },
            None => {
                SplitPositions { start: index, stop: index.checked_add(1)?, skip: 0, until: None }
            }
        },
    };
    let split = match source {
        SourceDef::Range(_) | SourceDef::List(_) => Split::Chunk { start: at.start, stop: at.stop },
        // Positions are rows: a split is a range of them.
        SourceDef::Files(f) if f.row_positions().is_some() => {
            Split::Chunk { start: at.start, stop: at.stop }
        }
        // One position per split: the path or item at it.
        SourceDef::Files(_) | SourceDef::Splits(_) => Split::Item(split_at(source, 1, at.start)?),
    };
    Some((split, at))
}
