"""Arrow reads of Parquet files through a real dispatcher and two workers: the rows of three
files (an id, a label and a declared [2, 3] float32 tensor) come as record batches, each row
exactly once, the tensor a NumPy array of the shape declared; a read stopped part way and
resumed from its position reads exactly the rest.

Usage: arrow_parquet.py DISPATCHER_URL DATA_DIR (the workers' --data-root)
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import check, check_exactly_once

import shardwise

SIZES = [1500, 700, 2300]
N = sum(SIZES)
FAST = {"heartbeat_interval": 0.05, "unknown_task_timeout": 30.0}


def write_files(root: str) -> list[str]:
    paths = []
    first = 0
    for i, n in enumerate(SIZES):
        ids = np.arange(first, first + n, dtype=np.int64)
        image = (ids[:, None] + np.arange(6, dtype=np.float32) / 8).astype(np.float32)
        table = pa.table(
            {
                "id": ids,
                "label": pa.array([f"row-{k}" for k in ids]),
                "image": pa.FixedSizeListArray.from_arrays(pa.array(image.ravel()), 6),
            }
        )
        path = os.path.join(root, f"train-{i}.parquet")
        pq.write_table(table, path, row_group_size=256)
        paths.append(path)
        first += n
    return paths


def rows(batch: pa.RecordBatch) -> tuple[list[int], int]:
    """The batch's ids, its tensor checked against them."""
    ids = batch.column("id").to_numpy()
    image = batch.column("image")
    check(
        isinstance(image, pa.FixedShapeTensorArray),
        "the tensor column is a fixed-shape tensor",
        image.type,
    )
    arrays = image.to_numpy_ndarray()
    check(
        arrays.shape == (len(ids), 2, 3) and arrays.dtype == np.float32,
        "the declared shape",
        arrays.shape,
    )
    want = (ids[:, None] + np.arange(6, dtype=np.float32) / 8).astype(np.float32).reshape(-1, 2, 3)
    check(bool((arrays == want).all()), "the tensor values")
    check(batch.column("label").to_pylist() == [f"row-{k}" for k in ids], "the labels")
    return ids.tolist(), batch.num_rows


def main(url: str, root: str) -> None:
    paths = write_files(root)
    dataset = {
        "source": {
            "files": {
                "paths": paths,
                "format": "parquet",
                "columns": ["id", "label", "image"],
                "tensors": [{"name": "image", "dtype": "float32", "shape": [2, 3]}],
            }
        }
    }
    d = shardwise.Dispatcher(url, unavailable_timeout=60)

    with shardwise.distribute(
        d, dataset, format="arrow", arrow_compression="lz4", elements_per_request=300, **FAST
    ) as r:
        ids: list[int] = []
        for batch in r:
            check(isinstance(batch, pa.RecordBatch), "record batches", type(batch))
            check(b"shardwise.origin" not in (batch.schema.metadata or {}), "no origin key left")
            ids.extend(rows(batch)[0])
        position = r.position()
    check_exactly_once(ids, N, "arrow")
    check(
        position["done"] == [{"start": 0, "stop": len(paths)}] and not position["partial"],
        "the position covers every file",
        position,
    )
    check(len(r.tasks) == 2, "a task on each worker", r.tasks)
    print(f"arrow: {N} rows of {len(paths)} files exactly once, tensors [2, 3]")

    # Part way: stop after about 2,000 rows, save the position as JSON text, resume.
    first = shardwise.distribute(d, dataset, format="arrow", elements_per_request=128, **FAST)
    before: list[int] = []
    while len(before) < 2000:
        before.extend(rows(next(first))[0])
    saved = json.dumps(first.position())
    first.close()
    check(json.loads(saved)["partial"] != [] or len(before) < N, "stopped part way", saved)
    with shardwise.distribute(d, dataset, format="arrow", resume_from=saved, **FAST) as rest:
        after = [i for batch in rest for i in rows(batch)[0]]
        end = rest.position()
    check_exactly_once(before + after, N, "arrow, resumed")
    check(
        end["done"] == [{"start": 0, "stop": len(paths)}] and not end["partial"],
        "the whole read",
        end,
    )
    print(f"arrow: stopped after {len(before)} rows at {saved}, resumed {len(after)}: exactly once")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
