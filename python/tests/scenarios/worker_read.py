"""Reads for the Python workers' black-box tests (``tests/tests/python_worker.rs``): each
prints its result as one JSON line on stdout for the test to check.

* ``both URL N``: a JSON read and an Arrow read of ``range(N)``: ``{"json": [[x, y, pid]...],
  "arrow": [...], "json_tasks": [...], "json_position": ...}``.
* ``pause URL N TAKE``: reads ``TAKE`` elements, then one at a time until a worker process
  is part way through a split, prints ``{"paused": [[x, y, pid]...], "victim": that pid,
  "position": ...}``, waits for a line on stdin, reads the rest and prints ``{"rest": [...],
  "position": ...}``. It never reads ahead of what it handed out before the pause.
* ``stop URL N TAKE``: reads ``TAKE`` elements, prints them and the position, and releases.
* ``resume URL N POSITION_JSON``: an Arrow read from the position: ``{"rest": [...],
  "position": ...}``.
* ``boom URL``: a read whose ``fn`` raises: ``{"code", "detail", "before": [...]}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import shardwise

FAST = {"heartbeat_interval": 0.05, "unknown_task_timeout": 30.0, "unavailable_timeout": 60.0}
SPLIT = 20


def dataset(n: int) -> dict[str, Any]:
    return {"source": {"range": {"stop": n}}}


def rows_of(item: Any) -> list[list[int]]:
    return [[item["x"], item["y"], item["pid"]]]


def arrow_rows(batch: Any) -> list[list[int]]:
    cols = [batch.column(c).to_pylist() for c in ("x", "y", "pid")]
    return [list(r) for r in zip(*cols)]


def out(value: Any) -> None:
    print(json.dumps(value), flush=True)


def both(url: str, n: int) -> None:
    with shardwise.distribute(url, dataset(n), split_size=SPLIT, **FAST) as r:
        got = [row for e in r for row in rows_of(e)]
        position, tasks = r.position(), r.tasks
    with shardwise.distribute(
        url, dataset(n), split_size=SPLIT, format="arrow", arrow_compression="lz4", **FAST
    ) as r:
        arrow = [row for b in r for row in arrow_rows(b)]
    out({"json": got, "arrow": arrow, "json_tasks": tasks, "json_position": position})


def pause(url: str, n: int, take: int) -> None:
    # prefetch=0: nothing is read ahead while paused, so all the killed process served
    # reached the caller before it died.
    r = shardwise.distribute(
        url, dataset(n), split_size=SPLIT, elements_per_request=10, prefetch=0, **FAST
    )
    before: list[list[int]] = []

    def take_one() -> None:
        # Never more than is handed out: what was read is what the caller has.
        r.elements_per_request = max(1, min(10, take - len(before)))
        before.extend(rows_of(next(r)))

    while len(before) < take:
        take_one()
    # Then one at a time until a process is part way through a split (splits are aligned
    # chunks of SPLIT): that split is in flight, not acknowledged, when the process dies.
    while True:
        latest: dict[int, int] = {}
        for x, _, pid in before:
            latest[pid] = x // SPLIT
        split_of = {pid: sum(1 for x, _, p in before if p == pid and x // SPLIT == s)
                    for pid, s in latest.items()}  # fmt: skip
        partial = [pid for pid, k in split_of.items() if k < SPLIT]
        if partial:
            break
        take_one()
    out({"paused": before, "victim": partial[0], "position": r.position()})
    sys.stdin.readline()
    r.elements_per_request = 10
    rest = [row for e in r for row in rows_of(e)]
    out({"rest": rest, "position": r.position()})


def stop(url: str, n: int, take: int) -> None:
    r = shardwise.distribute(url, dataset(n), split_size=SPLIT, elements_per_request=9, **FAST)
    before = [row for _ in range(take) for row in rows_of(next(r))]
    position = r.position()
    r.close()
    out({"before": before, "position": position})


def resume(url: str, n: int, position: str) -> None:
    with shardwise.distribute(
        url,
        dataset(n),
        split_size=SPLIT,
        resume_from=json.loads(position),
        format="arrow",
        elements_per_request=13,
        **FAST,
    ) as r:
        rest = [row for b in r for row in arrow_rows(b)]
        out({"rest": rest, "position": r.position()})


def boom(url: str) -> None:
    before: list[Any] = []
    try:
        for e in shardwise.distribute(url, {"source": {"list": {"elements": ["boom"]}}}, **FAST):
            before.append(e)
    except shardwise.ShardwiseError as e:
        out({"code": e.code, "detail": e.detail, "before": before})
        return
    out({"code": None, "before": before})


if __name__ == "__main__":
    mode, url, *rest = sys.argv[1:]
    if mode == "both":
        both(url, int(rest[0]))
    elif mode == "pause":
        pause(url, int(rest[0]), int(rest[1]))
    elif mode == "stop":
        stop(url, int(rest[0]), int(rest[1]))
    elif mode == "resume":
        resume(url, int(rest[0]), rest[1])
    elif mode == "boom":
        boom(url)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
