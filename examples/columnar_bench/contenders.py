"""The three ways the consumer gets the rows into NumPy, and what "delivered" means for all.

A batch is *delivered* when its tensor column is a NumPy array of shape (rows, *shape) and its
index column a NumPy int64 array in the consumer process, and the consumer has touched them:
it adds up the index column (checked at the end against the dataset's, so every row arrived
exactly once) and the last value of every row's tensor. The bytes counted are those two arrays'
(`nbytes`), the same for every contender whatever travelled on the wire.

* `read_local`: pyarrow in the consumer: `pq.ParquetFile(path).iter_batches(batch_size=rows)`
  over the files in order, the tensor column through `FixedShapeTensorArray.to_numpy_ndarray()`.
* `ShardwiseEpoch`: a `distributed_epoch` read over the REST API (as `tests/tf/columnar.py`
  reads), `GET .../elements?max=rows` with `Accept: application/vnd.apache.arrow.stream`; each
  answer is read whole into one buffer and opened with `pa.ipc.open_stream` (zero copy), the
  tensor column again through `to_numpy_ndarray()`. Several reads are in flight: `in_flight`
  threads per task, each with its own kept-alive HTTP/1.1 connection (TensorFlow's client and
  Shardwise's Rust client keep several requests outstanding too); the main thread consumes.
* `read_package`: the same read with the Python package (`python/`, what a user installs):
  `shardwise.distribute(..., format="arrow")` yields the record batches.
* `read_tensorflow`: `tf.data.TFRecordDataset(files).batch(rows).map(parse)` distributed with
  `tf.data.experimental.service.distribute(processing_mode="distributed_epoch")`; the consumer
  iterates the dataset and calls `.numpy()` on both tensors.
"""

import http.client
import json
import queue
import threading
import time
import urllib.parse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ARROW = "application/vnd.apache.arrow.stream"
# A read that delivers nothing for this long has failed (a worker or the dispatcher hangs).
STALL_SECONDS = 120


class Tally:
    """What the consumer delivered, and how long it waited for each batch.

    With `step` (seconds), the consumer is a training loop at light load: after each batch it
    spends `step` per `step_rows` rows of the batch away from the data (a sleep, as an
    accelerator's step leaves the host's CPU to the loader), so every contender is asked for
    rows at the same rate whatever its batches' sizes; a batch's *wait* is the time from the end
    of the previous step (or the start) to the batch delivered, which is what the loop stalls
    for.
    """

    def __init__(self, spec, step=0.0, step_rows=1):
        self.spec = spec
        self.rows = self.bytes = self.key_sum = self.batches = 0
        self.probe = 0.0
        self.step, self.step_rows = step, step_rows
        self.waits = []
        self.ready_at = time.monotonic()

    def start(self):
        """The clock of the first wait starts now (the read's first request)."""
        self.ready_at = time.monotonic()

    def deliver(self, tensor, keys):
        rows = len(keys)
        if tensor.shape != (rows,) + self.spec.shape or tensor.dtype != self.spec.dtype:
            raise SystemExit(
                f"{self.spec.name}: got a tensor {tensor.dtype}{tensor.shape} for {rows} rows"
            )
        if rows:
            self.probe += float(tensor.reshape(rows, -1)[:, -1].sum())
            self.key_sum += int(keys.sum())
        self.rows += rows
        self.bytes += tensor.nbytes + keys.nbytes
        self.batches += 1
        now = time.monotonic()
        self.waits.append(now - self.ready_at)
        if self.step:
            time.sleep(self.step * rows / self.step_rows)
        self.ready_at = time.monotonic()

    def wait_quantile(self, q):
        """The `q` quantile of the waits, in seconds (None before any batch)."""
        if not self.waits:
            return None
        ordered = sorted(self.waits)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def deliver_arrow(self, batch):
        column = batch.column(self.spec.tensor)
        if pa.types.is_fixed_size_binary(column.type):
            # Raw bytes read locally: the values buffer viewed as the tensors, no copy.
            rows, width = len(column), column.type.byte_width
            tensor = np.frombuffer(
                column.buffers()[1], dtype=self.spec.dtype, count=rows * self.spec.values,
                offset=column.offset * width,
            ).reshape((rows,) + self.spec.shape)
        else:
            tensor = column.to_numpy_ndarray()
        self.deliver(tensor, batch.column(self.spec.key).to_numpy())

    def complete(self, rows):
        """Whether every one of the dataset's `rows` rows arrived exactly once."""
        return self.rows == rows and self.key_sum == rows * (rows - 1) // 2


