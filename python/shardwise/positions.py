"""Read positions: where a ``distributed_epoch`` read is, as plain JSON a trainer saves next to
its model checkpoint and resumes from (``docs/read-positions.md``).

Workers tag the elements they serve with *origin runs*: ``count`` consecutive output elements
of one split (a range ``[start, stop)`` of source positions), the first at output offset
``offset`` of that split, ``end`` when the run's last element is the split's last. A reader
folds the runs of the elements it handed to its caller into a :class:`PositionTracker`, whose
:meth:`PositionTracker.position` is the position::

    {"dataset_id": "1000", "repetition": 0,
     "done": [{"start": 0, "stop": 4096}],
     "partial": [{"split": {"start": 4096, "stop": 5120}, "consumed": 200,
                  "more": [{"start": 300, "stop": 310}], "len": 1024}]}

``done`` holds merged ranges of source positions all of whose elements were consumed. A
partial split's consumed output offsets are ``[0, consumed)`` plus the ``more`` ranges; its
``len`` (its output's length) is known once a run with ``end`` was consumed to its last
element. Several readers of one iteration (the ranks of a training job and their loader
workers) each read parts of the same splits, so a position keeps *sets* of consumed offsets,
not only a prefix, and :func:`merge_positions` folds the positions of all of them into one:
what was consumed by any.

The fold and the merge are the Rust core's (``core/src/position/tracker.rs``), through the
package's native module; this module finds positions in checkpoint states.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Optional

from . import _native

__all__ = [
    "MAX_POSITION_ENTRIES",
    "POSITION_KEY",
    "PositionTracker",
    "holds_position",
    "merge_positions",
    "resumed_job_name",
]

#: The most ``done``, ``partial`` and ``more`` entries a position may hold (the dispatcher's
#: bound on ``done`` plus ``partial``): a longer one means a hostile or broken input.
MAX_POSITION_ENTRIES = 100_000

#: The key under which a state (a loader's ``state_dict()``, say) holds a position:
#: :func:`merge_positions` finds positions under it at any depth.
POSITION_KEY = "shardwise_position"

#: How deep :func:`merge_positions` walks nested states.
_MAX_STATE_DEPTH = 64


def _text(position: Any) -> str:
    """A position's JSON text, for the native module (which checks it)."""
    try:
        return json.dumps(position, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as e:
        raise ValueError(f"not a read position: {e}") from None


class PositionTracker:
    """Folds consumed elements, by their origin runs, into a read position (the Rust core's
    fold: a split is *done* once every offset of its output was consumed and its length is
    known; until then it is *partial*, with the set of output offsets consumed; a split read
    twice counts once).

    Every method raises ``ValueError`` for a malformed run or position and then changes
    nothing."""

    __slots__ = ("_native",)

    def __init__(self) -> None:
        self._native = _native.PositionTracker()

    @classmethod
    def resuming(cls, position: Mapping[str, Any]) -> PositionTracker:
        """A tracker that starts from ``position`` (a resumed read goes on from it)."""
        tracker = cls()
        tracker.load(position)
        return tracker

    def copy(self) -> PositionTracker:
        """An independent copy."""
        other = PositionTracker.__new__(PositionTracker)
        other._native = self._native.copy()
        return other

    def load(self, position: Mapping[str, Any]) -> None:
        """Adds what ``position`` consumed."""
        self._native.load(_text(position))

    def consumed(self, run: Mapping[str, Any], taken: int) -> None:
        """The first ``taken`` elements of origin run ``run`` (``split``, ``offset``,
        ``count``, ``end``) were handed out."""
        self._native.consumed(run, taken)

    def position(self, dataset_id: str, repetition: int) -> dict[str, Any]:
        """The position of what was consumed, naming ``dataset_id`` and ``repetition``."""
        return json.loads(self._native.position(dataset_id, repetition))



def _is_position(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        k in value for k in ("dataset_id", "repetition", "done", "partial")
    )


def _positions_in(state: Any) -> Iterator[Mapping[str, Any]]:
    """The positions in ``state``: itself when it is one, else every value under a
    :data:`POSITION_KEY` key of the dicts and lists it nests (``None`` values skipped), in
    order."""
    if isinstance(state, (str, bytes, bytearray)):
        try:
            state = json.loads(state)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"a state given as text must be JSON: {e}") from None
    stack: list[tuple[Any, int]] = [(state, 0)]
    while stack:
        value, depth = stack.pop()
        if _is_position(value):
            yield value
            continue
        if isinstance(value, (Mapping, list, tuple)) and depth > _MAX_STATE_DEPTH:
            raise ValueError(f"the state nests more than {_MAX_STATE_DEPTH} levels deep")
        children: Iterable[Any]
        if isinstance(value, Mapping):
            found = value.get(POSITION_KEY)
            if POSITION_KEY in value and found is not None:
                if not _is_position(found):
                    raise ValueError(f"{POSITION_KEY!r} holds no position: {str(found)!r:.80}")
                yield found
            children = [v for k, v in value.items() if k != POSITION_KEY]
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        stack.extend((c, depth + 1) for c in reversed(list(children)))


def merge_positions(*states: Any) -> dict[str, Any]:
    """One position holding what every one of ``states`` consumed.

    Each argument is a position (a dict, or its JSON text), a list of them, or a state that
    holds positions under a ``"shardwise_position"`` key at any depth (nested dicts and
    lists are walked; ``None`` values are skipped), so that the ``state_dict()`` of every
    rank's loader, with the snapshots of its workers nested inside, can be passed as it is.

    Raises ``ValueError`` when no position is found, when the positions are not of the same
    dataset and repetition (naming both), or when one is malformed.
    """
    found: list[Mapping[str, Any]] = []
    for state in states:
        found.extend(_positions_in(state))
    if not found:
        raise ValueError(f"no read position found (none given, and no {POSITION_KEY!r} key)")
    return json.loads(_native.merge_positions([_text(p) for p in found]))


def resumed_job_name(job_name: str, position: Optional[Mapping[str, Any]]) -> str:
    """The job a read named ``job_name`` uses when it resumes from ``position``: the name
    itself for a fresh read, else the name with a digest of the position appended
    (``name@resume-<16 hex digits>``). Every consumer of a resumed run resumes from the same
    merged position, so they share that job, and none of them meets the stopped run's job,
    whose iteration the dispatcher may still hold under the plain name."""
    if position is None:
        return job_name
    canonical = json.dumps(position, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
    return f"{job_name}@resume-{digest}"


def holds_position(state: Any) -> bool:
    """Whether ``state`` is a position or holds one (not ``None``) under
    :data:`POSITION_KEY`, as :func:`merge_positions` looks for them: a consumer's state before
    it read anything holds none."""
    return next(iter(_positions_in(state)), None) is not None
