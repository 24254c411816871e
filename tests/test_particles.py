"""The Deep-Latent-Particles encoder: shapes, keypoint range, compositing, determinism, errors, learning."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import ecrl.envs  # noqa: F401  (registers the environments)
from ecrl.encoders import particles
from ecrl.encoders.glimpses import agent_loss, composite, object_loss, reconstruction_loss
from ecrl.encoders.particles import PARTICLE_FIELDS, ParticleConfig, ParticleEncoder

SMALL = {"image_size": 32, "glimpse": 8, "prior_keypoints": 8, "width": 16}
"""A 32-pixel encoder small enough for tests."""


@pytest.fixture(scope="module")
def frames() -> torch.Tensor:
    """``(4, 2, 3, 32, 32)``: front and top views of four push-3 scenes, floats in [0, 1]."""
    env = gym.make("ecrl/Push3-v0", width=32, height=32)
    views = []
    for seed in range(4):
        env.reset(seed=seed)
        rendered = env.unwrapped.render_views(("front", "top"))
        views.append(np.stack([rendered["front"], rendered["top"]]))
    env.close()
    return torch.from_numpy(np.stack(views)).permute(0, 1, 4, 2, 3).float() / 255


@pytest.mark.parametrize("views, k", [(2, 8), (1, 3)])
def test_output_shapes(views, k):
    torch.manual_seed(0)
    enc = ParticleEncoder(ParticleConfig(views=views, entities=k))
    images = torch.rand(3, views, 3, 64, 64)
    out = enc(images)
    d = 6 + enc.config.feature_dim + enc.config.view_dim
    assert enc.entity_dim == d
    assert out.entities.shape == (3, views * k, d)
    assert out.mask.shape == (3, views * k) and out.mask.dtype == torch.bool and out.mask.all()
    assert out.recon.shape == images.shape
    assert out.alpha.shape == (3, views, k, 64, 64)
    assert out.positions.shape == (3, views, k, 2)
    assert {"loss", "recon", "kl"} <= out.losses.keys()
    assert all(v.ndim == 0 and torch.isfinite(v) for v in out.losses.values())
    entities, mask = enc.encode(images)
    assert entities.shape == out.entities.shape and mask.shape == out.mask.shape


def test_entity_rows_hold_the_particle_fields(frames):
    torch.manual_seed(0)
    enc = ParticleEncoder(ParticleConfig(**SMALL)).eval()
    out = enc(frames)
    k = enc.config.entities
    rows = out.entities.view(4, 2, k, -1)
    fields = enc.fields()
    assert fields.items() >= PARTICLE_FIELDS.items()
    widths = {name: len(range(enc.entity_dim)[cols]) for name, cols in fields.items()}
    assert widths == {"position": 2, "scale": 2, "depth": 1, "transparency": 1, "features": 8, "view": 4}
    torch.testing.assert_close(rows[..., fields["position"]], out.positions)
    assert rows[..., fields["scale"]].gt(0).all() and rows[..., fields["scale"]].lt(1).all()
    assert rows[..., fields["transparency"]].ge(0).all() and rows[..., fields["transparency"]].le(1).all()
    # The view embedding: the same for every particle of a view.
    view = rows[..., fields["view"]]
    torch.testing.assert_close(view, enc.view_embedding[None, :, None].expand_as(view))


def test_keypoints_lie_in_the_image(frames):
    torch.manual_seed(0)
    enc = ParticleEncoder(ParticleConfig(**SMALL))
    for images in (frames, torch.rand(2, 2, 3, 32, 32), torch.zeros(2, 2, 3, 32, 32)):
        positions = enc(images).positions
        assert positions.abs().le(1).all()
        assert enc.prior_keypoints(images.flatten(0, 1)).abs().le(1).all()


def test_alpha_and_background_partition_every_pixel(frames):
    torch.manual_seed(0)
    alpha = ParticleEncoder(ParticleConfig(**SMALL))(frames).alpha
    assert alpha.ge(0).all() and alpha.sum(2).le(1 + 1e-5).all()
    # Particles and background of one colour composite to exactly that colour: the weights sum to 1.
    n, k, g = 3, 5, 8
    colour = torch.tensor([0.2, 0.5, 0.9])
    glimpses = torch.cat([colour.view(1, 1, 3, 1, 1).expand(n, k, 3, g, g), torch.rand(n, k, 1, g, g)], 2)
    recon, alpha = composite(
        glimpses,
        torch.rand(n, k, 2) * 2 - 1,
        torch.rand(n, k, 2) * 0.5 + 0.1,
        torch.randn(n, k),
        torch.rand(n, k),
        colour.view(1, 3, 1, 1).expand(n, 3, 32, 32),
    )
    torch.testing.assert_close(recon, colour.view(1, 3, 1, 1).expand_as(recon))


def test_nearer_particle_hides_the_one_behind():
    red, blue = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 0.0, 1.0])
    glimpses = torch.stack([torch.cat([c, torch.ones(1)]).view(4, 1, 1).expand(4, 8, 8) for c in (red, blue)])[None]
    mu, scale = torch.zeros(1, 2, 2), torch.full((1, 2, 2), 0.25)
    background = torch.zeros(1, 3, 32, 32)
    for depth, front in ((torch.tensor([[-2.0, 2.0]]), red), (torch.tensor([[2.0, -2.0]]), blue)):
        recon, _ = composite(glimpses, mu, scale, depth, torch.ones(1, 2), background)
        torch.testing.assert_close(recon[0, :, 16, 16], front, atol=1e-4, rtol=0)


def test_compositing_is_invariant_to_the_order_of_particles():
    torch.manual_seed(0)
    n, k, g = 2, 6, 8
    args = (
        torch.rand(n, k, 4, g, g),
        torch.rand(n, k, 2) * 1.6 - 0.8,
        torch.rand(n, k, 2) * 0.3 + 0.1,
        torch.randn(n, k),
        torch.rand(n, k),
    )
    background = torch.rand(n, 3, 32, 32)
    perm = torch.randperm(k)
    recon, alpha = composite(*args, background)
    recon_p, alpha_p = composite(*(a[:, perm] for a in args), background)
    torch.testing.assert_close(recon_p, recon)
    torch.testing.assert_close(alpha_p, alpha[:, perm])


def test_eval_encoding_is_deterministic_and_matches_forward(frames):
    torch.manual_seed(0)
    enc = ParticleEncoder(ParticleConfig(**SMALL)).eval()
    with torch.no_grad():
        entities, mask = enc.encode(frames)
        again, _ = enc.encode(frames)
        out = enc(frames)
    torch.testing.assert_close(again, entities, rtol=0, atol=0)
    torch.testing.assert_close(out.entities, entities)
    assert torch.equal(out.mask, mask)
    # In training mode the decoder samples, but the entity rows are still the posterior means.
    enc.train()
    torch.testing.assert_close(enc(frames).entities, entities)


@pytest.mark.parametrize(
    "images, message",
    [
        (torch.zeros(2, 2, 3, 32, 32, dtype=torch.uint8), "floating-point"),
        (torch.rand(2, 3, 32, 32), "expected shape"),
        (torch.rand(2, 1, 3, 32, 32), "expected shape"),
        (torch.rand(2, 2, 3, 64, 64), "expected shape"),
    ],
)
def test_bad_images_raise(images, message):
    enc = ParticleEncoder(ParticleConfig(**SMALL))
    with pytest.raises(ValueError, match=message):
        enc(images)
    with pytest.raises(ValueError, match=message):
        enc.encode(images)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"image_size": 48}, "image_size"),
        ({"entities": 0}, "entities"),
        ({"prior_patch": 12}, "prior_patch"),
        ({"prior_keypoints": 65}, "prior_keypoints"),
        ({"glimpse": 10}, "glimpse"),
        ({"glimpse": 128}, "glimpse"),
        ({"beta_kl": -1.0}, "beta_kl"),
        ({"prior_sigma": 0.0}, "prior_sigma"),
        ({"foreground_weight": -1.0}, "foreground_weight"),
        ({"glimpse_fade_start": 500, "glimpse_fade_end": 100}, "glimpse_fade"),
        ({"glimpse_fade_end": -1}, "glimpse_fade"),
        ({"agent_weight": -1.0}, "agent_weight"),
    ],
)
def test_bad_config_raises(change, message):
    with pytest.raises(ValueError, match=message):
        ParticleConfig(**change)


def test_glimpse_loss_fades_out(frames):
    enc = ParticleEncoder(ParticleConfig(beta_glimpse=2.0, glimpse_fade_start=100, glimpse_fade_end=300, **SMALL))
    weights = []
    for step in (0, 100, 200, 300, 1000):
        enc.schedule(step)
        weights.append(enc.glimpse_weight)
    assert weights == pytest.approx([2.0, 2.0, 1.0, 0.0, 0.0])
    torch.manual_seed(0)
    out = enc(frames)
    assert out.losses["loss"].item() == pytest.approx(
        (out.losses["recon"] + enc.config.beta_kl * out.losses["kl"] / frames[0, 0].numel()).item(), rel=1e-5
    )
    still = ParticleEncoder(ParticleConfig(beta_glimpse=2.0, **SMALL))
    still.schedule(10_000)
    assert still.glimpse_weight == 2.0


def test_foreground_weight_makes_undrawn_foreground_cost_more():
    plain = lambda recon, images, background: reconstruction_loss(recon, images, background, 0.0)  # noqa: E731
    weighted = lambda recon, images, background: reconstruction_loss(recon, images, background, 10.0)  # noqa: E731
    background = torch.full((1, 3, 32, 32), 0.5)
    images = background.clone()
    images[0, :, 10:13, 10:13] = 0.0  # a dark object the background does not explain
    miss_object = background.clone()  # the reconstruction leaves the object out
    miss_table = images.clone()
    miss_table[0, :, 20:23, 20:23] = 0.0  # same error, on a background pixel instead
    assert plain(miss_object, images, background) == pytest.approx(plain(miss_table, images, background).item())
    assert weighted(miss_object, images, background) > 5 * weighted(miss_table, images, background)
    assert weighted(images, images, background) == 0


def test_particle_colour_keeps_one_hue_per_glimpse(monkeypatch):
    """With particle_colour and no detail, brightness moves all three channels' logits together, so
    every pixel of a glimpse has the same logit differences between channels: one hue per particle."""
    torch.manual_seed(0)
    enc = ParticleEncoder(ParticleConfig(particle_colour=True, **SMALL))
    with monkeypatch.context() as patch:
        patch.setattr(particles, "COLOUR_DETAIL", 0.0)
        logits = torch.logit(enc.glimpses(torch.randn(2, 3, enc.config.feature_dim))[:, :, :3].double())
    hue = logits - logits[:, :, :1]  # (N, K, 3, g, g): each channel's logit minus red's
    assert (hue - hue.mean((-2, -1), keepdim=True)).abs().max() < 1e-4
    assert logits.std((-2, -1)).min() > 0  # brightness still varies over the glimpse
    detailed = enc
    detail = torch.logit(detailed.glimpses(torch.randn(2, 3, enc.config.feature_dim))[:, :, :3].double())
    differences = detail - detail[:, :, :1]
    spread = differences.amax((-2, -1)) - differences.amin((-2, -1))
    # each channel's detail is within ±COLOUR_DETAIL: a difference between two channels spans at most 4 times that
    assert 0 < spread.max() <= 4 * particles.COLOUR_DETAIL + 1e-4
    plain = ParticleEncoder(ParticleConfig(**SMALL))
    assert not hasattr(plain, "glimpse_colour") and plain.glimpse_decoder[-1].out_channels == 4


def test_particles_start_as_large_as_a_glimpse():
    torch.manual_seed(0)
    enc = ParticleEncoder(ParticleConfig(**SMALL))
    with torch.no_grad():
        rows, _ = enc.encode(torch.rand(2, 2, 3, 32, 32))
    extent = 8 / 32  # glimpse / image_size
    assert rows[..., enc.fields()["scale"]].numpy() == pytest.approx(extent, abs=0.005)
    assert torch.sigmoid(torch.tensor(enc.scale_logit)).item() == pytest.approx(extent, rel=1e-4)  # the prior's mean


def test_agent_particle_reads_its_own_heatmap_and_the_others_keep_off_it():
    """With ``agent_weight`` keypoint 0 follows its learned heatmap alone (no saliency), and the next
    keypoint is suppressed around it; without it, keypoint 0 goes to the salient dot."""
    image = torch.zeros(1, 3, 64, 64)
    image[0, :, 30:33, 10:13] = 1.0  # a bright dot at pixel (11, 31)
    logits = torch.zeros(1, 2, 16, 16)
    logits[0, 0, 3, 12] = 30.0  # the agent heatmap peaks on cell (x 12, y 3)
    to_px = lambda kp: (kp + 1) * 32 - 0.5  # noqa: E731
    plain = to_px(ParticleEncoder(ParticleConfig(entities=2))._keypoints(logits, image)[0][0])
    agent = to_px(ParticleEncoder(ParticleConfig(entities=2, agent_weight=1.0))._keypoints(logits, image)[0][0])
    assert torch.dist(plain[0], torch.tensor([11.0, 31.0])) < 3  # the saliency wins without the option (a 4 px cell)
    assert torch.dist(agent[0], torch.tensor([12 * 4 + 1.5, 3 * 4 + 1.5])) < 1.0  # the heatmap's cell centre
    assert torch.dist(agent[1], torch.tensor([11.0, 31.0])) < 3  # the dot goes to the next particle
    spread = torch.zeros(1, 2, 16, 16)
    spread[0, 0, 3, 12], spread[0, 0, 12, 3] = 4.0, 3.0  # a peak, and mass elsewhere that a plain mean would follow
    agent = to_px(ParticleEncoder(ParticleConfig(entities=2, agent_weight=1.0))._keypoints(spread, image)[0][0])
    assert torch.dist(agent[0], torch.tensor([12 * 4 + 1.5, 3 * 4 + 1.5])) < 2.0


def test_agent_loss_measures_the_agent_heatmap_and_skips_views_without_the_pusher():
    target = torch.tensor([[-0.25, 0.5], [0.25, -0.5], [1.5, 0.0]])  # cell centres of an 8 × 8 map, out of view
    peaked = torch.full((3, 8, 8), -3.0)
    peaked[0, 6, 2] = peaked[1, 2, 5] = 3.0  # the heatmaps peak on the targets' cells
    loss = lambda logits, rows=slice(None): agent_loss(logits[rows], target[rows]).item()  # noqa: E731
    assert 0 < loss(peaked) < loss(peaked.roll(1, -1)) < loss(peaked.flip(-1))  # right, one cell off, far off
    assert loss(peaked, slice(2, 3)) == 0  # the out-of-view image counts for nothing
    behind = torch.full((1, 2), float("nan"))  # a point behind the camera projects to NaN
    assert agent_loss(peaked[:1], behind).item() == 0


def test_object_loss_gives_each_shown_object_its_own_particle():
    """Objects claim the nearest free particle (not the agent's, before ``first``), pay its heatmap's KL and its
    distance in pixels; an object not shown (NaN) pays nothing."""
    heat = torch.zeros(1, 3, 8, 8)
    heat[0, 1, 6, 2] = heat[0, 2, 2, 5] = 6.0  # particles 1 and 2 peak on the cells of the two targets
    targets = torch.tensor([[[-0.375, 0.625], [0.375, -0.375]]])  # cell centres (x 2, y 6) and (x 5, y 2)
    mu = torch.tensor([[[-0.375, 0.625], [-0.375, 0.625], [0.375, -0.375]]])  # particle 0 also sits on object 0
    on_target = object_loss(heat, mu, targets, first=1, image_size=32).item()
    swapped = object_loss(heat[:, [0, 2, 1]], mu[:, [0, 2, 1]], targets, first=1, image_size=32).item()
    assert on_target == pytest.approx(swapped)  # the claim follows the particles, whatever their order
    merged = mu.clone()
    merged[0, 2] = merged[0, 1]  # both objects near one particle: the second object must take another
    assert object_loss(heat, merged, targets, first=1, image_size=32).item() > on_target + 5  # 8 px off, one of two
    flat = object_loss(heat, mu, targets, first=0, image_size=32).item()  # object 0 claims particle 0 (flat heatmap)
    assert flat > on_target + 0.5
    hidden = targets.clone()
    hidden[0, 1] = float("nan")
    alone = object_loss(heat, mu, hidden, first=1, image_size=32).item()
    assert alone == pytest.approx(object_loss(heat[:, :2], mu[:, :2], targets[:, :1], first=1, image_size=32).item())
    assert object_loss(heat, mu, torch.full_like(targets, float("nan")), first=1, image_size=32).item() == 0


def _fit(enc: ParticleEncoder, frames: torch.Tensor, term: str, **labels: torch.Tensor) -> list[float]:
    """60 Adam steps of ``enc``'s total loss on ``frames`` with the training ``labels``; the ``term`` loss at each."""
    opt = torch.optim.Adam(enc.parameters(), lr=3e-3)
    losses = []
    for _ in range(60):
        out = enc(frames, **labels)
        losses.append(out.losses[term].item())
        opt.zero_grad()
        out.losses["loss"].backward()
        opt.step()
    return losses


def test_object_loss_trains_keypoints_onto_objects_and_bad_targets_raise(frames):
    torch.manual_seed(0)
    enc = ParticleEncoder(ParticleConfig(entities=3, object_weight=1.0, **SMALL))
    targets = torch.tensor([[0.5, -0.5], [-0.5, 0.5]]).expand(frames.shape[0], 2, 2, 2)

    def nearest() -> torch.Tensor:  # per object, the distance of its nearest particle, from the images alone
        enc.eval()
        with torch.no_grad():
            keypoints = enc(frames).positions  # (B, V, K, 2)
        enc.train()
        return (keypoints[:, :, :, None] - targets[:, :, None]).norm(dim=-1).amin(2)

    fresh = nearest()
    losses = _fit(enc, frames, "objects", objects=targets)
    assert losses[-1] < 0.5 * losses[0], (losses[0], losses[-1])
    trained = nearest()
    assert trained.mean() < 0.5 * fresh.mean(), (fresh.mean(), trained.mean())
    assert enc(frames).losses["objects"].item() == 0
    with pytest.raises(ValueError, match="objects: expected a tensor of shape"):
        enc(frames, objects=targets[:, :, 0])


def test_agent_loss_trains_the_agent_keypoint_and_bad_targets_raise(frames):
    torch.manual_seed(0)
    enc = ParticleEncoder(ParticleConfig(entities=3, agent_weight=1.0, **SMALL))
    target = torch.tensor([0.5, -0.5]).expand(frames.shape[0], 2, 2)
    losses = _fit(enc, frames, "agent", agent=target)
    assert losses[-1] < 0.1 * losses[0], (losses[0], losses[-1])
    enc.eval()
    with torch.no_grad():
        keypoints = enc(frames).positions[:, :, 0]  # no targets at evaluation: images only
    assert (keypoints - target).norm(dim=-1).max() < 0.3  # from the image centre, 0.71 away
    assert enc(frames).losses["agent"].item() == 0
    with pytest.raises(ValueError, match="agent: expected a tensor of shape"):
        enc(frames, agent=target[:, :1])


def test_prior_is_fixed():
    enc = ParticleEncoder(ParticleConfig(**SMALL))
    names = {name for name, _ in enc.named_parameters()}
    assert not any("prior" in name for name in names)
    images = torch.rand(2, 3, 32, 32, requires_grad=True)
    assert not enc.prior_keypoints(images).requires_grad


def test_short_training_lowers_the_loss(frames):
    torch.manual_seed(0)
    enc = ParticleEncoder(ParticleConfig(entities=4, **SMALL))
    opt = torch.optim.Adam(enc.parameters(), lr=3e-3)

    def eval_loss() -> float:
        enc.eval()
        with torch.no_grad():
            loss = enc(frames).losses["loss"].item()
        enc.train()
        return loss

    before = eval_loss()
    for _ in range(40):
        loss = enc(frames).losses["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = eval_loss()
    assert after < 0.5 * before, (before, after)
