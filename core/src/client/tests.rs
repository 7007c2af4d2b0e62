//! The reader on a virtual clock: every input is a value, every deadline is injected.

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

use super::*;
use crate::dataset::DatasetDef;
use crate::dispatch::wire::{ClientHeartbeatReply, TaskInfo};
use crate::dispatch::{IterationId, ShardingPolicy, TargetWorkers};
use crate::position::{OriginRun, PartialSplit, ReadPosition, SourceRange};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Fail {
    Unavailable,
    NotFound,
    Invalid,
}

impl CallFailure for Fail {
    fn is_retryable(&self) -> bool {
        *self == Fail::Unavailable
    }
    fn is_not_found(&self) -> bool {
        *self == Fail::NotFound
    }
}

fn config() -> ReaderConfig {
    ReaderConfig {
        client_id: ClientId(3000),
        incarnation: "inc".into(),
        consumer_index: None,
        target_workers: TargetWorkers::Auto,
        local_workers: vec![],
        max_outstanding_requests: 16,
        elements_per_request: 100,
        heartbeat_interval: Millis(1_000),
        unknown_task_timeout: Millis(60_000),
        unavailable_timeout: Millis(3_600_000),
    }
}

fn task(id: u64) -> TaskInfo {
    TaskInfo {
        task_id: TaskId(id),
        worker_address: format!("w{id}:6000"),
        worker_tags: vec![],
        starting_round: 0,
        finished: false,
        worker_lost: false,
        iteration_id: IterationId(2000),
        transfer_servers: vec![],
        worker_uid: None,
    }
}

fn reply(tasks: &[TaskInfo], finished: bool) -> ClientHeartbeatReply {
    ClientHeartbeatReply {
        tasks: tasks.to_vec(),
        tasks_version: 1,
        tasks_unchanged: false,
        iteration_finished: finished,
        block_round: None,
        incarnation: "inc".into(),
    }
}

fn elements(values: &[i64], end: bool) -> Elements {
    Elements {
        elements: values.iter().map(|&v| Value::from(v)).collect(),
        end_of_sequence: end,
        origin: None,
    }
}

fn values(batch: &Batch) -> Vec<i64> {
    batch.elements.iter().filter_map(Value::as_i64).collect()
}

/// A dispatcher and workers that answer at once, and a log of what the reader asked when.
struct World {
    reader: Reader<Fail>,
    now: Millis,
    tasks: Vec<TaskInfo>,
    finished: bool,
    block_round: Option<u64>,
    heartbeat_fails: Option<Fail>,
    /// Per task, its worker's next answers; past them, it holds the read unanswered.
    answers: HashMap<TaskId, VecDeque<Result<Elements, Fail>>>,
    /// When each call was made.
    log: Vec<(Millis, Transmit)>,
    read: Vec<i64>,
    outcome: Option<Event<Fail>>,
}

impl World {
    fn new(config: ReaderConfig) -> World {
        World {
            reader: Reader::new(config, Millis(0)),
            now: Millis(0),
            tasks: vec![],
            finished: false,
            block_round: None,
            heartbeat_fails: None,
            answers: HashMap::new(),
            log: vec![],
            read: vec![],
            outcome: None,
        }
    }

    fn answer(&mut self, id: u64, a: Result<Elements, Fail>) {
        self.answers.entry(TaskId(id)).or_default().push_back(a);
    }

