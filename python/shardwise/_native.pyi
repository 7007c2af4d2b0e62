"""Types of the native module (``python/native``): the Rust the package runs."""

from collections.abc import Mapping, Sequence
from typing import Any

class PositionTracker:
    """The fold of the elements a reader handed out into a read position (the Rust core's);
    positions as JSON text."""

    def __init__(self) -> None: ...
    def copy(self) -> PositionTracker: ...
    def load(self, text: str) -> None: ...
    def consumed(self, run: Mapping[str, Any], taken: int) -> None: ...
    def position(self, dataset_id: str, repetition: int) -> str: ...

def merge_positions(positions: Sequence[str]) -> str: ...
def check_runs(runs: Any) -> None: ...
def fingerprint(definition: Mapping[str, Any]) -> str | None: ...

class Reader:
    """A read through the Rust client (``shardwise_client::distribute`` or
    ``distribute_batches``) on the module's runtime; made (and set up: dataset, job,
    iteration) by the constructor, which raises ``ShardwiseError`` when a call fails."""

    def __init__(
        self,
        dispatchers: Sequence[str],
        dataset: Mapping[str, Any],
        format: str,
        options: Mapping[str, Any],
    ) -> None: ...
    def next(self) -> Any | None:
        """The next element (a JSON value, or a ``pyarrow.RecordBatch``); ``None`` at the
        end; ``ShardwiseError`` when the read failed."""
    def position(self, held_back: int) -> str: ...
    def set_elements_per_request(self, count: int) -> None: ...
    def tasks(self) -> list[dict[str, Any]]: ...
    def close(self) -> None: ...
    @property
    def over(self) -> bool: ...
    @property
    def dataset_id(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def iteration_id(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def repetition(self) -> int: ...

class Dispatcher:
    """The dispatcher's REST calls through the Rust client's failover (``rest::Failover``)."""

    def __init__(
        self,
        addresses: str | Sequence[str],
        token: str | None = None,
        ca_file: str | None = None,
        timeout: float = 30.0,
        unavailable_timeout: float = 3600.0,
    ) -> None: ...
    @property
    def addresses(self) -> list[str]: ...
    @property
    def current(self) -> str: ...
    def call(
        self,
        method: str,
        path: str,
        body: str | None = None,
        query: Sequence[tuple[str, str]] = ...,
        retry: bool = True,
    ) -> str:
        """The JSON answer as text; ``ShardwiseError`` when the call failed."""
