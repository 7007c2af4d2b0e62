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

use std::collections::HashMap;

use prost::Message;

use super::proto::tensorflow::{AttrValue, DataType, GraphDef, NodeDef, TensorProto, attr_value};

/// The one-input dataset ops whose split providers are their input dataset's (the first
/// input of the node), as TensorFlow's default for a dataset with one input has it. Their
/// other inputs and functions (a map function, a batch size, a seed) change the elements,
/// not where the splits come from: the datasets a function makes (interleave's and flat_map's
/// element datasets, group_by_window's windows) are iterated without the split providers in
/// TensorFlow (its nested iterator contexts drop them).
pub const PASS_THROUGH: &[&str] = &[
    "AssertCardinalityDataset",
    "AssertNextDataset",
    "AssertPrevDataset",
    "BatchDataset",
    "BatchDatasetV2",
    "BytesProducedStatsDataset",
    "CacheDataset",
    "CacheDatasetV2",
    "DenseToSparseBatchDataset",
    "ExperimentalAssertNextDataset",
    "ExperimentalBytesProducedStatsDataset",
    "ExperimentalDenseToSparseBatchDataset",
    "ExperimentalGroupByReducerDataset",
    "ExperimentalGroupByWindowDataset",
    "ExperimentalIgnoreErrorsDataset",
    "ExperimentalLatencyStatsDataset",
    "ExperimentalMapAndBatchDataset",
    "ExperimentalMaxIntraOpParallelismDataset",
    "ExperimentalParseExampleDataset",
    "ExperimentalPrivateThreadPoolDataset",
    "ExperimentalRebatchDataset",
    "ExperimentalScanDataset",
    "ExperimentalSleepDataset",
    "ExperimentalSlidingWindowDataset",
    "ExperimentalTakeWhileDataset",
    "ExperimentalUnbatchDataset",
    "ExperimentalUniqueDataset",
    "FilterDataset",
    "FinalizeDataset",
    "FlatMapDataset",
    "GroupByReducerDataset",
    "GroupByWindowDataset",
    "IgnoreErrorsDataset",
    "InterleaveDataset",
    "LatencyStatsDataset",
    "LegacyParallelInterleaveDatasetV2",
    "MapAndBatchDataset",
    "MapDataset",
    "MaxIntraOpParallelismDataset",
    "ModelDataset",
    "OptionsDataset",
    "PaddedBatchDataset",
    "PaddedBatchDatasetV2",
    "ParallelBatchDataset",
    "ParallelFilterDataset",
    "ParallelInterleaveDataset",
    "ParallelInterleaveDatasetV2",
    "ParallelInterleaveDatasetV3",
    "ParallelInterleaveDatasetV4",
    "ParallelMapDataset",
    "ParallelMapDatasetV2",
    "ParseExampleDataset",
    "ParseExampleDatasetV2",
    "PrefetchDataset",
    "PrivateThreadPoolDataset",
    "RebatchDataset",
    "RebatchDatasetV2",
    "RepeatDataset",
    "ScanDataset",
    "ShardDataset",
    "ShuffleAndRepeatDataset",
    "ShuffleAndRepeatDatasetV2",
    "ShuffleDataset",
    "ShuffleDatasetV2",
    "ShuffleDatasetV3",
    "SkipDataset",
    "SleepDataset",
    "SlidingWindowDataset",
    "TakeDataset",
    "TakeWhileDataset",
    "UnbatchDataset",
    "UniqueDataset",
    "WindowDataset",
];

/// The dataset ops whose split providers are those of all their dataset inputs, one input
/// after the other in input order (TensorFlow's `GetSplitProviders` over `InputDatasets`):
/// `zip`, `concatenate`, and `choose_from_datasets`/`sample_from_datasets`, whose first input
/// is the selector.
pub const ALL_INPUTS: &[&str] = &[
    "ConcatenateDataset",
    "DirectedInterleaveDataset",
    "ExperimentalDirectedInterleaveDataset",
    "ZipDataset",
];

/// The random-number sources (`Dataset.random`, the selector of `sample_from_datasets`): one
/// index split provider of 2^63 - 1 splits, as TensorFlow's (it never reads them).
pub const RANDOM: &[&str] = &["ExperimentalRandomDataset", "RandomDataset", "RandomDatasetV2"];

/// Dataset ops TensorFlow's dispatcher cannot make split providers for either, and why: a
/// DYNAMIC job over them fails on TensorFlow's dispatcher too (`UNIMPLEMENTED`).
pub const NOT_SHARDABLE: &[(&str, &str)] = &[
    (
        "SnapshotDataset",
        "TensorFlow does not implement splitting for snapshot datasets either; read it with \
         OFF or static sharding",
    ),
    (
        "SnapshotDatasetV2",
        "TensorFlow does not implement splitting for snapshot datasets either; read it with \
         OFF or static sharding",
    ),
    (
        "DataServiceDataset",
        "it reads from a tf.data service and has no input dataset and no split provider, on \
         TensorFlow's dispatcher as here",
    ),
    (
        "DataServiceDatasetV2",
        "it reads from a tf.data service and has no input dataset and no split provider, on \
         TensorFlow's dispatcher as here",
    ),
    (
        "DataServiceDatasetV3",
        "it reads from a tf.data service and has no input dataset and no split provider, on \
         TensorFlow's dispatcher as here",
    ),
    (
        "DataServiceDatasetV4",
        "it reads from a tf.data service and has no input dataset and no split provider, on \
         TensorFlow's dispatcher as here",
    ),
];

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
    /// No `_Retval` node, or more than one.
    #[error("the dataset's graph has {0} `_Retval` nodes; exactly one (the dataset) is expected")]
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

