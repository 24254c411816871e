"""Planning from pixels against planning from state, in one process: the measurement of ``ecrl-bench pixels``.

:func:`measure` takes a :class:`PixelsBenchConfig` and returns the numbers; the CLI
(:mod:`ecrl.scripts.bench_pixels`) writes the tables, plot and README.

Two planners of the ``ecrl-train-diffusion`` recipe (its default denoiser, sampling steps, re-planning
interval and guidance), random weights (the cost does not depend on them), in the push task with
``n_objects`` objects and ``positions`` goals:

* the **state planner** (:class:`~ecrl.diffusion.planner.DiffusionPlanner` over the env's entity rows,
  ``N + 1`` tokens per step);
* the **planner from pixels** (:class:`~ecrl.diffusion.pixels.PixelPlanner`: the frozen ``encoder``,
  its rows normalised, then the same denoiser over generic rows of the encoder's width, ``V · K`` tokens
  per step). The envs render the encoder's cameras at its image size.

Two measurements, the planners taking turns in each:

* **Training throughput.** Windows/s of the ``ecrl-train-diffusion`` step
  (:func:`~ecrl.diffusion.bench_training.training_step`) at batch ``train_batch``. The windows are the
  same for both planners: cut from one random-action rollout of the env, whose frames are encoded once
  (normalised and tracked as :class:`~ecrl.diffusion.pixels.LatentWindows` does a dataset's); the state
  planner reads their state rows, the planner from pixels their encoder rows. ``repeats`` turns of
  ``train_steps`` steps each; the ratio is the median over the turns of the two rates within a turn.
* **Planning time per env step.** ``batch`` envs side by side (:func:`ecrl.rollout.rollout`, one episode
  of ``steps`` steps each, driven by the planner from pixels); on every env step one ``policy.act`` call of
  each planner on the stacked batch (the state planner without the frames) and, on its own, the encoding
  of the frames (:meth:`PixelPlanner.rows`: encoder and normalisation). Every call is timed on its own
  after ``warmup_steps`` untimed calls of each; rendering (in ``env.step``) is outside every timer. The
  ratio is the median over the env steps of the two calls of the same step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import ecrl.envs  # noqa: F401  (registers ecrl/Push-v0)
from ecrl.diffusion.bench_env import check_sizes, env_id
from ecrl.diffusion.bench_planners import TimedPolicy, timing_row
from ecrl.diffusion.bench_training import (
    as_tensors,
    cut_windows,
    random_rollout,
    rate_stats,
    training_rates,
    training_step,
)
from ecrl.diffusion.pixels import PixelPlanner, tracked_rows
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.diffusion.train import DiffusionTrainConfig, planner_policy
from ecrl.encoders import EntityEncoder, frames_to_images, load_encoder
from ecrl.policy import Policy
from ecrl.rollout import rollout
from ecrl.timing import call_ms, gc_paused

__all__ = ["PixelsBenchConfig", "measure"]

_TRAIN = DiffusionTrainConfig()
_PLANNERS = ("state", "pixels")


@dataclass(frozen=True)
class PixelsBenchConfig:
    """Planning from pixels against planning from state: training windows/s and planning ms per env step, encoding included."""

    encoder: Path = Path("results/encoders/particles")
    """The frozen encoder of the planner from pixels (an ecrl-train-encoder run or checkpoint); the envs render its cameras at its image size."""
    n_objects: int = 3
    """Objects in the push envs (positions goals)."""
    batch: int = 8
    """Envs side by side: the batch of every act call (one call per env step)."""
    steps: int = 40
    """Timed env steps: act calls of each planner, and encodings alone."""
    warmup_steps: int = 2
    """Untimed act calls of each planner before timing."""
    train_batch: int = _TRAIN.batch_size
    """Windows per training step (default: ecrl-train-diffusion's)."""
    train_steps: int = 10
    """Timed training steps per planner and repeat."""
    repeats: int = 5
    """Turns of the training measurement: within each, every planner runs `train_steps` steps."""
    threads: int | None = None
    """torch CPU threads (default: torch's own choice, usually the number of cores)."""
    seed: int = 0
    """Seed of the weights, the rollouts and the sampler."""
    out: Path = Path("results/bench_pixels")
    """Output directory (created if missing): bench.json, README.md, pixels.png."""

    def __post_init__(self) -> None:
        check_sizes("push", (self.n_objects,), "n_objects")
        sizes = (self.batch, self.steps, self.train_batch, self.train_steps, self.repeats)
        if min(sizes) < 1 or self.warmup_steps < 0:
            raise ValueError(
                "batch, steps, train_batch, train_steps and repeats must be positive and warmup_steps >= 0, got "
                f"{sizes} and {self.warmup_steps}"
            )
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be positive, got {self.threads}")


def encoder_cameras(encoder: EntityEncoder, path: Path) -> tuple[str, ...]:
    """The cameras the encoder was trained on (its checkpoint's ``meta["cameras"]``, one per view).

    Raises:
        ValueError: the checkpoint names no cameras, or not one per view.
    """
    cameras = tuple(encoder.meta.get("cameras") or ())
    if len(cameras) != encoder.config.views:
        raise ValueError(
            f"encoder {path} reads {encoder.config.views} view(s) and its meta names cameras {list(cameras)}: "
            "expected one camera per view (ecrl-train-encoder records them)"
        )
    return cameras


class _SideBySide:
    """The batch policy of the timed rollout: acts with the planner from pixels and, on the same observations,
    also times the state planner (its keys only, no frames) and the encoding alone."""

    def __init__(self, state: Policy, pixels: Policy) -> None:
        self.timed = {"state": TimedPolicy(state), "pixels": TimedPolicy(pixels)}
        self.rows = pixels.module.rows
        self.encode_ms: list[float] = []

    def reset(self, *args: Any) -> None:
        for timed in self.timed.values():
            timed.reset(*args)

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        self.timed["state"].act({k: v for k, v in obs.items() if k != "pixels"})
        frames = torch.as_tensor(obs["pixels"])
        with torch.no_grad():
            self.encode_ms.append(call_ms(lambda: self.rows(frames)))
        return self.timed["pixels"].act(obs)

    def close(self) -> None:
        for timed in self.timed.values():
            timed.close()


def _paired_median(numerator: list[float], denominator: list[float]) -> float:
    """The median of the ratios of measurements taken side by side (the same step or turn)."""
    return float(np.median(np.asarray(numerator) / np.asarray(denominator)))


def measure(config: PixelsBenchConfig) -> dict[str, Any]:
    """Training windows/s and planning ms per env step of the state planner and the planner from pixels.

    Returns:
        ``threads``, ``weights`` (``random``), ``env_id``, ``n_objects``, ``goal``; ``encoder``: its path, kind,
        cameras, image size, tokens (``V · K``) and row width; ``denoiser`` (the state planner's config; the
        planner from pixels differs only in ``entity_dim``), ``sampling_steps``, ``replan_every``,
        ``guidance``; ``training``: a row per planner (tokens per step, row width, best and median windows/s,
        ms per step); ``planning``: a row per planner (ms per env step: mean, median, p90, per episode-step;
        denoiser calls per env step), ``encoding`` (ms of the encoding alone); ``ratios``: pixels / state of
        the training windows/s and of the ms per env step, and the encoding's share of the pixel step.

    Raises:
        ValueError: the encoder names no camera per view.
    """
    torch.set_num_threads(config.threads or torch.get_num_threads())
    torch.manual_seed(config.seed)
    encoder = load_encoder(config.encoder)
    cameras, size = encoder_cameras(encoder, config.encoder), encoder.config.image_size
    push = {"n_objects": config.n_objects, "pixels": size, "cameras": cameras}
    state_cfg = _TRAIN.denoiser
    horizon = state_cfg.horizon

    # Training windows (and the rows' normalisation): one random-action rollout, its frames encoded once.
    env = gym.make(env_id("push"), **push)
    trajectory = random_rollout(env, max(2 * horizon, 64), config.seed, np.random.default_rng(config.seed))
    env.close()
    with torch.inference_mode():
        raw = encoder.encode(frames_to_images(torch.as_tensor(trajectory["pixels"])))[0].numpy()
    mean, std = raw.mean((0, 1)), raw.std((0, 1)) + 1e-6
    rows = tracked_rows((raw - mean) / std, np.bincount(trajectory["episode"]) - 1, encoder)
    pixel_cfg = replace(state_cfg, entity_dim=rows.shape[-1])
    sources = {"state": trajectory, "pixels": {**trajectory, "observation": rows}}
    windows = {  # the same windows (same draws) for both planners
        name: cut_windows(source, horizon, config.train_batch, np.random.default_rng(config.seed), count=4)
        for name, source in sources.items()
    }
    for w in windows["pixels"]:
        w["mask"] = np.ones((config.train_batch, rows.shape[1]), bool)
    cases = {
        name: (training_step(cfg, config.seed), as_tensors(windows[name]))
        for name, cfg in zip(_PLANNERS, (state_cfg, pixel_cfg), strict=True)
    }

    # The planners, random weights, behind the policy API.
    settings = {
        "sampling_steps": _TRAIN.sampling_steps,
        "replan_every": _TRAIN.replan_every,
        "seed": config.seed,
        "guidance": _TRAIN.guidance,
    }
    state = planner_policy(DiffusionPlanner(state_cfg, **settings), {"arch": "diffusion"})
    module = PixelPlanner(
        encoder={"kind": encoder.kind, "config": encoder.config_dict()},
        planner={"denoiser": asdict(pixel_cfg), **settings},
        mean=mean.tolist(),
        std=std.tolist(),
    )
    module.encoder.load_state_dict(encoder.state_dict())
    ones = np.ones(pixel_cfg.action_dim, dtype=np.float32)
    meta = {"arch": "diffusion_from_pixels", "pixels": {"size": size, "cameras": list(cameras)}}
    pixels = Policy(module, -ones, ones, meta, "pixel_planner", module.kwargs)
    envs = [gym.make(env_id("push"), **push, max_episode_steps=config.steps) for _ in range(config.batch)]
    seeds = list(range(config.seed, config.seed + config.batch))
    first = [env.reset(seed=s)[0] for env, s in zip(envs, seeds, strict=True)]
    batch = {k: np.stack([o[k] for o in first]) for k in first[0]}

    def run() -> tuple[dict[str, list[float]], _SideBySide]:
        rates = training_rates(cases, config.repeats, config.train_steps)
        for _ in range(config.warmup_steps):  # first calls allocate: not timed
            state.act({k: v for k, v in batch.items() if k != "pixels"})
            pixels.act(batch)
        side = _SideBySide(state, pixels)
        try:
            rollout(envs, side, seeds)
        finally:
            side.close()
        return rates, side

    rates, side = gc_paused(run)
    for env in envs:
        env.close()
    tokens = {"state": config.n_objects + 1, "pixels": rows.shape[1]}
    widths = {"state": trajectory["observation"].shape[-1], "pixels": rows.shape[-1]}
    ms = {name: [c[0] for c in timed.calls] for name, timed in side.timed.items()}
    return {
        "threads": torch.get_num_threads(),
        "weights": "random",
        "env_id": env_id("push"),
        "n_objects": config.n_objects,
        "goal": "positions",
        "encoder": {
            "path": str(config.encoder),
            "kind": encoder.kind,
            "cameras": list(cameras),
            "image_size": size,
            "tokens": rows.shape[1],
            "row_width": rows.shape[-1],
        },
        "denoiser": asdict(state_cfg),
        **{k: v for k, v in settings.items() if k != "seed"},
        "training": [
            {
                "planner": name,
                "tokens_per_step": tokens[name],
                "row_width": widths[name],
                "batch": config.train_batch,
                "horizon": horizon,
                **rate_stats(rates[name], config.train_batch),
            }
            for name in _PLANNERS
        ],
        "planning": [
            {
                "planner": name,
                "tokens_per_step": tokens[name],
                "row_width": widths[name],
                **timing_row(side.timed[name], None),
            }
            for name in _PLANNERS
        ],
        "encoding": {
            "ms_per_step_mean": float(np.mean(side.encode_ms)),
            "ms_per_step_median": float(np.median(side.encode_ms)),
            "ms_per_step_p90": float(np.percentile(side.encode_ms, 90)),
            "calls": len(side.encode_ms),
        },
        "ratios": {
            "training_windows_per_s": _paired_median(rates["pixels"], rates["state"]),
            "planning_ms_per_step": _paired_median(ms["pixels"], ms["state"]),
            "encoding_share_of_pixel_step": _paired_median(side.encode_ms, ms["pixels"]),
        },
    }
