"""Data-parallel training on ``torch.distributed``: the plumbing the diffusion, encoder and imitation
trainings share when they run under ``torchrun``.

Under ``torchrun --nproc-per-node K [--nnodes M …]`` every process runs the same training; the
launcher tells each one who it is through the environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``).
:func:`session` starts the process group (gloo on the CPU, NCCL on CUDA, each process on GPU
``LOCAL_RANK``) and ends it; without ``torchrun`` it does nothing, and a training runs exactly as a
plain process would. The conventions every training follows under it:

- ``batch_size`` in a training config is the **global** batch: each of the ``K`` processes draws
  ``batch_size / K`` samples per step (:func:`split_batch`), and :class:`DistributedDataParallel`
  averages their gradients, so a step follows the gradient of the mean loss over the whole batch,
  as in one process, and a config means the same experiment however many processes run it.
- Every process draws its samples from its own generators: rank 0 seeds them with the config's
  ``seed``, exactly as a single process does, the others with :func:`rank_seed`.
- Only rank 0 (:func:`is_main`) writes: logs, progress bars, evaluations, checkpoints. The others
  wait for it at their next collective (the process group's timeout is :data:`TIMEOUT`).
- A checkpoint holds every rank's sampler state (:func:`sampler_checkpoint`), and ``--resume``
  under torchrun gives each rank its own back (:func:`restore_sampler`); resumed with more processes
  than saved it, the new ranks start fresh generators. Every process reads the checkpoint, so with
  ``--nnodes`` > 1 the run directory must be on a file system all nodes share.

Example:
    >>> with session(torch_device(config.device)) as (world, device):
    ...     model = replicate(model.to(device), world)  # DDP when world.size > 1, else model itself
    ...     per_rank = split_batch(config.batch_size, world)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

__all__ = [
    "TIMEOUT",
    "World",
    "average_gradients",
    "backend",
    "barrier",
    "broadcast",
    "broadcast_parameters",
    "gather",
    "is_main",
    "launched",
    "mean_over_ranks",
    "rank_seed",
    "replicate",
    "restore_sampler",
    "sampler_checkpoint",
    "session",
    "split_batch",
]

TIMEOUT = timedelta(hours=1)
"""How long a process waits at a collective: it covers rank 0's evaluations and checkpoints, during
which the other processes wait for it (a process that dies makes ``torchrun`` stop them all sooner)."""

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    """Who this process is among the processes of a training: ``rank`` of ``size``, ``local_rank`` on its node."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Whether this process is rank 0, the one that logs, evaluates and saves."""
        return self.rank == 0

    def describe(self, batch_size: int, what: str = "") -> dict[str, Any]:
        """What a run's ``sessions.jsonl`` records about how its global ``batch_size`` is shared (keys
        prefixed with ``what``, e.g. ``"bc_"`` for a batch that is not the run's ``batch_size``)."""
        return {
            "processes": self.size,
            "backend": backend(),
            f"{what}global_batch": batch_size,
            f"{what}batch_per_process": batch_size // self.size,
        }


def launched() -> World:
    """This process's place as ``torchrun`` set it in the environment; a single process without it."""
    env = os.environ
    if "WORLD_SIZE" not in env:
        return World()
    return World(int(env.get("RANK", 0)), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)))


def is_main() -> bool:
    """Whether this process is rank 0 (always, without ``torchrun``)."""
    return launched().main


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank_seed(seed: int, rank: int, salt: int = 0) -> int:
    """The seed of rank ``rank``'s generators: ``seed`` itself on rank 0 (what a single process uses),
    otherwise a 63-bit number hashed from ``(seed, rank, salt)`` (unlike ``seed + rank``, it does not
    repeat the seed of another run's rank 0)."""
    if rank == 0 and salt == 0:
        return seed
    return int(np.random.SeedSequence([seed, rank, salt]).generate_state(1, np.uint64)[0] >> 1)


def split_batch(batch_size: int, world: World) -> int:
    """Each process's share of the global ``batch_size``; ``ValueError`` if the processes cannot share it evenly."""
    if batch_size % world.size:
        raise ValueError(
            f"batch_size ({batch_size}) is the global batch and must be a multiple of the number of "
            f"processes ({world.size}); got {batch_size % world.size} left over"
        )
    return batch_size // world.size


def _device(device: torch.device, world: World) -> torch.device:
    """``device``, with a process's own GPU (``cuda:LOCAL_RANK``) for a plain ``cuda`` under torchrun."""
    if device.type == "cuda" and device.index is None and world.size > 1:
        return torch.device("cuda", world.local_rank)
    return device


