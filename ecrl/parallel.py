"""Episodes over processes: contiguous seed ranges in a process pool, results merged in seed order.

Evaluation (:func:`ecrl.evaluation.evaluate`) and dataset collection
(:func:`ecrl.collect.collect_dataset`) cut their episodes into *tasks*, each a contiguous range of
episode indices (so of seeds): a batch of episodes run side by side, or a collection's shard set.
With one worker (or one task) the caller runs them itself; else :func:`run_tasks` runs them in a
pool of processes forked from a ``forkserver`` (a fresh interpreter that has imported what the
caller had of torch and ``ecrl``, nothing else of its state; ``spawn`` where there is no
forkserver). The caller merges the results in task order, that is in seed order, so the outcome is
the one a single process gets with the same tasks.

A worker process

- has ``MUJOCO_GL`` (the parent's value, else ``egl``) set before mujoco is imported, and runs
  torch, OpenMP and BLAS with one thread each (the processes are the parallelism);
- builds the acting policy once, from a *policy source*: a policy (anything with ``act``, sent
  pickled) or a picklable zero-argument callable that builds one: a class like
  :class:`ecrl.rollout.ExpertPolicy`, ``functools.partial(ecrl.load, path)``, or
  :class:`PolicyLoader` (a saved policy with options and the focus rule);
- reports progress to the parent's bar through a queue (:func:`worker_bar`).

Under ``torchrun`` (:func:`torchrun_rank`) each process is one rank; :func:`barrier` synchronises
the ranks through ``torch.distributed`` (gloo).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import queue as queues
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PolicyLoader",
    "barrier",
    "build_policy",
    "check_workers",
    "pickled",
    "run_tasks",
    "split_contiguous",
    "torchrun_rank",
    "worker_bar",
    "worker_policy",
]

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_WORKER: dict[str, Any] = {"source": None, "policy": None, "built": False, "queue": None}


def check_workers(workers: int) -> int:
    """``workers`` if it is an int >= 1; ``ValueError`` otherwise."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1 (processes running episodes), got {workers!r}")
    return workers


