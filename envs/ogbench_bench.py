"""The OGBench cube adapter's step time against OGBench's own env, and play data speed: the measurement of
``ecrl-bench ogbench``.

:func:`measure` takes an :class:`OGBenchBenchConfig` and returns the numbers; the CLI
(:mod:`ecrl.scripts.bench_ogbench`) checks the target and writes the tables, plot and README.

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

Needs the extra `ecrl[ogbench]` to measure (OGBench is imported when :func:`measure` runs, not here).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from ecrl.envs.ogbench import CUBE_ENV_TYPES, N_TASKS, CubePlayOracle, check_n_cubes, import_ogbench
from ecrl.timing import gc_paused, random_actions, reduce_times

__all__ = ["OGBenchBenchConfig", "measure", "time_interleaved", "time_play"]


@dataclass(frozen=True)
class OGBenchBenchConfig:
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


def _time_steps(config: OGBenchBenchConfig, n: int) -> dict[str, Any]:
    """The row of ``n`` cubes: step times and rates of OGBench's env and the adapter, unwrapped and made."""
    own = gym.make(f"cube-{CUBE_ENV_TYPES[n]}-v0", disable_env_checker=True).unwrapped
    made = [gym.make("ecrl/OGBenchCube-v0", n_cubes=n, task_id=config.task_id) for _ in range(2)]
    envs = {"ogbench": _OnTask(own, config.task_id), "adapter": made[0].unwrapped, "adapter_make": made[1]}
    actions = random_actions(made[0].action_space, config.steps, config.seed)
    times: dict[str, list[float]] = {k: [] for k in envs}
    for _ in range(config.repeats):
        for key, seconds in time_interleaved(envs, actions, config.seed).items():
            times[key].append(seconds)
    if not np.array_equal(own._data.qpos, made[0].unwrapped.ogbench_env._data.qpos):
        raise RuntimeError(f"cube-{n}: the adapter's simulation left OGBench's trajectory")
    for env in (own, *made):
        env.close()
    t = {k: reduce_times(v, config.reduce) for k, v in times.items()}
    return {
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


def measure(config: OGBenchBenchConfig) -> dict[str, Any]:
    """Every measurement, round-robin over the three envs of each size within each repeat.

    Returns:
        ``steps``: a row per number of cubes (step µs and steps/s of OGBench's env, the adapter unwrapped
        and through ``gym.make``, their ratios to OGBench's, every repeat's seconds); ``play``: play data
        steps/s (empty with ``play_steps=0``).

    Raises:
        ImportError: OGBench is not installed (the extra ``ecrl[ogbench]``).
        RuntimeError: the adapter's simulation left OGBench's trajectory.
    """
    import_ogbench()
    rows = [_time_steps(config, n) for n in config.n_cubes]
    play = []
    if config.play_steps:
        seconds = reduce_times(
            [time_play(config.play_n, config.play_steps, config.seed) for _ in range(config.repeats)], config.reduce
        )
        play.append({"n_cubes": config.play_n, "steps": config.play_steps, "steps_per_s": 1 / seconds})
    return {"steps": rows, "play": play}
