"""How fast the push and Fetch environments step, reset and render: the measurement of ``ecrl-bench envs``.

:func:`measure` takes an :class:`EnvsBenchConfig` and returns the numbers; the CLI
(:mod:`ecrl.scripts.bench_envs`) checks the targets and writes the tables, plot and README.

All numbers come from one process, measured round-robin within each repeat, so ratios between them
(push vs FetchPush-v4, the library's Fetch arm vs gymnasium-robotics' FetchPickAndPlace-v4, env step vs raw
physics) see the same machine load. Each number is the best
(fastest) or median of `repeats` runs; garbage collection is off while a loop is timed.
Random actions are drawn up front from a seeded generator and are not timed; neither are the resets
between episodes of a stepping run.

The *physics floor* replays the exact set points the env applied (`data.ctrl`, and for the Fetch arm the
mocap target of its gripper, then `mujoco.mj_step(model, data, nstep=substeps)`: 10 for push, 20 for
Fetch; same model, same seed, same resets), so it simulates
the same trajectory (checked: the final `qpos` matches bit for bit) with nothing else around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from ecrl.envs import MAX_OBJECTS  # importing ecrl.envs registers ecrl/Push-v0 and the Fetch ids
from ecrl.envs.task import EMBODIMENT_MAX_OBJECTS
from ecrl.timing import random_actions, record_controls, reduce_times, time_calls, time_physics, time_steps

__all__ = ["EnvsBenchConfig", "measure"]


@dataclass(frozen=True)
class EnvsBenchConfig:
    """Environment speed: steps/s vs number of objects, physics floor, resets, rendering, gymnasium-robotics' Fetch."""

    n_objects: tuple[int, ...] = (1, 3, 6, 12, 16)
    """Numbers of objects to time on push."""
    fetch_objects: tuple[int, ...] = (1, 3, 6, 8)
    """Numbers of objects to time on the Fetch arm (`ecrl/FetchPickPlace-v0`; empty: skip it)."""
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
    """Time gymnasium-robotics' FetchPush-v4 and FetchPickAndPlace-v4 for comparison (`--no-fetch` skips them)."""
    min_speedup_vs_fetch: float = 4.0
    """Target: push-3 steps/s at least this many times FetchPush-v4's."""
    min_fetch_ratio: float = 1.0
    """Target: the Fetch arm with 1 object steps at least this many times as fast as FetchPickAndPlace-v4 (same robot, same substeps)."""
    max_fetch_physics_ratio: float = 1.3
    """Target: a Fetch step (through `gym.make`, 1 object) takes at most this many times its raw physics."""
    max_fetch_reset_ms: float = 5.0
    """Target: a Fetch reset (through `gym.make`) takes at most this many milliseconds, at every N timed."""
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
        most = EMBODIMENT_MAX_OBJECTS["fetch"]
        if any(not 1 <= n <= most for n in self.fetch_objects):
            raise ValueError(f"fetch_objects must be in 1 … {most}, got {self.fetch_objects}")
        if min(self.steps, self.resets, self.frames, self.repeats) < 1:
            raise ValueError("steps, resets, frames and repeats must be positive")
        if any(not 16 <= s <= 256 for s in self.render_sizes):
            raise ValueError(f"render_sizes must be in 16 … 256 pixels, got {self.render_sizes}")


# ---------------------------------------------------------------------------------------- set-up
class _Cases:
    """What one benchmark times: the library's envs per kind (``push``, ``fetch``) and N, with their actions and
    recorded set points; render envs per size; gymnasium-robotics' references (none without ``config.fetch``)."""

    def __init__(self, config: EnvsBenchConfig) -> None:
        seed = config.seed
        self.envs = {
            "push": {n: gym.make("ecrl/Push-v0", n_objects=n) for n in config.n_objects},
            "fetch": {n: gym.make("ecrl/FetchPickPlace-v0", n_objects=n) for n in config.fetch_objects},
        }
        self.actions = {
            (kind, n): random_actions(env.action_space, config.steps, seed)
            for kind, envs in self.envs.items()
            for n, env in envs.items()
        }
        self.replays = {
            (kind, n): record_controls(env, self.actions[kind, n], seed)
            for kind, envs in self.envs.items()
            for n, env in envs.items()
        }
        self.renders = {
            s: gym.make("ecrl/Push-v0", n_objects=config.render_n, render_mode="rgb_array", width=s, height=s)
            for s in config.render_sizes
        }
        for env in self.renders.values():  # the first render creates the GL context: not timed
            env.reset(seed=seed)
            env.render()
            env.unwrapped.render_segmentation()
        self.references: dict[str, tuple[gym.Env, np.ndarray]] = {}
        if config.fetch:
            import gymnasium_robotics

            gym.register_envs(gymnasium_robotics)
            for name in REFERENCES:
                env = gym.make(name)
                actions = random_actions(env.action_space, config.steps, seed)
                time_steps(env, actions[:100], seed)  # warm-up (the env checker's first-step checks)
                self.references[name] = env, actions

    def close(self) -> None:
        ours = [env for envs in self.envs.values() for env in envs.values()]
        for env in [*ours, *self.renders.values(), *(env for env, _ in self.references.values())]:
            env.close()


