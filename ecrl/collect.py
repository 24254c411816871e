"""Collecting demonstration datasets: roll out the scripted expert (or any policy) and write the episodes.

:func:`collect_dataset` rolls out the scripted expert (or any policy with ``act(obs)``) on push
tasks, or OGBench cube play (:func:`import_ogbench_dataset` converts OGBench's own files), and writes
the episodes in the format of :mod:`ecrl.dataset_format`; :class:`ecrl.datasets.DemoDataset` reads
them back.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ecrl.collect_batches import (
    ENVS,
    Batch,
    CollectConfig,
    CollectResult,
    acting_policy,
    check_source,
    collection_record,
    open_writer,
    plan_batches,
    progress_bar,
    run_batches,
)
from ecrl.dataset_format import META, DatasetError, DatasetWriter, Episode, read_meta
from ecrl.envs import ogbench as ogb
from ecrl.envs import ogbench_data
from ecrl.evaluation import EVAL_SEED, describe
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
from ecrl.rollout import BatchPolicy

__all__ = ["ENVS", "CollectConfig", "CollectResult", "collect_dataset", "import_ogbench_dataset"]


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
    check_source(config, policy)
    if check_workers(workers) > 1:
        pickled(policy)  # before anything is written
    acting = build_policy(policy)
    source = {"source": "ogbench_play_oracle" if config.play else "scripted_expert"}
    if acting is not None:
        source = {"source": "policy", **describe(acting), **dict(policy_info or {})}
    writer = open_writer(Path(path), config, append)
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
    record = collection_record({**asdict(config), "seed": seed}, source, command, [seed, seed + total])
    plan = plan_batches(config, seed)
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
    with progress_bar(config, total) as bar:
        run_batches(writer, record, config, acting_policy(config, acting), plan, bar)
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


# ---------------------------------------------------------------------------------------------- in parallel


@dataclass(frozen=True)
class _SetTask:
    """One shard set of a parallel collection: its batches, written as a dataset of its own to ``path``."""

    path: Path
    config: CollectConfig
    batches: tuple[Batch, ...]
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
    plan = plan_batches(config, record["seeds"][0])
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
    with progress_bar(config, sum(t.seeds[1] - t.seeds[0] for t in mine)) as bar:
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
    writer = open_writer(task.path, task.config, resume)
    done = writer.meta["next_seed"] if resume else task.seeds[0]
    todo = [b for b in task.batches if b.stop > done]
    bar.update(
        sum(b.count for b in task.batches if b.stop <= done) * (task.config.play_steps if task.config.play else 1)
    )
    if not todo:
        return
    record = collection_record(task.record["config"], {}, task.record.get("command"), [done, task.seeds[1]])
    record.update({k: v for k, v in task.record.items() if k not in record})
    writer.start(record)
    run_batches(writer, record, task.config, acting_policy(task.config, policy), todo, bar, skip_below=done)
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
    record = collection_record(asdict(config), origin, command, [next_seed, next_seed])
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