    /// Runs the loop until the reader is done or the next deadline is past `until`.
    fn run(&mut self, until: Millis) {
        loop {
            while let Some(t) = self.reader.poll_transmit() {
                self.log.push((self.now, t.clone()));
                let now = self.now;
                match t {
                    Transmit::Heartbeat { .. } => match &self.heartbeat_fails {
                        Some(e) => self.reader.handle_error(now, Call::Heartbeat, e.clone()),
                        None => {
                            let mut r = reply(&self.tasks, self.finished);
                            r.block_round = self.block_round;
                            self.reader.handle_heartbeat(now, r);
                        }
                    },
                    Transmit::GetElements { task, .. } => {
                        match self.answers.entry(task).or_default().pop_front() {
                            Some(Ok(r)) => self.reader.handle_elements(now, task, r),
                            Some(Err(e)) => self.reader.handle_error(now, Call::Elements(task), e),
                            None => {} // the worker holds the read: nothing more to give
                        }
                    }
                    Transmit::Release { .. } => self.reader.handle_released(now),
                }
            }
            while let Some(e) = self.reader.poll_event() {
                match e {
                    Event::Batch(b) => self.read.extend(values(&b)),
                    e => self.outcome = Some(e),
                }
            }
            if self.reader.is_done() {
                return;
            }
            match self.reader.poll_timeout() {
                Some(at) if at <= until => {
                    self.now = self.now.max(at);
                    self.reader.handle_timeout(self.now);
                }
                _ => return,
            }
        }
    }

    fn reads_of(&self, id: u64) -> Vec<Millis> {
        self.log
            .iter()
            .filter(|(_, t)| matches!(t, Transmit::GetElements { task, .. } if *task == TaskId(id)))
            .map(|(at, _)| *at)
            .collect()
    }

    fn heartbeats(&self) -> Vec<(Millis, ClientHeartbeat)> {
        self.log
            .iter()
            .filter_map(|(at, t)| match t {
                Transmit::Heartbeat { request, .. } => Some((*at, *request)),
                _ => None,
            })
            .collect()
    }
}

fn drain(reader: &mut Reader<Fail>) -> Vec<Transmit> {
    std::iter::from_fn(|| reader.poll_transmit()).collect()
}

fn read_of(t: &Transmit) -> TaskId {
    match t {
        Transmit::GetElements { task, .. } => *task,
        other => panic!("not a read: {other:?}"),
    }
}

#[test]
fn reads_round_robin_at_most_max_outstanding() {
    let mut r =
        Reader::<Fail>::new(ReaderConfig { max_outstanding_requests: 2, ..config() }, Millis(0));
    assert!(matches!(drain(&mut r)[..], [Transmit::Heartbeat { .. }]));
    assert_eq!(r.poll_timeout(), None, "nothing timed while the heartbeat is out");
    r.handle_heartbeat(Millis(1), reply(&[task(1), task(2), task(3)], false));
    let first: Vec<_> = drain(&mut r).iter().map(read_of).collect();
    assert_eq!(first, [TaskId(1), TaskId(2)], "two at most");
    r.handle_elements(Millis(2), TaskId(1), elements(&[10], false));
    assert!(drain(&mut r).is_empty(), "nothing more read until the caller takes the batch");
    assert_eq!(r.poll_timeout(), Some(Millis(1_001)), "only the next heartbeat");
    let Some(Event::Batch(b)) = r.poll_event() else { panic!("a batch") };
    assert_eq!(values(&b), [10]);
    assert_eq!(r.poll_timeout(), Some(Millis(2)), "a read is due now");
    // The round robin goes on after the last task read, and wraps around.
    assert_eq!(drain(&mut r).iter().map(read_of).collect::<Vec<_>>(), [TaskId(3)]);
    r.handle_elements(Millis(3), TaskId(2), elements(&[], false));
    r.handle_elements(Millis(3), TaskId(3), elements(&[], false));
    assert_eq!(drain(&mut r).iter().map(read_of).collect::<Vec<_>>(), [TaskId(1), TaskId(2)]);
    // Stray answers (a task not in flight, a task never listed) change nothing.
    r.handle_elements(Millis(4), TaskId(3), elements(&[99], false));
    r.handle_elements(Millis(4), TaskId(77), elements(&[99], false));
    r.handle_error(Millis(4), Call::Elements(TaskId(3)), Fail::Invalid);
    assert_eq!(r.poll_event(), None);
    assert!(r.is_reading());
    // Reads ask for `elements_per_request`.
    r.handle_elements(Millis(5), TaskId(1), elements(&[], false));
    let t = drain(&mut r);
    assert!(
        matches!(&t[..], [Transmit::GetElements { task: TaskId(3), max: Some(100), round: None, worker_address }]
            if worker_address == "w3:6000"),
        "{t:?}"
    );
}

