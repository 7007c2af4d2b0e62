"""Columnar data plane: tensors from Parquet into a Python consumer's NumPy arrays, through
Shardwise workers, through local pyarrow, and through TensorFlow's tf.data service.

    python bench.py --shardwise PATH/TO/shardwise [--gb 1.0] [--tokens-gb GB] [--seconds S]
                    [--only pyarrow,shardwise,package,tensorflow] [--workers 1,2]
                    [--in-flight 2] [--rows 64,4096] [--split-rows 128,8192] [--no-lz4]
                    [--no-tf-auto] [--step-ms MS] [--repeat N] [--data DIR]

Writes two datasets (see data.py: `images`, float32 224x224x3 tensors, `--gb` GB; `tokens`,
int32 ids 2048 a row, `--tokens-gb` GB, default half of `--gb`) as 4 Parquet files each, and
the same rows as TFRecord files for TensorFlow; then measures, in this one process, how fast
each contender delivers every row of each dataset into NumPy (contenders.py says what
"delivered" means), with the workers in their own processes on this machine:

* local pyarrow, reading the Parquet files itself: the limit;
* `shardwise worker`s (1 and 2, and lz4 with the most) behind a `shardwise dispatcher`, a
  `distributed_epoch` split by rows, Arrow IPC streams over loopback HTTP, read by this
  script's own client (several reads in flight per task) and, with `--only ...,package`, by
  the Python package's reader (`shardwise.distribute`, what a user installs);
* TensorFlow's `DispatchServer` and `WorkerServer`s (1 and 2, and its default compression
  `AUTO` with the most) serving the TFRecord copy, `distribute("distributed_epoch")`.

Every contender reads the same number of rows per batch (`--rows`, for images and tokens,
default a row group each, 38.5 and 33.6 MB: Shardwise's `max`, TensorFlow's `batch`, pyarrow's
`batch_size`); Shardwise's splits are `--split-rows` (two row groups). Prints a markdown table
on stdout: GB/s and rows/s delivered, the workers' CPU (utime + stime of /proc/PID/stat,
before and after) and the consumer's per GB, how long the consumer waited for a batch (median
and 99th percentile) and the share of the read spent waiting, and ratios to local pyarrow and
to TensorFlow's best row of the dataset. `--step-ms MS` makes the consumer a training loop at
light load: it sleeps MS per `--rows` rows it was handed (an accelerator's step; the same rate
of rows for every contender, whatever the sizes of its batches), and the waits say how long the
loop stalled for data.
A run is timed from the consumer's first request (Shardwise: registering the dataset;
TensorFlow: creating the distributed dataset's iterator; pyarrow: opening the first file) to
the last row delivered; Shardwise's and TensorFlow's workers are started before and idle.
Needs the TensorFlow venv of the tests (tests/tf/requirements.txt) and a release build.
"""

import argparse
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

# The Python package, from this checkout (pure Python: no build).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import contenders  # noqa: E402
import data  # noqa: E402

MIB = 1 << 20


# ---- processes ----


class Proc:
    """A server started by this script: it prints a line naming its address when it is up."""

    def __init__(self, name, cmd, address_of, log_dir):
        self.name = name
        self.log = open(os.path.join(log_dir, name.replace(" ", "-") + ".log"), "w")
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self.log, text=True, env=no_proxy_env()
        )
        self.pid = self.proc.pid
        lines = queue.Queue()
        threading.Thread(target=self.drain, args=(lines,), daemon=True).start()
        deadline = time.monotonic() + 120
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                self.stop()
                with open(self.log.name) as f:
                    raise SystemExit(f"{name} did not start: {' '.join(cmd)}\n{f.read()[-3000:]}")
            self.address = address_of(line.strip())
            if self.address:
                return

    def drain(self, lines):
        for line in self.proc.stdout:
            lines.put(line)
        lines.put(None)

    def cpu_seconds(self):
        with open(f"/proc/{self.pid}/stat") as f:
            stat = f.read()
        # After the command (which may hold spaces): utime and stime are fields 14 and 15.
        rest = stat[stat.rindex(")") + 2 :].split()
        return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


def no_proxy_env():
    env = dict(os.environ)
    for k in list(env):
        if k.lower() in ("http_proxy", "https_proxy", "grpc_proxy", "all_proxy", "tf_config"):
            del env[k]
    return env


def listening(role):
    prefix = f"shardwise {role} listening on "
    return lambda line: line[len(prefix) :] if line.startswith(prefix) else None


def tf_port(line):
    return line.split()[1] if line.startswith("PORT ") else None


def own_cpu_seconds():
    t = os.times()
    return t.user + t.system


# ---- measuring ----


