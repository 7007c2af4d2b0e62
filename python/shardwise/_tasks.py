"""The tasks of a read as the reader keeps them, and the checks of what the dispatcher
and the caller hand it (see :mod:`shardwise.reader`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .client import Backoff
from .errors import ShardwiseError

#: The most elements (rows) one request may ask for.
MAX_ELEMENTS_PER_REQUEST = 10_000
#: The shortest gap between heartbeats asking whether the iteration finished (seconds).
NUDGE_GAP = 0.02
#: How long to wait before asking again to release the lease, and how often to ask.
RELEASE_RETRY = 0.05
RELEASE_ATTEMPTS = 2


class Task:
    """One task as this reader reads it."""

    __slots__ = (
        "address",
        "backoff",
        "done",
        "info",
        "reading",
        "retry_at",
        "task_id",
        "unavailable_since",
        "unknown_since",
    )

    def __init__(self, info: Mapping[str, Any]) -> None:
        self.task_id = str(info["task_id"])
        self.address = str(info["worker_address"])  # where reads go: the first address listed
        self.info = info
        self.done = bool(info.get("worker_lost"))
        self.reading = False  # a read of it is under way
        self.retry_at: float | None = None
        self.backoff = Backoff(0.005, 0.5)
        self.unknown_since: float | None = None
        self.unavailable_since: float | None = None

    def ready(self, now: float) -> bool:
        """It may be read at ``now``: not over, not being read, and not waiting for a retry."""
        return (
            not self.done
            and not self.reading
            and (self.retry_at is None or self.retry_at <= now)
        )


def check_count(count: Any) -> None:
    """``ValueError`` unless ``count`` is a valid ``elements_per_request``."""
    if (
        isinstance(count, bool)
        or not isinstance(count, int)
        or not 1 <= count <= MAX_ELEMENTS_PER_REQUEST
    ):
        raise ValueError(f"elements_per_request must be in 1..={MAX_ELEMENTS_PER_REQUEST}")


def task_info(value: Any, context: str) -> dict[str, Any]:
    """A heartbeat's task, checked for what the reader uses."""
    if (
        not isinstance(value, Mapping)
        or "task_id" not in value
        or not isinstance(value.get("worker_address"), str)
    ):
        raise ShardwiseError.protocol("a task without task_id or worker_address", context=context)
    info = dict(value)
    info["task_id"] = str(info["task_id"])
    return info


def gave_up(e: ShardwiseError, retried_for: float) -> ShardwiseError:
    """The error that ends a read whose retries of ``e`` ran out after ``retried_for`` s."""
    return ShardwiseError(
        "UNAVAILABLE",
        f"{e.detail} (retried for {retried_for:.1f} s)",
        status=e.status,
        extra=e.extra,
        context=e.context,
        kind=e.kind if e.kind in ("transport", "redirect") else "problem",
    )
