"""Scripted experts: solve a task from privileged state; the data source and the ceiling for learners."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.sparse.csgraph import dijkstra

from ecrl.envs.goals import same_group
from ecrl.envs.layout import ENTITY_FIELDS, ENTITY_PRESENT, ENTITY_XY, GOAL_FIELDS, GOAL_XY
from ecrl.envs.push import MAX_DISPLACEMENT, PushEnv
from ecrl.envs.scene import AGENT_RADIUS

_E, _G = ENTITY_FIELDS, GOAL_FIELDS
_SIZE = _E["size"].start


class ObjectByObjectExpert:
    """What the scripted experts share: one object at a time, matched to targets as by the env, set aside on a stall.

    Subclasses set :attr:`env_type` and the step counts, and extend :meth:`_switch` (the state of the
    work on one object) and :meth:`reset`.

    Args:
        env: the environment (wrappers are fine) whose observations ``act`` receives.
        tolerance: fraction of the env's distance threshold the expert aims for.
        seed: seeds the random steps that get it out of a stall.
    """

    env_type: type[gym.Env]
    """The env class the expert drives."""
    _drives: str
    """How errors name those envs."""
    STALL_STEPS = 30
    WANDER_STEPS = 6
    SET_ASIDE_STEPS = 60

    def __init__(self, env: gym.Env, tolerance: float = 0.5, seed: int = 0) -> None:
        self.env = env.unwrapped
        if not isinstance(self.env, self.env_type):
            raise ValueError(f"{type(self).__name__} drives {self._drives}, got {type(self.env).__name__}")
        self.tolerance = tolerance
        self._rng = np.random.default_rng(seed)
        self.reset()

    def reset(self) -> None:
        """Forget the episode's progress (call at episode start)."""
        self._t, self._wander = 0, 0
        self._aside_until: dict[int, int] = {}
        self.last_random = False  # whether the last action was a random step out of a stall
        self._switch(None)

    @property
    def current(self) -> int | None:
        """Index (among the object rows) of the object the expert works on, ``None`` before it chose one."""
        return self._current

    def _switch(self, i: int | None) -> None:
        """Work on object ``i`` (``None``: choose one next), with no progress recorded yet."""
        self._current = i
        self._best, self._since = np.inf, 0

    def _match(self, pos: np.ndarray, desired: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The target of each object, ``(N,)`` indices, and ``(N, N)`` object-target distances.

        ``pos: (N, D)`` objects' positions, ``desired: (N, GOAL_DIM)`` goal rows (their first ``D``
        position columns are compared); optimal within interchangeable groups, as by the env.
        """
        n = len(pos)
        targets = desired[:, _G["position"].start : _G["position"].start + pos.shape[1]]
        same = same_group(desired[None], by_colour=self.env.spec_.goal == "sort")[0] | np.eye(n, dtype=bool)
        cost = np.linalg.norm(pos[:, None] - targets[None], axis=-1)
        _, goal_of = linear_sum_assignment(np.where(same, cost, 1e6))
        return goal_of, cost

    def _stalled(self, i: int, remaining: float) -> bool:
        """Track progress on object ``i``; True when it has stalled (and a few random steps follow)."""
        if remaining < self._best - 0.005:
            self._best, self._since = remaining, 0
        else:
            self._since += 1
        if self._since > self.STALL_STEPS:
            self._aside_until[i] = self._t + self.SET_ASIDE_STEPS
            self._wander = self.WANDER_STEPS
            self._switch(None)
        if self._wander > 0:
            self._wander -= 1
            return True
        return False

    def _aside(self, n: int) -> np.ndarray:
        """``(N,)`` bool: the objects set aside at this step."""
        return np.array([self._aside_until.get(k, 0) > self._t for k in range(n)])


def objects_on(goal_of: np.ndarray) -> np.ndarray:
    """``(N,)`` the object assigned to each target, from ``goal_of: (N,)`` the target of each object."""
    object_on = np.empty(len(goal_of), dtype=np.int64)
    object_on[goal_of] = np.arange(len(goal_of))
    return object_on


class ScriptedExpert(ObjectByObjectExpert):
    """Push expert for every goal kind: one object at a time, from behind, along the line to its target.

    Each step it matches objects to targets (optimally within interchangeable groups), keeps
    working on its current object until it is placed, then picks the unplaced object whose
    push position is nearest (for ``ordered`` goals: the next target by rank). To reach the
    push position it walks a shortest collision-free path around all objects. When the object it
    works on makes no progress for a while (wedged in clutter), it sets that object aside for a
    while and takes a few random steps. Arguments: as :class:`ObjectByObjectExpert`'s.
    """

    env_type, _drives = PushEnv, "ecrl push envs"
    env: PushEnv

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Action ``(2,) float32`` in ``[-1, 1]`` for one observation."""
        self.last_random = False
        rows = obs["observation"]
        if rows.ndim != 2:
            raise ValueError(f"act takes one observation, got observation of shape {rows.shape}")
        agent = rows[rows[:, _E["is_agent"].start] > 0.5][0, ENTITY_XY]
        objects = np.flatnonzero((rows[:, _E["is_object"].start] > 0.5) & (rows[:, ENTITY_PRESENT] > 0.5))
        n = len(objects)
        pos, sizes = rows[objects, ENTITY_XY], rows[objects, _SIZE]
        desired = obs["desired_goal"][:n]
        targets = desired[:, GOAL_XY]

        goal_of, cost = self._match(pos, desired)
        dist = cost[np.arange(n), goal_of]
        todo = dist > self.tolerance * self.env.distance_threshold
        if not todo.any():
            return np.zeros(2, dtype=np.float32)
        self._t += 1
        if self.env.spec_.goal == "ordered" and self.env.filled_in_order < n:
            i, goal = self._ordered(agent, pos, sizes, targets, goal_of)
        else:
            if self._current is None or self._current >= n or not todo[self._current]:
                reach = np.linalg.norm(pos - agent, axis=-1) + 1e3 * ~todo + 1e2 * self._aside(n)
                self._switch(int(np.argmin(reach)))
            i = self._current
            goal = targets[goal_of[i]]
        if self._stalled(i, float(np.linalg.norm(pos[i] - goal))):
            self.last_random = True
            return self._rng.uniform(-1, 1, 2).astype(np.float32)
        return self._push(agent, i, goal, pos, sizes)

    def _ordered(
        self, agent: np.ndarray, pos: np.ndarray, sizes: np.ndarray, targets: np.ndarray, goal_of: np.ndarray
    ) -> tuple[int, np.ndarray]:
        """Object and spot: fill targets by rank; first clear any later target that is filled out of turn (privileged state)."""
        order, times, done = self.env.target_order, self.env.fill_times, self.env.filled_in_order
        object_on = objects_on(goal_of)
        early = [t for t in order[done:] if np.isfinite(times[t])]
        if early:
            # Push the nearest out-of-turn object radially off its target (towards the table centre
            # if that would leave the table).
            i = min((object_on[t] for t in early), key=lambda i: np.linalg.norm(pos[i] - agent))
            target = targets[goal_of[i]]
            radial = pos[i] - target
            radial = radial / np.linalg.norm(radial) if np.linalg.norm(radial) > 1e-3 else -target
            spot = target + radial * 2.5 * self.env.distance_threshold
            if np.abs(spot).max() > self.env.table_size / 2 - sizes[i] - 0.01:
                spot = target - target / max(np.linalg.norm(target), 1e-9) * 2.5 * self.env.distance_threshold
            return int(i), spot
        i = object_on[order[done]]
        return int(i), targets[goal_of[i]]

    def _push(self, agent: np.ndarray, i: int, target: np.ndarray, pos: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Action that pushes object ``i`` (of all objects ``pos: (N, 2)``, ``sizes: (N,)``) towards ``target``."""
        obj, size = pos[i], sizes[i]
        remaining = np.linalg.norm(target - obj)
        # Route the object itself around the others, so that pushing it does not knock them.
        others = np.arange(len(pos)) != i
        way = plan_step(obj, target, pos[others], sizes[others] + size + 0.003)
        u = (way - obj) / max(np.linalg.norm(way - obj), 1e-9)
        perp = np.array([-u[1], u[0]])
        contact = size + AGENT_RADIUS
        rel = agent - obj
        along, lateral = rel @ u, rel @ perp
        if along < -0.7 * contact and abs(lateral) < 0.5 * size and np.linalg.norm(rel) < contact + 0.02:
            # In contact from behind: drive the contact point so the object's centre ends on target.
            aim = obj - u * contact + u * min(remaining, MAX_DISPLACEMENT)
        else:
            aim = plan_step(agent, obj - u * (contact + 0.01), pos, sizes + AGENT_RADIUS + 0.003)
        return np.clip((aim - agent) / MAX_DISPLACEMENT, -1.0, 1.0).astype(np.float32)


def _clear(starts: np.ndarray, ends: np.ndarray, centres: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """``(M, K)`` bool: segment ``m`` (``starts``/``ends``: ``(M, 2)``) keeps out of disc ``k``."""
    d = ends - starts
    t = np.einsum("mkx,mx->mk", centres[None] - starts[:, None], d) / np.maximum((d * d).sum(-1), 1e-12)[:, None]
    closest = starts[:, None] + np.clip(t, 0.0, 1.0)[..., None] * d[:, None]
    return np.linalg.norm(closest - centres[None], axis=-1) >= radii[None]


def plan_step(agent: np.ndarray, goal: np.ndarray, centres: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """Next waypoint of a shortest collision-free walk from ``agent`` to ``goal`` among discs.

    Visibility graph over points on a hexagon around each disc (``centres: (K, 2)``, ``radii: (K,)``
    already inflated by the pusher's radius); shortest path by Dijkstra. Discs that contain an
    endpoint are ignored for segments from that endpoint (the pusher may be touching an object).
    """
    angles = np.arange(6) * np.pi / 3
    ring = np.stack([np.cos(angles), np.sin(angles)], -1)
    nodes = (centres[:, None] + ring[None] * (radii[:, None, None] + 0.01) / np.cos(np.pi / 6)).reshape(-1, 2)
    inside = np.linalg.norm(nodes[:, None] - centres[None], axis=-1) < radii[None]
    points = np.concatenate([agent[None], goal[None], nodes[~inside.any(1)]])
    m = len(points)
    i, j = np.triu_indices(m, k=1)
    ok = _clear(points[i], points[j], centres, radii)
    # A segment may start inside the disc its endpoint touches; only foreign discs count.
    holds = np.linalg.norm(points[:, None] - centres[None], axis=-1) < radii[None]  # (m, K)
    ok = (ok | holds[i] | holds[j]).all(1)
    if ok[(i == 0) & (j == 1)].all():
        return goal
    graph = np.zeros((m, m))
    graph[i[ok], j[ok]] = np.linalg.norm(points[i[ok]] - points[j[ok]], axis=-1)
    _, pred = dijkstra(graph, directed=False, indices=0, return_predecessors=True)
    node = 1
    if pred[node] < 0:
        return goal  # no free path: head straight and let the object be nudged
    while pred[node] != 0:
        node = pred[node]
    return points[node]
