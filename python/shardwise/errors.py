"""The one exception of the package: :class:`ShardwiseError`.

Every Shardwise server answers an error as an RFC 9457 problem (``application/problem+json``)
whose ``code`` is the gRPC-style status class TensorFlow uses (``NOT_FOUND``,
``UNAVAILABLE``...). A caller branches on that code, not on the HTTP status or the text, so
the exception carries it as :attr:`ShardwiseError.code`, whatever went wrong: a problem answer,
a connection that failed (``UNAVAILABLE``, as gRPC counts a refused or reset connection), a
certificate that is not trusted, an answer that is not what the API documents (``INTERNAL``),
or a reader asked for what it cannot do (``FAILED_PRECONDITION``).

Whether a failure may be retried is decided in one place, :attr:`ShardwiseError.is_retryable`,
with the Rust client's rule: ``UNAVAILABLE`` problems, transport failures and a follower's
redirect are retried with backoff; nothing else is (a certificate refused now is refused on
every try).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["CODES", "ShardwiseError", "code_of_status", "status_of"]

#: The status classes Shardwise answers, with their HTTP status and title.
_TABLE: dict[str, tuple[int, str]] = {
    "INVALID_ARGUMENT": (400, "Invalid argument"),
    "UNAUTHENTICATED": (401, "Unauthenticated"),
    "PERMISSION_DENIED": (403, "Permission denied"),
    "NOT_FOUND": (404, "Not found"),
    "FAILED_PRECONDITION": (409, "Failed precondition"),
    "ALREADY_EXISTS": (409, "Already exists"),
    "RESOURCE_EXHAUSTED": (429, "Resource exhausted"),
    "UNAVAILABLE": (503, "Unavailable"),
    "INTERNAL": (500, "Internal error"),
}

#: Every status class a problem's ``code`` may hold.
CODES = tuple(_TABLE)

#: The members of a problem object that have attributes of their own.
_STANDARD = ("type", "title", "status", "detail", "code", "instance")

#: The most characters of a body that is not a problem an error quotes.
_MAX_QUOTED = 500

#: How the failure came about (:attr:`ShardwiseError.kind`).
_KINDS = ("problem", "transport", "redirect", "tls", "protocol", "client")


def status_of(code: str) -> tuple[int, str]:
    """The HTTP status and title of status class ``code`` (``(500, "Internal error")`` for an
    unknown one)."""
    return _TABLE.get(code, (500, "Internal error"))


def code_of_status(status: int) -> str:
    """The status class of an HTTP error status that came without a problem body (a proxy's
    answer, say): the reverse of the servers' table, with the statuses they use within a
    class (405 and 415 are ``INVALID_ARGUMENT``, 408 and 502 to 504 ``UNAVAILABLE``...)."""
    if status in (400, 405, 415):
        return "INVALID_ARGUMENT"
    if status == 401:
        return "UNAUTHENTICATED"
    if status == 403:
        return "PERMISSION_DENIED"
    if status == 404:
        return "NOT_FOUND"
    if status == 409:
        return "FAILED_PRECONDITION"
    if status in (413, 429):
        return "RESOURCE_EXHAUSTED"
    if status == 408 or 502 <= status <= 504:
        return "UNAVAILABLE"
    return "INTERNAL"


class ShardwiseError(Exception):
    """A call to a dispatcher or a worker failed, or a reader cannot do what was asked.

    Attributes:
        code: The status class, e.g. ``"NOT_FOUND"`` or ``"UNAVAILABLE"`` (see :data:`CODES`).
        status: The HTTP status of the answer, or ``None`` when there was none (a transport
            failure, a reader's own refusal).
        title: The problem's title (the status class's title when the answer had none).
        detail: What went wrong this time.
        type: The problem's type URI, if the answer was a problem.
        instance: The problem's ``instance`` member, if any.
        extra: The problem's other members (``tf_exception``, ``missing``, ``leader``...).
        context: Which call failed, as ``METHOD path`` (and ``at host:port`` for a worker).
        kind: How it came about: ``"problem"`` (a problem answer), ``"transport"`` (no
            answer), ``"redirect"`` (a follower's redirect that was not followed), ``"tls"``
            (the TLS handshake failed), ``"protocol"`` (a 2xx answer that is not what the API
            documents) or ``"client"`` (refused by this package before or without a call).
    """

    code: str
    status: int | None
    title: str
    detail: str
    type: str | None
    instance: str | None
    extra: dict[str, Any]
    context: str | None
    kind: str

    def __init__(
        self,
        code: str,
        detail: str,
        *,
        status: int | None = None,
        title: str | None = None,
        type: str | None = None,
        instance: str | None = None,
        extra: Mapping[str, Any] | None = None,
        context: str | None = None,
        kind: str = "client",
    ) -> None:
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {', '.join(_KINDS)}, not {kind!r}")
        self.code = code
        self.detail = detail
        self.status = status
        self.title = title if title is not None else status_of(code)[1]
        self.type = type
        self.instance = instance
        self.extra = dict(extra or {})
        self.context = context
        self.kind = kind
        super().__init__(str(self))

    def __str__(self) -> str:
        status = f" ({self.status})" if self.status is not None else ""
        where = f"{self.context}: " if self.context else ""
        return f"{where}{self.code}{status}: {self.detail}"

    def __repr__(self) -> str:
        return (
            f"ShardwiseError(code={self.code!r}, status={self.status!r}, "
            f"detail={self.detail!r}, context={self.context!r}, kind={self.kind!r})"
        )

    def __reduce__(self) -> Any:
        # Pickled whole (a DataLoader worker's exception crosses to the main process so).
        return (_rebuild, (self.code, self.detail, self._fields()))

    def _fields(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "title": self.title,
            "type": self.type,
            "instance": self.instance,
            "extra": self.extra,
            "context": self.context,
            "kind": self.kind,
        }

    @property
    def is_retryable(self) -> bool:
        """Whether the call may succeed if made again later (with backoff): an
        ``UNAVAILABLE`` problem, a transport failure or a follower's redirect. A certificate
        that is not trusted, an answer that is not what the API documents and every other
        problem are not retried."""
        if self.kind == "problem":
            return self.code == "UNAVAILABLE"
        return self.kind in ("transport", "redirect")

    def with_context(self, context: str) -> ShardwiseError:
        """The same error naming the call ``context`` (a new object)."""
        fields = self._fields()
        fields["context"] = context
        return ShardwiseError(self.code, self.detail, **fields)

    @classmethod
    def from_response(
        cls, status: int, body: bytes, *, context: str | None = None
    ) -> ShardwiseError:
        """The error of a non-2xx answer with ``body``: its problem when the body is a problem
        object with a known ``code``, else the status's class with the body's start as the
        detail (as the Rust client reads a proxy's answer)."""
        problem = _problem(body)
        if problem is None:
            text = body.decode("utf-8", errors="replace")[:_MAX_QUOTED]
            return cls(code_of_status(status), text, status=status, context=context, kind="problem")
        code = problem["code"]
        p_status = problem.get("status")
        if not isinstance(p_status, int) or isinstance(p_status, bool):
            p_status = status

        def member(key: str) -> str | None:
            v = problem.get(key) if problem is not None else None
            return v if isinstance(v, str) else None

        extra = {k: v for k, v in problem.items() if k not in _STANDARD}
        return cls(
            code,
            member("detail") or "",
            status=p_status,
            title=member("title"),
            type=member("type"),
            instance=member("instance"),
            extra=extra,
            context=context,
            kind="problem",
        )

    @classmethod
    def transport(cls, reason: str, *, context: str | None = None) -> ShardwiseError:
        """No answer: the connection failed, was refused or reset, or timed out
        (``UNAVAILABLE``, retried)."""
        return cls("UNAVAILABLE", reason, context=context, kind="transport")

    @classmethod
    def protocol(cls, reason: str, *, context: str | None = None) -> ShardwiseError:
        """A 2xx answer that is not what the API documents (``INTERNAL``, not retried)."""
        return cls("INTERNAL", f"unexpected answer: {reason}", context=context, kind="protocol")

    @classmethod
    def tls(cls, reason: str, *, context: str | None = None) -> ShardwiseError:
        """The TLS handshake failed: the server's certificate is not trusted or not for its
        host, or it does not speak TLS (``UNAVAILABLE``, but not retried)."""
        return cls("UNAVAILABLE", f"TLS handshake failed: {reason}", context=context, kind="tls")


def _rebuild(code: str, detail: str, fields: dict[str, Any]) -> ShardwiseError:
    return ShardwiseError(code, detail, **fields)


def _problem(body: bytes) -> dict[str, Any] | None:
    """``body`` as a problem object, if it is one with a known ``code``."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("code") not in _TABLE:
        return None
    return value
