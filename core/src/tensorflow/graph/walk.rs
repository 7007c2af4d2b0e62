//! The walk from a graph's output to its sources, and what it reads of each node.

use std::collections::HashMap;

use crate::echo::echo;
use crate::tensorflow::proto::tensorflow::{AttrValue, GraphDef, NodeDef, attr_value};

use super::consts::{const_ints, const_scalar, const_strings, const_tensor, slice_count};
use super::ops::{ALL_INPUTS, NOT_SHARDABLE, PASS_THROUGH, RANDOM};
use super::{
    Files, GraphError, MAX_FAN_OUT, MAX_IDENTITY_CHAIN, MAX_VISITS, MAX_WORK, SUPPORTED,
    SplitProvider,
};

/// The split providers of the dataset `graph` computes, in TensorFlow's order: depth first
/// from the (last) `_Retval` node through each dataset op's dataset inputs, in input order.
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
    // TensorFlow's workers (and its dispatcher's split providers) run the dataset of the last
    // `_Retval` node.
    let Some(output) = graph.node.iter().rev().find(|n| n.op == "_Retval") else {
        return Err(GraphError::Output(0));
    };
    let mut walk = Walk { nodes, work: 0, slices: HashMap::new() };

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
    /// The slice count of each component read so far, by node name.
    slices: HashMap<&'g str, i64>,
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
    /// `Identity` nodes). Read once per walk: a component reached again (a `zip` of one
    /// dataset many times) is not read, nor its files globbed, again.
    fn slice_count(
        &mut self,
        user: &NodeDef,
        component: &'g NodeDef,
        files: &dyn Files,
    ) -> Result<i64, GraphError> {
        if let Some(&n) = self.slices.get(component.name.as_str()) {
            return Ok(n);
        }
        let n = self.read_slice_count(user, component, files)?;
        self.slices.insert(component.name.as_str(), n);
        Ok(n)
    }

    fn read_slice_count(
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
                    let (patterns, repeats) = const_strings(user, pattern)?;
                    let cannot = |why: String| {
                        let more = match patterns.len() + repeats {
                            1 => String::new(),
                            n => format!(" (one of {n} patterns)"),
                        };
                        let first = patterns.first().map_or("", String::as_str);
                        unsupported(
                            node,
                            format!(
                                "the dispatcher cannot glob {}{more} for `{}`: {why}",
                                echo(first),
                                user.name
                            ),
                        )
                    };
                    let mut count = files.count_matching(&patterns).map_err(cannot)?;
                    if repeats > 0 {
                        let last = patterns.last().cloned().unwrap_or_default();
                        let each = files.count_matching(&[last]).map_err(cannot)?;
                        count = each
                            .checked_mul(repeats as u64)
                            .and_then(|more| more.checked_add(count))
                            .unwrap_or(u64::MAX);
                    }
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

/// The length of a list attribute of `node` (0 when it has none).
fn list_attr_len(node: &NodeDef, name: &str) -> usize {
    match node.attr.get(name) {
        Some(AttrValue { value: Some(attr_value::Value::List(list)) }) => {
            list.r#type.len().max(list.shape.len())
        }
        _ => 0,
    }
}

pub(super) fn unsupported(node: &NodeDef, reason: String) -> GraphError {
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
pub(super) fn range_len(start: i64, stop: i64, step: i64) -> Option<i128> {
    let (start, stop, step) = (i128::from(start), i128::from(stop), i128::from(step));
    match step {
        0 => None,
        s if s > 0 => Some(if stop <= start { 0 } else { (stop - start + s - 1) / s }),
        s => Some(if stop >= start { 0 } else { (start - stop + (-s) - 1) / (-s) }),
    }
}
