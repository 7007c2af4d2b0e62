//! A TensorFlow dataset's fingerprint: the same for two serializations of one dataset, and
//! for two builds of one dataset (by its structure: see [`graph_hash`](super::graph_hash)).
//!
//! The graph counts by its structural hash (TensorFlow's `HashGraph`: node and function names,
//! unreachable nodes, the library's order and shuffle seeds do not count). A graph that
//! hash cannot read (no sink, an input naming no node, a bound reached) counts by its
//! canonical bytes, as below.
//!
//! Two TensorFlow processes that serialize the same dataset write the same graph with the
//! entries of its protobuf maps (a node's `attr`, a function's `attr`, `arg_attr`, `ret`, ...)
//! in different orders: TensorFlow writes maps in hash order. TensorFlow's dispatcher answers
//! both registrations with one dataset (it fingerprints the graph), which is what lets clients
//! in different processes share a job by `job_name` and read it coordinated. The fingerprint
//! here reads the graph's wire format with the schema of the messages that hold maps
//! ([`Kind`]), sorts every map's entries, puts fields in field-number order (keeping the order
//! within a repeated field), and hashes the result (SHA-256) with the client's metadata.
//! Fields it does not know are hashed as they are; bytes it cannot read are hashed as sent
//! (then only identical bytes share a fingerprint: never two different datasets).

use ring::digest;

use super::graph_hash::hash_graph;
use super::raw::{Malformed, WIRE_LEN, next_field, put_varint};

/// The deepest message nesting read (attribute values nest through functions).
const MAX_DEPTH: usize = 100;

/// The messages of a graph whose fields (or whose sub-messages' fields) are maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    GraphDef,
    NodeDef,
    AttrValue,
    ListValue,
    NameAttrList,
    FunctionDefLibrary,
    FunctionDef,
    ArgAttrs,
    /// Any other message: its bytes as they are.
    Opaque,
}

/// What field `number` of a `kind` message holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// A (repeated or singular) sub-message of this kind.
    Message(Kind),
    /// A map whose values are messages of this kind (`Opaque` for scalars and strings).
    Map(Kind),
    /// Anything else: as it is.
    Raw,
}

fn field(kind: Kind, number: u64) -> Field {
    use Field::{Map, Message, Raw};
    use Kind::*;
    match (kind, number) {
        (GraphDef, 1) => Message(NodeDef),
        (GraphDef, 2) => Message(FunctionDefLibrary),
        (NodeDef, 5) => Map(AttrValue),
        (AttrValue, 1) => Message(ListValue),
        (AttrValue, 10) => Message(NameAttrList),
        (ListValue, 9) => Message(NameAttrList),
        (NameAttrList, 2) => Map(AttrValue),
        (FunctionDefLibrary, 1) => Message(FunctionDef),
        (FunctionDef, 3) => Message(NodeDef),
        // ret, control_ret (string to string), resource_arg_unique_id (uint32 to uint32).
        (FunctionDef, 4 | 6 | 8) => Map(Opaque),
        (FunctionDef, 5) => Map(AttrValue),
        (FunctionDef, 7) => Map(ArgAttrs),
        (ArgAttrs, 1) => Map(AttrValue),
        _ => Raw,
    }
}

/// One field of a message, canonical: its number, wire type and (canonical) payload.
struct Entry {
    number: u64,
    wire: u8,
    payload: Vec<u8>,
}

/// `bytes`, a `kind` message, in canonical form.
fn canonical(kind: Kind, bytes: &[u8], depth: usize) -> Result<Vec<u8>, Malformed> {
    if kind == Kind::Opaque {
        return Ok(bytes.to_vec());
    }
    if depth > MAX_DEPTH {
        return Err(Malformed);
    }
    let mut entries = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        let payload = match (f.wire, field(kind, f.number)) {
            (WIRE_LEN, Field::Message(k)) => canonical(k, f.payload(bytes), depth + 1)?,
            (WIRE_LEN, Field::Map(k)) => map_entry(k, f.payload(bytes), depth + 1)?,
            _ => f.payload(bytes).to_vec(),
        };
        entries.push(Entry { number: f.number, wire: f.wire, payload });
    }
    // Fields in number order (the order within one repeated field kept), a map's entries in
    // the order of their canonical bytes (keys first).
    entries.sort_by_key(|e| e.number);
    let mut i = 0;
    while i < entries.len() {
        let j = i + entries[i..].iter().take_while(|e| e.number == entries[i].number).count();
        if matches!(field(kind, entries[i].number), Field::Map(_)) {
            entries[i..j].sort_by(|a, b| a.payload.cmp(&b.payload));
        }
        i = j;
    }
    let mut out = Vec::with_capacity(bytes.len());
    for e in entries {
        put_varint(&mut out, (e.number << 3) | u64::from(e.wire));
        if e.wire == 2 {
            put_varint(&mut out, e.payload.len() as u64);
        }
        out.extend_from_slice(&e.payload);
    }
    Ok(out)
}

