//! A TensorFlow dataset graph's structural hash, with the semantics of TensorFlow's
//! `HashGraph` (`tensorflow/core/data/hash_utils.cc`), IO-free.
//!
//! Two clients that build the same dataset (in one program twice, or in two programs) send
//! graphs that differ in node names (`RangeDataset/_3` against `RangeDataset/_7`), in function
//! names (`__inference_<lambda>_42` against `..._77`), in the order of the function library and
//! in unrelated nodes and functions the program also built. TensorFlow's dispatcher hashes the
//! graph by its structure and gives the second registration the first one's dataset id; this
//! module computes a hash with the same equalities:
//!
//! - Only what the dataset's sink (the first `_Retval` node) reaches counts: unreachable nodes
//!   and functions are ignored.
//! - A node is its op (or, for a call of a library function, the function's hash), its
//!   attributes by key (those an op definition declares: keys starting with `_`, such as the
//!   colocation attribute `_class`, are ignored, and so is a dataset op's `metadata`), its
//!   device, its data inputs in order (each with its output suffix, e.g. `:1`) and its control
//!   inputs as a multiset. Node names never count.
//! - The seed inputs of the shuffle ops and of `AnonymousRandomSeedGenerator` are ignored
//!   (they vary from run to run).
//! - A function (an attribute's `func`, a `list.func`, or a node's op) is hashed by its body:
//!   its return values in signature order and its control returns as a multiset, each hashed
//!   as a graph rooted there (arguments by position and type). Its name never counts, nor its
//!   place in the library.
//! - Cycles are cut as TensorFlow cuts them: a breadth-first walk from the root keeps an edge
//!   to a node already visited only as that node's non-input hash.
//!
//! The hash values are SHA-256 digests, not TensorFlow's 64-bit ones: what matters (and what
//! the tests check) is which graphs are equal. Work is bounded: every node and edge is hashed
//! once (memoized), the total work is capped at [`MAX_WORK`], function nesting at
//! [`MAX_FUNCTION_DEPTH`], and a function calling itself is an error. Any error (a graph that
//! does not decode, an input naming no node, a duplicate node name, no sink, a function not in
//! the library, a bound reached) is [`Unhashable`]: the caller then falls back to hashing the
//! bytes.

use std::collections::HashMap;

use ring::digest;

use super::raw::{Malformed, WIRE_LEN, next_field};

/// The most units of work (nodes visited, inputs followed, attributes hashed, functions
/// entered) one graph may take.
pub const MAX_WORK: usize = 4_000_000;

/// The deepest nesting of functions (a function whose body calls a function ...).
pub const MAX_FUNCTION_DEPTH: usize = 64;

/// Why a graph has no structural hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unhashable {
    /// The bytes are not a `GraphDef`.
    Malformed,
    /// The graph is not one TensorFlow could hash (the text says why).
    Invalid(String),
    /// A bound was reached (work, or function nesting).
    TooLarge(&'static str),
}

impl From<Malformed> for Unhashable {
    fn from(_: Malformed) -> Self {
        Unhashable::Malformed
    }
}

impl std::fmt::Display for Unhashable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unhashable::Malformed => f.write_str("the graph is not a serialized GraphDef"),
            Unhashable::Invalid(why) => write!(f, "the graph cannot be hashed: {why}"),
            Unhashable::TooLarge(what) => write!(f, "the graph is too large to hash: {what}"),
        }
    }
}

impl std::error::Error for Unhashable {}

/// A SHA-256 digest.
type Digest = [u8; 32];

