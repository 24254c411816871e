"""Measuring speed: timers for calls, env steps and raw physics, shared by the ``ecrl-bench`` benchmarks.

Every timer runs its loop with the garbage collector paused (:func:`gc_paused`), so that a collection
triggered by an earlier allocation does not land in one measurement and not another; repeats are then
reduced with :func:`reduce_times` (``best``: the least disturbed run on a shared machine, or ``median``),
or :func:`reduce_rates` for rates (things per second). Calls timed one by one (:func:`call_ms`) are
summarised by :func:`latency_stats`.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import gymnasium as gym
import mujoco
import numpy as np

from ecrl.envs.scene import SUBSTEPS

__all__ = [
    "call_ms",
    "gc_paused",
    "latency_stats",
    "random_actions",
    "record_controls",
    "reduce_rates",
    "reduce_times",
    "rollout_observations",
    "time_calls",
    "time_physics",
    "time_steps",
]


T = TypeVar("T")


def gc_paused(fn: Callable[[], T]) -> T:
    """What ``fn`` returns (the seconds it wants counted, or a dict of them), run with the garbage collector paused."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return fn()
    finally:
        if enabled:
            gc.enable()


def _check_reduce(values: Sequence[float], how: str) -> None:
    if how not in ("best", "median"):
        raise ValueError(f"how must be 'best' or 'median', got {how!r}")
    if not len(values):
        raise ValueError("no measurements to reduce")


def reduce_times(times: Sequence[float], how: Literal["best", "median"]) -> float:
    """One number for repeated measurements: the smallest (``best``) or the median."""
    _check_reduce(times, how)
    return float(min(times) if how == "best" else np.median(times))


def reduce_rates(rates: Sequence[float], how: Literal["best", "median"]) -> float:
    """One number for repeated rates (things per second): the largest (``best``) or the median."""
    _check_reduce(rates, how)
    return float(max(rates) if how == "best" else np.median(rates))


def latency_stats(ms: Sequence[float], with_min: bool = False) -> dict[str, float]:
    """``median_ms``, ``p90_ms`` (and the fastest, ``min_ms``, with ``with_min``) and ``calls`` of calls timed one
    by one, ``ms`` in milliseconds."""
    stats = {"median_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90))}
    if with_min:
        stats["min_ms"] = float(np.min(ms))
    return {**stats, "calls": len(ms)}


def random_actions(space: gym.spaces.Box, count: int, seed: int) -> np.ndarray:
    """``(count, *space.shape)`` actions drawn uniformly from ``space``, the same for the same ``seed``."""
    rng = np.random.default_rng(seed)
    return rng.uniform(space.low, space.high, size=(count, *space.shape)).astype(space.dtype)


def time_calls(fn: Callable[[], Any], count: int) -> float:
    """Seconds per call of ``fn`` over ``count`` calls."""

    def run() -> float:
        start = time.perf_counter()
        for _ in range(count):
            fn()
        return time.perf_counter() - start

    return gc_paused(run) / count


def call_ms(fn: Callable[[], Any]) -> float:
    """Milliseconds of one call of ``fn`` (garbage collector paused)."""
    return time_calls(fn, 1) * 1e3


def time_steps(env: gym.Env, actions: np.ndarray, seed: int) -> float:
    """Seconds per ``env.step`` over ``actions: (T, A)``, from ``reset(seed)``; resets excluded."""

    def run() -> float:
        env.reset(seed=seed)
        total, start = 0.0, time.perf_counter()
        for a in actions:
            _, _, terminated, truncated, _ = env.step(a)
            if terminated or truncated:
                total += time.perf_counter() - start
                env.reset()
                start = time.perf_counter()
        return total + time.perf_counter() - start

    return gc_paused(run) / len(actions)


def _substeps(env: gym.Env) -> int:
    """Physics steps per env step: the env's own ``substeps`` (push 10, fetch 20), else the push scene's."""
    return int(getattr(env.unwrapped, "substeps", SUBSTEPS))


def record_controls(env: gym.Env, actions: np.ndarray, seed: int) -> tuple[np.ndarray, list[bool], np.ndarray]:
    """The set points a MuJoCo env applied for ``actions``, where episodes ended, and the final ``qpos``.

    A set point is ``data.ctrl`` followed by every mocap body's ``mocap_pos`` and ``mocap_quat`` (the Fetch
    arm's end-effector target): ``(T, nu + 7 * nmocap)``, ``(T, nu)`` for the pusher, which has no mocap body.
    """
    base = env.unwrapped
    data = base.data
    env.reset(seed=seed)
    ctrls, ends = [], []
    for a in actions:
        _, _, terminated, truncated, _ = env.step(a)
        ctrls.append(np.concatenate([data.ctrl, data.mocap_pos.ravel(), data.mocap_quat.ravel()]))
        ends.append(bool(terminated or truncated))
        if ends[-1]:
            env.reset()
    return np.array(ctrls), ends, data.qpos.copy()


def time_physics(env: gym.Env, ctrls: np.ndarray, ends: Sequence[bool], seed: int) -> tuple[float, np.ndarray]:
    """Seconds per ``mj_step(nstep=substeps)`` replaying :func:`record_controls`' set points on the env's own
    model (the physics floor of an env step), and the final ``qpos`` (equal to the env's: same physics)."""
    base = env.unwrapped
    model, data = base.model, base.data
    ctrl, mocap_pos, mocap_quat = data.ctrl, data.mocap_pos, data.mocap_quat
    nu, nm, nstep = model.nu, model.nmocap, _substeps(env)
    rows = [(c[:nu], c[nu : nu + 3 * nm].reshape(nm, 3), c[nu + 3 * nm :].reshape(nm, 4)) for c in np.asarray(ctrls)]

    def run() -> float:
        env.reset(seed=seed)
        total, start = 0.0, time.perf_counter()
        for (c, p, q), end in zip(rows, ends, strict=True):
            ctrl[:] = c
            if nm:
                mocap_pos[:] = p
                mocap_quat[:] = q
            mujoco.mj_step(model, data, nstep=nstep)
            if end:
                total += time.perf_counter() - start
                env.reset()
                start = time.perf_counter()
        return total + time.perf_counter() - start

    return gc_paused(run) / len(rows), data.qpos.copy()


def rollout_observations(n_objects: int, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """``count`` observations of a random-action rollout of ``ecrl/Push-v0`` with ``n_objects`` objects."""
    import ecrl.envs  # noqa: F401  (registers ecrl/Push-v0)

    env = gym.make("ecrl/Push-v0", n_objects=n_objects)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    for _ in range(count):
        out.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return out
