"""PyTorch: a resumable ``IterableDataset`` over a Shardwise ``distributed_epoch`` read.

Every (rank, ``DataLoader`` worker) pair is one consumer of one DYNAMIC iteration of a shared
job: the dispatcher hands its splits to the workers, and each consumer takes whatever its
worker tasks serve next, so no element is read twice across ranks and loader workers, and a
slow consumer never holds the others back. Each consumer's ``state_dict()`` is the read
position of the elements *it* handed to the training loop; :func:`shardwise.merge_positions`
turns the states of every rank (and every loader worker in them) into the one position to
resume from, on any number of ranks and loader workers::

    from torchdata.stateful_dataloader import StatefulDataLoader
    from shardwise.torch import ShardwiseIterableDataset

    ds = ShardwiseIterableDataset("http://dispatcher:5050", dataset, "train")
    loader = StatefulDataLoader(ds, batch_size=32, num_workers=2)
    for step, batch in enumerate(loader):
        ...
        if step % 1000 == 0:
            state = loader.state_dict()          # every worker's position, this rank
            # gather the states of all ranks (torch.distributed.all_gather_object), then:
            position = shardwise.merge_positions(all_states)

    # Later, on another number of ranks and workers:
    ds = ShardwiseIterableDataset(url, dataset, "train-2", resume_from=position)

Positions are exact when the ``StatefulDataLoader`` snapshots every step (its default,
``snapshot_every_n_steps=1``): a coarser snapshot makes it replay the steps since the last one
from the resumed read, which hands out other elements than the first run did.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Union

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from ._convert import record_batch_columns, rows_of
from .client import Dispatcher, connect as _dispatcher
from .positions import POSITION_KEY, holds_position, merge_positions, resumed_job_name
from .reader import Reader, distribute

__all__ = ["ShardwiseIterableDataset", "to_tensors"]

Position = Dict[str, Any]


def to_tensors(columns: Mapping[str, Any]) -> Dict[str, Any]:
    """Columns (NumPy arrays, as :func:`shardwise.record_batch_columns` gives them) as torch
    tensors. Fixed-width columns without nulls share the Arrow buffer (``torch.from_numpy``,
    no copy); the buffer is read-only, so write to a tensor only after ``.clone()``. Columns
    that are not numeric arrays (strings, nested values) stay as they are."""
    out: Dict[str, Any] = {}
    with warnings.catch_warnings():
        # The arrays are views of the received Arrow buffer: not writable, shared on purpose.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for name, column in columns.items():
            if isinstance(column, np.ndarray) and column.dtype.kind in "biuf":
                out[name] = torch.from_numpy(column)
            else:
                out[name] = column
    return out


class ShardwiseIterableDataset(IterableDataset):  # type: ignore[type-arg]
    """One consumer of a shared Shardwise read per (rank, ``DataLoader`` worker).

    Args:
        dispatcher: the dispatcher's URL (``http://host:port``, a comma-separated list of
            replicas) or a :class:`shardwise.Dispatcher`.
        dataset: the dataset definition (a dict or its JSON text), or a registered
            dataset's id (a string of digits).
        job_name: the job every consumer of this read shares. A resumed read uses the job
            ``job_name@resume-<digest of the position>`` (:func:`shardwise.positions.resumed_job_name`),
            which all its consumers share and which the stopped run's job does not hold up.
        rank: this process's rank; default: ``torch.distributed.get_rank()`` when a process
            group is initialised, else 0.
        world_size: the number of ranks; default: ``torch.distributed.get_world_size()``, else 1.
        resume_from: a position to resume from (:func:`shardwise.merge_positions` of the
            states of the run that stopped), or ``None`` for a fresh read.
        format: ``"json"`` (elements as JSON values) or ``"arrow"`` (the rows of a columnar
            dataset: Parquet, Arrow or TFRecord files).
        batches: with ``format="arrow"``, yield each record batch whole as a dict of tensors
            (use ``DataLoader(batch_size=None)``) instead of one row at a time.
        transform: applied to every yielded item (an element, a row, or a batch's dict).
        repetition: the pass over the job (an epoch counter); :meth:`set_epoch` sets it.
        token, ca_file: the bearer token and CA file for a dispatcher and workers behind
            authentication and TLS.
        coordinated: TensorFlow's coordinated reads: every (rank, loader worker) is one
            consumer of ``world_size * num_workers`` reading the job round by round, each
            round's elements from one worker (the workers in turn), one element per consumer
            per round; so every rank takes the same number of steps, and the ranks of a step
            read the same worker. Use an endless dataset (a ``repeat``), under
            ``processing_mode="parallel_epochs"``. Coordinated reads have no read positions
            (their state holds none).
        read_options: further keyword arguments of :func:`shardwise.distribute`.

    Rows of an Arrow read become dicts of NumPy arrays (one row each), which the default
    collate function stacks into tensors; whole batches become tensors that share the
    received buffer. JSON elements are yielded as they are (numbers and lists collate into
    tensors).
    """

    def __init__(
        self,
        dispatcher: Union[str, Dispatcher],
        dataset: Union[str, Mapping[str, Any]],
        job_name: str,
        *,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        resume_from: Optional[Position] = None,
        format: str = "json",
        batches: bool = False,
        transform: Optional[Callable[[Any], Any]] = None,
        repetition: int = 0,
        token: Optional[str] = None,
        ca_file: Optional[str] = None,
        coordinated: bool = False,
        **read_options: Any,
    ) -> None:
        super().__init__()
        if format not in ("json", "arrow"):
            raise ValueError(f"format must be 'json' or 'arrow', not {format!r}")
        if batches and format != "arrow":
            raise ValueError("batches=True needs format='arrow'")
        self.dispatcher = dispatcher
        self.dataset = dataset
        self.job_name = job_name
        self.rank = rank
        self.world_size = world_size
        self.resume_from = resume_from
        self.format = format
        self.batches = batches
        self.transform = transform
        self.repetition = repetition
        self.token = token
        self.ca_file = ca_file
        self.coordinated = coordinated
        if coordinated and ({"num_consumers", "consumer_index"} & read_options.keys()):
            raise ValueError("coordinated=True sets num_consumers and consumer_index itself")
        self.read_options = read_options
        # Set in the process that iterates (a DataLoader worker, or this one).
        self._reader: Optional[Reader] = None
        self._held_back = 0
        self._loaded: Optional[Position] = None

    def set_epoch(self, epoch: int) -> None:
        """Reads pass ``epoch`` of the job next (call it before each epoch's loop, as with a
        ``DistributedSampler``)."""
        self.repetition = epoch

    def _consumer(self) -> Dict[str, int]:
        info = get_worker_info()
        rank, world_size = self.rank, self.world_size
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if world_size is None:
            initialised = dist.is_available() and dist.is_initialized()
            world_size = dist.get_world_size() if initialised else 1
        return {
            "rank": int(rank),
            "world_size": int(world_size),
            "worker": info.id if info is not None else 0,
            "num_workers": info.num_workers if info is not None else 1,
        }

    def _resume_position(self) -> Optional[Position]:
        parts = [p for p in (self.resume_from, self._loaded) if p is not None]
        if not parts:
            return None
        return merge_positions(*parts) if len(parts) > 1 else dict(parts[0])

    def __iter__(self) -> Iterator[Any]:
        resume_from = self._resume_position()
        options = dict(self.read_options)
        if self.coordinated:
            c = self._consumer()
            options["num_consumers"] = c["world_size"] * c["num_workers"]
            options["consumer_index"] = c["rank"] * c["num_workers"] + c["worker"]
        reader = distribute(
            _dispatcher(self.dispatcher, self.token, self.ca_file),
            self.dataset,
            job_name=resumed_job_name(self.job_name, resume_from),
            repetition=self.repetition,
            resume_from=resume_from,
            format=self.format,
            **options,
        )
        self._reader = reader
        self._held_back = 0
        transform = self.transform or (lambda x: x)
        try:
            for item in reader:
                if self.format == "json":
                    yield transform(item)
                elif self.batches:
                    yield transform(to_tensors(record_batch_columns(item)))
                else:
                    rows = rows_of(record_batch_columns(item), item.num_rows)
                    self._held_back = item.num_rows
                    for row in rows:
                        self._held_back -= 1
                        yield transform(row)
        finally:
            reader.close()

    def state_dict(self) -> Dict[str, Any]:
        """This consumer's state: the position of the elements it handed out (rows of a
        record batch count one by one), with who it is. Merge the states of all consumers
        with :func:`shardwise.merge_positions` to resume elsewhere."""
        if self.coordinated:
            position: Optional[Position] = None
        elif self._reader is not None:
            position = self._reader.position(held_back=self._held_back)
        else:
            position = self._resume_position()
        return {POSITION_KEY: position, "consumer": self._consumer(), "job_name": self.job_name}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resume from ``state_dict`` (a state of :meth:`state_dict`, or any dict holding
        positions, e.g. the states of every rank): the next iteration resumes from it merged
        with ``resume_from``. Each consumer of a resumed read must resume from the same
        position: pass the merge of every consumer's state, not one consumer's own."""
        try:
            self._loaded = merge_positions(state_dict)
        except ValueError:
            if holds_position(state_dict):
                raise
            self._loaded = None  # a consumer that had not read anything yet
