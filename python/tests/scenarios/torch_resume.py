"""A PyTorch read stopped on 2 ranks x 2 loader workers and resumed on 3 ranks x 1 loader
worker through torchdata's StatefulDataLoader: every record exactly once over both runs.

Usage:
  torch_resume.py first  URL DATASET_JSON JOB RANK STEPS OUT   (world size 2, 2 loader workers)
  torch_resume.py merge  OUT STATE_FILE...                     (the states of every rank, merged)
  torch_resume.py second URL DATASET_JSON JOB POSITION_FILE OUT
                                                      (a rank of torch.distributed, 1 worker)

`first` reads STEPS batches and saves the loader's state_dict() with the records it yielded;
`second` runs under torch.distributed (gloo, rank and world size from the environment, as
torchrun sets them), leaves rank and world size to the dataset's defaults and reads to the
end.
"""

from __future__ import annotations

import json
import sys
from typing import Any, List

import torch
import torch.distributed as dist
from torchdata.stateful_dataloader import StatefulDataLoader

import shardwise
from shardwise.torch import ShardwiseIterableDataset

FAST = {"heartbeat_interval": 0.05, "elements_per_request": 16}
BATCH = 8


def records(batch: Any) -> List[int]:
    assert isinstance(batch, torch.Tensor), type(batch)
    return [int(x) for x in batch.tolist()]


def first(url: str, dataset: str, job: str, rank: int, steps: int, out: str) -> None:
    ds = ShardwiseIterableDataset(
        url, json.loads(dataset), job, rank=rank, world_size=2, **FAST
    )
    loader = StatefulDataLoader(ds, batch_size=BATCH, num_workers=2)
    got: List[int] = []
    for step, batch in enumerate(loader):
        got.extend(records(batch))
        if step + 1 == steps:
            break
    state = loader.state_dict()
    # The state is what a checkpoint saves: it must survive JSON (torch.save works too).
    with open(out, "w") as f:
        json.dump({"records": got, "state": state}, f)


def merge(out: str, files: List[str]) -> None:
    states = []
    for name in files:
        with open(name) as f:
            states.append(json.load(f)["state"])
    with open(out, "w") as f:
        json.dump(shardwise.merge_positions(*states), f)


def second(url: str, dataset: str, job: str, position_file: str, out: str) -> None:
    dist.init_process_group("gloo")
    with open(position_file) as f:
        position = json.load(f)
    ds = ShardwiseIterableDataset(url, json.loads(dataset), job, resume_from=position, **FAST)
    loader = StatefulDataLoader(ds, batch_size=BATCH, num_workers=1)
    got: List[int] = []
    for batch in loader:
        got.extend(records(batch))
    state = loader.state_dict()
    consumers = [
        s["dataset_state"]["consumer"]
        for s in state["_snapshot"]["_worker_snapshots"].values()
        if s.get("dataset_state")
    ]
    assert consumers == [
        {"rank": dist.get_rank(), "world_size": 3, "worker": 0, "num_workers": 1}
    ], consumers
    with open(out, "w") as f:
        json.dump({"records": got, "state": state}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "first":
        first(args[0], args[1], args[2], int(args[3]), int(args[4]), args[5])
    elif mode == "merge":
        merge(args[0], args[1:])
    elif mode == "second":
        second(args[0], args[1], args[2], args[3], args[4])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
