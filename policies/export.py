"""Trained SB3 actors → :class:`ecrl.policy.Policy` modules that run on any number of objects.

The modules below are registered model builders (``entity_actor``, ``flat_actor``): ``policy.json``
names one, and :func:`ecrl.policy.load` calls it with the saved kwargs and loads the safetensors
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
from ecrl.entities import (
    _PRESENT,
    ENTITY_DIM,
    GOAL_DIM,
    check_focus,
    focused,
    goal_distances,
    take_objects,
)
from ecrl.policies.nets import EntityNet, NetConfig, ObjectScorer, choose_object
from ecrl.policies.sb3 import LOG_STD_MAX, LOG_STD_MIN, EntityActor
from ecrl.policy import Policy


@register_builder("entity_actor")
class EntityActorModule(nn.Module):
    """An entity-centric actor for inference: ``forward`` → deterministic action, ``sample`` → stochastic.

    ``focus=k`` (> 0) shows the actor only the agent and ``k`` objects at every step: those not yet
    placed nearest the agent (:func:`ecrl.entities.focus_rows`), as the diffusion planner's setting.
    ``select``: the actor was trained with an object scorer that picks the one object it sees
    (:class:`ecrl.policies.sb3.EntityActor`); the two settings exclude each other. A selecting actor
    keeps working on the object it chose until that object is within ``placed_within`` of its
    target, as the expert it learnt from does, and only then asks its scorer again, which chooses
    among objects not yet placed while any is left (:func:`ecrl.policies.nets.choose_object`); this
    needs :meth:`reset` at the start of episodes (``ecrl-eval`` calls it). Choosing afresh at every
    step, or among placed objects too, solved fewer episodes (``results/rl_push2``).
    ``patience=k`` (default 30, 0: never give up): an object that has not come
    5 mm nearer its target for ``k`` steps (wedged among others) is set aside for ``k`` steps and
    the scorer chooses again, as the scripted expert does when it stalls.
    """

    def __init__(
        self,
        net: dict[str, Any],
        action_dim: int,
        stochastic: bool,
        focus: int = 0,
        placed_within: float = 0.04,
        select: bool = False,
        patience: int = 30,
    ) -> None:
        super().__init__()
        check_focus(focus, placed_within)
        if select and focus:
            raise ValueError(f"focus={focus} would override this policy's own object choice (select=True)")
        self.action_dim, self.stochastic = action_dim, stochastic
        self.focus, self.placed_within, self.select = focus, placed_within, select
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ValueError(f"patience must be an int >= 0 (0: never give up on an object), got {patience!r}")
        self.patience = patience
        self.reset()
        self.net = EntityNet(NetConfig(**net), out_dim=2 * action_dim if stochastic else action_dim)
        self.scorer = ObjectScorer(NetConfig(**net).width) if select else None

    def reset(self, *_: Any) -> None:
        """Start new episodes: forget the objects chosen so far (``select``)."""
        self._choice: torch.Tensor | None = None
        self._aside = torch.zeros(0, 0, dtype=torch.long)  # (B, n): step until which an object is set aside

    def net_input(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """What the action net reads: ``obs``, the chosen object (``select``) or the focus (``focus``)."""
        if self.scorer is not None:
            return take_objects(obs, self._select(obs)[:, None])
        return focused(obs, self.focus, self.placed_within) if self.focus else obs

    @torch.no_grad()
    def _select(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(B,)`` the object each scene's action is for: the scorer's best, or the committed one."""
        ents, goals = obs["observation"], obs["desired_goal"]
        dist = goal_distances(ents, goals)
        placed = dist <= self.placed_within
        b, n = dist.shape
        if self._aside.shape != (b, n):  # new episodes, or another batch of scenes
            self._aside, self._t = torch.zeros(b, n, dtype=torch.long), 0
            self._best, self._since = torch.full((b,), float("inf")), torch.zeros(b, dtype=torch.long)
            if self._choice is not None and self._choice.shape != (b,):
                self._choice = None
        self._t += 1
        held, keep = self._choice, torch.zeros(b, dtype=torch.bool)
        if held is not None:
            at = lambda t: t.gather(1, held[:, None])[:, 0]  # noqa: E731
            keep = (at(ents[:, 1:, _PRESENT]) > 0.5) & ~at(placed)
            if self.patience:
                # Stalled: no 5 mm of progress towards its target for `patience` steps. Set it aside as long.
                remaining = at(dist)
                better = remaining < self._best - 0.005
                self._best = torch.where(better, remaining, self._best)
                self._since = torch.where(better, 0, self._since + 1)
                stalled = keep & (self._since > self.patience)
                self._aside[stalled, held[stalled]] = self._t + self.patience
                keep &= ~stalled
        choice = choose_object(self.scorer, obs, placed, set_aside=self._aside > self._t)
        if held is not None:
            choice = torch.where(keep, held, choice)
            fresh = choice != held
        else:
            fresh = torch.ones(b, dtype=torch.bool)
        self._best = torch.where(fresh, float("inf"), self._best)
        self._since = torch.where(fresh, 0, self._since)
        self._choice = choice
        return choice

    def act_on(self, net_input: dict[str, torch.Tensor], deterministic: bool = True) -> torch.Tensor:
        """The deterministic action for an input already cut down by :meth:`net_input`
        (``deterministic`` is there for the signature of :meth:`EntityActor.act_on`)."""
        return torch.tanh(self.net(net_input)[..., : self.action_dim])

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.act_on(self.net_input(obs))

    def sample(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        if not self.stochastic:
            return self(obs)
        mean, log_std = self.net(self.net_input(obs)).chunk(2, dim=-1)
        return torch.tanh(mean + log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp() * torch.randn_like(mean))


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


def policy_from_model(model, meta: dict[str, Any]) -> Policy:
    """The inference policy of a trained SB3 model (entity-centric or flat MLP)."""
    actor = model.policy.actor
    space = model.action_space
    action_dim = int(space.shape[0])
    if isinstance(actor, EntityActor):
        kwargs = {"net": asdict(actor.net_config), "action_dim": action_dim, "stochastic": actor.stochastic}
        if actor.select:
            kwargs["select"] = True
        module = EntityActorModule(**kwargs)
        module.net.load_state_dict(actor.net.state_dict())
        if actor.scorer is not None:
            module.scorer.load_state_dict(actor.scorer.state_dict())
        builder = "entity_actor"
    else:
        algo = meta["algo"]
        n_max = model.observation_space["observation"].shape[0] - 1
        kwargs = {"algo": algo, "n_max": n_max, "net_arch": list(meta["net_arch"]), "action_dim": action_dim}
        module = FlatActorModule(**kwargs)
        module.actor.load_state_dict(actor.state_dict())
        builder = "flat_actor"
    return Policy(module.to("cpu"), space.low, space.high, meta, builder, kwargs)