class Result:
    def __init__(self, dataset, contender, workers, tally, seconds, worker_cpu, consumer_cpu, hit):
        self.dataset, self.contender, self.workers = dataset, contender, workers
        self.rows, self.bytes, self.seconds = tally.rows, tally.bytes, seconds
        self.wait_p50, self.wait_p99 = tally.wait_quantile(0.5), tally.wait_quantile(0.99)
        self.stall = sum(tally.waits) / seconds if seconds > 0 else None
        self.worker_cpu, self.consumer_cpu, self.partial = worker_cpu, consumer_cpu, hit
        self.gbps = self.bytes / 1e9 / seconds if seconds > 0 else 0.0
        self.rows_per_s = self.rows / seconds if seconds > 0 else 0.0

    def per_gb(self, cpu):
        return cpu / (self.bytes / 1e9) if cpu is not None and self.bytes else None


def measure(opts, dataset, contender, workers, procs, entry, spec, read):
    """Runs `read(tally, deadline)` `--repeat` times; the run of median GB/s."""
    results = []
    for _ in range(opts.repeat):
        tally = contenders.Tally(spec, opts.step_ms / 1000, rows_per_call(opts, spec))
        deadline = contenders.Deadline(opts.seconds)
        cpu0 = [p.cpu_seconds() for p in procs]
        own0, t0 = own_cpu_seconds(), time.monotonic()
        tally.start()
        read(tally, deadline)
        t1, own1 = time.monotonic(), own_cpu_seconds()
        cpu1 = [p.cpu_seconds() for p in procs]
        if not deadline.hit and not tally.complete(entry["rows"]):
            raise SystemExit(
                f"{contender} ({workers} workers) on {dataset}: {tally.rows} rows with index sum "
                f"{tally.key_sum}, not each of the {entry['rows']} rows once"
            )
        worker_cpu = sum(cpu1) - sum(cpu0) if procs else None
        results.append(
            Result(
                dataset, contender, workers, tally, t1 - t0, worker_cpu, own1 - own0, deadline.hit
            )
        )
    results.sort(key=lambda r: r.gbps)
    r = results[len(results) // 2]
    print(
        f"# {dataset:6} {contender:34} {workers or '-':>2}: {r.gbps:6.2f} GB/s "
        f"{r.rows_per_s:9.0f} rows/s, {r.rows} rows in {r.seconds:.2f} s, "
        f"waits p50 {fmt_ms(r.wait_p50)} p99 {fmt_ms(r.wait_p99)} ms",
        file=sys.stderr,
        flush=True,
    )
    return r


def rows_per_call(opts, spec):
    return opts.rows[spec.base]


def run_pyarrow(opts, manifest):
    out = []
    for name, entry in manifest.items():
        spec, n = data.SPECS[name], rows_per_call(opts, data.SPECS[name])
        out.append(
            measure(
                opts, name, "local pyarrow", None, [], entry, spec,
                lambda tally, dl: contenders.read_local(entry, spec, n, tally, dl),
            )
        )
    return out


def run_shardwise(opts, manifest, directory, log_dir):
    out = []
    counts = opts.workers
    biggest = max(os.path.getsize(p) for e in manifest.values() for p in e["paths"])
    most_rows = max(rows_per_call(opts, data.SPECS[name]) for name in manifest)
    call_bytes = max(rows_per_call(opts, data.SPECS[name]) * data.SPECS[name].row_bytes
                     for name in manifest)
    worker_args = [
        "--data-root", directory,
        "--max-file-bytes", str(max(64 * MIB, biggest + MIB)),
        # Room for the reads in flight twice over, in rows and in bytes.
        "--buffer", str(max(1024, 2 * opts.in_flight * most_rows)),
        "--max-buffer-bytes", str(max(256 * MIB, 4 * opts.in_flight * call_bytes)),
    ]
    plan = [(n, None) for n in counts]
    if opts.lz4:
        plan.append((max(counts), "lz4"))
    for n, compression in plan:
        procs = []
        try:
            dispatcher = Proc(
                "shardwise dispatcher",
                [opts.shardwise, "dispatcher", "--port", "0", "--data-root", directory],
                listening("dispatcher"), log_dir,
            )
            procs.append(dispatcher)
            workers = []
            for i in range(n):
                cmd = [opts.shardwise, "worker", "--dispatcher", dispatcher.address, "--port", "0"]
                role = f"shardwise worker {i}"
                workers.append(Proc(role, cmd + worker_args, listening("worker"), log_dir))
                procs.append(workers[-1])
            suffix = f", {compression}" if compression else ""
            for name, entry in manifest.items():
                spec, rows = data.SPECS[name], rows_per_call(opts, data.SPECS[name])
                definition = {
                    "source": {
                        "files": {
                            "paths": entry["paths"],
                            "format": "parquet",
                            "split": "rows",
                            "tensors": [spec.declaration()],
                        }
                    }
                }

                split = opts.split_rows[spec.base]

                def read(tally, dl, definition=definition, rows=rows, split=split):
                    epoch = contenders.ShardwiseEpoch(
                        dispatcher.address, definition, split, rows, opts.in_flight, compression
                    )
                    epoch.run(tally, dl)

                def read_package(tally, dl, definition=definition, rows=rows, split=split):
                    contenders.read_package(
                        dispatcher.address, definition, split, rows, compression, tally, dl
                    )

                if "shardwise" in opts.only:
                    label = f"Shardwise (bench client{suffix})" if suffix else "Shardwise"
                    out.append(measure(opts, name, label, n, workers, entry, spec, read))
                if "package" in opts.only:
                    label = f"Shardwise (Python package{suffix})"
                    out.append(measure(opts, name, label, n, workers, entry, spec, read_package))
        finally:
            for p in reversed(procs):
                p.stop()
    return out


def run_tensorflow(opts, manifest, log_dir):
    import tensorflow  # noqa: F401 (imported before the clock starts, not in the first run)

    out = []
    counts = opts.workers
    plan = [(n, None) for n in counts]
    if opts.tf_auto:
        plan.append((max(counts), "AUTO"))
    me = os.path.abspath(__file__)
    for n, compression in plan:
        procs = []
        try:
            dispatcher = Proc(
                "tf dispatcher", [sys.executable, me, "tf-dispatcher"], tf_port, log_dir
            )
            procs.append(dispatcher)
            workers = []
            for i in range(n):
                cmd = [sys.executable, me, "tf-worker", dispatcher.address]
                workers.append(Proc(f"tf worker {i}", cmd, tf_port, log_dir))
                procs.append(workers[-1])
            label = "tf.data service" + (
                " (compression AUTO)" if compression else " (compression None)"
            )
            for name, entry in manifest.items():
                spec, rows = data.SPECS[name], rows_per_call(opts, data.SPECS[name])
                if spec.raw:
                    continue  # the same TFRecords as its base dataset

                def read(tally, dl, entry=entry, spec=spec, rows=rows):
                    contenders.read_tensorflow(
                        dispatcher.address, entry, spec, rows, compression, tally, dl
                    )

                out.append(measure(opts, name, label, n, workers, entry, spec, read))
        finally:
            for p in reversed(procs):
                p.stop()
    return out


# ---- the table ----


def fmt(value, digits=2):
    return "–" if value is None else f"{value:.{digits}f}"


def fmt_ms(seconds):
    return "–" if seconds is None else f"{seconds * 1000:.1f}"


def table(results):
    lines = [
        "| dataset | contender | workers | GB/s | rows/s | worker CPU s/GB | consumer CPU s/GB "
        "| wait p50 / p99 ms | waiting | × local pyarrow | × TF service |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in data.SPECS:
        rows = [r for r in results if r.dataset == name]
        local = next((r.gbps for r in rows if r.contender == "local pyarrow"), None)
        # TensorFlow's TFRecords hold raw bytes whatever the Parquet layout: a dataset is
        # compared with the TensorFlow rows of its base.
        base = data.SPECS[name].base
        tf = max(
            (r.gbps for r in results if r.dataset == base and r.contender.startswith("tf.data")),
            default=None,
        )
        for r in rows:
            mark = " (partial)" if r.partial else ""
            lines.append(
                f"| {name} | {r.contender}{mark} | {r.workers or '–'} | {r.gbps:.2f} "
                f"| {r.rows_per_s:.0f} | {fmt(r.per_gb(r.worker_cpu))} "
                f"| {fmt(r.per_gb(r.consumer_cpu))} "
                f"| {fmt_ms(r.wait_p50)} / {fmt_ms(r.wait_p99)} "
                f"| {fmt(None if r.stall is None else 100 * r.stall, 0)}% "
                f"| {fmt(r.gbps / local if local else None)} | {fmt(r.gbps / tf if tf else None)} |"
            )
    return "\n".join(lines)


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model}), load average {os.getloadavg()[0]:.1f}"


