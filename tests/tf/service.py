"""TensorFlow's own tf.data service, one role per process, for the tests.

    python service.py dispatcher [OPTIONS]       a DispatchServer on a port it picks
    python service.py worker DISPATCHER [OPTIONS] WorkerServers (DISPATCHER: HOST:PORT)
    python service.py seed SERVICE               the seed example through SERVICE
    python service.py dataset-def SERVICE OUT    registers range(10) as `distribute` does and
                                                 writes the graph the dispatcher keeps to OUT

`dispatcher` prints `PORT <port>` once serving, `worker` one such line per WorkerServer, in the
order of `--port`; both then serve until killed. `seed`
prints the elements it read as one JSON list. TensorFlow logs to stderr.

Dispatcher options: `--port P` (0: pick one), `--work-dir DIR`, `--fault-tolerant`,
`--worker-addresses A,B` (static sharding), and TensorFlow's test-speed timeouts are always set.
Worker options: `--port P,P,...` (one WorkerServer per port, 0: pick one; default one worker),
`--heartbeat-ms MS` (default 100, for tests), `--tags A,B` (worker tags of every one). Several
workers share the process, as TensorFlow's own service tests host theirs, and TensorFlow's
import, which costs seconds of CPU, is paid once.
"""

import argparse
import json
import sys

import tensorflow as tf

service = tf.data.experimental.service


def dispatcher(*args):
    parser = argparse.ArgumentParser(prog="service.py dispatcher")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--work-dir")
    parser.add_argument("--fault-tolerant", action="store_true")
    parser.add_argument("--worker-addresses", default="")
    opts = parser.parse_args(args)
    config = service.DispatcherConfig(
        port=opts.port,
        work_dir=opts.work_dir,
        fault_tolerant_mode=opts.fault_tolerant,
        worker_addresses=[a for a in opts.worker_addresses.split(",") if a] or None,
        # Test speed, as TensorFlow's own service tests run.
        job_gc_check_interval_ms=200,
        worker_timeout_ms=10_000,
    )
    server = service.DispatchServer(config)
    print("PORT", server._server.bound_port(), flush=True)
    server.join()


def worker(dispatcher_address, *args):
    parser = argparse.ArgumentParser(prog="service.py worker")
    parser.add_argument("--port", default="0")
    parser.add_argument("--heartbeat-ms", type=int, default=100)
    parser.add_argument("--tags", default="")
    opts = parser.parse_args(args)
    tags = [t for t in opts.tags.split(",") if t]
    servers = []
    for port in opts.port.split(","):
        server = make_worker(dispatcher_address, int(port), opts.heartbeat_ms, tags)
        servers.append(server)
        print("PORT", server._server.bound_port(), flush=True)
    for server in servers:
        server.join()


def make_worker(dispatcher_address, port=0, heartbeat_ms=100, tags=()):
    """A started `WorkerServer`. With tags it is configured by its proto (the Python
    `WorkerConfig` has no tags), as TensorFlow's own tests configure tagged workers."""
    if not tags:
        config = service.WorkerConfig(
            dispatcher_address=dispatcher_address,
            port=port,
            # The address the dispatcher hands to clients: IPv4 loopback, not `localhost`.
            worker_address="127.0.0.1:%port%",
            heartbeat_interval_ms=heartbeat_ms,
        )
        return service.WorkerServer(config)
    from tensorflow.core.protobuf import service_config_pb2

    defaults = service.WorkerConfig(dispatcher_address=dispatcher_address)
    config = service_config_pb2.WorkerConfig(
        dispatcher_address=dispatcher_address,
        worker_address="127.0.0.1:%port%",
        port=port,
        protocol=defaults.protocol,
        worker_tags=tags,
        heartbeat_interval_ms=heartbeat_ms,
        dispatcher_timeout_ms=defaults.dispatcher_timeout_ms,
        data_transfer_address=defaults.data_transfer_address,
    )
    return service.WorkerServer(config)


def seed(target):
    # The seed example, with the dispatcher's target given.
    dataset = tf.data.Dataset.range(10)
    dataset = dataset.apply(
        service.distribute(processing_mode="parallel_epochs", service=target)
    )
    print(json.dumps([int(x) for x in dataset.as_numpy_iterator()]), flush=True)


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(data, number):
    """The first length-delimited field `number` of a serialized message."""
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = _read_varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            length, i = _read_varint(data, i)
            if key >> 3 == number:
                return data[i : i + length]
            i += length
        else:
            raise ValueError("wire type %d" % wire)
    raise KeyError(number)


def _read_varint(data, i):
    value, shift = 0, 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def dataset_def(target, out):
    """The graph of range(10) as a `distribute` client registers it, read back with
    GetDatasetDef over gRPC (TensorFlow has no Python stubs for the service: the two small
    messages are encoded here)."""
    import grpc

    dataset = tf.data.Dataset.range(10)
    dataset_id = service.register_dataset(target, dataset).numpy()
    channel = grpc.insecure_channel(target.split("://", 1)[1])
    call = channel.unary_unary("/tensorflow.data.DispatcherService/GetDatasetDef")
    # GetDatasetDefRequest { string dataset_id = 1 }
    request = b"\x0a" + _varint(len(dataset_id)) + dataset_id
    response = call(request, timeout=60)
    # GetDatasetDefResponse { DatasetDef dataset_def = 1 } / DatasetDef { GraphDef graph = 1 }
    graph = _field(_field(response, 1), 1)
    with open(out, "wb") as f:
        f.write(graph)
    print("dataset_id", dataset_id.decode(), flush=True)


def main():
    role, args = sys.argv[1], sys.argv[2:]
    {"dispatcher": dispatcher, "worker": worker, "seed": seed, "dataset-def": dataset_def}[
        role
    ](*args)


if __name__ == "__main__":
    main()
