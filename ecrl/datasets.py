"""Demonstration datasets: episodes of entity observations and actions, for diffusion planners.

:func:`collect_dataset` rolls out the scripted expert (or any policy with ``act(obs)``) on push
tasks and writes the episodes to a directory; :class:`DemoDataset` reads it back and cuts
fixed-horizon windows for training. Both speak in entity rows (:mod:`ecrl.envs.layout`), never in
flat vectors, and a dataset may mix episodes with different numbers of objects.

On-disk format (version 1)
--------------------------
A dataset is a directory::

    meta.json            what the dataset is and how it was made (below)
    shard_00000.npz      compressed numpy arrays of a few episodes each (np.savez_compressed)
    shard_00001.npz      ...

``meta.json`` holds ``format`` (``"ecrl.demos"``), ``version`` (1), the layout it was written
with (``entity_dim``, ``goal_dim``, ``action_dim``, and ``entity_fields``/``goal_fields``: each
field's ``[start, stop)`` columns), ``shards`` (one entry per shard: ``file``, ``episodes``,
``steps``, ``n_max``, ``successes``), the totals ``episodes``, ``steps`` and ``dropped`` (failed
episodes left out), ``next_seed`` (where an appended collection starts by default) and
``collections``: one record per run that added episodes (its config, command, seeds, counts,
shards and provenance). A run that was interrupted (``complete`` false) keeps, on the next
``--append``, only the seeds up to its last shard (``seeds_done``), and the append continues there.

A shard holds ``E`` episodes concatenated along time. Episode ``e`` has ``T_e`` steps
(actions) and ``T_e + 1`` states; with ``S = sum(T_e)`` steps and ``m`` = the largest number of
objects in the shard (entity rows beyond an episode's own ``n`` are all zero, as the env pads):

======================  ======================  =========  =============================================
array                   shape                   dtype      meaning
======================  ======================  =========  =============================================
``observation``         ``(S + E, 1 + m, De)``  float32    entity rows (agent first), states s_0 … s_T
``achieved_goal``       ``(S + E, m, Dg)``      float32    goal rows of the objects' positions, per state
``desired_goal``        ``(E, m, Dg)``          float32    goal rows of the targets, per episode (push
                                                           goals are static: they are read at reset)
``action``              ``(S, A)``              float32    the action taken in state s_t, in [-1, 1]
                                                           (``A = meta["action_dim"]``: 2 for push, 5
                                                           for OGBench cubes)
``reward``              ``(S,)``                float32    the env reward of that step
``is_success``          ``(S,)``                bool       every object placed after that step
``expert_random``       ``(S,)``                bool       the scripted expert's random step out of a
                                                           stall (real dynamics, poor labels)
``episode_starts``      ``(E,)``                int64      index of the episode's first step in the step
                                                           arrays; its states start at ``starts[e] + e``
``episode_lengths``     ``(E,)``                int64      ``T_e``
``n_objects``           ``(E,)``                int64      the episode's own number of objects ``n``
``seed``                ``(E,)``                int64      the seed the env (and expert) were reset with
``success``             ``(E,)``                bool       every object placed at the episode's end
``task_json``           ``(L,)``                uint8      UTF-8 JSON list of the E tasks
                                                           (``TaskSpec.to_dict``)
``pixels``              ``(S + E, V, P, P, 3)``  uint8     only in a pixel dataset (below): RGB frames
                                                           of every state from ``V`` cameras
``segmentation``        ``(S + E, V, P, P)``    uint8      only in a pixel dataset: per-pixel labels,
                                                           0 background, 1 the agent, ``i + 2`` object
                                                           ``i`` (``labels - 1`` indexes ``observation``)
======================  ======================  =========  =============================================

A *pixel dataset* (``ecrl-collect --pixels P``) also records, for every state, ``P`` × ``P`` RGB
frames from the cameras ``meta["pixels"]["cameras"]`` and MuJoCo's segmentation of them; its
``meta.json`` has ``pixels = {"size": P, "cameras": [...]}`` (``null`` otherwise), and every
collection appended to it must render the same way. ``--random-actions p`` replaces each action,
with probability ``p``, by a uniformly random one (flagged in ``expert_random``): ``p = 1`` gives
random rollouts, whose frames show the objects in places an expert would not push them to.

*OGBench cube datasets* (``ecrl-collect --env ogbench-cube``, see :mod:`ecrl.envs.ogbench`) have
5-D actions and play episodes: play has no goal of its own, so an episode's ``desired_goal`` is its
last ``achieved_goal`` (a hindsight goal) and ``reward``/``is_success``/``success`` are measured
against it (every cube within 4 cm). Their ``task_json`` entries are
:class:`~ecrl.envs.ogbench.OGBenchCubeTask` dicts (``"benchmark": "ogbench"``); an episode converted
from an OGBench file has seed -1 (no reset seed).

Everything loads with ``np.load(..., allow_pickle=False)``. Once every object is placed the
scripted expert idles; an episode keeps at most ``idle_steps`` idle steps (zero action in a solved
state: enough to show how to stop, not so many that zeros swamp the data) and ends there.
Shards are written once and never changed: appending adds shards, and ``meta.json`` is replaced
(atomically) after every shard, so an interrupted collection leaves a readable dataset.

Example::

    import numpy as np
    from ecrl.datasets import CollectConfig, DemoDataset, collect_dataset

    collect_dataset("data/push3", CollectConfig(n_objects=(3,), episodes=100))
    data = DemoDataset("data/push3")
    batch = data.sample_windows(64, horizon=16, rng=np.random.default_rng(0))
"""

