"""A TensorFlow tf.data service client for the end-to-end tests, one read per process.

    python e2e.py read SERVICE [OPTIONS]

Reads a dataset through `tf.data.experimental.service.distribute` from SERVICE
(`grpc://HOST:PORT`) and prints one JSON line: `{"elements": [...]}`, or `{"error": "..."}`
when TensorFlow raised (its message, and as `code` the class of the error, which names the
gRPC status, e.g. `FailedPreconditionError`).

Options:
  --dataset NAME       range_N (`Dataset.range(N)`), repeat_N (`Dataset.range(N).repeat()`),
                       map_N (`range(N).map(lambda x: x * 2)`), maprepeat_N_R (the same,
                       `.repeat(R)`),
                       interleave (`range(3).interleave(...)`: no DYNAMIC split provider in
                       Shardwise), sql (a `SqlDataset`: none in TensorFlow either)
  --mode MODE          parallel_epochs (default), distributed_epoch, file_or_data
  --job-name NAME      a shared job
  --num-consumers N    coordinated reads, with --consumer-index I
  --wait-workers N     first wait (GetWorkers, at most 120 s) until N workers registered, so
                       that the iteration starts with all of them
  --take K             read at most K elements
  --iterations N       read the distributed dataset N times (one iteration each, elements
                       concatenated)
  --noise              build unrelated datasets and functions first, and the dataset twice
                       (the second one is read): node and function names differ from a plain
                       build of the same dataset
  --pause-after K      after K elements, print `PAUSED` and wait for a line on stdin, then go on

TensorFlow logs to stderr.
"""

import argparse
import json
import sys
import time

import tensorflow as tf

service = tf.data.experimental.service


def dataset_of(name):
    ds = tf.data.Dataset
    kind, _, n = name.partition("_")
    if kind == "range":
        return ds.range(int(n))
    if kind == "repeat":
        return ds.range(int(n)).repeat()
    if kind == "map":
        return ds.range(int(n)).map(lambda x: x * 2)
    if kind == "maprepeat":
        count, _, times = n.partition("_")
        return ds.range(int(count)).map(lambda x: x * 2).repeat(int(times))
    if name == "interleave":
        return ds.range(3).interleave(lambda x: ds.range(x), cycle_length=2)
    if name == "sql":
        # Never read: refused when the iteration is created.
        return tf.data.experimental.SqlDataset(
            "sqlite", "/nonexistent/shardwise.db", "SELECT 1", (tf.int32,)
        )
    raise SystemExit("unknown dataset %r" % name)


MODES = {
    "parallel_epochs": "parallel_epochs",
    "distributed_epoch": "distributed_epoch",
    "file_or_data": service.ShardingPolicy.FILE_OR_DATA,
}


def wait_for_workers(target, count):
    """Polls the dispatcher's GetWorkers until it lists `count` workers (TensorFlow has no
    Python stubs for the service: the request is empty and each `WorkerInfo` is field 1)."""
    import grpc

    channel = grpc.insecure_channel(target.split("://", 1)[1])
    call = channel.unary_unary("/tensorflow.data.DispatcherService/GetWorkers")
    deadline = time.monotonic() + 120
    while True:
        try:
            reply = call(b"", timeout=10)
            # Each WorkerInfo is one length-delimited field 1 (tag 0x0a) of the reply.
            if _count_field_1(reply) >= count:
                channel.close()
                return
        except grpc.RpcError as e:
            if time.monotonic() > deadline:
                raise SystemExit("GetWorkers: %s" % e)
        if time.monotonic() > deadline:
            raise SystemExit("fewer than %d workers registered within 120 s" % count)
        time.sleep(0.05)


def _count_field_1(data):
    count, i = 0, 0
    while i < len(data):
        tag = data[i]
        length, shift, i = 0, 0, i + 1
        while True:
            byte = data[i]
            i += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if tag == 0x0A:
            count += 1
        i += length
    return count


def read(target, *args):
    parser = argparse.ArgumentParser(prog="e2e.py read")
    parser.add_argument("--dataset", default="range_10")
    parser.add_argument("--mode", default="parallel_epochs", choices=sorted(MODES))
    parser.add_argument("--job-name")
    parser.add_argument("--num-consumers", type=int)
    parser.add_argument("--consumer-index", type=int)
    parser.add_argument("--wait-workers", type=int)
    parser.add_argument("--take", type=int)
    parser.add_argument("--pause-after", type=int)
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--noise", action="store_true")
    opts = parser.parse_args(args)

    if opts.wait_workers:
        wait_for_workers(target, opts.wait_workers)
    if opts.noise:
        noise = [
            tf.data.Dataset.range(7).map(lambda x: x + 3).filter(lambda x: x > 1),
            tf.data.Dataset.from_tensor_slices([1, 2]).map(lambda x: x * x),
            tf.function(lambda x: x - 1).get_concrete_function(tf.constant(1)),
        ]
        dataset_of(opts.dataset)
        del noise
    dataset = dataset_of(opts.dataset)
    dataset = dataset.apply(
        service.distribute(
            processing_mode=MODES[opts.mode],
            service=target,
            job_name=opts.job_name,
            num_consumers=opts.num_consumers,
            consumer_index=opts.consumer_index,
        )
    )
    if opts.take is not None:
        dataset = dataset.take(opts.take)
    elements = []
    try:
        for _ in range(opts.iterations):
            for element in dataset.as_numpy_iterator():
                elements.append(int(element))
                if opts.pause_after is not None and len(elements) == opts.pause_after:
                    print("PAUSED", flush=True)
                    sys.stdin.readline()
    except tf.errors.OpError as e:
        # The class names the gRPC status TensorFlow saw, e.g. FailedPreconditionError.
        result = {"error": e.message, "code": type(e).__name__, "elements": elements}
        print(json.dumps(result), flush=True)
        return
    print(json.dumps({"elements": elements}), flush=True)


def main():
    role, args = sys.argv[1], sys.argv[2:]
    {"read": read}[role](*args)


if __name__ == "__main__":
    main()
