//! The graph walk's tests: sources, transformations, refusals, hostile graphs, constants.

use super::*;
use crate::tensorflow::proto::tensorflow::{
    AttrValue, FunctionDef, FunctionDefLibrary, NameAttrList, NodeDef, OpDef, TensorShapeProto,
    attr_value, tensor_shape_proto,
};

fn node(name: &str, op: &str, inputs: &[&str]) -> NodeDef {
    NodeDef {
        name: name.into(),
        op: op.into(),
        input: inputs.iter().map(|&i| i.to_owned()).collect(),
        ..Default::default()
    }
}

fn with_tensor(mut node: NodeDef, tensor: TensorProto) -> NodeDef {
    node.attr.insert("value".into(), AttrValue { value: Some(attr_value::Value::Tensor(tensor)) });
    node
}

fn shape(dims: &[i64]) -> Option<TensorShapeProto> {
    Some(TensorShapeProto {
        dim: dims
            .iter()
            .map(|&size| tensor_shape_proto::Dim { size, name: String::new() })
            .collect(),
        unknown_rank: false,
    })
}

/// A `Const` int64 scalar, as TensorFlow writes it (`int64_val`).
fn scalar(name: &str, value: i64) -> NodeDef {
    with_tensor(
        node(name, "Const", &[]),
        TensorProto {
            dtype: DataType::DtInt64 as i32,
            tensor_shape: shape(&[]),
            int64_val: vec![value],
            ..Default::default()
        },
    )
}

/// `range(start, stop, step)` as the nodes `NAME/start`, `NAME/stop`, `NAME/step`, `NAME`.
fn range(name: &str, start: i64, stop: i64, step: i64) -> Vec<NodeDef> {
    let [a, b, c] = ["start", "stop", "step"].map(|s| format!("{name}/{s}"));
    vec![
        scalar(&a, start),
        scalar(&b, stop),
        scalar(&c, step),
        node(name, "RangeDataset", &[&a, &b, &c]),
    ]
}

fn graph(mut nodes: Vec<NodeDef>, output: &str) -> GraphDef {
    nodes.push(node("dataset", "_Retval", &[output]));
    GraphDef { node: nodes, library: None }
}

fn split_providers_no_files(graph: &GraphDef) -> Result<Vec<SplitProvider>, GraphError> {
    split_providers(graph, &NoFiles)
}

fn splits(provider: &SplitProvider) -> Vec<i64> {
    (0..provider.num_splits()).map(|i| provider.split_value(i).expect("split")).collect()
}

fn unsupported_op(graph: &GraphDef) -> String {
    let err = split_providers_no_files(graph).expect_err("refused");
    err.op().unwrap_or_else(|| panic!("names no op: {err}")).to_owned()
}

#[test]
fn range_splits_are_its_elements() {
    let providers = split_providers_no_files(&graph(range("r", 5, 20, 5), "r")).expect("providers");
    assert_eq!(providers, [SplitProvider::Range { start: 5, stop: 20, step: 5 }]);
    assert_eq!(splits(&providers[0]), [5, 10, 15]);
    assert_eq!(providers[0].split(3), None);
    assert_eq!(providers[0].split(-1), None);

    let one = |start, stop, step| {
        let providers = split_providers_no_files(&graph(range("r", start, stop, step), "r:0"));
        splits(&providers.expect("providers")[0])
    };
    assert_eq!(one(0, 10, 1), (0..10).collect::<Vec<_>>());
    assert_eq!(one(10, 0, -3), [10, 7, 4, 1]);
    assert_eq!(one(0, 10, 4), [0, 4, 8]);
    assert_eq!(one(5, 5, 1), Vec::<i64>::new());
    assert_eq!(one(5, 0, 1), Vec::<i64>::new());
    assert_eq!(one(i64::MAX - 1, i64::MAX, 7), [i64::MAX - 1]);
    assert_eq!(one(i64::MIN, i64::MIN + 3, 2), [i64::MIN, i64::MIN + 2]);
}

