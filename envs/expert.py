"""Scripted experts: solve a task from privileged state; the data source and the ceiling for learners."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from scipy.optimize import linear_sum_assignment

from ecrl.envs.goals import same_group
from ecrl.envs.layout import ENTITY_FIELDS, GOAL_FIELDS
from ecrl.envs.push import MAX_DISPLACEMENT, PushEnv
from ecrl.envs.scene import AGENT_RADIUS

_E, _G = ENTITY_FIELDS, GOAL_FIELDS
_XY = slice(_E["position"].start, _E["position"].start + 2)
_GXY = slice(_G["position"].start, _G["position"].start + 2)
_SIZE = _E["size"].start


class ScriptedExpert:
    """Push expert for every goal kind: one object at a time, from behind, along the line to its target.

    Each step it matches objects to targets (optimally within interchangeable groups), keeps
    working on its current object until it is placed, then picks the unplaced object whose
    push position is nearest (for ``ordered`` goals: the next target by rank). To reach the
    push position it walks around the object through side waypoints instead of through it.

    Args:
        env: the environment (wrappers are fine) whose observations ``act`` receives.
        tolerance: fraction of the env's distance threshold the expert aims for.
    """

    def __init__(self, env: gym.Env, tolerance: float = 0.5) -> None:
        self.env: PushEnv = env.unwrapped
        if not isinstance(self.env, PushEnv):
            raise ValueError(f"ScriptedExpert drives ecrl push envs, got {type(self.env).__name__}")
        self.tolerance = tolerance
        self._current: int | None = None

    def reset(self) -> None:
        """Forget the object being worked on (call at episode start)."""
        self._current = None

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Action ``(2,) float32`` in ``[-1, 1]`` for one observation."""
        rows = obs["observation"]
        if rows.ndim != 2:
            raise ValueError(f"act takes one observation, got observation of shape {rows.shape}")
        agent = rows[rows[:, _E["is_agent"]] > 0.5][0, _XY]
        objects = np.flatnonzero((rows[:, _E["is_object"]] > 0.5) & (rows[:, _E["present"]] > 0.5))
        n = len(objects)
        pos, sizes = rows[objects, _XY], rows[objects, _SIZE]
        desired = obs["desired_goal"][:n]
        targets = desired[:, _GXY]

        same = same_group(desired[None], by_colour=self.env.spec_.goal == "sort")[0] | np.eye(n, dtype=bool)
        cost = np.linalg.norm(pos[:, None] - targets[None], axis=-1)
        _, goal_of = linear_sum_assignment(np.where(same, cost, 1e6))
        dist = cost[np.arange(n), goal_of]
        todo = dist > self.tolerance * self.env.distance_threshold
        if not todo.any():
            return np.zeros(2, dtype=np.float32)
        if self.env.spec_.goal == "ordered":
            # Work on the lowest-rank target that is not filled yet.
            rank_of_obj = desired[goal_of, _G["rank"].start]
            self._current = int(np.argmin(np.where(todo, rank_of_obj, np.inf)))
        elif self._current is None or self._current >= n or not todo[self._current]:
            reach = np.linalg.norm(pos - agent, axis=-1) + 1e3 * ~todo
            self._current = int(np.argmin(reach))
        i = self._current
        return self._push(agent, pos[i], targets[goal_of[i]], sizes[i])

    @staticmethod
    def _push(agent: np.ndarray, obj: np.ndarray, target: np.ndarray, size: float) -> np.ndarray:
        to_goal = target - obj
        remaining = np.linalg.norm(to_goal)
        u = to_goal / max(remaining, 1e-9)
        perp = np.array([-u[1], u[0]])
        contact = size + AGENT_RADIUS
        rel = agent - obj
        along, lateral = rel @ u, rel @ perp
        if along < -0.7 * contact and abs(lateral) < 0.5 * size and np.linalg.norm(rel) < contact + 0.02:
            # In contact from behind: drive the contact point so the object's centre ends on target.
            aim = obj - u * contact + u * min(remaining, MAX_DISPLACEMENT)
        else:
            aim = _approach(agent, obj, u, perp, lateral, contact)
        return np.clip((aim - agent) / MAX_DISPLACEMENT, -1.0, 1.0).astype(np.float32)


def _approach(
    agent: np.ndarray, obj: np.ndarray, u: np.ndarray, perp: np.ndarray, lateral: float, contact: float
) -> np.ndarray:
    """Next point on a collision-free walk to the push position behind ``obj``."""
    side = 1.0 if lateral >= 0 else -1.0
    clear = contact + 0.02
    candidates = (
        obj - u * (contact + 0.01),  # the push position itself
        obj + (side * perp - u) * clear,  # diagonally behind, on the agent's side
        obj + side * perp * clear,  # beside the object
    )
    for point in candidates:
        if _segment_distance(obj, agent, point) >= contact + 0.003:
            return point
    return agent + side * perp * MAX_DISPLACEMENT  # boxed in front of the object: sidestep


def _segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Distance from point ``p`` to segment ``ab``."""
    ab = b - a
    t = np.clip((p - a) @ ab / max(ab @ ab, 1e-12), 0.0, 1.0)
    return float(np.linalg.norm(a + t * ab - p))
