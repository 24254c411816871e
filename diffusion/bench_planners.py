"""Trained planners side by side on one task, success and planning time: the measurement of
``ecrl-bench planners``.

:func:`measure` takes a :class:`PlannersBenchConfig` and returns the numbers; the CLI
(:mod:`ecrl.scripts.bench_planners`) writes the tables, plot and README.

Every planner (anything :func:`ecrl.load` accepts: a run directory or a checkpoint directory) is
rolled out by :func:`ecrl.evaluation.evaluate` on the same task and the same episode seeds, per
(split part, N): ``episodes`` episodes side by side, one ``policy.act`` call per env step on the
stacked batch of their observations. Per planner and (part, N) it reports:

* **success** (every object placed at the episode's end) with its 95% Wilson interval, and the
  fraction of objects placed with its 95% normal interval (as ``ecrl-eval`` reports them);
* **planning time**: every ``act(obs)`` call is timed on its own (``time.perf_counter``; it includes
  turning the observation into tensors and the action back). *Per env step* is per call (the batch
  of ``episodes`` envs advances one step); *per episode-step* divides each call by its batch size.
  The mean is the amortised cost of a planner that re-plans every few steps (most calls only read
  the current plan, so the median is that cheap read);
* **denoiser calls per env step**: ``EntityDenoiser`` forward passes (counted by forward hooks, so
  any planner built from denoisers is counted) per ``act`` call; each call denoises the whole
  batch. A module with a ``stats`` attribute (:class:`~ecrl.diffusion.hierarchical.PlanningStats`)
  also reports it, per level.

The planners take turns per (part, N); the machine may be shared, so the times are only as steady
as its load. The goal, split and numbers of objects default to the first planner's training task
(its ``meta``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ecrl.diffusion.denoiser import EntityDenoiser
from ecrl.evaluation import EVAL_SEED, check_settings, evaluate
from ecrl.policy import Policy, load

__all__ = [
    "PlannersBenchConfig",
    "TimedPolicy",
    "describe_planner",
    "evaluate_one",
    "labels_for",
    "measure",
    "resolve_task",
    "timing_row",
]


@dataclass(frozen=True)
class PlannersBenchConfig:
    """Trained planners side by side on one task: success (95% Wilson CI) and planning ms per env step."""

    paths: tuple[str, ...]
    """Planners to compare: run directories or checkpoint directories (anything `ecrl.load` accepts)."""
    labels: tuple[str, ...] | None = None
    """A name per PATH (default: each policy's `meta["arch"]`, with its path where two coincide)."""
    objects: tuple[int, ...] | None = None
    """Numbers of objects N (default: the first planner's training N, `meta["train_n_objects"]`)."""
    goal: str | None = None
    """Goal kind (positions, adjacent, sort, ordered); default: the first planner's training goal, else positions."""
    split: str | None = None
    """Compositional split (colour_shape, shape_goal, or none); default: the first planner's training split."""
    parts: tuple[str, ...] | None = None
    """Parts of the split (train, test); default: both with a split, else train."""
    episodes: int = 20
    """Episodes per planner and (part, N), run side by side; episode `i` resets with seed `seed + i`."""
    seed: int = EVAL_SEED
    """First episode seed (the same episodes for every planner)."""
    batch_size: int | None = None
    """Most episodes run side by side, i.e. the batch of each `act` call (default: all `episodes`)."""
    stop_on_success: bool = False
    """End an episode once every object is placed (default: run to the horizon, read success at its end)."""
    device: str = "cpu"
    """Torch device of the planners."""
    threads: int | None = None
    """torch CPU threads (default: torch's own choice, usually the number of cores)."""
    progress: bool = False
    """Show a progress bar per evaluation."""
    out: Path = Path("results/bench_planners")
    """Output directory (created if missing): bench.json, README.md, planners.png."""

    def __post_init__(self) -> None:
        if not self.paths:
            raise ValueError("need at least one planner PATH")
        if self.labels is not None and len(self.labels) != len(self.paths):
            raise ValueError(f"need one label per PATH: {len(self.paths)} paths, {len(self.labels)} labels")
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            raise ValueError(f"labels must differ, got {list(self.labels)}")
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be positive, got {self.threads}")


class TimedPolicy:
    """A policy whose every ``act`` call is timed and whose denoiser forward passes are counted.

    ``calls`` holds ``(ms, batch)`` per ``act`` call; ``denoiser_calls`` counts forward passes of
    every ``EntityDenoiser`` inside the policy's module since construction.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy, self.meta = policy, policy.meta
        self.calls: list[tuple[float, int]] = []
        self.denoiser_calls = 0
        denoisers = [m for m in policy.module.modules() if isinstance(m, EntityDenoiser)]
        self._hooks = [m.register_forward_hook(self._count) for m in denoisers]
        self.has_denoisers = bool(denoisers)

    def __repr__(self) -> str:
        return repr(self.policy)

    def _count(self, *_: Any) -> None:
        self.denoiser_calls += 1

    def reset(self, *args: Any) -> None:
        self.policy.reset(*args)

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The wrapped policy's actions ``(B, A)``; the call's wall time is recorded."""
        start = time.perf_counter()
        action = self.policy.act(obs)
        self.calls.append(((time.perf_counter() - start) * 1e3, len(obs["observation"])))
        return action

    def close(self) -> None:
        """Remove the counting hooks."""
        for hook in self._hooks:
            hook.remove()


# ---------------------------------------------------------------------------------------- planners
def describe_planner(label: str, path: str, policy: Policy) -> dict[str, Any]:
    """Kind, horizon(s), sampling steps and replan intervals of a loaded planner, from its kwargs and meta."""
    kw, meta = policy.kwargs, policy.meta
    if "planner" in kw and "encoder" in kw:  # PixelPlanner: a DiffusionPlanner behind a frozen encoder
        kw = kw["planner"]
    row: dict[str, Any] = {
        "label": label,
        "path": path,
        "kind": meta.get("arch") or type(policy.module).__name__,
        "builder": policy.builder,
        "params": sum(p.numel() for p in policy.module.parameters()),
    }
    if "high" in kw and "low" in kw:  # HierarchicalPlanner
        k, hh = kw["low"]["horizon"], kw["high"]["horizon"]
        row |= {
            "horizon": k * hh,
            "subgoal_every": k,
            "subgoal_horizon": hh,
            "sampling_steps": {"high": kw["high_sampling_steps"], "low": kw["low_sampling_steps"]},
            "replan_every": {"high": kw["high_replan_every"], "low": kw["replan_every"]},
        }
    elif "denoiser" in kw:  # DiffusionPlanner
        row |= {
            "horizon": kw["denoiser"]["horizon"],
            "sampling_steps": kw["sampling_steps"],
            "replan_every": kw["replan_every"],
            "guidance": kw.get("guidance", 1.0),
        }
    train = {k: meta.get(k) for k in ("goal", "split", "train_n_objects", "steps", "demonstrations") if k in meta}
    return {**row, "trained": train}


def labels_for(config: PlannersBenchConfig, policies: list[Policy]) -> list[str]:
    """``--labels``, else each policy's ``meta["arch"]``, with the path added where two coincide."""
    if config.labels is not None:
        return list(config.labels)
    kinds = [str(p.meta.get("arch") or "planner") for p in policies]
    return [
        f"{kind} ({path})" if kinds.count(kind) > 1 else kind for kind, path in zip(kinds, config.paths, strict=True)
    ]


def resolve_task(config: PlannersBenchConfig, first: Policy) -> dict[str, Any]:
    """Objects, goal, split and parts: the arguments, else the first planner's training task; checked."""
    meta = first.meta
    objects = config.objects or tuple(int(n) for n in meta.get("train_n_objects") or ())
    if not objects:
        raise ValueError(f"{config.paths[0]} has no meta['train_n_objects']: pass --objects")
    split = config.split if config.split is not None else meta.get("split")
    split = None if split in (None, "none") else split
    task = {
        "objects": list(objects),
        "goal": config.goal or meta.get("goal") or "positions",
        "split": split,
        "parts": list(config.parts or (("train", "test") if split else ("train",))),
    }
    check_settings(task["objects"], task["goal"], split, task["parts"], config.episodes, None, config.batch_size)
    return task


# ---------------------------------------------------------------------------------------- measure
def timing_row(timed: TimedPolicy, stats: dict[str, float] | None) -> dict[str, Any]:
    """Planning time of one evaluation: ms per ``act`` call and per episode-step, denoiser calls per call."""
    if not timed.calls:  # every episode was over at its reset (stop_on_success)
        raise RuntimeError("the planner was never called: every episode ended at its reset")
    ms = np.array([c[0] for c in timed.calls])
    per_episode = ms / np.array([c[1] for c in timed.calls])
    return {
        "act_calls": len(ms),
        "batch": max(c[1] for c in timed.calls),
        "ms_per_step_mean": float(ms.mean()),
        "ms_per_step_median": float(np.median(ms)),
        "ms_per_step_p90": float(np.percentile(ms, 90)),
        "ms_per_episode_step_mean": float(per_episode.mean()),
        "ms_per_episode_step_median": float(np.median(per_episode)),
        "act_total_s": float(ms.sum() / 1e3),
        "denoiser_calls": timed.denoiser_calls if timed.has_denoisers else None,
        "denoiser_calls_per_step": timed.denoiser_calls / len(ms) if timed.has_denoisers else None,
        "stats": stats,
    }


def evaluate_one(config: PlannersBenchConfig, label: str, policy: Policy, task: dict[str, Any], part: str, n: int):
    """Success and planning time of one planner on one (part, N)."""
    if hasattr(policy.module, "reset_stats"):
        policy.module.reset_stats()
    timed = TimedPolicy(policy)
    try:
        report = evaluate(
            timed,
            [n],
            goal=task["goal"],
            split=task["split"],
            parts=[part],
            episodes=config.episodes,
            seed=config.seed,
            stop_on_success=config.stop_on_success,
            batch_size=config.batch_size,
            progress=config.progress,
        )
    finally:
        timed.close()
    stats = getattr(policy.module, "stats", None)
    stats = stats.as_dict() if stats is not None and hasattr(stats, "as_dict") else None
    (result,) = report.results
    row = {"label": label, **result.summary()}
    row["per_episode"] = {"seeds": result.seeds, "success": result.success, "fraction_placed": result.fraction_placed}
    return {**row, **timing_row(timed, stats)}


def measure(config: PlannersBenchConfig) -> dict[str, Any]:
    """Load every planner, then evaluate each on every (part, N), the planners taking turns.

    Returns:
        ``threads``; ``task``: the objects, goal, split and parts evaluated, with the episodes, first seed,
        batch and ``stop_on_success``; ``planners``: a description per planner (kind, horizon, sampling
        steps, replan intervals, parameters, training task); ``results``: a row per (part, N) and planner
        (success and fraction placed with their 95% intervals, per-episode outcomes, planning ms per env
        step and per episode-step, denoiser calls per env step, the module's planning stats).
    """
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    policies = [load(path, device=config.device) for path in config.paths]
    labels = labels_for(config, policies)
    task = resolve_task(config, policies[0])
    for label, policy in zip(labels, policies, strict=True):
        for key in ("goal", "split"):
            trained = policy.meta.get(key, task[key])
            if trained != task[key] and not (key == "split" and trained == "none" and task[key] is None):
                print(f"note: {label} was trained on {key} {trained!r}, benchmarked on {task[key]!r}", file=sys.stderr)
    results = [
        evaluate_one(config, label, policy, task, part, n)
        for part in task["parts"]
        for n in task["objects"]
        for label, policy in zip(labels, policies, strict=True)
    ]
    return {
        "threads": torch.get_num_threads(),
        "task": {
            **task,
            "episodes": config.episodes,
            "seed": config.seed,
            "batch_size": config.batch_size or config.episodes,
            "stop_on_success": config.stop_on_success,
        },
        "planners": [describe_planner(*case) for case in zip(labels, config.paths, policies, strict=True)],
        "results": results,
    }
