"""The configuration of :class:`~ecrl.encoders.particles.ParticleEncoder`: its constants and :class:`ParticleConfig`."""

from __future__ import annotations

from dataclasses import dataclass

from ecrl.encoders.base import check_config

__all__ = ["ParticleConfig"]

PRIOR_CHANNELS = 8
"""Channels of the prior's fixed random convolution."""
PRIOR_TEMPERATURE = 0.05
"""Spatial-softmax temperature of the prior, on deviation energies normalised to at most 1 per image."""
DEPTH_TEMPERATURE = 0.25
"""Compositing weight ``exp(-depth / DEPTH_TEMPERATURE)``: a depth 1 closer weighs e⁴ more."""
SALIENCY_GAIN = 100.0
"""Weight of the saliency (at most 1) in the posterior heatmap logits: sharp enough that a heatmap
picks one salient thing rather than averaging several."""
SUPPRESSION = 100.0
"""Logit penalty at an earlier keypoint in later heatmaps (a Gaussian bump), as large as the saliency."""
SUPPRESSION_PX = 4.0
"""Std in pixels of that bump (see :meth:`ParticleEncoder._keypoints`). A narrower one (1.5 px, with heatmaps
at half the resolution) did not separate touching things (``results/encoders/ablation``)."""
COLOUR_DETAIL = 0.5
"""With ``particle_colour``: bound (in logits) of the per-channel detail added to a particle's shaded colour
(anti-aliased edges, highlights)."""
POSITION_SIGMA_INIT = 0.02
"""Initial posterior std of the keypoints (about half a pixel at 64 px), far below ``prior_sigma``."""
LOGVAR_INIT = -4.0
"""Initial posterior log-variance of scale, depth and visual latents."""
SCALE_SIGMA = 0.5
"""Prior std of a particle's scale logit (its mean is the glimpse's share of the image)."""
BACKGROUND_STRIDE = 8
"""The background latent decodes to a ``H / 8 × W / 8`` correction of the canvas."""
CANVAS_GAIN = 8.0
"""The canvas logits are ``CANVAS_GAIN × parameter``, so that Adam's steps move them as fast as weights."""
AGENT_SIGMA = 0.5
"""With ``agent_weight``: std, in heatmap cells, of the Gaussian around the pusher's image position that
the agent heatmap's softmax is fitted to."""
OBJECT_MIN_PIXELS = 4
"""With ``object_weight``: an object is supervised in a view only where its segmentation covers at least this many pixels."""
LOGVAR_RANGE = (-12.0, 6.0)


