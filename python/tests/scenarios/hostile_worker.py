"""Reads through a hostile worker (tests/tests/hostile_reader.rs runs it): the read must fail
with a ShardwiseError. Prints one JSON line: the error, its code, the seconds the read took,
and the process's peak RSS (MiB) before and after.

Usage: hostile_worker.py DISPATCHER_URL MODE

MODE: arrow (uncompressed Arrow asked for), arrow-zstd (zstd asked for), arrow-zstd-16mib
(zstd, max_read_bytes of 16 MiB), json (1,000 elements per read), json-4mib (JSON, a
max_read_bytes of 4 MiB), trickle (Arrow, calls time out after 1 s and are retried for 2 s).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

from common import check

import shardwise
from shardwise import ShardwiseError

DATASET = {"source": {"range": {"stop": 1_000_000}}}


def peak_rss_mib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10


def main(url: str, mode: str) -> None:
    timeout, retried = (1.0, 2.0) if mode == "trickle" else (30.0, 10.0)
    dispatcher = shardwise.Dispatcher(url, timeout=timeout, unavailable_timeout=retried)
    options: dict[str, Any] = {
        "processing_mode": "parallel_epochs",
        "elements_per_request": 1000,
        "heartbeat_interval": 0.05,
        "format": "json" if mode.startswith("json") else "arrow",
    }
    if mode.startswith("arrow-zstd"):
        options["arrow_compression"] = "zstd"
    if mode == "arrow-zstd-16mib":
        options["max_read_bytes"] = 16 << 20
    if mode == "json-4mib":
        options["max_read_bytes"] = 4 << 20
    before = peak_rss_mib()
    start = time.monotonic()
    try:
        got = list(shardwise.distribute(dispatcher, DATASET, **options))
    except ShardwiseError as e:
        report = {
            "code": e.code,
            "error": str(e),
            "seconds": time.monotonic() - start,
            "peak_rss_mib_before": before,
            "peak_rss_mib_after": peak_rss_mib(),
        }
        print(json.dumps(report))
        return
    check(False, f"{mode}: the read fails", f"{len(got)} items")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
