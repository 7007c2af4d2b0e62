//! The task machine on a virtual clock: fake drivers, and the core dispatcher behind the
//! get-splits where the dispatcher's side matters (acknowledgements, restarts).

use serde_json::{Value, json};

use super::*;
use crate::dataset::{DatasetDef, Limits};
use crate::dispatch::wire::{
    CreateIteration, CreateJob, ProcessingMode, RegisterDataset, Split, SplitsReply, TaskDef,
    WorkerHeartbeat,
};
use crate::dispatch::{
    Dispatcher, DispatcherConfig, Driver, IterationId, MemorySink, Millis, ShardingPolicy,
    TargetWorkers,
};
use crate::position::SplitPositions;

fn def(dataset: Value, mode: &str, split_size: u64, num_consumers: Option<u64>) -> TaskDef {
    serde_json::from_value(json!({
        "task_id": "7", "iteration_id": "2000", "job_id": "5000", "dataset_id": "1000",
        "dataset": dataset, "processing_mode": mode, "num_workers": null,
        "worker_index": null, "num_split_providers": 1, "split_size": split_size,
        "num_consumers": num_consumers, "starting_round": 0, "cross_trainer_cache": false,
    }))
    .unwrap()
}

fn range(n: u64) -> Value {
    json!({"source": {"range": {"stop": n}}})
}

/// Runs the pipeline while it may, and returns the first IO action it asks for.
fn pump(task: &mut Task) -> Option<Action> {
    loop {
        match task.poll_action()? {
            Action::Produce => _ = task.produce(),
            other => return Some(other),
        }
    }
}

fn events(task: &mut Task) -> Vec<Event> {
    std::iter::from_fn(|| task.poll_event()).collect()
}

fn read(task: &mut Task, max: usize) -> Option<Result<ReadReply, TaskError>> {
    task.handle_read(Millis(0), Read::Elements { max })
}

fn elements(task: &mut Task, max: usize) -> Vec<Value> {
    match read(task, max) {
        Some(Ok(r)) => {
            r.elements.into_iter().map(|e| e.into_value().expect("a JSON element")).collect()
        }
        other => panic!("expected elements, got {other:?}"),
    }
}

fn chunks(chunks: &[(u64, u64)], first_index: u64) -> SplitsReply {
    SplitsReply {
        splits: chunks.iter().map(|&(start, stop)| Split::Chunk { start, stop }).collect(),
        split_ids: (0..chunks.len() as u64)
            .map(|i| serde_json::from_value(json!(format!("0:{}", first_index + i))).unwrap())
            .collect(),
        positions: chunks
            .iter()
            .map(|&(start, stop)| SplitPositions { start, stop, skip: 0, until: None })
            .collect(),
        end_of_splits: false,
        retry_after_ms: None,
        incarnation: "inc-1".into(),
    }
}

fn end_of_splits() -> SplitsReply {
    SplitsReply {
        splits: vec![],
        split_ids: vec![],
        positions: vec![],
        end_of_splits: true,
        retry_after_ms: None,
        incarnation: "inc-1".into(),
    }
}

fn fetch(action: Option<Action>) -> FetchSplits {
    match action {
        Some(Action::FetchSplits(f)) => f,
        other => panic!("expected a get-split, got {other:?}"),
    }
}

fn ids(f: &FetchSplits) -> Vec<String> {
    f.acknowledge.iter().map(|id| serde_json::to_value(id).unwrap().to_string()).collect()
}

#[test]
fn nothing_runs_before_the_first_read() {
    let mut task = Task::new(def(range(10), "DYNAMIC", 4, None), 8, Limits::default());
    assert_eq!(task.poll_action(), None);
    assert_eq!(task.view().state, RunState::Waiting);
    assert!(read(&mut task, 1).is_none());
    assert_eq!(task.view().state, RunState::Running);
    assert!(matches!(pump(&mut task), Some(Action::FetchSplits(_))));
}

#[test]
fn backpressure_holds_production_at_capacity() {
    let mut task = Task::new(def(range(100), "OFF", 1, None), 4, Limits::default());
    assert!(read(&mut task, 1).is_none());
    assert_eq!(pump(&mut task), None);
    assert_eq!(task.view().buffered_elements, 4, "the buffer is full, nothing more");
    assert_eq!(task.poll_action(), None);
    events(&mut task);
    assert_eq!(elements(&mut task, 3), [0, 1, 2]);
    // Taking elements wakes the driver, which fills the room again.
    assert!(events(&mut task).contains(&Event::Runnable));
    assert_eq!(task.poll_action(), Some(Action::Produce));
    assert_eq!(task.produce(), Produced { elements: 3, yielded: false });
    assert_eq!(task.view().buffered_elements, 4);
    assert_eq!(task.view().elements_produced, 7);
    assert_eq!(elements(&mut task, 100), [3, 4, 5, 6]);
}