/// A map entry (`key = 1`, `value = 2` of `value_kind`), canonical.
fn map_entry(value_kind: Kind, bytes: &[u8], depth: usize) -> Result<Vec<u8>, Malformed> {
    let mut entries = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        let payload = match (f.number, f.wire) {
            (2, WIRE_LEN) => canonical(value_kind, f.payload(bytes), depth + 1)?,
            _ => f.payload(bytes).to_vec(),
        };
        entries.push(Entry { number: f.number, wire: f.wire, payload });
    }
    entries.sort_by_key(|e| e.number);
    let mut out = Vec::with_capacity(bytes.len());
    for e in entries {
        put_varint(&mut out, (e.number << 3) | u64::from(e.wire));
        if e.wire == 2 {
            put_varint(&mut out, e.payload.len() as u64);
        }
        out.extend_from_slice(&e.payload);
    }
    Ok(out)
}

/// The serialized `GraphDef` in canonical form: every map's entries sorted, fields in number
/// order. `None` when the bytes are not a graph this can read.
pub fn canonical_graph(graph: &[u8]) -> Option<Vec<u8>> {
    canonical(Kind::GraphDef, graph, 0).ok()
}

/// A serialized `AttrValue` in canonical form (its maps' entries sorted).
pub(crate) fn canonical_attr_value(value: &[u8]) -> Result<Vec<u8>, Malformed> {
    canonical(Kind::AttrValue, value, 0)
}

