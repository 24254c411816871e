"""Evaluate any policy on push tasks, the Fetch arm's or OGBench's cube tasks: success per configuration, with 95% intervals.

:func:`evaluate` runs, for each configuration, ``episodes`` episodes side by side and calls
``policy.act`` once per step on the stacked batch of their observations. A configuration
(:mod:`ecrl.eval_configs`) is

- on push (``env="push"``), a part of a compositional split (``train``: the factor combinations
  seen in training, ``test``: held-out ones) × a number of objects N; the same on the Fetch arm
  (``env="fetch"``, one ``skill``: push, pick_place or stack; 1 … 8 objects);
- on OGBench's cubes (``env="ogbench-cube"``), one of OGBench's five evaluation tasks per size
  (the result's ``part`` is ``task1`` … ``task5``, its ``task_name`` OGBench's, e.g.
  ``task1_single_pnp``) × a number of cubes N in 1, 2, 3, 4, 8. This is OGBench's protocol: 50
  episodes per task by default, each to OGBench's episode limit for N or to OGBench's own success
  flag (``info["is_success"]``), which ends the episode. OGBench's headline number, the mean
  success over the tasks, is :meth:`EvalReport.overall`.

Episode ``i`` of every configuration resets with seed ``seed + i``, so two policies (or a policy
and the scripted expert) are compared on the same scenes.

Per configuration it reports:

- *success rate*: episodes in which every object is placed at the episode's end, with a 95% Wilson
  interval. By default a push episode runs to the horizon ``50 + 100 N`` and success is read at
  its last step (objects must stay placed); with ``stop_on_success=True`` it ends at the first
  step at which every object is placed (faster, and more lenient), as an OGBench episode always does;
- *fraction placed*: the mean fraction of objects placed at the episode's end, with a 95% normal
  (mean ± 1.96 standard errors) interval;
- *return*: the mean sum of env rewards over the steps run;
- *episode length*: the mean first step at which every object is placed, or the horizon if never.

With ``workers = K``, batches of episodes run in K processes (:mod:`ecrl.parallel`) and are merged
in seed order: the same numbers as one process with the same batches.

A policy is anything with ``act(obs) -> (B, A)`` for a batch of observations (every key stacked
on a leading axis), like :class:`ecrl.policy.Policy`; per-episode stateful policies also have
``reset(envs, seeds)``, called after the envs are reset (see :class:`ExpertPolicy`). A policy that acts
through a rule (``meta["rule"]``, e.g. :class:`ecrl.focus.Focus`) is reported as rule-assisted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from ecrl.envs import ogbench as ogb
from ecrl.eval_configs import (
    ENVS,
    PARTS,  # noqa: F401  (re-exported)
    EvalConfig,
    check_action_dim,
    check_ogbench_settings,
    check_settings,
    max_objects,
    ogbench_configs,
    push_configs,
    resolve_skill,
)
from ecrl.parallel import build_policy, check_workers, run_tasks, worker_bar, worker_policy
from ecrl.reporting import (
    camera_strip,
    wilson_interval,
    write_gif,
)
from ecrl.rollout import (
    BatchPolicy,
    ExpertPolicy,  # noqa: F401  (re-exported: the scripted expert every evaluation compares with)
    Recorder,
    Step,
    episode_horizon,
    rollout,
)

EVAL_SEED = 100_000
"""Default first evaluation seed, far from training seeds."""


@dataclass(frozen=True)
class EvalResult:
    """Episodes of one (part, N) configuration; per-episode lists are ordered by seed."""

    part: str
    n_objects: int
    n_max: int
    horizon: int
    seeds: list[int]
    success: list[bool]
    fraction_placed: list[float]
    returns: list[float]
    lengths: list[int]
    """First step at which every object was placed, or ``horizon`` if never."""
    env_steps: int
    wall_s: float
    task_name: str | None = None
    """OGBench's name of the task (its ``task_infos``, e.g. ``task1_single_pnp``); ``None`` on push."""

    def summary(self) -> dict[str, Any]:
        """Every aggregate number of this configuration (what tables, plots and scalars show)."""
        n, k = len(self.success), int(sum(self.success))
        frac = np.asarray(self.fraction_placed)
        mean = float(frac.mean())
        half = 1.96 * float(frac.std(ddof=1)) / math.sqrt(n) if n > 1 else 0.0
        return {
            "part": self.part,
            **({} if self.task_name is None else {"task_name": self.task_name}),
            "n_objects": self.n_objects,
            "n_max": self.n_max,
            "episodes": n,
            "successes": k,
            "success_rate": k / n,
            "success_ci95": list(wilson_interval(k, n)),
            "fraction_placed": mean,
            "fraction_placed_ci95": [max(0.0, mean - half), min(1.0, mean + half)],
            "mean_return": float(np.mean(self.returns)),
            "episode_length": float(np.mean(self.lengths)),
            "horizon": self.horizon,
            "env_steps": self.env_steps,
            "wall_s": self.wall_s,
            "steps_per_s": self.env_steps / max(self.wall_s, 1e-9),
        }


