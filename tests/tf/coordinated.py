"""TensorFlow clients for the coordinated-read tests, one scenario per process, as TensorFlow's
own service tests (`coordinated_read_test.py`, `worker_tags_test.py`) read: consumers are
simulated in one program by a deterministic parallel interleave, one thread per consumer.

    python coordinated.py SCENARIO SERVICE [--graph] [--wait-workers W] [OPTIONS]

Scenarios:
  groups       `--num-consumers N --take K`: N consumers of one job over a dataset that yields
               groups of N consecutive integers; prints `{"elements": [...]}` (element i from
               consumer i % N). With `--local-workers L --tags T1,T2`, L TensorFlow workers are
               started in this process first (local workers, with those tags), and the read
               uses `--target-workers` (AUTO by default).
  bucketizing  15 consumers (3 "hosts" of 5 replicas) of `bucket_by_sequence_length` batches
               (size 10, boundaries 30 and 60) of a shuffled, repeated `range(100)`, grouped
               so that each window of 15 batches has one bucket; prints the first
               `--rounds` rounds' batches: `{"batches": [[...], ...]}`.
  add-workers  `--num-consumers N --take K --total-workers T`: reads K elements eagerly,
               prints `PAUSED` and waits for a line on stdin (more workers start meanwhile),
               reads until the first element (0) of each of T workers arrived, then K more;
               prints `{"elements": [...]}`.
  restart      `--num-consumers N --take K`: reads K elements with N consumers, then builds
               the same consumers again (same job name) and reads again: prints
               `{"first": [...], "second": [...]}`, `second` replaced by `"error"`/`"code"`
               when TensorFlow raised.

`--graph` runs the read in a `tf.compat.v1` graph and session (one-shot iterator, or an
initializable one with local workers), as TensorFlow's graph-mode test combinations do;
otherwise eagerly. Any TensorFlow error ends the scenario with one JSON line
`{"error": ..., "code": ...}` (and what was read so far). TensorFlow logs to stderr.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402
from tensorflow.python.data.experimental.ops import data_service_ops  # noqa: E402

from e2e import wait_for_workers  # noqa: E402
from service import make_worker  # noqa: E402

service = tf.data.experimental.service


def distribute(ds, target, **kwargs):
    # TensorFlow's service tests read with a 20 ms task refresh interval.
    return ds.apply(
        data_service_ops._distribute(
            "parallel_epochs", target, task_refresh_interval_hint_ms=20, **kwargs
        )
    )


def grouped(num_consumers):
    """0, then random x: each gives the N consecutive integers from x*N."""
    ds = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64))
    ds = ds.concatenate(tf.data.Dataset.random())

    def group(x):
        x = x % (2**32)
        return tf.data.Dataset.range(x * num_consumers, (x + 1) * num_consumers)

    return ds.flat_map(group)


def interleaved(consumers, **kwargs):
    ds = tf.data.Dataset.from_tensor_slices(consumers)
    n = len(consumers)
    return ds.interleave(
        lambda x: x, cycle_length=n, num_parallel_calls=n, deterministic=True, **kwargs
    )


def coordinated_dataset(target, n, job_name, target_workers="AUTO"):
    source = grouped(n)
    consumers = [
        distribute(
            source,
            target,
            job_name=job_name,
            consumer_index=i,
            num_consumers=n,
            target_workers=target_workers,
        )
        for i in range(n)
    ]
    return interleaved(consumers)


class Reader:
    """Reads `count` elements of a dataset, eagerly or in a v1 graph and session."""

    def __init__(self, graph, initializable=False):
        self.graph = graph
        self.initializable = initializable

    def read(self, make_dataset, count, convert):
        out = []
        if not self.graph:
            it = iter(make_dataset())
            for _ in range(count):
                out.append(convert(next(it)))
            return out
        with tf.compat.v1.Graph().as_default():
            ds = make_dataset()
            if self.initializable:
                it = tf.compat.v1.data.make_initializable_iterator(ds)
            else:
                it = tf.compat.v1.data.make_one_shot_iterator(ds)
            get_next = it.get_next()
            with tf.compat.v1.Session() as sess:
                if self.initializable:
                    sess.run(it.initializer)
                for _ in range(count):
                    out.append(convert(sess.run(get_next)))
        return out


def as_int(x):
    return int(x)


def as_list(x):
    return [int(v) for v in x]


def fail(e, **so_far):
    result = {"error": e.message, "code": type(e).__name__}
    result.update(so_far)
    print(json.dumps(result), flush=True)


def start_local_workers(target, count, tags):
    """TensorFlow workers in this process (the client's local workers)."""
    address = target.split("://", 1)[1]
    workers = [make_worker(address, tags=tags) for _ in range(count)]
    return workers


def groups(target, opts):
    tags = [t for t in (opts.tags or "").split(",") if t]
    local = start_local_workers(target, opts.local_workers, tags)
    if opts.wait_workers:
        wait_for_workers(target, opts.wait_workers)
    n = opts.num_consumers
    reader = Reader(opts.graph, initializable=bool(local))
    try:
        elements = reader.read(
            lambda: coordinated_dataset(target, n, opts.job_name, opts.target_workers),
            opts.take,
            as_int,
        )
    except tf.errors.OpError as e:
        fail(e)
        return
    print(json.dumps({"elements": elements}), flush=True)
    del local


def bucketizing(target, opts):
    if opts.wait_workers:
        wait_for_workers(target, opts.wait_workers)
    boundaries = [30, 60]
    batch_size = 10
    hosts, replicas = 3, 5
    n = hosts * replicas

    def make():
        ds = tf.data.Dataset.range(100, output_type=tf.int32)
        ds = ds.shuffle(100)
        ds = ds.repeat()
        ds = ds.bucket_by_sequence_length(
            lambda x: x,
            boundaries,
            [batch_size] * (len(boundaries) + 1),
            drop_remainder=True,
        )
        ds = ds.group_by_window(
            lambda x: tf.cast(x[1], tf.int64),
            lambda _, x: tf.data.Dataset.from_tensors(x),
            window_size=n,
        )
        ds = ds.flat_map(lambda x: x)
        host_datasets = []
        for host in range(hosts):
            per_replica = [
                distribute(
                    ds,
                    target,
                    job_name=opts.job_name,
                    consumer_index=host * replicas + i,
                    num_consumers=n,
                )
                for i in range(replicas)
            ]
            host_datasets.append(interleaved(per_replica))
        return interleaved(host_datasets, block_length=replicas)

    try:
        batches = Reader(opts.graph).read(make, opts.rounds * n, as_list)
    except tf.errors.OpError as e:
        fail(e)
        return
    print(json.dumps({"batches": batches}), flush=True)


def restart(target, opts):
    if opts.wait_workers:
        wait_for_workers(target, opts.wait_workers)
    n = opts.num_consumers
    reader = Reader(opts.graph)

    def make():
        return coordinated_dataset(target, n, opts.job_name).take(opts.take)

    try:
        first = reader.read(make, opts.take, as_int)
    except tf.errors.OpError as e:
        fail(e)
        return
    try:
        second = reader.read(make, opts.take, as_int)
    except tf.errors.OpError as e:
        fail(e, first=first)
        return
    print(json.dumps({"first": first, "second": second}), flush=True)


def add_workers(target, opts):
    """Workers join mid-read: reads `--take` elements, prints `PAUSED` and waits for a line on
    stdin (the test starts more workers meanwhile), then reads until it has seen the first
    element (0) of every one of `--total-workers` workers, then `--take` more."""
    if opts.wait_workers:
        wait_for_workers(target, opts.wait_workers)
    n = opts.num_consumers
    it = iter(coordinated_dataset(target, n, opts.job_name, opts.target_workers))
    elements = []
    try:
        for _ in range(opts.take):
            elements.append(int(next(it)))
        print("PAUSED", flush=True)
        sys.stdin.readline()
        while elements.count(0) < opts.total_workers:
            elements.append(int(next(it)))
        for _ in range(opts.take):
            elements.append(int(next(it)))
    except tf.errors.OpError as e:
        fail(e, elements=elements)
        return
    print(json.dumps({"elements": elements}), flush=True)


def main():
    scenario, target, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    parser = argparse.ArgumentParser(prog="coordinated.py " + scenario)
    parser.add_argument("--graph", action="store_true")
    parser.add_argument("--wait-workers", type=int)
    parser.add_argument("--job-name", default="test")
    parser.add_argument("--num-consumers", type=int, default=2)
    parser.add_argument("--take", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--local-workers", type=int, default=0)
    parser.add_argument("--tags")
    parser.add_argument("--target-workers", default="AUTO")
    parser.add_argument("--total-workers", type=int, default=0)
    opts = parser.parse_args(args)
    scenarios = {
        "groups": groups,
        "bucketizing": bucketizing,
        "restart": restart,
        "add-workers": add_workers,
    }
    scenarios[scenario](target, opts)


if __name__ == "__main__":
    main()
