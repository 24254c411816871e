"""The noise maths of an :class:`EntityDenoiser`: the DDPM schedule and loss, DDIM sampling with inpainting.

The noise schedule is part of the model's config (``diffusion_steps``, ``noise_schedule``): a
denoiser only makes sense with the noise levels it was trained on, so a checkpoint carries them.

- :func:`loss`: the denoising loss on a batch of demonstration windows (x₀-prediction, MSE on
  normalised states and actions; padded entities, invalid steps and the given step-0 states excluded).
- :func:`sample`: DDIM with a few steps (5–10), deterministic for ``eta = 0`` (given the initial
  noise); the current state, and optionally any other entries, are inpainted at every step and hold
  exactly in the returned plan.

The average of the weights to sample and save from is :class:`ecrl.diffusion.ema.EMA`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ecrl.diffusion.denoiser import (
    DenoiserConfig,
    EntityDenoiser,
    _check_bool,
    _check_shapes,
    goal_features,
    join_rows,
)
from ecrl.envs.layout import ENTITY_PRESENT, GOAL_PRESENT

__all__ = ["LossTerms", "NoiseSchedule", "Plan", "Window", "encode_window", "loss", "sample"]


class NoiseSchedule:
    """The DDPM forward process: ``x_t = √ᾱ_t x₀ + √(1 − ᾱ_t) ε`` for ``t`` in ``[0, steps)``.

    Args:
        steps: number of noise levels ``T_train``.
        kind: ``"cosine"`` (ᾱ follows a squared cosine, Nichol & Dhariwal 2021) or ``"linear"``
            (betas linear from 1e-4 to 0.02, rescaled by ``1000 / steps`` so that ``x_T`` is noise
            at any number of steps).
    """

    def __init__(self, steps: int = 100, kind: str = "cosine") -> None:
        if kind == "cosine":
            s = 0.008
            f = torch.cos((torch.arange(steps + 1, dtype=torch.float64) / steps + s) / (1 + s) * math.pi / 2) ** 2
            betas = (1 - f[1:] / f[:-1]).clamp(max=0.999)
        elif kind == "linear":
            scale = 1000 / steps
            betas = torch.linspace(scale * 1e-4, scale * 0.02, steps, dtype=torch.float64)
        else:
            raise ValueError(f"kind must be 'cosine' or 'linear', got {kind!r}")
        self.steps, self.kind = steps, kind
        self.betas = betas
        self.alphas_cumprod = torch.cumprod(1 - betas, dim=0)
        """``(steps,)`` float64 ᾱ_t."""

    @classmethod
    def of(cls, config: DenoiserConfig) -> NoiseSchedule:
        """The schedule a denoiser with this config is trained on."""
        return cls(config.diffusion_steps, config.noise_schedule)

    def alpha_bar(self, t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """ᾱ_t for ``t: (B,)``, shaped ``(B, 1, …)`` to broadcast against ``like: (B, …)``."""
        a = self.alphas_cumprod.to(like.device)[t.to(like.device)].to(like.dtype)
        return a.view(-1, *(1,) * (like.ndim - 1))

    def add_noise(self, x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``x_t`` from clean ``x0: (B, …)``, ``noise`` like it and steps ``t: (B,)``."""
        a = self.alpha_bar(t, x0)
        return a.sqrt() * x0 + (1 - a).sqrt() * noise

    def sampling_steps(self, n: int) -> list[int]:
        """``n`` noise levels from ``T − 1`` down, evenly spaced ("trailing": the first is pure noise)."""
        if not 1 <= n <= self.steps:
            raise ValueError(f"sampling steps must be in 1 … {self.steps}, got {n}")
        return [round(self.steps * k / n) - 1 for k in range(n, 0, -1)]


