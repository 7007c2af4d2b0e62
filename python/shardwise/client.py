"""The dispatcher's REST API as typed Python calls: :class:`Dispatcher`.

The calls are the Rust client's (``shardwise._native.Dispatcher``): every call retries what
may be retried (``UNAVAILABLE`` answers, transport failures, a follower's redirect:
:attr:`ShardwiseError.is_retryable`) with capped exponential backoff (10 ms doubling to 1 s)
for at most ``unavailable_timeout`` seconds, going through the configured replicas in turn
(a redirect is followed only to a replica of the list); every other failure raises at once.
The answers are the JSON the API documents (``openapi/openapi.json``), as dicts.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from . import _native
from .errors import ShardwiseError

__all__ = ["PROTOCOL_VERSION", "Dispatcher", "ProcessingMode", "connect"]

#: The dispatcher protocol version this package speaks (``GET /v1/version``).
PROTOCOL_VERSION = 1

#: How a job divides data: ``"parallel_epochs"``, ``"distributed_epoch"`` or
#: ``{"sharding_policy": "OFF" | "DYNAMIC" | "FILE" | "DATA" | "FILE_OR_DATA" | "HINT"}``.
ProcessingMode = Union[str, Mapping[str, str]]


class Backoff:
    """Capped exponential backoff: ``initial`` seconds, doubled per failure up to ``maximum``."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def next_delay(self) -> float:
        """The pause to take now; the next one doubles."""
        d = self._next
        self._next = min(self._next * 2, self.maximum)
        return d

    def reset(self) -> None:
        """Back to ``initial`` after a success."""
        self._next = self.initial


def _object(value: Any, context: str) -> dict[str, Any]:
    """An answer that must be a JSON object; a protocol error when it is not."""
    if not isinstance(value, dict):
        raise ShardwiseError.protocol(f"not a JSON object: {str(value)[:80]}", context=context)
    return value


def _text(answer: dict[str, Any], key: str, context: str) -> str:
    """An answer's id member, as text; a protocol error when it has none."""
    value = answer.get(key)
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ShardwiseError.protocol(f"no {key} in the answer", context=context)
    return str(value)


def _id(value: Any, what: str) -> str:
    """An id as a URL path segment (percent-encoded: the servers judge it)."""
    text = str(value)
    if not text:
        raise ValueError(f"{what} is empty")
    return urllib.parse.quote(text, safe="")