@dataclass
class EvalReport:
    """What :func:`evaluate` returns: one :class:`EvalResult` per (part, N), the settings and the policy's meta."""

    results: list[EvalResult]
    settings: dict[str, Any]
    policy: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    def get(self, part: str, n_objects: int) -> EvalResult:
        for r in self.results:
            if (r.part, r.n_objects) == (part, n_objects):
                return r
        raise KeyError(f"no result for part {part!r}, N = {n_objects}")

    def rows(self) -> list[dict[str, Any]]:
        return [r.summary() for r in self.results]

    def overall(self) -> list[dict[str, Any]]:
        """OGBench's headline number per N: the mean success rate over the evaluated tasks (none on push).

        Every task runs the same episodes, so the mean of the tasks' rates is the rate of their pooled
        episodes; ``success_ci95`` is the Wilson interval of those (a little wide: it counts the spread
        between the tasks, which are fixed, as sampling noise).
        """
        if self.settings.get("env") != "ogbench-cube":
            return []
        by_n: dict[int, list[EvalResult]] = {}
        for r in self.results:
            by_n.setdefault(r.n_objects, []).append(r)
        rows = []
        for n, results in sorted(by_n.items()):
            k, trials = sum(sum(r.success) for r in results), sum(len(r.success) for r in results)
            rows.append(
                {
                    "n_objects": n,
                    "tasks": [r.part for r in results],
                    "episodes": trials,
                    "successes": int(k),
                    "success_rate": float(np.mean([np.mean(r.success) for r in results])),
                    "success_ci95": list(wilson_interval(k, trials)),
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        overall = self.overall()
        return {
            "settings": self.settings,
            "policy": self.policy,
            "wall_s": self.wall_s,
            "results": [{**r.summary(), "per_episode": _per_episode(r)} for r in self.results],
            **({"overall": overall} if overall else {}),
        }


def _per_episode(r: EvalResult) -> dict[str, list]:
    return {k: v for k, v in asdict(r).items() if k in ("seeds", "success", "fraction_placed", "returns", "lengths")}


def describe(policy: Any) -> dict[str, Any]:
    """A JSON-able description of a policy: its ``meta``, its repr and the settings it was built with."""
    kwargs = getattr(policy, "kwargs", None)
    return {**dict(getattr(policy, "meta", {}) or {}), "repr": repr(policy), **({"kwargs": kwargs} if kwargs else {})}


def evaluate(
    policy: BatchPolicy | Callable[[], BatchPolicy],
    n_objects: Sequence[int],
    *,
    env: str = "push",
    skill: str | None = None,
    goal: str = "positions",
    split: str | None = None,
    parts: Sequence[str] | None = None,
    tasks: Sequence[int] | None = None,
    episodes: int = 50,
    seed: int = EVAL_SEED,
    n_max: int | None = None,
    stop_on_success: bool = False,
    max_steps: int | None = None,
    batch_size: int | None = None,
    progress: bool = True,
    video_dir: str | Path | None = None,
    video_every: int = 2,
    workers: int = 1,
) -> EvalReport:
    """Roll out ``policy`` in every configuration (part or task × N); see the module docstring for the numbers.

    Args:
        policy: ``act(obs)`` → actions ``(B, A)`` for observations ``(B, …)``; optional ``reset(envs, seeds)``.
            Or a zero-argument callable that builds such a policy (a class like :class:`ExpertPolicy`,
            :class:`ecrl.parallel.PolicyLoader`): what ``workers > 1`` need for a policy that cannot be pickled.
        n_objects: numbers of objects N to evaluate (OGBench cubes: 1, 2, 3, 4 or 8).
        env: ``"push"`` (the library's push env), ``"fetch"`` (the Fetch arm, 1 … 8 objects) or
            ``"ogbench-cube"`` (OGBench's cube tasks, with the extra ``ecrl[ogbench]``).
        skill: fetch: the arm's skill, push, pick_place or stack (default: pick_place).
        goal: push: goal kind (one of ``GOAL_KINDS``).
        split: push: name of a compositional split in ``SPLITS``, or ``None`` (random objects, part ``train`` only).
        parts: push: parts of the split to evaluate (``train``, ``test``; default: ``train``).
        tasks: OGBench cubes: OGBench's evaluation tasks (default: all five, ``1 … 5``).
        episodes: episodes per configuration; episode ``i`` resets with seed ``seed + i``.
        seed: the first evaluation seed.
        n_max: pad observations to this many object rows (default: N); a policy's results must not depend on it.
        stop_on_success: push: end an episode at the first step at which every object is placed (an OGBench
            episode always ends at OGBench's success).
        max_steps: OGBench cubes: cut episodes at this many steps (default: OGBench's limit for N); for tests
            and smoke runs, whose numbers are then not OGBench's.
        batch_size: most envs run side by side (default: all ``episodes``; for a policy whose
            ``batch_invariant`` is true, like :class:`ExpertPolicy`, ``ceil(episodes / workers)``).
        progress: show a progress bar (unit: env steps, an episode ended early counts its remaining steps).
        video_dir: write one GIF per configuration there, ``<part>_n<N>.gif``: the episode of seed ``seed``.
        video_every: keep every k-th step in the GIFs (both envs run at 20 steps per second).
        workers: processes running episodes (:mod:`ecrl.parallel`). The episodes of every configuration run
            in batches of ``batch_size`` consecutive seeds, each batch in one process (longest first),
            and are merged in seed order: the report is the one ``workers=1`` gives with the same
            ``batch_size``, every per-episode number identical (timings aside). Pass ``batch_size`` to
            spread one configuration over processes: a network acts a little differently (in the last bits
            of float32, which a rollout amplifies) on batches of another size; a ``batch_invariant``
            policy does not, and is spread by default.

    A policy whose ``meta["pixels"]`` is ``{"size": P, "cameras": [...]}`` (a planner from pixels,
    :mod:`ecrl.diffusion.pixels`) gets push envs whose observations carry those camera frames.

    Raises:
        ValueError: settings the chosen env cannot run (a size or task OGBench does not have, push options
            on OGBench or OGBench options on push, …), or a policy whose actions (as its ``action_low`` or
            ``action_dim`` says) are not the env's width: 2 on push, 5 on OGBench cubes.
    """
    source, policy = policy, build_policy(policy)
    if env not in ENVS:
        raise ValueError(f"unknown env {env!r}: expected one of {list(ENVS)}")
    n_objects, pixels = list(n_objects), (getattr(policy, "meta", None) or {}).get("pixels")
    if env in ("push", "fetch"):
        if tasks is not None or max_steps is not None:
            raise ValueError(
                f"tasks and max_steps are options of env='ogbench-cube'; {env} has split parts and horizons"
            )
        skill = resolve_skill(env, skill)
        parts = ["train"] if parts is None else list(parts)
        n_objects = [int(n) for n in n_objects]
        check_settings(n_objects, goal, split, parts, episodes, n_max, batch_size, video_every, max_objects(env))
        configs = push_configs(n_objects, goal, split, parts, n_max, pixels, skill)
        settings = {"env": env, "n_objects": n_objects, "goal": goal, "split": split, "parts": parts}
        settings |= {"episodes": episodes, "seed": seed, "n_max": n_max, "stop_on_success": stop_on_success}
        if skill is not None:
            settings["skill"] = skill
    else:
        if goal != "positions" or split is not None or parts is not None or pixels or skill is not None:
            raise ValueError(
                "OGBench cubes have their own goals (OGBench's tasks): goal, split, parts and skill are options of "
                "the library's envs, and "
                f"planners from pixels run on push; got goal={goal!r}, split={split!r}, parts={parts!r}, "
                f"pixels={pixels!r}, skill={skill!r}"
            )
        tasks = list(range(1, ogb.N_TASKS + 1)) if tasks is None else list(tasks)
        check_ogbench_settings(n_objects, tasks, episodes, n_max, batch_size, video_every, max_steps)
        n_objects, tasks = [int(n) for n in n_objects], [int(t) for t in tasks]
        configs = ogbench_configs(n_objects, tasks, n_max, max_steps)
        settings = {"env": env, "n_objects": n_objects, "tasks": tasks, "episodes": episodes, "seed": seed}
        settings |= {"n_max": n_max, "max_steps": max_steps}
    check_action_dim(policy, env)
    check_workers(workers)
    settings["video_dir"] = None if video_dir is None else str(video_dir)
    batch = batch_size or (math.ceil(episodes / workers) if getattr(policy, "batch_invariant", False) else episodes)
    chunks = _chunks(configs, seed, episodes, batch, stop_on_success, video_dir, video_every)
    bar = tqdm(total=episodes * sum(c.horizon for c in configs), unit="step", dynamic_ncols=True, disable=not progress)
    start = time.perf_counter()
    if workers == 1 or len(chunks) == 1:
        outcomes = []
        for chunk in chunks:
            bar.set_description(f"{chunk.config.part} N={chunk.config.n_objects}")
            outcomes.append(_run_chunk(policy, chunk, bar))
            bar.set_postfix(success=f"{int(outcomes[-1]['success'].sum())}/{chunk.count}")
    else:
        bar.set_description(f"{min(workers, len(chunks))} workers")
        longest = sorted(range(len(chunks)), key=lambda i: -chunks[i].count * chunks[i].config.horizon)
        done = run_tasks(_chunk_in_worker, [chunks[i] for i in longest], workers, source, bar)
        outcomes = [outcome for _, outcome in sorted(zip(longest, done, strict=True))]
    bar.close()
    per_config = len(outcomes) // len(configs)
    results = [
        _result(chunks[i].config, seed, episodes, outcomes[i : i + per_config])
        for i in range(0, len(outcomes), per_config)
    ]
    return EvalReport(results, settings, describe(policy), time.perf_counter() - start)


def _chunks(
    configs: Sequence[EvalConfig],
    seed: int,
    episodes: int,
    batch: int,
    stop_on_success: bool,
    video_dir: str | Path | None,
    video_every: int,
) -> list[_Chunk]:
    """The episodes of every configuration in batches of ``batch`` consecutive seeds, in configuration order."""
    video_dir = None if video_dir is None else Path(video_dir)
    if video_dir is not None:
        video_dir.mkdir(parents=True, exist_ok=True)
    chunks = []
    for config in configs:
        gif = None if video_dir is None else video_dir / f"{config.part}_n{config.n_objects}.gif"
        for first in range(0, episodes, batch):
            count = min(batch, episodes - first)
            chunks.append(
                _Chunk(config, seed + first, count, stop_on_success, gif if first == 0 else None, video_every)
            )
    return chunks


@dataclass(frozen=True)
class _Chunk:
    """Episodes ``first … first + count - 1`` (by seed) of one configuration, run side by side; with ``gif``,
    the first one is recorded there."""

    config: EvalConfig
    first: int
    count: int
    stop_on_success: bool
    gif: Path | None
    video_every: int


def _run_chunk(policy: BatchPolicy, chunk: _Chunk, bar: Any) -> dict[str, Any]:
    """The outcomes of ``chunk``'s episodes (per-episode arrays, the horizon, ``n_max``, start and end times)."""
    started = time.time()
    envs = [gym.make(chunk.config.env_id, **chunk.config.env_kwargs) for _ in range(chunk.count)]
    frames: list[np.ndarray] = []
    outcome = _Outcomes(envs, chunk.stop_on_success, frames.append if chunk.gif else None, chunk.video_every)
    seeds = range(chunk.first, chunk.first + chunk.count)
    rollout(envs, policy, seeds, recorder=outcome, stop_on_success=chunk.stop_on_success, bar=bar)
    out = {k: getattr(outcome, k) for k in ("success", "fraction", "returns", "lengths", "steps")}
    out.update(horizon=episode_horizon(envs[0]), n_max=envs[0].unwrapped.n_max, started=started)
    out["task_name"] = getattr(envs[0].unwrapped.spec_, "task_name", None)  # OGBench's, known after a reset
    for env in envs:
        env.close()
    if frames:
        write_gif(chunk.gif, frames, fps=20 / chunk.video_every)
    return {**out, "ended": time.time()}


def _chunk_in_worker(chunk: _Chunk) -> dict[str, Any]:
    bar = worker_bar()
    out = _run_chunk(worker_policy(), chunk, bar)
    bar.flush()
    return out


def _result(config: EvalConfig, seed: int, episodes: int, outcomes: list[dict[str, Any]]) -> EvalResult:
    """The :class:`EvalResult` of one configuration from its chunks' outcomes, in seed order."""
    out = {k: np.concatenate([o[k] for o in outcomes]) for k in ("success", "fraction", "returns", "lengths", "steps")}
    return EvalResult(
        part=config.part,
        n_objects=config.n_objects,
        n_max=outcomes[0]["n_max"],
        horizon=outcomes[0]["horizon"],
        seeds=list(range(seed, seed + episodes)),
        success=out["success"].tolist(),
        fraction_placed=out["fraction"].tolist(),
        returns=out["returns"].tolist(),
        lengths=out["lengths"].tolist(),
        env_steps=int(out["steps"].sum()),
        wall_s=max(o["ended"] for o in outcomes) - min(o["started"] for o in outcomes),
        task_name=outcomes[0]["task_name"],
    )


class _Outcomes(Recorder):
    """Per env: success and fraction placed at the episode's end, return, first step with every object
    placed (or the horizon), steps run; with ``record``, camera images of env 0 every ``record_every`` steps."""

    def __init__(self, envs: Sequence[gym.Env], stop_on_success: bool, record=None, record_every: int = 2) -> None:
        b = len(envs)
        self.success, self.fraction = np.zeros(b, bool), np.zeros(b)
        self.returns, self.steps, self.lengths = np.zeros(b), np.zeros(b, np.int64), np.zeros(b, np.int64)
        self.envs, self.stop_on_success, self.record, self.record_every = envs, stop_on_success, record, record_every

    def start(self, i, seed, obs, info) -> None:
        self.success[i], self.fraction[i] = info["is_success"], info["fraction_placed"]
        self.lengths[i] = 0 if self.success[i] else episode_horizon(self.envs[i])
        if i == 0 and self.record is not None:
            self.record(camera_strip(self.envs[0].unwrapped.render_views()))

    def step(self, s: Step) -> None:
        i = s.env
        self.returns[i] += s.reward
        self.steps[i] += 1
        self.success[i], self.fraction[i] = s.info["is_success"], s.info["fraction_placed"]
        if self.success[i] and self.lengths[i] == episode_horizon(self.envs[i]):
            self.lengths[i] = s.t
        ended = s.terminated or s.truncated or (self.stop_on_success and self.success[i])
        if i == 0 and self.record is not None and not ended and s.t % self.record_every == 0:
            self.record(camera_strip(self.envs[0].unwrapped.render_views()))
