//! Real TensorFlow (the venv of `shardwise_tests::tf`): a dataset that looks values up in a
//! `tf.lookup.StaticHashTable`, read through a `shardwise dispatcher` and a TensorFlow
//! `WorkerServer`. The table's op is a node of the dataset's graph; a worker keeps the table
//! only when the op's `use_node_name_sharing` is true. TensorFlow 2.21's client sets it when it
//! serializes a dataset, and TensorFlow's dispatcher sets it again for any client: a graph
//! registered with it false reads only because the dispatcher prepares the graph (without
//! that, the worker fails: "Resource .../HashTableFromGraphDef/... does not exist").

use std::time::Duration;

use prost::Message as _;
use shardwise_gateway::tf::prepare::{NODE_NAME_SHARING_OPS, USE_NODE_NAME_SHARING};
use shardwise_gateway::tf::proto::tensorflow::data as tf;
use shardwise_gateway::tf::proto::tensorflow::{AttrValue, GraphDef, attr_value};
use shardwise_tests::tf::{TfServer, run_script, tf_env};
use shardwise_tests::{Dispatcher, http, poll_until};

/// The graph the dispatcher stores for `dataset_id`, read with `GetDatasetDef`.
fn stored_graph(url: &str, dataset_id: &str) -> GraphDef {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
            .expect("a URL")
            .connect()
            .await
            .expect("connected");
        let mut c = tf::dispatcher_service_client::DispatcherServiceClient::new(channel)
            .max_decoding_message_size(usize::MAX);
        let def = c
            .get_dataset_def(tf::GetDatasetDefRequest { dataset_id: dataset_id.into() })
            .await
            .expect("GetDatasetDef")
            .into_inner();
        GraphDef::decode(&def.dataset_def.expect("a dataset").graph[..]).expect("a GraphDef")
    })
}

/// `range(5)` mapped through a `StaticHashTable` (0..4 -> 10..14) with
/// `distribute(processing_mode="parallel_epochs")` reads `[10, 11, 12, 13, 14]`, and so does
/// its graph registered with the table op's `use_node_name_sharing` false; the stored graphs
/// have the table's op sharing by node name and no device.
#[test]
fn a_dataset_with_a_lookup_table_reads_through_a_tensorflow_worker() {
    tf_env();
    let dispatcher = Dispatcher::start(&[]);
    let address = dispatcher.url.strip_prefix("http://").expect("http URL").to_owned();
    let worker = TfServer::worker(&address);
    poll_until("the TensorFlow worker registered", Duration::from_secs(60), || {
        let r = http("GET", &dispatcher.url, "/v1/workers", None).map_err(|e| e.to_string())?;
        let n = r.json()["workers"].as_array().map_or(0, Vec::len);
        if n == 1 { Ok(()) } else { Err(format!("{n} workers: {}", r.body)) }
    });
    let target = format!("grpc://{address}");
    let run =
        std::panic::catch_unwind(|| run_script("tables.py", &[&target], Duration::from_secs(240)));
    let run = run.unwrap_or_else(|e| {
        let (w_out, w_err) = worker.output();
        eprintln!("dispatcher:\n{}\nworker:\n{w_out}\n{w_err}", dispatcher.output());
        std::panic::resume_unwind(e)
    });
    let line = |prefix: &str| {
        run.stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {}", run.stdout))
            .trim()
            .to_owned()
    };
    let elements: Vec<i64> = serde_json::from_str(&line("elements ")).expect("a JSON list");
    assert_eq!(elements, [10, 11, 12, 13, 14]);

    let unshared = run
        .stdout
        .lines()
        .find(|l| l.starts_with("unshared_elements ") || l.starts_with("unshared_error "));
    let unshared = unshared.unwrap_or_else(|| panic!("no unshared line in {}", run.stdout));
    let elements: Vec<i64> = match unshared.strip_prefix("unshared_elements ") {
        Some(list) => serde_json::from_str(list).expect("a JSON list"),
        None => panic!("the graph registered without name sharing fails: {unshared}"),
    };
    assert_eq!(elements, [10, 11, 12, 13, 14]);

    for id in [line("dataset_id "), line("unshared_id ")] {
        assert_ne!(id, "");
        let graph = stored_graph(&dispatcher.url, &id);
        let tables: Vec<_> =
            graph.node.iter().filter(|n| NODE_NAME_SHARING_OPS.contains(&n.op.as_str())).collect();
        assert!(!tables.is_empty(), "the table's op is a node of the graph");
        for t in tables {
            assert_eq!(
                t.attr.get(USE_NODE_NAME_SHARING),
                Some(&AttrValue { value: Some(attr_value::Value::B(true)) }),
                "{id}: {}",
                t.name
            );
        }
        assert!(graph.node.iter().all(|n| n.device.is_empty()), "{id}");
    }
}
