"""Data-parallel training under ``torchrun`` (``ecrl.distributed``): real processes on the CPU with gloo.

The runs are launched as a user would launch them, ``python -m torch.distributed.run --standalone
--nproc-per-node 2 -m ecrl.scripts.train_… …``; ``--standalone`` has torchrun pick a free port
itself, so parallel test sessions do not collide. Each launch costs a few seconds of imports.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from diffusion_helpers import tiny_train_config
from safetensors.torch import load_file

from ecrl.datasets import CollectConfig, DemoDataset, collect_dataset
from ecrl.diffusion.noise import LossTerms
from ecrl.diffusion.train import _Trainer
from ecrl.distributed import World, launched, rank_seed, split_batch
from ecrl.training import WindowLog, resume_config

TINY_DIFFUSION = [
    "--denoiser.width", "16", "--denoiser.heads", "2", "--denoiser.blocks", "1", "--denoiser.horizon", "4",
    "--denoiser.diffusion-steps", "20", "--sampling-steps", "2", "--warmup", "10", "--log-every", "1",
    "--eval-every", "0", "--checkpoint-every", "0", "--threads", "1", "--no-progress", "--final-eval-objects",
]  # fmt: skip
GLOBAL_BATCH = 8


def torchrun(module: str, *args: str) -> str:
    """Run ``module``'s CLI in 2 processes under torchrun; its stdout (the test fails with its output if it fails)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([*command, "-m", module, *args], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def two_process_run(push1_demos, tmp_path_factory):
    """A flat planner trained by 2 processes for 2 steps (global batch 8: 4 windows each), then resumed
    under torchrun to 4 steps: the run directory and what each launch printed."""
    runs = tmp_path_factory.mktemp("ddp")
    common = ["--dataset", str(push1_demos), "--runs-dir", str(runs), "--batch-size", str(GLOBAL_BATCH)]
    first = torchrun("ecrl.scripts.train_diffusion", *common, "--name", "two", "--steps", "2", *TINY_DIFFUSION)
    run = runs / "two"
    resumed = torchrun("ecrl.scripts.train_diffusion", "--resume", str(run), "--steps", "4", *TINY_DIFFUSION)
    return run, first, resumed


