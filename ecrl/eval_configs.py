"""What an evaluation runs: its configurations, each one's env and episode limit, and the checks of its settings.

:func:`ecrl.evaluation.evaluate` runs one of two benchmarks (``env``):

- ``push``: the library's push env (``ecrl/Push-v0``); a configuration is a part of a compositional
  split (``train``, ``test``) × a number of objects N; episodes run ``50 + 100 N`` steps;
- ``fetch``: the Fetch arm doing one skill (``ecrl/FetchPickPlace-v0`` …, :mod:`ecrl.envs.fetch`), with
  push's configurations (split parts × N, at most 8 objects) and horizons;
- ``ogbench-cube``: OGBench's cube suite (``ecrl/OGBenchCube-v0``, :mod:`ecrl.envs.ogbench`); a
  configuration is one of OGBench's five evaluation tasks × a number of cubes N in 1, 2, 3, 4, 8,
  its ``part`` named ``task1`` … ``task5``; episodes run to OGBench's limit for N (200 / 500 /
  1,000 / 1,000 / 1,500 steps) or end at OGBench's success.

Settings are checked here, where they enter, with a ``ValueError`` that says what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ecrl.envs import FETCH_SKILL_IDS, GOAL_KINDS, MAX_OBJECTS, SPLITS
from ecrl.envs import ogbench as ogb
from ecrl.envs.fetch import ACTION_DIM as FETCH_ACTION_DIM
from ecrl.envs.task import EMBODIMENT_MAX_OBJECTS, default_horizon

__all__ = [
    "ACTION_DIMS",
    "ENVS",
    "PARTS",
    "EvalConfig",
    "check_action_dim",
    "check_ogbench_settings",
    "check_settings",
    "embodiment_of",
    "max_objects",
    "ogbench_configs",
    "policy_action_dim",
    "push_configs",
    "resolve_skill",
]

ENVS = ("push", "fetch", "ogbench-cube")
"""The benchmarks an evaluation runs on (``evaluate(env=…)``, ``ecrl-eval --env``)."""
PARTS = ("train", "test")
ACTION_DIMS = {"push": 2, "fetch": FETCH_ACTION_DIM, "ogbench-cube": ogb.ACTION_DIM}
"""Width of each benchmark's actions: the pusher's planar displacement; the Fetch gripper's x, y, z and fingers;
OGBench's x, y, z, yaw, gripper."""


@dataclass(frozen=True)
class EvalConfig:
    """One configuration of an evaluation: the episodes behind one row of its report."""

    part: str
    """Split part (``train``, ``test``) on push; ``task1`` … ``task5`` on OGBench cubes."""
    n_objects: int
    env_id: str
    env_kwargs: dict[str, Any]
    horizon: int
    """The most steps an episode runs."""


def check_settings(
    n_objects: Sequence[int],
    goal: str,
    split: str | None,
    parts: Sequence[str],
    episodes: int,
    n_max: int | None = None,
    batch_size: int | None = None,
    video_every: int = 1,
    max_objects: int = MAX_OBJECTS,
) -> None:
    """Raise ``ValueError`` (saying what was expected) for push (or Fetch, ``max_objects`` 8) settings
    :func:`evaluate` cannot run."""
    if not n_objects:
        raise ValueError("need at least one number of objects")
    for n in n_objects:
        if not 1 <= n <= max_objects:
            raise ValueError(f"numbers of objects must be in 1 … {max_objects}, got {n}")
    if goal not in GOAL_KINDS:
        raise ValueError(f"unknown goal kind {goal!r}: expected one of {list(GOAL_KINDS)}")
    if split is not None and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: expected one of {list(SPLITS)} or None")
    if not parts or any(p not in PARTS for p in parts):
        raise ValueError(f"parts must be a non-empty subset of {list(PARTS)}, got {list(parts)}")
    if split is None and "test" in parts:
        raise ValueError("part 'test' needs a split (held-out combinations), e.g. split='colour_shape'")
    _check_common(n_objects, episodes, n_max, batch_size, video_every)


