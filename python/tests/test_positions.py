"""The read-position fold: the cases of ``position_cases.json`` (and of the shared
``core/src/position/vectors.json`` when the repository has it), and properties checked
against a brute-force model on seeded random reads."""

from __future__ import annotations

import json
import os
import random
import time
import unittest
from pathlib import Path
from typing import Any

from shardwise import PositionTracker, merge_positions
from shardwise.positions import MAX_POSITION_ENTRIES

HERE = Path(__file__).resolve().parent
#: The shared cases of the Rust core and this package (when the checkout has them);
#: ``SHARDWISE_POSITION_VECTORS`` names another file.
VECTORS = Path(
    os.environ.get("SHARDWISE_POSITION_VECTORS")
    or HERE.parent.parent / "core" / "src" / "position" / "vectors.json"
)


def run(start: int, stop: int, offset: int, count: int, end: bool = False) -> dict[str, Any]:
    r: dict[str, Any] = {"split": {"start": start, "stop": stop}, "offset": offset, "count": count}
    if end:
        r["end"] = True
    return r


def normalized(position: dict[str, Any]) -> dict[str, Any]:
    """A position with ``more`` left out when empty and ``len`` when null."""
    p = dict(position)
    partial = []
    for entry in p.get("partial", []):
        e = dict(entry)
        if not e.get("more"):
            e.pop("more", None)
        if e.get("len") is None:
            e.pop("len", None)
        partial.append(e)
    p["partial"] = partial
    return p


