"""One process of a JAX cluster started from `shardwise resolve --print jax-env`.

JAX reads only `JAX_COORDINATOR_ADDRESS` itself; `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID` are
passed to `jax.distributed.initialize` as its arguments by the Python package's helper
(`shardwise.launch.initialize_jax`), which this script uses. The process checks that JAX agrees (its index and count, and a global device list that
spans every process, which only the coordinator can tell it) and prints one JSON line.
"""

import json
import os

import jax

from shardwise.launch import initialize_jax, jax_args_from_env


def main() -> None:
    args = jax_args_from_env()
    address = args["coordinator_address"]
    num_processes, process_id = args["num_processes"], args["process_id"]
    assert (address, num_processes, process_id) == (
        os.environ["JAX_COORDINATOR_ADDRESS"],
        int(os.environ["JAX_NUM_PROCESSES"]),
        int(os.environ["JAX_PROCESS_ID"]),
    ), args
    initialize_jax(initialization_timeout=60)
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
