"""Training checkpoints without pickle: optimizer states as safetensors + JSON, written atomically.

A torch optimizer's ``state_dict`` mixes tensors (moments) with Python scalars (step counts) and
nested dicts (param groups). :func:`optimizer_state` splits it into flat tensors, for a safetensors
file, and a JSON-able rest; :func:`load_optimizer_state` puts it back together. :func:`replace_dir`
swaps a freshly written directory into place so that a run killed mid-write keeps its last
complete checkpoint.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

__all__ = ["load_optimizer_state", "optimizer_state", "replace_dir"]


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
