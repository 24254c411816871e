"""Collecting demonstration datasets: roll out the scripted expert (or any policy) and write the episodes.

:func:`collect_dataset` rolls out the scripted expert (or any policy with ``act(obs)``) on push
tasks, or OGBench cube play (:func:`import_ogbench_dataset` converts OGBench's own files), and writes
the episodes in the format of :mod:`ecrl.dataset_format`; :class:`ecrl.datasets.DemoDataset` reads
them back.
"""

from __future__ import annotations

import inspect
import json
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from ecrl.dataset_format import ACTION_DIM, META, DatasetError, DatasetWriter, Episode, read_meta
from ecrl.envs import ogbench as ogb
from ecrl.envs import ogbench_data
from ecrl.envs.scene import CAMERAS, MAIN_CAMERAS
from ecrl.evaluation import EVAL_SEED, check_settings, describe
from ecrl.parallel import (
    barrier,
    build_policy,
    check_workers,
    pickled,
    run_tasks,
    split_contiguous,
    worker_bar,
    worker_policy,
)
from ecrl.reporting import provenance
from ecrl.rollout import BatchPolicy, ExpertPolicy, Recorder, Step, rollout

__all__ = ["ENVS", "CollectConfig", "CollectResult", "collect_dataset", "import_ogbench_dataset"]

ENVS = ("push", "ogbench-cube")
"""The environments a dataset can be collected from (``ecrl-collect --env``)."""


@dataclass
class CollectConfig:
    """What to roll out (every field is a command-line option of ``ecrl-collect``)."""

    n_objects: tuple[int, ...] = (3,)
    """Numbers of objects; one block of ``episodes`` per number (and split part)."""
    goal: str = "positions"
    """Goal kind: positions, adjacent, sort or ordered."""
    split: str | None = None
    """Compositional split (e.g. ``colour_shape``) whose ``parts`` tasks are drawn from; ``None``: random objects."""
    parts: tuple[str, ...] = ("train",)
    """Parts of the split to collect (``test`` holds the held-out combinations: keep it out of training data)."""
    episodes: int = 100
    """Episodes rolled out per (part, number of objects), kept or not."""
    seed: int | None = None
    """The k-th episode of this collection resets with seed ``seed + k`` (default: 0, or where the dataset's last collection stopped)."""
    only_success: bool = True
    """Keep successful episodes only (the number dropped is recorded in meta.json)."""
    idle_steps: int | None = 10
    """Idle steps (zero action once every object is placed) kept before an episode ends; ``None``: run to the horizon."""
    n_max: int | None = None
    """Pad the env's observations to this many objects (what the policy sees; the dataset stores each episode unpadded)."""
    reward: Literal["sparse", "dense"] = "sparse"
    """Env reward stored per step: sparse (minus the fraction not placed) or dense (minus the mean distance)."""
    shard_episodes: int = 100
    """Episodes per shard file."""
    batch_size: int = 16
    """Environments run side by side (a policy acts on all of them in one call)."""
    progress: bool = True
    """Show a progress bar."""
    pixels: int | None = None
    """Also record RGB frames and segmentation masks of every state, this many pixels square (16 … 256)."""
    cameras: tuple[str, ...] = MAIN_CAMERAS
    """Cameras the frames come from (with ``--pixels``)."""
    random_actions: float = 0.0
    """Probability that a step's action is replaced by a uniformly random one (1: random rollouts)."""
    env: Literal["push", "ogbench-cube"] = "push"
    """Environment: the library's push env, or OGBench's cubes (``n_objects`` in 1, 2, 3, 4, 8; extra ``ecrl[ogbench]``)."""
    play: bool = False
    """OGBench cubes: play data from OGBench's own oracle, by its ``cube-*-play`` recipe (every episode is kept)."""
    play_steps: int = ogb.PLAY_EPISODE_STEPS
    """OGBench cubes, play: steps per episode (OGBench's recipe: 1001)."""

    def __post_init__(self) -> None:
        self.n_objects, self.parts = tuple(int(n) for n in self.n_objects), tuple(self.parts)
        check_settings(self.n_objects, self.goal, self.split, self.parts, self.episodes, self.n_max, self.batch_size)
        if self.idle_steps is not None and self.idle_steps < 0:
            raise ValueError(f"idle_steps must be >= 0 (or None to keep every step), got {self.idle_steps}")
        if self.shard_episodes < 1:
            raise ValueError(f"shard_episodes must be >= 1, got {self.shard_episodes}")
        if self.seed is not None and self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        self.cameras = tuple(self.cameras)
        if self.pixels is not None and not 16 <= self.pixels <= 256:
            raise ValueError(f"pixels must be an image size in 16 … 256, got {self.pixels}")
        unknown = [c for c in self.cameras if c not in CAMERAS]
        if unknown or not self.cameras:
            raise ValueError(f"cameras must be a non-empty selection of {list(CAMERAS)}, got {list(self.cameras)}")
        if not 0.0 <= self.random_actions <= 1.0:
            raise ValueError(f"random_actions must be a probability in [0, 1], got {self.random_actions}")
        if self.env not in ENVS:
            raise ValueError(f"unknown env {self.env!r}: expected one of {list(ENVS)}")
        if self.env == "ogbench-cube":
            for n in self.n_objects:
                ogb.check_n_cubes(n)
            if self.goal != "positions" or self.split is not None or self.pixels is not None:
                raise ValueError("OGBench cubes have their own goals: goal, split and pixels are push options")
        elif self.play:
            raise ValueError("play data is collected on OGBench cubes: pass --env ogbench-cube with --play")
        if self.play_steps < 1:
            raise ValueError(f"play_steps must be >= 1, got {self.play_steps}")

    @property
    def action_dim(self) -> int:
        """Width of the actions this collection records."""
        return ogb.ACTION_DIM if self.env == "ogbench-cube" else ACTION_DIM