def warm(manifest, tensorflow):
    """Reads every file once, so that every contender reads from the page cache."""
    for entry in manifest.values():
        for path in entry["paths"] + (entry["tfrecords"] if tensorflow else []):
            with open(path, "rb", buffering=0) as f:
                while f.read(16 * MIB):
                    pass


def per_dataset(option, text, most):
    """`A,B`: a count for images and one for tokens, each in 1..=most."""
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        counts = []
    if len(counts) != 2 or not all(1 <= c <= most for c in counts):
        raise SystemExit(f"{option}: two counts (images,tokens) in 1..={most}, not {text!r}")
    return dict(zip(data.BASES, counts))


def main():
    roles = {
        "tf-dispatcher": lambda: contenders.tensorflow_dispatcher(),
        "tf-worker": lambda: contenders.tensorflow_worker(sys.argv[2]),
        "tf-write": lambda: data.write_tfrecords(sys.argv[2]),
    }
    if sys.argv[1:2] and sys.argv[1] in roles:
        return roles[sys.argv[1]]()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shardwise", help="the shardwise binary (a release build)")
    parser.add_argument("--gb", type=float, default=1.0, help="GB of images (default 1)")
    parser.add_argument("--tokens-gb", type=float, help="GB of tokens (default half of --gb)")
    parser.add_argument("--seconds", type=float, default=0, help="cap on one read (0: none)")
    parser.add_argument("--only", default="pyarrow,shardwise,package,tensorflow")
    parser.add_argument("--workers", default="1,2", help="worker counts (default 1,2)")
    parser.add_argument("--in-flight", type=int, default=2, help="Shardwise reads per task")
    parser.add_argument("--rows", default="64,4096", help="rows per read/batch: images,tokens")
    parser.add_argument(
        "--split-rows", default="128,8192", help="Shardwise split_size: images,tokens"
    )
    parser.add_argument("--no-lz4", dest="lz4", action="store_false")
    parser.add_argument("--no-tf-auto", dest="tf_auto", action="store_false")
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell (the median)")
    parser.add_argument(
        "--step-ms", type=float, default=0, help="the consumer's step per --rows rows (light load)"
    )
    parser.add_argument("--data", help="keep the data in DIR (reused when the sizes match)")
    opts = parser.parse_args()
    only = set(opts.only.split(","))
    if only - {"pyarrow", "shardwise", "package", "tensorflow"}:
        raise SystemExit(f"--only: {only}")
    opts.only = only
    if opts.step_ms < 0:
        raise SystemExit("--step-ms must not be negative")
    if only & {"shardwise", "package"} and not opts.shardwise:
        raise SystemExit("--shardwise PATH is needed")
    opts.rows = per_dataset("--rows", opts.rows, 10_000)
    opts.split_rows = per_dataset("--split-rows", opts.split_rows, 1 << 40)
    if opts.repeat < 1 or opts.in_flight < 1:
        raise SystemExit("--repeat and --in-flight must be at least 1")
    opts.workers = sorted({int(n) for n in opts.workers.split(",")})
    if opts.shardwise:
        opts.shardwise = os.path.abspath(opts.shardwise)
    tokens_gb = opts.gb / 2 if opts.tokens_gb is None else opts.tokens_gb

    if opts.data:
        directory = os.path.abspath(opts.data)
    else:
        directory = tempfile.mkdtemp(prefix="columnar-bench-")
    os.makedirs(directory, exist_ok=True)
    log_dir = tempfile.mkdtemp(prefix="columnar-bench-logs-")
    ok = False
    try:
        print(f"# data in {directory}, logs in {log_dir}", file=sys.stderr, flush=True)
        t = time.monotonic()
        manifest = data.prepare(directory, opts.gb, tokens_gb)
        data.save_manifest(directory, manifest)
        if "tensorflow" in only and not data.has_tfrecords(manifest):
            subprocess.run(
                [sys.executable, os.path.abspath(__file__), "tf-write",
                 os.path.join(directory, data.MANIFEST)],
                check=True, env=no_proxy_env(), stderr=subprocess.DEVNULL,
            )
        warm(manifest, "tensorflow" in only)
        ready = ", ".join(f"{name} {e['rows']} rows" for name, e in manifest.items())
        print(f"# data ready in {time.monotonic() - t:.1f} s: {ready}", file=sys.stderr, flush=True)
        load0 = machine()
        results = []
        if "pyarrow" in only:
            results += run_pyarrow(opts, manifest)
        if only & {"shardwise", "package"}:
            results += run_shardwise(opts, manifest, directory, log_dir)
        if "tensorflow" in only:
            results += run_tensorflow(opts, manifest, log_dir)
        print(table(results))
        print()
        sizes = ", ".join(
            f"{name}: {e['rows']} rows, {rows_per_call(opts, data.SPECS[name])} rows per "
            f"read/batch" for name, e in manifest.items()
        )
        step = f"Consumer step: {opts.step_ms:g} ms per read/batch's rows. " if opts.step_ms else ""
        print(f"{sizes}. {step}Shardwise's bench client: {opts.in_flight} reads in flight per task. "
              f"Machine: {load0} at the start, {os.getloadavg()[0]:.1f} at the end.")
        ok = True
    finally:
        if not opts.data:
            shutil.rmtree(directory, ignore_errors=True)
        if ok:
            shutil.rmtree(log_dir, ignore_errors=True)
        else:
            print(f"# the servers' logs are in {log_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
