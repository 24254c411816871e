"""How well and how fast object-centric encoders turn camera frames into entities: the measurement of
``ecrl-bench encoders``.

:func:`measure` takes an :class:`EncodersBenchConfig` and returns the numbers (and, for trained encoders,
writes a decomposition picture per encoder into ``config.out``); the CLI
(:mod:`ecrl.scripts.bench_encoders`) checks the targets and writes the tables, plot and README.

For each encoder (a trained checkpoint of `ecrl-train-encoder`, or, without checkpoints, freshly
initialised encoders of every kind, which measures speed only):

* **Decomposition.** Foreground ARI of the encoder's decomposition (each pixel to the entity with
  the largest alpha) against MuJoCo's segmentation, on held-out frames (`test_dataset`), per
  camera and per number of objects in the scene (`ecrl.encoders.metrics.fg_ari`).
* **Object positions.** Each object is matched to one entity per camera by optimal assignment on
  how much of its true mask the entity covers; an MLP probe, fitted on frames of `fit_dataset`,
  reads the object's table (x, y) from the matched rows; its error on the held-out frames, in cm.
* **Encoding throughput.** Camera images per second of `encode` (no decoder) at batch
  `batch` × cameras, on `threads` threads, best of `repeats`. The machine is shared, so a
  reference runs in the same process: rendering the same number of 64-px camera images with
  MuJoCo (`PushEnv.render_views`, software EGL); the ratio encode/render is reported too.

Targets (issue 5): best encoder FG-ARI >= 0.9 and position error <= 1 cm on scenes with up to 6
objects at 64 px; encoding >= 500 images/s on this CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import ecrl.envs  # noqa: F401  (registers ecrl/Push-v0)
from ecrl.encoders.data import Frames
from ecrl.encoders.evaluate import score_encoder
from ecrl.encoders.io import ENCODER_KINDS, build_encoder, load_encoder
from ecrl.encoders.metrics import encode_rate
from ecrl.encoders.train import decomposition_picture
from ecrl.timing import reduce_times, time_calls

__all__ = ["EncodersBenchConfig", "decomposition_file", "measure", "render_rate", "save_decomposition"]


@dataclass(frozen=True)
class EncodersBenchConfig:
    """Encoder quality (FG-ARI, position-probe error) and encoding images/s."""

    checkpoints: tuple[str, ...] = ()
    """Trained encoders (run directories or checkpoint directories); none: fresh encoders of every kind, speed only."""
    labels: tuple[str, ...] = ()
    """A label per checkpoint (default: its kind)."""
    test_dataset: Path = Path("data/pix-mix-test")
    """Held-out pixel dataset the encoders are scored on."""
    fit_dataset: Path = Path("data/pix-mix")
    """Pixel dataset whose frames the position probe is fitted on."""
    test_frames: int = 1024
    """Held-out frames scored (each has one image per camera)."""
    fit_frames: int = 2048
    """Frames the position probe is fitted on."""
    probe_steps: int = 2000
    """Adam steps of the position probe."""
    batch: int = 64
    """Samples per encode call when timing (each has one image per camera)."""
    repeats: int = 5
    """Timed encode calls per encoder (the best counts) and render rounds of the reference."""
    threads: int = 1
    """torch CPU threads."""
    min_ari: float = 0.9
    """Target: FG-ARI of the best encoder."""
    max_cm: float = 1.0
    """Target: position-probe error of the best encoder, centimetres."""
    min_rate: float = 500.0
    """Target: encoded camera images per second, every encoder."""
    strict: bool = False
    """Exit with status 1 when a target is missed."""
    out: Path = Path("results/bench_encoders")
    """Output directory."""

    def __post_init__(self) -> None:
        if self.labels and len(self.labels) != len(self.checkpoints):
            raise ValueError(
                f"--labels needs one label per checkpoint: {len(self.checkpoints)} checkpoints, {len(self.labels)} labels"
            )
        if min(self.test_frames, self.fit_frames, self.probe_steps, self.batch, self.repeats, self.threads) < 1:
            raise ValueError("test_frames, fit_frames, probe_steps, batch, repeats and threads must be >= 1")


def render_rate(size: int, cameras: tuple[str, ...], images: int, repeats: int) -> float:
    """Camera images per second of MuJoCo rendering a 3-object push scene at ``size`` px (best of ``repeats``)."""
    env = gym.make("ecrl/Push-v0", n_objects=3, width=size, height=size)
    env.reset(seed=0)
    scene = env.unwrapped
    scene.render_views(cameras)  # warm-up: creates the renderer
    frames = max(1, images // len(cameras))
    best = reduce_times([time_calls(lambda: scene.render_views(cameras), frames) for _ in range(repeats)], "best")
    env.close()
    return len(cameras) / best


def decomposition_file(label: str) -> str:
    """The file name of an encoder's decomposition picture."""
    return f"decomposition_{label}.png"


