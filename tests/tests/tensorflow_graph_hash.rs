//! Dataset identity on graphs TensorFlow serialized (`tests/tf/graphs.py`): every one has a
//! structural hash (TensorFlow's `HashGraph` semantics, `shardwise_gateway::tf::graph_hash`),
//! and different datasets never share one.

use std::collections::BTreeMap;

use shardwise_gateway::tf::graph_hash::hash_graph;
use shardwise_tests::tf::{graph, graphs_dir};

#[test]
fn tensorflow_graphs_hash_by_structure_and_distinct_datasets_differ() {
    let mut names: Vec<String> = std::fs::read_dir(graphs_dir())
        .expect("graphs dir")
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".pb").map(str::to_owned))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "the graphs of graphs.py: {names:?}");
    let mut by_hash: BTreeMap<[u8; 32], String> = BTreeMap::new();
    for name in &names {
        let bytes = graph(name);
        let h = hash_graph(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(other) = by_hash.insert(h, name.clone()) {
            panic!("{name} and {other} hash alike");
        }
    }
}
