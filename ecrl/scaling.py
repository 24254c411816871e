"""How the library's work scales with processes: the measurement of ``ecrl-bench scaling``.

:func:`measure` takes a :class:`ScalingBenchConfig` and returns the numbers; the CLI
(:mod:`ecrl.scripts.bench_scaling`) checks the targets and writes the tables, plot and README.

Four measurements, each with 1 and with ``processes`` processes, one torch/BLAS thread per process:

* **Machine.** A pure-Python busy loop, in 1 and in K processes that start it at the same moment:
  how much parallel CPU the machine gives right now. On a shared machine another user's job takes
  its share, and no library code can scale beyond this *ceiling*; every ratio below is also given
  as a share of it.
* **Diffusion training.** ``ecrl-train-diffusion`` on a push dataset made here (the scripted expert,
  ``train_n_objects`` objects), launched as a user launches it: alone, and under ``torchrun
  --nproc-per-node K`` with the same global batch (each process samples ``batch_size / K`` windows).
  Windows/s is the training's own rate over the second half of the run (after start-up), read from
  the run's ``sessions.jsonl``, at each of ``batch_sizes``. The single process also runs with K
  threads, the other way to use K cores; and K separate runs of ``batch / K`` side by side, with no
  communication at all, give the most that data parallelism could reach at that batch on this machine.
* **Evaluation.** :func:`ecrl.evaluation.evaluate` of the scripted expert with ``workers`` 1 and K:
  env steps/s over the whole call (process start-up included, as a user waits for it).
* **Collection.** :func:`ecrl.collect.collect_dataset` of expert episodes with ``workers`` 1 and K:
  env steps/s over the whole call.

The results of the parallel evaluation and collection are checked to be those of one process
(successes and episode lengths; the episodes' actions), so a speed-up never comes from doing less.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ScalingBenchConfig", "machine_ceiling", "measure", "train_rate"]


@dataclass(frozen=True)
class ScalingBenchConfig:
    """Diffusion training windows/s, evaluation and collection env steps/s with 1 and K processes."""

    processes: int = 2
    """K: the processes (torchrun ranks, evaluation and collection workers) compared with one."""
    train_windows: int = 128_000
    """Windows of each timed training run (gradient steps × batch); the rate is read over the last half."""
    batch_sizes: tuple[int, ...] = (128, 512)
    """Global training batches (windows per gradient step over all processes): the default recipe's, and a
    larger one, over which the per-step costs that every process repeats weigh less."""
    train_episodes: int = 100
    """Expert episodes of the training dataset made for the benchmark."""
    train_n_objects: int = 3
    """Objects of the training dataset's episodes."""
    eval_episodes: int = 400
    """Episodes of each timed evaluation and collection."""
    n_objects: int = 3
    """Objects of the evaluated and collected episodes."""
    collect_batch: int = 20
    """Episodes side by side in the collection (batches are what its workers share out)."""
    busy_s: float = 1.0
    """Seconds of the machine's busy loop per process and repeat (three repeats)."""
    target: float = 1.6
    """Target: K = 2 processes do at least this many times the work of one (training, evaluation, collection)."""
    strict: bool = False
    """Exit with status 1 when a target fails."""
    out: Path = Path("results/bench_scaling")
    """Output directory (created if missing): bench_scaling.json, README.md, scaling.png."""

    def __post_init__(self) -> None:
        if self.processes < 2:
            raise ValueError(f"processes must be >= 2 (it is compared with one), got {self.processes}")
        if not self.batch_sizes or any(b < 1 or b % self.processes for b in self.batch_sizes):
            raise ValueError(f"batch_sizes {self.batch_sizes} must split evenly over {self.processes} processes")
        if min(self.train_episodes, self.eval_episodes, self.collect_batch) < 2:
            raise ValueError("train_episodes, eval_episodes and collect_batch must be at least 2")
        if any(self.train_windows < 4 * b for b in self.batch_sizes):
            raise ValueError(f"train_windows ({self.train_windows}) must be at least 4 batches of each batch size")
        if self.busy_s <= 0:
            raise ValueError(f"busy_s must be positive, got {self.busy_s}")


