"""The Dispatcher client (the Rust client's calls, through the native module) against
in-process servers: problems, retries, failover between replicas, the redirect rule, the
token, short bodies, and a forked child's own client."""

from __future__ import annotations

import os
import socket
import unittest
from typing import Any

from fakes import FakeServer, Request, ok, problem

from shardwise import Dispatcher, ShardwiseError


def closed_port_url() -> str:
    """A loopback URL nothing listens on (a port bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def version(_: Request) -> Any:
    return ok({"version": 1, "incarnation": "i", "fault_tolerant": False})


class Addresses(unittest.TestCase):
    def test_base_urls(self) -> None:
        self.assertEqual(Dispatcher("127.0.0.1:5050").addresses, ["http://127.0.0.1:5050"])
        self.assertEqual(Dispatcher(" http://h:1/ ").addresses, ["http://h:1"])
        self.assertEqual(Dispatcher("HTTPS://h:1").addresses, ["https://h:1"])
        for bad in [" / ", "ftp://h", "http://h:1/x", "a b:1", "h:99999", "h:x"]:
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                Dispatcher([bad])

    def test_lists(self) -> None:
        d = Dispatcher("127.0.0.1:1, http://b.example:2/")
        self.assertEqual(d.addresses, ["http://127.0.0.1:1", "http://b.example:2"])
        d = Dispatcher(["a:1", "http://A:1", "c:80", "http://c"])
        self.assertEqual(d.addresses, ["http://a:1", "http://c:80"], "duplicates by origin")
        with self.assertRaisesRegex(ValueError, r"\(address 2 of 3\)"):
            Dispatcher("a:1,,b:2")
        with self.assertRaisesRegex(ValueError, "no address given"):
            Dispatcher(" ")
        with self.assertRaises(ValueError):
            Dispatcher(["http://a:1,b:2"])
        with self.assertRaises(ValueError):
            Dispatcher("a:1", token="x\ny")


class Calls(unittest.TestCase):
    def test_answers_problems_and_the_token(self) -> None:
        def handler(req: Request) -> Any:
            if req.path == "/v1/datasets/nope":
                return problem("NOT_FOUND", 404, "no dataset 'nope'")
            return version(req)

        with FakeServer(handler) as s:
            d = Dispatcher(s.url, token="t0ken")
            self.assertEqual(d.version()["version"], 1)
            with self.assertRaises(ShardwiseError) as cm:
                d.dataset("nope")
            e = cm.exception
            self.assertEqual((e.code, e.status, e.detail), ("NOT_FOUND", 404, "no dataset 'nope'"))
            self.assertEqual(e.context, "GET /v1/datasets/nope")
            self.assertEqual(s.count("GET", "/v1/datasets/nope"), 1, "not retried")
            self.assertTrue(
                all(r.headers.get("authorization") == "Bearer t0ken" for r in s.requests)
            )

    def test_unavailable_is_retried_until_it_answers(self) -> None:
        answers = [problem("UNAVAILABLE", 503), problem("UNAVAILABLE", 503)]
        with FakeServer(lambda r: answers.pop() if answers else version(r)) as s:
            self.assertEqual(Dispatcher(s.url).version()["version"], 1)
            self.assertEqual(s.count("GET", "/v1/version"), 3)

    def test_retries_end_after_unavailable_timeout(self) -> None:
        with FakeServer(lambda r: problem("UNAVAILABLE", 503, "not ready")) as s:
            with self.assertRaises(ShardwiseError) as cm:
                Dispatcher(s.url, unavailable_timeout=0.0).version()
            self.assertEqual(cm.exception.code, "UNAVAILABLE")
            self.assertIn("retried for", cm.exception.detail)
        with self.assertRaises(ShardwiseError) as cm:
            Dispatcher(closed_port_url(), unavailable_timeout=0.0).version()
        self.assertEqual((cm.exception.code, cm.exception.kind), ("UNAVAILABLE", "transport"))
        self.assertTrue(cm.exception.is_retryable)

    def test_a_2xx_answer_that_is_not_json_is_an_internal_error(self) -> None:
        with FakeServer(lambda r: (200, {"content-type": "text/html"}, b"<html>")) as s:
            with self.assertRaises(ShardwiseError) as cm:
                Dispatcher(s.url).version()
            self.assertEqual((cm.exception.code, cm.exception.kind), ("INTERNAL", "protocol"))

    def test_a_body_shorter_than_its_content_length_is_a_transport_error(self) -> None:
        import threading

        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def serve() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            url = "http://127.0.0.1:%d" % listener.getsockname()[1]
            with self.assertRaises(ShardwiseError) as cm:
                Dispatcher(url, unavailable_timeout=0.0, timeout=5).version()
            self.assertEqual((cm.exception.code, cm.exception.kind), ("UNAVAILABLE", "transport"))
        finally:
            t.join(5)
            listener.close()


class Failover(unittest.TestCase):
    def test_a_refused_replica_is_passed_over_and_the_next_call_starts_where_one_answered(
        self,
    ) -> None:
        with FakeServer(version) as s:
            d = Dispatcher([closed_port_url(), s.url], unavailable_timeout=5)
            self.assertEqual(d.version()["version"], 1)
            self.assertEqual(d.current, s.url)
            d.version()
            self.assertEqual(s.count("GET", "/v1/version"), 2)

    def test_a_followers_503_moves_on_and_a_refusal_does_not(self) -> None:
        with (
            FakeServer(lambda r: problem("UNAVAILABLE", 503)) as follower,
            FakeServer(lambda r: problem("NOT_FOUND", 404)) as leader,
        ):
            d = Dispatcher([follower.url, leader.url], unavailable_timeout=5)
            with self.assertRaises(ShardwiseError) as cm:
                d.get_job("1")
            self.assertEqual(cm.exception.code, "NOT_FOUND")
            self.assertEqual(
                (follower.count("GET", "/v1/jobs/1"), leader.count("GET", "/v1/jobs/1")), (1, 1)
            )
            self.assertEqual(d.current, leader.url, "a refusal is an answer: that replica is up")

    def test_redirects_are_followed_only_within_the_list(self) -> None:
        with FakeServer(version) as leader, FakeServer(version) as outsider:
            target = leader.url
            with FakeServer(lambda r: (307, {"location": target + r.path}, b"")) as follower:
                d = Dispatcher([follower.url, closed_port_url(), leader.url], unavailable_timeout=5)
                d.version()
                self.assertEqual(d.current, leader.url, "followed at once, past the dead one")
                target = outsider.url
                d2 = Dispatcher([follower.url], unavailable_timeout=0.0, token="secret")
                with self.assertRaises(ShardwiseError) as cm:
                    d2.version()
                self.assertEqual(cm.exception.code, "UNAVAILABLE")
                self.assertIn("(not followed)", cm.exception.detail)
                self.assertEqual(outsider.requests, [], "the token never goes elsewhere")


class Fork(unittest.TestCase):
    @unittest.skipUnless(hasattr(os, "fork"), "needs fork")
    def test_a_forked_child_calls_with_its_own_client(self) -> None:
        with FakeServer(version) as s:
            d = Dispatcher(s.url)
            self.assertEqual(d.version()["version"], 1, "the parent's client is live")
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: the parent's runtime is not in this process
                try:
                    os.write(w, b"ok" if d.version()["version"] == 1 else b"bad")
                finally:
                    os._exit(0)
            os.close(w)
            got = os.read(r, 16)
            os.close(r)
            os.waitpid(pid, 0)
            self.assertEqual(got, b"ok")
            self.assertEqual(d.version()["version"], 1, "and the parent's still is")
            self.assertEqual(s.count("GET", "/v1/version"), 3)


if __name__ == "__main__":
    unittest.main()
