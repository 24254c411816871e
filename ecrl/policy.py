"""The policy API: ``ecrl.load(path).act(obs)`` for any ``ecrl`` env and any number of objects.

A saved policy is a checkpoint of :mod:`ecrl.checkpoint` (loaded with no pickle): a directory with

- ``policy.safetensors``: the weights of the torch module that maps an observation to an action;
- ``policy.json``: ``{"format": "ecrl.policy", "version": 2, "builder": "<registered name>",
  "kwargs": {...}, "action_low": [...], "action_high": [...], "meta": {...}}``. ``builder`` is the
  name of a registered model builder (``entity_actor``, ``diffusion_planner``, …; see
  :data:`ecrl.checkpoint.BUILDER_MODULES`) that rebuilds the module from ``kwargs``; that is how
  this core module loads models defined in higher layers (``ecrl.policies``, ``ecrl.diffusion``)
  without importing them. Version 1 named the builder by import path
  (:data:`ecrl.checkpoint.LEGACY_BUILDERS`); such checkpoints still load.

The module takes an observation dict of float32 tensors ``(B, N, D)`` and returns actions in
``[-1, 1]``, which :meth:`Policy.act` rescales to the env's action bounds.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ecrl import checkpoint
from ecrl.checkpoint import CheckpointError, CheckpointFormat, legacy_builder

__all__ = ["CONFIG", "POLICY", "WEIGHTS", "CheckpointError", "Policy", "load"]

POLICY = CheckpointFormat(
    "ecrl.policy", 2, "policy", "an ecrl policy", fields=("action_low", "action_high"), legacy={1: legacy_builder}
)
"""Policy checkpoints: ``policy.json`` + ``policy.safetensors``."""
WEIGHTS, CONFIG = POLICY.weights, POLICY.config


class Policy:
    """A trained policy: ``act(obs)`` → action(s) for one observation dict or a batch.

    Args:
        module: maps an observation dict of ``(B, N, D)`` tensors to actions ``(B, A)`` in ``[-1, 1]``.
        action_low, action_high: the env's action bounds that ``[-1, 1]`` is rescaled to.
        meta: free-form description (architecture, algorithm, training task, steps).
        builder, kwargs: how to rebuild ``module``: a registered builder's name and its arguments
            (see the module docstring); needed by :meth:`save` and :meth:`with_options`.

    Raises:
        CheckpointError: ``builder`` is not a registered builder's name.
    """

    def __init__(
        self,
        module: nn.Module,
        action_low: np.ndarray,
        action_high: np.ndarray,
        meta: dict[str, Any] | None = None,
        builder: str | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.module = module.eval()
        self.action_low = np.asarray(action_low, dtype=np.float32)
        self.action_high = np.asarray(action_high, dtype=np.float32)
        self.meta = dict(meta or {})
        if builder is not None:
            checkpoint.builder(builder)  # fail here, not when saving
        self.builder, self.kwargs = builder, dict(kwargs or {})
        self.device = next(module.parameters()).device

    def __repr__(self) -> str:
        return f"Policy({self.meta.get('arch', type(self.module).__name__)}, builder={self.builder!r})"

    @torch.no_grad()
    def act(self, obs: Mapping[str, Any], deterministic: bool = True) -> np.ndarray:
        """Action ``(A,)`` for one observation (rows ``(N, D)``) or ``(B, A)`` for a batch (``(B, N, D)``).

        ``obs`` is an ``ecrl`` env's observation dict (any ``n_max``); entity-centric models read
        ``observation`` and ``desired_goal`` only, planners from pixels ``pixels`` (uint8 frames) too.

        Raises:
            ValueError: a key is missing, has the wrong shape, or holds NaN or inf.
        """
        if not isinstance(obs, Mapping):
            raise TypeError(f"act takes an observation dict, got {type(obs).__name__}")
        missing = {"observation", "desired_goal"} - set(obs)
        if missing:
            raise ValueError(f"observation dict lacks {sorted(missing)}; got keys {sorted(obs)}")
        tensors = {}
        for key in ("observation", "achieved_goal", "desired_goal"):
            if key not in obs:
                continue
            with np.errstate(over="ignore"):  # a value beyond float32's range becomes inf, refused below
                rows = np.asarray(obs[key], dtype=np.float32)
            if rows.ndim not in (2, 3):
                raise ValueError(f"obs[{key!r}]: expected (N, D) or (B, N, D), got shape {rows.shape}")
            bad = ~np.isfinite(rows)
            if bad.any():  # a model would turn it into NaN actions without a word
                raise ValueError(
                    f"obs[{key!r}] holds {int(bad.sum())} value(s) that are NaN, inf or beyond float32's range "
                    f"(the first at index {tuple(int(i) for i in np.argwhere(bad)[0])}); expected finite numbers"
                )
            tensors[key] = torch.as_tensor(rows, device=self.device)
        single = tensors["observation"].ndim == 2
        if single != (tensors["desired_goal"].ndim == 2):
            raise ValueError(
                f"observation {tuple(tensors['observation'].shape)} and desired_goal "
                f"{tuple(tensors['desired_goal'].shape)}: one is batched and the other is not"
            )
        for key in ("pixels", "goal_pixels"):  # camera frames (and goal images), for policies that plan from pixels
            if key not in obs:  # (see ecrl.diffusion.pixels)
                continue
            pixels = torch.as_tensor(np.asarray(obs[key]), device=self.device)
            if pixels.ndim != (4 if single else 5):
                raise ValueError(
                    f"obs[{key!r}]: expected (V, P, P, 3) frames with unbatched rows or (B, V, P, P, 3) with "
                    f"batched ones, got shape {tuple(pixels.shape)}"
                )
            tensors[key] = pixels
        if single:
            tensors = {k: v[None] for k, v in tensors.items()}
        elif len({t.shape[0] for t in tensors.values()}) > 1:
            raise ValueError(f"batch sizes differ between keys: { {k: tuple(t.shape) for k, t in tensors.items()} }")
        action = self._forward(tensors, deterministic).float().cpu().numpy()
        action = self.action_low + (np.clip(action, -1, 1) + 1) * 0.5 * (self.action_high - self.action_low)
        return action[0] if single else action

    def reset(self, *_: Any) -> None:
        """Start new episodes: a stateful module (a receding-horizon planner) forgets its plan.

        The evaluation runner calls it as ``reset(envs, seeds)``; the arguments are not needed here.
        """
        reset = getattr(self.module, "reset", None)
        if reset is not None:
            reset()

    def _forward(self, obs: dict[str, torch.Tensor], deterministic: bool) -> torch.Tensor:
        if deterministic:
            return self.module(obs)
        sample = getattr(self.module, "sample", None)
        if sample is None:
            raise ValueError(f"{self!r} is deterministic; act(..., deterministic=False) needs a stochastic policy")
        return sample(obs)

    @property
    def options(self) -> dict[str, bool | int | float | str]:
        """The settings :meth:`with_options` can change, with their current values."""
        if self.builder is None:
            raise ValueError("this policy has no builder, so its settings cannot be changed")
        plain = bool | int | float | str
        defaults = {
            name: p.default
            for name, p in inspect.signature(checkpoint.builder(self.builder)).parameters.items()
            if isinstance(p.default, plain)
        }
        return defaults | {k: v for k, v in self.kwargs.items() if isinstance(v, plain)}

    def with_options(self, **options: Any) -> Policy:
        """A copy of this policy with some of its builder's settings changed (same weights).

        Only settings whose values are plain numbers, booleans or strings can change (a
        receding-horizon planner's ``sampling_steps``, ``fixed_noise``, ``guidance``, …): those in
        :attr:`kwargs` and the builder's other keyword arguments with such defaults (settings added
        after a checkpoint was saved). Sizes and nested model configs are fixed by the weights. The
        builder validates the new values; :meth:`save` writes them.
        """
        current = self.options
        unknown = sorted(set(options) - set(current))
        if unknown:
            raise ValueError(f"cannot set {unknown} on {self!r}: settable options are {sorted(current)}")
        for key, value in options.items():
            old = current[key]
            ok = (
                isinstance(value, bool | int | float | str)
                and isinstance(value, bool) == isinstance(old, bool)
                and isinstance(value, str) == isinstance(old, str)
                and (type(old) is not int or float(value).is_integer())
            )
            if not ok:
                raise ValueError(f"option {key!r} must be a {type(old).__name__} like {old!r}, got {value!r}")
        kwargs = {**self.kwargs, **{k: type(current[k])(v) for k, v in options.items()}}
        module = checkpoint.build(self.builder, kwargs)
        try:
            module.load_state_dict(self.module.state_dict())
        except RuntimeError as e:  # a setting that sizes the model
            raise ValueError(f"options {options} change the shape of {self!r}'s weights: {e}") from None
        return Policy(module.to(self.device), self.action_low, self.action_high, self.meta, self.builder, kwargs)

    def save(self, path: str | Path) -> Path:
        """Write ``policy.safetensors`` + ``policy.json`` into directory ``path``; returns it."""
        if self.builder is None:
            raise ValueError("this policy has no builder, so it cannot be saved in a loadable form")
        return checkpoint.save(
            path,
            self.module,
            POLICY,
            self.builder,
            self.kwargs,
            action_low=self.action_low.tolist(),
            action_high=self.action_high.tolist(),
            meta=self.meta,
        )


def _bounds(config: Mapping[str, Any], where: Path) -> tuple[np.ndarray, np.ndarray]:
    """The action bounds of a policy config, checked: two equal-length lists of finite numbers, low <= high."""
    try:
        low, high = (np.asarray(config[k], dtype=np.float32) for k in ("action_low", "action_high"))
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: action_low and action_high must be lists of numbers: {e}") from e
    if low.ndim != 1 or low.shape != high.shape or not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise CheckpointError(
            f"{where}: action_low and action_high must be finite lists of one length, got {config['action_low']!r} "
            f"and {config['action_high']!r}"
        )
    if (low > high).any():
        raise CheckpointError(f"{where}: action_low {low.tolist()} exceeds action_high {high.tolist()}")
    return low, high


def load(path: str | Path, device: str | torch.device = "cpu") -> Policy:
    """Load a policy saved by :meth:`Policy.save` (or the latest/final one of a run directory).

    Raises:
        CheckpointError: ``path`` holds no policy checkpoint, or one that builds no model fitting its weights.
    """
    module, config = checkpoint.load(path, POLICY, device)
    low, high = _bounds(config, checkpoint.find(path, POLICY) / CONFIG)
    return Policy(module, low, high, config.get("meta"), config["builder"], config["kwargs"])
