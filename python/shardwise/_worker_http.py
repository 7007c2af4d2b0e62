"""A Python worker's HTTP server: the element route, ``/healthz`` and ``/metrics``, answered
as ``shardwise worker`` answers them (``gateway/worker/src/routes.rs``).

* ``GET /v1/tasks/{task_id}/elements?max=N``: JSON ``{"elements", "end_of_sequence",
  "origin"?}``, or with ``Accept: application/vnd.apache.arrow.stream`` one Arrow IPC stream
  (origin runs in the schema metadata ``shardwise.origin``, the end in the header
  ``shardwise-end-of-sequence``, ``shardwise-arrow-compression: lz4|zstd`` honoured). A read
  waits at most half a second for elements.
* Every error is an RFC 9457 ``application/problem+json`` body with the ``code`` the Rust
  worker answers: a malformed request line or header, an unknown route (404), a wrong method
  (405), a bad id or ``max`` (400), a missing or wrong bearer token (401, 403), a body over
  64 KiB (413), a task not known (404), failed or gone (409), Arrow for JSON values (406).
  Never a traceback: an exception in a handler is a 500 problem, logged on stderr.
* **Bounded.** One thread per connection, at most ``max_connections`` at once (more are
  closed at once); a client has ``read_timeout`` seconds per read of its request; a request
  body is read and dropped within 64 KiB. On stop the server closes every connection and joins
  its threads.
* **TLS** (``tls_cert``, ``tls_key``): the handshake runs in the connection's thread, bounded
  by the read timeout, so a client that never finishes it holds no one else up.
"""

from __future__ import annotations

import hmac
import json
import socket
import ssl
import sys
import threading
import traceback
import urllib.parse
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import _worker_rows as rows
from ._worker_state import WorkerState
from ._worker_task import TaskError, gone_answer
from .errors import code_of_status, status_of

#: The media type of an Arrow IPC stream, and the headers of an Arrow read.
ARROW_STREAM = "application/vnd.apache.arrow.stream"
COMPRESSION_HEADER = "shardwise-arrow-compression"
END_HEADER = "shardwise-end-of-sequence"
#: How long a read waits for an element before answering an empty list (seconds).
READ_WAIT = 0.5
#: Elements per read without ``max``, and the largest ``max``.
DEFAULT_MAX_ELEMENTS = 100
MAX_ELEMENTS = 10_000
#: The largest request body read (and dropped): no route takes one.
MAX_BODY = 64 << 10
#: The longest problem detail sent.
MAX_DETAIL = 4096
#: The query parameters of the element route.
_QUERY = ("consumer_index", "round", "max")


def wants_arrow(values: Sequence[str]) -> bool:
    """Whether ``Accept`` header values name the Arrow stream media type with a non-zero
    ``q``."""
    for accept in values:
        for media_range in accept.split(","):
            parts = [p.strip() for p in media_range.split(";")]
            refused = any(p[:2].lower() == "q=" and _zero(p[2:]) for p in parts[1:])
            if parts[0].lower() == ARROW_STREAM and not refused:
                return True
    return False


def _zero(text: str) -> bool:
    """A ``q`` value that refuses the media type (0, or below)."""
    try:
        return float(text.strip()) <= 0
    except ValueError:
        return False


def compression_of(values: Sequence[str]) -> str | None:
    """The codec a read asks for: the first of ``lz4``, ``zstd`` or ``none`` in the headers'
    comma-separated lists (unknown names passed over); ``None``: uncompressed."""
    for value in values:
        for item in value.split(","):
            name = item.split(";")[0].strip().lower()
            if name in ("lz4", "zstd"):
                return name
            if name == "none":
                return None
    return None


