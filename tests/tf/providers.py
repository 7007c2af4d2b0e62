"""Every DYNAMIC split provider TensorFlow has, read through a tf.data service, one dataset
after the other in one client process (TensorFlow's import is the slow part).

    python providers.py write DATA_DIR               writes the files the datasets read
    python providers.py local DATA_DIR               each dataset as it is, without the service
    python providers.py read SERVICE DATA_DIR N      each dataset through SERVICE
                                                     (distributed_epoch), once N workers are
                                                     registered

Prints one JSON line per dataset, `{"name": ..., "elements": [...]}` (or, when reading
fails, `{"name": ..., "error": ..., "code": ...}`), then `done`. Elements are JSON values:
tuples as lists, bytes as strings.
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
    print("done", flush=True)


def datasets(data_dir):
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
    # TensorFlow has no split provider for a SQL query: refused.
    yield (
        "sql",
        tf.data.experimental.SqlDataset("sqlite", "/nonexistent.db", "SELECT 1", (tf.int64,)),
    )


def plain(value):
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if hasattr(value, "item") else value


def run(data_dir, target=None, workers=0):
    if target is not None:
        from e2e import wait_for_workers

        wait_for_workers(target, workers)
    for name, dataset in datasets(data_dir):
        if target is not None:
            dataset = dataset.apply(
                service.distribute(processing_mode="distributed_epoch", service=target)
            )
        try:
            elements = [plain(e) for e in dataset.as_numpy_iterator()]
            line = {"name": name, "elements": elements}
        except tf.errors.OpError as e:
            line = {"name": name, "error": e.message, "code": type(e).__name__}
        print(json.dumps(line), flush=True)
    print("done", flush=True)


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == "write":
        write(args[0])
    elif command == "local":
        run(args[0])
    elif command == "read":
        run(args[1], target=args[0], workers=int(args[2]))
    else:
        raise SystemExit("unknown command %r" % command)


if __name__ == "__main__":
    main()
