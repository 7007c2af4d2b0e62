//! TensorFlow's side of the dispatcher, driven directly: opaque TensorFlow datasets
//! (registration, deduplication, the byte bound), worker kinds and mixed fleets, run-time
//! compression, DYNAMIC splits of TensorFlow iterations, tasks to push, and coordinated reads
//! from clients without a consumer index.
//!
//! After every call the harness checks that the journal (every record through its JSON
//! encoding) replays to the live state, that the derived indexes of both are what a rebuild
//! gives, and that a snapshot of the state replays to it too.

#[path = "support/replay.rs"]
mod replay;

use serde_json::json;
use shardwise_core::dataset::DatasetDef;
use shardwise_core::dispatch::wire::{
    ClientHeartbeat, CreateIteration, CreateJob, GetSplits, IterationLease, ProcessingMode,
    RegisterDataset, TaskProgress, WorkerHeartbeat, WorkerHeartbeatReply, WorkerUpdate,
};
use shardwise_core::dispatch::{
    ClientId, DatasetSpec, DisableCompression, DispatchError, Dispatcher, DispatcherConfig, Driver,
    GetDataset, IterationId, JobId, ListWorkers, MaybeRemove, Millis, RegisterTfDataset,
    ShardingPolicy, SplitProviderDef, TargetWorkers, TfDataset, TfGetSplit, TfWorkerInfo,
    TransferServer, Update, VecSink,
};

const SNAPPY: i32 = 2;
const OFF: i32 = 1;

fn tf(graph: &[u8], providers: Result<Vec<SplitProviderDef>, &str>) -> TfDataset {
    TfDataset {
        graph: graph.to_vec(),
        element_spec: Some(b"spec".to_vec()),
        compression: SNAPPY,
        cardinality: -2,
        split_providers: providers.map_err(str::to_owned),
        fingerprint: None,
    }
}

fn range(start: i64, step: i64, len: u64) -> SplitProviderDef {
    SplitProviderDef::Range { start, step, len }
}

fn declarative() -> DatasetDef {
    DatasetDef::from_json(&json!({"source": {"range": {"stop": 10}}})).unwrap()
}

fn transfer(addr: &str) -> TfWorkerInfo {
    TfWorkerInfo {
        transfer_servers: vec![TransferServer {
            protocol: "grpc".into(),
            address: addr.into(),
            compatibility_info: vec![1, 2, 3],
            ..TransferServer::default()
        }],
    }
}

struct H {
    d: Driver<VecSink>,
    config: DispatcherConfig,
    journal: Vec<Update>,
    now: u64,
}

