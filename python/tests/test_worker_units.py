"""The Python worker's pure parts: what fn yields as served forms, splits and their elements,
origin runs taken per read, addresses, and the element route's headers."""

from __future__ import annotations

import collections
import datetime
import decimal
import json
import unittest

from shardwise import _worker_rows as rows
from shardwise._worker_http import compression_of, wants_arrow
from shardwise._worker_splits import (
    Split,
    make_split,
    max_splits,
    refusal,
    static_splits,
)
from shardwise._worker_task import TaskError, error_of, take_runs
from shardwise.errors import ShardwiseError
from shardwise.worker import Worker, advertised_address, serve


def definition(source: dict, mode: str = "DYNAMIC", split_size: int = 4, **extra: object) -> dict:
    d = {
        "task_id": "4000",
        "iteration_id": "2000",
        "job_id": "5000",
        "dataset_id": "1000",
        "dataset": {"source": source},
        "processing_mode": mode,
        "split_size": split_size,
        "num_consumers": None,
    }
    d.update(extra)
    return d


class Outputs(unittest.TestCase):
    def test_values_and_rows_are_told_apart(self) -> None:
        import numpy as np
        import pyarrow as pa

        self.assertEqual(rows.classify({"a": 1}), ("values", [b'{"a":1}']))
        self.assertEqual(rows.classify({"a": np.float32(0.5)})[1], [b'{"a":0.5}'])
        kind, batches = rows.classify({"a": np.arange(3), "t": np.zeros((3, 2, 2))})
        self.assertEqual((kind, batches[0].num_rows), ("rows", 3))
        self.assertIsInstance(batches[0].column("t").type, pa.FixedShapeTensorType)
        # A dict holding an array among other values is one JSON element.
        self.assertEqual(rows.classify({"a": np.arange(2), "b": 1})[0], "values")
        table = pa.table({"x": [1, 2, 3]})
        self.assertEqual(rows.classify(table)[0], "rows")
        self.assertEqual(rows.classify(table.to_batches()[0])[0], "rows")

    def test_bad_outputs_are_errors_naming_them(self) -> None:
        import numpy as np

        for output, text in [
            ({1, 2}, "type set"),
            ({"a": object()}, "type object"),
            ({"a": np.arange(2), "b": np.arange(3)}, "different lengths"),
        ]:
            with self.assertRaises(rows.OutputError) as e:
                rows.classify(output)
            self.assertIn(text, e.exception.detail)
        deep: list = []
        for _ in range(1000):
            deep = [deep]
        with self.assertRaises(rows.OutputError):
            rows.encode(deep)
        looped: list = []
        looped.append(looped)
        with self.assertRaises(rows.OutputError):
            rows.encode(looped)

    def test_rows_as_json_in_the_workers_forms(self) -> None:
        import pyarrow as pa

        batch = pa.RecordBatch.from_pydict(
            {
                "f32": pa.array([0.1, float("nan")], pa.float32()),
                "bin": pa.array([b"\x00", None], pa.binary()),
                "dec": pa.array([decimal.Decimal("-12.345"), None], pa.decimal128(6, 3)),
                "day": pa.array([datetime.date(2024, 2, 29), None], pa.date32()),
                "ts": pa.array([1_500, None], pa.timestamp("ms", tz="UTC")),
                "ns": pa.array([1, None], pa.timestamp("ns")),
                "list": pa.array([[1, 2], []]),
            }
        )
        got = [json.loads(t) for t in rows.rows_json(batch)]
        self.assertEqual(
            got[0],
            {
                "f32": 0.1,
                "bin": "AA==",
                "dec": "-12.345",
                "day": "2024-02-29",
                "ts": "1970-01-01T00:00:01.500Z",
                "ns": "1970-01-01T00:00:00.000000001",
                "list": [1, 2],
            },
        )
        self.assertEqual(got[1]["f32"], "NaN")
        self.assertIsNone(got[1]["bin"])
        self.assertIsNone(rows.no_json_form(batch.schema))
        odd = pa.schema([("d", pa.duration("s"))])
        self.assertIn("has no JSON form", rows.no_json_form(odd) or "")

    def test_arrow_streams_carry_their_origin_in_the_schema(self) -> None:
        import pyarrow as pa

        from shardwise import _arrow

        batch = pa.RecordBatch.from_pydict({"x": [1, 2, 3]})
        origin = [{"split": {"start": 0, "stop": 3}, "offset": 0, "count": 3, "end": True}]
        for codec in (None, "lz4", "zstd"):
            body = rows.arrow_stream(batch.schema, [batch], origin, codec)
            headers = {"content-type": _arrow.ARROW_STREAM, "shardwise-end-of-sequence": "false"}
            got, n, end, o = _arrow.decode_read(headers, body, "test")
            self.assertEqual((n, end, o), (3, False, origin))
        empty = rows.arrow_stream(None, [], None, None)
        headers = {"content-type": _arrow.ARROW_STREAM, "shardwise-end-of-sequence": "true"}
        self.assertEqual(_arrow.decode_read(headers, empty, "test")[1:3], (0, True))