/// The split providers of the dataset `graph` computes, in TensorFlow's order: depth first
/// from the `_Retval` node through each dataset op's dataset inputs, in input order.
///
/// The walk is bounded whatever the graph: at most [`MAX_FAN_OUT`] inputs of a node are read,
/// at most [`MAX_VISITS`] nodes visited and [`MAX_WORK`] steps taken in all.
pub fn split_providers(
    graph: &GraphDef,
    files: &dyn Files,
) -> Result<Vec<SplitProvider>, GraphError> {
    let mut nodes = HashMap::with_capacity(graph.node.len());
    for node in &graph.node {
        if nodes.insert(node.name.as_str(), node).is_some() {
            return Err(GraphError::DuplicateNode(node.name.clone()));
        }
    }
    let outputs: Vec<&NodeDef> = graph.node.iter().filter(|n| n.op == "_Retval").collect();
    let [output] = outputs[..] else {
        return Err(GraphError::Output(outputs.len()));
    };
    let mut walk = Walk { nodes, work: 0 };

    let mut providers = Vec::new();
    // Nodes still to walk, the next one last.
    let mut stack = vec![walk.input(output, 0)?];
    let mut visits = 0;
    while let Some(node) = stack.pop() {
        visits += 1;
        walk.step(1)?;
        if visits > MAX_VISITS {
            return Err(GraphError::TooLarge);
        }
        match node.op.as_str() {
            "RangeDataset" => {
                let [start, stop, step] = [0, 1, 2].map(|i| walk.input(node, i));
                let (start, stop, step) = (
                    const_scalar(node, start?)?,
                    const_scalar(node, stop?)?,
                    const_scalar(node, step?)?,
                );
                if step == 0 {
                    return Err(unsupported(node, "its step is 0".into()));
                }
                match range_len(start, stop, step).map(i64::try_from) {
                    Some(Ok(_)) => providers.push(SplitProvider::Range { start, stop, step }),
                    _ => {
                        return Err(unsupported(node, "it has more than 2^63 - 1 elements".into()));
                    }
                }
            }
            "TensorSliceDataset" => {
                let mut len = None;
                for component in walk.inputs(node)? {
                    let n = walk.slice_count(node, component, files)?;
                    if len.is_some_and(|len| len != n) {
                        return Err(unsupported(
                            node,
                            "its components differ in their first dimension".into(),
                        ));
                    }
                    len = Some(n);
                }
                let Some(len) = len else {
                    return Err(unsupported(node, "it has no components".into()));
                };
                providers.push(SplitProvider::Index { len });
            }
            op if RANDOM.contains(&op) => providers.push(SplitProvider::Index { len: i64::MAX }),
            // `from_tensors`: one element, one split.
            "TensorDataset" => providers.push(SplitProvider::Index { len: 1 }),
            // `tf.data.experimental.from_list`: its inputs are the elements' components, one
            // element after the other; one index split per element.
            "ListDataset" => {
                let components = list_attr_len(node, "output_types");
                if components == 0 {
                    return Err(unsupported(node, "it has no `output_types`".into()));
                }
                let tensors = walk.inputs(node)?.len();
                // At most MAX_FAN_OUT inputs: the count fits.
                providers.push(SplitProvider::Index { len: (tensors / components) as i64 });
            }
            op if ALL_INPUTS.contains(&op) => {
                let inputs = walk.inputs(node)?;
                // Walked in input order: the first input's providers come first.
                stack.extend(inputs.into_iter().rev());
            }
            op if PASS_THROUGH.contains(&op) => stack.push(walk.input(node, 0)?),
            op => {
                if let Some((_, why)) = NOT_SHARDABLE.iter().find(|(o, _)| *o == op) {
                    return Err(unsupported(node, (*why).to_owned()));
                }
                return Err(unsupported(
                    node,
                    format!("DYNAMIC sharding here supports {SUPPORTED}"),
                ));
            }
        }
    }
    Ok(providers)
}

/// A walk's graph and the work it did so far.
struct Walk<'g> {
    nodes: HashMap<&'g str, &'g NodeDef>,
    work: usize,
}

impl<'g> Walk<'g> {
    /// Counts `n` steps of work; an error past [`MAX_WORK`].
    fn step(&mut self, n: usize) -> Result<(), GraphError> {
        self.work = self.work.saturating_add(n);
        if self.work > MAX_WORK { Err(GraphError::TooLarge) } else { Ok(()) }
    }

    fn resolve(&self, node: &NodeDef, name: &str) -> Result<&'g NodeDef, GraphError> {
        self.nodes.get(node_name(name)).copied().ok_or_else(|| GraphError::MissingInput {
            node: node.name.clone(),
            input: name.to_owned(),
        })
    }

    /// Data input `i` of `node` (`i` is small: at most 2).
    fn input(&mut self, node: &NodeDef, i: usize) -> Result<&'g NodeDef, GraphError> {
        self.step(i + 1)?;
        match data_inputs(node).nth(i) {
            Some(name) => self.resolve(node, name),
            None => Err(unsupported(node, format!("it has no input {i}"))),
        }
    }

    /// Every data input of `node`, in order: at most [`MAX_FAN_OUT`].
    fn inputs(&mut self, node: &NodeDef) -> Result<Vec<&'g NodeDef>, GraphError> {
        let mut out = Vec::new();
        for name in data_inputs(node) {
            if out.len() == MAX_FAN_OUT {
                return Err(GraphError::FanOut { node: node.name.clone(), op: node.op.clone() });
            }
            self.step(1)?;
            out.push(self.resolve(node, name)?);
        }
        Ok(out)
    }

    /// The number of slices of a component of `user` (its first dimension): a `Const`, or
    /// the files `list_files` names (`MatchingFiles` of `Const` patterns, through
    /// `Identity` nodes).
    fn slice_count(
        &mut self,
        user: &NodeDef,
        component: &'g NodeDef,
        files: &dyn Files,
    ) -> Result<i64, GraphError> {
        let mut node = component;
        for _ in 0..MAX_IDENTITY_CHAIN {
            match node.op.as_str() {
                "Identity" => node = self.input(node, 0)?,
                "MatchingFiles" => {
                    let pattern = self.input(node, 0)?;
                    let patterns = const_strings(user, pattern)?;
                    let count = files.count_matching(&patterns).map_err(|why| {
                        unsupported(
                            node,
                            format!(
                                "the dispatcher cannot glob {patterns:?} for `{}`: {why}",
                                user.name
                            ),
                        )
                    })?;
                    return i64::try_from(count)
                        .map_err(|_| unsupported(node, "it matches too many files".into()));
                }
                // `from_tensor_slices(SparseTensor)`: the slices are the rows of its dense
                // shape's first dimension.
                "SerializeManySparse" => {
                    let dense_shape = self.input(node, 2)?;
                    let dims = const_ints(const_tensor(node, dense_shape)?)
                        .map_err(|e| unsupported(node, format!("its dense shape {e}")))?;
                    return match dims.first() {
                        Some(&rows) if rows >= 0 => Ok(rows),
                        _ => Err(unsupported(node, "its dense shape has no rows".into())),
                    };
                }
                // `from_tensor_slices(RaggedTensor)`: one slice per row, one row per pair of
                // its outer row splits.
                "RaggedTensorToVariant" => {
                    let batched = matches!(
                        node.attr.get("batched_input"),
                        Some(AttrValue { value: Some(attr_value::Value::B(true)) })
                    );
                    if !batched {
                        return Err(unsupported(node, "it is not `batched_input`".into()));
                    }
                    let splits = self.input(node, 0)?;
                    let splits = const_ints(const_tensor(node, splits)?)
                        .map_err(|e| unsupported(node, format!("its row splits {e}")))?;
                    return match splits.len().checked_sub(1) {
                        Some(rows) => Ok(rows as i64),
                        None => Err(unsupported(node, "its row splits are empty".into())),
                    };
                }
                _ => return slice_count(user, node),
            }
        }
        Err(unsupported(
            user,
            format!("its component `{}` is a long chain of `Identity` nodes", component.name),
        ))
    }
}

