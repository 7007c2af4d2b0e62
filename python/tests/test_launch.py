"""shardwise.launch without a cluster: the JAX variables ``--print jax-env`` exports, read
back, and torchrun's variables applied."""

from __future__ import annotations

import unittest

from shardwise.launch import (
    JAX_VARIABLES,
    TORCH_VARIABLES,
    apply_torch_env,
    jax_args_from_env,
)


class Jax(unittest.TestCase):
    def test_the_exported_variables_are_initializes_arguments(self) -> None:
        env = {
            "JAX_COORDINATOR_ADDRESS": "[fd00::1]:8476",
            "JAX_NUM_PROCESSES": "4",
            "JAX_PROCESS_ID": "3",
        }
        self.assertEqual(
            jax_args_from_env(env),
            {"coordinator_address": "[fd00::1]:8476", "num_processes": 4, "process_id": 3},
        )

    def test_missing_or_bad_variables_are_named(self) -> None:
        good = dict(zip(JAX_VARIABLES, ["h:1", "2", "0"]))
        for name in JAX_VARIABLES:
            env = {k: v for k, v in good.items() if k != name}
            with self.assertRaisesRegex(ValueError, name):
                jax_args_from_env(env)
        for bad, why in [
            ({"JAX_NUM_PROCESSES": "two"}, "JAX_NUM_PROCESSES"),
            ({"JAX_PROCESS_ID": "2"}, "not a process"),
            ({"JAX_PROCESS_ID": "-1"}, "not a process"),
            ({"JAX_NUM_PROCESSES": "0"}, "not a process"),
        ]:
            with self.assertRaisesRegex(ValueError, why):
                jax_args_from_env({**good, **bad})


class Torch(unittest.TestCase):
    def test_every_variable_is_set_as_a_string(self) -> None:
        launch = dict(zip(TORCH_VARIABLES, ["h", 29500, 1, 2, 0, 1]))
        environ: dict[str, str] = {"PATH": "/bin"}
        apply_torch_env({k: str(v) for k, v in launch.items()}, environ)
        self.assertEqual(environ["MASTER_PORT"], "29500")
        self.assertEqual(set(environ), {"PATH", *TORCH_VARIABLES})
        with self.assertRaisesRegex(ValueError, "LOCAL_WORLD_SIZE"):
            apply_torch_env({k: "1" for k in TORCH_VARIABLES[:-1]}, {})


if __name__ == "__main__":
    unittest.main()