def load_tokens(tokens: str | Mapping[str, Any] | None) -> list[tuple[bytes, str]] | None:
    """The bearer tokens a worker accepts: ``{"tokens": [{"role", "token"}]}`` as a dict or
    the path of such a JSON file (``--auth-tokens``'s format). ``ValueError`` when it is not
    one (a token is named by its index, never its value)."""
    if tokens is None:
        return None
    if isinstance(tokens, Mapping):
        doc: Any = tokens
    else:
        try:
            with open(tokens, encoding="utf-8") as f:
                doc = json.load(f)
        except OSError as e:
            raise ValueError(f"cannot read auth_tokens {tokens!r}: {e.strerror}") from None
        except ValueError as e:
            raise ValueError(f"auth_tokens {tokens!r} is not JSON: {e}") from None
    entries = doc.get("tokens") if isinstance(doc, Mapping) else None
    if not isinstance(entries, list) or set(doc) != {"tokens"}:
        raise ValueError('auth_tokens must be {"tokens": [{"role": ..., "token": ...}]}')
    if not entries:
        raise ValueError("no tokens are configured")
    out: list[tuple[bytes, str]] = []
    for i, e in enumerate(entries):
        if not isinstance(e, Mapping) or set(e) != {"role", "token"}:
            raise ValueError(f"token {i} must be an object with role and token")
        role, token = e["role"], e["token"]
        if role not in ("admin", "worker", "client", "monitor"):
            raise ValueError(f"token {i} has an unknown role")
        if not isinstance(token, str) or len(token) < 16:
            raise ValueError(f"token {i} is shorter than 16 characters")
        if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in token):
            raise ValueError(f"token {i} contains whitespace or control characters")
        if any(hmac.compare_digest(t, token.encode()) for t, _ in out):
            raise ValueError(f"token {i} is listed twice")
        out.append((token.encode(), role))
    return out


def problem_body(
    code: str, detail: str, status: int | None = None, title: str | None = None
) -> tuple[int, bytes]:
    """A problem's status and JSON body."""
    base_status, base_title = status_of(code)
    status = status or base_status
    if len(detail) > MAX_DETAIL:
        detail = detail[:MAX_DETAIL] + "…"
    body = {
        "type": f"urn:shardwise:problem:{code.lower().replace('_', '-')}",
        "title": title or base_title,
        "status": status,
        "detail": detail,
        "code": code,
    }
    return status, json.dumps(body, ensure_ascii=False).encode()


