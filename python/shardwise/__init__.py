"""Shardwise for Python: read datasets through a Shardwise dispatcher and its workers, with
exact read positions to resume from.

>>> import shardwise
>>> reader = shardwise.distribute("http://127.0.0.1:5050",
...                               {"source": {"range": {"stop": 10}}})  # doctest: +SKIP
>>> for element in reader:                                           # doctest: +SKIP
...     checkpoint = reader.position()

* :class:`Dispatcher`: the dispatcher's REST API (retries, bearer tokens, TLS, replicas).
* :func:`distribute` / :class:`Reader`: an iterator over a dataset's elements (JSON values,
  or ``pyarrow.RecordBatch`` es), with :meth:`Reader.position` and ``resume_from``.
* :class:`PositionTracker` / :func:`merge_positions`: the read-position fold, and one position
  out of those of several readers.
* :class:`ShardwiseError`: every failure, with the problem's ``code``.
* :mod:`shardwise.torch` (PyTorch), :mod:`shardwise.jax` (JAX): resumable datasets and
  iterators; :mod:`shardwise.launch`: launcher environments for both.
* :mod:`shardwise.worker`: Python workers that run your function on a dispatcher's splits.
"""

from .client import Dispatcher
from .errors import ShardwiseError
from .positions import PositionTracker, merge_positions
from .reader import Reader, distribute

__all__ = [
    "Dispatcher",
    "PositionTracker",
    "Reader",
    "ShardwiseError",
    "__version__",
    "distribute",
    "merge_positions",
]


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return "0+unknown"
    try:
        return version("shardwise")
    except PackageNotFoundError:
        return "0+unknown"


#: The installed package's version (the workspace's).
__version__ = _version()
