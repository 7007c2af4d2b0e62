//! The one drive loop: a [`Dispatcher`] and the journal sink its records go to.
//!
//! Every runner of the dispatcher uses [`Driver`]: the gateway (a pipelined sink that hands
//! records to a syncer thread), the simulation and the tests ([`VecSink`]), the benches and the
//! in-memory dispatcher ([`MemorySink`]). The driver has no IO of its own: the sink is a trait
//! the caller implements.
//!
//! Failure: when the sink fails, the driver stops. Nothing more is acknowledged (replies held
//! for records not known durable are dropped) and every later request is answered
//! `UNAVAILABLE`: the state in memory is ahead of the journal, and a restart replays it.

use std::collections::VecDeque;
use std::convert::Infallible;

use super::dispatcher::{Dispatcher, Event};
use super::error::DispatchError;
use super::protocol::{Call, Output, Reply, Request, Seq, Ticket};
use super::state::Update;
use super::types::Millis;

/// What a sink says about records it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// They are durable now (a synchronous sink).
    Now,
    /// They will be: the caller reports it with [`Driver::handle_persisted`] (a pipelined
    /// sink, e.g. one that hands them to a thread that batches fsyncs).
    Later,
}

/// Where journal records go. Batches arrive in order; a sink makes them durable in order.
pub trait JournalSink {
    /// Why the sink failed.
    type Error: std::fmt::Debug;
    /// Takes batch `seq`.
    fn persist(&mut self, seq: Seq, records: Vec<Update>) -> Result<Durability, Self::Error>;
}

/// A sink whose batches are durable when [`JournalSink::persist`] returns (it always answers
/// [`Durability::Now`]): [`Driver::call`] can answer at once.
pub trait SyncSink: JournalSink {}

/// No journal: records are dropped, and count as durable at once (a dispatcher whose state
/// lives only in memory).
#[derive(Debug, Clone, Copy, Default)]
pub struct MemorySink;

impl JournalSink for MemorySink {
    type Error = Infallible;
    fn persist(&mut self, _: Seq, _: Vec<Update>) -> Result<Durability, Infallible> {
        Ok(Durability::Now)
    }
}
impl SyncSink for MemorySink {}

/// Keeps every record, in order (tests replay them).
#[derive(Debug, Clone, Default)]
pub struct VecSink {
    /// The records persisted so far.
    pub records: Vec<Update>,
}

impl JournalSink for VecSink {
    type Error = Infallible;
    fn persist(&mut self, _: Seq, mut records: Vec<Update>) -> Result<Durability, Infallible> {
        self.records.append(&mut records);
        Ok(Durability::Now)
    }
}
impl SyncSink for VecSink {}

/// What [`Driver::submit`] gives back.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// The reply, released.
    Ready(Reply),
    /// The reply waits for its records: it comes out of [`Driver::handle_persisted`] under
    /// this ticket.
    Pending(Ticket),
}

/// The text of every refusal after the sink failed.
pub const JOURNAL_BROKEN: &str = "the journal could not be written; the dispatcher acknowledges \
                                  nothing more until it is restarted (restart replays the journal)";

/// A dispatcher and its journal sink, driven the one way that keeps the durability rule.
#[derive(Debug)]
pub struct Driver<S: JournalSink> {
    dispatcher: Dispatcher,
    sink: S,
    /// Replies released and not yet handed out.
    released: VecDeque<(Ticket, Reply)>,
    /// Set when the sink failed.
    failure: Option<S::Error>,
}

impl<S: JournalSink> Driver<S> {
    /// Drives `dispatcher` with `sink`. What the dispatcher emitted already (a fresh one's
    /// start record) goes to the sink with the first input's records.
    pub fn new(dispatcher: Dispatcher, sink: S) -> Self {
        Driver { dispatcher, sink, released: VecDeque::new(), failure: None }
    }

    // --- inputs -------------------------------------------------------------------------------

