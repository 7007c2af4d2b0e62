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

The fold is the one the Rust core implements (``core/src/position/tracker.rs``); the shared
cases in ``core/src/position/vectors.json`` hold both to it.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Optional

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

#: The largest value a position's integers may have (the servers read them as ``u64``).
_U64_MAX = 2**64 - 1

#: How deep :func:`merge_positions` walks nested states.
_MAX_STATE_DEPTH = 64

Interval = tuple[int, int]


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be a non-negative integer, got {value!r:.80}")
    if value < 0 or value > _U64_MAX:
        raise ValueError(f"{what} must be in 0..=2^64-1, got {value}")
    return value


def _obj(
    value: Any, what: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be an object, got {type(value).__name__}")
    missing = [k for k in required if k not in value]
    if missing:
        raise ValueError(f"{what} lacks {', '.join(repr(k) for k in missing)}")
    unknown = [k for k in value if k not in required and k not in optional]
    if unknown:
        raise ValueError(f"{what} has unknown field {str(unknown[0])!r:.80}")
    return value


def _range(value: Any, what: str) -> Interval:
    r = _obj(value, what, ("start", "stop"))
    return _int(r["start"], f"{what}.start"), _int(r["stop"], f"{what}.stop")


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be an array, got {type(value).__name__}")
    return value


def _add_interval(intervals: list[Interval], a: int, b: int) -> None:
    """Adds ``[a, b)`` to sorted, disjoint, non-touching ``intervals``, merging it with those
    it overlaps or touches."""
    if a >= b:
        return
    lo = bisect.bisect_left(intervals, (a, a))
    if lo > 0 and intervals[lo - 1][1] >= a:
        lo -= 1
    hi = lo
    while hi < len(intervals) and intervals[hi][0] <= b:
        hi += 1
    if lo < hi:
        a = min(a, intervals[lo][0])
        b = max(b, intervals[hi - 1][1])
    intervals[lo:hi] = [(a, b)]


class _Split:
    """A split under way: its consumed output offsets and, once known, its output length."""

    __slots__ = ("intervals", "len")

    def __init__(self) -> None:
        self.intervals: list[Interval] = []
        self.len: int | None = None

    def copy(self) -> _Split:
        s = _Split()
        s.intervals = list(self.intervals)
        s.len = self.len
        return s

    def complete(self) -> bool:
        """Its whole output was consumed: ``len`` is known and the offsets are ``[0, len)``."""
        return self.len is not None and self.intervals == [(0, self.len)]


class PositionTracker:
    """Folds consumed elements, by their origin runs, into a read position.

    A split is *done* once every offset of its output was consumed and its length is known
    (a run with ``end`` was consumed to its last element); done splits merge into ``done``
    ranges, so a position stays as small as the number of splits under way. Until then a
    split is *partial*, with the set of output offsets consumed. A split read twice (handed
    out again after its worker was lost) counts once: consumed offsets and lengths only grow.

    A partial split of more than one position whose unconsumed offsets all lie, as source
    positions, in ``done`` ranges is done too: a resumed read hands the rest of a split out
    as splits of their own, and once those are done, so is the original split.
    """

    def __init__(self) -> None:
        # Done ranges, merged: disjoint, not touching, sorted (two parallel lists).
        self._starts: list[int] = []
        self._stops: list[int] = []
        # Splits under way, by (start, stop), and their keys sorted.
        self._partial: dict[Interval, _Split] = {}
        self._keys: list[Interval] = []
        # The longest split ever under way, to find those overlapping a range.
        self._max_span = 0

    @classmethod
    def resuming(cls, position: Mapping[str, Any]) -> PositionTracker:
        """A tracker that starts from ``position`` (a resumed read goes on from where it
        resumed). Raises ``ValueError`` when ``position`` is not a valid position."""
        t = cls()
        t.load(position)
        return t

    def copy(self) -> PositionTracker:
        """An independent copy."""
        t = PositionTracker()
        t._starts = list(self._starts)
        t._stops = list(self._stops)
        t._partial = {k: s.copy() for k, s in self._partial.items()}
        t._keys = list(self._keys)
        t._max_span = self._max_span
        return t

    def load(self, position: Mapping[str, Any]) -> None:
        """Adds what ``position`` consumed to this tracker: its ``done`` ranges, then its
        partial splits' offsets and lengths, then the done rules. Raises ``ValueError`` (and
        changes nothing) when ``position`` is not a valid position."""
        done, partials = _parse_position(position)
        for a, b in done:
            self._mark_done(a, b)
        loaded: list[Interval] = []
        for key, intervals, length in partials:
            if key[0] >= key[1] or self._is_done(*key) or not intervals:
                continue
            s = self._partial.get(key)
            if s is None:
                s = self._insert(key)
            for a, b in intervals:
                _add_interval(s.intervals, a, b)
            if length is not None:
                s.len = max(s.len or 0, length)
            loaded.append(key)
        for key in loaded:
            s = self._partial.get(key)
            if s is None:
                continue  # done meanwhile
            if s.complete() or self._rest_is_done(key, s):
                self._remove(key)
                self._mark_done(*key)
            elif self._is_done(*key):
                self._remove(key)

    def consumed(self, run: Mapping[str, Any], taken: int) -> None:
        """The first ``taken`` elements of origin run ``run`` (``{"split": {"start",
        "stop"}, "offset", "count", "end"?}``) were handed to the caller (more than
        ``count`` counts as ``count``). Raises ``ValueError`` for a malformed run."""
        (start, stop), offset, count, end = _parse_run(run, "run")
        taken = min(_int(taken, "taken"), count)
        if taken == 0 or start >= stop or self._is_done(start, stop):
            return
        key = (start, stop)
        s = self._partial.get(key)
        if s is None:
            s = self._insert(key)
        _add_interval(s.intervals, offset, min(offset + taken, _U64_MAX))
        if end and taken == count:
            s.len = max(s.len or 0, min(offset + count, _U64_MAX))
        if s.complete():
            self._remove(key)
            self._mark_done(start, stop)

    def position(self, dataset_id: str, repetition: int) -> dict[str, Any]:
        """The position: ``dataset_id`` and ``repetition`` name what was read."""
        partial = []
        for key in self._keys:
            s = self._partial[key]
            consumed = 0
            more = s.intervals
            if more and more[0][0] == 0:
                consumed = more[0][1]
                more = more[1:]
            entry: dict[str, Any] = {
                "split": {"start": key[0], "stop": key[1]},
                "consumed": consumed,
            }
            if more:
                entry["more"] = [{"start": a, "stop": b} for a, b in more]
            if s.len is not None:
                entry["len"] = s.len
            partial.append(entry)
        return {
            "dataset_id": dataset_id,
            "repetition": repetition,
            "done": [{"start": a, "stop": b} for a, b in zip(self._starts, self._stops)],
            "partial": partial,
        }

    # -- done ranges ---------------------------------------------------------------------

    def _is_done(self, start: int, stop: int) -> bool:
        """All of ``[start, stop)`` lies in one done range."""
        i = bisect.bisect_right(self._starts, start) - 1
        return i >= 0 and self._stops[i] >= stop

    def _add_done(self, start: int, stop: int) -> Interval:
        """Adds ``[start, stop)`` to the done ranges, merged: the range it became part of."""
        lo = bisect.bisect_left(self._stops, start)  # first range ending at or after start
        hi = bisect.bisect_right(self._starts, stop)  # ranges starting at or before stop
        if lo < hi:
            start = min(start, self._starts[lo])
            stop = max(stop, self._stops[hi - 1])
        self._starts[lo:hi] = [start]
        self._stops[lo:hi] = [stop]
        return start, stop

    def _mark_done(self, start: int, stop: int) -> None:
        """``[start, stop)`` is done; then so is every partial split the done rules make done."""
        work = [(start, stop)]
        while work:
            a, b = work.pop()
            if a >= b:
                continue
            ms, me = self._add_done(a, b)
            for key in self._overlapping(ms, me):
                s = self._partial[key]
                if self._is_done(*key):
                    self._remove(key)
                elif self._rest_is_done(key, s):
                    self._remove(key)
                    work.append(key)

    def _rest_is_done(self, key: Interval, s: _Split) -> bool:
        """A split of more than one position whose offsets lie within its positions, and
        whose every unconsumed offset, as a source position, is in a done range."""
        start, stop = key
        n = stop - start
        if n <= 1 or not s.intervals or s.intervals[-1][1] > n:
            return False
        at = 0
        for a, b in s.intervals:
            if a > at and not self._is_done(start + at, start + a):
                return False
            at = b
        return at >= n or self._is_done(start + at, stop)

    # -- partial splits ------------------------------------------------------------------

    def _insert(self, key: Interval) -> _Split:
        s = _Split()
        self._partial[key] = s
        bisect.insort(self._keys, key)
        self._max_span = max(self._max_span, key[1] - key[0])
        return s

    def _remove(self, key: Interval) -> None:
        del self._partial[key]
        i = bisect.bisect_left(self._keys, key)
        del self._keys[i]

    def _overlapping(self, start: int, stop: int) -> list[Interval]:
        """The partial splits overlapping ``[start, stop)``."""
        lo = bisect.bisect_left(self._keys, (max(0, start - self._max_span), 0))
        hi = bisect.bisect_left(self._keys, (stop, 0))
        return [k for k in self._keys[lo:hi] if k[1] > start]


def _parse_run(run: Any, what: str) -> tuple[Interval, int, int, bool]:
    r = _obj(run, what, ("split", "offset", "count"), ("end",))
    end = r.get("end", False)
    if not isinstance(end, bool):
        raise ValueError(f"{what}.end must be a boolean, got {end!r:.80}")
    return (
        _range(r["split"], f"{what}.split"),
        _int(r["offset"], f"{what}.offset"),
        _int(r["count"], f"{what}.count"),
        end,
    )


def parse_runs(value: Any) -> list[tuple[Interval, int, int, bool]]:
    """Origin runs (a JSON array) as tuples; ``ValueError`` when malformed."""
    return [_parse_run(r, f"origin[{i}]") for i, r in enumerate(_list(value, "origin"))]


def _parse_position(
    position: Any,
) -> tuple[list[Interval], list[tuple[Interval, list[Interval], int | None]]]:
    p = _obj(position, "position", ("dataset_id", "repetition", "done", "partial"))
    if not isinstance(p["dataset_id"], str):
        raise ValueError("position.dataset_id must be a string")
    _int(p["repetition"], "position.repetition")
    done_list = _list(p["done"], "position.done")
    partial_list = _list(p["partial"], "position.partial")
    entries = len(done_list) + len(partial_list)
    if entries > MAX_POSITION_ENTRIES:
        raise ValueError(
            f"a position holds at most {MAX_POSITION_ENTRIES} entries, this one {entries}"
        )
    done = [_range(r, f"position.done[{i}]") for i, r in enumerate(done_list)]
    partials = []
    for i, entry in enumerate(partial_list):
        what = f"position.partial[{i}]"
        e = _obj(entry, what, ("split", "consumed"), ("more", "len"))
        key = _range(e["split"], f"{what}.split")
        consumed = _int(e["consumed"], f"{what}.consumed")
        intervals = [(0, consumed)] if consumed > 0 else []
        more = _list(e.get("more", []), f"{what}.more")
        entries += len(more)
        if entries > MAX_POSITION_ENTRIES:
            raise ValueError(f"a position holds at most {MAX_POSITION_ENTRIES} entries")
        for j, r in enumerate(more):
            a, b = _range(r, f"{what}.more[{j}]")
            if a < b:
                intervals.append((a, b))
        length = _int(e["len"], f"{what}.len") if "len" in e else None
        partials.append((key, intervals, length))
    return done, partials


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
    """One position holding what every one of ``states`` consumed: a tracker resumed from
    each position in turn.

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
    first = found[0]
    tracker = PositionTracker()
    for p in found:
        if (p["dataset_id"], p["repetition"]) != (first["dataset_id"], first["repetition"]):
            raise ValueError(
                "positions of different reads cannot be merged: dataset "
                f"{str(first['dataset_id'])!r:.80} repetition {first['repetition']!r:.40} and "
                f"dataset {str(p['dataset_id'])!r:.80} repetition {p['repetition']!r:.40}"
            )
    for p in found:
        tracker.load(p)
    return tracker.position(first["dataset_id"], first["repetition"])


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