class Splits(unittest.TestCase):
    def test_elements_of_range_and_list_splits(self) -> None:
        d = definition({"range": {"start": -5, "stop": 5, "step": 1}})
        self.assertEqual(
            list(make_split(d, {"start": 0, "stop": 4}, None, None).elements()), [-5, -4, -3, -2]
        )
        d = definition({"range": {"start": 10, "stop": 0, "step": -3}})
        self.assertEqual(
            list(make_split(d, {"start": 1, "stop": 3}, None, None).elements()), [7, 4]
        )
        d = definition({"list": {"elements": ["a", "b", "c"]}})
        self.assertEqual(make_split(d, {"start": 1, "stop": 3}, None, None).elements(), ["b", "c"])
        d = definition({"files": {"paths": ["/a"], "format": "lines"}})
        with self.assertRaises(TypeError):
            make_split(d, "/a", None, None).elements()
        s = make_split(d, "/a", {"start": 0, "stop": 1, "skip": 3}, "0:0")
        self.assertIsInstance(s, Split)
        self.assertEqual((s.positions.skip, s.positions.until, s.split_id), (3, None, "0:0"))

    def test_off_tasks_cut_the_source_as_the_dispatcher_does(self) -> None:
        d = definition({"range": {"stop": 10}}, mode="OFF", split_size=4)
        self.assertEqual(
            [v for v, _ in static_splits(d)],
            [{"start": 0, "stop": 4}, {"start": 4, "stop": 8}, {"start": 8, "stop": 10}],
        )
        d = definition({"files": {"paths": ["/a", "/b"], "format": "lines"}}, mode="OFF")
        self.assertEqual(
            list(static_splits(d)),
            [("/a", {"start": 0, "stop": 1}), ("/b", {"start": 1, "stop": 2})],
        )
        rows_split = {"paths": ["/a", "/b"], "format": "parquet", "split": "rows", "rows": [3, 2]}
        d = definition({"files": rows_split}, mode="OFF", split_size=4)
        self.assertEqual(
            [v for v, _ in static_splits(d)], [{"start": 0, "stop": 4}, {"start": 4, "stop": 5}]
        )

    def test_how_many_splits_a_get_split_asks_for(self) -> None:
        self.assertEqual(max_splits(definition({"range": {"stop": 9}}, split_size=10), 1024), 64)
        self.assertEqual(max_splits(definition({"range": {"stop": 9}}, split_size=1024), 1024), 1)
        self.assertEqual(max_splits(definition({"range": {"stop": 9}}, split_size=100), 1024), 11)
        files = {"paths": ["/a"], "format": "lines"}
        self.assertEqual(max_splits(definition({"files": files}), 1024), 1)
        self.assertEqual(max_splits(definition({"splits": {"items": [1]}}), 10), 10)

    def test_refusals(self) -> None:
        self.assertIsNone(refusal(definition({"range": {"stop": 1}})))
        hinted = definition({"range": {"stop": 1}})
        hinted["dataset"]["transforms"] = [{"shard_hint": {}}]
        self.assertIsNone(refusal(hinted))
        shuffled = definition({"range": {"stop": 1}})
        shuffled["dataset"]["transforms"] = [{"shuffle": {"buffer": 2, "seed": 1}}]
        self.assertIn("'shuffle'", refusal(shuffled) or "")
        self.assertIn("DATA", refusal(definition({"range": {"stop": 1}}, mode="DATA")) or "")
        self.assertIn("TensorFlow", refusal({"dataset": {"tensorflow": {}}}) or "")


