//! The split providers of a TensorFlow dataset, read from its serialized `GraphDef` (for
//! DYNAMIC sharding, `processing_mode="distributed_epoch"`).
//!
//! TensorFlow's dispatcher builds the dataset from its graph and asks it for its split
//! providers: a source dataset has its own (`Dataset.range` gives its element values,
//! `from_tensor_slices` its slice indices, `from_tensors` the one index 0, `Dataset.random`
//! indices it never reads), a
//! one-input transformation has its input's (interleave, flat_map and group_by_window
//! included: the datasets their functions make are iterated without providers), and `zip`,
//! `concatenate` and `choose_from_datasets`/`sample_from_datasets` have the providers of their
//! inputs one after the other (the selector first). A source whose `replicate_on_split` is
//! set (`enumerate`'s counter) still has its provider, which its iterator never asks.
//!
//! This module answers the same from the graph alone, without TensorFlow and without IO, for
//! the graphs it can answer exactly: sources over `Const` inputs, and `list_files`
//! (`MatchingFiles` of `Const` patterns), whose files the dispatcher counts through [`Files`]
//! (only under its `--data-root` directories). Anything else is refused with the first op (in
//! TensorFlow's walk from the output) that has no split provider here: never a wrong answer.
//! Every walk is bounded (fan-out, visits, total work), whatever the graph.

use prost::Message;

use super::proto::tensorflow::{DataType, GraphDef, TensorProto};

mod consts;
mod ops;
mod walk;

pub use consts::{ConstError, const_ints};
pub use ops::{ALL_INPUTS, NOT_SHARDABLE, PASS_THROUGH, RANDOM};
use walk::range_len;
pub use walk::split_providers;

/// What DYNAMIC sharding supports, for error messages.
const SUPPORTED: &str = "Dataset.range, from_tensors, from_tensor_slices of constants (sparse and \
                         ragged too) or of list_files, from_list, random, zip, concatenate, choose_from_datasets, sample_from_datasets, \
                         interleave, flat_map, group_by_window, and one-input transformations \
                         such as map, batch, shuffle, repeat, take and skip";

/// At most this many nodes are visited in one walk (a node reached twice counts twice), so
/// that a cyclic or hostile graph ends in an error.
const MAX_VISITS: usize = 100_000;

/// At most this many inputs of one node are read (a `zip` of more datasets is refused).
pub const MAX_FAN_OUT: usize = 10_000;

/// At most this many steps (a node visited or an input read) in one walk: the walk's time is
/// linear in this, whatever the graph.
pub const MAX_WORK: usize = 1_000_000;

/// At most this many `Identity` nodes are followed from a component to its `MatchingFiles`.
const MAX_IDENTITY_CHAIN: usize = 16;

/// The largest `Const` tensor read element by element (`RangeDataset` reads scalars).
const MAX_CONST_ELEMENTS: u64 = 1 << 16;

/// The files `MatchingFiles` (`Dataset.list_files`) names, as the dispatcher can see them.
pub trait Files {
    /// How many files match the glob `patterns` (TensorFlow's `MatchingFiles`: the union of
    /// each pattern's matches), or why the dispatcher does not read them.
    fn count_matching(&self, patterns: &[String]) -> Result<u64, String>;
}

/// No file is readable: every `MatchingFiles` is refused.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFiles;

impl Files for NoFiles {
    fn count_matching(&self, _patterns: &[String]) -> Result<u64, String> {
        Err("the dispatcher reads no files (start it with --data-root DIR to let it glob \
             list_files patterns under DIR)"
            .into())
    }
}

/// One split provider of a dataset: how many splits it has and what split `i` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitProvider {
    /// `Dataset.range(start, stop, step)`: split `i` is the range's element `i`,
    /// `start + i * step`.
    Range {
        /// The first element.
        start: i64,
        /// The bound (excluded).
        stop: i64,
        /// The distance between elements (never 0).
        step: i64,
    },
    /// `from_tensor_slices` (and `random`): split `i` is the index `i`, of `len` splits.
    Index {
        /// The number of slices (the components' first dimension).
        len: i64,
    },
}

