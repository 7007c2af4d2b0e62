"""What a Python worker's threads share: its tasks, its heartbeats and its completion
reports, as the Rust worker does them (``gateway/worker/src/lib.rs``).

* **Heartbeats** (``POST /v1/workers/heartbeat``) carry the worker's address, its live tasks,
  tags, a ``worker_uid`` new on every process start and the last incarnation the dispatcher
  sent; every ``heartbeat_interval``, and at once (at most every 20 ms) when a client asks
  for a task the worker does not know yet. ``tasks_to_delete`` are stopped before
  ``new_tasks`` start. A reply with another incarnation means the dispatcher restarted
  without its state: every task is dropped (reads of them answer "lost"), and the worker says
  so on stderr.
* **Unknown task ids** (:class:`Unknown`): a read of an id the worker does not have is
  ``NOT_FOUND`` "not known (yet)" until a heartbeat sent after that first read came back
  without it, then ``NOT_FOUND`` "not assigned to this worker" for good.
* **Completion reports** (``POST /v1/workers/update``) of tasks that ended with every element
  taken; only once acknowledged do their reads answer end of sequence.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ._worker_task import Task
from .client import Backoff, Dispatcher
from .errors import ShardwiseError

#: How many gone task ids a worker remembers (to answer their reads).
TOMBSTONES = 100_000
#: How many unknown task ids a worker remembers the first read of.
REMEMBERED = 10_000
#: The shortest gap between two heartbeats (on-demand ones come at most this often).
HEARTBEAT_GAP = 0.02


def process_uid() -> str:
    """A worker uid new on every start (the dispatcher re-issues a restarted worker's
    splits at once when its uid changes)."""
    return f"{uuid.uuid4().hex}-{os.getpid():x}"


class Unknown:
    """Reads of task ids the worker does not have, against the heartbeats sent since
    (``gateway/worker/src/unknown.rs``). Not thread-safe: used under the state's lock."""

    def __init__(self) -> None:
        self.first_read: dict[int, int] = {}
        self.order: collections.deque[int] = collections.deque()
        self.sent = 0
        self.applied_n = 0

    def sending(self) -> int:
        """A heartbeat is being sent: its number."""
        self.sent += 1
        return self.sent

    def applied(self, n: int) -> None:
        """The reply to heartbeat ``n`` was applied."""
        self.applied_n = max(self.applied_n, n)

    def arrived(self, task_id: int) -> None:
        self.first_read.pop(task_id, None)

    def clear(self) -> None:
        self.first_read.clear()
        self.order.clear()

    def read(self, task_id: int) -> bool:
        """A read of an id the worker does not have: true once a heartbeat sent after its first
        read came back without it (it will not come), false while it may still arrive."""
        before = self.first_read.get(task_id)
        if before is not None:
            return self.applied_n > before
        self.first_read[task_id] = self.sent
        self.order.append(task_id)
        while len(self.first_read) > REMEMBERED and self.order:
            self.first_read.pop(self.order.popleft(), None)
        while len(self.order) > 2 * REMEMBERED:
            self.first_read.pop(self.order.popleft(), None)
        return False