class Runs(unittest.TestCase):
    def test_reads_take_runs_off_the_front(self) -> None:
        runs = collections.deque([[0, 4, 0, 4, True], [4, 8, 2, 2, False]])
        self.assertEqual(
            take_runs(runs, 3), [{"split": {"start": 0, "stop": 4}, "offset": 0, "count": 3}]
        )
        self.assertEqual(
            take_runs(runs, 2),
            [
                {"split": {"start": 0, "stop": 4}, "offset": 3, "count": 1, "end": True},
                {"split": {"start": 4, "stop": 8}, "offset": 2, "count": 1},
            ],
        )
        self.assertEqual(list(runs), [[4, 8, 3, 1, False]])

    def test_fn_errors_become_task_errors_with_their_code(self) -> None:
        self.assertEqual(error_of(ValueError("bad"))[0], "INVALID_ARGUMENT")
        self.assertEqual(error_of(KeyError("k"))[0], "INVALID_ARGUMENT")
        self.assertEqual(error_of(RuntimeError("x")), ("INTERNAL", "RuntimeError: x"))
        self.assertEqual(error_of(ShardwiseError("UNAVAILABLE", "later"))[0], "UNAVAILABLE")
        self.assertEqual(error_of(FileNotFoundError("f"))[0], "NOT_FOUND")
        failed = TaskError.failed(7, "NOT_FOUND", "gone")
        self.assertEqual(
            (failed.code, failed.detail), ("FAILED_PRECONDITION", "task 7 failed: gone")
        )
        self.assertIn("characters)", error_of(ValueError("x" * 10_000))[1])


class Http(unittest.TestCase):
    def test_accept_and_compression_headers(self) -> None:
        arrow = "application/vnd.apache.arrow.stream"
        self.assertTrue(wants_arrow([arrow]))
        self.assertTrue(wants_arrow(["application/json;q=0.9, " + arrow.upper() + ";q=0.5"]))
        self.assertFalse(wants_arrow([arrow + ";q=0"]))
        self.assertFalse(wants_arrow(["*/*", "application/json"]))
        self.assertEqual(compression_of(["bogus, ZSTD;q=1", "lz4"]), "zstd")
        self.assertIsNone(compression_of(["none, lz4"]))
        self.assertIsNone(compression_of([]))

    def test_advertised_addresses(self) -> None:
        self.assertEqual(advertised_address(None, "127.0.0.1", 80), "127.0.0.1:80")
        self.assertEqual(advertised_address("w1", "0.0.0.0", 80), "w1:80")
        self.assertEqual(advertised_address("w1:%port%", "0.0.0.0", 80), "w1:80")
        self.assertEqual(advertised_address("w1:9000", "0.0.0.0", 80), "w1:9000")
        self.assertEqual(advertised_address("::1", "::", 80), "[::1]:80")
        with self.assertRaises(ValueError):
            advertised_address(None, "0.0.0.0", 80)

    def test_bad_arguments_are_refused_before_anything_starts(self) -> None:
        url = "http://127.0.0.1:1"
        for kwargs in [{"buffer": 0}, {"port": 70000}, {"tags": ["a", " "]}, {"tls_cert": "x"}]:
            with self.assertRaises(ValueError, msg=str(kwargs)):
                Worker(lambda s: (), url, **kwargs)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            Worker("not callable", url)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            serve(lambda s: (), url, processes=0)
        with self.assertRaises(TypeError) as e:
            serve(lambda s: (), url, processes=2)  # a lambda cannot be spawned
        self.assertIn("start_method='fork'", str(e.exception))


if __name__ == "__main__":
    unittest.main()