class Dispatcher:
    """A Shardwise dispatcher (or the replicas of one), over its REST API.

    Args:
        address_or_addresses: ``http://host:port``, ``host:port`` or ``https://host:port``;
            or the replicas of one dispatcher, as a comma-separated string or a list.
        token: A bearer token sent with every call (the ``client`` role, or ``admin``), and
            to the workers a reader reads from.
        ca_file: A PEM file of CA certificates trusted for ``https://`` dispatchers and
            workers, besides the system's roots.
        timeout: The most seconds one request may wait for its answer.
        unavailable_timeout: How long (seconds) retryable failures are retried before a call
            (or a reader) gives up with ``UNAVAILABLE``.

    Raises ``ValueError`` for an address that is not an http(s) URL, and ``OSError`` for a
    ``ca_file`` that cannot be read as PEM certificates.
    """

    def __init__(
        self,
        address_or_addresses: str | Sequence[str],
        *,
        token: str | None = None,
        ca_file: str | None = None,
        timeout: float = 30.0,
        unavailable_timeout: float = 3600.0,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if unavailable_timeout < 0:
            raise ValueError("unavailable_timeout must not be negative")
        if token is not None and (not token or any(c in token for c in "\r\n")):
            raise ValueError("token must be a non-empty string without line breaks")
        addresses = address_or_addresses
        if not isinstance(addresses, str):
            addresses = [str(a) for a in addresses]
        self._native = _native.Dispatcher(
            addresses, token, ca_file, float(timeout), float(unavailable_timeout)
        )
        self.token = token
        self.ca_file = ca_file
        self.timeout = timeout
        self.unavailable_timeout = unavailable_timeout

    def __repr__(self) -> str:
        return f"Dispatcher({self.addresses!r})"

    @property
    def addresses(self) -> list[str]:
        """The configured base URLs, in order."""
        return list(self._native.addresses)

    @property
    def current(self) -> str:
        """The base URL calls go to first: the replica that answered last."""
        return str(self._native.current)

    # -- the calls ----------------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        body: Any | None = None,
        *,
        query: Mapping[str, Any] | None = None,
        retry: bool = True,
    ) -> Any:
        """Any call of the API (``call("GET", "/v1/jobs/5000")``): its JSON answer. With
        ``retry``, retryable failures are retried for up to ``unavailable_timeout``; without,
        each replica is tried once."""
        text = None if body is None else json.dumps(body)
        pairs = [(str(k), str(v)) for k, v in (query or {}).items()]
        return json.loads(self._native.call(method, path, text, pairs, retry))

    def _object(self, method: str, path: str, body: Any | None = None) -> dict[str, Any]:
        """:meth:`call` of a route whose answer is a JSON object."""
        return _object(self.call(method, path, body), f"{method} {path}")

    def version(self) -> dict[str, Any]:
        """``GET /v1/version``: ``{"version", "incarnation", "fault_tolerant"}``."""
        return self._object("GET", "/v1/version")

    def check_version(self) -> dict[str, Any]:
        """:meth:`version`, raising ``FAILED_PRECONDITION`` when the dispatcher speaks another
        protocol version than :data:`PROTOCOL_VERSION`."""
        v = self.version()
        if v.get("version") != PROTOCOL_VERSION:
            raise ShardwiseError(
                "FAILED_PRECONDITION",
                f"Version mismatch with the dispatcher: it speaks protocol version "
                f"{v.get('version')!r:.40}, this client {PROTOCOL_VERSION}",
                context="GET /v1/version",
            )
        return v

    def leader(self) -> dict[str, Any]:
        """``GET /v1/leader``: this replica's role, the leader's URL and its term."""
        return self._object("GET", "/v1/leader")

    def status(self) -> dict[str, Any]:
        """``GET /v1/status``: workers, datasets, jobs, iterations, clients, the journal
        (the ``monitor`` or ``admin`` role)."""
        return self._object("GET", "/v1/status")

    def workers(self) -> list[dict[str, Any]]:
        """``GET /v1/workers``: every registered worker (``worker_address``, ``tags``,
        ``tasks``, ``alive``...)."""
        workers = self._object("GET", "/v1/workers").get("workers")
        if not isinstance(workers, list):
            raise ShardwiseError.protocol("no workers list", context="GET /v1/workers")
        return workers

    def register_dataset(
        self,
        dataset: Mapping[str, Any] | str,
        *,
        dataset_id: str | None = None,
        metadata: Any | None = None,
    ) -> str:
        """``POST /v1/datasets``: get-or-register ``dataset`` (a definition as a dict or its
        JSON text, e.g. ``{"source": {"range": {"stop": 10}}}``), under ``dataset_id`` when
        given (else the dispatcher's id for that definition). Returns the dataset id."""
        if isinstance(dataset, str):
            try:
                dataset = json.loads(dataset)
            except ValueError as e:
                raise ValueError(f"the dataset is not JSON: {e}") from None
        if not isinstance(dataset, Mapping):
            raise TypeError("a dataset definition is a JSON object")
        body: dict[str, Any] = {"dataset": dataset}
        if dataset_id is not None:
            body["dataset_id"] = dataset_id
        if metadata is not None:
            body["metadata"] = metadata
        return _text(self._object("POST", "/v1/datasets", body), "dataset_id", "POST /v1/datasets")

    def dataset(self, dataset_id: str) -> dict[str, Any]:
        """``GET /v1/datasets/{id}``: ``{"dataset_id", "dataset", "metadata"}`` (the definition
        in its canonical form). ``NOT_FOUND`` for an unknown id."""
        return self._object("GET", f"/v1/datasets/{_id(dataset_id, 'dataset_id')}")

    def delete_dataset(self, dataset_id: str) -> dict[str, Any]:
        """``DELETE /v1/datasets/{id}``: a dataset no job with iterations uses."""
        return self._object("DELETE", f"/v1/datasets/{_id(dataset_id, 'dataset_id')}")

    def job(
        self,
        dataset_id: str,
        *,
        processing_mode: ProcessingMode = "parallel_epochs",
        name: str | None = None,
        target_workers: str | None = None,
        split_size: int | None = None,
    ) -> str:
        """``POST /v1/jobs``: get-or-create a job reading ``dataset_id``. A job with ``name``
        is shared: every client naming it gets the same job (with the same dataset, mode and
        ``split_size``, or ``INVALID_ARGUMENT``). ``target_workers`` is ``"AUTO"`` (default),
        ``"ANY"`` or ``"LOCAL"``; ``split_size`` is the elements per DYNAMIC split of a range or
        list (default: the dispatcher's). Returns the job id."""
        body: dict[str, Any] = {"dataset_id": dataset_id, "processing_mode": processing_mode}
        if name is not None:
            body["job_name"] = name
        if target_workers is not None:
            body["target_workers"] = target_workers
        if split_size is not None:
            body["split_size"] = split_size
        return _text(self._object("POST", "/v1/jobs", body), "job_id", "POST /v1/jobs")

    def get_job(self, job_id: str) -> dict[str, Any]:
        """``GET /v1/jobs/{id}``: the job and its iterations."""
        return self._object("GET", f"/v1/jobs/{_id(job_id, 'job_id')}")

    def iteration(
        self,
        job_id: str,
        *,
        repetition: int = 0,
        resume_from: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``POST /v1/jobs/{id}/iterations``: get-or-create the iteration ``repetition`` of
        the job and take a client lease on it: ``{"iteration_id", "client_id",
        "incarnation"}``. With ``resume_from`` (a read position of a ``distributed_epoch``
        job, whose repetition it must be) the iteration hands out only what the position has
        not consumed. Release the lease with :meth:`release_client`."""
        body: dict[str, Any] = {"repetition": repetition}
        if resume_from is not None:
            body["resume_from"] = resume_from
        return self._object("POST", f"/v1/jobs/{_id(job_id, 'job_id')}/iterations", body)

    def client_heartbeat(
        self, client_id: str, *, known_tasks_version: int | None = None
    ) -> dict[str, Any]:
        """``POST /v1/clients/{id}/heartbeat``: the iteration's tasks (left out, with
        ``tasks_unchanged``, when they are those of ``known_tasks_version``) and whether it is
        finished."""
        body: dict[str, Any] = {}
        if known_tasks_version is not None:
            body["known_tasks_version"] = known_tasks_version
        return self._object("POST", f"/v1/clients/{_id(client_id, 'client_id')}/heartbeat", body)

    def release_client(self, client_id: str) -> dict[str, Any]:
        """``DELETE /v1/clients/{id}``: release a client lease."""
        return self._object("DELETE", f"/v1/clients/{_id(client_id, 'client_id')}")

    # -- for readers ----------------------------------------------------------------------

    def worker_url(self, address: str) -> str:
        """A worker's element server at ``address`` (``host:port``): ``https://`` when the
        dispatcher is called over TLS (a TLS cluster is TLS throughout), else ``http://``."""
        scheme = "https" if self.current.startswith("https://") else "http"
        return f"{scheme}://{address}"



def connect(
    dispatcher: Union[Dispatcher, str, Sequence[str]],
    token: Optional[str] = None,
    ca_file: Optional[str] = None,
) -> Dispatcher:
    """``dispatcher`` itself when it is a :class:`Dispatcher` (whose token and CA file are its
    own: passing others is an error), else a :class:`Dispatcher` of those addresses with
    ``token`` and ``ca_file``."""
    if isinstance(dispatcher, Dispatcher):
        if token is not None or ca_file is not None:
            raise ValueError("token and ca_file go to Dispatcher(...) when a Dispatcher is given")
        return dispatcher
    return Dispatcher(dispatcher, token=token, ca_file=ca_file)