from __future__ import annotations

import inspect
import json
import os
import time
import warnings
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from ecrl.envs import ENTITY_DIM, ENTITY_FIELDS, GOAL_DIM, GOAL_FIELDS, TaskSpec
from ecrl.envs import ogbench as ogb
from ecrl.envs.scene import CAMERAS, MAIN_CAMERAS
from ecrl.evaluation import EVAL_SEED, check_settings, describe
from ecrl.reporting import provenance
from ecrl.rollout import BatchPolicy, ExpertPolicy, Recorder, Step, rollout

__all__ = [
    "ACTION_DIM",
    "FORMAT",
    "VERSION",
    "CollectConfig",
    "CollectResult",
    "DatasetError",
    "DemoDataset",
    "Episode",
    "collect_dataset",
    "import_ogbench_dataset",
    "read_meta",
]

FORMAT, VERSION, META = "ecrl.demos", 1, "meta.json"
ACTION_DIM = 2
"""Action width of push datasets (an OGBench cube dataset's is :data:`ecrl.envs.ogbench.ACTION_DIM`)."""
ENVS = ("push", "ogbench-cube")
_STEP_KEYS = ("action", "reward", "is_success", "expert_random")
_EPISODE_KEYS = ("episode_starts", "episode_lengths", "n_objects", "seed", "success")
SHARD_KEYS = ("observation", "achieved_goal", "desired_goal", *_STEP_KEYS, *_EPISODE_KEYS, "task_json")
PIXEL_KEYS = ("pixels", "segmentation")


class DatasetError(ValueError):
    """A path that is not a readable ``ecrl`` demonstration dataset, or one this version cannot use."""


@dataclass
class Episode:
    """One episode, unpadded: ``T`` steps, ``n`` objects.

    Attributes:
        observation: ``(T + 1, 1 + n, ENTITY_DIM)`` entity rows of states s_0 … s_T.
        achieved_goal: ``(T + 1, n, GOAL_DIM)`` goal rows at the objects' positions.
        desired_goal: ``(n, GOAL_DIM)`` the targets (static within an episode).
        action: ``(T, A)`` actions in ``[-1, 1]``.
        reward: ``(T,)`` env rewards.
        is_success: ``(T,)`` bool, every object placed after the step.
        expert_random: ``(T,)`` bool, the expert's random steps out of a stall (or ``--random-actions``).
        task: the episode's task (an :class:`~ecrl.envs.ogbench.OGBenchCubeTask` for OGBench cubes).
        seed: the reset seed.
        success: every object placed at the end.
    """

    observation: np.ndarray
    achieved_goal: np.ndarray
    desired_goal: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    is_success: np.ndarray
    expert_random: np.ndarray
    task: TaskSpec | ogb.OGBenchCubeTask
    seed: int
    success: bool
    pixels: np.ndarray | None = None
    """``(T + 1, V, P, P, 3)`` uint8 RGB frames of every state (pixel datasets only)."""
    segmentation: np.ndarray | None = None
    """``(T + 1, V, P, P)`` uint8 labels: 0 background, 1 agent, ``i + 2`` object ``i`` (pixel datasets only)."""

    def __len__(self) -> int:
        return len(self.action)

    @property
    def n_objects(self) -> int:
        return self.task.n_objects


# ---------------------------------------------------------------------------------------------- collection


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
        desired, reward, is_success = ogb.hindsight_goals(achieved)
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


