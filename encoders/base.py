"""The interface every object-centric encoder implements: camera images → a set of entities.

An encoder reads ``images: (B, V, 3, H, W)`` floats in ``[0, 1]`` from ``V`` cameras and returns
entities ``(B, V * K, D)`` with a mask ``(B, V * K)``: ``K`` entities (slots or particles) per view,
each a row of features, so that policies and planners consume them exactly like state entities
(:mod:`ecrl.entities`). A learned embedding of the camera (one vector of width ``view_dim`` per
view index, never per entity slot) is appended to the features of that view's entities
(:meth:`EntityEncoder.attach_views`), so a downstream model can tell the views apart while the
entities of one view stay exchangeable.

Training goes through :meth:`EntityEncoder.forward`, which also decodes: it returns the
reconstruction, a soft decomposition of each image into its ``K`` entities (one alpha map per
entity, and the background where the encoder has one), image-plane positions of the entities, and
the loss terms. :meth:`EntityEncoder.encode` is the fast path (no decoder) used by policies and
for throughput.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ecrl.checkpoint import config_from

__all__ = [
    "IMAGE_SIZES",
    "EncoderOutput",
    "EntityEncoder",
    "check_config",
    "check_images",
    "frames_to_images",
    "pixel_centres",
]

IMAGE_SIZES = (32, 64, 128)
"""Image sides (pixels) the encoders' CNNs are built for."""


@dataclass
class EncoderOutput:
    """What :meth:`EntityEncoder.forward` returns for a batch of ``B`` samples of ``V`` views.

    Attributes:
        entities: ``(B, V * K, D)`` entity rows (view-major: view 0's ``K`` entities first).
        mask: ``(B, V * K)`` bool, True for entities that are present.
        recon: ``(B, V, 3, H, W)`` reconstruction in ``[0, 1]``.
        alpha: ``(B, V, K, H, W)`` how much of each pixel entity ``k`` explains (non-negative; with
            the background, if the encoder has one, it sums to 1 over entities at every pixel).
        positions: ``(B, V, K, 2)`` image-plane ``(x, y)`` of each entity in ``[-1, 1]`` (x to the
            right, y down): a particle's keypoint, or the centroid of a slot's alpha map.
        losses: scalar loss terms; ``losses["loss"]`` is the total that training minimises.
    """

    entities: torch.Tensor
    mask: torch.Tensor
    recon: torch.Tensor
    alpha: torch.Tensor
    positions: torch.Tensor
    losses: dict[str, torch.Tensor]


def pixel_centres(size: int, like: torch.Tensor | None = None) -> torch.Tensor:
    """``(size,)`` centres of ``size`` equal cells spanning ``[-1, 1]`` (pixel or grid-cell coordinates),
    on ``like``'s device and dtype (default: float32 on the CPU)."""
    device, dtype = (like.device, like.dtype) if like is not None else (None, torch.float32)
    return torch.linspace(-1 + 1 / size, 1 - 1 / size, size, device=device, dtype=dtype)


def frames_to_images(frames: torch.Tensor) -> torch.Tensor:
    """``(B, V, P, P, 3)`` uint8 camera frames → ``(B, V, 3, P, P)`` floats in ``[0, 1]`` (what encoders read)."""
    return frames.permute(0, 1, 4, 2, 3).float().div(255)


def check_config(config: Any, counts: tuple[str, ...] = ()) -> None:
    """Raise ValueError unless the fields every encoder config has are valid (``views``, ``image_size``,
    ``entities`` and the extra ``counts`` integers >= 1, ``view_dim`` >= 0, ``image_size`` in :data:`IMAGE_SIZES`)."""
    for name in ("views", "image_size", "entities", *counts, "view_dim"):
        value, least = getattr(config, name), 0 if name == "view_dim" else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    if config.image_size not in IMAGE_SIZES:
        raise ValueError(f"image_size must be one of {IMAGE_SIZES}, got {config.image_size!r}")


def check_images(images: torch.Tensor, views: int, size: int) -> None:
    """Raise ValueError unless ``images`` is ``(B, views, 3, size, size)`` floating point."""
    if not isinstance(images, torch.Tensor) or not images.is_floating_point():
        raise ValueError(
            f"images must be a floating-point tensor in [0, 1], got {type(images).__name__} "
            f"{getattr(images, 'dtype', '')}"
        )
    if images.ndim != 5 or tuple(images.shape[1:]) != (views, 3, size, size):
        raise ValueError(f"images: expected shape (B, {views}, 3, {size}, {size}), got {tuple(images.shape)}")


class EntityEncoder(nn.Module):
    """Base class of object-centric encoders (see the module docstring).

    Subclasses set ``kind`` (the name ``ecrl-train-encoder --kind`` uses) and ``Config`` (a
    dataclass of JSON-able fields, with at least ``views``, ``image_size``, ``entities`` (the
    number ``K`` of entities per view) and ``view_dim``), call ``super().__init__(config,
    feature_dim)`` with the width of their per-entity features, and implement :meth:`forward` and
    :meth:`encode`; both end with :meth:`attach_views`. Their :meth:`from_fields` is registered as a
    model builder (:func:`ecrl.checkpoint.register_builder`) under the name
    :data:`ecrl.encoders.io.ENCODER_KINDS` gives their ``kind``.
    """

    kind: ClassVar[str]
    Config: ClassVar[type]

    @classmethod
    def from_fields(cls, **fields: Any) -> EntityEncoder:
        """A freshly initialised encoder whose config has ``fields`` (the others default)."""
        return cls(config_from(cls.Config, fields, f"{cls.kind} encoders"))

    def __init__(self, config: Any, feature_dim: int) -> None:
        super().__init__()
        self.config = config
        self.feature_dim = int(feature_dim)
        self.view_embedding = nn.Parameter(torch.randn(config.views, config.view_dim) * 0.5)

    @property
    def entity_dim(self) -> int:
        """Width ``D`` of an entity row: the per-entity features plus the view embedding."""
        return self.feature_dim + self.config.view_dim

    def attach_views(self, features: torch.Tensor) -> torch.Tensor:
        """``(B, V, K, F)`` per-view entity features → ``(B, V * K, F + view_dim)`` rows."""
        b, v, k, _ = features.shape
        views = self.view_embedding[None, :, None, :].expand(b, v, k, -1)
        return torch.cat([features, views.to(features.dtype)], dim=-1).flatten(1, 2)

    @property
    def uses_agent(self) -> bool:
        """Whether :meth:`forward` takes the pusher's image positions (``agent=(B, V, 2)``) as a training
        signal; encoding never does. False unless the encoder has an agent particle."""
        return False

    @property
    def uses_objects(self) -> bool:
        """Whether :meth:`forward` takes the objects' image positions (``objects=(B, V, J, 2)``) as a training
        signal; encoding never does. False unless the encoder is trained with an object loss."""
        return False

    @staticmethod
    def all_present(entities: torch.Tensor) -> torch.Tensor:
        """``(B, E)`` all-True mask of ``entities (B, E, D)``: for encoders whose every entity is present."""
        return torch.ones(entities.shape[:2], dtype=torch.bool, device=entities.device)

    def config_dict(self) -> dict[str, Any]:
        return asdict(self.config)

    def schedule(self, step: int) -> None:
        """Set loss weights that change during training for gradient step ``step`` (none by default)."""

    def forward(self, images: torch.Tensor) -> EncoderOutput:  # pragma: no cover - interface
        raise NotImplementedError

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover - interface
        """``(entities (B, V * K, D), mask (B, V * K))`` without decoding."""
        raise NotImplementedError
