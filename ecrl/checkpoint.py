"""Checkpoints without pickle: models as safetensors + JSON, built only by registered builders.

A model checkpoint is a directory with two files, ``<stem>.safetensors`` (the weights) and
``<stem>.json``::

    {"format": "ecrl.policy", "version": 2, "builder": "entity_actor", "kwargs": {...}, ...}

``builder`` is a name in the registry of model builders and ``kwargs`` what it is called with; a
kind of checkpoint (:class:`CheckpointFormat`: policies, encoders, denoisers) adds its own fields
(a policy's action bounds, ``meta``). Loading looks the name up in the registry and calls nothing
else: a builder is registered with :func:`register_builder` by the module that defines it, and
core finds the library's own builders through :data:`BUILDER_MODULES`, a fixed table of which of
its modules to import for a name (core never imports a higher layer at import time, and never a
module or attribute that a JSON file names). Older checkpoints named their builder by import path
(``"ecrl.policies.export:EntityActorModule"``); :data:`LEGACY_BUILDERS` maps exactly those strings
to registry names.

Training state: a torch optimizer's ``state_dict`` mixes tensors (moments) with Python scalars
(step counts) and nested dicts (param groups). :func:`optimizer_state` splits it into flat
tensors, for a safetensors file, and a JSON-able rest; :func:`load_optimizer_state` puts it back
together. :func:`replace_dir` swaps a freshly written directory into place so that a run killed
mid-write keeps its last complete checkpoint.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ecrl.retired import RetiredOptionError, drop_retired

__all__ = [
    "BUILDER_MODULES",
    "LEGACY_BUILDERS",
    "CheckpointError",
    "CheckpointFormat",
    "arguments",
    "build",
    "builder",
    "config_from",
    "find",
    "legacy_builder",
    "load",
    "load_optimizer_state",
    "load_weights",
    "optimizer_state",
    "read_config",
    "register_builder",
    "replace_dir",
    "save",
]

Builder = Callable[..., nn.Module]
B = TypeVar("B", bound=Callable[..., Any])
C = TypeVar("C")


class CheckpointError(ValueError):
    """A path that is not an ``ecrl`` checkpoint, or one that does not fit its model."""


# ---------------------------------------------------------------------------------------- the registry

BUILDER_MODULES: Mapping[str, str] = {
    "entity_actor": "ecrl.policies.actor",
    "flat_actor": "ecrl.policies.actor",
    "pixel_actor": "ecrl.policies.actor",
    "diffusion_planner": "ecrl.diffusion.planner",
    "hierarchical_planner": "ecrl.diffusion.hierarchical",
    "pixel_planner": "ecrl.diffusion.pixels",
    "entity_denoiser": "ecrl.diffusion.denoiser",
    "slot_encoder": "ecrl.encoders.slot_attention",
    "particle_encoder": "ecrl.encoders.particles",
}
"""The library's builder names → the module whose import registers that builder."""

LEGACY_BUILDERS: Mapping[str, str] = {
    "ecrl.policies.export:EntityActorModule": "entity_actor",
    "ecrl.policies.export:FlatActorModule": "flat_actor",
    "ecrl.diffusion.planner:DiffusionPlanner": "diffusion_planner",
    "ecrl.diffusion.hierarchical:HierarchicalPlanner": "hierarchical_planner",
    "ecrl.diffusion.pixels:PixelPlanner": "pixel_planner",
}
"""The import paths that version-1 ``policy.json`` files name as ``builder`` → registry names."""

_REGISTRY: dict[str, Builder] = {}


