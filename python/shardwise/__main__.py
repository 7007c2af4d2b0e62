"""``python -m shardwise``: a small command line over the package.

* ``version URL``: the dispatcher's protocol version, incarnation and mode (JSON).
* ``read URL DATASET_JSON``: reads a dataset, printing each element (or, with ``--arrow``,
  each row) as a JSON line on stdout, then the read position as one JSON line on stderr (or
  why the read has none). ``--max N`` stops after N elements, ``--resume-from FILE`` resumes
  from a position saved that way.
* ``merge FILE...``: one position out of several (positions or states holding them).
* ``worker URL MODULE:FUNCTION``: serves a Python function as Shardwise workers
  (:func:`shardwise.worker.serve`; ``--processes N``) until SIGTERM or SIGINT.

The ``shardwise`` command itself is the Rust binary (dispatcher, worker, resolve); this one is
only ever ``python -m shardwise``. Exit status: 0, 1 when a call failed (the error on stderr,
``shardwise: CODE: detail``), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__
from .client import Dispatcher
from ._worker_rows import json_float
from .errors import ShardwiseError
from .positions import merge_positions
from .reader import MAX_ELEMENTS_PER_REQUEST, distribute


def _jsonable(value: Any) -> Any:
    """A row's value as JSON, as the workers' JSON route writes it: bytes as base64, NaN and
    infinities as strings."""
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return _jsonable(value.tolist())
    return str(value)


def _read_text(arg: str, what: str) -> str:
    """``arg``, or the contents of the file ``@PATH`` names."""
    if not arg.startswith("@"):
        return arg
    try:
        with open(arg[1:], encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise SystemExit(f"shardwise: cannot read {what} {arg[1:]!r}: {e.strerror}") from None


def _load_json_file(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise SystemExit(f"shardwise: cannot read {what} {path!r}: {e.strerror}") from None
    except ValueError as e:
        raise SystemExit(f"shardwise: {what} {path!r} is not JSON: {e}") from None


def _dispatcher(args: argparse.Namespace) -> Dispatcher:
    token = None
    if args.token_file is not None:
        token = _read_text("@" + args.token_file, "the token file").strip()
    try:
        return Dispatcher(
            args.url,
            token=token,
            ca_file=args.ca_file,
            timeout=args.timeout,
            unavailable_timeout=args.unavailable_timeout,
        )
    except (ValueError, OSError) as e:
        raise SystemExit(f"shardwise: {e}") from None


def _version(args: argparse.Namespace) -> int:
    print(json.dumps(_dispatcher(args).version()))
    return 0


def _read(args: argparse.Namespace) -> int:
    dataset_text = _read_text(args.dataset, "the dataset file")
    try:
        dataset = json.loads(dataset_text)
    except ValueError as e:
        raise SystemExit(f"shardwise: DATASET_JSON is not JSON: {e}") from None
    resume_from = None
    if args.resume_from is not None:
        resume_from = _load_json_file(args.resume_from, "the position file")
    if args.max is not None and args.max < 0:
        raise SystemExit("shardwise: --max must not be negative")
    mode: Any = args.processing_mode
    if mode not in ("distributed_epoch", "parallel_epochs"):
        mode = {"sharding_policy": mode}
    try:
        reader = distribute(
            _dispatcher(args),
            dataset,
            job_name=args.job_name,
            processing_mode=mode,
            resume_from=resume_from,
            format="arrow" if args.arrow else "json",
            arrow_compression=args.compression,
            elements_per_request=args.elements_per_request,
            # With --max, nothing is taken from the workers before it is wanted.
            prefetch=0 if args.max is not None else 2,
            split_size=args.split_size,
        )
    except (ValueError, TypeError) as e:
        raise SystemExit(f"shardwise: {e}") from None
    out = sys.stdout
    left = args.max
    held_back = 0  # rows of the last record batch handed out and not printed
    with reader:
        while left is None or left > 0:
            if left is not None:
                # Reads no larger than what is still wanted (those fetched ahead keep theirs).
                reader.elements_per_request = min(args.elements_per_request, left)
            try:
                item = next(reader)
            except StopIteration:
                break
            if args.arrow:
                rows = item.to_pylist()
                if left is not None:
                    held_back = max(0, len(rows) - left)
                    rows = rows[:left]
                for row in rows:
                    out.write(json.dumps(_jsonable(row)) + "\n")
                n = len(rows)
            else:
                out.write(json.dumps(_jsonable(item)) + "\n")
                n = 1
            if left is not None:
                left -= n
        out.flush()
    try:
        position = reader.position(held_back=held_back)
    except ShardwiseError as e:
        print(f"shardwise: no read position: {e.detail}", file=sys.stderr)
        return 0
    print(json.dumps(position), file=sys.stderr)
    return 0


def _merge(args: argparse.Namespace) -> int:
    states = [_load_json_file(path, "the state file") for path in args.files]
    try:
        print(json.dumps(merge_positions(*states)))
    except ValueError as e:
        raise SystemExit(f"shardwise: {e}") from None
    return 0


def _worker(args: argparse.Namespace) -> int:
    import importlib

    from .worker import serve

    module_name, _, name = args.function.partition(":")
    if not module_name or not name:
        raise SystemExit(f"shardwise: {args.function!r} is not MODULE:FUNCTION")
    try:
        fn = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as e:
        raise SystemExit(f"shardwise: cannot load {args.function!r}: {e}") from None
    try:
        serve(
            fn,
            _dispatcher(args),
            processes=args.processes,
            start_method=args.start_method,
            restart=not args.no_restart,
            host=args.host,
            port=args.port,
            advertised_host=args.advertised_host,
            tags=args.tags.split(",") if args.tags else (),
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            auth_tokens=args.auth_tokens,
            heartbeat_interval=args.heartbeat_interval,
            buffer=args.buffer,
            max_buffer_bytes=args.max_buffer_bytes,
        )
    except (ValueError, TypeError) as e:
        raise SystemExit(f"shardwise worker: {e}") from None
    except (OSError, RuntimeError) as e:
        print(f"shardwise worker: {e}", file=sys.stderr)
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--token-file", metavar="FILE", help="a file holding a bearer token")
    common.add_argument(
        "--ca-file", metavar="FILE", help="a PEM file of CA certificates trusted for https://"
    )
    common.add_argument(
        "--timeout", type=float, default=30.0, metavar="SECONDS", help="per request (default 30)"
    )
    common.add_argument(
        "--unavailable-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long UNAVAILABLE answers and refused connections are retried (default 60)",
    )
    parser = argparse.ArgumentParser(
        prog="python -m shardwise",
        description="Read datasets through a Shardwise dispatcher and its workers.",
        epilog="URL is a dispatcher (http://host:port), or its replicas separated by commas.",
    )
    parser.add_argument("--version", action="version", version=f"shardwise {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "version", parents=[common], help="print the dispatcher's protocol version (JSON)"
    )
    p.add_argument("url", metavar="URL")
    p.set_defaults(run=_version)

    p = sub.add_parser(
        "read",
        parents=[common],
        help="read a dataset: elements as JSON lines on stdout, the position on stderr",
        description="Read a dataset: each element (with --arrow, each row) as a JSON line on "
        "stdout, then the read position as a JSON line on stderr.",
    )
    p.add_argument("url", metavar="URL")
    p.add_argument(
        "dataset",
        metavar="DATASET_JSON",
        help='the definition, e.g. \'{"source": {"range": {"stop": 10}}}\', or @FILE',
    )
    p.add_argument(
        "--arrow", action="store_true", help="read Arrow record batches (columnar datasets)"
    )
    p.add_argument(
        "--compression", choices=["lz4", "zstd"], help="with --arrow: compressed batches"
    )
    p.add_argument("--resume-from", metavar="FILE", help="resume from a position saved in FILE")
    p.add_argument("--max", type=int, metavar="N", help="stop after N elements (rows)")
    p.add_argument(
        "--job-name", metavar="NAME", help="share the job with other readers of this name"
    )
    p.add_argument(
        "--processing-mode",
        default="distributed_epoch",
        metavar="MODE",
        help="distributed_epoch (default), parallel_epochs, or a sharding policy (OFF, DYNAMIC...)",
    )
    p.add_argument(
        "--split-size", type=int, metavar="N", help="elements per split of a range or list"
    )
    p.add_argument(
        "--elements-per-request",
        type=int,
        default=1024,
        metavar="N",
        help=f"elements (rows) per request, 1 to {MAX_ELEMENTS_PER_REQUEST} (default 1024)",
    )
    p.set_defaults(run=_read)

    p = sub.add_parser(
        "worker",
        parents=[common],
        help="run a Python function on a dispatcher's splits as Shardwise workers",
        description="Serve MODULE:FUNCTION (fn(split) -> iterable of outputs, see "
        "shardwise.worker) as Shardwise workers of the dispatcher at URL until SIGTERM or "
        "SIGINT. Each process prints 'shardwise worker listening on URL' once registered.",
    )
    p.add_argument("url", metavar="URL")
    p.add_argument("function", metavar="MODULE:FUNCTION", help="e.g. mypackage.prep:decode")
    p.add_argument(
        "--processes", type=int, default=1, metavar="N", help="worker processes (default 1)"
    )
    p.add_argument(
        "--start-method",
        choices=["spawn", "forkserver", "fork"],
        default="spawn",
        help="how the processes start (default spawn)",
    )
    p.add_argument(
        "--no-restart", action="store_true", help="do not start a process that died again"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=0, help="port (0: any; process i: PORT + i)")
    p.add_argument(
        "--advertised-host",
        metavar="HOST[:PORT]",
        help="how the dispatcher and clients reach the workers (%%port%%: the bound port)",
    )
    p.add_argument("--tags", metavar="TAG[,TAG...]", help="worker tags, comma separated")
    p.add_argument("--tls-cert", metavar="FILE", help="serve TLS with this PEM chain")
    p.add_argument("--tls-key", metavar="FILE", help="the PEM key of --tls-cert")
    p.add_argument(
        "--auth-tokens", metavar="FILE", help="require bearer tokens (shardwise's token file)"
    )
    p.add_argument(
        "--heartbeat-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="between heartbeats (default 30)",
    )
    p.add_argument(
        "--buffer", type=int, default=1024, metavar="N", help="elements buffered per task"
    )
    p.add_argument(
        "--max-buffer-bytes",
        type=int,
        default=256 << 20,
        metavar="BYTES",
        help="bytes buffered per task, about (default 256 MiB)",
    )
    p.set_defaults(run=_worker)

    p = sub.add_parser(
        "merge",
        help="print one position holding what several positions (or states) consumed",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="JSON files of positions or states")
    p.set_defaults(run=_merge)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line with ``argv`` (default: ``sys.argv[1:]``): its exit status."""
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except ShardwiseError as e:
        print(f"shardwise: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader of stdout went away (`| head`): stop quietly (and let the interpreter's
        # last flush of stdout go nowhere).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
