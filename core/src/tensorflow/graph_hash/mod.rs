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
//! - Only what the dataset's sinks (its `_Retval` nodes) reach counts: unreachable nodes and
//!   functions are ignored. TensorFlow hashes from the first sink and its workers run the
//!   last; every sink counts here (in order), so a graph with a sink appended never hashes as
//!   the graph without it.
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
//!
//! The code by concern: `parse` reads the graph's nodes and functions off the bytes,
//! `walk` cuts cycles and hashes one graph from its roots, `nodes` hashes a node without its
//! inputs (its op and attributes), `functions` hashes a library function by its body.

mod functions;
mod nodes;
mod parse;
mod walk;

use ring::digest;

use self::parse::parse_graph;
use self::walk::Hasher;
use super::raw::Malformed;

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

/// The structural hash of a serialized `GraphDef` rooted at its `_Retval` nodes, with the
/// semantics of TensorFlow's `HashGraph` (see the module): equal for two builds of one dataset,
/// whatever their node and function names and the order of their function library.
pub fn hash_graph(graph: &[u8]) -> Result<[u8; 32], Unhashable> {
    hash_graph_within(graph, MAX_WORK)
}

fn hash_graph_within(graph: &[u8], max_work: usize) -> Result<[u8; 32], Unhashable> {
    let (nodes, functions) = parse_graph(graph)?;
    // Every sink counts, in graph order: TensorFlow's workers run the dataset of the *last*
    // `_Retval` node (its `HashGraph` looks at the first), so two graphs that differ in any
    // sink must hash apart.
    let sinks: Vec<(usize, &[u8])> =
        (0..nodes.len()).filter(|&i| nodes[i].op == b"_Retval").map(|i| (i, &[][..])).collect();
    if sinks.is_empty() {
        return Err(Unhashable::Invalid("the graph has no _Retval node".into()));
    }
    let mut hasher = Hasher::new(&functions, max_work);
    let mut body = hasher.body(&nodes)?;
    let roots = hasher.hash_roots(&mut body, &sinks, 0)?;
    match roots[..] {
        // One sink (every graph TensorFlow's clients send): its hash.
        [root] => Ok(root),
        _ => {
            let parts: Vec<&[u8]> =
                std::iter::once(&b"sinks"[..]).chain(roots.iter().map(|r| &r[..])).collect();
            Ok(hash(&parts))
        }
    }
}

#[cfg(test)]
mod tests;
