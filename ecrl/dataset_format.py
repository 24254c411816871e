"""The on-disk format of demonstration datasets: its layout, writing shards and ``meta.json``, checking them on read.

:func:`ecrl.collect.collect_dataset` writes datasets through :class:`DatasetWriter`;
:class:`ecrl.datasets.DemoDataset` reads them through :func:`read_meta` and :func:`load_shard`. Both
speak in entity rows (:mod:`ecrl.envs.layout`), never in flat vectors, and a dataset may mix
episodes with different numbers of objects.

On-disk format (version 1)
--------------------------
A dataset is a directory::

    meta.json            what the dataset is and how it was made (below)
    shard_00000.npz      compressed numpy arrays of a few episodes each (np.savez_compressed)
    shard_00001.npz      ...
    collection_002/      shard sets of a parallel collection (below), each a dataset of its own
        worker_000/      meta.json + shard_*.npz

``meta.json`` holds ``format`` (``"ecrl.demos"``), ``version`` (1), the layout it was written
with (``entity_dim``, ``goal_dim``, ``action_dim``, and ``entity_fields``/``goal_fields``: each
field's ``[start, stop)`` columns), ``shards`` (one entry per shard, in order: ``file``, a path relative to the directory, ``episodes``,
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
``goal_pixels``         ``(E, V, P, P, 3)``     uint8      only with ``--goal-pixels``: RGB frames of each
                                                           episode's goal configuration (every object at
                                                           its target, no pusher, no goal markers)
======================  ======================  =========  =============================================

A *pixel dataset* (``ecrl-collect --pixels P``) also records, for every state, ``P`` × ``P`` RGB
frames from the cameras ``meta["pixels"]["cameras"]`` and MuJoCo's segmentation of them; its
``meta.json`` has ``pixels = {"size": P, "cameras": [...]}`` (``null`` otherwise), and every
collection appended to it must render the same way. With ``--goal-pixels`` it also holds, per
episode, frames of the goal from the same cameras (``PushEnv.render_goal_views``), and ``pixels``
gains ``"goal": true``. ``--random-actions p`` replaces each action,
with probability ``p``, by a uniformly random one (flagged in ``expert_random``): ``p = 1`` gives
random rollouts, whose frames show the objects in places an expert would not push them to.
``--action-noise s`` adds Gaussian noise (standard deviation ``s``) to every non-zero action before it
is executed and records the policy's own action: the stored states follow the noisy actions, the
stored actions are the expert's answers to those states.

*OGBench cube datasets* (``ecrl-collect --env ogbench-cube``, see :mod:`ecrl.envs.ogbench`) have
5-D actions and play episodes: play has no goal of its own, so an episode's ``desired_goal`` is its
last ``achieved_goal`` (a hindsight goal) and ``reward``/``is_success``/``success`` are measured
against it (every cube within 4 cm). Their ``task_json`` entries are
:class:`~ecrl.envs.ogbench.OGBenchCubeTask` dicts (``"benchmark": "ogbench"``); an episode converted
from an OGBench file has seed -1 (no reset seed).

*Parallel collections* (``ecrl-collect --workers K``, :func:`ecrl.collect.collect_dataset`) cut
their seeds into K contiguous ranges, *shard sets*, each collected by one process into a dataset
of its own (its own ``meta.json`` and shards) in ``collection_<c>/worker_<k>/`` (``c``: the
collection's index in ``collections``). The collection's record lists them in ``shard_sets``
(``dir``, ``seeds``); once every set is done, the shards of all sets are added to ``shards``, in
seed order, by their paths relative to the dataset directory (``collection_002/worker_001/
shard_00000.npz``), and the record is marked complete. Until then the dataset reads as it was
before the collection; a killed parallel collection is finished by the same collection with
``--append`` (each set continues after its last shard), and nothing else can be appended first.

Everything loads with ``np.load(..., allow_pickle=False)``. Once every object is placed the
scripted expert idles; an episode keeps at most ``idle_steps`` idle steps (zero action in a solved
state: enough to show how to stop, not so many that zeros swamp the data) and ends there.
Shards are written once and never changed: appending adds shards, and ``meta.json`` is replaced
(atomically) after every shard, so an interrupted collection leaves a readable dataset.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from ecrl.envs import ENTITY_DIM, ENTITY_FIELDS, GOAL_DIM, GOAL_FIELDS, TaskSpec
from ecrl.envs import ogbench as ogb

__all__ = [
    "ACTION_DIM",
    "EPISODE_KEYS",
    "FORMAT",
    "GOAL_PIXEL_KEY",
    "META",
    "PIXEL_KEYS",
    "SHARD_KEYS",
    "STEP_KEYS",
    "VERSION",
    "DatasetError",
    "DatasetWriter",
    "Episode",
    "empty_meta",
    "load_shard",
    "pad_rows",
    "read_meta",
]

FORMAT, VERSION, META = "ecrl.demos", 1, "meta.json"
ACTION_DIM = 2
"""Action width of push datasets (an OGBench cube dataset's is :data:`ecrl.envs.ogbench.ACTION_DIM`)."""
STEP_KEYS = ("action", "reward", "is_success", "expert_random")
EPISODE_KEYS = ("episode_starts", "episode_lengths", "n_objects", "seed", "success")
SHARD_KEYS = ("observation", "achieved_goal", "desired_goal", *STEP_KEYS, *EPISODE_KEYS, "task_json")
PIXEL_KEYS = ("pixels", "segmentation")
GOAL_PIXEL_KEY = "goal_pixels"


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
    goal_pixels: np.ndarray | None = None
    """``(V, P, P, 3)`` uint8 RGB frames of the goal configuration (datasets collected with ``--goal-pixels``)."""

    def __len__(self) -> int:
        return len(self.action)

    @property
    def n_objects(self) -> int:
        return self.task.n_objects


# ---------------------------------------------------------------------------------------------- writing


def _fields(fields: Mapping[str, slice]) -> dict[str, list[int]]:
    return {name: [s.start, s.stop] for name, s in fields.items()}


def empty_meta(action_dim: int = ACTION_DIM) -> dict[str, Any]:
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


def pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
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
        "observation": np.concatenate([pad_rows(e.observation, 1 + m) for e in episodes]),
        "achieved_goal": np.concatenate([pad_rows(e.achieved_goal, m) for e in episodes]),
        "desired_goal": np.stack([pad_rows(e.desired_goal[None], m)[0] for e in episodes]),
        **{key: np.concatenate([getattr(e, key) for e in episodes]) for key in STEP_KEYS},
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
        **(
            {GOAL_PIXEL_KEY: np.stack([e.goal_pixels for e in episodes])} if episodes[0].goal_pixels is not None else {}
        ),
    }


