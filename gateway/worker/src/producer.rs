//! A worker's own producer of splits' outputs: what a Python worker's `fn(split)` plugs into.
//!
//! A worker started with a [`Producer`] ([`crate::start_with_producer`]) runs the user's code
//! instead of each dataset's pipeline: its tasks take their splits as any task does (DYNAMIC:
//! from the dispatcher, acknowledged only once readers took their elements; OFF: the source
//! cut as the dispatcher cuts it), and for each split the task asks the producer for its
//! outputs, chunk by chunk, as its buffer has room (`shardwise_core::dataset::Outputs`). The
//! worker serves them as it serves any task's elements: JSON, or Arrow for rows, within its
//! reply budget, with origin runs for read positions, behind its auth, TLS and bounds.
//!
//! The producer's calls run on the runtime's blocking threads, one task's at a time: a call
//! may take long (a user's function holding an interpreter lock) without holding up readers.

use serde_json::Value;
use shardwise_core::dataset::Outputs;
use shardwise_core::dispatch::wire::TaskDef;
use shardwise_core::position::SplitPositions;
use shardwise_core::worker::TaskError;

/// Makes the outputs of splits.
pub trait Producer: Send + Sync + 'static {
    /// Starts on `split` of `task` (from its first output: the worker drops the outputs its
    /// `positions.skip` says were consumed before, and stops at `positions.until`). Called on
    /// a blocking thread.
    fn start(
        &self,
        task: &TaskDef,
        split: &Value,
        positions: Option<&SplitPositions>,
    ) -> Result<Box<dyn SplitOutputs>, TaskError>;
}

/// The outputs of one split, as the producer makes them.
pub trait SplitOutputs: Send {
    /// The next outputs, and whether they are the split's last (`(empty, true)` at its end).
    /// One task's outputs are all JSON values or all rows (record batches of one schema).
    /// Called on a blocking thread; an error fails the task with its code and detail.
    fn next(&mut self) -> Result<(Outputs, bool), TaskError>;
}