def first(case: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in case:
            return case[k]
    return None


def check_case(test: unittest.TestCase, case: dict[str, Any]) -> None:
    """Runs one case: see the ``about`` of ``position_cases.json`` for its format (a few
    synonyms are read too: ``positions`` for ``resume_from``, ``ops`` or ``consumed`` for
    ``steps``, ``expected`` for ``expect``)."""
    name = case.get("name", "?")
    expect = first(case, "expect", "expected")
    error = first(case, "expect_error", "error")
    merge = case.get("merge")
    if merge is not None:
        if error is not None:
            with test.assertRaises(ValueError, msg=name):
                merge_positions(*merge)
            return
        test.assertEqual(normalized(merge_positions(*merge)), normalized(expect), name)
        return
    tracker = PositionTracker()
    for p in first(case, "resume_from", "positions") or []:
        tracker.load(p)
    for step in first(case, "steps", "ops", "consumed") or []:
        r = step["run"]
        tracker.consumed(r, step.get("taken", r["count"]))
    got = tracker.position(case.get("dataset_id", "d"), case.get("repetition", 0))
    test.assertIsNotNone(expect, f"{name}: no expected position")
    test.assertEqual(normalized(got), normalized(expect), name)


def check_vector(test: unittest.TestCase, case: dict[str, Any]) -> None:
    """Runs one case of the shared ``vectors.json`` (its ``about`` says the format): every
    consumer folds its runs, each position is as written, and so is their merge."""
    name = case["name"]
    positions = []
    for consumer in case["consumers"]:
        tracker = PositionTracker()
        for start, stop, offset, count, end, taken in consumer:
            tracker.consumed(run(start, stop, offset, count, end), taken)
        positions.append(tracker.position("d", 0))
    want = [normalized(p) for p in case["positions"]]
    test.assertEqual([normalized(p) for p in positions], want, name)
    merged = merge_positions(*positions)
    test.assertEqual(normalized(merged), normalized(case["merged"]), name)
    for p in positions:
        test.assertEqual(normalized(merge_positions(merged, p)), normalized(case["merged"]), name)


def load_cases(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    cases = data["cases"] if isinstance(data, dict) else data
    if not isinstance(cases, list) or not cases:
        raise AssertionError(f"{path}: no cases")
    return cases


class Cases(unittest.TestCase):
    def test_the_package_cases(self) -> None:
        for case in load_cases(HERE / "position_cases.json"):
            with self.subTest(case=case.get("name")):
                check_case(self, case)

    def test_the_shared_vectors(self) -> None:
        # The checkout always has them: the Rust core folds the same cases.
        for case in load_cases(VECTORS):
            with self.subTest(case=case.get("name")):
                check_vector(self, case)


class Fold(unittest.TestCase):
    def test_a_position_is_plain_json_and_resumes_to_itself(self) -> None:
        t = PositionTracker()
        t.consumed(run(0, 100, 0, 10), 10)
        t.consumed(run(0, 100, 50, 5, end=False), 5)
        t.consumed(run(100, 101, 2, 3, end=True), 3)
        t.consumed(run(200, 210, 0, 10, end=True), 10)
        p = t.position("ds", 3)
        self.assertEqual(json.loads(json.dumps(p)), p)
        self.assertEqual(PositionTracker.resuming(p).position("ds", 3), p)
        self.assertEqual(merge_positions(json.dumps(p)), p)

    def test_copies_are_independent(self) -> None:
        t = PositionTracker()
        t.consumed(run(0, 10, 0, 3), 3)
        c = t.copy()
        c.consumed(run(0, 10, 3, 7, end=True), 7)
        self.assertEqual(t.position("d", 0)["partial"][0]["consumed"], 3)
        self.assertEqual(c.position("d", 0)["done"], [{"start": 0, "stop": 10}])

    def test_malformed_runs_and_positions_are_value_errors_and_change_nothing(self) -> None:
        t = PositionTracker()
        t.consumed(run(0, 10, 0, 2), 2)
        before = t.position("d", 0)
        bad_runs: list[Any] = [
            None,
            [],
            {"split": {"start": 0, "stop": 10}, "offset": 0},
            {"split": {"start": 0, "stop": 10}, "offset": -1, "count": 1},
            {"split": {"start": 0, "stop": 10}, "offset": True, "count": 1},
            {"split": {"start": 0, "stop": 10}, "offset": 1.5, "count": 1},
            {"split": {"start": 0, "stop": 10}, "offset": 0, "count": 1, "end": "yes"},
            {"split": {"start": 0, "stop": 10}, "offset": 0, "count": 1, "extra": 1},
            {"split": {"start": 0}, "offset": 0, "count": 1},
            {"split": [0, 10], "offset": 0, "count": 1},
            {"split": {"start": 0, "stop": 2**64}, "offset": 0, "count": 1},
        ]
        for r in bad_runs:
            with self.subTest(run=r), self.assertRaises(ValueError):
                t.consumed(r, 1)
        with self.assertRaises(ValueError):
            t.consumed(run(0, 10, 2, 2), -1)
        good = {"dataset_id": "d", "repetition": 0, "done": [], "partial": []}
        bad_positions: list[Any] = [
            {},
            {**good, "dataset_id": 7},
            {**good, "repetition": -1},
            {**good, "done": {}},
            {**good, "done": [{"start": 0}]},
            {**good, "extra": 1},
            {**good, "partial": [{"split": {"start": 0, "stop": 1}}]},
            {
                **good,
                "partial": [
                    {"split": {"start": 0, "stop": 1}, "consumed": 1, "more": [{"start": 2}]}
                ],
            },
            {**good, "partial": [{"split": {"start": 0, "stop": 1}, "consumed": 1, "len": None}]},
            {**good, "partial": [{"split": {"start": 0, "stop": 1}, "consumed": 1, "lens": 3}]},
            {**good, "done": [{"start": 0, "stop": 1}] * (MAX_POSITION_ENTRIES + 1)},
            {
                **good,
                "partial": [
                    {
                        "split": {"start": 0, "stop": 1},
                        "consumed": 1,
                        "more": [{"start": 2, "stop": 3}] * MAX_POSITION_ENTRIES,
                    }
                ],
            },
        ]
        for p in bad_positions:
            with self.subTest(position=str(p)[:120]), self.assertRaises(ValueError):
                t.load(p)
        self.assertEqual(t.position("d", 0), before)

    def test_inverted_ranges_in_a_position_are_empty(self) -> None:
        p = {
            "dataset_id": "d",
            "repetition": 0,
            "done": [{"start": 9, "stop": 3}],
            "partial": [
                {
                    "split": {"start": 0, "stop": 10},
                    "consumed": 2,
                    "more": [{"start": 6, "stop": 4}],
                }
            ],
        }
        got = PositionTracker.resuming(p).position("d", 0)
        self.assertEqual(got["done"], [])
        self.assertEqual(got["partial"], [{"split": {"start": 0, "stop": 10}, "consumed": 2}])

    def test_huge_values_saturate_at_the_servers_bound(self) -> None:
        t = PositionTracker()
        top = 2**64 - 1
        t.consumed(run(0, 10, top - 1, 5, end=True), 5)
        self.assertEqual(t.position("d", 0)["partial"][0]["len"], top)


class Merge(unittest.TestCase):
    def test_states_are_walked_for_their_positions(self) -> None:
        a = PositionTracker()
        a.consumed(run(0, 100, 0, 60), 60)
        b = PositionTracker()
        b.consumed(run(0, 100, 60, 40, end=True), 40)
        c = PositionTracker()
        c.consumed(run(100, 200, 0, 100, end=True), 100)
        # Two ranks' loader states, their workers' snapshots nested as torchdata nests them.
        rank0 = {
            "_snapshot": {
                "_worker_snapshots": {
                    "worker_0": {"dataset_state": {"shardwise_position": a.position("d", 0)}},
                    "worker_1": {"dataset_state": {"shardwise_position": None}},
                }
            },
            "_steps": 3,
        }
        rank1 = {
            "worker_states": [
                {"shardwise_position": b.position("d", 0)},
                ({"shardwise_position": c.position("d", 0)},),
            ]
        }
        want = {
            "dataset_id": "d",
            "repetition": 0,
            "done": [{"start": 0, "stop": 200}],
            "partial": [],
        }
        self.assertEqual(merge_positions(rank0, rank1), want)
        self.assertEqual(merge_positions([rank0, rank1]), want, "one list of states")
        self.assertEqual(merge_positions(json.dumps(rank0), rank1), want, "JSON text")

    def test_errors_name_what_is_wrong(self) -> None:
        with self.assertRaisesRegex(ValueError, "no read position found"):
            merge_positions({"model": {"w": [1, 2]}})
        with self.assertRaisesRegex(ValueError, "no read position found"):
            merge_positions()
        with self.assertRaisesRegex(ValueError, "'a' repetition 0 and dataset 'b' repetition 2"):
            merge_positions(
                {"dataset_id": "a", "repetition": 0, "done": [], "partial": []},
                {
                    "shardwise_position": {
                        "dataset_id": "b",
                        "repetition": 2,
                        "done": [],
                        "partial": [],
                    }
                },
            )
        with self.assertRaisesRegex(ValueError, "holds no position"):
            merge_positions({"shardwise_position": {"dataset_id": "a"}})
        with self.assertRaisesRegex(ValueError, "must be JSON"):
            merge_positions("{not json")
        deep: Any = {"shardwise_position": None}
        for _ in range(10_000):
            deep = {"x": [deep]}
        with self.assertRaisesRegex(ValueError, "levels deep"):
            merge_positions(deep)


class Cost(unittest.TestCase):
    def test_merging_grows_with_the_entries_not_their_square(self) -> None:
        # One reader has a split spanning 10^12 positions under way and n small ones; the
        # other finished one position inside each small split. Nothing merges away, so each
        # merge walks every entry; a merge that looks at every split under way for each done
        # range is quadratic (70 s of CPU for n = 50,000).
        big = 10**12

        def positions(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
            under_way = [{"split": {"start": 0, "stop": big}, "consumed": 1}]
            under_way += [
                {"split": {"start": big + 10 * i, "stop": big + 10 * i + 10}, "consumed": 1}
                for i in range(n)
            ]
            done = [{"start": big + 10 * i + 5, "stop": big + 10 * i + 6} for i in range(n)]
            return (
                {"dataset_id": "d", "repetition": 0, "done": [], "partial": under_way},
                {"dataset_id": "d", "repetition": 0, "done": done, "partial": []},
            )

        def cost(n: int) -> float:
            a, b = positions(n)
            best = float("inf")
            for _ in range(2):
                started = time.process_time()
                merged = merge_positions(a, b)
                best = min(best, time.process_time() - started)
            self.assertEqual((len(merged["done"]), len(merged["partial"])), (n, n + 1))
            return best

        small, large = cost(2_000), cost(20_000)
        # Ten times the entries: about ten times the work, not a hundred.
        self.assertLess(large, 30 * max(small, 1e-3), f"{small:.3f} s -> {large:.3f} s")


def model_consumed(position: dict[str, Any], splits: list[tuple[int, int]]) -> set[int]:
    """The source positions a position says were consumed, for splits whose output offsets
    are their positions (a range's)."""
    got: set[int] = set()
    for r in position["done"]:
        got.update(range(r["start"], r["stop"]))
    for e in position["partial"]:
        s = e["split"]["start"]
        got.update(range(s, s + e["consumed"]))
        for m in e.get("more", []):
            got.update(range(s + m["start"], s + m["stop"]))
    return got


class Properties(unittest.TestCase):
    """Seeded random reads of range splits by several readers: the merged position is exactly
    what any reader consumed, whatever the order, and a split consumed whole is done."""

    def random_reads(
        self, rng: random.Random
    ) -> tuple[list[tuple[int, int]], list[list[dict[str, Any]]]]:
        splits = []
        at = 0
        for _ in range(rng.randint(1, 8)):
            n = rng.randint(1, 12)
            splits.append((at, at + n))
            at += n
        readers: list[list[dict[str, Any]]] = [[] for _ in range(rng.randint(1, 4))]
        for start, stop in splits:
            n = stop - start
            offset = 0
            while offset < n:
                count = rng.randint(1, n - offset)
                readers[rng.randrange(len(readers))].append(
                    run(start, stop, offset, count, end=offset + count == n)
                )
                offset += count
        return splits, readers

    def test_merged_positions_hold_exactly_what_was_consumed(self) -> None:
        rng = random.Random(20251203)
        for trial in range(300):
            splits, readers = self.random_reads(rng)
            want: set[int] = set()
            positions = []
            for runs in readers:
                t = PositionTracker()
                for r in runs:
                    taken = r["count"] if rng.random() < 0.8 else rng.randint(0, r["count"])
                    t.consumed(r, taken)
                    s = r["split"]["start"]
                    want.update(range(s + r["offset"], s + r["offset"] + taken))
                positions.append(t.position("d", 0))
            merged = merge_positions(*positions)
            self.assertEqual(model_consumed(merged, splits), want, f"trial {trial}")
            shuffled = list(positions)
            rng.shuffle(shuffled)
            self.assertEqual(merge_positions(*shuffled), merged, f"trial {trial}: order")
            every = set(range(splits[0][0], splits[-1][1]))
            if want == every:
                self.assertEqual(merged["partial"], [], f"trial {trial}")
                self.assertEqual(merged["done"], [{"start": 0, "stop": splits[-1][1]}])
            done_at = {p for r in merged["done"] for p in range(r["start"], r["stop"])}
            for start, stop in splits:
                whole = set(range(start, stop)) <= want
                self.assertEqual(whole, set(range(start, stop)) <= done_at, f"trial {trial}")


if __name__ == "__main__":
    unittest.main()
