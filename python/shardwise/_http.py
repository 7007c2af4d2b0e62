"""HTTP for the client: one urllib3 pool per process, JSON calls, problems as errors, and
failover between dispatcher replicas.

**One pool per process.** Connections are kept alive in a urllib3 ``PoolManager`` (one per TLS
setting) created on first use. A forked child (a PyTorch ``DataLoader`` worker) must not share
its parent's sockets, so the pools remember the pid that made them and are made anew when it
changes (and a fork hook resets the lock a parent thread may have held).

**Several dispatcher replicas** (:class:`Failover`, the Rust client's rule in
``gateway/client/src/rest.rs``): every call goes to the replica that answered last; on a
transport failure, an ``UNAVAILABLE`` answer or a redirect it moves on, each configured URL at
most once per call. A redirect (307 or 308, what a follower answers) is followed only to a URL
of the list (same scheme, host and port), and then at once; any other ``Location`` is never
called (a bearer token must not go to an address the caller did not list) and the next URL is
tried. When every URL failed, the last retryable error is raised and the caller's backoff
applies. urllib3 itself never follows a redirect nor retries.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import urllib3
from urllib3.exceptions import HTTPError, SSLError

from .errors import ShardwiseError

#: The most bytes a JSON answer may have (a heartbeat of thousands of tasks, a large read).
MAX_JSON_BODY = 512 << 20
#: The most bytes of an error answer read (a problem is a few hundred bytes).
MAX_ERROR_BODY = 64 << 10
#: The longest ``Location`` a redirect is read from.
MAX_LOCATION = 2048
#: The connect timeout, at most (seconds).
CONNECT_TIMEOUT = 5.0

_lock = threading.Lock()
_pools: dict[str | None, urllib3.PoolManager] = {}
_pid = os.getpid()


def _after_fork() -> None:
    global _lock, _pools, _pid
    _lock = threading.Lock()
    _pools = {}
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def pool_manager(ca_file: str | None = None) -> urllib3.PoolManager:
    """This process's pool for ``ca_file`` (``None``: the system's roots only), made on first
    use and again in a forked child."""
    global _pools, _pid
    with _lock:
        if _pid != os.getpid():
            _pools = {}
            _pid = os.getpid()
        pm = _pools.get(ca_file)
        if pm is None:
            context = ssl.create_default_context()
            if ca_file is not None:
                context.load_verify_locations(cafile=ca_file)
            pm = urllib3.PoolManager(num_pools=64, maxsize=4, retries=False, ssl_context=context)
            _pools[ca_file] = pm
        return pm


def base_url(address: str) -> str:
    """``http://host:port`` from ``host:port``, ``http://host:port`` or ``http://host:port/``;
    ``https://host:port`` from ``https://host:port``. ``ValueError`` for anything else."""
    a = address.strip().rstrip("/")
    if not a:
        raise ValueError("the address is empty")
    url = a if "://" in a else f"http://{a}"
    scheme, _, hostport = url.partition("://")
    if scheme.lower() not in ("http", "https"):
        raise ValueError(f"{a!r:.100} is not an http:// or https:// URL")
    if not hostport or "/" in hostport or any(c.isspace() for c in hostport) or "," in hostport:
        raise ValueError(f"{a!r:.100} is not an http(s)://host:port URL")
    _origin(f"{scheme.lower()}://{hostport}", a)
    return f"{scheme.lower()}://{hostport}"


def _origin(url: str, shown: str = "") -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an http(s) URL, the default port filled in."""
    try:
        u = urllib.parse.urlsplit(url)
        port = u.port
    except ValueError:
        raise ValueError(f"{(shown or url)!r:.100} is not an http(s)://host:port URL") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"{(shown or url)!r:.100} is not an http(s)://host:port URL")
    return u.scheme, u.hostname.lower(), port or (443 if u.scheme == "https" else 80)


def parse_addresses(addresses: str | Sequence[str]) -> list[str]:
    """The base URLs of a comma-separated list or a sequence of addresses, validated, without
    duplicates (by scheme, host and port). ``ValueError`` naming the bad entry."""
    items = addresses.split(",") if isinstance(addresses, str) else list(addresses)
    if not items or (isinstance(addresses, str) and not addresses.strip()):
        raise ValueError("no dispatcher address given")
    bases: list[str] = []
    origins: list[tuple[str, str, int]] = []
    for i, a in enumerate(items):
        if not isinstance(a, str):
            raise TypeError(f"dispatcher addresses must be strings, got {type(a).__name__}")
        try:
            base = base_url(a)
        except ValueError as e:
            where = f" (address {i + 1} of {len(items)})" if len(items) > 1 else ""
            raise ValueError(f"{e}{where}") from None
        o = _origin(base)
        if o not in origins:
            bases.append(base)
            origins.append(o)
    return bases


class Response:
    """A 2xx answer: its status, headers (lower-case names) and body."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self, context: str) -> Any:
        """The body as JSON; a protocol error when it is not."""
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError) as e:
            raise ShardwiseError.protocol(f"not JSON: {e}", context=context) from None


