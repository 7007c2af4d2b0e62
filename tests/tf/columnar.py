"""Columnar datasets for the tests: files written the way users write them, and a reader of
the workers' Arrow streams in plain Python (requests + pyarrow).

    columnar.py make DIR
        Writes, under DIR: images-0.parquet and images-1.parquet (25 rows each, row groups of
        7), images.arrow (an Arrow IPC file, 20 rows in batches of 6), examples.tfrecord (15
        tf.train.Example records, by TensorFlow), bad-schema.parquet (its `image` column is a
        list of int64) and corrupt.tfrecord (a flipped byte in its third record's data).
        Every row has `id` (int64, unique across the files), `image` (float32 tensor of shape
        [2, 3, 2]: id + 0.5 * k) and `label` (string "row-<id>").

    columnar.py read DISPATCHER DATASET_JSON [--split-size N] [--compression C] [--max N]
        Registers the dataset, reads a `distributed_epoch` over it from every task with
        `Accept: application/vnd.apache.arrow.stream`, and prints one JSON line: the ids read in
        order, the number of record batches, whether every `image` tensor came out of pyarrow
        as a NumPy array of shape (rows, 2, 3, 2) without a copy, and whether each image holds
        what its id says.
"""

import json
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import requests

SHAPE = (2, 3, 2)
VALUES = 12
ARROW = "application/vnd.apache.arrow.stream"


def images(first, n):
    ids = np.arange(first, first + n, dtype=np.int64)
    flat = (ids[:, None] + 0.5 * np.arange(VALUES)[None, :]).astype(np.float32)
    tensor = pa.FixedShapeTensorArray.from_numpy_ndarray(flat.reshape((n,) + SHAPE))
    labels = pa.array([f"row-{i}" for i in ids], pa.string())
    return pa.table({"id": ids, "image": tensor, "label": labels})


def make(out):
    import tensorflow as tf  # noqa: only `make` needs TensorFlow (TFRecord and Example)

    pq.write_table(images(0, 25), f"{out}/images-0.parquet", row_group_size=7)
    pq.write_table(images(25, 25), f"{out}/images-1.parquet", row_group_size=7)
    table = images(100, 20)
    with pa.ipc.new_file(f"{out}/images.arrow", table.schema) as w:
        for batch in table.to_batches(max_chunksize=6):
            w.write_batch(batch)
    bad = pa.table({
        "id": pa.array([200, 201], pa.int64()),
        "image": pa.array([[1] * VALUES, [2] * VALUES], pa.list_(pa.int64())),
        "label": pa.array(["row-200", "row-201"]),
    })
    pq.write_table(bad, f"{out}/bad-schema.parquet")

    def example(i):
        feature = {
            "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
            "image": tf.train.Feature(float_list=tf.train.FloatList(
                value=[i + 0.5 * k for k in range(VALUES)])),
            "label": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f"row-{i}".encode()])),
        }
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

    with tf.io.TFRecordWriter(f"{out}/examples.tfrecord") as w:
        for i in range(300, 315):
            w.write(example(i))
    with tf.io.TFRecordWriter(f"{out}/corrupt.tfrecord") as w:
        for i in range(400, 405):
            w.write(example(i))
    data = bytearray(open(f"{out}/corrupt.tfrecord", "rb").read())
    # Records are framed as length (8) + length CRC (4) + data + data CRC (4).
    at = 0
    for _ in range(2):
        at += 16 + int.from_bytes(data[at:at + 8], "little")
    data[at + 12 + 3] ^= 0xFF
    open(f"{out}/corrupt.tfrecord", "wb").write(bytes(data))


def call(method, url, **kw):
    r = requests.request(method, url, timeout=30, **kw)
    if r.status_code != 200:
        raise SystemExit(f"{method} {url}: {r.status_code} {r.text}")
    return r.json()


def read(dispatcher, dataset, split_size, compression, max_rows):
    d = dispatcher.rstrip("/")
    dataset_id = call("POST", f"{d}/v1/datasets", json={"dataset": dataset})["dataset_id"]
    job = call("POST", f"{d}/v1/jobs", json={
        "dataset_id": dataset_id, "processing_mode": "distributed_epoch",
        "split_size": split_size})["job_id"]
    client = call("POST", f"{d}/v1/jobs/{job}/iterations", json={})["client_id"]
    headers = {"Accept": ARROW}
    if compression:
        headers["shardwise-arrow-compression"] = compression
    ids, batches, zero_copy, values_ok, done = [], 0, True, True, set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        hb = call("POST", f"{d}/v1/clients/{client}/heartbeat", json={})
        tasks = [t for t in hb["tasks"] if t["task_id"] not in done]
        if hb["iteration_finished"] and not tasks:
            break
        for t in tasks:
            url = f"http://{t['worker_address']}/v1/tasks/{t['task_id']}/elements?max={max_rows}"
            r = requests.get(url, headers=headers, timeout=30)
            if r.status_code == 404:
                continue
            if r.status_code != 200:
                raise SystemExit(f"task {t['task_id']}: {r.status_code} {r.text}")
            if r.headers["content-type"] != ARROW:
                raise SystemExit(f"task {t['task_id']}: content type {r.headers['content-type']}")
            reader = pa.ipc.open_stream(r.content)
            for batch in reader:
                batches += 1
                ids.extend(batch.column("id").to_pylist())
                if "image" in batch.schema.names:
                    image = batch.column("image")
                    if not isinstance(image, pa.FixedShapeTensorArray):
                        zero_copy = False
                        continue
                    nd = image.to_numpy_ndarray()
                    storage = image.storage
                    base = storage.values.buffers()[1].address + 4 * VALUES * storage.offset
                    zero_copy &= nd.shape == (len(batch),) + SHAPE and nd.ctypes.data == base
                    want = np.array(batch.column("id").to_pylist(), np.float32)[:, None] \
                        + 0.5 * np.arange(VALUES, dtype=np.float32)[None, :]
                    values_ok &= bool(np.array_equal(nd.reshape(len(batch), VALUES), want))
            if r.headers.get("shardwise-end-of-sequence") == "true":
                done.add(t["task_id"])
    else:
        raise SystemExit("the iteration did not finish in 120 s")
    requests.delete(f"{d}/v1/clients/{client}", timeout=30)
    print(json.dumps({"ids": ids, "batches": batches, "zero_copy": zero_copy,
                      "values_ok": values_ok}))


def main(argv):
    if argv[:1] == ["make"]:
        make(argv[1])
        return
    if argv[:1] == ["read"]:
        opts = dict(zip(argv[3::2], argv[4::2]))
        read(argv[1], json.loads(argv[2]), int(opts.get("--split-size", "1024")),
             opts.get("--compression"), int(opts.get("--max", "100")))
        return
    raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
