"""Training an object-centric encoder on the frames of a pixel dataset (``ecrl-train-encoder``).

The encoder learns without labels, by reconstructing the frames (plus the particle encoder's KL
terms). MuJoCo's segmentation and the true object positions are used only to score it.

A run directory ``runs/<dataset>__<kind>__<seed>__<time>/`` holds ``config.json``,
``provenance.json``, ``tb/`` (tensorboard: ``train/<loss term>``, ``train/lr``,
``time/images_per_s``; images ``images/decomposition`` — per row one camera image, its
reconstruction, the decomposition (each pixel coloured by the entity whose alpha is largest, dimmed
where the background or no entity explains it) and the entities' positions drawn on the image —;
and every ``--eval-every`` steps ``eval/fg_ari``, ``eval/fg_ari_<camera>``, ``eval/position_cm``,
``eval/recon_mse`` on held-out frames, also in ``tb/progress.csv``), ``checkpoints/latest/`` (the
encoder as ``encoder.safetensors`` + ``encoder.json``, plus ``training.safetensors`` +
``training.json``: optimizer, step counter, sampler state), ``final/`` and ``scores.json`` (the
final held-out scores). ``--resume RUN`` continues a killed run from its last checkpoint;
``--init CHECKPOINT`` starts a new run from a trained encoder's weights (fine-tuning).

Under ``torchrun --nproc-per-node K`` the run is data-parallel (:mod:`ecrl.distributed`):
``batch_size`` stays the global batch, each process draws ``batch_size / K`` samples from its own
sampler and torch generator (rank 0's seeded as a single process's), DDP averages the gradients,
and rank 0 alone logs (the losses averaged over the processes), draws the images, scores and saves
(with every rank's sampler state, so ``--resume`` under torchrun continues each of them).
"""

from __future__ import annotations

import json
import math
import shutil
import time
import typing
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm

from ecrl import distributed
from ecrl.checkpoint import load_optimizer_state, load_weights, optimizer_state, replace_dir
from ecrl.datasets import DatasetError, DemoDataset
from ecrl.distributed import World
from ecrl.encoders.base import EntityEncoder
from ecrl.encoders.data import Frames
from ecrl.encoders.evaluate import EncoderScores, score_encoder
from ecrl.encoders.io import ENCODER, build_encoder, encoder_class, load_encoder, save_encoder
from ecrl.retired import drop_retired, retired_types
from ecrl.training import (
    ComputeOptions,
    Run,
    WindowLog,
    append_csv,
    autocast,
    close_run,
    compiled,
    open_run,
    parse_assignment,
    start_run,
    torch_device,
    warmup_cosine,
)

__all__ = [
    "EncoderTrainConfig",
    "EncoderTrainResult",
    "decomposition_image",
    "decomposition_picture",
    "parse_options",
    "start_from",
    "train",
]