    /// Hands `request` to the dispatcher at `now` and its records to the sink: the reply if it
    /// is released already, else its ticket. After a sink failure every request is refused
    /// (`UNAVAILABLE`) without reaching the dispatcher.
    pub fn submit(&mut self, now: Millis, request: impl Into<Request>) -> Submitted {
        if self.failure.is_some() {
            return Submitted::Ready(Err(broken()));
        }
        let ticket = self.dispatcher.handle_request(now, request.into());
        self.drain();
        if self.failure.is_some() {
            return Submitted::Ready(Err(broken()));
        }
        match self.released.back() {
            Some((t, _)) if *t == ticket => match self.released.pop_back() {
                Some((_, reply)) => Submitted::Ready(reply),
                None => Submitted::Pending(ticket),
            },
            _ => Submitted::Pending(ticket),
        }
    }

    /// Runs the dispatcher's timers at `now` (see [`Dispatcher::handle_timeout`]).
    pub fn handle_timeout(&mut self, now: Millis) {
        if self.failure.is_none() {
            self.dispatcher.handle_timeout(now);
            self.drain();
        }
    }

    /// Hands what the dispatcher emitted so far to the sink now (e.g. a fresh dispatcher's start
    /// record, which otherwise goes with the first input's records).
    pub fn flush(&mut self) {
        if self.failure.is_none() {
            self.drain();
        }
    }

    /// A pipelined sink made every batch up to `seq` durable: the replies released by it, in
    /// ticket order.
    pub fn handle_persisted(&mut self, seq: Seq) -> Vec<(Ticket, Reply)> {
        if self.failure.is_none() {
            self.dispatcher.handle_persisted(seq);
            self.drain();
        }
        self.released.drain(..).collect()
    }

    /// A pipelined sink failed after it accepted a batch: the driver stops (see the module
    /// docs). The replies still held are never released.
    pub fn handle_sink_failure(&mut self, error: S::Error) {
        if self.failure.is_none() {
            self.failure = Some(error);
        }
        self.released.clear();
    }

    // --- outputs ------------------------------------------------------------------------------

    /// The next event (see [`Dispatcher::poll_event`]).
    pub fn poll_event(&mut self) -> Option<Event> {
        self.dispatcher.poll_event()
    }

    /// When [`Driver::handle_timeout`] should run next.
    pub fn poll_timeout(&self) -> Millis {
        self.dispatcher.poll_timeout()
    }

    // --- views --------------------------------------------------------------------------------

    /// The dispatcher (read-only).
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }
    /// The sink.
    pub fn sink(&self) -> &S {
        &self.sink
    }
    /// The sink, to change it (e.g. to fail it in a test).
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }
    /// Why the sink failed, once it did.
    pub fn failure(&self) -> Option<&S::Error> {
        self.failure.as_ref()
    }
    /// The dispatcher and the sink.
    pub fn into_parts(self) -> (Dispatcher, S) {
        (self.dispatcher, self.sink)
    }

    /// Runs the dispatcher's outputs through the sink until it has none.
    fn drain(&mut self) {
        while let Some(output) = self.dispatcher.poll_output() {
            match output {
                Output::Persist { seq, records } => match self.sink.persist(seq, records) {
                    Ok(Durability::Now) => self.dispatcher.handle_persisted(seq),
                    Ok(Durability::Later) => {}
                    Err(e) => {
                        self.handle_sink_failure(e);
                        return;
                    }
                },
                Output::Reply { ticket, reply } => self.released.push_back((ticket, reply)),
            }
        }
    }
}

impl<S: SyncSink> Driver<S> {
    /// Submits `request` and answers its typed reply (a synchronous sink releases it at once).
    pub fn call<C: Call>(&mut self, now: Millis, request: C) -> Result<C::Output, DispatchError> {
        match self.submit(now, request) {
            Submitted::Ready(reply) => C::output(reply),
            // A sink that broke the `SyncSink` promise: the reply is not known durable.
            Submitted::Pending(_) => Err(DispatchError::Unavailable(
                "the journal sink did not make the records durable at once".into(),
            )),
        }
    }
}