impl H {
    fn new() -> Self {
        H::with(DispatcherConfig::default())
    }
    fn with(config: DispatcherConfig) -> Self {
        let d = Dispatcher::new(config.clone(), "inc".into(), Millis(0)).unwrap();
        H { d: Driver::new(d, VecSink::default()), config, journal: vec![], now: 0 }
    }
    /// Drains the records and checks replay, derived indexes and a snapshot's replay.
    fn sync(&mut self) {
        replay::take_records(self.d.sink_mut(), &mut self.journal);
        let addresses = self.config.worker_addresses.clone();
        replay::check_replay("", addresses, &self.journal, self.d.dispatcher().state());
    }
    fn call<C: shardwise_core::Call>(&mut self, r: C) -> Result<C::Output, DispatchError> {
        self.now += 1;
        let out = self.d.call(Millis(self.now), r);
        self.sync();
        out
    }
    /// A crash and a recovery from the journal.
    fn restart(&mut self) {
        let d = Dispatcher::recover(
            self.config.clone(),
            "other".into(),
            Millis(self.now),
            &self.journal,
        )
        .unwrap();
        self.d = Driver::new(d, VecSink::default());
        self.sync();
    }
    fn records(&self) -> usize {
        self.journal.len()
    }
    fn register(&mut self, id: Option<&str>, dataset: TfDataset) -> Result<String, DispatchError> {
        self.call(RegisterTfDataset { dataset_id: id.map(Into::into), dataset })
            .map(|r| r.dataset_id)
    }
    fn heartbeat(
        &mut self,
        addr: &str,
        uid: &str,
        tf: Option<TfWorkerInfo>,
    ) -> Result<WorkerHeartbeatReply, DispatchError> {
        let current = self
            .d
            .dispatcher()
            .state()
            .workers()
            .get(addr)
            .map(|w| w.tasks.iter().copied().collect())
            .unwrap_or_default();
        self.call(WorkerHeartbeat {
            worker_address: addr.into(),
            current_tasks: current,
            worker_uid: Some(uid.into()),
            tensorflow: tf,
            ..WorkerHeartbeat::default()
        })
    }
    fn job(&mut self, dataset_id: &str, policy: ShardingPolicy) -> Result<JobId, DispatchError> {
        self.call(CreateJob {
            dataset_id: dataset_id.into(),
            processing_mode: ProcessingMode::Policy { sharding_policy: policy },
            job_name: None,
            num_consumers: None,
            target_workers: TargetWorkers::Auto,
            cross_trainer_cache: false,
            split_size: None,
        })
        .map(|j| j.job_id)
    }
    fn iteration(&mut self, job: JobId) -> Result<IterationLease, DispatchError> {
        self.call((job, CreateIteration::default()))
    }
    fn split(&mut self, it: IterationId, repetition: u64, provider: u64) -> Option<i64> {
        self.call((it, TfGetSplit { repetition, split_provider_index: provider })).unwrap().split
    }
    fn splits(&mut self, it: IterationId, repetition: u64, provider: u64) -> Vec<Option<i64>> {
        let mut out = Vec::new();
        loop {
            let s = self.split(it, repetition, provider);
            out.push(s);
            if s.is_none() {
                return out;
            }
        }
    }
}

/// A derived name (`tf-<fingerprint>`) claimed first by an explicit registration of another
/// graph never hands that graph to a registration without an id: the victim gets its own
/// dataset (the next decimal id), and later registrations of its pipeline find it by
/// fingerprint, across a restart too. Registrations by fingerprint find explicit ones of the
/// same fingerprint.
#[test]
fn a_derived_id_never_names_another_graphs_dataset() {
    let mut h = H::new();
    let fingerprinted = |graph: &[u8], fp: &str| TfDataset {
        fingerprint: Some(fp.into()),
        ..tf(graph, Ok(vec![range(0, 1, 10)]))
    };
    let victim = fingerprinted(b"victim", "aa11");
    let attacker = fingerprinted(b"attacker", "bb22");
    // The attacker claims the victim's derived name first.
    assert_eq!(h.register(Some("tf-aa11"), attacker.clone()).unwrap(), "tf-aa11");
    let mine = h.register(None, victim.clone()).unwrap();
    assert_eq!(mine, "1000");
    let graph_of = |h: &H, id: &str| match &h.d.dispatcher().state().datasets()[id].spec {
        DatasetSpec::TensorFlow(t) => t.graph.clone(),
        DatasetSpec::Declarative(_) => panic!("{id} is declarative"),
    };
    assert_eq!(graph_of(&h, &mine), b"victim");
    // Another build of the victim's pipeline (other bytes, same fingerprint) finds it.
    let rebuilt = fingerprinted(b"victim, nodes named apart", "aa11");
    assert_eq!(h.register(None, rebuilt.clone()).unwrap(), "1000");
    h.restart();
    assert_eq!(h.register(None, rebuilt).unwrap(), "1000");
    // Without a claim in the way, a new dataset is named by its fingerprint.
    assert_eq!(h.register(None, fingerprinted(b"third", "cc33")).unwrap(), "tf-cc33");
    // The attacker registering without an id gets its own graph's dataset, by fingerprint.
    assert_eq!(h.register(None, attacker).unwrap(), "tf-aa11");
    assert_eq!(graph_of(&h, "tf-aa11"), b"attacker");
    // A legacy record (no fingerprint) is found only by identical bytes and metadata.
    let legacy = tf(b"legacy", Ok(vec![]));
    let legacy_id = h.register(None, legacy.clone()).unwrap();
    assert_eq!(h.register(None, legacy.clone()).unwrap(), legacy_id);
    assert_ne!(h.register(None, fingerprinted(b"legacy", "dd44")).unwrap(), legacy_id);
}