/// The strings of a `Const` string scalar or vector input of `user` (`MatchingFiles`'
/// patterns).
fn const_strings(user: &NodeDef, node: &NodeDef) -> Result<Vec<String>, GraphError> {
    let tensor = const_tensor(user, node)?;
    let bad = |what: &str| unsupported(user, format!("its input `{}` {what}", node.name));
    if tensor.dtype != DataType::DtString as i32 {
        return Err(bad("is not a string tensor"));
    }
    let shape = tensor.tensor_shape.clone().unwrap_or_default();
    let n = match shape.dim[..] {
        _ if shape.unknown_rank => return Err(bad("has an unknown shape")),
        [] => 1,
        [ref d] => usize::try_from(d.size).map_err(|_| bad("has an unknown size"))?,
        _ => return Err(bad("is neither a scalar nor a vector")),
    };
    if n as u64 > MAX_CONST_ELEMENTS || tensor.string_val.len() > n {
        return Err(bad("has more patterns than the dispatcher reads or its shape holds"));
    }
    let values: Vec<String> = tensor
        .string_val
        .iter()
        .map(|b| String::from_utf8(b.clone()).map_err(|_| bad("is not UTF-8")))
        .collect::<Result<_, _>>()?;
    // Fewer values than elements repeat the last one (none: empty strings).
    let last = values.last().cloned().unwrap_or_default();
    let missing = n - values.len();
    Ok(values.into_iter().chain(std::iter::repeat_n(last, missing)).collect())
}

/// The length of a list attribute of `node` (0 when it has none).
fn list_attr_len(node: &NodeDef, name: &str) -> usize {
    match node.attr.get(name) {
        Some(AttrValue { value: Some(attr_value::Value::List(list)) }) => {
            list.r#type.len().max(list.shape.len())
        }
        _ => 0,
    }
}

fn unsupported(node: &NodeDef, reason: String) -> GraphError {
    GraphError::Unsupported { op: node.op.clone(), node: node.name.clone(), reason }
}

/// A node's data inputs (control inputs, `^name`, come last and are skipped).
fn data_inputs(node: &NodeDef) -> impl Iterator<Item = &str> {
    node.input.iter().map(String::as_str).filter(|i| !i.starts_with('^'))
}

/// The node an input names: `name` or `name:output`.
fn node_name(input: &str) -> &str {
    match input.rsplit_once(':') {
        Some((name, index)) if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => input,
    }
}

/// The number of elements of `range(start, stop, step)` (`None` for step 0).
fn range_len(start: i64, stop: i64, step: i64) -> Option<i128> {
    let (start, stop, step) = (i128::from(start), i128::from(stop), i128::from(step));
    match step {
        0 => None,
        s if s > 0 => Some(if stop <= start { 0 } else { (stop - start + s - 1) / s }),
        s => Some(if stop >= start { 0 } else { (start - stop + (-s) - 1) / (-s) }),
    }
}

/// The tensor of a `Const` node (its `value` attribute).
fn const_tensor<'g>(user: &NodeDef, node: &'g NodeDef) -> Result<&'g TensorProto, GraphError> {
    if node.op != "Const" {
        return Err(unsupported(
            user,
            format!("its input `{}` is a `{}`, not a constant", node.name, node.op),
        ));
    }
    match node.attr.get("value") {
        Some(AttrValue { value: Some(attr_value::Value::Tensor(t)) }) => Ok(t),
        _ => Err(unsupported(user, format!("its input `{}` has no tensor value", node.name))),
    }
}

/// The integer scalar of a `Const` input of `user`.
fn const_scalar(user: &NodeDef, node: &NodeDef) -> Result<i64, GraphError> {
    let tensor = const_tensor(user, node)?;
    let bad = |what: String| unsupported(user, format!("its input `{}` {what}", node.name));
    if tensor.tensor_shape.as_ref().is_some_and(|s| s.unknown_rank || !s.dim.is_empty()) {
        return Err(bad("is not a scalar".into()));
    }
    match const_ints(tensor).map_err(|e| bad(e.to_string()))?[..] {
        [value] => Ok(value),
        _ => Err(bad("is not a scalar".into())),
    }
}

/// The number of slices of a `Const` component of `user` (its first dimension).
fn slice_count(user: &NodeDef, node: &NodeDef) -> Result<i64, GraphError> {
    let tensor = const_tensor(user, node)?;
    let bad = |what: &str| unsupported(user, format!("its component `{}` {what}", node.name));
    match &tensor.tensor_shape {
        Some(shape) if !shape.unknown_rank => match shape.dim.first() {
            Some(dim) if dim.size >= 0 => Ok(dim.size),
            Some(_) => Err(bad("has an unknown first dimension")),
            None => Err(bad("is a scalar")),
        },
        _ => Err(bad("has an unknown shape")),
    }
}

