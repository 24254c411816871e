"""Receding-horizon planning with an entity denoiser, behind the library's policy API.

:class:`DiffusionPlanner` is a torch module that ``ecrl.load`` rebuilds from ``policy.json``
(builder ``ecrl.diffusion.planner:DiffusionPlanner``), so a trained planner is used and evaluated
exactly like an RL policy: ``ecrl.load(path).act(obs)`` and ``ecrl-eval``. Every
``replan_every`` calls it samples a plan (DDIM, ``sampling_steps`` denoiser calls) from the current
observation and the goal, then executes the plan's actions one per call. ``reset()`` (called by
the evaluation runner at the start of every batch of episodes) forgets the plan and reseeds the
sampler, so evaluation is deterministic. With ``focus=k`` every plan sees only the agent and ``k``
objects (:func:`ecrl.entities.focus_rows`), so a planner trained on few objects plans in familiar scenes among many.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import torch
from torch import nn

from ecrl.diffusion.denoiser import DenoiserConfig, EntityDenoiser
from ecrl.diffusion.schedule import sample
from ecrl.entities import check_focus, focus_rows
from ecrl.retired import drop_retired

__all__ = ["DiffusionPlanner"]


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
        focus: plan over at most this many objects (0: all of them); see :func:`ecrl.entities.focus_rows`. A
            planner trained on N objects then plans, with more objects on the table, over scenes
            like those it was trained on.
        placed_within: metres from its target within which ``focus`` counts an object as placed.
    """

    def __init__(
        self,
        denoiser: DenoiserConfig | Mapping[str, Any],
        sampling_steps: int = 5,
        replan_every: int = 1,
        seed: int = 0,
        fixed_noise: bool = False,
        guidance: float = 1.0,
        focus: int = 0,
        placed_within: float = 0.04,
    ) -> None:
        super().__init__()
        config = (
            denoiser
            if isinstance(denoiser, DenoiserConfig)
            else DenoiserConfig(**drop_retired(DenoiserConfig, denoiser))
        )
        if not 1 <= replan_every <= config.horizon:
            raise ValueError(f"replan_every must be in [1, horizon={config.horizon}], got {replan_every}")
        if not 1 <= sampling_steps <= config.diffusion_steps:
            raise ValueError(f"sampling_steps must be in [1, {config.diffusion_steps}], got {sampling_steps}")
        check_focus(focus, placed_within)
        self.denoiser = EntityDenoiser(config)
        self.sampling_steps, self.replan_every, self.seed = sampling_steps, replan_every, seed
        self.fixed_noise, self.guidance = fixed_noise, guidance
        self.focus, self.placed_within = focus, placed_within
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
            "focus": self.focus,
            "placed_within": self.placed_within,
        }

    def reset(self, *_: Any) -> None:
        """Forget the current plan and reseed the sampler (call at the start of episodes)."""
        self._actions: torch.Tensor | None = None
        self._step = 0
        self._generator = torch.Generator().manual_seed(self.seed)

    @torch.no_grad()
    def plan(self, obs: Mapping[str, torch.Tensor]):
        """A fresh :class:`~ecrl.diffusion.schedule.Plan` for a batch of observations."""
        device = next(self.parameters()).device
        if self.fixed_noise:
            generator = torch.Generator(device).manual_seed(self.seed)
        elif self._generator.device != device:
            generator = torch.Generator(device).manual_seed(int(torch.randint(2**62, (1,), generator=self._generator)))
        else:
            generator = self._generator
        observation, desired_goal, mask = obs["observation"], obs["desired_goal"], obs.get("mask")
        if self.focus:
            if mask is not None or self.denoiser.config.entity_dim:
                raise ValueError("focus reads positions from ecrl entity rows; it does not apply to generic rows")
            observation, desired_goal, _ = focus_rows(observation, desired_goal, self.focus, self.placed_within)
        return sample(
            self.denoiser,
            observation,
            desired_goal,
            steps=self.sampling_steps,
            generator=generator,
            guidance=self.guidance,
            mask=mask,
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
