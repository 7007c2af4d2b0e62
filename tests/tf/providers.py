"""Every DYNAMIC split provider TensorFlow has, read through a tf.data service, one dataset
after the other in one client process (TensorFlow's import is the slow part).

    python providers.py read SERVICE DATA_DIR N      writes the files the datasets read under
                                                     DATA_DIR, then reads each dataset as it
                                                     is (without the service) and through
                                                     SERVICE (distributed_epoch), once N
                                                     workers are registered

Prints one JSON line per dataset, `{"name": ..., "local": [...], "elements": [...]}` (or,
when reading through the service fails, `"error"` and `"code"` in place of `"elements"`),
then `done`. Elements are JSON values: tuples as lists, bytes as strings.

`distribute_of_distribute` reads a dataset that is itself read from a tf.data service: a
second, in-process TensorFlow service of this client's (a dispatcher and a worker on ports
they pick) serves the inner dataset.
"""

import json
import os
import sys

import tensorflow as tf

service = tf.data.experimental.service
ds = tf.data.Dataset

FILES = 4
RECORDS = 5


def record_files(data_dir):
    return [os.path.join(data_dir, "part-%d.tfrecord" % i) for i in range(FILES)]


def text_files(data_dir):
    return [os.path.join(data_dir, "part-%d.txt" % i) for i in range(FILES)]


def write(data_dir):
    os.makedirs(data_dir, exist_ok=True)
    for i, path in enumerate(record_files(data_dir)):
        with tf.io.TFRecordWriter(path) as w:
            for j in range(RECORDS):
                w.write(b"r%d-%d" % (i, j))
    for i, path in enumerate(text_files(data_dir)):
        with open(path, "w") as f:
            f.write("".join("t%d-%d\n" % (i, j) for j in range(RECORDS)))


def inner_service():
    """A TensorFlow dispatcher and worker in this process, for the inner dataset of
    `distribute_of_distribute` (kept alive by the caller)."""
    dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
    address = "127.0.0.1:%d" % dispatcher._server.bound_port()
    worker = service.WorkerServer(
        service.WorkerConfig(dispatcher_address=address, worker_address="127.0.0.1:%port%")
    )
    return dispatcher, worker, "grpc://" + address


def datasets(data_dir, inner_target, local):
    """(name, dataset) pairs; `local`: for the read without the service (a file cache gets
    its own path, so that the read through the service does not find it written)."""
    records = record_files(data_dir)
    texts = text_files(data_dir)
    yield "concatenate", ds.range(5).concatenate(ds.range(10, 13))
    yield (
        "choose_from_datasets",
        ds.choose_from_datasets([ds.range(3), ds.range(10, 14)], ds.range(2).repeat(4)),
    )
    yield (
        "sample_from_datasets",
        ds.sample_from_datasets([ds.range(4), ds.range(10, 14)], seed=7),
    )
    yield (
        "interleave",
        ds.range(1, 5).interleave(lambda x: ds.range(x * 10, x * 10 + x), cycle_length=2),
    )
    yield (
        "parallel_interleave",
        ds.range(1, 5).interleave(
            lambda x: ds.range(x * 10, x * 10 + x), cycle_length=2, num_parallel_calls=2
        ),
    )
    yield "flat_map", ds.range(1, 5).flat_map(lambda x: ds.range(x * 10, x * 10 + x))
    yield (
        "flat_map_repeat",
        ds.range(1, 4).flat_map(lambda x: ds.range(x).repeat(2)).repeat(2),
    )
    yield (
        "group_by_window",
        ds.range(20)
        .group_by_window(
            key_func=lambda x: x % 3, reduce_func=lambda k, w: w.batch(4), window_size=4
        )
        .unbatch(),
    )
    # Elements of 1 to 4 values, batched by length: a GroupByWindowDataset.
    yield (
        "bucket_by_sequence_length",
        ds.range(1, 13)
        .map(lambda v: tf.fill([v % 4 + 1], v))
        .bucket_by_sequence_length(lambda t: tf.shape(t)[0], [2, 3], [2, 2, 2])
        .map(lambda b: tf.reduce_max(b, axis=1))
        .unbatch(),
    )
    yield "enumerate", ds.range(5, 15).enumerate(start=100)
    yield (
        "tfrecord_files",
        ds.from_tensor_slices(records)
        .shuffle(FILES, seed=3)
        .interleave(tf.data.TFRecordDataset, cycle_length=2),
    )
    yield "text_line_files", tf.data.TextLineDataset(texts)
    yield (
        "list_files",
        ds.list_files(os.path.join(data_dir, "*.txt"), seed=5).interleave(
            tf.data.TextLineDataset, cycle_length=2, num_parallel_calls=2
        ),
    )
    yield "random", ds.random(seed=11).take(4)
    yield "from_tensors", ds.from_tensors(7).concatenate(ds.from_tensors(8))
    yield "from_list", tf.data.experimental.from_list([(i, -i) for i in range(7)])
    # Slices of a sparse and of a ragged tensor: each row one split (the row sums differ).
    sparse = tf.sparse.SparseTensor([[0, 0], [1, 2], [3, 1], [4, 0]], [1, 2, 3, 4], [5, 3])
    yield "sparse_slices", ds.from_tensor_slices(sparse).map(tf.sparse.reduce_sum)
    ragged = tf.ragged.constant([[1], [2, 3], [4, 5, 6], [], [7, 8, 9, 10]])
    yield "ragged_slices", ds.from_tensor_slices(ragged).map(tf.reduce_sum)
    yield "cache", ds.range(12).map(lambda c: c * 2).cache()
    cache_file = os.path.join(data_dir, "cache-local" if local else "cache-service")
    yield "cache_file", ds.range(12).cache(cache_file)
    yield "scan", ds.range(10).scan(tf.constant(0, tf.int64), lambda n, s: (n + 1, s * 3))
    yield "window", ds.range(10).window(3).flat_map(lambda w: w.batch(3)).unbatch()
    yield "ignore_errors", ds.range(10).ignore_errors()
    yield "rebatch", ds.range(10).batch(4).rebatch(2).unbatch()
    # TensorFlow has no split provider for a SQL query, a snapshot, or a dataset read from a
    # tf.data service: refused.
    yield (
        "sql",
        tf.data.experimental.SqlDataset("sqlite", "/nonexistent.db", "SELECT 1", (tf.int64,)),
    )
    yield "snapshot", ds.range(10).snapshot(os.path.join(data_dir, "snapshot"))
    yield (
        "distribute_of_distribute",
        ds.range(6).apply(
            service.distribute(processing_mode="parallel_epochs", service=inner_target)
        ),
    )


def plain(value):
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if hasattr(value, "item") else value


def read(dataset):
    try:
        return {"elements": [plain(e) for e in dataset.as_numpy_iterator()]}
    except tf.errors.OpError as e:
        return {"error": e.message, "code": type(e).__name__}


def run(target, data_dir, workers):
    from e2e import wait_for_workers

    write(data_dir)
    _inner = inner_service()
    inner_target = _inner[2]
    local = dict(datasets(data_dir, inner_target, local=True))
    wait_for_workers(target, workers)
    for name, dataset in datasets(data_dir, inner_target, local=False):
        line = {"name": name, "local": read(local[name]).get("elements")}
        dataset = dataset.apply(
            service.distribute(processing_mode="distributed_epoch", service=target)
        )
        line.update(read(dataset))
        print(json.dumps(line), flush=True)
    print("done", flush=True)


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == "read":
        run(args[0], args[1], workers=int(args[2]))
    else:
        raise SystemExit("unknown command %r" % command)


if __name__ == "__main__":
    main()
