"""The episodes of a collection: what to collect (:class:`CollectConfig`), rolled out in batches and written.

:func:`ecrl.collect.collect_dataset` plans a collection as :class:`Batch` es of consecutive seeds
(:func:`plan_batches`) and hands them, in one process or in several, to :func:`run_batches`, which rolls
each batch out side by side (the one rollout loop, :func:`ecrl.rollout.rollout`) and gives its episodes
to a :class:`~ecrl.dataset_format.DatasetWriter`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from ecrl.dataset_format import ACTION_DIM, DatasetError, DatasetWriter, Episode
from ecrl.envs import FETCH_SKILL_IDS, ogbench_data
from ecrl.envs import ogbench as ogb
from ecrl.envs.fetch import ACTION_DIM as FETCH_ACTION_DIM
from ecrl.envs.scene import CAMERAS, MAIN_CAMERAS
from ecrl.eval_configs import embodiment_of, max_objects, resolve_skill
from ecrl.evaluation import check_settings
from ecrl.reporting import provenance
from ecrl.rollout import BatchPolicy, ExpertPolicy, Recorder, Step, rollout

__all__ = [
    "ENVS",
    "Batch",
    "CollectConfig",
    "CollectResult",
    "acting_policy",
    "check_source",
    "collection_record",
    "env_spec",
    "open_writer",
    "plan_batches",
    "progress_bar",
    "run_batches",
]


ENVS = ("push", "fetch", "ogbench-cube")
"""The environments a dataset can be collected from (``ecrl-collect --env``): the planar pusher, the Fetch arm
(a skill of :data:`ecrl.envs.FETCH_SKILL_IDS`) and OGBench's cubes."""


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
    goal_pixels: bool = False
    """With ``--pixels``: also record, per episode, frames of its goal configuration from the same cameras (every object at its target, no pusher; push, ``positions`` goals)."""
    random_actions: float = 0.0
    """Probability that a step's action is replaced by a uniformly random one (1: random rollouts)."""
    action_noise: float = 0.0
    """Standard deviation of Gaussian noise added to every non-zero action before it is executed (clipped to
    the action box); the dataset records the policy's own action. The scripted expert, acting from the
    states the noise leads to, then demonstrates how to recover from small errors (as in DART)."""
    env: Literal["push", "fetch", "ogbench-cube"] = "push"
    """Environment: the library's push env, the Fetch arm (``skill``; 1 … 8 objects), or OGBench's cubes (``n_objects`` in 1, 2, 3, 4, 8; extra ``ecrl[ogbench]``)."""
    skill: str | None = None
    """Fetch arm: push, pick_place or stack (default: pick_place); the pusher only pushes, OGBench's cubes have their own tasks."""
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
        if self.goal_pixels and (self.pixels is None or self.env != "push" or self.goal != "positions"):
            raise ValueError(
                "goal_pixels records goal images of push with positions goals, from the --pixels cameras: "
                f"got env {self.env!r}, goal {self.goal!r}, pixels {self.pixels}"
            )
        if not 0.0 <= self.random_actions <= 1.0:
            raise ValueError(f"random_actions must be a probability in [0, 1], got {self.random_actions}")
        if not 0.0 <= self.action_noise <= 1.0:
            raise ValueError(f"action_noise must be a standard deviation in [0, 1], got {self.action_noise}")
        if self.env not in ENVS:
            raise ValueError(f"unknown env {self.env!r}: expected one of {list(ENVS)}")
        self.skill = resolve_skill(self.env, self.skill)
        if self.env == "fetch" and max(self.n_objects) > max_objects("fetch"):
            raise ValueError(f"the Fetch arm holds 1 … {max_objects('fetch')} objects, got {list(self.n_objects)}")
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
        return {"ogbench-cube": ogb.ACTION_DIM, "fetch": FETCH_ACTION_DIM}.get(self.env, ACTION_DIM)


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
    and the scripted expert's own steps out of a stall). ``recorded`` holds the actions the dataset
    keeps: those returned, unless ``action_noise`` perturbed the non-zero ones before execution."""

    def __init__(self, policy: BatchPolicy, random_actions: float = 0.0, action_noise: float = 0.0) -> None:
        self.policy, self.random_actions, self.action_noise = policy, random_actions, action_noise
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
        self.random, self.recorded = random, actions
        if self.action_noise > 0:
            noisy = np.clip(actions + self.rng.normal(0.0, self.action_noise, actions.shape), -1, 1)
            actions = np.where(actions.any(axis=1, keepdims=True), noisy, actions).astype(np.float32)
        return actions


def _frames(env: Any, cameras: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(V, P, P, 3)`` RGB frames and ``(V, P, P)`` segmentation labels of ``env``'s current state."""
    rgb = env.render_views(tuple(cameras))
    return np.stack([rgb[c] for c in cameras]), np.stack([env.render_segmentation(c) for c in cameras]).astype(np.uint8)