REFERENCES = {"FetchPush-v4": "fetch_push_v4", "FetchPickAndPlace-v4": "fetch_pick_and_place_v4"}
"""gymnasium-robotics' envs timed for comparison, and their keys in the result."""


# ---------------------------------------------------------------------------------------- timing
def _time_round(
    config: EnvsBenchConfig, cases: _Cases, times: dict[str, list[float]], exact: dict[tuple[str, int], bool]
) -> None:
    """One repeat: every configuration timed once, in turn; seconds appended to ``times[key]``."""

    def add(key: str, seconds: float) -> None:
        times.setdefault(key, []).append(seconds)

    seed = config.seed
    for kind, envs in cases.envs.items():
        for n, env in envs.items():
            actions, (ctrls, ends, final) = cases.actions[kind, n], cases.replays[kind, n]
            add(f"{kind}/make/{n}", time_steps(env, actions, seed))
            add(f"{kind}/unwrapped/{n}", time_steps(env.unwrapped, actions, seed))
            seconds, replayed = time_physics(env, ctrls, ends, seed)
            add(f"{kind}/physics/{n}", seconds)
            exact[kind, n] = bool(np.array_equal(final, replayed))
            add(f"{kind}/reset/{n}", time_calls(env.reset, config.resets))
            add(f"{kind}/reset_unwrapped/{n}", time_calls(env.unwrapped.reset, config.resets))
    for name, (env, actions) in cases.references.items():
        add(f"{name}/step", time_steps(env, actions, seed))
        add(f"{name}/reset", time_calls(env.reset, config.resets))
    for s, env in cases.renders.items():
        add(f"rgb/{s}", time_calls(env.render, config.frames))
        add(f"segmentation/{s}", time_calls(env.unwrapped.render_segmentation, config.frames))


def _env_row(kind: str, n: int, t: dict[str, float], exact: bool) -> dict[str, Any]:
    """The ``kind`` env with ``n`` objects: rates, times and ratios from the reduced seconds ``t``."""
    step, bare, physics = t[f"{kind}/make/{n}"], t[f"{kind}/unwrapped/{n}"], t[f"{kind}/physics/{n}"]
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
        "reset_ms": t[f"{kind}/reset/{n}"] * 1e3,
        "reset_ms_unwrapped": t[f"{kind}/reset_unwrapped/{n}"] * 1e3,
        "physics_replay_exact": exact,
    }


def measure(config: EnvsBenchConfig) -> dict[str, Any]:
    """Every measurement, round-robin over configurations within each repeat.

    Returns:
        ``push`` and ``fetch``: a row per N (steps/s through ``gym.make``, unwrapped and of the physics floor,
        step and reset times, step / physics ratios, whether the physics replay ended on the env's state bit
        for bit); ``fetch_push_v4`` and ``fetch_pick_and_place_v4``: gymnasium-robotics' steps/s, step and
        reset time (``None`` without ``config.fetch``); ``render``: rgb and segmentation frames/s per image
        size; ``raw_seconds``: every repeat's seconds per key.
    """
    cases = _Cases(config)
    times: dict[str, list[float]] = {}
    exact: dict[tuple[str, int], bool] = {}
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
    result: dict[str, Any] = {
        kind: [_env_row(kind, n, t, exact[kind, n]) for n in envs] for kind, envs in cases.envs.items()
    }
    for name, key in REFERENCES.items():
        step = t.get(f"{name}/step")
        result[key] = (
            None
            if step is None
            else {"steps_per_s": 1 / step, "step_us": step * 1e6, "reset_ms": t[f"{name}/reset"] * 1e3}
        )
    return {**result, "render": render, "raw_seconds": times}
