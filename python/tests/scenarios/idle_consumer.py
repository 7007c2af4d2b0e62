"""A consumer that stops iterating for longer than the dispatcher's --client-timeout (a long
training step, an evaluation) keeps its lease: the reader's keeper heartbeats meanwhile, and
the read goes on to the end, each element once.

Usage: idle_consumer.py URL PAUSE_SECONDS
"""

from __future__ import annotations

import sys
import time

from common import check_exactly_once

import shardwise

N = 2000


def main(url: str, pause: float) -> None:
    reader = shardwise.distribute(
        url, {"source": {"range": {"stop": N}}}, heartbeat_interval=0.1, elements_per_request=50
    )
    got = [next(reader) for _ in range(100)]
    time.sleep(pause)  # the caller is busy; the dispatcher would release a silent client
    got.extend(reader)
    check_exactly_once(got, N, "a read with a pause longer than the client timeout")
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