#[test]
fn the_byte_bound_pauses_production_but_one_element_always_fits() {
    let limits = Limits { max_buffered_bytes: 1 };
    let mut task = Task::new(def(range(10), "OFF", 1, None), 100, limits);
    assert!(read(&mut task, 1).is_none());
    assert_eq!(pump(&mut task), None);
    assert_eq!(task.view().buffered_elements, 1);
    assert_eq!(elements(&mut task, 10), [0]);
    assert_eq!(pump(&mut task), None);
    assert_eq!(elements(&mut task, 10), [1]);
}

#[test]
fn a_round_heavier_than_the_byte_bound_fails_the_task() {
    let limits = Limits { max_buffered_bytes: 1 };
    let mut task = Task::new(def(range(10), "OFF", 1, Some(3)), 100, limits);
    let round =
        |task: &mut Task| task.handle_read(Millis(0), Read::Round { consumer: 0, round: 0 });
    assert!(round(&mut task).is_none());
    assert_eq!(pump(&mut task), None);
    let e = round(&mut task).unwrap().unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted);
    assert!(e.detail.starts_with("task 7 failed: a round of 3 coordinated reads"), "{e}");
    assert_eq!(task.view().state, RunState::Failed);
}

/// A batch of splits is acknowledged with the next get-split, which goes out only once
/// clients took every element produced so far.
#[test]
fn split_batches_are_acknowledged_only_after_their_elements_were_handed_out() {
    let mut task = Task::new(def(range(100), "DYNAMIC", 4, None), 16, Limits::default());
    assert!(read(&mut task, 1).is_none());
    let first = fetch(pump(&mut task));
    assert_eq!(first.max_splits, 4, "a buffer of 16 holds four splits of 4");
    assert!(first.acknowledge.is_empty());
    assert_eq!(pump(&mut task), None, "one get-split at a time");
    task.handle_splits(Millis(1), chunks(&[(0, 4), (4, 8), (8, 12), (12, 16)], 0));
    assert_eq!(task.view().splits_held, 4);
    // The pipeline runs through the batch and asks for more: not while elements wait.
    assert_eq!(pump(&mut task), None);
    assert_eq!(task.view().buffered_elements, 16);
    assert_eq!(elements(&mut task, 15).len(), 15);
    assert_eq!(pump(&mut task), None, "one element is still unread");
    assert_eq!(elements(&mut task, 15), [15]);
    let second = fetch(pump(&mut task));
    assert_eq!(ids(&second), ["\"0:0\"", "\"0:1\"", "\"0:2\"", "\"0:3\""]);
    // The request carries them, with the worker's address and process.
    let req = second.request("w1:6000", Some("uid-1"));
    assert_eq!(req.acknowledge.as_deref(), Some(second.acknowledge.as_slice()));
    assert_eq!((req.worker_uid.as_deref(), req.max_splits), (Some("uid-1"), Some(4)));
    task.handle_splits(Millis(2), end_of_splits());
    assert_eq!(task.view().splits_held, 0, "acknowledged");
}

/// No split free yet: asked again after `retry_after_ms`, still acknowledging the same ids.
#[test]
fn no_split_free_yet_is_asked_again_after_retry_after() {
    let mut task = Task::new(def(range(8), "DYNAMIC", 4, None), 4, Limits::default());
    assert!(read(&mut task, 1).is_none());
    fetch(pump(&mut task));
    task.handle_splits(Millis(0), chunks(&[(0, 4)], 0));
    pump(&mut task);
    assert_eq!(elements(&mut task, 10), [0, 1, 2, 3]);
    assert_eq!(ids(&fetch(pump(&mut task))), ["\"0:0\""]);
    let mut wait = end_of_splits();
    wait.end_of_splits = false;
    wait.retry_after_ms = Some(250);
    task.handle_splits(Millis(10), wait);
    assert_eq!(task.poll_timeout(), Some(Millis(260)));
    assert_eq!(pump(&mut task), None);
    task.handle_timeout(Millis(259));
    assert_eq!(pump(&mut task), None, "not before its time");
    task.handle_timeout(Millis(260));
    assert!(fetch(pump(&mut task)).acknowledge.is_empty(), "the reply acknowledged them");
    // A hostile retry_after is bounded to 10 s.
    let mut wait = end_of_splits();
    wait.end_of_splits = false;
    wait.retry_after_ms = Some(u64::MAX);
    task.handle_splits(Millis(300), wait);
    assert_eq!(task.poll_timeout(), Some(Millis(10_300)));
}