@dataclass
class EncoderTrainConfig(ComputeOptions):
    """An encoder training run (every field is a command-line option of ``ecrl-train-encoder``)."""

    dataset: Path = Path("data/pix-mix")
    """Pixel dataset written by ``ecrl-collect --pixels``."""
    test_dataset: Path | None = None
    """Pixel dataset the scores are computed on (default: every 10th episode of --dataset, then not trained on)."""
    kind: Literal["slot", "particles"] = "slot"
    """Encoder: Slot Attention (``slot``) or Deep-Latent-Particles style (``particles``)."""
    entities: int | None = None
    """Slots or particles per camera image (default: the encoder's own default)."""
    width: int | None = None
    """CNN channels (default: the encoder's own default)."""
    init: Path | None = None
    """Start from the weights of this encoder checkpoint (fine-tuning) instead of a fresh encoder: its kind and
    architecture must be this run's; loss weights and schedules (e.g. ``foreground_weight``) may differ."""
    options: tuple[str, ...] = ()
    """More encoder options as ``name=value`` (e.g. ``slot_dim=64`` or ``beta_kl=0.1``); see the encoder's config."""
    steps: int = 20_000
    """Gradient steps."""
    batch_size: int = 32
    """Samples per step (each has one image per camera), over all processes: under torchrun with K processes each draws batch_size / K."""
    lr: float = 4e-4
    """Peak Adam learning rate (linear warm-up, then a cosine down to a tenth)."""
    warmup: int = 1000
    """Warm-up steps."""
    grad_clip: float = 1.0
    """Gradient-norm clip."""
    seed: int = 0
    """Seed of the initialisation and of the batch sampler."""
    log_every: int = 50
    """Steps between scalar logs."""
    image_every: int = 1000
    """Steps between decomposition images in tensorboard."""
    eval_every: int = 5000
    """Steps between held-out scores (0: only at the end)."""
    eval_frames: int = 256
    """Held-out frames scored periodically (the position probe is fitted on twice as many training frames)."""
    checkpoint_every: int = 1000
    """Steps between checkpoints."""

    def __post_init__(self) -> None:
        super().__post_init__()
        positive = {"steps": self.steps, "batch_size": self.batch_size, "log_every": self.log_every}
        positive |= {"image_every": self.image_every, "checkpoint_every": self.checkpoint_every}
        bad = {k: v for k, v in positive.items() if v < 1}
        if bad:
            raise ValueError(f"these options must be >= 1: {bad}")
        if not (self.lr > 0 and self.grad_clip > 0) or self.warmup < 0 or self.eval_every < 0 or self.eval_frames < 8:
            raise ValueError(
                f"need lr > 0, grad_clip > 0, warmup >= 0, eval_every >= 0, eval_frames >= 8; got lr={self.lr}, "
                f"grad_clip={self.grad_clip}, warmup={self.warmup}, eval_every={self.eval_every}, eval_frames={self.eval_frames}"
            )
        parse_options(self.kind, self.options)  # fail now on an unknown or malformed option

    def encoder_config(self, views: int, image_size: int) -> dict[str, Any]:
        """The encoder's config fields: the dataset's views and image size, then this run's choices."""
        config: dict[str, Any] = {"views": views, "image_size": image_size}
        if self.entities is not None:
            config["entities"] = self.entities
        if self.width is not None:
            config["width"] = self.width
        return config | parse_options(self.kind, self.options)


def parse_options(kind: str, options: tuple[str, ...]) -> dict[str, Any]:
    """``("name=value", …)`` → typed encoder config fields of ``kind``; ValueError on anything else."""
    encoder = encoder_class(kind)
    types = typing.get_type_hints(encoder.Config) | retired_types(encoder)
    out: dict[str, Any] = {}
    for option in options:
        name, value = parse_assignment(option, types, f"{kind} encoder option")
        if name in ("views", "image_size"):
            raise ValueError(f"encoder option {name!r} comes from the dataset; it cannot be set")
        out[name] = value
    return drop_retired(encoder, out)


@dataclass
class EncoderTrainResult:
    """What a run did: where it lives, how far it got, its last loss and held-out scores."""

    run_dir: Path
    steps: int
    wall_s: float
    loss: float = math.nan
    images_per_s: float = math.nan
    scores: dict[str, float] = field(default_factory=dict)


_PALETTE = np.array(
    [[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48], [145, 30, 180], [70, 240, 240],
     [240, 50, 230], [210, 245, 60], [250, 190, 212], [0, 128, 128], [170, 110, 40], [128, 0, 0], [0, 0, 128],
     [128, 128, 0], [255, 255, 255]],
    dtype=np.float32,
)  # fmt: skip