#[test]
fn a_split_is_an_int64_scalar_tensor() {
    let split = SplitProvider::Range { start: 5, stop: 20, step: 5 }.split(1).expect("split");
    assert_eq!(split.dtype, DataType::DtInt64 as i32);
    assert_eq!(split.tensor_shape, Some(TensorShapeProto::default()));
    assert_eq!(split.tensor_content, 10i64.to_le_bytes());
    assert_eq!(const_ints(&split), Ok(vec![10]));
    let index = SplitProvider::Index { len: 3 };
    assert_eq!(splits(&index), [0, 1, 2]);
    assert_eq!(const_ints(&index.split(2).expect("split")), Ok(vec![2]));
    assert_eq!(index.split(3), None);
}

#[test]
fn a_range_that_cannot_be_split_is_refused() {
    assert_eq!(unsupported_op(&graph(range("r", 0, 10, 0), "r")), "RangeDataset");
    let too_long = graph(range("r", i64::MIN, i64::MAX, 1), "r");
    assert_eq!(unsupported_op(&too_long), "RangeDataset");
    // A bound that is not a constant.
    let mut nodes = range("r", 0, 10, 1);
    nodes[1] = node("r/stop", "Placeholder", &[]);
    let err = split_providers_no_files(&graph(nodes, "r")).expect_err("refused");
    assert_eq!(err.op(), Some("RangeDataset"));
    assert!(err.to_string().contains("`r/stop` is a `Placeholder`"), "{err}");
    // A bound that is not a scalar.
    let mut nodes = range("r", 0, 10, 1);
    nodes[1] = with_tensor(
        node("r/stop", "Const", &[]),
        TensorProto {
            dtype: DataType::DtInt64 as i32,
            tensor_shape: shape(&[2]),
            int64_val: vec![1, 2],
            ..Default::default()
        },
    );
    assert_eq!(unsupported_op(&graph(nodes, "r")), "RangeDataset");
    // replicate_on_split (enumerate's counter): TensorFlow still gives the provider (its
    // iterator never asks it).
    let mut nodes = range("r", 0, 10, 1);
    nodes[3]
        .attr
        .insert("replicate_on_split".into(), AttrValue { value: Some(attr_value::Value::B(true)) });
    let providers = split_providers_no_files(&graph(nodes, "r")).expect("providers");
    assert_eq!(providers, [SplitProvider::Range { start: 0, stop: 10, step: 1 }]);
}

#[test]
fn tensor_slices_split_by_index() {
    // from_tensor_slices([7, 8, 9]) as TensorFlow writes it: int32 in tensor_content.
    let values = with_tensor(
        node("c", "Const", &[]),
        TensorProto {
            dtype: DataType::DtInt32 as i32,
            tensor_shape: shape(&[3]),
            tensor_content: [7i32, 8, 9].iter().flat_map(|v| v.to_le_bytes()).collect(),
            ..Default::default()
        },
    );
    let strings = with_tensor(
        node("s", "Const", &[]),
        TensorProto {
            dtype: DataType::DtString as i32,
            tensor_shape: shape(&[3, 2]),
            ..Default::default()
        },
    );
    let slices = node("t", "TensorSliceDataset", &["c", "s"]);
    let providers = split_providers_no_files(&graph(vec![values.clone(), strings, slices], "t"))
        .expect("providers");
    assert_eq!(providers, [SplitProvider::Index { len: 3 }]);
    assert_eq!(splits(&providers[0]), [0, 1, 2]);

    // Components that disagree, a scalar component, a component that is not constant.
    let short = with_tensor(
        node("s", "Const", &[]),
        TensorProto {
            dtype: DataType::DtFloat as i32,
            tensor_shape: shape(&[2]),
            ..Default::default()
        },
    );
    let slices = node("t", "TensorSliceDataset", &["c", "s"]);
    assert_eq!(unsupported_op(&graph(vec![values, short, slices], "t")), "TensorSliceDataset");
    let slices = node("t", "TensorSliceDataset", &["c"]);
    assert_eq!(
        unsupported_op(&graph(vec![scalar("c", 1), slices.clone()], "t")),
        "TensorSliceDataset"
    );
    let placeholder = node("c", "Placeholder", &[]);
    assert_eq!(unsupported_op(&graph(vec![placeholder, slices], "t")), "TensorSliceDataset");
}

