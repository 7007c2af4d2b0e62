//! The walk over one graph (the top-level graph, or a function's body): a breadth-first walk
//! from its roots cuts cycles, then every node is hashed once, from the leaves up.

use std::collections::HashMap;

use ring::digest;

use super::parse::{Function, Node, is_seed_input};
use super::{Digest, Unhashable, hash};

/// One graph to hash from its roots: the top-level graph, or a function's body.
pub(super) struct Body<'a, 'g> {
    pub(super) nodes: &'g [Node<'a>],
    pub(super) by_name: HashMap<&'a [u8], usize>,
    /// The non-input hashes, with and without functions.
    pub(super) non_input: [Vec<Option<Digest>>; 2],
}

/// A node's inputs after the breadth-first walk: data inputs (node, suffix, whether the edge
/// closes a cycle) and control inputs.
#[derive(Default)]
struct Rep<'a> {
    inputs: Vec<(usize, &'a [u8], bool)>,
    controls: Vec<usize>,
}

/// The hashing of one graph and the functions it reaches: its library, the function hashes
/// computed so far, and the work done.
pub(super) struct Hasher<'a> {
    pub(super) functions: &'a HashMap<&'a [u8], Function<'a>>,
    /// Function hashes by name (a function's hash does not depend on where it is called).
    pub(super) function_cache: HashMap<&'a [u8], Digest>,
    /// Functions being hashed (a function reached again inside itself is an error).
    pub(super) in_progress: Vec<&'a [u8]>,
    /// Steps taken, and the most allowed ([`MAX_WORK`](super::MAX_WORK) for a dataset).
    work: usize,
    max_work: usize,
}

impl<'a> Hasher<'a> {
    /// A hasher of a graph whose library is `functions`, that may take `max_work` steps.
    pub(super) fn new(functions: &'a HashMap<&'a [u8], Function<'a>>, max_work: usize) -> Self {
        Hasher { functions, function_cache: HashMap::new(), in_progress: vec![], work: 0, max_work }
    }

    pub(super) fn tick(&mut self, n: usize) -> Result<(), Unhashable> {
        self.work = self.work.saturating_add(n);
        if self.work > self.max_work {
            Err(Unhashable::TooLarge("more than MAX_WORK steps"))
        } else {
            Ok(())
        }
    }

    pub(super) fn body<'g>(&mut self, nodes: &'g [Node<'a>]) -> Result<Body<'a, 'g>, Unhashable> {
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
    pub(super) fn hash_roots(
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
}
