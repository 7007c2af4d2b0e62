//! [`apply`]: the one function that changes the state, on the live path and in replay.

use std::collections::{BTreeSet, VecDeque};

use serde_json::Value;

use crate::dispatch::tensorflow::DatasetSpec;
use crate::dispatch::types::{IterationId, JobId, TaskId};

use super::{
    Client, Dataset, Iteration, PendingTask, SplitRef, SplitState, State, TfSplitCursor, Update,
    Worker,
};

fn bump(counter: &mut u64, used: u64) {
    *counter = (*counter).max(used.saturating_add(1));
}

/// Applies one update. Trusts its input: the dispatcher validates before it journals.
pub fn apply(state: &mut State, update: &Update) {
    if !matches!(update, Update::Snapshot { .. }) {
        state.version += 1;
    }
    match update {
        Update::RegisterDataset { dataset_id, def, metadata } => {
            state.insert_dataset(Dataset {
                id: dataset_id.clone(),
                spec: DatasetSpec::Declarative(def.clone()),
                metadata: metadata.clone(),
                compression_disabled: None,
            });
        }
        Update::RegisterTfDataset { dataset_id, dataset } => {
            state.insert_dataset(Dataset {
                id: dataset_id.clone(),
                spec: DatasetSpec::TensorFlow(dataset.clone()),
                metadata: Value::Null,
                compression_disabled: None,
            });
        }
        Update::DecideCompression { dataset_id, disabled } => {
            if let Some(ds) = state.datasets.get_mut(dataset_id) {
                ds.compression_disabled = Some(*disabled);
            }
        }
        Update::TfSplitHandedOut { iteration_id, split_provider_index, repetition, index } => {
            let cursor =
                state.iterations.get_mut(iteration_id).and_then(|i| i.tf_splits.as_mut()).and_then(
                    |c| usize::try_from(*split_provider_index).ok().and_then(|p| c.get_mut(p)),
                );
            if let Some(c) = cursor {
                c.repetition = *repetition;
                c.next_index = index.saturating_add(1);
                c.handed_out += 1;
            }
        }
        Update::RegisterWorker { address, tags, uid, tensorflow } => {
            state.worker_list.bind(address);
            let w = state.workers.entry(address.clone()).or_insert_with(|| Worker {
                address: address.clone(),
                tags: tags.clone(),
                alive: true,
                uid: uid.clone(),
                tasks: BTreeSet::new(),
                tensorflow: tensorflow.clone(),
            });
            state.heartbeat_index.sync(address, w);
        }
        Update::WorkerRestarted { address, uid, tensorflow } => {
            let restarted = state.update_worker(address, |w| {
                w.uid = uid.clone();
                if tensorflow.is_some() {
                    w.tensorflow = tensorflow.clone();
                }
            });
            if restarted.is_none() {
                return;
            }
            state.release_all_leases(address);
        }
        Update::WorkerLost { address } => {
            let Some(tasks) = state.update_worker(address, |w| {
                w.alive = false;
                w.tasks.iter().copied().collect::<Vec<TaskId>>()
            }) else {
                return;
            };
            let mut iterations = BTreeSet::new();
            for t in tasks {
                if let Some(task) = state.tasks.get_mut(&t) {
                    task.abandoned = true;
                    iterations.insert(task.iteration_id);
                }
            }
            state.release_all_leases(address);
            for it in iterations {
                state.recompute_finished(it);
            }
        }
        Update::WorkerRevived { address, uid, tensorflow } => {
            let Some(tasks) = state.update_worker(address, |w| {
                w.alive = true;
                if uid.is_some() {
                    w.uid = uid.clone();
                }
                if tensorflow.is_some() {
                    w.tensorflow = tensorflow.clone();
                }
                w.tasks.iter().copied().collect::<Vec<TaskId>>()
            }) else {
                return;
            };
            for t in tasks {
                let Some(task) = state.tasks.get_mut(&t) else { continue };
                let unfinished =
                    state.iterations.get(&task.iteration_id).is_some_and(|i| !i.finished);
                if unfinished {
                    task.abandoned = false;
                } else {
                    // Its iteration finished while the worker was away: the task is over.
                    task.finished = true;
                    state.worker_remove_task(address, t);
                }
            }
        }
        Update::CreateJob { job } => {
            bump(&mut state.next_job_id, job.id.0);
            state.jobs_by_name.insert(job.name.clone(), job.id);
            state.jobs_by_dataset.entry(job.dataset_id.clone()).or_default().insert(job.id);
            state.jobs.insert(job.id, job.clone());
        }
        Update::CreateIteration {
            iteration_id,
            job_id,
            repetition,
            total_splits,
            tf_split_providers,
            resume,
        } => {
            bump(&mut state.next_iteration_id, iteration_id.0);
            let job = state.jobs.get(job_id);
            let job_name = job.map(|j| j.name.clone()).unwrap_or_default();
            let num_consumers = job.and_then(|j| j.num_consumers);
            state.iterations_by_key.insert((job_name.clone(), *repetition), *iteration_id);
            state.iterations_by_job.entry(*job_id).or_default().insert(*iteration_id);
            if num_consumers.is_some() {
                state.open_round_robin.insert(*iteration_id);
            }
            state.iterations.insert(
                *iteration_id,
                Iteration {
                    id: *iteration_id,
                    job_id: *job_id,
                    job_name,
                    repetition: *repetition,
                    tasks: Vec::new(),
                    num_clients: 0,
                    last_release: None,
                    finished: false,
                    garbage_collected: false,
                    splits: total_splits.map(|total| SplitState {
                        total,
                        plan: resume.clone(),
                        ..SplitState::default()
                    }),
                    num_consumers,
                    pending: VecDeque::new(),
                    tf_splits: tf_split_providers
                        .map(|n| vec![TfSplitCursor::default(); usize::try_from(n).unwrap_or(0)]),
                },
            );
        }
        Update::CreateTask { task } => {
            bump(&mut state.next_task_id, task.id.0);
            if let Some(it) = state.iterations.get_mut(&task.iteration_id) {
                it.tasks.push(task.id);
            }
            state.worker_add_task(&task.worker_address, task.id);
            state.insert_task(task.clone());
        }
        Update::CreatePendingTask { task } => {
            bump(&mut state.next_task_id, task.id.0);
            if let Some(it) = state.iterations.get_mut(&task.iteration_id) {
                it.pending.push_back(PendingTask {
                    task_id: task.id,
                    target_round: task.starting_round,
                    ready_consumers: BTreeSet::new(),
                    ready_clients: BTreeSet::new(),
                    failures: 0,
                });
            }
            state.worker_add_task(&task.worker_address, task.id);
            state.insert_task(task.clone());
        }
        Update::ConsumerRound {
            iteration_id,
            consumer_index,
            client_id,
            rejected_new_target,
            accepted,
        } => {
            let Some(it) = state.iterations.get_mut(iteration_id) else { return };
            let needed = it.num_consumers.unwrap_or(1);
            let Some(front) = it.pending.front_mut() else { return };
            if let Some(target) = rejected_new_target {
                front.failures = front.failures.saturating_add(1);
                front.ready_consumers.clear();
                front.ready_clients.clear();
                front.target_round = *target;
            }
            if *accepted {
                match client_id {
                    Some(c) => front.ready_clients.insert(*c),
                    None => front.ready_consumers.insert(*consumer_index),
                };
            }
            if (front.ready_consumers.len() + front.ready_clients.len()) as u64 >= needed {
                let (task_id, round) = (front.task_id, front.target_round);
                it.pending.pop_front();
                it.tasks.push(task_id);
                if let Some(t) = state.tasks.get_mut(&task_id) {
                    t.starting_round = round;
                }
            }
        }
        Update::RemoveTask { task_id } => {
            let Some(task) = state.remove_task(*task_id) else { return };
            if let Some(it) = state.iterations.get_mut(&task.iteration_id) {
                it.tasks.retain(|t| t != task_id);
                it.pending.retain(|p| p.task_id != *task_id);
            }
            state.worker_remove_task(&task.worker_address, *task_id);
        }
        Update::FinishTask { task_id } => {
            let Some(task) = state.tasks.get_mut(task_id) else { return };
            task.finished = true;
            let (iteration_id, worker) = (task.iteration_id, task.worker_address.clone());
            state.worker_remove_task(&worker, *task_id);
            state.release_leases(iteration_id, &worker, false);
            state.recompute_finished(iteration_id);
        }
        Update::AcquireClient { client_id, iteration_id, consumer_index } => {
            bump(&mut state.next_client_id, client_id.0);
            let client = Client {
                id: *client_id,
                iteration_id: *iteration_id,
                consumer_index: *consumer_index,
            };
            state.clients.insert(*client_id, client);
            if let Some(it) = state.iterations.get_mut(iteration_id) {
                it.num_clients += 1;
            }
        }
        Update::ReleaseClient { client_id, at } => {
            let Some(c) = state.clients.remove(client_id) else { return };
            if let Some(it) = state.iterations.get_mut(&c.iteration_id) {
                it.num_clients = it.num_clients.saturating_sub(1);
                it.last_release = Some(*at);
            }
        }
        Update::GarbageCollectIteration { iteration_id } => {
            // Journals written before collection freed things meant "mark it collected";
            // replayed now, their records free it as well, which is what they stood for.
            state.collect_iteration(*iteration_id);
        }
        Update::RemoveJob { job_id } => state.remove_job(*job_id),
        Update::DeleteDataset { dataset_id } => {
            let jobs: Vec<JobId> = state
                .jobs_by_dataset
                .get(dataset_id)
                .map(|j| j.iter().copied().collect())
                .unwrap_or_default();
            for job_id in jobs {
                state.remove_job(job_id);
            }
            state.remove_dataset(dataset_id);
        }
        Update::RemoveWorker { address } => state.remove_worker(address),
        Update::ProduceSplits { iteration_id, worker_address, acked, assigned, advance_to } => {
            let Some(s) = state.iterations.get_mut(iteration_id).and_then(|i| i.splits.as_mut())
            else {
                return;
            };
            let held_before = s.leases.contains_key(worker_address);
            // One lookup of the worker's leases; the Vec is reused in place.
            match s.leases.get_mut(worker_address) {
                Some(held) => {
                    if held.as_slice() == acked.as_slice() {
                        held.clear();
                    } else if held.len() * acked.len() > 256 {
                        let acked: std::collections::HashSet<&SplitRef> = acked.iter().collect();
                        held.retain(|x| !acked.contains(x));
                    } else {
                        held.retain(|x| !acked.contains(x));
                    }
                    held.extend_from_slice(assigned);
                    if held.is_empty() {
                        s.leases.remove(worker_address);
                    }
                }
                None if !assigned.is_empty() => {
                    s.leases.insert(worker_address.clone(), assigned.clone());
                }
                None => {}
            }
            for split in assigned {
                if s.requeue.remove(split) {
                    s.reissued += 1;
                }
                if split.repetition == s.repetition && split.index >= s.next_index {
                    s.next_index = split.index + 1;
                }
            }
            s.handed_out += assigned.len() as u64;
            if let Some(r) = advance_to {
                s.repetition = *r;
                s.next_index = 0;
            }
            match (held_before, s.leases.contains_key(worker_address)) {
                (false, true) => {
                    state
                        .leases_by_worker
                        .entry(worker_address.clone())
                        .or_default()
                        .insert(*iteration_id);
                }
                (true, false) => state.unindex_leases(worker_address, *iteration_id),
                _ => {}
            }
            state.recompute_finished(*iteration_id);
        }
        Update::Started { incarnation } => {
            state.incarnation = incarnation.clone();
        }
        Update::Snapshot { state: snap } => {
            *state = (**snap).clone();
            state.reindex();
            // Snapshots written before collection freed things hold collected iterations.
            let collected: Vec<IterationId> =
                state.iterations.values().filter(|i| i.garbage_collected).map(|i| i.id).collect();
            for id in collected {
                state.collect_iteration(id);
            }
        }
    }
}