class WorkerState:
    """A worker's tasks and its calls to the dispatcher."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        address: str,
        fn: Callable[[Any], Any],
        *,
        tags: list[str],
        buffer: int,
        max_buffer_bytes: int,
        heartbeat_interval: float,
    ) -> None:
        self.dispatcher = dispatcher
        self.address = address
        self.uid = process_uid()
        self.fn = fn
        self.tags = tags
        self.buffer = buffer
        self.max_buffer_bytes = max_buffer_bytes
        self.heartbeat_interval = heartbeat_interval
        self.lock = threading.Lock()
        self.live: dict[int, Task] = {}
        self.gone: collections.OrderedDict[int, str] = collections.OrderedDict()
        self.incarnation: str | None = None
        self.unknown = Unknown()
        self.heartbeat_event = threading.Event()
        self.report_event = threading.Event()
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    # -- what a task asks (its hooks) -------------------------------------------------------

    def get_splits(self, iteration_id: str, body: dict[str, Any]) -> Any:
        body = {"worker_address": self.address, "worker_uid": self.uid, **body}
        return self.dispatcher.call(
            "POST", f"/v1/iterations/{iteration_id}/splits", body, retry=False
        )

    def report_due(self) -> None:
        self.report_event.set()

    def heartbeat_now(self) -> None:
        self.heartbeat_event.set()

    # -- lookups ----------------------------------------------------------------------------

    def lookup(self, task_id: int) -> tuple[str, Any]:
        """What the worker knows of ``task_id``: ``("live", task)``, ``("gone", how)``,
        ``("unknown", None)`` (it may still come) or ``("unassigned", None)``."""
        with self.lock:
            task = self.live.get(task_id)
            if task is not None:
                return "live", task
            how = self.gone.get(task_id)
            if how is not None:
                return "gone", how
            return ("unassigned", None) if self.unknown.read(task_id) else ("unknown", None)

    def counters(self) -> tuple[int, int, int, int]:
        """``(tasks, buffered, produced, served)`` over the live tasks."""
        with self.lock:
            tasks = list(self.live.values())
        out = [len(tasks), 0, 0, 0]
        for t in tasks:
            b, p, s = t.counters()
            out[1] += b
            out[2] += p
            out[3] += s
        return out[0], out[1], out[2], out[3]

    def _bury(self, task_id: int, how: str) -> None:
        self.gone[task_id] = how
        self.gone.move_to_end(task_id)
        while len(self.gone) > TOMBSTONES:
            self.gone.popitem(last=False)

    # -- heartbeats ---------------------------------------------------------------------------

    def heartbeat(self) -> None:
        """One heartbeat: report the live tasks, apply the tasks to delete and to start.
        Raises :class:`ShardwiseError` when it fails."""
        with self.lock:
            number = self.unknown.sending()
            current = sorted(self.live)
            incarnation = self.incarnation
        body: dict[str, Any] = {
            "worker_address": self.address,
            "current_tasks": [str(t) for t in current],
            "tags": self.tags,
            "worker_uid": self.uid,
        }
        if incarnation is not None:
            body["incarnation"] = incarnation
        reply = self.dispatcher.call("POST", "/v1/workers/heartbeat", body, retry=False)
        if not isinstance(reply, Mapping) or not isinstance(reply.get("incarnation"), str):
            raise ShardwiseError.protocol(
                "a heartbeat reply without incarnation", context="POST /v1/workers/heartbeat"
            )
        new_tasks = reply.get("new_tasks") or []
        to_delete = reply.get("tasks_to_delete") or []
        if not isinstance(new_tasks, list) or not isinstance(to_delete, list):
            raise ShardwiseError.protocol(
                "a heartbeat reply without task lists", context="POST /v1/workers/heartbeat"
            )
        lost: tuple[str, list[int]] | None = None
        stopped: list[Task] = []
        with self.lock:
            new_incarnation = reply["incarnation"]
            if self.incarnation is not None and self.incarnation != new_incarnation:
                ids = sorted(self.live)
                stopped.extend(self.live.values())
                self.live.clear()
                self.gone.clear()
                self.unknown.clear()
                for i in ids:
                    self._bury(i, "lost")
                lost = (self.incarnation, ids)
            self.incarnation = new_incarnation
            for raw in to_delete:
                task_id = _task_id(raw)
                task = self.live.pop(task_id, None) if task_id is not None else None
                if task is not None:
                    how = task.gone_kind()
                    stopped.append(task)
                    self._bury(task_id, how)  # type: ignore[arg-type]
            for definition in new_tasks:
                task_id = (
                    _task_id(definition.get("task_id")) if isinstance(definition, Mapping) else None
                )
                if task_id is None or not isinstance(definition.get("iteration_id"), (str, int)):
                    continue
                if task_id in self.live or self.gone.get(task_id, "lost") != "lost":
                    continue
                self.gone.pop(task_id, None)
                self.unknown.arrived(task_id)
                self.live[task_id] = Task(
                    definition,
                    self.fn,
                    self,
                    capacity=self.buffer,
                    max_bytes=self.max_buffer_bytes,
                )
            self.unknown.applied(number)
        for task in stopped:
            task.stop()
        if lost is not None:
            old, ids = lost
            listed = ", ".join(str(i) for i in ids)
            print(
                f"shardwise worker: the dispatcher at {self.dispatcher.current} has a new "
                f"incarnation ({old} -> {new_incarnation}): it restarted without its state; "
                f"dropped {len(ids)} task(s) [{listed}] and registered again",
                file=sys.stderr,
                flush=True,
            )

    def heartbeat_loop(self) -> None:
        backoff = Backoff(0.1, min(self.heartbeat_interval, 5.0))
        wait = self.heartbeat_interval
        while not self.stopping.is_set():
            self.heartbeat_event.wait(wait)
            self.heartbeat_event.clear()
            if self.stopping.is_set():
                return
            try:
                self.heartbeat()
                backoff.reset()
                wait = self.heartbeat_interval
            except ShardwiseError as e:
                print(f"shardwise worker: heartbeat failed: {e}", file=sys.stderr, flush=True)
                wait = min(backoff.next_delay(), self.heartbeat_interval)
            except Exception as e:  # never let the heartbeats stop
                print(f"shardwise worker: heartbeat failed: {e!r}", file=sys.stderr, flush=True)
                wait = min(backoff.next_delay(), self.heartbeat_interval)
            self.stopping.wait(HEARTBEAT_GAP)

    # -- completion reports ---------------------------------------------------------------------

    def report_completed(self) -> None:
        """Reports every task that is ready; marks them acknowledged on success."""
        with self.lock:
            ready = [t for t in self.live.values() if t.ready_to_report()]
        if not ready:
            return
        body = {
            "worker_address": self.address,
            "worker_uid": self.uid,
            "updates": [{"task_id": str(t.task_id), "completed": True} for t in ready],
        }
        self.dispatcher.call("POST", "/v1/workers/update", body, retry=False)
        for t in ready:
            t.mark_acked()

    def report_loop(self) -> None:
        backoff = Backoff(0.05, 5.0)
        while not self.stopping.is_set():
            self.report_event.wait(1.0)
            self.report_event.clear()
            while not self.stopping.is_set():
                try:
                    self.report_completed()
                    backoff.reset()
                    break
                except ShardwiseError as e:
                    print(
                        f"shardwise worker: completion report failed; retrying: {e}",
                        file=sys.stderr,
                        flush=True,
                    )
                    self.stopping.wait(backoff.next_delay())

    # -- start and stop ---------------------------------------------------------------------

    def start_loops(self) -> None:
        for target, name in ((self.heartbeat_loop, "heartbeat"), (self.report_loop, "report")):
            t = threading.Thread(target=target, name=f"shardwise-worker-{name}", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self, timeout: float) -> None:
        """Stops the loops and every task, and joins their threads (at most ``timeout``
        seconds in all: a ``fn`` that never returns is left behind, a daemon thread)."""
        self.stopping.set()
        self.heartbeat_event.set()
        self.report_event.set()
        with self.lock:
            tasks = list(self.live.values())
            self.live.clear()
        for t in tasks:
            t.stop()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for t in tasks:
            if not t.join(max(0.0, deadline - time.monotonic())):
                print(
                    f"shardwise worker: task {t.task_id}: fn did not return within the stop's "
                    "timeout; left running",
                    file=sys.stderr,
                    flush=True,
                )


def _task_id(raw: Any) -> int | None:
    """A task id from the wire (a decimal string, or an integer), or ``None``."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw >= 0 else None
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 20:
        return int(raw)
    return None
