"""Scoring an encoder on held-out frames: FG-ARI per camera, object-position probe error, reconstruction."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ecrl.encoders.base import EntityEncoder
from ecrl.encoders.data import Frames
from ecrl.encoders.metrics import PositionProbe, ProbeResult, fg_ari, match_objects, touching

__all__ = ["EncoderScores", "run_encoder", "score_encoder"]


@dataclass
class EncoderScores:
    """What :func:`score_encoder` measured."""

    fg_ari: float
    """Mean foreground ARI over every scored camera image."""
    fg_ari_per_camera: dict[str, float]
    recon_mse: float
    """Mean squared reconstruction error per pixel and channel, images in [0, 1]."""
    position: ProbeResult
    frames: int
    """Held-out frames scored (each has one image per camera)."""
    per_n: dict[int, dict[str, float]] = field(default_factory=dict)
    """Per number of objects in the frame: ``fg_ari``, ``position_cm`` and ``frames``."""
    contact: dict[str, float] = field(default_factory=dict)
    """FG-ARI of the camera images in which two foreground labels touch (``fg_ari_touching``) and of the
    others (``fg_ari_apart``), and the share of images that touch (``touching_share``); see
    :func:`~ecrl.encoders.metrics.touching`."""
    fg_ari_objects: float = math.nan
    """FG-ARI with the agent's pixels left out (counted as background): how well the objects alone are
    told apart, whatever becomes of the pusher."""
    agent_px: float = math.nan
    """With an agent particle (``uses_agent``): mean distance in pixels of its keypoint, found from the
    image, from the pusher's projected position, over views where the pusher is in sight (else NaN)."""

    def scalars(self) -> dict[str, float]:
        out = {"fg_ari": self.fg_ari, "recon_mse": self.recon_mse, "position_cm": self.position.mean_cm}
        out |= {f"fg_ari_{camera}": v for camera, v in self.fg_ari_per_camera.items()}
        out["position_median_cm"] = self.position.median_cm
        if not math.isnan(self.agent_px):
            out["agent_px"] = self.agent_px
        return out

    def to_json(self) -> dict:
        return asdict(self)


@torch.no_grad()
def run_encoder(
    model: EntityEncoder, frames: Frames, index: np.ndarray, batch_size: int = 64, device: str | torch.device = "cpu"
) -> dict[str, np.ndarray]:
    """Forward ``frames[index]`` in eval mode: ``entities``, ``alpha`` and ``recon_se`` (squared error per frame)."""
    was_training = model.training
    model.eval()
    out: dict[str, list[np.ndarray]] = {"entities": [], "alpha": [], "recon_se": [], "positions": []}
    for first in range(0, len(index), batch_size):
        images = frames.batch(index[first : first + batch_size], device)
        result = model(images)
        out["entities"].append(result.entities.float().cpu().numpy())
        out["alpha"].append(result.alpha.float().cpu().numpy())
        out["positions"].append(result.positions.float().cpu().numpy())
        out["recon_se"].append((result.recon - images).square().mean((1, 2, 3, 4)).cpu().numpy())
    model.train(was_training)
    return {k: np.concatenate(v) for k, v in out.items()}


def score_encoder(
    model: EntityEncoder,
    fit: Frames,
    test: Frames,
    fit_frames: int = 1024,
    test_frames: int = 512,
    seed: int = 0,
    probe_steps: int = 2000,
    device: str | torch.device = "cpu",
) -> EncoderScores:
    """Score ``model`` on ``test_frames`` frames of ``test``; the position probe is fitted on ``fit_frames`` of ``fit``."""
    rng = np.random.default_rng(seed)
    pick = lambda frames, n: np.sort(rng.choice(len(frames), size=min(n, len(frames)), replace=False))  # noqa: E731
    fit_idx, test_idx = pick(fit, fit_frames), pick(test, test_frames)
    views = test.views
    probe_data = []
    for frames, idx in ((fit, fit_idx), (test, test_idx)):
        run = run_encoder(model, frames, idx, device=device)
        matches = match_objects(run["alpha"], frames.segmentation[idx], frames.n_objects[idx])
        x, which = PositionProbe.features(run["entities"], matches, views)
        y = frames.positions[idx][which[:, 0], which[:, 1]]
        probe_data.append((x, y, run, which))
    (x_fit, y_fit, _, _), (x_test, y_test, run, which_test) = probe_data
    probe = PositionProbe(steps=probe_steps, seed=seed).fit(x_fit, y_fit)
    seg = test.segmentation[test_idx]
    ari = np.stack([fg_ari(seg[:, v], run["alpha"][:, v]) for v in range(views)], 1)  # (M, V)
    objects = np.where(seg == 1, 0, seg)  # label 1 is the agent
    ari_objects = np.stack([fg_ari(objects[:, v], run["alpha"][:, v]) for v in range(views)], 1)
    touch = touching(seg.reshape(-1, *seg.shape[2:])).reshape(seg.shape[:2])  # (M, V)
    n_frame = test.n_objects[test_idx]
    agent_px = math.nan
    if model.uses_agent:
        target = test.agent_points[test_idx]  # (M, V, 2)
        seen = (np.abs(target) <= 1).all(-1)
        miss = np.linalg.norm(run["positions"][:, :, 0] - target, axis=-1) * test.size / 2
        agent_px = float(miss[seen].mean()) if seen.any() else math.nan
    errors, n_object = probe.errors_cm(x_test, y_test), n_frame[which_test[:, 0]]
    per_n = {
        int(n): {
            "fg_ari": float(np.nanmean(ari[n_frame == n])),
            "position_cm": float(errors[n_object == n].mean()) if (n_object == n).any() else float("nan"),
            "frames": int((n_frame == n).sum()),
        }
        for n in np.unique(n_frame)
    }
    return EncoderScores(
        fg_ari=float(np.nanmean(ari)),
        fg_ari_per_camera={c: float(np.nanmean(ari[:, v])) for v, c in enumerate(test.cameras)},
        recon_mse=float(run["recon_se"].mean()),
        position=probe.score(x_test, y_test),
        frames=len(test_idx),
        per_n=per_n,
        contact={
            "fg_ari_touching": float(np.nanmean(ari[touch])) if touch.any() else float("nan"),
            "fg_ari_apart": float(np.nanmean(ari[~touch])) if (~touch).any() else float("nan"),
            "touching_share": float(touch.mean()),
        },
        fg_ari_objects=float(np.nanmean(ari_objects)),
        agent_px=agent_px,
    )
