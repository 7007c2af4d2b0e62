"""JAX: a checkpointable iterator over a Shardwise ``distributed_epoch`` read.

:class:`ShardwiseIterator` follows Grain's iterator interface: ``next()`` gives the next item,
``get_state()`` a JSON-serialisable dict (Orbax saves it beside the model, e.g. with
``orbax.checkpoint.args.JsonSave``), and ``set_state(state)`` makes the next ``next()`` resume
from it. Every JAX process is one consumer of one DYNAMIC iteration of a shared job: no
element is read twice across processes, and :func:`shardwise.merge_positions` of the states
of all processes is the position to resume from on any number of processes::

    from shardwise.jax import ShardwiseIterator

    it = ShardwiseIterator("http://dispatcher:5050", dataset, "train", format="arrow")
    for step, batch in enumerate(it):           # a dict of NumPy arrays per record batch
        x = jax.device_put(batch["image"])
        ...
        if step % 1000 == 0:
            save(step, params, it.get_state())

    it = ShardwiseIterator(url, dataset, "train")
    it.set_state(saved_state)                   # resumes where the checkpoint was taken

Items are NumPy arrays ready for ``jax.device_put`` / ``jax.numpy.asarray``: with
``format="arrow"`` each record batch is a dict of arrays (fixed-width columns without nulls
are views of the received buffer, no copy); with ``format="json"`` each element as JSON
decodes it, numbers and lists of numbers as NumPy arrays.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Union

import numpy as np

from ._convert import record_batch_columns
from .client import Dispatcher, connect as _dispatcher
from .positions import POSITION_KEY, holds_position, merge_positions, resumed_job_name
from .reader import Reader, distribute

__all__ = ["ShardwiseIterator"]

Position = Dict[str, Any]


def _process() -> Dict[str, int]:
    import jax  # imported when used: the package does not need JAX otherwise

    return {"process_index": int(jax.process_index()), "process_count": int(jax.process_count())}


def _as_numpy(value: Any) -> Any:
    """A JSON element with its numbers (and rectangular lists of numbers) as NumPy arrays."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return np.asarray(value)
    if isinstance(value, dict):
        return {k: _as_numpy(v) for k, v in value.items()}
    if isinstance(value, list):
        try:
            array = np.asarray(value)
        except ValueError:
            return [_as_numpy(v) for v in value]
        if array.dtype.kind in "biuf":
            return array
        return [_as_numpy(v) for v in value]
    return value


class ShardwiseIterator(Iterator[Any]):
    """One JAX process's consumer of a shared Shardwise read, checkpointable.

    Args:
        dispatcher: the dispatcher's URL (or replicas' URLs, comma-separated) or a
            :class:`shardwise.Dispatcher`.
        dataset: the dataset definition (a dict or its JSON text), or a registered id.
        job_name: the job every process of this read shares.
        process_index, process_count: this process and the number of processes; default
            ``jax.process_index()`` and ``jax.process_count()``. They name the consumer in
            its state; the dispatcher balances the reads.
        resume_from: a position to start from (``merge_positions`` of a run's states).
        format: ``"json"`` or ``"arrow"`` (columnar datasets, one dict of arrays per record
            batch).
        transform: applied to every item.
        repetition: the pass over the job.
        token, ca_file: authentication and TLS.
        read_options: further keyword arguments of :func:`shardwise.distribute`.
    """

    def __init__(
        self,
        dispatcher: Union[str, Dispatcher],
        dataset: Union[str, Mapping[str, Any]],
        job_name: str,
        *,
        process_index: Optional[int] = None,
        process_count: Optional[int] = None,
        resume_from: Optional[Position] = None,
        format: str = "json",
        transform: Optional[Callable[[Any], Any]] = None,
        repetition: int = 0,
        token: Optional[str] = None,
        ca_file: Optional[str] = None,
        **read_options: Any,
    ) -> None:
        if format not in ("json", "arrow"):
            raise ValueError(f"format must be 'json' or 'arrow', not {format!r}")
        self._dispatcher = dispatcher
        self._dataset = dataset
        self._job_name = job_name
        self._process_index = process_index
        self._process_count = process_count
        self._resume_from = resume_from
        self._format = format
        self._transform = transform
        self._repetition = repetition
        self._token = token
        self._ca_file = ca_file
        self._read_options = read_options
        self._reader: Optional[Reader] = None
        self._items: Optional[Iterator[Any]] = None

    def __iter__(self) -> "ShardwiseIterator":
        return self

    def __next__(self) -> Any:
        if self._items is None:
            self._reader = distribute(
                _dispatcher(self._dispatcher, self._token, self._ca_file),
                self._dataset,
                job_name=resumed_job_name(self._job_name, self._resume_from),
                repetition=self._repetition,
                resume_from=self._resume_from,
                format=self._format,
                **self._read_options,
            )
            self._items = iter(self._reader)
        item = next(self._items)
        if self._format == "arrow":
            item = record_batch_columns(item)
        else:
            item = _as_numpy(item)
        return self._transform(item) if self._transform else item

    def _consumer(self) -> Dict[str, int]:
        if self._process_index is not None and self._process_count is not None:
            return {"process_index": self._process_index, "process_count": self._process_count}
        found = _process()
        if self._process_index is not None:
            found["process_index"] = self._process_index
        if self._process_count is not None:
            found["process_count"] = self._process_count
        return found

    def get_state(self) -> Dict[str, Any]:
        """The position of every item this iterator gave out (plain JSON: save it with the
        checkpoint), with the consumer it is."""
        if self._reader is not None:
            position: Optional[Position] = self._reader.position()
        else:
            position = self._resume_from
        return {POSITION_KEY: position, "consumer": self._consumer(), "job_name": self._job_name}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state`` (one of :meth:`get_state`, or the merge of all processes'
        states): the read under way stops, and the next ``next()`` starts a read resuming
        from it."""
        position = merge_positions(state) if holds_position(state) else None
        self.close()
        self._resume_from = position

    def close(self) -> None:
        """Stops the read under way (the client lease is released)."""
        if self._reader is not None:
            self._reader.close()
        self._reader = None
        self._items = None
