"""Where particles read and draw the image: glimpse crops, placement grids, compositing, and the losses.

The particle encoder (:mod:`ecrl.encoders.particles`) encodes each particle from a crop of the image
(:func:`crop`), draws its decoded RGBA glimpse back at its keypoint (:func:`placement`) and composites
all particles over the background (:func:`composite`). Its training losses compare those drawings with
the image (:func:`reconstruction_loss`, :func:`glimpse_loss`), keep its keypoints near the prior's
(:func:`chamfer_kl`) and, with an agent particle, its agent heatmap on the pusher (:func:`agent_loss`).
These are functions of tensors only: the encoder's state (weights, configuration) stays in the module.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange

from ecrl.encoders.base import pixel_centres
from ecrl.encoders.keypoints import gaussian_kl
from ecrl.encoders.particle_config import AGENT_SIGMA, DEPTH_TEMPERATURE

__all__ = [
    "agent_loss",
    "chamfer_kl",
    "composite",
    "crop",
    "glimpse_loss",
    "heatmap_kl",
    "object_loss",
    "placement",
    "reconstruction_loss",
]


def crop(images: torch.Tensor, centres: torch.Tensor, scales: torch.Tensor, size: int) -> torch.Tensor:
    """``size``-pixel crops ``(N, K, C, size, size)`` of ``images (N, C, H, W)``.

    Crop ``k`` is centred on ``centres[:, k]`` and spans ``scales[:, k]`` (both ``(N, K, 2)``) of the image.
    """
    n, k = centres.shape[:2]
    theta = torch.zeros(n * k, 2, 3, device=images.device, dtype=images.dtype)
    theta[:, 0, 0], theta[:, 1, 1] = scales.reshape(-1, 2).unbind(-1)
    theta[:, :, 2] = centres.reshape(-1, 2)
    grid = F.affine_grid(theta, [n * k, 1, size, size], align_corners=False)
    # One sampling pass per image: the K glimpses stacked along the grid's height.
    crops = F.grid_sample(images, grid.reshape(n, k * size, size, 2), padding_mode="border", align_corners=False)
    return rearrange(crops, "n c (k h) w -> n k c h w", k=k)


def placement(mu: torch.Tensor, scale: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """``(N K, H, W, 2)`` sampling grid placing glimpses at ``mu`` with extent ``scale`` (both ``(N, K, 2)``).

    The inverse of the crop's affine map, glimpse coordinates ``u = (p - mu) / scale`` at every
    pixel ``p``, built per axis (x depends on the column only, y on the row) instead of by affine_grid.
    """
    xs, ys = pixel_centres(w, mu), pixel_centres(h, mu)
    u = (xs - mu[..., :1]) / scale[..., :1]  # (N, K, W)
    v = (ys - mu[..., 1:]) / scale[..., 1:]  # (N, K, H)
    grid = torch.stack([u[:, :, None, :].expand(-1, -1, h, -1), v[..., None].expand(-1, -1, -1, w)], -1)
    return grid.flatten(0, 1)


def composite(
    glimpses: torch.Tensor,
    mu: torch.Tensor,
    scale: torch.Tensor,
    depth: torch.Tensor,
    transparency: torch.Tensor,
    background: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Composite particles over a background; invariant to the order of the particles.

    Args:
        glimpses: ``(N, K, 4, g, g)`` RGBA glimpses in ``[0, 1]``.
        mu: ``(N, K, 2)`` centres; scale: ``(N, K, 2)`` extents as fractions of the image side.
        depth: ``(N, K)``, smaller is in front; transparency: ``(N, K)`` in ``[0, 1]``.
        background: ``(N, 3, H, W)``.

    Returns:
        ``recon (N, 3, H, W)`` and ``alpha (N, K, H, W)``: each particle's share of each pixel
        (``1 - alpha.sum(1)`` is the background's).
    """
    n, k = mu.shape[:2]
    h, w = background.shape[-2:]
    grid = placement(mu, scale, h, w)
    rgb, opacity = glimpses.flatten(0, 1).split([3, 1], dim=1)
    # Colour is extended past the glimpse's edge and opacity is zero there, so that the edge
    # fades in opacity only (sampling both with zero padding would darken it as well).
    rgb = F.grid_sample(rgb, grid, padding_mode="border", align_corners=False).unflatten(0, (n, k))
    opacity = F.grid_sample(opacity, grid, align_corners=False).view(n, k, h, w)
    opacity = opacity.clamp_max(1 - 1e-6) * transparency[..., None, None]
    cover = 1 - torch.log1p(-opacity).sum(1, keepdim=True).exp()  # 1 - prod(1 - a), cheaper to differentiate
    # exp(-depth / T) relative to the nearest particle: at most 1, so it never overflows.
    near = torch.exp(-(depth - depth.amin(1, keepdim=True).detach()) / DEPTH_TEMPERATURE)
    weight = opacity * near[..., None, None]
    alpha = cover * weight / (weight.sum(1, keepdim=True) + 1e-6)
    recon = (alpha[:, :, None] * rgb).sum(1) + (1 - alpha.sum(1, keepdim=True)) * background
    return recon, alpha


def reconstruction_loss(
    recon: torch.Tensor, images: torch.Tensor, background: torch.Tensor, foreground_weight: float
) -> torch.Tensor:
    """MSE of ``recon`` against ``images`` (both ``(N, 3, H, W)``), foreground pixels weighted up.

    The weights (``foreground_weight``, see :class:`~ecrl.encoders.particle_config.ParticleConfig`) come
    from the difference between the image and the ``background`` (detached) and are normalised to mean 1
    per image, so the loss stays on the scale of a plain MSE. With ``foreground_weight=0`` it is the MSE.
    """
    if not foreground_weight:
        return F.mse_loss(recon, images)
    with torch.no_grad():
        weight = 1 + foreground_weight * (images - background).square().sum(1, keepdim=True)
        weight = weight / weight.mean((-2, -1), keepdim=True)
    return (weight * (recon - images).square()).mean()


