"""Entity sets: observation dicts from any ``ecrl`` env → ``(B, N, D)`` tensors with masks.

The row layouts are those the environments write (:mod:`ecrl.envs.layout`, re-exported here):
an entity row is ``present, is_agent, is_object, position(3), sin/cos yaw, velocity(3), size(3),
shape one-hot, colour RGB``; a goal row is ``present, position(3), size(3), shape one-hot, colour,
rank``. Nothing in a row identifies its slot, so a model that reads them works for any number of
objects and any padding ``n_max``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from ecrl.envs.layout import ENTITY_DIM, ENTITY_FIELDS, GOAL_DIM, GOAL_FIELDS

__all__ = [
    "ENTITY_DIM",
    "ENTITY_FIELDS",
    "GOAL_DIM",
    "GOAL_FIELDS",
    "EntityBatch",
    "check_focus",
    "focus_rows",
    "focused",
    "goal_distances",
    "placed_objects",
    "take_objects",
    "to_entities",
]

_PRESENT, _RANK = ENTITY_FIELDS["present"].start, GOAL_FIELDS["rank"].start
_XY = slice(ENTITY_FIELDS["position"].start, ENTITY_FIELDS["position"].start + 2)
_GOAL_XY = slice(GOAL_FIELDS["position"].start, GOAL_FIELDS["position"].start + 2)


@dataclass
class EntityBatch:
    """Entities of a batch of observations.

    Attributes:
        entities: ``(B, N, D)`` agent and object rows (``N = 1 + n_max``).
        mask: ``(B, N)`` bool, True for real entities.
        goal_entities: ``(B, M, Dg)`` desired-goal rows.
        goal_mask: ``(B, M)`` bool, True for real goals.
    """

    entities: torch.Tensor
    mask: torch.Tensor
    goal_entities: torch.Tensor
    goal_mask: torch.Tensor


def _as_tensor(key: str, value: object, width: int, device, dtype) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value)
    if t.ndim not in (2, 3) or t.shape[-1] != width:
        raise ValueError(f"obs[{key!r}]: expected shape (N, {width}) or (B, N, {width}), got {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"obs[{key!r}] contains NaN or inf")
    return t.to(device=device, dtype=dtype)


def to_entities(
    obs: Mapping[str, object], device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
) -> EntityBatch:
    """Turn one observation dict (rows ``(N, D)``) or a batch (``(B, N, D)``) into an :class:`EntityBatch`.

    Args:
        obs: a dict with ``observation`` and ``desired_goal`` (numpy arrays or tensors).
        device: where the tensors go.
        dtype: floating dtype of the tensors.
    """
    missing = {"observation", "desired_goal"} - set(obs)
    if missing:
        raise ValueError(f"observation dict lacks {sorted(missing)}; got keys {sorted(obs)}")
    ents = _as_tensor("observation", obs["observation"], ENTITY_DIM, device, dtype)
    goals = _as_tensor("desired_goal", obs["desired_goal"], GOAL_DIM, device, dtype)
    if ents.ndim != goals.ndim or (ents.ndim == 3 and ents.shape[0] != goals.shape[0]):
        raise ValueError(
            f"observation {tuple(ents.shape)} and desired_goal {tuple(goals.shape)} disagree on the batch dimension"
        )
    if ents.ndim == 2:
        ents, goals = ents[None], goals[None]
    return EntityBatch(
        entities=ents,
        mask=ents[..., ENTITY_FIELDS["present"].start] > 0.5,
        goal_entities=goals,
        goal_mask=goals[..., GOAL_FIELDS["present"].start] > 0.5,
    )


def focus_rows(
    observation: torch.Tensor, desired_goal: torch.Tensor, k: int, placed_within: float = 0.04
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The agent and at most ``k`` objects of each scene, with their goal rows.

    Objects not yet placed come first, those whose target has the lowest rank first (``ordered``
    goals; other goal kinds have rank 0 throughout), then nearest the agent first; placed objects
    fill the remaining rows, nearest first. An object is placed when it is within
    ``placed_within`` of its target, the goal row with its index (``ecrl`` envs write goal row
    ``i`` for object row ``i + 1``; with interchangeable objects this is one of the targets it may
    take).

    Args:
        observation: ``(B, 1 + n, ENTITY_DIM)`` rows, agent first; padded rows have ``present`` 0.
        desired_goal: ``(B, n, GOAL_DIM)`` goal rows aligned with the object rows.

    Returns:
        ``(B, 1 + m, ENTITY_DIM)`` rows, ``(B, m, GOAL_DIM)`` goal rows and ``(B, m)`` the kept
        objects' indices, with ``m = min(k, n)``; a scene with fewer than ``m`` objects keeps padded rows.
    """
    if observation.ndim != 3 or observation.shape[-1] != ENTITY_DIM:
        raise ValueError(f"observation: expected (B, 1 + n, {ENTITY_DIM}), got {tuple(observation.shape)}")
    if desired_goal.ndim != 3 or desired_goal.shape[-1] != GOAL_DIM:
        raise ValueError(f"desired_goal: expected (B, n, {GOAL_DIM}), got {tuple(desired_goal.shape)}")
    objects = observation[:, 1:]
    if objects.shape[:2] != desired_goal.shape[:2]:
        raise ValueError(
            f"focus needs one goal row per object row: observation {tuple(observation.shape)} "
            f"(agent + {objects.shape[1]} object rows), desired_goal {tuple(desired_goal.shape)}"
        )
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    present = objects[..., _PRESENT] > 0.5
    placed = placed_objects(observation, desired_goal, placed_within)
    reach = (objects[..., _XY] - observation[:, :1, _XY]).norm(dim=-1)
    rank = torch.where(placed, 0.0, desired_goal[..., _RANK])
    # Lexicographic: real rows before padded ones, unplaced before placed, low rank first, then near first.
    keep = reach.argsort(dim=1, stable=True)
    for key in (rank, placed, ~present):
        keep = keep.gather(1, key.gather(1, keep).float().argsort(dim=1, stable=True))
    keep = keep[:, : min(k, objects.shape[1])]
    out = take_objects({"observation": observation, "desired_goal": desired_goal}, keep)
    return out["observation"], out["desired_goal"], keep


