"""One process of a PyTorch process group started from `shardwise resolve --print torch-env`.

The environment holds only what the launcher printed (MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE). `init_process_group` reads them through its
`env://` rendezvous; the process checks that PyTorch agrees with them, that an all_reduce over
the group sums every rank's contribution, and gathers every rank's view of the group (its
master and local rank) for the test to compare, then prints one JSON line with what it saw.
"""

import datetime
import json
import os

import torch
import torch.distributed as dist


def main() -> None:
    env = {k: os.environ[k] for k in
           ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(env["RANK"]), (rank, env)
    assert world == int(env["WORLD_SIZE"]), (world, env)
    total = torch.tensor([rank + 1], dtype=torch.int64)
    dist.all_reduce(total)
    assert total.item() == world * (world + 1) // 2, (total.item(), world)
    # Every rank's view: the master it was given and its local rank.
    seen = [None] * world
    dist.all_gather_object(seen, [env["MASTER_ADDR"], env["MASTER_PORT"], int(env["LOCAL_RANK"]),
                                  int(env["LOCAL_WORLD_SIZE"])])
    dist.destroy_process_group()
    print(json.dumps({"rank": rank, "world_size": world, "sum": total.item(), "env": env,
                      "group": seen}), flush=True)


if __name__ == "__main__":
    main()
