"""One process of a JAX cluster started from `shardwise resolve --print jax-env`.

JAX reads only `JAX_COORDINATOR_ADDRESS` itself; `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID` are
passed to `jax.distributed.initialize` as its arguments, the way the Python package's helper
does. The process checks that JAX agrees (its index and count, and a global device list that
spans every process, which only the coordinator can tell it) and prints one JSON line.
"""

import json
import os

import jax


def main() -> None:
    address = os.environ["JAX_COORDINATOR_ADDRESS"]
    num_processes = int(os.environ["JAX_NUM_PROCESSES"])
    process_id = int(os.environ["JAX_PROCESS_ID"])
    jax.distributed.initialize(coordinator_address=address, num_processes=num_processes,
                               process_id=process_id, initialization_timeout=60)
    index, count = jax.process_index(), jax.process_count()
    assert (index, count) == (process_id, num_processes), (index, count)
    processes = sorted({d.process_index for d in jax.devices()})
    assert processes == list(range(count)), processes
    print(json.dumps({"process_index": index, "process_count": count,
                      "coordinator_address": address,
                      "device_processes": processes}), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
