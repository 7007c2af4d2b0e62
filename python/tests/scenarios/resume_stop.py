"""The first half of a resumed read: reads part of a range through a real dispatcher and
its workers, stops (a trainer saving a checkpoint, then preempted), and saves what it read
and its position. The test then adds a worker and resumes with
``python -m shardwise read --resume-from OUT_DIR/position.json``.

Usage: resume_stop.py DISPATCHER_URL OUT_DIR N SPLIT_SIZE TAKE
"""

from __future__ import annotations

import json
import os
import sys

from common import check

import shardwise


def main(url: str, out: str, n: int, split_size: int, take: int) -> None:
    dataset = {"source": {"range": {"stop": n}}}
    r = shardwise.distribute(
        url,
        dataset,
        split_size=split_size,
        elements_per_request=37,
        heartbeat_interval=0.05,
        unknown_task_timeout=30.0,
    )
    before = [next(r) for _ in range(take)]
    position = r.position()
    r.close()
    check(position["partial"] != [], "stopped inside a split", position)
    with open(os.path.join(out, "position.json"), "w") as f:
        json.dump(position, f)
    with open(os.path.join(out, "before.json"), "w") as f:
        json.dump(before, f)
    print(f"resume: read {len(before)} of {n}, position {json.dumps(position)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
