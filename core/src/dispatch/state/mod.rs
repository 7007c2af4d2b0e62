//! The dispatcher's durable state and the one pure `apply` that changes it.
//!
//! Everything here is what the journal records: [`State`] is exactly the fold of
//! [`apply`] over the journal, so `recover(journal) == live state` holds by construction
//! and is checked by the tests. Liveness timestamps are not durable state: the
//! [`super::Dispatcher`] keeps them in the state's derived heartbeat index (next to what a
//! worker heartbeat checks, outside equality and serialization) and resets them on recovery.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::heartbeat_index::HeartbeatIndex;
use super::types::{ClientId, IterationId, JobId, TaskId};

mod edit;
mod entities;
mod fold;
mod update;
mod worker_list;

pub use edit::IndexDrift;
pub use entities::{
    Client, Dataset, Iteration, Job, PendingTask, SplitRef, SplitState, Task, TfSplitCursor,
    Worker, footprint, footprint_declarative, footprint_tf,
};
pub use fold::apply;
pub use update::Update;
pub use worker_list::{NotInWorkerList, WorkerList};

/// The durable state of a dispatcher. Read-only from outside the crate: every change is an
/// [`Update`] through [`apply`]. The lookup indexes beside the durable fields are derived
/// (rebuilt by [`State::reindex`], neither serialized nor compared).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    /// Next generated dataset id.
    pub(crate) next_dataset_id: u64,
    /// Next job id.
    pub(crate) next_job_id: u64,
    /// Next iteration id.
    pub(crate) next_iteration_id: u64,
    /// Next client id.
    pub(crate) next_client_id: u64,
    /// Next task id.
    pub(crate) next_task_id: u64,
    /// Datasets by id.
    pub(crate) datasets: BTreeMap<String, Dataset>,
    /// Workers by address.
    pub(crate) workers: BTreeMap<String, Worker>,
    /// Static sharding's worker list (bound as workers register).
    pub(crate) worker_list: WorkerList,
    /// Jobs by id.
    #[serde(with = "pairs")]
    pub(crate) jobs: BTreeMap<JobId, Job>,
    /// Iterations by id.
    #[serde(with = "pairs")]
    pub(crate) iterations: BTreeMap<IterationId, Iteration>,
    /// Iteration clients by id.
    #[serde(with = "pairs")]
    pub(crate) clients: BTreeMap<ClientId, Client>,
    /// Tasks by id.
    #[serde(with = "pairs")]
    pub(crate) tasks: BTreeMap<TaskId, Task>,
    /// The incarnation id of this state: chosen when a dispatcher starts without a journal
    /// to recover, kept by every recovery from the journal. A change tells workers and
    /// clients that the state they knew is gone (ids may start over).
    #[serde(default)]
    pub(crate) incarnation: String,
    /// Updates applied since the state began (a snapshot carries it). Within one incarnation,
    /// equal versions mean equal states, so a reader that saw version `v` can be told
    /// "nothing changed" instead of being sent the same data again.
    #[serde(default)]
    pub(crate) version: u64,
    /// DYNAMIC splits handed out by iterations that were garbage-collected since the state
    /// began, so that the total over every iteration ever created never goes down.
    #[serde(default)]
    pub(crate) splits_handed_out_collected: u64,
    /// Job id by name.
    #[serde(skip)]
    pub(crate) jobs_by_name: HashMap<String, JobId>,
    /// Current iteration by `(job name, repetition)`.
    #[serde(skip)]
    pub(crate) iterations_by_key: HashMap<(String, u64), IterationId>,
    /// Coordinated-read iterations that are not finished.
    #[serde(skip)]
    pub(crate) open_round_robin: BTreeSet<IterationId>,
    /// Workers by address, with what a steady-state heartbeat reads inline: one hash probe.
    #[serde(skip)]
    pub(crate) heartbeat_index: HeartbeatIndex,
    /// Dataset ids by the fingerprint of their definition and metadata ([`footprint`]), so
    /// that registering the same dataset again without an id finds it.
    #[serde(skip)]
    pub(crate) datasets_by_fingerprint: HashMap<u64, BTreeSet<String>>,
    /// What the datasets hold: the encoded JSON bytes of every definition and metadata,
    /// summed ([`footprint`]). Bounded by `max_dataset_bytes` for new registrations.
    #[serde(skip)]
    pub(crate) dataset_bytes: u64,
    /// The iterations of each job (jobs without any have no entry).
    #[serde(skip)]
    pub(crate) iterations_by_job: HashMap<JobId, BTreeSet<IterationId>>,
    /// The jobs of each dataset (datasets without any have no entry).
    #[serde(skip)]
    pub(crate) jobs_by_dataset: HashMap<String, BTreeSet<JobId>>,
    /// The iterations in which each worker holds DYNAMIC split leases (workers holding none
    /// have no entry): what losing or restarting a worker has to look at.
    #[serde(skip)]
    pub(crate) leases_by_worker: HashMap<String, BTreeSet<IterationId>>,
    /// How many tasks of the task map (finished ones included) each worker has (workers
    /// with none have no entry): a worker is forgotten only when it has none.
    #[serde(skip)]
    pub(crate) tasks_per_worker: HashMap<String, u64>,
}

