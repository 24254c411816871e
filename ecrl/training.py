"""What the library's three trainings (RL, diffusion, encoders) share: one way to start, resume, open
and close a run (:func:`start_run`, :func:`open_run`, :func:`close_run`), the learning-rate schedule,
the progress CSV, the windowed loss log, and the precision and ``torch.compile`` options of the
trainings written as plain torch loops (:class:`ComputeOptions`). Running them on several processes
is :mod:`ecrl.distributed`."""

from __future__ import annotations

import csv
import json
import math
import time
import typing
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from ecrl.distributed import mean_over_ranks
from ecrl.reporting import provenance
from ecrl.retired import drop_retired

__all__ = [
    "ComputeOptions",
    "Run",
    "RunOptions",
    "append_csv",
    "autocast",
    "close_run",
    "compiled",
    "open_run",
    "parse_assignment",
    "resume_config",
    "start_run",
    "torch_device",
    "warmup_cosine",
]

_PARSERS = {int: int, float: float, str: str, bool: lambda v: {"true": True, "false": False}[v.lower()]}


def parse_assignment(item: str, types: Mapping[str, type], what: str) -> tuple[str, Any]:
    """A command line's ``"name=value"`` → ``(name, value)`` typed by ``types[name]`` (int, float, str
    or bool as ``true``/``false``); ``ValueError`` naming ``what`` is set (e.g. "encoder option") otherwise."""
    name, sep, text = item.partition("=")
    if not sep or name not in types:
        raise ValueError(f"{what} {item!r}: expected name=value with a name among {sorted(types)}")
    parser = _PARSERS.get(types[name])
    if parser is None:
        raise ValueError(f"{what} {name!r} has type {types[name]}, which cannot be set from the command line")
    try:
        return name, parser(text)
    except (ValueError, KeyError):
        raise ValueError(f"{what} {item!r}: {text!r} is not a valid {types[name].__name__}") from None


def warmup_cosine(step: int, warmup: int, steps: int, floor: float = 0.1) -> float:
    """Learning-rate factor: linear warm-up over ``warmup`` steps, then a cosine from 1 to ``floor`` at ``steps``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def append_csv(path: Path, row: Mapping[str, float]) -> None:
    """Append ``row`` to the CSV file ``path``, writing the header first if the file is new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(row))
        if new:
            out.writeheader()
        out.writerow(row)


def resume_config(cls: type, given: Any, run_dir: Path, what: str) -> Any:
    """The config of the run in ``run_dir`` (``cls.from_json`` of its ``config.json``), for a resumed run.

    The experiment stays the run's own; from ``given`` (this call's config) come a larger ``steps``
    (to extend a finished run) and where and how it runs: ``threads``, ``device``, ``progress`` and,
    for the configs that have them, ``precision`` and ``compile``.
    """
    saved = Path(run_dir) / "config.json"
    if not saved.exists():
        raise FileNotFoundError(
            f"{run_dir} is not {what} run directory with a checkpoint to resume: it has no config.json"
        )
    config = cls.from_json(json.loads(saved.read_text()))
    config.steps = max(config.steps, given.steps)
    for name in _HOW_IT_RUNS:
        if hasattr(given, name):
            setattr(config, name, getattr(given, name))
    return config


_HOW_IT_RUNS = ("threads", "device", "progress", "precision", "compile")


