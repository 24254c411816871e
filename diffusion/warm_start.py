"""Starting a diffusion run from a saved planner's weights (``ecrl-train-diffusion --init-from``)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from ecrl.diffusion.denoiser import EntityDenoiser
from ecrl.diffusion.hierarchical import HierarchicalPlanner
from ecrl.diffusion.pixels import PixelPlanner
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.encoders.rows import FrameRows
from ecrl.policy import load as load_policy

__all__ = ["front_end_differences", "init_from", "planner_denoisers"]


def planner_denoisers(planner: DiffusionPlanner | HierarchicalPlanner) -> dict[str, EntityDenoiser]:
    """A planner's denoisers by checkpoint name: ``{"": …}`` (flat) or ``{"high": …, "low": …}``."""
    if isinstance(planner, HierarchicalPlanner):
        return {"high": planner.high, "low": planner.low}
    return {"": planner.denoiser}


def front_end_differences(saved: FrameRows, mine: FrameRows) -> list[str]:
    """What differs between two frozen front ends: encoder (kind, config, weights), keypoint frame, normalisation."""
    differ = []
    theirs, ours = saved.row_kwargs, mine.row_kwargs
    for key in ("encoder", "table_height", "cameras"):
        if theirs.get(key) != ours.get(key):
            differ.append(f"{key}: saved {theirs.get(key)!r}, here {ours.get(key)!r}")
    a, b = saved.encoder.state_dict(), mine.encoder.state_dict()
    if a.keys() != b.keys() or any(not torch.equal(a[k].cpu(), b[k].cpu()) for k in a):
        differ.append("the encoder's weights")
    for key in ("mean", "std"):
        x, y = getattr(saved, key).cpu(), getattr(mine, key).cpu()
        if x.shape != y.shape or not torch.allclose(x, y, rtol=1e-4, atol=1e-6):
            differ.append(f"the rows' normalisation ({key}; is it another dataset?)")
    return differ


def init_from(
    models: dict[str, EntityDenoiser], path: Path, device: torch.device, front_end: FrameRows | None = None
) -> None:
    """Copy the denoiser weights of the saved planner at ``path`` into ``models``.

    The saved planner is of the same kind with the same denoiser configs, or flat when ``models``
    are a hierarchical planner's: its denoiser then starts both levels, whose configs may differ
    from it in ``horizon`` only; the learned step embedding's rows are copied where both have them
    (the others keep their sinusoidal start). A run planning from pixels passes its ``front_end``: the
    saved planner is then a planner from pixels with the same front end (:func:`front_end_differences`
    finds nothing), since its weights read rows of that encoder, frame and normalisation. Anything else
    is a ``ValueError``.
    """
    module = load_policy(path, device=device).module
    if isinstance(module, PixelPlanner):
        if front_end is None:
            raise ValueError(
                f"--init-from {path}: that is a planner from pixels; it starts a planner from pixels (--encoder) only"
            )
        differ = front_end_differences(module, front_end)
        if differ:
            raise ValueError(
                f"--init-from {path}: its front end differs from this run's ({'; '.join(differ)}), "
                "so its weights read other rows"
            )
        module = module.planner
    elif front_end is not None and isinstance(module, DiffusionPlanner | HierarchicalPlanner):
        raise ValueError(
            f"--init-from {path}: that is a state planner; a planner from pixels (--encoder) starts from a saved "
            "planner from pixels with the same encoder"
        )
    if not isinstance(module, DiffusionPlanner | HierarchicalPlanner):
        raise ValueError(f"--init-from {path}: expected a saved diffusion planner, got a {type(module).__name__}")
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
