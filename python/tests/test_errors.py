"""ShardwiseError: problems parsed from answers, the status table, and the retry rule."""

from __future__ import annotations

import json
import pickle
import unittest

from shardwise import ShardwiseError
from shardwise.errors import CODES, code_of_status, status_of


def problem(code: str, detail: str = "d", status: int = 0, **extra: object) -> bytes:
    s, title = status_of(code)
    body = {
        "type": f"urn:shardwise:problem:{code.lower()}",
        "title": title,
        "status": status or s,
        "detail": detail,
        "code": code,
        **extra,
    }
    return json.dumps(body).encode()


class FromResponse(unittest.TestCase):
    def test_a_problem_gives_its_members(self) -> None:
        body = problem(
            "NOT_FOUND",
            "no dataset with id 'x'",
            tf_exception="ValueError",
            instance="/v1/datasets/x",
        )
        e = ShardwiseError.from_response(404, body, context="GET /v1/datasets/x")
        self.assertEqual((e.code, e.status, e.title), ("NOT_FOUND", 404, "Not found"))
        self.assertEqual(e.detail, "no dataset with id 'x'")
        self.assertEqual(e.type, "urn:shardwise:problem:not_found")
        self.assertEqual(e.instance, "/v1/datasets/x")
        self.assertEqual(e.extra, {"tf_exception": "ValueError"})
        self.assertEqual(e.kind, "problem")
        self.assertFalse(e.is_retryable)
        self.assertEqual(str(e), "GET /v1/datasets/x: NOT_FOUND (404): no dataset with id 'x'")

    def test_the_problems_status_wins_over_the_answers(self) -> None:
        # A problem within its class (413 for RESOURCE_EXHAUSTED) keeps its own status.
        e = ShardwiseError.from_response(429, problem("RESOURCE_EXHAUSTED", status=413))
        self.assertEqual(e.status, 413)
        e = ShardwiseError.from_response(503, problem("UNAVAILABLE", missing={"worker": 2}))
        self.assertTrue(e.is_retryable)
        self.assertEqual(e.extra["missing"], {"worker": 2})

    def test_answers_that_are_not_problems_take_the_statuss_class(self) -> None:
        cases = [
            (400, "INVALID_ARGUMENT"),
            (405, "INVALID_ARGUMENT"),
            (415, "INVALID_ARGUMENT"),
            (401, "UNAUTHENTICATED"),
            (403, "PERMISSION_DENIED"),
            (404, "NOT_FOUND"),
            (409, "FAILED_PRECONDITION"),
            (413, "RESOURCE_EXHAUSTED"),
            (429, "RESOURCE_EXHAUSTED"),
            (408, "UNAVAILABLE"),
            (502, "UNAVAILABLE"),
            (503, "UNAVAILABLE"),
            (504, "UNAVAILABLE"),
            (500, "INTERNAL"),
            (418, "INTERNAL"),
            (302, "INTERNAL"),
        ]
        for status, code in cases:
            with self.subTest(status=status):
                self.assertEqual(code_of_status(status), code)
                e = ShardwiseError.from_response(status, b"<html>bad gateway</html>")
                self.assertEqual((e.code, e.status), (code, status))
                self.assertEqual(e.detail, "<html>bad gateway</html>")
                self.assertEqual(e.is_retryable, code == "UNAVAILABLE")

    def test_malformed_or_unknown_problems_fall_back_and_are_quoted_short(self) -> None:
        for body in [
            b"",
            b"{",
            b"[]",
            b'{"code": "TEAPOT"}',
            b'{"code": 7}',
            b"\xff\xfe",
            b"[" * 100_000,
            b"x" * 10_000,
        ]:
            with self.subTest(body=body[:20]):
                e = ShardwiseError.from_response(503, body)
                self.assertEqual(e.code, "UNAVAILABLE")
                self.assertLessEqual(len(e.detail), 500)
        # A known code with odd members: the code is kept, odd members are not trusted.
        e = ShardwiseError.from_response(404, b'{"code": "NOT_FOUND", "status": true, "detail": 3}')
        self.assertEqual((e.code, e.status, e.detail), ("NOT_FOUND", 404, ""))


class Kinds(unittest.TestCase):
    def test_the_retry_rule(self) -> None:
        self.assertTrue(ShardwiseError.transport("connection refused").is_retryable)
        self.assertEqual(ShardwiseError.transport("x").code, "UNAVAILABLE")
        self.assertIsNone(ShardwiseError.transport("x").status)
        tls = ShardwiseError.tls("certificate verify failed")
        self.assertEqual(tls.code, "UNAVAILABLE")
        self.assertFalse(tls.is_retryable, "a certificate refused now is refused on every try")
        bad = ShardwiseError.protocol("not JSON")
        self.assertEqual(bad.code, "INTERNAL")
        self.assertFalse(bad.is_retryable)
        redirect = ShardwiseError("UNAVAILABLE", "redirected", status=307, kind="redirect")
        self.assertTrue(redirect.is_retryable)
        self.assertFalse(ShardwiseError("UNAVAILABLE", "mine").is_retryable, "the client's own")
        for code in CODES:
            e = ShardwiseError.from_response(status_of(code)[0], problem(code))
            self.assertEqual(e.is_retryable, code == "UNAVAILABLE", code)
        with self.assertRaises(ValueError):
            ShardwiseError("INTERNAL", "x", kind="nonsense")

    def test_context_and_copies(self) -> None:
        e = ShardwiseError.from_response(404, problem("NOT_FOUND", "gone"))
        f = e.with_context("GET /v1/jobs/1")
        self.assertEqual(str(f), "GET /v1/jobs/1: NOT_FOUND (404): gone")
        self.assertEqual((f.code, f.status, f.kind), (e.code, e.status, e.kind))
        self.assertIsNone(e.context)
        self.assertIn("NOT_FOUND", repr(f))
        self.assertIsInstance(f, Exception)

    def test_errors_survive_pickling(self) -> None:
        # A DataLoader worker's exception crosses a process boundary pickled.
        e = ShardwiseError.from_response(404, problem("NOT_FOUND", "gone"), context="c")
        f = pickle.loads(pickle.dumps(e))
        self.assertEqual(
            (f.code, f.status, f.detail, f.context, f.kind),
            (e.code, e.status, e.detail, e.context, e.kind),
        )


if __name__ == "__main__":
    unittest.main()
