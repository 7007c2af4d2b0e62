//! A TensorFlow dataset's graph, prepared as TensorFlow's dispatcher prepares it before it looks
//! the dataset up and stores it (TensorFlow 2.21, `GetOrRegisterDataset`):
//!
//! - every top-level node whose op makes a lookup table ([`NODE_NAME_SHARING_OPS`]) gets the
//!   attribute `use_node_name_sharing = true`, so that the table outlives the op that made it on
//!   the worker (without it, a dataset that looks values up in a `tf.lookup.StaticHashTable`
//!   fails on workers);
//! - the `device` of every top-level node and of every node of the library's functions is
//!   cleared (the client's placement means nothing on a worker).
//!
//! The edit is made on the encoded bytes, losslessly: the project's `.proto` files are subsets
//! (a decode-modify-encode would drop every field they leave out), so a small walker reads the
//! wire format along the path `GraphDef.node` / `GraphDef.library.function.node_def` and copies
//! every field it does not change byte for byte. Setting the attribute appends one more `attr`
//! map entry to the node: protobuf keeps the last entry of a key, so it overrides an earlier
//! value. A node whose last `use_node_name_sharing` entry already says `true` is left as it is,
//! so preparing twice is preparing once.
//!
//! Bytes that are not a graph (truncated, malformed, groups, absurd lengths) are refused with
//! [`Malformed`]: [`prepare_graph`] then keeps them as sent. The walker descends a fixed four
//! levels (never deeper, whatever the input nests) and allocates at most a few times the input.

pub use super::raw::Malformed;
use super::raw::{Field, WIRE_LEN, WIRE_VARINT, next_field, put_varint};

/// The ops whose `use_node_name_sharing` TensorFlow's dispatcher sets to `true`.
pub const NODE_NAME_SHARING_OPS: [&str; 8] = [
    "HashTable",
    "HashTableV2",
    "MutableHashTable",
    "MutableHashTableV2",
    "MutableDenseHashTable",
    "MutableDenseHashTableV2",
    "MutableHashTableOfTensors",
    "MutableHashTableOfTensorsV2",
];

/// The attribute set on table ops.
pub const USE_NODE_NAME_SHARING: &str = "use_node_name_sharing";

/// The `attr` map entry appended to a table node: `NodeDef.attr` (5) =
/// `{key (1): "use_node_name_sharing", value (2): AttrValue { b (5): true }}`.
const SHARING_ENTRY: [u8; 29] = {
    let key = USE_NODE_NAME_SHARING.as_bytes();
    let mut out = [0u8; 29];
    out[0] = (5 << 3) | 2; // NodeDef.attr, length-delimited
    out[1] = 27; // the entry's length
    out[2] = (1 << 3) | 2; // key
    out[3] = 21; // its length
    let mut i = 0;
    while i < 21 {
        out[4 + i] = key[i];
        i += 1;
    }
    out[25] = (2 << 3) | 2; // value: AttrValue
    out[26] = 2; // its length
    out[27] = 5 << 3; // AttrValue.b, varint
    out[28] = 1; // true
    out
};

/// The graph prepared as TensorFlow's dispatcher prepares it; the bytes as sent when they need
/// no change or are not a graph this can read.
pub fn prepare_graph(graph: Vec<u8>) -> Vec<u8> {
    match prepare(&graph) {
        Ok(Some(prepared)) => prepared,
        Ok(None) | Err(Malformed) => graph,
    }
}

/// The prepared graph: `Ok(None)` when it needs no change (the bytes are already prepared),
/// `Err` when the bytes are not a graph.
pub fn prepare(graph: &[u8]) -> Result<Option<Vec<u8>>, Malformed> {
    let mut rw = Rewrite::new(graph);
    let mut at = 0;
    while at < graph.len() {
        let f = next_field(graph, &mut at)?;
        let changed = match (f.number, f.wire) {
            // GraphDef.node
            (1, WIRE_LEN) => node(f.payload(graph), true)?,
            // GraphDef.library
            (2, WIRE_LEN) => library(f.payload(graph))?,
            _ => None,
        };
        if let Some(payload) = changed {
            rw.replace(&f, Some(&payload));
        }
    }
    Ok(rw.finish())
}

/// `FunctionDefLibrary`: its functions' nodes' devices cleared.
fn library(bytes: &[u8]) -> Result<Option<Vec<u8>>, Malformed> {
    let mut rw = Rewrite::new(bytes);
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        // FunctionDefLibrary.function
        if (f.number, f.wire) == (1, WIRE_LEN)
            && let Some(payload) = function(f.payload(bytes))?
        {
            rw.replace(&f, Some(&payload));
        }
    }
    Ok(rw.finish())
}