def decomposition_image(images: np.ndarray, recon: np.ndarray, alpha: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """A ``(rows * P, 4 * P, 3)`` uint8 picture: per camera image, input | reconstruction | decomposition | positions.

    Args:
        images, recon: ``(B, V, 3, P, P)`` in ``[0, 1]``.
        alpha: ``(B, V, K, P, P)``.
        positions: ``(B, V, K, 2)`` in ``[-1, 1]``.
    """
    b, v, k, p, _ = alpha.shape
    colours = _PALETTE[np.arange(k) % len(_PALETTE)] / 255
    owner = alpha.argmax(2)  # (B, V, P, P)
    strength = alpha.max(2)[..., None]
    decomposition = colours[owner] * (0.35 + 0.65 * strength)
    rows = []
    for s in range(b):
        for view in range(v):
            image = images[s, view].transpose(1, 2, 0)
            dots = image.copy() * 0.6
            xy = np.clip(((positions[s, view] + 1) / 2 * (p - 1)).round().astype(int), 0, p - 1)
            for entity, (x, y) in enumerate(xy):
                dots[max(0, y - 1) : y + 2, max(0, x - 1) : x + 2] = colours[entity]
            rows.append(np.concatenate([image, recon[s, view].transpose(1, 2, 0), decomposition[s, view], dots], 1))
    return (np.clip(np.concatenate(rows, 0), 0, 1) * 255).astype(np.uint8)


@torch.no_grad()
def decomposition_picture(model: EntityEncoder, frames: Frames, index: np.ndarray) -> np.ndarray:
    """:func:`decomposition_image` of ``frames[index]`` as ``model`` decomposes them in eval mode (its mode is restored)."""
    was_training = model.training
    model.eval()
    images = frames.batch(index, next(model.parameters()).device)
    out = model(images)
    model.train(was_training)
    return decomposition_image(*(t.float().cpu().numpy() for t in (images, out.recon, out.alpha, out.positions)))


class _Losses(torch.nn.Module):
    """An encoder's training losses as a module's output: what DDP wraps, since it looks for the
    parameters without gradients from the outputs (the entity rows also depend on some that no loss does)."""

    def __init__(self, encoder: EntityEncoder) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(
        self, images: torch.Tensor, agent: torch.Tensor | None = None, objects: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        labels = {k: v for k, v in (("agent", agent), ("objects", objects)) if v is not None}
        return self.encoder(images, **labels).losses


class _Trainer:
    """The state of a run: encoder, optimizer, step counter, batch sampler.

    ``forward`` is the encoder to call for the training loss: behind DDP in a process of a
    data-parallel run (``world``), compiled with ``config.compile``; ``model`` is the plain module.
    """

    def __init__(
        self, config: EncoderTrainConfig, model: EntityEncoder, device: torch.device, world: World | None = None
    ) -> None:
        self.config, self.model, self.device, world = config, model.to(device), device, world or World()
        # Some parameters get no gradient: the view embedding is in the entity rows, not in any loss.
        self.forward = compiled(distributed.replicate(_Losses(self.model), world, find_unused=True), config.compile)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        self.step, self.batch_size = 0, distributed.split_batch(config.batch_size, world)
        self.rng = np.random.default_rng(distributed.rank_seed(config.seed, world.rank))

    def save(self, run_dir: Path, meta: dict[str, Any]) -> Path | None:
        """Write ``checkpoints/latest`` (on rank 0; every process calls it, to hand over its samplers)."""
        samplers = distributed.sampler_checkpoint(self.rng, torch.get_rng_state(), "torch_rng")
        if samplers is None:
            return None
        root = run_dir / "checkpoints"
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".tmp_{self.step}"
        shutil.rmtree(tmp, ignore_errors=True)
        save_encoder(self.model, tmp, meta)
        tensors, opt_meta = optimizer_state(self.optimizer, "opt")
        tensors["torch_rng"] = torch.get_rng_state()
        save_file(tensors | samplers[0], str(tmp / "training.safetensors"))
        state = {"step": self.step, "optimizer": opt_meta, "rng": self.rng.bit_generator.state, **samplers[1]}
        (tmp / "training.json").write_text(json.dumps(state, indent=1) + "\n")
        return replace_dir(tmp, root / "latest")

    def load(self, ckpt: Path) -> None:
        if not (ckpt / "training.json").exists():
            raise FileNotFoundError(f"{ckpt} has no training state (training.json); cannot resume from it")
        load_weights(self.model, ckpt / ENCODER.weights, ckpt / ENCODER.config)
        state = json.loads((ckpt / "training.json").read_text())
        tensors = load_file(str(ckpt / "training.safetensors"))
        load_optimizer_state(self.optimizer, tensors, state["optimizer"], "opt")
        sampler = distributed.restore_sampler(self.rng, state, tensors, "torch_rng", self.config.seed)
        if isinstance(sampler, int):
            torch.manual_seed(sampler)
        else:
            torch.set_rng_state(sampler)
        self.step = int(state["step"])

    def update(self, frames: Frames) -> dict[str, torch.Tensor]:
        """One gradient step on a batch of ``frames``; returns its loss terms (detached, on the device)."""
        config, model = self.config, self.model
        for group in self.optimizer.param_groups:
            group["lr"] = config.lr * warmup_cosine(self.step, config.warmup, config.steps)
        model.schedule(self.step)
        index = self.rng.integers(len(frames), size=self.batch_size)
        images = frames.batch(index, self.device)
        with autocast(config.precision, self.device):
            losses = self.forward(
                images,
                frames.agent_batch(index, self.device) if model.uses_agent else None,
                frames.object_batch(index, self.device) if model.uses_objects else None,
            )
        self.optimizer.zero_grad(set_to_none=True)
        losses["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        self.optimizer.step()
        self.step += 1
        return {f"train/{k}": v.detach() for k, v in losses.items()}


def start_from(model: EntityEncoder, path: Path) -> None:
    """Copy the weights of the encoder checkpoint at ``path`` into ``model`` (``--init``).

    Raises:
        ValueError: the checkpoint is another kind of encoder or its weights do not fit ``model``.
    """
    source = load_encoder(path)
    if source.kind != model.kind:
        raise ValueError(f"--init {path} is a {source.kind!r} encoder; this run trains a {model.kind!r} one")
    theirs, ours = source.state_dict(), model.state_dict()
    differ = sorted(
        k for k in theirs.keys() | ours.keys() if k not in theirs or k not in ours or theirs[k].shape != ours[k].shape
    )
    if differ:
        raise ValueError(
            f"--init {path} has another architecture than this run (weights that differ: {differ[:4]}"
            f"{' …' if len(differ) > 4 else ''}); use the options it was trained with, except loss weights and schedules"
        )
    model.load_state_dict(theirs)


def _frames(config: EncoderTrainConfig) -> tuple[Frames, Frames]:
    """Training frames and held-out frames."""
    data = DemoDataset(config.dataset)
    if data.pixels is None:
        raise DatasetError(f"{config.dataset} holds no frames: collect it with `ecrl-collect --pixels 64`")
    if config.test_dataset is not None:
        test = Frames(config.test_dataset)
        if (test.cameras, test.size) != (data.cameras, int(data.pixel_meta["size"])):
            raise DatasetError(
                f"{config.test_dataset} renders {test.cameras} at {test.size} px, {config.dataset} renders "
                f"{data.cameras} at {data.pixel_meta['size']} px; they must match"
            )
        return Frames(data), test
    episodes = np.arange(len(data))
    if len(data) < 2:
        raise DatasetError(
            f"{config.dataset} has {len(data)} episode(s): hold-out frames need 2 or pass --test-dataset"
        )
    held = episodes % 10 == 9 if len(data) >= 10 else episodes == len(data) - 1
    return Frames(data, episodes[~held]), Frames(data, episodes[held])


def _evaluate(
    model: EntityEncoder,
    train_frames: Frames,
    test_frames: Frames,
    config: EncoderTrainConfig,
    writer: SummaryWriter,
    log_dir: Path,
    device: torch.device,
    step: int,
) -> EncoderScores:
    """Score ``model`` on held-out frames at ``step`` (probe fitted on training frames); log to tensorboard and CSV."""
    scores = score_encoder(
        model, train_frames, test_frames, 2 * config.eval_frames, config.eval_frames, probe_steps=1000, device=device
    )
    row = {"train/gradient_steps": step} | {f"eval/{k}": v for k, v in scores.scalars().items()}
    for key, value in row.items():
        if key.startswith("eval/"):
            writer.add_scalar(key, value, step)
    append_csv(log_dir / "progress.csv", row)
    return scores


def train(config: EncoderTrainConfig, resume: Path | None = None) -> EncoderTrainResult:
    """Train (or, with ``resume``, continue) an encoder; returns what the run did.

    With ``resume`` (a run directory) the run's own ``config.json`` is used, except ``steps`` (which
    may be raised to extend a finished run) and how it runs (``threads``, ``device``, ``progress``,
    ``precision``, ``compile``). Under ``torchrun`` every process calls it and trains its share of
    each batch (see the module's docstring).
    """
    run = start_run(EncoderTrainConfig, config, resume, "an encoder", lambda c: f"{c.dataset.name}__{c.kind}")
    with distributed.session(torch_device(run.config.device)) as (world, device):
        run.dir = distributed.broadcast(run.dir)  # a new run's name has the time in it: rank 0's
        return _train(run, world, device)


def _train(run: Run, world: World, device: torch.device) -> EncoderTrainResult:
    config, main, run_dir = run.config, world.main, run.dir
    train_frames, test_frames = _frames(config)
    torch.manual_seed(config.seed)
    model = build_encoder(config.kind, **config.encoder_config(train_frames.views, train_frames.size))
    if config.init is not None and not run.resumed:
        start_from(model, config.init)
    if not main:  # the weights are rank 0's (DDP starts every process from them); the noise is each rank's own
        torch.manual_seed(distributed.rank_seed(config.seed, world.rank))
    trainer = _Trainer(config, model, device, world)
    if run.resumed:
        trainer.load(run.checkpoint)
    meta = {"dataset": str(config.dataset), "cameras": list(train_frames.cameras), "train_frames": len(train_frames)}
    writer = None
    if main:
        open_run(run, trainer.step, **world.describe(config.batch_size))
        writer = SummaryWriter(str(run_dir / "tb"))
    result = EncoderTrainResult(run_dir=run_dir, steps=trainer.step, wall_s=0.0)
    shown = np.random.default_rng(1).choice(len(test_frames), size=min(3, len(test_frames)), replace=False)
    start, log = time.perf_counter(), WindowLog(writer, "time/images_per_s")
    progress = config.progress and main
    bar = tqdm(
        total=config.steps, initial=trainer.step, desc=f"encoder ({config.kind})", unit="step", disable=not progress
    )
    model.train()

    evaluate = partial(_evaluate, model, train_frames, test_frames, config, writer, run_dir / "tb", device)

    while trainer.step < config.steps:
        log.add(trainer.update(train_frames))
        bar.update(1)
        if trainer.step % config.log_every == 0 or trainer.step == config.steps:
            lr = trainer.optimizer.param_groups[0]["lr"]
            means, result.images_per_s = log.flush(trainer.step, lr, config.batch_size * train_frames.views)
            bar.set_postfix(loss=f"{means['train/loss']:.5f}")
            result.loss = means["train/loss"]
        if main and (trainer.step % config.image_every == 0 or trainer.step == config.steps):
            picture = decomposition_picture(model, test_frames, shown)
            writer.add_image("images/decomposition", picture, trainer.step, dataformats="HWC")
        if config.eval_every and trainer.step % config.eval_every == 0 and trainer.step < config.steps:
            if main:
                result.scores = evaluate(trainer.step).scalars()
                bar.write(f"step {trainer.step}: " + ", ".join(f"{k} {v:.3f}" for k, v in result.scores.items()))
            log.restart()
        if trainer.step % config.checkpoint_every == 0:
            trainer.save(run_dir, dict(meta, steps=trainer.step))
    bar.close()
    trainer.save(run_dir, dict(meta, steps=trainer.step))
    if main:
        save_encoder(model, run_dir / "final", dict(meta, steps=trainer.step))
        scores = evaluate(trainer.step)
        result.scores = scores.scalars()
        (run_dir / "scores.json").write_text(json.dumps({"steps": trainer.step, **scores.to_json()}, indent=2) + "\n")
        writer.close()
    result.steps, result.wall_s = trainer.step, time.perf_counter() - start
    if main:
        close_run(run, trainer.step, result.wall_s, images_per_s=result.images_per_s)
    return result