#[test]
fn zip_gives_its_inputs_providers_in_input_order() {
    let mut nodes = range("a", 0, 2, 1);
    nodes.extend(range("b", 0, 3, 1));
    nodes.extend(range("c", 7, 8, 1));
    nodes.push(node("inner", "ZipDataset", &["b", "c"]));
    nodes.push(node("zip", "ZipDataset", &["a", "inner:0"]));
    let providers = split_providers_no_files(&graph(nodes, "zip")).expect("providers");
    let all: Vec<Vec<i64>> = providers.iter().map(splits).collect();
    assert_eq!(all, [vec![0, 1], vec![0, 1, 2], vec![7]]);
}

#[test]
fn transformations_pass_through_to_their_input() {
    let mut nodes = range("r", 0, 10, 1);
    let mut last = "r".to_owned();
    for (i, op) in PASS_THROUGH.iter().enumerate() {
        let name = format!("{op}/_{i}");
        nodes.push(scalar(&format!("arg{i}"), 2));
        nodes.push(node(&name, op, &[&last, &format!("arg{i}"), "^r/start"]));
        last = name;
    }
    let providers = split_providers_no_files(&graph(nodes, &last)).expect("providers");
    assert_eq!(providers, [SplitProvider::Range { start: 0, stop: 10, step: 1 }]);
}

#[test]
fn ops_without_a_split_provider_are_refused_by_name() {
    // A source other than range and from_tensor_slices.
    let mut nodes = vec![scalar("files", 0), node("tfrecord", "TFRecordDataset", &["files"])];
    nodes.push(node("map", "MapDataset", &["tfrecord"]));
    let err = split_providers_no_files(&graph(nodes, "map")).expect_err("refused");
    assert_eq!(err.op(), Some("TFRecordDataset"));
    assert!(err.to_string().contains("node `tfrecord`"), "{err}");

    // Ops TensorFlow cannot shard either, and ops this module does not know.
    for op in ["SqlDataset", "Identity", "TextLineDataset", "DataServiceDatasetV4"] {
        let mut nodes = range("r", 0, 3, 1);
        nodes.push(node("x", op, &["r"]));
        assert_eq!(unsupported_op(&graph_of(nodes, "x")), op);
    }
    // The first refused op in TensorFlow's walk: zip's first input before its second.
    let mut nodes = vec![scalar("f", 0), node("first", "TextLineDataset", &["f"])];
    nodes.push(node("second", "FixedLengthRecordDataset", &["f"]));
    nodes.push(node("zip", "ZipDataset", &["first", "second"]));
    assert_eq!(unsupported_op(&graph_of(nodes, "zip")), "TextLineDataset");
}

/// An int64 vector `Const`.
fn vector(name: &str, values: &[i64]) -> NodeDef {
    with_tensor(
        node(name, "Const", &[]),
        TensorProto {
            dtype: DataType::DtInt64 as i32,
            tensor_shape: shape(&[values.len() as i64]),
            int64_val: values.to_vec(),
            ..Default::default()
        },
    )
}

