"""``serve(..., processes=N)``: N worker processes and the parent that supervises them.

Python runs one thread of Python code at a time per process, so a ``fn`` that preprocesses
uses one core per process: N processes, each a worker of its own (its own port, its own
``worker_uid``, its own registration), use N cores. The dispatcher treats them as N workers,
which is what makes a killed one harmless: its unacknowledged splits go to the others.

The parent only supervises. It starts the children, waits for each to register (a child that
cannot start fails the whole ``serve`` with its error, and the others are stopped), and then:

* a child that dies (a crash in a C extension, an OOM kill) is started again after a pause,
  1 s doubling to 30 s while it keeps dying within a minute of its start. It comes back on
  the same port (any free one if that was taken meanwhile), so at the same address with a new
  ``worker_uid``: the dispatcher then re-issues the dead one's splits at once instead of after
  its worker timeout;
* on SIGTERM or SIGINT it sends SIGTERM to every child, waits for them (30 s, then SIGKILL)
  and returns.

Each child reports to the parent over a pipe: ``("ready", url)`` once registered, or
``("error", exception)`` when it could not start.
"""

from __future__ import annotations

import errno
import multiprocessing
import multiprocessing.connection
import pickle
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .client import Dispatcher

#: The pause before a dead child starts again, at first and at most (seconds).
RESTART_INITIAL = 1.0
RESTART_MAX = 30.0
#: A child that lived this long resets its pause.
STABLE_AFTER = 60.0
#: How long the parent waits for its children to stop before SIGKILL.
STOP_TIMEOUT = 30.0


def _child_main(fn: Any, options: dict[str, Any], fallback: bool, conn: Any) -> None:
    """A worker process: starts a worker, reports, serves until SIGTERM/SIGINT. With
    ``fallback``, a port in use is passed over for any free one."""
    from .worker import Worker, announce, handle_signals

    stop = threading.Event()
    worker: Worker | None = None

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()
        if worker is not None:
            worker._stopping.set()

    with handle_signals(on_signal):
        try:
            try:
                worker = Worker(fn, **options).start()
            except OSError as e:
                if not fallback or e.errno != errno.EADDRINUSE:
                    raise
                # The dead process's port was taken meanwhile: any free one.
                worker = Worker(fn, **dict(options, port=0)).start()
        except BaseException as e:
            try:
                conn.send(("error", e))
            except Exception:
                conn.send(("error", RuntimeError(f"{type(e).__name__}: {e}")))
            conn.close()
            sys.exit(1)
        announce(worker)
        conn.send(("ready", worker.url))
        conn.close()
        while not stop.wait(0.5):
            pass
        worker.stop()
    sys.exit(0)


class _Child:
    """One slot of the pool: its process, the parent's end of its pipe, when it started."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: Any = None
        self.conn: Any = None
        self.started = 0.0
        self.url: str | None = None
        self.port = 0
        self.pause = RESTART_INITIAL
        self.restart_at: float | None = None


def supervise(
    fn: Callable[..., Any],
    dispatcher: Dispatcher | str | Sequence[str],
    processes: int,
    start_method: str,
    restart: bool,
    ready: Callable[[list[str]], Any] | None,
    options: dict[str, Any],
) -> None:
    """Runs ``processes`` worker processes until SIGTERM or SIGINT (module docs)."""
    from .worker import handle_signals

    if start_method != "fork":
        try:
            pickle.dumps(fn)
        except Exception as e:
            raise TypeError(
                f"fn cannot be sent to a {start_method!r} worker process ({e}): define it at "
                "the top level of a module (and guard the script that calls serve with "
                "`if __name__ == '__main__':`), or pass start_method='fork'"
            ) from None
    if isinstance(dispatcher, Dispatcher):
        # The children make their own (a Dispatcher holds this process's connections).
        options = dict(options, token=dispatcher.token, ca_file=dispatcher.ca_file)
        dispatcher = dispatcher.addresses
    ctx = multiprocessing.get_context(start_method)
    base_port = int(options.get("port", 0))
    children = [_Child(i) for i in range(processes)]
    stop = threading.Event()

    def spawn(c: _Child) -> None:
        opts = dict(options, dispatcher=dispatcher)
        fallback = False
        if base_port:
            opts["port"] = base_port + c.index
        elif c.port:
            # Back at the same address with a new worker_uid: the dispatcher re-issues the
            # dead process's splits at once rather than after its worker timeout.
            opts["port"], fallback = c.port, True
        parent_end, child_end = ctx.Pipe(duplex=False)
        p = ctx.Process(
            target=_child_main,
            args=(fn, opts, fallback, child_end),
            name=f"shardwise-worker-{c.index}",
            daemon=False,
        )
        p.start()
        child_end.close()
        c.process, c.conn, c.started, c.url, c.restart_at = (
            p,
            parent_end,
            time.monotonic(),
            None,
            None,
        )

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    with handle_signals(on_signal):
        try:
            for c in children:
                spawn(c)
            _await_ready(children, stop)
            if stop.is_set():
                return
            if ready is not None:
                ready([c.url or "" for c in children])
            _watch(children, stop, spawn if restart else None)
        finally:
            _stop_all(children)


def _receive(c: _Child) -> tuple[str, Any] | None:
    """The child's message, if one came (``None`` when its pipe closed empty)."""
    try:
        if c.conn is not None and c.conn.poll():
            message = c.conn.recv()
            if isinstance(message, tuple) and len(message) == 2:
                return message
    except (EOFError, OSError, pickle.UnpicklingError):
        pass
    return None


