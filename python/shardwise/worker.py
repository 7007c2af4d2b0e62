"""Python workers: run your own preprocessing on a Shardwise dispatcher's splits and serve
the results as ``shardwise worker`` does, with its exactly-once reads and read positions.

>>> import shardwise.worker
>>> def decode(split):                      # doctest: +SKIP
...     for i in split.elements():          # a range split's integers
...         yield {"x": i, "y": i * i}
>>> shardwise.worker.serve(decode, "http://127.0.0.1:5050", processes=4)  # doctest: +SKIP

A reader (``shardwise.distribute`` and what builds on it, the Rust client) reads the dataset
as from Rust workers: the dispatcher hands the splits of a ``distributed_epoch`` read
to the workers one batch at a time, each worker runs ``fn`` on its splits and serves what
``fn`` yields on ``GET /v1/tasks/{task_id}/elements``, JSON or Arrow.

**Why it is exactly once.** A worker asks the dispatcher for its next splits, acknowledging
the previous ones, only once clients took every element it produced from them. A worker that
dies (a crash, an OOM kill, SIGKILL) never acknowledged the splits it was working on, so the
dispatcher hands them to another worker once it declares this one lost (``--worker-timeout``),
or at once when the process restarts at the same address with a new ``worker_uid``. Nothing is
lost; the elements of those splits a reader had already taken come again (at least once for
a dead worker's in-flight splits only), and a read position stays exact: a reader folds the
origin runs every element comes with, and a split read twice counts once.

**What fn gets and yields.** ``fn(split)`` gets a :class:`Split`: ``split.value`` is the
split as the dispatcher gives it (``{"start", "stop"}`` positions of a ``range`` or ``list``
source, which :meth:`Split.elements` turns into the source's elements; a path of a ``files``
source; an item of a ``splits`` source), ``split.positions`` where it lies, ``split.dataset``
the definition. It returns an iterable (a generator, a list) of outputs, each either

* a JSON value (one element), served as JSON (an Arrow read of such a task is a 406); or
* rows: a ``pyarrow.RecordBatch``, a ``pyarrow.Table``, or a dict of NumPy arrays with the rows
  along the first axis (a ``(n, 224, 224, 3)`` array is a column of ``n`` fixed-shape tensors),
  each row an element: served as Arrow record batches (``format="arrow"``), or as JSON objects.

One task yields one kind. Element offsets (read positions) count rows: ``fn`` must yield the
same outputs for the same split every time it runs (seed any randomness with the split), since
a split resumed part way (``split.positions.skip``) runs ``fn`` from its start and drops the
first outputs. An exception in ``fn`` fails its task with the exception's type and text as the
task's error: ``INVALID_ARGUMENT`` for ``ValueError``, ``TypeError`` and ``LookupError``,
``PERMISSION_DENIED`` for ``PermissionError``, ``RESOURCE_EXHAUSTED`` for ``MemoryError``, a
``ShardwiseError``'s own code, else ``INTERNAL`` (and never ``NOT_FOUND``, which readers retry:
``FileNotFoundError`` is ``FAILED_PRECONDITION``). Its traceback goes to stderr, and the worker
carries on with its other tasks.

**Processing modes.** DYNAMIC (``distributed_epoch``) as above; OFF (``parallel_epochs``):
every worker runs ``fn`` on every split of the source, cut as the dispatcher would cut them.
The static policies (FILE, DATA, FILE_OR_DATA, HINT), coordinated reads and datasets with
transforms fail their tasks with a message saying so: ``fn`` is the pipeline.

**One pool of workers.** A dispatcher hands a job's tasks to every worker it knows, Rust and
Python alike: give Python workers a dispatcher of their own.
"""

from __future__ import annotations

import signal
import ssl
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ._worker_http import Server, load_tokens
from ._worker_splits import Split, SplitPositions
from ._worker_state import WorkerState
from .client import Backoff, Dispatcher
from .errors import ShardwiseError

__all__ = ["DEFAULT_MAX_BUFFER_BYTES", "Split", "SplitPositions", "Worker", "serve"]

#: The most bytes a task's buffer holds by default (the Rust worker's ``--max-buffer-bytes``).
DEFAULT_MAX_BUFFER_BYTES = 256 << 20
#: How long a stop waits for a worker's threads (seconds).
STOP_TIMEOUT = 30.0