fn unavailable() -> SplitFailure {
    SplitFailure { code: Code::Unavailable, retryable: true, message: "connection refused".into() }
}

/// A get-split that fails is retried with backoff (10 ms doubling to 2 s, the same ids
/// acknowledged each time) while it is retryable; a refusal that is not fails the task.
#[test]
fn a_split_error_is_retried_with_backoff_then_fails_the_task() {
    let mut task = Task::new(def(range(8), "DYNAMIC", 4, None), 4, Limits::default());
    assert!(read(&mut task, 1).is_none());
    fetch(pump(&mut task));
    task.handle_splits(Millis(0), chunks(&[(0, 4)], 0));
    pump(&mut task);
    elements(&mut task, 10);
    let mut now = Millis(1_000);
    let mut waits = Vec::new();
    for _ in 0..10 {
        let f = fetch(pump(&mut task));
        assert_eq!(ids(&f), ["\"0:0\""], "retried with the same acknowledgements");
        task.handle_split_error(now, unavailable());
        let at = task.poll_timeout().unwrap();
        waits.push(at.since(now).0);
        assert_eq!(pump(&mut task), None, "waits for its backoff");
        now = at;
        task.handle_timeout(now);
    }
    assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1280, 2000, 2000]);
    fetch(pump(&mut task));
    let refused = SplitFailure {
        code: Code::NotFound,
        retryable: false,
        message: "iteration 2000 not found".into(),
    };
    task.handle_split_error(now, refused);
    assert_eq!(pump(&mut task), None);
    let e = read(&mut task, 1).unwrap().unwrap_err();
    // NOT_FOUND would tell clients to retry a task the worker does not know yet.
    assert_eq!(e.code, Code::FailedPrecondition);
    assert_eq!(e.detail, "task 7 failed: get-split failed: iteration 2000 not found");
    assert_eq!(task.view().state, RunState::Failed);
    assert!(task.is_finished());
    assert_eq!(task.gone_kind(), Gone::Deleted);
}

/// Refused as an unknown worker: heartbeat and retry, five times in a row, then fail.
#[test]
fn a_worker_refused_as_unknown_heartbeats_and_retries_five_times() {
    let mut task = Task::new(def(range(8), "DYNAMIC", 4, None), 4, Limits::default());
    assert!(read(&mut task, 1).is_none());
    let refused = || SplitFailure {
        code: Code::FailedPrecondition,
        retryable: false,
        message: "worker w1 is lost".into(),
    };
    let mut now = Millis(0);
    for _ in 0..5 {
        fetch(pump(&mut task));
        events(&mut task);
        task.handle_split_error(now, refused());
        assert!(events(&mut task).contains(&Event::Heartbeat));
        now = task.poll_timeout().unwrap();
        task.handle_timeout(now);
    }
    fetch(pump(&mut task));
    task.handle_split_error(now, refused());
    let e = read(&mut task, 1).unwrap().unwrap_err();
    assert_eq!(e.code, Code::FailedPrecondition);
    assert_eq!(e.detail, "task 7 failed: get-split failed: worker w1 is lost");
}

/// End of sequence is answered only once the dispatcher acknowledged the completion report.
#[test]
fn end_of_sequence_waits_for_the_completion_report() {
    let mut task = Task::new(def(range(3), "DYNAMIC", 4, None), 8, Limits::default());
    assert!(read(&mut task, 1).is_none());
    fetch(pump(&mut task));
    task.handle_splits(Millis(0), chunks(&[(0, 3)], 0));
    pump(&mut task);
    assert!(elements(&mut task, 2) == [0, 1]);
    task.handle_splits(Millis(0), end_of_splits()); // not asked: ignored
    assert_eq!(pump(&mut task), None, "an element is unread");
    assert_eq!(elements(&mut task, 2), [2]);
    fetch(pump(&mut task));
    events(&mut task);
    task.handle_splits(Millis(1), end_of_splits());
    assert_eq!(pump(&mut task), None);
    assert!(task.is_finished());
    assert!(events(&mut task).contains(&Event::CompletionDue));
    assert!(task.ready_to_report());
    assert_eq!(task.gone_kind(), Gone::Completed);
    assert!(read(&mut task, 1).is_none(), "not before the dispatcher knows");
    assert!(events(&mut task).contains(&Event::CompletionDue));
    task.handle_completion_acked();
    assert!(events(&mut task).contains(&Event::Readable));
    assert!(!task.ready_to_report());
    assert_eq!(read(&mut task, 1), Some(Ok(ReadReply::end_of_sequence())));
    assert_eq!(task.view().state, RunState::Finished);
}

