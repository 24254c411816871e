"""`ecrl-bench ogbench`: the OGBench cube adapter's step time against OGBench's own env, and play data speed.

For each number of cubes, three envs step the same seeded random actions from the same seeded
reset of the same evaluation task (`task_id`), so they simulate the same trajectory: OGBench's own
env (`cube-<size>-v0`, unwrapped: its `step` alone), the adapter unwrapped (`OGBenchCubeEnv`:
OGBench's step plus entity rows and reward) and the adapter through `gym.make` (what users get);
the final states of OGBench's env and the adapter's are checked to be equal, bit for bit.
Their steps are interleaved one by one (in a rotating order) and each is timed on its own, so that a
shared machine's changing load falls on all three alike. The target is on the unwrapped pair. Runs
are shorter than an episode, so no reset is timed.
*Play* times OGBench's plan oracle driving the adapter in play mode (`CubePlayOracle`, what
`ecrl-collect --env ogbench-cube --play` runs per step, without the dataset writing).

Needs the extra `ecrl[ogbench]`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from ecrl.reporting import markdown_table, report_header
from ecrl.timing import gc_paused, random_actions, reduce_times


@dataclass(frozen=True)
class OGBenchArgs:
    """OGBench cubes: adapter step time vs OGBench's own, steps/s per number of cubes, play data steps/s."""

    n_cubes: tuple[int, ...] = (2, 3, 4, 8)
    """Numbers of cubes to time (OGBench's sizes: 1, 2, 3, 4, 8)."""
    steps: int = 400
    """Env steps per timed run (shorter than OGBench's episodes: no reset is timed)."""
    play_steps: int = 600
    """Steps of play data (oracle + adapter) timed per repeat, with `play_n` cubes."""
    play_n: int = 2
    """Number of cubes of the play timing."""
    task_id: int = 2
    """OGBench evaluation task the step timings run on."""
    repeats: int = 3
    """Timed runs per measurement; `reduce` picks one of them."""
    reduce: Literal["best", "median"] = "best"
    """Keep the fastest run (noise on a shared machine only ever adds time) or the median one."""
    seed: int = 0
    """Seed of the random actions and of the resets."""
    max_ratio: float = 1.1
    """Target: an adapter step takes at most this many times OGBench's own step (unwrapped, every N)."""
    strict: bool = False
    """Exit with status 1 when a target fails."""
    out: Path = Path("results/bench_ogbench")
    """Output directory (created if missing): bench_ogbench.json, README.md, steps_per_s.png."""

    def __post_init__(self) -> None:
        from ecrl.envs.ogbench import N_TASKS, check_n_cubes

        if not self.n_cubes:
            raise ValueError("n_cubes must name at least one number of cubes")
        for n in (*self.n_cubes, self.play_n):
            check_n_cubes(n)
        if min(self.steps, self.repeats) < 1 or self.play_steps < 0:
            raise ValueError("steps and repeats must be positive, play_steps >= 0")
        if not 1 <= self.task_id <= N_TASKS:
            raise ValueError(f"task_id must be in 1 … {N_TASKS}, got {self.task_id}")


class _OnTask:
    """OGBench's own env, reset on one evaluation task (what the adapter passes it)."""

    def __init__(self, env: Any, task_id: int) -> None:
        self.env, self.task_id = env, task_id

    def reset(self, seed: int | None = None) -> Any:
        return self.env.reset(seed=seed, options={"task_id": self.task_id})

    def step(self, action: np.ndarray) -> Any:
        return self.env.step(action)


def time_interleaved(envs: dict[str, Any], actions: np.ndarray, seed: int) -> dict[str, float]:
    """Seconds per step of each env over ``actions: (T, A)`` from ``reset(seed)``, steps interleaved."""
    names = list(envs)

    def run() -> dict[str, float]:
        for env in envs.values():
            env.reset(seed=seed)
        total = dict.fromkeys(names, 0.0)
        for t, action in enumerate(actions):
            for k in range(len(names)):
                name = names[(t + k) % len(names)]
                start = time.perf_counter()
                envs[name].step(action)
                total[name] += time.perf_counter() - start
        return total

    return {name: seconds / len(actions) for name, seconds in gc_paused(run).items()}


def time_play(n: int, steps: int, seed: int) -> float:
    """Seconds per step of play data: OGBench's plan oracle acting on the adapter in play mode."""
    from ecrl.envs.ogbench import CubePlayOracle

    env = gym.make("ecrl/OGBenchCube-v0", n_cubes=n, mode="play", max_episode_steps=steps)
    oracle, active = CubePlayOracle(), np.ones(1, bool)

    def run() -> float:
        obs, _ = env.reset(seed=seed)
        start = time.perf_counter()
        oracle.reset([env], [seed])
        for _ in range(steps):
            action = oracle.act({k: v[None] for k, v in obs.items()}, active)
            obs, *_ = env.step(action[0])
        return time.perf_counter() - start

    seconds = gc_paused(run) / steps
    env.close()
    return seconds


