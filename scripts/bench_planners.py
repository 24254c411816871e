"""`ecrl-bench planners`: trained planners side by side on one task: success and planning time.

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

Examples:
    # the flat and the hierarchical planner on their training task -> results/bench_planners/
    ecrl-bench planners runs/<flat-run> runs/<hierarchical-run> --labels flat hierarchical

    # a fixed task, 20 episodes per point, on one torch thread
    ecrl-bench planners runs/<flat-run> runs/<hierarchical-run> --labels flat hierarchical \\
        --objects 4 --goal sort --episodes 20 --threads 1 --out results/diffusion_hierarchical
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
import tyro

import ecrl
from ecrl.evaluation import EVAL_SEED, check_settings, evaluate
from ecrl.policy import Policy
from ecrl.reporting import markdown_table, report_header


@dataclass(frozen=True)
class PlannersArgs:
    """Trained planners side by side on one task: success (95% Wilson CI) and planning ms per env step."""

    paths: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="PATH [PATH ...]")]
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
        from ecrl.diffusion.denoiser import EntityDenoiser

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


def labels_for(args: PlannersArgs, policies: list[Policy]) -> list[str]:
    """``--labels``, else each policy's ``meta["arch"]``, with the path added where two coincide."""
    if args.labels is not None:
        return list(args.labels)
    kinds = [str(p.meta.get("arch") or "planner") for p in policies]
    return [f"{kind} ({path})" if kinds.count(kind) > 1 else kind for kind, path in zip(kinds, args.paths, strict=True)]


def resolve_task(args: PlannersArgs, first: Policy) -> dict[str, Any]:
    """Objects, goal, split and parts: the arguments, else the first planner's training task; checked."""
    meta = first.meta
    objects = args.objects or tuple(int(n) for n in meta.get("train_n_objects") or ())
    if not objects:
        raise ValueError(f"{args.paths[0]} has no meta['train_n_objects']: pass --objects")
    split = args.split if args.split is not None else meta.get("split")
    split = None if split in (None, "none") else split
    task = {
        "objects": list(objects),
        "goal": args.goal or meta.get("goal") or "positions",
        "split": split,
        "parts": list(args.parts or (("train", "test") if split else ("train",))),
    }
    check_settings(task["objects"], task["goal"], split, task["parts"], args.episodes, None, args.batch_size)
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


def evaluate_one(args: PlannersArgs, label: str, policy: Policy, task: dict[str, Any], part: str, n: int):
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
            episodes=args.episodes,
            seed=args.seed,
            stop_on_success=args.stop_on_success,
            batch_size=args.batch_size,
            progress=args.progress,
        )
    finally:
        timed.close()
    stats = getattr(policy.module, "stats", None)
    stats = stats.as_dict() if stats is not None and hasattr(stats, "as_dict") else None
    (result,) = report.results
    row = {"label": label, **result.summary()}
    row["per_episode"] = {"seeds": result.seeds, "success": result.success, "fraction_placed": result.fraction_placed}
    return {**row, **timing_row(timed, stats)}