def collect_dataset(
    path: str | Path,
    config: CollectConfig | None = None,
    policy: BatchPolicy | None = None,
    *,
    append: bool = False,
    command: str | None = None,
    policy_info: Mapping[str, Any] | None = None,
) -> CollectResult:
    """Roll out ``policy`` (default: the scripted expert) as ``config`` says and write the episodes to ``path``.

    With ``config.env = "ogbench-cube"`` the episodes run on :class:`~ecrl.envs.ogbench.OGBenchCubeEnv`:
    ``config.play`` rolls out OGBench's play oracle (:class:`~ecrl.envs.ogbench.CubePlayOracle`) in
    play mode, a ``policy`` acts on OGBench's evaluation tasks otherwise.

    Args:
        path: the dataset directory; created if missing.
        config: what to collect (default: :class:`CollectConfig`'s defaults).
        policy: ``act(obs) -> (B, A)`` for a batch of observations, optionally ``reset(envs, seeds)``
            (e.g. :func:`ecrl.load`'s policies); ``None``: the scripted expert.
        append: add to an existing dataset; without it an existing dataset is an error.
        command: the command line that asked for this (recorded in ``meta.json``).
        policy_info: what to record about ``policy`` in ``meta.json``, beside its ``meta`` and repr.

    Raises:
        DatasetError: ``path`` holds a dataset and ``append`` is False, holds something else, or
            (with ``append``) the seeds would repeat episodes already in it.
    """
    config = config or CollectConfig()
    if config.random_actions == 1 and config.only_success and not config.play:
        raise ValueError("random_actions = 1 rolls out no expert at all, so keep failures too (only_success=False)")
    ogbench = config.env == "ogbench-cube"
    if ogbench and policy is None and not config.play:
        raise ValueError("OGBench cubes have a scripted oracle for play data only: pass --play, or a --policy")
    if ogbench and policy is not None and config.play:
        raise ValueError("play data comes from OGBench's oracle: pass --play or a --policy, not both")
    writer = _Writer(Path(path), append, config.shard_episodes, config.action_dim)
    pixels = {"size": config.pixels, "cameras": list(config.cameras)} if config.pixels else None
    if writer.meta["episodes"] and writer.meta.get("pixels") != pixels:
        raise DatasetError(
            f"{path} was collected with pixels = {writer.meta.get('pixels')}, this collection would add "
            f"{pixels}; a dataset renders every episode the same way"
        )
    writer.meta["pixels"] = pixels
    seed = writer.meta["next_seed"] if config.seed is None else config.seed
    total = len(config.parts) * len(config.n_objects) * config.episodes
    writer.check_seeds(seed, seed + total)
    if seed < EVAL_SEED + 10_000 and seed + total > EVAL_SEED:
        warnings.warn(
            f"seeds {seed} … {seed + total - 1} reach the evaluation seeds (from {EVAL_SEED}): evaluation scenes "
            "would be in the training data",
            stacklevel=2,
        )
    source = {"source": "ogbench_play_oracle" if config.play else "scripted_expert"}
    if policy is not None:
        source = {"source": "policy", **describe(policy), **dict(policy_info or {})}
    record: dict[str, Any] = {
        "config": {**asdict(config), "seed": seed},
        **source,
        "command": command,
        "seeds": [seed, seed + total],
        "kept": 0,
        "dropped": 0,
        "shards": [],
        "complete": False,
        "provenance": provenance(),
    }
    writer.start(record)
    actor = _Collecting(
        ogb.CubePlayOracle() if config.play else ExpertPolicy() if policy is None else policy, config.random_actions
    )
    keep_all = config.play or not config.only_success  # a play episode has no goal to fail
    started, k = time.perf_counter(), seed
    # Play episodes are long (1,001 steps): their bar counts steps, as they happen.
    unit, per_episode = ("step", config.play_steps) if config.play else ("ep", 1)
    bar = tqdm(total=total * per_episode, desc="collect", unit=unit, dynamic_ncols=True, disable=not config.progress)
    steps_bar = bar if config.play else None
    for part in config.parts:
        for n in config.n_objects:
            env_id, env_kwargs = "ecrl/Push-v0", {"n_objects": n, "goal": config.goal}
            if ogbench:
                env_id, env_kwargs = "ecrl/OGBenchCube-v0", {"n_cubes": n, "mode": "play" if config.play else "task"}
                if config.play:
                    env_kwargs["max_episode_steps"] = config.play_steps
            env_kwargs |= {"n_max": config.n_max, "reward_type": config.reward}
            if config.pixels:
                env_kwargs.update(width=config.pixels, height=config.pixels)
            if config.split:
                env_kwargs.update(split=config.split, part=part)
            envs = [gym.make(env_id, **env_kwargs) for _ in range(min(config.batch_size, config.episodes))]
            for first in range(0, config.episodes, config.batch_size):
                chunk = envs[: min(config.batch_size, config.episodes - first)]
                seeds = list(range(k, k + len(chunk)))
                cameras = config.cameras if config.pixels else None
                for episode in _rollout(chunk, seeds, actor, config.idle_steps, cameras, steps_bar):
                    if episode.success or keep_all:
                        writer.add(episode)
                        record["kept"] += 1
                    else:
                        record["dropped"] += 1
                k += len(chunk)
                if not config.play:
                    bar.update(len(chunk))
                bar.set_postfix(kept=record["kept"], dropped=record["dropped"])
            for env in envs:
                env.close()
    bar.close()
    record["complete"] = True
    record["wall_s"] = time.perf_counter() - started
    writer.finish()
    return CollectResult(
        Path(path), record["kept"], record["dropped"], writer.steps_added, record["shards"], (seed, k), record["wall_s"]
    )


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

    The file is read by :func:`ecrl.envs.ogbench.load_ogbench_episodes` (entity rows, hindsight
    goals); its episodes are written like collected ones (seed -1: they have no reset seed).

    Raises:
        ValueError: ``source`` is not an OGBench cube dataset file.
        DatasetError: as for :func:`collect_dataset` (an existing dataset without ``append``, …).
    """
    started = time.perf_counter()
    episodes = ogb.load_ogbench_episodes(source, n_cubes)
    n = episodes[0]["task"].n_cubes if episodes else ogb.check_n_cubes(n_cubes or 2)
    writer = _Writer(Path(path), append, shard_episodes, ogb.ACTION_DIM)
    config = CollectConfig(env="ogbench-cube", play=True, n_objects=(n,), episodes=max(len(episodes), 1))
    config.shard_episodes, config.progress = shard_episodes, False
    next_seed = writer.meta["next_seed"]
    record: dict[str, Any] = {
        "config": asdict(config),
        "source": "ogbench_file",
        "file": str(source),
        "command": command,
        "seeds": [next_seed, next_seed],
        "kept": 0,
        "dropped": 0,
        "shards": [],
        "complete": False,
        "provenance": provenance(),
    }
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


# ---------------------------------------------------------------------------------------------- writing


def _fields(fields: Mapping[str, slice]) -> dict[str, list[int]]:
    return {name: [s.start, s.stop] for name, s in fields.items()}


def _empty_meta(action_dim: int = ACTION_DIM) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "entity_dim": ENTITY_DIM,
        "goal_dim": GOAL_DIM,
        "action_dim": action_dim,
        "entity_fields": _fields(ENTITY_FIELDS),
        "goal_fields": _fields(GOAL_FIELDS),
        "episodes": 0,
        "steps": 0,
        "dropped": 0,
        "next_seed": 0,
        "pixels": None,
        "shards": [],
        "collections": [],
    }


def _pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
    """``x`` with all-zero rows appended along axis 1 up to ``rows`` (or cut to ``rows``: those are zero)."""
    if x.shape[1] >= rows:
        return x[:, :rows]
    return np.pad(x, [(0, 0), (0, rows - x.shape[1])] + [(0, 0)] * (x.ndim - 2))


def _shard_arrays(episodes: Sequence[Episode]) -> dict[str, np.ndarray]:
    """The arrays of a shard holding ``episodes`` (see the module docstring)."""
    m = max(e.n_objects for e in episodes)
    lengths = np.array([len(e) for e in episodes], np.int64)
    tasks = json.dumps([e.task.to_dict() for e in episodes]).encode()
    return {
        "observation": np.concatenate([_pad_rows(e.observation, 1 + m) for e in episodes]),
        "achieved_goal": np.concatenate([_pad_rows(e.achieved_goal, m) for e in episodes]),
        "desired_goal": np.stack([_pad_rows(e.desired_goal[None], m)[0] for e in episodes]),
        **{key: np.concatenate([getattr(e, key) for e in episodes]) for key in _STEP_KEYS},
        "episode_starts": np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64),
        "episode_lengths": lengths,
        "n_objects": np.array([e.n_objects for e in episodes], np.int64),
        "seed": np.array([e.seed for e in episodes], np.int64),
        "success": np.array([e.success for e in episodes], bool),
        "task_json": np.frombuffer(tasks, np.uint8),
        **(
            {key: np.concatenate([getattr(e, key) for e in episodes]) for key in PIXEL_KEYS}
            if episodes[0].pixels is not None
            else {}
        ),
    }


def _write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, path)


class _Writer:
    """Adds episodes to a dataset directory in shards; ``meta.json`` is rewritten after every shard,
    so a collection killed midway leaves a valid dataset of the shards it finished."""

    def __init__(self, path: Path, append: bool, shard_episodes: int, action_dim: int = ACTION_DIM) -> None:
        self.path, self.shard_episodes = path, shard_episodes
        if (path / META).exists():
            if not append:
                raise DatasetError(
                    f"{path} already holds a dataset ({read_meta(path)['episodes']} episodes); pass --append "
                    "(append=True) to add episodes to it, or choose another output directory"
                )
            self.meta = read_meta(path)
            self._cut_interrupted()
        elif path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise DatasetError(f"{path} exists and is not a dataset (no {META}); refusing to write into it")
        else:
            self.meta = _empty_meta(action_dim)
        if self.meta["action_dim"] != action_dim:
            raise DatasetError(
                f"{path} holds {self.meta['action_dim']}-D actions, this collection records {action_dim}-D ones; "
                "a dataset has one action width"
            )
        self.pending: list[Episode] = []
        self.steps_added = 0

    def _cut_interrupted(self) -> None:
        """An interrupted collection keeps the seeds of the episodes it wrote (or dropped) before its last
        shard, so that an appended collection continues right where it stopped."""
        collections = self.meta["collections"]
        if collections and not collections[-1].get("complete", True):
            last = collections[-1]
            last["seeds"][1] = last.get("seeds_done", last["seeds"][0])
            self.meta["next_seed"] = max(c["seeds"][1] for c in collections)

    def check_seeds(self, first: int, stop: int) -> None:
        for c in self.meta["collections"]:
            lo, hi = c["seeds"]
            if first < hi and lo < stop:
                raise DatasetError(
                    f"seeds {first} … {stop - 1} overlap seeds {lo} … {hi - 1} of an earlier collection in "
                    f"{self.path}, which would repeat its episodes; omit the seed to continue from "
                    f"{self.meta['next_seed']}"
                )

    def start(self, record: dict[str, Any]) -> None:
        self.record = record
        self.meta["collections"].append(record)
        self.meta["next_seed"] = max(self.meta["next_seed"], record["seeds"][1])
        self.path.mkdir(parents=True, exist_ok=True)
        self._write_meta()

    def add(self, episode: Episode) -> None:
        self.pending.append(episode)
        if len(self.pending) >= self.shard_episodes:
            self._flush()

    def finish(self) -> None:
        self._flush()
        self._write_meta()

    def _flush(self) -> None:
        if not self.pending:
            return
        arrays = _shard_arrays(self.pending)
        if self.pending[-1].seed >= 0:  # every episode up to this one is now written or dropped
            self.record["seeds_done"] = self.pending[-1].seed + 1
        name = f"shard_{len(self.meta['shards']):05d}.npz"
        _write_atomic(self.path / name, lambda f: np.savez_compressed(f, **arrays))
        steps = len(arrays["action"])
        self.meta["shards"].append(
            {
                "file": name,
                "episodes": len(self.pending),
                "steps": steps,
                "n_max": arrays["desired_goal"].shape[1],
                "successes": int(arrays["success"].sum()),
            }
        )
        self.meta["episodes"] += len(self.pending)
        self.meta["steps"] += steps
        self.record["shards"].append(name)
        self.steps_added += steps
        self.pending = []
        self._write_meta()

    def _write_meta(self) -> None:
        self.meta["dropped"] = sum(c["dropped"] for c in self.meta["collections"])
        text = json.dumps(self.meta, indent=1) + "\n"
        _write_atomic(self.path / META, lambda f: f.write(text.encode()))


# ---------------------------------------------------------------------------------------------- reading


def read_meta(path: str | Path) -> dict[str, Any]:
    """``meta.json`` of the dataset at ``path``, checked against this version's format and layout."""
    path = Path(path)
    if not (path / META).is_file():
        what = "does not exist" if not path.exists() else f"has no {META}"
        raise DatasetError(f"{path} {what}: expected a dataset directory written by ecrl-collect ({META} + shards)")
    try:
        meta = json.loads((path / META).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path / META} is not valid JSON: {e}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise DatasetError(f"{path / META}: expected format {FORMAT!r}, found {found!r}")
    if meta.get("version") != VERSION:
        raise DatasetError(f"{path / META}: expected format version {VERSION}, found {meta.get('version')!r}")
    expected = _empty_meta()
    action_dim = meta.get("action_dim")
    if isinstance(action_dim, bool) or not isinstance(action_dim, int) or action_dim < 1:
        raise DatasetError(f"{path / META}: action_dim must be a positive integer, found {action_dim!r}")
    for key in ("entity_dim", "goal_dim", "entity_fields", "goal_fields"):
        if meta.get(key) != expected[key]:
            raise DatasetError(
                f"{path / META}: written with {key} = {meta.get(key)!r}, but this ecrl's layout has "
                f"{expected[key]!r}; re-collect the dataset with this version"
            )
    missing = {"shards", "episodes", "steps", "collections", "next_seed"} - set(meta)
    if missing:
        raise DatasetError(f"{path / META} lacks {sorted(missing)}")
    for entry in meta["shards"]:
        if not isinstance(entry, dict) or not {"file", "episodes", "steps", "n_max"} <= set(entry):
            raise DatasetError(f"{path / META}: a shard entry needs file, episodes, steps and n_max; found {entry!r}")
        if Path(entry["file"]).name != entry["file"]:
            raise DatasetError(
                f"{path / META}: shard file {entry['file']!r} must be a name inside the dataset directory"
            )
    return meta