impl PartialEq for State {
    /// Equality of the durable fields. The destructuring names every field, so a new one does
    /// not compile until it is compared here or set aside with the reason.
    fn eq(&self, o: &Self) -> bool {
        let State {
            next_dataset_id,
            next_job_id,
            next_iteration_id,
            next_client_id,
            next_task_id,
            datasets,
            workers,
            worker_list,
            jobs,
            iterations,
            clients,
            tasks,
            incarnation,
            splits_handed_out_collected,
            // A count of the updates applied, not state: compared by the tests that need it.
            version: _,
            // Derived from the fields above (`State::check_heartbeat_index` checks them).
            jobs_by_name: _,
            iterations_by_key: _,
            open_round_robin: _,
            heartbeat_index: _,
            datasets_by_fingerprint: _,
            dataset_bytes: _,
            iterations_by_job: _,
            jobs_by_dataset: _,
            leases_by_worker: _,
            tasks_per_worker: _,
        } = self;
        *next_dataset_id == o.next_dataset_id
            && *next_job_id == o.next_job_id
            && *next_iteration_id == o.next_iteration_id
            && *next_client_id == o.next_client_id
            && *next_task_id == o.next_task_id
            && *datasets == o.datasets
            && *workers == o.workers
            && *worker_list == o.worker_list
            && *jobs == o.jobs
            && *iterations == o.iterations
            && *clients == o.clients
            && *tasks == o.tasks
            && *incarnation == o.incarnation
            && *splits_handed_out_collected == o.splits_handed_out_collected
    }
}

