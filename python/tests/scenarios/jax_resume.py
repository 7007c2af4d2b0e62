"""A JAX loop over Parquet rows (record batches as NumPy arrays, put on the CPU device),
checkpointed with get_state() as JSON, stopped, and resumed with set_state() in a new process:
every row exactly once over both runs.

Usage:
  jax_resume.py write DATA_DIR                     (writes the Parquet files, prints the dataset)
  jax_resume.py first URL DATASET_JSON JOB INDEX COUNT BATCHES OUT
                                     (process INDEX of COUNT: BATCHES batches, then its state)
  jax_resume.py second URL DATASET_JSON JOB OUT STATE_FILE...
                                     (one process: the merged states, set_state, to the end)
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import shardwise
from shardwise.jax import ShardwiseIterator

SIZES = [900, 1300, 700]
FAST = {"heartbeat_interval": 0.05, "elements_per_request": 64}


def write(root: str) -> None:
    paths = []
    first = 0
    for i, n in enumerate(SIZES):
        ids = np.arange(first, first + n, dtype=np.int64)
        x = (ids[:, None] * 4 + np.arange(4)).astype(np.float32)
        table = pa.table(
            {"id": ids, "x": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 4)}
        )
        path = os.path.join(root, f"part-{i}.parquet")
        pq.write_table(table, path, row_group_size=200)
        paths.append(path)
        first += n
    dataset = {
        "source": {
            "files": {
                "paths": paths,
                "format": "parquet",
                "split": "rows",
                "tensors": [{"name": "x", "dtype": "float32", "shape": [4]}],
            }
        }
    }
    print(json.dumps({"dataset": dataset, "rows": first}))


def step(batch: Dict[str, Any]) -> List[int]:
    """One training step's input: the batch on the device, checked against its ids."""
    ids = batch["id"]
    x = jax.device_put(batch["x"])
    assert x.shape == (len(ids), 4) and x.dtype == jnp.float32, (x.shape, x.dtype)
    want = jnp.asarray(ids[:, None] * 4 + np.arange(4), dtype=jnp.float32)
    assert bool(jnp.all(x == want)), "the tensor rows belong to their ids"
    return [int(i) for i in ids]


def first(url: str, dataset: str, job: str, index: int, count: int, batches: int, out: str) -> None:
    it = ShardwiseIterator(
        url,
        json.loads(dataset),
        job,
        process_index=index,
        process_count=count,
        format="arrow",
        **FAST,
    )
    got: List[int] = []
    for _ in range(batches):
        got.extend(step(next(it)))
    state = it.get_state()
    text = json.dumps(state)  # what Orbax's JSON checkpoint writes
    it.close()
    with open(out, "w") as f:
        json.dump({"rows": got, "state": json.loads(text)}, f)


def second(url: str, dataset: str, job: str, out: str, files: List[str]) -> None:
    states = []
    for name in files:
        with open(name) as f:
            states.append(json.load(f)["state"])
    merged = {"shardwise_position": shardwise.merge_positions(*states)}
    it = ShardwiseIterator(url, json.loads(dataset), job, format="arrow", **FAST)
    it.set_state(merged)
    got: List[int] = []
    for batch in it:
        got.extend(step(batch))
    state = it.get_state()
    assert state["consumer"] == {"process_index": 0, "process_count": 1}, state["consumer"]
    with open(out, "w") as f:
        json.dump({"rows": got, "state": state}, f)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "write":
        write(args[0])
    elif mode == "first":
        first(args[0], args[1], args[2], int(args[3]), int(args[4]), int(args[5]), args[6])
    elif mode == "second":
        second(args[0], args[1], args[2], args[3], args[4:])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