def torch_device(name: str) -> torch.device:
    """``name`` as a torch device; ``"auto"`` is CUDA when available, else the CPU."""
    return torch.device(("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name)


@dataclass
class Run:
    """A training run's directory and the config it runs with (see :func:`start_run`)."""

    dir: Path
    config: Any
    resumed: bool
    record: dict[str, Any] = field(default_factory=dict)
    """What :func:`open_run` logs with each session besides how it runs (e.g. a CLI's final-evaluation settings)."""

    @property
    def checkpoint(self) -> Path:
        """The run's latest checkpoint, which a resumed run continues from."""
        return self.dir / "checkpoints" / "latest"


def start_run(
    cls: type,
    config: Any,
    resume: Path | None,
    what: str,
    stem: Callable[[Any], str],
    also_resumable: str | None = None,
    record: Mapping[str, Any] | None = None,
) -> Run:
    """The run every training (RL, diffusion, encoders) starts with; nothing is written yet (:func:`open_run`).

    With ``resume`` (a run directory holding ``checkpoints/latest/training.json``, or the file
    ``also_resumable`` names relative to it, e.g. a checkpoint of a stage before the first): that run, with its
    own config (:func:`resume_config`: a larger ``steps`` extends it). Otherwise a new run of
    ``config`` in ``runs_dir/<name>``, by default ``<stem(config)>__<seed>__<time>`` (``stem``: task
    or dataset, then algorithm or kind). ``record`` is logged with each session (:attr:`Run.record`). Sets
    torch's CPU threads to the config's ``threads``.
    """
    if resume is not None:
        run = Run(Path(resume), resume_config(cls, config, resume, what), True, dict(record or {}))
        if not (run.checkpoint / "training.json").exists() and not (
            also_resumable is not None and (run.dir / also_resumable).exists()
        ):
            also = "" if also_resumable is None else f" or {also_resumable}"
            raise FileNotFoundError(f"{resume} has no checkpoint to resume (checkpoints/latest/training.json{also})")
    else:
        name = config.name or f"{stem(config)}__{config.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
        run = Run(config.runs_dir / name, config, False, dict(record or {}))
    if config.threads:
        torch.set_num_threads(config.threads)
    return run


def open_run(run: Run, step: int, **record: Any) -> None:
    """Create a new run's directory (``config.json``, ``provenance.json``) and log the session's start at
    ``step`` in ``sessions.jsonl``, with how it runs (device, threads, … which a resumed run may change),
    ``run.record`` and this call's ``record`` (e.g. how many processes share the batch)."""
    if not run.resumed:
        if run.dir.exists():
            raise FileExistsError(f"run directory {run.dir} exists; pick another --name or pass --resume {run.dir}")
        run.dir.mkdir(parents=True)
        (run.dir / "config.json").write_text(json.dumps(run.config.to_json(), indent=2) + "\n")
        (run.dir / "provenance.json").write_text(json.dumps(provenance(), indent=2) + "\n")
    how = {name: getattr(run.config, name) for name in _HOW_IT_RUNS if hasattr(run.config, name)}
    _session(run.dir, {"start_step": step, "time": time.time(), "resumed": run.resumed, **how, **run.record, **record})


def close_run(run: Run, step: int, wall_s: float, **summary: Any) -> None:
    """Log the end of a session (its last step, wall-clock and any ``summary``) in ``sessions.jsonl``."""
    _session(run.dir, {"end_step": step, "wall_s": wall_s, "time": time.time(), **summary})


class WindowLog:
    """Means of the losses of the training steps since the last :meth:`flush`, and their rate.

    The losses stay tensors (on their device) until :meth:`flush`, which reads them to the host in one
    transfer: a step then never waits for the device. Under ``torchrun`` the means are averaged over
    the processes at :meth:`flush` (every process flushes at the same steps); only the process that
    has a ``writer`` (rank 0) writes them.

    Example:
        >>> log = WindowLog(writer, "time/windows_per_s")
        >>> log.add({"train/loss": loss.detach()})  # every step
        >>> means, rate = log.flush(step, lr, 128)  # every log_every steps: writes means, lr and rate
    """

    def __init__(self, writer: Any | None, rate_name: str) -> None:
        self.writer, self.rate_name = writer, rate_name
        self.rows: list[dict[str, float | torch.Tensor]] = []
        self.restart()

    def restart(self) -> None:
        """Start a new window (after work that is not training, such as an evaluation)."""
        self.start, self.steps = time.perf_counter(), 0

    def add(self, scalars: Mapping[str, float | torch.Tensor]) -> None:
        """Record one training step's scalars (floats or 0-d tensors, which are not read until :meth:`flush`)."""
        self.rows.append(dict(scalars))
        self.steps += 1

    def flush(self, step: int, lr: float | None, items_per_step: int) -> tuple[dict[str, float], float]:
        """Write the window's means, ``train/lr`` (unless ``lr`` is None) and the rate (items/s;
        ``items_per_step`` counts every process's items) at ``step``; start a new window."""
        rows = _on_host(self.rows)
        means = mean_over_ranks({key: float(sum(r[key] for r in rows) / len(rows)) for key in rows[0]})
        rate = self.steps * items_per_step / max(time.perf_counter() - self.start, 1e-9)
        if self.writer is not None:
            for key, value in means.items():
                self.writer.add_scalar(key, value, step)
            if lr is not None:
                self.writer.add_scalar("train/lr", lr, step)
            self.writer.add_scalar(self.rate_name, rate, step)
        self.rows = []
        self.restart()
        return means, float(rate)


def _on_host(rows: list[dict[str, float | torch.Tensor]]) -> list[dict[str, float]]:
    """``rows`` with every value a Python float, read from the device in one transfer.

    Each value goes through float64 (exact for float32), so a value is the float ``v.item()`` gives.
    """
    keys = list(rows[0])
    values = [r[k] for r in rows for k in keys]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if tensors:
        device = tensors[0].device
        values = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device) for v in values]).tolist()
    it = iter(values)
    return [{k: float(next(it)) for k in keys} for _ in rows]


