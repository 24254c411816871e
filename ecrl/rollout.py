"""The library's one rollout loop: ``B`` envs side by side, one batched ``act`` per step, a seed per episode.

:func:`rollout` is what evaluation (:mod:`ecrl.evaluation`), dataset collection
(:mod:`ecrl.datasets`), expert demonstrations and DAgger (:mod:`ecrl.policies.demos`) run. It
resets env ``i`` with seed ``seeds[i]`` and then calls ``policy.act`` once per step on the stacked
observations of every env (row ``b`` is env ``b``, finished or not, so a policy's per-env state is
indexed by env); each env steps until its episode ends (terminated, truncated, at the first success
when asked, or when the caller cuts it). Given more seeds than envs, an env whose episode ended
starts the next seed's episode at once (as a vectorised env would). What a caller keeps (labels,
dataset arrays, metrics, frames) it records through the hooks of a :class:`Recorder`.

A policy is anything with ``act(obs) -> (B, A)`` (:class:`BatchPolicy`). Optional hooks:
``reset(envs, seeds)`` after the envs are reset; ``restart(i, seed)`` when env ``i`` starts another
episode; an ``active: (B,) bool`` keyword of ``act`` for policies that skip finished envs' rows.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from ecrl.dataset_format import ACTION_DIM as PUSH_ACTION_DIM
from ecrl.envs import FetchExpert, ScriptedExpert
from ecrl.envs.fetch import ACTION_DIM as FETCH_ACTION_DIM

__all__ = ["EXPERTS", "BatchPolicy", "ExpertPolicy", "Recorder", "Step", "episode_horizon", "rollout"]


@runtime_checkable
class BatchPolicy(Protocol):
    """What :func:`rollout` drives: actions ``(B, A)`` for observations with a leading batch axis ``B``."""

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray: ...


class Step(NamedTuple):
    """One env step, as :meth:`Recorder.step` hears of it."""

    env: int
    """Index of the env among the rollout's envs."""
    t: int
    """Steps of this episode so far, this one included."""
    obs: Mapping[str, np.ndarray]
    action: np.ndarray
    next_obs: Mapping[str, np.ndarray]
    reward: float
    terminated: bool
    truncated: bool
    info: Mapping[str, Any]


