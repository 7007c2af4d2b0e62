#!/usr/bin/env python3
"""A Shardwise worker in plain Python: no gRPC, no TensorFlow, only `requests`.

It registers with a `shardwise dispatcher` through worker heartbeats (POST /v1/workers/heartbeat)
and keeps heartbeating. For each DYNAMIC task (a `distributed_epoch` job) over a `splits` source
(e.g. shard file names) or a `files` source, it asks for splits with get-split
(POST /v1/iterations/{id}/splits), processes each split, acknowledges the splits it processed in
its next get-split, and reports the task complete (POST /v1/workers/update). Every split of the
epoch is processed by exactly one worker, and the splits of a worker that dies are handed to the
others. Replace `process()` with real work (open the shard, train on it, ...).

    pip install requests==2.34.2
    python3 examples/python/worker.py --dispatcher http://127.0.0.1:5050

then create a `distributed_epoch` job and an iteration over a `splits` dataset, e.g. with curl:

    D=http://127.0.0.1:5050
    curl -s --json '{"dataset": {"source": {"splits": {"items": ["a", "b", "c"]}}}}' $D/v1/datasets
    curl -s --json '{"dataset_id": "1000", "processing_mode": "distributed_epoch"}' $D/v1/jobs
    curl -s --json '{}' $D/v1/jobs/5000/iterations

It prints one line per event (`registered ...`, `task 4000: split 0:1 "b"`,
`task 4000: completed, 3 splits`) and every problem the dispatcher answers (RFC 9457
problem+json: status, `code`, `detail`) on stderr. Exit status 1 on an error it cannot retry.

A `files` dataset is written by clients, so like `shardwise worker` this worker touches paths
only under its `--data-root` directories (repeatable, or SHARDWISE_WORKER_DATA_ROOT=DIR,DIR):
a path is resolved (`..`, symlinks), must be a regular file under a root (a relative one is
tried under each root in order; never /proc, /sys or /dev), and any other path is skipped
with one message that does not tell whether it exists. Without a root it leaves `files`
tasks alone.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import stat
import sys
import time
import uuid

import requests

TIMEOUT = (5, 30)  # seconds: connect, read
RETRY_FOR = 60.0  # seconds to keep retrying UNAVAILABLE and connection failures


class Problem(Exception):
    """An error reply: the dispatcher's problem+json object (or the raw body if not one)."""

    def __init__(self, method: str, path: str, status: int, body: str):
        try:
            p = json.loads(body)
        except ValueError:
            p = None
        p = p if isinstance(p, dict) else {}
        self.status = status
        self.code = p.get("code", f"HTTP_{status}")
        detail = p.get("detail", body)
        super().__init__(f"{method} {path}: {status} {self.code}: {detail}")


PSEUDO_FILESYSTEMS = ("/proc", "/sys", "/dev")