def measure(args: PlannersArgs) -> dict[str, Any]:
    """Load every planner, then evaluate each on every (part, N), the planners taking turns."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    policies = [ecrl.load(path, device=args.device) for path in args.paths]
    labels = labels_for(args, policies)
    task = resolve_task(args, policies[0])
    for label, policy in zip(labels, policies, strict=True):
        for key in ("goal", "split"):
            trained = policy.meta.get(key, task[key])
            if trained != task[key] and not (key == "split" and trained == "none" and task[key] is None):
                print(f"note: {label} was trained on {key} {trained!r}, benchmarked on {task[key]!r}", file=sys.stderr)
    results = [
        evaluate_one(args, label, policy, task, part, n)
        for part in task["parts"]
        for n in task["objects"]
        for label, policy in zip(labels, policies, strict=True)
    ]
    return {
        "threads": torch.get_num_threads(),
        "task": {
            **task,
            "episodes": args.episodes,
            "seed": args.seed,
            "batch_size": args.batch_size or args.episodes,
            "stop_on_success": args.stop_on_success,
        },
        "planners": [describe_planner(*case) for case in zip(labels, args.paths, policies, strict=True)],
        "results": results,
    }


# ---------------------------------------------------------------------------------------- outputs
def _setting(value: Any) -> str:
    """A planner setting for a table cell: ``5`` or ``high 5 / low 2`` (``–`` when it has none)."""
    if value is None:
        return "–"
    if isinstance(value, Mapping):
        return " / ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


def tables(result: dict[str, Any]) -> str:
    """Markdown tables: the planners, then success and planning time per (part, N) and planner."""
    header = ["planner", "kind", "horizon (env steps)", "sampling steps", "replan every", "parameters", "trained on"]
    rows = []
    for p in result["planners"]:
        horizon = p.get("horizon")
        if "subgoal_every" in p:
            horizon = f"{horizon} (subgoal every {p['subgoal_every']} × {p['subgoal_horizon']})"
        t = p["trained"]
        trained = ", ".join(f"{k} {t[k]}" for k in ("goal", "split", "train_n_objects") if k in t) or "–"
        row = [p["label"], p["kind"], _setting(horizon), _setting(p.get("sampling_steps"))]
        rows.append([*row, _setting(p.get("replan_every")), f"{p['params']:,}", trained])
    parts = [markdown_table(header, rows, align="lllllrl")]
    header = [
        "planner",
        "part",
        "N",
        "success",
        "95% CI",
        "fraction placed [95% CI]",
        "ms / env step (mean)",
        "median",
        "ms / episode-step (mean)",
        "denoiser calls / env step",
    ]
    rows = []
    for r in result["results"]:
        calls = r["denoiser_calls_per_step"]
        rows.append(
            [
                r["label"],
                r["part"],
                r["n_objects"],
                f"{r['successes']}/{r['episodes']} ({r['success_rate']:.2f})",
                "[{:.2f}, {:.2f}]".format(*r["success_ci95"]),
                "{:.2f} [{:.2f}, {:.2f}]".format(r["fraction_placed"], *r["fraction_placed_ci95"]),
                f"**{r['ms_per_step_mean']:.2f}**",
                f"{r['ms_per_step_median']:.2f}",
                f"{r['ms_per_episode_step_mean']:.3f}",
                "–" if calls is None else f"{calls:.2f}",
            ]
        )
    parts.append(markdown_table(header, rows, align="llrrrrrrrr"))
    return "\n\n".join(parts)


def plot(result: dict[str, Any], args: PlannersArgs, path: Path) -> None:
    """Success (bars, 95% Wilson CI) and mean planning ms per env step (bars; medians as dots) per planner and N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, task = result["results"], result["task"]
    labels = [p["label"] for p in result["planners"]]
    cases = list(dict.fromkeys((r["part"], r["n_objects"]) for r in rows))
    by = {(r["label"], r["part"], r["n_objects"]): r for r in rows}
    width = 0.8 / len(labels)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.8), dpi=120)
    for k, label in enumerate(labels):
        x = np.arange(len(cases)) + (k - (len(labels) - 1) / 2) * width
        case_rows = [by[(label, *case)] for case in cases]
        rate = np.array([r["success_rate"] for r in case_rows])
        ci = np.array([r["success_ci95"] for r in case_rows]).reshape(-1, 2)
        yerr = [rate - ci[:, 0], ci[:, 1] - rate]
        left.bar(x, rate, width, yerr=yerr, capsize=3, color=f"C{k}", label=label)
        right.bar(x, [r["ms_per_step_mean"] for r in case_rows], width, color=f"C{k}", label=label)
        median = [r["ms_per_step_median"] for r in case_rows]
        right.plot(x, median, "o", color="k", ms=3, label="median" if k == 0 else None)
    ms = [r["ms_per_step_mean"] for r in rows] + [r["ms_per_step_median"] for r in rows]
    if max(ms) > 30 * max(min(ms), 1e-6):  # a planner an order of magnitude slower would flatten the others
        right.set_yscale("log")
    ticks = [f"N={n}" if len(task["parts"]) == 1 else f"{part}, N={n}" for part, n in cases]
    left.set(xticks=np.arange(len(cases)), xticklabels=ticks, ylim=(0, 1.05), ylabel="success rate (95% Wilson CI)")
    left.set_title(
        f"goal {task['goal']}, "
        + (f"split {task['split']}" if task["split"] else "random objects")
        + f", {task['episodes']} episodes",
        fontsize=9,
    )
    right.set(xticks=np.arange(len(cases)), xticklabels=ticks, ylabel="planning ms / env step (mean)")
    right.set_title(f"batch {task['batch_size']} (episodes side by side), {result['threads']} thread(s)", fontsize=9)
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_readme(path: Path, command: str, args: PlannersArgs, result: dict[str, Any]) -> None:
    m, task = result["machine"], result["task"]
    where = f"split `{task['split']}` (`test`: held-out combinations)" if task["split"] else "random objects (no split)"
    end = "at the first step with every object placed" if task["stop_on_success"] else "at the horizon"
    lines = [
        *report_header("Planners side by side: success and planning time", command),
        f"Goal `{task['goal']}`, {where}; {task['episodes']} episodes per planner and row, seeds {task['seed']} … "
        f"{task['seed'] + task['episodes'] - 1} (the same episodes for every planner), {task['batch_size']} side by "
        f"side: one `policy.act` call per env step on the stacked batch. An episode ends {end}. *success*: every "
        "object placed at the episode's end (95% CI: Wilson score interval); *fraction placed*: at the episode's end "
        "(95% CI: normal approximation). *ms / env step*: wall time of one `act` call (the whole batch advances one "
        "step), mean (the amortised cost: a planner that re-plans every few steps mostly reads its current plan) and "
        "median; *ms / episode-step*: each call divided by its batch size. *Denoiser calls / env step*: "
        "`EntityDenoiser` forward passes per call, each on the whole batch. "
        f"torch {m['torch']} on {result['threads']} thread(s); machine: {m['cpus']} CPUs ({m['processor']}), "
        f"possibly shared with other jobs. Total wall-clock {result['total_wall_s']:.0f} s.",
        "",
        tables(result),
        "",
        "![success and planning time](planners.png)",
    ]
    path.write_text("\n".join(lines) + "\n")


FIGURE = "planners.png"