/// The fingerprint of a TensorFlow dataset (its graph's structure and the client's metadata:
/// element spec, compression, cardinality), as 32 hex digits (128 bits of SHA-256): equal for
/// two serializations or builds of one dataset, different for different datasets.
pub fn fingerprint(
    graph: &[u8],
    element_spec: Option<&[u8]>,
    compression: i32,
    cardinality: i64,
) -> String {
    let mut ctx = digest::Context::new(&digest::SHA256);
    // By structure (TensorFlow's `HashGraph`); a graph that cannot be hashed so, by its
    // canonical bytes; bytes that are not a graph, as sent.
    if let Ok(structure) = hash_graph(graph) {
        ctx.update(b"graph structure\0");
        ctx.update(&structure);
    } else if let Some(g) = canonical_graph(graph) {
        ctx.update(b"canonical graph\0");
        ctx.update(&(g.len() as u64).to_le_bytes());
        ctx.update(&g);
    } else {
        ctx.update(b"graph bytes\0");
        ctx.update(&(graph.len() as u64).to_le_bytes());
        ctx.update(graph);
    }
    match element_spec {
        None => ctx.update(b"no element spec\0"),
        Some(spec) => {
            ctx.update(b"element spec\0");
            ctx.update(&(spec.len() as u64).to_le_bytes());
            ctx.update(spec);
        }
    }
    ctx.update(&compression.to_le_bytes());
    ctx.update(&cardinality.to_le_bytes());
    let d = ctx.finish();
    d.as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensorflow::proto::tensorflow::{AttrValue, GraphDef, NodeDef, attr_value};
    use prost::Message as _;

    fn attr_i(v: i64) -> AttrValue {
        AttrValue { value: Some(attr_value::Value::I(v)) }
    }

    /// A node with attributes `a..=e` written in the order of `order`.
    fn encoded_node_with_attrs(order: &[usize]) -> Vec<u8> {
        // prost writes a HashMap in its own order: write the entries by hand instead.
        let names = ["a", "b", "c", "d", "e"];
        let mut node =
            NodeDef { name: "n".into(), op: "Const".into(), ..Default::default() }.encode_to_vec();
        for &i in order {
            let mut one = NodeDef::default();
            one.attr.insert(names[i].into(), attr_i(i as i64));
            node.extend(one.encode_to_vec());
        }
        let mut graph = Vec::new();
        put_varint(&mut graph, (1 << 3) | 2);
        put_varint(&mut graph, node.len() as u64);
        graph.extend(node);
        graph
    }

    #[test]
    fn map_order_does_not_change_the_fingerprint_and_content_does() {
        let a = encoded_node_with_attrs(&[0, 1, 2, 3, 4]);
        let b = encoded_node_with_attrs(&[4, 2, 0, 3, 1]);
        assert_ne!(a, b, "different bytes");
        // Both decode to the same graph.
        assert_eq!(GraphDef::decode(&a[..]).unwrap(), GraphDef::decode(&b[..]).unwrap());
        assert_eq!(canonical_graph(&a), canonical_graph(&b));
        assert_eq!(fingerprint(&a, None, 0, 0), fingerprint(&b, None, 0, 0));
        // A different graph, or different metadata: a different fingerprint.
        let c = encoded_node_with_attrs(&[0, 1, 2, 3]);
        assert_ne!(fingerprint(&a, None, 0, 0), fingerprint(&c, None, 0, 0));
        assert_ne!(fingerprint(&a, None, 0, 0), fingerprint(&a, Some(b""), 0, 0));
        assert_ne!(fingerprint(&a, None, 0, 0), fingerprint(&a, None, 2, 0));
        assert_ne!(fingerprint(&a, None, 0, 0), fingerprint(&a, None, 0, -2));
        assert_eq!(fingerprint(&a, None, 0, 0).len(), 32);
    }

    #[test]
    fn the_order_of_nodes_and_inputs_is_kept() {
        let node = |name: &str, inputs: &[&str]| NodeDef {
            name: name.into(),
            op: "X".into(),
            input: inputs.iter().map(|&s| s.to_owned()).collect(),
            ..Default::default()
        };
        let g1 = GraphDef { node: vec![node("a", &["x", "y"])], library: None };
        let g2 = GraphDef { node: vec![node("a", &["y", "x"])], library: None };
        assert_ne!(canonical_graph(&g1.encode_to_vec()), canonical_graph(&g2.encode_to_vec()));
        let g3 = GraphDef { node: vec![node("a", &[]), node("b", &[])], library: None };
        let g4 = GraphDef { node: vec![node("b", &[]), node("a", &[])], library: None };
        assert_ne!(canonical_graph(&g3.encode_to_vec()), canonical_graph(&g4.encode_to_vec()));
    }

    #[test]
    fn unreadable_bytes_are_fingerprinted_as_sent() {
        for bad in [&[0xffu8, 0xff, 0xff][..], &[0x0a, 0x05, 0x01], &[0x0b]] {
            assert_eq!(canonical_graph(bad), None, "{bad:?}");
            assert_eq!(fingerprint(bad, None, 0, 0), fingerprint(bad, None, 0, 0));
        }
        assert_ne!(fingerprint(&[0xff], None, 0, 0), fingerprint(&[0xfe], None, 0, 0));
        // Nesting past the bound is unreadable, not a stack overflow.
        // (AttrValue.func = NameAttrList { attr = { "k": AttrValue ... } }, 1,000 deep.)
        let wrap = |number: u64, inner: Vec<u8>| {
            let mut out = Vec::new();
            put_varint(&mut out, (number << 3) | 2);
            put_varint(&mut out, inner.len() as u64);
            out.extend(inner);
            out
        };
        let mut deep = Vec::new();
        for _ in 0..1_000 {
            let entry = [wrap(1, b"k".to_vec()), wrap(2, deep)].concat();
            deep = wrap(10, wrap(2, entry));
        }
        assert_eq!(canonical(Kind::AttrValue, &deep, 0).ok(), None);
        // A few levels are read.
        let mut shallow = Vec::new();
        for _ in 0..5 {
            let entry = [wrap(1, b"k".to_vec()), wrap(2, shallow)].concat();
            shallow = wrap(10, wrap(2, entry));
        }
        assert!(canonical(Kind::AttrValue, &shallow, 0).is_ok());
    }
}