def split_contiguous(sizes: Sequence[int], parts: int) -> list[range]:
    """The indices of ``sizes`` in ``min(parts, len(sizes))`` contiguous, non-empty groups whose sums
    are as even as cuts between items allow (each cut is placed nearest its share of the total)."""
    check_workers(parts)
    parts = min(parts, len(sizes))
    ends, total = [], 0
    for size in sizes:
        total += size
        ends.append(total)
    bounds = [0]
    for j in range(1, parts):
        lo, hi = bounds[-1] + 1, len(sizes) - (parts - j)  # leave an item for every later group
        target = total * j / parts
        bounds.append(min(range(lo, hi + 1), key=lambda c: (abs(ends[c - 1] - target), c)))
    bounds.append(len(sizes))
    return [range(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]


def build_policy(source: Any) -> Any:
    """The policy of a policy source: ``source`` itself if it acts (has ``act``), else ``source()``."""
    if source is None or (callable(getattr(source, "act", None)) and not isinstance(source, type)):
        return source
    if not callable(source):
        raise ValueError(f"a policy source is a policy (with act) or a callable that builds one, got {source!r:.80}")
    policy = source()
    if not callable(getattr(policy, "act", None)):
        raise ValueError(f"{source!r:.80} built {type(policy).__name__}, which has no act(obs)")
    return policy


@dataclass(frozen=True)
class PolicyLoader:
    """A saved policy as a picklable policy source: ``ecrl.load(path)``, with ``options`` changed
    (:meth:`ecrl.policy.Policy.with_options`) and, with ``focus`` K > 0, behind the focus rule
    (:class:`ecrl.focus.Focus` with ``patience``)."""

    path: str
    device: str = "cpu"
    options: tuple[tuple[str, Any], ...] = ()
    focus: int = 0
    patience: int = 0

    def __call__(self) -> Any:
        from ecrl.policy import load

        policy = load(self.path, device=self.device)
        if self.options:
            policy = policy.with_options(**dict(self.options))
        if self.focus:
            from ecrl.focus import Focus

            policy = Focus(policy, self.focus, self.patience)
        return policy


# ---------------------------------------------------------------------------------------------- in a worker


def _one_thread() -> None:
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def _init_worker(mujoco_gl: str, source: bytes, queue: Any) -> None:
    os.environ.setdefault("MUJOCO_GL", mujoco_gl)
    for var in _THREAD_VARS:
        os.environ[var] = "1"
    _one_thread()
    _WORKER.update(source=source, policy=None, built=False, queue=queue)


def worker_policy() -> Any:
    """In a worker process: the policy its source builds (built at the first call, then kept)."""
    if not _WORKER["built"]:
        _WORKER["policy"] = build_policy(pickle.loads(_WORKER["source"]))
        _WORKER["built"] = True
        _one_thread()  # the policy may have imported torch
    return _WORKER["policy"]


class _QueueBar:
    """What a worker's rollouts update in place of a tqdm bar: counts sent to the parent's bar at most
    every ``every`` seconds (and at :meth:`flush`)."""

    total = 0  # not None: a rollout leaves it alone

    def __init__(self, queue: Any, every: float = 0.5) -> None:
        self.queue, self.every, self.pending, self.sent = queue, every, 0, time.monotonic()

    def update(self, n: int = 1) -> None:
        self.pending += int(n)
        if time.monotonic() - self.sent >= self.every:
            self.flush()

    def flush(self) -> None:
        if self.pending and self.queue is not None:
            self.queue.put(self.pending)
        self.pending, self.sent = 0, time.monotonic()

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        """The parent's bar shows totals only."""


def worker_bar() -> _QueueBar:
    """In a worker process: a bar whose ``update(n)`` adds to the parent's progress bar."""
    return _QueueBar(_WORKER["queue"])


# ---------------------------------------------------------------------------------------------- the pool


def pickled(source: Any) -> bytes:
    """``source`` pickled for the worker processes; ``ValueError`` (saying what to pass instead) if it cannot be."""
    try:
        return pickle.dumps(source)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise ValueError(
            f"workers > 1 send the policy to other processes, and {source!r:.80} cannot be pickled ({e}); pass a "
            "picklable callable that builds it instead (e.g. ecrl.parallel.PolicyLoader(path))"
        ) from e


def run_tasks(
    fn: Callable[[Any], Any],
    tasks: Sequence[Any],
    workers: int,
    source: Any = None,
    bar: Any = None,
) -> list[Any]:
    """``[fn(task) for task in tasks]``, computed in ``min(workers, len(tasks))`` worker processes.

    ``fn`` (a module-level function, as are ``tasks`` picklable) runs in a worker process, where
    :func:`worker_policy` builds ``source`` (see the module docstring) and :func:`worker_bar` adds
    to ``bar`` (a tqdm bar of this process, or ``None``). A task that raises cancels those not
    started and its exception is raised here.

    Raises:
        ValueError: ``source`` cannot be pickled (pass a factory, e.g. :class:`PolicyLoader`).
    """
    check_workers(workers)
    blob = pickled(source)
    ctx = _context()
    queue = ctx.Queue() if bar is not None else None
    initargs = (os.environ.get("MUJOCO_GL", "egl"), blob, queue)
    with ProcessPoolExecutor(min(workers, len(tasks)), ctx, initializer=_init_worker, initargs=initargs) as pool:
        futures = [pool.submit(fn, task) for task in tasks]
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
            _drain(queue, bar)
            failed = next((f.exception() for f in done if f.exception() is not None), None)
            if failed is not None:
                for f in futures:
                    f.cancel()
                raise failed
        results = [f.result() for f in futures]
    _drain(queue, bar)
    return results


def _context() -> multiprocessing.context.BaseContext:
    """The ``forkserver`` context (``spawn`` where there is none), its server started if it is not yet.

    The server is a fresh interpreter, started with ``MUJOCO_GL`` (this process's, else ``egl``) and one
    thread for OpenMP and BLAS, that imports what this process has imported of torch and ``ecrl``; the
    workers are forked from it, so those imports are paid once per process rather than once per worker
    and pool (a worker of an ``ecrl-eval`` process then starts in milliseconds, not seconds).
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(sorted(m for m in sys.modules if m == "torch" or m.startswith("ecrl.")))
    saved = {k: os.environ.get(k) for k in ("MUJOCO_GL", *_THREAD_VARS)}
    os.environ.update({"MUJOCO_GL": saved["MUJOCO_GL"] or "egl", **dict.fromkeys(_THREAD_VARS, "1")})
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return ctx


def _drain(queue: Any, bar: Any) -> None:
    while queue is not None:
        try:
            bar.update(queue.get_nowait())
        except queues.Empty:
            return


# ---------------------------------------------------------------------------------------------- torchrun


def torchrun_rank() -> tuple[int, int] | None:
    """``(rank, world size)`` from ``torchrun``'s ``RANK`` and ``WORLD_SIZE`` when there are several
    processes; ``None`` otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    rank = int(os.environ.get("RANK", "0"))
    if not 0 <= rank < world:
        raise ValueError(f"RANK {rank} is not in 0 … {world - 1} (WORLD_SIZE {world})")
    return rank, world


def barrier(ranks: tuple[int, int] | None) -> None:
    """Wait for every rank (nothing to wait for without ranks); starts ``torch.distributed`` (gloo, from
    torchrun's environment variables) the first time."""
    if ranks is None:
        return
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=ranks[0], world_size=ranks[1])
    dist.barrier()