@contextmanager
def session(device: torch.device) -> Iterator[tuple[World, torch.device]]:
    """This process's :class:`World` and its device, within a process group when launched by ``torchrun``.

    Starts the group (gloo for the CPU, NCCL for CUDA) unless one is running already, and ends the
    group it started on the way out. Without ``torchrun``: ``(World(), device)`` and nothing else.
    """
    world = launched()
    device = _device(device, world)
    if world.size == 1 or dist.is_initialized():
        yield world, device
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=TIMEOUT)
    try:
        yield world, device
        # Every rank leaves together: a rank that tears its group down while rank 0 still evaluates and
        # saves was seen to abort in gloo's destructor ("terminate called without an active exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()


def backend() -> str | None:
    """The running process group's backend (``"gloo"``, ``"nccl"``), or None without one."""
    return dist.get_backend() if _active() else None


class _Replica(DistributedDataParallel):
    """DDP that lets attribute reads it does not know (``config``, ``kind``, ``schedule`` …) through to
    the wrapped module, so the code that calls a model need not know whether it is wrapped."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "module":
                raise
            return getattr(self.module, name)


def replicate(module: nn.Module, world: World, find_unused: bool = True) -> nn.Module:
    """``module`` wrapped in :class:`DistributedDataParallel` when ``world`` has several processes, else itself.

    Call the wrapper for the training forward passes (its backward averages the gradients over the
    processes); save, evaluate and average (EMA) the plain ``module``, whose parameters the wrapper
    keeps in step on every process. ``find_unused``: some parameters may get no gradient in a step
    (DDP then looks for them after every forward; without it, such a parameter is an error). Buffers
    are constants in this library's models, so they are synchronised once, not at every forward.
    """
    if world.size == 1:
        return module
    device = next(module.parameters()).device
    ids = [device] if device.type == "cuda" else None
    return _Replica(module, device_ids=ids, find_unused_parameters=find_unused, forward_sync_buffers=False)


def average_gradients(parameters: Iterable[nn.Parameter]) -> None:
    """Average the gradients of ``parameters`` over the processes (after ``backward``); nothing in one process.

    For a module that must not stay wrapped in DDP (whose hooks would outlive the data-parallel stage
    on a module that later trains in one process, e.g. an actor after imitation). Every process has
    the same parameters with gradients, so their flattened gradients line up.
    """
    if not _active():
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def broadcast_parameters(module: nn.Module) -> None:
    """Give every process rank 0's parameters of ``module`` (what DDP does when it wraps a module); nothing in one process."""
    if _active():
        for p in module.parameters():
            dist.broadcast(p.data, src=0)


def mean_over_ranks(values: Mapping[str, float]) -> dict[str, float]:
    """The mean of each of ``values`` over the processes (every process passes the same keys); ``values`` in one."""
    if not _active() or not values:
        return dict(values)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    total = torch.tensor(list(values.values()), dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return dict(zip(values, (total / dist.get_world_size()).tolist(), strict=True))


def gather(obj: T) -> list[T] | None:
    """Every process's ``obj`` (picklable), in rank order, on rank 0 (None elsewhere); ``[obj]`` in one process."""
    if not _active():
        return [obj]
    out: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def broadcast(obj: T) -> T:
    """Rank 0's ``obj`` (picklable) on every process; ``obj`` itself in one process."""
    if not _active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    """Wait until every process gets here (nothing in one process)."""
    if _active():
        dist.barrier()


def sampler_checkpoint(rng: np.random.Generator, torch_state: torch.Tensor, key: str) -> tuple[dict, dict] | None:
    """Every process's sampler (a numpy generator and a torch generator's state) for rank 0's checkpoint.

    Rank 0 saves its own sampler as a single process does (``rng`` in the JSON state, ``key`` among
    the tensors); this returns what the other ranks add: ``(tensors, json)`` with ``<key>.rank<r>``
    tensors and a ``rank_rng`` list (empty dicts in one process), on rank 0; None on the others.
    """
    samplers = gather((rng.bit_generator.state, torch_state.cpu()))
    if samplers is None:
        return None
    tensors = {f"{key}.rank{r}": state for r, (_, state) in enumerate(samplers[1:], 1)}
    return tensors, ({"rank_rng": [rng_state for rng_state, _ in samplers[1:]]} if len(samplers) > 1 else {})


def restore_sampler(
    rng: np.random.Generator, state: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], key: str, seed: int
) -> torch.Tensor | int:
    """Set this process's numpy sampler ``rng`` from a checkpoint (:func:`sampler_checkpoint`); returns its
    torch generator's saved state, or, for a rank the checkpoint has none of (it was saved by fewer
    processes), the seed to start that generator from (``rng`` starts from it too)."""
    rank = launched().rank
    if rank == 0:
        rng.bit_generator.state = state["rng"]
        return tensors[key]
    saved = state.get("rank_rng", [])
    if rank <= len(saved):
        rng.bit_generator.state = saved[rank - 1]
        return tensors[f"{key}.rank{rank}"]
    fresh = rank_seed(seed, rank, salt=int(state["step"]))
    rng.bit_generator.state = np.random.default_rng(fresh).bit_generator.state
    return fresh
