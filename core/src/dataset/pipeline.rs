//! Worker-side pipelines: a pull-based, sans-IO state machine per task.

use std::num::NonZeroU64;

use serde_json::Value;

use super::columnar::{Chunk, Element, RowsRequest};
use super::def::{DatasetDef, SourceDef, TransformDef};
use super::error::{DatasetError, invalid, precondition};
use super::limits::{Budget, Limits};
use super::ops::{Ctx, Input, Need, Op, Out};
use super::outputs::{Outputs, OutputsRequest};
use super::source::{Feed, Source};
use crate::position::{ElementOrigin, OriginRun, SplitPositions};

/// How a task's pipeline is sharded: TensorFlow's sharding policies with the worker's static
/// shard where one applies.
///
/// `num_workers` must be at least 1 and `worker_index` below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sharding {
    /// `OFF`: every worker reads the whole dataset.
    Off,
    /// `DYNAMIC`: the source's elements come from splits handed out by the dispatcher.
    Dynamic,
    /// `FILE`: worker `i` of `N` reads files `i, i + N, ...` of a `files` source.
    File {
        /// `N`.
        num_workers: u64,
        /// `i`.
        worker_index: u64,
    },
    /// `DATA`: worker `i` of `N` keeps elements `i, i + N, ...` of the final output.
    Data {
        /// `N`.
        num_workers: u64,
        /// `i`.
        worker_index: u64,
    },
    /// `FILE_OR_DATA`: FILE for a `files` source, else DATA.
    FileOrData {
        /// `N`.
        num_workers: u64,
        /// `i`.
        worker_index: u64,
    },
    /// `HINT`: every `shard_hint` transform keeps elements `i, i + N, ...` of its input.
    Hint {
        /// `N`.
        num_workers: u64,
        /// `i`.
        worker_index: u64,
    },
}

/// What [`Pipeline::next`] produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The next element: a JSON value, or a row (or batch of rows) of a columnar source.
    Element(Element),
    /// (DYNAMIC) The source needs the next split of this repetition: answer with
    /// [`Pipeline::provide_split`]. There is one split provider per dataset (index 0).
    NeedSplit {
        /// How many times the pipeline has re-entered the source because of an enclosing
        /// `repeat` (0 on the first pass).
        repetition: u64,
    },
    /// The source needs the contents of this file: answer with [`Pipeline::provide_file`].
    NeedFile {
        /// One of the source's paths.
        path: String,
    },
    /// The source needs rows of this columnar file: decode them and answer with
    /// [`Pipeline::provide_rows`], one chunk at a time.
    NeedRows(RowsRequest),
    /// (A pipeline of a producer's outputs, [`Pipeline::external`]) the next outputs of this
    /// split: produce them and answer with [`Pipeline::provide_outputs`].
    NeedOutputs(OutputsRequest),
    /// The pipeline pulled [`MAX_PULLS_PER_STEP`] elements from its source without a result
    /// (a large `skip`, say, over an endless `repeat`): call `next` again to go on. It gives
    /// the caller a chance to stay responsive, or to stop a task that would spin forever.
    Yield,
    /// The pipeline is finished; every later call returns `End` again.
    End,
    /// The pipeline failed; every later call returns the same error.
    Error(DatasetError),
}

/// The most elements one [`Pipeline::next`] call pulls from the source before it answers
/// [`Step::Yield`].
pub const MAX_PULLS_PER_STEP: u64 = 1 << 16;

