//! A node without its inputs: its op (or the function it calls), its attributes (a function
//! an attribute names by its body) and its device.

use ring::digest;

use super::super::fingerprint::canonical_attr_value;
use super::super::raw::{WIRE_LEN, next_field};
use super::parse::{arg_type, is_dataset_op, name_attr_list};
use super::walk::{Body, Hasher};
use super::{Digest, Unhashable, hash};

impl<'a> Hasher<'a> {
    /// A node without its inputs: its op (or the function it calls), attributes and device.
    pub(super) fn non_input(
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
    pub(super) fn attr(
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
            let canonical = canonical_attr_value(value)?;
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
}
