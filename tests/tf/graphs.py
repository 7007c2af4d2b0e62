"""Writes the serialized GraphDef of a few tf.data datasets, one file per dataset.

    python graphs.py OUT_DIR

Each file OUT_DIR/NAME.pb holds `dataset._as_serialized_graph()` of the dataset NAME below,
the graph a TensorFlow client registers with a dispatcher (without the client's compression
map, which `service.py dataset-def` captures from a real registration). Prints the names, one
a line, then `done`.
"""

import os
import sys

import tensorflow as tf


def datasets():
    ds = tf.data.Dataset
    yield "range_10", ds.range(10)
    yield "range_5_20_5", ds.range(5, 20, 5)
    yield "range_negative_step", ds.range(10, 0, -3)
    yield "range_int32", ds.range(3, output_type=tf.int32)
    yield "slices_7_8_9", ds.from_tensor_slices([7, 8, 9])
    yield "slices_dict", ds.from_tensor_slices({"a": [1.0, 2.0], "b": ["x", "y"]})
    yield "slices_matrix", ds.from_tensor_slices(tf.zeros([4, 3], tf.int64))
    yield "zip_range_2_range_3", ds.zip((ds.range(2), ds.range(3)))
    yield "range_map_batch", ds.range(10).map(lambda x: x * 2).batch(2)
    yield (
        "range_pipeline",
        ds.range(10)
        .shuffle(4, seed=1)
        .map(lambda x: x + 1, num_parallel_calls=2)
        .filter(lambda x: x > 0)
        .repeat(2)
        .skip(1)
        .take(12)
        .batch(3, drop_remainder=True)
        .unbatch()
        .prefetch(2),
    )
    yield "interleave", ds.range(3).interleave(lambda x: ds.range(x), cycle_length=2)
    yield "flat_map", ds.range(3).flat_map(lambda x: ds.range(x))
    yield "text_line", tf.data.TextLineDataset(["/nonexistent/shardwise.txt"])
    yield "concatenate", ds.range(2).concatenate(ds.range(3))
    yield "zip_range_text_line", ds.zip((ds.range(2), tf.data.TextLineDataset(["/x"])))
    files = ["/nonexistent/a.tfrecord", "/nonexistent/b.tfrecord", "/nonexistent/c.tfrecord"]
    yield (
        "files_shuffled_interleaved",
        ds.from_tensor_slices(files)
        .shuffle(3, seed=1)
        .interleave(tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=2),
    )
    yield "flat_map_repeat", ds.range(3).flat_map(lambda x: ds.range(x).repeat(2)).repeat(2)
    yield (
        "group_by_window",
        ds.range(10).group_by_window(
            key_func=lambda x: x % 2, reduce_func=lambda k, w: w.batch(5), window_size=5
        ),
    )
    yield "enumerate", ds.range(5, 8).enumerate(start=10)
    yield "choose", ds.choose_from_datasets([ds.range(2), ds.range(10, 13)], ds.range(2).repeat(3))
    yield "sample", ds.sample_from_datasets([ds.range(2), ds.range(10, 13)], seed=1)
    yield "random", ds.random(seed=1).take(3)
    yield "from_tensors", ds.from_tensors([1, 2, 3])
    yield "sql", tf.data.experimental.SqlDataset("sqlite", "/nonexistent.db", "SELECT 1", (tf.int64,))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, dataset in datasets():
        graph = dataset._as_serialized_graph().numpy()
        with open(os.path.join(out, name + ".pb"), "wb") as f:
            f.write(graph)
        print(name, flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