@dataclass
class ParticleConfig:
    """Size and loss weights of a :class:`ParticleEncoder` (JSON-able)."""

    views: int = 2
    """Cameras ``V`` per sample."""
    image_size: int = 64
    """Side of the square input images in pixels: 32, 64 or 128."""
    entities: int = 8
    """Posterior particles ``K`` per view."""
    prior_patch: int = 8
    """Side in pixels of the prior's patches; each proposes one keypoint."""
    prior_keypoints: int = 16
    """Prior keypoints kept per image: the patches with the most concentrated spatial softmax."""
    width: int = 32
    """Channels of the CNNs."""
    feature_dim: int = 8
    """Visual latent per particle."""
    glimpse: int = 16
    """Side in pixels of the crop a particle is encoded from and of the glimpse it decodes to (multiple of 4)."""
    view_dim: int = 4
    """Width of the learned per-view embedding appended to every entity row."""
    background_dim: int = 4
    """Global latent of the background (per image)."""
    beta_kl: float = 0.2
    """Weight of the KL (nats per image) against the summed squared error of the image."""
    beta_glimpse: float = 1.0
    """Weight of the glimpse loss (each particle's glimpse alone against its crop, see
    :func:`~ecrl.encoders.glimpses.glimpse_loss`) against the reconstruction MSE."""
    prior_sigma: float = 0.1
    """Std of the prior keypoint Gaussians, in the ``[-1, 1]`` image coordinates."""
    foreground_weight: float = 0.0
    """Extra weight of pixels the background does not explain in the reconstruction loss: pixel weight
    ``1 + foreground_weight × (squared difference between image and background, summed over colour)``,
    normalised to mean 1. Objects of a few pixels barely move a plain MSE; this makes leaving them to
    the background cost (0: plain MSE)."""
    glimpse_fade_start: int = 0
    """Training step at which ``beta_glimpse`` starts to fade linearly to 0 (see ``glimpse_fade_end``)."""
    glimpse_fade_end: int = 0
    """Training step from which the glimpse loss is off (0: never fade it). The glimpse loss asks every particle to draw its whole crop, neighbours included, which merges
    touching things; once the glimpse decoders draw, fading it out lets particles specialise."""
    particle_colour: bool = False
    """Each particle draws one colour, shaded: its glimpse's RGB logits are a per-particle colour plus a
    per-pixel brightness shared by the three channels (plus at most :data:`COLOUR_DETAIL` of free
    per-channel detail). A particle cannot then draw a red object and the grey pusher beside it equally well, so
    the reconstruction prefers another particle for the pusher (off: free RGB per pixel)."""
    agent_weight: float = 0.0
    """Weight of the agent loss (0: off). Above 0, particle 0 of every view is the agent's: its keypoint
    is read from its own heatmap alone (no saliency added; the softmax mean within 3 × 3 cells of its
    peak), and in training ``agent_weight`` times :func:`~ecrl.encoders.glimpses.agent_loss` is added to the
    loss: the heatmap's softmax is fitted to a Gaussian on the pusher's image position. That position
    is projected from the pusher's recorded position with the camera's calibration
    (:attr:`~ecrl.encoders.data.Frames.agent_points`): proprioception a robot has for free. It is a
    training signal only; encoding reads images alone. The other particles' keypoints are suppressed
    around the pusher (they come after it), so that the particle of an object next to the pusher is
    less often also the pusher's (see ``results/encoders/agent``)."""

    object_weight: float = 0.0
    """Weight of the object loss (0: off). Above 0, training also passes the objects' image positions
    (:meth:`~ecrl.encoders.data.Frames.object_batch`: each object's recorded centre projected with the camera's
    calibration, where the object shows at least :data:`OBJECT_MIN_PIXELS` pixels) and adds ``object_weight``
    times :func:`~ecrl.encoders.glimpses.object_loss`: each object claims the nearest particle not yet claimed
    (not the agent particle), whose heatmap is fitted to a Gaussian on the object, as the agent particle's is,
    and whose refined keypoint pays its distance to the object in pixels (through the glimpse offset only).
    Unlike ``agent_weight`` this is a label a robot does not have: the simulator's object positions
    supervise training. Encoding still reads images alone."""

    def __post_init__(self) -> None:
        check_config(self, ("prior_keypoints", "width", "feature_dim", "background_dim"))
        if self.prior_patch < 2 or self.image_size % self.prior_patch:
            raise ValueError(
                f"prior_patch ({self.prior_patch}) must be at least 2 and divide image_size ({self.image_size})"
            )
        patches = (self.image_size // self.prior_patch) ** 2
        if self.prior_keypoints > patches:
            raise ValueError(f"prior_keypoints ({self.prior_keypoints}) exceeds the {patches} prior patches")
        if self.glimpse % 4 or not 4 <= self.glimpse <= self.image_size:
            raise ValueError(
                f"glimpse must be a multiple of 4 in [4, image_size={self.image_size}], got {self.glimpse}"
            )
        for name in ("beta_kl", "beta_glimpse", "foreground_weight", "agent_weight", "object_weight"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.prior_sigma > 0:
            raise ValueError(f"prior_sigma must be > 0, got {self.prior_sigma}")
        for name in ("glimpse_fade_start", "glimpse_fade_end"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be a step count >= 0, got {getattr(self, name)!r}")
        if self.glimpse_fade_end and self.glimpse_fade_end < self.glimpse_fade_start:
            raise ValueError(
                f"glimpse_fade_end ({self.glimpse_fade_end}) must not come before glimpse_fade_start "
                f"({self.glimpse_fade_start}); 0 never fades"
            )