#[test]
fn retries_until_the_unavailable_deadline_then_fails() {
    let mut w = World::new(ReaderConfig { unavailable_timeout: Millis(1_000), ..config() });
    w.tasks = vec![task(1)];
    for _ in 0..100 {
        w.answer(1, Err(Fail::Unavailable));
    }
    w.run(Millis(999));
    assert!(w.reader.is_reading(), "still retrying before the deadline");
    w.run(Millis(10_000));
    assert!(w.reader.is_done());
    let reads = w.reads_of(1);
    let gaps: Vec<u64> = reads.windows(2).map(|p| p[1].0 - p[0].0).collect();
    assert_eq!(gaps, [5, 10, 20, 40, 80, 160, 320, 500], "capped exponential backoff");
    let Some(Event::Failed(ReadError::Unavailable { call, context, error, retried_for })) =
        w.outcome.clone()
    else {
        panic!("{:?}", w.outcome)
    };
    assert_eq!((call, error), (Call::Elements(TaskId(1)), Fail::Unavailable));
    assert_eq!(context, "GET /v1/tasks/1/elements at w1:6000");
    assert!(retried_for >= Millis(1_000) && retried_for < Millis(1_500), "{retried_for:?}");
    assert!(matches!(w.log.last(), Some((_, Transmit::Release { client_id: ClientId(3000) }))));
    // A success in between starts the deadline over.
    let mut w = World::new(ReaderConfig { unavailable_timeout: Millis(1_000), ..config() });
    w.tasks = vec![task(1)];
    for i in 0..40 {
        w.answer(1, if i == 8 { Ok(elements(&[1], false)) } else { Err(Fail::Unavailable) });
    }
    w.run(Millis(1_500));
    assert!(w.reader.is_reading(), "the deadline counts from the last success");
    assert_eq!(w.read, [1]);
    // Errors that are not retried end the read at once.
    let mut w = World::new(config());
    w.tasks = vec![task(1)];
    w.answer(1, Err(Fail::Invalid));
    w.run(Millis(0));
    assert!(matches!(
        w.outcome,
        Some(Event::Failed(ReadError::Refused { error: Fail::Invalid, .. }))
    ));
}

#[test]
fn heartbeats_retry_until_the_unavailable_deadline() {
    let mut w = World::new(ReaderConfig { unavailable_timeout: Millis(2_000), ..config() });
    w.heartbeat_fails = Some(Fail::Unavailable);
    w.run(Millis(1_999));
    assert!(w.reader.is_reading());
    let at: Vec<u64> = w.heartbeats().iter().map(|(at, _)| at.0).collect();
    assert_eq!(at[..6], [0, 10, 30, 70, 150, 310]);
    w.run(Millis(10_000));
    let Some(Event::Failed(ReadError::Unavailable { call, context, .. })) = &w.outcome else {
        panic!("{:?}", w.outcome)
    };
    assert_eq!((*call, context.as_str()), (Call::Heartbeat, "POST /v1/clients/3000/heartbeat"));
    // A refusal is not retried.
    let mut w = World::new(config());
    w.heartbeat_fails = Some(Fail::Invalid);
    w.run(Millis(10_000));
    assert_eq!(w.heartbeats().len(), 1);
    assert!(matches!(
        &w.outcome,
        Some(Event::Failed(ReadError::Refused { call: Call::Heartbeat, .. }))
    ));
}

