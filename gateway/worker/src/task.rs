//! One task on a worker: the tokio driver of [`shardwise_core::worker::Task`], the sans-IO
//! machine that holds the task's logic (its bounded buffer and backpressure, DYNAMIC splits
//! acknowledged only once clients took their elements, end of sequence, coordinated rounds,
//! read positions, failures; see that module for the guarantees).
//!
//! This side does the IO and the waiting: the first read spawns the driver, a tokio task that
//! performs the machine's actions (runs the pipeline a chunk at a time, posts get-splits to the
//! dispatcher, reads files beneath the data roots through [`super::files`]) and sleeps until the
//! machine's next timeout or until a read wakes it. Readers wait on a [`Notify`] for the
//! machine's [`Event::Readable`] until their own deadline. Time is the tokio clock, handed to
//! the machine as milliseconds since the task was created.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use shardwise_core::dataset::{Limits, Outputs, OutputsRequest};
use shardwise_core::dispatch::Millis;
use shardwise_core::dispatch::wire::{SplitsReply, TaskDef};
pub(crate) use shardwise_core::worker::ReadReply as ReadResult;
use shardwise_core::worker::{self as machine, Action, Event, Read, RunState, SplitFailure};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Shared;
use super::columnar::ReadOptions;
use super::producer::SplitOutputs;
use super::reply::Reply;
use super::rows::{RowsReads, files_of};
use shardwise_client::rest::CallError;
use shardwise_http::{Code, Problem};

/// Why a task the worker knew is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// It completed and the dispatcher deleted it: reads answer end of sequence.
    Completed,
    /// The dispatcher deleted it before it completed.
    Deleted,
    /// The dispatcher restarted with a new incarnation.
    Lost,
}

impl Gone {
    /// The answer to a read of a gone task.
    pub(crate) fn answer(
        self,
        task_id: shardwise_core::dispatch::TaskId,
    ) -> Result<ReadResult, Problem> {
        let gone = match self {
            Gone::Completed => machine::Gone::Completed,
            Gone::Deleted => machine::Gone::Deleted,
            Gone::Lost => machine::Gone::Lost,
        };
        gone.answer(task_id).map_err(problem)
    }
}

impl From<machine::Gone> for Gone {
    fn from(g: machine::Gone) -> Gone {
        match g {
            machine::Gone::Completed => Gone::Completed,
            machine::Gone::Deleted => Gone::Deleted,
            machine::Gone::Lost => Gone::Lost,
        }
    }
}

fn problem(e: machine::TaskError) -> Problem {
    Problem::new(e.code, e.detail)
}

/// A task the dispatcher assigned to this worker.
#[derive(Debug)]
pub(crate) struct Task {
    pub(crate) def: Arc<TaskDef>,
    machine: Mutex<machine::Task>,
    /// The machine's time zero.
    epoch: Instant,
    /// The machine said [`Event::Readable`].
    readable: Notify,
    /// The machine said [`Event::Runnable`]: the driver looks for an action.
    runnable: Notify,
    /// The driver, once the first read spawned it.
    driver: Mutex<Driver>,
    /// The task's limits (columnar chunks are sized by them).
    limits: Limits,
    /// (Columnar datasets) The columns of the task's rows, once its first chunk was read:
    /// an Arrow read without rows answers a stream of this schema.
    schema: std::sync::OnceLock<arrow_schema::SchemaRef>,
}

#[derive(Debug, Default)]
struct Driver {
    spawned: bool,
    handle: Option<tokio::task::JoinHandle<()>>,
}