def advertised_address(advertised_host: str | None, host: str, port: int) -> str:
    """The ``host:port`` the dispatcher and clients reach a worker at: ``advertised_host``
    (a host, or ``host:port`` where ``%port%`` stands for the bound port) or ``host``, with
    the bound ``port``. ``ValueError`` for a wildcard ``host`` without ``advertised_host``."""
    if advertised_host is not None and advertised_host.strip():
        a = advertised_host.strip()
        if "%port%" in a:
            return a.replace("%port%", str(port), 1)
        if a.startswith("["):
            return a if "]:" in a else f"{a}:{port}"
        if a.count(":") == 1:
            return a
        if a.count(":") > 1:
            return f"[{a}]:{port}"
        return f"{a}:{port}"
    if host in ("", "0.0.0.0", "::", "[::]"):
        raise ValueError(
            f"host {host!r} listens on every interface and cannot be advertised: also give "
            "advertised_host"
        )
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Worker:
    """One Python worker in this process: an HTTP server and the threads that heartbeat the
    dispatcher and run ``fn`` (see the module docs). :meth:`start` binds, serves and
    registers; :meth:`stop` (or leaving a ``with`` block) stops serving, stops the tasks and
    joins the threads. :func:`serve` runs workers until a signal.

    Args:
        fn: ``fn(split) -> Iterable`` (module docs).
        dispatcher: A :class:`shardwise.Dispatcher`, or its address(es)
            (``"http://host:5050"``, replicas comma separated).
        host: The address to listen on.
        port: The port to listen on (0: any free port).
        advertised_host: How the dispatcher and clients reach this worker: a host (the bound
            port is added) or ``host:port`` (``%port%`` stands for the bound port). Default:
            ``host``, which must then not be a wildcard.
        tags: Worker tags (e.g. ``["COLOCATED"]``).
        token: The bearer token presented to the dispatcher (the ``worker`` role), when
            ``dispatcher`` is an address.
        ca_file: A PEM file of CA certificates trusted for an ``https://`` dispatcher, when
            ``dispatcher`` is an address.
        tls_cert, tls_key: Serve TLS only with this PEM certificate chain and key (a cluster
            whose dispatcher is ``https://`` is read over ``https://`` throughout).
        auth_tokens: Require bearer tokens on the element route (``client`` role) and
            ``/metrics`` (``monitor``): ``{"tokens": [{"role", "token"}]}`` or the path of such
            a JSON file (``--auth-tokens``'s format).
        heartbeat_interval: Seconds between heartbeats (tasks are also fetched at once when a
            client asks for one the worker does not know yet). Keep it well below the
            dispatcher's ``--worker-timeout``.
        buffer: The most elements (rows) buffered per task before ``fn`` waits.
        max_buffer_bytes: About the most bytes buffered per task (one output always fits).
        read_timeout: Seconds a client may take per read of its request.
        max_connections: The most client connections served at once.

    Raises ``ValueError`` or ``TypeError`` for bad arguments, here or in :meth:`start`.
    """

    def __init__(
        self,
        fn: Callable[[Split], Iterable[Any]],
        dispatcher: Dispatcher | str | Sequence[str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        advertised_host: str | None = None,
        tags: Sequence[str] = (),
        token: str | None = None,
        ca_file: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        auth_tokens: str | Mapping[str, Any] | None = None,
        heartbeat_interval: float = 30.0,
        buffer: int = 1024,
        max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
        read_timeout: float = 10.0,
        max_connections: int = 256,
    ) -> None:
        if not callable(fn):
            raise TypeError("fn must be callable: fn(split) -> iterable of outputs")
        if not isinstance(dispatcher, Dispatcher):
            dispatcher = Dispatcher(dispatcher, token=token, ca_file=ca_file)
        elif token is not None or ca_file is not None:
            raise ValueError("token and ca_file go with a dispatcher address, not a Dispatcher")
        for name, value in (
            ("buffer", buffer),
            ("max_buffer_bytes", max_buffer_bytes),
            ("max_connections", max_connections),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError("port must be in 0..=65535")
        if not heartbeat_interval > 0 or not read_timeout > 0:
            raise ValueError("heartbeat_interval and read_timeout must be positive")
        clean_tags = [str(t).strip() for t in tags]
        if any(not t for t in clean_tags):
            raise ValueError(f"Worker tags cannot be empty. Got tags {{{', '.join(clean_tags)}}}")
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        self.fn = fn
        self.dispatcher = dispatcher
        self.host = host
        self._port = port
        self._advertised_host = advertised_host
        self.tags = clean_tags
        self._tokens = load_tokens(auth_tokens)
        self._tls: ssl.SSLContext | None = None
        if tls_cert is not None and tls_key is not None:
            self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._tls.load_cert_chain(tls_cert, tls_key)
        self.heartbeat_interval = float(heartbeat_interval)
        self.buffer = buffer
        self.max_buffer_bytes = max_buffer_bytes
        self.read_timeout = float(read_timeout)
        self.max_connections = max_connections
        self._server: Server | None = None
        self._state: WorkerState | None = None
        self._serving: threading.Thread | None = None
        self._address: str | None = None
        self._stopping = threading.Event()

    @property
    def address(self) -> str:
        """The ``host:port`` this worker registered as (after :meth:`start`)."""
        if self._address is None:
            raise RuntimeError("the worker has not started")
        return self._address

    @property
    def url(self) -> str:
        """``http://`` (or ``https://``) and :attr:`address`."""
        return f"{'https' if self._tls else 'http'}://{self.address}"

    @property
    def port(self) -> int:
        """The port it listens on (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the worker has not started")
        return int(self._server.server_address[1])

    def start(self) -> Worker:
        """Binds, serves, and registers with the dispatcher (retrying while it is
        unavailable, until :meth:`stop`). Raises ``OSError`` when the port cannot be bound,
        ``ValueError`` for an address that cannot be advertised, and
        :class:`~shardwise.ShardwiseError` when the dispatcher refuses the registration."""
        if self._server is not None:
            raise RuntimeError("the worker has already started")
        server = Server(
            self.host,
            self._port,
            None,  # type: ignore[arg-type]
            tokens=self._tokens,
            tls=self._tls,
            read_timeout=self.read_timeout,
            max_connections=self.max_connections,
        )
        try:
            self._address = advertised_address(
                self._advertised_host, self.host, int(server.server_address[1])
            )
        except ValueError:
            server.server_close()
            raise
        state = WorkerState(
            self.dispatcher,
            self._address,
            self.fn,
            tags=self.tags,
            buffer=self.buffer,
            max_buffer_bytes=self.max_buffer_bytes,
            heartbeat_interval=self.heartbeat_interval,
        )
        server.state = state
        self._server, self._state = server, state
        self._serving = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="shardwise-worker-http",
            daemon=True,
        )
        server.serving = True
        self._serving.start()
        backoff = Backoff(0.05, 2.0)
        while True:
            try:
                state.heartbeat()
                break
            except ShardwiseError as e:
                if not e.is_retryable or self._stopping.is_set():
                    self.stop()
                    if not e.is_retryable:
                        raise ShardwiseError(
                            e.code,
                            f"the dispatcher at {self.dispatcher.current} refused to register "
                            f"this worker: {e.detail}",
                            **e._fields(),
                        ) from None
                    raise
                print(
                    f"shardwise worker: cannot register with the dispatcher yet; retrying: {e}",
                    file=sys.stderr,
                    flush=True,
                )
            if self._stopping.wait(backoff.next_delay()):
                self.stop()
                raise ShardwiseError("UNAVAILABLE", "stopped before the worker registered")
        state.start_loops()
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stops serving (every connection closed), stops the tasks and joins the threads, in
        at most about ``timeout`` seconds. Idempotent."""
        self._stopping.set()
        if self._state is not None:
            self._state.stop(timeout / 2)
        if self._server is not None:
            self._server.close_all(timeout / 2)
        if self._serving is not None:
            self._serving.join(timeout / 2)

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    fn: Callable[[Split], Iterable[Any]],
    dispatcher: Dispatcher | str | Sequence[str],
    *,
    processes: int = 1,
    start_method: str = "spawn",
    restart: bool = True,
    ready: Callable[[list[str]], Any] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    advertised_host: str | None = None,
    tags: Sequence[str] = (),
    token: str | None = None,
    ca_file: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    auth_tokens: str | Mapping[str, Any] | None = None,
    heartbeat_interval: float = 30.0,
    buffer: int = 1024,
    max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
    read_timeout: float = 10.0,
    max_connections: int = 256,
) -> None:
    """Runs Python workers until SIGTERM or SIGINT, then stops them cleanly and returns.

    Each process is a worker of its own (its own port, ``worker_uid`` and registration), and
    prints ``shardwise worker listening on URL`` on stdout once it registered, as
    ``shardwise worker`` does. With ``processes=1`` the worker runs in this process (``fn``
    may then be any callable, a lambda included). With more, this process only supervises:
    it starts the workers, restarts one that dies (a crash, an OOM kill) after a pause that
    grows while it keeps dying (unless ``restart`` is false), and on a signal stops them all
    and waits for them.

    Args:
        fn: ``fn(split) -> Iterable`` (module docs).
        dispatcher: A :class:`shardwise.Dispatcher`, or its address(es).
        processes: How many worker processes (each uses one core for ``fn``: Python runs one
            thread of Python code at a time per process).
        start_method: How the processes start: ``"spawn"`` (default: a fresh interpreter
            that imports ``fn`` by its module and name, so ``fn`` must be defined at the top
            level of a module and the script calling ``serve`` must guard it with
            ``if __name__ == "__main__":``; safe whatever threads, CUDA or locks this process
            has), ``"forkserver"``, or ``"fork"`` (any ``fn``, lambdas included, but unsafe
            in a process that runs threads, as one that imported PyTorch may).
        restart: With several processes, start a process that died again (on its port, so
            the dispatcher re-issues its splits at once); without, the others carry on and
            the dispatcher re-issues its splits once its ``--worker-timeout`` passed.
        ready: Called once every worker registered, with their URLs.
        host, port, advertised_host, tags, token, ca_file, tls_cert, tls_key, auth_tokens,
        heartbeat_interval, buffer, max_buffer_bytes, read_timeout, max_connections: Each
            worker's, as :class:`Worker` takes them. With several processes and a ``port``
            other than 0, process ``i`` listens on ``port + i``.

    Raises what :class:`Worker` and :meth:`Worker.start` raise when a worker cannot start
    (every other one is then stopped).
    """
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError("processes must be a positive integer")
    if start_method not in ("spawn", "fork", "forkserver"):
        raise ValueError(
            f"start_method must be 'spawn', 'fork' or 'forkserver', not {start_method!r}"
        )
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "advertised_host": advertised_host,
        "tags": tags,
        "token": token,
        "ca_file": ca_file,
        "tls_cert": tls_cert,
        "tls_key": tls_key,
        "auth_tokens": auth_tokens,
        "heartbeat_interval": heartbeat_interval,
        "buffer": buffer,
        "max_buffer_bytes": max_buffer_bytes,
        "read_timeout": read_timeout,
        "max_connections": max_connections,
    }
    Worker(fn, dispatcher, **options)  # checks the arguments here, before any process starts
    if processes > 1:
        from ._worker_procs import supervise

        supervise(fn, dispatcher, processes, start_method, restart, ready, options)
        return
    stop = threading.Event()
    worker = Worker(fn, dispatcher, **options)

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()
        worker._stopping.set()

    with handle_signals(on_signal):
        worker.start()
        announce(worker)
        if ready is not None:
            ready([worker.url])
        while not stop.wait(0.5):
            pass
        worker.stop()


def announce(worker: Worker) -> None:
    """The process's pid (stderr), then the listening line (stdout, as ``shardwise worker``
    prints it)."""
    import os

    print(
        f"shardwise worker: pid {os.getpid()} serves {worker.url} for the dispatcher at "
        f"{worker.dispatcher.current}",
        file=sys.stderr,
        flush=True,
    )
    print(f"shardwise worker listening on {worker.url}", flush=True)


class handle_signals:
    """Installs ``handler`` for SIGTERM and SIGINT while the ``with`` block runs (in the main
    thread only: elsewhere nothing is installed), and puts the old handlers back."""

    def __init__(self, handler: Callable[[int, Any], None]) -> None:
        self.handler = handler
        self.old: dict[int, Any] = {}

    def __enter__(self) -> handle_signals:
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGTERM, signal.SIGINT):
                self.old[s] = signal.signal(s, self.handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, old in self.old.items():
            signal.signal(s, old)