/// `FunctionDef`: its nodes' devices cleared.
fn function(bytes: &[u8]) -> Result<Option<Vec<u8>>, Malformed> {
    let mut rw = Rewrite::new(bytes);
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        // FunctionDef.node_def
        if (f.number, f.wire) == (3, WIRE_LEN)
            && let Some(payload) = node(f.payload(bytes), false)?
        {
            rw.replace(&f, Some(&payload));
        }
    }
    Ok(rw.finish())
}

/// `NodeDef`: its device cleared and, at the top level, a table op's `use_node_name_sharing`
/// set.
fn node(bytes: &[u8], top_level: bool) -> Result<Option<Vec<u8>>, Malformed> {
    let mut rw = Rewrite::new(bytes);
    let mut op: &[u8] = b"";
    let mut sharing = false;
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        match (f.number, f.wire) {
            // NodeDef.op (the last one counts)
            (2, WIRE_LEN) => op = f.payload(bytes),
            // NodeDef.device
            (4, WIRE_LEN) => rw.replace(&f, None),
            // NodeDef.attr (the last entry of a key counts)
            (5, WIRE_LEN) if top_level => {
                if let Some(is_true) = sharing_entry(f.payload(bytes))? {
                    sharing = is_true;
                }
            }
            _ => {}
        }
    }
    let table = top_level && NODE_NAME_SHARING_OPS.iter().any(|o| o.as_bytes() == op);
    let mut out = rw.finish();
    if table && !sharing {
        let mut with = out.unwrap_or_else(|| bytes.to_vec());
        with.extend_from_slice(&SHARING_ENTRY);
        out = Some(with);
    }
    Ok(out)
}

/// An `attr` map entry: `Some(whether its value is b=true)` when its key is
/// `use_node_name_sharing`, `None` for any other key.
fn sharing_entry(bytes: &[u8]) -> Result<Option<bool>, Malformed> {
    let mut key: &[u8] = b"";
    let mut value: &[u8] = b"";
    let mut at = 0;
    while at < bytes.len() {
        let f = next_field(bytes, &mut at)?;
        match (f.number, f.wire) {
            (1, WIRE_LEN) => key = f.payload(bytes),
            (2, WIRE_LEN) => value = f.payload(bytes),
            _ => {}
        }
    }
    if key != USE_NODE_NAME_SHARING.as_bytes() {
        return Ok(None);
    }
    // AttrValue's `value` is a oneof of fields 1 to 10: the last one counts; true only when
    // it is `b` (5), a varint, not 0.
    let mut is_true = false;
    let mut at = 0;
    while at < value.len() {
        let f = next_field(value, &mut at)?;
        if (1..=10).contains(&f.number) {
            is_true = f.number == 5 && f.wire == WIRE_VARINT && f.varint != 0;
        }
    }
    Ok(Some(is_true))
}

/// A message's bytes with some fields replaced: everything else copied byte for byte. Nothing
/// is allocated until the first replacement.
struct Rewrite<'a> {
    src: &'a [u8],
    out: Option<Vec<u8>>,
    /// `src[..copied]` is accounted for in `out`.
    copied: usize,
}

impl<'a> Rewrite<'a> {
    fn new(src: &'a [u8]) -> Rewrite<'a> {
        Rewrite { src, out: None, copied: 0 }
    }

    /// Replaces the length-delimited field `f` (fields come in order) by the same tag with
    /// `payload`, or removes it (`None`).
    fn replace(&mut self, f: &Field, payload: Option<&[u8]>) {
        let out = self.out.get_or_insert_with(|| Vec::with_capacity(self.src.len() + 64));
        out.extend_from_slice(&self.src[self.copied..f.start]);
        if let Some(payload) = payload {
            out.extend_from_slice(&self.src[f.start..f.tag_end]);
            put_varint(out, payload.len() as u64);
            out.extend_from_slice(payload);
        }
        self.copied = f.end;
    }

    /// The rewritten bytes; `None` when nothing was replaced.
    fn finish(self) -> Option<Vec<u8>> {
        let mut out = self.out?;
        out.extend_from_slice(&self.src[self.copied..]);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use prost::Message as _;

    use super::*;
    use crate::tensorflow::proto::tensorflow::{
        AttrValue, FunctionDef, FunctionDefLibrary, GraphDef, NodeDef, attr_value,
    };

    fn attr_b(b: bool) -> AttrValue {
        AttrValue { value: Some(attr_value::Value::B(b)) }
    }

    fn attr_s(s: &str) -> AttrValue {
        AttrValue { value: Some(attr_value::Value::S(s.as_bytes().to_vec())) }
    }

    fn node(name: &str, op: &str, device: &str) -> NodeDef {
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: vec!["x".into()],
            device: device.into(),
            attr: HashMap::from([("container".to_owned(), attr_s(""))]),
        }
    }

    fn library(nodes: Vec<NodeDef>) -> FunctionDefLibrary {
        FunctionDefLibrary { function: vec![FunctionDef { signature: None, node_def: nodes }] }
    }

    fn field(number: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, (number << 3) | 2);
        put_varint(&mut out, payload.len() as u64);
        out.extend_from_slice(payload);
        out
    }

