//! Builds of one dataset hash alike, different datasets do not, and hostile graphs end
//! quickly with an error.

use std::time::Instant;

use prost::Message as _;

use super::parse::is_dataset_op;
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
                    value: Some(attr_value::Value::S(format!("name: \"range_{n}\"").into_bytes())),
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
    assert_eq!(a, hash_graph(&range_map(5, 2, true)).unwrap(), "unrelated nodes, library order");
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

/// Every sink counts: TensorFlow's workers run the last `_Retval`, so a sink appended to a
/// graph (or sinks in another order) is another dataset; one sink hashes as it always did.
#[test]
fn every_sink_counts() {
    let h = |nodes: &[NodeDef]| hash_graph(&graph(nodes, &[])).unwrap();
    let victim =
        [node("r", "RangeDataset", &[], &[("n", int(10))]), node("s", "_Retval", &["r"], &[])];
    let other = node("o", "RangeDataset", &[], &[("n", int(100))]);
    let appended =
        [victim[0].clone(), victim[1].clone(), other.clone(), node("t", "_Retval", &["o"], &[])];
    let swapped = [victim[0].clone(), other, node("t", "_Retval", &["o"], &[]), victim[1].clone()];
    assert_ne!(h(&victim), h(&appended));
    assert_ne!(h(&appended), h(&swapped));
    // Sink node names still do not count.
    let renamed = [victim[0].clone(), node("sink", "_Retval", &["r"], &[])];
    assert_eq!(h(&victim), h(&renamed));
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
    let f = function("f", &["x"], &[node("call", "Map", &["x"], &[("f", func("f"))])], "call:y:0");
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
        &[node("a", "C", &[], &[]), node("a", "C", &[], &[]), node("s", "_Retval", &["a"], &[])],
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