/// `from_tensor_slices` of a sparse tensor of dense shape [3, 3] (`SerializeManySparse`
/// of its indices, values and dense shape) and of a ragged tensor of 3 rows
/// (`RaggedTensorToVariant` of its row splits and values): 3 splits each.
#[test]
fn sparse_and_ragged_slices_split_by_row() {
    let mut nodes = vec![vector("indices", &[0, 0, 1, 1]), vector("values", &[1, 2])];
    nodes.push(vector("dense_shape", &[3, 3]));
    nodes.push(node("sparse", "SerializeManySparse", &["indices", "values", "dense_shape"]));
    nodes.push(node("sparse_slices", "TensorSliceDataset", &["sparse"]));
    let providers = split_providers_no_files(&graph(nodes.clone(), "sparse_slices"));
    assert_eq!(providers.expect("sparse"), [SplitProvider::Index { len: 3 }]);

    nodes.push(vector("splits", &[0, 1, 3, 6]));
    let mut ragged = node("ragged", "RaggedTensorToVariant", &["splits", "values"]);
    ragged
        .attr
        .insert("batched_input".into(), AttrValue { value: Some(attr_value::Value::B(true)) });
    nodes.push(ragged.clone());
    nodes.push(node("ragged_slices", "TensorSliceDataset", &["ragged"]));
    let providers = split_providers_no_files(&graph(nodes.clone(), "ragged_slices"));
    assert_eq!(providers.expect("ragged"), [SplitProvider::Index { len: 3 }]);

    // Not batched, computed sizes, no rows: refused, naming the op.
    let last = nodes.len() - 2;
    ragged.attr.clear();
    nodes[last] = ragged;
    assert_eq!(unsupported_op(&graph(nodes.clone(), "ragged_slices")), "RaggedTensorToVariant");
    nodes[2] = node("dense_shape", "Shape", &["values"]);
    assert_eq!(unsupported_op(&graph(nodes.clone(), "sparse_slices")), "SerializeManySparse");
    nodes[2] = vector("dense_shape", &[]);
    assert_eq!(unsupported_op(&graph(nodes, "sparse_slices")), "SerializeManySparse");
}