    fn sharing(n: &NodeDef) -> Option<&AttrValue> {
        n.attr.get(USE_NODE_NAME_SHARING)
    }

    #[test]
    fn the_appended_entry_is_what_prost_writes() {
        let mut n = NodeDef::default();
        n.attr.insert(USE_NODE_NAME_SHARING.into(), attr_b(true));
        assert_eq!(n.encode_to_vec(), SHARING_ENTRY);
    }

    #[test]
    fn table_ops_share_by_name_and_devices_are_cleared() {
        let mut nodes: Vec<NodeDef> = NODE_NAME_SHARING_OPS
            .iter()
            .map(|op| node(&format!("t_{op}"), op, "/job:localhost/device:CPU:0"))
            .collect();
        // An explicit false is overridden; a lookalike op is not a table.
        nodes[1].attr.insert(USE_NODE_NAME_SHARING.into(), attr_b(false));
        nodes.push(node("c", "Const", "/device:CPU:0"));
        nodes.push(node("h", "HashTableV3", ""));
        nodes.push(node("lookup", "LookupTableFindV2", "/device:GPU:0"));
        let lib_nodes = vec![node("f1", "Identity", "/device:CPU:0"), node("f2", "HashTable", "")];
        let graph = GraphDef { node: nodes, library: Some(library(lib_nodes)) };
        let prepared = prepare(&graph.encode_to_vec()).unwrap().expect("changed");
        let back = GraphDef::decode(&prepared[..]).unwrap();
        assert_eq!(back.node.len(), graph.node.len());
        for (before, after) in graph.node.iter().zip(&back.node) {
            let table = NODE_NAME_SHARING_OPS.contains(&before.op.as_str());
            assert_eq!(sharing(after) == Some(&attr_b(true)), table, "{}", before.op);
            if !table {
                assert_eq!(sharing(after), None, "{}", before.op);
            }
            assert_eq!(after.device, "", "{}", before.name);
            // Everything else as it was.
            let mut expected = before.clone();
            expected.device.clear();
            if table {
                expected.attr.insert(USE_NODE_NAME_SHARING.into(), attr_b(true));
            }
            assert_eq!(after, &expected);
        }
        // Library functions: devices cleared, no attribute added (TensorFlow sets it on
        // top-level nodes only).
        let f = &back.library.as_ref().unwrap().function[0];
        assert!(f.node_def.iter().all(|n| n.device.is_empty()));
        assert!(f.node_def.iter().all(|n| sharing(n).is_none()));
        assert_eq!(f.node_def[1].op, "HashTable");
    }

    #[test]
    fn nodes_it_does_not_change_are_copied_byte_for_byte_with_unknown_fields() {
        // A node with an unknown field (99, a varint and a string) and an unknown GraphDef
        // field (`versions`, 4), which the checked-in subset does not know.
        let plain = node("c", "Const", "").encode_to_vec();
        let unknown = [plain.clone(), vec![0x98, 0x06, 0x07], field(99, b"keep me")].concat();
        let table =
            [node("t", "HashTableV2", "/device:CPU:0").encode_to_vec(), vec![0x98, 0x06, 0x2a]]
                .concat();
        let versions = field(4, &[0x08, 0x1b, 0x10, 0x01]);
        let graph = [field(1, &unknown), field(1, &table), versions.clone()].concat();
        let prepared = prepare(&graph).unwrap().expect("changed");
        // The untouched node and the unknown graph field: the same bytes, in place.
        let untouched = field(1, &unknown);
        assert_eq!(&prepared[..untouched.len()], &untouched[..]);
        assert!(prepared.ends_with(&versions));
        // The table node: its unknown field kept, the device dropped, the entry appended.
        let mut expected_table = NodeDef::decode(&table[..]).unwrap();
        expected_table.device.clear();
        let start = untouched.len();
        let table_field = &prepared[start..prepared.len() - versions.len()];
        let mut at = 0;
        let f = next_field(table_field, &mut at).unwrap();
        assert_eq!(at, table_field.len());
        let new_table = f.payload(table_field);
        assert!(new_table.ends_with(&[&[0x98, 0x06, 0x2a][..], &SHARING_ENTRY].concat()));
        expected_table.attr.insert(USE_NODE_NAME_SHARING.into(), attr_b(true));
        assert_eq!(NodeDef::decode(new_table).unwrap(), expected_table);
    }

