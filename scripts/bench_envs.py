"""`ecrl-bench envs`: how fast the push environment steps, resets and renders.

All numbers come from one process, measured round-robin within each repeat, so ratios between them
(push vs FetchPush, env step vs raw physics) see the same machine load. Each number is the best
(fastest) or median of `--repeats` runs; garbage collection is off while a loop is timed.
Random actions are drawn up front from a seeded generator and are not timed; neither are the resets
between episodes of a stepping run.

The *physics floor* replays the exact control sequence the env applied (`data.ctrl` then
`mujoco.mj_step(model, data, nstep=SUBSTEPS)`, same model, same seed, same resets), so it simulates
the same trajectory (checked: the final `qpos` matches bit for bit) with nothing else around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from ecrl.envs import MAX_OBJECTS
from ecrl.envs.scene import SUBSTEPS, TIMESTEP
from ecrl.reporting import report_header
from ecrl.timing import random_actions, record_controls, reduce_times, time_calls, time_physics, time_steps


@dataclass(frozen=True)
class EnvsArgs:
    """Environment speed: steps/s vs number of objects, physics floor, resets, rendering, FetchPush-v4."""

    n_objects: tuple[int, ...] = (1, 3, 6, 12, 16)
    """Numbers of objects to time."""
    steps: int = 2000
    """Env steps per timed run (episodes restart at their horizon; the resets are not timed)."""
    resets: int = 100
    """Resets per timed run."""
    frames: int = 60
    """Rendered frames per timed run."""
    render_n: int = 3
    """Number of objects in the rendered scene."""
    render_sizes: tuple[int, ...] = (64, 128)
    """Square image sides (pixels) to render at."""
    repeats: int = 5
    """Timed runs per measurement; `reduce` picks one of them."""
    reduce: Literal["best", "median"] = "best"
    """Keep the fastest run (noise on a shared machine only ever adds time) or the median one."""
    seed: int = 0
    """Seed of the random actions and of the first reset of every timed run."""
    fetch: bool = True
    """Time gymnasium-robotics' FetchPush-v4 for comparison (`--no-fetch` skips it)."""
    min_speedup_vs_fetch: float = 4.0
    """Target: push-3 steps/s at least this many times FetchPush-v4's."""
    max_physics_ratio: float = 1.3
    """Target: a push-3 env step (through `gym.make`) takes at most this many times its raw physics."""
    max_reset_ms: float = 2.0
    """Target: a push-3 reset (through `gym.make`) takes at most this many milliseconds."""
    strict: bool = False
    """Exit with status 1 when a target fails."""
    out: Path = Path("results/bench_envs")
    """Output directory (created if missing): bench_envs.json, README.md, steps_per_s.png."""

    def __post_init__(self) -> None:
        if not self.n_objects or any(not 1 <= n <= MAX_OBJECTS for n in self.n_objects):
            raise ValueError(f"n_objects must be a non-empty list in 1 … {MAX_OBJECTS}, got {self.n_objects}")
        if min(self.steps, self.resets, self.frames, self.repeats) < 1:
            raise ValueError("steps, resets, frames and repeats must be positive")
        if any(not 16 <= s <= 256 for s in self.render_sizes):
            raise ValueError(f"render_sizes must be in 16 … 256 pixels, got {self.render_sizes}")