def _session(run_dir: Path, record: Mapping[str, Any]) -> None:
    with (run_dir / "sessions.jsonl").open("a") as f:
        f.write(json.dumps(dict(record)) + "\n")


@dataclass
class RunOptions:
    """Where and how a training run runs (fields shared by the library's training configs); not part
    of the experiment, so a resumed run takes ``device``, ``threads`` and ``progress`` from the new call."""

    device: str = "auto"
    """torch device: auto (CUDA if available), cpu, cuda, cuda:1, ...; under torchrun, auto and cuda are each process's own GPU (cuda:LOCAL_RANK)."""
    threads: int | None = None
    """torch CPU threads (default: torch's choice)."""
    runs_dir: Path = Path("runs")
    """Where run directories are created."""
    name: str | None = None
    """Run directory name (default: ``<task or dataset>__<algorithm or kind>__<seed>__<time>``)."""
    progress: bool = True
    """Show a progress bar (on rank 0 only under torchrun)."""

    def to_json(self) -> dict[str, Any]:
        """The config as JSON-able values (paths as strings)."""
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Any:
        """Inverse of :meth:`to_json`; unknown keys are an error, missing ones take their defaults.

        A model config nested in the training config (e.g. ``net``, ``denoiser``) was once a set of flat
        fields of the training config: a ``config.json`` saved then (``{"width": 32, ...}``) reads into
        the nested config (``{"net": {"width": 32, ...}}``).
        """
        return _dataclass_from_json(cls, _nest_flat_fields(cls, drop_retired(cls, data)))


@dataclass
class ComputeOptions(RunOptions):
    """:class:`RunOptions` of the trainings written as plain torch loops (diffusion planners, encoders):
    also the precision of their forward passes and whether they are compiled. Like ``device``, these
    say how a run runs, not what it learns: a resumed run takes them from the new call."""

    precision: Literal["fp32", "bf16"] = "fp32"
    """Forward passes in float32, or under bfloat16 autocast (meant for CUDA; also accepted on the CPU, where torch's CPU autocast runs it, usually slower than fp32 unless the CPU has bf16 matrix units). Weights, optimizer and EMA stay float32."""
    compile: bool = False
    """torch.compile the trained model (the denoisers, the encoder): slow to start, faster steps on a GPU."""

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be 'fp32' or 'bf16', got {self.precision!r}")


def autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """The autocast context of ``precision`` (see :class:`ComputeOptions`) on ``device``; a no-op for fp32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def compiled(module: nn.Module, enabled: bool) -> nn.Module:
    """``torch.compile(module)`` when ``enabled``, else ``module`` itself. Save the plain module (the
    compiled wrapper shares its parameters but prefixes their names)."""
    return torch.compile(module) if enabled else module


def _nested_fields(cls: type) -> dict[str, type]:
    """The fields of the dataclass ``cls`` that are dataclasses themselves, with their classes."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls) if is_dataclass(hints[f.name])}


def _nest_flat_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` saved for the training config ``cls`` with each flat field of a now nested model config
    moved into it: the one place where configs saved before the nesting are read."""
    out = dict(data)
    top = {f.name for f in fields(cls)}
    for name, nested in _nested_fields(cls).items():
        moved = {f.name: out.pop(f.name) for f in fields(nested) if f.name in out and f.name not in top}
        if moved:
            out[name] = {**moved, **out.get(name, {})}
    return out


def _dataclass_from_json(cls: type, data: Mapping[str, Any]) -> Any:
    """The dataclass ``cls`` from JSON values (paths, tuples and nested dataclasses restored)."""
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys {sorted(unknown)}")
    hints = typing.get_type_hints(cls)
    out = dict(data)
    for key, value in data.items():
        if value is None:
            continue
        hint = hints[key]
        if is_dataclass(hint):
            out[key] = _dataclass_from_json(hint, drop_retired(hint, value))
        elif "Path" in str(hint):
            out[key] = Path(value)
        elif str(hint).startswith("tuple"):
            out[key] = tuple(value)
    return cls(**out)