/// `tf.data.experimental.from_list([(0, 0), (1, -1), (2, -2)])`: six tensors, two
/// components per element, three splits.
#[test]
fn from_list_has_one_index_split_per_element() {
    let mut nodes: Vec<NodeDef> = (0..6).map(|i| scalar(&format!("t{i}"), i)).collect();
    let mut list = node("list", "ListDataset", &["t0", "t1", "t2", "t3", "t4", "t5"]);
    let types =
        attr_value::ListValue { r#type: vec![DataType::DtInt64 as i32; 2], ..Default::default() };
    list.attr
        .insert("output_types".into(), AttrValue { value: Some(attr_value::Value::List(types)) });
    nodes.push(list.clone());
    nodes.push(node("map", "MapDataset", &["list"]));
    let providers = split_providers_no_files(&graph(nodes, "map")).expect("providers");
    assert_eq!(providers, [SplitProvider::Index { len: 3 }]);
    // Without its component types there is no element count: refused, naming it.
    list.attr.clear();
    let mut nodes: Vec<NodeDef> = (0..6).map(|i| scalar(&format!("t{i}"), i)).collect();
    nodes.push(list);
    assert_eq!(unsupported_op(&graph(nodes, "list")), "ListDataset");
}

/// TensorFlow's dispatcher has no split providers for a snapshot (its op says splitting is
/// not implemented) nor for a dataset read from a tf.data service (no input dataset):
/// refused with that reason, wherever they are in the graph.
#[test]
fn snapshot_and_data_service_datasets_are_refused_as_tensorflow_refuses_them() {
    for (op, why) in [
        ("SnapshotDatasetV2", "TensorFlow does not implement splitting for snapshot"),
        ("SnapshotDataset", "TensorFlow does not implement splitting for snapshot"),
        ("DataServiceDatasetV4", "reads from a tf.data service"),
        ("DataServiceDatasetV3", "reads from a tf.data service"),
    ] {
        let mut nodes = range("r", 0, 3, 1);
        nodes.push(node("x", op, &["r"]));
        nodes.push(node("map", "ParallelMapDatasetV2", &["x"]));
        nodes.extend(range("b", 0, 2, 1));
        nodes.push(node("concat", "ConcatenateDataset", &["b", "map"]));
        let err = split_providers_no_files(&graph(nodes, "concat")).expect_err(op);
        assert_eq!(err.op(), Some(op));
        assert!(err.to_string().contains(why), "{err}");
    }
}

/// `from_tensor_slices(file names).interleave(TFRecordDataset)`: the function's datasets
/// are the files' readers; the splits are the file indices.
#[test]
fn interleave_flat_map_and_group_by_window_give_their_inputs_providers() {
    for op in [
        "InterleaveDataset",
        "ParallelInterleaveDatasetV4",
        "LegacyParallelInterleaveDatasetV2",
        "FlatMapDataset",
        "GroupByWindowDataset",
        "GroupByReducerDataset",
    ] {
        let names = with_tensor(
            node("names", "Const", &[]),
            TensorProto {
                dtype: DataType::DtString as i32,
                tensor_shape: shape(&[4]),
                string_val: ["a", "b", "c", "d"].map(|s| s.as_bytes().to_vec()).to_vec(),
                ..Default::default()
            },
        );
        let mut nodes = vec![names, node("files", "TensorSliceDataset", &["names"])];
        nodes.push(node("shuffled", "ShuffleDatasetV3", &["files", "c", "s", "s2", "g"]));
        let mut x = node("x", op, &["shuffled", "c", "c"]);
        let func = NameAttrList { name: "read_one_file".into(), attr: Default::default() };
        x.attr.insert("f".into(), AttrValue { value: Some(attr_value::Value::Func(func)) });
        nodes.push(x);
        nodes.extend([scalar("c", 2), scalar("s", 0), scalar("s2", 0), scalar("g", 0)]);
        let mut g = graph(nodes, "x");
        g.library = Some(FunctionDefLibrary {
            function: vec![FunctionDef {
                signature: Some(OpDef { name: "read_one_file".into() }),
                node_def: vec![node("lines", "TFRecordDataset", &["args_0"])],
            }],
        });
        let providers = split_providers_no_files(&g).expect(op);
        assert_eq!(providers, [SplitProvider::Index { len: 4 }], "{op}");
    }
}

#[test]
fn concatenate_and_directed_interleave_give_every_inputs_providers_in_order() {
    let mut nodes = range("a", 0, 2, 1);
    nodes.extend(range("b", 10, 13, 1));
    nodes.push(node("concat", "ConcatenateDataset", &["a", "b"]));
    let providers = split_providers_no_files(&graph(nodes.clone(), "concat")).expect("concat");
    let all: Vec<Vec<i64>> = providers.iter().map(splits).collect();
    assert_eq!(all, [vec![0, 1], vec![10, 11, 12]]);

    // choose_from_datasets(datasets=[a, b], choice_dataset=selector): the selector first.
    nodes.extend(range("selector", 0, 2, 1));
    nodes.push(node("choose", "DirectedInterleaveDataset", &["selector", "a", "b"]));
    let providers = split_providers_no_files(&graph(nodes.clone(), "choose")).expect("choose");
    let all: Vec<Vec<i64>> = providers.iter().map(splits).collect();
    assert_eq!(all, [vec![0, 1], vec![0, 1], vec![10, 11, 12]]);

    // sample_from_datasets: its selector is made from Dataset.random.
    nodes.push(node("seed", "Const", &[]));
    nodes.push(node("random", "RandomDatasetV2", &["seed", "seed", "seed"]));
    nodes.push(node("logits", "MapDataset", &["random"]));
    nodes.push(node("sample", "DirectedInterleaveDataset", &["logits", "a", "b"]));
    let providers = split_providers_no_files(&graph(nodes, "sample")).expect("sample");
    assert_eq!(providers[0], SplitProvider::Index { len: i64::MAX });
    assert_eq!(providers[0].split_value(i64::MAX - 1), Some(i64::MAX - 1));
    assert_eq!(
        &providers[1..],
        &split_providers_no_files(&graph(range("a", 0, 2, 1), "a"))
            .unwrap()
            .into_iter()
            .chain([SplitProvider::Range { start: 10, stop: 13, step: 1 }])
            .collect::<Vec<_>>()[..]
    );
}

/// Counts the patterns' "files" from a fixed list, or refuses.
struct FakeFiles(Result<u64, String>);

impl Files for FakeFiles {
    fn count_matching(&self, patterns: &[String]) -> Result<u64, String> {
        assert_eq!(patterns, ["/data/*.txt"]);
        self.0.clone()
    }
}

/// `Dataset.list_files(pattern)` as TensorFlow builds it: `MatchingFiles` of a `Const`,
/// through an `Identity` with a control input on the non-empty assertion.
fn list_files_graph() -> GraphDef {
    let pattern = with_tensor(
        node("list_files/file_pattern", "Const", &[]),
        TensorProto {
            dtype: DataType::DtString as i32,
            tensor_shape: shape(&[]),
            string_val: vec![b"/data/*.txt".to_vec()],
            ..Default::default()
        },
    );
    let nodes = vec![
        pattern,
        node("list_files/MatchingFiles", "MatchingFiles", &["list_files/file_pattern"]),
        node("list_files/assert", "Assert", &["list_files/MatchingFiles"]),
        node(
            "list_files/Identity",
            "Identity",
            &["list_files/MatchingFiles", "^list_files/assert"],
        ),
        node("slices", "TensorSliceDataset", &["list_files/Identity"]),
        scalar("buffer", 3),
        node("shuffle", "ShuffleDatasetV3", &["slices", "buffer"]),
    ];
    graph(nodes, "shuffle")
}

#[test]
fn list_files_counts_the_files_it_may_read() {
    let g = list_files_graph();
    let providers = split_providers(&g, &FakeFiles(Ok(5))).expect("providers");
    assert_eq!(providers, [SplitProvider::Index { len: 5 }]);
    let err = split_providers(&g, &FakeFiles(Err("outside every --data-root".into())))
        .expect_err("refused");
    assert_eq!(err.op(), Some("MatchingFiles"));
    assert!(err.to_string().contains("outside every --data-root"), "{err}");
    let err = split_providers(&g, &NoFiles).expect_err("refused");
    assert!(err.to_string().contains("--data-root"), "{err}");
    // A pattern that is computed, not a constant, is refused naming the reader.
    let mut g = list_files_graph();
    g.node[0] = node("list_files/file_pattern", "StringJoin", &[]);
    let err = split_providers(&g, &FakeFiles(Ok(5))).expect_err("refused");
    assert_eq!(err.op(), Some("TensorSliceDataset"));
    assert!(err.to_string().contains("`StringJoin`, not a constant"), "{err}");
    // An Identity chain that loops.
    let mut g = list_files_graph();
    g.node[3] = node("list_files/Identity", "Identity", &["list_files/Identity"]);
    assert_eq!(
        split_providers(&g, &FakeFiles(Ok(5))).expect_err("refused").op(),
        Some("TensorSliceDataset")
    );
}

/// Counts its calls and the patterns it was given; each pattern matches 2 files.
#[derive(Default)]
struct CountingFiles {
    calls: std::cell::Cell<usize>,
    patterns: std::cell::Cell<usize>,
}

impl Files for CountingFiles {
    fn count_matching(&self, patterns: &[String]) -> Result<u64, String> {
        self.calls.set(self.calls.get() + 1);
        self.patterns.set(self.patterns.get() + patterns.len());
        Ok(2 * patterns.len() as u64)
    }
}

/// A pattern vector whose shape repeats its one 1 MB value 65,536 times, zipped 10,000 times:
/// its patterns are counted once, not copied 65,536 times (64 GB) on each of 10,000 visits.
#[test]
fn list_files_patterns_are_read_once_per_walk_and_repeats_are_not_copied() {
    let pattern = with_tensor(
        node("patterns", "Const", &[]),
        TensorProto {
            dtype: DataType::DtString as i32,
            tensor_shape: shape(&[65_536]),
            string_val: vec![vec![b'a'; 1 << 20]],
            ..Default::default()
        },
    );
    let zip = node("zip", "ZipDataset", &vec!["slices"; 10_000]);
    let nodes = vec![
        pattern,
        node("files", "MatchingFiles", &["patterns"]),
        node("slices", "TensorSliceDataset", &["files"]),
        zip,
    ];
    let files = CountingFiles::default();
    let started = std::time::Instant::now();
    let providers = split_providers(&graph(nodes, "zip"), &files).expect("providers");
    assert_eq!(providers.len(), 10_000);
    assert!(providers.iter().all(|p| *p == SplitProvider::Index { len: 2 * 65_536 }));
    // The values once, then the repeated last one once.
    assert_eq!((files.calls.get(), files.patterns.get()), (2, 2));
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    // A refusal quotes the first pattern short and says how many there are.
    let nodes = vec![
        with_tensor(
            node("patterns", "Const", &[]),
            TensorProto {
                dtype: DataType::DtString as i32,
                tensor_shape: shape(&[3]),
                string_val: vec![vec![b'a'; 10_000]],
                ..Default::default()
            },
        ),
        node("files", "MatchingFiles", &["patterns"]),
        node("slices", "TensorSliceDataset", &["files"]),
    ];
    let err = split_providers(&graph(nodes, "slices"), &NoFiles).expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("(one of 3 patterns)") && text.len() < 600, "{text}");
}

