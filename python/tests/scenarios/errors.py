"""Failures surface as ShardwiseError with the problem's code, against a real dispatcher
(and its workers): unknown ids, invalid definitions, refused resumes, reads without
positions, an unreachable dispatcher, and a replica list that fails over.

Usage: errors.py DISPATCHER_URL DEAD_URL (a URL nothing listens on)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from common import check

import shardwise
from shardwise import ShardwiseError

RANGE = {"source": {"range": {"stop": 50}}}
FAST = {"heartbeat_interval": 0.05, "unknown_task_timeout": 30.0}


def refused(call: Callable[[], Any], code: str, status: Any, what: str) -> ShardwiseError:
    try:
        got = call()
    except ShardwiseError as e:
        check(e.code == code and e.status == status, f"{what}: {code} ({status})", e)
        check(e.detail != "", f"{what}: a detail", e)
        print(f"errors: {what}: {e}")
        return e
    check(False, f"{what}: refused", got)
    raise AssertionError  # unreachable


def main(url: str, dead: str) -> None:
    d = shardwise.Dispatcher(url, unavailable_timeout=60)
    e = refused(lambda: d.dataset("no-such-dataset"), "NOT_FOUND", 404, "an unknown dataset id")
    check(not e.is_retryable and e.kind == "problem", "NOT_FOUND is not retried", e)
    refused(
        lambda: d.job("no-such-dataset", processing_mode="distributed_epoch"),
        "NOT_FOUND",
        404,
        "a job over an unknown dataset",
    )
    refused(lambda: d.get_job("987654"), "NOT_FOUND", 404, "an unknown job")
    refused(
        lambda: d.register_dataset({"source": {"nope": {}}}),
        "INVALID_ARGUMENT",
        400,
        "an invalid definition",
    )
    refused(
        lambda: shardwise.distribute(d, {**RANGE, "transforms": [{"batch": {"size": 0}}]}),
        "INVALID_ARGUMENT",
        400,
        "distribute() of an invalid definition",
    )

    # A position of another dataset: the dispatcher refuses to resume from it.
    other = {
        "dataset_id": "another",
        "repetition": 0,
        "done": [{"start": 0, "stop": 5}],
        "partial": [],
    }
    refused(
        lambda: shardwise.distribute(d, RANGE, resume_from=other, **FAST),
        "FAILED_PRECONDITION",
        409,
        "resuming from another dataset's position",
    )

    # A read without exact positions says why, as FAILED_PRECONDITION.
    with shardwise.distribute(d, RANGE, processing_mode="parallel_epochs", **FAST) as r:
        next(r)
        e = refused(r.position, "FAILED_PRECONDITION", None, "position() of parallel_epochs")
        check("distributed_epoch" in e.detail, "names the rule", e)

    # Nothing listens: UNAVAILABLE after unavailable_timeout, retryable.
    e = refused(
        lambda: shardwise.Dispatcher(dead, unavailable_timeout=0.2).version(),
        "UNAVAILABLE",
        None,
        "a dispatcher nothing listens on",
    )
    check(
        e.is_retryable and e.kind == "transport" and "retried for" in e.detail,
        "retried, then given up",
        e,
    )

    # Replicas: the dead one is passed over, and later calls start at the live one.
    pair = shardwise.Dispatcher([dead, url], unavailable_timeout=60)
    check(pair.version()["version"] == 1, "the live replica answers")
    check(
        pair.current == url.rstrip("/"), "calls stay with the replica that answered", pair.current
    )
    with shardwise.distribute(pair, RANGE, **FAST) as r:
        check(sorted(r) == list(range(50)), "a read through the replica list")
    print("errors: the dead replica passed over")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