/// SHA-256 of `parts`, each length-prefixed (so no two lists of parts collide by
/// concatenation).
fn hash(parts: &[&[u8]]) -> Digest {
    let mut ctx = digest::Context::new(&digest::SHA256);
    for p in parts {
        ctx.update(&(p.len() as u64).to_le_bytes());
        ctx.update(p);
    }
    let mut out = [0; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// A node as read from a `NodeDef` (or made for a function's argument), borrowing the bytes.
#[derive(Debug, Default)]
struct Node<'a> {
    name: &'a [u8],
    op: &'a [u8],
    inputs: Vec<&'a [u8]>,
    device: &'a [u8],
    /// `(key, AttrValue bytes)`, sorted by key (a key written twice: the last one, as
    /// protobuf reads maps).
    attrs: Vec<(&'a [u8], &'a [u8])>,
    /// A function argument: its position and its `ArgDef` bytes (type and type attributes).
    arg: Option<(usize, &'a [u8])>,
}

/// A `FunctionDef`, borrowing the bytes.
#[derive(Debug, Default)]
struct Function<'a> {
    /// `signature.input_arg`: `(name, ArgDef bytes)`.
    input_args: Vec<(&'a [u8], &'a [u8])>,
    /// `signature.output_arg` names, in order.
    output_args: Vec<&'a [u8]>,
    /// `signature.control_output`, in order.
    control_outputs: Vec<&'a [u8]>,
    nodes: Vec<Node<'a>>,
    /// `ret`: output arg name to `node:output:index`.
    ret: HashMap<&'a [u8], &'a [u8]>,
    /// `control_ret`: control output name to node name.
    control_ret: HashMap<&'a [u8], &'a [u8]>,
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
fn arg_type(bytes: &[u8]) -> Result<Vec<u8>, Malformed> {
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
fn parse_graph(bytes: &[u8]) -> Result<(Vec<Node<'_>>, HashMap<&[u8], Function<'_>>), Malformed> {
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
fn is_seed_input(op: &[u8], i: usize) -> bool {
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
fn is_dataset_op(op: &[u8]) -> bool {
    let base = match op.iter().rposition(|&b| b == b'V') {
        Some(v) if v + 1 < op.len() && op[v + 1..].iter().all(u8::is_ascii_digit) => &op[..v],
        _ => op,
    };
    base.ends_with(b"Dataset")
}

/// One graph to hash from its roots: the top-level graph, or a function's body.
struct Body<'a, 'g> {
    nodes: &'g [Node<'a>],
    by_name: HashMap<&'a [u8], usize>,
    /// The non-input hashes, with and without functions.
    non_input: [Vec<Option<Digest>>; 2],
}

/// A node's inputs after the breadth-first walk: data inputs (node, suffix, whether the edge
/// closes a cycle) and control inputs.
#[derive(Default)]
struct Rep<'a> {
    inputs: Vec<(usize, &'a [u8], bool)>,
    controls: Vec<usize>,
}

struct Hasher<'a> {
    functions: &'a HashMap<&'a [u8], Function<'a>>,
    /// Function hashes by name (a function's hash does not depend on where it is called).
    function_cache: HashMap<&'a [u8], Digest>,
    /// Functions being hashed (a function reached again inside itself is an error).
    in_progress: Vec<&'a [u8]>,
    work: usize,
    max_work: usize,
}

impl<'a> Hasher<'a> {
    fn tick(&mut self, n: usize) -> Result<(), Unhashable> {
        self.work = self.work.saturating_add(n);
        if self.work > self.max_work {
            Err(Unhashable::TooLarge("more than MAX_WORK steps"))
        } else {
            Ok(())
        }
    }

    fn body<'g>(&mut self, nodes: &'g [Node<'a>]) -> Result<Body<'a, 'g>, Unhashable> {
        self.tick(nodes.len())?;
        let mut by_name = HashMap::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            if by_name.insert(n.name, i).is_some() {
                return Err(Unhashable::Invalid(format!(
                    "duplicate node name {:?}",
                    String::from_utf8_lossy(n.name)
                )));
            }
        }
        let none = vec![None; nodes.len()];
        Ok(Body { nodes, by_name, non_input: [none.clone(), none] })
    }

    /// The hash of every root of `body` (each a node and an output suffix), in order: a
    /// breadth-first walk from the roots (in order) cuts cycles, then the nodes are hashed in
    /// reverse visit order (every kept edge goes from a node visited earlier to one visited
    /// later), so nothing recurses over the graph.
    fn hash_roots(
        &mut self,
        body: &mut Body<'a, '_>,
        roots: &[(usize, &'a [u8])],
        depth: usize,
    ) -> Result<Vec<Digest>, Unhashable> {
        let n = body.nodes.len();
        let mut visited = vec![false; n];
        let mut reps: Vec<Option<Rep<'a>>> = (0..n).map(|_| None).collect();
        let mut order = Vec::new();
        let mut queue = std::collections::VecDeque::new();
        queue.extend(roots.iter().map(|r| r.0));
        while let Some(i) = queue.pop_front() {
            self.tick(1)?;
            if visited[i] {
                continue;
            }
            visited[i] = true;
            order.push(i);
            let node = &body.nodes[i];
            let mut rep = Rep::default();
            for (k, input) in node.inputs.iter().enumerate() {
                self.tick(1)?;
                if is_seed_input(node.op, k) {
                    continue;
                }
                let (name, suffix, control) = match input.strip_prefix(b"^") {
                    Some(name) => (name, &[][..], true),
                    None => match input.iter().position(|&b| b == b':') {
                        Some(c) => (&input[..c], &input[c + 1..], false),
                        None => (&input[..], &[][..], false),
                    },
                };
                let Some(&j) = body.by_name.get(name) else {
                    return Err(Unhashable::Invalid(format!(
                        "node {:?} has input {:?} that is not in the graph",
                        String::from_utf8_lossy(node.name),
                        String::from_utf8_lossy(name)
                    )));
                };
                if visited[j] {
                    // TensorFlow keeps such a data edge as the input's non-input hash and
                    // drops such a control edge.
                    if !control {
                        rep.inputs.push((j, suffix, true));
                    }
                } else if control {
                    rep.controls.push(j);
                } else {
                    rep.inputs.push((j, suffix, false));
                    queue.push_back(j);
                }
            }
            reps[i] = Some(rep);
        }
        let mut full: Vec<Option<Digest>> = vec![None; n];
        for &i in order.iter().rev() {
            let rep = reps[i].take().unwrap_or_default();
            let own = self.non_input(body, i, true, depth)?;
            let mut controls = Vec::with_capacity(rep.controls.len());
            for &c in &rep.controls {
                controls.push(self.non_input(body, c, false, depth)?);
            }
            // A multiset: order does not count.
            controls.sort_unstable();
            let mut ctx = digest::Context::new(&digest::SHA256);
            ctx.update(b"node\0");
            ctx.update(&own);
            ctx.update(&(controls.len() as u64).to_le_bytes());
            for c in &controls {
                ctx.update(c);
            }
            ctx.update(&(rep.inputs.len() as u64).to_le_bytes());
            for &(j, suffix, cut) in &rep.inputs {
                self.tick(1)?;
                let h = if cut {
                    self.non_input(body, j, true, depth)?
                } else {
                    // Visited after `i`, so hashed before it.
                    full[j].ok_or(Unhashable::Invalid("an input hashed out of order".into()))?
                };
                ctx.update(&h);
                ctx.update(&(suffix.len() as u64).to_le_bytes());
                ctx.update(suffix);
            }
            let mut d = [0; 32];
            d.copy_from_slice(ctx.finish().as_ref());
            full[i] = Some(d);
        }
        roots
            .iter()
            .map(|&(i, suffix)| {
                let h = full[i].ok_or(Unhashable::Invalid("a root was not hashed".into()))?;
                Ok(hash(&[b"root", &h, suffix]))
            })
            .collect()
    }

    /// A node without its inputs: its op (or the function it calls), attributes and device.
    fn non_input(
        &mut self,
        body: &mut Body<'a, '_>,
        i: usize,
        with_functions: bool,
        depth: usize,
    ) -> Result<Digest, Unhashable> {
        if let Some(d) = body.non_input[usize::from(with_functions)][i] {
            return Ok(d);
        }
        let node = &body.nodes[i];
        self.tick(1 + node.attrs.len())?;
        let mut ctx = digest::Context::new(&digest::SHA256);
        if let Some((index, arg)) = node.arg {
            ctx.update(b"arg\0");
            ctx.update(&(index as u64).to_le_bytes());
            ctx.update(&arg_type(arg)?);
        } else if self.functions.contains_key(node.op) {
            ctx.update(b"function op\0");
            if with_functions {
                ctx.update(&self.function(node.op, depth)?);
            }
        } else {
            ctx.update(b"op\0");
            ctx.update(&(node.op.len() as u64).to_le_bytes());
            ctx.update(node.op);
        }
        let dataset_op = is_dataset_op(node.op);
        for &(key, value) in &node.attrs {
            if key.first() == Some(&b'_') || (dataset_op && key == b"metadata") {
                continue;
            }
            let h = self.attr(value, with_functions, depth)?;
            ctx.update(&(key.len() as u64).to_le_bytes());
            ctx.update(key);
            ctx.update(&h);
        }
        ctx.update(b"device\0");
        ctx.update(&(node.device.len() as u64).to_le_bytes());
        ctx.update(node.device);
        let mut d = [0; 32];
        d.copy_from_slice(ctx.finish().as_ref());
        body.non_input[usize::from(with_functions)][i] = Some(d);
        Ok(d)
    }

    /// An `AttrValue`: a function (`func`, or a `list.func`) by its body, anything else by its
    /// canonical bytes.
    fn attr(
        &mut self,
        value: &'a [u8],
        with_functions: bool,
        depth: usize,
    ) -> Result<Digest, Unhashable> {
        let mut funcs = Vec::new();
        let mut at = 0;
        while at < value.len() {
            let f = next_field(value, &mut at)?;
            match (f.number, f.wire) {
                (10, WIRE_LEN) => funcs.push(f.payload(value)),
                (1, WIRE_LEN) => {
                    let list = f.payload(value);
                    let mut lat = 0;
                    while lat < list.len() {
                        let lf = next_field(list, &mut lat)?;
                        if (lf.number, lf.wire) == (9, WIRE_LEN) {
                            funcs.push(lf.payload(list));
                        }
                    }
                }
                _ => {}
            }
        }
        if funcs.is_empty() {
            let canonical = super::fingerprint::canonical_attr_value(value)?;
            return Ok(hash(&[b"value", &canonical]));
        }
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(b"functions\0");
        ctx.update(&(funcs.len() as u64).to_le_bytes());
        if with_functions {
            for f in funcs {
                let (name, attrs) = name_attr_list(f)?;
                ctx.update(&self.function(name, depth)?);
                // The attributes it is instantiated with.
                for (key, v) in attrs {
                    if key.first() == Some(&b'_') {
                        continue;
                    }
                    let h = self.attr(v, with_functions, depth)?;
                    ctx.update(&(key.len() as u64).to_le_bytes());
                    ctx.update(key);
                    ctx.update(&h);
                }
            }
        }
        let mut d = [0; 32];
        d.copy_from_slice(ctx.finish().as_ref());
        Ok(d)
    }

    /// A library function, by its body.
    fn function(&mut self, name: &'a [u8], depth: usize) -> Result<Digest, Unhashable> {
        if let Some(d) = self.function_cache.get(name) {
            return Ok(*d);
        }
        if depth >= MAX_FUNCTION_DEPTH {
            return Err(Unhashable::TooLarge("functions nested deeper than MAX_FUNCTION_DEPTH"));
        }
        if self.in_progress.contains(&name) {
            return Err(Unhashable::Invalid(format!(
                "function {:?} calls itself",
                String::from_utf8_lossy(name)
            )));
        }
        let functions = self.functions;
        let Some(fun) = functions.get(name) else {
            return Err(Unhashable::Invalid(format!(
                "function {:?} is not in the library",
                String::from_utf8_lossy(name)
            )));
        };
        self.tick(1)?;
        self.in_progress.push(name);
        let result = self.function_body(fun, depth + 1);
        self.in_progress.pop();
        let d = result?;
        self.function_cache.insert(name, d);
        Ok(d)
    }

    fn function_body(&mut self, fun: &'a Function<'a>, depth: usize) -> Result<Digest, Unhashable> {
        // The arguments are nodes too (TensorFlow's `_Arg`), named by the argument's name.
        let mut nodes: Vec<Node<'a>> = fun
            .input_args
            .iter()
            .enumerate()
            .map(|(i, &(name, def))| Node {
                name,
                op: b"_Arg",
                arg: Some((i, def)),
                ..Node::default()
            })
            .collect();
        let args = nodes.len();
        nodes.extend(fun.nodes.iter().map(|n| Node {
            name: n.name,
            op: n.op,
            inputs: n.inputs.clone(),
            device: n.device,
            attrs: n.attrs.clone(),
            arg: None,
        }));
        let mut body = self.body(&nodes)?;
        let mut roots = Vec::with_capacity(fun.output_args.len());
        for out in &fun.output_args {
            let Some(target) = fun.ret.get(out) else {
                return Err(Unhashable::Invalid(format!(
                    "output {:?} has no return value",
                    String::from_utf8_lossy(out)
                )));
            };
            let (name, suffix) = match target.iter().position(|&b| b == b':') {
                Some(c) => (&target[..c], &target[c + 1..]),
                None => (&target[..], &[][..]),
            };
            let Some(&i) = body.by_name.get(name) else {
                return Err(Unhashable::Invalid(format!(
                    "return value {:?} names no node",
                    String::from_utf8_lossy(target)
                )));
            };
            roots.push((i, suffix));
        }
        let rets = self.hash_roots(&mut body, &roots, depth)?;
        let mut controls = Vec::new();
        for out in &fun.control_outputs {
            let Some(&i) = fun.control_ret.get(out).and_then(|n| body.by_name.get(n)) else {
                return Err(Unhashable::Invalid(format!(
                    "control output {:?} names no node",
                    String::from_utf8_lossy(out)
                )));
            };
            controls.push(self.non_input(&mut body, i, false, depth)?);
        }
        controls.sort_unstable();
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(b"function\0");
        ctx.update(&(args as u64).to_le_bytes());
        ctx.update(&(rets.len() as u64).to_le_bytes());
        for r in &rets {
            ctx.update(r);
        }
        ctx.update(&(controls.len() as u64).to_le_bytes());
        for c in &controls {
            ctx.update(c);
        }
        let mut d = [0; 32];
        d.copy_from_slice(ctx.finish().as_ref());
        Ok(d)
    }
}

/// `NameAttrList`: the name and the attributes.
#[allow(clippy::type_complexity)]
fn name_attr_list(bytes: &[u8]) -> Result<(&[u8], Vec<(&[u8], &[u8])>), Malformed> {
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

/// The structural hash of a serialized `GraphDef` rooted at its first `_Retval` node, with the
/// semantics of TensorFlow's `HashGraph` (see the module): equal for two builds of one dataset,
/// whatever their node and function names and the order of their function library.
pub fn hash_graph(graph: &[u8]) -> Result<[u8; 32], Unhashable> {
    hash_graph_within(graph, MAX_WORK)
}

fn hash_graph_within(graph: &[u8], max_work: usize) -> Result<[u8; 32], Unhashable> {
    let (nodes, functions) = parse_graph(graph)?;
    let Some(sink) = nodes.iter().position(|n| n.op == b"_Retval") else {
        return Err(Unhashable::Invalid("the graph has no _Retval node".into()));
    };
    let mut hasher = Hasher {
        functions: &functions,
        function_cache: HashMap::new(),
        in_progress: vec![],
        work: 0,
        max_work,
    };
    let mut body = hasher.body(&nodes)?;
    let roots = hasher.hash_roots(&mut body, &[(sink, &[][..])], 0)?;
    roots.first().copied().ok_or(Unhashable::Invalid("no root".into()))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use prost::Message as _;

    use super::*;
    use crate::tensorflow::proto::tensorflow::{AttrValue, NameAttrList, NodeDef, attr_value};

    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// Field `number`, length-delimited.
    fn ld(number: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, (number << 3) | 2);
        put_varint(&mut out, payload.len() as u64);
        out.extend_from_slice(payload);
        out
    }

    fn int(v: i64) -> AttrValue {
        AttrValue { value: Some(attr_value::Value::I(v)) }
    }

    fn func(name: &str) -> AttrValue {
        AttrValue {
            value: Some(attr_value::Value::Func(NameAttrList {
                name: name.into(),
                attr: Default::default(),
            })),
        }
    }

    fn node(name: &str, op: &str, inputs: &[&str], attrs: &[(&str, AttrValue)]) -> NodeDef {
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: inputs.iter().map(|&s| s.to_owned()).collect(),
            device: String::new(),
            attr: attrs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
        }
    }

    /// A `FunctionDef`: one int64 argument `args`, one output `out` returned from `ret`.
    fn function(name: &str, args: &[&str], nodes: &[NodeDef], ret: &str) -> Vec<u8> {
        let mut signature = ld(1, name.as_bytes());
        for a in args {
            // ArgDef { name, type: DT_INT64 (9) }
            let mut arg = ld(1, a.as_bytes());
            arg.extend([3 << 3, 9]);
            signature.extend(ld(2, &arg));
        }
        signature.extend(ld(3, &ld(1, b"out")));
        let mut f = ld(1, &signature);
        for n in nodes {
            f.extend(ld(3, &n.encode_to_vec()));
        }
        f.extend(ld(4, &[ld(1, b"out"), ld(2, ret.as_bytes())].concat()));
        f
    }

    fn graph(nodes: &[NodeDef], functions: &[Vec<u8>]) -> Vec<u8> {
        let mut g = Vec::new();
        for n in nodes {
            g.extend(ld(1, &n.encode_to_vec()));
        }
        if !functions.is_empty() {
            let library: Vec<u8> = functions.iter().flat_map(|f| ld(1, f)).collect();
            g.extend(ld(2, &library));
        }
        g
    }

    /// `range(10).map(lambda x: x * k)` as a client writes it, its names numbered from `n`
    /// (another build of the same dataset), with `noise` unrelated nodes and functions.
    fn range_map(n: u32, k: i64, noise: bool) -> Vec<u8> {
        let c = |i: u32| format!("Const/_{}", n + i);
        let fname = format!("__inference_lambda_{}", n + 40);
        let body = function(
            &fname,
            &[&format!("args_{n}")],
            &[
                node(&format!("mul/y_{n}"), "Const", &[], &[("value", int(k))]),
                node(
                    &format!("mul_{n}"),
                    "Mul",
                    &[&format!("args_{n}"), &format!("mul/y_{n}:output:0")],
                    &[],
                ),
            ],
            &format!("mul_{n}:z:0"),
        );
        let range = format!("RangeDataset/_{}", n + 3);
        let map = format!("MapDataset/_{}", n + 4);
        let mut nodes = vec![
            node(&c(0), "Const", &[], &[("value", int(0))]),
            node(&c(1), "Const", &[], &[("value", int(10))]),
            node(&c(2), "Const", &[], &[("value", int(1))]),
            node(
                &range,
                "RangeDataset",
                &[&c(0), &c(1), &c(2)],
                &[(
                    "metadata",
                    AttrValue {
                        value: Some(attr_value::Value::S(
                            format!("name: \"range_{n}\"").into_bytes(),
                        )),
                    },
                )],
            ),
            node(&map, "MapDataset", &[&range], &[("f", func(&fname)), ("_class", int(n.into()))]),
            node("dataset", "_Retval", &[&map], &[]),
        ];
        let mut functions = vec![body];
        if noise {
            // Unrelated nodes first, and an unrelated function before the used one.
            nodes.insert(0, node("unrelated", "RangeDataset", &[&c(1), &c(1), &c(2)], &[]));
            functions.insert(0, function("__inference_other_1", &["a"], &[], "a"));
        }
        graph(&nodes, &functions)
    }

    #[test]
    fn two_builds_of_one_dataset_hash_alike_and_different_datasets_do_not() {
        let a = hash_graph(&range_map(0, 2, false)).unwrap();
        assert_eq!(a, hash_graph(&range_map(17, 2, false)).unwrap(), "other names");
        assert_eq!(
            a,
            hash_graph(&range_map(5, 2, true)).unwrap(),
            "unrelated nodes, library order"
        );
        assert_ne!(a, hash_graph(&range_map(0, 3, false)).unwrap(), "another function body");
    }

    #[test]
    fn ops_attributes_inputs_and_suffixes_count() {
        let base = |op: &str, v: i64, inputs: &[&str]| {
            graph(
                &[
                    node("a", "Const", &[], &[("value", int(1))]),
                    node("b", "Const", &[], &[("value", int(2))]),
                    node("x", op, inputs, &[("v", int(v))]),
                    node("s", "_Retval", &["x"], &[]),
                ],
                &[],
            )
        };
        let h = |g: Vec<u8>| hash_graph(&g).unwrap();
        let reference = h(base("Zip", 1, &["a", "b"]));
        assert_eq!(reference, h(base("Zip", 1, &["a", "b"])));
        assert_ne!(reference, h(base("Concat", 1, &["a", "b"])), "op");
        assert_ne!(reference, h(base("Zip", 2, &["a", "b"])), "attribute");
        assert_ne!(reference, h(base("Zip", 1, &["b", "a"])), "input order");
        assert_ne!(reference, h(base("Zip", 1, &["a:1", "b"])), "output suffix");
        assert_ne!(reference, h(base("Zip", 1, &["a"])), "input count");
        // Control inputs are a multiset.
        assert_eq!(h(base("Zip", 1, &["a", "^b", "^a"])), h(base("Zip", 1, &["a", "^a", "^b"])));
        assert_ne!(reference, h(base("Zip", 1, &["a", "^b"])), "a control input counts");
    }

    #[test]
    fn shuffle_seeds_are_ignored_its_buffer_is_not() {
        let shuffle = |seed: i64, buffer: i64| {
            graph(
                &[
                    node("r", "RangeDataset", &[], &[]),
                    node("buffer", "Const", &[], &[("value", int(buffer))]),
                    node("seed", "Const", &[], &[("value", int(seed))]),
                    node("seed2", "Const", &[], &[("value", int(seed + 1))]),
                    node("sh", "ShuffleDataset", &["r", "buffer", "seed", "seed2"], &[]),
                    node("s", "_Retval", &["sh"], &[]),
                ],
                &[],
            )
        };
        let h = |g: Vec<u8>| hash_graph(&g).unwrap();
        assert_eq!(h(shuffle(1, 4)), h(shuffle(99, 4)));
        assert_ne!(h(shuffle(1, 4)), h(shuffle(1, 5)));
        assert!(is_dataset_op(b"MapDataset") && is_dataset_op(b"ShuffleDatasetV3"));
        assert!(!is_dataset_op(b"Const"));
    }

    #[test]
    fn hostile_graphs_end_quickly() {
        let started = Instant::now();
        // A zip listing itself 100,000 times: each edge closes a cycle.
        let me: Vec<&str> = vec!["z"; 100_000];
        let g = graph(&[node("z", "ZipDataset", &me, &[]), node("s", "_Retval", &["z"], &[])], &[]);
        assert!(hash_graph(&g).is_ok());
        // A cycle through two nodes.
        let g = graph(
            &[
                node("a", "X", &["b"], &[]),
                node("b", "X", &["a"], &[]),
                node("s", "_Retval", &["a"], &[]),
            ],
            &[],
        );
        assert!(hash_graph(&g).is_ok());
        // A function calling itself.
        let f =
            function("f", &["x"], &[node("call", "Map", &["x"], &[("f", func("f"))])], "call:y:0");
        let g = graph(
            &[node("m", "Map", &[], &[("f", func("f"))]), node("s", "_Retval", &["m"], &[])],
            &[f],
        );
        assert!(matches!(hash_graph(&g), Err(Unhashable::Invalid(_))), "{:?}", hash_graph(&g));
        // Functions nested 1,000 deep.
        let mut library = Vec::new();
        for i in 0..1_000 {
            let call = node("call", "Map", &["x"], &[("f", func(&format!("f{}", i + 1)))]);
            library.push(function(&format!("f{i}"), &["x"], &[call], "call:y:0"));
        }
        library.push(function("f1000", &["x"], &[], "x"));
        let g = graph(
            &[node("m", "Map", &[], &[("f", func("f0"))]), node("s", "_Retval", &["m"], &[])],
            &library,
        );
        assert_eq!(
            hash_graph(&g),
            Err(Unhashable::TooLarge("functions nested deeper than MAX_FUNCTION_DEPTH"))
        );
        // The same library 10 deep is fine.
        let g = graph(
            &[node("m", "Map", &[], &[("f", func("f990"))]), node("s", "_Retval", &["m"], &[])],
            &library,
        );
        assert!(hash_graph(&g).is_ok());
        // The work bound.
        let me: Vec<&str> = vec!["z"; 1_000];
        let g = graph(&[node("z", "ZipDataset", &me, &[]), node("s", "_Retval", &["z"], &[])], &[]);
        assert!(matches!(hash_graph_within(&g, 500), Err(Unhashable::TooLarge(_))));
        assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
    }

    #[test]
    fn graphs_tensorflow_could_not_hash_are_errors() {
        let no_sink = graph(&[node("a", "Const", &[], &[])], &[]);
        assert!(matches!(hash_graph(&no_sink), Err(Unhashable::Invalid(_))));
        let dangling = graph(&[node("s", "_Retval", &["nowhere"], &[])], &[]);
        assert!(matches!(hash_graph(&dangling), Err(Unhashable::Invalid(_))));
        let twice = graph(
            &[
                node("a", "C", &[], &[]),
                node("a", "C", &[], &[]),
                node("s", "_Retval", &["a"], &[]),
            ],
            &[],
        );
        assert!(matches!(hash_graph(&twice), Err(Unhashable::Invalid(_))));
        let missing_function = graph(
            &[node("m", "Map", &[], &[("f", func("nope"))]), node("s", "_Retval", &["m"], &[])],
            &[],
        );
        assert!(matches!(hash_graph(&missing_function), Err(Unhashable::Invalid(_))));
        assert_eq!(hash_graph(&[0xff, 0xff]), Err(Unhashable::Malformed));
    }
}
