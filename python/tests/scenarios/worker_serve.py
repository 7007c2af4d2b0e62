"""Python workers for the black-box tests (``tests/tests/python_worker.rs``):
``shardwise.worker.serve`` of :func:`squares` until SIGTERM.

``squares`` maps a ``range`` split to rows ``{"x": i, "y": i * i, "pid": <its process>}`` as a
dict of NumPy arrays (so JSON and Arrow reads both work), in batches of at most 7 rows; the
``pid`` column tells a test which process produced an element. For a ``list`` source holding
``"boom"`` it raises ``ValueError`` after its first row.

Usage: worker_serve.py DISPATCHER_URL PROCESSES [--no-restart]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

import shardwise.worker


def squares(split: shardwise.worker.Split) -> Iterator[Any]:
    source = split.dataset["source"]
    if "list" in source and "boom" in source["list"]["elements"]:
        yield {"x": np.array([-1]), "y": np.array([1]), "pid": np.array([os.getpid()])}
        raise ValueError(f"boom in split {split.value}")
    e = split.elements()
    x = np.arange(e.start, e.stop, e.step, dtype=np.int64)
    for at in range(0, len(x), 7):
        part = x[at : at + 7]
        yield {"x": part, "y": part * part, "pid": np.full(len(part), os.getpid())}


if __name__ == "__main__":
    shardwise.worker.serve(
        squares,
        sys.argv[1],
        processes=int(sys.argv[2]),
        restart="--no-restart" not in sys.argv[3:],
        heartbeat_interval=0.2,
        buffer=64,
    )