@dataclass
class Window:
    """A batch of demonstration windows in the denoiser's features (see :func:`encode_window`).

    Attributes:
        static: ``(B, N, STATIC_DIM)`` normalised static attributes.
        states: ``(B, H + 1, N, DYNAMIC_DIM)`` normalised dynamic states.
        actions: ``(B, H, A)`` in ``[-1, 1]``.
        goals: ``(B, M, GOAL_DIM)`` normalised goal rows.
        mask: ``(B, N)`` bool, True for real entities.
        goal_mask: ``(B, M)`` bool, True for real goals.
        valid: ``(B, H + 1)`` bool per step, False past the end of an episode; None: all valid.
    """

    static: torch.Tensor
    states: torch.Tensor
    actions: torch.Tensor
    goals: torch.Tensor
    mask: torch.Tensor
    goal_mask: torch.Tensor
    valid: torch.Tensor | None

    def to(self, device: torch.device | str) -> Window:
        """The same window on ``device``."""
        return Window(**{k: None if v is None else v.to(device) for k, v in vars(self).items()})


def encode_window(batch: Mapping[str, torch.Tensor], config: DenoiserConfig) -> Window:
    """Check and normalise a batch as the dataset delivers it.

    Args:
        batch: ``observation (B, H + 1, N, ENTITY_DIM)``, ``action (B, H, A)`` in ``[-1, 1]``,
            ``desired_goal (B, M, GOAL_DIM)``; optional ``mask (B, N)`` and ``goal_mask (B, M)`` bool
            (default: the rows' present flags at step 0), ``valid (B, H)`` bool, per action, as
            :meth:`ecrl.datasets.DemoDataset.windows` delivers it (default: all valid). Action ``k``
            is valid when it was taken in the episode, which makes state ``k + 1`` a real one; step 0
            is always real. Other keys are ignored.
        config: the denoiser's config (horizon, action width).
    """
    missing = {"observation", "action", "desired_goal"} - set(batch)
    if missing:
        raise ValueError(f"batch lacks {sorted(missing)}; got keys {sorted(batch)}")
    obs, action, goal = (torch.as_tensor(batch[k]) for k in ("observation", "action", "desired_goal"))
    if config.entity_dim and "mask" not in batch:
        raise ValueError("generic entity rows (entity_dim > 0) have no present flag: the batch needs a mask")
    specs = {
        "observation": (obs, ("B", config.horizon + 1, "N", config.row_dim)),
        "action": (action, ("B", config.horizon, config.action_dim)),
        "desired_goal": (goal, ("B", "M", config.goal_row_dim)),
    }
    mask = torch.as_tensor(batch["mask"]) if "mask" in batch else obs[:, 0, :, ENTITY_PRESENT] > 0.5
    goal_mask = torch.as_tensor(batch["goal_mask"]) if "goal_mask" in batch else _goal_mask(goal, config)
    valid = torch.as_tensor(batch["valid"]) if batch.get("valid") is not None else None
    specs |= {"mask": (mask, ("B", "N")), "goal_mask": (goal_mask, ("B", "M"))}
    if valid is not None:
        specs["valid"] = (valid, ("B", config.horizon))
    _check_shapes(**specs)
    _check_bool(mask=mask, goal_mask=goal_mask, **({} if valid is None else {"valid": valid}))
    if valid is not None:  # per step: step 0 is real, step k + 1 where action k is valid
        valid = torch.cat([valid.new_ones(valid.shape[0], 1), valid], dim=1)
    obs, action, goal = obs.float(), action.float(), goal.float()
    static, states = config.split(obs)
    return Window(static, states, action, _goals(goal, config), mask, goal_mask, valid)


def _goals(desired_goal: torch.Tensor, config: DenoiserConfig) -> torch.Tensor:
    """The denoiser's goal features: :func:`goal_features` of goal rows; generic rows as they come."""
    return desired_goal if config.goal_dim else goal_features(desired_goal)


def _goal_mask(desired_goal: torch.Tensor, config: DenoiserConfig) -> torch.Tensor:
    """The real goal rows: by their present flag; generic goal rows (``goal_dim > 0``) are all real."""
    if config.goal_dim:
        return torch.ones(desired_goal.shape[:2], dtype=torch.bool, device=desired_goal.device)
    return desired_goal[..., GOAL_PRESENT] > 0.5


