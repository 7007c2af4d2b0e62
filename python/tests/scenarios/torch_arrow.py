"""Arrow rows as PyTorch tensors: a Parquet dataset with a declared [2, 3] float32 tensor,
read through ShardwiseIterableDataset as whole record batches (tensors that share the
received Arrow buffer: no copy) and as rows (collated into batches), each row exactly once.

Usage: torch_arrow.py URL DATA_DIR
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from common import check, check_exactly_once
from torch.utils.data import DataLoader

import shardwise
from shardwise._convert import record_batch_columns
from shardwise.torch import ShardwiseIterableDataset, to_tensors

N = 1200
FAST = {"heartbeat_interval": 0.05, "elements_per_request": 100}


def dataset(root: str) -> dict:
    ids = np.arange(N, dtype=np.int64)
    x = (ids[:, None] * 6 + np.arange(6)).astype(np.float32)
    table = pa.table({"id": ids, "x": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 6)})
    path = os.path.join(root, "rows.parquet")
    pq.write_table(table, path, row_group_size=300)
    tensors = [{"name": "x", "dtype": "float32", "shape": [2, 3]}]
    return {"source": {"files": {"paths": [path], "format": "parquet", "tensors": tensors}}}


def check_rows(ids: torch.Tensor, x: torch.Tensor, what: str) -> None:
    check(x.dtype == torch.float32 and tuple(x.shape[1:]) == (2, 3), f"{what}: shape", x.shape)
    want = (ids[:, None] * 6 + torch.arange(6)).to(torch.float32).reshape(-1, 2, 3)
    check(bool(torch.equal(x, want)), f"{what}: each tensor belongs to its id")


def main(url: str, root: str) -> None:
    ds = dataset(root)
    # Whole record batches: tensors over the received buffer.
    with shardwise.distribute(url, ds, format="arrow", job_name="zero-copy", **FAST) as reader:
        batch = next(reader)
        columns = to_tensors(record_batch_columns(batch))
        storage = batch.column("x").storage.flatten().buffers()[1]
        check(
            columns["x"].data_ptr() == storage.address,
            "the tensor is the Arrow buffer, not a copy",
            (columns["x"].data_ptr(), storage.address),
        )
    loader = DataLoader(
        ShardwiseIterableDataset(url, ds, "batches", format="arrow", batches=True, **FAST),
        batch_size=None,
    )
    seen = []
    for item in loader:
        check_rows(item["id"], item["x"], "batches")
        seen.extend(item["id"].tolist())
    check_exactly_once(seen, N, "record batches")
    # Rows, collated by the default collate function.
    loader = DataLoader(
        ShardwiseIterableDataset(url, ds, "rows", format="arrow", **FAST),
        batch_size=64,
        num_workers=2,
    )
    seen = []
    for item in loader:
        check_rows(item["id"], item["x"], "rows")
        seen.extend(item["id"].tolist())
    check_exactly_once(seen, N, "rows")
    print(json.dumps({"rows": N}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