def register_builder(name: str) -> Callable[[B], B]:
    """Decorator: register a model class (or a function returning a module) as builder ``name``.

    ``name`` is what checkpoints store; the library's own names are listed in :data:`BUILDER_MODULES`.
    Registering another callable under a taken name is an error.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a builder name is a Python identifier like 'entity_actor', got {name!r}")

    def register(fn: B) -> B:
        if not callable(fn):
            raise TypeError(f"builder {name!r} must be a class or function, got {type(fn).__name__}")
        known = _REGISTRY.get(name)
        if known is not None and known != fn:
            raise ValueError(f"builder name {name!r} is taken by {known!r}")
        _REGISTRY[name] = fn
        return fn

    return register


def builder(name: str) -> Builder:
    """The model builder registered as ``name``.

    Raises:
        CheckpointError: no builder has that name.
    """
    if not isinstance(name, str):
        raise CheckpointError(f"a model builder is named by a string, got {name!r}")
    if name not in _REGISTRY and name in BUILDER_MODULES:
        importlib.import_module(BUILDER_MODULES[name])  # a module of this library, from the fixed table
    if name not in _REGISTRY:
        known = sorted(set(BUILDER_MODULES) | set(_REGISTRY))
        raise CheckpointError(f"unknown model builder {name!r}: expected one of {known}")
    return _REGISTRY[name]


def _check_arguments(name: str, fn: Builder, kwargs: Any) -> None:
    """Raise CheckpointError unless builder ``fn`` accepts exactly the keyword arguments ``kwargs``."""
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise CheckpointError(f"the arguments of builder {name!r} must be a JSON object, got {kwargs!r}")
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return  # a builder of a config dataclass checks the fields itself (see config_from)
    named = {p.name: p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unknown = sorted(set(kwargs) - set(named))
    if unknown:
        raise CheckpointError(f"builder {name!r} does not accept {unknown}; its arguments are {sorted(named)}")
    missing = sorted(k for k, p in named.items() if p.default is p.empty and k not in kwargs)
    if missing:
        raise CheckpointError(f"builder {name!r} needs {missing}, which the arguments {sorted(kwargs)} lack")


def arguments(name: str, kwargs: Any) -> dict[str, Any]:
    """``kwargs`` saved for builder ``name`` without the options the library retired (:mod:`ecrl.retired`).

    Raises:
        CheckpointError: ``kwargs`` is not a JSON object of arguments the builder takes, or it holds a retired
            option at a value whose behaviour is gone.
    """
    fn = builder(name)
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise CheckpointError(f"the arguments of builder {name!r} must be a JSON object, got {kwargs!r}")
    try:  # a registered from_fields is bound to its class, which is what the retired table names
        kwargs = drop_retired(getattr(fn, "__self__", fn), kwargs)
    except RetiredOptionError as e:
        raise CheckpointError(str(e)) from None
    _check_arguments(name, fn, kwargs)
    return kwargs


def build(name: str, kwargs: Mapping[str, Any]) -> nn.Module:
    """The module that builder ``name`` makes from ``kwargs``.

    This is the one place where arguments read from a checkpoint (and settings changed by
    :meth:`ecrl.policy.Policy.with_options`) reach a constructor: :func:`load` and every kind of
    checkpoint build through it, so a check of the arguments for every model belongs here.

    Raises:
        CheckpointError: ``name`` is not registered, or it does not take these arguments.
        ValueError, TypeError: the builder's own checks of the values.
    """
    return _construct(name, arguments(name, kwargs))


def _construct(name: str, checked: dict[str, Any]) -> nn.Module:
    """Call builder ``name`` with arguments that :func:`arguments` returned (the only call of a registered builder)."""
    module = builder(name)(**checked)
    if not isinstance(module, nn.Module):
        raise CheckpointError(f"builder {name!r} returned a {type(module).__name__}, not a torch module")
    return module


def config_from(cls: type[C], fields: Mapping[str, Any], what: str) -> C:
    """The config dataclass ``cls`` with ``fields`` (others default); ValueError naming any unknown field.

    ``what`` names the model in the message, e.g. ``"slot encoders"``.
    """
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"{what} have no option {unknown}; options: {sorted(known)}")
    return cls(**fields)


def legacy_builder(config: dict[str, Any]) -> dict[str, Any]:
    """A version-1 config whose ``builder`` is an import path of :data:`LEGACY_BUILDERS`, with its registry name."""
    path = config.get("builder")
    if not isinstance(path, str) or path not in LEGACY_BUILDERS:
        raise CheckpointError(
            f"version-1 checkpoints name their builder by one of the import paths {sorted(LEGACY_BUILDERS)}; "
            f"got {path!r}, which is not loaded"
        )
    return {**config, "builder": LEGACY_BUILDERS[path]}


# ---------------------------------------------------------------------------------------- model files


@dataclasses.dataclass(frozen=True)
class CheckpointFormat:
    """One kind of model checkpoint: its JSON ``format`` and ``version``, file names and fields.

    Args:
        format: the config's ``"format"`` string, e.g. ``"ecrl.policy"``.
        version: the version that :func:`save` writes.
        stem: the files are ``<stem>.json`` and ``<stem>.safetensors``.
        what: the kind in messages, with its article: ``"an ecrl policy"``.
        fields: fields of the config that this kind needs besides ``builder`` and ``kwargs``.
        legacy: earlier version → a function that turns such a config into this version's layout.
    """

    format: str
    version: int
    stem: str
    what: str
    fields: tuple[str, ...] = ()
    legacy: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] = dataclasses.field(default_factory=dict)

    @property
    def config(self) -> str:
        return f"{self.stem}.json"

    @property
    def weights(self) -> str:
        return f"{self.stem}.safetensors"


def save(
    path: str | Path, module: nn.Module, fmt: CheckpointFormat, name: str, kwargs: Mapping[str, Any], **fields: Any
) -> Path:
    """Write ``module``'s weights and its config (builder ``name``, ``kwargs``, ``fields``) into directory ``path``.

    Returns:
        ``path``, created if missing.

    Raises:
        CheckpointError: ``name`` is not a registered builder, or it does not take ``kwargs``.
        ValueError: the config is not JSON-able.
    """
    _check_arguments(name, builder(name), kwargs)
    missing = sorted(set(fmt.fields) - set(fields))
    if missing:
        raise ValueError(f"{fmt.what} config needs {missing}")
    config = {"format": fmt.format, "version": fmt.version, "builder": name, "kwargs": dict(kwargs), **fields}
    try:
        text = json.dumps(config, indent=2, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        raise ValueError(f"the config of {fmt.what} must be plain JSON: {e}") from e
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}, str(path / fmt.weights))
    (path / fmt.config).write_text(text)
    return path


def find(path: str | Path, fmt: CheckpointFormat) -> Path:
    """The checkpoint directory of ``path``: itself, the directory of one of its files, or a run's
    ``final/`` or ``checkpoints/latest/``."""
    path = Path(path)
    if path.is_file():
        path = path.parent
    for candidate in (path, path / "final", path / "checkpoints" / "latest"):
        if (candidate / fmt.config).is_file():
            return candidate
    raise CheckpointError(
        f"{path} is not {fmt.what} checkpoint: expected a directory with {fmt.config} and {fmt.weights} "
        f"(or a run directory with final/ or checkpoints/latest/)"
    )


def read_config(path: Path, fmt: CheckpointFormat) -> dict[str, Any]:
    """The config file ``path`` of a ``fmt`` checkpoint in the current layout (older versions converted).

    Raises:
        CheckpointError: not JSON, another format or version, or a field missing.
    """
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(config, dict) or config.get("format") != fmt.format:
        raise CheckpointError(f"{path} is not {fmt.what} config (format != {fmt.format!r})")
    version = config.get("version")
    if version != fmt.version:
        if not isinstance(version, int) or version not in fmt.legacy:
            readable = sorted({fmt.version, *fmt.legacy})
            raise CheckpointError(f"{path}: unsupported version {version!r} (expected one of {readable})")
        config = fmt.legacy[version](config)
    missing = sorted({"builder", "kwargs", *fmt.fields} - set(config))
    if missing:
        raise CheckpointError(f"{path} lacks {missing}")
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


def load(
    path: str | Path, fmt: CheckpointFormat, device: str | torch.device = "cpu"
) -> tuple[nn.Module, dict[str, Any]]:
    """The module saved at ``path`` (see :func:`find`), in eval mode on ``device``, and its config.

    The config is in the current layout: ``builder`` is a registry name even for older checkpoints.

    Raises:
        CheckpointError: not a ``fmt`` checkpoint, an unregistered builder, arguments it does not take
            or values it refuses, or weights that are missing, corrupt or of another model.
    """
    root = find(path, fmt)
    config = read_config(root / fmt.config, fmt)
    if not (root / fmt.weights).is_file():
        raise CheckpointError(f"{root} has {fmt.config} but no {fmt.weights}")
    try:
        config["kwargs"] = arguments(config["builder"], config["kwargs"])
        module = _construct(config["builder"], config["kwargs"])
    except CheckpointError as e:
        raise CheckpointError(f"{root / fmt.config}: {e}") from e
    except (KeyError, TypeError, ValueError) as e:  # the builder's own checks of the values
        raise CheckpointError(f"{root / fmt.config} does not describe a model that can be built: {e!r}") from e
    load_weights(module, root / fmt.weights, root / fmt.config)
    return module.to(device).eval(), config


# ---------------------------------------------------------------------------------------- training state


def optimizer_state(optimizer: torch.optim.Optimizer, prefix: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``optimizer``'s state as tensors named ``<prefix>.<param id>.<key>`` and a JSON-able rest."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, state in sd["state"].items():
        for key, value in state.items():
            if torch.is_tensor(value):
                tensors[f"{prefix}.{pid}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(pid), {})[key] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars, "ids": list(sd["state"])}


def load_optimizer_state(
    optimizer: torch.optim.Optimizer, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any], prefix: str
) -> None:
    """Restore what :func:`optimizer_state` wrote (``tensors`` may hold other entries too)."""
    state: dict[int, dict[str, Any]] = {}
    for pid in meta["ids"]:
        entry = dict(meta["scalars"].get(str(pid), {}))
        head = f"{prefix}.{pid}."
        entry.update({k.removeprefix(head): v for k, v in tensors.items() if k.startswith(head)})
        state[int(pid)] = entry
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def replace_dir(fresh: Path, target: Path) -> Path:
    """Move the complete directory ``fresh`` to ``target``, replacing what was there; returns ``target``."""
    old = target.with_name(f".old_{target.name}")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    fresh.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return target
