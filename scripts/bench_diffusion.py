"""`ecrl-bench diffusion`: how fast the diffusion planner plans and trains on a CPU.

The measurement (and what it times, how) is :mod:`ecrl.diffusion.bench`; this module checks its target and
writes its tables, plot and README.

Examples:
    # random weights in the push task at N=3 and 12 -> results/bench_diffusion/
    ecrl-bench diffusion --threads 1

    # OGBench's cubes: a planner trained on play data, planning ms per env step and env steps/s with
    # planning at 2, 3, 4 and 8 cubes, training windows/s on the play data (extra ecrl[ogbench])
    ecrl-bench diffusion --env ogbench-cube --n-objects 2 3 4 8 --settings 8 5 4 \\
        --checkpoint <run>/final --dataset <play data> --threads 1 --out results/bench_ogbench_planning
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ecrl.diffusion.bench import DiffusionBenchConfig, measure
from ecrl.reporting import markdown_table, report_header, targets_table

__all__ = ["FIGURE", "check_targets", "measure", "plot", "tables", "write_readme"]


# EC-Diffuser (Qi et al., ICLR 2025): ~20 ms per denoiser call on a GPU, 5-100 calls per env step.
ANCHOR_CALL_MS, ANCHOR_CALLS = 20.0, (5, 100)


def check_targets(args: DiffusionBenchConfig, result: dict[str, Any]) -> list[dict[str, Any]]:
    """PASS/FAIL: amortised planning ms per env step of the first setting at the first N."""
    row = result["latency"][0]
    h, s, r = row["horizon"], row["sampling_steps"], row["replan_every"]
    ms = row["per_step_ms"]
    return [
        {
            "target": f"planning per env step, {row['env']}, N={row['n_objects']}, H={h}, {s} sampling steps, "
            f"replan every {r}: "
            f"<= {args.max_ms:g} ms",
            "value": f"{ms:.2f} ms",
            "pass": ms <= args.max_ms,
        }
    ]


# ---------------------------------------------------------------------------------------- outputs
# Columns of each table: (header, key, format); the plain-text columns are left-aligned.
_LATENCY = (
    ("env", "env", "{}"),
    ("N", "n_objects", "{}"),
    ("horizon H", "horizon", "{}"),
    ("sampling steps", "sampling_steps", "{}"),
    ("replan every", "replan_every", "{}"),
    ("denoiser calls / step", "denoiser_calls_per_step", "{:g}"),
    ("plan median ms", "plan_median_ms", "{:.2f}"),
    ("plan p90 ms", "plan_p90_ms", "{:.2f}"),
    ("plan min ms", "plan_min_ms", "{:.2f}"),
    ("per step ms (amortised)", "per_step_ms", "**{:.2f}**"),
    ("per step mean ms", "per_step_mean_ms", "{:.2f}"),
    ("env step ms", "env_step_median_ms", "{:.3f}"),
    ("env steps/s with planning", "steps_per_s_with_planning", "{:.1f}"),
    ("vs reference", "per_step_vs_ref", "{:.1f}x"),
)
_DENOISER = (
    ("denoiser call, batch 1: env", "env", "{}"),
    ("N", "n_objects", "{}"),
    ("horizon H", "horizon", "{}"),
    ("tokens", "tokens", "{}"),
    ("median ms", "median_ms", "{:.3f}"),
    ("p90 ms", "p90_ms", "{:.3f}"),
)
_TRAINING = (
    ("training: env", "env", "{}"),
    ("horizon H", "horizon", "{}"),
    ("batch", "batch", "{}"),
    ("N", "n_objects", "{}"),
    ("windows", "windows", "{}"),
    ("windows/s (best)", "windows_per_s_best", "{:.0f}"),
    ("windows/s (median)", "windows_per_s_median", "{:.0f}"),
    ("ms / step", "ms_per_step_median", "{:.1f}"),
)


def _table(columns: tuple[tuple[str, str, str], ...], rows: list[dict[str, Any]]) -> str:
    align = "".join("l" if key in ("env", "windows") else "r" for _, key, _ in columns)
    cells = [[fmt.format(r[key]) for _, key, fmt in columns] for r in rows]
    return markdown_table([header for header, _, _ in columns], cells, align=align)


def tables(result: dict[str, Any]) -> str:
    """Markdown tables: latency per env step, denoiser call, training windows/s, targets."""
    ref = result["reference"]
    return "\n\n".join(
        [
            _table(_LATENCY, result["latency"]),
            f"Reference ({ref['label']}), same loops: median {ref['median_ms']:.3f} ms, p90 {ref['p90_ms']:.3f} ms.",
            _table(_DENOISER, result["denoiser_call"]),
            _table(_TRAINING, result["training"]),
            targets_table(result["targets"]),
        ]
    )


def plot(result: dict[str, Any], args: DiffusionBenchConfig, path: Path) -> None:
    """Planning ms per env step per setting and N (log scale, target and EC-Diffuser anchor), and training windows/s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.6), dpi=120, gridspec_kw={"width_ratios": [2, 1]})
    latency = result["latency"]
    settings = list(dict.fromkeys((r["horizon"], r["sampling_steps"], r["replan_every"]) for r in latency))
    ns = list(dict.fromkeys(r["n_objects"] for r in latency))
    width = 0.8 / len(ns)
    for k, n in enumerate(ns):
        by = {(r["horizon"], r["sampling_steps"], r["replan_every"]): r for r in latency if r["n_objects"] == n}
        x = np.arange(len(settings)) + (k - (len(ns) - 1) / 2) * width
        left.bar(x, [by[s]["per_step_ms"] for s in settings], width, label=f"N={n}")
    left.axhline(args.max_ms, color="k", ls=":", label=f"target, N={ns[0]} ({args.max_ms:g} ms)")
    lo, hi = (ANCHOR_CALL_MS * c for c in ANCHOR_CALLS)
    left.axhspan(lo, hi, color="tab:red", alpha=0.12, label="EC-Diffuser, GPU (5-100 calls x 20 ms)")
    left.set_yscale("log")
    left.set(
        xticks=np.arange(len(settings)),
        xticklabels=[f"H={h}, S={s}, R={r}" for h, s, r in settings],
        ylabel="planning ms / env step (amortised)",
        title=f"{result['env_id']}, batch 1, {result['threads']} thread(s), {result['weights']} weights",
    )
    left.legend(fontsize=7, loc="upper left")
    training = result["training"]
    x = np.arange(len(training))
    right.bar(x, [r[f"windows_per_s_{args.reduce}"] for r in training], 0.6)
    right.set(
        xticks=x,
        xticklabels=[f"H={r['horizon']}" for r in training],
        ylabel=f"training windows / s ({args.reduce})",
        title=f"{training[0]['env']}, batch {args.train_batch}, N={training[0]['n_objects']}",
    )
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def planning_env(result: dict[str, Any]) -> str:
    """The planning env in words, for the README."""
    if result["env"] == "ogbench-cube":
        return (
            f"`{result['env_id']}` (OGBench's cube env through the adapter: a UR5e arm, N cubes, task mode, "
            f"evaluation task {result['task_id']}; 5-D actions, spatial state)"
        )
    return f"`{result['env_id']}` (the planar pusher, N objects; 2-D actions, planar state)"