def _load_shard(
    path: Path, entry: Mapping[str, Any], pixels: Mapping[str, Any] | None = None, action_dim: int = ACTION_DIM
) -> dict[str, np.ndarray]:
    """The arrays of one shard, checked against each other and against its ``meta.json`` entry
    (``pixels``: the dataset's ``meta["pixels"]``; ``action_dim``: its ``meta["action_dim"]``)."""
    file = path / entry["file"]
    keys = SHARD_KEYS + (PIXEL_KEYS if pixels else ())
    try:
        with np.load(file, allow_pickle=False) as data:
            missing = set(keys) - set(data.files)
            if missing:
                raise DatasetError(f"{file} lacks arrays {sorted(missing)}; expected {list(keys)}")
            arrays = {key: data[key] for key in keys}
    except FileNotFoundError as e:
        raise DatasetError(f"{file} is listed in {path / META} but missing") from e
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        if isinstance(e, DatasetError):
            raise
        raise DatasetError(f"{file} is not a readable npz shard (corrupt or truncated?): {e}") from e
    lengths, m = arrays["episode_lengths"], arrays["desired_goal"].shape[1] if arrays["desired_goal"].ndim == 3 else -1
    e, s = len(lengths), int(lengths.sum())
    expected = {
        "observation": (s + e, 1 + m, ENTITY_DIM),
        "achieved_goal": (s + e, m, GOAL_DIM),
        "desired_goal": (e, m, GOAL_DIM),
        "action": (s, action_dim),
        **{key: (s,) for key in _STEP_KEYS[1:]},
        **{key: (e,) for key in _EPISODE_KEYS},
    }
    if pixels:
        v, size = len(pixels["cameras"]), pixels["size"]
        expected.update(pixels=(s + e, v, size, size, 3), segmentation=(s + e, v, size, size))
    for key, shape in expected.items():
        if arrays[key].shape != shape:
            raise DatasetError(
                f"{file}: {key} should have shape {shape} (from its episode lengths), found {arrays[key].shape}"
            )
    found = {"episodes": e, "steps": s, "n_max": m}
    if any(entry.get(k) != v for k, v in found.items()):
        raise DatasetError(
            f"{file} does not match its entry in {path / META}: expected "
            f"{ {k: entry.get(k) for k in found} }, found {found}"
        )
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    if (lengths < 0).any() or not np.array_equal(arrays["episode_starts"], starts):
        raise DatasetError(f"{file}: episode_starts {arrays['episode_starts']} disagree with episode_lengths {lengths}")
    if e and not ((arrays["n_objects"] >= 1) & (arrays["n_objects"] <= m)).all():
        raise DatasetError(f"{file}: n_objects {arrays['n_objects']} must be in 1 … {m} (the shard's padding)")
    try:
        tasks = json.loads(arrays.pop("task_json").tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DatasetError(f"{file}: task_json is not valid UTF-8 JSON: {err}") from err
    if not isinstance(tasks, list) or len(tasks) != e:
        raise DatasetError(f"{file}: task_json should be a list of {e} tasks, found {type(tasks).__name__}")
    arrays["tasks"] = tasks
    return arrays


class DemoDataset:
    """A demonstration dataset in memory: episodes and fixed-horizon training windows.

    Every shard is read (and checked) at construction; entity rows are padded to the dataset's
    largest number of objects ``n_max`` in memory and cut or padded per batch.

    Args:
        path: a dataset directory written by :func:`collect_dataset` / ``ecrl-collect``.

    Attributes:
        meta: the checked ``meta.json``.
        n_max: the most objects of any episode; entity arrays have ``1 + n_max`` rows.
        observation, achieved_goal: ``(S + E, 1 + n_max, ENTITY_DIM)``, ``(S + E, n_max, GOAL_DIM)``
            states of every episode, one after the other; episode ``e``'s start at ``state_starts[e]``.
        action, reward, is_success, expert_random: ``(S, A)``, ``(S,)``: steps, from ``step_starts[e]``.
        desired_goal: ``(E, n_max, GOAL_DIM)``.
        lengths, n_objects, seeds, success: ``(E,)`` per episode.
        pixels, segmentation: ``(S + E, V, P, P, 3)`` and ``(S + E, V, P, P)`` uint8 frames of every
            state, aligned with ``observation`` (``None`` unless it is a pixel dataset).
        cameras: the cameras of the frames (empty unless it is a pixel dataset).

    Raises:
        DatasetError: the directory is missing, or its ``meta.json`` or a shard is unreadable, of
            another format version or layout, or inconsistent.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.meta = read_meta(self.path)
        self.pixel_meta = self.meta.get("pixels")
        self.action_dim = int(self.meta["action_dim"])
        shards = [_load_shard(self.path, entry, self.pixel_meta, self.action_dim) for entry in self.meta["shards"]]
        counts = {"episodes": sum(len(s["seed"]) for s in shards), "steps": sum(len(s["action"]) for s in shards)}
        if counts != {k: self.meta[k] for k in counts}:
            raise DatasetError(
                f"{self.path / META} counts { {k: self.meta[k] for k in counts} }, its shards hold {counts}"
            )
        self.n_max = max((s["desired_goal"].shape[1] for s in shards), default=1)
        cat = lambda key, rows=None: np.concatenate(  # noqa: E731
            [s[key] if rows is None else _pad_rows(s[key], rows) for s in shards]
        )
        if shards:
            self.observation = cat("observation", 1 + self.n_max)
            self.achieved_goal, self.desired_goal = cat("achieved_goal", self.n_max), cat("desired_goal", self.n_max)
            self.action, self.reward = cat("action"), cat("reward")
            self.is_success, self.expert_random = cat("is_success"), cat("expert_random")
            self.lengths, self.n_objects = cat("episode_lengths"), cat("n_objects")
            self.seeds, self.success = cat("seed"), cat("success")
            self.pixels = cat("pixels") if self.pixel_meta else None
            self.segmentation = cat("segmentation") if self.pixel_meta else None
        else:
            self._empty()
        self._tasks = [t for s in shards for t in s["tasks"]]
        self.step_starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.state_starts = self.step_starts + np.arange(len(self.lengths))
        self._step_episode = np.repeat(np.arange(len(self.lengths)), self.lengths)

    def _empty(self) -> None:
        m = self.n_max
        self.observation = np.zeros((0, 1 + m, ENTITY_DIM), np.float32)
        self.achieved_goal = np.zeros((0, m, GOAL_DIM), np.float32)
        self.desired_goal = np.zeros((0, m, GOAL_DIM), np.float32)
        self.action = np.zeros((0, self.action_dim), np.float32)
        self.reward = np.zeros(0, np.float32)
        self.is_success, self.expert_random, self.success = (np.zeros(0, bool) for _ in range(3))
        self.lengths, self.n_objects, self.seeds = (np.zeros(0, np.int64) for _ in range(3))
        self.pixels = self.segmentation = None

    @property
    def cameras(self) -> tuple[str, ...]:
        return tuple(self.pixel_meta["cameras"]) if self.pixel_meta else ()

    def __repr__(self) -> str:
        return f"DemoDataset({str(self.path)!r}, episodes={len(self)}, steps={self.num_steps}, n_max={self.n_max})"

    def __len__(self) -> int:
        """Number of episodes."""
        return len(self.lengths)

    @property
    def num_steps(self) -> int:
        """Number of steps (actions) over all episodes."""
        return len(self.action)

    def task(self, i: int) -> TaskSpec | ogb.OGBenchCubeTask:
        """The task of episode ``i``."""
        task = self._tasks[i]
        if isinstance(task, dict) and task.get("benchmark") == "ogbench":
            return ogb.OGBenchCubeTask.from_dict(task)
        return TaskSpec.from_dict(task)

    def __getitem__(self, i: int) -> Episode:
        """Episode ``i``, unpadded to its own number of objects."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"episode {i} out of range for a dataset of {len(self)} episodes")
        i = int(i) % len(self)
        n, t = int(self.n_objects[i]), int(self.lengths[i])
        states, steps = (
            slice(self.state_starts[i], self.state_starts[i] + t + 1),
            slice(self.step_starts[i], self.step_starts[i] + t),
        )
        return Episode(
            observation=self.observation[states, : 1 + n],
            achieved_goal=self.achieved_goal[states, :n],
            desired_goal=self.desired_goal[i, :n],
            action=self.action[steps],
            reward=self.reward[steps],
            is_success=self.is_success[steps],
            expert_random=self.expert_random[steps],
            task=self.task(i),
            seed=int(self.seeds[i]),
            success=bool(self.success[i]),
            pixels=None if self.pixels is None else self.pixels[states],
            segmentation=None if self.segmentation is None else self.segmentation[states],
        )

    def __iter__(self) -> Iterator[Episode]:
        return (self[i] for i in range(len(self)))

    def windows(
        self, episodes: np.ndarray, starts: np.ndarray, horizon: int, n_max: int | None = None
    ) -> dict[str, np.ndarray]:
        """Windows of ``horizon`` steps from step ``starts[b]`` of episode ``episodes[b]``.

        A window that runs past its episode's end repeats the last state, has zero actions and
        rewards, and is marked invalid there; it never reaches into another episode.

        Args:
            episodes: ``(B,)`` episode indices.
            starts: ``(B,)`` first step of each window, ``0 <= starts[b] < len(episode)``.
            horizon: ``H``, steps per window.
            n_max: objects to pad to (default: the most in the batch); ``N = 1 + n_max`` entity rows.

        Returns:
            ``observation (B, H+1, N, ENTITY_DIM)`` states s_t … s_{t+H}; ``achieved_goal
            (B, H+1, N-1, GOAL_DIM)``; ``action (B, H, A)``; ``reward (B, H)``; ``is_success``,
            ``expert_random`` and ``valid`` ``(B, H)`` bool; ``desired_goal (B, N-1, GOAL_DIM)``;
            ``mask (B, N)`` and ``goal_mask (B, N-1)`` bool (False on padded rows); ``episode``,
            ``start`` and ``n_objects`` ``(B,)`` int64; ``state_index (B, H+1)`` int64, the rows of
            :attr:`observation` (and of per-state arrays such as ``pixels``) the window's states come from. Arrays are float32 unless said otherwise.
        """
        e, t = np.asarray(episodes, np.int64).reshape(-1), np.asarray(starts, np.int64).reshape(-1)
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        if e.shape != t.shape or ((e < 0) | (e >= len(self))).any():
            raise ValueError(f"episodes must be indices below {len(self)} with one start each; got {e} and {t}")
        length = self.lengths[e]
        if ((t < 0) | (t >= length)).any():
            raise ValueError(
                f"starts must be steps inside their episodes (0 <= start < length); got {t} for lengths {length}"
            )
        n = self.n_objects[e]
        m = int(n.max()) if n_max is None else int(n_max)
        if m < n.max():
            raise ValueError(f"n_max = {m} is below the {n.max()} objects of an episode in this batch")
        k = t[:, None] + np.arange(horizon + 1)  # (B, H+1) time index of each state in its episode
        state = self.state_starts[e][:, None] + np.minimum(k, length[:, None])
        valid = k[:, :-1] < length[:, None]
        step = self.step_starts[e][:, None] + np.minimum(k[:, :-1], length[:, None] - 1)
        zero = lambda x: np.where(valid.reshape(valid.shape + (1,) * (x.ndim - 2)), x, 0).astype(x.dtype)  # noqa: E731
        return {
            "observation": _pad_rows(self.observation[state].reshape(-1, 1 + self.n_max, ENTITY_DIM), 1 + m).reshape(
                len(e), horizon + 1, 1 + m, ENTITY_DIM
            ),
            "achieved_goal": _pad_rows(self.achieved_goal[state].reshape(-1, self.n_max, GOAL_DIM), m).reshape(
                len(e), horizon + 1, m, GOAL_DIM
            ),
            "action": zero(self.action[step]),
            "reward": zero(self.reward[step]),
            "is_success": zero(self.is_success[step]),
            "expert_random": zero(self.expert_random[step]),
            "valid": valid,
            "desired_goal": _pad_rows(self.desired_goal[e], m),
            "mask": np.arange(1 + m) <= n[:, None],
            "goal_mask": np.arange(m) < n[:, None],
            "episode": e,
            "start": t,
            "n_objects": n,
            "state_index": state,
        }

    def sample_windows(
        self, batch_size: int, horizon: int, rng: np.random.Generator | int | None = None, n_max: int | None = None
    ) -> dict[str, np.ndarray]:
        """``batch_size`` windows (see :meth:`windows`) starting at steps drawn uniformly over the dataset."""
        if self.num_steps == 0:
            raise DatasetError(f"{self.path} holds no steps to sample windows from")
        step = np.random.default_rng(rng).integers(self.num_steps, size=batch_size)
        e = self._step_episode[step]
        return self.windows(e, step - self.step_starts[e], horizon, n_max)

    def iter_windows(
        self,
        batch_size: int,
        horizon: int,
        rng: np.random.Generator | int | None = None,
        n_max: int | None = None,
        drop_last: bool = False,
    ) -> Iterator[dict[str, np.ndarray]]:
        """One epoch: a window from every step of every episode once, in batches (shuffled if ``rng`` is given)."""
        order = np.arange(self.num_steps)
        if rng is not None:
            np.random.default_rng(rng).shuffle(order)
        stop = len(order) - len(order) % batch_size if drop_last else len(order)
        for first in range(0, stop, batch_size):
            step = order[first : first + batch_size]
            e = self._step_episode[step]
            yield self.windows(e, step - self.step_starts[e], horizon, n_max)
