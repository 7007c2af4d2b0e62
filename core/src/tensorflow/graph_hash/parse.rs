//! Reading a `GraphDef` off its bytes, borrowing them: its nodes, its library's functions,
//! and what the hash leaves out of them (seed inputs, dataset ops' `metadata`).

use std::collections::HashMap;

use super::super::raw::{Malformed, WIRE_LEN, next_field};

/// A node as read from a `NodeDef` (or made for a function's argument), borrowing the bytes.
#[derive(Debug, Default)]
pub(super) struct Node<'a> {
    pub(super) name: &'a [u8],
    pub(super) op: &'a [u8],
    pub(super) inputs: Vec<&'a [u8]>,
    pub(super) device: &'a [u8],
    /// `(key, AttrValue bytes)`, sorted by key (a key written twice: the last one, as
    /// protobuf reads maps).
    pub(super) attrs: Vec<(&'a [u8], &'a [u8])>,
    /// A function argument: its position and its `ArgDef` bytes (type and type attributes).
    pub(super) arg: Option<(usize, &'a [u8])>,
}

/// A `FunctionDef`, borrowing the bytes.
#[derive(Debug, Default)]
pub(super) struct Function<'a> {
    /// `signature.input_arg`: `(name, ArgDef bytes)`.
    pub(super) input_args: Vec<(&'a [u8], &'a [u8])>,
    /// `signature.output_arg` names, in order.
    pub(super) output_args: Vec<&'a [u8]>,
    /// `signature.control_output`, in order.
    pub(super) control_outputs: Vec<&'a [u8]>,
    pub(super) nodes: Vec<Node<'a>>,
    /// `ret`: output arg name to `node:output:index`.
    pub(super) ret: HashMap<&'a [u8], &'a [u8]>,
    /// `control_ret`: control output name to node name.
    pub(super) control_ret: HashMap<&'a [u8], &'a [u8]>,
}

/// Reads a map entry (`key = 1`, `value = 2`, both length-delimited).
fn map_entry(bytes: &[u8]) -> Result<(&[u8], &[u8]), Malformed> {
    let (mut key, mut value): (&[u8], &[u8]) = (&[], &[]);
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        match (f.number, f.wire) {
            (1, WIRE_LEN) => key = f.payload(bytes),
            (2, WIRE_LEN) => value = f.payload(bytes),
            _ => {}
        }
    }
    Ok((key, value))
}

fn sorted_attrs<'a>(mut attrs: Vec<(&'a [u8], &'a [u8])>) -> Vec<(&'a [u8], &'a [u8])> {
    // Stable: of a key written twice, the last one stays last; keep it only.
    attrs.sort_by(|a, b| a.0.cmp(b.0));
    let mut out: Vec<(&[u8], &[u8])> = Vec::with_capacity(attrs.len());
    for a in attrs {
        match out.last_mut() {
            Some(last) if last.0 == a.0 => *last = a,
            _ => out.push(a),
        }
    }
    out
}

fn parse_node(bytes: &[u8]) -> Result<Node<'_>, Malformed> {
    let mut node = Node::default();
    let mut attrs = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        if f.wire != WIRE_LEN {
            continue;
        }
        let p = f.payload(bytes);
        match f.number {
            1 => node.name = p,
            2 => node.op = p,
            3 => node.inputs.push(p),
            4 => node.device = p,
            5 => attrs.push(map_entry(p)?),
            _ => {}
        }
    }
    node.attrs = sorted_attrs(attrs);
    Ok(node)
}

/// `OpDef` (a function's signature): its input args, output arg names, control outputs.
#[allow(clippy::type_complexity)]
fn parse_signature(
    bytes: &[u8],
) -> Result<(&[u8], Vec<(&[u8], &[u8])>, Vec<&[u8]>, Vec<&[u8]>), Malformed> {
    let (mut name, mut inputs, mut outputs, mut controls) = (&[][..], Vec::new(), vec![], vec![]);
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        if f.wire != WIRE_LEN {
            continue;
        }
        let p = f.payload(bytes);
        match f.number {
            1 => name = p,
            2 => inputs.push((arg_name(p)?, p)),
            3 => outputs.push(arg_name(p)?),
            20 => controls.push(p),
            _ => {}
        }
    }
    Ok((name, inputs, outputs, controls))
}