class _EpisodeRecorder(Recorder):
    """Every state, step and (with ``cameras``) frame of one episode per env; an episode is cut after
    ``idle_steps`` idle steps (zero action once every object is placed: the scripted expert's
    "nothing to do"; the idle steps before the cut stay in the data, they show how to stop)."""

    def __init__(
        self, envs: Sequence[gym.Env], policy: _Collecting, idle_steps: int | None, cameras, goal_frames: bool = False
    ) -> None:
        b = len(envs)
        self.envs, self.policy, self.idle_steps, self.cameras = envs, policy, idle_steps, cameras
        self.goal_frames: list[np.ndarray | None] = [None] * b if goal_frames else []
        self.seeds, self.solved, self.idle = [0] * b, np.zeros(b, bool), np.zeros(b, np.int64)
        self.states: list[list[dict[str, np.ndarray]]] = [[] for _ in range(b)]
        self.steps: list[list[tuple]] = [[] for _ in range(b)]
        self.frames: list[list[tuple]] = [[] for _ in range(b)]

    def start(self, i, seed, obs, info) -> None:
        self.seeds[i], self.solved[i], self.states[i] = seed, info["is_success"], [obs]
        self.frames[i] = [_frames(self.envs[i].unwrapped, self.cameras)] if self.cameras else []
        if self.goal_frames:
            views = self.envs[i].unwrapped.render_goal_views(tuple(self.cameras))
            self.goal_frames[i] = np.stack([views[c] for c in self.cameras])

    def cut(self, i, obs, action) -> bool:
        idle = self.solved[i] and not self.policy.recorded[i].any()  # the policy's action, not the executed noisy one
        self.idle[i] = self.idle[i] + 1 if idle else 0
        return self.idle_steps is not None and self.idle[i] > self.idle_steps

    def step(self, s: Step) -> None:
        i = s.env
        self.solved[i] = s.info["is_success"]
        self.states[i].append(s.next_obs)
        if self.cameras:
            self.frames[i].append(_frames(self.envs[i].unwrapped, self.cameras))
        self.steps[i].append((self.policy.recorded[i], s.reward, s.info["is_success"], self.policy.random[i]))

    def episodes(self) -> list[Episode]:
        goals = self.goal_frames or [None] * len(self.envs)
        return [
            _episode(env.unwrapped, seed, states, steps, bool(ok), frames, goal)
            for env, seed, states, steps, ok, frames, goal in zip(
                self.envs, self.seeds, self.states, self.steps, self.solved, self.frames, goals, strict=True
            )
        ]


def _rollout(
    envs: list[gym.Env],
    seeds: list[int],
    policy: _Collecting,
    idle_steps: int | None,
    cameras: Sequence[str] | None = None,
    bar: tqdm | None = None,
    goal_frames: bool = False,
) -> list[Episode]:
    """One episode per env, side by side (:func:`ecrl.rollout.rollout`); an episode ends at the horizon
    or after ``idle_steps`` idle steps. With ``cameras``, every state is rendered from them too (and,
    with ``goal_frames``, each episode's goal configuration once)."""
    recorder = _EpisodeRecorder(envs, policy, idle_steps, cameras, goal_frames)
    rollout(envs, policy, seeds, recorder=recorder, bar=bar)
    return recorder.episodes()


def _episode(
    env: Any,
    seed: int,
    states: list[dict[str, np.ndarray]],
    steps: list[tuple],
    success: bool,
    frames: list[tuple[np.ndarray, np.ndarray]] | None = None,
    goal_frames: np.ndarray | None = None,
) -> Episode:
    """An :class:`Episode` from the observations, ``(action, reward, is_success, random)`` steps and
    (optionally) ``(rgb, segmentation)`` frames and goal frames ``(V, P, P, 3)`` of a rollout."""
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
        goal_pixels=goal_frames,
    )


