"""Keypoints from heatmaps and the Gaussian maths of particle latents (:mod:`ecrl.encoders.particles`)."""

from __future__ import annotations

import math

import torch

from ecrl.encoders.base import pixel_centres

__all__ = ["coordinate_channels", "gaussian_kl", "peak_mean", "sample_gaussian", "spatial_softmax"]


def spatial_softmax(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Expected pixel-centre coordinates of ``softmax(logits: (N, C, h, w))`` over each map.

    Returns:
        ``mean (N, C, 2)`` (x, y in ``[-1, 1]``) and ``var (N, C, 2)`` of the distribution.
    """
    h, w = logits.shape[-2:]
    probs = logits.flatten(-2).softmax(-1).unflatten(-1, (h, w))
    xs, ys = pixel_centres(w, logits), pixel_centres(h, logits)
    px, py = probs.sum(-2), probs.sum(-1)  # marginals (N, C, w), (N, C, h)
    mean = torch.stack([px @ xs, py @ ys], -1)
    second = torch.stack([px @ xs.square(), py @ ys.square()], -1)
    return mean, (second - mean.square()).clamp_min(0.0)


def gaussian_kl(
    mean: torch.Tensor, logvar: torch.Tensor, prior_mean: torch.Tensor | float, prior_logvar: float
) -> torch.Tensor:
    """Elementwise ``KL(N(mean, e^logvar) || N(prior_mean, e^prior_logvar))``."""
    return 0.5 * (prior_logvar - logvar + (logvar.exp() + (mean - prior_mean).square()) / math.exp(prior_logvar) - 1)


def sample_gaussian(mean: torch.Tensor, logvar: torch.Tensor, stochastic: bool) -> torch.Tensor:
    return mean + torch.randn_like(mean) * (0.5 * logvar).exp() if stochastic else mean


def peak_mean(logits: torch.Tensor) -> torch.Tensor:
    """``(N, 2)`` spatial-softmax mean of ``logits (N, h, w)`` within the 3 × 3 cells around each map's peak.

    Unlike the mean over the whole map, it is not dragged towards the centre by the mass a heatmap
    still spreads elsewhere while it learns; it is differentiable in the logits of the window.
    """
    h, w = logits.shape[-2:]
    peak = logits.flatten(1).argmax(1)
    rows = torch.arange(h, device=logits.device)[None, :, None] - (peak // w)[:, None, None]
    cols = torch.arange(w, device=logits.device)[None, None, :] - (peak % w)[:, None, None]
    window = (rows.abs() <= 1) & (cols.abs() <= 1)
    return spatial_softmax(logits.masked_fill(~window, -torch.inf)[:, None])[0][:, 0]


def coordinate_channels(size: int) -> torch.Tensor:
    """``(1, 2, size, size)`` x and y of pixel centres in ``[-1, 1]``."""
    line = pixel_centres(size)
    ys, xs = torch.meshgrid(line, line, indexing="ij")
    return torch.stack([xs, ys])[None]
