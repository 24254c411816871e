"""Stable-Baselines3 bridge: entity-centric actors and critics inside SB3's SAC, TD3 and TQC, unforked.

SB3's off-policy policies build their networks through ``make_actor``/``make_critic``; the policy
classes here override just those two, so SAC, TD3, TQC and ``HerReplayBuffer`` run unmodified on the
``ecrl`` envs' ``Dict`` observations. The critics are one ensemble network (``members = n_critics``),
so twin critics cost one batched pass, not two. Actors and critics read the observation dict
directly (no SB3 features extractor), which is what lets :mod:`ecrl.policy` run them on any N.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch
from gymnasium import spaces
from sb3_contrib.tqc.policies import TQCPolicy
from stable_baselines3.common.distributions import SquashedDiagGaussianDistribution
from stable_baselines3.common.policies import BaseModel, BasePolicy
from stable_baselines3.sac.policies import SACPolicy
from stable_baselines3.td3.policies import TD3Policy

from ecrl.encoders.rows import ENTITIES_KEY
from ecrl.policies.nets import EntityNet, NetConfig

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


def _net_config(net: NetConfig | dict[str, Any] | None) -> NetConfig:
    if net is None:
        return NetConfig()
    return net if isinstance(net, NetConfig) else NetConfig(**net)


class EntityActor(BasePolicy):
    """Deterministic (TD3: ``tanh`` of the net) or squashed-Gaussian (SAC/TQC) actor over entities."""

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Box,
        net: NetConfig,
        stochastic: bool,
    ) -> None:
        super().__init__(observation_space, action_space, squash_output=True)
        self.net_config, self.stochastic = net, stochastic
        self.action_dim = int(action_space.shape[0])
        self.net = EntityNet(net, out_dim=2 * self.action_dim if stochastic else self.action_dim)
        if stochastic:
            self.action_dist = SquashedDiagGaussianDistribution(self.action_dim)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(net=asdict(self.net_config), stochastic=self.stochastic)
        return data

    def get_action_dist_params(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, dict]:
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX), {}

    def forward(self, obs: dict[str, torch.Tensor], deterministic: bool = False) -> torch.Tensor:
        if not self.stochastic:
            return torch.tanh(self.net(obs))
        mean, log_std, _ = self.get_action_dist_params(obs)
        return self.action_dist.actions_from_params(mean, log_std, deterministic=deterministic)

    def action_log_prob(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std, _ = self.get_action_dist_params(obs)
        return self.action_dist.log_prob_from_params(mean, log_std)

    def _predict(self, observation: dict[str, torch.Tensor], deterministic: bool = False) -> torch.Tensor:
        return self(observation, deterministic)


class EntityCritic(BaseModel):
    """``n_critics`` Q-networks (or quantile networks, for TQC) as one ensemble, one batched pass.

    ``forward`` returns what the algorithm expects: a tuple of ``(B, 1)`` values (SAC, TD3) or a
    ``(B, n_critics, n_quantiles)`` tensor (TQC).
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Box,
        net: NetConfig,
        n_critics: int = 2,
        n_quantiles: int | None = None,
    ) -> None:
        super().__init__(observation_space, action_space)
        self.net_config, self.n_critics, self.n_quantiles = net, n_critics, n_quantiles
        self.quantiles_total = (n_quantiles or 1) * n_critics
        self.share_features_extractor = False
        self.net = EntityNet(net, out_dim=n_quantiles or 1, action_dim=int(action_space.shape[0]), members=n_critics)

    def _values(self, obs: dict[str, torch.Tensor], actions: torch.Tensor) -> torch.Tensor:
        q = self.net(obs, actions)
        return q if self.n_critics > 1 else q[None]  # (E, B, out)

    def forward(self, obs: dict[str, torch.Tensor], actions: torch.Tensor) -> tuple[torch.Tensor, ...] | torch.Tensor:
        q = self._values(obs, actions)
        return q.transpose(0, 1) if self.n_quantiles else tuple(q.unbind(0))

    def q1_forward(self, obs: dict[str, torch.Tensor], actions: torch.Tensor) -> torch.Tensor:
        return self._values(obs, actions)[0].mean(-1, keepdim=True)


class _EntityPolicyMixin:
    """Overrides ``make_actor``/``make_critic`` of an SB3 off-policy policy with entity-centric networks."""

    stochastic_actor = True
    quantile_critic = False

    def __init__(
        self,
        observation_space,
        action_space,
        lr_schedule,
        net: NetConfig | dict | None = None,
        **kwargs,
    ):
        self.net_config = _net_config(net)
        _check_space(observation_space, self.net_config)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def make_actor(self, features_extractor=None) -> EntityActor:
        actor = EntityActor(self.observation_space, self.action_space, self.net_config, self.stochastic_actor)
        return actor.to(self.device)

    def make_critic(self, features_extractor=None) -> EntityCritic:
        kw = self.critic_kwargs
        quantiles = kw["n_quantiles"] if self.quantile_critic else None
        critic = EntityCritic(self.observation_space, self.action_space, self.net_config, kw["n_critics"], quantiles)
        return critic.to(self.device)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(net=asdict(self.net_config))
        return data


def _check_space(observation_space: spaces.Space, net: NetConfig) -> None:
    keys = {"observation", "desired_goal"} | ({ENTITIES_KEY} if net.entity_dim else set())
    if not isinstance(observation_space, spaces.Dict) or not keys <= set(observation_space):
        raise ValueError(
            f"entity policies need an ecrl env's Dict observation space with {sorted(keys)}; got {observation_space}"
        )


class EntitySACPolicy(_EntityPolicyMixin, SACPolicy):
    """SAC policy with an entity-centric actor and batched twin critics. ``net``: a :class:`NetConfig`."""


class EntityTD3Policy(_EntityPolicyMixin, TD3Policy):
    """TD3 policy with an entity-centric deterministic actor and batched twin critics."""

    stochastic_actor = False


class EntityTQCPolicy(_EntityPolicyMixin, TQCPolicy):
    """TQC (sb3-contrib) policy with an entity-centric actor and a batched quantile-critic ensemble."""

    quantile_critic = True


ENTITY_POLICIES = {"sac": EntitySACPolicy, "td3": EntityTD3Policy, "tqc": EntityTQCPolicy}