def goal_distances(observation: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
    """``(B, n)``: distance in the plane from object row ``i + 1`` to goal row ``i``."""
    return (observation[:, 1:, _XY] - desired_goal[..., _GOAL_XY]).norm(dim=-1)


def placed_objects(observation: torch.Tensor, desired_goal: torch.Tensor, within: float = 0.04) -> torch.Tensor:
    """``(B, n)`` bool: object row ``i + 1`` lies within ``within`` of goal row ``i`` (in the plane)."""
    return goal_distances(observation, desired_goal) <= within


def focused(obs: Mapping[str, torch.Tensor], k: int, placed_within: float = 0.04) -> dict[str, torch.Tensor]:
    """An observation dict of ``(B, N, D)`` tensors cut down by :func:`focus_rows` (``achieved_goal`` too, if there)."""
    return take_objects(obs, focus_rows(obs["observation"], obs["desired_goal"], k, placed_within)[2])


def take_objects(obs: Mapping[str, torch.Tensor], keep: torch.Tensor) -> dict[str, torch.Tensor]:
    """The agent and the objects ``keep (B, m)`` (indices among object rows) of an observation dict
    of ``(B, N, D)`` tensors, with their goal rows (``achieved_goal`` too, if there)."""
    n = obs["observation"].shape[1] - 1
    if keep.ndim != 2 or keep.shape[0] != obs["observation"].shape[0]:
        raise ValueError(f"keep: expected (B, m) object indices, got {tuple(keep.shape)}")
    if keep.numel() and (int(keep.min()) < 0 or int(keep.max()) >= n):
        raise ValueError(f"keep: object indices must lie in [0, {n}), got {keep.min().item()}..{keep.max().item()}")
    rows = obs["observation"][:, 1:].gather(1, keep[..., None].expand(-1, -1, ENTITY_DIM))
    take = lambda t: t.gather(1, keep[..., None].expand(-1, -1, GOAL_DIM))  # noqa: E731
    out = dict(
        obs, observation=torch.cat([obs["observation"][:, :1], rows], dim=1), desired_goal=take(obs["desired_goal"])
    )
    if "achieved_goal" in obs:
        out["achieved_goal"] = take(obs["achieved_goal"])
    return out


def check_focus(focus: int, placed_within: float) -> None:
    """``ValueError`` unless ``focus >= 0`` (0: every object) and ``placed_within > 0``: a module's focus settings."""
    if isinstance(focus, bool) or not isinstance(focus, int) or focus < 0:
        raise ValueError(f"focus must be an int >= 0 (0: every object), got {focus!r}")
    if not placed_within > 0:
        raise ValueError(f"placed_within must be positive, got {placed_within!r}")
