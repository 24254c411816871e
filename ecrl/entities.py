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

from ecrl.envs.layout import ENTITY_DIM, ENTITY_FIELDS, ENTITY_PRESENT, GOAL_DIM, GOAL_FIELDS, GOAL_PRESENT

__all__ = [
    "ENTITY_DIM",
    "ENTITY_FIELDS",
    "GOAL_DIM",
    "GOAL_FIELDS",
    "EntityBatch",
    "to_entities",
]


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
        mask=ents[..., ENTITY_PRESENT] > 0.5,
        goal_entities=goals,
        goal_mask=goals[..., GOAL_PRESENT] > 0.5,
    )