def collection_record(
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


class Batch(NamedTuple):
    """Episodes of seeds ``first … first + count - 1``, side by side, on ``n`` objects of split part ``part``."""

    part: str
    n: int
    first: int
    count: int

    @property
    def stop(self) -> int:
        return self.first + self.count


def plan_batches(config: CollectConfig, seed: int) -> list[Batch]:
    """The batches of a collection from ``seed`` on, in seed order: per part, per N, ``config.episodes``
    episodes in batches of ``config.batch_size``."""
    batches, k = [], seed
    for part in config.parts:
        for n in config.n_objects:
            for first in range(0, config.episodes, config.batch_size):
                batches.append(Batch(part, n, k, min(config.batch_size, config.episodes - first)))
                k += batches[-1].count
    return batches


def acting_policy(config: CollectConfig, policy: BatchPolicy | None) -> _Collecting:
    """The acting policy of ``config``: ``policy``, else OGBench's play oracle or the scripted expert (the
    pusher's, or the Fetch arm's)."""
    if policy is None:
        policy = ogb.CubePlayOracle() if config.play else ExpertPolicy(embodiment=embodiment_of(config.env))
    return _Collecting(policy, config.random_actions, config.action_noise)


def progress_bar(config: CollectConfig, episodes: int) -> tqdm:
    """The progress bar of ``episodes`` episodes; play episodes are long (1,001 steps): that bar counts steps."""
    unit, per_episode = ("step", config.play_steps) if config.play else ("ep", 1)
    return tqdm(
        total=episodes * per_episode, desc="collect", unit=unit, dynamic_ncols=True, disable=not config.progress
    )


def run_batches(
    writer: DatasetWriter,
    record: dict[str, Any],
    config: CollectConfig,
    actor: _Collecting,
    batches: Sequence[Batch],
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
            env_id, env_kwargs = env_spec(config, batch.n, batch.part)
            envs = [gym.make(env_id, **env_kwargs) for _ in range(min(config.batch_size, config.episodes))]
            block = (batch.part, batch.n)
        seeds = list(range(batch.first, batch.stop))
        episodes = _rollout(
            envs[: batch.count],
            seeds,
            actor,
            config.idle_steps,
            cameras,
            bar if config.play else None,
            config.goal_pixels,
        )
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


def check_source(config: CollectConfig, policy: BatchPolicy | None) -> None:
    """Raise ``ValueError`` where ``config`` and ``policy`` ask for episodes nothing can act in."""
    if config.random_actions == 1 and config.only_success and not config.play:
        raise ValueError("random_actions = 1 rolls out no expert at all, so keep failures too (only_success=False)")
    ogbench = config.env == "ogbench-cube"
    if ogbench and policy is None and not config.play:
        raise ValueError("OGBench cubes have a scripted oracle for play data only: pass --play, or a --policy")
    if ogbench and policy is not None and config.play:
        raise ValueError("play data comes from OGBench's oracle: pass --play or a --policy, not both")


def open_writer(path: Path, config: CollectConfig, append: bool) -> DatasetWriter:
    """The writer of ``path``; an existing dataset must have been rendered as ``config`` renders."""
    writer = DatasetWriter(path, append, config.shard_episodes, config.action_dim)
    pixels = {"size": config.pixels, "cameras": list(config.cameras)} if config.pixels else None
    if pixels and config.goal_pixels:
        pixels["goal"] = True
    if writer.meta["episodes"] and writer.meta.get("pixels") != pixels:
        raise DatasetError(
            f"{path} was collected with pixels = {writer.meta.get('pixels')}, this collection would add "
            f"{pixels}; a dataset renders every episode the same way"
        )
    writer.meta["pixels"] = pixels
    return writer


def env_spec(config: CollectConfig, n: int, part: str) -> tuple[str, dict[str, Any]]:
    """Registered id and keyword arguments of the envs collecting ``n`` objects of split part ``part``."""
    env_id, env_kwargs = "ecrl/Push-v0", {"n_objects": n, "goal": config.goal}
    if config.env == "fetch":
        env_id = FETCH_SKILL_IDS[config.skill]
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
