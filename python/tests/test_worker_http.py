"""A Python worker's HTTP surface: rows as Arrow and as JSON, 406 for Arrow of JSON values,
unknown and unassigned task ids, hostile requests answered as problems, bearer tokens, TLS,
and ``serve`` stopped by SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import unittest
from collections.abc import Iterator
from typing import Any

from worker_fakes import END, FakeDispatcher, get, read_all, splits_reply, task_def, until

from shardwise import _arrow
from shardwise.worker import Split, Worker

HERE = os.path.dirname(os.path.abspath(__file__))


def tensors(split: Split) -> Iterator[Any]:
    import numpy as np

    e = split.elements()
    ids = np.arange(e.start, e.stop, dtype=np.int64)
    image = ids.astype(np.float32)[:, None, None] + np.full((len(ids), 2, 3), 0.1, np.float32)
    yield {"id": ids, "image": image}


class Worker_(unittest.TestCase):
    def start(self, fn: Any, tasks: list[Any], **options: Any) -> tuple[FakeDispatcher, Worker]:
        d = FakeDispatcher(tasks)
        self.addCleanup(d.close)
        options.setdefault("heartbeat_interval", 0.05)
        w = Worker(fn, d.url, **options).start()
        self.addCleanup(w.stop)
        return d, w


class Forms(Worker_):
    def test_rows_are_arrow_streams_with_origins_and_json_objects(self) -> None:
        d, w = self.start(tensors, [task_def(split_size=4)])
        d.splits.extend([splits_reply([(0, 4)]), END])
        headers = {"accept": _arrow.ARROW_STREAM, _arrow.COMPRESSION_HEADER: "bogus, zstd"}
        batches, origins = [], []
        while True:
            a = get(w.url, "/v1/tasks/4000/elements?max=3", headers)
            self.assertEqual(a.status, 200, a.body)
            got, rows, end, origin = _arrow.decode_read(a.headers, a.body, "test")
            batches.extend(got)
            origins.extend(origin or [])
            if end:
                break
        ids = [i for b in batches for i in b.column("id").to_pylist()]
        self.assertEqual(ids, [0, 1, 2, 3])
        image = batches[0].column("image").to_numpy_ndarray()
        self.assertEqual(image.shape[1:], (2, 3))
        self.assertAlmostEqual(float(image[0, 1, 2]), 0.1, places=6)
        self.assertEqual(sum(r["count"] for r in origins), 4)
        self.assertTrue(origins[-1].get("end"))

        d.pending_tasks = [task_def("4001", split_size=4)]
        d.splits.extend([splits_reply([(0, 2)]), END])
        got, _ = read_all(w.url, "4001")
        self.assertEqual(
            got,
            [
                {"id": 0, "image": [[0.1, 0.1, 0.1], [0.1, 0.1, 0.1]]},
                {"id": 1, "image": [[1.1, 1.1, 1.1], [1.1, 1.1, 1.1]]},
            ],
            "float32 as its shortest decimals, tensors nested to their shape",
        )

    def test_arrow_of_json_values_is_406_and_takes_nothing(self) -> None:
        d, w = self.start(lambda s: iter(s.elements()), [task_def()])
        d.splits.extend([splits_reply([(0, 2)]), END])
        accept = {"accept": "application/json;q=0.5, application/vnd.apache.arrow.stream"}
        a = until(
            "a 406",
            lambda: (r := get(w.url, "/v1/tasks/4000/elements", accept)).status == 406 and r,
        )
        self.assertEqual(a.json()["code"], "FAILED_PRECONDITION")
        self.assertIn("read it as JSON", a.json()["detail"])
        got, _ = read_all(w.url)
        self.assertEqual(got, [0, 1], "the refused read took nothing")

    def test_values_are_json_with_nan_bytes_and_numpy(self) -> None:
        import numpy as np

        def values(split: Split) -> Iterator[Any]:
            yield {"f": float("nan"), "b": b"\x00\xff", "n": np.int32(7), "a": np.arange(2)}
            yield [float("inf"), -float("inf"), "é"]

        d, w = self.start(values, [task_def()])
        d.splits.extend([splits_reply([(0, 2)]), END])
        got, _ = read_all(w.url)
        self.assertEqual(
            got,
            [{"f": "NaN", "b": "AP8=", "n": 7, "a": [0, 1]}, ["Infinity", "-Infinity", "é"]],
        )

    def test_outputs_without_a_served_form_fail_the_task(self) -> None:
        d, w = self.start(lambda s: iter([0, {1, 2}]), [task_def()])
        d.splits.extend([splits_reply([(0, 2)]), END])
        got: list[Any] = []
        for _ in range(100):
            a = get(w.url, "/v1/tasks/4000/elements")
            if a.status != 200:
                break
            got.extend(a.json()["elements"])
        self.assertEqual(got, [0], "the output before the bad one is served")
        self.assertEqual(a.status, 400, a.body)
        self.assertIn("fn yielded a value of type set, which has no JSON form", a.json()["detail"])


class Hostile(Worker_):
    def setUp(self) -> None:
        self.d, self.w = self.start(lambda s: iter(()), [])

    def problem(self, a: Any, status: int, code: str) -> str:
        self.assertEqual(a.status, status, a.body)
        self.assertEqual(a.headers["content-type"], "application/problem+json")
        body = a.json()
        self.assertEqual((body["status"], body["code"]), (status, code))
        return str(body["detail"])

    def test_bad_requests_are_problems(self) -> None:
        url = self.w.url
        cases = [
            ("/v1/tasks/4000/elements?max=0", 400, "max must be in 1..=10000, not 0"),
            ("/v1/tasks/4000/elements?max=10001", 400, "max must be in"),
            ("/v1/tasks/4000/elements?max=" + "9" * 30, 400, "not a non-negative integer"),
            ("/v1/tasks/4000/elements?max=-1", 400, "not a non-negative integer"),
            ("/v1/tasks/4000/elements?nope=1", 400, "unknown field"),
            ("/v1/tasks/4000/elements?max=1&max=2", 400, "duplicate field"),
            ("/v1/tasks/x1/elements", 400, "is not a decimal id"),
            ("/v1/tasks/" + "1" * 70 + "/elements", 400, "is not an id"),
            ("/v1/tasks/99999999999999999999/elements", 400, "out of range"),
            ("/v1/tasks/%2e%2e/elements", 400, "is not a decimal id"),
            ("/v1/tasks/4000/elements?consumer_index=0&round=0", 404, "not known"),
            ("/v1/nothing/../healthz", 404, "no route"),
        ]
        for path, status, text in cases:
            a = get(url, path)
            code = "INVALID_ARGUMENT" if status == 400 else "NOT_FOUND"
            self.assertIn(text, self.problem(a, status, code), path)
        a = get(url, "/v1/tasks/4000/elements", method="POST")
        self.assertIn("not allowed", self.problem(a, 405, "INVALID_ARGUMENT"))
        self.assertEqual(get(url, "/healthz").json(), {"status": "ok"})

    def test_malformed_http_is_answered_and_bodies_are_bounded(self) -> None:
        port = self.w.port
        cases = [
            (b"GARBAGE\r\n\r\n", b"400"),
            (b"GET /healthz HTTP/9.9\r\n\r\n", b"505"),
            (b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", b"431"),
            (b"GET /healthz HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", b"413"),
            (b"GET /healthz HTTP/1.1\r\nContent-Length: nope\r\n\r\n", b"400"),
            (b"BREW /healthz HTTP/1.1\r\n\r\n", b"405"),
        ]
        for raw, status in cases:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(raw)
                answer = _read_answer(s)
            self.assertTrue(answer.startswith(b"HTTP/1.1 " + status), answer[:200])
            self.assertIn(b"application/problem+json", answer)
            self.assertNotIn(b"Traceback", answer)
        # A small body is read and dropped; the connection serves the next request.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
            first = _read_answer(s)
            s.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            second = _read_answer(s)
        self.assertTrue(first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200"))

    def test_unknown_ids_are_retryable_until_a_heartbeat_came_back_without_them(self) -> None:
        a = get(self.w.url, "/v1/tasks/4242/elements")
        self.assertIn("is not known to this worker (yet)", self.problem(a, 404, "NOT_FOUND"))
        sent = len(self.d.heartbeats)
        until("a heartbeat after the read", lambda: len(self.d.heartbeats) > sent + 1)
        a = get(self.w.url, "/v1/tasks/4242/elements")
        self.assertIn("has not assigned task 4242", self.problem(a, 404, "NOT_FOUND"))


class Tokens(Worker_):
    def test_bearer_tokens_guard_the_element_route_and_metrics(self) -> None:
        tokens = {
            "tokens": [
                {"role": "client", "token": "client-token-0123456789"},
                {"role": "monitor", "token": "monitor-token-0123456789"},
            ]
        }
        d, w = self.start(lambda s: iter(s.elements()), [task_def()], auth_tokens=tokens)
        d.splits.extend([splits_reply([(0, 2)]), END])
        path = "/v1/tasks/4000/elements"
        a = get(w.url, path)
        self.assertEqual((a.status, a.headers.get("www-authenticate")), (401, "Bearer"))
        a = get(w.url, path, {"authorization": "Bearer wrong-token-0123456789"})
        self.assertEqual(a.status, 401)
        a = get(w.url, path, {"authorization": "Bearer monitor-token-0123456789"})
        self.assertEqual((a.status, a.json()["code"]), (403, "PERMISSION_DENIED"))
        self.assertIn("needs the client role", a.json()["detail"])
        client = {"authorization": "bearer client-token-0123456789"}
        until("the elements", lambda: get(w.url, path + "?max=2", client).json()["elements"])
        self.assertEqual(get(w.url, "/metrics", client).status, 403)
        monitor = {"authorization": "Bearer monitor-token-0123456789"}
        self.assertEqual(get(w.url, "/metrics", monitor).status, 200)
        self.assertEqual(get(w.url, "/healthz").status, 200, "open")

    def test_bad_token_lists_are_refused(self) -> None:
        for tokens, text in [
            ({"tokens": []}, "no tokens"),
            ({"tokens": [{"role": "root", "token": "0123456789abcdef"}]}, "unknown role"),
            ({"tokens": [{"role": "client", "token": "short"}]}, "shorter than 16"),
            ({"tokens": [{"role": "client", "token": "0123456789 abcdef"}]}, "whitespace"),
            ({"nope": []}, "must be"),
        ]:
            with self.assertRaises(ValueError) as e:
                Worker(lambda s: (), "http://127.0.0.1:1", auth_tokens=tokens)
            self.assertIn(text, str(e.exception))


@unittest.skipUnless(shutil.which("openssl"), "needs the openssl command")
class Tls(Worker_):
    def test_tls_workers_serve_https(self) -> None:
        import urllib3

        with tempfile.TemporaryDirectory(prefix="shardwise-worker-tls-") as tmp:
            cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                 "-subj", "/CN=127.0.0.1", "-days", "2", "-addext",
                 "subjectAltName=IP:127.0.0.1"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            _, w = self.start(lambda s: iter(()), [], tls_cert=cert, tls_key=key)
            self.assertTrue(w.url.startswith("https://"))
            pool = urllib3.PoolManager(ca_certs=cert, retries=False)
            self.assertEqual(pool.request("GET", w.url + "/healthz", timeout=10).status, 200)
            # A client that never finishes its handshake holds up no one else.
            with socket.create_connection(("127.0.0.1", w.port), timeout=10) as stalled:
                stalled.sendall(b"\x16\x03\x01")
                fresh = urllib3.PoolManager(ca_certs=cert, retries=False)
                self.assertEqual(fresh.request("GET", w.url + "/healthz", timeout=10).status, 200)


class Serve(unittest.TestCase):
    def test_serve_stops_cleanly_on_sigterm(self) -> None:
        code = (
            "import sys, shardwise.worker as w\n"
            "w.serve(lambda s: s.elements(), sys.argv[1], heartbeat_interval=0.05)\n"
            "print('returned', flush=True)\n"
        )
        self.serve_until_sigterm(["-c", code], "returned")

    def test_the_worker_command_serves_a_module_function(self) -> None:
        args = ["-m", "shardwise", "worker", "--heartbeat-interval", "0.05"]
        url = self.serve_until_sigterm(args + ["{url}", "worker_fakes:elements"], "")
        self.assertTrue(url.startswith("http://127.0.0.1:"))
        bad = subprocess.run(
            [sys.executable, "-m", "shardwise", "worker", "http://127.0.0.1:1", "nope:fn"],
            capture_output=True,
            cwd=HERE,
            timeout=60,
        )
        self.assertEqual(bad.returncode, 1, bad.stderr)
        self.assertIn(b"cannot load 'nope:fn'", bad.stderr)

    def serve_until_sigterm(self, args: list[str], last_line: str) -> str:
        """Runs ``python ARGS URL`` (``{url}`` in ARGS stands for the fake dispatcher's),
        reads a task's elements from the worker it prints, SIGTERMs it: it exits 0, its
        port closed, having printed ``last_line`` last. Returns the worker's URL."""
        with FakeDispatcher([task_def()]) as d:
            d.splits.extend([splits_reply([(0, 2)]), END])
            argv = [a.replace("{url}", d.url) for a in args]
            if "{url}" not in " ".join(args):
                argv.append(d.url)
            env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
            p = subprocess.Popen(
                [sys.executable, *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=HERE,
            )
            try:
                assert p.stdout is not None
                line = p.stdout.readline().decode()
                self.assertTrue(line.startswith("shardwise worker listening on http://"), line)
                url = line.split()[-1]
                self.assertEqual(read_all(url)[0], [0, 1])
                p.send_signal(signal.SIGTERM)
                out, err = p.communicate(timeout=30)
            finally:
                if p.poll() is None:
                    p.kill()
            self.assertEqual(p.returncode, 0, err)
            self.assertEqual(out.decode().strip(), last_line)
            with self.assertRaises(OSError):
                socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=5)
            return url


def _read_answer(s: socket.socket) -> bytes:
    """One HTTP answer (headers and a Content-Length body) off ``s``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


if __name__ == "__main__":
    unittest.main()
