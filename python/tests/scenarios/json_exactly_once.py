"""JSON reads of a range through a real dispatcher and two workers: one reader reads every
element exactly once; two readers sharing a job by name read every element once between
them, and their positions merge into the whole range.

Usage: json_exactly_once.py DISPATCHER_URL
"""

from __future__ import annotations

import sys

from common import check, check_exactly_once, whole

import shardwise

N = 2000
DATASET = {"source": {"range": {"stop": N}}}
FAST = {"heartbeat_interval": 0.05, "unknown_task_timeout": 30.0, "split_size": 64}


def main(url: str) -> None:
    d = shardwise.Dispatcher(url, unavailable_timeout=60)
    alive = [w for w in d.workers() if w["alive"]]
    check(len(alive) == 2, "two live workers", alive)

    with shardwise.distribute(d, DATASET, elements_per_request=100, **FAST) as r:
        got = list(r)
        position = r.position()
        tasks = r.tasks
    check_exactly_once(got, N, "one reader")
    check(position == whole(r.dataset_id, N), "the position covers the range", position)
    check(
        sorted(t["worker_address"] for t in tasks) == sorted(w["worker_address"] for w in alive),
        "a task on each worker",
        tasks,
    )
    job = d.get_job(r.job_id)
    check(job["iterations"][0]["finished"] is True, "the iteration finished", job)
    print(f"json: one reader, {N} elements exactly once over {len(tasks)} workers")

    # Two readers of one job (the ranks of a trainer), interleaved in this process.
    readers = [
        shardwise.distribute(d, DATASET, job_name="shared", elements_per_request=50, **FAST)
        for _ in range(2)
    ]
    check(readers[0].job_id == readers[1].job_id, "one job by name")
    each: list[list[int]] = [[], []]
    live = [0, 1]
    while live:
        for i in list(live):
            try:
                each[i].append(next(readers[i]))
            except StopIteration:
                live.remove(i)
    check(all(each), "both readers read", [len(e) for e in each])
    check_exactly_once(each[0] + each[1], N, "two readers")
    merged = shardwise.merge_positions(
        readers[0].position(), {"rank1": {"shardwise_position": readers[1].position()}}
    )
    check(merged == whole(readers[0].dataset_id, N), "the merged position covers the range", merged)
    print(f"json: two readers, {len(each[0])} + {len(each[1])} elements, merged position whole")


if __name__ == "__main__":
    main(sys.argv[1])
