"""One task on a Python worker: its bounded buffer, the thread that runs ``fn`` on its
splits, and its reads. The rules are those of the Rust worker's task machine
(``core/src/worker``), which the module docs of :mod:`shardwise.worker` sum up:

* **Lazily started.** A task produces nothing before the first read: the first read starts
  its producer thread.
* **Backpressure.** At most ``capacity`` elements (rows) and about ``max_bytes`` bytes wait in
  the buffer (one item always fits); the producer, and so ``fn``, waits while it is full.
* **Acknowledgements.** A DYNAMIC task asks the dispatcher for a batch of splits, runs ``fn``
  on each, and asks for the next batch, acknowledging the previous one, only once every
  element it produced was taken by a client. A worker killed with splits in flight never
  acknowledged them: the dispatcher hands them out again.
* **End of sequence** is answered only after the dispatcher acknowledged the completion
  report, so a client that saw the end of every task sees its iteration finished next.
* **Origins.** A DYNAMIC task tags what it hands out with origin runs (read positions): the
  offsets count ``fn``'s outputs (rows) from the split's start; the first ``skip`` outputs are
  dropped, outputs from offset ``until`` on are not produced, and the last output of a split
  ``fn`` ran to its end is marked ``end`` (so ``fn``'s output is read one item ahead).
* **Failures.** ``fn`` raising, an output without a served form, or a get-split refused for
  good fail the task: reads answer the buffered elements, then the error.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from . import _worker_rows as rows
from ._worker_splits import make_split, max_splits, refusal, static_splits
from .errors import ShardwiseError

#: The first wait after a get-split failed, and the longest (seconds).
BACKOFF_INITIAL = 0.01
BACKOFF_MAX = 2.0
#: The longest ``retry_after_ms`` a get-split reply may ask for (ms).
RETRY_AFTER_MAX_MS = 10_000
#: How often in a row a get-split refused with ``FAILED_PRECONDITION`` is retried.
MAX_PRECONDITION_RETRIES = 5
#: The most splits one get-split asks for.
MAX_SPLITS = 64
#: The most characters of an exception's text a task's error quotes.
MAX_ERROR_TEXT = 2000


class TaskError(Exception):
    """Why a read was refused or a task failed: a status class and a message."""

    def __init__(self, code: str, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        #: A more precise HTTP status of the code's class (406 for Arrow of JSON values).
        self.status = status

    @classmethod
    def failed(cls, task_id: int, code: str, detail: str) -> TaskError:
        """Task ``task_id`` failed with ``detail``. Never ``NOT_FOUND`` (clients retry that
        for tasks a worker does not know yet): that becomes ``FAILED_PRECONDITION``."""
        if code == "NOT_FOUND":
            code = "FAILED_PRECONDITION"
        return cls(code, f"task {task_id} failed: {detail}")


def gone_answer(how: str, task_id: int) -> TaskError | None:
    """A read of a task that is gone ``how`` (``completed``, ``deleted``, ``lost``): ``None``
    (end of sequence) or the error."""
    if how == "completed":
        return None
    if how == "deleted":
        return TaskError(
            "FAILED_PRECONDITION",
            f"task {task_id} was deleted by the dispatcher before it completed (its iteration "
            "finished, was released or was garbage collected)",
        )
    return TaskError(
        "FAILED_PRECONDITION",
        f"task {task_id} was lost: the dispatcher restarted without its state (a new "
        "incarnation); start the iteration again",
    )


def error_of(e: BaseException) -> tuple[str, str]:
    """The status class and text of an exception ``fn`` raised."""
    if isinstance(e, ShardwiseError):
        code = e.code
    elif isinstance(e, (ValueError, TypeError, KeyError, IndexError, LookupError)):
        code = "INVALID_ARGUMENT"
    elif isinstance(e, PermissionError):
        code = "PERMISSION_DENIED"
    elif isinstance(e, FileNotFoundError):
        code = "NOT_FOUND"
    elif isinstance(e, MemoryError):
        code = "RESOURCE_EXHAUSTED"
    else:
        code = "INTERNAL"
    text = str(e)
    if len(text) > MAX_ERROR_TEXT:
        text = text[:MAX_ERROR_TEXT] + f"… ({len(text)} characters)"
    return code, f"{type(e).__name__}: {text}" if text else type(e).__name__


class _Stopped(Exception):
    """The task was stopped: the producer ends."""


def take_runs(runs: collections.deque[list[Any]], n: int) -> list[dict[str, Any]]:
    """The origin runs of the first ``n`` elements, taken off ``runs`` (each
    ``[start, stop, offset, count, end]``), the last one split when it covers more."""
    out: list[dict[str, Any]] = []
    while n > 0 and runs:
        start, stop, offset, count, end = runs[0]
        k = min(n, count)
        run: dict[str, Any] = {
            "split": {"start": start, "stop": stop},
            "offset": offset,
            "count": k,
        }
        if k == count:
            runs.popleft()
            if end:
                run["end"] = True
        else:
            runs[0] = [start, stop, offset + k, count - k, end]
        out.append(run)
        n -= k
    return out


class Read:
    """What a read found: its items (JSON texts, or record batches), their rows, the end of
    sequence, and their origin runs (``None`` when untracked)."""

    __slots__ = ("end", "items", "kind", "origin", "rows")

    def __init__(
        self,
        kind: str | None,
        items: list[Any],
        rows: int,
        end: bool,
        origin: list[dict[str, Any]] | None,
    ) -> None:
        self.kind = kind
        self.items = items
        self.rows = rows
        self.end = end
        self.origin = origin


class Task:
    """A task the dispatcher assigned to this worker (see the module docs).

    ``hooks`` is what the task asks of its worker: ``get_splits(iteration_id, body)`` (a
    get-split, raising :class:`ShardwiseError`), ``report_due()`` (a completion report may be
    due) and ``heartbeat_now()``.
    """

    def __init__(
        self,
        definition: Mapping[str, Any],
        fn: Callable[[Any], Any],
        hooks: Any,
        *,
        capacity: int,
        max_bytes: int,
    ) -> None:
        self.definition = definition
        self.task_id = int(definition["task_id"])
        self.iteration_id = str(definition["iteration_id"])
        self.policy = str(definition.get("processing_mode"))
        self.fn = fn
        self.hooks = hooks
        self.capacity = max(1, capacity)
        self.max_bytes = max(1, max_bytes)
        self.cond = threading.Condition()
        self.started = False
        self.stopped = False
        self.ended = False
        self.acked = False
        self.failure: TaskError | None = None
        # The buffer: items (payload, rows, weight), and what they add up to.
        self.buf: collections.deque[tuple[Any, int, int]] = collections.deque()
        self.buf_rows = 0
        self.buf_bytes = 0
        # Origins: runs covering the buffer's rows in order, while tracked.
        self.tracked = self.policy == "DYNAMIC"
        self.runs: collections.deque[list[Any]] = collections.deque()
        # What the task serves: "values" or "rows" (fixed by the first output); the rows'
        # schema.
        self.kind: str | None = None
        self.schema: Any = None
        # Why the rows cannot be served as JSON ("": they can), once asked.
        self.json_refusal: str | None = None
        self.held: list[Any] = []
        self.produced = 0
        self.served = 0
        self.thread: threading.Thread | None = None

    # -- reads (the HTTP threads) ----------------------------------------------------------

    def read(self, max_rows: int, wait: float, want: str = "json") -> Read:
        """A first-come-first-served read of up to ``max_rows`` rows, waiting at most
        ``wait`` seconds for some. ``want`` is the form of the answer, ``"json"`` or
        ``"arrow"``: elements it cannot serve are refused with :class:`TaskError` before any
        is taken. Raises :class:`TaskError` for a failed or gone task."""
        deadline = time.monotonic() + wait
        with self.cond:
            self._start()
            while True:
                if self.stopped:
                    error = gone_answer(self.gone_kind(), self.task_id)
                    if error is not None:
                        raise error
                    return Read(self.kind, [], 0, True, None)
                self._check_form(want)
                if self.buf:
                    return self._take(max_rows)
                if self.failure is not None:
                    raise self.failure
                if self.ended:
                    if self.acked:
                        return Read(self.kind, [], 0, True, None)
                    self.hooks.report_due()
                left = deadline - time.monotonic()
                if left <= 0:
                    return Read(self.kind, [], 0, False, None)
                self.cond.wait(left)

    def _check_form(self, want: str) -> None:
        """Refuses a read whose form (``"arrow"`` or ``"json"``) cannot serve this task's
        elements, before anything is taken."""
        if want == "arrow" and self.kind == "values":
            raise TaskError(
                "FAILED_PRECONDITION",
                f"task {self.task_id}'s elements are JSON values: Arrow streams serve the rows "
                "fn yields as record batches or dicts of NumPy arrays; read it as JSON",
                status=406,
            )
        if want == "json" and self.kind == "rows" and self.schema is not None:
            if self.json_refusal is None:
                self.json_refusal = rows.no_json_form(self.schema) or ""
            if self.json_refusal:
                raise TaskError("FAILED_PRECONDITION", self.json_refusal)

    def _take(self, max_rows: int) -> Read:
        items: list[Any] = []
        n = 0
        while self.buf and n < max_rows:
            payload, count, w = self.buf[0]
            if n + count <= max_rows:
                self.buf.popleft()
                items.append(payload)
                n += count
                self.buf_bytes -= w
                continue
            k = max_rows - n
            head = rows.slice_item(payload, 0, k)
            tail = rows.slice_item(payload, k, count - k)
            taken_w = w * k // count
            self.buf[0] = (tail, count - k, w - taken_w)
            self.buf_bytes -= taken_w
            items.append(head)
            n += k
        self.buf_rows -= n
        self.served += n
        origin = take_runs(self.runs, n) if self.tracked else None
        if not self.buf and self.ended and self.failure is None:
            self.hooks.report_due()
        self.cond.notify_all()
        return Read(self.kind, items, n, False, origin)

    # -- what the worker says ---------------------------------------------------------------

    def gone_kind(self) -> str:
        """How a deleted task reads: ``completed`` if it ended and every element was taken."""
        if self.acked or (self.ended and not self.buf and self.failure is None):
            return "completed"
        return "deleted"

    def ready_to_report(self) -> bool:
        """Ended, every element taken, not yet acknowledged: the completion report is due."""
        with self.cond:
            return (
                self.ended
                and not self.acked
                and self.failure is None
                and not self.buf
                and not self.stopped
            )

    def mark_acked(self) -> None:
        """The dispatcher acknowledged the completion report: end of sequence may be served."""
        with self.cond:
            self.acked = True
            self.cond.notify_all()

    def stop(self) -> None:
        """Stops the task: nothing more is produced or fetched; reads answer as
        :meth:`gone_kind` says. The producer ends at its next output (``fn`` is not
        interrupted)."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def join(self, timeout: float) -> bool:
        """Waits at most ``timeout`` for the producer thread to end: whether it did."""
        t = self.thread
        if t is None:
            return True
        t.join(timeout)
        return not t.is_alive()

    def counters(self) -> tuple[int, int, int]:
        """``(buffered, produced, served)`` rows."""
        with self.cond:
            return self.buf_rows, self.produced, self.served

    # -- the producer -----------------------------------------------------------------------

    def _start(self) -> None:
        if self.started or self.stopped:
            return
        self.started = True
        self.thread = threading.Thread(
            target=self._run, name=f"shardwise-task-{self.task_id}", daemon=True
        )
        self.thread.start()

    def _fail(self, error: TaskError) -> None:
        with self.cond:
            if self.failure is None:
                self.failure = error
            self.cond.notify_all()
        print(f"shardwise worker: {error.detail}", file=sys.stderr, flush=True)

    def _run(self) -> None:
        try:
            refusal = self._refusal()
            if refusal is not None:
                self._fail(TaskError.failed(self.task_id, "FAILED_PRECONDITION", refusal))
            elif self.policy == "DYNAMIC":
                self._run_dynamic()
            else:
                self._run_static()
        except _Stopped:
            pass
        except TaskError as e:
            self._fail(e)
        except Exception as e:  # a bug here, not fn's: still a task error, never a hang
            traceback.print_exc(file=sys.stderr)
            code, text = error_of(e)
            self._fail(TaskError.failed(self.task_id, "INTERNAL", f"the worker failed: {text}"))

    def _refusal(self) -> str | None:
        """Why this worker cannot run the task, or ``None``."""
        return refusal(self.definition)

    def _end(self) -> None:
        with self.cond:
            self.ended = True
            due = not self.buf
            self.cond.notify_all()
        if due:
            self.hooks.report_due()

    def _sleep(self, seconds: float) -> None:
        """Waits ``seconds``, or until the task stops (:class:`_Stopped`)."""
        deadline = time.monotonic() + seconds
        with self.cond:
            while not self.stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.cond.wait(left)
            raise _Stopped

    def _wait_drained(self) -> None:
        """Waits until clients took every element produced (:class:`_Stopped` on a stop)."""
        with self.cond:
            while self.buf and not self.stopped:
                self.cond.wait()
            if self.stopped:
                raise _Stopped

    def _run_static(self) -> None:
        """OFF: every split of the source, in order, cut here as the dispatcher would."""

        for value, positions in static_splits(self.definition):
            self._run_split(make_split(self.definition, value, positions, None), positions)
        self._end()

    def _run_dynamic(self) -> None:
        backoff = BACKOFF_INITIAL
        preconditions = 0
        limit = max_splits(self.definition, self.capacity)
        while True:
            self._wait_drained()
            body = {"repetition": 0, "max_splits": limit, "acknowledge": list(self.held)}
            try:
                reply = self.hooks.get_splits(self.iteration_id, body)
            except ShardwiseError as e:
                precondition = (
                    e.code == "FAILED_PRECONDITION" and preconditions < MAX_PRECONDITION_RETRIES
                )
                if not e.is_retryable and not precondition:
                    raise TaskError.failed(self.task_id, e.code, f"get-split failed: {e}") from None
                if not e.is_retryable:
                    preconditions += 1
                    self.hooks.heartbeat_now()
                self._sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            splits, ids, positions, end, retry_after = _check_reply(reply, self.task_id)
            self.held = []
            if not splits and not end:
                backoff = BACKOFF_INITIAL
                self._sleep(min(max(retry_after, 1), RETRY_AFTER_MAX_MS) / 1000)
                continue
            backoff = BACKOFF_INITIAL
            preconditions = 0
            if not splits:
                self._end()
                return
            self.held = ids
            for i, value in enumerate(splits):
                at = positions[i] if i < len(positions) else None
                if at is None:
                    self.tracked = False  # an older dispatcher: no origins from here on
                split_id = ids[i] if i < len(ids) else None
                self._run_split(make_split(self.definition, value, at, split_id), at)

    def _run_split(self, split: Any, at: Mapping[str, Any] | None) -> None:
        """Runs ``fn`` on one split and buffers what it yields (module docs: skip, until,
        the end mark)."""
        start = int(at["start"]) if at else 0
        stop = int(at["stop"]) if at else 0
        skip = int(at.get("skip") or 0) if at else 0
        until = at.get("until") if at else None
        try:
            outputs: Iterator[Any] = iter(self.fn(split))
        except Exception as e:
            raise self._fn_failed(e, split) from None
        index = 0  # fn's outputs (rows) seen so far
        pending: tuple[Any, int, int] | None = None  # (payload, rows, offset), one item ahead
        cut = False
        try:
            while True:
                if self.stopped:
                    raise _Stopped
                try:
                    output = next(outputs)
                except StopIteration:
                    break
                except Exception as e:
                    failure = self._fn_failed(e, split)
                    if pending is not None:
                        self._push(pending, start, stop, end=False)  # yielded before it raised
                    raise failure from None
                try:
                    items = self._items(output)
                except TaskError:
                    if pending is not None:
                        self._push(pending, start, stop, end=False)  # yielded before it
                    raise
                for payload, count in items:
                    first = index
                    index += count
                    if index <= skip:
                        continue
                    if first < skip:
                        payload = rows.slice_item(payload, skip - first, index - skip)
                        count, first = index - skip, skip
                    if until is not None and index > until:
                        keep = int(until) - first
                        if keep <= 0:
                            cut = True
                            break
                        payload, count, index = rows.slice_item(payload, 0, keep), keep, until
                    if pending is not None:
                        self._push(pending, start, stop, end=False)
                    pending = (payload, count, first)
                    if until is not None and index >= until:
                        # What follows was consumed before: fn is not asked for more, and
                        # the split ends here without an end mark.
                        cut = True
                        break
                if cut:
                    break
        finally:
            close = getattr(outputs, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    pass
        if pending is not None:
            self._push(pending, start, stop, end=not cut)

    def _fn_failed(self, e: BaseException, split: Any) -> TaskError:
        code, text = error_of(e)
        print(
            f"shardwise worker: task {self.task_id}: fn raised on split {split.value!r:.200}:",
            file=sys.stderr,
        )
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
        return TaskError.failed(
            self.task_id, code, f"fn raised {text} (split {split.value!r:.200})"
        )

    def _items(self, output: Any) -> list[tuple[Any, int]]:
        """One output of ``fn`` as buffer payloads and their rows; checks its kind."""
        try:
            kind, payloads = rows.classify(output)
        except rows.OutputError as e:
            raise TaskError.failed(self.task_id, e.code, e.detail) from None
        if self.kind is None:
            self.kind = kind
        elif kind != self.kind:
            raise TaskError.failed(
                self.task_id,
                "INVALID_ARGUMENT",
                "fn yielded rows (a record batch or a dict of NumPy arrays) and JSON values in "
                "one task; a task serves one kind",
            )
        if kind == "values":
            return [(p, 1) for p in payloads]
        out = []
        for batch in payloads:
            if self.schema is None:
                self.schema = batch.schema
            else:
                why = rows.schema_difference(self.schema, batch.schema)
                if why is not None:
                    raise TaskError.failed(
                        self.task_id,
                        "INVALID_ARGUMENT",
                        f"fn yielded a batch whose columns differ from the task's first: {why}",
                    )
            if batch.num_rows > 0:
                out.append((batch, batch.num_rows))
        return out

    def _push(self, item: tuple[Any, int, int], start: int, stop: int, *, end: bool) -> None:
        """Buffers one item (waiting for room), with its origin run."""
        payload, count, offset = item
        w = rows.weight(payload)
        with self.cond:
            while (
                not self.stopped
                and self.buf
                and (self.buf_rows >= self.capacity or self.buf_bytes >= self.max_bytes)
            ):
                self.cond.wait()
            if self.stopped:
                raise _Stopped
            self.buf.append((payload, count, w))
            self.buf_rows += count
            self.buf_bytes += w
            self.produced += count
            if self.tracked:
                last = self.runs[-1] if self.runs else None
                if (
                    last is not None
                    and last[0] == start
                    and last[1] == stop
                    and last[2] + last[3] == offset
                    and not last[4]
                ):
                    last[3] += count  # the same split's next outputs: one run
                    last[4] = end
                else:
                    self.runs.append([start, stop, offset, count, end])
            self.cond.notify_all()


def _check_reply(reply: Any, task_id: int) -> tuple[list[Any], list[Any], list[Any], bool, int]:
    """A get-split reply's splits, ids, positions, end and retry delay, checked."""
    context = "POST /v1/iterations/{id}/splits"

    def bad(what: str) -> TaskError:
        return TaskError.failed(
            task_id, "INTERNAL", f"get-split: unexpected answer ({what}) from {context}"
        )

    if not isinstance(reply, Mapping):
        raise bad("not an object")
    splits = reply.get("splits")
    ids = reply.get("split_ids")
    positions = reply.get("positions") or []
    if not isinstance(splits, list) or not isinstance(ids, list) or not isinstance(positions, list):
        raise bad("no splits")
    for p in positions:
        if not isinstance(p, Mapping) or not all(
            isinstance(p.get(k), int) and not isinstance(p.get(k), bool) and p.get(k) >= 0
            for k in ("start", "stop")
        ):
            raise bad("malformed positions")
        for k in ("skip", "until"):
            v = p.get(k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise bad("malformed positions")
    retry = reply.get("retry_after_ms")
    retry_after = retry if isinstance(retry, int) and not isinstance(retry, bool) else 100
    return splits, ids, positions, bool(reply.get("end_of_splits")), retry_after
