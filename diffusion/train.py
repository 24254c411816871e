"""Training a diffusion planner on a demonstration dataset (``ecrl-train-diffusion``).

A run directory ``runs/<dataset>__diffusion__<seed>__<time>/`` holds ``config.json``,
``provenance.json``, ``tb/`` (tensorboard: ``train/loss``, ``train/state_loss``,
``train/action_loss``, ``train/lr``, ``time/windows_per_s``, and ``eval/<part>/n<N>/…`` from the
periodic evaluation), ``checkpoints/latest/`` (the EMA planner as an ``ecrl.load``-able policy, plus
``training.safetensors`` + ``training.json``: weights, EMA weights, optimizer, step counter and
the window sampler's state), ``final/`` (the EMA planner) and ``sessions.jsonl`` (one line per
start or resume). ``--resume RUN`` continues a killed run from its last checkpoint.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm

from ecrl.checkpoint import load_optimizer_state, optimizer_state, replace_dir
from ecrl.datasets import DemoDataset, read_meta
from ecrl.diffusion.denoiser import DenoiserConfig
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.diffusion.schedule import EMA, loss
from ecrl.evaluation import evaluate, log_tensorboard
from ecrl.policy import Policy
from ecrl.reporting import provenance

__all__ = ["DiffusionTrainConfig", "DiffusionTrainResult", "planner_policy", "train"]


@dataclass
class DiffusionTrainConfig:
    """A diffusion-planner training run (every field is a command-line option of ``ecrl-train-diffusion``)."""

    dataset: Path = Path("data/push3")
    """Demonstration dataset written by ``ecrl-collect``."""
    width: int = 64
    """Token width of the denoiser."""
    heads: int = 4
    """Attention heads."""
    blocks: int = 3
    """Transformer blocks."""
    mlp_ratio: int = 2
    """Hidden width of the blocks' MLPs as a multiple of ``width``."""
    horizon: int = 8
    """Plan length in env steps (actions per plan)."""
    diffusion_steps: int = 100
    """Noise levels of the DDPM forward process."""
    sampling_steps: int = 5
    """DDIM steps (denoiser calls) per plan when acting."""
    replan_every: int = 1
    """Actions executed from a plan before re-planning."""
    steps: int = 20_000
    """Budget: gradient steps."""
    batch_size: int = 64
    """Windows per gradient step."""
    lr: float = 5e-4
    """Peak learning rate (AdamW), reached after ``warmup`` steps, then cosine decay to a tenth."""
    warmup: int = 500
    """Linear learning-rate warm-up steps."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    action_weight: float = 10.0
    """Weight of the action term of the loss (the state term has weight 1)."""
    ema_decay: float = 0.999
    """Decay of the EMA weights that are evaluated and saved."""
    seed: int = 0
    """Seed of the network initialisation, the window sampler and the diffusion noise."""
    device: str = "auto"
    """torch device: auto, cpu, cuda, cuda:1, ..."""
    threads: int | None = None
    """torch CPU threads (default: torch's choice)."""
    eval_every: int = 5000
    """Gradient steps between evaluations in the env (0: none)."""
    eval_objects: tuple[int, ...] = ()
    """Numbers of objects evaluated periodically (default: the dataset's largest N and twice it)."""
    eval_episodes: int = 20
    """Episodes per evaluated N."""
    eval_parts: tuple[str, ...] = ("train",)
    """Parts of the dataset's split evaluated periodically (when it has one)."""
    checkpoint_every: int = 2000
    """Gradient steps between checkpoints (0: only at the end)."""
    log_every: int = 100
    """Gradient steps between tensorboard scalars."""
    runs_dir: Path = Path("runs")
    """Where run directories are created."""
    name: str | None = None
    """Run directory name (default: ``<dataset>__diffusion__<seed>__<time>``)."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        problems = []
        for name in ("steps", "batch_size", "horizon", "sampling_steps", "replan_every", "eval_episodes"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.replan_every > self.horizon:
            problems.append(f"replan_every ({self.replan_every}) must not exceed horizon ({self.horizon})")
        if self.sampling_steps > self.diffusion_steps:
            problems.append(f"sampling_steps ({self.sampling_steps}) exceeds diffusion_steps ({self.diffusion_steps})")
        if not 0 < self.ema_decay < 1:
            problems.append(f"ema_decay must be in (0, 1), got {self.ema_decay}")
        if self.lr <= 0:
            problems.append(f"lr must be > 0, got {self.lr}")
        if problems:
            raise ValueError("invalid diffusion training config: " + "; ".join(problems))

    @property
    def denoiser(self) -> DenoiserConfig:
        return DenoiserConfig(
            width=self.width,
            heads=self.heads,
            blocks=self.blocks,
            mlp_ratio=self.mlp_ratio,
            horizon=self.horizon,
            diffusion_steps=self.diffusion_steps,
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["dataset"], data["runs_dir"] = str(self.dataset), str(self.runs_dir)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DiffusionTrainConfig:
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown diffusion training config keys {sorted(unknown)}")
        data = dict(data)
        data["dataset"], data["runs_dir"] = Path(data["dataset"]), Path(data.get("runs_dir", "runs"))
        for key in ("eval_objects", "eval_parts"):
            if key in data:
                data[key] = tuple(data[key])
        return cls(**data)


@dataclass
class DiffusionTrainResult:
    """What a run did: where it lives, how far it got, its last losses and evaluation."""

    run_dir: Path
    steps: int
    wall_s: float
    loss: float = math.nan
    windows_per_s: float = math.nan
    eval: dict[str, float] = field(default_factory=dict)


def _dataset_task(path: Path) -> dict[str, Any]:
    """The task settings of a dataset's first collection: goal, split, numbers of objects."""
    config = read_meta(path)["collections"][0]["config"]
    return {"goal": config["goal"], "split": config["split"], "n_objects": list(config["n_objects"])}


def planner_policy(planner: DiffusionPlanner, meta: dict[str, Any]) -> Policy:
    """``planner`` behind :class:`~ecrl.policy.Policy` (actions are already in ``[-1, 1]``)."""
    ones = np.ones(planner.denoiser.config.action_dim, dtype=np.float32)
    return Policy(planner, -ones, ones, meta, "ecrl.diffusion.planner:DiffusionPlanner", planner.kwargs)


def _lr_factor(step: int, config: DiffusionTrainConfig) -> float:
    if step < config.warmup:
        return (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def _run_dir(config: DiffusionTrainConfig) -> Path:
    name = config.name or f"{config.dataset.name}__diffusion__{config.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
    return config.runs_dir / name


class _Trainer:
    """The state of a run: planner (whose denoiser is trained), EMA copy, optimizer, step, sampler."""

    def __init__(self, config: DiffusionTrainConfig, device: torch.device) -> None:
        torch.manual_seed(config.seed)
        self.config, self.device = config, device
        self.planner = DiffusionPlanner(config.denoiser, config.sampling_steps, config.replan_every, config.seed)
        self.planner.to(device)
        self.model = self.planner.denoiser
        self.ema = EMA(self.model, config.ema_decay)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.step = 0
        self.rng = np.random.default_rng(config.seed)
        self.generator = torch.Generator(device).manual_seed(config.seed)

    def ema_planner(self) -> DiffusionPlanner:
        planner = DiffusionPlanner(self.config.denoiser, self.config.sampling_steps, self.config.replan_every)
        planner.denoiser.load_state_dict(self.ema.model.state_dict())
        return planner.to(self.device).eval()

    def save(self, run_dir: Path, meta: dict[str, Any]) -> Path:
        root = run_dir / "checkpoints"
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".tmp_{self.step}"
        shutil.rmtree(tmp, ignore_errors=True)
        planner_policy(self.ema_planner(), meta).save(tmp)
        tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in self.model.state_dict().items()}
        tensors |= {f"ema.{k}": v.detach().cpu().contiguous() for k, v in self.ema.state_dict().items()}
        opt_tensors, opt_meta = optimizer_state(self.optimizer, "opt")
        tensors |= opt_tensors
        tensors["generator"] = self.generator.get_state()
        save_file(tensors, str(tmp / "training.safetensors"))
        state = {"step": self.step, "optimizer": opt_meta, "rng": self.rng.bit_generator.state}
        (tmp / "training.json").write_text(json.dumps(state, indent=1) + "\n")
        return replace_dir(tmp, root / "latest")

    def load(self, ckpt: Path) -> None:
        if not (ckpt / "training.json").exists():
            raise FileNotFoundError(f"{ckpt} has no training state (training.json); cannot resume from it")
        state = json.loads((ckpt / "training.json").read_text())
        tensors = load_file(str(ckpt / "training.safetensors"))
        self.model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
        self.ema.load_state_dict({k[4:]: v for k, v in tensors.items() if k.startswith("ema.")})
        load_optimizer_state(self.optimizer, tensors, state["optimizer"], "opt")
        self.generator.set_state(tensors["generator"])
        self.rng.bit_generator.state = state["rng"]
        self.step = int(state["step"])


def _evaluate(trainer: _Trainer, task: dict[str, Any], writer: SummaryWriter) -> dict[str, float]:
    config = trainer.config
    n_train = max(task["n_objects"])
    objects = list(config.eval_objects or (n_train, 2 * n_train))
    policy = planner_policy(trainer.ema_planner(), {})
    report = evaluate(
        policy,
        objects,
        goal=task["goal"],
        split=task["split"],
        parts=config.eval_parts if task["split"] else ("train",),
        episodes=config.eval_episodes,
        progress=False,
    )
    log_tensorboard(report, writer, trainer.step)
    return {f"{r.part}/n{r.n_objects}": float(np.mean(r.success)) for r in report.results}


def train(config: DiffusionTrainConfig, resume: Path | None = None) -> DiffusionTrainResult:
    """Train (or, with ``resume``, continue) a diffusion planner; returns what the run did.

    With ``resume`` (a run directory) the run's own ``config.json`` is used, except for ``steps``,
    which may be raised to extend a finished run.
    """
    if resume is not None:
        saved = Path(resume) / "config.json"
        if not saved.exists():
            raise FileNotFoundError(f"{resume} is not a diffusion run directory: it has no config.json")
        steps = config.steps
        config = DiffusionTrainConfig.from_json(json.loads(saved.read_text()))
        config.steps = max(config.steps, steps)
    if config.threads:
        torch.set_num_threads(config.threads)
    if config.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(config.device)
    dataset = DemoDataset(config.dataset)
    if len(dataset) == 0:
        raise ValueError(f"dataset {config.dataset} holds no episodes")
    task = _dataset_task(config.dataset)
    trainer = _Trainer(config, device)
    if resume is not None:
        run_dir = Path(resume)
        trainer.load(run_dir / "checkpoints" / "latest")
    else:
        run_dir = _run_dir(config)
        if run_dir.exists():
            raise FileExistsError(f"run directory {run_dir} exists; pass --resume {run_dir} to continue it")
        run_dir.mkdir(parents=True)
        (run_dir / "config.json").write_text(json.dumps(config.to_json(), indent=2) + "\n")
        (run_dir / "provenance.json").write_text(json.dumps(provenance(), indent=2) + "\n")
    with (run_dir / "sessions.jsonl").open("a") as f:
        f.write(json.dumps({"start_step": trainer.step, "time": time.time(), "resumed": resume is not None}) + "\n")
    meta = {
        "arch": "diffusion",
        "dataset": str(config.dataset),
        "demonstrations": len(dataset),
        "train_n_objects": task["n_objects"],
        "goal": task["goal"],
        "split": task["split"],
        "horizon": config.horizon,
        "sampling_steps": config.sampling_steps,
        "replan_every": config.replan_every,
    }
    writer = SummaryWriter(str(run_dir / "tb"))
    result = DiffusionTrainResult(run_dir=run_dir, steps=trainer.step, wall_s=0.0)
    start, window_start, window_steps = time.perf_counter(), time.perf_counter(), 0
    losses: list[tuple[float, float, float]] = []
    bar = tqdm(total=config.steps, initial=trainer.step, desc="diffusion", unit="step", disable=not config.progress)
    trainer.model.train()
    while trainer.step < config.steps:
        for group in trainer.optimizer.param_groups:
            group["lr"] = config.lr * _lr_factor(trainer.step, config)
        batch = dataset.sample_windows(config.batch_size, config.horizon, trainer.rng)
        batch = {k: torch.as_tensor(v, device=device) for k, v in batch.items()}
        terms = loss(trainer.model, batch, trainer.generator, config.action_weight)
        trainer.optimizer.zero_grad(set_to_none=True)
        terms.total.backward()
        torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), 1.0)
        trainer.optimizer.step()
        trainer.ema.update(trainer.model)
        trainer.step += 1
        window_steps += 1
        losses.append((terms.total.item(), terms.states.item(), terms.actions.item()))
        bar.update(1)
        if trainer.step % config.log_every == 0 or trainer.step == config.steps:
            total, states, actions = np.mean(losses, axis=0)
            rate = window_steps * config.batch_size / (time.perf_counter() - window_start)
            for key, value in (
                ("train/loss", total),
                ("train/state_loss", states),
                ("train/action_loss", actions),
                ("train/lr", trainer.optimizer.param_groups[0]["lr"]),
                ("time/windows_per_s", rate),
            ):
                writer.add_scalar(key, value, trainer.step)
            bar.set_postfix(loss=f"{total:.4f}", action=f"{actions:.4f}")
            result.loss, result.windows_per_s = float(total), float(rate)
            losses, window_start, window_steps = [], time.perf_counter(), 0
        if config.eval_every and (trainer.step % config.eval_every == 0 or trainer.step == config.steps):
            result.eval = _evaluate(trainer, task, writer)
            bar.write(f"step {trainer.step}: success " + ", ".join(f"{k} {v:.2f}" for k, v in result.eval.items()))
            trainer.model.train()
            window_start, window_steps = time.perf_counter(), 0
        if config.checkpoint_every and trainer.step % config.checkpoint_every == 0:
            trainer.save(run_dir, dict(meta, steps=trainer.step))
    bar.close()
    trainer.save(run_dir, dict(meta, steps=trainer.step))
    planner_policy(trainer.ema_planner(), dict(meta, steps=trainer.step)).save(run_dir / "final")
    writer.close()
    result.steps, result.wall_s = trainer.step, time.perf_counter() - start
    with (run_dir / "sessions.jsonl").open("a") as f:
        f.write(json.dumps({"end_step": trainer.step, "wall_s": result.wall_s, "time": time.time()}) + "\n")
    return result