class LossTerms(NamedTuple):
    """The training loss (``total``, to minimise) and its parts, each a scalar tensor."""

    total: torch.Tensor
    states: torch.Tensor
    actions: torch.Tensor


def _masked_mean(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return (x * weight).sum() / (weight.expand_as(x).sum()).clamp(min=1.0)


def loss(
    model: EntityDenoiser,
    batch: Mapping[str, torch.Tensor],
    generator: torch.Generator | None = None,
    action_weight: float = 1.0,
    given_last: bool = False,
    goal_dropout: float = 0.0,
) -> LossTerms:
    """The DDPM loss of an x₀-predicting denoiser on a batch of demonstration windows.

    A noise level is drawn per window, the plan noised to it, the step-0 states set back to their
    clean values (the inpainting the sampler does), and the model's x₀ compared with the clean plan:
    MSE over real entities at valid steps ``1 … H`` (step 0 is given) plus ``action_weight`` × MSE
    over valid actions.

    Args:
        model: the denoiser.
        batch: demonstration windows, see :func:`encode_window`.
        generator: draws the noise levels and the noise; it must live on the model's device.
        action_weight: weight of the action term.
        goal_dropout: fraction of windows trained without their goal (the null goal token), which
            lets :func:`sample` guide plans towards the goal (classifier-free guidance).
        given_last: the step-``H`` states are given too (a segment between the current state and a
            subgoal, see :mod:`ecrl.diffusion.hierarchical`): they are set back to their clean values
            like step 0 and left out of the state term, which then covers steps ``1 … H − 1``. Sample
            such a model with ``sample(..., known_states=…, known_mask=…, clean_known=True)``.
    """
    device = next(model.parameters()).device
    w = encode_window(batch, model.config).to(device)
    schedule = NoiseSchedule.of(model.config)
    batch_size = w.states.shape[0]
    t = torch.randint(0, schedule.steps, (batch_size,), device=device, generator=generator)
    noisy_states = schedule.add_noise(
        w.states, torch.randn(w.states.shape, device=device, generator=generator, dtype=w.states.dtype), t
    )
    noisy_states[:, 0] = w.states[:, 0]
    if given_last:
        noisy_states[:, -1] = w.states[:, -1]
    noisy_actions = schedule.add_noise(
        w.actions, torch.randn(w.actions.shape, device=device, generator=generator, dtype=w.actions.dtype), t
    )
    drop = None
    if goal_dropout > 0:
        drop = torch.rand(batch_size, device=device, generator=generator) < goal_dropout
    states, actions = model(noisy_states, noisy_actions, t, w.static, w.goals, w.mask, w.goal_mask, w.valid, drop)
    valid = torch.ones_like(w.states[..., 0, 0], dtype=torch.bool) if w.valid is None else w.valid
    free = slice(1, -1 if given_last else None)  # the steps the model has to fill in
    state_weight = (valid[:, free, None] & w.mask[:, None])[..., None].to(states.dtype)
    state_loss = _masked_mean((states[:, free] - w.states[:, free]).square(), state_weight)
    action_loss = _masked_mean((actions - w.actions).square(), valid[:, 1:, None].to(actions.dtype))
    return LossTerms(state_loss + action_weight * action_loss, state_loss.detach(), action_loss.detach())


@dataclass
class Plan:
    """A sampled plan.

    Attributes:
        actions: ``(B, H, A)`` in ``[-1, 1]``; ``actions[:, 0]`` is the one to take now.
        states: ``(B, H + 1, N, DYNAMIC_DIM)`` normalised dynamic states (step 0 = the observation).
        rows: ``(B, H + 1, N, ENTITY_DIM)`` the same states as entity rows in world units (for generic
            rows, ``entity_dim > 0``: the normalised rows themselves, as ``states``).
    """

    actions: torch.Tensor
    states: torch.Tensor
    rows: torch.Tensor


@torch.no_grad()
def sample(
    model: EntityDenoiser,
    observation: torch.Tensor,
    desired_goal: torch.Tensor,
    *,
    steps: int = 10,
    eta: float = 0.0,
    generator: torch.Generator | None = None,
    known_states: torch.Tensor | None = None,
    known_mask: torch.Tensor | None = None,
    clean_known: bool = False,
    guidance: float = 1.0,
    mask: torch.Tensor | None = None,
) -> Plan:
    """Sample plans with DDIM from the current observation and the goal.

    At every denoising step the current state (step 0, every entity) is set to the observation, as in
    training; entries given by ``known_states``/``known_mask`` (e.g. goal positions at the last step,
    matched to their objects by the caller) are set to their forward-noised value at that step's
    noise level (with one fixed noise draw, so ``eta = 0`` stays deterministic; with ``clean_known``,
    to their clean values), and padded entities to zero. All of them hold exactly in the returned
    plan. Predicted actions are clamped to ``[-1, 1]``.

    Args:
        model: the denoiser (put it in eval mode; the EMA copy is usually the one to sample from).
        observation: ``(B, N, ENTITY_DIM)`` current entity rows; padded rows (present 0) are masked.
        desired_goal: ``(B, M, GOAL_DIM)`` goal rows; padded rows are masked (``(B, M, goal_dim)``
            generic goal rows, all real, for a denoiser with ``goal_dim > 0``).
        steps: DDIM steps (model calls), at most the model's ``diffusion_steps``.
        eta: 0 for deterministic DDIM, 1 for DDPM-like ancestral noise.
        generator: draws the initial noise (and the extra noise when ``eta > 0``).
        known_states: ``(B, H + 1, N, DYNAMIC_DIM)`` normalised values of extra inpainted entries.
        known_mask: bool, broadcastable to ``known_states``: which entries of it are given.
        guidance: classifier-free guidance on the goal, for a model trained with ``goal_dropout``:
            the prediction is ``uncond + guidance × (cond − uncond)`` (1: the plain conditional
            model, one call per step; otherwise conditional and goal-free predictions in one batch).
        clean_known: set the given entries to their clean values at every step, as step 0 is, rather
            than forward-noised ones: for a model trained with them clean (``loss(..., given_last=True)``).
        mask: ``(B, N)`` bool, the real entities (default: the rows' present flags; required for a
            denoiser of generic rows, ``entity_dim > 0``, whose ``observation`` is ``(B, N, entity_dim)``).

    Returns:
        The :class:`Plan`.
    """
    config = model.config
    steps_total, horizon = config.horizon + 1, config.horizon
    sizes = _check_shapes(
        observation=(observation, ("B", "N", config.row_dim)),
        desired_goal=(desired_goal, ("B", "M", config.goal_row_dim)),
    )
    batch, n = sizes["B"], sizes["N"]
    state_shape = (batch, steps_total, n, config.dynamic_dim)
    if mask is None and config.entity_dim:
        raise ValueError("generic entity rows (entity_dim > 0) have no present flag: pass mask")
    if (known_states is None) != (known_mask is None):
        raise ValueError("known_states and known_mask go together: give both or neither")
    device = next(model.parameters()).device
    observation, desired_goal = observation.to(device, torch.float32), desired_goal.to(device, torch.float32)
    static, state0 = config.split(observation[:, None])
    goals = _goals(desired_goal, config)
    mask = observation[..., ENTITY_PRESENT] > 0.5 if mask is None else mask.to(device)
    goal_mask = _goal_mask(desired_goal, config)

    given, clean = _known_entries(known_states, known_mask, state_shape, device)
    padded = ~mask[:, None, :, None]
    schedule = NoiseSchedule.of(config)
    timesteps = schedule.sampling_steps(steps)

    def inpaint(x: torch.Tensor, t: int | None) -> torch.Tensor:
        """Set the given entries of ``x`` to their value at noise level ``t`` (None: clean)."""
        if known_states is not None:
            level = None if t is None or clean_known else torch.full((batch,), t, device=device)
            x = torch.where(given, clean if level is None else schedule.add_noise(clean, known_noise, level), x)
        x[:, 0] = state0[:, 0]
        return x.masked_fill(padded, 0.0)

    known_noise = torch.randn(state_shape, device=device, generator=generator)
    x_states = torch.randn(state_shape, device=device, generator=generator)
    x_actions = torch.randn((batch, horizon, config.action_dim), device=device, generator=generator)
    alphas = schedule.alphas_cumprod.tolist()
    for i, t in enumerate(timesteps):
        x_states = inpaint(x_states, t)
        pred_states, pred_actions = _guided(model, guidance, x_states, x_actions, t, static, goals, mask, goal_mask)
        pred_actions = pred_actions.clamp(-1.0, 1.0)
        if i + 1 < len(timesteps):
            levels = alphas[t], alphas[timesteps[i + 1]]
            x_states = _ddim_step(x_states, pred_states, *levels, eta, generator)
            x_actions = _ddim_step(x_actions, pred_actions, *levels, eta, generator)
    states = inpaint(pred_states, None)
    rows = states if config.entity_dim else join_rows(observation, states)
    return Plan(actions=pred_actions, states=states, rows=rows)


def _known_entries(
    known_states: torch.Tensor | None,
    known_mask: torch.Tensor | None,
    state_shape: tuple[int, ...],
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``given`` (bool) and ``clean`` values, both ``state_shape``, of the inpainted entries of :func:`sample`."""
    given = torch.zeros(state_shape, dtype=torch.bool, device=device)
    clean = torch.zeros(state_shape, device=device)
    if known_states is not None:
        _check_shapes(known_states=(known_states, state_shape))
        try:
            given = torch.broadcast_to(known_mask.to(device), state_shape).clone()
        except RuntimeError as e:
            raise ValueError(f"known_mask: shape {tuple(known_mask.shape)} does not broadcast to {state_shape}") from e
        _check_bool(known_mask=given)
        clean = torch.where(given, known_states.to(device, torch.float32), clean)
    given[:, 0] = False  # step 0 is the observation, inpainted clean (as in training)
    return given, clean


def _guided(
    model: EntityDenoiser, guidance: float, x_states: torch.Tensor, x_actions: torch.Tensor, t: int, *context
) -> tuple[torch.Tensor, torch.Tensor]:
    """The denoiser's prediction with classifier-free guidance on the goal (see :func:`sample`).

    ``context`` is ``(static, goals, mask, goal_mask)``. With ``guidance == 1`` one conditional call;
    otherwise conditional and goal-free predictions in one batch, mixed ``uncond + guidance × (cond − uncond)``.
    """
    if guidance == 1.0:
        return model(x_states, x_actions, t, *context)
    two = lambda x: torch.cat([x, x])  # noqa: E731
    batch = x_states.shape[0]
    drop = torch.arange(2 * batch, device=x_states.device) >= batch
    states, actions = model(two(x_states), two(x_actions), t, *(two(c) for c in context), None, drop)
    (cond_s, free_s), (cond_a, free_a) = states.chunk(2), actions.chunk(2)
    return free_s + guidance * (cond_s - free_s), free_a + guidance * (cond_a - free_a)


def _ddim_step(
    x: torch.Tensor, x0: torch.Tensor, a: float, a_next: float, eta: float, generator: torch.Generator | None
) -> torch.Tensor:
    """One DDIM update from noise level ``ᾱ = a`` to ``a_next`` given the predicted clean ``x0``."""
    eps = (x - math.sqrt(a) * x0) / math.sqrt(1 - a)
    sigma = eta * math.sqrt((1 - a_next) / (1 - a) * (1 - a / a_next))
    out = math.sqrt(a_next) * x0 + math.sqrt(max(1 - a_next - sigma**2, 0.0)) * eps
    if sigma > 0:
        out = out + sigma * torch.randn(x.shape, device=x.device, generator=generator)
    return out
