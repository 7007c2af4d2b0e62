"""Reading a dataset through a dispatcher and its workers: :func:`distribute` and
:class:`Reader`.

The protocol is the Rust client's (``core/src/client/reader.rs``, ``gateway/client``):

1. register the dataset (under a fingerprint of its definition, so that clients sharing a job
   by name register the same dataset), get or create the job, get or create the iteration
   (resuming from a position if asked), which takes a client lease;
2. heartbeat the lease every ``heartbeat_interval``: the answer lists the iteration's tasks
   (left out when unchanged since the version the reader sent) and says when the iteration
   is finished;
3. read the tasks first come, first served, round robin, ``elements_per_request`` elements
   per request, skipping the tasks of workers the dispatcher declared lost;
4. retry ``UNAVAILABLE`` answers and transport failures with capped backoff for at most
   ``unavailable_timeout``, and a worker's ``NOT_FOUND`` for a task the dispatcher listed (it
   has not heard of the task yet) for at most ``unknown_task_timeout``; anything else ends
   the read with a :class:`ShardwiseError`;
5. end when the dispatcher says ``iteration_finished`` and every task read answered end of
   sequence (once every task is over, the dispatcher is asked again at once);
6. release the lease (``DELETE /v1/clients/{id}``) at the end, on an error, or on
   :meth:`Reader.close`.

The protocol runs on one thread of the reader's own, ahead of the caller: it keeps up to
``prefetch`` reads (answers of up to ``elements_per_request`` elements; 0: read only when the
caller waits) ready or under way, several tasks' reads at once (one each, on threads that only
make the request and decode it, so a worker with nothing ready holds up no other), so that a training loop finds its next batch read while it was computing, and
it heartbeats whenever one falls due, also while the caller does not iterate (a training step,
an evaluation longer than the dispatcher's ``--client-timeout``). ``next()`` takes the next
element of those reads and waits only when none is ready. Everything the caller sees (the
elements, their order within a task, the end, the error after everything read before it)
is what the protocol read; a read's elements are handed out only after every element of the
read before.

**Read positions.** A ``distributed_epoch`` read of a dataset without transforms (but
``shard_hint``) has a position (:meth:`Reader.position`): what the caller was handed, folded
from the origin runs the workers tag elements with (:class:`PositionTracker`). The fold is
lazy: a read's runs are folded when the caller is handed the first element of the next read,
and ``position()`` folds the part of the current one handed out so far, so handing out an
element costs nothing. Reads fetched ahead and not handed out are not in a position.
"""

from __future__ import annotations

import collections
import json
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from . import _arrow
from ._readpos import fingerprint, fold, is_dynamic, positions_unavailable
from ._tasks import (
    MAX_ELEMENTS_PER_REQUEST,
    NUDGE_GAP,
    RELEASE_ATTEMPTS,
    RELEASE_RETRY,
    Task,
    check_count,
    gave_up,
    task_info,
)
from .client import Backoff, Dispatcher, ProcessingMode, _text
from .errors import ShardwiseError
from ._native import check_runs
from .positions import PositionTracker

__all__ = ["MAX_ELEMENTS_PER_REQUEST", "MAX_PREFETCH", "Reader", "distribute", "fingerprint"]

# The most reads a reader keeps ready ahead of its caller.
MAX_PREFETCH = 64
# How much longer than one request close() waits for the protocol's thread.
CLOSE_GRACE = 5.0


def _run(ref: weakref.ref[Reader]) -> None:
    """The protocol's thread: steps the read while the reader lives and the read goes on.
    It holds the reader only for one turn at a time, so a reader nobody holds is collected."""
    while True:
        reader = ref()
        if reader is None:
            return
        try:
            if not reader._run_once():
                reader._over_now()
                return
        except BaseException as e:  # a bug or an interpreter shutdown: the caller hears of it
            reader._reading = False
            reader._error = ShardwiseError.protocol(f"the reader's thread failed: {e!r}")
            reader._over_now()
            return
        finally:
            del reader