@dataclass
class CollectResult:
    """What one :func:`collect_dataset` call added."""

    path: Path
    kept: int
    dropped: int
    steps: int
    shards: list[str]
    seeds: tuple[int, int]
    """First seed and one past the last seed used."""
    wall_s: float


class _Collecting:
    """The acting policy as a collection runs it: ``float32`` actions, each replaced by a uniformly random
    one with probability ``random_actions`` (drawn from a generator seeded by the batch's episode
    seeds, so a collection stays deterministic); ``random: (B,) bool`` flags the random steps (these,
    and the scripted expert's own steps out of a stall)."""

    def __init__(self, policy: BatchPolicy, random_actions: float = 0.0) -> None:
        self.policy, self.random_actions = policy, random_actions
        self._takes_active = "active" in inspect.signature(policy.act).parameters

    def reset(self, envs: Sequence[gym.Env], seeds: Sequence[int]) -> None:
        if hasattr(self.policy, "reset"):
            self.policy.reset(envs, seeds)
        self.rng = np.random.default_rng([0xEC, *seeds])

    def act(self, obs: Mapping[str, np.ndarray], active: np.ndarray) -> np.ndarray:
        actions = self.policy.act(obs, active=active) if self._takes_active else self.policy.act(obs)
        actions = np.asarray(actions, dtype=np.float32)
        random = np.asarray(getattr(self.policy, "random", np.zeros(len(active), bool)))
        if self.random_actions > 0:
            swap = self.rng.random(len(active)) < self.random_actions
            actions = np.where(swap[:, None], self.rng.uniform(-1, 1, actions.shape), actions).astype(np.float32)
            random = random | swap
        self.random = random
        return actions


