"""What a reader needs to know of its read's positions, apart from the fold itself
(:mod:`shardwise.positions`): the dataset id it registers (a fingerprint of the definition),
whether the read has exact positions at all, and the lazy fold of a read's origin runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .client import ProcessingMode
from ._native import fingerprint as _fingerprint
from .positions import PositionTracker

#: Why a transform makes positions inexact (``DatasetDef::check_resumable``).
_NOT_RESUMABLE = {
    "shuffle": "`shuffle` buffers elements across splits",
    "batch": "`batch` makes elements out of several splits",
    "take": "`take` and `skip` count elements across splits",
    "skip": "`take` and `skip` count elements across splits",
    "repeat": "`repeat` makes passes over the source that overlap",
}


def fingerprint(dataset: Mapping[str, Any]) -> str | None:
    """A stable id for a dataset definition, the Rust client's: ``fp-`` and 32 hex digits of
    its canonical JSON (so clients that share a job by name register one dataset, whatever
    order their dicts hold the keys in); ``None`` for a definition the core cannot read, which
    is registered without an id for the dispatcher to say what is wrong with it."""
    return _fingerprint(dataset)


def is_dynamic(mode: ProcessingMode) -> bool:
    """``mode`` shards DYNAMIC (``distributed_epoch``)."""
    if isinstance(mode, str):
        return mode == "distributed_epoch"
    return isinstance(mode, Mapping) and mode.get("sharding_policy") == "DYNAMIC"


def positions_unavailable(dataset: Mapping[str, Any], mode: ProcessingMode) -> str | None:
    """Why a read of ``dataset`` in ``mode`` has no exact positions, or ``None``."""
    if not is_dynamic(mode):
        return (
            "read positions need a distributed_epoch (DYNAMIC) read; this one is "
            f"{json.dumps(mode)}"
        )
    transforms = dataset.get("transforms") or []
    for t in transforms if isinstance(transforms, list) else []:
        kind = next(iter(t), None) if isinstance(t, Mapping) and len(t) == 1 else None
        if kind == "shard_hint":
            continue
        why = _NOT_RESUMABLE.get(str(kind), f"the transform {json.dumps(t)[:80]}")
        return (
            "read positions are exact only for a source without transforms (shard_hint "
            f"aside): {why}; shuffle or batch in the trainer instead"
        )
    return None


def fold(tracker: PositionTracker, runs: list[dict[str, Any]] | None, handed: int) -> str | None:
    """Folds the first ``handed`` rows ``runs`` cover into ``tracker``; why the read has no
    position when rows were handed out without origins."""
    if runs is None:
        if handed > 0:
            return (
                "an element without origin was handed out (a worker that does not tag "
                "elements with their origin, or origins that do not cover its elements)"
            )
        return None
    left = handed
    for run in runs:
        if left <= 0:
            break
        taken = min(left, int(run["count"]))
        tracker.consumed(run, taken)
        left -= taken
    return None