fn graph_of(nodes: Vec<NodeDef>, output: &str) -> GraphDef {
    graph(nodes, output)
}

#[test]
fn malformed_graphs_are_errors() {
    let no_output = GraphDef { node: range("r", 0, 1, 1), library: None };
    assert_eq!(split_providers_no_files(&no_output), Err(GraphError::Output(0)));
    // Two sinks: the last one is the dataset (what TensorFlow's workers run).
    let mut two = graph(range("r", 0, 1, 1), "r");
    two.node.extend(range("s", 100, 110, 1));
    two.node.push(node("dataset2", "_Retval", &["s"]));
    assert_eq!(
        split_providers_no_files(&two),
        Ok(vec![SplitProvider::Range { start: 100, stop: 110, step: 1 }])
    );
    let mut duplicate = graph(range("r", 0, 1, 1), "r");
    duplicate.node.push(scalar("r/start", 1));
    assert_eq!(
        split_providers_no_files(&duplicate),
        Err(GraphError::DuplicateNode("r/start".into()))
    );
    let missing = graph(vec![node("m", "MapDataset", &["gone:0"])], "m");
    assert_eq!(
        split_providers_no_files(&missing),
        Err(GraphError::MissingInput { node: "m".into(), input: "gone:0".into() })
    );
    let cycle = graph(vec![node("a", "MapDataset", &["b"]), node("b", "MapDataset", &["a"])], "a");
    assert_eq!(split_providers_no_files(&cycle), Err(GraphError::TooLarge));
    // zip(x, x) nested: shared inputs are walked once per use, within the bound.
    let mut nodes = range("r", 0, 1, 1);
    let mut last = "r".to_owned();
    for i in 0..40 {
        nodes.push(node(&format!("z{i}"), "ZipDataset", &[&last, &last]));
        last = format!("z{i}");
    }
    assert_eq!(split_providers_no_files(&graph(nodes, &last)), Err(GraphError::TooLarge));
    assert!(matches!(split_providers_of(b"\xff\xff\xff", &NoFiles), Err(GraphError::Decode(_))));
    let retval_without_input =
        GraphDef { node: vec![node("dataset", "_Retval", &[])], library: None };
    assert_eq!(unsupported_op(&retval_without_input), "_Retval");
}

