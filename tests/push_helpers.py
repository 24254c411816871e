"""Tasks and small drivers shared by the push-environment tests."""

from __future__ import annotations

import gymnasium as gym
import mujoco
import numpy as np

from ecrl.envs import GOAL_FIELDS, ObjectSpec, ScriptedExpert, TaskSpec
from ecrl.envs.scene import AGENT_REACH

POS = GOAL_FIELDS["position"]
XY = slice(POS.start, POS.start + 2)


def _objects(*rows: tuple[str, str, float]) -> tuple[ObjectSpec, ...]:
    return tuple(ObjectSpec(shape, colour, size) for shape, colour, size in rows)


# Three objects per goal kind, chosen so that grouping matters: two identical objects for the
# kind-grouped goals, two same-colour objects of different shape (and size) for ``sort``.
TASKS: dict[str, TaskSpec] = {
    "positions": TaskSpec(_objects(("cube", "green", 0.025), ("cube", "green", 0.025), ("sphere", "yellow", 0.02))),
    "adjacent": TaskSpec(
        _objects(("cube", "red", 0.025), ("cylinder", "blue", 0.025), ("cube", "red", 0.025)), goal="adjacent"
    ),
    "sort": TaskSpec(
        _objects(("cube", "red", 0.025), ("sphere", "red", 0.02), ("cylinder", "blue", 0.03)), goal="sort"
    ),
    "ordered": TaskSpec(
        _objects(("cube", "red", 0.025), ("cylinder", "green", 0.025), ("sphere", "blue", 0.025)), goal="ordered"
    ),
}


def expert_rollout(env: gym.Env, seed: int, max_steps: int | None = None) -> list[tuple]:
    """``[(obs, reward, info), …]`` of the scripted expert from ``reset(seed)`` until success or truncation.

    The first entry is the reset (reward ``None``).
    """
    expert = ScriptedExpert(env)
    obs, info = env.reset(seed=seed)
    expert.reset()
    out = [(obs, None, info)]
    for _ in range(max_steps or 10_000):
        obs, reward, terminated, truncated, info = env.step(expert.act(obs))
        out.append((obs, reward, info))
        if info["is_success"] or terminated or truncated:
            break
    return out


def park_agent(env: gym.Env) -> None:
    """Move the pusher off the table (out of every object's way) and hold it there."""
    u = env.unwrapped
    corner = u.table_size / 2 + 0.8 * AGENT_REACH
    u.data.qpos[:2] = corner
    u.data.qvel[:2] = 0.0
    u.data.ctrl[:] = corner
    mujoco.mj_forward(u.model, u.data)


def teleport(env: gym.Env, index: int, xy: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
    """Put object ``index`` at ``xy`` (at rest) and take one zero-action step; returns the step."""
    u = env.unwrapped
    u._obj_qpos[index, :2] = xy
    u._obj_qvel[:] = 0.0
    mujoco.mj_forward(u.model, u.data)
    return env.step(np.zeros(2, dtype=np.float32))
