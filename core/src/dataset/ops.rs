//! The transform stages of a pipeline and the protocol between stages and the driver.
//!
//! Every stage is a resumable state machine: the driver calls [`Op::resume`] with
//! [`Input::Pull`] ("produce your next output") or with the upstream result the stage asked
//! for by answering [`Out::Pull`]. Because the driver, not the call stack, carries the chain,
//! a pipeline of any length runs without recursion, and a stage suspended on a request of the
//! source simply waits in its fields until the driver resumes it.

use std::num::NonZeroU64;

use serde_json::Value;

use super::DatasetError;
use super::columnar::{Element, Row};
use super::def::{BatchDef, ShuffleDef};
use super::limits::Budget;
use super::rng::Rng;

/// What the driver hands a stage.
#[derive(Debug)]
pub(super) enum Input {
    /// Produce your next output.
    Pull,
    /// The element you asked for.
    Item(Element),
    /// Your input has ended (for this pass).
    End,
}

/// What a stage answers.
#[derive(Debug)]
pub(super) enum Out {
    /// An output element.
    Emit(Element),
    /// No more output (until an enclosing `repeat` resets this stage).
    End,
    /// Give me my input's next result.
    Pull,
    /// (`repeat` only) Reset every stage upstream of me, then pull me again.
    Reset,
    /// (source only) The caller must provide something before the source can go on.
    Need(Need),
    /// A fatal error.
    Fail(DatasetError),
}

/// An input the source waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Need {
    /// The next split of this repetition (DYNAMIC sharding).
    Split {
        /// The source's repetition.
        repetition: u64,
    },
    /// The bytes of this file.
    File {
        /// The path.
        path: String,
    },
    /// Rows of this columnar file.
    Rows(super::columnar::RowsRequest),
    /// The next outputs of a split the caller produces.
    Outputs(super::outputs::OutputsRequest),
}

/// What a `repeat` needs to know about the source to detect an endless empty loop.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ctx {
    /// Whether the source is fed by splits (DYNAMIC sharding).
    pub(super) dynamic: bool,
    /// How many times the source has asked for a split so far (never reset).
    pub(super) split_requests: u64,
}

/// One transform stage.
#[derive(Debug, Clone)]
pub(super) enum Op {
    Take(Take),
    Skip(Skip),
    Repeat(Repeat),
    Shuffle(Shuffle),
    Batch(Batch),
    Shard(Shard),
}

impl Op {
    pub(super) fn take(count: u64) -> Op {
        Op::Take(Take { count, taken: 0, done: false })
    }

    pub(super) fn skip(count: u64) -> Op {
        Op::Skip(Skip { count, skipped: 0, done: false })
    }

    pub(super) fn repeat(count: Option<u64>) -> Op {
        Op::Repeat(Repeat {
            count,
            completed: 0,
            in_pass: false,
            produced: false,
            requests_at_start: 0,
            done: false,
        })
    }

    /// A shuffle; `position` is its index among the transforms (for messages).
    pub(super) fn shuffle(def: ShuffleDef, position: usize) -> Op {
        Op::Shuffle(Shuffle {
            capacity: def.buffer,
            seed: def.seed,
            pass: 0,
            rng: Rng::new(def.seed, 0),
            buffer: Vec::new(),
            held: 0,
            position,
            input_done: false,
        })
    }

    /// A batch; `position` is its index among the transforms (for messages).
    pub(super) fn batch(def: BatchDef, position: usize) -> Op {
        Op::Batch(Batch {
            size: def.size,
            drop_remainder: def.drop_remainder,
            buffer: Vec::new(),
            held: 0,
            position,
            done: false,
        })
    }

    /// Keeps elements `index, index + num_shards, ...` (`index < num_shards`).
    pub(super) fn shard(num_shards: NonZeroU64, index: u64) -> Op {
        Op::Shard(Shard { num_shards, index, position: 0, done: false })
    }

    /// Advances the stage with `input`; buffering stages account for their elements in
    /// `budget`.
    pub(super) fn resume(&mut self, input: Input, ctx: Ctx, budget: &mut Budget) -> Out {
        match self {
            Op::Take(s) => s.resume(input),
            Op::Skip(s) => s.resume(input),
            Op::Repeat(s) => s.resume(input, ctx),
            Op::Shuffle(s) => s.resume(input, budget),
            Op::Batch(s) => s.resume(input, budget),
            Op::Shard(s) => s.resume(input),
        }
    }