class Deadline:
    """An optional time cap on one measurement (`--seconds`)."""

    def __init__(self, seconds):
        self.at = time.monotonic() + seconds if seconds else None
        self.hit = False

    def passed(self):
        if self.at is not None and time.monotonic() >= self.at:
            self.hit = True
        return self.hit


# ---- local pyarrow ----


def read_local(entry, spec, rows_per_batch, tally, deadline):
    for path in entry["paths"]:
        columns = [spec.tensor, spec.key]
        for batch in pq.ParquetFile(path).iter_batches(batch_size=rows_per_batch, columns=columns):
            tally.deliver_arrow(batch)
            if deadline.passed():
                return


# ---- Shardwise ----


class Http:
    """One kept-alive HTTP/1.1 connection (no proxies: loopback only)."""

    def __init__(self, address, timeout=60):
        host, _, port = address.rpartition(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=timeout)

    def call(self, method, path, body=None, headers=None):
        """(status, headers, body bytes); a body with a length is read into one buffer."""
        headers = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        length = resp.getheader("content-length")
        if length is None:
            payload = resp.read()
        else:
            payload = bytearray(int(length))
            view, got = memoryview(payload), 0
            while got < len(payload):
                n = resp.readinto(view[got:])
                if not n:
                    raise ConnectionError(f"{path}: the body ended after {got} of {length} bytes")
                got += n
        return resp.status, resp, payload

    def json(self, method, path, body=None):
        status, _, payload = self.call(method, path, body)
        if status != 200:
            raise SystemExit(f"{method} {path}: {status} {bytes(payload)[:500]!r}")
        return json.loads(payload)

    def close(self):
        self.conn.close()


def host_port(url):
    parsed = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
    return f"{parsed.hostname}:{parsed.port}"


class ShardwiseEpoch:
    """One `distributed_epoch` read of a dataset through a Shardwise dispatcher."""

    def __init__(self, dispatcher, definition, split_size, rows_per_call, in_flight, compression):
        self.dispatcher = host_port(dispatcher)
        self.definition, self.split_size = definition, split_size
        self.rows_per_call, self.in_flight, self.compression = rows_per_call, in_flight, compression
        self.items = queue.Queue(maxsize=4 * in_flight)
        self.stop = threading.Event()
        self.changed = threading.Event()
        self.lock = threading.Lock()
        self.tasks = {}  # task id -> {"done": bool, "live": reads running}
        self.threads = []

    def run(self, tally, deadline):
        control = Http(self.dispatcher)
        client = None
        try:
            dataset = control.json("POST", "/v1/datasets", {"dataset": self.definition})
            job = control.json(
                "POST",
                "/v1/jobs",
                {
                    "dataset_id": dataset["dataset_id"],
                    "processing_mode": "distributed_epoch",
                    "split_size": self.split_size,
                },
            )
            client = control.json("POST", f"/v1/jobs/{job['job_id']}/iterations", {})["client_id"]
            heartbeats = threading.Thread(target=self.heartbeats, args=(client,), daemon=True)
            self.threads.append(heartbeats)  # first in the list (see the end)
            heartbeats.start()
            while True:
                try:
                    item = self.items.get(timeout=STALL_SECONDS)
                except queue.Empty:
                    raise SystemExit(f"Shardwise read: no rows for {STALL_SECONDS} s") from None
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise SystemExit(f"Shardwise read: {item}")
                for batch in item:
                    tally.deliver_arrow(batch)
                if deadline.passed():
                    break
        finally:
            self.stop.set()
            self.changed.set()
            while True:  # unblock readers waiting for room
                try:
                    self.items.get_nowait()
                except queue.Empty:
                    break
            # The heartbeats first: then no reader starts any more.
            for t in self.threads[:1]:
                t.join(timeout=60)
            with self.lock:
                readers = self.threads[1:]
            for t in readers:
                t.join(timeout=60)
            if client is not None:
                try:
                    control.call("DELETE", f"/v1/clients/{client}")
                except OSError:
                    pass  # the read is over either way
            control.close()

    def put(self, item):
        while not self.stop.is_set():
            try:
                self.items.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def heartbeats(self, client):
        control = Http(self.dispatcher)
        try:
            while not self.stop.is_set():
                self.changed.clear()
                hb = control.json("POST", f"/v1/clients/{client}/heartbeat", {})
                with self.lock:
                    for task in hb["tasks"]:
                        if task["task_id"] in self.tasks:
                            continue
                        # done: a read saw the end; live: its reads still running (one may
                        # still hand over rows after a sibling saw the end).
                        state = {"done": False, "live": self.in_flight}
                        self.tasks[task["task_id"]] = state
                        for _ in range(self.in_flight):
                            t = threading.Thread(
                                target=self.reads,
                                args=(task["task_id"], task["worker_address"], state),
                                daemon=True,
                            )
                            t.start()
                            self.threads.append(t)
                    all_done = all(s["live"] == 0 for s in self.tasks.values())
                if hb["iteration_finished"] and all_done:
                    self.put(None)
                    return
                # A task that ends asks for the next heartbeat at once.
                self.changed.wait(timeout=0.5)
        except BaseException as e:  # handed to the consumer, which stops
            self.put(e)
        finally:
            control.close()

    def reads(self, task_id, worker_address, state):
        conn = Http(host_port(worker_address))
        headers = {"Accept": ARROW}
        if self.compression:
            headers["shardwise-arrow-compression"] = self.compression
        path = f"/v1/tasks/{task_id}/elements?max={self.rows_per_call}"
        unknown_until = time.monotonic() + 30
        try:
            while not state["done"] and not self.stop.is_set():
                status, resp, body = conn.call("GET", path, headers=headers)
                if status == 404 and time.monotonic() < unknown_until:
                    time.sleep(0.01)  # the worker is fetching the task from the dispatcher
                    continue
                if status != 200:
                    if state["done"]:
                        break  # a sibling read saw the end and the task is gone
                    raise ConnectionError(f"task {task_id}: {status} {bytes(body)[:500]!r}")
                kind = resp.getheader("content-type")
                if kind != ARROW:
                    raise ConnectionError(f"task {task_id}: content type {kind}")
                batches = list(pa.ipc.open_stream(pa.py_buffer(body)))
                if batches:
                    self.put(batches)
                if resp.getheader("shardwise-end-of-sequence") == "true":
                    state["done"] = True
                    self.changed.set()
        except BaseException as e:
            self.put(e)
        finally:
            conn.close()
            with self.lock:
                state["live"] -= 1
            self.changed.set()


