"""Object-centric encoders: camera images → entity sets, for policies and planners.

- :class:`~ecrl.encoders.slot_attention.SlotAttentionEncoder` (``kind="slot"``): Slot Attention
  (Locatello et al. 2020) with a spatial-broadcast decoder.
- :class:`~ecrl.encoders.particles.ParticleEncoder` (``kind="particles"``): latent particles in the
  spirit of Deep Latent Particles (Daniel & Tamar 2022; DLPv2).

Both implement :class:`~ecrl.encoders.base.EntityEncoder`: ``encode(images (B, V, 3, H, W))`` →
``entities (B, V * K, D)`` + ``mask``. ``ecrl-train-encoder`` trains them on frames from
``ecrl-collect --pixels``; :func:`load_encoder` reads a checkpoint back; ``ecrl-bench encoders``
scores them (FG-ARI, object-position probe, images/s).
"""

from ecrl.encoders.base import EncoderOutput, EntityEncoder, check_images, frames_to_images
from ecrl.encoders.io import ENCODER_KINDS, build_encoder, encoder_class, load_encoder, save_encoder

__all__ = [
    "ENCODER_KINDS",
    "EncoderOutput",
    "EntityEncoder",
    "build_encoder",
    "check_images",
    "encoder_class",
    "frames_to_images",
    "load_encoder",
    "save_encoder",
]