/// A `ZipDataset` that lists itself 100,000 times (a 300 KB graph) made a walk
/// that reads input `i` by scanning the inputs O(K^2) per visit. Every walk is bounded:
/// fan-out, visits and total work.
#[test]
fn hostile_graphs_end_fast_in_an_error() {
    let started = std::time::Instant::now();
    for op in ["ZipDataset", "ConcatenateDataset", "DirectedInterleaveDataset"] {
        let mut zip = node("z", op, &[]);
        zip.input = vec!["z".to_owned(); 100_000];
        let err = split_providers_no_files(&graph(vec![zip], "z")).expect_err("refused");
        assert_eq!(err, GraphError::FanOut { node: "z".into(), op: op.into() });
    }
    // Under the fan-out bound, still self-referencing: the work bound ends it.
    let mut zip = node("z", "ZipDataset", &[]);
    zip.input = vec!["z".to_owned(); MAX_FAN_OUT];
    assert_eq!(split_providers_no_files(&graph(vec![zip], "z")), Err(GraphError::TooLarge));
    // A TensorSliceDataset with many components, each a long way to walk.
    let mut slices = node("t", "TensorSliceDataset", &[]);
    slices.input = vec!["i0".to_owned(); MAX_FAN_OUT];
    let mut nodes = vec![slices];
    for i in 0..MAX_IDENTITY_CHAIN + 1 {
        nodes.push(node(&format!("i{i}"), "Identity", &[&format!("i{}", i + 1)]));
    }
    let err = split_providers_no_files(&graph(nodes, "t")).expect_err("refused");
    assert_eq!(err.op(), Some("TensorSliceDataset"));
    // Deep nesting: 50,000 maps over a range, then a cycle of maps.
    let mut nodes = range("r", 0, 1, 1);
    let mut last = "r".to_owned();
    for i in 0..50_000 {
        nodes.push(node(&format!("m{i}"), "MapDataset", &[&last]));
        last = format!("m{i}");
    }
    assert_eq!(split_providers_no_files(&graph(nodes, &last)).expect("deep").len(), 1);
    let mut nodes = Vec::new();
    for i in 0..1000 {
        nodes.push(node(&format!("m{i}"), "MapDataset", &[&format!("m{}", (i + 1) % 1000)]));
    }
    assert_eq!(split_providers_no_files(&graph(nodes, "m0")), Err(GraphError::TooLarge));
    // Generous for a loaded machine: unbounded walks of these graphs take hours, not seconds.
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "{:?}", started.elapsed());
}

