"""Object-centric encoders: camera images → entity sets (Slot Attention, Deep-Latent-Particles style)."""

from ecrl.encoders.base import EncoderOutput, EntityEncoder, check_images

__all__ = ["EncoderOutput", "EntityEncoder", "check_images"]