def under(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


def resolve_under_roots(roots: list[str], path: str) -> str | None:
    """The real path of `path` if it is a regular file under one of `roots` (real paths)."""
    if not isinstance(path, str) or not path or "\0" in path:
        return None
    candidates = [path] if os.path.isabs(path) else [os.path.join(r, path) for r in roots]
    real = next((os.path.realpath(c) for c in candidates if os.path.lexists(c)), None)
    if real is None or not any(under(real, r) for r in roots):
        return None
    if any(under(real, p) for p in PSEUDO_FILESYSTEMS):
        return None
    try:
        return real if stat.S_ISREG(os.stat(real).st_mode) else None
    except OSError:
        return None


def log(*parts: object) -> None:
    print(*parts, flush=True)


def warn(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def process(task_id: str, split_id: str, split: object) -> None:
    """The work: here, print the split (a shard name, a path, ...)."""
    log(f"task {task_id}: split {split_id} {json.dumps(split)}")


class Worker:
    def __init__(
        self,
        dispatcher: str,
        address: str,
        interval: float,
        max_splits: int,
        token: str | None,
        data_roots: list[str] = (),
    ):
        self.dispatcher = dispatcher.rstrip("/")
        self.data_roots = [os.path.realpath(r) for r in data_roots]
        self.address = address
        self.interval = interval
        self.max_splits = max_splits
        self.uid = uuid.uuid4().hex  # new on every start: a restart at the same address is noticed
        self.http = requests.Session()
        if token:
            self.http.headers["Authorization"] = f"Bearer {token}"
        self.incarnation: str | None = None
        self.tasks: dict[str, dict] = {}  # the tasks the dispatcher gave us and has not deleted
        self.pending: collections.deque[dict] = collections.deque()  # tasks to run
        self.next_heartbeat = 0.0

    def post(self, path: str, body: dict) -> dict:
        """POST JSON; retries UNAVAILABLE (503) and connection failures for RETRY_FOR seconds."""
        deadline = time.monotonic() + RETRY_FOR
        delay = 0.05
        while True:
            try:
                r = self.http.post(self.dispatcher + path, json=body, timeout=TIMEOUT)
                if r.status_code == 200:
                    return r.json()
                problem = Problem("POST", path, r.status_code, r.text)
                if r.status_code != 503:
                    raise problem
                retry_after = r.headers.get("Retry-After", "")
                wait = float(retry_after) if retry_after.isdigit() else delay
                error: Exception = problem
            except requests.ConnectionError as e:
                wait, error = delay, e
            if time.monotonic() + wait > deadline:
                raise error
            warn(f"retrying in {wait:.2f} s: {error}")
            time.sleep(wait)
            delay = min(delay * 2, 2.0)

    def heartbeat(self) -> None:
        """Reports our tasks; applies the tasks to delete, then queues the new ones."""
        reply = self.post(
            "/v1/workers/heartbeat",
            {
                "worker_address": self.address,
                "current_tasks": sorted(self.tasks, key=int),  # in order: the cheap path
                "worker_uid": self.uid,
                "incarnation": self.incarnation,
            },
        )
        if self.incarnation is not None and reply["incarnation"] != self.incarnation:
            old, new = self.incarnation, reply["incarnation"]
            warn(f"the dispatcher restarted without its state ({old} -> {new}): dropping our tasks")
        self.incarnation = reply["incarnation"]
        for task_id in reply["tasks_to_delete"]:
            self.tasks.pop(task_id, None)
        for task in reply["new_tasks"]:
            self.tasks[task["task_id"]] = task
            self.pending.append(task)
        self.next_heartbeat = time.monotonic() + self.interval

    def heartbeat_if_due(self) -> None:
        if time.monotonic() >= self.next_heartbeat:
            self.heartbeat()

    def get_splits(self, task: dict, acknowledge: list[str]) -> dict:
        path = f"/v1/iterations/{task['iteration_id']}/splits"
        body = {
            "worker_address": self.address,
            "worker_uid": self.uid,  # only the worker holding the task may take its splits
            "repetition": 0,
            "max_splits": self.max_splits,
            "acknowledge": acknowledge,
        }
        for attempt in range(5):
            try:
                return self.post(path, body)
            except Problem as p:
                # Declared lost (silent past --worker-timeout): a heartbeat rejoins.
                if p.code != "FAILED_PRECONDITION" or "lost" not in str(p) or attempt == 4:
                    raise
                warn(f"{p}; heartbeating to rejoin")
                self.heartbeat()
        raise AssertionError("unreachable")

    def run(self, task: dict) -> bool:
        """Runs one task to its end; True if it completed."""
        task_id, dataset = task["task_id"], task["dataset"]
        dynamic = task["processing_mode"] == "DYNAMIC"
        if (
            not dynamic
            or not {"splits", "files"} & dataset["source"].keys()
            or dataset.get("transforms")
        ):
            warn(
                f"task {task_id}: this example runs DYNAMIC tasks over `splits` or `files` sources "
                "without transforms only; leaving it alone"
            )
            return False
        files = "files" in dataset["source"]
        if files and not self.data_roots:
            warn(
                f"task {task_id}: this worker allows no data roots, so it reads no files: start it "
                "with --data-root DIR to serve files datasets; leaving it alone"
            )
            return False
        log(f"task {task_id}: started (iteration {task['iteration_id']})")
        done, count = [], 0  # processed splits, acknowledged by the next get-split
        while True:
            self.heartbeat_if_due()
            if self.tasks.get(task_id) is not task:  # deleted (ids restart with the dispatcher)
                warn(f"task {task_id}: the dispatcher deleted it before it completed")
                return False
            reply = self.get_splits(task, done)
            done = []
            for split_id, split in zip(reply["split_ids"], reply["splits"], strict=True):
                if files and resolve_under_roots(self.data_roots, split) is None:
                    warn(
                        f"task {task_id}: split {split_id}: path {json.dumps(split)} is not a "
                        "readable file under this worker's data roots; skipped"
                    )
                else:
                    process(task_id, split_id, split)
                done.append(split_id)
                count += 1
            if not reply["splits"]:
                if reply["end_of_splits"]:
                    break
                # Splits are in flight on other workers: one of them may die and leave them to us.
                time.sleep((reply.get("retry_after_ms") or 100) / 1000)
        update = {
            "worker_address": self.address,
            "worker_uid": self.uid,
            "updates": [{"task_id": task_id, "completed": True}],
        }
        reply = self.post("/v1/workers/update", update)
        if reply["unknown_tasks"]:
            warn(f"task {task_id}: the dispatcher does not know it any more")
        log(f"task {task_id}: completed, {count} splits")
        return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add(
        "--dispatcher",
        default=os.environ.get("SHARDWISE_WORKER_DISPATCHER", "http://127.0.0.1:5050"),
    )
    # Addresses are host:port, the host letters, digits, `-` and `.`.
    host = "".join(
        c if c.isascii() and (c.isalnum() or c in ".-") else "-" for c in socket.gethostname()
    )
    add(
        "--address",
        default=f"python-worker-{os.getpid()}.{host.strip('.') or 'localhost'}:1",
        help="this worker's unique name at the dispatcher, as host:port (it serves nothing "
        "there; default: python-worker-PID.HOST:1)",
    )
    add("--heartbeat-interval", type=float, default=1.0, metavar="SECONDS")
    add("--max-splits", type=int, default=4, help="splits per get-split (default 4)")
    add("--token-file", help="a file holding the bearer token for a dispatcher with --auth-tokens")
    env_roots = os.environ.get("SHARDWISE_WORKER_DATA_ROOT", "")
    add(
        "--data-root",
        action="append",
        default=[r for r in env_roots.split(",") if r],
        metavar="DIR",
        help="a directory whose files `files` datasets may name (repeatable)",
    )
    add(
        "--exit-after-tasks",
        type=int,
        default=0,
        metavar="N",
        help="exit after completing N tasks (default 0: run until interrupted)",
    )
    args = parser.parse_args()
    token = open(args.token_file, encoding="utf-8").read().strip() if args.token_file else None
    for root in args.data_root:
        if not os.path.isdir(root):
            warn(f"worker: --data-root {root} is not a directory")
            return 2
    worker = Worker(
        args.dispatcher, args.address, args.heartbeat_interval, args.max_splits, token, args.data_root
    )
    try:
        worker.heartbeat()
        log(f"registered with {worker.dispatcher} as {worker.address}")
        completed = 0
        while not args.exit_after_tasks or completed < args.exit_after_tasks:
            while worker.pending:
                completed += worker.run(worker.pending.popleft())
            time.sleep(max(0.0, worker.next_heartbeat - time.monotonic()))
            worker.heartbeat()
    except (Problem, requests.RequestException) as e:
        warn(f"worker: {e}")
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