# ---------------------------------------------------------------------------------------- benchmark
def measure(args: EnvsArgs) -> dict[str, Any]:
    """Every measurement, round-robin over configurations within each repeat."""
    import ecrl.envs  # noqa: F401  (registers ecrl/Push-v0)

    envs = {n: gym.make("ecrl/Push-v0", n_objects=n) for n in args.n_objects}
    actions = {n: random_actions(env.action_space, args.steps, args.seed) for n, env in envs.items()}
    replays = {n: record_controls(env, actions[n], args.seed) for n, env in envs.items()}
    renders = {
        s: gym.make("ecrl/Push-v0", n_objects=args.render_n, render_mode="rgb_array", width=s, height=s)
        for s in args.render_sizes
    }
    for env in renders.values():  # the first render creates the GL context: not timed
        env.reset(seed=args.seed)
        env.render()
        env.unwrapped.render_segmentation()
    fetch = None
    if args.fetch:
        import gymnasium_robotics

        gym.register_envs(gymnasium_robotics)
        fetch = gym.make("FetchPush-v4")
        fetch_actions = random_actions(fetch.action_space, args.steps, args.seed)
        time_steps(fetch, fetch_actions[:100], args.seed)  # warm-up (the env checker's first-step checks)

    times: dict[str, list[float]] = {}

    def add(key: str, seconds: float) -> None:
        times.setdefault(key, []).append(seconds)

    exact = {}
    for _ in range(args.repeats):
        for n, env in envs.items():
            add(f"make/{n}", time_steps(env, actions[n], args.seed))
            add(f"unwrapped/{n}", time_steps(env.unwrapped, actions[n], args.seed))
            ctrls, ends, final = replays[n]
            seconds, replayed = time_physics(env, ctrls, ends, args.seed)
            add(f"physics/{n}", seconds)
            exact[n] = bool(np.array_equal(final, replayed))
            add(f"reset/{n}", time_calls(env.reset, args.resets))
            add(f"reset_unwrapped/{n}", time_calls(env.unwrapped.reset, args.resets))
        if fetch is not None:
            add("fetch", time_steps(fetch, fetch_actions, args.seed))
            add("fetch_reset", time_calls(fetch.reset, args.resets))
        for s, env in renders.items():
            add(f"rgb/{s}", time_calls(env.render, args.frames))
            add(f"segmentation/{s}", time_calls(env.unwrapped.render_segmentation, args.frames))

    for env in [*envs.values(), *renders.values(), *([fetch] if fetch is not None else [])]:
        env.close()
    t = {k: reduce_times(v, args.reduce) for k, v in times.items()}
    push = []
    for n in args.n_objects:
        step, bare, physics = t[f"make/{n}"], t[f"unwrapped/{n}"], t[f"physics/{n}"]
        push.append(
            {
                "n_objects": n,
                "steps_per_s": 1 / step,
                "steps_per_s_unwrapped": 1 / bare,
                "physics_steps_per_s": 1 / physics,
                "step_us": step * 1e6,
                "step_us_unwrapped": bare * 1e6,
                "physics_us": physics * 1e6,
                "physics_ratio": step / physics,
                "physics_ratio_unwrapped": bare / physics,
                "reset_ms": t[f"reset/{n}"] * 1e3,
                "reset_ms_unwrapped": t[f"reset_unwrapped/{n}"] * 1e3,
                "physics_replay_exact": exact[n],
            }
        )
    render = [
        {
            "size": s,
            "n_objects": args.render_n,
            "rgb_fps": 1 / t[f"rgb/{s}"],
            "segmentation_fps": 1 / t[f"segmentation/{s}"],
        }
        for s in args.render_sizes
    ]
    fetch_row = (
        None
        if fetch is None
        else {"steps_per_s": 1 / t["fetch"], "step_us": t["fetch"] * 1e6, "reset_ms": t["fetch_reset"] * 1e3}
    )
    return {"push": push, "fetch_push_v4": fetch_row, "render": render, "raw_seconds": times}


def check_targets(args: EnvsArgs, result: dict[str, Any]) -> list[dict[str, Any]]:
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


def plot(result: dict[str, Any], args: EnvsArgs, path: Path) -> None:
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


def write_readme(path: Path, command: str, args: EnvsArgs, result: dict[str, Any]) -> None:
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


def record_extra(args: EnvsArgs) -> dict[str, Any]:
    """Constants recorded in the JSON beside the arguments."""
    return {"reduce": args.reduce, "substeps": SUBSTEPS, "timestep": TIMESTEP}
