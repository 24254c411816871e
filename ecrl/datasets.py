"""Demonstration datasets: episodes of entity observations and actions, for diffusion planners.

:class:`DemoDataset` reads a dataset directory and cuts fixed-horizon windows for training. The
directory is written by :func:`~ecrl.collect.collect_dataset` (``ecrl-collect``) in the format that
:mod:`ecrl.dataset_format` documents; both are re-exported here, so ``from ecrl.datasets import
CollectConfig, DemoDataset, collect_dataset, read_meta`` is the one import a user needs.

Example::

    import numpy as np
    from ecrl.datasets import CollectConfig, DemoDataset, collect_dataset

    collect_dataset("data/push3", CollectConfig(n_objects=(3,), episodes=100))
    data = DemoDataset("data/push3")
    batch = data.sample_windows(64, horizon=16, rng=np.random.default_rng(0))
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np

from ecrl.collect import CollectConfig, CollectResult, collect_dataset, import_ogbench_dataset
from ecrl.dataset_format import (
    ACTION_DIM,
    FORMAT,
    GOAL_PIXEL_KEY,
    META,
    VERSION,
    DatasetError,
    Episode,
    load_shard,
    pad_rows,
    read_meta,
)
from ecrl.envs import ENTITY_DIM, GOAL_DIM, TaskSpec
from ecrl.envs import ogbench as ogb
from ecrl.envs.layout import AGENT_GRIPPER, ENTITY_FIELDS, GOAL_COLOUR, GOAL_FIELDS, GOAL_POSITION

__all__ = [
    "add_placed_objects",
    "ACTION_DIM",
    "FORMAT",
    "VERSION",
    "CollectConfig",
    "CollectResult",
    "DatasetError",
    "DemoDataset",
    "PLACEMENT_CONTACT",
    "PLACEMENT_MOVE",
    "PLACEMENT_SPEED",
    "Episode",
    "collect_dataset",
    "import_ogbench_dataset",
    "read_meta",
    "recolour_windows",
    "PLACED_CLEARANCE",
]

_COLOUR = ENTITY_FIELDS["colour"]
_VELOCITY, _CONTACT = ENTITY_FIELDS["velocity"], AGENT_GRIPPER.start + 1
_POSITION, _SIZE, _RANK = ENTITY_FIELDS["position"], ENTITY_FIELDS["size"], GOAL_FIELDS["rank"].start
PLACEMENT_SPEED = 0.01
"""m/s: every object slower than this is at rest (:meth:`DemoDataset.placements`)."""
PLACEMENT_CONTACT = 0.1
"""The gripper's contact (agent row, in [0, 1]) below which it holds nothing (:meth:`DemoDataset.placements`)."""
PLACEMENT_MOVE = 0.01
"""m: an object moved farther than this since the last placement makes the next rest a placement."""