def write_readme(path: Path, command: str, args: DiffusionBenchConfig, result: dict[str, Any]) -> None:
    m, d = result["machine"], result["denoiser"]
    lines = [
        *report_header("Diffusion planner speed", command),
        f"Denoiser: width {d['width']}, {d['heads']} heads, {d['blocks']} blocks, MLP ratio {d['mlp_ratio']}, "
        f"{d['diffusion_steps']} noise levels; {result['weights']} weights; classifier-free guidance "
        f"{result['guidance']:g} (not 1: conditional and goal-free passes in one batch of 2). Planning: `policy.act(obs)` of the "
        f"`DiffusionPlanner` behind `planner_policy`, batch 1, in {planning_env(result)}, "
        f"{result['latency'][0]['steps']} timed env steps per row; a plan costs `sampling steps` denoiser calls (DDIM) and is re-sampled every "
        f"`replan every` steps. **Per step (amortised)** = (median planning call + (replan every − 1) × median "
        f"plan-reading call) / replan every; *per step mean* is the plain mean of all calls; *plan min* is the fastest "
        f"planning call (closest to the cost on an idle core). Env step: `env.step` of "
        f"`gym.make` (median); *env steps/s with planning* = 1000 / (per step + env step ms), batch 1, resets not "
        f"counted. Reference: one {result['reference']['label']} call after every env step; *vs reference* = "
        f"per step / its median in the same rows (less sensitive to machine load than milliseconds). Training: the `ecrl-train-diffusion` "
        f"step (loss, backward, clipping, AdamW, EMA) on batches built before timing, {args.train_steps} steps × "
        f"{args.repeats} repeats per horizon. Anchor: EC-Diffuser spends about {ANCHOR_CALL_MS:g} ms per denoiser call on a GPU and makes "
        f"{ANCHOR_CALLS[0]}–{ANCHOR_CALLS[1]} calls per env step. torch {m['torch']} on {result['threads']} "
        f"thread(s); machine: {m['cpus']} CPUs ({m['processor']}), shared with other jobs.",
        "",
        tables(result),
        "",
        "![planning latency and training throughput](speed.png)",
    ]
    path.write_text("\n".join(lines) + "\n")


FIGURE = "speed.png"
