"""Goal kinds: sampling targets, matching objects to targets, reward and success.

Interchangeable objects make a goal a set-matching problem: an object may fill any target of its
group, so distances are taken under the optimal assignment within each group (Hungarian method).
Groups are objects of identical kind (shape, size, colour), or, for ``sort``, of identical colour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from ecrl.envs.layout import GOAL_ATTRIBUTES, GOAL_COLOUR, GOAL_DIM, GOAL_POSITION, GOAL_PRESENT
from ecrl.envs.scene import CLEARANCE, cluster, cluster_extent, scatter, scatter_regions
from ecrl.envs.task import TaskSpec

REWARD_TYPES = ("sparse", "dense")


def same_group(desired: np.ndarray, by_colour: bool) -> np.ndarray:
    """``(B, M, M)`` bool: goal rows ``i != j`` whose objects are interchangeable.

    Args:
        desired: ``(B, M, G)`` goal rows; absent rows are never interchangeable.
        by_colour: group by colour alone (``sort``) instead of by the full object kind.
    """
    cols = GOAL_COLOUR if by_colour else GOAL_ATTRIBUTES
    attrs = desired[..., cols]
    same = np.abs(attrs[:, :, None, :] - attrs[:, None, :, :]).max(-1) < 1e-6
    present = desired[..., GOAL_PRESENT] > 0.5
    same &= present[:, :, None] & present[:, None, :]
    same[:, np.arange(same.shape[1]), np.arange(same.shape[1])] = False
    return same


def assigned_distances(achieved_pos: np.ndarray, desired_pos: np.ndarray, same: np.ndarray) -> np.ndarray:
    """``(B, M)`` distance from each target to the object optimally assigned to it.

    Args:
        achieved_pos: ``(B, M, 3)`` object positions (row ``i`` is the object that target ``i`` was drawn for).
        desired_pos: ``(B, M, 3)`` target positions.
        same: ``(B, M, M)`` interchangeable pairs from :func:`same_group`.
    """
    dist = norm(achieved_pos - desired_pos)
    for b in np.flatnonzero(same.any(axis=(1, 2))):
        dist[b] = matched_distances(achieved_pos[b], desired_pos[b], same[b] | np.eye(same.shape[1], dtype=bool))
    return dist


def matched_distances(achieved_pos: np.ndarray, desired_pos: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """``(M,)`` distance from each target to the object optimally assigned to it, for one sample.

    Args:
        achieved_pos: ``(M, 3)`` object positions.
        desired_pos: ``(M, 3)`` target positions.
        allowed: ``(M, M)`` bool, object ``i`` may fill target ``j`` (``i == j`` always allowed).
    """
    # cost[i, j]: object i on target j; only allowed pairs are computed (interchangeable objects are few).
    cost = np.full(allowed.shape, 1e6)
    i, j = np.nonzero(allowed)
    cost[i, j] = norm(achieved_pos[i] - desired_pos[j])
    rows, cols = linear_sum_assignment(cost)
    dist = np.empty(len(cost))
    dist[cols] = cost[rows, cols]
    return dist


def norm(x: np.ndarray) -> np.ndarray:
    """``np.linalg.norm(x, axis=-1)`` bit for bit (the same operations), without its per-call overhead."""
    return np.sqrt(np.add.reduce(x * x, axis=-1))


def _check_info(info: Any, batch: tuple[int, ...]) -> None:
    if info is None or isinstance(info, Mapping):
        return
    if isinstance(info, Sequence | np.ndarray) and not isinstance(info, str | bytes):
        n = int(np.prod(batch)) if batch else 1
        if len(info) != n and batch:
            raise ValueError(f"info: expected {n} dicts for a batch of shape {batch}, got {len(info)}")
        return
    raise ValueError(f"info must be a dict, a sequence of dicts or None, got {type(info).__name__}")


def goal_distances(achieved_goal: np.ndarray, desired_goal: np.ndarray, by_colour: bool) -> tuple:
    """Matched distances and presence for goal rows with any leading batch shape.

    Returns:
        ``(dist, present)``, both ``(..., M)``; ``dist`` is 0 on absent rows.
    """
    achieved_goal = np.asarray(achieved_goal, dtype=np.float64)
    desired_goal = np.asarray(desired_goal, dtype=np.float64)
    if achieved_goal.shape != desired_goal.shape or achieved_goal.ndim < 2 or achieved_goal.shape[-1] != GOAL_DIM:
        raise ValueError(
            f"achieved_goal and desired_goal must both be (..., M, {GOAL_DIM}); "
            f"got {achieved_goal.shape} and {desired_goal.shape}"
        )
    lead, m = achieved_goal.shape[:-2], achieved_goal.shape[-2]
    a = achieved_goal.reshape(-1, m, GOAL_DIM)
    d = desired_goal.reshape(-1, m, GOAL_DIM)
    present = d[..., GOAL_PRESENT] > 0.5
    dist = assigned_distances(a[..., GOAL_POSITION], d[..., GOAL_POSITION], same_group(d, by_colour))
    dist = np.where(present, dist, 0.0)
    return dist.reshape(*lead, m), present.reshape(*lead, m)


def reward_from_distances(dist: np.ndarray, present: np.ndarray, threshold: float, reward_type: str) -> np.ndarray:
    """Reward per sample: ``sparse`` = -(fraction of objects not placed), ``dense`` = -mean distance (m)."""
    count = np.maximum(present.sum(-1), 1)
    if reward_type == "sparse":
        return -((dist > threshold) & present).sum(-1) / count
    return -(dist * present).sum(-1) / count


def compute_reward(
    achieved_goal: np.ndarray,
    desired_goal: np.ndarray,
    info: Any,
    *,
    threshold: float,
    reward_type: str,
    by_colour: bool,
) -> np.ndarray | float:
    """Vectorised reward over any leading batch shape; ``info`` may be a dict or a sequence of dicts."""
    _check_info(info, np.shape(achieved_goal)[:-2])
    dist, present = goal_distances(achieved_goal, desired_goal, by_colour)
    reward = reward_from_distances(dist, present, threshold, reward_type)
    return float(reward) if np.ndim(reward) == 0 else reward.astype(np.float32)


class GoalReward:
    """``compute_reward`` of an env with ``distance_threshold``, ``reward_type`` and ``_by_colour`` (``sort`` goals)."""

    _by_colour = False

    def compute_reward(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any) -> Any:
        """Reward for goal rows with any leading batch shape; ``info``: a dict or a sequence of dicts."""
        return compute_reward(
            achieved_goal,
            desired_goal,
            info,
            threshold=self.distance_threshold,
            reward_type=self.reward_type,
            by_colour=self._by_colour,
        )


def sample_targets(
    rng: np.random.Generator, spec: TaskSpec, sizes: np.ndarray, table_size: float
) -> tuple[np.ndarray, np.ndarray]:
    """Targets ``(N, 2)`` and ranks ``(N,)`` (``(k + 1) / N`` for ordered goals, else 0) for a task.

    Args:
        sizes: ``(N,)`` object sizes (radius or half side) in metres.
    """
    n = spec.n_objects
    spacing = 2 * float(sizes.max()) + CLEARANCE / 2
    ranks = np.zeros(n)
    if spec.goal in ("positions", "ordered"):
        targets = scatter(rng, sizes, table_size)
        if spec.goal == "ordered":
            ranks = (rng.permutation(n) + 1) / n
    elif spec.goal == "adjacent":
        radius = cluster_extent(n, spacing) * np.sqrt(2) + sizes.max()
        centre = scatter(rng, np.array([radius]), table_size)[0]
        targets = cluster(centre, n, spacing)[rng.permutation(n)]
    else:  # sort: one compact cluster per colour, clusters apart from each other
        colours = [o.colour for o in spec.objects]
        names = sorted(set(colours))
        members = [[i for i, c in enumerate(colours) if c == name] for name in names]
        radii = np.array([cluster_extent(len(m), spacing) * np.sqrt(2) + sizes.max() for m in members])
        centres = scatter_regions(rng, radii, table_size)
        targets = np.zeros((n, 2))
        for centre, idx in zip(centres, members, strict=True):
            targets[idx] = cluster(centre, len(idx), spacing)[rng.permutation(len(idx))]
    return targets, ranks