class Recorder:
    """What a caller keeps from a :func:`rollout`; every hook does nothing here, subclasses pick theirs."""

    def start(self, i: int, seed: int, obs: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """Env ``i`` was reset with ``seed`` and starts an episode."""

    def cut(self, i: int, obs: Mapping[str, np.ndarray], action: np.ndarray) -> bool:
        """True ends env ``i``'s episode before it takes ``action`` in ``obs`` (the step is not run)."""
        return False

    def step(self, step: Step) -> None:
        """An env took a step."""

    def tick(self, stepped: np.ndarray) -> None:
        """Every env ``stepped: (B,) bool`` took its step of this lockstep step (before ended episodes restart)."""

    def end(self, i: int) -> None:
        """Env ``i``'s episode ended (its last step, if any, was the last :meth:`step` of env ``i``)."""


def episode_horizon(env: gym.Env) -> int:
    """The most steps an episode of ``env`` (reset at least once) runs: a push env's task's, OGBench cubes' limit,
    or the shorter limit of a ``gym.make(…, max_episode_steps=k)`` (its ``TimeLimit``)."""
    base = env.unwrapped
    limit = getattr(base, "max_episode_steps", None)
    horizon = int(limit) if limit is not None else int(base.spec_.max_steps)
    cap = env.spec.max_episode_steps if env.spec is not None else None
    return horizon if cap is None else min(horizon, int(cap))


def rollout(
    envs: Sequence[gym.Env],
    policy: BatchPolicy,
    seeds: Sequence[int],
    *,
    recorder: Recorder | None = None,
    stop_on_success: bool = False,
    bar: tqdm | None = None,
) -> None:
    """Run ``len(seeds)`` episodes in ``envs`` side by side; episode ``k`` resets with ``seeds[k]``.

    The first ``len(envs)`` episodes start together; with more seeds, an env whose episode ended
    starts the next one (a stateful policy must then have ``restart(i, seed)``). ``stop_on_success``
    ends an episode at the first state with ``info["is_success"]`` (its reset state included).
    ``bar`` counts env steps; an episode that ends before its horizon counts the steps it did not run
    (a bar without a total gets ``len(seeds)`` × the first env's horizon).
    """
    b = len(envs)
    if not 1 <= b <= len(seeds):
        raise ValueError(f"need at least one env and a seed per env, got {b} envs and {len(seeds)} seeds")
    if len(seeds) > b and hasattr(policy, "reset") and not hasattr(policy, "restart"):
        raise ValueError(f"{type(policy).__name__} keeps per-episode state but has no restart(i, seed)")
    recorder = recorder or Recorder()
    action_shape = (b, *envs[0].action_space.shape)
    takes_active = "active" in inspect.signature(policy.act).parameters
    resets = [env.reset(seed=int(s)) for env, s in zip(envs, seeds[:b], strict=True)]
    horizon = [episode_horizon(env) for env in envs]  # a push env knows its task after its reset
    if bar is not None and bar.total is None:
        bar.total = len(seeds) * horizon[0]
    obs = [o for o, _ in resets]
    if hasattr(policy, "reset"):
        policy.reset(envs, [int(s) for s in seeds[:b]])
    t, active, started = np.zeros(b, np.int64), np.ones(b, bool), b

    def finish(i: int) -> None:
        """End env ``i``'s episode; start the next one there while seeds remain (and it is not solved at once)."""
        nonlocal started
        while True:
            recorder.end(i)
            if bar is not None:
                bar.update(horizon[i] - t[i])
            if started == len(seeds):
                active[i] = False
                return
            seed, started, t[i] = int(seeds[started]), started + 1, 0
            obs[i], info = envs[i].reset(seed=seed)
            if hasattr(policy, "restart"):
                policy.restart(i, seed)
            recorder.start(i, seed, obs[i], info)
            if not (stop_on_success and info["is_success"]):
                return

    for i, (o, info) in enumerate(resets):
        recorder.start(i, int(seeds[i]), o, info)
        if stop_on_success and info["is_success"]:
            finish(i)
    while active.any():
        batch = {k: np.stack([o[k] for o in obs]) for k in obs[0]}
        actions = np.asarray(policy.act(batch, active=active.copy()) if takes_active else policy.act(batch))
        if actions.shape != action_shape:
            raise ValueError(f"policy.act returned actions of shape {actions.shape}, expected {action_shape}")
        stepped, ended = np.zeros(b, bool), []
        for i in np.flatnonzero(active):
            if recorder.cut(i, obs[i], actions[i]):
                ended.append(i)
                continue
            nxt, reward, terminated, truncated, info = envs[i].step(actions[i])
            t[i] += 1
            recorder.step(Step(i, int(t[i]), obs[i], actions[i], nxt, reward, terminated, truncated, info))
            obs[i], stepped[i] = nxt, True
            if terminated or truncated or (stop_on_success and info["is_success"]):
                ended.append(i)
        if bar is not None:
            bar.update(int(stepped.sum()))
        recorder.tick(stepped)
        for i in ended:
            finish(i)


EXPERTS: dict[str, type[ScriptedExpert] | type[FetchExpert]] = {"pusher": ScriptedExpert, "fetch": FetchExpert}
"""The scripted expert of each embodiment."""


class ExpertPolicy:
    """The scripted expert behind the batch interface: one :class:`ScriptedExpert` (or, for the Fetch arm,
    :class:`~ecrl.envs.FetchExpert`) per env.

    Args:
        tolerance: fraction of the env's distance threshold the expert aims for.
        seeds: seeds of the experts' random steps out of a stall, one per env; an env's expert keeps
            its random stream over the episodes it runs (default: each expert is seeded with its
            episode's seed, so an episode depends on its seed alone).
        embodiment: ``"pusher"`` (planar actions ``(2,)``) or ``"fetch"`` (the arm's ``(4,)``); the envs
            given to :meth:`reset` must be that embodiment's.

    After :meth:`act`, ``random: (B,) bool`` says which actions were random steps out of a stall,
    and ``experts[b]`` is env ``b``'s expert (its ``choice``: the object it worked on).
    """

    meta = {"arch": "scripted_expert", "algo": "scripted"}
    batch_invariant = True
    """Env ``b``'s action depends on env ``b`` alone, bit for bit, whatever else is in the batch (see
    :func:`ecrl.evaluation.evaluate`'s ``workers``)."""

    def __init__(self, tolerance: float = 0.5, seeds: Sequence[int] | None = None, embodiment: str = "pusher") -> None:
        if embodiment not in EXPERTS:
            raise ValueError(f"no scripted expert for embodiment {embodiment!r}: expected one of {list(EXPERTS)}")
        self.tolerance, self.embodiment = tolerance, embodiment
        self.expert_type = EXPERTS[embodiment]
        self.action_dim = PUSH_ACTION_DIM if embodiment == "pusher" else FETCH_ACTION_DIM
        """It pushes (a planar displacement), or moves the arm's gripper and fingers."""
        self.seeds = None if seeds is None else [int(s) for s in seeds]
        self.experts: list[ScriptedExpert | FetchExpert] = []
        self.random = np.zeros(0, bool)

    def __repr__(self) -> str:
        extra = "" if self.embodiment == "pusher" else f", embodiment={self.embodiment!r}"
        return f"ExpertPolicy(tolerance={self.tolerance}{extra})"

    def reset(self, envs: Sequence[gym.Env], seeds: Sequence[int]) -> None:
        """One fresh expert per env."""
        seeds = seeds if self.seeds is None else self.seeds[: len(envs)]
        if len(seeds) != len(envs):
            raise ValueError(f"ExpertPolicy has {len(seeds)} expert seeds for {len(envs)} envs")
        self._envs = list(envs)
        self.experts = [self.expert_type(env, self.tolerance, seed) for env, seed in zip(envs, seeds, strict=True)]

    def restart(self, i: int, seed: int) -> None:
        """Env ``i`` starts another episode (reset with ``seed``)."""
        if self.seeds is None:
            self.experts[i] = self.expert_type(self._envs[i], self.tolerance, seed)
        else:
            self.experts[i].reset()

    def act(self, obs: Mapping[str, np.ndarray], active: np.ndarray | None = None) -> np.ndarray:
        """Actions ``(B, A)`` (zero in rows not ``active``); row ``b`` must come from the ``b``-th env given to :meth:`reset`."""
        b = len(obs["observation"])
        if b != len(self.experts):
            raise ValueError(f"{len(self.experts)} envs were reset, got {b} observations")
        actions, self.random = np.zeros((b, self.action_dim), np.float32), np.zeros(b, bool)
        for i in range(b) if active is None else np.flatnonzero(active):
            actions[i] = self.experts[i].act({k: v[i] for k, v in obs.items()})
            self.random[i] = self.experts[i].last_random
        return actions