def _busy(start_at: float, seconds: float) -> float:
    """Iterations per second of a pure-Python loop run from ``start_at`` (a wall time) for ``seconds``."""
    time.sleep(max(0.0, start_at - time.time()))
    count, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(1000):
            count += 1
    return count / (time.perf_counter() - t0)


def machine_ceiling(processes: int, seconds: float, repeats: int = 3) -> dict[str, float]:
    """Busy-loop iterations/s of 1 process and of ``processes`` processes started together, and their ratio.

    One and many take turns ``repeats`` times (the machine's load changes); the repeat with the median
    ratio is reported.
    """
    rounds = []
    with ProcessPoolExecutor(processes) as pool:
        for _ in range(repeats):
            one = _busy(time.time(), seconds)
            start_at = time.time() + 1.0 + 0.5 * processes  # after every worker has started
            many = float(sum(pool.map(_busy, [start_at] * processes, [seconds] * processes)))
            rounds.append({"one": one, "many": many, "ratio": many / one})
    return sorted(rounds, key=lambda r: r["ratio"])[len(rounds) // 2]


def _environment() -> dict[str, str]:
    threads = {k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    return dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"), **threads)


def _train_command(dataset: Path, runs: Path, name: str, processes: int, threads: int, batch: int, windows: int):
    steps = windows // batch
    args = ["--dataset", str(dataset), "--runs-dir", str(runs), "--name", name, "--steps", str(steps)]
    args += ["--batch-size", str(batch), "--log-every", str(steps // 2), "--eval-every", "0"]
    args += ["--checkpoint-every", "0", "--threads", str(threads), "--no-progress", "--device", "cpu"]
    args += ["--final-eval-objects"]  # none: only the training is timed
    launch = [sys.executable, "-m"]
    if processes > 1:
        launch += ["torch.distributed.run", "--standalone", "--nproc-per-node", str(processes), "-m"]
    return [*launch, "ecrl.scripts.train_diffusion", *args]


def _session_rate(runs: Path, name: str, returncode: int, output: str) -> float:
    """The run's windows/s from its ``sessions.jsonl``; a failed run raises with the end of its ``output``."""
    if returncode != 0:
        raise RuntimeError(f"the training run {name} failed:\n{output[-4000:]}")
    session = json.loads((runs / name / "sessions.jsonl").read_text().splitlines()[-1])
    return float(session["windows_per_s"])


def train_rate(dataset: Path, runs: Path, name: str, processes: int, threads: int, batch: int, windows: int) -> float:
    """Windows/s of an ``ecrl-train-diffusion`` run on ``dataset`` with ``processes`` ranks of ``threads`` threads.

    The run trains ``windows // batch`` steps at global batch ``batch``, as a subprocess (under ``torchrun
    --standalone`` for more than one process); its rate over the last half of the steps is read from its
    ``sessions.jsonl``.
    """
    command = _train_command(dataset, runs, name, processes, threads, batch, windows)
    done = subprocess.run(command, capture_output=True, text=True, env=_environment())
    return _session_rate(runs, name, done.returncode, done.stdout + done.stderr)


def independent_rate(dataset: Path, runs: Path, name: str, k: int, batch: int, windows: int) -> float:
    """Summed windows/s of ``k`` separate one-thread runs at batch ``batch / k``, side by side, with no
    communication: the most data parallelism could give at that per-process batch on this machine."""
    names = [f"{name}_{i}" for i in range(k)]
    procs = [
        subprocess.Popen(
            _train_command(dataset, runs, n, 1, 1, batch // k, windows // k),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_environment(),
        )
        for n in names
    ]
    outputs = [p.communicate()[0] for p in procs]
    return sum(_session_rate(runs, n, p.returncode, out) for n, p, out in zip(names, procs, outputs, strict=True))


def _timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _evaluation(config: ScalingBenchConfig) -> dict[str, Any]:
    from ecrl.evaluation import ExpertPolicy, evaluate

    rows = {}
    for workers in (1, config.processes):
        report, wall = _timed(
            lambda w=workers: evaluate(
                ExpertPolicy, [config.n_objects], episodes=config.eval_episodes, progress=False, workers=w
            )
        )
        (result,) = report.results
        rows[workers] = {"steps": result.env_steps, "wall_s": wall, "outcomes": (result.success, result.lengths)}
    return _rates(rows, config.processes, "the evaluation")


def _collection(config: ScalingBenchConfig, root: Path) -> dict[str, Any]:
    from ecrl.collect import CollectConfig, collect_dataset
    from ecrl.datasets import DemoDataset

    collect = CollectConfig(
        n_objects=(config.n_objects,), episodes=config.eval_episodes, batch_size=config.collect_batch, progress=False
    )
    rows = {}
    for workers in (1, config.processes):
        path = root / f"collect_{workers}"
        result, wall = _timed(lambda w=workers, p=path: collect_dataset(p, collect, workers=w))
        data = DemoDataset(path)
        rows[workers] = {"steps": result.steps, "wall_s": wall, "outcomes": (data.seeds, data.action)}
    return _rates(rows, config.processes, "the collection")


def _rates(rows: dict[int, dict[str, Any]], k: int, what: str) -> dict[str, Any]:
    """Steps/s of 1 and ``k`` processes from their ``rows``, which must have had the same outcomes."""
    one, many = rows[1], rows[k]
    if not all(
        np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(one["outcomes"], many["outcomes"], strict=True)
    ):
        raise RuntimeError(f"{what} with {k} processes did not give the results of one process")
    rate = {n: r["steps"] / r["wall_s"] for n, r in rows.items()}
    return {"steps": one["steps"], "one": rate[1], "many": rate[k], "ratio": rate[k] / rate[1]}


def measure(config: ScalingBenchConfig) -> dict[str, Any]:
    """Every measurement of the module docstring; each ``ratio`` is K processes over one."""
    from ecrl.collect import CollectConfig, collect_dataset

    k = config.processes
    with tempfile.TemporaryDirectory(prefix="ecrl_scaling_") as tmp:
        root = Path(tmp)
        ceiling = machine_ceiling(k, config.busy_s)
        dataset = root / "train_data"
        collect_dataset(
            dataset, CollectConfig(n_objects=(config.train_n_objects,), episodes=config.train_episodes, progress=False)
        )
        training = [_training(dataset, root / "runs", k, b, config.train_windows) for b in config.batch_sizes]
        evaluation = _evaluation(config)
        collection = _collection(config, root)
    for row in (*training, evaluation, collection):
        row["share_of_ceiling"] = row["ratio"] / ceiling["ratio"]
    return {
        "processes": k,
        "ceiling": ceiling,
        "training": training,
        "evaluation": evaluation,
        "collection": collection,
    }


def _training(dataset: Path, runs: Path, k: int, batch: int, windows: int) -> dict[str, Any]:
    """Windows/s at global batch ``batch``: 1 process of 1 thread, 1 of ``k`` threads, ``k`` of 1 thread under
    torchrun, and ``k`` separate runs of ``batch / k`` side by side (:func:`independent_rate`)."""
    one = train_rate(dataset, runs, f"b{batch}_p1_t1", 1, 1, batch, windows)
    threads = train_rate(dataset, runs, f"b{batch}_p1_t{k}", 1, k, batch, windows)
    many = train_rate(dataset, runs, f"b{batch}_p{k}_t1", k, 1, batch, windows)
    apart = independent_rate(dataset, runs, f"b{batch}_apart", k, batch, windows)
    ratios = {"ratio": many / one, "ratio_threads": threads / one, "ratio_independent": apart / one}
    return {"batch": batch, "one": one, "one_threads": threads, "many": many, "independent": apart, **ratios}