impl Task {
    /// A task that buffers at most `capacity` elements and about `limits.max_buffered_bytes`
    /// bytes (but always one round of a coordinated read, of at most
    /// [`machine::MAX_CONSUMERS`] elements).
    /// `produced`: the worker's producer makes its splits' outputs.
    pub(crate) fn new(def: TaskDef, capacity: usize, limits: Limits, produced: bool) -> Task {
        let def = Arc::new(def);
        let machine = match produced {
            true => machine::Task::with_producer(Arc::clone(&def), capacity, limits),
            false => machine::Task::new(Arc::clone(&def), capacity, limits),
        };
        Task {
            machine: Mutex::new(machine),
            def,
            epoch: Instant::now(),
            readable: Notify::new(),
            runnable: Notify::new(),
            limits,
            schema: std::sync::OnceLock::new(),
            driver: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, machine::Task> {
        self.machine.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now(&self) -> Millis {
        Millis(u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    /// Hands the machine's events on: wakes readers or the driver, asks for a completion
    /// report or a heartbeat.
    fn dispatch_events(&self, m: &mut machine::Task, shared: &Shared) {
        while let Some(event) = m.poll_event() {
            match event {
                Event::Readable => self.readable.notify_waiters(),
                Event::Runnable => self.runnable.notify_one(),
                Event::CompletionDue => shared.report_now.notify_one(),
                Event::Heartbeat => shared.heartbeat_now.notify_one(),
            }
        }
    }

    /// Wakes what the machine's events name, for inputs that come without `Shared` (they
    /// never ask for a report or a heartbeat).
    fn wake(&self, m: &mut machine::Task) {
        while let Some(event) = m.poll_event() {
            match event {
                Event::Readable => self.readable.notify_waiters(),
                Event::Runnable => self.runnable.notify_one(),
                Event::CompletionDue | Event::Heartbeat => {}
            }
        }
    }

    /// `(buffered, produced, served)` for the metrics.
    pub(crate) fn counters(&self) -> (u64, u64, u64) {
        let v = self.lock().view();
        (v.buffered_elements, v.elements_produced, v.elements_served)
    }

    /// Spawns the driver if a read started the machine and none runs yet.
    fn ensure_driven(self: &Arc<Self>, shared: &Arc<Shared>) {
        let mut d = self.driver.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if d.spawned {
            return;
        }
        {
            let m = self.lock();
            if !m.is_started() || m.is_stopped() {
                return;
            }
        }
        d.spawned = true;
        d.handle = Some(tokio::spawn(Arc::clone(self).drive(Arc::clone(shared))));
    }

    /// Stops the machine and its driver, and wakes every reader (they answer as
    /// [`Task::gone_kind`] says).
    pub(crate) fn stop(&self) {
        {
            let mut m = self.lock();
            m.stop();
            self.wake(&mut m);
        }
        let mut d = self.driver.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        d.spawned = true;
        if let Some(h) = d.handle.take() {
            h.abort();
        }
    }

    /// What the worker's status route shows of this task.
    pub(crate) fn status(&self) -> super::routes::TaskStatus {
        use super::routes::{TaskRunState, TaskStatus};
        let v = self.lock().view();
        TaskStatus {
            task_id: self.def.task_id,
            iteration_id: self.def.iteration_id,
            job_id: self.def.job_id,
            dataset_id: self.def.dataset_id.clone(),
            sharding_policy: self.def.processing_mode,
            state: match v.state {
                RunState::Waiting => TaskRunState::Waiting,
                RunState::Running => TaskRunState::Running,
                RunState::Finished => TaskRunState::Finished,
                RunState::Failed => TaskRunState::Failed,
            },
            elements_produced: v.elements_produced,
            elements_served: v.elements_served,
            buffered_elements: v.buffered_elements,
            buffered_bytes: v.buffered_bytes,
            buffer_capacity: v.buffer_capacity,
            buffer_capacity_bytes: v.buffer_capacity_bytes,
            splits_held: v.splits_held,
        }
    }

    /// How a deleted task reads: completed if it ended and every element was taken.
    pub(crate) fn gone_kind(&self) -> Gone {
        self.lock().gone_kind().into()
    }

    /// Ended, every element taken, not yet acknowledged: the completion report is due.
    pub(crate) fn ready_to_report(&self) -> bool {
        self.lock().ready_to_report()
    }

    /// The dispatcher acknowledged the completion report: end of sequence may be served.
    pub(crate) fn mark_acked(&self) {
        let mut m = self.lock();
        m.handle_completion_acked();
        self.wake(&mut m);
    }

    /// Hands `read` to the machine, again each time it becomes readable, until it answers
    /// or `wait` is over (an empty read). A read of elements takes only as many as `reply`
    /// fits in its budget, written under the same lock (see [`super::reply`]). With the
    /// answer: the task's count of elements served before it (to name an element).
    async fn await_read(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        read: Read,
        wait: Duration,
        reply: &mut Reply,
    ) -> Result<(ReadResult, u64), Problem> {
        let deadline = Instant::now() + wait;
        let schema = self.schema();
        loop {
            let notified = self.readable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let answer = {
                let mut m = self.lock();
                let served = m.view().elements_served;
                let read = match read {
                    Read::Elements { max } => {
                        Read::Elements { max: reply.fit(&m, max, schema.as_ref())? }
                    }
                    round @ Read::Round { .. } => round,
                };
                let answer = m.handle_read(self.now(), read);
                self.dispatch_events(&mut m, shared);
                answer.map(|a| a.map(|r| (r, served)))
            };
            self.ensure_driven(shared);
            if let Some(answer) = answer {
                return answer.map_err(problem);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok((ReadResult::empty(), 0));
            }
        }
    }

    /// The columns of the task's rows, once its first chunk of a columnar file was read.
    pub(crate) fn schema(&self) -> Option<arrow_schema::SchemaRef> {
        self.schema.get().cloned()
    }

    /// How the task's columnar chunks are sized: about a sixteenth of its buffer's bytes (at
    /// most 8 MiB), and never a chunk (or a decoded Parquet footer) over the whole buffer.
    fn read_options(&self, shared: &Shared) -> ReadOptions {
        let max = self.limits.max_buffered_bytes;
        ReadOptions {
            chunk_bytes: (max / 16).clamp(1, 8 << 20),
            max_chunk_bytes: max,
            max_footer_bytes: shared.max_footer_bytes,
        }
    }

    /// First-come-first-served read of up to `max` elements (as many as `reply` fits),
    /// waiting at most `wait` for one.
    pub(crate) async fn read(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        max: usize,
        wait: Duration,
        reply: &mut Reply,
    ) -> Result<(ReadResult, u64), Problem> {
        self.await_read(shared, Read::Elements { max }, wait, reply).await
    }

    /// Coordinated read: consumer `consumer`'s element of round `round` (see
    /// [`Read::Round`]).
    pub(crate) async fn read_round(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        consumer: u64,
        round: u64,
        wait: Duration,
        reply: &mut Reply,
    ) -> Result<(ReadResult, u64), Problem> {
        self.await_read(shared, Read::Round { consumer, round }, wait, reply).await
    }

    /// The driver: performs the machine's actions until it will have no more (it ended,
    /// failed or was stopped; a stop also aborts it mid-action).
    /// The next outputs of `request`'s split from the worker's producer, on a blocking thread
    /// (started on the split when `on` is another's); the split it is on after.
    async fn produce(
        &self,
        shared: &Shared,
        on: Option<(u64, Box<dyn SplitOutputs>)>,
        request: &OutputsRequest,
    ) -> (Option<(u64, Box<dyn SplitOutputs>)>, Result<(Outputs, bool), machine::TaskError>) {
        let Some(producer) = shared.producer.clone() else {
            let e = machine::TaskError::new(
                Code::Internal,
                "outputs asked of a worker without a producer",
            );
            return (None, Err(e));
        };
        let (def, req) = (Arc::clone(&self.def), request.clone());
        let made = tokio::task::spawn_blocking(move || {
            let mut outputs = match on.filter(|(seq, _)| *seq == req.seq) {
                Some((_, outputs)) => outputs,
                None => match producer.0.start(&def, &req.split, req.positions.as_ref()) {
                    Ok(outputs) => outputs,
                    Err(e) => return (None, Err(e)),
                },
            };
            // Empty chunks that are not the end are passed over.
            let next = loop {
                match outputs.next() {
                    Ok((o, false)) if o.is_empty() => {}
                    other => break other,
                }
            };
            (Some((req.seq, outputs)), next)
        })
        .await;
        let (on, next) = made.unwrap_or_else(|e| {
            let why = format!("the producer stopped: {e}");
            (None, Err(machine::TaskError::new(Code::Internal, why)))
        });
        // Rows of one schema: the task's first chunk sets it.
        let next = next.and_then(|(outputs, last)| {
            if let Outputs::Rows(chunk) = &outputs {
                let Some(batch) = super::columnar_out::batch_of(chunk) else {
                    let why = "the producer's rows are not a record batch";
                    return Err(machine::TaskError::new(Code::Internal, why));
                };
                let schema = self.schema.get_or_init(|| batch.schema());
                if schema.fields() != batch.schema().fields() {
                    return Err(machine::TaskError::new(
                        Code::InvalidArgument,
                        format!(
                            "the producer made rows of the columns {} after rows of {}: one \
                             task's rows have one schema",
                            fields(&batch.schema()),
                            fields(schema)
                        ),
                    ));
                }
            }
            Ok((outputs, last))
        });
        (on, next)
    }

    async fn drive(self: Arc<Self>, shared: Arc<Shared>) {
        let id = self.def.task_id;
        let path = format!("/v1/iterations/{}/splits", self.def.iteration_id);
        let files = files_of(&self.def).map(|f| Arc::new(f.clone()));
        let mut rows = RowsReads::default();
        // The split the producer is on (its `seq`) and its outputs.
        let mut producing: Option<(u64, Box<dyn SplitOutputs>)> = None;
        loop {
            let woken = self.runnable.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let (action, timeout, yielded) = {
                let mut m = self.lock();
                m.handle_timeout(self.now());
                let action = m.poll_action();
                let yielded = action == Some(Action::Produce) && m.produce().yielded;
                self.dispatch_events(&mut m, &shared);
                if action.is_none() && m.is_finished() {
                    if let Some(e) = m.failure() {
                        tracing::warn!(task_id = %id, detail = %e.detail, "task failed");
                    }
                    return;
                }
                (action, m.poll_timeout(), yielded)
            };
            match action {
                // A long stretch without an element (a large skip): let the runtime serve
                // others, and let a stop end the task here. Readers take the lock between
                // chunks either way.
                Some(Action::Produce) if yielded => tokio::task::yield_now().await,
                Some(Action::Produce) => {}
                Some(Action::FetchSplits(fetch)) => {
                    let req = fetch.request(&shared.address, Some(&shared.uid));
                    let reply = shared.dispatcher.post::<_, SplitsReply>(&path, &req).await;
                    let mut m = self.lock();
                    match reply {
                        Ok(reply) => m.handle_splits(self.now(), reply),
                        Err(e) => {
                            if e.is_retryable() {
                                tracing::debug!(task_id = %id, error = %e, "get-split: retrying");
                            } else if matches!(&e, CallError::Problem(p) if p.code == Code::FailedPrecondition)
                            {
                                tracing::warn!(task_id = %id, error = %e, "get-split refused; heartbeating and retrying");
                            }
                            let failure = SplitFailure {
                                code: e.code(),
                                retryable: e.is_retryable(),
                                message: e.to_string(),
                            };
                            m.handle_split_error(self.now(), failure);
                        }
                    }
                    self.dispatch_events(&mut m, &shared);
                }
                Some(Action::ReadFile { path }) => {
                    let contents = shared.files.read(&path).await;
                    let mut m = self.lock();
                    let contents = contents
                        .as_deref()
                        .map_err(|p| machine::TaskError::new(p.code, p.detail.clone()));
                    m.handle_file(self.now(), &path, contents);
                    self.dispatch_events(&mut m, &shared);
                }
                Some(Action::ReadRows(request)) => {
                    let read = match &files {
                        Some(files) => {
                            rows.next(&shared.files, files, &request, self.read_options(&shared))
                                .await
                        }
                        None => Err(machine::TaskError::new(
                            Code::Internal,
                            "rows were asked for by a dataset without files",
                        )),
                    };
                    if let (Ok((chunk, _)), None) = (&read, self.schema.get())
                        && let Some(batch) = super::columnar_out::batch_of(chunk)
                    {
                        let _ = self.schema.set(batch.schema());
                    }
                    let mut m = self.lock();
                    m.handle_rows(self.now(), &request, read);
                    self.dispatch_events(&mut m, &shared);
                }
                Some(Action::ProduceOutputs(request)) => {
                    let (on, outputs) = self.produce(&shared, producing.take(), &request).await;
                    producing = on;
                    let mut m = self.lock();
                    m.handle_outputs(self.now(), &request, outputs);
                    self.dispatch_events(&mut m, &shared);
                }
                None => match timeout {
                    Some(at) => {
                        let at = self.epoch + Duration::from_millis(at.0);
                        tokio::select! {
                            () = tokio::time::sleep_until(at) => {}
                            () = &mut woken => {}
                        }
                    }
                    None => woken.await,
                },
            }
        }
    }
}

/// A schema's columns and types, for messages.
fn fields(schema: &arrow_schema::Schema) -> String {
    let named: Vec<String> =
        schema.fields().iter().map(|f| format!("{:?} {}", f.name(), f.data_type())).collect();
    format!("[{}]", named.join(", "))
}