/// A worker's pipeline for one task: a pull-based state machine that never does IO.
///
/// Call [`next`](Pipeline::next) (or [`next_batch`](Pipeline::next_batch)) until it returns
/// [`Step::End`] or [`Step::Error`]. When it returns [`Step::NeedSplit`],
/// [`Step::NeedFile`] or [`Step::NeedRows`], fetch the split, the file or the rows and hand
/// them in with [`provide_split`](Pipeline::provide_split),
/// [`provide_file`](Pipeline::provide_file) or [`provide_rows`](Pipeline::provide_rows);
/// calling `next` again without providing it returns the same request. An input the pipeline
/// did not ask for fails the pipeline (the error comes out of the next `next`).
///
/// Infinite datasets are produced lazily. Memory is bounded by the shuffle buffers and batches
/// (at most [`MAX_BUFFER_ELEMENTS`](super::MAX_BUFFER_ELEMENTS) elements each, and at most
/// [`Limits::max_buffered_bytes`] together: a pipeline that would hold more fails with
/// `RESOURCE_EXHAUSTED`) and one split's or file's elements (the caller bounds the files it
/// hands in). The work of one `next` call is proportional to the
/// number of elements the transforms discard on the way (`skip`, shards, a shuffle buffer being
/// filled), as in TensorFlow, but at most [`MAX_PULLS_PER_STEP`] source elements: then it
/// answers [`Step::Yield`].
#[derive(Debug, Clone)]
pub struct Pipeline {
    source: Source,
    ops: Vec<Op>,
    /// The bytes the buffering stages hold.
    budget: Budget,
    /// Where the chain was suspended by a request of the source (the source's index, 0).
    resume_at: Option<usize>,
    state: State,
    /// DYNAMIC sharding of a dataset whose read positions are exact
    /// ([`DatasetDef::check_resumable`]): elements have origins.
    resumable: bool,
    /// The last `next` returned an element.
    emitted: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Running,
    Ended,
    Failed(DatasetError),
}

/// What sharding does to a dataset, once checked.
struct Plan {
    feed: Feed,
    /// `(N, i)` for each `shard_hint` (HINT only).
    hint: Option<(NonZeroU64, u64)>,
    /// `(N, i)` applied to the final output (DATA, and FILE_OR_DATA on a non-file source).
    data: Option<(NonZeroU64, u64)>,
}

const WHOLE: Feed = Feed::Static { first: 0, stride: 1 };

/// Checks that `def` can be read with `sharding`, with the errors [`Pipeline::new`] would
/// return: `INVALID_ARGUMENT` for a bad worker count or index, too few files for FILE sharding
/// or too many transforms; `NOT_FOUND` for FILE sharding of a source without files;
/// `FAILED_PRECONDITION` for a `shard_hint` outside the HINT policy.
pub fn validate_sharding(def: &DatasetDef, sharding: Sharding) -> Result<(), DatasetError> {
    plan(def, sharding).map(|_| ())
}

fn plan(def: &DatasetDef, sharding: Sharding) -> Result<Plan, DatasetError> {
    let shard = match sharding {
        Sharding::Off | Sharding::Dynamic => None,
        Sharding::File { num_workers, worker_index }
        | Sharding::Data { num_workers, worker_index }
        | Sharding::FileOrData { num_workers, worker_index }
        | Sharding::Hint { num_workers, worker_index } => {
            Some(static_shard(num_workers, worker_index)?)
        }
    };
    def.validate()?;
    if !matches!(sharding, Sharding::Hint { .. })
        && let Some(position) =
            def.transforms.iter().position(|t| matches!(t, TransformDef::ShardHint))
    {
        return Err(hint_outside_hint_mode(position));
    }
    let plan = match (sharding, shard) {
        (Sharding::Off, _) => Plan { feed: WHOLE, hint: None, data: None },
        (Sharding::Dynamic, _) => Plan { feed: Feed::dynamic(&def.source), hint: None, data: None },
        (Sharding::File { .. }, Some(shard)) => file_plan(&def.source, shard)?,
        (Sharding::FileOrData { .. }, Some(shard)) if matches!(def.source, SourceDef::Files(_)) => {
            file_plan(&def.source, shard)?
        }
        (Sharding::Hint { .. }, shard) => Plan { feed: WHOLE, hint: shard, data: None },
        (_, shard) => Plan { feed: WHOLE, hint: None, data: shard },
    };
    Ok(plan)
}

