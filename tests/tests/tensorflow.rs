//! Real TensorFlow (`tensorflow-cpu`, in the venv `shardwise_tests::tf` builds under the
//! target dir): the split providers Shardwise reads from graphs TensorFlow serialized, and the
//! harness itself, with TensorFlow's own dispatcher and worker in their own processes.

use std::time::{Duration, Instant};

use shardwise_gateway::tf::graph::{GraphError, NoFiles, SplitProvider, split_providers_of};
use shardwise_tests::tf::{TfServer, graph, graphs_dir, run_script, tf_env};

/// Every split of every provider of the graph `name` of tests/tf/graphs.py.
fn splits_of(bytes: &[u8]) -> Result<Vec<Vec<i64>>, GraphError> {
    let providers = split_providers_of(bytes, &NoFiles)?;
    Ok(providers
        .iter()
        .map(|p: &SplitProvider| {
            let all: Vec<i64> =
                (0..p.num_splits()).map(|i| p.split_value(i).expect("split")).collect();
            assert_eq!(p.split(p.num_splits()), None, "end of splits after the last");
            all
        })
        .collect())
}

fn refused(name: &str) -> GraphError {
    splits_of(&graph(name)).expect_err(name)
}

#[test]
fn tensorflow_graphs_give_tensorflows_split_providers() {
    let started = Instant::now();
    graphs_dir();
    eprintln!("tensorflow: venv and graphs ready in {:?}", started.elapsed());
    let splits = |name: &str| splits_of(&graph(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let range = |r: std::ops::Range<i64>| vec![r.collect::<Vec<_>>()];
    assert_eq!(splits("range_10"), range(0..10));
    // Measured on TensorFlow's dispatcher: the element values, then the slice indices, and
    // zip's inputs' providers in input order.
    assert_eq!(splits("range_5_20_5"), [vec![5, 10, 15]]);
    assert_eq!(splits("slices_7_8_9"), range(0..3));
    assert_eq!(splits("zip_range_2_range_3"), [vec![0, 1], vec![0, 1, 2]]);
    assert_eq!(splits("range_negative_step"), [vec![10, 7, 4, 1]]);
    assert_eq!(splits("range_int32"), range(0..3));
    assert_eq!(splits("slices_dict"), range(0..2));
    assert_eq!(splits("slices_matrix"), range(0..4));
    assert_eq!(splits("range_map_batch"), range(0..10));
    assert_eq!(splits("range_pipeline"), range(0..10));

    // interleave, flat_map and group_by_window: their input's providers (the datasets their
    // functions make get none); concatenate: both inputs' providers.
    assert_eq!(splits("interleave"), range(0..3));
    assert_eq!(splits("flat_map"), range(0..3));
    assert_eq!(splits("flat_map_repeat"), range(0..3));
    assert_eq!(splits("group_by_window"), range(0..10));
    assert_eq!(splits("concatenate"), [vec![0, 1], vec![0, 1, 2]]);
    // A TextLineDataset is a flat_map over its file names: split i is file i.
    assert_eq!(splits("text_line"), range(0..1));
    assert_eq!(splits("zip_range_text_line"), [vec![0, 1], vec![0]]);
    assert_eq!(splits("files_shuffled_interleaved"), range(0..3));
    // choose_from_datasets: the selector's providers first, then every dataset's.
    assert_eq!(splits_of(&graph("choose")).map(|s| s.len()), Ok(3));
    assert_eq!(&splits("choose")[1..], [vec![0, 1], vec![10, 11, 12]]);
    assert_eq!(splits("choose")[0], [0, 1]);
    // Sources with 2^63 - 1 index splits (random, sample_from_datasets' selector) and
    // enumerate's replicated counter: by provider.
    let providers = |name: &str| split_providers_of(&graph(name), &NoFiles).expect(name);
    assert_eq!(providers("random"), [SplitProvider::Index { len: i64::MAX }]);
    assert_eq!(
        providers("sample"),
        [
            SplitProvider::Index { len: i64::MAX },
            SplitProvider::Range { start: 0, stop: 2, step: 1 },
            SplitProvider::Range { start: 10, stop: 13, step: 1 }
        ]
    );
    assert_eq!(
        providers("enumerate"),
        [
            SplitProvider::Range { start: 10, stop: i64::MAX, step: 1 },
            SplitProvider::Range { start: 5, stop: 8, step: 1 }
        ]
    );
    // What TensorFlow cannot shard either is refused naming the op.
    assert_eq!(splits("from_tensors"), range(0..1));
    assert_eq!(refused("sql").op(), Some("SqlDataset"));
}

/// The harness with TensorFlow's own `DispatchServer` and `WorkerServer`, each in its own
/// process on a port it picked: the seed example reads `[0, ..., 9]`, and the graph a
/// `distribute` client registers (read back from TensorFlow's dispatcher) has the split
/// provider of `range(10)`.
#[test]
fn the_seed_example_runs_on_tensorflows_own_dispatcher() {
    let started = Instant::now();
    tf_env();
    let venv = started.elapsed();
    let dispatcher = TfServer::dispatcher();
    let worker = TfServer::worker(&dispatcher.address());
    let servers = started.elapsed();
    let target = format!("grpc://{}", dispatcher.address());
    let seed = std::panic::catch_unwind(|| {
        run_script("service.py", &["seed", &target], Duration::from_secs(180))
    });
    let seed = seed.unwrap_or_else(|e| {
        let (d_out, d_err) = dispatcher.output();
        let (w_out, w_err) = worker.output();
        eprintln!("dispatcher:\n{d_out}\n{d_err}\nworker:\n{w_out}\n{w_err}");
        std::panic::resume_unwind(e)
    });
    let elements: Vec<i64> = serde_json::from_str(seed.stdout.trim()).expect("seed prints JSON");
    assert_eq!(elements, (0..10).collect::<Vec<_>>());
    let read = started.elapsed();

    let out = graphs_dir().with_file_name("tf-registered-range-10.pb");
    let out_arg = out.to_str().expect("utf-8 path");
    run_script("service.py", &["dataset-def", &target, out_arg], Duration::from_secs(180));
    let registered = std::fs::read(&out).expect("registered graph");
    // The client adds its compression map (a ParallelMapDatasetV2) after the range.
    assert_eq!(splits_of(&registered).expect("providers"), [(0..10).collect::<Vec<_>>()]);
    eprintln!(
        "tensorflow: venv {venv:?}, dispatcher and worker up {:?}, seed read {:?}, total {:?}",
        servers - venv,
        read - servers,
        started.elapsed()
    );
}
