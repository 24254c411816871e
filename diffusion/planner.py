"""Receding-horizon planning with an entity denoiser, behind the library's policy API.

:class:`DiffusionPlanner` is a torch module that ``ecrl.load`` rebuilds from ``policy.json``
(registered builder ``diffusion_planner``), so a trained planner is used and evaluated
exactly like an RL policy: ``ecrl.load(path).act(obs)`` and ``ecrl-eval``. Every
``replan_every`` calls it samples a plan (DDIM, ``sampling_steps`` denoiser calls) from the current
observation and the goal, then executes the plan's actions one per call. ``reset()`` (called by
the evaluation runner at the start of every batch of episodes) forgets the plan and reseeds the
sampler, so evaluation is deterministic. To plan over only a few objects at a time (a planner trained
on few objects, with many on the table), wrap the loaded policy in :class:`ecrl.focus.Focus`
(``ecrl-eval --focus K``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import torch
from torch import nn

from ecrl.checkpoint import register_builder
from ecrl.diffusion.denoiser import DenoiserConfig, EntityDenoiser, denoiser_config
from ecrl.diffusion.noise import sample

__all__ = ["DiffusionPlanner"]


@register_builder("diffusion_planner")
class DiffusionPlanner(nn.Module):
    """Observation dict ``(B, N, D)`` tensors → action ``(B, A)`` in ``[-1, 1]``, re-planning every ``replan_every`` calls.

    Args:
        denoiser: the denoiser's config (a :class:`DenoiserConfig` or its dict form).
        sampling_steps: DDIM steps (denoiser calls) per plan.
        replan_every: actions executed from one plan before the next (1: re-plan every step);
            at most the plan's horizon.
        seed: seeds the sampler's noise at every :meth:`reset`.
        fixed_noise: start every plan from the same noise (seeded by ``seed``), so that the plan is
            a deterministic function of the observation. Off by default: a planner that plans to stand
            still then stands still for good (same state, same noise, same plan), and on push-3 fresh
            noise for every plan solved more episodes (``results/diffusion_push3``). With either, the
            sampler is reseeded at :meth:`reset`, so evaluation is deterministic.
        guidance: classifier-free guidance weight on the goal (1: none; see :func:`~ecrl.diffusion.sample`).
    """

    def __init__(
        self,
        denoiser: DenoiserConfig | Mapping[str, Any],
        sampling_steps: int = 5,
        replan_every: int = 1,
        seed: int = 0,
        fixed_noise: bool = False,
        guidance: float = 1.0,
    ) -> None:
        super().__init__()
        config = denoiser_config(denoiser)
        if not 1 <= replan_every <= config.horizon:
            raise ValueError(f"replan_every must be in [1, horizon={config.horizon}], got {replan_every}")
        if not 1 <= sampling_steps <= config.diffusion_steps:
            raise ValueError(f"sampling_steps must be in [1, {config.diffusion_steps}], got {sampling_steps}")
        self.denoiser = EntityDenoiser(config)
        self.sampling_steps, self.replan_every, self.seed = sampling_steps, replan_every, seed
        self.fixed_noise, self.guidance = fixed_noise, guidance
        self.reset()

    @property
    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this module (what ``policy.json`` stores)."""
        return {
            "denoiser": asdict(self.denoiser.config),
            "sampling_steps": self.sampling_steps,
            "replan_every": self.replan_every,
            "seed": self.seed,
            "fixed_noise": self.fixed_noise,
            "guidance": self.guidance,
        }

    def reset(self, *_: Any) -> None:
        """Forget the current plan and reseed the sampler (call at the start of episodes)."""
        self._actions: torch.Tensor | None = None
        self._step = 0
        self._generator = torch.Generator().manual_seed(self.seed)

    @torch.no_grad()
    def plan(self, obs: Mapping[str, torch.Tensor]):
        """A fresh :class:`~ecrl.diffusion.noise.Plan` for a batch of observations."""
        device = next(self.parameters()).device
        if self.fixed_noise:
            generator = torch.Generator(device).manual_seed(self.seed)
        elif self._generator.device != device:
            generator = torch.Generator(device).manual_seed(int(torch.randint(2**62, (1,), generator=self._generator)))
        else:
            generator = self._generator
        return sample(
            self.denoiser,
            obs["observation"],
            obs["desired_goal"],
            steps=self.sampling_steps,
            generator=generator,
            guidance=self.guidance,
            mask=obs.get("mask"),
        )

    @torch.no_grad()
    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The action to take now for each observation of the batch."""
        batch = obs["observation"].shape[0]
        stale = self._actions is None or self._actions.shape[0] != batch or self._step >= self.replan_every
        if stale:
            self._actions, self._step = self.plan(obs).actions, 0
        action = self._actions[:, self._step]
        self._step += 1
        return action