fn static_shard(num_workers: u64, worker_index: u64) -> Result<(NonZeroU64, u64), DatasetError> {
    let Some(n) = NonZeroU64::new(num_workers) else {
        return Err(invalid(
            "Number of shards must be greater than zero (currently num_workers = 0).",
        ));
    };
    if worker_index >= num_workers {
        return Err(invalid(format!(
            "Index must be between 0 and {} (currently index = {worker_index}).",
            num_workers - 1
        )));
    }
    Ok((n, worker_index))
}

fn file_plan(source: &SourceDef, (n, i): (NonZeroU64, u64)) -> Result<Plan, DatasetError> {
    let SourceDef::Files(files) = source else {
        return Err(DatasetError::NotFound(format!(
            "Found an unshardable source dataset: a {:?} source has no files to shard \
             (FILE sharding needs a \"files\" source).",
            source.kind()
        )));
    };
    let num_files = u64::try_from(files.paths.len()).unwrap_or(u64::MAX);
    if num_files < n.get() {
        return Err(invalid(format!(
            "Could not shard the dataset by file: it has {num_files} input files, which is not \
             enough for the required {n} shards/workers."
        )));
    }
    Ok(Plan { feed: Feed::Static { first: i, stride: n.get() }, hint: None, data: None })
}

fn hint_outside_hint_mode(position: usize) -> DatasetError {
    precondition(format!(
        "transforms[{position}] is a shard_hint, which is only supported in tf.data service \
         with `tf.data.experimental.service.ShardingPolicy.HINT` processing mode."
    ))
}

impl Pipeline {
    /// Builds the pipeline of `def` for a task sharded with `sharding` (errors as
    /// [`validate_sharding`]), with the default [`Limits`].
    pub fn new(def: &DatasetDef, sharding: Sharding) -> Result<Pipeline, DatasetError> {
        Pipeline::with_limits(def, sharding, Limits::default())
    }

    /// [`Pipeline::new`] with the given limits.
    pub fn with_limits(
        def: &DatasetDef,
        sharding: Sharding,
        limits: Limits,
    ) -> Result<Pipeline, DatasetError> {
        let plan = plan(def, sharding)?;
        let mut ops = Vec::with_capacity(def.transforms.len().saturating_add(1));
        for (position, transform) in def.transforms.iter().enumerate() {
            ops.push(match transform {
                TransformDef::Repeat(count) => Op::repeat(*count),
                TransformDef::Take(n) => Op::take(*n),
                TransformDef::Skip(n) => Op::skip(*n),
                TransformDef::Shuffle(s) => Op::shuffle(*s, position),
                TransformDef::Batch(b) => Op::batch(*b, position),
                TransformDef::ShardHint => match plan.hint {
                    Some((n, i)) => Op::shard(n, i),
                    None => return Err(hint_outside_hint_mode(position)),
                },
            });
        }
        if let Some((n, i)) = plan.data {
            ops.push(Op::shard(n, i));
        }
        let resumable = matches!(sharding, Sharding::Dynamic) && def.check_resumable().is_ok();
        Ok(Pipeline {
            resumable,
            emitted: false,
            source: Source::new(def.source.clone(), plan.feed),
            ops,
            budget: Budget::new(limits),
            resume_at: None,
            state: State::Running,
        })
    }

    /// A pipeline of `def` whose splits' outputs the caller produces ([`Outputs`]):
    /// its splits come from the dispatcher under DYNAMIC sharding, or are the source cut into
    /// splits of `split_size` under OFF, and the dataset's own pipeline is not run, so it may
    /// have no transforms. Other sharding policies and transforms are `FAILED_PRECONDITION`.
    pub fn external(
        def: &DatasetDef,
        sharding: Sharding,
        split_size: u64,
        limits: Limits,
    ) -> Result<Pipeline, DatasetError> {
        let feed = match sharding {
            Sharding::Off => WHOLE,
            Sharding::Dynamic => Feed::dynamic(&def.source),
            other => {
                return Err(precondition(format!(
                    "a worker that produces splits with its own function serves OFF and DYNAMIC \
                     sharding (parallel_epochs, distributed_epoch), not {other:?}"
                )));
            }
        };
        def.validate()?;
        if !def.transforms.is_empty() {
            return Err(precondition(format!(
                "a worker that produces splits with its own function runs no transforms (its \
                 function is the pipeline), and this dataset has {}",
                def.transforms.len()
            )));
        }
        Ok(Pipeline {
            resumable: matches!(sharding, Sharding::Dynamic),
            emitted: false,
            source: Source::external(def.source.clone(), feed, split_size),
            ops: Vec::new(),
            budget: Budget::new(limits),
            resume_at: None,
            state: State::Running,
        })
    }

