"""`ecrl-bench envs`: how fast the push and Fetch environments step, reset and render.

The measurement (and what it times, how) is :mod:`ecrl.envs.bench`; this module checks its targets and
writes its tables, plot and README.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ecrl.envs import fetch_scene
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
    """PASS/FAIL per target: push on its row with 3 objects, Fetch on its row with 1 object and its resets
    (each when it was measured)."""
    return _push_targets(args, result) + _fetch_targets(args, result)


def _target(target: str, value: str, passed: bool) -> dict[str, Any]:
    return {"target": target, "value": value, "pass": bool(passed)}


def _push_targets(args: EnvsBenchConfig, result: dict[str, Any]) -> list[dict[str, Any]]:
    row = next((r for r in result["push"] if r["n_objects"] == 3), None)
    if row is None:
        return []
    targets = []
    if result["fetch_push_v4"] is not None:
        speedup = row["steps_per_s"] / result["fetch_push_v4"]["steps_per_s"]
        targets.append(
            _target(
                f"push-3 steps/s >= {args.min_speedup_vs_fetch:g}x FetchPush-v4",
                f"{speedup:.1f}x",
                speedup >= args.min_speedup_vs_fetch,
            )
        )
    ratio, reset = row["physics_ratio"], row["reset_ms"]
    return [
        *targets,
        _target(
            f"push-3 step <= {args.max_physics_ratio:g}x raw physics of its {SUBSTEPS} substeps",
            f"{ratio:.2f}x",
            ratio <= args.max_physics_ratio,
        ),
        _target(f"push-3 reset <= {args.max_reset_ms:g} ms", f"{reset:.3f} ms", reset <= args.max_reset_ms),
    ]


def _fetch_targets(args: EnvsBenchConfig, result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = result.get("fetch") or []
    one = next((r for r in rows if r["n_objects"] == 1), None)
    targets = []
    if one is not None and result.get("fetch_pick_and_place_v4") is not None:
        ratio = one["steps_per_s"] / result["fetch_pick_and_place_v4"]["steps_per_s"]
        targets.append(
            _target(
                f"fetch-1 steps/s >= {args.min_fetch_ratio:g}x FetchPickAndPlace-v4",
                f"{ratio:.2f}x",
                ratio >= args.min_fetch_ratio,
            )
        )
    if one is not None:
        ratio = one["physics_ratio"]
        targets.append(
            _target(
                f"fetch-1 step <= {args.max_fetch_physics_ratio:g}x raw physics of its {fetch_scene.SUBSTEPS} substeps",
                f"{ratio:.2f}x",
                ratio <= args.max_fetch_physics_ratio,
            )
        )
    if rows:
        worst = max(rows, key=lambda r: r["reset_ms"])
        targets.append(
            _target(
                f"fetch reset <= {args.max_fetch_reset_ms:g} ms at every N",
                f"{worst['reset_ms']:.3f} ms (N = {worst['n_objects']})",
                worst["reset_ms"] <= args.max_fetch_reset_ms,
            )
        )
    return targets


# ---------------------------------------------------------------------------------------- outputs
def _env_table(name: str, rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"| {name}: N | steps/s (gym.make) | steps/s (unwrapped) | physics floor steps/s | step µs | physics µs | step / physics (make) | step / physics (unwrapped) | reset ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n_objects']} | {r['steps_per_s']:,.0f} | {r['steps_per_s_unwrapped']:,.0f} | {r['physics_steps_per_s']:,.0f} "
            f"| {r['step_us']:.1f} | {r['physics_us']:.1f} | {r['physics_ratio']:.2f} | {r['physics_ratio_unwrapped']:.2f} | {r['reset_ms']:.3f} |"
        )
    return lines


def tables(result: dict[str, Any]) -> str:
    """Markdown tables: push and Fetch per N, gymnasium-robotics' references, rendering, targets."""
    lines = _env_table("push", result["push"])
    if result.get("fetch"):
        lines += ["", *_env_table("fetch (pick_place)", result["fetch"])]
    refs = [
        (name, result.get(key))
        for name, key in (("FetchPush-v4", "fetch_push_v4"), ("FetchPickAndPlace-v4", "fetch_pick_and_place_v4"))
    ]
    refs = [(name, f) for name, f in refs if f is not None]
    if refs:
        lines += ["", "| gymnasium-robotics (gym.make) | steps/s | step µs | reset ms |", "|---|---:|---:|---:|"]
        lines += [
            f"| {name} | {f['steps_per_s']:,.0f} | {f['step_us']:.1f} | {f['reset_ms']:.3f} |" for name, f in refs
        ]
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
    """Steps/s vs N (log scale) for push and the Fetch arm, each with its physics floor, and gymnasium-robotics'
    FetchPush-v4 and FetchPickAndPlace-v4 as reference lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8), dpi=120)
    ns: set[int] = set()
    for kind, substeps, colour in (("push", SUBSTEPS, "tab:blue"), ("fetch", fetch_scene.SUBSTEPS, "tab:green")):
        rows = result.get(kind) or []
        if not rows:
            continue
        x = [r["n_objects"] for r in rows]
        ns.update(x)
        floor = [r["physics_steps_per_s"] for r in rows]
        ax.plot(x, floor, "--", color=colour, marker=".", label=f"{kind} physics floor ({substeps} × mj_step)")
        ax.plot(x, [r["steps_per_s"] for r in rows], color=colour, marker="o", label=f"{kind}, gym.make")
    for key, label, colour in (
        ("fetch_push_v4", "FetchPush-v4", "tab:red"),
        ("fetch_pick_and_place_v4", "FetchPickAndPlace-v4", "tab:purple"),
    ):
        if result.get(key) is not None:
            ax.axhline(result[key]["steps_per_s"], color=colour, ls=":", label=label)
    ax.set(xlabel="number of objects N", ylabel="env steps / s (one core)", yscale="log", xticks=sorted(ns))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_readme(path: Path, command: str, args: EnvsBenchConfig, result: dict[str, Any]) -> None:
    m = result["machine"]
    lines = [
        *report_header("Environment speed", command),
        f"{args.reduce.capitalize()} of {args.repeats} runs each; {args.steps} random-action steps per run "
        f"(resets between episodes not timed), {args.resets} resets, {args.frames} frames. *Physics floor*: the "
        f"same set points replayed through `mujoco.mj_step(model, data, nstep=substeps)` on the env's own model "
        f"(push: {SUBSTEPS} substeps of {TIMESTEP} s; Fetch, `ecrl/FetchPickPlace-v0`: its controls and gripper mocap "
        f"target, {fetch_scene.SUBSTEPS} substeps of {fetch_scene.TIMESTEP} s, as gymnasium-robotics' Fetch envs). Machine: {m['cpus']} CPUs ({m['processor']}), mujoco {m['mujoco']}, "
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
    return {
        "reduce": args.reduce,
        "substeps": SUBSTEPS,
        "timestep": TIMESTEP,
        "fetch_substeps": fetch_scene.SUBSTEPS,
        "fetch_timestep": fetch_scene.TIMESTEP,
    }
