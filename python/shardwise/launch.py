"""Launcher environments: who this process is in a PyTorch or JAX process group.

The cluster comes from the same sources as TensorFlow's (Kubernetes pods, Slurm, TF_CONFIG,
static lists; docs/resolve.md): the dispatcher resolves a request at
``POST /v1/cluster/resolve``, whose ``launch`` member is this task's process group, or
``shardwise resolve --print torch-env|jax-env`` prints it as ``export`` lines before the
program starts. This module reads either:

* :func:`resolve` / :func:`torch_env` / :func:`jax_args`: ask a dispatcher;
* :func:`jax_args_from_env`: the ``JAX_*`` variables ``--print jax-env`` exported (JAX reads
  only ``JAX_COORDINATOR_ADDRESS`` itself; the process count and id are arguments);
* :func:`initialize_jax`: ``jax.distributed.initialize`` with those arguments;
* :func:`apply_torch_env`: torchrun's variables into ``os.environ`` before
  ``torch.distributed.init_process_group()`` reads them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import Any, Optional, Union

from .client import Dispatcher, connect
from .errors import ShardwiseError

__all__ = [
    "JAX_VARIABLES",
    "TORCH_VARIABLES",
    "apply_torch_env",
    "initialize_jax",
    "jax_args",
    "jax_args_from_env",
    "resolve",
    "torch_env",
]

#: The variables of PyTorch's ``env://`` rendezvous and of torchrun, in the reply's order.
TORCH_VARIABLES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
)
#: What ``shardwise resolve --print jax-env`` exports.
JAX_VARIABLES = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def resolve(
    dispatcher: Union[Dispatcher, str],
    request: Mapping[str, Any],
    *,
    token: Optional[str] = None,
    ca_file: Optional[str] = None,
) -> dict[str, Any]:
    """The dispatcher's answer to a cluster-resolution ``request`` (docs/resolve.md), with
    ``"launch": {}`` added when the request has no ``launch``, so that the reply says this
    task's process group (``reply["launch"]``, ``None`` for a task outside it)."""
    body = dict(request)
    if body.get("launch") is None:
        body["launch"] = {}
    reply = connect(dispatcher, token, ca_file).call("POST", "/v1/cluster/resolve", body)
    if not isinstance(reply, dict) or "launch" not in reply:
        raise ShardwiseError.protocol(
            "POST /v1/cluster/resolve answered without a launch member", context="resolve"
        )
    return reply


def _launch(reply: Mapping[str, Any]) -> Mapping[str, Any]:
    launch = reply.get("launch")
    if launch is None:
        raise ShardwiseError(
            "FAILED_PRECONDITION",
            f"task {reply.get('task_type')!r} {reply.get('task_id')!r} is not a rank of the "
            "process group (a ps or evaluator task, or a request naming no task)",
        )
    return launch


def torch_env(
    dispatcher: Union[Dispatcher, str],
    request: Mapping[str, Any],
    *,
    token: Optional[str] = None,
    ca_file: Optional[str] = None,
) -> dict[str, str]:
    """torchrun's variables (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``) for the task ``request`` resolves to. Raises
    :class:`ShardwiseError` ``FAILED_PRECONDITION`` for a task that is not a rank."""
    reply = resolve(dispatcher, request, token=token, ca_file=ca_file)
    torch = _launch(reply)["torch"]
    return {name: str(torch[name]) for name in TORCH_VARIABLES}


def jax_args(
    dispatcher: Union[Dispatcher, str],
    request: Mapping[str, Any],
    *,
    token: Optional[str] = None,
    ca_file: Optional[str] = None,
) -> dict[str, Any]:
    """``jax.distributed.initialize``'s arguments (``coordinator_address``, ``num_processes``,
    ``process_id``) for the task ``request`` resolves to."""
    reply = resolve(dispatcher, request, token=token, ca_file=ca_file)
    jax = _launch(reply)["jax"]
    return {
        "coordinator_address": str(jax["coordinator_address"]),
        "num_processes": int(jax["num_processes"]),
        "process_id": int(jax["process_id"]),
    }


def jax_args_from_env(environ: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """``jax.distributed.initialize``'s arguments from the variables ``shardwise resolve
    --print jax-env`` exported (``os.environ`` by default). Raises ``ValueError`` naming a
    variable that is missing or not a number in range."""
    env = os.environ if environ is None else environ
    missing = [name for name in JAX_VARIABLES if not env.get(name)]
    if missing:
        raise ValueError(f"{', '.join(missing)} not set (shardwise resolve --print jax-env)")
    numbers: dict[str, int] = {}
    for name in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        try:
            numbers[name] = int(env[name])
        except ValueError:
            raise ValueError(f"{name}={env[name]!r:.40} is not an integer") from None
    count, index = numbers["JAX_NUM_PROCESSES"], numbers["JAX_PROCESS_ID"]
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"JAX_PROCESS_ID={index} is not a process of JAX_NUM_PROCESSES={count}")
    return {
        "coordinator_address": env["JAX_COORDINATOR_ADDRESS"],
        "num_processes": count,
        "process_id": index,
    }


def initialize_jax(args: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
    """``jax.distributed.initialize(**args, **kwargs)``, ``args`` by default from the
    environment (:func:`jax_args_from_env`)."""
    import jax  # imported when used: the package does not need JAX otherwise

    given = dict(jax_args_from_env() if args is None else args)
    given.update(kwargs)
    jax.distributed.initialize(**given)


def apply_torch_env(
    env: Mapping[str, str], environ: Optional[MutableMapping[str, str]] = None
) -> None:
    """Sets torchrun's variables of ``env`` (:func:`torch_env`) in ``os.environ`` (or
    ``environ``), so that ``torch.distributed.init_process_group()`` (``env://``) reads them."""
    target = os.environ if environ is None else environ
    for name in TORCH_VARIABLES:
        if name not in env:
            raise ValueError(f"{name} is missing from the launch environment")
        target[name] = str(env[name])