def recolour_windows(batch: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``batch`` (windows of :meth:`DemoDataset.windows`) with every object given a random colour.

    Object ``i`` of a window (entity row ``1 + i``) and its goal rows (``achieved_goal`` and
    ``desired_goal`` row ``i``, which refer to it) get one new RGB colour, uniform in ``[0, 1]³``,
    drawn per window; the agent and padded rows keep theirs. Physics does not depend on colour, so the
    window stays a true demonstration, and a model that matches objects to goals by colour must learn
    to match any colour rather than the few of its training scenes (OGBench's cube-double has two).

    Raises:
        ValueError: a window whose goal rows do not carry their objects' colours (row ``i`` for object
            ``i``): recolouring it would break the pairing.
    """
    obs, mask, goal_mask = batch["observation"], batch["mask"], batch["goal_mask"]
    objects = obs[:, 0, 1:, _COLOUR]
    for key, goal in (("achieved_goal", batch["achieved_goal"][:, 0]), ("desired_goal", batch["desired_goal"])):
        if not np.where(goal_mask[..., None], objects == goal[..., GOAL_COLOUR], True).all():
            raise ValueError(f"recolour_windows needs {key} row i to refer to object i (their colours differ)")
    colour = rng.random(objects.shape).astype(obs.dtype) * goal_mask[..., None]
    out = {**batch, "observation": obs.copy()}
    out["observation"][:, :, 1:, _COLOUR] = np.where(mask[:, None, 1:, None], colour[:, None], 0.0)
    out["achieved_goal"], out["desired_goal"] = batch["achieved_goal"].copy(), batch["desired_goal"].copy()
    out["achieved_goal"][..., GOAL_COLOUR] = colour[:, None]
    out["desired_goal"][..., GOAL_COLOUR] = colour
    return out


PLACED_CLEARANCE = 0.08
"""Least horizontal distance (m) of an object added by :func:`add_placed_objects` from every entity of its
window, at every step, and from every goal: it must stay out of the demonstration's way."""


def add_placed_objects(batch: dict[str, np.ndarray], rng: np.random.Generator, most: int) -> dict[str, np.ndarray]:
    """``batch`` (windows of :meth:`DemoDataset.windows`) with up to ``most`` objects added per window, each
    already at its goal and left alone for the whole window.

    A demonstration with N objects ends when its N objects are placed, so a planner trained on it can
    learn "N placed" as the end of its task instead of "every object placed", and stop early with
    more objects (seen on the Fetch arm: trained with two, it stopped after two of three). An added
    object is one that the demonstration would not have touched: the number of objects per window
    varies while every window stays what the expert did (with objects at rest beside it).

    Each window gets ``k`` objects, ``k`` uniform in ``0 … most``: a copy of an object resting on the
    table (height equal to its half height) in another window of the batch, at that object's place,
    its velocity zero, its goal row its own achieved goal. A copy is kept only where it is at least
    :data:`PLACED_CLEARANCE` (horizontally) from every entity of the window at every step and from every
    goal; otherwise fewer are added. Windows with ranked goals (towers) get none: their goal rows'
    order would have to change. Rows ``1 + n … n + k`` of each window (after its ``n`` objects) hold them;
    the arrays grow by ``most`` padded rows.
    """
    if most < 0:
        raise ValueError(f"most must be >= 0 objects, got {most}")
    obs, goal_mask = batch["observation"], batch["goal_mask"]
    b = obs.shape[0]
    out = dict(batch)
    grow = lambda x, axis: np.concatenate([x, np.zeros((*x.shape[:axis], most, *x.shape[axis + 1 :]), x.dtype)], axis)  # noqa: E731
    out["observation"], out["achieved_goal"] = grow(obs, 2), grow(batch["achieved_goal"], 2)
    out["desired_goal"], out["mask"], out["goal_mask"] = (
        grow(batch["desired_goal"], 1),
        grow(batch["mask"], 1),
        grow(goal_mask, 1),
    )
    out["n_objects"] = batch["n_objects"].copy()
    # Candidates: objects resting on the table at their window's first step.
    first = obs[:, 0, 1:]
    resting = goal_mask & (np.abs(first[..., _POSITION.start + 2] - first[..., _SIZE.start + 2]) < 0.005)
    resting &= np.linalg.norm(first[..., _VELOCITY], axis=-1) < PLACEMENT_SPEED
    pool = np.argwhere(resting)  # (C, 2): window, object
    ranked = (batch["desired_goal"][..., _RANK] != 0).any(1)
    if len(pool) == 0 or most == 0:
        return out
    xy = slice(_POSITION.start, _POSITION.start + 2)
    for w in range(b):
        k = int(rng.integers(0, most + 1))
        if k == 0 or ranked[w]:
            continue
        n = int(batch["n_objects"][w])
        live = obs[w][:, batch["mask"][w], xy].reshape(-1, 2)
        taken = np.concatenate([live, batch["desired_goal"][w, goal_mask[w], GOAL_POSITION][:, :2]])
        for c in rng.permutation(len(pool))[: 4 * k]:
            if k == 0:
                break
            v, i = pool[c]
            if v == w:
                continue
            spot = first[v, i, xy]
            if np.linalg.norm(taken - spot, axis=1).min() < PLACED_CLEARANCE:
                continue
            row = first[v, i].copy()
            row[_VELOCITY] = 0.0
            out["observation"][w, :, 1 + n] = row
            out["achieved_goal"][w, :, n] = batch["achieved_goal"][v, 0, i]
            out["desired_goal"][w, n] = batch["achieved_goal"][v, 0, i]
            out["mask"][w, 1 + n], out["goal_mask"][w, n] = True, True
            taken = np.concatenate([taken, spot[None]])
            n, k = n + 1, k - 1
        out["n_objects"][w] = n
    return out


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
        goal_pixels: ``(E, V, P, P, 3)`` uint8 frames of each episode's goal configuration (``None``
            unless collected with ``--goal-pixels``).
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
        shards = [load_shard(self.path, entry, self.pixel_meta, self.action_dim) for entry in self.meta["shards"]]
        counts = {"episodes": sum(len(s["seed"]) for s in shards), "steps": sum(len(s["action"]) for s in shards)}
        if counts != {k: self.meta[k] for k in counts}:
            raise DatasetError(
                f"{self.path / META} counts { {k: self.meta[k] for k in counts} }, its shards hold {counts}"
            )
        self.n_max = max((s["desired_goal"].shape[1] for s in shards), default=1)
        cat = lambda key, rows=None: np.concatenate(  # noqa: E731
            [s[key] if rows is None else pad_rows(s[key], rows) for s in shards]
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
            self.goal_pixels = cat(GOAL_PIXEL_KEY) if self.pixel_meta and self.pixel_meta.get("goal") else None
        else:
            self._empty()
        self._tasks = [t for s in shards for t in s["tasks"]]
        self.step_starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.state_starts = self.step_starts + np.arange(len(self.lengths))
        self._step_episode = np.repeat(np.arange(len(self.lengths)), self.lengths)
        self._placements: np.ndarray | None = None

    def _empty(self) -> None:
        m = self.n_max
        self.observation = np.zeros((0, 1 + m, ENTITY_DIM), np.float32)
        self.achieved_goal = np.zeros((0, m, GOAL_DIM), np.float32)
        self.desired_goal = np.zeros((0, m, GOAL_DIM), np.float32)
        self.action = np.zeros((0, self.action_dim), np.float32)
        self.reward = np.zeros(0, np.float32)
        self.is_success, self.expert_random, self.success = (np.zeros(0, bool) for _ in range(3))
        self.lengths, self.n_objects, self.seeds = (np.zeros(0, np.int64) for _ in range(3))
        self.pixels = self.segmentation = self.goal_pixels = None

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
            goal_pixels=None if self.goal_pixels is None else self.goal_pixels[i],
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
            "observation": pad_rows(self.observation[state].reshape(-1, 1 + self.n_max, ENTITY_DIM), 1 + m).reshape(
                len(e), horizon + 1, 1 + m, ENTITY_DIM
            ),
            "achieved_goal": pad_rows(self.achieved_goal[state].reshape(-1, self.n_max, GOAL_DIM), m).reshape(
                len(e), horizon + 1, m, GOAL_DIM
            ),
            "action": zero(self.action[step]),
            "reward": zero(self.reward[step]),
            "is_success": zero(self.is_success[step]),
            "expert_random": zero(self.expert_random[step]),
            "valid": valid,
            "desired_goal": pad_rows(self.desired_goal[e], m),
            "mask": np.arange(1 + m) <= n[:, None],
            "goal_mask": np.arange(m) < n[:, None],
            "episode": e,
            "start": t,
            "n_objects": n,
            "state_index": state,
        }

    @property
    def play(self) -> bool:
        """Whether this is play data (``ecrl-collect --play``): episodes without one goal of their own."""
        return any(c["config"].get("play", False) for c in self.meta.get("collections", []))

    def sample_windows(
        self,
        batch_size: int,
        horizon: int,
        rng: np.random.Generator | int | None = None,
        n_max: int | None = None,
        hindsight: Literal["future", "placements"] | None = None,
    ) -> dict[str, np.ndarray]:
        """``batch_size`` windows (see :meth:`windows`) starting at steps drawn uniformly over the dataset.

        With ``hindsight`` each window's ``desired_goal`` is relabelled, the goal of play data, whose
        episodes have none: ``"future"``, a later state drawn uniformly (:meth:`hindsight_goals`);
        ``"placements"``, the scene after the next few cube placements (:meth:`placement_goals`).
        """
        if self.num_steps == 0:
            raise DatasetError(f"{self.path} holds no steps to sample windows from")
        rng = np.random.default_rng(rng)
        step = rng.integers(self.num_steps, size=batch_size)
        e = self._step_episode[step]
        batch = self.windows(e, step - self.step_starts[e], horizon, n_max)
        if hindsight is not None:
            relabel = {"future": self.hindsight_goals, "placements": self.placement_goals}.get(hindsight)
            if relabel is None:
                raise ValueError(f"hindsight must be 'future', 'placements' or None, got {hindsight!r}")
            batch["desired_goal"] = relabel(e, step - self.step_starts[e], rng, batch["goal_mask"].shape[1])
        return batch

    def hindsight_goals(
        self, episodes: np.ndarray, starts: np.ndarray, rng: np.random.Generator, n_max: int | None = None
    ) -> np.ndarray:
        """Goals relabelled in hindsight: the achieved goal rows at a future state of the same episode.

        The state is drawn uniformly from ``starts[b] + 1`` to the episode's last state, as OGBench's
        goal-conditioned baselines draw their actors' goals from play data (a future state of the same
        trajectory, uniformly).

        Returns:
            ``(B, n_max, GOAL_DIM)`` goal rows (padded to ``n_max``, default: the dataset's).
        """
        e, t = np.asarray(episodes, np.int64).reshape(-1), np.asarray(starts, np.int64).reshape(-1)
        length = self.lengths[e]
        future = t + 1 + (rng.random(len(e)) * (length - t)).astype(np.int64)  # in [t + 1, length]
        goals = self.achieved_goal[self.state_starts[e] + np.minimum(future, length)]
        return pad_rows(goals, self.n_max if n_max is None else n_max)

    def placements(self) -> np.ndarray:
        """State indices (into :attr:`observation`) of every *placement*, in order: the first state
        at which the objects are at rest and let go after one of them was moved (by more than
        :data:`PLACEMENT_MOVE`) since the previous placement, or since the episode began.

        "At rest and let go": every object slower than :data:`PLACEMENT_SPEED` and the gripper's
        contact (the agent row's second :data:`~ecrl.envs.layout.AGENT_GRIPPER` column) below
        :data:`PLACEMENT_CONTACT`. It is read from the observations alone (no oracle or expert
        state), so it applies to any dataset, OGBench's own files included. Computed once and cached.
        """
        if self._placements is None:
            obs = self.observation
            speed = np.linalg.norm(obs[:, 1:, _VELOCITY], axis=-1) * obs[:, 1:, 0]  # 0 on padded rows
            rest = (speed.max(-1) < PLACEMENT_SPEED) & (obs[:, 0, _CONTACT] < PLACEMENT_CONTACT)
            position = self.achieved_goal[..., GOAL_POSITION]
            found = []
            for first, length in zip(self.state_starts.tolist(), self.lengths.tolist(), strict=True):
                reference = position[first]
                for s in (first + 1 + np.flatnonzero(rest[first + 1 : first + length + 1])).tolist():
                    if np.abs(position[s] - reference).max() > PLACEMENT_MOVE:
                        found.append(s)
                        reference = position[s]
            self._placements = np.asarray(found, np.int64)
        return self._placements

    def placement_goals(
        self,
        episodes: np.ndarray,
        starts: np.ndarray,
        rng: np.random.Generator,
        n_max: int | None = None,
        p_next: float = 0.5,
    ) -> np.ndarray:
        """Goals relabelled in hindsight at placements: the achieved goal rows of the scene after the
        ``k``-th placement (:meth:`placements`) that follows a window's first state, ``k`` drawn from a
        geometric distribution (``P(k) = p_next (1 - p_next)^(k - 1)``), so that half the goals move one
        object, a quarter two, and so on. Past the episode's last placement: its last state.

        Play data wanders between its placements (lifts, carries, hesitations); a goal drawn uniformly
        from the future (:meth:`hindsight_goals`) is as often a scene in mid-carry as a scene at rest,
        and the steps that lead to a far one are a few of many. A goal at a placement is a scene like an
        evaluation goal (objects at rest), and the steps towards the next one are the ones that reach it.

        Returns:
            ``(B, n_max, GOAL_DIM)`` goal rows (padded to ``n_max``, default: the dataset's).
        """
        if not 0 < p_next <= 1:
            raise ValueError(f"p_next must be in (0, 1], got {p_next!r}")
        e, t = np.asarray(episodes, np.int64).reshape(-1), np.asarray(starts, np.int64).reshape(-1)
        placements, first = self.placements(), self.state_starts[e]
        last = first + self.lengths[e]
        k = rng.geometric(p_next, size=len(e))  # >= 1
        index = np.searchsorted(placements, first + t, side="right") + k - 1  # k-th placement after state t
        state = placements[np.minimum(index, len(placements) - 1)] if len(placements) else last
        state = np.where((index < len(placements)) & (state <= last), state, last)
        return pad_rows(self.achieved_goal[state], self.n_max if n_max is None else n_max)

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
