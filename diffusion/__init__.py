"""Entity-centric diffusion planners (flat and hierarchical).

- :mod:`ecrl.diffusion.denoiser`: entity row features (:func:`split_rows`, :func:`join_rows`,
  :func:`goal_features`), the :class:`EntityDenoiser` and its checkpoints.
- :mod:`ecrl.diffusion.noise`: the DDPM :class:`NoiseSchedule` and :func:`loss`, the DDIM :func:`sample`
  with inpainting.
- :mod:`ecrl.diffusion.ema`: :class:`EMA` weights, the copy a run samples and saves from.
- :mod:`ecrl.diffusion.planner`: the flat receding-horizon :class:`~ecrl.diffusion.planner.DiffusionPlanner`.
- :mod:`ecrl.diffusion.hierarchical`: the :class:`~ecrl.diffusion.hierarchical.HierarchicalPlanner`,
  sparse subgoals every ``K`` steps over dense ``K``-step segments.
- :mod:`ecrl.diffusion.train`: ``ecrl-train-diffusion``'s training loop (flat or hierarchical).
"""

from ecrl.diffusion.denoiser import (
    DYNAMIC_DIM,
    STATIC_DIM,
    DenoiserConfig,
    EntityDenoiser,
    goal_features,
    join_rows,
    load_denoiser,
    save_denoiser,
    split_rows,
)
from ecrl.diffusion.ema import EMA
from ecrl.diffusion.noise import LossTerms, NoiseSchedule, Plan, Window, encode_window, loss, sample

__all__ = [
    "DYNAMIC_DIM",
    "EMA",
    "STATIC_DIM",
    "DenoiserConfig",
    "EntityDenoiser",
    "LossTerms",
    "NoiseSchedule",
    "Plan",
    "Window",
    "encode_window",
    "goal_features",
    "join_rows",
    "load_denoiser",
    "loss",
    "sample",
    "save_denoiser",
    "split_rows",
]
