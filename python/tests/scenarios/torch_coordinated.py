"""Coordinated reads from PyTorch: this process is one rank of two, one consumer of a
coordinated read (``ShardwiseIterableDataset(coordinated=True)``) of an endless range served
by the cluster's workers. Reads STEPS batches and writes the elements of each, in order.

Usage: torch_coordinated.py URL JOB RANK STEPS OUT
"""

from __future__ import annotations

import json
import sys

import torch
from torch.utils.data import DataLoader

from shardwise.positions import POSITION_KEY
from shardwise.torch import ShardwiseIterableDataset

BATCH = 4
ENDLESS = {"source": {"range": {"stop": 1_000_000}}, "transforms": [{"repeat": None}]}


def main(url: str, job: str, rank: int, steps: int, out: str) -> None:
    ds = ShardwiseIterableDataset(
        url,
        ENDLESS,
        job,
        rank=rank,
        world_size=2,
        coordinated=True,
        processing_mode="parallel_epochs",
        heartbeat_interval=0.05,
    )
    batches = []
    for step, batch in enumerate(DataLoader(ds, batch_size=BATCH)):
        assert isinstance(batch, torch.Tensor), type(batch)
        batches.append([int(x) for x in batch.tolist()])
        if step + 1 == steps:
            break
    state = ds.state_dict()
    with open(out, "w") as f:
        json.dump({"batches": batches, "position": state[POSITION_KEY]}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
