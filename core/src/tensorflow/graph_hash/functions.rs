//! A library function, by its body: its return values in signature order and its control
//! returns as a multiset, each hashed as a graph rooted there.

use ring::digest;

use super::parse::{Function, Node};
use super::walk::Hasher;
use super::{Digest, MAX_FUNCTION_DEPTH, Unhashable};

impl<'a> Hasher<'a> {
    /// A library function, by its body.
    pub(super) fn function(&mut self, name: &'a [u8], depth: usize) -> Result<Digest, Unhashable> {
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

    pub(super) fn function_body(
        &mut self,
        fun: &'a Function<'a>,
        depth: usize,
    ) -> Result<Digest, Unhashable> {
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