#[test]
fn unknown_task_is_retried_until_its_timeout() {
    let mut w = World::new(ReaderConfig { unknown_task_timeout: Millis(300), ..config() });
    w.tasks = vec![task(1)];
    for _ in 0..100 {
        w.answer(1, Err(Fail::NotFound));
    }
    w.run(Millis(299));
    assert!(w.reader.is_reading());
    w.run(Millis(10_000));
    let Some(Event::Failed(ReadError::Refused { call, error, .. })) = &w.outcome else {
        panic!("{:?}", w.outcome)
    };
    assert_eq!((*call, error), (Call::Elements(TaskId(1)), &Fail::NotFound));
    let last = *w.reads_of(1).last().unwrap();
    assert!(last >= Millis(300) && last < Millis(800), "{last:?}");
    // Once it answers, it may be unknown again for as long.
    let mut w = World::new(ReaderConfig { unknown_task_timeout: Millis(300), ..config() });
    w.tasks = vec![task(1)];
    for i in 0..12 {
        w.answer(1, if i == 5 { Ok(elements(&[], false)) } else { Err(Fail::NotFound) });
    }
    w.run(Millis(500));
    assert!(w.reader.is_reading(), "{:?}", w.outcome);
}

#[test]
fn tasks_of_lost_workers_are_skipped() {
    let mut w = World::new(config());
    let mut lost = task(2);
    lost.worker_lost = true;
    w.tasks = vec![task(1), lost.clone()];
    w.finished = true;
    w.answer(1, Ok(elements(&[1, 2], true)));
    w.run(Millis(10_000));
    assert_eq!(w.read, [1, 2]);
    assert_eq!(w.outcome, Some(Event::End));
    assert!(w.reads_of(2).is_empty(), "a lost worker is not read");
    // A task whose worker is declared lost while its reads fail is given up.
    let mut w = World::new(config());
    w.tasks = vec![task(1), task(2)];
    w.answer(1, Ok(elements(&[1], true)));
    for _ in 0..1_000 {
        w.answer(2, Err(Fail::Unavailable));
    }
    w.run(Millis(900));
    assert!(w.reader.is_reading());
    w.tasks[1].worker_lost = true;
    w.finished = true;
    w.run(Millis(10_000));
    assert_eq!(w.outcome, Some(Event::End));
    assert!(w.reads_of(2).iter().all(|&at| at < Millis(1_000)), "no read after the heartbeat");
}

#[test]
fn the_iteration_ends_once_finished_and_every_task_at_its_end() {
    let mut w = World::new(config());
    w.tasks = vec![task(1), task(2)];
    w.answer(1, Ok(elements(&[1], false)));
    w.answer(1, Ok(elements(&[], true)));
    w.answer(2, Ok(elements(&[2], true)));
    w.run(Millis(100));
    assert_eq!(w.read, [1, 2]);
    assert!(w.reader.is_reading(), "not finished: the dispatcher has not said so");
    // At the end of its tasks it asks the dispatcher whether the iteration finished, at once
    // and then every NUDGE_GAP, instead of every heartbeat interval.
    let at: Vec<Millis> = w.heartbeats().iter().map(|(at, _)| *at).collect();
    assert_eq!(at[..3], [Millis(0), Millis(0), Millis(20)]);
    assert!(at.windows(2).skip(1).all(|p| p[1].since(p[0]) >= NUDGE_GAP));
    w.finished = true;
    w.run(Millis(200));
    assert!(w.reader.is_done());
    assert_eq!(w.outcome, Some(Event::End));
    // The end comes out only after the lease is released.
    let mut r = Reader::<Fail>::new(config(), Millis(0));
    drain(&mut r);
    r.handle_heartbeat(Millis(0), reply(&[], true));
    assert!(!r.is_reading());
    assert_eq!(drain(&mut r), [Transmit::Release { client_id: ClientId(3000) }]);
    assert_eq!(r.poll_event(), None);
    r.handle_error(Millis(1), Call::Release, Fail::Unavailable);
    assert_eq!(r.poll_timeout(), Some(RELEASE_RETRY.plus(Millis(1))));
    assert!(drain(&mut r).is_empty());
    r.handle_timeout(Millis(51));
    assert_eq!(drain(&mut r), [Transmit::Release { client_id: ClientId(3000) }]);
    r.handle_error(Millis(52), Call::Release, Fail::Unavailable);
    assert!(r.is_done(), "two attempts at most");
    assert_eq!(r.poll_event(), Some(Event::End));
    assert_eq!(r.poll_event(), None);
}

