"""A Python worker (``shardwise.worker.Worker``) against a scripted dispatcher
(``worker_fakes.FakeDispatcher``): registration, lazily started tasks, splits acknowledged
only once their elements were taken, completion before end of sequence, origins with
``skip`` and ``until``, backpressure, fn's failures, OFF tasks and refused tasks."""

from __future__ import annotations

import threading
import unittest
from collections.abc import Iterator
from typing import Any

from worker_fakes import (
    END,
    FakeDispatcher,
    get,
    merged,
    read_all,
    splits_reply,
    task_def,
    until,
)

from shardwise.worker import Split, Worker


def squares(split: Split) -> Iterator[Any]:
    for i in split.elements():
        yield {"x": i, "y": i * i}


class Protocol(unittest.TestCase):
    def setUp(self) -> None:
        self.d = FakeDispatcher([task_def()])
        self.addCleanup(self.d.close)

    def worker(self, fn: Any = squares, **options: Any) -> Worker:
        options.setdefault("heartbeat_interval", 0.05)
        w = Worker(fn, self.d.url, **options).start()
        self.addCleanup(w.stop)
        return w

    def test_registration_carries_address_uid_and_incarnation(self) -> None:
        w = self.worker(tags=["COLOCATED"])
        first = self.d.heartbeats[0]
        self.assertEqual(first["worker_address"], w.address)
        self.assertEqual(first["tags"], ["COLOCATED"])
        self.assertNotIn("incarnation", first)
        self.assertTrue(first["worker_uid"])
        later = until("a second heartbeat", lambda: self.d.heartbeats[1:])[0]
        self.assertEqual(later["incarnation"], "inc-1")
        self.assertEqual(later["worker_uid"], first["worker_uid"])
        self.assertEqual(later["current_tasks"], ["4000"])
        other = Worker(squares, self.d.url, heartbeat_interval=0.05).start()
        self.addCleanup(other.stop)
        self.assertNotEqual(self.d.heartbeats[-1]["worker_uid"], first["worker_uid"])

    def test_registration_is_retried_while_unavailable_and_a_refusal_raises(self) -> None:
        import socket

        from fakes import problem

        from shardwise import ShardwiseError

        answers = [problem("UNAVAILABLE", 503), problem("UNAVAILABLE", 503)]
        self.d.heartbeat_answer = lambda req: answers.pop() if answers else None
        self.worker()
        self.assertGreaterEqual(len(self.d.heartbeats), 3)
        self.d.heartbeat_answer = lambda req: problem("INVALID_ARGUMENT", 400, "a bad address")
        refused = Worker(squares, self.d.url, port=0)
        with self.assertRaises(ShardwiseError) as e:
            refused.start()
        self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
        self.assertIn("refused to register this worker: a bad address", e.exception.detail)
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", refused.port), timeout=5)

    def test_splits_are_acknowledged_only_once_their_elements_were_taken(self) -> None:
        self.d.splits.extend([splits_reply([(0, 2), (2, 4)]), END])
        w = self.worker()
        self.assertEqual(self.d.get_splits, [], "a task no client reads takes no splits")
        got: list[Any] = []
        runs: list[Any] = []
        while len(got) < 3:
            reply = get(w.url, "/v1/tasks/4000/elements?max=1").json()
            got.extend(reply["elements"])
            runs.extend(reply.get("origin") or [])
        # Three of four elements taken: the batch is not acknowledged, nothing more asked.
        self.assertEqual(len(self.d.get_splits), 1)
        first = self.d.get_splits[0]
        self.assertEqual(first["acknowledge"], [])
        self.assertEqual(first["worker_address"], w.address)
        self.assertEqual(first["max_splits"], 64)
        rest, more_runs = read_all(w.url, max_elements=1)
        self.assertEqual(got + rest, [{"x": i, "y": i * i} for i in range(4)])
        self.assertEqual(self.d.get_splits[1]["acknowledge"], ["0:0", "0:1"])
        self.assertEqual(self.d.completed(), ["4000"], "reported before the end was answered")
        self.assertEqual(
            runs + more_runs,
            [
                {"split": {"start": 0, "stop": 2}, "offset": 0, "count": 1},
                {"split": {"start": 0, "stop": 2}, "offset": 1, "count": 1, "end": True},
                {"split": {"start": 2, "stop": 4}, "offset": 0, "count": 1},
                {"split": {"start": 2, "stop": 4}, "offset": 1, "count": 1, "end": True},
            ],
        )

    def test_end_of_sequence_waits_for_the_dispatchers_acknowledgement(self) -> None:
        self.d.splits.extend([splits_reply([(0, 2)]), END])
        refuse = threading.Event()
        refuse.set()

        def update(req: Any) -> Any:
            from fakes import ok, problem

            if refuse.is_set():
                return problem("UNAVAILABLE", 503)
            return ok({"unknown_tasks": [], "incarnation": "inc-1"})

        self.d.update_answer = update
        w = self.worker()
        until(
            "both elements",
            lambda: len(get(w.url, "/v1/tasks/4000/elements?max=2").json()["elements"]) == 2,
        )
        until("a completion report", lambda: self.d.updates)
        reply = get(w.url, "/v1/tasks/4000/elements").json()
        self.assertEqual(reply, {"elements": [], "end_of_sequence": False})
        refuse.clear()
        read_all(w.url)

    def test_skip_and_until_cut_a_resumed_split(self) -> None:
        asked: list[int] = []

        def counted(split: Split) -> Iterator[int]:
            for i in split.elements():
                asked.append(i)
                yield i

        self.d.pending_tasks = [task_def(split_size=5)]
        self.d.splits.extend(
            [splits_reply([(0, 5), (5, 10)], skip={0: 1, 1: 2}, until={0: 3}), END]
        )
        w = self.worker(counted)
        got, runs = read_all(w.url, max_elements=10)
        self.assertEqual(got, [1, 2, 7, 8, 9])
        self.assertEqual(
            merged(runs),
            [
                {"split": {"start": 0, "stop": 5}, "offset": 1, "count": 2},
                {"split": {"start": 5, "stop": 10}, "offset": 2, "count": 3, "end": True},
            ],
        )
        self.assertNotIn(3, asked, "fn is not asked for outputs from `until` on")

    def test_batches_of_rows_are_cut_at_skip_until_and_reads(self) -> None:
        import numpy as np

        def batches(split: Split) -> Iterator[Any]:
            e = split.elements()
            a = np.arange(e.start, e.stop)
            yield {"v": a[:4]}
            yield {"v": a[4:]}

        self.d.pending_tasks = [task_def(split_size=10)]
        self.d.splits.extend([splits_reply([(0, 10)], skip={0: 3}, until={0: 7}), END])
        w = self.worker(batches)
        got, runs = read_all(w.url, max_elements=3)
        self.assertEqual(got, [{"v": i} for i in range(3, 7)])
        self.assertTrue(all(r["count"] <= 3 for r in runs), runs)
        self.assertEqual(
            merged(runs), [{"split": {"start": 0, "stop": 10}, "offset": 3, "count": 4}]
        )

    def test_files_splits_are_paths_resumed_part_way(self) -> None:
        seen: list[Any] = []

        def lines(split: Split) -> Iterator[str]:
            seen.append((split.value, split.positions))
            for i in range(4):
                yield f"{split.value}:{i}"

        files = {"files": {"paths": ["/d/a.txt", "/d/b.txt"], "format": "lines"}}
        self.d.pending_tasks = [task_def(dataset={"source": files})]
        reply = {
            **END,
            "splits": ["/d/a.txt", "/d/b.txt"],
            "split_ids": ["0:0", "0:1"],
            "positions": [{"start": 0, "stop": 1, "skip": 2}, {"start": 1, "stop": 2}],
            "end_of_splits": False,
        }
        self.d.splits.extend([reply, END])
        w = self.worker(lines)
        got, runs = read_all(w.url, max_elements=10)
        self.assertEqual(got, ["/d/a.txt:2", "/d/a.txt:3"] + [f"/d/b.txt:{i}" for i in range(4)])
        self.assertEqual(
            merged(runs),
            [
                {"split": {"start": 0, "stop": 1}, "offset": 2, "count": 2, "end": True},
                {"split": {"start": 1, "stop": 2}, "offset": 0, "count": 4, "end": True},
            ],
        )
        self.assertEqual([v for v, _ in seen], ["/d/a.txt", "/d/b.txt"])
        self.assertEqual(seen[0][1].skip, 2)

    def test_the_buffer_bounds_what_fn_produces(self) -> None:
        yielded = []

        def endless(split: Split) -> Iterator[int]:
            i = 0
            while True:
                yielded.append(i)
                yield i
                i += 1

        self.d.splits.extend([splits_reply([(0, 2)])])
        w = self.worker(endless, buffer=4)
        self.assertEqual(get(w.url, "/v1/tasks/4000/elements?max=1").status, 200)
        buffered = lambda: self.metric(w, "shardwise_worker_buffered_elements")  # noqa: E731
        # 4 buffered, and fn at most an element or two ahead: the producer takes the next
        # output (to know whether one is its split's last) before it buffers one.
        until("fn to fill the buffer", lambda: buffered() == 4 and len(yielded) >= 6)
        self.assertLessEqual(len(yielded), 7, "the buffer bounds what fn produces")
        got = get(w.url, "/v1/tasks/4000/elements?max=2").json()["elements"]
        self.assertEqual(len(got), 2)
        until("fn to fill the buffer again", lambda: buffered() == 4 and len(yielded) >= 8)
        self.assertLessEqual(len(yielded), 9, "the buffer bounds what fn produces")
        self.assertEqual(len(self.d.get_splits), 1)

    def metric(self, w: Worker, name: str) -> int:
        text = get(w.url, "/metrics").body.decode()
        line = next(x for x in text.splitlines() if x.startswith(name + " "))
        return int(line.split()[1])

    def test_fn_raising_fails_its_task_after_its_elements_and_the_worker_goes_on(self) -> None:
        def flaky(split: Split) -> Iterator[int]:
            if split.dataset["source"].get("list"):
                yield 1
                yield 2
                raise ValueError("no good")
            yield from split.elements()

        bad = task_def("4000", {"source": {"list": {"elements": [1, 2, 3]}}}, split_size=3)
        good = task_def("4001", {"source": {"range": {"stop": 3}}}, split_size=3)
        self.d.pending_tasks = [bad, good]
        self.d.splits.extend([splits_reply([(0, 3)]), splits_reply([(0, 3)])])
        w = self.worker(flaky)
        got: list[Any] = []
        a = None
        for _ in range(200):
            a = get(w.url, "/v1/tasks/4000/elements")
            if a.status != 200:
                break
            got.extend(a.json()["elements"])
        assert a is not None
        self.assertEqual(got, [1, 2], "the elements before the failure are served")
        self.assertEqual(a.status, 400, a.body)
        self.assertEqual(a.json()["code"], "INVALID_ARGUMENT")
        self.assertIn("task 4000 failed: fn raised ValueError: no good", a.json()["detail"])
        self.assertEqual(get(w.url, "/v1/tasks/4000/elements").status, 400, "and stays failed")
        good_elements, _ = read_all(w.url, "4001")
        self.assertEqual(good_elements, [0, 1, 2])

    def test_a_get_split_refused_for_good_fails_the_task(self) -> None:
        from fakes import problem

        self.d.splits.extend([problem("PERMISSION_DENIED", 403, "not yours")])
        w = self.worker()
        a = until(
            "the failure",
            lambda: (r := get(w.url, "/v1/tasks/4000/elements")).status != 200 and r,
        )
        self.assertEqual(a.json()["code"], "PERMISSION_DENIED")
        self.assertIn("get-split failed", a.json()["detail"])

    def test_unavailable_get_splits_and_no_split_yet_are_retried(self) -> None:
        from fakes import problem

        waiting = {**END, "end_of_splits": False, "retry_after_ms": 1}
        self.d.splits.extend([problem("UNAVAILABLE", 503), waiting, splits_reply([(0, 2)]), END])
        w = self.worker()
        got, _ = read_all(w.url)
        self.assertEqual([e["x"] for e in got], [0, 1])
        self.assertEqual(len(self.d.get_splits), 4)

    def test_off_tasks_run_fn_on_every_split_without_origins(self) -> None:
        seen: list[Any] = []

        def record(split: Split) -> Iterator[int]:
            seen.append((split.value, split.split_id))
            yield from split.elements()

        dataset = {"source": {"range": {"start": 10, "stop": 20}}}
        self.d.pending_tasks = [task_def(dataset=dataset, mode="OFF", split_size=4)]
        w = self.worker(record)
        got, runs = read_all(w.url)
        self.assertEqual(got, list(range(10, 20)))
        self.assertEqual(runs, [], "no origins outside DYNAMIC")
        self.assertEqual(
            seen,
            [
                ({"start": 0, "stop": 4}, None),
                ({"start": 4, "stop": 8}, None),
                ({"start": 8, "stop": 10}, None),
            ],
        )
        self.assertEqual(self.d.get_splits, [])

    def test_tasks_a_python_worker_cannot_run_fail_saying_why(self) -> None:
        cases = {
            "4000": (
                task_def("4000", {"source": {"range": {"stop": 5}}, "transforms": [{"take": 2}]}),
                "applies no transform",
            ),
            "4001": (task_def("4001", mode="FILE", num_workers=2, worker_index=0), "FILE"),
            "4002": (task_def("4002", num_consumers=2), "coordinated reads"),
        }
        self.d.pending_tasks = [c[0] for c in cases.values()]
        w = self.worker()
        for task_id, (_, why) in cases.items():
            query = "?consumer_index=0&round=0" if task_id == "4002" else ""
            a = until(
                f"task {task_id} to fail",
                lambda t=task_id, q=query: (
                    (r := get(w.url, f"/v1/tasks/{t}/elements{q}")).status == 409 and r
                ),
            )
            self.assertEqual(a.json()["code"], "FAILED_PRECONDITION")
            self.assertIn(why, a.json()["detail"])

    def test_deleted_and_lost_tasks(self) -> None:
        self.d.splits.extend([splits_reply([(0, 2)]), END])
        endless = {"source": {"range": {"stop": 10**12}}}
        self.d.pending_tasks = [task_def("4000"), task_def("4001", endless, mode="OFF")]
        w = self.worker()
        read_all(w.url, "4000")
        self.assertEqual(get(w.url, "/v1/tasks/4001/elements?max=1").status, 200)  # started
        with self.d.lock:
            self.d.pending_tasks = []
            self.d.to_delete = ["4000", "4001"]
        a = until(
            "the deletions",
            lambda: (r := get(w.url, "/v1/tasks/4001/elements")).status == 409 and r,
        )
        self.assertIn(
            "task 4001 was deleted by the dispatcher before it completed", a.json()["detail"]
        )
        self.assertEqual(
            get(w.url, "/v1/tasks/4000/elements").json(),
            {"elements": [], "end_of_sequence": True},
            "a completed task reads as ended after its deletion",
        )
        # A dispatcher restarted without its state: ids start over, so an old id is unknown.
        with self.d.lock:
            self.d.pending_tasks = [task_def("4002")]
            self.d.incarnation = "inc-2"
        until(
            "the new incarnation",
            lambda: any(h.get("incarnation") == "inc-2" for h in self.d.heartbeats),
        )
        a = get(w.url, "/v1/tasks/4000/elements")
        self.assertEqual((a.status, a.json()["code"]), (404, "NOT_FOUND"))


if __name__ == "__main__":
    unittest.main()