def one_process_reference(push1_demos, tmp_path, steps: int) -> tuple[list[float], _Trainer]:
    """The 2-process run's steps computed by one process: the same global batch, made of the windows
    (and diffusion noise) rank 0 and rank 1 draw from their own samplers, and one gradient step on the
    mean of their two losses. Returns the loss of each step and the trainer (weights, EMA)."""
    config = tiny_train_config(push1_demos, tmp_path, batch_size=GLOBAL_BATCH // 2, warmup=10, steps=steps)
    rank0, rank1 = _Trainer(config, torch.device("cpu")), _Trainer(config, torch.device("cpu"))
    rank1.rng = np.random.default_rng(rank_seed(config.seed, 1))
    rank1.generator.manual_seed(rank_seed(config.seed, 1))
    rank1.forward = rank0.forward  # rank 1's samplers, the one set of weights
    own, losses = rank0.losses, []

    def both(source):
        a, b = own(source), rank1.losses(source)
        losses.append((a[""].total.item() + b[""].total.item()) / 2)
        return {k: LossTerms(*((x + y) / 2 for x, y in zip(a[k], b[k], strict=True))) for k in a}

    rank0.losses = both
    dataset = DemoDataset(config.dataset)
    for _ in range(steps):
        rank0.update(dataset)
    return losses, rank0


def test_two_processes_train_as_one_process_on_the_same_global_batch(two_process_run, push1_demos, tmp_path):
    """Two ranks with 4 windows each take the steps one process takes on those 8 windows.

    Each rank draws its own windows (that is the point of data parallelism), so a 1-process run with
    batch 8 draws other windows and its losses differ by sampling noise, far more than any bug would
    show. The comparison is made exact instead: one process draws the same 8 windows and noise from
    the two ranks' seeds and steps on the mean of the two halves' losses, which is what DDP's averaged
    gradients compute. What is left is float32 summation order (the all-reduce adds the two gradients
    in another order than autograd does): about 1e-7 relative per step, so the 4 logged losses and the
    weights after 4 AdamW steps (lr ≤ 4e-4) must agree to 1e-5. Steps 3 and 4 come after a resume, so
    this also checks that each rank's sampler was saved and restored.
    """
    run, _, _ = two_process_run
    losses, reference = one_process_reference(push1_demos, tmp_path, steps=4)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tb"))
    events.Reload()
    logged = {e.step: e.value for e in events.Scalars("train/loss")}
    assert sorted(logged) == [1, 2, 3, 4]
    np.testing.assert_allclose([logged[s] for s in (1, 2, 3, 4)], losses, rtol=1e-5)
    saved = load_file(str(run / "checkpoints" / "latest" / "training.safetensors"))
    for name, value in reference.models[""].state_dict().items():
        torch.testing.assert_close(saved[f"model.{name}"], value, rtol=1e-5, atol=1e-6, msg=name)
    for name, value in reference.emas[""].model.state_dict().items():
        torch.testing.assert_close(saved[f"ema.{name}"], value, rtol=1e-5, atol=1e-6, msg=name)


def test_a_run_stopped_under_torchrun_resumes_there_and_rank_0_alone_reports(two_process_run):
    run, first, resumed = two_process_run
    assert first.count("run directory:") == 1 and "gradient steps: 2" in first
    assert resumed.count("run directory:") == 1 and "gradient steps: 4" in resumed
    state = json.loads((run / "checkpoints" / "latest" / "training.json").read_text())
    assert state["step"] == 4 and len(state["rank_rng"]) == 1  # rank 1's sampler, beside rank 0's
    sessions = [json.loads(line) for line in (run / "sessions.jsonl").read_text().splitlines()]
    starts = [s for s in sessions if "start_step" in s]
    assert [s["start_step"] for s in starts] == [0, 2] and starts[1]["resumed"]
    assert all(s["processes"] == 2 and s["backend"] == "gloo" for s in starts)
    assert all(s["global_batch"] == GLOBAL_BATCH and s["batch_per_process"] == GLOBAL_BATCH // 2 for s in starts)
    assert [s["end_step"] for s in sessions if "end_step" in s] == [2, 4]
    assert json.loads((run / "config.json").read_text())["batch_size"] == GLOBAL_BATCH  # the global batch


def test_an_encoder_trains_in_two_processes(tmp_path):
    data = tmp_path / "pix"
    collect_dataset(data, CollectConfig(n_objects=(2,), episodes=2, pixels=32, idle_steps=2, progress=False))
    out = torchrun(
        "ecrl.scripts.train_encoder",
        *("--dataset", str(data), "--runs-dir", str(tmp_path), "--name", "enc", "--kind", "slot"),
        *("--options", "width=8", "slot_dim=8", "entities=3", "iterations=2"),
        *("--steps", "3", "--batch-size", "4", "--warmup", "2", "--log-every", "1", "--image-every", "3"),
        *("--eval-every", "0", "--eval-frames", "8", "--checkpoint-every", "2", "--threads", "1", "--no-progress"),
    )
    run = tmp_path / "enc"
    assert out.count("run directory:") == 1 and "steps: 3" in out
    assert (run / "final" / "encoder.json").exists() and (run / "scores.json").exists()
    state = json.loads((run / "checkpoints" / "latest" / "training.json").read_text())
    assert state["step"] == 3 and len(state["rank_rng"]) == 1
    assert "torch_rng.rank1" in load_file(str(run / "checkpoints" / "latest" / "training.safetensors"))


def test_the_world_comes_from_torchrun_s_environment(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert launched() == World() and launched().main
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert launched() == World(rank=3, size=4, local_rank=1) and not launched().main


def test_rank_0_keeps_the_seed_and_the_batch_is_shared_evenly():
    assert rank_seed(7, 0) == 7  # a single process's sampler: committed results depend on it
    assert len({rank_seed(7, r) for r in range(4)} | {rank_seed(8, 1)}) == 5
    assert split_batch(128, World(size=4)) == 32
    with pytest.raises(ValueError, match=r"batch_size \(10\) is the global batch.*processes \(4\)"):
        split_batch(10, World(size=4))


def test_the_loss_log_reads_device_tensors_at_flush_only_and_logs_what_floats_gave():
    values = [torch.tensor(v, dtype=torch.float32) for v in (0.1, 0.7, 1e-3)]
    as_floats, as_tensors = WindowLog(None, "time/rate"), WindowLog(None, "time/rate")
    for v in values:
        as_floats.add({"train/loss": v.item()})
        as_tensors.add({"train/loss": v})
    assert as_floats.flush(3, 1e-3, 8)[0] == as_tensors.flush(3, 1e-3, 8)[0]


def test_precision_and_compile_are_how_a_run_runs(push1_demos, tmp_path):
    with pytest.raises(ValueError, match="precision must be 'fp32' or 'bf16'"):
        tiny_train_config(push1_demos, tmp_path, precision="fp16")
    first = tiny_train_config(push1_demos, tmp_path, steps=2)
    (tmp_path / "config.json").write_text(json.dumps(first.to_json()))
    given = tiny_train_config(push1_demos, tmp_path, precision="bf16", compile=True)
    resumed = resume_config(type(first), given, tmp_path, "a diffusion")
    assert (resumed.precision, resumed.compile, resumed.steps) == ("bf16", True, 4)


def test_bf16_autocast_trains_on_the_cpu(push1_demos, tmp_path):
    from ecrl.diffusion.train import train

    result = train(tiny_train_config(push1_demos, tmp_path, precision="bf16", steps=2, checkpoint_every=0))
    assert result.steps == 2 and np.isfinite(result.loss)
    start = json.loads((result.run_dir / "sessions.jsonl").read_text().splitlines()[0])
    assert start["precision"] == "bf16" and start["processes"] == 1 and start["global_batch"] == 8
