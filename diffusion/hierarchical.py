"""Hierarchical (jumpy) diffusion planning: sparse subgoals every ``K`` steps over dense segments.

After Hierarchical Diffuser (Chen et al., ICLR 2024), written here from the idea, with two
:class:`~ecrl.diffusion.denoiser.EntityDenoiser` s (both entity-centric, so both run on any N):

- the **high level** plans the entity states at steps ``0, K, 2K, …, K·Hh`` (a window of
  ``K·Hh`` env steps seen with stride ``K``, :func:`subgoal_windows`). Its action tokens carry the
  *mean action over each stride*: a cheap auxiliary target that says which way the agent heads
  between two subgoals; the planner never executes them.
- the **low level** plans a dense window of ``K`` steps whose *last* state (step ``K``, every
  entity) is given, the subgoal (:func:`segment_windows`). It is trained with the step-``K``
  states clean and out of the loss (``loss(..., given_last=True)``) and sampled with them
  inpainted clean (``sample(..., clean_known=True)``).

Both levels get the current state by inpainting at step 0 and the goal as tokens, like the flat
planner. One high-level plan spans ``K·Hh`` env steps for the price of ``Hh + 1`` states per entity,
so a long task is seen whole without a long (quadratically costly) dense window.

Training windows run past the end of a *successful* episode into its final state held still with
zero actions (the goal is absorbing): a subgoal window spans a large part of an episode, and
masking everything past the end (what the flat planner's loss does) would drop most of the
supervision near the goal, where a plan should say "stay". Windows of unsuccessful episodes keep
the dataset's validity mask.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from einops import rearrange
from torch import nn

from ecrl.checkpoint import register_builder
from ecrl.diffusion.denoiser import DenoiserConfig, EntityDenoiser, denoiser_config
from ecrl.diffusion.noise import Plan, sample

__all__ = ["HierarchicalPlanner", "PlanningStats", "segment_windows", "subgoal_windows"]


def _hold_successful_ends(windows: dict[str, np.ndarray], success: np.ndarray) -> dict[str, np.ndarray]:
    """Mark every step valid in windows of successful episodes (their final state is absorbing)."""
    held = np.asarray(success, bool)[windows["episode"]]
    return dict(windows, valid=windows["valid"] | held[:, None])


def subgoal_windows(windows: Mapping[str, np.ndarray], every: int, success: np.ndarray) -> dict[str, np.ndarray]:
    """High-level training windows from dense ones: every ``every``-th state, mean action per stride.

    Args:
        windows: dense windows of horizon ``K·Hh`` as :meth:`ecrl.datasets.DemoDataset.windows`
            gives them (``observation (B, K·Hh + 1, N, D)``, ``action (B, K·Hh, A)``, ``valid
            (B, K·Hh)``, ``episode (B,)``, goals and masks).
        every: ``K``, env steps between subgoals.
        success: ``(E,)`` bool per episode of the dataset: their windows hold the final state.

    Returns:
        Windows of horizon ``Hh``: ``observation (B, Hh + 1, N, D)``, ``action (B, Hh, A)`` (the mean
        of each stride's ``K`` actions; zero past an episode's end), ``valid (B, Hh)`` (state
        ``K·(j + 1)`` is real), and ``desired_goal``, ``mask``, ``goal_mask`` as given.
    """
    steps = windows["action"].shape[1]
    if every < 1 or steps % every:
        raise ValueError(f"dense windows of {steps} steps do not split into strides of {every}")
    dense = _hold_successful_ends(dict(windows), success)
    return {
        "observation": dense["observation"][:, ::every],
        "action": rearrange(dense["action"], "b (h k) a -> b h k a", k=every).mean(axis=2),
        "valid": dense["valid"][:, every - 1 :: every],
        **{k: dense[k] for k in ("desired_goal", "mask", "goal_mask")},
    }


def segment_windows(windows: Mapping[str, np.ndarray], success: np.ndarray) -> dict[str, np.ndarray]:
    """Low-level training windows: dense windows of horizon ``K``, successful episodes' ends held."""
    return _hold_successful_ends(dict(windows), success)


@dataclass
class PlanningStats:
    """What a :class:`HierarchicalPlanner` spent since construction (or :meth:`HierarchicalPlanner.reset_stats`).

    Attributes:
        actions: actions returned (env steps, summed over the batch's rows).
        high_plans, low_plans: plans sampled (each for the whole batch).
        high_calls, low_calls: denoiser calls (plans × DDIM steps).
        high_s, low_s: wall time spent sampling (synchronised on CUDA).
    """

    actions: int = 0
    high_plans: int = 0
    low_plans: int = 0
    high_calls: int = 0
    low_calls: int = 0
    high_s: float = 0.0
    low_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """The counts plus ``planning_s`` and ``denoiser_calls`` in all."""
        return {
            **asdict(self),
            "planning_s": self.high_s + self.low_s,
            "denoiser_calls": self.high_calls + self.low_calls,
        }


