"""A Deep-Latent-Particles encoder (Daniel & Tamar 2022; DLPv2 as used by ECRL / EC-Diffuser).

Each camera image becomes ``K`` particles. A particle is a keypoint ``mu`` (x, y in ``[-1, 1]``,
x to the right, y down) with a scale (its extent as a fraction of the image side), a depth (which
particle is in front where they overlap), a transparency and a small visual latent. The model is a
VAE whose latent is that set of particles:

- **Prior.** A fixed (never trained) random convolution reads the image; each ``prior_patch`` square
  patch turns the squared deviation of those features from the patch mean into a spatial softmax,
  whose expectation is one proposal per patch; the ``prior_keypoints`` proposals with the most
  concentrated softmax (least variance) are kept. Uniform patches (table, floor) spread their
  softmax and drop out, small distinct things (objects, pusher, targets) concentrate it. The prior is
  a fixed function of the image, as in DLPv2, where the proposals are detached and the prior CNN
  never receives a gradient.
- **Posterior.** A CNN (with coordinate channels) turns the image into ``K`` heatmaps at a quarter of
  the resolution; their spatial softmax gives coarse keypoints. The heatmaps are read one after the
  other, each with the image's saliency (the prior's deviation energy) added and the places of the
  earlier keypoints suppressed (:meth:`ParticleEncoder._keypoints`): a soft non-maximum suppression
  that puts a fresh encoder's keypoints on distinct salient things, where plain heatmaps would all
  average to the image centre and never get a reconstruction gradient. Around each keypoint a
  ``glimpse × glimpse`` pixel crop (``F.affine_grid`` / ``F.grid_sample``) is encoded into an offset
  that refines the position (at most half a glimpse; the result is clamped to the image) with its
  log-variance, and Gaussian scale, depth and visual latents (sampled in training, means in eval),
  plus a deterministic transparency (sigmoid). The crop is taken at the detached coarse keypoint,
  so positions learn through the decoder's placement and the KL, not through the crop.
- **Decoder.** Each particle's visual latent decodes to an RGBA glimpse, placed into the image at
  ``mu`` with its scale (inverse affine grid sample). Particles are composited permutation-invariantly:
  the union of their opacities ``1 - Π (1 - a_k)`` covers the pixel, shared among the particles in
  proportion to ``a_k · exp(-depth_k / DEPTH_TEMPERATURE)`` (a soft z-buffer: smaller depth is in
  front); the rest shows the background. The background is a learned canvas per view (the cameras are
  fixed) modulated by a decoded low-resolution global latent, too coarse to draw small objects, so
  those have to be explained by particles.
- **Loss.** MSE reconstruction, plus ``beta_glimpse`` times a glimpse loss (each particle's glimpse
  alone against its crop, DLP's warm-up loss kept on: without it the particles fade out before their
  decoder has learnt to draw anything), plus ``beta_kl`` times the KL per image over the number of
  pixel values: a Chamfer-KL between posterior and prior keypoints (each posterior Gaussian to its
  nearest prior one and each prior one to its nearest posterior), and Gaussian KLs of scale, depth,
  visual latents and the background latent to their priors.

- **Agent particle** (``agent_weight > 0``, off by default). Particle 0 of every view is the pusher's:
  its coarse keypoint is read from its own heatmap (no saliency, the mean near the heatmap's peak),
  which training fits to a Gaussian on the pusher's image position. That position is the pusher's
  recorded (proprioceptive) position projected with the camera's calibration
  (:func:`ecrl.envs.scene.project`), so the signal costs no labelling; encoding still reads images
  alone. The other keypoints come after it and are suppressed around it, so the particle of an
  object that touches the pusher is less often also the pusher's (the merge that holds a plain
  particle encoder's FG-ARI near 0.78 where things touch; measured in ``results/encoders/agent``).
- **Object loss** (``object_weight > 0``, off by default). Training also passes the objects' projected
  positions, and each object shown claims the nearest particle no earlier object claimed: its heatmap is fitted
  to a Gaussian on the object and its refined keypoint pays the distance (:func:`~ecrl.encoders.glimpses.object_loss`).
  These are the simulator's labels, which a robot does not have; encoding still reads images alone
  (``results/encoders/objects``).

Entity rows (before the view embedding): ``mu`` (2), scale (2), depth (1), transparency (1), visual
latent mean (``feature_dim``): see :meth:`ParticleEncoder.fields`. Every particle is reported present (mask
all True); a particle that explains nothing says so with its transparency, which is in the row.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ecrl.checkpoint import register_builder
from ecrl.encoders.base import EncoderOutput, EntityEncoder, check_images, pixel_centres
from ecrl.encoders.glimpses import (
    agent_loss,
    chamfer_kl,
    composite,
    crop,
    glimpse_loss,
    object_loss,
    reconstruction_loss,
)
from ecrl.encoders.keypoints import coordinate_channels, gaussian_kl, peak_mean, sample_gaussian, spatial_softmax
from ecrl.encoders.particle_config import (
    BACKGROUND_STRIDE,
    CANVAS_GAIN,
    COLOUR_DETAIL,
    LOGVAR_INIT,
    LOGVAR_RANGE,
    POSITION_SIGMA_INIT,
    PRIOR_CHANNELS,
    PRIOR_TEMPERATURE,
    SALIENCY_GAIN,
    SCALE_SIGMA,
    SUPPRESSION,
    SUPPRESSION_PX,
    ParticleConfig,
)

__all__ = ["PARTICLE_FIELDS", "ParticleConfig", "ParticleEncoder", "spatial_softmax"]

PARTICLE_FIELDS: dict[str, slice] = {
    "position": slice(0, 2),
    "scale": slice(2, 4),
    "depth": slice(4, 5),
    "transparency": slice(5, 6),
}
"""The first columns of a particle's entity row; the visual latent and the view embedding follow
(:meth:`ParticleEncoder.fields` has them all)."""


def _conv(cin: int, cout: int, stride: int = 1) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.SiLU())


class ParticleEncoder(EntityEncoder):
    """Camera images → ``K`` particles per view (see the module docstring).

    Example:
        >>> enc = ParticleEncoder(ParticleConfig(views=2, image_size=64))
        >>> entities, mask = enc.encode(torch.rand(5, 2, 3, 64, 64))  # (5, 16, 18), (5, 16)
    """

    kind = "particles"
    Config = ParticleConfig

    def __init__(self, config: ParticleConfig) -> None:
        super().__init__(config, 6 + config.feature_dim)
        c, w, g, s = config, config.width, config.glimpse, config.image_size
        self.glimpse_share = g / s
        """A glimpse's side as a fraction of the image side: the scale of the crops particles are encoded from."""
        self.scale_logit = math.log(self.glimpse_share / (1 - self.glimpse_share + 1e-6))
        """Mean of the prior of the scale logits: a particle as large as a glimpse."""
        # Prior: a fixed random convolution (buffers: neither trained nor seen by optimisers).
        gen = torch.Generator().manual_seed(0)
        self.register_buffer("prior_filters", torch.randn(PRIOR_CHANNELS, 3, 3, 3, generator=gen) / 3.0)
        # Posterior keypoints: two stride-2 convolutions to a quarter of the resolution, then context.
        self.trunk = nn.Sequential(_conv(5, w, 2), _conv(w, w, 2), _conv(w, w), _conv(w, w))
        self.heatmaps = nn.Conv2d(w, c.entities, 1)
        nn.init.zeros_(self.heatmaps.weight)  # a fresh encoder's keypoints are the saliency's peaks
        nn.init.zeros_(self.heatmaps.bias)
        # Glimpse encoder: offset (2 + 2), scale (2 + 2), depth (1 + 1), transparency (1), features (2 F).
        self.glimpse_encoder = nn.Sequential(
            _conv(3, w // 2, 2),
            _conv(w // 2, w, 2),
            nn.Flatten(),
            nn.Linear(w * (g // 4) ** 2, 2 * w),
            nn.SiLU(),
            nn.Linear(2 * w, 11 + 2 * c.feature_dim),
        )
        # Glimpse decoder: features → RGBA glimpse (RGB detail, alpha, brightness with particle_colour).
        self.glimpse_decoder = nn.Sequential(
            nn.Linear(c.feature_dim, w * (g // 4) ** 2),
            nn.SiLU(),
            nn.Unflatten(-1, (w, g // 4, g // 4)),
            nn.Upsample(scale_factor=2),
            _conv(w, w // 2),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(w // 2, 5 if c.particle_colour else 4, 3, 1, 1),
        )
        if c.particle_colour:
            self.glimpse_colour = nn.Linear(c.feature_dim, 3)
        with torch.no_grad():
            # Latents start nearly certain (noise that drowns their signal would teach the decoders
            # to ignore them), scales at their prior mean; particles start faint, so that the
            # background explains the image first.
            head = self.glimpse_encoder[-1].bias
            head[2:4].fill_(2 * math.log(POSITION_SIGMA_INIT))
            head[4:6].fill_(self.scale_logit)
            head[[6, 7, 9]] = LOGVAR_INIT  # scale, depth
            head[-c.feature_dim :] = LOGVAR_INIT
            self.glimpse_decoder[-1].bias[3].fill_(-2.0)
        # Background: per-view canvas + low-resolution global latent.
        self.canvas = nn.Parameter(torch.zeros(c.views, 3, s, s))
        self.background_encoder = nn.Linear(w, 2 * c.background_dim)
        low = s // BACKGROUND_STRIDE
        self.background_decoder = nn.Sequential(
            nn.Linear(c.background_dim, 3 * low * low), nn.Unflatten(-1, (3, low, low))
        )
        nn.init.zeros_(self.background_decoder[0].weight)
        nn.init.zeros_(self.background_decoder[0].bias)
        self.register_buffer("coords", coordinate_channels(s), persistent=False)
        self.cells = s // c.prior_patch
        self.schedule(0)

    def schedule(self, step: int) -> None:
        """Set the loss weights of gradient step ``step`` (training calls this every step): ``glimpse_weight``,
        ``beta_glimpse`` faded out over the glimpse-fade steps."""
        c = self.config
        fade = _ramp(step, c.glimpse_fade_start, c.glimpse_fade_end) if c.glimpse_fade_end else 0.0
        self.glimpse_weight = c.beta_glimpse * (1 - fade)

    @property
    def uses_agent(self) -> bool:
        """Whether training should pass the pusher's image positions (``forward(images, agent=…)``)."""
        return self.config.agent_weight > 0

    @property
    def uses_objects(self) -> bool:
        """Whether training should pass the objects' image positions (``forward(images, objects=…)``)."""
        return self.config.object_weight > 0

    def fields(self) -> dict[str, slice]:
        """Columns of an entity row: :data:`PARTICLE_FIELDS`, then ``features`` and ``view`` (embedding)."""
        f = self.config.feature_dim
        return PARTICLE_FIELDS | {"features": slice(6, 6 + f), "view": slice(6 + f, self.entity_dim)}

    # ------------------------------------------------------------------ prior
    def _patch_energy(self, images: torch.Tensor) -> torch.Tensor:
        """``(N, P, p, p)``: per patch, the squared deviation of the fixed features from the patch mean.

        Normalised to at most 1 per image; patches are row-major (``P = (H / p) × (W / p)``).
        """
        p = self.config.prior_patch
        feats = F.conv2d(F.pad(images, (1, 1, 1, 1), mode="replicate"), self.prior_filters)
        patches = rearrange(feats, "n c (gy py) (gx px) -> n (gy gx) c py px", py=p, px=p)
        energy = (patches - patches.mean((-2, -1), keepdim=True)).square().sum(2)
        return energy / energy.flatten(1).amax(1).clamp_min(1e-8)[:, None, None, None]

    @torch.no_grad()
    def prior_keypoints(self, images: torch.Tensor) -> torch.Tensor:
        """Prior keypoints ``(N, L, 2)`` of ``images: (N, 3, H, W)`` (no gradient)."""
        local, var = spatial_softmax(self._patch_energy(images) / PRIOR_TEMPERATURE)  # within-patch coordinates
        cells = images.shape[-1] // self.config.prior_patch
        centres = pixel_centres(cells, images)
        grid = torch.stack(torch.meshgrid(centres, centres, indexing="xy"), -1).reshape(-1, 2)  # (P, 2) x, y
        proposals = grid + local / cells
        keep = var.sum(-1).topk(self.config.prior_keypoints, dim=1, largest=False).indices
        return proposals.gather(1, keep[..., None].expand(-1, -1, 2))

    # ------------------------------------------------------------------ posterior
    def _posterior(self, images: torch.Tensor, b: int) -> dict[str, torch.Tensor]:
        """Posterior statistics of ``images: (N, 3, H, W)`` (``N = b V``); every entry ``(N, K, …)``."""
        c, n = self.config, images.shape[0]
        trunk = self.trunk(torch.cat([images, self.coords.expand(n, -1, -1, -1)], 1))
        logits = self.heatmaps(trunk)
        anchor, heat = self._keypoints(logits, images)  # (N, K, 2), (N, K, h, w)
        share = torch.full_like(anchor, self.glimpse_share)
        pooled = trunk.mean((-2, -1))
        crops = crop(images, anchor.detach(), share, c.glimpse).flatten(0, 1)  # (N K, 3, g, g)
        stats = rearrange(self.glimpse_encoder(crops), "(n k) d -> n k d", n=n)
        offset, offset_logvar, scale, scale_logvar, depth, depth_logvar, transparency, features, features_logvar = (
            stats.split([2, 2, 2, 2, 1, 1, 1, c.feature_dim, c.feature_dim], -1)
        )
        refine = self.glimpse_share * torch.tanh(offset)
        mu = (anchor + refine).clamp(-1.0, 1.0)
        clamp = lambda t: t.clamp(*LOGVAR_RANGE)  # noqa: E731
        return {
            "mu": mu,
            "mu_logvar": clamp(offset_logvar),
            "scale": scale,
            "scale_logvar": clamp(scale_logvar),
            "depth": depth.squeeze(-1),
            "depth_logvar": clamp(depth_logvar).squeeze(-1),
            "transparency": torch.sigmoid(transparency.squeeze(-1)),
            "features": features,
            "features_logvar": clamp(features_logvar),
            "pooled": pooled,
            "agent_logits": logits[:, 0],
            "heatmaps": heat,
            "mu_refined": (anchor.detach() + refine).clamp(-1.0, 1.0),  # mu with a gradient through the offset only
        }

    def _keypoints(self, logits: torch.Tensor, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Coarse keypoints ``(N, K, 2)`` from heatmap ``logits (N, K, h, w)``, one after the other, and the
        ``(N, K, h, w)`` logits each is the spatial softmax of.

        Heatmap ``k`` adds the saliency of ``images (N, 3, H, W)`` (the prior's deviation energy,
        pooled to the heatmap, times ``SALIENCY_GAIN``) and subtracts a Gaussian bump around every
        earlier keypoint before its spatial softmax. Without this, all heatmaps of a fresh network
        would average to the image centre, and a multi-peaked one to a point between objects; with
        it, a fresh encoder's keypoints sit on distinct salient things (the learned logits start at
        zero) and training moves them from there.
        """
        h, w = logits.shape[-2:]
        energy = rearrange(self._patch_energy(images), "n (gy gx) py px -> n (gy py) (gx px)", gx=self.cells)
        saliency = F.adaptive_avg_pool2d(energy[:, None], (h, w))
        saliency = SALIENCY_GAIN * saliency / saliency.flatten(1).amax(1).clamp_min(1e-8)[:, None, None, None]
        xs, ys = pixel_centres(w, logits), pixel_centres(h, logits)
        width = SUPPRESSION_PX * 2 / self.config.image_size
        taken = torch.zeros_like(saliency[:, 0])  # (N, h, w)
        keypoints, heat = [], []
        for k in range(logits.shape[1]):
            if k == 0 and self.uses_agent:  # the agent's heatmap: learned, from the agent loss
                heat.append(logits[:, :1])
                mean = peak_mean(logits[:, 0])[:, None]
            else:
                heat.append(logits[:, k : k + 1] + saliency - taken[:, None])
                mean, _ = spatial_softmax(heat[-1])
            keypoints.append(mean)
            centre = mean.detach()[:, 0]  # (N, 2)
            bump = torch.exp(
                -0.5
                * ((ys[:, None] - centre[:, 1, None, None]).square() + (xs - centre[:, 0, None, None]).square())
                / width**2
            )
            taken = taken + SUPPRESSION * bump
        return torch.cat(keypoints, 1), torch.cat(heat, 1)

    def _rows(self, post: dict[str, torch.Tensor], b: int) -> torch.Tensor:
        """Entity features ``(B, V, K, 6 + feature_dim)`` from posterior means."""
        rows = torch.cat(
            [
                post["mu"],
                torch.sigmoid(post["scale"]),
                post["depth"][..., None],
                post["transparency"][..., None],
                post["features"],
            ],
            -1,
        )
        return rearrange(rows, "(b v) k d -> b v k d", b=b)

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``images: (B, V, 3, H, W)`` → ``entities (B, V * K, D)``, ``mask (B, V * K)`` (all True), no decoding."""
        c = self.config
        check_images(images, c.views, c.image_size)
        b = images.shape[0]
        post = self._posterior(images.flatten(0, 1), b)
        entities = self.attach_views(self._rows(post, b))
        return entities, self.all_present(entities)

    # ------------------------------------------------------------------ decoder
    def glimpses(self, features: torch.Tensor) -> torch.Tensor:
        """RGBA glimpses ``(N, K, 4, g, g)`` in ``[0, 1]`` of visual latents ``features (N, K, F)``.

        With ``particle_colour`` the RGB logits are the particle's colour (a linear map of its latent)
        plus the decoded per-pixel brightness and ``COLOUR_DETAIL · tanh`` of the decoded per-channel
        detail; otherwise the decoded RGB logits are used as they are.
        """
        flat = features.flatten(0, 1)
        out = self.glimpse_decoder(flat)
        if self.config.particle_colour:
            colour = self.glimpse_colour(flat)[..., None, None]
            rgb = colour + out[:, 4:] + COLOUR_DETAIL * torch.tanh(out[:, :3])
            out = torch.cat([rgb, out[:, 3:4]], 1)
        return torch.sigmoid(out).unflatten(0, features.shape[:2])

    def _background(self, pooled: torch.Tensor, b: int, stochastic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Background ``(B V, 3, H, W)`` and its latent's KL ``(B V,)`` from pooled trunk features ``(B V, width)``."""
        mean, logvar = self.background_encoder(pooled).chunk(2, -1)
        logvar = logvar.clamp(*LOGVAR_RANGE)
        low = self.background_decoder(sample_gaussian(mean, logvar, stochastic))
        size = self.config.image_size
        logits = F.interpolate(low, size=(size, size), mode="bilinear", align_corners=False)
        canvas = (CANVAS_GAIN * self.canvas).repeat(b, 1, 1, 1)  # view-major within each sample
        return torch.sigmoid(canvas + logits), gaussian_kl(mean, logvar, 0.0, 0.0).sum(-1)

    def forward(
        self, images: torch.Tensor, agent: torch.Tensor | None = None, objects: torch.Tensor | None = None
    ) -> EncoderOutput:
        """Encode, decode and score ``images: (B, V, 3, H, W)`` (samples latents in training mode).

        ``agent``: ``(B, V, 2)`` image positions of the pusher (:attr:`~ecrl.encoders.data.Frames.agent_points`),
        used only by the agent loss (``agent_weight``); views where it is outside ``[-1, 1]`` are skipped.
        ``objects``: ``(B, V, J, 2)`` image positions of the objects, NaN where not shown
        (:meth:`~ecrl.encoders.data.Frames.object_batch`), used only by the object loss (``object_weight``).

        ``losses``: ``loss`` (the total), ``recon`` (MSE), ``glimpse`` (:func:`~ecrl.encoders.glimpses.glimpse_loss`),
        ``kl`` (nats per image, the sum of ``kl_keypoints`` (Chamfer-KL), ``kl_features`` and
        ``kl_attributes`` (scale, depth and background latent)), ``agent`` (:func:`~ecrl.encoders.glimpses.agent_loss`, 0 without ``agent``), ``objects``
        (:func:`~ecrl.encoders.glimpses.object_loss`, 0 without ``objects``).
        """
        c = self.config
        check_images(images, c.views, c.image_size)
        b, v = images.shape[:2]
        if agent is not None and (not isinstance(agent, torch.Tensor) or tuple(agent.shape) != (b, v, 2)):
            raise ValueError(
                f"agent: expected a tensor of shape ({b}, {v}, 2) (the pusher's image x, y per view), "
                f"got {tuple(agent.shape) if isinstance(agent, torch.Tensor) else type(agent).__name__}"
            )
        if objects is not None and (
            not isinstance(objects, torch.Tensor)
            or objects.dim() != 4
            or tuple(objects.shape[:2]) != (b, v)
            or objects.shape[-1] != 2
        ):
            raise ValueError(
                f"objects: expected a tensor of shape ({b}, {v}, J, 2) (each object's image x, y per view, NaN where "
                f"not shown), got {tuple(objects.shape) if isinstance(objects, torch.Tensor) else type(objects).__name__}"
            )
        flat = images.flatten(0, 1)
        post = self._posterior(flat, b)
        stochastic = self.training
        mu = sample_gaussian(post["mu"], post["mu_logvar"], stochastic)
        scale = torch.sigmoid(sample_gaussian(post["scale"], post["scale_logvar"], stochastic))
        depth = sample_gaussian(post["depth"], post["depth_logvar"], stochastic)
        features = sample_gaussian(post["features"], post["features_logvar"], stochastic)
        glimpses = self.glimpses(features)
        background, kl_background = self._background(post["pooled"], b, stochastic)
        recon, alpha = composite(glimpses, mu, scale, depth, post["transparency"], background)
        glimpse_term = glimpse_loss(flat, background.detach(), glimpses, mu.detach(), scale.detach())

        prior = self.prior_keypoints(flat)
        kl_keypoints = chamfer_kl(post["mu"], post["mu_logvar"], prior, c.prior_sigma)
        kl_attributes = (
            gaussian_kl(post["scale"], post["scale_logvar"], self.scale_logit, 2 * math.log(SCALE_SIGMA)).sum((1, 2))
            + gaussian_kl(post["depth"], post["depth_logvar"], 0.0, 0.0).sum(1)
            + kl_background
        )
        kl_features = gaussian_kl(post["features"], post["features_logvar"], 0.0, 0.0).sum((1, 2))
        kl = (kl_keypoints + kl_attributes + kl_features).mean()
        recon_loss = reconstruction_loss(recon, flat, background, c.foreground_weight)
        if agent is not None and self.uses_agent:
            agent_term = agent_loss(post["agent_logits"], agent.flatten(0, 1))
        else:
            agent_term = recon_loss.new_zeros(())
        if objects is not None and self.uses_objects:
            object_term = object_loss(
                post["heatmaps"], post["mu_refined"], objects.flatten(0, 1), int(self.uses_agent), c.image_size
            )
        else:
            object_term = recon_loss.new_zeros(())
        losses = {
            "loss": recon_loss
            + self.glimpse_weight * glimpse_term
            + c.agent_weight * agent_term
            + c.object_weight * object_term
            + c.beta_kl * kl / flat[0].numel(),
            "recon": recon_loss,
            "agent": agent_term,
            "objects": object_term,
            "glimpse": glimpse_term,
            "kl": kl,
            "kl_keypoints": kl_keypoints.mean(),
            "kl_features": kl_features.mean(),
            "kl_attributes": kl_attributes.mean(),
        }
        entities = self.attach_views(self._rows(post, b))
        unflat = lambda t: t.unflatten(0, (b, v))  # noqa: E731
        return EncoderOutput(
            entities=entities,
            mask=self.all_present(entities),
            recon=unflat(recon),
            alpha=unflat(alpha),
            positions=unflat(post["mu"]),
            losses=losses,
        )


register_builder("particle_encoder")(ParticleEncoder.from_fields)


def _ramp(step: int, start: int, end: int) -> float:
    """0 before ``start``, 1 from ``end``, linear in between."""
    return min(1.0, max(0.0, (step - start) / max(end - start, 1)))