def measure(args: OGBenchArgs) -> dict[str, Any]:
    """Every measurement, round-robin over the three envs of each size within each repeat."""
    import ecrl.envs  # noqa: F401  (registers the adapter ids)
    from ecrl.envs.ogbench import CUBE_ENV_TYPES, import_ogbench

    import_ogbench()
    rows, play = [], []
    for n in args.n_cubes:
        own = gym.make(f"cube-{CUBE_ENV_TYPES[n]}-v0", disable_env_checker=True).unwrapped
        made = [gym.make("ecrl/OGBenchCube-v0", n_cubes=n, task_id=args.task_id) for _ in range(2)]
        envs = {"ogbench": _OnTask(own, args.task_id), "adapter": made[0].unwrapped, "adapter_make": made[1]}
        actions = random_actions(made[0].action_space, args.steps, args.seed)
        times: dict[str, list[float]] = {k: [] for k in envs}
        for _ in range(args.repeats):
            for key, seconds in time_interleaved(envs, actions, args.seed).items():
                times[key].append(seconds)
        t = {k: reduce_times(v, args.reduce) for k, v in times.items()}
        rows.append(
            {
                "n_cubes": n,
                "ogbench_step_us": t["ogbench"] * 1e6,
                "adapter_step_us": t["adapter"] * 1e6,
                "adapter_make_step_us": t["adapter_make"] * 1e6,
                "ogbench_steps_per_s": 1 / t["ogbench"],
                "adapter_steps_per_s": 1 / t["adapter"],
                "adapter_make_steps_per_s": 1 / t["adapter_make"],
                "ratio": t["adapter"] / t["ogbench"],
                "ratio_make": t["adapter_make"] / t["ogbench"],
                "raw_seconds": times,
            }
        )
        if not np.array_equal(own._data.qpos, made[0].unwrapped.ogbench_env._data.qpos):
            raise RuntimeError(f"cube-{n}: the adapter's simulation left OGBench's trajectory")
        for env in (own, *made):
            env.close()
    if args.play_steps:
        seconds = reduce_times(
            [time_play(args.play_n, args.play_steps, args.seed) for _ in range(args.repeats)], args.reduce
        )
        play.append({"n_cubes": args.play_n, "steps": args.play_steps, "steps_per_s": 1 / seconds})
    return {"steps": rows, "play": play}


def check_targets(args: OGBenchArgs, result: dict[str, Any]) -> list[dict[str, Any]]:
    """PASS/FAIL: the adapter's step time against OGBench's, for every number of cubes."""
    return [
        {
            "target": f"cube-{r['n_cubes']} adapter step <= {args.max_ratio:g}x OGBench's own step",
            "value": f"{r['ratio']:.3f}x",
            "pass": r["ratio"] <= args.max_ratio,
        }
        for r in result["steps"]
    ]


def tables(result: dict[str, Any]) -> str:
    """Markdown tables: step times per number of cubes, play data speed, targets."""
    lines = [
        markdown_table(
            [
                "cubes",
                "OGBench steps/s",
                "adapter steps/s",
                "adapter steps/s (gym.make)",
                "OGBench step µs",
                "adapter step µs",
                "adapter / OGBench",
                "adapter (gym.make) / OGBench",
            ],
            [
                [
                    r["n_cubes"],
                    f"{r['ogbench_steps_per_s']:,.0f}",
                    f"{r['adapter_steps_per_s']:,.0f}",
                    f"{r['adapter_make_steps_per_s']:,.0f}",
                    f"{r['ogbench_step_us']:,.0f}",
                    f"{r['adapter_step_us']:,.0f}",
                    f"{r['ratio']:.3f}",
                    f"{r['ratio_make']:.3f}",
                ]
                for r in result["steps"]
            ],
        )
    ]
    if result["play"]:
        lines.append(
            markdown_table(
                ["play data (oracle + adapter)", "steps timed", "steps/s"],
                [[f"cube-{p['n_cubes']}", p["steps"], f"{p['steps_per_s']:,.0f}"] for p in result["play"]],
            )
        )
    if result.get("targets"):
        lines.append(
            markdown_table(
                ["target", "value", "result"],
                [[t["target"], t["value"], "PASS" if t["pass"] else "FAIL"] for t in result["targets"]],
            )
        )
    return "\n\n".join(lines)


def plot(result: dict[str, Any], args: OGBenchArgs, path: Path) -> None:
    """Steps/s vs number of cubes: OGBench's own env and the adapter."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n_cubes"] for r in result["steps"]]
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=120)
    ax.plot(ns, [r["ogbench_steps_per_s"] for r in result["steps"]], "k--", marker=".", label="OGBench's own env")
    ax.plot(ns, [r["adapter_steps_per_s"] for r in result["steps"]], marker="o", label="adapter, unwrapped")
    ax.plot(ns, [r["adapter_make_steps_per_s"] for r in result["steps"]], marker="s", ms=4, label="adapter, gym.make")
    ax.set(xlabel="number of cubes", ylabel="env steps / s (one core)", xticks=ns)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_readme(path: Path, command: str, args: OGBenchArgs, result: dict[str, Any]) -> None:
    m = result["machine"]
    lines = [
        *report_header("OGBench cubes: adapter speed", command),
        f"{args.reduce.capitalize()} of {args.repeats} runs each; {args.steps} seeded random-action steps per run on "
        f"evaluation task {args.task_id}, the steps of the three envs of a size interleaved one by one and timed "
        f"each on its own, in one process. Machine: "
        f"{m['cpus']} CPUs ({m['processor']}), mujoco {m['mujoco']}, numpy {m['numpy']}.",
        "",
        tables(result),
        "",
        "![steps/s vs cubes](steps_per_s.png)",
    ]
    path.write_text("\n".join(lines) + "\n")


FIGURE = "steps_per_s.png"
JSON_NAME = "bench_ogbench.json"


def record_extra(args: OGBenchArgs) -> dict[str, Any]:
    """Constants recorded in the JSON beside the arguments."""
    from ecrl.envs.ogbench import EPISODE_STEPS

    return {"reduce": args.reduce, "episode_steps": {str(n): EPISODE_STEPS[n] for n in args.n_cubes}}