#[test]
fn a_stopped_task_answers_as_it_is_gone() {
    let mut task = Task::new(def(range(30), "OFF", 1, None), 4, Limits::default());
    assert!(read(&mut task, 1).is_none());
    pump(&mut task);
    task.stop();
    assert_eq!(task.poll_action(), None);
    assert!(task.is_finished());
    let e = read(&mut task, 1).unwrap().unwrap_err();
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(e.detail.starts_with("task 7 was deleted by the dispatcher before it completed"));
}

#[test]
fn files_are_asked_for_and_their_failure_fails_the_task() {
    let files = json!({"source": {"files": {"paths": ["a.txt", "b.txt"], "format": "lines"}}});
    let mut task = Task::new(def(files.clone(), "OFF", 1, None), 8, Limits::default());
    assert!(read(&mut task, 1).is_none());
    assert_eq!(pump(&mut task), Some(Action::ReadFile { path: "a.txt".into() }));
    assert_eq!(pump(&mut task), None, "asked once");
    task.handle_file(Millis(0), "b.txt", Ok(b"nope\n")); // not asked for: ignored
    task.handle_file(Millis(0), "a.txt", Ok(b"x\ny\n"));
    assert_eq!(pump(&mut task), Some(Action::ReadFile { path: "b.txt".into() }));
    let denied = TaskError::new(Code::NotFound, "b.txt is not beneath a data root");
    task.handle_file(Millis(0), "b.txt", Err(denied));
    assert_eq!(elements(&mut task, 10), ["x", "y"]);
    let e = read(&mut task, 1).unwrap().unwrap_err();
    assert_eq!(e.code, Code::FailedPrecondition);
    assert_eq!(e.detail, "task 7 failed: b.txt is not beneath a data root");
}