#[test]
fn skipped_tasks_end_the_read_without_iteration_finished() {
    let mut w = World::new(config());
    let mut colocated = task(2);
    colocated.worker_tags = vec!["colocated".into()];
    w.tasks = vec![task(1), colocated];
    w.answer(1, Ok(elements(&[5], true)));
    w.run(Millis(10_000));
    assert_eq!(w.outcome, Some(Event::End));
    assert!(w.reads_of(2).is_empty());
    // LOCAL reads only the listed workers.
    let mut w = World::new(ReaderConfig {
        target_workers: TargetWorkers::Local,
        local_workers: vec!["w2:6000".into()],
        ..config()
    });
    w.tasks = vec![task(1), task(2)];
    w.answer(2, Ok(elements(&[7], true)));
    w.run(Millis(10_000));
    assert_eq!((w.read.as_slice(), w.reads_of(1).len()), ([7].as_slice(), 0));
}

#[test]
fn a_restarted_dispatcher_ends_the_read() {
    let mut r = Reader::<Fail>::new(config(), Millis(0));
    drain(&mut r);
    let mut other = reply(&[task(1)], false);
    other.incarnation = "inc-2".into();
    r.handle_heartbeat(Millis(1), other);
    assert!(matches!(drain(&mut r)[..], [Transmit::Release { .. }]));
    r.handle_released(Millis(2));
    assert_eq!(
        r.poll_event(),
        Some(Event::Failed(ReadError::DispatcherRestarted {
            was: "inc".into(),
            now: "inc-2".into()
        }))
    );
}

#[test]
fn unchanged_task_lists_are_kept() {
    let mut r = Reader::<Fail>::new(config(), Millis(0));
    drain(&mut r);
    let mut first = reply(&[task(1)], false);
    first.tasks_version = 7;
    r.handle_heartbeat(Millis(0), first);
    assert_eq!(drain(&mut r).iter().map(read_of).collect::<Vec<_>>(), [TaskId(1)]);
    r.handle_timeout(Millis(1_000));
    let [Transmit::Heartbeat { request, .. }] = &drain(&mut r)[..] else { panic!() };
    assert_eq!(request.known_tasks_version, Some(7));
    let mut same = reply(&[], false);
    (same.tasks_version, same.tasks_unchanged) = (7, true);
    r.handle_heartbeat(Millis(1_000), same);
    r.handle_elements(Millis(1_001), TaskId(1), elements(&[], false));
    assert_eq!(drain(&mut r).iter().map(read_of).collect::<Vec<_>>(), [TaskId(1)]);
}

#[test]
fn the_caller_going_away_releases_without_an_outcome() {
    let mut r = Reader::<Fail>::new(config(), Millis(0));
    drain(&mut r);
    r.handle_heartbeat(Millis(0), reply(&[task(1)], false));
    drain(&mut r);
    r.close(Millis(5));
    assert!(!r.is_reading());
    r.handle_elements(Millis(6), TaskId(1), elements(&[1], false));
    assert!(matches!(drain(&mut r)[..], [Transmit::Release { .. }]));
    r.handle_released(Millis(7));
    assert!(r.is_done());
    assert_eq!(r.poll_event(), None);
    assert_eq!(r.poll_timeout(), None);
}

fn coordinated() -> ReaderConfig {
    ReaderConfig { consumer_index: Some(1), ..config() }
}

fn rounds(w: &World) -> Vec<(u64, u64)> {
    w.log
        .iter()
        .filter_map(|(_, t)| match t {
            Transmit::GetElements { task, round: Some((consumer, round)), max: None, .. } => {
                assert_eq!(*consumer, 1);
                Some((*round, task.0))
            }
            Transmit::GetElements { .. } => panic!("not a coordinated read: {t:?}"),
            _ => None,
        })
        .collect()
}

