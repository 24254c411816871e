"""Starting a diffusion run from a saved planner's weights (``ecrl-train-diffusion --init-from``)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from ecrl.diffusion.denoiser import EntityDenoiser
from ecrl.diffusion.hierarchical import HierarchicalPlanner
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.policy import load as load_policy

__all__ = ["init_from", "planner_denoisers"]


def planner_denoisers(planner: DiffusionPlanner | HierarchicalPlanner) -> dict[str, EntityDenoiser]:
    """A planner's denoisers by checkpoint name: ``{"": …}`` (flat) or ``{"high": …, "low": …}``."""
    if isinstance(planner, HierarchicalPlanner):
        return {"high": planner.high, "low": planner.low}
    return {"": planner.denoiser}


def init_from(models: dict[str, EntityDenoiser], path: Path, device: torch.device) -> None:
    """Copy the denoiser weights of the saved planner at ``path`` into ``models``.

    The saved planner is of the same kind with the same denoiser configs, or flat when ``models``
    are a hierarchical planner's: its denoiser then starts both levels, whose configs may differ
    from it in ``horizon`` only; the learned step embedding's rows are copied where both have them
    (the others keep their sinusoidal start). Anything else is a ``ValueError``.
    """
    module = load_policy(path, device=device).module
    if not isinstance(module, DiffusionPlanner | HierarchicalPlanner):
        raise ValueError(f"--init-from {path}: expected a saved state planner, got a {type(module).__name__}")
    saved = planner_denoisers(module)
    flat_to_levels = saved.keys() == {""} and models.keys() == {"high", "low"}
    if saved.keys() != models.keys() and not flat_to_levels:
        kind = "hierarchical" if "high" in saved else "flat"
        raise ValueError(f"--init-from {path}: that is a {kind} planner; this run trains another kind")
    for name, model in models.items():
        source = saved[""] if flat_to_levels else saved[name]
        mine, theirs = asdict(model.config), asdict(source.config)
        differ = {
            k: (theirs[k], mine[k]) for k in mine if mine[k] != theirs[k] and not (flat_to_levels and k == "horizon")
        }
        if differ:
            level = f" ({name} level)" if name else ""
            raise ValueError(
                f"--init-from {path}: its denoiser differs from this run's{level}, (saved, here): {differ}"
            )
        weights = dict(source.state_dict())
        steps = min(len(weights["step_embedding"]), len(model.step_embedding))
        weights["step_embedding"] = model.step_embedding.detach().clone()
        weights["step_embedding"][:steps] = source.step_embedding.detach()[:steps]
        model.load_state_dict(weights)