class Reader:
    """The elements of one iteration, read through a dispatcher and its workers: an iterator
    of JSON elements (``format="json"``) or of ``pyarrow.RecordBatch`` (``format="arrow"``).

    Made by :func:`distribute` (which documents the arguments); a context manager whose exit
    (like :meth:`close`) releases the client lease. Iterating raises :class:`ShardwiseError`
    when the read fails, after handing out everything read before the failure.

    Attributes:
        dispatcher: The :class:`Dispatcher` it reads through.
        dataset: The definition read.
        format: ``"json"`` or ``"arrow"``.
        dataset_id: The id the dataset is registered under.
        job_id: The job read.
        repetition: The iteration's repetition (the resumed position's, when resuming).
        iteration_id: The iteration read.
        client_id: The client lease this reader holds until it ends or is closed.
    """

    def __init__(
        self,
        dispatcher: Dispatcher | str | Sequence[str],
        dataset: Mapping[str, Any] | str,
        *,
        job_name: str | None = None,
        processing_mode: ProcessingMode = "distributed_epoch",
        repetition: int = 0,
        resume_from: Mapping[str, Any] | str | None = None,
        format: str = "json",
        arrow_compression: str | None = None,
        elements_per_request: int = 1024,
        prefetch: int = 2,
        split_size: int | None = None,
        dataset_id: str | None = None,
        target_workers: str = "AUTO",
        local_workers: Sequence[str] = (),
        heartbeat_interval: float = 1.0,
        unknown_task_timeout: float = 60.0,
        unavailable_timeout: float | None = None,
    ) -> None:
        if not isinstance(dispatcher, Dispatcher):
            dispatcher = Dispatcher(dispatcher)
        if isinstance(dataset, str):
            try:
                dataset = json.loads(dataset)
            except ValueError as e:
                raise ValueError(f"the dataset is not JSON: {e}") from None
        if not isinstance(dataset, Mapping):
            raise TypeError("a dataset definition is a JSON object")
        position: Mapping[str, Any] | None = None
        if isinstance(resume_from, str):
            try:
                position = json.loads(resume_from)
            except ValueError as e:
                raise ValueError(f"resume_from is not JSON: {e}") from None
        elif resume_from is not None:
            position = resume_from
        if format not in ("json", "arrow"):
            raise ValueError(f"format must be 'json' or 'arrow', not {format!r}")
        if arrow_compression is not None and arrow_compression not in _arrow.COMPRESSIONS:
            raise ValueError(
                f"arrow_compression must be None, 'lz4' or 'zstd', not {arrow_compression!r}"
            )
        check_count(elements_per_request)
        if not isinstance(prefetch, int) or isinstance(prefetch, bool):
            raise TypeError("prefetch is an int")
        if not 0 <= prefetch <= MAX_PREFETCH:
            raise ValueError(f"prefetch must be between 0 and {MAX_PREFETCH}, not {prefetch}")
        if heartbeat_interval <= 0:
            raise ValueError("heartbeat_interval must be positive")
        if target_workers not in ("AUTO", "ANY", "LOCAL"):
            raise ValueError(
                f"target_workers must be 'AUTO', 'ANY' or 'LOCAL', not {target_workers!r}"
            )
        if target_workers == "LOCAL" and not local_workers:
            raise ValueError(
                "Local reads require local tf.data workers, but no local worker is found. You "
                "need to run local tf.data service workers in your training workers."
            )
        if position is not None:
            if not is_dynamic(processing_mode):
                raise ValueError("resume_from needs processing_mode distributed_epoch (DYNAMIC)")
            PositionTracker.resuming(position)  # ValueError when malformed
        self.dispatcher = dispatcher
        self.dataset = dataset
        self.format = format
        self._count = elements_per_request
        self._prefetch = prefetch
        self._compression = arrow_compression
        self._target_workers = target_workers
        self._local_workers = list(local_workers)
        self._heartbeat_interval = heartbeat_interval
        self._unknown_task_timeout = unknown_task_timeout
        self._unavailable_timeout = (
            dispatcher.unavailable_timeout if unavailable_timeout is None else unavailable_timeout
        )

        # Set up: version, dataset, job, iteration (each retried as the dispatcher's calls are).
        dispatcher.check_version()
        self.dataset_id = dispatcher.register_dataset(
            dataset, dataset_id=dataset_id or fingerprint(dataset)
        )
        self.job_id = dispatcher.job(
            self.dataset_id,
            processing_mode=processing_mode,
            name=job_name,
            target_workers=target_workers,
            split_size=split_size,
        )
        self.repetition = int(position["repetition"]) if position is not None else repetition
        lease = dispatcher.iteration(self.job_id, repetition=self.repetition, resume_from=position)
        context = f"POST /v1/jobs/{self.job_id}/iterations"
        self.iteration_id = _text(lease, "iteration_id", context)
        self.client_id = _text(lease, "client_id", context)
        self._incarnation = _text(lease, "incarnation", context)

        # Positions: unavailable (why), or a tracker with the current read's runs.
        self._unavailable = positions_unavailable(dataset, processing_mode)
        self._tracker = (
            PositionTracker.resuming(position) if position is not None else PositionTracker()
        )
        self._runs: list[dict[str, Any]] | None = None
        self._batch_rows = 0

        # The caller's side: what of the current read was not handed out yet, and its rows.
        self._pending: collections.deque[Any] = collections.deque()
        self._pending_rows = 0

        # Between the two threads (under `_cond`): the reads fetched ahead (items, rows,
        # origin), whether the caller waits for one, and whether the protocol's thread is over.
        self._cond = threading.Condition()
        self._ahead: collections.deque[tuple[list[Any], int, list[dict[str, Any]] | None]] = (
            collections.deque()
        )
        self._waiting = False
        self._over = False
        # Reads that finished on their threads, for the protocol's thread: (task, outcome).
        self._finished_reads: list[tuple[Task, Any]] = []

        # The protocol's state, the protocol's thread's alone (but `_stopped`).
        self._start = time.monotonic()
        self._tasks: list[Task] = []
        self._index: dict[str, int] = {}
        self._next = 0
        self._finished = False
        self._skipped_any = False
        self._have_reply = False
        self._known: tuple[Any, list[dict[str, Any]]] | None = None
        self._hb_next_at = 0.0
        self._hb_nudged = False
        self._hb_backoff = Backoff(0.01, 1.0)
        self._hb_failing_since: float | None = None
        self._last_nudge: float | None = None
        self._nudge_at: float | None = None
        self._reading = True
        self._error: ShardwiseError | None = None
        self._stopped = threading.Event()
        self._in_flight = 0  # reads under way

        # The thread holds the reader weakly (strongly only during one turn): a reader dropped
        # without close() is collected and its thread ends; its lease then expires after the
        # dispatcher's --client-timeout, as a vanished client's does.
        self._thread = threading.Thread(
            target=_run, args=(weakref.ref(self),), name=f"shardwise-read-{self.client_id}",
            daemon=True,
        )
        self._thread.start()

    # -- the iterator ----------------------------------------------------------------------

    def __iter__(self) -> Reader:
        return self

    def __next__(self) -> Any:
        while True:
            if self._pending:
                item = self._pending.popleft()
                self._pending_rows -= item.num_rows if self.format == "arrow" else 1
                return item
            with self._cond:
                while not self._ahead and not self._over:
                    self._waiting = True
                    self._cond.notify_all()  # a read is wanted now (prefetch 0)
                    self._cond.wait()
                self._waiting = False
                if not self._ahead:
                    if self._error is not None:
                        error, self._error = self._error, None
                        raise error
                    raise StopIteration
                items, rows, origin = self._ahead.popleft()
                self._cond.notify_all()  # room for the next read
            self._arrived(rows, origin)
            self._pending.extend(items)
            self._pending_rows += rows

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stops reading and releases the client lease (waiting for the request under way, at
        most the dispatcher's ``timeout`` and a little); what was read and not handed out is
        dropped. :meth:`position` still answers what was handed out. Idempotent."""
        self._stopped.set()
        with self._cond:
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(self.dispatcher.timeout + CLOSE_GRACE)
        with self._cond:
            self._over = True
            self._ahead.clear()
            self._error = None
        # What is dropped was never handed out: the current read's rows are those before it.
        self._batch_rows -= self._pending_rows
        self._pending.clear()
        self._pending_rows = 0

    @property
    def elements_per_request(self) -> int:
        """The most elements (rows) asked for per request, 1 to 10,000. It may be changed
        between calls of ``next()``; it applies to the requests made after (the reads fetched
        ahead keep their size)."""
        return self._count

    @elements_per_request.setter
    def elements_per_request(self, count: int) -> None:
        check_count(count)
        self._count = count

    @property
    def tasks(self) -> list[dict[str, Any]]:
        """The tasks this reader reads (or read), in the order it learnt them:
        ``{"task_id", "worker_address", "done"}`` (``done``: it answered its end, or its
        worker was lost)."""
        return [
            {"task_id": t.task_id, "worker_address": t.address, "done": t.done} for t in self._tasks
        ]

    @property
    def closed(self) -> bool:
        """The read is over: ended, failed or closed (buffered elements may remain)."""
        return not self._reading or self._stopped.is_set()

    def position(self, held_back: int = 0) -> dict[str, Any]:
        """Where the caller is in the read: every element (row) this reader handed out, and,
        when it resumed, everything its ``resume_from`` covered; not what is still buffered.
        Save it with a model checkpoint; resume with ``distribute(..., resume_from=it)``.

        ``held_back``: rows of the last items handed out that the caller has not passed on
        yet (say the rows of a record batch it yields one by one): they count as not
        consumed. At most the rows handed out of the current read.

        Raises :class:`ShardwiseError` ``FAILED_PRECONDITION`` when the read has no exact
        positions: it is not a ``distributed_epoch`` read, the dataset has a transform that
        buffers or counts across splits (the error says which), or an element came without
        origin.
        """
        why = self._unavailable
        tracker = self._tracker
        if why is None:
            tracker = tracker.copy()
            handed = self._batch_rows - self._pending_rows
            if not 0 <= held_back <= handed:
                raise ValueError(
                    f"held_back must be between 0 and the {handed} rows handed out of the "
                    f"current read, not {held_back}"
                )
            why = fold(tracker, self._runs, handed - held_back)
        if why is not None:
            raise ShardwiseError("FAILED_PRECONDITION", f"this reader has no read position: {why}")
        return tracker.position(self.dataset_id, self.repetition)

    # -- the protocol's thread ---------------------------------------------------------------

    def _wanted(self) -> int:
        """How many more reads may start now: ``prefetch`` reads ready or under way at most,
        and one when the caller waits with none of either (``prefetch`` 0). Under ``_cond``."""
        busy = len(self._ahead) + self._in_flight
        if self._waiting and busy == 0:
            return 1
        return max(0, self._prefetch - busy)

    def _run_once(self) -> bool:
        """One turn of the protocol's thread: the outcomes of finished reads, else a heartbeat
        when one is due, else reads of ready tasks as many as are wanted, else a wait for any
        of those; false once the read is over."""
        if self._stopped.is_set() and self._reading:
            self._end(None)
        if not self._reading:
            return False
        with self._cond:
            finished, self._finished_reads = self._finished_reads, []
        if finished:
            for task, outcome in finished:
                self._in_flight -= 1
                task.reading = False
                if self._reading:
                    self._read_outcome(task, outcome)
            return True
        now = self._now()
        if self._hb_nudged or self._hb_next_at <= now:
            self._heartbeat(now)
            return True
        if self._nudge_at is not None and self._nudge_at <= now:
            self._update(now)
            return True
        started = False
        while True:
            with self._cond:
                wanted = self._wanted()
            task = self._next_ready(now) if wanted > 0 else None
            if task is None:
                break
            self._start_read(task)
            started = True
        if started:
            return True
        deadlines = [self._hb_next_at]
        if self._nudge_at is not None:
            deadlines.append(self._nudge_at)
        deadlines.extend(
            t.retry_at for t in self._tasks if t.retry_at is not None and t.ready(float("inf"))
        )
        with self._cond:
            # Anything that changes what to do notifies `_cond`: a finished read, the caller
            # taking or waiting for a read, close().
            if (
                not self._finished_reads
                and not self._stopped.is_set()
                and not (self._wanted() > 0 and self._next_ready(now) is not None)
            ):
                self._cond.wait(max(0.0, min(deadlines) - now))
        return True

    def _start_read(self, task: Task) -> None:
        """A read of ``task`` on a thread of its own (the request and its decoding); its outcome
        comes back to the protocol's thread through ``_finished_reads``."""
        task.reading = True
        task.retry_at = None
        self._in_flight += 1
        count = self._count
        threading.Thread(
            target=self._fetch, args=(task, count), name=f"shardwise-fetch-{task.task_id}",
            daemon=True,
        ).start()

    def _fetch(self, task: Task, count: int) -> None:
        outcome: Any
        try:
            outcome = self._get_elements(task, count)
        except ShardwiseError as e:
            outcome = e
        except Exception as e:  # a bug: the read ends with it rather than hanging
            outcome = ShardwiseError.protocol(f"a read failed: {e!r}")
        with self._cond:
            self._finished_reads.append((task, outcome))
            self._cond.notify_all()

    def _over_now(self) -> None:
        """The protocol's thread is done: the caller takes what is ahead, then the end."""
        with self._cond:
            self._over = True
            self._cond.notify_all()

    # -- one step of the read --------------------------------------------------------------

    def _now(self) -> float:
        return time.monotonic() - self._start

    def _heartbeat(self, now: float) -> None:
        self._hb_nudged = False
        body: dict[str, Any] = {}
        if self._known is not None:
            body["known_tasks_version"] = self._known[0]
        path = f"/v1/clients/{self.client_id}/heartbeat"
        try:
            reply = self.dispatcher.call("POST", path, body, retry=False)
            if not isinstance(reply, Mapping) or not isinstance(reply.get("tasks"), list):
                raise ShardwiseError.protocol(
                    "a heartbeat reply without tasks", context=f"POST {path}"
                )
            tasks = [task_info(t, f"POST {path}") for t in reply["tasks"]]
        except ShardwiseError as e:
            now = self._now()
            if not e.is_retryable:
                return self._end(e)
            since = self._hb_failing_since = self._hb_failing_since or now
            if now - since >= self._unavailable_timeout:
                return self._end(gave_up(e, now - since))
            self._hb_next_at = now + self._hb_backoff.next_delay()
            return self._update(now)
        now = self._now()
        version = reply.get("tasks_version", 0)
        if reply.get("tasks_unchanged") and self._known is not None and self._known[0] == version:
            tasks = self._known[1]
        else:
            self._known = (version, tasks)
        self._hb_failing_since = None
        self._hb_backoff.reset()
        incarnation = str(reply.get("incarnation"))
        if incarnation != self._incarnation:
            return self._end(
                ShardwiseError(
                    "FAILED_PRECONDITION",
                    f"the dispatcher restarted without its state (incarnation "
                    f"{self._incarnation} -> {incarnation:.80}); the iteration was lost: start "
                    "it again",
                    context=f"POST {path}",
                )
            )
        self._hb_next_at = now + self._heartbeat_interval
        self._finished |= bool(reply.get("iteration_finished"))
        for info in tasks:
            i = self._index.get(info["task_id"])
            if i is not None:
                t = self._tasks[i]
                if info.get("worker_lost"):
                    t.done = True
                t.info = info
            elif self._should_read(info):
                self._index[info["task_id"]] = len(self._tasks)
                self._tasks.append(Task(info))
            else:
                self._skipped_any = True
        self._have_reply = True
        self._update(now)

    def _should_read(self, info: Mapping[str, Any]) -> bool:
        if self._target_workers == "ANY":
            return True
        if self._target_workers == "LOCAL":
            return info["worker_address"] in self._local_workers
        tags = info.get("worker_tags") or []
        return not any(str(t).upper() == "COLOCATED" for t in tags)

    def _next_ready(self, now: float) -> Task | None:
        n = len(self._tasks)
        for k in range(n):
            i = (self._next + k) % n
            if self._tasks[i].ready(now):
                self._next = (i + 1) % n
                return self._tasks[i]
        return None

    def _read_outcome(self, task: Task, outcome: Any) -> None:
        """What a read of ``task`` brought: elements for the caller, the task's end, a retry
        later, or the end of the read."""
        now = self._now()
        if isinstance(outcome, ShardwiseError):
            e = outcome
            if e.kind == "problem" and e.code == "NOT_FOUND":
                since = task.unknown_since = task.unknown_since or now
                if now - since >= self._unknown_task_timeout:
                    return self._end(e)
            elif e.is_retryable:
                since = task.unavailable_since = task.unavailable_since or now
                if now - since >= self._unavailable_timeout:
                    return self._end(gave_up(e, now - since))
            else:
                return self._end(e)
            task.retry_at = now + task.backoff.next_delay()
            return self._update(now)
        items, rows, end, origin = outcome
        task.backoff.reset()
        task.unknown_since = task.unavailable_since = None
        if end:
            task.done = True
        if rows > 0:
            with self._cond:
                self._ahead.append((items, rows, origin))
                self._cond.notify_all()
        self._update(now)

    def _get_elements(
        self, task: Task, count: int
    ) -> tuple[list[Any], int, bool, list[dict[str, Any]] | None]:
        """One read of ``task``: its items, rows, end of sequence and origin runs (checked)."""
        context = f"GET /v1/tasks/{task.task_id}/elements at {task.address}"
        if self.format == "arrow":
            res = self.dispatcher.get_elements(
                task.address,
                task.task_id,
                max_elements=count,
                headers=_arrow.request_headers(self._compression),
                max_body=_arrow.MAX_ARROW_BODY,
            )
            items, rows, end, origin = _arrow.decode_read(res.headers, res.body, context)
        else:
            res = self.dispatcher.get_elements(task.address, task.task_id, max_elements=count)
            reply = res.json(context)
            if (
                not isinstance(reply, Mapping)
                or not isinstance(reply.get("elements"), list)
                or not isinstance(reply.get("end_of_sequence"), bool)
            ):
                raise ShardwiseError.protocol("not an elements answer", context=context)
            items = reply["elements"]
            rows, end, origin = len(items), reply["end_of_sequence"], reply.get("origin")
        if origin is not None:
            try:
                check_runs(origin)
            except ValueError as e:
                raise ShardwiseError.protocol(
                    f"malformed origin runs: {e}", context=context
                ) from None
        return items, rows, end, origin

    def _arrived(self, rows: int, origin: list[dict[str, Any]] | None) -> None:
        """A new read of ``rows`` rows with ``origin`` (every row of the previous one was
        handed out): the previous one is folded. Origins that do not cover exactly its rows
        count as none."""
        if self._unavailable is None:
            self._unavailable = fold(self._tracker, self._runs, self._batch_rows)
        self._batch_rows = rows
        self._runs = None
        if origin is not None:
            counts = [int(r["count"]) for r in origin]
            if sum(counts) == rows and all(c > 0 for c in counts):
                self._runs = origin

    def _update(self, now: float) -> None:
        """After every outcome: the end of the read, or the end-of-epoch nudges."""
        if not self._reading or not self._have_reply:
            return
        self._nudge_at = None
        if self._tasks and all(t.done for t in self._tasks):
            if self._finished or self._skipped_any:
                return self._end(None)
            # Every task read is over, so the dispatcher acknowledged their completion: ask it
            # now (at most every NUDGE_GAP) whether the iteration finished.
            due = now if self._last_nudge is None else self._last_nudge + NUDGE_GAP
            if now >= due:
                self._last_nudge = now
                self._hb_nudged = True
            else:
                self._nudge_at = due
        elif not self._tasks and (self._finished or self._skipped_any):
            self._end(None)  # no task, or every task skipped by target_workers

    def _end(self, error: ShardwiseError | None) -> None:
        """The read is over (with ``error`` if it failed): release the lease, best effort."""
        self._reading = False
        self._error = error
        path = f"/v1/clients/{self.client_id}"
        for attempt in range(RELEASE_ATTEMPTS):
            try:
                self.dispatcher.call("DELETE", path, retry=False)
                return
            except ShardwiseError as e:
                if not e.is_retryable or attempt + 1 == RELEASE_ATTEMPTS:
                    return
                time.sleep(RELEASE_RETRY)


def distribute(
    dispatcher: Dispatcher | str | Sequence[str],
    dataset: Mapping[str, Any] | str,
    *,
    job_name: str | None = None,
    processing_mode: ProcessingMode = "distributed_epoch",
    repetition: int = 0,
    resume_from: Mapping[str, Any] | str | None = None,
    format: str = "json",
    arrow_compression: str | None = None,
    elements_per_request: int = 1024,
    prefetch: int = 2,
    split_size: int | None = None,
    dataset_id: str | None = None,
    target_workers: str = "AUTO",
    local_workers: Sequence[str] = (),
    heartbeat_interval: float = 1.0,
    unknown_task_timeout: float = 60.0,
    unavailable_timeout: float | None = None,
) -> Reader:
    """Reads ``dataset`` through ``dispatcher``: registers it, gets or creates the job and
    the iteration (the calls happen here, and raise here), and returns the :class:`Reader`
    that iterates over its elements.

    Args:
        dispatcher: A :class:`Dispatcher`, or its address(es) (``"http://host:5050"``).
        dataset: The definition, a dict or its JSON text
            (``{"source": {"range": {"stop": 100}}}``).
        job_name: Share the job (and its iterations) with every client of this name.
        processing_mode: ``"distributed_epoch"`` (default: each element once across the
            workers, with read positions), ``"parallel_epochs"`` or ``{"sharding_policy":
            ...}``.
        repetition: Which iteration (pass) of the job to read.
        resume_from: A position (:meth:`Reader.position`, as a dict or JSON text) to resume:
            the iteration (of the position's repetition) hands out only what it has not
            consumed, and this reader's positions go on from it. Needs
            ``distributed_epoch``; use :func:`merge_positions` to resume from the positions
            of several readers.
        format: ``"json"``: the iterator yields JSON elements one by one; ``"arrow"``: it
            yields ``pyarrow.RecordBatch`` es (columnar datasets: parquet, arrow, tfrecord).
        arrow_compression: With ``"arrow"``: ``"lz4"`` or ``"zstd"`` record batches
            (default uncompressed, the cheapest on a fast network).
        elements_per_request: The most elements (rows) per request, 1 to 10,000.
        prefetch: How many reads (answers of up to ``elements_per_request`` elements) the
            reader's thread keeps ready ahead of the caller, 0 to 64: the memory it may hold
            besides the read being handed out. 0 reads only when the caller waits for an
            element (no element is taken from the workers before it is wanted).
        split_size: Elements per DYNAMIC split of a range or list (default: the dispatcher's).
        dataset_id: The id to register under (default: :func:`fingerprint` of ``dataset``).
        target_workers: ``"AUTO"`` (skip workers tagged ``COLOCATED``), ``"ANY"`` or
            ``"LOCAL"`` (only ``local_workers``).
        local_workers: With ``"LOCAL"``: the ``host:port`` of the workers to read.
        heartbeat_interval: Seconds between heartbeats, which is also how soon new tasks and
            the end of the read are noticed.
        unknown_task_timeout: How long (seconds) a worker may answer ``NOT_FOUND`` for a task
            the dispatcher listed.
        unavailable_timeout: How long (seconds) ``UNAVAILABLE`` answers and transport
            failures are retried (default: the dispatcher's).

    Raises ``ValueError`` or ``TypeError`` for bad arguments (before any call) and
    :class:`ShardwiseError` when a call of the setup fails.
    """
    return Reader(
        dispatcher,
        dataset,
        job_name=job_name,
        processing_mode=processing_mode,
        repetition=repetition,
        resume_from=resume_from,
        format=format,
        arrow_compression=arrow_compression,
        elements_per_request=elements_per_request,
        prefetch=prefetch,
        split_size=split_size,
        dataset_id=dataset_id,
        target_workers=target_workers,
        local_workers=local_workers,
        heartbeat_interval=heartbeat_interval,
        unknown_task_timeout=unknown_task_timeout,
        unavailable_timeout=unavailable_timeout,
    )