def _write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, path)


class DatasetWriter:
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
            self.meta = empty_meta(action_dim)
        if self.meta["action_dim"] != action_dim:
            raise DatasetError(
                f"{path} holds {self.meta['action_dim']}-D actions, this collection records {action_dim}-D ones; "
                "a dataset has one action width"
            )
        self.pending: list[Episode] = []
        self.steps_added = 0

    def _cut_interrupted(self) -> None:
        """An interrupted collection keeps the seeds of the episodes it wrote (or dropped) before its last
        shard, so that an appended collection continues right where it stopped. (An interrupted parallel
        collection is not cut: :func:`ecrl.collect.collect_dataset` finishes it.)"""
        collections = self.meta["collections"]
        if collections and not collections[-1].get("complete", True) and "shard_sets" not in collections[-1]:
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

    def unfinished_parallel(self) -> dict[str, Any] | None:
        """The record of the dataset's last collection if it is a parallel one that did not finish."""
        last = self.meta["collections"][-1] if self.meta["collections"] else {}
        return last if "shard_sets" in last and not last.get("complete", True) else None

    def start(self, record: dict[str, Any]) -> None:
        unfinished = self.unfinished_parallel()
        if unfinished is not None:
            lo, hi = unfinished["seeds"]
            raise DatasetError(
                f"the last collection in {self.path} (seeds {lo} … {hi - 1}, {len(unfinished['shard_sets'])} shard "
                "sets collected in parallel) did not finish: run it again, with --append (append=True) and the "
                f"same options, to finish it before anything else is added; it was: {unfinished.get('command')}"
            )
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

    def adopt(self, sub: str) -> None:
        """Add the shards of the dataset in subdirectory ``sub`` (a shard set of a parallel collection, a
        dataset of its own) to this dataset and to the current collection, after the shards it has."""
        meta = read_meta(self.path / sub)
        for entry in meta["shards"]:
            self.meta["shards"].append({**entry, "file": f"{sub}/{entry['file']}"})
            self.record["shards"].append(f"{sub}/{entry['file']}")
        self.meta["episodes"] += meta["episodes"]
        self.meta["steps"] += meta["steps"]
        self.record["kept"] += meta["episodes"]
        self.record["dropped"] += meta["dropped"]
        self.steps_added += meta["steps"]

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
    expected = empty_meta()
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
        file = PurePosixPath(str(entry["file"]))
        if str(file) != entry["file"] or file.is_absolute() or ".." in file.parts or "\\" in entry["file"]:
            raise DatasetError(
                f"{path / META}: shard file {entry['file']!r} must be a relative path inside the dataset directory"
            )
    return meta


def load_shard(
    path: Path, entry: Mapping[str, Any], pixels: Mapping[str, Any] | None = None, action_dim: int = ACTION_DIM
) -> dict[str, np.ndarray]:
    """The arrays of one shard, checked against each other and against its ``meta.json`` entry
    (``pixels``: the dataset's ``meta["pixels"]``; ``action_dim``: its ``meta["action_dim"]``)."""
    file = path / entry["file"]
    keys = SHARD_KEYS + (PIXEL_KEYS if pixels else ()) + ((GOAL_PIXEL_KEY,) if pixels and pixels.get("goal") else ())
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
        **{key: (s,) for key in STEP_KEYS[1:]},
        **{key: (e,) for key in EPISODE_KEYS},
    }
    if pixels:
        v, size = len(pixels["cameras"]), pixels["size"]
        expected.update(pixels=(s + e, v, size, size, 3), segmentation=(s + e, v, size, size))
        if pixels.get("goal"):
            expected[GOAL_PIXEL_KEY] = (e, v, size, size, 3)
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