def _check_common(
    n_objects: Sequence[int], episodes: int, n_max: int | None, batch_size: int | None, video_every: int
) -> None:
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if n_max is not None and n_max < max(n_objects):
        raise ValueError(f"n_max must be >= every number of objects (max {max(n_objects)}), got {n_max}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if video_every < 1:
        raise ValueError(f"video_every must be >= 1, got {video_every}")


def check_ogbench_settings(
    n_objects: Sequence[int],
    tasks: Sequence[int],
    episodes: int,
    n_max: int | None = None,
    batch_size: int | None = None,
    video_every: int = 1,
    max_steps: int | None = None,
) -> None:
    """Raise ``ValueError`` (saying what was expected) for OGBench cube settings :func:`evaluate` cannot run."""
    if not n_objects:
        raise ValueError("need at least one number of cubes")
    for n in n_objects:
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or int(n) not in ogb.CUBE_ENV_TYPES:
            raise ValueError(f"OGBench's cube envs have {list(ogb.CUBE_ENV_TYPES)} cubes, got N = {n!r}")
    if not tasks:
        raise ValueError(f"need at least one of OGBench's evaluation tasks 1 … {ogb.N_TASKS}")
    for task in tasks:
        if isinstance(task, bool) or not isinstance(task, int | np.integer) or not 1 <= task <= ogb.N_TASKS:
            raise ValueError(f"OGBench's evaluation tasks are 1 … {ogb.N_TASKS}, got task {task!r}")
    if len(set(tasks)) != len(tasks):
        raise ValueError(f"tasks must not repeat, got {list(tasks)}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1 (or None: OGBench's episode limit), got {max_steps}")
    _check_common(n_objects, episodes, n_max, batch_size, video_every)


def push_configs(
    n_objects: Sequence[int],
    goal: str,
    split: str | None,
    parts: Sequence[str],
    n_max: int | None,
    pixels: dict[str, Any] | None = None,
    skill: str | None = None,
) -> list[EvalConfig]:
    """Every part × N of a push evaluation, parts outermost; ``pixels`` (a planner's ``meta["pixels"]``) adds
    its camera frames to the observations (and, with ``"goal": true``, the goal images); a ``skill`` (push, pick_place, stack) runs it on the Fetch arm."""
    env_id = "ecrl/Push-v0" if skill is None else FETCH_SKILL_IDS[skill]
    configs = []
    for part in parts:
        for n in n_objects:
            kwargs = {"n_objects": n, "goal": goal, "split": split, "part": part, "n_max": n_max}
            if pixels:
                kwargs.update(pixels=int(pixels["size"]), cameras=tuple(pixels["cameras"]))
                if pixels.get("goal"):
                    kwargs["goal_pixels"] = True
            configs.append(EvalConfig(part, n, env_id, kwargs, default_horizon(n)))
    return configs


def resolve_skill(env: str, skill: str | None) -> str | None:
    """The skill of tasks on ``env``, checked: the Fetch arm's (default ``pick_place``); ``None`` on the other
    envs, which refuse a Fetch skill (the pusher only pushes, OGBench's cubes have their own tasks)."""
    if env != "fetch":
        if skill not in (None, "push"):
            raise ValueError(
                f"skill {skill!r} is a skill of the Fetch arm: pass --env fetch (env='fetch'), not {env!r}"
            )
        return None
    skill = skill or "pick_place"
    if skill not in FETCH_SKILL_IDS:
        raise ValueError(f"unknown Fetch skill {skill!r}: expected one of {list(FETCH_SKILL_IDS)}")
    return skill


def embodiment_of(env: str) -> str:
    """The embodiment acting on ``env`` (push or fetch), as :class:`ecrl.rollout.ExpertPolicy` names it."""
    return "fetch" if env == "fetch" else "pusher"


def max_objects(env: str) -> int:
    """The most objects an evaluation on ``env`` (push or fetch) holds."""
    return EMBODIMENT_MAX_OBJECTS["fetch"] if env == "fetch" else MAX_OBJECTS


def ogbench_configs(
    n_objects: Sequence[int], tasks: Sequence[int], n_max: int | None, max_steps: int | None
) -> list[EvalConfig]:
    """Every task × N of an OGBench cube evaluation, tasks outermost; ``max_steps`` cuts OGBench's episode limit."""
    configs = []
    for task in tasks:
        for n in n_objects:
            kwargs = {"n_cubes": n, "task_id": task, "mode": "task", "n_max": n_max}
            horizon = ogb.EPISODE_STEPS[n]
            if max_steps is not None:  # gym.make's TimeLimit
                kwargs["max_episode_steps"] = horizon = min(max_steps, horizon)
            configs.append(EvalConfig(f"task{task}", n, "ecrl/OGBenchCube-v0", kwargs, horizon))
    return configs


def policy_action_dim(policy: Any) -> int | None:
    """The width of ``policy``'s actions where it says so (a saved policy's action bounds, an ``action_dim``,
    or those of the policy it wraps, as :class:`ecrl.focus.Focus` does); ``None`` where it does not."""
    while policy is not None:
        low = getattr(policy, "action_low", None)
        if low is not None:
            return len(low)
        dim = getattr(policy, "action_dim", None)
        if isinstance(dim, int):
            return dim
        policy = getattr(policy, "policy", None)
    return None


def check_action_dim(policy: Any, env: str) -> None:
    """Raise ``ValueError`` if ``policy`` says it acts with actions another width than ``env``'s."""
    dim, expected = policy_action_dim(policy), ACTION_DIMS[env]
    if dim is not None and dim != expected:
        other = next((e for e, d in ACTION_DIMS.items() if d == dim), None)
        hint = f"; evaluate it on env={other!r}" if other else ""
        raise ValueError(f"env {env!r} takes {expected}-D actions, but {policy!r:.80} acts with {dim}-D ones{hint}")
