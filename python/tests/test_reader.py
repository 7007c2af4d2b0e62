"""The reader against a scripted dispatcher and worker (``fakes.FakeCluster``): the
protocol's retries, lost workers, the end of the read, the lease, and lazy positions."""

from __future__ import annotations

import io
import json
import time
import unittest
from typing import Any

from fakes import FakeCluster, ok, problem

from shardwise import Dispatcher, Reader, ShardwiseError, distribute

RANGE = {"source": {"range": {"stop": 100}}}


def origin(
    start: int, stop: int, offset: int, count: int, end: bool = False
) -> list[dict[str, Any]]:
    r: dict[str, Any] = {"split": {"start": start, "stop": stop}, "offset": offset, "count": count}
    if end:
        r["end"] = True
    return [r]


def elements(values: list[int], runs: Any = None, end: bool = False) -> dict[str, Any]:
    e: dict[str, Any] = {"elements": values, "end_of_sequence": end}
    if runs is not None:
        e["origin"] = runs
    return e


def read(cluster: FakeCluster, dataset: Any = RANGE, **options: Any) -> Reader:
    options.setdefault("heartbeat_interval", 0.05)
    options.setdefault("unavailable_timeout", 10.0)
    return distribute(Dispatcher(cluster.url, timeout=5), dataset, **options)


class Protocol(unittest.TestCase):
    def test_every_task_is_read_through_retries_and_the_lease_is_released(self) -> None:
        tasks = {
            "4000": [
                problem("NOT_FOUND", 404, "no task yet"),
                elements([0, 1], origin(0, 3, 0, 2)),
                elements([2], origin(0, 3, 2, 1, end=True), end=True),
            ],
            "4001": [
                problem("UNAVAILABLE", 503),
                elements([10, 11], origin(10, 12, 0, 2, end=True)),
                elements([], end=True),
            ],
        }
        with FakeCluster(tasks) as c:
            r = read(c, elements_per_request=7)
            got = list(r)
            self.assertEqual(sorted(got), [0, 1, 2, 10, 11])
            self.assertEqual(
                r.position()["done"], [{"start": 0, "stop": 3}, {"start": 10, "stop": 12}]
            )
            self.assertTrue(r.closed)
            self.assertEqual(c.server.count("DELETE", "/v1/clients/3000"), 1)
            reads = [q for q in c.requests if q.path.endswith("/elements")]
            self.assertTrue(all(q.query == {"max": "7"} for q in reads), [q.query for q in reads])
            beats = [q.json() for q in c.requests if q.path.endswith("/heartbeat")]
            self.assertEqual(beats[0], {})
            self.assertTrue(all(b == {"known_tasks_version": 7} for b in beats[1:]), beats)
            setup = [(q.method, q.path) for q in c.requests[:4]]
            self.assertEqual(
                setup,
                [
                    ("GET", "/v1/version"),
                    ("POST", "/v1/datasets"),
                    ("POST", "/v1/jobs"),
                    ("POST", "/v1/jobs/5000/iterations"),
                ],
            )
            job = c.requests[2].json()
            self.assertEqual(job["processing_mode"], "distributed_epoch")
            self.assertTrue(c.requests[1].json()["dataset_id"].startswith("fp-"))

    def test_tasks_of_lost_workers_are_skipped(self) -> None:
        with FakeCluster(
            {"4000": [elements([1], end=True)], "4001": [elements([2])]}, lost=("4001",)
        ) as c:
            self.assertEqual(list(read(c)), [1])
            self.assertEqual(c.server.count("GET", "/v1/tasks/4001/elements"), 0)

    def test_a_refusal_ends_the_read_after_what_was_read_before(self) -> None:
        tasks = {
            "4000": [elements([1, 2]), problem("FAILED_PRECONDITION", 409, "task 4000 failed")]
        }
        with FakeCluster(tasks) as c:
            r = read(c, processing_mode="parallel_epochs")
            self.assertEqual([next(r), next(r)], [1, 2])
            with self.assertRaises(ShardwiseError) as cm:
                next(r)
            e = cm.exception
            self.assertEqual(
                (e.code, e.status, e.detail), ("FAILED_PRECONDITION", 409, "task 4000 failed")
            )
            self.assertIn("GET /v1/tasks/4000/elements at 127.0.0.1:", e.context or "")
            self.assertEqual(c.server.count("DELETE", "/v1/clients/3000"), 1)
            with self.assertRaises(StopIteration):
                next(r)

    def test_a_worker_that_never_knows_its_task_ends_the_read(self) -> None:
        tasks = {"4000": [problem("NOT_FOUND", 404, "no task 4000")] * 3}
        with FakeCluster(tasks) as c:
            with self.assertRaises(ShardwiseError) as cm:
                list(read(c, unknown_task_timeout=0.0))
            self.assertEqual(cm.exception.code, "NOT_FOUND")

    def test_a_dispatcher_restart_ends_the_read(self) -> None:
        with FakeCluster({"4000": [elements([1])]}) as c:
            c.heartbeat = lambda req: ok(
                {
                    "tasks": [],
                    "tasks_version": 1,
                    "tasks_unchanged": False,
                    "iteration_finished": False,
                    "incarnation": "inc-2",
                }
            )
            with self.assertRaises(ShardwiseError) as cm:
                list(read(c))
            self.assertEqual(cm.exception.code, "FAILED_PRECONDITION")
            self.assertIn("inc-1 -> inc-2", cm.exception.detail)

    def test_a_heartbeat_refused_ends_the_read(self) -> None:
        with FakeCluster({"4000": [elements([1])]}) as c:
            c.heartbeat = lambda req: problem("NOT_FOUND", 404, "no client 3000")
            with self.assertRaises(ShardwiseError) as cm:
                list(read(c))
            self.assertEqual(
                (cm.exception.code, cm.exception.context),
                ("NOT_FOUND", "POST /v1/clients/3000/heartbeat"),
            )

    def test_an_iteration_without_tasks_ends(self) -> None:
        with FakeCluster({}) as c:
            c.heartbeat = lambda req: ok(
                {
                    "tasks": [],
                    "tasks_version": 1,
                    "iteration_finished": True,
                    "incarnation": "inc-1",
                }
            )
            self.assertEqual(list(read(c)), [])

    def test_close_releases_the_lease_and_stops(self) -> None:
        with FakeCluster({"4000": [elements([1, 2, 3]), elements([4])]}) as c:
            with read(c) as r:
                self.assertEqual(next(r), 1)
            self.assertTrue(r.closed)
            self.assertEqual(c.server.count("DELETE", "/v1/clients/3000"), 1)
            with self.assertRaises(StopIteration):
                next(r)
            r.close()
            self.assertEqual(c.server.count("DELETE", "/v1/clients/3000"), 1, "idempotent")

    def test_malformed_answers_end_the_read(self) -> None:
        for bad in [
            {"elements": "x", "end_of_sequence": False},
            {"elements": [1], "end_of_sequence": False, "origin": [{"split": 1}]},
        ]:
            with self.subTest(bad=bad), FakeCluster({"4000": [lambda req, b=bad: ok(b)]}) as c:
                with self.assertRaises(ShardwiseError) as cm:
                    list(read(c))
                self.assertEqual((cm.exception.code, cm.exception.kind), ("INTERNAL", "protocol"))