def _frames(env: Any, cameras: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(V, P, P, 3)`` RGB frames and ``(V, P, P)`` segmentation labels of ``env``'s current state."""
    rgb = env.render_views(tuple(cameras))
    return np.stack([rgb[c] for c in cameras]), np.stack([env.render_segmentation(c) for c in cameras]).astype(np.uint8)


class _EpisodeRecorder(Recorder):
    """Every state, step and (with ``cameras``) frame of one episode per env; an episode is cut after
    ``idle_steps`` idle steps (zero action once every object is placed: the scripted expert's
    "nothing to do"; the idle steps before the cut stay in the data, they show how to stop)."""

    def __init__(self, envs: Sequence[gym.Env], policy: _Collecting, idle_steps: int | None, cameras) -> None:
        b = len(envs)
        self.envs, self.policy, self.idle_steps, self.cameras = envs, policy, idle_steps, cameras
        self.seeds, self.solved, self.idle = [0] * b, np.zeros(b, bool), np.zeros(b, np.int64)
        self.states: list[list[dict[str, np.ndarray]]] = [[] for _ in range(b)]
        self.steps: list[list[tuple]] = [[] for _ in range(b)]
        self.frames: list[list[tuple]] = [[] for _ in range(b)]

    def start(self, i, seed, obs, info) -> None:
        self.seeds[i], self.solved[i], self.states[i] = seed, info["is_success"], [obs]
        self.frames[i] = [_frames(self.envs[i].unwrapped, self.cameras)] if self.cameras else []

    def cut(self, i, obs, action) -> bool:
        self.idle[i] = self.idle[i] + 1 if self.solved[i] and not action.any() else 0
        return self.idle_steps is not None and self.idle[i] > self.idle_steps

    def step(self, s: Step) -> None:
        i = s.env
        self.solved[i] = s.info["is_success"]
        self.states[i].append(s.next_obs)
        if self.cameras:
            self.frames[i].append(_frames(self.envs[i].unwrapped, self.cameras))
        self.steps[i].append((s.action, s.reward, s.info["is_success"], self.policy.random[i]))

    def episodes(self) -> list[Episode]:
        return [
            _episode(env.unwrapped, seed, states, steps, bool(ok), frames)
            for env, seed, states, steps, ok, frames in zip(
                self.envs, self.seeds, self.states, self.steps, self.solved, self.frames, strict=True
            )
        ]


def _rollout(
    envs: list[gym.Env],
    seeds: list[int],
    policy: _Collecting,
    idle_steps: int | None,
    cameras: Sequence[str] | None = None,
    bar: tqdm | None = None,
) -> list[Episode]:
    """One episode per env, side by side (:func:`ecrl.rollout.rollout`); an episode ends at the horizon
    or after ``idle_steps`` idle steps. With ``cameras``, every state is rendered from them too."""
    recorder = _EpisodeRecorder(envs, policy, idle_steps, cameras)
    rollout(envs, policy, seeds, recorder=recorder, bar=bar)
    return recorder.episodes()


def _episode(
    env: Any,
    seed: int,
    states: list[dict[str, np.ndarray]],
    steps: list[tuple],
    success: bool,
    frames: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> Episode:
    """An :class:`Episode` from the observations, ``(action, reward, is_success, random)`` steps and
    (optionally) ``(rgb, segmentation)`` frames of a rollout."""
    n = env.n_objects
    achieved = np.stack([o["achieved_goal"][:n] for o in states])
    action, reward, is_success, random = (list(x) for x in zip(*steps, strict=True)) if steps else ([], [], [], [])
    if getattr(env, "mode", None) == "play":  # OGBench play: the episode's end is its goal
        desired, reward, is_success = ogbench_data.hindsight_goals(achieved)
        success = bool(is_success[-1]) if len(is_success) else True
    else:
        desired = states[0]["desired_goal"][:n]
        if not np.array_equal(states[-1]["desired_goal"][:n], desired):
            raise RuntimeError("desired_goal changed during an episode; this dataset format stores it per episode")
    return Episode(
        observation=np.stack([o["observation"][: 1 + n] for o in states]).astype(np.float32),
        achieved_goal=achieved.astype(np.float32),
        desired_goal=desired.astype(np.float32),
        action=np.array(action, np.float32).reshape(len(action), env.action_space.shape[0]),
        reward=np.array(reward, np.float32),
        is_success=np.array(is_success, bool),
        expert_random=np.array(random, bool),
        task=env.spec_,
        seed=int(seed),
        success=success,
        pixels=np.stack([f[0] for f in frames]) if frames else None,
        segmentation=np.stack([f[1] for f in frames]) if frames else None,
    )


def _collection_record(
    config: dict[str, Any], source: Mapping[str, Any], command: str, seeds: list[int]
) -> dict[str, Any]:
    """The ``meta.json`` record of one collection as it starts: nothing kept yet, not complete."""
    return {
        "config": config,
        **source,
        "command": command,
        "seeds": seeds,
        "kept": 0,
        "dropped": 0,
        "shards": [],
        "complete": False,
        "provenance": provenance(),
    }


def collect_dataset(
    path: str | Path,
    config: CollectConfig | None = None,
    policy: BatchPolicy | Callable[[], BatchPolicy] | None = None,
    *,
    append: bool = False,
    command: str | None = None,
    policy_info: Mapping[str, Any] | None = None,
    workers: int = 1,
    ranks: tuple[int, int] | None = None,
) -> CollectResult:
    """Roll out ``policy`` (default: the scripted expert) as ``config`` says and write the episodes to ``path``.

    With ``config.env = "ogbench-cube"`` the episodes run on :class:`~ecrl.envs.ogbench.OGBenchCubeEnv`:
    ``config.play`` rolls out OGBench's play oracle (:class:`~ecrl.envs.ogbench.CubePlayOracle`) in
    play mode, a ``policy`` acts on OGBench's evaluation tasks otherwise.

    The episodes run in batches of ``config.batch_size`` consecutive seeds (a batch never spans two
    (part, N) blocks). With ``workers`` K > 1 (or ``ranks``), the batches are cut into K contiguous
    seed ranges of about equal size, *shard sets*, each collected by one process
    (:mod:`ecrl.parallel`) into a dataset of its own in ``collection_<c>/worker_<k>/``; when every set
    is done, ``meta.json`` lists their shards in seed order, so the dataset reads as one (see
    :mod:`ecrl.dataset_format`): :class:`~ecrl.datasets.DemoDataset` returns the arrays a
    one-process collection of the same config writes. A parallel collection that was interrupted is
    finished by calling this again with ``append=True`` and the same config (any ``workers``): each
    set continues after its last shard.

    Args:
        path: the dataset directory; created if missing.
        config: what to collect (default: :class:`CollectConfig`'s defaults).
        policy: ``act(obs) -> (B, A)`` for a batch of observations, optionally ``reset(envs, seeds)``
            (e.g. :func:`ecrl.load`'s policies), or a zero-argument callable that builds one (what
            ``workers > 1`` need for a policy that cannot be pickled, e.g.
            :class:`ecrl.parallel.PolicyLoader`); ``None``: the scripted expert.
        append: add to an existing dataset; without it an existing dataset is an error.
        command: the command line that asked for this (recorded in ``meta.json``).
        policy_info: what to record about ``policy`` in ``meta.json``, beside its ``meta`` and repr.
        workers: processes collecting (at most one per batch).
        ranks: ``(rank, world size)`` of this process among ``torchrun``'s (:func:`ecrl.parallel.torchrun_rank`):
            every rank calls this with the same arguments and collects its own shard sets (``workers``
            each), and rank 0 writes ``meta.json``.

    Raises:
        DatasetError: ``path`` holds a dataset and ``append`` is False, holds something else, or
            (with ``append``) the seeds would repeat episodes already in it, or its last collection is
            an unfinished parallel one and ``config`` is not that collection's.
    """
    config = config or CollectConfig()
    _check_source(config, policy)
    if check_workers(workers) > 1:
        pickled(policy)  # before anything is written
    acting = build_policy(policy)
    source = {"source": "ogbench_play_oracle" if config.play else "scripted_expert"}
    if acting is not None:
        source = {"source": "policy", **describe(acting), **dict(policy_info or {})}
    writer = _open_writer(Path(path), config, append)
    unfinished = writer.unfinished_parallel()
    if unfinished is not None:
        _check_resume(writer.path, unfinished, config, source)
        return _collect_sets(writer, unfinished, config, (policy, acting), workers, ranks)
    seed = writer.meta["next_seed"] if config.seed is None else config.seed
    total = len(config.parts) * len(config.n_objects) * config.episodes
    writer.check_seeds(seed, seed + total)
    if seed < EVAL_SEED + 10_000 and seed + total > EVAL_SEED:
        warnings.warn(
            f"seeds {seed} … {seed + total - 1} reach the evaluation seeds (from {EVAL_SEED}): evaluation scenes "
            "would be in the training data",
            stacklevel=2,
        )
    record = _collection_record({**asdict(config), "seed": seed}, source, command, [seed, seed + total])
    plan = _plan(config, seed)
    sets = split_contiguous([b.count for b in plan], workers * (ranks[1] if ranks else 1))
    if len(sets) > 1 or ranks is not None:
        index = len(writer.meta["collections"])
        record["shard_sets"] = [
            {"dir": f"collection_{index:03d}/worker_{k:03d}", "seeds": [plan[g[0]].first, plan[g[-1]].stop]}
            for k, g in enumerate(sets)
        ]
        barrier(ranks)  # every rank has read the dataset as it was
        if ranks is None or ranks[0] == 0:
            writer.start(record)
        return _collect_sets(writer, record, config, (policy, acting), workers, ranks)
    writer.start(record)
    started = time.perf_counter()
    with _bar(config, total) as bar:
        _run_batches(writer, record, config, _actor(config, acting), plan, bar)
    record["complete"] = True
    record["wall_s"] = time.perf_counter() - started
    writer.finish()
    return CollectResult(
        Path(path),
        record["kept"],
        record["dropped"],
        writer.steps_added,
        record["shards"],
        (seed, seed + total),
        record["wall_s"],
    )


class _Batch(NamedTuple):
    """Episodes of seeds ``first … first + count - 1``, side by side, on ``n`` objects of split part ``part``."""

    part: str
    n: int
    first: int
    count: int

    @property
    def stop(self) -> int:
        return self.first + self.count


def _plan(config: CollectConfig, seed: int) -> list[_Batch]:
    """The batches of a collection from ``seed`` on, in seed order: per part, per N, ``config.episodes``
    episodes in batches of ``config.batch_size``."""
    batches, k = [], seed
    for part in config.parts:
        for n in config.n_objects:
            for first in range(0, config.episodes, config.batch_size):
                batches.append(_Batch(part, n, k, min(config.batch_size, config.episodes - first)))
                k += batches[-1].count
    return batches


def _actor(config: CollectConfig, policy: BatchPolicy | None) -> _Collecting:
    """The acting policy of ``config``: ``policy``, else OGBench's play oracle or the scripted expert."""
    return _Collecting(
        ogb.CubePlayOracle() if config.play else ExpertPolicy() if policy is None else policy, config.random_actions
    )


def _bar(config: CollectConfig, episodes: int) -> tqdm:
    """The progress bar of ``episodes`` episodes; play episodes are long (1,001 steps): that bar counts steps."""
    unit, per_episode = ("step", config.play_steps) if config.play else ("ep", 1)
    return tqdm(
        total=episodes * per_episode, desc="collect", unit=unit, dynamic_ncols=True, disable=not config.progress
    )


def _run_batches(
    writer: DatasetWriter,
    record: dict[str, Any],
    config: CollectConfig,
    actor: _Collecting,
    batches: Sequence[_Batch],
    bar: Any,
    skip_below: int | None = None,
) -> None:
    """Roll out ``batches`` and hand their episodes to ``writer`` (failures only counted, unless kept);
    episodes of seeds below ``skip_below`` (written before) are rolled out with their batch, not kept."""
    keep_all = config.play or not config.only_success  # a play episode has no goal to fail
    cameras = config.cameras if config.pixels else None
    envs: list[gym.Env] = []
    block = None
    for batch in batches:
        if (batch.part, batch.n) != block:
            for env in envs:
                env.close()
            env_id, env_kwargs = _env_spec(config, batch.n, batch.part)
            envs = [gym.make(env_id, **env_kwargs) for _ in range(min(config.batch_size, config.episodes))]
            block = (batch.part, batch.n)
        seeds = list(range(batch.first, batch.stop))
        episodes = _rollout(envs[: batch.count], seeds, actor, config.idle_steps, cameras, bar if config.play else None)
        for seed, episode in zip(seeds, episodes, strict=True):
            if skip_below is not None and seed < skip_below:
                continue
            if episode.success or keep_all:
                writer.add(episode)
                record["kept"] += 1
            else:
                record["dropped"] += 1
        if not config.play:
            bar.update(batch.count)
        bar.set_postfix(kept=record["kept"], dropped=record["dropped"])
    for env in envs:
        env.close()


# ---------------------------------------------------------------------------------------------- in parallel


@dataclass(frozen=True)
class _SetTask:
    """One shard set of a parallel collection: its batches, written as a dataset of its own to ``path``."""

    path: Path
    config: CollectConfig
    batches: tuple[_Batch, ...]
    seeds: tuple[int, int]
    record: dict[str, Any]
    """The collection's record (config, source, command) that the set's own ``meta.json`` repeats."""


def _collect_sets(
    writer: DatasetWriter,
    record: dict[str, Any],
    config: CollectConfig,
    policy: tuple[Any, BatchPolicy | None],
    workers: int,
    ranks: tuple[int, int] | None,
) -> CollectResult:
    """Collect (or finish) the shard sets of the parallel collection ``record`` (this rank's, with
    ranks); then rank 0 lists their shards in ``meta.json`` and marks the collection complete."""
    started = time.perf_counter()
    plan = _plan(config, record["seeds"][0])
    head = {k: v for k, v in record.items() if k not in ("kept", "dropped", "shards", "complete", "shard_sets")}
    tasks = [
        _SetTask(
            writer.path / s["dir"],
            config,
            tuple(b for b in plan if s["seeds"][0] <= b.first < s["seeds"][1]),
            tuple(s["seeds"]),
            head,
        )
        for s in record["shard_sets"]
    ]
    mine = tasks if ranks is None else tasks[ranks[0] :: ranks[1]]
    source, acting = policy
    with _bar(config, sum(t.seeds[1] - t.seeds[0] for t in mine)) as bar:
        if workers == 1 or len(mine) <= 1:
            for task in mine:
                _collect_set(task, acting, bar)
        else:
            run_tasks(_collect_set_in_worker, mine, workers, source, bar)
    barrier(ranks)  # every set is written
    if ranks is None or ranks[0] == 0:
        writer.record = record
        for s in record["shard_sets"]:
            writer.adopt(s["dir"])
        record["complete"] = True
        record["wall_s"] = record.get("wall_s", 0.0) + time.perf_counter() - started
        writer.finish()
    barrier(ranks)  # meta.json is written
    done = read_meta(writer.path)["collections"][-1]  # (nothing is added while a parallel collection is unfinished)
    steps = sum(read_meta(t.path)["steps"] for t in tasks)
    return CollectResult(
        writer.path, done["kept"], done["dropped"], steps, done["shards"], tuple(done["seeds"]), done["wall_s"]
    )


def _collect_set(task: _SetTask, policy: BatchPolicy | None, bar: Any) -> None:
    """Collect ``task``'s shard set into its directory, or finish it: episodes from the seed after its last
    shard on (the batch holding that seed runs whole, so that every episode is the one it would have been)."""
    started = time.perf_counter()
    resume = (task.path / META).exists()
    if not resume and task.path.is_dir():  # killed before its first meta.json: only temporary files
        for stray in task.path.glob(".*.tmp"):
            stray.unlink()
    writer = _open_writer(task.path, task.config, resume)
    done = writer.meta["next_seed"] if resume else task.seeds[0]
    todo = [b for b in task.batches if b.stop > done]
    bar.update(
        sum(b.count for b in task.batches if b.stop <= done) * (task.config.play_steps if task.config.play else 1)
    )
    if not todo:
        return
    record = _collection_record(task.record["config"], {}, task.record.get("command"), [done, task.seeds[1]])
    record.update({k: v for k, v in task.record.items() if k not in record})
    writer.start(record)
    _run_batches(writer, record, task.config, _actor(task.config, policy), todo, bar, skip_below=done)
    record["complete"] = True
    record["wall_s"] = time.perf_counter() - started
    writer.finish()


def _collect_set_in_worker(task: _SetTask) -> None:
    bar = worker_bar()
    _collect_set(task, worker_policy(), bar)
    bar.flush()


def _check_resume(path: Path, record: Mapping[str, Any], config: CollectConfig, source: Mapping[str, Any]) -> None:
    """``DatasetError`` unless ``config`` and ``source`` are those of the unfinished parallel collection ``record``."""
    given = {**asdict(config), "seed": record["config"]["seed"] if config.seed is None else config.seed}
    given = json.loads(json.dumps(given))
    differ = sorted(k for k in {*given, *record["config"]} - {"progress"} if given.get(k) != record["config"].get(k))
    differ += sorted(k for k in ("source", "policy") if source.get(k) != record.get(k))
    if differ:
        lo, hi = record["seeds"]
        raise DatasetError(
            f"the last collection in {path} (seeds {lo} … {hi - 1}, {len(record['shard_sets'])} shard sets "
            f"collected in parallel) did not finish, and this one differs from it in {differ}: run it again with "
            f"--append (append=True) and its options to finish it; it was: {record.get('command')}"
        )


def _check_source(config: CollectConfig, policy: BatchPolicy | None) -> None:
    """Raise ``ValueError`` where ``config`` and ``policy`` ask for episodes nothing can act in."""
    if config.random_actions == 1 and config.only_success and not config.play:
        raise ValueError("random_actions = 1 rolls out no expert at all, so keep failures too (only_success=False)")
    ogbench = config.env == "ogbench-cube"
    if ogbench and policy is None and not config.play:
        raise ValueError("OGBench cubes have a scripted oracle for play data only: pass --play, or a --policy")
    if ogbench and policy is not None and config.play:
        raise ValueError("play data comes from OGBench's oracle: pass --play or a --policy, not both")


def _open_writer(path: Path, config: CollectConfig, append: bool) -> DatasetWriter:
    """The writer of ``path``; an existing dataset must have been rendered as ``config`` renders."""
    writer = DatasetWriter(path, append, config.shard_episodes, config.action_dim)
    pixels = {"size": config.pixels, "cameras": list(config.cameras)} if config.pixels else None
    if writer.meta["episodes"] and writer.meta.get("pixels") != pixels:
        raise DatasetError(
            f"{path} was collected with pixels = {writer.meta.get('pixels')}, this collection would add "
            f"{pixels}; a dataset renders every episode the same way"
        )
    writer.meta["pixels"] = pixels
    return writer


def _env_spec(config: CollectConfig, n: int, part: str) -> tuple[str, dict[str, Any]]:
    """Registered id and keyword arguments of the envs collecting ``n`` objects of split part ``part``."""
    env_id, env_kwargs = "ecrl/Push-v0", {"n_objects": n, "goal": config.goal}
    if config.env == "ogbench-cube":
        env_id, env_kwargs = "ecrl/OGBenchCube-v0", {"n_cubes": n, "mode": "play" if config.play else "task"}
        if config.play:
            env_kwargs["max_episode_steps"] = config.play_steps
    env_kwargs |= {"n_max": config.n_max, "reward_type": config.reward}
    if config.pixels:
        env_kwargs.update(width=config.pixels, height=config.pixels)
    if config.split:
        env_kwargs.update(split=config.split, part=part)
    return env_id, env_kwargs


def import_ogbench_dataset(
    path: str | Path,
    source: str | Path,
    *,
    n_cubes: int | None = None,
    append: bool = False,
    shard_episodes: int = 100,
    command: str | None = None,
) -> CollectResult:
    """Convert an OGBench cube dataset file (e.g. ``cube-double-play-v0.npz``) into a dataset at ``path``.

    The file is read by :func:`ecrl.envs.ogbench_data.load_ogbench_episodes` (entity rows, hindsight
    goals); its episodes are written like collected ones (seed -1: they have no reset seed).

    Raises:
        ValueError: ``source`` is not an OGBench cube dataset file.
        DatasetError: as for :func:`collect_dataset` (an existing dataset without ``append``, …).
    """
    started = time.perf_counter()
    episodes = ogbench_data.load_ogbench_episodes(source, n_cubes)
    n = episodes[0]["task"].n_cubes if episodes else ogb.check_n_cubes(n_cubes or 2)
    writer = DatasetWriter(Path(path), append, shard_episodes, ogb.ACTION_DIM)
    config = CollectConfig(env="ogbench-cube", play=True, n_objects=(n,), episodes=max(len(episodes), 1))
    config.shard_episodes, config.progress = shard_episodes, False
    next_seed = writer.meta["next_seed"]
    origin = {"source": "ogbench_file", "file": str(source)}
    record = _collection_record(asdict(config), origin, command, [next_seed, next_seed])
    writer.start(record)
    for e in episodes:
        steps = len(e["action"])
        writer.add(
            Episode(
                **{k: e[k] for k in ("observation", "achieved_goal", "desired_goal", "action", "reward", "is_success")},
                expert_random=np.zeros(steps, bool),
                task=e["task"],
                seed=-1,
                success=bool(e["is_success"][-1]) if steps else True,
            )
        )
        record["kept"] += 1
    record["complete"] = True
    record["wall_s"] = time.perf_counter() - started
    writer.finish()
    return CollectResult(
        Path(path), record["kept"], 0, writer.steps_added, record["shards"], (next_seed, next_seed), record["wall_s"]
    )
