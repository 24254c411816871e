"""The env that ``ecrl-bench diffusion`` plans in: the push task or OGBench's cubes, and what a planner for it needs.

``push`` is ``ecrl/Push-v0`` with ``n_objects`` objects (2-D pusher actions, the ``planar`` state);
``ogbench-cube`` is ``ecrl/OGBenchCube-v0`` (:class:`~ecrl.envs.ogbench.OGBenchCubeEnv`, extra
``ecrl[ogbench]``) with ``n_cubes`` cubes on one evaluation task (``task_id``), task mode (5-D arm
actions, the ``spatial`` state: cubes are lifted and stacked). The names are those of ``ecrl-collect
--env`` and of a trained planner's ``meta["env"]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import gymnasium as gym
import numpy as np

import ecrl.envs  # noqa: F401  (registers ecrl/Push-v0 and ecrl/OGBenchCube-v0)
from ecrl.dataset_format import ACTION_DIM as PUSH_ACTION_DIM
from ecrl.diffusion.denoiser import DenoiserConfig
from ecrl.envs import MAX_OBJECTS
from ecrl.envs.ogbench import ACTION_DIM as CUBE_ACTION_DIM
from ecrl.envs.ogbench import CUBE_ENV_TYPES

__all__ = [
    "BENCH_ENVS",
    "BenchEnv",
    "action_dim",
    "check_sizes",
    "checkpoint_env",
    "env_id",
    "env_observations",
    "make_env",
    "state_of",
]

BenchEnv = Literal["push", "ogbench-cube"]
BENCH_ENVS: tuple[str, ...] = ("push", "ogbench-cube")
"""The envs the benchmark plans in (the names of ``ecrl-collect --env``)."""
_IDS = {"push": "ecrl/Push-v0", "ogbench-cube": "ecrl/OGBenchCube-v0"}
_SIZE_KEY = {"push": "n_objects", "ogbench-cube": "n_cubes"}


def _check_env(env: str) -> None:
    if env not in BENCH_ENVS:
        raise ValueError(f"env must be one of {list(BENCH_ENVS)}, got {env!r}")


def env_id(env: str) -> str:
    """The gymnasium id of ``env``."""
    _check_env(env)
    return _IDS[env]


def action_dim(env: str) -> int:
    """Action width of ``env``: 2 (pusher displacement) or 5 (OGBench's arm: x, y, z, yaw, gripper)."""
    _check_env(env)
    return CUBE_ACTION_DIM if env == "ogbench-cube" else PUSH_ACTION_DIM


def state_of(env: str) -> str:
    """The dynamic state a planner of ``env`` plans (:attr:`DenoiserConfig.state`)."""
    _check_env(env)
    return "spatial" if env == "ogbench-cube" else "planar"


def check_sizes(env: str, sizes: tuple[int, ...], what: str) -> None:
    """Numbers of objects valid in ``env``: 1 … ``MAX_OBJECTS`` (push) or OGBench's sizes (1, 2, 3, 4, 8).

    Raises:
        ValueError: naming ``what`` (the option), the env, the allowed sizes and the sizes given.
    """
    _check_env(env)
    if env == "ogbench-cube":
        if any(isinstance(n, bool) or n not in CUBE_ENV_TYPES for n in sizes):
            raise ValueError(
                f"{what} must be OGBench's cube counts {list(CUBE_ENV_TYPES)} in env ogbench-cube, got {list(sizes)}"
            )
    elif not all(1 <= n <= MAX_OBJECTS for n in sizes):
        raise ValueError(f"{what} must be in 1 … {MAX_OBJECTS} in env push, got {list(sizes)}")


def checkpoint_env(meta: Mapping[str, Any], denoiser: DenoiserConfig, where: str) -> str:
    """The env a planner was trained in: its ``meta["env"]`` (``ecrl-train-diffusion`` records it), else
    ``ogbench-cube`` for a spatial-state denoiser and ``push`` for a planar one (older checkpoints).

    Raises:
        ValueError: the env is unknown, or the denoiser's action width is not that env's.
    """
    env = meta.get("env") or ("ogbench-cube" if denoiser.state == "spatial" else "push")
    if env not in BENCH_ENVS:
        raise ValueError(f"{where} was trained in env {env!r}; the benchmark plans in {list(BENCH_ENVS)}")
    if denoiser.action_dim != action_dim(env):
        raise ValueError(
            f"{where} plans {denoiser.action_dim}-d actions, but its env {env} takes {action_dim(env)}-d actions"
        )
    return env


def make_env(env: str, n: int, task_id: int) -> gym.Env:
    """``env`` with ``n`` objects through ``gym.make`` (OGBench: task mode, evaluation task ``task_id``)."""
    check_sizes(env, (n,), "the number of objects")
    extra = {"task_id": task_id} if env == "ogbench-cube" else {}
    return gym.make(env_id(env), **{_SIZE_KEY[env]: n}, **extra)


def env_observations(env: str, n: int, count: int, seed: int, task_id: int) -> list[dict[str, np.ndarray]]:
    """``count`` observations of a random-action rollout of ``env`` with ``n`` objects."""
    sim = make_env(env, n, task_id)
    sim.action_space.seed(seed)
    obs, _ = sim.reset(seed=seed)
    out = []
    for _ in range(count):
        out.append(obs)
        obs, _, terminated, truncated, _ = sim.step(sim.action_space.sample())
        if terminated or truncated:
            obs, _ = sim.reset()
    sim.close()
    return out
