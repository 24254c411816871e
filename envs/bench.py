"""How fast the push environment steps, resets and renders: the measurement of ``ecrl-bench envs``.

:func:`measure` takes an :class:`EnvsBenchConfig` and returns the numbers; the CLI
(:mod:`ecrl.scripts.bench_envs`) checks the targets and writes the tables, plot and README.

All numbers come from one process, measured round-robin within each repeat, so ratios between them
(push vs FetchPush, env step vs raw physics) see the same machine load. Each number is the best
(fastest) or median of `repeats` runs; garbage collection is off while a loop is timed.
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

from ecrl.envs import MAX_OBJECTS  # importing ecrl.envs registers ecrl/Push-v0
from ecrl.timing import random_actions, record_controls, reduce_times, time_calls, time_physics, time_steps

__all__ = ["EnvsBenchConfig", "measure"]


@dataclass(frozen=True)
class EnvsBenchConfig:
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


# ---------------------------------------------------------------------------------------- set-up
class _Cases:
    """What one benchmark times: push envs per N (with their actions and recorded controls), render envs per
    size, and FetchPush-v4 (``None`` without ``config.fetch``)."""

    def __init__(self, config: EnvsBenchConfig) -> None:
        seed = config.seed
        self.envs = {n: gym.make("ecrl/Push-v0", n_objects=n) for n in config.n_objects}
        self.actions = {n: random_actions(env.action_space, config.steps, seed) for n, env in self.envs.items()}
        self.replays = {n: record_controls(env, self.actions[n], seed) for n, env in self.envs.items()}
        self.renders = {
            s: gym.make("ecrl/Push-v0", n_objects=config.render_n, render_mode="rgb_array", width=s, height=s)
            for s in config.render_sizes
        }
        for env in self.renders.values():  # the first render creates the GL context: not timed
            env.reset(seed=seed)
            env.render()
            env.unwrapped.render_segmentation()
        self.fetch = self.fetch_actions = None
        if config.fetch:
            import gymnasium_robotics

            gym.register_envs(gymnasium_robotics)
            self.fetch = gym.make("FetchPush-v4")
            self.fetch_actions = random_actions(self.fetch.action_space, config.steps, seed)
            time_steps(self.fetch, self.fetch_actions[:100], seed)  # warm-up (the env checker's first-step checks)

    def close(self) -> None:
        for env in [*self.envs.values(), *self.renders.values(), *([self.fetch] if self.fetch is not None else [])]:
            env.close()


# ---------------------------------------------------------------------------------------- timing
def _time_round(config: EnvsBenchConfig, cases: _Cases, times: dict[str, list[float]], exact: dict[int, bool]) -> None:
    """One repeat: every configuration timed once, in turn; seconds appended to ``times[key]``."""

    def add(key: str, seconds: float) -> None:
        times.setdefault(key, []).append(seconds)

    seed = config.seed
    for n, env in cases.envs.items():
        add(f"make/{n}", time_steps(env, cases.actions[n], seed))
        add(f"unwrapped/{n}", time_steps(env.unwrapped, cases.actions[n], seed))
        ctrls, ends, final = cases.replays[n]
        seconds, replayed = time_physics(env, ctrls, ends, seed)
        add(f"physics/{n}", seconds)
        exact[n] = bool(np.array_equal(final, replayed))
        add(f"reset/{n}", time_calls(env.reset, config.resets))
        add(f"reset_unwrapped/{n}", time_calls(env.unwrapped.reset, config.resets))
    if cases.fetch is not None:
        add("fetch", time_steps(cases.fetch, cases.fetch_actions, seed))
        add("fetch_reset", time_calls(cases.fetch.reset, config.resets))
    for s, env in cases.renders.items():
        add(f"rgb/{s}", time_calls(env.render, config.frames))
        add(f"segmentation/{s}", time_calls(env.unwrapped.render_segmentation, config.frames))


def _push_row(n: int, t: dict[str, float], exact: bool) -> dict[str, Any]:
    """The push env with ``n`` objects: rates, times and ratios from the reduced seconds ``t``."""
    step, bare, physics = t[f"make/{n}"], t[f"unwrapped/{n}"], t[f"physics/{n}"]
    return {
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
        "physics_replay_exact": exact,
    }


def measure(config: EnvsBenchConfig) -> dict[str, Any]:
    """Every measurement, round-robin over configurations within each repeat.

    Returns:
        ``push``: a row per N (steps/s through ``gym.make``, unwrapped and of the physics floor, step and
        reset times, step / physics ratios, whether the physics replay ended on the env's state bit for
        bit); ``fetch_push_v4``: FetchPush-v4's steps/s, step and reset time (``None`` without
        ``config.fetch``); ``render``: rgb and segmentation frames/s per image size; ``raw_seconds``:
        every repeat's seconds per key.
    """
    cases = _Cases(config)
    times: dict[str, list[float]] = {}
    exact: dict[int, bool] = {}
    for _ in range(config.repeats):
        _time_round(config, cases, times, exact)
    cases.close()
    t = {k: reduce_times(v, config.reduce) for k, v in times.items()}
    render = [
        {
            "size": s,
            "n_objects": config.render_n,
            "rgb_fps": 1 / t[f"rgb/{s}"],
            "segmentation_fps": 1 / t[f"segmentation/{s}"],
        }
        for s in config.render_sizes
    ]
    fetch_row = (
        None
        if cases.fetch is None
        else {"steps_per_s": 1 / t["fetch"], "step_us": t["fetch"] * 1e6, "reset_ms": t["fetch_reset"] * 1e3}
    )
    push = [_push_row(n, t, exact[n]) for n in config.n_objects]
    return {"push": push, "fetch_push_v4": fetch_row, "render": render, "raw_seconds": times}