# ---- Shardwise's Python package ----


def read_package(dispatcher, definition, split_size, rows_per_call, compression, tally, deadline):
    """A `distributed_epoch` read with the Python package a user installs (`python/`):
    `shardwise.distribute(..., format="arrow")`, which yields the workers' record batches."""
    import shardwise

    reader = shardwise.distribute(
        f"http://{host_port(dispatcher)}",
        definition,
        format="arrow",
        arrow_compression=compression,
        elements_per_request=rows_per_call,
        split_size=split_size,
    )
    with reader:
        for batch in reader:
            tally.deliver_arrow(batch)
            if deadline.passed():
                return


# ---- TensorFlow ----


def tf_dataset(entry, spec, rows_per_batch):
    """The dataset a TensorFlow user writes for these TFRecord files: batches of parsed
    Examples, the raw tensor bytes decoded and reshaped (on the service's workers)."""
    import tensorflow as tf

    features = {
        spec.tensor: tf.io.FixedLenFeature([], tf.string),
        spec.key: tf.io.FixedLenFeature([], tf.int64),
    }
    dtype = tf.as_dtype(spec.dtype)
    shape = [-1] + list(spec.shape)

    def parse(records):
        example = tf.io.parse_example(records, features)
        tensor = tf.reshape(tf.io.decode_raw(example[spec.tensor], dtype), shape)
        return tensor, example[spec.key]

    ds = tf.data.TFRecordDataset(entry["tfrecords"])
    ds = ds.batch(rows_per_batch).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def read_tensorflow(dispatcher_port, entry, spec, rows_per_batch, compression, tally, deadline):
    import tensorflow as tf

    ds = tf_dataset(entry, spec, rows_per_batch).apply(
        tf.data.experimental.service.distribute(
            processing_mode="distributed_epoch",
            service=f"grpc://localhost:{dispatcher_port}",
            compression=compression,
        )
    )
    for tensor, keys in ds:
        tally.deliver(tensor.numpy(), keys.numpy())
        if deadline.passed():
            return


def tensorflow_dispatcher():
    """Role `tf-dispatcher`: TensorFlow's DispatchServer (in memory, its default)."""
    import tensorflow as tf

    service = tf.data.experimental.service
    server = service.DispatchServer(service.DispatcherConfig(port=0))
    print("PORT", server._server.bound_port(), flush=True)
    server.join()


def tensorflow_worker(dispatcher_port):
    """Role `tf-worker PORT`: a WorkerServer of the dispatcher on PORT."""
    import tensorflow as tf

    service = tf.data.experimental.service
    config = service.WorkerConfig(dispatcher_address=f"localhost:{dispatcher_port}", port=0)
    server = service.WorkerServer(config)
    print("PORT", server._server.bound_port(), flush=True)
    server.join()