@register_builder("hierarchical_planner")
class HierarchicalPlanner(nn.Module):
    """Observation dict ``(B, N, D)`` tensors → action ``(B, A)`` in ``[-1, 1]``: subgoals over dense segments.

    Every ``high_replan_every`` calls the high level samples subgoals (entity states ``K``, ``2K``, …
    env steps ahead). Every ``replan_every`` calls, and whenever the subgoals change, the low level
    samples a ``K``-step segment from the current observation to the subgoal state ``K`` steps
    ahead, whose actions are then executed one per call. The subgoal *slides*: ``r`` steps after the
    high-level plan it is the planned state at time ``r + K``, linearly interpolated between the two
    nearest subgoals, so the low level always sees its target ``K`` steps away, as in training. With
    ``replan_every = high_replan_every = K`` (the default for the latter) every segment runs from
    one subgoal to the next and nothing is interpolated.

    ``reset()`` forgets the plans and reseeds the sampler; :attr:`stats` counts plans, denoiser
    calls and planning time.

    Args:
        high: config of the subgoal denoiser (horizon ``Hh``: subgoals per plan).
        low: config of the segment denoiser (horizon ``K``: env steps between subgoals).
        high_sampling_steps, low_sampling_steps: DDIM steps (denoiser calls) per plan of each level.
        replan_every: actions executed from one segment before the next, in ``1 … K``.
        high_replan_every: calls between subgoal plans (default ``K``), at most ``K·(Hh − 1) + 1``
            (the sliding subgoal must stay inside the plan).
        seed: seeds the sampler's noise at every :meth:`reset`.
        fixed_noise: start every plan of a level from the same noise (seeded by ``seed``), so each
            level's plan is a deterministic function of the observation. Off by default, as for the
            flat planner (see :class:`~ecrl.diffusion.DiffusionPlanner`).
    """

    def __init__(
        self,
        high: DenoiserConfig | Mapping[str, Any],
        low: DenoiserConfig | Mapping[str, Any],
        high_sampling_steps: int = 5,
        low_sampling_steps: int = 5,
        replan_every: int = 1,
        high_replan_every: int | None = None,
        seed: int = 0,
        fixed_noise: bool = False,
    ) -> None:
        super().__init__()
        high, low = denoiser_config(high), denoiser_config(low)
        k, hh = low.horizon, high.horizon
        high_replan_every = k if high_replan_every is None else high_replan_every
        if high.action_dim != low.action_dim:
            raise ValueError(f"the levels' action widths differ: high {high.action_dim}, low {low.action_dim}")
        if not 1 <= replan_every <= k:
            raise ValueError(f"replan_every must be in [1, K={k}] (the low level's horizon), got {replan_every}")
        if not 1 <= high_replan_every <= k * (hh - 1) + 1:
            raise ValueError(
                f"high_replan_every must be in [1, K·(Hh − 1) + 1 = {k * (hh - 1) + 1}] for K={k}, Hh={hh}, "
                f"got {high_replan_every}"
            )
        for name, steps, config in (("high", high_sampling_steps, high), ("low", low_sampling_steps, low)):
            if not 1 <= steps <= config.diffusion_steps:
                raise ValueError(f"{name}_sampling_steps must be in [1, {config.diffusion_steps}], got {steps}")
        self.high, self.low = EntityDenoiser(high), EntityDenoiser(low)
        self.high_sampling_steps, self.low_sampling_steps = high_sampling_steps, low_sampling_steps
        self.replan_every, self.high_replan_every, self.seed = replan_every, high_replan_every, seed
        self.fixed_noise = fixed_noise
        self.stats = PlanningStats()
        self.reset()

    @property
    def subgoal_every(self) -> int:
        """``K``: env steps between subgoals."""
        return self.low.config.horizon

    @property
    def action_dim(self) -> int:
        return self.low.config.action_dim

    @property
    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this module (what ``policy.json`` stores)."""
        return {
            "high": asdict(self.high.config),
            "low": asdict(self.low.config),
            "high_sampling_steps": self.high_sampling_steps,
            "low_sampling_steps": self.low_sampling_steps,
            "replan_every": self.replan_every,
            "high_replan_every": self.high_replan_every,
            "seed": self.seed,
            "fixed_noise": self.fixed_noise,
        }

    def reset(self, *_: Any) -> None:
        """Forget the current plans and reseed the sampler (call at the start of episodes)."""
        self._subgoals: torch.Tensor | None = None  # (B, Hh + 1, N, DYNAMIC_DIM) of the last high plan
        self._actions: torch.Tensor | None = None  # (B, K, A) of the last segment
        self._since_high = self._since_low = 0
        self._generator = torch.Generator().manual_seed(self.seed)

    def reset_stats(self) -> None:
        """Start counting :attr:`stats` afresh."""
        self.stats = PlanningStats()

    def _device_generator(self, device: torch.device, level: int) -> torch.Generator:
        if self.fixed_noise:
            return torch.Generator(device).manual_seed(self.seed + level)
        if self._generator.device == device:
            return self._generator
        return torch.Generator(device).manual_seed(int(torch.randint(2**62, (1,), generator=self._generator)))

    def _timed(self, fn, device: torch.device) -> tuple[Plan, float]:
        start = time.perf_counter()
        plan = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return plan, time.perf_counter() - start

    @torch.no_grad()
    def plan_subgoals(self, obs: Mapping[str, torch.Tensor]) -> Plan:
        """A high-level :class:`~ecrl.diffusion.noise.Plan`: states at steps ``0, K, …, K·Hh`` (step 0 = now)."""
        device = next(self.parameters()).device
        generator = self._device_generator(device, 0)
        plan, wall = self._timed(
            lambda: sample(
                self.high, obs["observation"], obs["desired_goal"], steps=self.high_sampling_steps, generator=generator
            ),
            device,
        )
        self.stats.high_plans += 1
        self.stats.high_calls += self.high_sampling_steps
        self.stats.high_s += wall
        return plan

    @torch.no_grad()
    def plan_segment(self, obs: Mapping[str, torch.Tensor], subgoal: torch.Tensor) -> Plan:
        """A low-level plan of ``K`` steps from now whose step-``K`` states are exactly ``subgoal``.

        Args:
            obs: ``observation (B, N, ENTITY_DIM)`` and ``desired_goal (B, M, GOAL_DIM)``.
            subgoal: ``(B, N, DYNAMIC_DIM)`` normalised dynamic states of every entity (padded
                entities are ignored), e.g. a high-level plan's ``states[:, 1]``.
        """
        observation = obs["observation"]
        k = self.subgoal_every
        device = next(self.parameters()).device
        batch, n = observation.shape[:2]
        known = subgoal.new_zeros(batch, k + 1, n, subgoal.shape[-1])
        known[:, k] = subgoal
        known_mask = torch.zeros(1, k + 1, 1, 1, dtype=torch.bool)
        known_mask[:, k] = True
        generator = self._device_generator(device, 1)
        plan, wall = self._timed(
            lambda: sample(
                self.low,
                observation,
                obs["desired_goal"],
                steps=self.low_sampling_steps,
                generator=generator,
                known_states=known,
                known_mask=known_mask,
                clean_known=True,
            ),
            device,
        )
        self.stats.low_plans += 1
        self.stats.low_calls += self.low_sampling_steps
        self.stats.low_s += wall
        return plan

    def subgoal_at(self, subgoals: torch.Tensor, steps_ahead: int) -> torch.Tensor:
        """The planned states ``steps_ahead`` env steps after a high-level plan, ``(B, N, DYNAMIC_DIM)``.

        Linear interpolation between the subgoals around it (exact at multiples of ``K``).

        Args:
            subgoals: ``(B, Hh + 1, N, DYNAMIC_DIM)`` a high-level plan's states.
            steps_ahead: in ``0 … K·Hh``.
        """
        last = subgoals.shape[1] - 1
        if not 0 <= steps_ahead <= self.subgoal_every * last:
            raise ValueError(f"steps_ahead must be in [0, {self.subgoal_every * last}], got {steps_ahead}")
        j, rest = divmod(steps_ahead, self.subgoal_every)
        if rest == 0:
            return subgoals[:, j]
        w = rest / self.subgoal_every
        return torch.lerp(subgoals[:, j], subgoals[:, j + 1], w)

    @torch.no_grad()
    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The action to take now for each observation of the batch."""
        batch = obs["observation"].shape[0]
        if self._subgoals is None or self._subgoals.shape[0] != batch or self._since_high >= self.high_replan_every:
            self._subgoals, self._since_high, self._actions = self.plan_subgoals(obs).states, 0, None
        if self._actions is None or self._since_low >= self.replan_every:
            subgoal = self.subgoal_at(self._subgoals, self._since_high + self.subgoal_every)
            self._actions, self._since_low = self.plan_segment(obs, subgoal).actions, 0
        action = self._actions[:, self._since_low]
        self._since_low += 1
        self._since_high += 1
        self.stats.actions += batch
        return action