def poll(what: str, condition: Any, seconds: float = 10.0) -> None:
    """Waits (bounded) until ``condition()`` holds."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.005)


class ReadAhead(unittest.TestCase):
    def test_prefetch_reads_are_fetched_while_the_caller_is_away_and_no_more(self) -> None:
        reads = [elements([10 * i, 10 * i + 1], origin(0, 100, 2 * i, 2)) for i in range(6)]
        with FakeCluster({"4000": reads}) as c:
            r = read(c, prefetch=2)
            gets = lambda: c.server.count("GET", "/v1/tasks/4000/elements")  # noqa: E731
            beats = lambda: c.server.count("POST", "/v1/clients/3000/heartbeat")  # noqa: E731
            self.assertEqual(next(r), 0)
            # The read being handed out and two more, fetched without the caller.
            poll("two reads ahead", lambda: gets() == 3)
            # Full: the thread only heartbeats (the lease is kept) and reads nothing more.
            seen = beats()
            poll("two more heartbeats", lambda: beats() >= seen + 2)
            self.assertEqual(gets(), 3)
            # Reads fetched ahead are not in the position; the handed-out element is.
            self.assertEqual(
                r.position()["partial"], [{"split": {"start": 0, "stop": 100}, "consumed": 1}]
            )
            self.assertEqual([next(r) for _ in range(5)], [1, 10, 11, 20, 21])
            r.close()
            self.assertEqual(
                r.position()["partial"], [{"split": {"start": 0, "stop": 100}, "consumed": 6}]
            )
            self.assertEqual(c.server.count("DELETE", "/v1/clients/3000"), 1)

    def test_prefetch_0_reads_only_when_the_caller_waits(self) -> None:
        reads = [elements([i], origin(0, 100, i, 1)) for i in range(4)]
        with FakeCluster({"4000": reads}) as c:
            r = read(c, prefetch=0)
            gets = lambda: c.server.count("GET", "/v1/tasks/4000/elements")  # noqa: E731
            beats = lambda: c.server.count("POST", "/v1/clients/3000/heartbeat")  # noqa: E731
            self.assertEqual(next(r), 0)
            seen = beats()
            poll("two more heartbeats", lambda: beats() >= seen + 2)
            self.assertEqual(gets(), 1, "nothing read before it is wanted")
            self.assertEqual(next(r), 1)
            self.assertEqual(gets(), 2)
            r.close()

    def test_an_error_comes_after_every_element_read_before_it(self) -> None:
        tasks = {
            "4000": [
                elements([1, 2]),
                elements([3]),
                problem("INVALID_ARGUMENT", 400, "refused"),
            ]
        }
        with FakeCluster(tasks) as c:
            r = read(c, prefetch=8)
            # The thread reaches the refusal before the caller takes anything.
            poll("the refusal", lambda: c.server.count("GET", "/v1/tasks/4000/elements") == 3)
            poll("the end of the read", lambda: r.closed)
            self.assertEqual([next(r), next(r), next(r)], [1, 2, 3])
            with self.assertRaises(ShardwiseError) as cm:
                next(r)
            self.assertEqual(cm.exception.code, "INVALID_ARGUMENT")
            with self.assertRaises(StopIteration):
                next(r)

    def test_a_reader_dropped_without_close_stops_its_thread(self) -> None:
        import gc
        import threading

        with FakeCluster({"4000": [elements([1, 2])] * 50}) as c:
            r = read(c, prefetch=1)
            self.assertEqual(next(r), 1)
            name = f"shardwise-read-{r.client_id}"
            del r
            gc.collect()
            poll(
                "the reader's thread ends",
                lambda: not any(t.name == name for t in threading.enumerate()),
            )


class Positions(unittest.TestCase):
    def test_positions_count_what_was_handed_out(self) -> None:
        tasks = {
            "4000": [
                elements([0, 1, 2, 3, 4], origin(0, 10, 0, 5)),
                elements([5, 6, 7, 8, 9], origin(0, 10, 5, 5, end=True), end=True),
            ]
        }
        with FakeCluster(tasks) as c:
            r = read(c)
            self.assertEqual(r.position()["partial"], [], "nothing handed out yet")
            self.assertEqual([next(r), next(r)], [0, 1])
            self.assertEqual(
                r.position()["partial"], [{"split": {"start": 0, "stop": 10}, "consumed": 2}]
            )
            rest = list(r)
            self.assertEqual(rest, list(range(2, 10)))
            p = r.position()
            self.assertEqual(
                p,
                {
                    "dataset_id": p["dataset_id"],
                    "repetition": 0,
                    "done": [{"start": 0, "stop": 10}],
                    "partial": [],
                },
            )

    def test_what_close_drops_was_not_handed_out(self) -> None:
        with FakeCluster({"4000": [elements([0, 1, 2, 3, 4], origin(0, 10, 0, 5))]}) as c:
            r = read(c)
            self.assertEqual([next(r), next(r)], [0, 1])
            r.close()
            self.assertEqual(
                r.position()["partial"], [{"split": {"start": 0, "stop": 10}, "consumed": 2}]
            )

    def test_a_resumed_read_goes_on_from_its_position(self) -> None:
        start = {
            "dataset_id": "mine",
            "repetition": 2,
            "done": [{"start": 0, "stop": 5}],
            "partial": [],
        }
        tasks = {"4000": [elements([5], origin(5, 6, 0, 1, end=True), end=True)]}
        with FakeCluster(tasks) as c:
            r = read(c, dataset_id="mine", resume_from=json.dumps(start))
            self.assertEqual(list(r), [5])
            self.assertEqual(r.position()["done"], [{"start": 0, "stop": 6}])
            self.assertEqual(r.position()["repetition"], 2)
            it = [q.json() for q in c.requests if q.path.endswith("/iterations")][0]
            self.assertEqual(it, {"repetition": 2, "resume_from": start})

    def test_reads_without_exact_positions_say_why(self) -> None:
        cases: list[tuple[dict[str, Any], Any, str]] = [
            ({"processing_mode": "parallel_epochs"}, RANGE, "distributed_epoch"),
            (
                {},
                {
                    **RANGE,
                    "transforms": [{"shard_hint": {}}, {"shuffle": {"buffer": 4, "seed": 1}}],
                },
                "`shuffle` buffers",
            ),
            ({}, {**RANGE, "transforms": [{"batch": {"size": 2}}]}, "`batch`"),
            ({}, RANGE, "without origin"),
        ]
        for options, dataset, why in cases:
            with (
                self.subTest(why=why),
                FakeCluster({"4000": [elements([1]), elements([2], end=True)]}) as c,
            ):
                r = read(c, dataset=dataset, **options)
                next(r)
                with self.assertRaises(ShardwiseError) as cm:
                    r.position()
                self.assertEqual(cm.exception.code, "FAILED_PRECONDITION")
                self.assertIn(why, cm.exception.detail)
                r.close()

    def test_origins_that_do_not_cover_the_elements_count_as_none(self) -> None:
        with FakeCluster(
            {"4000": [elements([1, 2], origin(0, 10, 0, 1)), elements([3], end=True)]}
        ) as c:
            r = read(c)
            next(r)
            with self.assertRaisesRegex(ShardwiseError, "without origin"):
                r.position()
            r.close()


class Arrow(unittest.TestCase):
    def test_record_batches_with_their_origins(self) -> None:
        import pyarrow as pa

        def stream(ids: list[int], runs: Any, end: bool) -> Any:
            schema = pa.schema(
                [("id", pa.int64())], metadata={"shardwise.origin": json.dumps(runs), "kept": "yes"}
            )
            sink = io.BytesIO()
            with pa.ipc.new_stream(sink, schema) as w:
                w.write_batch(pa.record_batch([pa.array(ids[:2], pa.int64())], schema=schema))
                w.write_batch(pa.record_batch([pa.array(ids[2:], pa.int64())], schema=schema))
            headers = {
                "content-type": "application/vnd.apache.arrow.stream",
                "shardwise-end-of-sequence": "true" if end else "false",
            }
            return 200, headers, sink.getvalue()

        tasks = {
            "4000": [
                stream([0, 1, 2], origin(0, 1, 0, 3), False),
                stream([3, 4, 5], origin(0, 1, 3, 3, end=True), True),
            ]
        }
        with FakeCluster(tasks) as c:
            r = read(c, format="arrow", arrow_compression="zstd")
            first = next(r)
            self.assertEqual(first.column("id").to_pylist(), [0, 1])
            self.assertEqual(first.schema.metadata, {b"kept": b"yes"}, "the origin key is gone")
            self.assertEqual(
                r.position()["partial"], [{"split": {"start": 0, "stop": 1}, "consumed": 2}]
            )
            rest = [b.column("id").to_pylist() for b in r]
            self.assertEqual(rest, [[2], [3, 4], [5]])
            self.assertEqual(r.position()["done"], [{"start": 0, "stop": 1}])
            reads = [q for q in c.requests if q.path.endswith("/elements")]
            self.assertEqual(reads[0].headers["accept"], "application/vnd.apache.arrow.stream")
            self.assertEqual(reads[0].headers["shardwise-arrow-compression"], "zstd")


class Options(unittest.TestCase):
    def test_bad_options_are_refused_before_any_call(self) -> None:
        with FakeCluster({}) as c:
            bad: list[dict[str, Any]] = [
                {"elements_per_request": 0},
                {"elements_per_request": 10_001},
                {"elements_per_request": True},
                {"prefetch": -1},
                {"prefetch": 65},
                {"prefetch": 1.5},
                {"format": "csv"},
                {"arrow_compression": "gzip"},
                {"heartbeat_interval": 0},
                {"target_workers": "SOME"},
                {"target_workers": "LOCAL"},
                {
                    "processing_mode": "parallel_epochs",
                    "resume_from": {"dataset_id": "d", "repetition": 0, "done": [], "partial": []},
                },
                {"resume_from": {"dataset_id": "d"}},
                {"resume_from": "{"},
            ]
            for options in bad:
                with self.subTest(options=options), self.assertRaises((ValueError, TypeError)):
                    read(c, **options)
            with self.assertRaises(ValueError):
                read(c, dataset="{nope")
            self.assertEqual(c.requests, [])
            with read(c) as r:
                r.elements_per_request = 10_000
                for bad_count in (0, 10_001, 2.5):
                    with self.assertRaises(ValueError):
                        r.elements_per_request = bad_count  # type: ignore[assignment]
                self.assertEqual(r.elements_per_request, 10_000)
            c.requests.clear()
            with self.assertRaises(TypeError):
                read(c, dataset="[1]")
            self.assertEqual(c.requests, [])

    def test_the_protocol_version_is_checked(self) -> None:
        with FakeCluster({}) as c:
            answer = c.answer
            c.server.handler = lambda req: (
                ok({"version": 2, "incarnation": "x", "fault_tolerant": False})
                if req.path == "/v1/version"
                else answer(req)
            )
            with self.assertRaisesRegex(ShardwiseError, "protocol version 2, this client 1"):
                read(c)


if __name__ == "__main__":
    unittest.main()