def request(
    method: str,
    url: str,
    *,
    token: str | None,
    ca_file: str | None,
    timeout: float,
    context: str,
    body: Any | None = None,
    query: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    max_body: int = MAX_JSON_BODY,
) -> Response:
    """One call: its 2xx answer, or a :class:`ShardwiseError` (a problem for any other
    status, ``kind="redirect"`` for a 307 or 308 with its ``Location`` in ``extra``, a
    transport or TLS failure, a body over ``max_body`` bytes)."""
    h = {"accept": "application/json"}
    if headers:
        h.update({k.lower(): v for k, v in headers.items()})
    if token is not None:
        h["authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data = json.dumps(body, separators=(",", ":")).encode()
        h["content-type"] = "application/json"
    if query:
        url = f"{url}?{urllib.parse.urlencode({k: str(v) for k, v in query.items()})}"
    pm = pool_manager(ca_file)
    try:
        res = pm.request(
            method,
            url,
            body=data,
            headers=h,
            timeout=urllib3.Timeout(connect=min(CONNECT_TIMEOUT, timeout), read=timeout),
            preload_content=False,
            redirect=False,
            retries=False,
        )
    except SSLError as e:
        raise ShardwiseError.tls(str(e), context=context) from None
    except (HTTPError, OSError, ValueError) as e:
        raise ShardwiseError.transport(str(e) or type(e).__name__, context=context) from None
    try:
        status = res.status
        res_headers = {k.lower(): v for k, v in res.headers.items()}
        ok = 200 <= status < 300
        # An error's body is read (a bounded part) even when unused, so that the connection
        # goes back to the pool with nothing of this answer left on it.
        payload = _read(res, max_body if ok else MAX_ERROR_BODY, context, truncate=not ok)
        if ok:
            return Response(status, res_headers, payload)
        if status in (307, 308):
            location = res_headers.get("location")
            if location is not None and len(location) > MAX_LOCATION:
                location = None
            raise ShardwiseError(
                "UNAVAILABLE",
                f"{url} redirected to {location!r} (not followed)"
                if location
                else f"{url} redirected without a usable Location",
                status=status,
                extra={"from": url, "location": location},
                context=context,
                kind="redirect",
            )
        raise ShardwiseError.from_response(status, payload, context=context)
    finally:
        res.release_conn()


def _read(res: Any, limit: int, context: str, *, truncate: bool) -> bytes:
    """Reads the body, at most ``limit`` bytes: past it the connection is closed and the
    answer refused (or, with ``truncate``, cut)."""
    length = res.headers.get("content-length")
    if length is not None and length.strip().isdigit() and int(length) > limit and not truncate:
        res.close()
        raise ShardwiseError.protocol(f"the answer is larger than {limit} bytes", context=context)
    if (
        length is not None
        and length.strip().isdigit()
        and int(length) <= limit
        and not res.headers.get("content-encoding")
    ):
        # A known length within the limit, not encoded: one read into one buffer (no chunks to
        # join, which would copy a record batch's tens of MB once more).
        n = int(length)
        try:
            body = res.read(n) if n else b""
            if len(body) == n and not res.read(1):
                return body
        except (HTTPError, OSError) as e:
            res.close()
            raise ShardwiseError.transport(str(e) or type(e).__name__, context=context) from None
        res.close()
        raise ShardwiseError.transport(
            f"the answer's body is not the {n} bytes its Content-Length says", context=context
        )
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            chunk = res.read(min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                res.close()
                if truncate:
                    return b"".join(chunks)[:limit]
                raise ShardwiseError.protocol(
                    f"the answer is larger than {limit} bytes", context=context
                )
    except (HTTPError, OSError) as e:
        res.close()
        raise ShardwiseError.transport(str(e) or type(e).__name__, context=context) from None
    return b"".join(chunks)


class Failover:
    """Calls to a list of dispatcher replicas with failover and the redirect rule (module
    docs). Which replica answered last is kept per object."""

    def __init__(
        self, bases: list[str], *, token: str | None, ca_file: str | None, timeout: float
    ) -> None:
        self.bases = bases
        self.origins = [_origin(b) for b in bases]
        self.token = token
        self.ca_file = ca_file
        self.timeout = timeout
        self.current = 0

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any | None = None,
        query: Mapping[str, Any] | None = None,
    ) -> Any:
        """One call (the current replica first, then the others, each at most once): the
        answer's JSON, or the error (the last retryable one when no replica answered)."""
        context = f"{method} {path}"
        n = len(self.bases)
        first = self.current
        tried = [False] * n
        i = first
        while True:
            tried[i] = True
            nxt: int | None = None
            try:
                res = request(
                    method,
                    self.bases[i] + path,
                    token=self.token,
                    ca_file=self.ca_file,
                    timeout=self.timeout,
                    context=context,
                    body=body,
                    query=query,
                )
                value = res.json(context)
                self.current = i
                return value
            except ShardwiseError as e:
                if not e.is_retryable:
                    self.current = i  # an answer: this replica is up
                    raise
                error = e
            if error.kind == "redirect":
                j = self.redirect_target(str(error.extra.get("from")), error.extra.get("location"))
                if j is not None and not tried[j]:
                    nxt = j
            if nxt is None:
                nxt = next((k for k in ((i + d) % n for d in range(1, n)) if not tried[k]), None)
            if nxt is None:
                raise error
            i = nxt

    def redirect_target(self, sent_to: str, location: str | None) -> int | None:
        """The index of the configured URL a redirect's ``Location`` (relative to
        ``sent_to``) names by scheme, host and port; ``None`` for any other or none."""
        if not location or not location.strip() or len(location) > MAX_LOCATION:
            return None
        try:
            target = _origin(urllib.parse.urljoin(sent_to, location.strip()))
        except ValueError:
            return None
        return self.origins.index(target) if target in self.origins else None
