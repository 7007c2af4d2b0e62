#!/usr/bin/env python3
r"""The seed flow (TensorFlow's `DispatchServer` example) through a Python SDK generated from
Shardwise's OpenAPI document: register `range(20)` followed by `take(10)`, built from the SDK's
typed models (`DatasetDef`, `RangeSource`, `TakeTransform`, ...), create a `parallel_epochs` job and an
iteration, heartbeat as its client to learn the tasks, read every task from its worker, release
the client. With one `shardwise worker` it prints `[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]`.

Generate and install the SDK (package `shardwise_client`), then run it against a dispatcher
with a worker:

    pip install -r examples/python/requirements.txt
    openapi-python-client generate --path openapi/openapi.json \
        --output-path target/py-sdk --overwrite
    pip install --no-deps target/py-sdk
    shardwise dispatcher &
    shardwise worker --dispatcher http://127.0.0.1:5050 &
    python3 examples/python/seed_sdk.py --dispatcher http://127.0.0.1:5050

Workers are reached with the dispatcher URL's scheme (a TLS cluster is TLS throughout; give
`--ca-file` for a private CA). A worker or dispatcher that cannot be reached is named in the
error, with the address it was reached at.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.parse

import httpx
from shardwise_client import Client, errors
from shardwise_client.api.clients import client_heartbeat, release_client
from shardwise_client.api.datasets import register_dataset
from shardwise_client.api.jobs import create_iteration, create_job
from shardwise_client.api.worker_data_plane import get_elements
from shardwise_client.models import (
    ClientHeartbeat,
    CreateIteration,
    CreateJob,
    DatasetDef,
    NamedMode,
    Problem,
    RangeArgs,
    RangeSource,
    RegisterDataset,
    TakeTransform,
)

TIMEOUT_S = 60.0  # for the whole epoch


class ProblemError(Exception):
    """A problem+json reply (or an undocumented status) from a generated API function."""


class UnreachableError(Exception):
    """A dispatcher or worker that did not answer: which one, at which URL, and why."""


def ok(response):
    """The parsed reply of a `sync_detailed` call, or ProblemError with the problem's detail."""
    parsed = response.parsed
    if response.status_code == 200 and parsed is not None and not isinstance(parsed, Problem):
        return parsed
    if isinstance(parsed, Problem):
        raise ProblemError(f"{parsed.status} {parsed.code}: {parsed.detail}")
    raise ProblemError(f"{response.status_code}: {response.content!r}")


def read_task(worker: Client, task_id: str, deadline: float) -> list:
    """A task's elements, read until end of sequence. A 404 NOT_FOUND (the worker is still fetching
    the task) and an empty reply (nothing within half a second) mean: ask again."""
    elements: list = []
    while time.monotonic() < deadline:
        response = get_elements.sync_detailed(task_id, client=worker, max_=100)
        if isinstance(response.parsed, Problem) and response.parsed.code == "NOT_FOUND":
            time.sleep(0.05)
            continue
        reply = ok(response)
        elements.extend(reply.elements)
        if reply.end_of_sequence:
            return elements
    raise TimeoutError(f"task {task_id} did not end in {TIMEOUT_S} s")


def seed(dispatcher_url: str, ca_file: str | None = None) -> list:
    try:
        return _seed(dispatcher_url, ca_file)
    except httpx.TransportError as e:
        raise UnreachableError(f"dispatcher {dispatcher_url}: {e or type(e).__name__}") from e


def _seed(dispatcher_url: str, ca_file: str | None) -> list:
    deadline = time.monotonic() + TIMEOUT_S
    scheme = urllib.parse.urlsplit(dispatcher_url).scheme or "http"
    verify = ca_file if ca_file else True
    with Client(
        base_url=dispatcher_url, raise_on_unexpected_status=True, verify_ssl=verify
    ) as dispatcher:
        # `{"source": {"range": {"stop": 20}}, "transforms": [{"take": 10}]}`, typed: each source
        # and transform is its own model (`range_`: the generator's name for the key `range`).
        dataset = DatasetDef(
            source=RangeSource(range_=RangeArgs(stop=20)),
            transforms=[TakeTransform(take=10)],
        )
        body = RegisterDataset(dataset=dataset)
        dataset_id = ok(register_dataset.sync_detailed(client=dispatcher, body=body)).dataset_id
        job = CreateJob(dataset_id=dataset_id, processing_mode=NamedMode.PARALLEL_EPOCHS)
        job_id = ok(create_job.sync_detailed(client=dispatcher, body=job)).job_id
        lease = ok(
            create_iteration.sync_detailed(job_id, client=dispatcher, body=CreateIteration())
        )
        try:
            elements: list = []
            done: set[str] = set()
            while True:
                # The heartbeat lists the iteration's tasks (more may come as workers join) and
                # says when every task is done.
                heartbeat = client_heartbeat.sync_detailed(
                    lease.client_id, client=dispatcher, body=ClientHeartbeat()
                )
                hb = ok(heartbeat)
                for task in hb.tasks:
                    if task.task_id in done or task.worker_lost:
                        continue
                    # Elements come from the worker, over the dispatcher's scheme.
                    url = f"{scheme}://{task.worker_address}"
                    try:
                        with Client(
                            base_url=url, raise_on_unexpected_status=True, verify_ssl=verify
                        ) as worker:
                            elements.extend(read_task(worker, task.task_id, deadline))
                    except httpx.TransportError as e:
                        raise UnreachableError(
                            f"worker {task.worker_address} (task {task.task_id}) at {url}: "
                            f"{e or type(e).__name__}"
                        ) from e
                    done.add(task.task_id)
                if hb.iteration_finished and all(
                    t.task_id in done or t.worker_lost for t in hb.tasks
                ):
                    return elements
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the iteration did not finish in {TIMEOUT_S} s")
                time.sleep(0.05)
        finally:
            ok(release_client.sync_detailed(lease.client_id, client=dispatcher))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dispatcher", default="http://127.0.0.1:5050")
    parser.add_argument("--ca-file", help="PEM CA certificates to trust for https:// URLs")
    args = parser.parse_args()
    try:
        print(seed(args.dispatcher, args.ca_file))
    except (
        ProblemError,
        UnreachableError,
        TimeoutError,
        errors.UnexpectedStatus,
        httpx.HTTPError,
    ) as e:
        print(f"seed_sdk: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
