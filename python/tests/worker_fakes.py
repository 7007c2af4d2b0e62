"""A scripted dispatcher for the Python worker's unit tests (:class:`FakeDispatcher`), and
helpers to read from a worker."""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import urllib3
from fakes import FakeServer, Request, ok, problem

RANGE = {"source": {"range": {"stop": 100}}}
INCARNATION = "inc-1"


def task_def(
    task_id: str = "4000",
    dataset: Any = RANGE,
    mode: str = "DYNAMIC",
    split_size: int = 2,
    **extra: Any,
) -> dict[str, Any]:
    """A task definition as a heartbeat reply carries it."""
    d = {
        "task_id": task_id,
        "iteration_id": "2000",
        "job_id": "5000",
        "dataset_id": "1000",
        "dataset": dataset,
        "processing_mode": mode,
        "num_workers": None,
        "worker_index": None,
        "num_split_providers": 1,
        "split_size": split_size,
        "num_consumers": None,
        "starting_round": 0,
        "cross_trainer_cache": False,
    }
    d.update(extra)
    return d


def splits_reply(
    chunks: list[tuple[int, int]],
    *,
    skip: dict[int, int] | None = None,
    until: dict[int, int] | None = None,
    end: bool = False,
    first_index: int = 0,
) -> dict[str, Any]:
    """A get-split reply handing out range chunks (with positions)."""
    positions = []
    for i, (a, b) in enumerate(chunks):
        p: dict[str, Any] = {"start": a, "stop": b}
        if skip and i in skip:
            p["skip"] = skip[i]
        if until and i in until:
            p["until"] = until[i]
        positions.append(p)
    return {
        "splits": [{"start": a, "stop": b} for a, b in chunks],
        "split_ids": [f"0:{first_index + i}" for i in range(len(chunks))],
        "positions": positions,
        "end_of_splits": end,
        "retry_after_ms": None,
        "incarnation": INCARNATION,
    }


END = {
    "splits": [],
    "split_ids": [],
    "end_of_splits": True,
    "retry_after_ms": None,
    "incarnation": INCARNATION,
}


class FakeDispatcher:
    """A dispatcher that registers workers, hands them ``tasks`` (once each), answers
    get-splits from ``splits`` in order (then the end of the splits), and acknowledges
    completion reports. Every request is recorded."""

    def __init__(self, tasks: list[dict[str, Any]] | None = None) -> None:
        self.lock = threading.Lock()
        self.pending_tasks = list(tasks or [])
        self.assigned: set[str] = set()
        self.to_delete: list[str] = []
        self.splits: collections.deque[Any] = collections.deque()
        self.incarnation = INCARNATION
        self.heartbeats: list[dict[str, Any]] = []
        self.get_splits: list[dict[str, Any]] = []
        self.updates: list[dict[str, Any]] = []
        self.update_answer: Callable[[Request], Any] | None = None
        self.heartbeat_answer: Callable[[Request], Any] | None = None
        self.server = FakeServer(self.answer)
        self.url = self.server.url

    def close(self) -> None:
        self.server.close()

    def __enter__(self) -> FakeDispatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def answer(self, req: Request) -> Any:
        m, p = req.method, req.path
        body = req.json() or {}
        with self.lock:
            if (m, p) == ("POST", "/v1/workers/heartbeat"):
                self.heartbeats.append(body)
                replaced = self.heartbeat_answer(req) if self.heartbeat_answer else None
                if replaced is not None:
                    return replaced
                current = set(body.get("current_tasks") or [])
                new = [t for t in self.pending_tasks if t["task_id"] not in current]
                delete, self.to_delete = self.to_delete, []
                return ok(
                    {
                        "new_tasks": new,
                        "tasks_to_delete": delete,
                        "incarnation": self.incarnation,
                    }
                )
            if m == "POST" and p.startswith("/v1/iterations/") and p.endswith("/splits"):
                self.get_splits.append(body)
                step = self.splits.popleft() if self.splits else END
                if callable(step):
                    step = step(req)
                if isinstance(step, tuple):
                    return step
                return ok(step)
            if (m, p) == ("POST", "/v1/workers/update"):
                self.updates.append(body)
                if self.update_answer is not None:
                    return self.update_answer(req)
                return ok({"unknown_tasks": [], "incarnation": self.incarnation})
        return problem("NOT_FOUND", 404, f"no route {m} {p}")

    def completed(self) -> list[str]:
        """The task ids reported complete, in order."""
        with self.lock:
            return [u["task_id"] for b in self.updates for u in b["updates"] if u["completed"]]


def elements(split: Any) -> Any:
    """A worker's fn for the command line's tests: the split's source elements."""
    return split.elements()


def until(what: str, cond: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Polls ``cond`` until it answers something true (returned), for at most ``timeout``."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


_pool = urllib3.PoolManager(retries=False)


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


def get(url: str, path: str, headers: dict[str, str] | None = None, method: str = "GET") -> Answer:
    """One request to a worker: its status, headers (lower-case names) and body."""
    r = _pool.request(method, url + path, headers=headers or {}, timeout=10.0, redirect=False)
    return Answer(r.status, {k.lower(): v for k, v in r.headers.items()}, r.data)


def read_all(url: str, task: str = "4000", max_elements: int = 3) -> tuple[list[Any], list[Any]]:
    """Every element of a task read as JSON until its end (answers must be 200), and every
    origin run."""
    out: list[Any] = []
    runs: list[Any] = []

    def step() -> bool:
        a = get(url, f"/v1/tasks/{task}/elements?max={max_elements}")
        if a.status == 404:
            return False
        assert a.status == 200, a.body
        reply = a.json()
        out.extend(reply["elements"])
        runs.extend(reply.get("origin") or [])
        return reply["end_of_sequence"]

    until("the task's end", step, timeout=20)
    return out, runs


def merged(runs: list[Any]) -> list[Any]:
    """Origin runs with consecutive runs of one split joined (how reads cut them depends on
    when they came)."""
    out: list[Any] = []
    for r in runs:
        last = out[-1] if out else None
        if (
            last is not None
            and last["split"] == r["split"]
            and last["offset"] + last["count"] == r["offset"]
            and not last.get("end")
        ):
            last["count"] += r["count"]
            if r.get("end"):
                last["end"] = True
        else:
            out.append(dict(r))
    return out
