"""Trained SB3 actors → :class:`ecrl.policy.Policy` modules that run on any number of objects.

The modules below are registered model builders (``entity_actor``, ``flat_actor``, and
``pixel_actor``, an entity actor behind the frozen encoder of :class:`~ecrl.encoders.rows.FrameRows`,
for policies trained from camera frames): ``policy.json`` names one, and :func:`ecrl.policy.load` calls it with the saved kwargs and loads the safetensors
weights into what it returns.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ecrl.checkpoint import register_builder
from ecrl.encoders.rows import ENTITIES_KEY, FrameRows
from ecrl.entities import ENTITY_DIM, GOAL_DIM
from ecrl.policies.nets import EntityNet, NetConfig
from ecrl.policies.sb3 import LOG_STD_MAX, LOG_STD_MIN, EntityActor
from ecrl.policy import Policy


@register_builder("entity_actor")
class EntityActorModule(nn.Module):
    """An entity-centric actor for inference: ``forward`` → deterministic action, ``sample`` → stochastic.

    It reads every object it is given; to show it only a few at a time, wrap the loaded policy in
    :class:`ecrl.focus.Focus` (``ecrl-eval --focus K``).
    """

    def __init__(self, net: dict[str, Any], action_dim: int, stochastic: bool) -> None:
        super().__init__()
        self.action_dim, self.stochastic = action_dim, stochastic
        self.net = EntityNet(NetConfig(**net), out_dim=2 * action_dim if stochastic else action_dim)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.tanh(self.net(obs)[..., : self.action_dim])

    def sample(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        if not self.stochastic:
            return self(obs)
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        return torch.tanh(mean + log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp() * torch.randn_like(mean))


@register_builder("pixel_actor")
class PixelActorModule(FrameRows):
    """An entity actor over a frozen encoder's entities: ``obs["pixels"]`` →
    :meth:`~ecrl.encoders.rows.FrameRows.entity_rows` → the actor.

    Args:
        actor: the :class:`EntityActorModule` keyword arguments (its net's ``entity_dim`` = the row width).
        encoder, mean, std, table_height, cameras: the front end (:class:`FrameRows`).
    """

    def __init__(
        self, actor: dict[str, Any], encoder: dict[str, Any], mean: list[float], std: list[float], **rows: Any
    ):
        super().__init__(encoder, mean, std, **rows)
        self.actor = EntityActorModule(**actor)
        if self.actor.net.config.entity_dim != self.width:
            raise ValueError(
                f"the actor reads rows {self.actor.net.config.entity_dim} wide, the front end makes them {self.width}"
            )

    def _with_rows(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {**obs, ENTITIES_KEY: self.entity_rows(obs)}

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.actor(self._with_rows(obs))

    def sample(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.actor.sample(self._with_rows(obs))


def goal_env_space(n_max: int) -> spaces.Dict:
    """The observation space of an ``ecrl`` push env padded to ``n_max`` objects."""
    box = lambda *shape: spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float64)  # noqa: E731
    return spaces.Dict(
        {
            "observation": box(1 + n_max, ENTITY_DIM),
            "achieved_goal": box(n_max, GOAL_DIM),
            "desired_goal": box(n_max, GOAL_DIM),
        }
    )


@register_builder("flat_actor")
class FlatActorModule(nn.Module):
    """SB3's flat MLP actor (fixed ``n_max``) behind the same interface; other ``n_max`` are refused."""

    def __init__(self, algo: str, n_max: int, net_arch: list[int], action_dim: int) -> None:
        super().__init__()
        from sb3_contrib import TQC
        from stable_baselines3 import SAC, TD3

        self.n_max = n_max
        action_space = spaces.Box(-1.0, 1.0, shape=(action_dim,), dtype=np.float32)
        policy_cls = {"sac": SAC, "tqc": TQC, "td3": TD3}[algo].policy_aliases["MultiInputPolicy"]
        policy = policy_cls(goal_env_space(n_max), action_space, lambda _: 0.0, net_arch=net_arch)
        self.actor = policy.actor
        self.stochastic = algo != "td3"

    def _check(self, obs: dict[str, torch.Tensor]) -> None:
        got = obs["observation"].shape[1] - 1
        if got != self.n_max or "achieved_goal" not in obs:
            raise ValueError(
                f"this flat MLP policy was trained with n_max = {self.n_max} and reads every key; "
                f"got an observation with n_max = {got} and keys {sorted(obs)} "
                f"(entity-centric policies run on any n_max)"
            )

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        self._check(obs)
        return self.actor(obs, deterministic=True) if self.stochastic else self.actor(obs)

    def sample(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        self._check(obs)
        return self.actor(obs) if self.stochastic else self.actor(obs)


def policy_from_model(model, meta: dict[str, Any], frames: FrameRows | None = None) -> Policy:
    """The inference policy of a trained SB3 model (entity-centric or flat MLP).

    A model trained on an encoder's entities (:class:`~ecrl.encoders.rows.EncodedObservation`) needs the
    front end that made them, ``frames``: the policy then acts from camera frames (``pixel_actor``).
    """
    actor = model.policy.actor
    space = model.action_space
    action_dim = int(space.shape[0])
    if isinstance(actor, EntityActor):
        kwargs = {"net": asdict(actor.net_config), "action_dim": action_dim, "stochastic": actor.stochastic}
        module = EntityActorModule(**kwargs)
        module.net.load_state_dict(actor.net.state_dict())
        builder = "entity_actor"
        if actor.net_config.entity_dim:
            if frames is None:
                raise ValueError(
                    "this actor reads an encoder's entities: policy_from_model needs its front end (frames=)"
                )
            kwargs = {"actor": kwargs, **frames.row_kwargs}
            pixel = PixelActorModule(**kwargs)
            pixel.encoder.load_state_dict(frames.encoder.state_dict())
            pixel.actor.load_state_dict(module.state_dict())
            module, builder = pixel, "pixel_actor"
    else:
        algo = meta["algo"]
        n_max = model.observation_space["observation"].shape[0] - 1
        kwargs = {"algo": algo, "n_max": n_max, "net_arch": list(meta["net_arch"]), "action_dim": action_dim}
        module = FlatActorModule(**kwargs)
        module.actor.load_state_dict(actor.state_dict())
        builder = "flat_actor"
    return Policy(module.to("cpu"), space.low, space.high, meta, builder, kwargs)
