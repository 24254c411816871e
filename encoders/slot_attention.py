"""Slot Attention autoencoder (Locatello et al. 2020): each camera image → ``K`` slots.

Per view (all views share the weights, folded into the batch):

1. A CNN downsamples the image to a 16 × 16 feature grid (one stride-2 conv per halving), a *soft
   position embedding* (a linear map of the 4-channel coordinate grid ``x, y, 1 - x, 1 - y``) is
   added, and a LayerNorm + MLP maps every cell to an input token.
2. :class:`SlotAttention` refines ``K`` slots over ``iterations`` rounds: the slots compete for the
   tokens (softmax over slots), each takes the weighted mean of the values it won, and a GRU plus a
   residual MLP update it. The initial slots are drawn from a learned Gaussian.
3. A *spatial broadcast decoder* tiles each slot over a ``decoder_size``² grid, adds a position
   embedding, and upsamples it with transposed convs to RGB and an alpha logit per pixel (the last
   conv writes those 4 channels directly: a wide layer at full resolution, times ``V × K`` slots,
   would dominate a training step on a CPU). The alphas
   are a softmax over the view's slots and the reconstruction is ``Σ_k alpha_k · rgb_k``; the loss is
   its mean squared error. All slots of all views are decoded in one batched pass.

Entity features (``feature_dim = slot_dim + 3``), then the view embedding (:meth:`attach_views`):

- ``[0, slot_dim)``: the slot vector;
- ``slot_dim, slot_dim + 1``: the slot's centroid ``(x, y)`` in ``[-1, 1]`` (x to the right, y down);
- ``slot_dim + 2``: the slot's mass, the fraction of the image it covers (sums to 1 over a view's slots).

Centroid and mass are read off the attention map of the last slot-attention iteration on the
16 × 16 grid (a partition of the image over the slots), so that :meth:`SlotAttentionEncoder.encode`,
the fast path that never decodes, returns exactly the entities of :meth:`SlotAttentionEncoder.forward`.
``forward``'s ``positions`` (for pictures and matching) are the centroids of the decoder's alpha maps.

Initial slots: in training mode ``mu + sigma · noise`` with fresh noise per call; in eval mode the
noise is a fixed buffer (``eval_noise``, drawn once at construction and saved with the weights), so
``encode`` is deterministic. Starting every slot from ``mu`` itself would not work: identical slots
stay identical under slot attention, which is symmetric in the slots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ecrl.checkpoint import register_builder
from ecrl.encoders.base import EncoderOutput, EntityEncoder, check_config, check_images, pixel_centres

__all__ = ["SlotAttention", "SlotAttentionConfig", "SlotAttentionEncoder"]

GRID_SIZE = 16
"""Side of the feature grid the slots attend over."""


@dataclass
class SlotAttentionConfig:
    """Size of a :class:`SlotAttentionEncoder` (every field is JSON-able)."""

    views: int = 2
    """Cameras per sample; every view is encoded into its own ``entities`` slots."""
    image_size: int = 64
    """Side of the square input images in pixels: 32, 64 or 128."""
    entities: int = 7
    """Slots per view (``K``)."""
    width: int = 32
    """Channels of the CNN encoder and decoder (and width of the input tokens)."""
    slot_dim: int = 32
    """Width of a slot vector."""
    iterations: int = 3
    """Slot-attention refinement rounds."""
    view_dim: int = 4
    """Width of the learned camera embedding appended to every entity."""
    decoder_size: int = 8
    """Side of the grid a slot is broadcast on; transposed convs double it up to ``image_size``."""

    def __post_init__(self) -> None:
        check_config(self, ("width", "slot_dim", "iterations", "decoder_size"))
        d = self.decoder_size
        if d >= self.image_size or d & (d - 1):
            raise ValueError(
                f"decoder_size must be a power of two below image_size ({self.image_size}), got {self.decoder_size}"
            )


def _coordinates(size: int) -> torch.Tensor:
    """``(size², 2)`` centres ``(x, y)`` of the cells of a ``size × size`` grid in ``[-1, 1]``, row-major."""
    c = pixel_centres(size)
    y, x = torch.meshgrid(c, c, indexing="ij")
    return torch.stack([x.flatten(), y.flatten()], dim=-1)


def _position_grid(size: int) -> torch.Tensor:
    """``(size², 4)`` the soft position embedding's input ``x, y, 1 - x, 1 - y`` with x, y in ``[0, 1]``."""
    xy = (_coordinates(size) + 1) / 2
    return torch.cat([xy, 1 - xy], dim=-1)