/// `ArgDef.name`.
fn arg_name(bytes: &[u8]) -> Result<&[u8], Malformed> {
    let mut at = 0;
    let mut name: &[u8] = &[];
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        if (f.number, f.wire) == (1, WIRE_LEN) {
            name = f.payload(bytes);
        }
    }
    Ok(name)
}

/// The parts of an `ArgDef` that make its type: `type`, `type_attr`, `number_attr`,
/// `type_list_attr`, `is_ref` (not its name or description).
pub(super) fn arg_type(bytes: &[u8]) -> Result<Vec<u8>, Malformed> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        if matches!(f.number, 3..=6 | 16) {
            out.extend_from_slice(&bytes[f.start..f.end]);
        }
    }
    Ok(out)
}

fn parse_function(bytes: &[u8]) -> Result<(&[u8], Function<'_>), Malformed> {
    let mut fun = Function::default();
    let mut name: &[u8] = &[];
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        if f.wire != WIRE_LEN {
            continue;
        }
        let p = f.payload(bytes);
        match f.number {
            1 => {
                let (n, inputs, outputs, controls) = parse_signature(p)?;
                name = n;
                fun.input_args = inputs;
                fun.output_args = outputs;
                fun.control_outputs = controls;
            }
            3 => fun.nodes.push(parse_node(p)?),
            4 => {
                let (k, v) = map_entry(p)?;
                fun.ret.insert(k, v);
            }
            6 => {
                let (k, v) = map_entry(p)?;
                fun.control_ret.insert(k, v);
            }
            _ => {}
        }
    }
    Ok((name, fun))
}

/// A `GraphDef`'s nodes and library functions (by name).
#[allow(clippy::type_complexity)]
pub(super) fn parse_graph(
    bytes: &[u8],
) -> Result<(Vec<Node<'_>>, HashMap<&[u8], Function<'_>>), Malformed> {
    let mut nodes = Vec::new();
    let mut functions = HashMap::new();
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        if f.wire != WIRE_LEN {
            continue;
        }
        let p = f.payload(bytes);
        match f.number {
            1 => nodes.push(parse_node(p)?),
            2 => {
                let mut lat = 0;
                while lat < p.len() {
                    let lf = next_field(p, &mut lat)?;
                    if (lf.number, lf.wire) == (1, WIRE_LEN) {
                        let (name, fun) = parse_function(lf.payload(p))?;
                        functions.insert(name, fun);
                    }
                }
            }
            _ => {}
        }
    }
    Ok((nodes, functions))
}

/// Whether input `i` of a node of `op` is a seed, which TensorFlow leaves out of the hash (the
/// positions of the `seed`, `seed2` and `seed_generator` inputs in the op definitions).
pub(super) fn is_seed_input(op: &[u8], i: usize) -> bool {
    let seeds: &[usize] = match op {
        b"AnonymousRandomSeedGenerator" => &[0, 1],
        b"ShuffleDataset" => &[2, 3],
        b"ShuffleDatasetV2" => &[2],
        b"ShuffleDatasetV3" => &[2, 3, 4],
        b"ShuffleAndRepeatDataset" => &[2, 3],
        b"ShuffleAndRepeatDatasetV2" => &[2, 3, 5],
        _ => return false,
    };
    seeds.contains(&i)
}

/// Whether `op` is a tf.data dataset op (whose `metadata` attribute TensorFlow ignores).
pub(super) fn is_dataset_op(op: &[u8]) -> bool {
    let base = match op.iter().rposition(|&b| b == b'V') {
        Some(v) if v + 1 < op.len() && op[v + 1..].iter().all(u8::is_ascii_digit) => &op[..v],
        _ => op,
    };
    base.ends_with(b"Dataset")
}

/// `NameAttrList`: the name and the attributes.
#[allow(clippy::type_complexity)]
pub(super) fn name_attr_list(bytes: &[u8]) -> Result<(&[u8], Vec<(&[u8], &[u8])>), Malformed> {
    let mut name: &[u8] = &[];
    let mut attrs = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        match (f.number, f.wire) {
            (1, WIRE_LEN) => name = f.payload(bytes),
            (2, WIRE_LEN) => attrs.push(map_entry(f.payload(bytes))?),
            _ => {}
        }
    }
    Ok((name, sorted_attrs(attrs)))
}