    /// Advances the pipeline to its next element, request, end or error.
    #[allow(
        clippy::should_implement_trait,
        reason = "a step is not an iterator item: requests must be answered before going on"
    )]
    pub fn next(&mut self) -> Step {
        self.emitted = false;
        match &self.state {
            State::Running => {}
            State::Ended => return Step::End,
            State::Failed(e) => return Step::Error(e.clone()),
        }
        // Stage 0 is the source, stage k >= 1 is ops[k - 1]. Invariant between calls: either
        // every stage is idle (resume at the top), or the chain is suspended on the source and
        // every stage above it is waiting for its input.
        let top = self.ops.len();
        let mut stage = self.resume_at.take().unwrap_or(top).min(top);
        let mut input = Input::Pull;
        let mut pulls: u64 = 0;
        loop {
            let out = if stage == 0 {
                // Suspending here is what a request of the source does: the next call resumes
                // at the source.
                pulls += 1;
                if pulls > MAX_PULLS_PER_STEP {
                    self.resume_at = Some(0);
                    return Step::Yield;
                }
                self.source.next()
            } else {
                let ctx = Ctx {
                    dynamic: self.source.is_dynamic(),
                    split_requests: self.source.split_requests(),
                };
                match self.ops.get_mut(stage - 1) {
                    Some(op) => {
                        op.resume(std::mem::replace(&mut input, Input::Pull), ctx, &mut self.budget)
                    }
                    None => Out::Fail(precondition("internal error: pipeline stage missing")),
                }
            };
            match out {
                Out::Emit(element) if stage >= top => {
                    self.emitted = true;
                    return Step::Element(element);
                }
                Out::Emit(element) => {
                    stage += 1;
                    input = Input::Item(element);
                }
                Out::End if stage >= top => {
                    self.state = State::Ended;
                    return Step::End;
                }
                Out::End => {
                    stage += 1;
                    input = Input::End;
                }
                Out::Pull if stage > 0 => {
                    stage -= 1;
                    input = Input::Pull;
                }
                Out::Reset if stage > 0 => {
                    self.source.reset();
                    for op in self.ops.iter_mut().take(stage - 1) {
                        op.reset(&mut self.budget);
                    }
                    input = Input::Pull;
                }
                Out::Pull | Out::Reset => {
                    return self.fail(precondition("internal error: the source cannot pull"));
                }
                Out::Need(need) => {
                    self.resume_at = Some(stage);
                    return match need {
                        Need::Split { repetition } => Step::NeedSplit { repetition },
                        Need::File { path } => Step::NeedFile { path },
                        Need::Rows(request) => Step::NeedRows(request),
                        Need::Outputs(request) => Step::NeedOutputs(request),
                    };
                }
                Out::Fail(e) => return self.fail(e),
            }
        }
    }

    /// Collects up to `max` elements. Returns them with the step that stopped the collection
    /// (never [`Step::Element`]), or `None` if `max` elements were collected.
    pub fn next_batch(&mut self, max: usize) -> (Vec<Element>, Option<Step>) {
        let mut elements = Vec::with_capacity(max.min(1024));
        while elements.len() < max {
            match self.next() {
                Step::Element(element) => elements.push(element),
                other => return (elements, Some(other)),
            }
        }
        (elements, None)
    }

    /// Hands in a split for `repetition` after [`Step::NeedSplit`]; `None` means that
    /// repetition has no more splits (that pass over the source is over).
    ///
    /// Splits may also be provided ahead of the request (e.g. from a get-split reply carrying
    /// several): they queue up for the current repetition. A split for an earlier repetition
    /// is stale and ignored, as is anything provided after the pipeline ended or failed. A
    /// split for a later repetition, a split after the end of splits, a split for a
    /// non-DYNAMIC pipeline, or one that does not belong to the source fails the pipeline.
    pub fn provide_split(&mut self, repetition: u64, split: Option<Value>) {
        self.provide_split_at(repetition, split.map(|s| (s, None)));
    }

    /// [`Pipeline::provide_split`] with where the split lies in the source, as get-split
    /// says (`positions`): its elements then have an [`origin`](Pipeline::origin), and the
    /// first `skip` elements of its output are passed over (a split resumed part way: `range`
    /// and `list` move on, a `bytes` file or a `splits` item is left out whole, a `lines` or
    /// `jsonl` file passes over that many records once its bytes arrive).
    pub fn provide_split_at(
        &mut self,
        repetition: u64,
        split: Option<(Value, Option<SplitPositions>)>,
    ) {
        if self.state == State::Running
            && let Err(e) = self.source.provide_split(repetition, split)
        {
            self.state = State::Failed(e);
        }
    }

    /// Where the element the last [`next`](Pipeline::next) returned comes from: its split's
    /// positions, its offset in the split's output, and whether it is the split's last
    /// element. `None` unless the pipeline shards DYNAMICally, its dataset passes
    /// [`DatasetDef::check_resumable`], the last `next` returned an element and that
    /// element's split was provided with its positions
    /// ([`provide_split_at`](Pipeline::provide_split_at)).
    pub fn origin(&self) -> Option<ElementOrigin> {
        if self.resumable && self.emitted { self.source.origin() } else { None }
    }

    /// The origin runs of the elements `next` returned since the last call, in order: what a
    /// worker sends beside a batch of elements, computed per batch (an element costs only
    /// its split's offset moving on). `None` unless the pipeline is DYNAMIC and passes
    /// [`DatasetDef::check_resumable`]; the runs cover fewer elements than were returned when
    /// some came from splits provided without positions.
    pub fn take_origins(&mut self) -> Option<Vec<OriginRun>> {
        self.resumable.then(|| self.source.take_origins())
    }

    /// Hands in the contents of the file named by [`Step::NeedFile`]. Bytes for any other path,
    /// or when no file was asked for, fail the pipeline (ignored after it ended or failed).
    pub fn provide_file(&mut self, path: &str, bytes: &[u8]) {
        if self.state == State::Running
            && let Err(e) = self.source.provide_file(path, bytes)
        {
            self.state = State::Failed(e);
        }
    }

    /// Hands in rows of the columnar file named by [`Step::NeedRows`]: `chunk` holds its rows
    /// from the request's `start` on (rows past its `stop` are left out), and `last` says no
    /// more rows of the request follow. A chunk without rows must be the last. Rows for another
    /// path, when none were asked for, or a file that ends before the request's `stop`, fail
    /// the pipeline (ignored after it ended or failed).
    pub fn provide_rows(&mut self, path: &str, chunk: Chunk, last: bool) {
        if self.state == State::Running
            && let Err(e) = self.source.provide_rows(path, chunk, last)
        {
            self.state = State::Failed(e);
        }
    }

    /// Hands in the next outputs of the split [`Step::NeedOutputs`] asked for (its `seq`);
    /// `last` says none follow. Outputs without one must be the last. Outputs of another
    /// split, when none were asked for, or of another kind than the task's first (JSON values
    /// and rows), fail the pipeline (ignored after it ended or failed).
    pub fn provide_outputs(&mut self, seq: u64, outputs: Outputs, last: bool) {
        if self.state == State::Running
            && let Err(e) = self.source.provide_outputs(seq, outputs, last)
        {
            self.state = State::Failed(e);
        }
    }

    /// How many times the source has been re-entered by an enclosing `repeat` (the repetition
    /// of the next [`Step::NeedSplit`]).
    pub fn repetition(&self) -> u64 {
        self.source.repetition()
    }

    fn fail(&mut self, error: DatasetError) -> Step {
        self.state = State::Failed(error.clone());
        Step::Error(error)
    }
}