    #[test]
    fn preparing_twice_is_preparing_once_and_a_prepared_graph_is_unchanged() {
        let graph = GraphDef {
            node: vec![node("t", "MutableHashTable", "/device:CPU:0"), node("c", "Const", "")],
            library: Some(library(vec![node("f", "Identity", "/device:CPU:0")])),
        }
        .encode_to_vec();
        let once = prepare(&graph).unwrap().expect("changed");
        assert_eq!(prepare(&once), Ok(None));
        assert_eq!(prepare_graph(once.clone()), once);
        // A graph with nothing to prepare (no table, no device) is kept as it is, unallocated.
        let plain = GraphDef {
            node: vec![node("c", "Const", ""), node("r", "RangeDataset", "")],
            library: Some(library(vec![node("f", "Identity", "")])),
        }
        .encode_to_vec();
        assert_eq!(prepare(&plain), Ok(None));
        assert_eq!(prepare(&[]), Ok(None));
        // A table whose last entry already says true is left alone; an earlier true
        // overridden by a later false is set again.
        let mut t = node("t", "HashTable", "");
        t.attr.insert(USE_NODE_NAME_SHARING.into(), attr_b(true));
        let already = field(1, &t.encode_to_vec());
        assert_eq!(prepare(&already), Ok(None));
        let mut f = NodeDef::default();
        f.attr.insert(USE_NODE_NAME_SHARING.into(), attr_b(false));
        let flipped = field(1, &[t.encode_to_vec(), f.encode_to_vec()].concat());
        let fixed = prepare(&flipped).unwrap().expect("changed");
        let back = GraphDef::decode(&fixed[..]).unwrap();
        assert_eq!(sharing(&back.node[0]), Some(&attr_b(true)));
        assert_eq!(prepare(&fixed), Ok(None));
    }

    #[test]
    fn malformed_graphs_are_refused_and_kept_as_sent() {
        let good = GraphDef {
            node: vec![node("t", "HashTable", "/device:CPU:0")],
            library: Some(library(vec![node("f", "Identity", "/device:CPU:0")])),
        }
        .encode_to_vec();
        let cases: Vec<Vec<u8>> = vec![
            vec![0xff; 11],                           // a varint too long
            vec![0x0a, 0x05, 0x01],                   // a length past the end
            vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f], // an absurd length
            vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            vec![0x0b, 0x0c],                              // a group
            vec![0x0e],                                    // wire type 6
            vec![0x00, 0x00],                              // field number 0
            vec![0x0a, 0x02, 0x13, 0x14],                  // a group inside a node
            field(2, &field(1, &field(3, &[0x22, 0x09]))), // a device past the end, deep
            good[..good.len() - 1].to_vec(),               // truncated
        ];
        for bad in cases {
            assert_eq!(prepare(&bad), Err(Malformed), "{bad:?}");
            assert_eq!(prepare_graph(bad.clone()), bad);
        }
    }

    #[test]
    fn random_and_mutated_bytes_never_panic_and_stay_bounded() {
        let good = GraphDef {
            node: vec![
                node("t", "HashTableV2", "/device:CPU:0"),
                node("c", "Const", "/device:CPU:0"),
            ],
            library: Some(library(vec![node("f", "HashTable", "/device:CPU:0")])),
        }
        .encode_to_vec();
        // xorshift64*: deterministic.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        for round in 0..20_000 {
            let input: Vec<u8> = if round % 2 == 0 {
                let len = (next() % 64) as usize;
                (0..len).map(|_| next() as u8).collect()
            } else {
                let mut m = good.clone();
                for _ in 0..=(next() % 4) {
                    let i = (next() as usize) % m.len();
                    m[i] = next() as u8;
                }
                m.truncate(m.len() - (next() as usize % 3));
                m
            };
            if let Ok(Some(out)) = prepare(&input) {
                // At most one entry (and a few length bytes) per node: a small multiple.
                assert!(out.len() <= 4 * input.len() + 64, "{input:?}");
                // What it wrote is prepared.
                assert_eq!(prepare(&out), Ok(None), "{input:?}");
            }
        }
    }

    #[test]
    fn deep_nesting_is_not_followed() {
        // A node whose attr value nests 10,000 levels: the walker never reads attr values
        // but the sharing one, so it neither recurses nor refuses.
        let mut deep = Vec::new();
        for _ in 0..10_000 {
            deep = field(1, &deep);
        }
        let mut n = node("c", "Const", "/device:CPU:0").encode_to_vec();
        n.extend(field(5, &[field(1, b"deep"), field(2, &deep)].concat()));
        let graph = field(1, &n);
        let prepared = prepare(&graph).unwrap().expect("device cleared");
        assert!(prepared.len() < graph.len());
    }
}