def save_decomposition(out: Path, label: str, model: Any, test: Frames, frames: int = 3) -> None:
    """``out/decomposition_<label>.png``: held-out camera images, their reconstruction, decomposition and
    entity positions (:func:`~ecrl.encoders.train.decomposition_picture`), doubled in size."""
    import imageio.v3 as iio

    picture = decomposition_picture(model, test, np.linspace(0, len(test) - 1, frames).astype(int))
    out.mkdir(parents=True, exist_ok=True)
    iio.imwrite(out / decomposition_file(label), np.kron(picture, np.ones((2, 2, 1), np.uint8)))


def _scores(config: EncodersBenchConfig, label: str, model: Any, fit: Frames, test: Frames) -> dict[str, Any]:
    """A trained encoder's quality on the held-out frames (its decomposition picture saved in ``config.out``)."""
    save_decomposition(config.out, label, model, test)
    scores = score_encoder(model, fit, test, config.fit_frames, config.test_frames, probe_steps=config.probe_steps)
    return {
        "fg_ari": scores.fg_ari,
        **{f"fg_ari_{c}": v for c, v in scores.fg_ari_per_camera.items()},
        "position_cm": scores.position.mean_cm,
        "position_median_cm": scores.position.median_cm,
        "position_p90_cm": scores.position.p90_cm,
        "recon_mse": scores.recon_mse,
        "scored_frames": scores.frames,
        "scored_objects": scores.position.objects,
        "probe_fit_objects": scores.position.fit_objects,
        "per_n": {str(n): v for n, v in scores.per_n.items()},
        **scores.contact,
        "fg_ari_objects": scores.fg_ari_objects,
        "agent_px": scores.agent_px,
        "agent_particle": model.uses_agent,
    }


def measure(config: EncodersBenchConfig) -> dict[str, Any]:
    """Every measurement, one encoder after the other.

    Returns:
        ``threads``, ``image_size``, ``cameras``, ``trained`` (whether checkpoints were scored);
        ``encoders``: a row per encoder (its kind, size, encode and render images/s and their ratio, and,
        when trained, FG-ARI overall, per camera and per N, position-probe errors, reconstruction error).
    """
    torch.set_num_threads(config.threads)
    trained = bool(config.checkpoints)
    if trained:
        models = [load_encoder(c) for c in config.checkpoints]
        labels = list(config.labels) or [m.kind for m in models]
        test, fit = Frames(config.test_dataset), Frames(config.fit_dataset)
        views, size, cameras = test.views, test.size, test.cameras
    else:
        views, size, cameras = 2, 64, ("front", "top")
        models = [build_encoder(kind, views=views, image_size=size).eval() for kind in ENCODER_KINDS]
        labels = list(ENCODER_KINDS)
    torch.manual_seed(0)
    images = (
        torch.rand(config.batch, views, 3, size, size)
        if not trained
        else test.batch(np.arange(min(config.batch, len(test))))
    )
    reference = render_rate(size, cameras, config.batch * views, config.repeats)
    rows = []
    for label, model in zip(labels, models, strict=True):
        model.eval()
        rate = encode_rate(model.encode, images, config.repeats)
        row: dict[str, Any] = {
            "label": label,
            "kind": model.kind,
            "checkpoint": config.checkpoints[len(rows)] if trained else None,
            "entities_per_view": model.config.entities,
            "entity_dim": model.entity_dim,
            "parameters": sum(p.numel() for p in model.parameters()),
            "train_steps": getattr(model, "meta", {}).get("steps"),
            "encode_images_per_s": rate,
            "render_images_per_s": reference,
            "encode_vs_render": rate / reference,
        }
        if trained:
            row |= _scores(config, label, model, fit, test)
        rows.append(row)
    return {
        "threads": config.threads,
        "image_size": size,
        "cameras": list(cameras),
        "trained": trained,
        "encoders": rows,
    }