def _moments(weights: torch.Tensor, coordinates: torch.Tensor) -> torch.Tensor:
    """``(…, 3)`` centroid ``(x, y)`` and mean of ``weights: (…, N)`` over cells at ``coordinates: (N, 2)``."""
    total = weights.sum(-1, keepdim=True)
    centroid = (weights @ coordinates) / total.clamp_min(1e-8)
    return torch.cat([centroid, total / weights.shape[-1]], dim=-1)


class SlotAttention(nn.Module):
    """Iterative slot attention (Locatello et al. 2020, Algorithm 1), symmetric in the slots.

    Args:
        input_dim: width ``C`` of the input tokens.
        slot_dim: width ``D`` of a slot.
        iterations: refinement rounds.
        eps: added to the attention before the weighted mean, so no slot divides by zero.
    """

    def __init__(self, input_dim: int, slot_dim: int, iterations: int, eps: float = 1e-8) -> None:
        super().__init__()
        self.iterations, self.eps, self.scale = iterations, eps, slot_dim**-0.5
        self.norm_inputs = nn.LayerNorm(input_dim)
        self.to_kv = nn.Linear(input_dim, 2 * slot_dim, bias=False)
        self.norm_slots = nn.LayerNorm(slot_dim)
        self.to_q = nn.Linear(slot_dim, slot_dim, bias=False)
        self.gru = nn.GRUCell(slot_dim, slot_dim)
        self.norm_mlp = nn.LayerNorm(slot_dim)
        self.mlp = nn.Sequential(nn.Linear(slot_dim, 2 * slot_dim), nn.ReLU(), nn.Linear(2 * slot_dim, slot_dim))

    def forward(self, inputs: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Refine ``slots: (B, K, D)`` on ``inputs: (B, N, C)``.

        Returns:
            ``slots (B, K, D)`` and the last iteration's attention ``(B, K, N)``: each token's softmax
            over the slots (it sums to 1 over ``K``).
        """
        b, k, d = slots.shape
        key, value = self.to_kv(self.norm_inputs(inputs)).chunk(2, dim=-1)  # (B, N, D) each
        key = key * self.scale
        for _ in range(self.iterations):
            query = self.to_q(self.norm_slots(slots))
            attention = torch.bmm(query, key.mT).softmax(dim=1)  # (B, K, N): slots compete for each token
            weights = attention + self.eps
            updates = torch.bmm(weights / weights.sum(-1, keepdim=True), value)  # weighted mean per slot
            slots = self.gru(updates.reshape(b * k, d), slots.reshape(b * k, d)).view(b, k, d)
            slots = slots + self.mlp(self.norm_mlp(slots))
        return slots, attention


class SlotAttentionEncoder(EntityEncoder):
    """Slot Attention autoencoder: ``(B, V, 3, H, W)`` images → ``V × K`` slot entities (module docstring)."""

    kind = "slot"
    Config = SlotAttentionConfig

    def __init__(self, config: SlotAttentionConfig) -> None:
        super().__init__(config, config.slot_dim + 3)
        c, d, k = config.width, config.slot_dim, config.entities
        halvings = int(math.log2(config.image_size // GRID_SIZE))
        layers: list[nn.Module] = [nn.Conv2d(3, c, 5, stride=2, padding=2), nn.ReLU()]
        for _ in range(halvings - 1):
            layers += [nn.Conv2d(c, c, 3, stride=2, padding=1), nn.ReLU()]
        self.cnn = nn.Sequential(*layers, nn.Conv2d(c, c, 3, padding=1), nn.ReLU())
        self.encoder_position = nn.Linear(4, c)
        self.token_mlp = nn.Sequential(nn.LayerNorm(c), nn.Linear(c, c), nn.ReLU(), nn.Linear(c, c))
        self.slot_attention = SlotAttention(c, d, config.iterations)

        bound = math.sqrt(6 / (1 + d))  # Xavier-uniform, as in the paper
        self.slot_mu = nn.Parameter(torch.empty(d).uniform_(-bound, bound))
        self.slot_log_sigma = nn.Parameter(torch.zeros(d))
        self.register_buffer("eval_noise", torch.randn(k, d))

        self.decoder_position = nn.Linear(4, d)
        upsamplings = int(math.log2(config.image_size // config.decoder_size))
        widths = [d] + [c] * (upsamplings - 1) + [4]  # the last transposed conv writes RGB + alpha logit
        decoder: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            decoder += [nn.ConvTranspose2d(a, b, 4, stride=2, padding=1)] + ([nn.ReLU()] if i < upsamplings - 1 else [])
        self.decoder = nn.Sequential(*decoder)

        self.register_buffer("grid_position", _position_grid(GRID_SIZE), persistent=False)
        self.register_buffer("grid_xy", _coordinates(GRID_SIZE), persistent=False)
        self.register_buffer("decoder_grid_position", _position_grid(config.decoder_size), persistent=False)
        self.register_buffer("pixel_xy", _coordinates(config.image_size), persistent=False)

    def initial_slots(self, n: int) -> torch.Tensor:
        """``(n, K, D)`` starting slots: a fresh Gaussian draw in training mode, the fixed ``eval_noise`` in eval."""
        noise = self.eval_noise.expand(n, -1, -1)
        if self.training:
            noise = torch.randn(noise.shape, device=noise.device, dtype=noise.dtype)
        return self.slot_mu + self.slot_log_sigma.exp() * noise

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        """``images: (B, V, 3, H, W)`` → input tokens ``(B * V, 16², width)`` of the feature grid."""
        x = images.flatten(0, 1).to(self.slot_mu.dtype).contiguous(memory_format=torch.channels_last)
        x = self.cnn(x).permute(0, 2, 3, 1).flatten(1, 2)  # channels-last: (B·V, h·w, C) is free
        return self.token_mlp(x + self.encoder_position(self.grid_position))

    def slots(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``images: (B, V, 3, H, W)`` → ``slots (B, V, K, D)`` and last attention ``(B, V, K, 16²)``."""
        b, v = images.shape[:2]
        slots, attention = self.slot_attention(self.tokens(images), self.initial_slots(b * v))
        return slots.unflatten(0, (b, v)), attention.unflatten(0, (b, v))

    def decode(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``slots: (B, V, K, D)`` → ``recon (B, V, 3, H, W)`` in ``[0, 1]`` and ``alpha (B, V, K, H, W)``."""
        b, v, k, _ = slots.shape
        s = self.config.decoder_size
        position = rearrange(self.decoder_position(self.decoder_grid_position), "(h w) d -> h w d", h=s)
        x = slots.flatten(0, 2)[:, None, None, :] + position  # (B·V·K, s, s, D), i.e. a channels-last batch
        x = self.decoder(x.permute(0, 3, 1, 2))  # (B·V·K, 4, H, W)
        x = rearrange(x, "(b v k) c h w -> b v k h w c", b=b, v=v)
        alpha = x[..., 3].softmax(dim=2)
        recon = torch.einsum("bvkhw,bvkhwc->bvchw", alpha, torch.sigmoid(x[..., :3]))
        return recon, alpha

    def forward(self, images: torch.Tensor) -> EncoderOutput:
        """Encode and decode ``images: (B, V, 3, H, W)`` in ``[0, 1]``; the loss is the reconstruction MSE."""
        check_images(images, self.config.views, self.config.image_size)
        slots, attention = self.slots(images)
        recon, alpha = self.decode(slots)
        moments = _moments(alpha.flatten(-2), self.pixel_xy)  # (B, V, K, 3): x, y, mass
        mse = F.mse_loss(recon, images.to(recon.dtype))
        entities = self.attach_views(torch.cat([slots, _moments(attention, self.grid_xy)], dim=-1))
        return EncoderOutput(
            entities=entities,
            mask=self.all_present(entities),
            recon=recon,
            alpha=alpha,
            positions=moments[..., :2],
            losses={"loss": mse, "recon": mse},
        )

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``images: (B, V, 3, H, W)`` → ``(entities (B, V * K, D), mask (B, V * K))`` without decoding.

        Centroid and mass come from the last slot-attention map on the feature grid, not from alpha.
        """
        check_images(images, self.config.views, self.config.image_size)
        slots, attention = self.slots(images)
        entities = self.attach_views(torch.cat([slots, _moments(attention, self.grid_xy)], dim=-1))
        return entities, self.all_present(entities)


register_builder("slot_encoder")(SlotAttentionEncoder.from_fields)
