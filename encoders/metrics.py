"""How good an encoder's entities are: decomposition (FG-ARI), decodable object positions, speed.

- :func:`fg_ari`: the adjusted Rand index between the encoder's decomposition of an image (each
  pixel goes to the entity with the largest alpha) and MuJoCo's segmentation, over the foreground
  pixels only (the agent and the objects; the table, floor and goal markers are background). 1 is a
  perfect split into objects, 0 is chance.
- :func:`touching`: which label maps have two foreground labels in contact (FG-ARI is reported
  apart for those frames).
- :func:`match_objects` pairs each object with one entity per view by optimal assignment on how
  much of the object's true mask the entity's alpha covers; :class:`PositionProbe` then learns to
  read the object's table position from the matched entity rows (fitted on one set of frames,
  scored on another) and reports the error in centimetres.
- :func:`encode_rate`: camera images encoded per second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import nn

from ecrl.timing import reduce_times, time_calls

__all__ = ["PositionProbe", "ProbeResult", "encode_rate", "fg_ari", "match_objects", "touching"]


def fg_ari(labels: np.ndarray | torch.Tensor, alpha: np.ndarray | torch.Tensor) -> np.ndarray:
    """Foreground ARI of each image.

    Args:
        labels: ``(M, H, W)`` true labels, 0 background, ``>= 1`` one id per object (or the agent).
        alpha: ``(M, K, H, W)`` the encoder's per-entity alpha maps of the same images.

    Returns:
        ``(M,)`` ARI per image; NaN for an image with fewer than 2 foreground pixels. When the
        foreground holds a single object and the prediction puts it in a single entity, the ARI is 1
        (the usual convention for a single cluster on both sides).
    """
    labels = torch.as_tensor(np.asarray(labels)).long()
    alpha = torch.as_tensor(np.asarray(alpha) if not isinstance(alpha, torch.Tensor) else alpha)
    if labels.ndim != 3 or alpha.ndim != 4 or labels.shape[0] != alpha.shape[0] or labels.shape[1:] != alpha.shape[2:]:
        raise ValueError(
            f"labels (M, H, W) and alpha (M, K, H, W) must agree; got {tuple(labels.shape)} and {tuple(alpha.shape)}"
        )
    m, k = alpha.shape[:2]
    fg = (labels > 0).flatten(1).float()  # (M, P)
    true = torch.nn.functional.one_hot(labels.flatten(1), int(labels.max()) + 1).float() * fg[..., None]
    pred = torch.nn.functional.one_hot(alpha.flatten(2).argmax(1), k).float() * fg[..., None]
    table = torch.einsum("mpc,mpk->mck", true, pred).double()  # contingency counts over foreground pixels
    pairs = lambda x: x * (x - 1) / 2  # noqa: E731
    n = fg.sum(1).double()
    index = pairs(table).sum((1, 2))
    rows, cols = pairs(table.sum(2)).sum(1), pairs(table.sum(1)).sum(1)
    expected = rows * cols / pairs(n).clamp_min(1)
    top = (rows + cols) / 2
    denominator = top - expected
    ari = torch.where(
        denominator.abs() > 1e-12, (index - expected) / denominator.where(denominator.abs() > 1e-12, 1.0), 1.0
    )
    ari = torch.where(n >= 2, ari, torch.nan)
    return ari.numpy()


def touching(labels: np.ndarray) -> np.ndarray:
    """``(M,)`` whether two different foreground labels of each ``(M, H, W)`` label map touch: a pixel of
    one is next to (left, right, above or below) a pixel of the other. The pusher pressed against the
    object it pushes, or two objects in contact, are where decompositions tend to merge things."""
    labels = np.asarray(labels)
    if labels.ndim != 3:
        raise ValueError(f"labels must be (M, H, W), got shape {labels.shape}")
    out = np.zeros(len(labels), bool)
    for a, b in ((labels[:, 1:], labels[:, :-1]), (labels[:, :, 1:], labels[:, :, :-1])):
        out |= ((a > 0) & (b > 0) & (a != b)).reshape(len(labels), -1).any(1)
    return out


def match_objects(alpha: np.ndarray, segmentation: np.ndarray, n_objects: np.ndarray) -> np.ndarray:
    """For every sample, object and view, the entity that covers most of the object (optimal assignment).

    Args:
        alpha: ``(B, V, K, H, W)`` alpha maps.
        segmentation: ``(B, V, H, W)`` labels (``i + 2`` is object ``i``; 0 and 1 are not objects).
        n_objects: ``(B,)`` number of objects of each sample.

    Returns:
        ``(B, n_max, V)`` int64 entity index within its view (``-1`` where an object has no entity:
        more objects than entities, or no object ``i``).
    """
    b, v, k = alpha.shape[:3]
    n_max = int(np.max(n_objects))
    out = np.full((b, n_max, v), -1, np.int64)
    for s in range(b):
        n = int(n_objects[s])
        for view in range(v):
            masks = segmentation[s, view][None] == (np.arange(n) + 2)[:, None, None]  # (n, H, W)
            area = masks.reshape(n, -1).sum(1).clip(min=1)
            cover = np.einsum("khw,nhw->nk", alpha[s, view], masks) / area[:, None]  # (n, K)
            rows, cols = linear_sum_assignment(-cover)
            out[s, rows, view] = cols
    return out


@dataclass
class ProbeResult:
    """Object-position error of a fitted probe on held-out frames, in centimetres."""

    mean_cm: float
    median_cm: float
    p90_cm: float
    objects: int
    """Objects scored."""
    fit_objects: int
    """Objects the probe was fitted on."""


class PositionProbe:
    """An MLP that reads an object's ``(x, y)`` table position from its matched entity rows.

    The input of one object is the concatenation, over views, of the entity row matched to it in
    that view (:func:`match_objects`). Inputs are standardised with the fitting set's statistics.
    """

    def __init__(self, width: int = 128, steps: int = 2000, lr: float = 3e-3, seed: int = 0) -> None:
        self.width, self.steps, self.lr, self.seed = width, steps, lr, seed

    @staticmethod
    def features(entities: np.ndarray, matches: np.ndarray, views: int) -> tuple[np.ndarray, np.ndarray]:
        """``(objects, V * D)`` inputs and the ``(objects,)`` (sample, object) pairs they belong to.

        Args:
            entities: ``(B, V * K, D)`` rows (view-major).
            matches: ``(B, n_max, V)`` from :func:`match_objects`.
        """
        b, vk, d = entities.shape
        k = vk // views
        sample, obj = np.nonzero((matches >= 0).all(-1))
        rows = entities.reshape(b, views, k, d)
        x = np.concatenate([rows[sample, v, matches[sample, obj, v]] for v in range(views)], axis=-1)
        return x.astype(np.float32), np.stack([sample, obj], -1)

    def fit(self, x: np.ndarray, y: np.ndarray) -> PositionProbe:
        """Fit on inputs ``x (n, F)`` and positions ``y (n, 2)`` in metres."""
        torch.manual_seed(self.seed)
        x = np.asarray(x, np.float32)
        self.mean, self.std = x.mean(0), x.std(0) + 1e-6
        xt, yt = torch.as_tensor((x - self.mean) / self.std), torch.as_tensor(y, dtype=torch.float32)
        self.net = nn.Sequential(
            nn.Linear(x.shape[1], self.width),
            nn.ReLU(),
            nn.Linear(self.width, self.width),
            nn.ReLU(),
            nn.Linear(self.width, 2),
        )
        opt = torch.optim.Adam(self.net.parameters(), lr=self.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, self.steps)
        gen = torch.Generator().manual_seed(self.seed)
        for _ in range(self.steps):
            idx = torch.randint(len(xt), (min(512, len(xt)),), generator=gen)
            loss = (self.net(xt[idx]) - yt[idx]).square().sum(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        self.fit_objects = len(x)
        return self

    @torch.no_grad()
    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.net(torch.as_tensor((np.asarray(x, np.float32) - self.mean) / self.std)).numpy()

    def errors_cm(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Distance between predicted and true positions of each object, centimetres."""
        return np.linalg.norm(self.predict(x) - y, axis=-1) * 100

    def score(self, x: np.ndarray, y: np.ndarray) -> ProbeResult:
        err = self.errors_cm(x, y)
        return ProbeResult(
            float(err.mean()), float(np.median(err)), float(np.percentile(err, 90)), len(err), self.fit_objects
        )


def encode_rate(encode: Callable[[torch.Tensor], object], images: torch.Tensor, repeats: int = 5) -> float:
    """Camera images per second of ``encode(images)`` (``images: (B, V, 3, H, W)``), best of ``repeats``."""
    with torch.no_grad():
        encode(images)  # warm-up
        best = reduce_times([time_calls(lambda: encode(images), 1) for _ in range(repeats)], "best")
    return images.shape[0] * images.shape[1] / best