#[test]
fn coordinated_reads_go_round_by_round_in_task_order() {
    let mut w = World::new(coordinated());
    let mut late = task(2);
    late.starting_round = 2;
    w.tasks = vec![task(1), late];
    for i in 0..4 {
        w.answer(1, Ok(elements(&[10 + i], false)));
    }
    w.answer(2, Ok(elements(&[], false))); // nothing yet: asked again
    w.answer(2, Ok(elements(&[20], false)));
    w.answer(2, Err(Fail::Unavailable)); // retried after its backoff
    w.answer(2, Ok(elements(&[21], false)));
    w.run(Millis(100));
    assert_eq!(w.read[..6], [10, 11, 12, 20, 13, 21]);
    assert_eq!(rounds(&w)[..7], [(0, 1), (1, 1), (2, 1), (2, 2), (2, 2), (3, 1), (3, 2)]);
    assert_eq!(w.reads_of(2)[..3], [Millis(0), Millis(0), Millis(0)]);
    assert_eq!(w.reads_of(2)[3], Millis(5));
    // A task at its end gives nothing in the round; the round goes on.
    let mut w = World::new(coordinated());
    w.tasks = vec![task(1), task(2)];
    w.answer(1, Ok(elements(&[], true)));
    w.answer(2, Ok(elements(&[5], false)));
    w.answer(1, Err(Fail::Invalid));
    w.run(Millis(0));
    assert_eq!(w.read, [5]);
    assert_eq!(rounds(&w), [(0, 1), (0, 2), (1, 1)]);
    assert!(matches!(&w.outcome, Some(Event::Failed(ReadError::Refused { .. }))));
}

#[test]
fn coordinated_reads_wait_at_the_block_and_say_so() {
    let mut w = World::new(coordinated());
    w.tasks = vec![task(1)];
    w.block_round = Some(2);
    for i in 0..10 {
        w.answer(1, Ok(elements(&[i], false)));
    }
    w.run(Millis(500));
    assert_eq!(w.read, [0, 1], "rounds 0 and 1, then the block at 2");
    assert_eq!(w.reader.current_round(), 1);
    // It told the dispatcher at once (once), and waits for the next heartbeat.
    let hb = w.heartbeats();
    assert_eq!(hb.len(), 2, "{hb:?}");
    assert_eq!(hb[1].0, Millis(0));
    assert_eq!((hb[1].1.current_round, hb[1].1.blocked_round), (Some(1), Some(2)));
    w.run(Millis(999));
    assert_eq!(w.heartbeats().len(), 2);
    // The block lifts: the rounds go on.
    w.block_round = None;
    w.run(Millis(1_000));
    assert_eq!(w.read[..3], [0, 1, 2]);
    // A block at a round already started is not taken (the dispatcher will move it).
    let mut r = Reader::<Fail>::new(coordinated(), Millis(0));
    drain(&mut r);
    let mut b = reply(&[task(1)], false);
    b.block_round = Some(0);
    r.handle_heartbeat(Millis(0), b);
    assert_eq!(drain(&mut r).iter().map(read_of).collect::<Vec<_>>(), [TaskId(1)]);
}

#[test]
fn coordinated_reads_skip_lost_workers() {
    let mut w = World::new(coordinated());
    w.tasks = vec![task(1), task(2)];
    for _ in 0..100 {
        w.answer(1, Err(Fail::Unavailable));
    }
    w.answer(2, Ok(elements(&[2], false)));
    w.run(Millis(900));
    assert!(w.read.is_empty());
    w.tasks[0].worker_lost = true;
    w.run(Millis(1_200)); // the heartbeat at 1,000 says so; the read failing at 1,135 sees it
    assert_eq!(w.read[..1], [2], "task 1 given up once its worker is lost");
    assert!(rounds(&w).iter().filter(|(_, t)| *t == 1).all(|(r, _)| *r == 0));
}