#[test]
fn tf_datasets_register_deduplicate_and_are_bounded() {
    let mut h = H::with(DispatcherConfig { max_dataset_bytes: 300, ..DispatcherConfig::default() });
    let a = tf(&[1; 40], Ok(vec![range(0, 1, 10)]));
    assert_eq!(h.register(None, a.clone()).unwrap(), "1000");
    // The same graph and metadata again: the same id, nothing journaled.
    let n = h.records();
    assert_eq!(h.register(None, a.clone()).unwrap(), "1000");
    assert_eq!(h.records(), n);
    // Another element spec (absent is not empty) is another dataset.
    let b = TfDataset { element_spec: None, ..a.clone() };
    assert_eq!(h.register(None, b.clone()).unwrap(), "1001");
    let c = TfDataset { graph: vec![2; 250], ..a.clone() };
    // 40 + 4, 40, and now 254 bytes more: past the bound of 300 (graph and element spec
    // count).
    let e = h.register(None, c).unwrap_err();
    assert_eq!(e.code(), "RESOURCE_EXHAUSTED", "{e}");
    assert_eq!(h.d.dispatcher().state().dataset_bytes(), 84);
    // An explicit id that exists answers it when the metadata matches (TensorFlow's
    // get-or-register), even with another graph; other metadata is refused.
    assert_eq!(
        h.register(Some("1000"), TfDataset { graph: vec![9], ..a.clone() }).unwrap(),
        "1000"
    );
    let e = h.register(Some("1000"), TfDataset { cardinality: 7, ..a.clone() }).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert!(e.detail().contains("the cardinality differs"), "{e}");
    let e = h.register(Some("bad id!"), a.clone()).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    // A declarative dataset's id is not a TensorFlow dataset's, and the other way round.
    let decl = h
        .call(RegisterDataset {
            dataset: declarative(),
            dataset_id: Some("d".into()),
            metadata: None,
        })
        .unwrap()
        .dataset_id;
    let e = h.register(Some(&decl), a.clone()).unwrap_err();
    assert!(e.detail().contains("kind"), "{e}");
    let e = h
        .call(RegisterDataset {
            dataset: declarative(),
            dataset_id: Some("1000".into()),
            metadata: None,
        })
        .unwrap_err();
    assert!(e.detail().contains("kind"), "{e}");
    // Recovery keeps them, with their fingerprints: registering again still deduplicates.
    h.restart();
    let n = h.records();
    assert_eq!(h.register(None, b).unwrap(), "1001");
    assert_eq!(h.records(), n);
}