impl SplitProvider {
    /// How many splits it gives before `end_of_splits`.
    pub fn num_splits(&self) -> i64 {
        match *self {
            SplitProvider::Range { start, stop, step } => range_len(start, stop, step)
                .and_then(|n| i64::try_from(n).ok())
                .expect("checked when the provider was made"),
            SplitProvider::Index { len } => len,
        }
    }

    /// The value of split `i` (`None` past the last split).
    pub fn split_value(&self, i: i64) -> Option<i64> {
        if i < 0 || i >= self.num_splits() {
            return None;
        }
        Some(match *self {
            // In range: start + i * step lies between start and stop.
            SplitProvider::Range { start, step, .. } => start + i * step,
            SplitProvider::Index { .. } => i,
        })
    }

    /// Split `i` as TensorFlow's dispatcher sends it in `GetSplitResponse.split`: an int64
    /// scalar tensor (`None` past the last split).
    pub fn split(&self, i: i64) -> Option<TensorProto> {
        self.split_value(i).map(int64_scalar)
    }
}

/// An int64 scalar tensor with its value in `tensor_content` (little-endian), the encoding
/// TensorFlow's dispatcher gives its splits.
pub fn int64_scalar(value: i64) -> TensorProto {
    TensorProto {
        dtype: DataType::DtInt64 as i32,
        tensor_shape: Some(Default::default()),
        tensor_content: value.to_le_bytes().to_vec(),
        ..Default::default()
    }
}

/// Why a graph has no split providers here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// The bytes are not a `GraphDef`.
    #[error("the dataset's graph is not a GraphDef: {0}")]
    Decode(String),
    /// No `_Retval` node (the dataset is the last one's input).
    #[error("the dataset's graph has {0} `_Retval` nodes; at least one (the dataset) is expected")]
    Output(usize),
    /// Two nodes with one name.
    #[error("the dataset's graph has two nodes named `{0}`")]
    DuplicateNode(String),
    /// An input names no node.
    #[error("input `{input}` of node `{node}` names no node of the dataset's graph")]
    MissingInput {
        /// The node with the input.
        node: String,
        /// The input as written.
        input: String,
    },
    /// The walk visited more than [`MAX_VISITS`] nodes or took more than [`MAX_WORK`] steps
    /// (a cycle, or a hostile graph).
    #[error(
        "the dataset's graph is cyclic or too large to walk (more than {MAX_VISITS} nodes \
         visited or {MAX_WORK} inputs read)"
    )]
    TooLarge,
    /// A node with more than [`MAX_FAN_OUT`] inputs on the walk.
    #[error(
        "node `{node}` (op `{op}`) has more than {MAX_FAN_OUT} inputs; the dispatcher reads at \
         most {MAX_FAN_OUT}"
    )]
    FanOut {
        /// The node's name.
        node: String,
        /// Its op.
        op: String,
    },
    /// The first op (in TensorFlow's walk from the output) without a split provider here.
    #[error("op `{op}` (node `{node}`) has no split provider in Shardwise: {reason}")]
    Unsupported {
        /// The node's op, e.g. `TextLineDataset`.
        op: String,
        /// The node's name.
        node: String,
        /// Why, in a few words.
        reason: String,
    },
}

impl GraphError {
    /// The op named by the error, when it names one.
    pub fn op(&self) -> Option<&str> {
        match self {
            GraphError::Unsupported { op, .. } | GraphError::FanOut { op, .. } => Some(op),
            _ => None,
        }
    }
}

/// The split providers of the dataset whose serialized `GraphDef` is `graph`, in TensorFlow's
/// order (`list_files` patterns globbed by `files`).
pub fn split_providers_of(
    graph: &[u8],
    files: &dyn Files,
) -> Result<Vec<SplitProvider>, GraphError> {
    let graph = GraphDef::decode(graph).map_err(|e| GraphError::Decode(e.to_string()))?;
    split_providers(&graph, files)
}

#[cfg(test)]
mod tests;