def glimpse_loss(
    images: torch.Tensor,
    background: torch.Tensor,
    glimpses: torch.Tensor,
    mu: torch.Tensor,
    scale: torch.Tensor,
) -> torch.Tensor:
    """MSE of each particle's glimpse, alone over the background, against the image where it is placed.

    Every particle must explain its own crop of ``images (N, 3, H, W)`` (the RGBA ``glimpses
    (N, K, 4, g, g)`` over the crop of ``background``, at ``mu`` and ``scale (N, K, 2)``). Unlike
    the composite, which a particle can leave to the others or to the background, this teaches
    every glimpse decoder and visual latent from the first step: it is DLP's glimpse warm-up loss,
    kept on (the encoder passes positions and the background detached, so that it shapes only appearance).
    """
    size = glimpses.shape[-1]
    target = crop(images, mu, scale, size)
    under = crop(background, mu, scale, size)
    rgb, opacity = glimpses.split([3, 1], dim=2)
    return F.mse_loss(opacity * rgb + (1 - opacity) * under, target)


def heatmap_kl(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``(N,)`` KL from a Gaussian (std ``AGENT_SIGMA`` cells) on ``target (N, 2)`` (in ``[-1, 1]``; non-finite
    targets are read as the centre, their KL to be masked by the caller) to the softmax of ``logits (N, h, w)``."""
    h, w = logits.shape[-2:]
    target = torch.where(torch.isfinite(target), target, torch.zeros_like(target))
    xs, ys = pixel_centres(w, logits), pixel_centres(h, logits)
    gx = -0.5 * ((xs - target[:, :1]) / (AGENT_SIGMA * 2 / w)).square()  # (N, w)
    gy = -0.5 * ((ys - target[:, 1:]) / (AGENT_SIGMA * 2 / h)).square()  # (N, h)
    wanted = (gy[:, :, None] + gx[:, None, :]).flatten(1).softmax(-1)
    return (torch.special.xlogy(wanted, wanted) - wanted * logits.flatten(1).log_softmax(-1)).sum(-1)


def agent_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """How far the agent heatmap is from the pusher, averaged over the images where it is in view.

    Per image: the KL from a Gaussian (std ``AGENT_SIGMA`` cells) on the pusher's image position
    ``target (N, 2)`` (in ``[-1, 1]``) to the softmax of the agent heatmap ``logits (N, h, w)``, whose
    mean near its peak is the agent particle's coarse keypoint. The KL has a gradient wherever the heatmap peaks;
    a loss on the keypoint (the softmax's mean) has almost none once the heatmap peaks on the wrong
    thing, and did not learn. The glimpse's offset is left to the reconstruction.
    """
    inside = (target.abs() <= 1).all(-1)  # NaN (behind the camera) compares False
    kl = heatmap_kl(logits, torch.where(inside[:, None], target, torch.zeros_like(target)))
    return (kl * inside).sum() / inside.sum().clamp_min(1)


def object_loss(
    heatmaps: torch.Tensor, mu: torch.Tensor, targets: torch.Tensor, first: int, image_size: int
) -> torch.Tensor:
    """How far the particles are from the objects, averaged over the objects shown.

    ``heatmaps (N, K, h, w)``: the logits each keypoint is the spatial softmax of (saliency and
    suppression included); ``mu (N, K, 2)``: the refined keypoints; ``targets (N, J, 2)``: the objects'
    image positions, NaN where an object is not shown. Objects in turn (0, 1, …) claim the nearest
    particle from ``first`` on that no earlier object claimed (distances without gradient). A claimed
    particle pays :func:`heatmap_kl` of its heatmap to the object, plus its keypoint's distance to the
    object in pixels.
    """
    n, k = mu.shape[:2]
    shown = torch.isfinite(targets).all(-1)  # (N, J)
    dist = torch.cdist(torch.nan_to_num(targets), mu.detach()[:, first:])  # (N, J, K - first)
    free = torch.ones(n, k - first, dtype=torch.bool, device=mu.device)
    rows = torch.arange(n, device=mu.device)
    total = mu.new_zeros(())
    for j in range(targets.shape[1]):
        choice = dist[:, j].masked_fill(~free, torch.inf).argmin(1)  # (N,)
        valid = shown[:, j] & free[rows, choice]
        free[rows, choice] &= ~shown[:, j]
        chosen = choice + first
        kl = heatmap_kl(heatmaps[rows, chosen], targets[:, j])
        pixels = (mu[rows, chosen] - torch.nan_to_num(targets[:, j])).norm(dim=-1) * image_size / 2
        total = total + ((kl + pixels) * valid).sum()
    return total / shown.sum().clamp_min(1)


def chamfer_kl(mu: torch.Tensor, logvar: torch.Tensor, prior: torch.Tensor, prior_sigma: float) -> torch.Tensor:
    """Chamfer-KL ``(N,)`` between posterior keypoints ``N(mu, e^logvar)`` ``(N, K, 2)`` and prior ones ``(N, L, 2)``.

    Each posterior Gaussian pays its KL to the nearest prior Gaussian (std ``prior_sigma``), and
    each prior Gaussian its KL to the nearest posterior one.
    """
    prior_logvar = 2 * math.log(prior_sigma)
    kl = gaussian_kl(mu[:, :, None], logvar[:, :, None], prior[:, None], prior_logvar).sum(-1)  # (N, K, L)
    return kl.amin(2).sum(1) + kl.amin(1).sum(1)
