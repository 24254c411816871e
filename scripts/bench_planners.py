"""`ecrl-bench planners`: trained planners side by side on one task: success and planning time.

The measurement (and what it measures, how) is :mod:`ecrl.diffusion.bench_planners`; this module writes its
tables, plot and README.

Examples:
    # the flat and the hierarchical planner on their training task -> results/bench_planners/
    ecrl-bench planners runs/<flat-run> runs/<hierarchical-run> --labels flat hierarchical

    # a fixed task, 20 episodes per point, on one torch thread
    ecrl-bench planners runs/<flat-run> runs/<hierarchical-run> --labels flat hierarchical \\
        --objects 4 --goal sort --episodes 20 --threads 1 --out results/diffusion_hierarchical
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import tyro

from ecrl.diffusion.bench_planners import PlannersBenchConfig, measure
from ecrl.eval_report import success_cells
from ecrl.reporting import markdown_table, report_header

__all__ = ["FIGURE", "PlannersArgs", "measure", "plot", "tables", "write_readme"]


@dataclass(frozen=True)
class PlannersArgs(PlannersBenchConfig):
    """Trained planners side by side on one task: success (95% Wilson CI) and planning ms per env step."""

    paths: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="PATH [PATH ...]")]
    """Planners to compare: run directories or checkpoint directories (anything `ecrl.load` accepts)."""


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
                *success_cells(r),
                f"**{r['ms_per_step_mean']:.2f}**",
                f"{r['ms_per_step_median']:.2f}",
                f"{r['ms_per_episode_step_mean']:.3f}",
                "–" if calls is None else f"{calls:.2f}",
            ]
        )
    parts.append(markdown_table(header, rows, align="llrrrrrrrr"))
    return "\n\n".join(parts)


def plot(result: dict[str, Any], args: PlannersBenchConfig, path: Path) -> None:
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


def write_readme(path: Path, command: str, args: PlannersBenchConfig, result: dict[str, Any]) -> None:
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
