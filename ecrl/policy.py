"""The policy API: ``ecrl.load(path).act(obs)`` for any ``ecrl`` env and any number of objects.

A saved policy is a directory with two files, loaded with no pickle:

- ``policy.safetensors``: the weights of the torch module that maps an observation to an action;
- ``policy.json``: ``{"format": "ecrl.policy", "version": 1, "builder": "<module>:<function>",
  "kwargs": {...}, "action_low": [...], "action_high": [...], "meta": {...}}``. ``builder`` names
  the function (inside the ``ecrl`` package) that rebuilds the module from ``kwargs``; that is how
  this core module loads models defined in higher layers (``ecrl.policies``, ``ecrl.diffusion``)
  without importing them.

The module takes an observation dict of float32 tensors ``(B, N, D)`` and returns actions in
``[-1, 1]``, which :meth:`Policy.act` rescales to the env's action bounds.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ecrl.retired import drop_retired

FORMAT, VERSION = "ecrl.policy", 1
WEIGHTS, CONFIG = "policy.safetensors", "policy.json"


class CheckpointError(ValueError):
    """A path that is not an ``ecrl`` policy checkpoint, or one that does not fit its model."""


class Policy:
    """A trained policy: ``act(obs)`` → action(s) for one observation dict or a batch.

    Args:
        module: maps an observation dict of ``(B, N, D)`` tensors to actions ``(B, A)`` in ``[-1, 1]``.
        action_low, action_high: the env's action bounds that ``[-1, 1]`` is rescaled to.
        meta: free-form description (architecture, algorithm, training task, steps).
        builder, kwargs: how to rebuild ``module`` (see the module docstring); needed by :meth:`save`.
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
        self.builder, self.kwargs = builder, dict(kwargs or {})
        self.device = next(module.parameters()).device

    def __repr__(self) -> str:
        return f"Policy({self.meta.get('arch', type(self.module).__name__)}, builder={self.builder!r})"

    @torch.no_grad()
    def act(self, obs: Mapping[str, Any], deterministic: bool = True) -> np.ndarray:
        """Action ``(A,)`` for one observation (rows ``(N, D)``) or ``(B, A)`` for a batch (``(B, N, D)``).

        ``obs`` is an ``ecrl`` env's observation dict (any ``n_max``); entity-centric models read
        ``observation`` and ``desired_goal`` only, planners from pixels ``pixels`` (uint8 frames) too.
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
            t = torch.as_tensor(np.asarray(obs[key], dtype=np.float32), device=self.device)
            if t.ndim not in (2, 3):
                raise ValueError(f"obs[{key!r}]: expected (N, D) or (B, N, D), got shape {tuple(t.shape)}")
            tensors[key] = t
        single = tensors["observation"].ndim == 2
        if single != (tensors["desired_goal"].ndim == 2):
            raise ValueError(
                f"observation {tuple(tensors['observation'].shape)} and desired_goal "
                f"{tuple(tensors['desired_goal'].shape)}: one is batched and the other is not"
            )
        if "pixels" in obs:  # camera frames, for policies that plan from pixels (see ecrl.diffusion.pixels)
            pixels = torch.as_tensor(np.asarray(obs["pixels"]), device=self.device)
            if pixels.ndim != (4 if single else 5):
                raise ValueError(
                    f"obs['pixels']: expected (V, P, P, 3) frames with unbatched rows or (B, V, P, P, 3) with "
                    f"batched ones, got shape {tuple(pixels.shape)}"
                )
            tensors["pixels"] = pixels
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
            for name, p in inspect.signature(_builder(self.builder)).parameters.items()
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
        module = _builder(self.builder)(**kwargs)
        try:
            module.load_state_dict(self.module.state_dict())
        except RuntimeError as e:  # a setting that sizes the model
            raise ValueError(f"options {options} change the shape of {self!r}'s weights: {e}") from None
        return Policy(module.to(self.device), self.action_low, self.action_high, self.meta, self.builder, kwargs)

    def save(self, path: str | Path) -> Path:
        """Write ``policy.safetensors`` + ``policy.json`` into directory ``path``; returns it."""
        if self.builder is None:
            raise ValueError("this policy has no builder, so it cannot be saved in a loadable form")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.module.state_dict().items()}
        save_file(state, str(path / WEIGHTS))
        config = {
            "format": FORMAT,
            "version": VERSION,
            "builder": self.builder,
            "kwargs": self.kwargs,
            "action_low": self.action_low.tolist(),
            "action_high": self.action_high.tolist(),
            "meta": self.meta,
        }
        (path / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
        return path


def _resolve(path: Path) -> Path:
    """A checkpoint directory from a checkpoint dir, one of its files, or a run directory."""
    if path.is_file():
        path = path.parent
    if (path / CONFIG).exists():
        return path
    for candidate in ("final", "checkpoints/latest"):
        if (path / candidate / CONFIG).exists():
            return path / candidate
    raise CheckpointError(
        f"{path} is not an ecrl policy checkpoint: expected a directory with {CONFIG} and {WEIGHTS} "
        f"(or a run directory with final/ or checkpoints/latest/)"
    )


def _builder(name: str):
    module_name, _, attr = name.partition(":")
    if not module_name.startswith("ecrl.") or not attr:
        raise CheckpointError(f"checkpoint builder {name!r} must be 'ecrl.<module>:<function>'")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise CheckpointError(f"checkpoint builder {name!r} cannot be found: {e}") from e


def read_config(path: Path, fmt: str, version: int, what: str) -> dict[str, Any]:
    """The JSON config ``path`` of a checkpoint, checked to be ``what`` (e.g. "an ecrl policy config"):
    format ``fmt``, ``version``."""
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(config, dict) or config.get("format") != fmt:
        raise CheckpointError(f"{path} is not {what} (format != {fmt!r})")
    if config.get("version") != version:
        raise CheckpointError(f"{path}: unsupported version {config.get('version')!r} (expected {version})")
    return config


def load_weights(module: nn.Module, path: Path, config_path: Path) -> None:
    """Load the safetensors file ``path`` into ``module`` (built from ``config_path``), or raise CheckpointError."""
    try:
        state = load_file(str(path))
    except Exception as e:  # safetensors raises its own error types for corrupt files
        raise CheckpointError(f"{path} is not a readable safetensors file: {e}") from e
    try:
        module.load_state_dict(state)
    except RuntimeError as e:
        raise CheckpointError(f"{path} does not fit the model in {config_path.name}: {e}") from e


def load(path: str | Path, device: str | torch.device = "cpu") -> Policy:
    """Load a policy saved by :meth:`Policy.save` (or the latest/final one of a run directory)."""
    root = _resolve(Path(path))
    config = read_config(root / CONFIG, FORMAT, VERSION, "an ecrl policy config")
    if not (root / WEIGHTS).exists():
        raise CheckpointError(f"{root} has {CONFIG} but no {WEIGHTS}")
    try:
        config["kwargs"] = drop_retired(config["builder"], config["kwargs"])
        module = _builder(config["builder"])(**config["kwargs"])
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError) as e:  # kwargs (or keys) that build no model
        raise CheckpointError(f"{root / CONFIG} does not describe a model that can be built: {e!r}") from e
    load_weights(module, root / WEIGHTS, root / CONFIG)
    return Policy(
        module.to(device),
        np.asarray(config["action_low"]),
        np.asarray(config["action_high"]),
        config.get("meta"),
        config["builder"],
        config["kwargs"],
    )
