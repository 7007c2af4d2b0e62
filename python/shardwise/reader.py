"""Reading a dataset through a dispatcher and its workers: :func:`distribute` and
:class:`Reader`.

The read is the Rust client's (``gateway/client``, through the package's native module):

1. register the dataset (under the Rust client's fingerprint of its definition, so that
   clients sharing a job by name register the same dataset), get or create the job, get or
   create the iteration (resuming from a position if asked), which takes a client lease;
2. heartbeat the lease every ``heartbeat_interval``: the answer lists the iteration's tasks;
3. read the tasks first come, first served, round robin, ``elements_per_request`` elements
   per request (or, coordinated, round by round), skipping the tasks of workers the
   dispatcher declared lost;
4. retry ``UNAVAILABLE`` answers and transport failures with capped backoff for at most
   ``unavailable_timeout``, and a worker's ``NOT_FOUND`` for a task the dispatcher listed for
   at most ``unknown_task_timeout``; anything else ends the read with a
   :class:`ShardwiseError`;
5. end when the dispatcher says ``iteration_finished`` and every task read answered end of
   sequence;
6. release the lease at the end, on an error, or on :meth:`Reader.close`.

The read runs on the native module's threads, ahead of the caller: up to ``prefetch`` reads
(answers of up to ``elements_per_request`` elements) ready or under way (0: it reads only when
the caller waits), and heartbeats whenever one is due, also while the caller does not iterate.
``next()`` takes the next element of those reads and waits, without the GIL, only when none is
ready. Every answer is bounded as the Rust client bounds it (its size, what it decodes to, the
time it may take).

**Read positions.** A ``distributed_epoch`` read of a dataset without transforms (but
``shard_hint``) has a position (:meth:`Reader.position`): what the caller was handed, folded
from the origin runs the workers tag elements with. Reads fetched ahead and not handed out are
not in a position.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from . import _native
from ._native import fingerprint
from .client import Dispatcher, ProcessingMode
from .errors import ShardwiseError

__all__ = ["MAX_ELEMENTS_PER_REQUEST", "MAX_PREFETCH", "Reader", "distribute", "fingerprint"]

#: The most elements (rows) one request may ask for.
MAX_ELEMENTS_PER_REQUEST = 10_000
#: The most reads a reader keeps ready ahead of its caller.
MAX_PREFETCH = 64
#: The default ``max_read_bytes``: 256 MiB, a worker's default ``--max-reply-bytes``.
MAX_READ_BYTES = 256 << 20


def _count(count: Any) -> int:
    if not isinstance(count, int) or isinstance(count, bool):
        raise ValueError(f"elements_per_request must be an int, not {count!r:.40}")
    if not 1 <= count <= MAX_ELEMENTS_PER_REQUEST:
        raise ValueError(
            f"elements_per_request must be between 1 and {MAX_ELEMENTS_PER_REQUEST}, not {count}"
        )
    return count


def _is_dynamic(mode: ProcessingMode) -> bool:
    if isinstance(mode, str):
        return mode == "distributed_epoch"
    return isinstance(mode, Mapping) and mode.get("sharding_policy") == "DYNAMIC"


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
        num_consumers: int | None = None,
        consumer_index: int | None = None,
        heartbeat_interval: float = 1.0,
        unknown_task_timeout: float = 60.0,
        unavailable_timeout: float | None = None,
        max_read_bytes: int = MAX_READ_BYTES,
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
        position: Any = None
        if isinstance(resume_from, str):
            try:
                position = json.loads(resume_from)
            except ValueError as e:
                raise ValueError(f"resume_from is not JSON: {e}") from None
        elif resume_from is not None:
            position = resume_from
        if format not in ("json", "arrow"):
            raise ValueError(f"format must be 'json' or 'arrow', not {format!r}")
        if arrow_compression is not None and arrow_compression not in ("lz4", "zstd"):
            raise ValueError(
                f"arrow_compression must be None, 'lz4' or 'zstd', not {arrow_compression!r}"
            )
        _count(elements_per_request)
        if not isinstance(prefetch, int) or isinstance(prefetch, bool):
            raise TypeError("prefetch is an int")
        if not 0 <= prefetch <= MAX_PREFETCH:
            raise ValueError(f"prefetch must be between 0 and {MAX_PREFETCH}, not {prefetch}")
        if heartbeat_interval <= 0:
            raise ValueError("heartbeat_interval must be positive")
        if not isinstance(max_read_bytes, int) or isinstance(max_read_bytes, bool):
            raise TypeError("max_read_bytes is an int")
        if max_read_bytes < 4096:
            raise ValueError(f"max_read_bytes must be at least 4096, not {max_read_bytes}")
        if target_workers not in ("AUTO", "ANY", "LOCAL"):
            raise ValueError(
                f"target_workers must be 'AUTO', 'ANY' or 'LOCAL', not {target_workers!r}"
            )
        if target_workers == "LOCAL" and not local_workers:
            raise ValueError(
                "Local reads require local tf.data workers, but no local worker is found. You "
                "need to run local tf.data service workers in your training workers."
            )
        if (num_consumers is None) != (consumer_index is None):
            raise ValueError("coordinated reads need both num_consumers and consumer_index")
        if num_consumers is not None:
            if not 0 <= consumer_index < num_consumers:  # type: ignore[operator]
                raise ValueError(
                    f"consumer_index {consumer_index} is out of range for {num_consumers} "
                    "consumers"
                )
            if job_name is None:
                raise ValueError("coordinated reads (num_consumers) require a job_name")
        position_text = None
        if position is not None:
            if not _is_dynamic(processing_mode):
                raise ValueError("resume_from needs processing_mode distributed_epoch (DYNAMIC)")
            try:
                position_text = json.dumps(position, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise ValueError(f"resume_from is not a read position: {e}") from None
        if _native.fingerprint(dataset) is None:
            # The core cannot read it: the dispatcher says why (a ShardwiseError).
            dispatcher.register_dataset(dataset, dataset_id=dataset_id)
            raise ValueError("the dataset definition is not one the client reads")
        self.dispatcher = dispatcher
        self.dataset = dataset
        self.format = format
        self._count = elements_per_request
        options = {
            "processing_mode": processing_mode,
            "job_name": job_name,
            "num_consumers": num_consumers,
            "consumer_index": consumer_index,
            "target_workers": target_workers,
            "local_workers": list(local_workers),
            "elements_per_request": elements_per_request,
            "split_size": split_size,
            "repetition": repetition,
            "dataset_id": dataset_id,
            "token": dispatcher.token,
            "ca_file": dispatcher.ca_file,
            "heartbeat_interval": heartbeat_interval,
            "unknown_task_timeout": unknown_task_timeout,
            "unavailable_timeout": (
                dispatcher.unavailable_timeout
                if unavailable_timeout is None
                else unavailable_timeout
            ),
            "request_timeout": dispatcher.timeout,
            "resume_from": position_text,
            "arrow_compression": arrow_compression,
            "read_ahead": prefetch,
            "max_outstanding_requests": max(prefetch, 1),
            "max_read_bytes": max_read_bytes,
        }
        # Sets the read up (raises ShardwiseError when a call of it fails).
        self._native = _native.Reader(dispatcher.addresses, dataset, format, options)
        self.dataset_id: str = self._native.dataset_id
        self.job_id: str = self._native.job_id
        self.iteration_id: str = self._native.iteration_id
        self.client_id: str = self._native.client_id
        self.repetition: int = self._native.repetition
        self._over = False

    def __iter__(self) -> Reader:
        return self

    def __next__(self) -> Any:
        if self._over:
            raise StopIteration
        try:
            item = self._native.next()
        except ShardwiseError:
            self._over = True
            raise
        if item is None:
            self._over = True
            raise StopIteration
        return item

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stops reading and releases the client lease (waiting for it, at most the
        dispatcher's ``timeout`` and 5 s); what was read and not handed out is dropped.
        :meth:`position` still answers what was handed out. Idempotent."""
        self._over = True
        self._native.close()

    @property
    def elements_per_request(self) -> int:
        """The most elements (rows) asked for per request, 1 to 10,000. It may be changed
        between calls of ``next()``; it applies to the requests made after (the reads fetched
        ahead keep their size)."""
        return self._count

    @elements_per_request.setter
    def elements_per_request(self, count: int) -> None:
        self._count = _count(count)
        self._native.set_elements_per_request(count)

    @property
    def tasks(self) -> list[dict[str, Any]]:
        """The tasks this reader reads (or read), in the order it learnt them:
        ``{"task_id", "worker_address", "done"}`` (``done``: it answered its end, or its
        worker was lost)."""
        return self._native.tasks()

    @property
    def closed(self) -> bool:
        """The read is over: ended, failed or closed (buffered elements may remain)."""
        return self._native.over

    def position(self, held_back: int = 0) -> dict[str, Any]:
        """Where the caller is in the read: every element (row) this reader handed out, and,
        when it resumed, everything its ``resume_from`` covered; not what is still buffered.
        Save it with a model checkpoint; resume with ``distribute(..., resume_from=it)``.

        ``held_back``: rows of the last items handed out that the caller has not passed on
        yet (say the rows of a record batch it yields one by one): they count as not
        consumed. At most the rows handed out of the current read (``ValueError``).

        Raises :class:`ShardwiseError` ``FAILED_PRECONDITION`` when the read has no exact
        positions: it is not a ``distributed_epoch`` read, it is coordinated, the dataset has
        a transform that buffers or counts across splits (the error says which), or an
        element came without origin.
        """
        if not isinstance(held_back, int) or held_back < 0:
            raise ValueError(f"held_back must be a non-negative int, not {held_back!r}")
        return json.loads(self._native.position(held_back))


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
    num_consumers: int | None = None,
    consumer_index: int | None = None,
    heartbeat_interval: float = 1.0,
    unknown_task_timeout: float = 60.0,
    unavailable_timeout: float | None = None,
    max_read_bytes: int = MAX_READ_BYTES,
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
        dataset_id: The id to register under (default: the Rust client's fingerprint of
            ``dataset``).
        target_workers: ``"AUTO"`` (skip workers tagged ``COLOCATED``), ``"ANY"`` or
            ``"LOCAL"`` (only ``local_workers``).
        local_workers: With ``"LOCAL"``: the ``host:port`` of the workers to read.
        num_consumers: Coordinated reads (TensorFlow's): this many consumers of one job
            (``job_name`` required) read it round by round, every round's elements from one
            worker, each consumer one element per round; with ``consumer_index``.
        consumer_index: This consumer's index, 0 to ``num_consumers - 1``.
        heartbeat_interval: Seconds between heartbeats, which is also how soon new tasks and
            the end of the read are noticed.
        unknown_task_timeout: How long (seconds) a worker may answer ``NOT_FOUND`` for a task
            the dispatcher listed.
        unavailable_timeout: How long (seconds) ``UNAVAILABLE`` answers and transport
            failures are retried (default: the dispatcher's).
        max_read_bytes: The most bytes one read's answer may hold (its body, and what
            compressed Arrow batches decompress to): a larger answer fails the read before
            more of it is read. Default 256 MiB, a worker's default ``--max-reply-bytes``.
            An answer must also hold no more rows than asked for, and only the codec asked
            for; and each call must be answered in full within the dispatcher's ``timeout``.

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
        num_consumers=num_consumers,
        consumer_index=consumer_index,
        heartbeat_interval=heartbeat_interval,
        unknown_task_timeout=unknown_task_timeout,
        unavailable_timeout=unavailable_timeout,
        max_read_bytes=max_read_bytes,
    )
