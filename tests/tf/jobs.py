"""TensorFlow clients for the job tests (coordinated reads), one scenario per process.

    python jobs.py coordinated SERVICE --num-consumers N [--take K] [--wait-workers W]
                                       [--job-name NAME]

`coordinated`: N consumers of one job (`job_name`, default `coordinated`; `consumer_index` 0..N-1,
`num_consumers=N`) in this one program, read in parallel by an interleave (one thread per
consumer, deterministic order: element i comes from consumer i % N), as TensorFlow's own
coordinated-read tests simulate consumers. The dataset on the workers yields groups of N
consecutive integers (0..N-1, then x*N..x*N+N-1 for random x), so each round's N elements are
consecutive when all consumers read the same round from the same worker. Prints one JSON line:
`{"elements": [...]}`, or `{"error": ..., "code": ...}`.

TensorFlow logs to stderr.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402

from e2e import wait_for_workers  # noqa: E402

service = tf.data.experimental.service


def grouped(num_consumers):
    """0, then random x: each gives the N consecutive integers from x*N."""
    ds = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64))
    ds = ds.concatenate(tf.data.Dataset.random())

    def group(x):
        x = x % (2**32)
        return tf.data.Dataset.range(x * num_consumers, (x + 1) * num_consumers)

    return ds.flat_map(group)


def coordinated(target, *args):
    parser = argparse.ArgumentParser(prog="jobs.py coordinated")
    parser.add_argument("--num-consumers", type=int, required=True)
    parser.add_argument("--take", type=int, default=100)
    parser.add_argument("--wait-workers", type=int)
    parser.add_argument("--job-name", default="coordinated")
    opts = parser.parse_args(args)
    n = opts.num_consumers
    if opts.wait_workers:
        wait_for_workers(target, opts.wait_workers)
    source = grouped(n)
    consumers = [
        source.apply(
            service.distribute(
                processing_mode="parallel_epochs",
                service=target,
                job_name=opts.job_name,
                consumer_index=i,
                num_consumers=n,
            )
        )
        for i in range(n)
    ]
    ds = tf.data.Dataset.from_tensor_slices(consumers)
    ds = ds.interleave(lambda x: x, cycle_length=n, num_parallel_calls=n, deterministic=True)
    ds = ds.take(opts.take)
    elements = []
    try:
        for element in ds.as_numpy_iterator():
            elements.append(int(element))
    except tf.errors.OpError as e:
        result = {"error": e.message, "code": type(e).__name__, "elements": elements}
        print(json.dumps(result), flush=True)
        return
    print(json.dumps({"elements": elements}), flush=True)


def main():
    role, args = sys.argv[1], sys.argv[2:]
    {"coordinated": coordinated}[role](*args)


if __name__ == "__main__":
    main()
