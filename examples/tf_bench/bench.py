"""The tf.data service dispatcher's hot RPCs, TensorFlow's DispatchServer against Shardwise.

    python bench.py --shardwise PATH/TO/shardwise [--seconds 5] [--threads 1,8]
                    [--fault-tolerant] [--only tensorflow|shardwise]

Starts each dispatcher in its own process (TensorFlow's `DispatchServer` in memory, its
default; `shardwise dispatcher` in memory, and with `--fault-tolerant` also a Shardwise
dispatcher with a work dir in fault-tolerant mode), sets each up the same way, then calls
WorkerHeartbeat, ClientHeartbeat and GetSplit from 1 and 8 threads (one gRPC channel each) for a
fixed time, and prints a markdown table: calls/s and the dispatcher process's CPU per call
(utime + stime of /proc/PID/stat, before and after, divided by the calls), and the ratio of
Shardwise's CPU per call to TensorFlow's.

Setup of each target: a fake worker (address 127.0.0.1:1, where nothing listens, so the
dispatcher's task pushes fail at once) registers with a WorkerHeartbeat first;
`range(10**9)` is registered with TensorFlow's own `register_dataset`; GetOrCreateJob in
DYNAMIC mode (`distributed_epoch`) and GetOrCreateIteration give the client id; the fake
worker's next heartbeat gives its task and the iteration id that GetSplit asks for.

TensorFlow ships grpcio but not the data service's Python message classes: the few request
messages are encoded here by hand (field numbers of TensorFlow 2.21's dispatcher.proto).
Needs the TensorFlow venv of the tests (tests/tf/requirements.txt).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

import grpc

SERVICE = "/tensorflow.data.DispatcherService/"
FAKE_WORKER = "127.0.0.1:1"


# ---- protobuf, by hand ----


def varint(value):
    value &= (1 << 64) - 1  # int64 as two's complement
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_varint(number, value):
    return varint(number << 3) + varint(value)


def field_bytes(number, data):
    if isinstance(data, str):
        data = data.encode()
    return varint(number << 3 | 2) + varint(len(data)) + data


def read_varint(data, i):
    value, shift = 0, 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def fields(data):
    """Every (number, value) of a serialized message: ints for varints, bytes otherwise."""
    out = []
    i = 0
    while i < len(data):
        key, i = read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = read_varint(data, i)
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        elif wire == 2:
            length, i = read_varint(data, i)
            value, i = data[i : i + length], i + length
        else:
            raise ValueError("wire type %d" % wire)
        out.append((number, value))
    return out


def first(data, number, default=None):
    for n, v in fields(data):
        if n == number:
            return v
    return default


# The requests (TensorFlow 2.21's field numbers).


def worker_heartbeat(current_tasks=()):
    # WorkerHeartbeatRequest { worker_address = 1; repeated int64 current_tasks = 2;
    #   int64 worker_uid = 5; repeated DataTransferServerInfo transfer_servers = 7 }
    # DataTransferServerInfo { protocol = 1; address = 2 }
    msg = field_bytes(1, FAKE_WORKER)
    for task in current_tasks:
        msg += field_varint(2, task)
    msg += field_varint(5, 424242)
    msg += field_bytes(7, field_bytes(1, "grpc") + field_bytes(2, FAKE_WORKER))
    return msg


def get_or_create_job(dataset_id):
    # GetOrCreateJobRequest { dataset_id = 1; ProcessingModeDef processing_mode_def = 2 }
    # ProcessingModeDef { ShardingPolicy sharding_policy = 1 } (DYNAMIC = 1)
    return field_bytes(1, dataset_id) + field_bytes(2, field_varint(1, 1))


def get_or_create_iteration(job_id):
    # GetOrCreateIterationRequest { int64 job_id = 1; int64 repetition = 2 }
    return field_varint(1, job_id)


def client_heartbeat(client_id):
    # ClientHeartbeatRequest { int64 iteration_client_id = 1 }
    return field_varint(1, client_id)


def get_split(iteration_id):
    # GetSplitRequest { int64 iteration_id = 1; repetition = 2; split_provider_index = 3 }
    return field_varint(1, iteration_id)


# ---- dispatchers ----


def tensorflow_dispatcher():
    """Role `tf-dispatcher`: TensorFlow's DispatchServer, in memory (its default)."""
    import tensorflow as tf

    service = tf.data.experimental.service
    server = service.DispatchServer(service.DispatcherConfig(port=0))
    print("PORT", server._server.bound_port(), flush=True)
    server.join()


def start(cmd, port_of):
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=no_proxy_env()
    )
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        port = port_of(line.strip())
        if port:
            return proc, port
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit("%s did not start" % cmd)


def no_proxy_env():
    env = dict(os.environ)
    for k in list(env):
        if k.lower() in ("http_proxy", "https_proxy", "grpc_proxy", "all_proxy"):
            del env[k]
    return env


def tf_port(line):
    return int(line.split()[1]) if line.startswith("PORT ") else None