def _await_ready(children: list[_Child], stop: threading.Event) -> None:
    """Waits until every child registered; raises the first one's error when one cannot
    start (or exits before it registered)."""
    while not stop.is_set() and any(c.url is None for c in children):
        waiting = [c for c in children if c.url is None]
        handles = [c.conn for c in waiting] + [c.process.sentinel for c in waiting]
        multiprocessing.connection.wait(handles, timeout=0.5)
        for c in waiting:
            message = _receive(c)
            if message is not None and message[0] == "ready":
                c.url, c.port = str(message[1]), _port_of(str(message[1]))
                continue
            if message is not None and message[0] == "error":
                error = message[1]
                raise error if isinstance(error, BaseException) else RuntimeError(str(error))
            if not c.process.is_alive() and _receive(c) is None:
                raise RuntimeError(
                    f"worker process {c.index} exited with {c.process.exitcode} before it "
                    "registered"
                )


def _watch(
    children: list[_Child], stop: threading.Event, spawn: Callable[[_Child], None] | None
) -> None:
    """Restarts children that die (with ``spawn``; without, says so and carries on), until
    ``stop``."""
    while not stop.is_set():
        live = [c for c in children if c.process is not None]
        if not live and spawn is None:
            raise RuntimeError("every worker process exited (and restart is off)")
        handles = [c.process.sentinel for c in live] + [c.conn for c in live if c.url is None]
        multiprocessing.connection.wait(handles, timeout=0.5)
        now = time.monotonic()
        for c in children:
            if c.process is None:
                if spawn and c.restart_at is not None and now >= c.restart_at:
                    spawn(c)
                continue
            if c.url is None:
                message = _receive(c)
                if message is not None and message[0] == "ready":
                    c.url, c.port = str(message[1]), _port_of(str(message[1]))
                elif message is not None and message[0] == "error":
                    print(
                        f"shardwise worker: process {c.index} could not start again: {message[1]}",
                        file=sys.stderr,
                        flush=True,
                    )
            if c.process.is_alive():
                continue
            lived = now - c.started
            if lived >= STABLE_AFTER:
                c.pause = RESTART_INITIAL
            again = f"starting it again in {c.pause:.0f} s" if spawn else "not restarted"
            print(
                f"shardwise worker: process {c.index} (pid {c.process.pid}) exited with "
                f"{c.process.exitcode}; {again}",
                file=sys.stderr,
                flush=True,
            )
            c.process.join(0)
            if c.conn is not None:
                c.conn.close()
            c.process, c.conn, c.url = None, None, None
            c.restart_at = now + c.pause if spawn else None
            c.pause = min(c.pause * 2, RESTART_MAX)


def _port_of(url: str) -> int:
    """The port of a worker's URL (0 when it has none)."""
    import urllib.parse

    try:
        return urllib.parse.urlsplit(url).port or 0
    except ValueError:
        return 0


def _stop_all(children: list[_Child]) -> None:
    """SIGTERM to every child, then waits (SIGKILL after :data:`STOP_TIMEOUT`)."""
    live = [c.process for c in children if c.process is not None]
    for p in live:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT
    for p in live:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(5)
    for c in children:
        if c.conn is not None:
            c.conn.close()
            c.conn = None
