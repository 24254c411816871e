"""Entity-centric networks: the Entity Interaction Transformer (EIT) and a DeepSets baseline.

Both read an observation dict of any ``ecrl`` env (``observation (…, 1 + n_max, D)`` entity rows,
``desired_goal (…, n_max, Dg)`` goal rows) and map it, plus optionally an action, to an output
vector. With ``NetConfig.entity_dim = W`` they read *generic* entity rows ``entities (…, M, W)``
instead of the state rows: an encoder's entities of camera frames
(:class:`ecrl.encoders.rows.EncodedObservation`), every row present, no fixed scaling. No parameter is tied to a slot: the same weights run for any number of objects and any
padding. With ``members > 1`` a network is an ensemble (twin critics) evaluated in one batched pass
and returns ``(E, B, out)``; with ``members = 1`` it returns ``(B, out)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import torch
from torch import nn

from ecrl.attention import AttentionBlock, AttentionPool, layer_norm, mlp, normed_mlp
from ecrl.encoders.rows import ENTITIES_KEY
from ecrl.entities import ENTITY_DIM, ENTITY_FIELDS, GOAL_DIM, GOAL_FIELDS
from ecrl.envs.layout import ENTITY_PRESENT, GOAL_PRESENT

ARCHITECTURES = ("eit", "deepsets")


def _feature_scale(fields: dict[str, slice], width: int, scales: dict[str, float]) -> torch.Tensor:
    scale = torch.ones(width)
    for name, s in scales.items():
        if name in fields:
            scale[fields[name]] = s
    return scale


# Fixed input scaling so that every feature is O(1): positions span ±0.3 m, sizes 1.5–3.5 cm,
# velocities a fraction of a metre per second.
_SCALES = {"position": 4.0, "velocity": 2.0, "size": 25.0}
ENTITY_SCALE = _feature_scale(ENTITY_FIELDS, ENTITY_DIM, _SCALES)
GOAL_SCALE = _feature_scale(GOAL_FIELDS, GOAL_DIM, _SCALES)


@dataclass
class NetConfig:
    """Size of an entity-centric network.

    Attributes:
        arch: ``eit`` (attention) or ``deepsets`` (per-entity MLP + masked mean, no attention).
        width: token width.
        heads: attention heads (EIT).
        blocks: self-attention blocks before and after the cross-attention to goals (EIT).
        mlp_ratio: hidden width of the blocks' MLPs, as a multiple of ``width``.
        entity_dim: 0 (default): the state rows ``observation``. ``W > 0``: generic rows ``entities`` of
            width ``W`` (set by training from its encoder, not by hand).
    """

    arch: str = "eit"
    width: int = 32
    heads: int = 1
    blocks: int = 1
    mlp_ratio: int = 2
    entity_dim: int = 0

    def __post_init__(self) -> None:
        if self.arch not in ARCHITECTURES:
            raise ValueError(f"unknown architecture {self.arch!r}: expected one of {ARCHITECTURES}")
        if self.width < 1 or self.blocks < 0 or self.heads < 1 or self.mlp_ratio < 1 or self.entity_dim < 0:
            raise ValueError(f"invalid network size {asdict(self)}")
        if self.arch == "eit" and self.width % self.heads:
            raise ValueError(f"width ({self.width}) must be divisible by heads ({self.heads})")


def _check_rows(key: str, t: torch.Tensor, width: int) -> None:
    if t.ndim != 3 or t.shape[-1] != width:
        raise ValueError(f"{key}: expected shape (B, N, {width}), got {tuple(t.shape)}")


class EntityNet(nn.Module):
    """Observation (+ action) → ``([E,] B, out_dim)``, permutation-invariant over entities and goals.

    EIT: entity tokens (agent + objects, plus an action token for critics) self-attend, cross-attend
    to the goal tokens, self-attend again, and an attention pool with a learned query reads out.
    DeepSets: the same tokens through a shared MLP, masked means of entities and goals, an MLP head.
    """

    def __init__(self, config: NetConfig, out_dim: int, action_dim: int = 0, members: int = 1) -> None:
        super().__init__()
        self.config, self.out_dim, self.action_dim, self.members = config, out_dim, action_dim, members
        w = config.width
        self.entity_key, self.entity_dim = (
            (ENTITIES_KEY, config.entity_dim) if config.entity_dim else ("observation", ENTITY_DIM)
        )
        scale = torch.ones(config.entity_dim) if config.entity_dim else ENTITY_SCALE.clone()
        self.register_buffer("entity_scale", scale, persistent=False)
        self.register_buffer("goal_scale", GOAL_SCALE.clone(), persistent=False)
        self.embed_entity = mlp([self.entity_dim, w, w], members)
        self.embed_goal = mlp([GOAL_DIM, w, w], members)
        self.embed_action = mlp([action_dim, w, w], members) if action_dim else None
        if config.arch == "eit":
            blocks = lambda: nn.ModuleList(  # noqa: E731
                AttentionBlock(w, config.heads, config.mlp_ratio, members) for _ in range(config.blocks)
            )
            self.before, self.after = blocks(), blocks()
            self.cross = AttentionBlock(w, config.heads, config.mlp_ratio, members)
            self.pool = AttentionPool(w, config.heads, members)
            self.head = nn.Sequential(layer_norm(w, members), mlp([w, w, out_dim], members))
        else:
            self.head = mlp([2 * w, 2 * w, w, out_dim], members)

    def _tokens(self, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.members > 1:
            x = x.expand(self.members, *x.shape)
        return layer(x)

    def forward(self, obs: Mapping[str, torch.Tensor], action: torch.Tensor | None = None) -> torch.Tensor:
        """``obs``: dict with ``observation (B, N, D)`` (or generic ``entities (B, M, W)``) and ``desired_goal
        (B, M, Dg)``; ``action (B, A)``."""
        dtype = self.entity_scale.dtype
        if self.entity_key not in obs:
            raise ValueError(f"this network reads {self.entity_key!r} rows; the observation has {sorted(obs)}")
        ents, goals = obs[self.entity_key].to(dtype), obs["desired_goal"].to(dtype)
        _check_rows(self.entity_key, ents, self.entity_dim)
        _check_rows("desired_goal", goals, GOAL_DIM)
        if ents.shape[0] != goals.shape[0]:
            raise ValueError(
                f"observation {tuple(ents.shape)} and desired_goal {tuple(goals.shape)} batch sizes differ"
            )
        if (action is None) != (self.embed_action is None):
            raise ValueError("this network takes an action" if action is None else "this network takes no action")
        goal_mask = goals[..., GOAL_PRESENT] > 0.5
        mask = (
            ents.new_ones(ents.shape[:2], dtype=torch.bool)
            if self.config.entity_dim
            else ents[..., ENTITY_PRESENT] > 0.5
        )
        x = self._tokens(self.embed_entity, ents * self.entity_scale)
        g = self._tokens(self.embed_goal, goals * self.goal_scale)
        if action is not None:
            if action.ndim != 2 or action.shape != (ents.shape[0], self.action_dim):
                raise ValueError(
                    f"action: expected shape ({ents.shape[0]}, {self.action_dim}), got {tuple(action.shape)}"
                )
            action = action.to(dtype)
            x = torch.cat([x, self._tokens(self.embed_action, action)[..., None, :]], dim=-2)
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        if self.config.arch == "deepsets":
            pooled = torch.cat([_masked_mean(x, mask), _masked_mean(g, goal_mask)], dim=-1)
            return self.head(pooled)
        for block in self.before:
            x = block(x, mask=mask)
        x = self.cross(x, g, goal_mask)
        for block in self.after:
            x = block(x, mask=mask)
        norm, layers = self.head
        return normed_mlp(self.pool(x, mask), norm, layers)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x ([E,] B, N, C)`` over the rows where ``mask (B, N)`` is True."""
    m = mask.to(x.dtype)
    return (x * m[..., None]).sum(-2) / m.sum(-1, keepdim=True).clamp(min=1.0)