    /// Returns the stage to its initial state for a new pass of an enclosing `repeat`,
    /// giving back what its buffer held to `budget`.
    pub(super) fn reset(&mut self, budget: &mut Budget) {
        match self {
            Op::Take(s) => {
                s.taken = 0;
                s.done = false;
            }
            Op::Skip(s) => {
                s.skipped = 0;
                s.done = false;
            }
            Op::Repeat(s) => {
                s.completed = 0;
                s.in_pass = false;
                s.done = false;
            }
            Op::Shuffle(s) => {
                s.pass = s.pass.wrapping_add(1);
                s.rng = Rng::new(s.seed, s.pass);
                s.buffer.clear();
                budget.give(std::mem::take(&mut s.held));
                s.input_done = false;
            }
            Op::Batch(s) => {
                s.buffer.clear();
                budget.give(std::mem::take(&mut s.held));
                s.done = false;
            }
            Op::Shard(s) => {
                s.position = 0;
                s.done = false;
            }
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Take {
    count: u64,
    taken: u64,
    done: bool,
}

impl Take {
    fn resume(&mut self, input: Input) -> Out {
        match input {
            Input::Pull if self.done || self.taken >= self.count => {
                self.done = true;
                Out::End
            }
            Input::Pull => Out::Pull,
            Input::Item(v) => {
                self.taken = self.taken.saturating_add(1);
                Out::Emit(v)
            }
            Input::End => {
                self.done = true;
                Out::End
            }
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Skip {
    count: u64,
    skipped: u64,
    done: bool,
}

impl Skip {
    fn resume(&mut self, input: Input) -> Out {
        match input {
            Input::Pull if self.done => Out::End,
            Input::Pull => Out::Pull,
            Input::Item(_) if self.skipped < self.count => {
                self.skipped += 1;
                Out::Pull
            }
            Input::Item(v) => Out::Emit(v),
            Input::End => {
                self.done = true;
                Out::End
            }
        }
    }
}

/// `repeat`: on the end of a pass of its input, resets the input and goes on.
///
/// A pass that produced nothing ends the repeat early when the next pass cannot differ:
/// without dynamic sharding every pass of the same input produces the same number of
/// elements (sources, `take`, `skip`, `batch`, `shuffle` and shards are deterministic in
/// count), and with it a pass that never asked for a split cannot get any either. This is
/// TensorFlow's guard for `repeat()` of an empty input, extended to finite counts so that a
/// large count over an empty input does not spin. A dynamic pass that asked for splits and
/// got none goes on (other workers may have drained that repetition), and each such pass hands
/// control back to the caller with a split request.
#[derive(Debug, Clone)]
pub(super) struct Repeat {
    count: Option<u64>,
    completed: u64,
    in_pass: bool,
    produced: bool,
    requests_at_start: u64,
    done: bool,
}

impl Repeat {
    fn resume(&mut self, input: Input, ctx: Ctx) -> Out {
        match input {
            Input::Pull => {
                if self.done || self.count.is_some_and(|c| self.completed >= c) {
                    self.done = true;
                    return Out::End;
                }
                if !self.in_pass {
                    self.in_pass = true;
                    self.produced = false;
                    self.requests_at_start = ctx.split_requests;
                }
                Out::Pull
            }
            Input::Item(v) => {
                self.produced = true;
                Out::Emit(v)
            }
            Input::End => {
                self.in_pass = false;
                self.completed = self.completed.saturating_add(1);
                let exhausted = self.count.is_some_and(|c| self.completed >= c);
                let barren = !self.produced
                    && (!ctx.dynamic || ctx.split_requests == self.requests_at_start);
                if exhausted || barren {
                    self.done = true;
                    Out::End
                } else {
                    Out::Reset
                }
            }
        }
    }
}

/// `shuffle`: fill the buffer, emit a uniformly chosen buffered element, refill.
#[derive(Debug, Clone)]
pub(super) struct Shuffle {
    capacity: NonZeroU64,
    seed: u64,
    pass: u64,
    rng: Rng,
    /// The buffered elements with their weights.
    buffer: Vec<(Element, u64)>,
    /// The sum of the weights in `buffer` (taken from the pipeline's budget).
    held: u64,
    position: usize,
    input_done: bool,
}

impl Shuffle {
    fn resume(&mut self, input: Input, budget: &mut Budget) -> Out {
        match input {
            Input::Pull if !self.input_done && !self.is_full() => Out::Pull,
            Input::Pull => self.emit(budget),
            Input::Item(v) => {
                let weight = v.approx_bytes();
                let what = || format!("transforms[{}].shuffle", self.position);
                if let Err(e) = budget.take(weight, &what()) {
                    return Out::Fail(e);
                }
                self.held = self.held.saturating_add(weight);
                self.buffer.push((v, weight));
                if self.is_full() { self.emit(budget) } else { Out::Pull }
            }
            Input::End => {
                self.input_done = true;
                self.emit(budget)
            }
        }
    }

    fn is_full(&self) -> bool {
        u64::try_from(self.buffer.len()).unwrap_or(u64::MAX) >= self.capacity.get()
    }

    fn emit(&mut self, budget: &mut Budget) -> Out {
        let len = u64::try_from(self.buffer.len()).unwrap_or(u64::MAX);
        if len == 0 {
            return Out::End;
        }
        let chosen = usize::try_from(self.rng.below(len)).unwrap_or(0);
        let taken = if chosen < self.buffer.len() {
            Some(self.buffer.swap_remove(chosen))
        } else {
            self.buffer.pop()
        };
        let Some((element, weight)) = taken else { return Out::End };
        self.held = self.held.saturating_sub(weight);
        budget.give(weight);
        Out::Emit(element)
    }
}

#[derive(Debug, Clone)]
pub(super) struct Batch {
    size: NonZeroU64,
    drop_remainder: bool,
    buffer: Vec<Element>,
    /// The weight of the elements in `buffer` (taken from the pipeline's budget).
    held: u64,
    position: usize,
    done: bool,
}

impl Batch {
    fn resume(&mut self, input: Input, budget: &mut Budget) -> Out {
        match input {
            Input::Pull if self.done => Out::End,
            Input::Pull => Out::Pull,
            Input::Item(v) => {
                let weight = v.approx_bytes();
                if let Err(e) = budget.take(weight, &format!("transforms[{}].batch", self.position))
                {
                    return Out::Fail(e);
                }
                self.held = self.held.saturating_add(weight);
                self.buffer.push(v);
                if u64::try_from(self.buffer.len()).unwrap_or(u64::MAX) >= self.size.get() {
                    budget.give(std::mem::take(&mut self.held));
                    Out::Emit(batched(std::mem::take(&mut self.buffer)))
                } else {
                    Out::Pull
                }
            }
            Input::End => {
                self.done = true;
                budget.give(std::mem::take(&mut self.held));
                if self.buffer.is_empty() || self.drop_remainder {
                    self.buffer.clear();
                    Out::End
                } else {
                    Out::Emit(batched(std::mem::take(&mut self.buffer)))
                }
            }
        }
    }
}

/// The element a `batch` makes of `elements`: a JSON array of values, or the rows together
/// (a record batch, once served). A columnar source allows one `batch`
/// ([`DatasetDef::validate`](super::DatasetDef::validate)), so rows are never batched twice;
/// were they, each batch of rows would stand for its rows.
fn batched(elements: Vec<Element>) -> Element {
    if elements.iter().all(|e| matches!(e, Element::Value(_))) {
        return Element::Value(Value::Array(
            elements.into_iter().filter_map(Element::into_value).collect(),
        ));
    }
    let mut rows: Vec<Row> = Vec::with_capacity(elements.len());
    for element in elements {
        match element {
            Element::Row(row) => rows.push(row),
            Element::Rows(more) => rows.extend(more),
            Element::Value(_) => {}
        }
    }
    Element::Rows(rows)
}

/// `shard(num_shards, index)`: keeps elements `index, index + num_shards, ...`.
#[derive(Debug, Clone)]
pub(super) struct Shard {
    num_shards: NonZeroU64,
    index: u64,
    /// The position of the next input element modulo `num_shards`.
    position: u64,
    done: bool,
}

impl Shard {
    fn resume(&mut self, input: Input) -> Out {
        match input {
            Input::Pull if self.done => Out::End,
            Input::Pull => Out::Pull,
            Input::Item(v) => {
                let position = self.position;
                self.position = position.saturating_add(1) % self.num_shards;
                if position == self.index { Out::Emit(v) } else { Out::Pull }
            }
            Input::End => {
                self.done = true;
                Out::End
            }
        }
    }
}