#[test]
fn get_dataset_answers_tf_datasets_and_rest_shows_a_summary() {
    let mut h = H::new();
    let a = tf(&[7; 12], Ok(vec![range(5, 5, 3)]));
    let id = h.register(None, a.clone()).unwrap();
    let info = h.call(GetDataset { dataset_id: id.clone() }).unwrap();
    assert_eq!(info.dataset, DatasetSpec::TensorFlow(Box::new(a)));
    assert_eq!(info.compression_disabled, None);
    let rest = serde_json::to_value(&info).unwrap();
    assert_eq!(
        rest,
        json!({"dataset_id": id, "metadata": null, "dataset": {"tensorflow": {
            "graph_bytes": 12, "element_spec_bytes": 4, "cardinality": -2,
            "compression": "SNAPPY",
            "split_providers": [{"range": {"start": 5, "step": 5, "len": 3}}]}}})
    );
    // A declarative dataset's REST form is unchanged.
    let decl = h
        .call(RegisterDataset {
            dataset: declarative(),
            dataset_id: None,
            metadata: Some(json!({"k": 1})),
        })
        .unwrap()
        .dataset_id;
    let info = h.call(GetDataset { dataset_id: decl.clone() }).unwrap();
    assert_eq!(
        serde_json::to_value(&info).unwrap(),
        json!({"dataset_id": decl, "dataset": declarative(), "metadata": {"k": 1}})
    );
    // Records: a declarative dataset is stored as before ("def"), a TensorFlow one with its
    // bytes in base64.
    let snap = serde_json::to_value(h.d.dispatcher().snapshot()).unwrap();
    let text = snap.to_string();
    assert!(text.contains(r#""def":{"source""#), "{text}");
    assert!(text.contains(r#""graph":"BwcHBwcHBwcHBwcH""#), "{text}");
}

#[test]
fn worker_kinds_are_fixed_and_tf_workers_update_by_address() {
    let mut h = H::new();
    h.heartbeat("tf:1", "11", Some(transfer("tf:1"))).unwrap();
    h.heartbeat("sw:1", "u1", None).unwrap();
    // The other kind at a registered address, in the steady state (the fast path) too.
    let e = h.heartbeat("tf:1", "11", None).unwrap_err();
    assert_eq!(e.code(), "FAILED_PRECONDITION");
    assert!(e.detail().contains("a TensorFlow worker is registered"), "{e}");
    let e = h.heartbeat("sw:1", "u1", Some(transfer("sw:1"))).unwrap_err();
    assert_eq!(e.code(), "FAILED_PRECONDITION");
    assert!(e.detail().contains("a Shardwise worker is registered"), "{e}");
    // A TensorFlow worker updates without a uid (TensorFlow's WorkerUpdateRequest has
    // none); a Shardwise worker that registered with one still needs it.
    let ok =
        h.call(WorkerUpdate { worker_address: "tf:1".into(), worker_uid: None, updates: vec![] });
    assert!(ok.is_ok(), "{ok:?}");
    let e = h
        .call(WorkerUpdate { worker_address: "sw:1".into(), worker_uid: None, updates: vec![] })
        .unwrap_err();
    assert_eq!(e.code(), "PERMISSION_DENIED");
    // A restart (a new uid) refreshes the transfer servers, journaled.
    h.heartbeat("tf:1", "12", Some(transfer("tf:1-new"))).unwrap();
    h.restart();
    let w = &h.d.dispatcher().state().workers()["tf:1"];
    assert_eq!(w.tensorflow, Some(transfer("tf:1-new")));
    assert_eq!(w.uid.as_deref(), Some("12"));
    // The same uid with other servers changes nothing (TensorFlow sends them every time).
    h.heartbeat("tf:1", "12", Some(transfer("ignored"))).unwrap();
    assert_eq!(h.d.dispatcher().state().workers()["tf:1"].tensorflow, Some(transfer("tf:1-new")));
    // A revived worker's are refreshed too.
    let timeout = h.config.worker_timeout.0;
    h.now += timeout + 1;
    h.d.handle_timeout(Millis(h.now));
    h.sync();
    assert!(!h.d.dispatcher().state().workers()["tf:1"].alive);
    h.heartbeat("tf:1", "12", Some(transfer("tf:1-revived"))).unwrap();
    assert_eq!(
        h.d.dispatcher().state().workers()["tf:1"].tensorflow,
        Some(transfer("tf:1-revived"))
    );
    // Both kinds are listed.
    let list = h.call(ListWorkers).unwrap();
    let kinds: Vec<(String, bool)> =
        list.workers.iter().map(|w| (w.worker_address.clone(), w.tensorflow.is_some())).collect();
    assert_eq!(kinds, [("sw:1".to_owned(), false), ("tf:1".to_owned(), true)]);
    assert_eq!(
        serde_json::to_value(&list.workers[1]).unwrap().as_object().unwrap().len(),
        4,
        "REST shows what it showed"
    );
}

#[test]
fn a_mixed_fleet_runs_each_kind_of_dataset_on_its_own_kind_of_worker() {
    let mut h = H::new();
    h.heartbeat("sw:1", "s1", None).unwrap();
    h.heartbeat("tf:1", "1", Some(transfer("tf:1"))).unwrap();
    h.heartbeat("tf:2", "2", Some(transfer("tf:2"))).unwrap();
    let decl = h
        .call(RegisterDataset { dataset: declarative(), dataset_id: None, metadata: None })
        .unwrap()
        .dataset_id;
    let graph = h.register(None, tf(b"graph", Ok(vec![range(0, 1, 4), range(0, 1, 2)]))).unwrap();
    let decl_job = h.job(&decl, ShardingPolicy::Dynamic).unwrap();
    let tf_job = h.job(&graph, ShardingPolicy::Dynamic).unwrap();
    let d_lease = h.iteration(decl_job).unwrap();
    assert!(d_lease.pushed_tasks.is_empty(), "Shardwise workers are not pushed to");
    let t_lease = h.iteration(tf_job).unwrap();
    let holders = |h: &H, it: IterationId| -> Vec<String> {
        let st = h.d.dispatcher().state();
        st.iterations()[&it].tasks.iter().map(|t| st.tasks()[t].worker_address.clone()).collect()
    };
    assert_eq!(holders(&h, d_lease.iteration_id), ["sw:1"]);
    assert_eq!(holders(&h, t_lease.iteration_id), ["tf:1", "tf:2"]);
    // The tasks to push: this call's, on TensorFlow workers, with what TensorFlow's TaskDef
    // needs.
    let pushed: Vec<&str> = t_lease.pushed_tasks.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(pushed, ["tf:1", "tf:2"]);
    let def = &t_lease.pushed_tasks[0].1;
    assert_eq!(def.dataset.tensorflow().map(|t| t.graph.as_slice()), Some(&b"graph"[..]));
    assert_eq!(def.num_split_providers, 2);
    assert_eq!(def.iteration_id, t_lease.iteration_id);
    assert_eq!(def.dataset_id, graph);
    assert_eq!(def.processing_mode, ShardingPolicy::Dynamic);
    // The same iteration again pushes nothing.
    let again = h.iteration(tf_job).unwrap();
    assert_eq!(again.iteration_id, t_lease.iteration_id);
    assert!(again.pushed_tasks.is_empty());
    // Late-joining workers get tasks of their kind only; their heartbeat reply has them.
    let r = h.heartbeat("tf:3", "3", Some(transfer("tf:3"))).unwrap();
    let its: Vec<IterationId> = r.new_tasks.iter().map(|t| t.iteration_id).collect();
    assert_eq!(its, [t_lease.iteration_id]);
    let r = h.heartbeat("sw:2", "s2", None).unwrap();
    let its: Vec<IterationId> = r.new_tasks.iter().map(|t| t.iteration_id).collect();
    assert_eq!(its, [d_lease.iteration_id]);
    // A REST worker's task JSON is as it was: the dataset is its definition.
    let rest = serde_json::to_value(&r.new_tasks[0]).unwrap();
    assert_eq!(rest["dataset"], serde_json::to_value(declarative()).unwrap());
    assert_eq!(rest["num_split_providers"], 1);
    // A client sees what TensorFlow's TaskInfo needs (not on REST).
    let hb = h.call((t_lease.client_id, ClientHeartbeat::default())).unwrap();
    let t = &hb.tasks[0];
    assert_eq!(t.iteration_id, t_lease.iteration_id);
    assert_eq!(t.transfer_servers, transfer("tf:1").transfer_servers);
    assert_eq!(t.worker_uid.as_deref(), Some("1"));
    let rest = serde_json::to_value(t).unwrap();
    assert!(rest.get("transfer_servers").is_none() && rest.get("worker_uid").is_none());
    assert!(serde_json::to_value(&t_lease).unwrap().get("pushed_tasks").is_none());
}

#[test]
fn static_sharding_of_a_mixed_fleet_shards_each_kind_over_its_workers() {
    let config = DispatcherConfig {
        worker_addresses: vec!["tf:1".into(), "sw:1".into()],
        ..DispatcherConfig::default()
    };
    let mut h = H::with(config);
    h.heartbeat("tf:1", "1", Some(transfer("tf:1"))).unwrap();
    h.heartbeat("sw:1", "s", None).unwrap();
    let graph = h.register(None, tf(b"g", Err("no provider"))).unwrap();
    // Static sharding of a TensorFlow dataset needs no split provider.
    let job = h.job(&graph, ShardingPolicy::FileOrData).unwrap();
    let lease = h.iteration(job).unwrap();
    assert_eq!(lease.pushed_tasks.len(), 1);
    let def = &lease.pushed_tasks[0].1;
    assert_eq!((def.num_workers, def.worker_index), (Some(2), Some(0)));
    assert_eq!(def.num_split_providers, 0);
}

#[test]
fn compression_is_decided_once_at_run_time() {
    let mut h = H::new();
    let snappy = h.register(None, tf(b"s", Ok(vec![]))).unwrap();
    let off = h.register(None, TfDataset { compression: OFF, ..tf(b"o", Ok(vec![])) }).unwrap();
    let ask = |h: &mut H, id: &str, disable: bool| {
        h.call(DisableCompression { dataset_id: id.into(), disable })
            .map(|d| d.compression_disabled)
    };
    let n = h.records();
    assert_eq!(ask(&mut h, &off, true), Ok(None), "no compression to disable");
    assert_eq!(h.records(), n);
    assert_eq!(ask(&mut h, "nope", true).unwrap_err().code(), "NOT_FOUND");
    assert_eq!(ask(&mut h, &snappy, true), Ok(Some(true)));
    assert_eq!(h.records(), n + 1, "the decision is journaled");
    assert_eq!(ask(&mut h, &snappy, false), Ok(Some(true)), "the first call decided");
    let meta = |h: &mut H, id: &str| match h.call(GetDataset { dataset_id: id.into() }) {
        Ok(info) => info.dataset.tensorflow().map(|t| t.compression),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(meta(&mut h, &snappy), Some(SNAPPY), "the metadata stays as sent, as on TensorFlow");
    h.restart();
    assert_eq!(ask(&mut h, &snappy, false), Ok(Some(true)), "and after a restart");
    assert_eq!(meta(&mut h, &snappy), Some(SNAPPY));
    // Deciding to keep it keeps SNAPPY.
    let kept = h.register(None, tf(b"k", Ok(vec![]))).unwrap();
    assert_eq!(ask(&mut h, &kept, false), Ok(Some(false)));
    assert_eq!(ask(&mut h, &kept, true), Ok(Some(false)));
    assert_eq!(meta(&mut h, &kept), Some(SNAPPY));
    // A declarative dataset has none.
    let decl = h
        .call(RegisterDataset { dataset: declarative(), dataset_id: None, metadata: None })
        .unwrap()
        .dataset_id;
    assert_eq!(ask(&mut h, &decl, true), Ok(None));
}

fn dynamic_iteration(h: &mut H, providers: Vec<SplitProviderDef>) -> IterationId {
    h.heartbeat("tf:1", "1", Some(transfer("tf:1"))).unwrap();
    let id = h.register(None, tf(format!("{providers:?}").as_bytes(), Ok(providers))).unwrap();
    let job = h.job(&id, ShardingPolicy::Dynamic).unwrap();
    h.iteration(job).unwrap().iteration_id
}

#[test]
fn tf_splits_are_tensorflows_values_per_provider_and_repetition() {
    let mut h = H::new();
    let it = dynamic_iteration(&mut h, vec![range(5, 5, 3), SplitProviderDef::Slices { len: 3 }]);
    // range(5, 20, 5): the element values; from_tensor_slices: the slice indexes.
    assert_eq!(h.splits(it, 0, 0), [Some(5), Some(10), Some(15), None]);
    assert_eq!(h.split(it, 0, 1), Some(0));
    // Providers are independent, and past the end stays the end.
    assert_eq!(h.split(it, 0, 0), None);
    assert_eq!(h.splits(it, 0, 1), [Some(1), Some(2), None]);
    // A later repetition starts at 0; an earlier one is over.
    assert_eq!(h.split(it, 1, 0), Some(5));
    assert_eq!(h.split(it, 0, 0), None);
    assert_eq!(h.split(it, 1, 0), Some(10));
    assert_eq!(h.split(it, 3, 1), Some(0));
    assert_eq!(h.split(it, 2, 1), None);
    // A restarted dispatcher continues after the last split handed out.
    h.restart();
    assert_eq!(h.splits(it, 1, 0), [Some(15), None]);
    assert_eq!(h.split(it, 3, 1), Some(1));
    assert_eq!(
        h.d.call(Millis(99), shardwise_core::dispatch::GetMetrics).unwrap().splits_handed_out,
        11
    );
}

#[test]
fn tf_get_split_refusals() {
    let mut h = H::new();
    let it = dynamic_iteration(&mut h, vec![range(0, 2, 2)]);
    let get = |h: &mut H, it: IterationId, p: u64| {
        h.call((it, TfGetSplit { repetition: 0, split_provider_index: p })).unwrap_err()
    };
    assert_eq!(get(&mut h, IterationId(999), 0).code(), "NOT_FOUND");
    let e = get(&mut h, it, 1);
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert!(e.detail().contains("1 split providers"), "{e}");
    // Not DYNAMIC.
    let graph = h.register(None, tf(b"off", Ok(vec![]))).unwrap();
    let off = h.job(&graph, ShardingPolicy::Off).unwrap();
    let off_it = h.iteration(off).unwrap().iteration_id;
    assert_eq!(get(&mut h, off_it, 0).code(), "FAILED_PRECONDITION");
    // A declarative DYNAMIC iteration is not TensorFlow's, and the REST route refuses
    // TensorFlow iterations.
    h.heartbeat("sw:1", "s", None).unwrap();
    let decl = h
        .call(RegisterDataset { dataset: declarative(), dataset_id: None, metadata: None })
        .unwrap()
        .dataset_id;
    let decl_job = h.job(&decl, ShardingPolicy::Dynamic).unwrap();
    let decl_it = h.iteration(decl_job).unwrap().iteration_id;
    let e = get(&mut h, decl_it, 0);
    assert_eq!(e.code(), "FAILED_PRECONDITION");
    assert!(e.detail().contains("declarative"), "{e}");
    let e = h
        .call((
            it,
            GetSplits {
                worker_address: "tf:1".into(),
                worker_uid: Some("1".into()),
                repetition: 0,
                split_provider_index: 0,
                max_splits: None,
                acknowledge: None,
            },
        ))
        .unwrap_err();
    assert_eq!(e.code(), "FAILED_PRECONDITION");
    assert!(e.detail().contains("TensorFlow dataset"), "{e}");
}

#[test]
fn dynamic_mode_of_an_unsupported_graph_is_refused_with_nothing_journaled() {
    let mut h = H::new();
    h.heartbeat("tf:1", "1", Some(transfer("tf:1"))).unwrap();
    let why = "DYNAMIC sharding: op TFRecordDataset (node \"reader\") has no split provider here";
    let graph = h.register(None, tf(b"files", Err(why))).unwrap();
    let n = h.records();
    let e = h.job(&graph, ShardingPolicy::Dynamic).unwrap_err();
    assert_eq!(e.code(), "FAILED_PRECONDITION");
    assert_eq!(e.detail(), why);
    assert_eq!(h.records(), n, "nothing journaled");
    // Other modes work.
    let job = h.job(&graph, ShardingPolicy::Off).unwrap();
    assert_eq!(h.iteration(job).unwrap().pushed_tasks.len(), 1);
}

/// A DYNAMIC job of an unsupported graph that exists anyway (in a journal written by a
/// front that did not check at job creation): its iteration is refused, nothing journaled.
#[test]
fn creating_a_dynamic_iteration_of_an_unsupported_graph_is_refused() {
    let why = "op FlatMapDataset has no split provider";
    let journal = vec![
        Update::Started { incarnation: "old".into() },
        Update::RegisterTfDataset { dataset_id: "g".into(), dataset: Box::new(tf(b"g", Err(why))) },
        Update::CreateJob {
            job: shardwise_core::dispatch::state::Job {
                id: JobId(5000),
                name: "j".into(),
                dataset_id: "g".into(),
                policy: ShardingPolicy::Dynamic,
                num_consumers: None,
                target_workers: TargetWorkers::Auto,
                cross_trainer_cache: false,
                split_size: 1,
            },
        },
    ];
    let config = DispatcherConfig::default();
    let d = Dispatcher::recover(config.clone(), "new".into(), Millis(0), &journal).unwrap();
    let mut h = H { d: Driver::new(d, VecSink::default()), config, journal, now: 0 };
    h.heartbeat("tf:1", "1", Some(transfer("tf:1"))).unwrap();
    let n = h.records();
    let e = h.iteration(JobId(5000)).unwrap_err();
    assert_eq!(e.code(), "FAILED_PRECONDITION");
    assert_eq!(e.detail(), why);
    assert_eq!(h.records(), n, "nothing journaled");
}

#[test]
fn coordinated_reads_count_clients_without_a_consumer_index() {
    let mut h = H::new();
    h.heartbeat("tf:1", "1", Some(transfer("tf:1"))).unwrap();
    h.heartbeat("sw:1", "s", None).unwrap();
    let graph = h.register(None, tf(b"rr", Ok(vec![]))).unwrap();
    let job = h
        .call(CreateJob {
            dataset_id: graph,
            processing_mode: ProcessingMode::Policy { sharding_policy: ShardingPolicy::Off },
            job_name: Some("rr".into()),
            num_consumers: Some(2),
            target_workers: TargetWorkers::Auto,
            cross_trainer_cache: false,
            split_size: None,
        })
        .unwrap()
        .job_id;
    // TensorFlow's clients give no consumer index.
    let a = h.iteration(job).unwrap();
    let b = h.iteration(job).unwrap();
    assert_eq!(a.iteration_id, b.iteration_id);
    let hb = |h: &mut H, c: ClientId, current: u64, blocked: Option<u64>| {
        h.call((
            c,
            ClientHeartbeat {
                current_round: Some(current),
                blocked_round: blocked,
                ..Default::default()
            },
        ))
        .unwrap()
    };
    hb(&mut h, a.client_id, 3, None);
    hb(&mut h, b.client_id, 1, None);
    // A late worker gets a pending task, proposed one round after the furthest consumer.
    h.heartbeat("tf:2", "2", Some(transfer("tf:2"))).unwrap();
    let r = hb(&mut h, a.client_id, 3, None);
    assert_eq!(r.block_round, Some(4));
    assert_eq!(r.tasks.len(), 1);
    // One client agreeing twice is one consumer.
    hb(&mut h, a.client_id, 3, Some(4));
    let r = hb(&mut h, a.client_id, 3, Some(4));
    assert_eq!(r.tasks.len(), 1, "one distinct client is not two consumers");
    h.restart();
    let r = hb(&mut h, b.client_id, 2, Some(4));
    assert_eq!(r.tasks.len(), 2, "both clients agreed: the task is promoted");
    assert_eq!(r.block_round, None);
    let late = r.tasks[1].task_id;
    assert_eq!(h.d.dispatcher().state().tasks()[&late].starting_round, 4);
    // MaybeRemoveTask keeps its consumer indexes.
    assert_eq!(
        h.call((late, MaybeRemove { consumer_index: 0, round: 5 })).map(|r| r.removed),
        Ok(false)
    );
    assert_eq!(
        h.call((late, MaybeRemove { consumer_index: 1, round: 5 })).map(|r| r.removed),
        Ok(true)
    );
    // The worker whose task was voted out gets a pending task again; a Shardwise worker none.
    let first = r.tasks[0].task_id;
    let again = h.heartbeat("tf:2", "2", Some(transfer("tf:2"))).unwrap();
    assert_eq!(again.new_tasks.len(), 1);
    assert_ne!(again.new_tasks[0].task_id, late);
    assert!(h.heartbeat("sw:1", "s", None).unwrap().new_tasks.is_empty());
    assert!(h.d.dispatcher().state().workers()["sw:1"].tasks.is_empty());
    // A TensorFlow worker reports progress by its address alone.
    h.call(WorkerUpdate {
        worker_address: "tf:1".into(),
        worker_uid: None,
        updates: vec![TaskProgress { task_id: first, completed: true }],
    })
    .unwrap();
    assert!(h.d.dispatcher().state().tasks()[&first].finished);
}