#[test]
fn rows_are_asked_for_chunk_by_chunk_and_their_failure_fails_the_task() {
    use crate::dataset::{Chunk, Element, RowsRequest};
    let files =
        json!({"source": {"files": {"paths": ["a.parquet", "b.parquet"], "format": "parquet"}}});
    let mut task = Task::new(def(files, "OFF", 1, None), 8, Limits::default());
    assert!(read(&mut task, 1).is_none());
    let want =
        |path: &str, start| RowsRequest { path: path.into(), start, stop: None, file_rows: None };
    assert_eq!(pump(&mut task), Some(Action::ReadRows(want("a.parquet", 0))));
    assert_eq!(pump(&mut task), None, "asked once");
    let chunk = |rows| Chunk::new(rows, rows * 10, std::sync::Arc::new(()));
    task.handle_rows(Millis(0), &want("a.parquet", 5), Ok((chunk(1), true))); // not asked for
    task.handle_rows(Millis(0), &want("a.parquet", 0), Ok((chunk(2), false)));
    assert_eq!(pump(&mut task), Some(Action::ReadRows(want("a.parquet", 2))));
    task.handle_rows(Millis(0), &want("a.parquet", 2), Ok((chunk(1), true)));
    assert_eq!(pump(&mut task), Some(Action::ReadRows(want("b.parquet", 0))));
    let reply = read(&mut task, 10).unwrap().unwrap();
    let indices: Vec<u64> = reply
        .elements
        .iter()
        .map(|e| match e {
            Element::Row(r) => r.index,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(indices, [0, 1, 0]);
    let corrupt = TaskError::new(Code::InvalidArgument, "file \"b.parquet\" is not a Parquet file");
    task.handle_rows(Millis(0), &want("b.parquet", 0), Err(corrupt));
    let e = read(&mut task, 1).unwrap().unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert_eq!(e.detail, "task 7 failed: file \"b.parquet\" is not a Parquet file");
}

#[test]
fn coordinated_rounds_hand_each_consumer_its_element() {
    let mut task = Task::new(def(range(100), "OFF", 1, Some(2)), 4, Limits::default());
    let round = |task: &mut Task, consumer, round| {
        task.handle_read(Millis(0), Read::Round { consumer, round })
    };
    assert!(round(&mut task, 0, 3).is_none());
    pump(&mut task);
    assert!(round(&mut task, 1, 4).is_none(), "a later round waits");
    let a = round(&mut task, 0, 3).unwrap().unwrap().elements;
    assert_eq!(round(&mut task, 0, 3).unwrap().unwrap().elements, a, "asked again: the same");
    let b = round(&mut task, 1, 3).unwrap().unwrap().elements;
    assert_eq!((a, b), (vec![json!(0).into()], vec![json!(1).into()]));
    let e = round(&mut task, 0, 3).unwrap().unwrap_err();
    assert!(e.detail.contains("the current round has already reached 4"), "{e}");
    assert_eq!(round(&mut task, 1, 4).unwrap().unwrap().elements, [json!(3)]);
}

// --- with the core dispatcher behind the get-splits -------------------------------------------

struct Cluster {
    d: Driver<MemorySink>,
    iteration: IterationId,
}

impl Cluster {
    /// A DYNAMIC iteration of `dataset`, split by `split_size`.
    fn new(dataset: Value, split_size: u64) -> Cluster {
        let dispatcher =
            Dispatcher::new(DispatcherConfig::default(), "inc-1".into(), Millis(0)).unwrap();
        let mut d = Driver::new(dispatcher, MemorySink);
        let dataset = DatasetDef::from_json(&dataset).unwrap();
        let reg = RegisterDataset { dataset, dataset_id: None, metadata: None };
        let dataset_id = d.call(Millis(0), reg).unwrap().dataset_id;
        let job = CreateJob {
            dataset_id,
            processing_mode: ProcessingMode::Policy { sharding_policy: ShardingPolicy::Dynamic },
            job_name: None,
            num_consumers: None,
            target_workers: TargetWorkers::Auto,
            cross_trainer_cache: false,
            split_size: Some(split_size),
        };
        let job = d.call(Millis(0), job).unwrap().job_id;
        let iteration = d.call(Millis(0), (job, CreateIteration::default())).unwrap().iteration_id;
        Cluster { d, iteration }
    }

    /// The worker process `uid` at `w1` registers (again) and gets its task.
    fn worker(&mut self, now: u64, uid: &str) -> Task {
        let hb = WorkerHeartbeat {
            worker_address: "w1".into(),
            worker_uid: Some(uid.into()),
            ..Default::default()
        };
        let mut reply = self.d.call(Millis(now), hb).unwrap();
        assert_eq!(reply.new_tasks.len(), 1, "{reply:?}");
        Task::new(reply.new_tasks.remove(0), 8, Limits::default())
    }

    /// Runs the worker's actions against the dispatcher until it waits for a read.
    fn serve(&mut self, task: &mut Task, now: u64, uid: &str) {
        while let Some(action) = pump(task) {
            let Action::FetchSplits(f) = action else { panic!("{action:?}") };
            let req = f.request("w1", Some(uid));
            match self.d.call(Millis(now), (self.iteration, req)) {
                Ok(reply) => task.handle_splits(Millis(now), reply),
                Err(e) => task.handle_split_error(
                    Millis(now),
                    SplitFailure { code: e.code(), retryable: false, message: e.to_string() },
                ),
            }
        }
    }

    /// Reads everything the task hands out until its end.
    fn drain(&mut self, task: &mut Task, uid: &str, out: &mut Vec<ReadReply>) {
        for step in 0..10_000 {
            self.serve(task, 10 + step, uid);
            match read(task, 5) {
                Some(Ok(r)) => out.push(r),
                Some(Err(e)) => panic!("{e}"),
                None if task.ready_to_report() => return,
                None => panic!("stuck: {:?}", task.view()),
            }
        }
        panic!("no end");
    }
}

fn values(replies: &[ReadReply]) -> Vec<u64> {
    replies
        .iter()
        .flat_map(|r| r.elements.iter().map(|e| e.as_value().and_then(Value::as_u64).unwrap()))
        .collect()
}

/// A worker process that dies with splits it did not acknowledge: the next process at the
/// same address gets them again, so what clients had read of them comes again (duplicates)
/// and nothing is lost.
#[test]
fn a_restarted_worker_reads_unacknowledged_splits_again() {
    let mut c = Cluster::new(range(40), 4);
    let mut first = c.worker(1, "process-a");
    assert!(read(&mut first, 1).is_none());
    c.serve(&mut first, 2, "process-a");
    assert_eq!(first.held_splits().len(), 2, "a buffer of 8 holds two splits of 4");
    let mut before = elements(&mut first, 5);
    c.serve(&mut first, 3, "process-a");
    before.extend(elements(&mut first, 3)); // every element of the first batch
    c.serve(&mut first, 4, "process-a"); // acknowledges it, takes the next
    before.extend(elements(&mut first, 2)); // two of the second batch, then the process dies
    let before: Vec<u64> = before.iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(before, (0..10).collect::<Vec<_>>());
    drop(first);
    let mut second = c.worker(5, "process-b");
    assert!(read(&mut second, 1).is_none());
    let mut replies = Vec::new();
    c.drain(&mut second, "process-b", &mut replies);
    let after = values(&replies);
    // The unacknowledged batch (8..16) comes again whole; the acknowledged one (0..8) never.
    assert_eq!(after, (8..40).collect::<Vec<_>>());
    let mut all: Vec<u64> = before.iter().chain(&after).copied().collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all, (0..40).collect::<Vec<_>>(), "nothing lost");
}

/// Every element handed out says where it lies in the source: runs of its split's positions,
/// offsets and the split's last element.
#[test]
fn handed_out_elements_carry_their_positions() {
    let mut c = Cluster::new(json!({"source": {"range": {"start": 100, "stop": 110}}}), 4);
    let mut task = c.worker(1, "p");
    assert!(read(&mut task, 1).is_none());
    let mut replies = Vec::new();
    c.drain(&mut task, "p", &mut replies);
    assert_eq!(values(&replies), (100..110).collect::<Vec<_>>());
    for r in &replies {
        let runs = r.origin.as_ref().expect("origins");
        let covered: u64 = runs.iter().map(|run| run.count).sum();
        assert_eq!(covered, r.elements.len() as u64, "{r:?}");
    }
    // Flattened: each element's split and offset.
    let mut flat = Vec::new();
    for run in replies.iter().flat_map(|r| r.origin.clone().unwrap()) {
        for k in 0..run.count {
            let last = k + 1 == run.count && run.end;
            flat.push((run.split.start, run.split.stop, run.offset + k, last));
        }
    }
    let expected: Vec<_> = (0..10u64)
        .map(|i| {
            let (start, stop) = (i / 4 * 4, (i / 4 * 4 + 4).min(10));
            (start, stop, i - start, i + 1 == stop)
        })
        .collect();
    assert_eq!(flat, expected);
}

/// A reader may look at the buffered elements and their origins, then take exactly as many
/// as it chose: what it saw is what it gets.
#[test]
fn buffered_elements_and_their_origins_are_what_a_read_takes() {
    let mut c = Cluster::new(json!({"source": {"range": {"start": 100, "stop": 110}}}), 3);
    let mut task = c.worker(1, "p");
    assert!(read(&mut task, 1).is_none());
    c.serve(&mut task, 2, "p");
    let seen: Vec<(Value, u64)> =
        task.buffered().map(|(e, w)| (e.as_value().unwrap().clone(), w)).collect();
    assert_eq!(seen.len(), 8, "a buffer of 8");
    assert!(seen.iter().all(|(_, w)| *w > 0));
    let origin = task.buffered_origin(4);
    assert_eq!(task.buffered().count(), 8, "looking took nothing");
    let r = read(&mut task, 4).unwrap().unwrap();
    let taken: Vec<Value> = seen.iter().take(4).map(|(v, _)| v.clone()).collect();
    assert_eq!(r.elements.iter().map(|e| e.as_value().unwrap().clone()).collect::<Vec<_>>(), taken);
    assert_eq!(r.origin, origin);
    assert_eq!(task.buffered().next().unwrap().0.as_value(), Some(&json!(104)));
}

/// Inputs nobody asked for change nothing.
#[test]
fn unasked_answers_are_ignored() {
    let mut task = Task::new(def(range(10), "DYNAMIC", 4, None), 8, Limits::default());
    task.handle_splits(Millis(0), chunks(&[(0, 4)], 0));
    task.handle_split_error(Millis(0), unavailable());
    task.handle_file(Millis(0), "a", Ok(b""));
    assert_eq!(task.view().splits_held, 0);
    assert_eq!(task.poll_timeout(), None);
    assert!(read(&mut task, 1).is_none());
    assert!(fetch(pump(&mut task)).acknowledge.is_empty());
}
