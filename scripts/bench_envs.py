"""`ecrl-bench envs`: how fast the push environment steps, resets and renders.

The measurement (and what it times, how) is :mod:`ecrl.envs.bench`; this module checks its targets and
writes its tables, plot and README.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ecrl.envs.bench import EnvsBenchConfig, measure
from ecrl.envs.scene import SUBSTEPS, TIMESTEP
from ecrl.reporting import report_header

__all__ = [
    "FIGURE",
    "JSON_NAME",
    "check_targets",
    "measure",
    "plot",
    "record_extra",
    "tables",
    "write_readme",
]


def check_targets(args: EnvsBenchConfig, result: dict[str, Any]) -> list[dict[str, Any]]:
    """PASS/FAIL per target, on the push row with 3 objects (when it was measured)."""
    row = next((r for r in result["push"] if r["n_objects"] == 3), None)
    if row is None:
        return []
    targets = []
    if result["fetch_push_v4"] is not None:
        speedup = row["steps_per_s"] / result["fetch_push_v4"]["steps_per_s"]
        targets.append(
            {
                "target": f"push-3 steps/s >= {args.min_speedup_vs_fetch:g}x FetchPush-v4",
                "value": f"{speedup:.1f}x",
                "pass": speedup >= args.min_speedup_vs_fetch,
            }
        )
    targets.append(
        {
            "target": f"push-3 step <= {args.max_physics_ratio:g}x raw physics of its {SUBSTEPS} substeps",
            "value": f"{row['physics_ratio']:.2f}x",
            "pass": row["physics_ratio"] <= args.max_physics_ratio,
        }
    )
    targets.append(
        {
            "target": f"push-3 reset <= {args.max_reset_ms:g} ms",
            "value": f"{row['reset_ms']:.3f} ms",
            "pass": row["reset_ms"] <= args.max_reset_ms,
        }
    )
    return targets


# ---------------------------------------------------------------------------------------- outputs
def tables(result: dict[str, Any]) -> str:
    """Markdown tables: push per N, FetchPush, rendering, targets."""
    lines = [
        "| N | steps/s (gym.make) | steps/s (unwrapped) | physics floor steps/s | step µs | physics µs | step / physics (make) | step / physics (unwrapped) | reset ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["push"]:
        lines.append(
            f"| {r['n_objects']} | {r['steps_per_s']:,.0f} | {r['steps_per_s_unwrapped']:,.0f} | {r['physics_steps_per_s']:,.0f} "
            f"| {r['step_us']:.1f} | {r['physics_us']:.1f} | {r['physics_ratio']:.2f} | {r['physics_ratio_unwrapped']:.2f} | {r['reset_ms']:.3f} |"
        )
    f = result["fetch_push_v4"]
    if f is not None:
        lines += ["", "| FetchPush-v4 | steps/s | step µs | reset ms |", "|---|---:|---:|---:|"]
        lines.append(f"| gym.make | {f['steps_per_s']:,.0f} | {f['step_us']:.1f} | {f['reset_ms']:.3f} |")
    lines += ["", "| render (N objects) | size | rgb fps | segmentation fps |", "|---|---:|---:|---:|"]
    for r in result["render"]:
        lines.append(
            f"| push-{r['n_objects']} | {r['size']}x{r['size']} | {r['rgb_fps']:,.0f} | {r['segmentation_fps']:,.0f} |"
        )
    if result["targets"]:
        lines += ["", "| target | value | result |", "|---|---:|---|"]
        lines += [f"| {t['target']} | {t['value']} | {'PASS' if t['pass'] else 'FAIL'} |" for t in result["targets"]]
    return "\n".join(lines)


def plot(result: dict[str, Any], args: EnvsBenchConfig, path: Path) -> None:
    """Steps/s vs N (log scale) with the physics floor and FetchPush-v4 as reference lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n_objects"] for r in result["push"]]
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=120)
    ax.plot(
        ns,
        [r["physics_steps_per_s"] for r in result["push"]],
        "k--",
        marker=".",
        label=f"physics floor ({SUBSTEPS} × mj_step)",
    )
    ax.plot(ns, [r["steps_per_s_unwrapped"] for r in result["push"]], marker="s", ms=4, label="push, unwrapped")
    ax.plot(ns, [r["steps_per_s"] for r in result["push"]], marker="o", label="push, gym.make")
    if result["fetch_push_v4"] is not None:
        ax.axhline(result["fetch_push_v4"]["steps_per_s"], color="tab:red", ls=":", label="FetchPush-v4")
    ax.set(xlabel="number of objects N", ylabel="env steps / s (one core)", yscale="log", xticks=ns)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_readme(path: Path, command: str, args: EnvsBenchConfig, result: dict[str, Any]) -> None:
    m = result["machine"]
    lines = [
        *report_header("Environment speed", command),
        f"{args.reduce.capitalize()} of {args.repeats} runs each; {args.steps} random-action steps per run "
        f"(resets between episodes not timed), {args.resets} resets, {args.frames} frames. *Physics floor*: the "
        f"same control sequence replayed through `mujoco.mj_step(model, data, nstep={SUBSTEPS})` on the env's own "
        f"model (timestep {TIMESTEP} s). Machine: {m['cpus']} CPUs ({m['processor']}), mujoco {m['mujoco']}, "
        f"gymnasium {m['gymnasium']}, numpy {m['numpy']}, MUJOCO_GL={m['mujoco_gl']}.",
        "",
        tables(result),
        "",
        "![steps/s vs N](steps_per_s.png)",
    ]
    path.write_text("\n".join(lines) + "\n")


FIGURE = "steps_per_s.png"
JSON_NAME = "bench_envs.json"


def record_extra(args: EnvsBenchConfig) -> dict[str, Any]:
    """Constants recorded in the JSON beside the arguments."""
    return {"reduce": args.reduce, "substeps": SUBSTEPS, "timestep": TIMESTEP}