#[test]
fn positions_count_only_elements_handed_out() {
    let dataset: DatasetDef = r#"{"source": {"range": {"stop": 100}}}"#.parse().unwrap();
    let new = |dataset: &DatasetDef, policy, resume: Option<&ReadPosition>| {
        Positions::new(dataset, "ds".into(), policy, false, 0, resume)
    };
    let r = |start, stop| SourceRange { start, stop };
    let run =
        |start, stop, offset, count, end| OriginRun { split: r(start, stop), offset, count, end };
    let mut p = new(&dataset, ShardingPolicy::Dynamic, None);
    assert_eq!(
        p.position(0).unwrap(),
        ReadPosition { dataset_id: "ds".into(), ..ReadPosition::default() }
    );
    p.arrived(5, Some(&[run(0, 2, 0, 2, true), run(10, 20, 0, 3, false)]));
    // Nothing handed out yet: the batch is buffered, not consumed.
    assert_eq!(p.position(5).unwrap().done, []);
    // Three of five handed out (two pending).
    let got = p.position(2).unwrap();
    assert_eq!(got.done, [r(0, 2)]);
    assert_eq!(got.partial, [PartialSplit::prefix(r(10, 20), 1)]);
    assert_eq!(p.position(0).unwrap().partial, [PartialSplit::prefix(r(10, 20), 3)]);
    // The next batch folds the whole previous one.
    p.arrived(1, Some(&[run(10, 20, 3, 1, false)]));
    let got = p.position(1).unwrap();
    assert_eq!(
        (got.done.as_slice(), got.partial.as_slice()),
        ([r(0, 2)].as_slice(), [PartialSplit::prefix(r(10, 20), 3)].as_slice())
    );
    assert_eq!(p.position(0).unwrap().partial, [PartialSplit::prefix(r(10, 20), 4)]);
    // Origins that do not cover their elements count as none, once an element is handed
    // out, and for good.
    p.arrived(1, Some(&[run(2, 4, 0, 2, true)]));
    assert!(p.position(1).is_ok(), "not handed out yet");
    assert!(p.position(0).unwrap_err().contains("without origin"));
    p.arrived(1, Some(&[run(4, 6, 0, 1, false)]));
    assert!(p.position(1).unwrap_err().contains("without origin"));
    // Resuming goes on from the position; its repetition is the position's.
    let from = ReadPosition {
        dataset_id: "ds".into(),
        repetition: 3,
        done: vec![r(0, 50)],
        partial: vec![],
    };
    assert_eq!(new(&dataset, ShardingPolicy::Dynamic, Some(&from)).position(0).unwrap(), from);
    // Reads that have no exact positions say why at once.
    let shuffled: DatasetDef =
        r#"{"source": {"range": {"stop": 9}}, "transforms": [{"shuffle": {"buffer": 2, "seed": 1}}]}"#
            .parse()
            .unwrap();
    let why = new(&shuffled, ShardingPolicy::Dynamic, None).position(0).unwrap_err();
    assert!(why.contains("`shuffle` buffers elements across splits"), "{why}");
    let why = new(&dataset, ShardingPolicy::Off, None).position(0).unwrap_err();
    assert!(why.contains("distributed_epoch"), "{why}");
    let why = Positions::new(&dataset, "ds".into(), ShardingPolicy::Dynamic, true, 0, None)
        .position(0)
        .unwrap_err();
    assert!(why.contains("coordinated"), "{why}");
}

#[test]
fn backoff_doubles_up_to_its_cap() {
    let mut b = Backoff::new(Millis(5), Millis(500));
    let d: Vec<u64> = (0..9).map(|_| b.next_delay().0).collect();
    assert_eq!(d, [5, 10, 20, 40, 80, 160, 320, 500, 500]);
    b.reset();
    assert_eq!(b.next_delay(), Millis(5));
    let mut huge = Backoff::new(Millis(u64::MAX / 2 + 1), Millis(u64::MAX));
    huge.next_delay();
    assert_eq!(huge.next_delay(), Millis(u64::MAX));
}

mod rows;
