"""In-process HTTP servers for the unit tests: :class:`FakeServer` answers every request with
a handler's answer; :class:`FakeCluster` is a scripted dispatcher and worker in one server."""

from __future__ import annotations

import collections
import json
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: What a handler answers: status, headers, body (bytes, or JSON for anything else).
Answer = tuple[int, Mapping[str, str], Any]


class Request:
    """A request as the server saw it."""

    def __init__(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class FakeServer:
    """An HTTP/1.1 server on ``127.0.0.1`` (an ephemeral port) in a thread; every request is
    recorded and answered with ``handler(request)``."""

    def __init__(
        self, handler: Callable[[Request], Answer], *, tls: tuple[str, str] | None = None
    ) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                req = Request(
                    self.command,
                    url.path,
                    query,
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                )
                with lock:
                    server.requests.append(req)
                status, headers, payload = server.handler(req)
                if not isinstance(payload, (bytes, bytearray)):
                    payload = json.dumps(payload).encode()
                    headers = {"content-type": "application/json", **headers}
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_DELETE = _serve

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that refused the certificate, say

        self._httpd = Server(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
            scheme = "https"
        self.address = f"127.0.0.1:{self._httpd.server_address[1]}"
        self.url = f"{scheme}://{self.address}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self, method: str, path: str) -> int:
        return sum(1 for r in self.requests if r.method == method and r.path == path)


def problem(code: str, status: int, detail: str = "detail") -> Answer:
    body = {
        "type": "urn:shardwise:problem:x",
        "title": code.title(),
        "status": status,
        "detail": detail,
        "code": code,
    }
    return status, {"content-type": "application/problem+json"}, body


def ok(body: Any) -> Answer:
    return 200, {}, body


class FakeCluster:
    """A dispatcher and its worker in one :class:`FakeServer`, for one iteration.

    ``tasks`` maps a task id to its worker's answers, in order: an elements answer
    (``{"elements": [...], "origin": [...]}``, ``end_of_sequence`` defaulting to false), an
    ``Answer`` tuple (a problem, an Arrow stream), or a callable making one. Once a task's
    answers are used up it answers end of sequence. The heartbeat lists every task (at this
    server's address, ``lost`` ones with ``worker_lost``) and says ``iteration_finished``
    once every task that is not lost answered its end; it leaves the list out when the
    client knows its version. ``heartbeat`` may replace a heartbeat's answer.
    """

    def __init__(
        self,
        tasks: Mapping[str, list[Any]],
        *,
        lost: tuple[str, ...] = (),
        incarnation: str = "inc-1",
    ) -> None:
        self.scripts: dict[str, collections.deque[Any]] = {
            t: collections.deque(a) for t, a in tasks.items()
        }
        self.ended: dict[str, bool] = {t: False for t in tasks}
        self.lost = set(lost)
        self.incarnation = incarnation
        self.heartbeat: Callable[[Request], Answer | None] | None = None
        self.server = FakeServer(self.answer)
        self.url = self.server.url

    def close(self) -> None:
        self.server.close()

    def __enter__(self) -> FakeCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def requests(self) -> list[Request]:
        return self.server.requests

    def answer(self, req: Request) -> Answer:
        m, p = req.method, req.path
        inc = {"incarnation": self.incarnation}
        if (m, p) == ("GET", "/v1/version"):
            return ok({"version": 1, "fault_tolerant": False, **inc})
        if (m, p) == ("POST", "/v1/datasets"):
            return ok({"dataset_id": req.json().get("dataset_id") or "1000", **inc})
        if (m, p) == ("POST", "/v1/jobs"):
            return ok({"job_id": "5000", **inc})
        if (m, p) == ("POST", "/v1/jobs/5000/iterations"):
            return ok({"iteration_id": "2000", "client_id": "3000", **inc})
        if (m, p) == ("POST", "/v1/clients/3000/heartbeat"):
            if self.heartbeat is not None:
                replaced = self.heartbeat(req)
                if replaced is not None:
                    return replaced
            version = 7
            known = (req.json() or {}).get("known_tasks_version") == version
            tasks = [
                {
                    "task_id": t,
                    "worker_address": self.server.address,
                    "worker_tags": [],
                    "starting_round": 0,
                    "finished": self.ended[t],
                    "worker_lost": t in self.lost,
                }
                for t in self.scripts
            ]
            finished = all(self.ended[t] or t in self.lost for t in self.scripts)
            return ok(
                {
                    "tasks": [] if known else tasks,
                    "tasks_version": version,
                    "tasks_unchanged": known,
                    "iteration_finished": finished,
                    "block_round": None,
                    **inc,
                }
            )
        if (m, p) == ("DELETE", "/v1/clients/3000"):
            return ok({"released": True, **inc})
        parts = p.split("/")
        if (
            m == "GET"
            and len(parts) == 5
            and parts[:3] == ["", "v1", "tasks"]
            and parts[4] == "elements"
        ):
            task = parts[3]
            if task not in self.scripts:
                return problem("NOT_FOUND", 404, f"no task {task}")
            script = self.scripts[task]
            if not script:
                self.ended[task] = True
                return ok({"elements": [], "end_of_sequence": True})
            step = script.popleft()
            if callable(step):
                step = step(req)
            if isinstance(step, tuple):
                if step[1].get("shardwise-end-of-sequence") == "true":
                    self.ended[task] = True
                return step
            reply = {"end_of_sequence": False, **step}
            if reply["end_of_sequence"]:
                self.ended[task] = True
            return ok(reply)
        return problem("NOT_FOUND", 404, f"no route {m} {p}")
