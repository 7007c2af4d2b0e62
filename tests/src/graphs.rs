//! TensorFlow graphs built by hand for the tests that talk to the dispatcher over gRPC: the
//! `NodeDef`s and serialized `GraphDef`s a TensorFlow client would register, without
//! TensorFlow.

use prost::Message as _;
use shardwise_gateway::tf::proto::tensorflow::{
    AttrValue, DataType, GraphDef, NodeDef, TensorProto, TensorShapeProto, attr_value,
};

/// A node `name` running `op` on `inputs`, without attributes.
pub fn node(name: &str, op: &str, inputs: &[&str]) -> NodeDef {
    NodeDef {
        name: name.into(),
        op: op.into(),
        input: inputs.iter().map(|&i| i.to_owned()).collect(),
        ..Default::default()
    }
}

/// A `Const` node `name` whose `value` attribute is `tensor`.
pub fn const_node(name: &str, tensor: TensorProto) -> NodeDef {
    let mut n = node(name, "Const", &[]);
    n.attr.insert("value".into(), AttrValue { value: Some(attr_value::Value::Tensor(tensor)) });
    n
}

/// A `Const` node `name` holding the int64 scalar `value` (in `int64_val`).
pub fn scalar(name: &str, value: i64) -> NodeDef {
    const_node(
        name,
        TensorProto {
            dtype: DataType::DtInt64 as i32,
            tensor_shape: Some(TensorShapeProto::default()),
            int64_val: vec![value],
            ..Default::default()
        },
    )
}

/// A `Const` node `name` holding the string scalar `value` (in `string_val`).
pub fn string_scalar(name: &str, value: &str) -> NodeDef {
    const_node(
        name,
        TensorProto {
            dtype: DataType::DtString as i32,
            tensor_shape: Some(TensorShapeProto::default()),
            string_val: vec![value.as_bytes().to_vec()],
            ..Default::default()
        },
    )
}

/// A `Const` node `name` of `bytes` bytes of int64 `tensor_content` (0, 1, ... 250, 0, ...):
/// a model's weights captured by a dataset, say.
pub fn weights(name: &str, bytes: usize) -> NodeDef {
    const_node(
        name,
        TensorProto {
            dtype: DataType::DtInt64 as i32,
            tensor_content: (0..bytes).map(|i| (i % 251) as u8).collect(),
            ..Default::default()
        },
    )
}

/// `nodes` as a serialized `GraphDef` (no function library).
pub fn encode(nodes: Vec<NodeDef>) -> Vec<u8> {
    GraphDef { node: nodes, library: None }.encode_to_vec()
}

/// The serialized graph of `range(start, stop, step)` as TensorFlow builds it (three `Const`
/// nodes, a `RangeDataset` and the `_Retval`), plus `extra` nodes off the output's path.
pub fn range_graph(start: i64, stop: i64, step: i64, extra: Vec<NodeDef>) -> Vec<u8> {
    let mut nodes = vec![
        scalar("start", start),
        scalar("stop", stop),
        scalar("step", step),
        node("range", "RangeDataset", &["start", "stop", "step"]),
        node("dataset", "_Retval", &["range"]),
    ];
    nodes.extend(extra);
    encode(nodes)
}
