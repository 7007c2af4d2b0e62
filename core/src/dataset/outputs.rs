//! Splits whose outputs a producer outside the core makes: a worker that runs a user's
//! function on each split (a Python worker's `fn(split)`) instead of the dataset's pipeline.
//!
//! Such a pipeline ([`Pipeline::external`](super::Pipeline::external)) takes its splits as
//! every pipeline does (DYNAMIC: from the dispatcher; OFF: the source cut as the dispatcher
//! cuts it), and for each asks its caller for the split's outputs ([`Step::NeedOutputs`]
//! (super::Step::NeedOutputs) with an [`OutputsRequest`]), chunk by chunk, as it needs them.
//! The caller runs its producer on the split from the start when a request names a new
//! `seq`, and hands in its next outputs ([`Pipeline::provide_outputs`]
//! (super::Pipeline::provide_outputs)) for a request of the same `seq`. A producer is
//! deterministic per split: output offsets (read positions) count its outputs (rows, for a
//! chunk of rows), so a split resumed part way is produced from its start, and the core drops
//! the outputs consumed before (`skip`) and stops where the rest was consumed (`until`).

use serde_json::Value;

use super::columnar::Chunk;
use crate::position::SplitPositions;

/// A request for a split's next outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputsRequest {
    /// Which split of the task this is, counting from 0: a new `seq` starts the producer on
    /// `split` (dropping the one of the previous split); the same `seq` asks for its next
    /// outputs.
    pub seq: u64,
    /// The split: as the dispatcher hands it out (DYNAMIC) or as the source is cut (OFF).
    pub split: Value,
    /// Where it lies in the source (with the outputs to skip and where to stop), when known.
    pub positions: Option<SplitPositions>,
    /// Outputs of this split handed in so far (the next chunk's first offset).
    pub provided: u64,
}

/// A chunk of a split's outputs: JSON values (one element each) or rows (one element per
/// row). One task's outputs are all of one kind.
#[derive(Debug)]
pub enum Outputs {
    /// JSON values.
    Values(Vec<Value>),
    /// Rows, as a columnar source's chunks carry them.
    Rows(Chunk),
}

impl Outputs {
    /// How many outputs (elements) it holds.
    pub fn len(&self) -> u64 {
        match self {
            Outputs::Values(v) => u64::try_from(v.len()).unwrap_or(u64::MAX),
            Outputs::Rows(c) => c.rows(),
        }
    }

    /// It holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `"JSON values"` or `"rows"`.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Outputs::Values(_) => "JSON values",
            Outputs::Rows(_) => "rows",
        }
    }
}