fn broken() -> DispatchError {
    DispatchError::Unavailable(JOURNAL_BROKEN.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::{
        ClientHeartbeat, CreateIteration, CreateJob, DispatcherConfig, GetDataset, GetJob,
        GetMetrics, GetVersion, ListWorkers, MaybeRemove, RegisterDataset, ReleaseClient, Response,
        State, WorkerHeartbeat, WorkerUpdate,
    };

    fn dispatcher() -> Dispatcher {
        Dispatcher::new(DispatcherConfig::default(), "inc".into(), Millis(0)).unwrap()
    }

    fn heartbeat(address: &str) -> Request {
        Request::WorkerHeartbeat(WorkerHeartbeat {
            worker_address: address.into(),
            ..WorkerHeartbeat::default()
        })
    }

    fn drain(d: &mut Dispatcher) -> Vec<Output> {
        std::iter::from_fn(|| d.poll_output()).collect()
    }

    /// The barrier: a reply comes out only after `handle_persisted` covered its records.
    #[test]
    fn a_reply_is_not_released_before_its_records_are_persisted() {
        let mut d = dispatcher();
        let ticket = d.handle_request(Millis(1), heartbeat("w:1"));
        let out = drain(&mut d);
        // The start record (emitted when the dispatcher was made), then the registration.
        let [Output::Persist { seq: start, .. }, Output::Persist { seq, records }] = out.as_slice()
        else {
            panic!("{out:?}")
        };
        assert_eq!((*start, *seq, records.len()), (Seq(1), Seq(2), 1));
        assert!(d.poll_output().is_none(), "the reply waits for its batch");
        d.handle_persisted(Seq(seq.0 - 1));
        assert!(d.poll_output().is_none(), "an earlier batch does not release it");
        d.handle_persisted(*seq);
        let Some(Output::Reply { ticket: t, reply }) = d.poll_output() else { panic!() };
        assert_eq!(t, ticket);
        assert!(matches!(reply, Ok(Response::WorkerHeartbeat(_))));
        assert!(d.poll_output().is_none());
    }

    /// A read changes nothing, yet waits for the records applied before it; replies come out
    /// in ticket order.
    #[test]
    fn reads_wait_for_earlier_records_and_replies_keep_their_order() {
        let mut d = dispatcher();
        let write = d.handle_request(Millis(1), heartbeat("w:1"));
        let read = d.handle_request(Millis(1), Request::Workers(ListWorkers));
        let out = drain(&mut d);
        assert_eq!(out.len(), 2, "two batches, no reply: {out:?}");
        let Output::Persist { seq, .. } = &out[1] else { panic!() };
        assert_eq!(d.emitted(), *seq, "the read emitted nothing");
        d.handle_persisted(*seq);
        let tickets: Vec<Ticket> = drain(&mut d)
            .into_iter()
            .map(|o| match o {
                Output::Reply { ticket, .. } => ticket,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(tickets, vec![write, read]);
        // Nothing outstanding: a read is answered at once.
        let again = d.handle_request(Millis(2), Request::Version(GetVersion));
        let Some(Output::Reply { ticket, reply }) = d.poll_output() else { panic!() };
        assert_eq!(ticket, again);
        let Ok(Response::Version(v)) = reply else { panic!() };
        assert_eq!(v.incarnation, "inc");
    }

    /// A sink that makes batches durable later, reporting nothing itself.
    #[derive(Default)]
    struct Later {
        batches: Vec<(Seq, usize)>,
        fail: bool,
    }

    impl JournalSink for Later {
        type Error = &'static str;
        fn persist(&mut self, seq: Seq, records: Vec<Update>) -> Result<Durability, &'static str> {
            if self.fail {
                return Err("disk gone");
            }
            self.batches.push((seq, records.len()));
            Ok(Durability::Later)
        }
    }

    #[test]
    fn a_pipelined_sink_releases_replies_when_it_reports_them_durable() {
        let mut driver = Driver::new(dispatcher(), Later::default());
        let Submitted::Pending(a) = driver.submit(Millis(1), heartbeat("a:1")) else { panic!() };
        let Submitted::Pending(b) = driver.submit(Millis(1), heartbeat("b:1")) else { panic!() };
        let Submitted::Pending(c) = driver.submit(Millis(1), ListWorkers) else { panic!() };
        let seqs: Vec<Seq> = driver.sink().batches.iter().map(|(s, _)| *s).collect();
        // The start record, then one batch per registration; the read emitted none.
        assert_eq!(seqs, vec![Seq(1), Seq(2), Seq(3)]);
        assert!(driver.handle_persisted(Seq(1)).is_empty());
        let first = driver.handle_persisted(Seq(2));
        assert_eq!(first.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![a]);
        let rest = driver.handle_persisted(Seq(3));
        assert_eq!(rest.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![b, c]);
        let Ok(Response::Workers(w)) = &rest[1].1 else { panic!() };
        assert_eq!(w.workers.len(), 2, "the read saw both registrations");
        // Nothing outstanding: ready at once.
        assert!(matches!(driver.submit(Millis(2), GetMetrics), Submitted::Ready(Ok(_))));
        // The sink fails: the reply held for the failed batch never comes, nor any other.
        let Submitted::Pending(_) = driver.submit(Millis(3), heartbeat("c:1")) else { panic!() };
        driver.handle_sink_failure("fsync failed");
        assert!(driver.handle_persisted(Seq(4)).is_empty());
        let Submitted::Ready(Err(e)) = driver.submit(Millis(4), ListWorkers) else { panic!() };
        assert_eq!((e.code().as_str(), e.detail()), ("UNAVAILABLE", JOURNAL_BROKEN));
        assert_eq!(driver.failure(), Some(&"fsync failed"));
    }

    #[test]
    fn a_sink_that_fails_on_persist_stops_the_driver() {
        let mut driver = Driver::new(dispatcher(), Later { fail: true, ..Later::default() });
        let Submitted::Ready(Err(e)) = driver.submit(Millis(1), heartbeat("a:1")) else { panic!() };
        assert_eq!(e.code(), "UNAVAILABLE");
        driver.sink_mut().fail = false;
        assert!(matches!(driver.submit(Millis(1), GetVersion), Submitted::Ready(Err(_))));
    }

    /// The synchronous sinks: the in-memory one answers at once; the recording one keeps what
    /// replays to the live state.
    #[test]
    fn synchronous_sinks_answer_at_once() {
        let mut memory = Driver::new(dispatcher(), MemorySink);
        let reply = memory.call(
            Millis(1),
            WorkerHeartbeat { worker_address: "w:1".into(), ..WorkerHeartbeat::default() },
        );
        assert_eq!(reply.unwrap().incarnation, "inc");
        let mut recording = Driver::new(dispatcher(), VecSink::default());
        recording
            .call(
                Millis(1),
                WorkerHeartbeat { worker_address: "w:1".into(), ..WorkerHeartbeat::default() },
            )
            .unwrap();
        let replayed = State::replay(vec![], &recording.sink().records);
        assert_eq!(&replayed, recording.dispatcher().state());
    }

    /// Every request kind is answered with its own response kind (what `Call::output` relies
    /// on), errors aside.
    #[test]
    fn every_request_gets_its_own_kind_of_response() {
        let mut d = Driver::new(dispatcher(), MemorySink);
        let t = Millis(1);
        d.call(t, WorkerHeartbeat { worker_address: "w:1".into(), ..Default::default() }).unwrap();
        d.call(t, WorkerUpdate { worker_address: "w:1".into(), ..Default::default() }).unwrap();
        let dataset = serde_json::json!({"dataset": {"source": {"range": {"stop": 4}}}});
        let ds = d.call(t, serde_json::from_value::<RegisterDataset>(dataset).unwrap()).unwrap();
        let job: CreateJob = serde_json::from_value(serde_json::json!({
            "dataset_id": ds.dataset_id, "processing_mode": "distributed_epoch",
            "job_name": "j", "num_consumers": 1
        }))
        .unwrap();
        let job = d.call(t, job).unwrap().job_id;
        let lease = d.call(
            t,
            (job, CreateIteration { consumer_index: Some(0), repetition: 0, resume_from: None }),
        );
        let lease = lease.unwrap();
        d.call(t, (lease.client_id, ClientHeartbeat::default())).unwrap();
        let task = d.call(t, ListWorkers).unwrap().workers[0].tasks[0];
        d.call(t, (task, MaybeRemove { consumer_index: 0, round: 0 })).unwrap();
        d.call(t, GetDataset { dataset_id: ds.dataset_id }).unwrap();
        assert_eq!(d.call(t, GetJob { job_id: job }).unwrap().iterations.len(), 1);
        assert_eq!(d.call(t, GetMetrics).unwrap().workers_alive, 1);
        d.call(t, GetVersion).unwrap();
        assert!(d.call(t, ReleaseClient { client_id: lease.client_id }).unwrap().released);
    }
}
