"""The splits a Python worker runs ``fn`` on, read off a task's definition: which tasks it can
run at all, the splits of an OFF task (cut here as the dispatcher cuts DYNAMIC ones), how many
splits one get-split asks for, and the source elements of a ``range`` or ``list`` split.

A Python worker runs ``fn`` on the *source's* splits; ``fn`` is the pipeline. So a dataset
with transforms (``shard_hint`` aside, which marks where a static shard applies and does
nothing here) is refused rather than half applied, and so are the static sharding policies
(FILE, DATA, FILE_OR_DATA, HINT: they shard a pipeline's files or outputs by worker index,
which a worker that does not know what ``fn`` reads cannot do faithfully) and coordinated
reads (rounds of one element per consumer, which ``fn``'s batches of rows do not fit).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

#: The most splits one get-split asks for.
MAX_SPLITS = 64
#: A split's elements when the job names no split size (the dispatcher's default).
DEFAULT_SPLIT_SIZE = 1024


def source_of(definition: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """A task definition's source: its kind (``range``, ``list``, ``files``, ``splits``) and
    its fields. ``ValueError`` for anything else."""
    dataset = definition.get("dataset")
    source = dataset.get("source") if isinstance(dataset, Mapping) else None
    if not isinstance(source, Mapping) or len(source) != 1:
        raise ValueError("the dataset has no source")
    kind, fields = next(iter(source.items()))
    if kind not in ("range", "list", "files", "splits") or not isinstance(fields, Mapping):
        raise ValueError(f"the source {kind!r:.40} is not range, list, files or splits")
    return kind, fields


def refusal(definition: Mapping[str, Any]) -> str | None:
    """Why a Python worker cannot run this task (module docs), or ``None``."""
    dataset = definition.get("dataset")
    if isinstance(dataset, Mapping) and "tensorflow" in dataset:
        return "a TensorFlow dataset's task"
    try:
        source_of(definition)
    except ValueError as e:
        return str(e)
    transforms = dataset.get("transforms") if isinstance(dataset, Mapping) else None
    for t in transforms if isinstance(transforms, list) else []:
        name = next(iter(t), None) if isinstance(t, Mapping) and len(t) == 1 else None
        if name != "shard_hint":
            return (
                f"the dataset has the transform {name or t!r:.80}: a Python worker runs fn on "
                "the source's splits and applies no transform (fn is the pipeline; register "
                "the dataset without transforms, or shuffle and batch in the trainer)"
            )
    if definition.get("num_consumers") is not None:
        return "coordinated reads (num_consumers) are not served by Python workers"
    policy = definition.get("processing_mode")
    if policy not in ("DYNAMIC", "OFF"):
        return (
            f"the sharding policy {policy!s:.40} is not served by Python workers: they run "
            "DYNAMIC (distributed_epoch) and OFF (parallel_epochs) jobs"
        )
    return None


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} is not an integer")
    return value


def range_len(fields: Mapping[str, Any]) -> int:
    """How many elements a ``range`` source has (Python's ``range`` rule)."""
    start = _count(fields.get("start", 0), "range.start")
    stop = _count(fields.get("stop"), "range.stop")
    step = _count(fields.get("step", 1), "range.step")
    if step == 0:
        raise ValueError("range.step is 0")
    return len(range(start, stop, step))


def positions_of(kind: str, fields: Mapping[str, Any]) -> int:
    """How many positions a source has (elements; files or rows; items)."""
    if kind == "range":
        return range_len(fields)
    if kind == "list":
        return len(fields.get("elements") or [])
    if kind == "files":
        rows = fields.get("rows")
        if fields.get("split") == "rows" and isinstance(rows, list):
            return sum(_count(r, "files.rows[]") for r in rows)
        return len(fields.get("paths") or [])
    return len(fields.get("items") or [])


def split_size_of(definition: Mapping[str, Any]) -> int:
    size = definition.get("split_size")
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    return DEFAULT_SPLIT_SIZE


def static_splits(
    definition: Mapping[str, Any],
) -> Iterator[tuple[Any, dict[str, int]]]:
    """An OFF task's splits, in order: ``(value, positions)`` as get-split would give them."""
    kind, fields = source_of(definition)
    n = positions_of(kind, fields)
    by_chunks = kind in ("range", "list") or (
        kind == "files" and fields.get("split") == "rows" and isinstance(fields.get("rows"), list)
    )
    if by_chunks:
        size = split_size_of(definition)
        for a in range(0, n, size):
            b = min(a + size, n)
            yield {"start": a, "stop": b}, {"start": a, "stop": b}
        return
    items = fields.get("paths") if kind == "files" else fields.get("items")
    for i, item in enumerate(items or []):
        yield item, {"start": i, "stop": i + 1}


def max_splits(definition: Mapping[str, Any], capacity: int) -> int:
    """How many splits one get-split asks for (the Rust worker's rule): one file at a time;
    about a buffer's worth of a range's or list's splits; up to a buffer's worth of items."""
    try:
        kind, _ = source_of(definition)
    except ValueError:
        return 1
    if kind == "files":
        return 1
    if kind == "splits":
        return max(1, min(capacity, MAX_SPLITS))
    size = split_size_of(definition)
    return max(1, min(-(-capacity // size), MAX_SPLITS))


def elements_of(dataset: Mapping[str, Any], value: Any) -> Any:
    """The source elements of a ``range`` or ``list`` split ``{"start", "stop"}`` (positions in
    the source): a ``range`` of the integers, or a list of the values."""
    source = dataset.get("source") if isinstance(dataset, Mapping) else None
    kind, fields = next(iter(source.items())) if isinstance(source, Mapping) else (None, {})
    if kind not in ("range", "list"):
        raise TypeError(
            f"split.elements() is for range and list sources; this one is {kind!s:.40} (use "
            "split.value)"
        )
    if not isinstance(value, Mapping):
        raise TypeError(f"the split {value!r:.80} is not a range of positions")
    a = _count(value.get("start"), "split.start")
    b = _count(value.get("stop"), "split.stop")
    if kind == "list":
        return list((fields.get("elements") or [])[a:b])
    start = _count(fields.get("start", 0), "range.start")
    step = _count(fields.get("step", 1), "range.step")
    return range(start + a * step, start + b * step, step)


class SplitPositions:
    """Where a split lies in the source's positions (``start``, ``stop``), how many of its
    first outputs were consumed before (``skip``: the worker drops them) and the output
    offset it stops before (``until``: what follows was consumed before; ``None``: its end)."""

    __slots__ = ("skip", "start", "stop", "until")

    def __init__(self, start: int, stop: int, skip: int = 0, until: int | None = None) -> None:
        self.start = start
        self.stop = stop
        self.skip = skip
        self.until = until

    def __repr__(self) -> str:
        extra = (f", skip={self.skip}" if self.skip else "") + (
            f", until={self.until}" if self.until is not None else ""
        )
        return f"SplitPositions(start={self.start}, stop={self.stop}{extra})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SplitPositions) and (
            self.start,
            self.stop,
            self.skip,
            self.until,
        ) == (other.start, other.stop, other.skip, other.until)

    __hash__ = None  # type: ignore[assignment]


class Split:
    """One split of a task, as ``fn`` gets it.

    Attributes:
        value: The split as the dispatcher hands it out: ``{"start": a, "stop": b}`` (source
            positions, not values) for a ``range`` or ``list`` source and for Parquet files
            split by rows; the path, as the dataset names it, for a ``files`` source; the item
            itself for a ``splits`` source.
        positions: Where it lies in the source (:class:`SplitPositions`), or ``None`` when the
            dispatcher did not say (an older one).
        dataset: The dataset definition (a dict, in the dispatcher's canonical form).
        split_id: The dispatcher's id of the split (``"0:3"``); ``None`` in an OFF task
            (``parallel_epochs``), whose splits the worker cuts itself.
        task_id, iteration_id, job_id, dataset_id: What the split is part of.
    """

    __slots__ = (
        "dataset",
        "dataset_id",
        "iteration_id",
        "job_id",
        "positions",
        "split_id",
        "task_id",
        "value",
    )

    def __init__(
        self,
        value: Any,
        positions: SplitPositions | None,
        dataset: Mapping[str, Any],
        *,
        split_id: str | None = None,
        task_id: str = "",
        iteration_id: str = "",
        job_id: str = "",
        dataset_id: str = "",
    ) -> None:
        self.value = value
        self.positions = positions
        self.dataset = dataset
        self.split_id = split_id
        self.task_id = task_id
        self.iteration_id = iteration_id
        self.job_id = job_id
        self.dataset_id = dataset_id

    def elements(self) -> Any:
        """The source elements of a ``range`` or ``list`` split: a ``range`` of its integers
        (``range(-5, 5)`` split by 4: ``range(-5, -1)`` for the first split), or a list of its
        values. ``TypeError`` for other sources."""
        return elements_of(self.dataset, self.value)

    def __repr__(self) -> str:
        return f"Split(value={self.value!r:.200}, positions={self.positions!r})"


def make_split(definition: Mapping[str, Any], value: Any, at: Any, split_id: Any) -> Split:
    """The :class:`Split` ``fn`` gets for ``value`` at positions ``at`` (a checked get-split
    entry, or ``None``) of the task ``definition``."""
    positions = None
    if isinstance(at, Mapping):
        positions = SplitPositions(
            int(at["start"]), int(at["stop"]), int(at.get("skip") or 0), at.get("until")
        )
    dataset = definition.get("dataset")
    return Split(
        value,
        positions,
        dataset if isinstance(dataset, Mapping) else {},
        split_id=None if split_id is None else str(split_id),
        task_id=str(definition.get("task_id", "")),
        iteration_id=str(definition.get("iteration_id", "")),
        job_id=str(definition.get("job_id", "")),
        dataset_id=str(definition.get("dataset_id", "")),
    )