class Problem(Exception):
    """An answer that is a problem."""

    def __init__(
        self,
        code: str,
        detail: str,
        *,
        status: int | None = None,
        title: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.status = status
        self.title = title
        self.headers = dict(headers or {})


class Server(ThreadingHTTPServer):
    """The worker's HTTP server (module docs)."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        host: str,
        port: int,
        state: WorkerState,
        *,
        tokens: list[tuple[bytes, str]] | None,
        tls: ssl.SSLContext | None,
        read_timeout: float,
        max_connections: int,
    ) -> None:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        self.address_family = infos[0][0]
        self.state = state
        self.tokens = tokens
        self.tls = tls
        self.read_timeout = read_timeout
        self.max_connections = max_connections
        # Set by whoever starts a thread in serve_forever (shutdown() waits for it to run).
        self.serving = False
        self.conn_lock = threading.Lock()
        self.connections: dict[Any, threading.Thread | None] = {}
        handler = type("Handler", (Handler,), {"timeout": read_timeout})
        super().__init__(infos[0][4][:2], handler)

    def server_bind(self) -> None:
        # Not HTTPServer's, which looks the host's name up (a DNS query per start).
        import socketserver

        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.conn_lock:
            if len(self.connections) >= self.max_connections:
                self.shutdown_request(request)
                return
            t = threading.Thread(
                target=self.process_request_thread,
                args=(request, client_address),
                name="shardwise-worker-conn",
                daemon=True,
            )
            self.connections[request] = t
        t.start()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.conn_lock:
                self.connections.pop(request, None)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        e = sys.exc_info()[1]
        if isinstance(e, (OSError, ssl.SSLError)):
            return  # a client that went away, or failed its handshake
        traceback.print_exc(file=sys.stderr)

    def close_all(self, timeout: float) -> None:
        """Stops accepting, closes every connection and joins their threads (at most
        ``timeout`` seconds)."""
        import time

        if self.serving:
            self.shutdown()
        self.server_close()
        with self.conn_lock:
            conns = list(self.connections.items())
        for sock, _ in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for _, t in conns:
            if t is not None:
                t.join(max(0.0, deadline - time.monotonic()))


class Handler(BaseHTTPRequestHandler):
    """One connection's requests."""

    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: headers and body are two writes; with Nagle's algorithm the second would
    # wait for the client's delayed ACK (40 ms per read).
    disable_nagle_algorithm = True
    # A request line without a version is answered with a status line and headers all the
    # same (the stdlib would answer it as HTTP/0.9: a bare body).
    default_request_version = "HTTP/1.0"
    server_version = "shardwise-python-worker"
    sys_version = ""
    server: Server

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(self.timeout)
            self.request.do_handshake()
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's errors (a malformed request line or header, a method without a
        handler) as problems, never its HTML page."""
        if code == 501:
            self.close_connection = True
            self._send_problem(
                Problem(
                    "INVALID_ARGUMENT",
                    f"the method {self.command!r:.20} is not allowed",
                    status=405,
                    title="Method not allowed",
                )
            )
            return
        self.close_connection = True
        detail = message or self.responses.get(code, ("bad request",))[0]
        # A malformed request line (400), a line or header too long (414, 431), an HTTP
        # version the server does not speak (505): the client's doing.
        kind = code_of_status(code) if code in (408, 413) else "INVALID_ARGUMENT"
        title = self.responses.get(code, (None,))[0]
        self._send_problem(Problem(kind, detail, status=code, title=title))

    def version_string(self) -> str:
        return self.server_version

    # -- routing ----------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    def _serve(self) -> None:
        self._drained = False
        try:
            self._route()
        except Problem as p:
            self._send_problem(p)
        except (BrokenPipeError, ConnectionError, TimeoutError, ssl.SSLError):
            self.close_connection = True
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            self._send_problem(Problem("INTERNAL", f"the worker failed: {type(e).__name__}"))

    def _route(self) -> None:
        target = self.path
        if "://" in target.split("?", 1)[0]:
            target = urllib.parse.urlsplit(target)._replace(scheme="", netloc="").geturl()
        path, _, query = target.partition("?")
        method = "GET" if self.command == "HEAD" else self.command
        if path == "/healthz":
            self._drain_body()
            return (
                self._send_json(200, b'{"status":"ok"}') if method == "GET" else self._not_allowed()
            )
        if path == "/metrics":
            self._authorize("monitor", "get /metrics")
            self._drain_body()
            return self._metrics() if method == "GET" else self._not_allowed()
        parts = path.split("/")
        if len(parts) == 5 and parts[:3] == ["", "v1", "tasks"] and parts[4] == "elements":
            if method != "GET":
                self._drain_body()
                return self._not_allowed()
            self._authorize("client", "get /v1/tasks/{task_id}/elements")
            self._drain_body()
            return self._elements(urllib.parse.unquote(parts[3]), query)
        self._drain_body()
        raise Problem("NOT_FOUND", f"no route for {path[:64]!r}")

    def _not_allowed(self) -> None:
        raise Problem(
            "INVALID_ARGUMENT",
            f"the method {self.command} is not allowed on this route",
            status=405,
            title="Method not allowed",
        )

    def _authorize(self, role: str, what: str) -> None:
        tokens = self.server.tokens
        if tokens is None:
            return
        value = self.headers.get("authorization") or ""
        scheme, _, presented = value.strip().partition(" ")
        presented = presented.strip()
        if scheme.lower() != "bearer" or not presented:
            raise Problem(
                "UNAUTHENTICATED",
                "this route needs `Authorization: Bearer <token>`",
                headers={"www-authenticate": "Bearer"},
            )
        found = None
        for token, r in tokens:
            if hmac.compare_digest(token, presented.encode()):
                found = r
        if found is None:
            raise Problem(
                "UNAUTHENTICATED",
                "the bearer token is not valid",
                headers={"www-authenticate": "Bearer"},
            )
        if found not in (role, "admin"):
            raise Problem("PERMISSION_DENIED", f"{what} needs the {role} role (or admin)")

    def _drain_body(self) -> None:
        """Reads and drops a request body within :data:`MAX_BODY` (no route takes one)."""
        self._drained = True
        if self.headers.get("transfer-encoding"):
            self.close_connection = True
            raise Problem("INVALID_ARGUMENT", "no route of a worker takes a body")
        length = self.headers.get("content-length")
        if length is None:
            return
        if not length.strip().isdigit():
            self.close_connection = True
            raise Problem("INVALID_ARGUMENT", "Content-Length is not a number")
        n = int(length)
        if n > MAX_BODY:
            self.close_connection = True
            raise Problem(
                "RESOURCE_EXHAUSTED",
                f"the request body is larger than {MAX_BODY} bytes",
                status=413,
                title="Payload too large",
            )
        while n > 0:
            chunk = self.rfile.read(min(n, 16 << 10))
            if not chunk:
                self.close_connection = True
                return
            n -= len(chunk)

    # -- the routes -------------------------------------------------------------------------

    def _metrics(self) -> None:
        tasks, buffered, produced, served = self.server.state.counters()
        out = []
        for name, help_text, kind, v in (
            ("shardwise_worker_tasks", "Tasks this worker runs.", "gauge", tasks),
            (
                "shardwise_worker_buffered_elements",
                "Elements produced and not yet read, over the live tasks.",
                "gauge",
                buffered,
            ),
            (
                "shardwise_worker_elements_produced_total",
                "Elements produced by the live tasks.",
                "counter",
                produced,
            ),
            (
                "shardwise_worker_elements_served_total",
                "Elements of the live tasks handed to clients.",
                "counter",
                served,
            ),
        ):
            out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n{name} {v}\n")
        self._send(200, "text/plain; version=0.0.4", "".join(out).encode())

    def _elements(self, raw_id: str, query: str) -> None:
        q = _parse_query(query)
        task_id = _parse_id(raw_id)
        max_elements = q.get("max", DEFAULT_MAX_ELEMENTS)
        if not 1 <= max_elements <= MAX_ELEMENTS:
            raise Problem(
                "INVALID_ARGUMENT", f"max must be in 1..={MAX_ELEMENTS}, not {max_elements}"
            )
        arrow = wants_arrow(self.headers.get_all("accept") or [])
        compression = (
            compression_of(self.headers.get_all(COMPRESSION_HEADER) or []) if arrow else None
        )
        state = self.server.state
        kind, found = state.lookup(task_id)
        if kind in ("unknown", "gone") and (kind == "unknown" or found == "lost"):
            state.heartbeat_now()
            raise Problem(
                "NOT_FOUND",
                f"task {task_id} is not known to this worker (yet): it is asking the "
                "dispatcher; retry shortly",
            )
        if kind == "unassigned":
            raise Problem(
                "NOT_FOUND",
                f"the dispatcher has not assigned task {task_id} to this worker (a heartbeat "
                "sent after this task was first asked for came back without it): ask the "
                "dispatcher which worker serves it",
            )
        if kind == "gone":
            error = gone_answer(found, task_id)
            if error is not None:
                raise Problem(error.code, error.detail)
            return self._reply(arrow, compression, None, [], True, None)
        task = found
        coordinated = task.definition.get("num_consumers")
        if coordinated is None and ("consumer_index" in q or "round" in q):
            raise Problem(
                "INVALID_ARGUMENT",
                "consumer_index and round are only for coordinated reads; task "
                f"{task_id} is not one",
            )
        if coordinated is not None and ("consumer_index" not in q or "round" not in q):
            raise Problem(
                "INVALID_ARGUMENT",
                f"task {task_id} is a coordinated read for {coordinated} consumers: pass "
                "consumer_index and round",
            )
        try:
            read = task.read(max_elements, READ_WAIT, "arrow" if arrow else "json")
        except TaskError as e:
            title = "Not Acceptable" if e.status == 406 else None
            raise Problem(e.code, e.detail, status=e.status, title=title) from None
        self._reply(arrow, compression, task.schema, read.items, read.end, read.origin)

    def _reply(
        self,
        arrow: bool,
        compression: str | None,
        schema: Any,
        items: list[Any],
        end: bool,
        origin: list[Any] | None,
    ) -> None:
        if arrow:
            body = rows.arrow_stream(schema, items, origin if items else None, compression)
            self._send(200, ARROW_STREAM, body, {END_HEADER: "true" if end else "false"})
            return
        texts: list[bytes] = []
        for item in items:
            texts.extend([item] if isinstance(item, bytes) else rows.rows_json(item))
        body = (
            b'{"elements":['
            + b",".join(texts)
            + b'],"end_of_sequence":'
            + (b"true" if end else b"false")
        )
        if origin is not None and items:
            body += b',"origin":' + json.dumps(origin, separators=(",", ":")).encode()
        self._send_json(200, body + b"}")

    # -- writing ----------------------------------------------------------------------------

    def _send_json(self, status: int, body: bytes) -> None:
        self._send(status, "application/json", body)

    def _send_problem(self, p: Problem) -> None:
        status, body = problem_body(p.code, p.detail, p.status, p.title)
        headers = dict(p.headers)
        if not getattr(self, "_drained", True) and (
            self.headers.get("content-length", "0").strip() not in ("", "0")
            or self.headers.get("transfer-encoding")
        ):
            self.close_connection = True  # a body left unread: the next request is not here
        if status in (429, 503):
            headers.setdefault("retry-after", "1")
        try:
            self._send(status, "application/problem+json", body, headers)
        except (OSError, ssl.SSLError):
            self.close_connection = True

    def _send(
        self, status: int, content_type: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def _parse_query(query: str) -> dict[str, int]:
    """The element route's query: ``max``, ``consumer_index``, ``round`` (non-negative
    integers, each at most once, nothing else)."""
    out: dict[str, int] = {}
    if not query:
        return out
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, max_num_fields=8)
    except ValueError as e:
        raise Problem("INVALID_ARGUMENT", f"invalid query: {e}") from None
    for key, value in pairs:
        if key not in _QUERY:
            raise Problem(
                "INVALID_ARGUMENT",
                f"invalid query: unknown field {key[:64]!r}, expected one of "
                "`consumer_index`, `round`, `max`",
            )
        if key in out:
            raise Problem("INVALID_ARGUMENT", f"invalid query: duplicate field `{key}`")
        v = value.strip()
        if not v.isascii() or not v.isdigit() or len(v) > 20:
            raise Problem(
                "INVALID_ARGUMENT",
                f"invalid query: {key}: {value[:64]!r} is not a non-negative integer",
            )
        out[key] = int(v)
    return out


def _parse_id(raw: str) -> int:
    """A task id from the path: a decimal of at most 20 digits that fits in 64 bits."""
    if len(raw) > 64:
        raise Problem(
            "INVALID_ARGUMENT",
            f"task_id: a {len(raw)}-byte value is not an id (a decimal of at most 20 digits)",
        )
    if not raw or not raw.isascii() or not raw.isdigit():
        raise Problem("INVALID_ARGUMENT", f"task_id: {raw!r} is not a decimal id")
    value = int(raw)
    if value >= 1 << 64:
        raise Problem("INVALID_ARGUMENT", f"task_id: {raw!r} is out of range for an id")
    return value
