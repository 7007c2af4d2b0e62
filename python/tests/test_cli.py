"""``python -m shardwise`` against a scripted cluster: its commands, outputs and exit
statuses."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import unittest

from fakes import FakeCluster, problem

from shardwise.__main__ import main


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (1 if e.code else 0)
            if isinstance(e.code, str):
                err.write(e.code)
    return code, out.getvalue(), err.getvalue()


def run_of(start: int, stop: int, offset: int, count: int, end: bool = False) -> dict:
    r = {"split": {"start": start, "stop": stop}, "offset": offset, "count": count}
    return {**r, "end": True} if end else r


class Cli(unittest.TestCase):
    def test_version(self) -> None:
        with FakeCluster({}) as c:
            code, out, _ = run(["version", c.url])
            self.assertEqual(code, 0)
            self.assertEqual(json.loads(out)["version"], 1)

    def test_read_prints_elements_then_the_position(self) -> None:
        tasks = {
            "4000": [
                {"elements": [0, 1], "origin": [run_of(0, 5, 0, 2)]},
                {"elements": [2, 3], "origin": [run_of(0, 5, 2, 2)]},
                {"elements": [4], "origin": [run_of(0, 5, 4, 1, True)], "end_of_sequence": True},
            ]
        }
        with FakeCluster(tasks) as c:
            code, out, err = run(
                ["read", c.url, '{"source": {"range": {"stop": 5}}}', "--max", "2"]
            )
            self.assertEqual(code, 0, err)
            self.assertEqual(out.splitlines(), ["0", "1"])
            self.assertEqual(
                json.loads(err)["partial"], [{"split": {"start": 0, "stop": 5}, "consumed": 2}]
            )
            reads = [q.query["max"] for q in c.requests if q.path.endswith("/elements")]
            self.assertEqual(reads, ["2"], "no more asked for than --max wants")
            self.assertEqual(c.server.count("DELETE", "/v1/clients/3000"), 1)

    def test_read_of_a_file_and_a_position_file(self) -> None:
        # A worker writes NaN, which JSON lacks, as the string "NaN".
        tasks = {"4000": [{"elements": [{"s": "é", "x": "NaN"}], "end_of_sequence": True}]}
        with FakeCluster(tasks) as c, tempfile.TemporaryDirectory() as d:
            dataset = os.path.join(d, "ds.json")
            with open(dataset, "w") as f:
                f.write('{"source": {"range": {"stop": 1}}}')
            code, out, err = run(
                ["read", c.url, "@" + dataset, "--processing-mode", "parallel_epochs"]
            )
            self.assertEqual(code, 0, err)
            self.assertEqual(json.loads(out), {"s": "é", "x": "NaN"})
            self.assertIn("shardwise: no read position: ", err)
            code, _, err = run(["read", c.url, "@" + os.path.join(d, "missing.json")])
            self.assertEqual(code, 1)
            self.assertIn("cannot read the dataset file", err)

    def test_errors_and_usage(self) -> None:
        with FakeCluster({"4000": [problem("FAILED_PRECONDITION", 409, "task 4000 failed")]}) as c:
            code, _, err = run(["read", c.url, '{"source": {"range": {"stop": 5}}}'])
            self.assertEqual(code, 1)
            self.assertIn("FAILED_PRECONDITION (409): task 4000 failed", err)
        for argv in (
            [],
            ["nope"],
            ["read", "http://h:1"],
            ["read", "http://h:1", "{}", "--max", "x"],
        ):
            with self.subTest(argv=argv):
                self.assertEqual(run(argv)[0], 2)
        code, _, err = run(["read", "ftp://h", "{}"])
        self.assertEqual(code, 1)
        self.assertIn("not an http", err)

    def test_merge(self) -> None:
        a = {
            "dataset_id": "d",
            "repetition": 0,
            "done": [],
            "partial": [{"split": {"start": 0, "stop": 4}, "consumed": 2}],
        }
        b = {
            "state": {
                "shardwise_position": {
                    "dataset_id": "d",
                    "repetition": 0,
                    "done": [],
                    "partial": [
                        {
                            "split": {"start": 0, "stop": 4},
                            "consumed": 0,
                            "more": [{"start": 2, "stop": 4}],
                            "len": 4,
                        }
                    ],
                }
            }
        }
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for i, p in enumerate((a, b)):
                paths.append(os.path.join(d, f"{i}.json"))
                with open(paths[-1], "w") as f:
                    json.dump(p, f)
            code, out, err = run(["merge", *paths])
            self.assertEqual(code, 0, err)
            self.assertEqual(json.loads(out)["done"], [{"start": 0, "stop": 4}])
            with open(paths[1], "w") as f:
                f.write("{")
            code, _, err = run(["merge", *paths])
            self.assertEqual(code, 1)
            self.assertIn("is not JSON", err)


if __name__ == "__main__":
    unittest.main()