#[test]
fn const_ints_reads_tensorflows_encodings() {
    let tensor = |dtype: DataType, dims: &[i64]| TensorProto {
        dtype: dtype as i32,
        tensor_shape: shape(dims),
        ..Default::default()
    };
    let mut t = tensor(DataType::DtInt64, &[]);
    assert_eq!(const_ints(&t), Ok(vec![0]), "no value: zero");
    t.int64_val = vec![-4];
    assert_eq!(const_ints(&t), Ok(vec![-4]));
    t.tensor_shape = None;
    assert_eq!(const_ints(&t), Ok(vec![-4]), "no shape: a scalar");
    let mut t = tensor(DataType::DtInt64, &[4]);
    t.int64_val = vec![1, 2];
    assert_eq!(const_ints(&t), Ok(vec![1, 2, 2, 2]), "the last value repeats");
    t.int64_val = vec![1, 2, 3, 4, 5];
    assert!(const_ints(&t).is_err());
    t.int64_val = vec![];
    t.tensor_content = [3i64, -1, 0, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(const_ints(&t), Ok(vec![3, -1, 0, 9]));
    t.tensor_content.pop();
    assert!(const_ints(&t).is_err());
    let mut t = tensor(DataType::DtInt32, &[2]);
    t.int_val = vec![-7, 8];
    assert_eq!(const_ints(&t), Ok(vec![-7, 8]));
    t.int_val = vec![];
    t.tensor_content = [-7i32, 8].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(const_ints(&t), Ok(vec![-7, 8]));
    assert!(const_ints(&tensor(DataType::DtFloat, &[])).is_err());
    assert!(const_ints(&tensor(DataType::DtInt64, &[2, 2])).is_err());
    assert!(const_ints(&tensor(DataType::DtInt64, &[-1])).is_err());
    assert!(const_ints(&tensor(DataType::DtInt64, &[1 << 40])).is_err(), "bounded");
}