/// Read-only views.
impl State {
    /// The next generated dataset id (before skipping taken ones: see
    /// [`State::peek_dataset_id`]).
    pub fn next_dataset_id(&self) -> u64 {
        self.next_dataset_id
    }
    /// The next job id.
    pub fn next_job_id(&self) -> u64 {
        self.next_job_id
    }
    /// The next iteration id.
    pub fn next_iteration_id(&self) -> u64 {
        self.next_iteration_id
    }
    /// The next client id.
    pub fn next_client_id(&self) -> u64 {
        self.next_client_id
    }
    /// The next task id.
    pub fn next_task_id(&self) -> u64 {
        self.next_task_id
    }
    /// Datasets by id.
    pub fn datasets(&self) -> &BTreeMap<String, Dataset> {
        &self.datasets
    }
    /// Workers by address.
    pub fn workers(&self) -> &BTreeMap<String, Worker> {
        &self.workers
    }
    /// Static sharding's worker list (bound as workers register).
    pub fn worker_list(&self) -> &WorkerList {
        &self.worker_list
    }
    /// Jobs by id.
    pub fn jobs(&self) -> &BTreeMap<JobId, Job> {
        &self.jobs
    }
    /// Iterations by id.
    pub fn iterations(&self) -> &BTreeMap<IterationId, Iteration> {
        &self.iterations
    }
    /// Iteration clients by id.
    pub fn clients(&self) -> &BTreeMap<ClientId, Client> {
        &self.clients
    }
    /// Tasks by id.
    pub fn tasks(&self) -> &BTreeMap<TaskId, Task> {
        &self.tasks
    }
    /// The incarnation id of this state (see [`Update::Started`]).
    pub fn incarnation(&self) -> &str {
        &self.incarnation
    }
    /// Updates applied since the state began: within one incarnation, equal versions mean
    /// equal states.
    pub fn version(&self) -> u64 {
        self.version
    }
    /// Job id by name (derived).
    pub fn jobs_by_name(&self) -> &HashMap<String, JobId> {
        &self.jobs_by_name
    }
    /// Dataset ids by fingerprint (derived).
    pub fn datasets_by_fingerprint(&self) -> &HashMap<u64, BTreeSet<String>> {
        &self.datasets_by_fingerprint
    }
    /// The encoded bytes the datasets hold (derived; bounded by `max_dataset_bytes`).
    pub fn dataset_bytes(&self) -> u64 {
        self.dataset_bytes
    }
    /// The iterations of a job (derived).
    pub fn iterations_of_job(&self, job_id: JobId) -> impl Iterator<Item = &Iteration> + '_ {
        self.iterations_by_job
            .get(&job_id)
            .into_iter()
            .flatten()
            .filter_map(|i| self.iterations.get(i))
    }
    /// Whether a dataset is used by a job with iterations (derived).
    pub fn dataset_in_use(&self, dataset_id: &str) -> Option<JobId> {
        self.jobs_by_dataset
            .get(dataset_id)
            .into_iter()
            .flatten()
            .find(|j| self.iterations_by_job.contains_key(j))
            .copied()
    }
    /// DYNAMIC splits handed out over every iteration the state ever had, collected ones
    /// included.
    pub fn splits_handed_out_total(&self) -> u64 {
        self.iterations
            .values()
            .map(Iteration::splits_handed_out)
            .sum::<u64>()
            .saturating_add(self.splits_handed_out_collected)
    }
}

/// Id-keyed maps are stored as `[[id, value], ...]`: JSON object keys are strings, and
/// records are decoded through serde's buffered (internally tagged) path, which does not turn
/// strings back into numbers.
mod pairs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        map: &BTreeMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.iter())
    }

    pub(super) fn deserialize<'de, K, V, D>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}

impl State {
    /// Replays `updates` onto a fresh state (configured with `worker_addresses`): the state
    /// a journal stands for.
    pub fn replay<'a>(
        worker_addresses: Vec<String>,
        updates: impl IntoIterator<Item = &'a Update>,
    ) -> State {
        let mut state = State::new(worker_addresses);
        for u in updates {
            apply(&mut state, u);
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_outside_the_worker_list_is_a_typed_refusal_in_tensorflows_words() {
        let list = WorkerList::new(vec!["w1:%port%".into(), "w2:7".into()]);
        assert_eq!(list.validate("w1:5"), Ok(()));
        assert_eq!(WorkerList::default().validate("anything"), Ok(()));
        let e = list.validate("w3:7").unwrap_err();
        assert_eq!(
            e,
            NotInWorkerList {
                address: "w3:7".into(),
                entries: vec!["w1:%port%".into(), "w2:7".into()]
            }
        );
        assert_eq!(
            e.to_string(),
            "Failed to assign an index for worker w3:7. Configured workers list: [w1:%port%, \
             w2:7]. The worker's address is not configured, or other workers are already running \
             at the configured host. If your worker has restarted, make sure it runs at the same \
             address and port."
        );
    }
}