/// Why a `Const` tensor is not a usable integer scalar or vector (each text completes "its
/// input `NAME` ...").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConstError {
    /// Neither int64 nor int32.
    #[error("has dtype {0}, not int64 or int32")]
    Dtype(i32),
    /// Of rank 2 or more, or of unknown rank.
    #[error("is neither a scalar nor a vector")]
    Rank,
    /// A dimension of unknown size.
    #[error("has an unknown size")]
    UnknownSize,
    /// More elements than the dispatcher reads.
    #[error("has more than {MAX_CONST_ELEMENTS} elements")]
    TooLarge,
    /// `tensor_content` does not hold exactly the shape's elements.
    #[error("has content of the wrong length for its shape")]
    ContentLength,
    /// More typed values than the shape holds.
    #[error("has more values than its shape holds")]
    TooManyValues,
}

/// The values of an int64 or int32 tensor of rank 0 or 1, as TensorFlow reads them: from
/// `tensor_content` (little-endian) when set, else from the typed field, where fewer values
/// than elements repeat the last one (none: zeros).
pub fn const_ints(tensor: &TensorProto) -> Result<Vec<i64>, ConstError> {
    let width = match DataType::try_from(tensor.dtype) {
        Ok(DataType::DtInt64) => 8,
        Ok(DataType::DtInt32) => 4,
        _ => return Err(ConstError::Dtype(tensor.dtype)),
    };
    let shape = tensor.tensor_shape.clone().unwrap_or_default();
    if shape.unknown_rank || shape.dim.len() > 1 {
        return Err(ConstError::Rank);
    }
    let n = match shape.dim.first() {
        None => 1,
        Some(d) => u64::try_from(d.size).map_err(|_| ConstError::UnknownSize)?,
    };
    if n > MAX_CONST_ELEMENTS {
        return Err(ConstError::TooLarge);
    }
    let n = n as usize;
    if !tensor.tensor_content.is_empty() {
        if tensor.tensor_content.len() != n * width {
            return Err(ConstError::ContentLength);
        }
        return Ok(tensor
            .tensor_content
            .chunks_exact(width)
            .map(|b| match *b {
                [a, b, c, d] => i64::from(i32::from_le_bytes([a, b, c, d])),
                _ => i64::from_le_bytes(b.try_into().expect("8 bytes")),
            })
            .collect());
    }
    let values: Vec<i64> = if width == 8 {
        tensor.int64_val.clone()
    } else {
        tensor.int_val.iter().map(|&v| i64::from(v)).collect()
    };
    if values.len() > n {
        return Err(ConstError::TooManyValues);
    }
    let last = values.last().copied().unwrap_or(0);
    Ok(values.iter().copied().chain(std::iter::repeat_n(last, n - values.len())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tf::proto::tensorflow::{
        FunctionDef, FunctionDefLibrary, NameAttrList, OpDef, TensorShapeProto, tensor_shape_proto,
    };

    fn node(name: &str, op: &str, inputs: &[&str]) -> NodeDef {
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: inputs.iter().map(|&i| i.to_owned()).collect(),
            ..Default::default()
        }
    }

    fn with_tensor(mut node: NodeDef, tensor: TensorProto) -> NodeDef {
        node.attr
            .insert("value".into(), AttrValue { value: Some(attr_value::Value::Tensor(tensor)) });
        node
    }

    fn shape(dims: &[i64]) -> Option<TensorShapeProto> {
        Some(TensorShapeProto {
            dim: dims
                .iter()
                .map(|&size| tensor_shape_proto::Dim { size, name: String::new() })
                .collect(),
            unknown_rank: false,
        })
    }

    /// A `Const` int64 scalar, as TensorFlow writes it (`int64_val`).
    fn scalar(name: &str, value: i64) -> NodeDef {
        with_tensor(
            node(name, "Const", &[]),
            TensorProto {
                dtype: DataType::DtInt64 as i32,
                tensor_shape: shape(&[]),
                int64_val: vec![value],
                ..Default::default()
            },
        )
    }

    /// `range(start, stop, step)` as the nodes `NAME/start`, `NAME/stop`, `NAME/step`, `NAME`.
    fn range(name: &str, start: i64, stop: i64, step: i64) -> Vec<NodeDef> {
        let [a, b, c] = ["start", "stop", "step"].map(|s| format!("{name}/{s}"));
        vec![
            scalar(&a, start),
            scalar(&b, stop),
            scalar(&c, step),
            node(name, "RangeDataset", &[&a, &b, &c]),
        ]
    }

    fn graph(mut nodes: Vec<NodeDef>, output: &str) -> GraphDef {
        nodes.push(node("dataset", "_Retval", &[output]));
        GraphDef { node: nodes, library: None }
    }

    fn split_providers_no_files(graph: &GraphDef) -> Result<Vec<SplitProvider>, GraphError> {
        split_providers(graph, &NoFiles)
    }

    fn splits(provider: &SplitProvider) -> Vec<i64> {
        (0..provider.num_splits()).map(|i| provider.split_value(i).expect("split")).collect()
    }

    fn unsupported_op(graph: &GraphDef) -> String {
        let err = split_providers_no_files(graph).expect_err("refused");
        err.op().unwrap_or_else(|| panic!("names no op: {err}")).to_owned()
    }

    #[test]
    fn range_splits_are_its_elements() {
        let providers =
            split_providers_no_files(&graph(range("r", 5, 20, 5), "r")).expect("providers");
        assert_eq!(providers, [SplitProvider::Range { start: 5, stop: 20, step: 5 }]);
        assert_eq!(splits(&providers[0]), [5, 10, 15]);
        assert_eq!(providers[0].split(3), None);
        assert_eq!(providers[0].split(-1), None);

        let one = |start, stop, step| {
            let providers = split_providers_no_files(&graph(range("r", start, stop, step), "r:0"));
            splits(&providers.expect("providers")[0])
        };
        assert_eq!(one(0, 10, 1), (0..10).collect::<Vec<_>>());
        assert_eq!(one(10, 0, -3), [10, 7, 4, 1]);
        assert_eq!(one(0, 10, 4), [0, 4, 8]);
        assert_eq!(one(5, 5, 1), Vec::<i64>::new());
        assert_eq!(one(5, 0, 1), Vec::<i64>::new());
        assert_eq!(one(i64::MAX - 1, i64::MAX, 7), [i64::MAX - 1]);
        assert_eq!(one(i64::MIN, i64::MIN + 3, 2), [i64::MIN, i64::MIN + 2]);
    }

    #[test]
    fn a_split_is_an_int64_scalar_tensor() {
        let split = SplitProvider::Range { start: 5, stop: 20, step: 5 }.split(1).expect("split");
        assert_eq!(split.dtype, DataType::DtInt64 as i32);
        assert_eq!(split.tensor_shape, Some(TensorShapeProto::default()));
        assert_eq!(split.tensor_content, 10i64.to_le_bytes());
        assert_eq!(const_ints(&split), Ok(vec![10]));
        let index = SplitProvider::Index { len: 3 };
        assert_eq!(splits(&index), [0, 1, 2]);
        assert_eq!(const_ints(&index.split(2).expect("split")), Ok(vec![2]));
        assert_eq!(index.split(3), None);
    }

    #[test]
    fn a_range_that_cannot_be_split_is_refused() {
        assert_eq!(unsupported_op(&graph(range("r", 0, 10, 0), "r")), "RangeDataset");
        let too_long = graph(range("r", i64::MIN, i64::MAX, 1), "r");
        assert_eq!(unsupported_op(&too_long), "RangeDataset");
        // A bound that is not a constant.
        let mut nodes = range("r", 0, 10, 1);
        nodes[1] = node("r/stop", "Placeholder", &[]);
        let err = split_providers_no_files(&graph(nodes, "r")).expect_err("refused");
        assert_eq!(err.op(), Some("RangeDataset"));
        assert!(err.to_string().contains("`r/stop` is a `Placeholder`"), "{err}");
        // A bound that is not a scalar.
        let mut nodes = range("r", 0, 10, 1);
        nodes[1] = with_tensor(
            node("r/stop", "Const", &[]),
            TensorProto {
                dtype: DataType::DtInt64 as i32,
                tensor_shape: shape(&[2]),
                int64_val: vec![1, 2],
                ..Default::default()
            },
        );
        assert_eq!(unsupported_op(&graph(nodes, "r")), "RangeDataset");
        // replicate_on_split (enumerate's counter): TensorFlow still gives the provider (its
        // iterator never asks it).
        let mut nodes = range("r", 0, 10, 1);
        nodes[3].attr.insert(
            "replicate_on_split".into(),
            AttrValue { value: Some(attr_value::Value::B(true)) },
        );
        let providers = split_providers_no_files(&graph(nodes, "r")).expect("providers");
        assert_eq!(providers, [SplitProvider::Range { start: 0, stop: 10, step: 1 }]);
    }

    #[test]
    fn tensor_slices_split_by_index() {
        // from_tensor_slices([7, 8, 9]) as TensorFlow writes it: int32 in tensor_content.
        let values = with_tensor(
            node("c", "Const", &[]),
            TensorProto {
                dtype: DataType::DtInt32 as i32,
                tensor_shape: shape(&[3]),
                tensor_content: [7i32, 8, 9].iter().flat_map(|v| v.to_le_bytes()).collect(),
                ..Default::default()
            },
        );
        let strings = with_tensor(
            node("s", "Const", &[]),
            TensorProto {
                dtype: DataType::DtString as i32,
                tensor_shape: shape(&[3, 2]),
                ..Default::default()
            },
        );
        let slices = node("t", "TensorSliceDataset", &["c", "s"]);
        let providers =
            split_providers_no_files(&graph(vec![values.clone(), strings, slices], "t"))
                .expect("providers");
        assert_eq!(providers, [SplitProvider::Index { len: 3 }]);
        assert_eq!(splits(&providers[0]), [0, 1, 2]);

        // Components that disagree, a scalar component, a component that is not constant.
        let short = with_tensor(
            node("s", "Const", &[]),
            TensorProto {
                dtype: DataType::DtFloat as i32,
                tensor_shape: shape(&[2]),
                ..Default::default()
            },
        );
        let slices = node("t", "TensorSliceDataset", &["c", "s"]);
        assert_eq!(unsupported_op(&graph(vec![values, short, slices], "t")), "TensorSliceDataset");
        let slices = node("t", "TensorSliceDataset", &["c"]);
        assert_eq!(
            unsupported_op(&graph(vec![scalar("c", 1), slices.clone()], "t")),
            "TensorSliceDataset"
        );
        let placeholder = node("c", "Placeholder", &[]);
        assert_eq!(unsupported_op(&graph(vec![placeholder, slices], "t")), "TensorSliceDataset");
    }

    #[test]
    fn zip_gives_its_inputs_providers_in_input_order() {
        let mut nodes = range("a", 0, 2, 1);
        nodes.extend(range("b", 0, 3, 1));
        nodes.extend(range("c", 7, 8, 1));
        nodes.push(node("inner", "ZipDataset", &["b", "c"]));
        nodes.push(node("zip", "ZipDataset", &["a", "inner:0"]));
        let providers = split_providers_no_files(&graph(nodes, "zip")).expect("providers");
        let all: Vec<Vec<i64>> = providers.iter().map(splits).collect();
        assert_eq!(all, [vec![0, 1], vec![0, 1, 2], vec![7]]);
    }

    #[test]
    fn transformations_pass_through_to_their_input() {
        let mut nodes = range("r", 0, 10, 1);
        let mut last = "r".to_owned();
        for (i, op) in PASS_THROUGH.iter().enumerate() {
            let name = format!("{op}/_{i}");
            nodes.push(scalar(&format!("arg{i}"), 2));
            nodes.push(node(&name, op, &[&last, &format!("arg{i}"), "^r/start"]));
            last = name;
        }
        let providers = split_providers_no_files(&graph(nodes, &last)).expect("providers");
        assert_eq!(providers, [SplitProvider::Range { start: 0, stop: 10, step: 1 }]);
    }

    #[test]
    fn ops_without_a_split_provider_are_refused_by_name() {
        // A source other than range and from_tensor_slices.
        let mut nodes = vec![scalar("files", 0), node("tfrecord", "TFRecordDataset", &["files"])];
        nodes.push(node("map", "MapDataset", &["tfrecord"]));
        let err = split_providers_no_files(&graph(nodes, "map")).expect_err("refused");
        assert_eq!(err.op(), Some("TFRecordDataset"));
        assert!(err.to_string().contains("node `tfrecord`"), "{err}");

        // Ops TensorFlow cannot shard either, and ops this module does not know.
        for op in ["SqlDataset", "Identity", "TextLineDataset", "DataServiceDatasetV4"] {
            let mut nodes = range("r", 0, 3, 1);
            nodes.push(node("x", op, &["r"]));
            assert_eq!(unsupported_op(&graph_of(nodes, "x")), op);
        }
        // The first refused op in TensorFlow's walk: zip's first input before its second.
        let mut nodes = vec![scalar("f", 0), node("first", "TextLineDataset", &["f"])];
        nodes.push(node("second", "FixedLengthRecordDataset", &["f"]));
        nodes.push(node("zip", "ZipDataset", &["first", "second"]));
        assert_eq!(unsupported_op(&graph_of(nodes, "zip")), "TextLineDataset");
    }

    /// An int64 vector `Const`.
    fn vector(name: &str, values: &[i64]) -> NodeDef {
        with_tensor(
            node(name, "Const", &[]),
            TensorProto {
                dtype: DataType::DtInt64 as i32,
                tensor_shape: shape(&[values.len() as i64]),
                int64_val: values.to_vec(),
                ..Default::default()
            },
        )
    }

    /// `from_tensor_slices` of a sparse tensor of dense shape [3, 3] (`SerializeManySparse`
    /// of its indices, values and dense shape) and of a ragged tensor of 3 rows
    /// (`RaggedTensorToVariant` of its row splits and values): 3 splits each.
    #[test]
    fn sparse_and_ragged_slices_split_by_row() {
        let mut nodes = vec![vector("indices", &[0, 0, 1, 1]), vector("values", &[1, 2])];
        nodes.push(vector("dense_shape", &[3, 3]));
        nodes.push(node("sparse", "SerializeManySparse", &["indices", "values", "dense_shape"]));
        nodes.push(node("sparse_slices", "TensorSliceDataset", &["sparse"]));
        let providers = split_providers_no_files(&graph(nodes.clone(), "sparse_slices"));
        assert_eq!(providers.expect("sparse"), [SplitProvider::Index { len: 3 }]);

        nodes.push(vector("splits", &[0, 1, 3, 6]));
        let mut ragged = node("ragged", "RaggedTensorToVariant", &["splits", "values"]);
        ragged
            .attr
            .insert("batched_input".into(), AttrValue { value: Some(attr_value::Value::B(true)) });
        nodes.push(ragged.clone());
        nodes.push(node("ragged_slices", "TensorSliceDataset", &["ragged"]));
        let providers = split_providers_no_files(&graph(nodes.clone(), "ragged_slices"));
        assert_eq!(providers.expect("ragged"), [SplitProvider::Index { len: 3 }]);

        // Not batched, computed sizes, no rows: refused, naming the op.
        let last = nodes.len() - 2;
        ragged.attr.clear();
        nodes[last] = ragged;
        assert_eq!(unsupported_op(&graph(nodes.clone(), "ragged_slices")), "RaggedTensorToVariant");
        nodes[2] = node("dense_shape", "Shape", &["values"]);
        assert_eq!(unsupported_op(&graph(nodes.clone(), "sparse_slices")), "SerializeManySparse");
        nodes[2] = vector("dense_shape", &[]);
        assert_eq!(unsupported_op(&graph(nodes, "sparse_slices")), "SerializeManySparse");
    }

    /// `tf.data.experimental.from_list([(0, 0), (1, -1), (2, -2)])`: six tensors, two
    /// components per element, three splits.
    #[test]
    fn from_list_has_one_index_split_per_element() {
        let mut nodes: Vec<NodeDef> = (0..6).map(|i| scalar(&format!("t{i}"), i)).collect();
        let mut list = node("list", "ListDataset", &["t0", "t1", "t2", "t3", "t4", "t5"]);
        let types = attr_value::ListValue {
            r#type: vec![DataType::DtInt64 as i32; 2],
            ..Default::default()
        };
        list.attr.insert(
            "output_types".into(),
            AttrValue { value: Some(attr_value::Value::List(types)) },
        );
        nodes.push(list.clone());
        nodes.push(node("map", "MapDataset", &["list"]));
        let providers = split_providers_no_files(&graph(nodes, "map")).expect("providers");
        assert_eq!(providers, [SplitProvider::Index { len: 3 }]);
        // Without its component types there is no element count: refused, naming it.
        list.attr.clear();
        let mut nodes: Vec<NodeDef> = (0..6).map(|i| scalar(&format!("t{i}"), i)).collect();
        nodes.push(list);
        assert_eq!(unsupported_op(&graph(nodes, "list")), "ListDataset");
    }

    /// TensorFlow's dispatcher has no split providers for a snapshot (its op says splitting is
    /// not implemented) nor for a dataset read from a tf.data service (no input dataset):
    /// refused with that reason, wherever they are in the graph.
    #[test]
    fn snapshot_and_data_service_datasets_are_refused_as_tensorflow_refuses_them() {
        for (op, why) in [
            ("SnapshotDatasetV2", "TensorFlow does not implement splitting for snapshot"),
            ("SnapshotDataset", "TensorFlow does not implement splitting for snapshot"),
            ("DataServiceDatasetV4", "reads from a tf.data service"),
            ("DataServiceDatasetV3", "reads from a tf.data service"),
        ] {
            let mut nodes = range("r", 0, 3, 1);
            nodes.push(node("x", op, &["r"]));
            nodes.push(node("map", "ParallelMapDatasetV2", &["x"]));
            nodes.extend(range("b", 0, 2, 1));
            nodes.push(node("concat", "ConcatenateDataset", &["b", "map"]));
            let err = split_providers_no_files(&graph(nodes, "concat")).expect_err(op);
            assert_eq!(err.op(), Some(op));
            assert!(err.to_string().contains(why), "{err}");
        }
    }

    /// `from_tensor_slices(file names).interleave(TFRecordDataset)`: the function's datasets
    /// are the files' readers; the splits are the file indices.
    #[test]
    fn interleave_flat_map_and_group_by_window_give_their_inputs_providers() {
        for op in [
            "InterleaveDataset",
            "ParallelInterleaveDatasetV4",
            "LegacyParallelInterleaveDatasetV2",
            "FlatMapDataset",
            "GroupByWindowDataset",
            "GroupByReducerDataset",
        ] {
            let names = with_tensor(
                node("names", "Const", &[]),
                TensorProto {
                    dtype: DataType::DtString as i32,
                    tensor_shape: shape(&[4]),
                    string_val: ["a", "b", "c", "d"].map(|s| s.as_bytes().to_vec()).to_vec(),
                    ..Default::default()
                },
            );
            let mut nodes = vec![names, node("files", "TensorSliceDataset", &["names"])];
            nodes.push(node("shuffled", "ShuffleDatasetV3", &["files", "c", "s", "s2", "g"]));
            let mut x = node("x", op, &["shuffled", "c", "c"]);
            let func = NameAttrList { name: "read_one_file".into(), attr: Default::default() };
            x.attr.insert("f".into(), AttrValue { value: Some(attr_value::Value::Func(func)) });
            nodes.push(x);
            nodes.extend([scalar("c", 2), scalar("s", 0), scalar("s2", 0), scalar("g", 0)]);
            let mut g = graph(nodes, "x");
            g.library = Some(FunctionDefLibrary {
                function: vec![FunctionDef {
                    signature: Some(OpDef { name: "read_one_file".into() }),
                    node_def: vec![node("lines", "TFRecordDataset", &["args_0"])],
                }],
            });
            let providers = split_providers_no_files(&g).expect(op);
            assert_eq!(providers, [SplitProvider::Index { len: 4 }], "{op}");
        }
    }

    #[test]
    fn concatenate_and_directed_interleave_give_every_inputs_providers_in_order() {
        let mut nodes = range("a", 0, 2, 1);
        nodes.extend(range("b", 10, 13, 1));
        nodes.push(node("concat", "ConcatenateDataset", &["a", "b"]));
        let providers = split_providers_no_files(&graph(nodes.clone(), "concat")).expect("concat");
        let all: Vec<Vec<i64>> = providers.iter().map(splits).collect();
        assert_eq!(all, [vec![0, 1], vec![10, 11, 12]]);

        // choose_from_datasets(datasets=[a, b], choice_dataset=selector): the selector first.
        nodes.extend(range("selector", 0, 2, 1));
        nodes.push(node("choose", "DirectedInterleaveDataset", &["selector", "a", "b"]));
        let providers = split_providers_no_files(&graph(nodes.clone(), "choose")).expect("choose");
        let all: Vec<Vec<i64>> = providers.iter().map(splits).collect();
        assert_eq!(all, [vec![0, 1], vec![0, 1], vec![10, 11, 12]]);

        // sample_from_datasets: its selector is made from Dataset.random.
        nodes.push(node("seed", "Const", &[]));
        nodes.push(node("random", "RandomDatasetV2", &["seed", "seed", "seed"]));
        nodes.push(node("logits", "MapDataset", &["random"]));
        nodes.push(node("sample", "DirectedInterleaveDataset", &["logits", "a", "b"]));
        let providers = split_providers_no_files(&graph(nodes, "sample")).expect("sample");
        assert_eq!(providers[0], SplitProvider::Index { len: i64::MAX });
        assert_eq!(providers[0].split_value(i64::MAX - 1), Some(i64::MAX - 1));
        assert_eq!(
            &providers[1..],
            &split_providers_no_files(&graph(range("a", 0, 2, 1), "a"))
                .unwrap()
                .into_iter()
                .chain([SplitProvider::Range { start: 10, stop: 13, step: 1 }])
                .collect::<Vec<_>>()[..]
        );
    }

    /// Counts the patterns' "files" from a fixed list, or refuses.
    struct FakeFiles(Result<u64, String>);

    impl Files for FakeFiles {
        fn count_matching(&self, patterns: &[String]) -> Result<u64, String> {
            assert_eq!(patterns, ["/data/*.txt"]);
            self.0.clone()
        }
    }

    /// `Dataset.list_files(pattern)` as TensorFlow builds it: `MatchingFiles` of a `Const`,
    /// through an `Identity` with a control input on the non-empty assertion.
    fn list_files_graph() -> GraphDef {
        let pattern = with_tensor(
            node("list_files/file_pattern", "Const", &[]),
            TensorProto {
                dtype: DataType::DtString as i32,
                tensor_shape: shape(&[]),
                string_val: vec![b"/data/*.txt".to_vec()],
                ..Default::default()
            },
        );
        let nodes = vec![
            pattern,
            node("list_files/MatchingFiles", "MatchingFiles", &["list_files/file_pattern"]),
            node("list_files/assert", "Assert", &["list_files/MatchingFiles"]),
            node(
                "list_files/Identity",
                "Identity",
                &["list_files/MatchingFiles", "^list_files/assert"],
            ),
            node("slices", "TensorSliceDataset", &["list_files/Identity"]),
            scalar("buffer", 3),
            node("shuffle", "ShuffleDatasetV3", &["slices", "buffer"]),
        ];
        graph(nodes, "shuffle")
    }

    #[test]
    fn list_files_counts_the_files_it_may_read() {
        let g = list_files_graph();
        let providers = split_providers(&g, &FakeFiles(Ok(5))).expect("providers");
        assert_eq!(providers, [SplitProvider::Index { len: 5 }]);
        let err = split_providers(&g, &FakeFiles(Err("outside every --data-root".into())))
            .expect_err("refused");
        assert_eq!(err.op(), Some("MatchingFiles"));
        assert!(err.to_string().contains("outside every --data-root"), "{err}");
        let err = split_providers(&g, &NoFiles).expect_err("refused");
        assert!(err.to_string().contains("--data-root"), "{err}");
        // A pattern that is computed, not a constant, is refused naming the reader.
        let mut g = list_files_graph();
        g.node[0] = node("list_files/file_pattern", "StringJoin", &[]);
        let err = split_providers(&g, &FakeFiles(Ok(5))).expect_err("refused");
        assert_eq!(err.op(), Some("TensorSliceDataset"));
        assert!(err.to_string().contains("`StringJoin`, not a constant"), "{err}");
        // An Identity chain that loops.
        let mut g = list_files_graph();
        g.node[3] = node("list_files/Identity", "Identity", &["list_files/Identity"]);
        assert_eq!(
            split_providers(&g, &FakeFiles(Ok(5))).expect_err("refused").op(),
            Some("TensorSliceDataset")
        );
    }

    fn graph_of(nodes: Vec<NodeDef>, output: &str) -> GraphDef {
        graph(nodes, output)
    }

    #[test]
    fn malformed_graphs_are_errors() {
        let no_output = GraphDef { node: range("r", 0, 1, 1), library: None };
        assert_eq!(split_providers_no_files(&no_output), Err(GraphError::Output(0)));
        let mut two = graph(range("r", 0, 1, 1), "r");
        two.node.push(node("dataset2", "_Retval", &["r"]));
        assert_eq!(split_providers_no_files(&two), Err(GraphError::Output(2)));
        let mut duplicate = graph(range("r", 0, 1, 1), "r");
        duplicate.node.push(scalar("r/start", 1));
        assert_eq!(
            split_providers_no_files(&duplicate),
            Err(GraphError::DuplicateNode("r/start".into()))
        );
        let missing = graph(vec![node("m", "MapDataset", &["gone:0"])], "m");
        assert_eq!(
            split_providers_no_files(&missing),
            Err(GraphError::MissingInput { node: "m".into(), input: "gone:0".into() })
        );
        let cycle =
            graph(vec![node("a", "MapDataset", &["b"]), node("b", "MapDataset", &["a"])], "a");
        assert_eq!(split_providers_no_files(&cycle), Err(GraphError::TooLarge));
        // zip(x, x) nested: shared inputs are walked once per use, within the bound.
        let mut nodes = range("r", 0, 1, 1);
        let mut last = "r".to_owned();
        for i in 0..40 {
            nodes.push(node(&format!("z{i}"), "ZipDataset", &[&last, &last]));
            last = format!("z{i}");
        }
        assert_eq!(split_providers_no_files(&graph(nodes, &last)), Err(GraphError::TooLarge));
        assert!(matches!(
            split_providers_of(b"\xff\xff\xff", &NoFiles),
            Err(GraphError::Decode(_))
        ));
        let retval_without_input =
            GraphDef { node: vec![node("dataset", "_Retval", &[])], library: None };
        assert_eq!(unsupported_op(&retval_without_input), "_Retval");
    }

    /// Issue 22: a `ZipDataset` that lists itself 100,000 times (a 300 KB graph) made a walk
    /// that reads input `i` by scanning the inputs O(K^2) per visit. Every walk is bounded:
    /// fan-out, visits and total work.
    #[test]
    fn hostile_graphs_end_fast_in_an_error() {
        let started = std::time::Instant::now();
        for op in ["ZipDataset", "ConcatenateDataset", "DirectedInterleaveDataset"] {
            let mut zip = node("z", op, &[]);
            zip.input = vec!["z".to_owned(); 100_000];
            let err = split_providers_no_files(&graph(vec![zip], "z")).expect_err("refused");
            assert_eq!(err, GraphError::FanOut { node: "z".into(), op: op.into() });
        }
        // Under the fan-out bound, still self-referencing: the work bound ends it.
        let mut zip = node("z", "ZipDataset", &[]);
        zip.input = vec!["z".to_owned(); MAX_FAN_OUT];
        assert_eq!(split_providers_no_files(&graph(vec![zip], "z")), Err(GraphError::TooLarge));
        // A TensorSliceDataset with many components, each a long way to walk.
        let mut slices = node("t", "TensorSliceDataset", &[]);
        slices.input = vec!["i0".to_owned(); MAX_FAN_OUT];
        let mut nodes = vec![slices];
        for i in 0..MAX_IDENTITY_CHAIN + 1 {
            nodes.push(node(&format!("i{i}"), "Identity", &[&format!("i{}", i + 1)]));
        }
        let err = split_providers_no_files(&graph(nodes, "t")).expect_err("refused");
        assert_eq!(err.op(), Some("TensorSliceDataset"));
        // Deep nesting: 50,000 maps over a range, then a cycle of maps.
        let mut nodes = range("r", 0, 1, 1);
        let mut last = "r".to_owned();
        for i in 0..50_000 {
            nodes.push(node(&format!("m{i}"), "MapDataset", &[&last]));
            last = format!("m{i}");
        }
        assert_eq!(split_providers_no_files(&graph(nodes, &last)).expect("deep").len(), 1);
        let mut nodes = Vec::new();
        for i in 0..1000 {
            nodes.push(node(&format!("m{i}"), "MapDataset", &[&format!("m{}", (i + 1) % 1000)]));
        }
        assert_eq!(split_providers_no_files(&graph(nodes, "m0")), Err(GraphError::TooLarge));
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
    }

    #[test]
    fn const_ints_reads_tensorflows_encodings() {
        let tensor = |dtype: DataType, dims: &[i64]| TensorProto {
            dtype: dtype as i32,
            tensor_shape: shape(dims),
            ..Default::default()
        };
        let mut t = tensor(DataType::DtInt64, &[]);
        assert_eq!(const_ints(&t), Ok(vec![0]), "no value: zero");
        t.int64_val = vec![-4];
        assert_eq!(const_ints(&t), Ok(vec![-4]));
        t.tensor_shape = None;
        assert_eq!(const_ints(&t), Ok(vec![-4]), "no shape: a scalar");
        let mut t = tensor(DataType::DtInt64, &[4]);
        t.int64_val = vec![1, 2];
        assert_eq!(const_ints(&t), Ok(vec![1, 2, 2, 2]), "the last value repeats");
        t.int64_val = vec![1, 2, 3, 4, 5];
        assert!(const_ints(&t).is_err());
        t.int64_val = vec![];
        t.tensor_content = [3i64, -1, 0, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(const_ints(&t), Ok(vec![3, -1, 0, 9]));
        t.tensor_content.pop();
        assert!(const_ints(&t).is_err());
        let mut t = tensor(DataType::DtInt32, &[2]);
        t.int_val = vec![-7, 8];
        assert_eq!(const_ints(&t), Ok(vec![-7, 8]));
        t.int_val = vec![];
        t.tensor_content = [-7i32, 8].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(const_ints(&t), Ok(vec![-7, 8]));
        assert!(const_ints(&tensor(DataType::DtFloat, &[])).is_err());
        assert!(const_ints(&tensor(DataType::DtInt64, &[2, 2])).is_err());
        assert!(const_ints(&tensor(DataType::DtInt64, &[-1])).is_err());
        assert!(const_ints(&tensor(DataType::DtInt64, &[1 << 40])).is_err(), "bounded");
    }
}