def shardwise_port(line):
    prefix = "shardwise dispatcher listening on "
    return int(line.rsplit(":", 1)[1]) if line.startswith(prefix) else None


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    # Fields after the command (which may hold spaces) start at field 3; utime and stime are
    # fields 14 and 15.
    rest = stat[stat.rindex(")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


# ---- the benchmark ----


class Target:
    def __init__(self, name, proc, port):
        self.name, self.proc, self.port = name, proc, port
        self.address = "127.0.0.1:%d" % port
        self.channel = channel(self.address)

    def call(self, method, request, ch=None):
        stub = (ch or self.channel).unary_unary(SERVICE + method)
        return stub(request, timeout=30)

    def setup(self):
        import tensorflow as tf

        self.call("WorkerHeartbeat", worker_heartbeat())
        dataset = tf.data.Dataset.range(10**9)
        dataset_id = tf.data.experimental.service.register_dataset(
            "grpc://" + self.address, dataset
        )
        dataset_id = dataset_id.numpy()
        job_id = first(self.call("GetOrCreateJob", get_or_create_job(dataset_id)), 1, 0)
        self.client_id = first(self.call("GetOrCreateIteration", get_or_create_iteration(job_id)), 1, 0)
        # The fake worker's task (TaskDef: task_id = 4, iteration_id = 5).
        deadline = time.monotonic() + 30
        while True:
            reply = self.call("WorkerHeartbeat", worker_heartbeat())
            tasks = [v for n, v in fields(reply) if n == 1]
            if tasks:
                break
            if time.monotonic() > deadline:
                raise SystemExit("%s: no task for the fake worker" % self.name)
            time.sleep(0.05)
        self.task_id = first(tasks[0], 4, 0)
        self.iteration_id = first(tasks[0], 5, 0)
        self.requests = {
            "WorkerHeartbeat": worker_heartbeat([self.task_id]),
            "ClientHeartbeat": client_heartbeat(self.client_id),
            "GetSplit": get_split(self.iteration_id),
        }
        # Each request once: it answers.
        for method, request in self.requests.items():
            self.call(method, request)

    def run(self, method, threads, seconds):
        request = self.requests[method]
        channels = [channel(self.address) for _ in range(threads)]
        stubs = [ch.unary_unary(SERVICE + method) for ch in channels]
        for stub in stubs:
            stub(request, timeout=30)  # connect before measuring
        counts = [0] * threads
        errors = []
        stop = threading.Event()

        def loop(i):
            stub, n = stubs[i], 0
            try:
                while not stop.is_set():
                    stub(request, timeout=30)
                    n += 1
            except grpc.RpcError as e:
                errors.append("%s: %s" % (e.code(), e.details()))
            counts[i] = n

        workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
        cpu0, t0 = cpu_seconds(self.proc.pid), time.monotonic()
        for w in workers:
            w.start()
        time.sleep(seconds)
        stop.set()
        for w in workers:
            w.join()
        cpu1, t1 = cpu_seconds(self.proc.pid), time.monotonic()
        for ch in channels:
            ch.close()
        if errors:
            raise SystemExit("%s %s: %s" % (self.name, method, errors[0]))
        calls = sum(counts)
        return calls / (t1 - t0), (cpu1 - cpu0) / calls * 1e6

    def stop(self):
        self.channel.close()
        self.proc.kill()
        self.proc.wait()


def channel(address):
    options = [("grpc.max_receive_message_length", -1), ("grpc.enable_http_proxy", 0)]
    return grpc.insecure_channel(address, options=options)


def main():
    if sys.argv[1:2] == ["tf-dispatcher"]:
        return tensorflow_dispatcher()
    parser = argparse.ArgumentParser()
    parser.add_argument("--shardwise", help="the shardwise binary (a release build)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--threads", default="1,8")
    parser.add_argument("--fault-tolerant", action="store_true")
    parser.add_argument("--only", choices=["tensorflow", "shardwise"])
    opts = parser.parse_args()
    threads = [int(t) for t in opts.threads.split(",")]

    starts = []
    if opts.only != "shardwise":
        starts.append(("TensorFlow", [sys.executable, __file__, "tf-dispatcher"], tf_port))
    if opts.only != "tensorflow":
        if not opts.shardwise:
            raise SystemExit("--shardwise PATH is needed")
        sw = [opts.shardwise, "dispatcher", "--port", "0"]
        starts.append(("Shardwise", sw, shardwise_port))
        if opts.fault_tolerant:
            work_dir = tempfile.mkdtemp(prefix="shardwise-bench-")
            ft = sw + ["--work-dir", work_dir, "--fault-tolerant"]
            starts.append(("Shardwise FT", ft, shardwise_port))
    targets = []
    try:
        for name, cmd, port_of in starts:
            proc, port = start(cmd, port_of)
            targets.append(Target(name, proc, port))
        for t in targets:
            t.setup()
        results = {}
        for method in ["WorkerHeartbeat", "ClientHeartbeat", "GetSplit"]:
            for n in threads:
                for t in targets:
                    results[(t.name, method, n)] = t.run(method, n, opts.seconds)
                    rate, cpu = results[(t.name, method, n)]
                    print(
                        "# %-13s %-16s %d threads: %9.0f calls/s %8.1f us CPU/call"
                        % (t.name, method, n, rate, cpu),
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        for t in targets:
            t.stop()

    names = [t.name for t in targets]
    header = "| RPC | threads |"
    rule = "| --- | ---: |"
    for name in names:
        header += " %s calls/s | %s CPU µs/call |" % (name, name)
        rule += " ---: | ---: |"
    others = [n for n in names if n != "TensorFlow"] if "TensorFlow" in names else []
    for name in others:
        header += " %s / TensorFlow CPU |" % name
        rule += " ---: |"
    print(header)
    print(rule)
    for method in ["WorkerHeartbeat", "ClientHeartbeat", "GetSplit"]:
        for n in threads:
            row = "| %s | %d |" % (method, n)
            for name in names:
                rate, cpu = results[(name, method, n)]
                row += " %.0f | %.1f |" % (rate, cpu)
            for name in others:
                ratio = results[(name, method, n)][1] / results[("TensorFlow", method, n)][1]
                row += " %.2f |" % ratio
            print(row)


if __name__ == "__main__":
    main()
