"""Slot Attention autoencoder: shapes, a partition of each image over slots, slot symmetry, input checks, learning."""

import json
from dataclasses import asdict

import numpy as np
import pytest
import torch

from ecrl.encoders.slot_attention import SlotAttention, SlotAttentionConfig, SlotAttentionEncoder


def _encoder(**kwargs) -> SlotAttentionEncoder:
    torch.manual_seed(0)
    return SlotAttentionEncoder(SlotAttentionConfig(**kwargs))


@pytest.mark.parametrize(
    "kwargs", [{}, {"views": 1, "entities": 3, "image_size": 32}, {"image_size": 128, "decoder_size": 16}]
)
def test_shapes(kwargs):
    model = _encoder(**kwargs)
    c = model.config
    b, v, k, s = 2, c.views, c.entities, c.image_size
    images = torch.rand(b, v, 3, s, s)
    out = model(images)
    assert model.entity_dim == c.slot_dim + 3 + c.view_dim
    assert out.entities.shape == (b, v * k, model.entity_dim)
    assert out.mask.shape == (b, v * k) and out.mask.dtype == torch.bool and out.mask.all()
    assert out.recon.shape == (b, v, 3, s, s)
    assert out.alpha.shape == (b, v, k, s, s)
    assert out.positions.shape == (b, v, k, 2)
    assert out.losses["loss"].ndim == 0 and out.losses["recon"].ndim == 0
    entities, mask = model.eval().encode(images)
    assert entities.shape == (b, v * k, model.entity_dim) and mask.shape == (b, v * k) and mask.all()


def test_alpha_partitions_each_image_and_features_are_in_range():
    model = _encoder()
    out = model(torch.rand(3, 2, 3, 64, 64))
    assert (out.alpha >= 0).all()
    torch.testing.assert_close(out.alpha.sum(2), torch.ones(3, 2, 64, 64))
    assert out.recon.min() >= 0 and out.recon.max() <= 1
    assert out.positions.abs().max() <= 1
    d = model.config.slot_dim
    rows = out.entities.view(3, 2, 7, -1)
    assert rows[..., d : d + 2].abs().max() <= 1  # attention centroids; positions are the alpha centroids
    torch.testing.assert_close(rows[..., d + 2].sum(-1), torch.ones(3, 2))  # masses: fractions of the image
    # The view embedding is the same for every slot of a view and differs between views.
    torch.testing.assert_close(rows[:, 0, :, d + 3 :], model.view_embedding[0].expand(3, 7, -1))
    assert not torch.allclose(rows[:, 1, 0, d + 3 :], rows[:, 0, 0, d + 3 :])


def test_slot_attention_is_equivariant_to_permuting_the_initial_slots():
    torch.manual_seed(0)
    module = SlotAttention(input_dim=16, slot_dim=8, iterations=3)
    inputs, slots = torch.randn(2, 20, 16), torch.randn(2, 5, 8)
    perm = torch.tensor([3, 0, 4, 2, 1])
    out, attention = module(inputs, slots)
    out_p, attention_p = module(inputs, slots[:, perm])
    torch.testing.assert_close(out_p, out[:, perm])
    torch.testing.assert_close(attention_p, attention[:, perm])
    torch.testing.assert_close(attention.sum(1), torch.ones(2, 20))


def test_permuting_the_slot_noise_permutes_the_entities():
    model = _encoder().eval()
    images = torch.rand(2, 2, 3, 64, 64)
    perm = torch.tensor([6, 2, 0, 5, 1, 3, 4])
    with torch.no_grad():
        entities, _ = model.encode(images)
        out = model(images)
        model.eval_noise.copy_(model.eval_noise[perm])
        entities_p, _ = model.encode(images)
        out_p = model(images)
    by_view = lambda x: x.view(2, 2, 7, -1)  # noqa: E731
    torch.testing.assert_close(by_view(entities_p), by_view(entities)[:, :, perm], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out_p.alpha, out.alpha[:, :, perm], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out_p.recon, out.recon, atol=1e-5, rtol=1e-4)


def test_encode_is_deterministic_in_eval_and_equals_forward():
    model = _encoder()
    images = torch.rand(2, 2, 3, 64, 64)
    d = model.config.slot_dim
    with torch.no_grad():
        assert not torch.equal(model.encode(images)[0], model.encode(images)[0])  # training: fresh noise
        model.eval()
        entities, _ = model.encode(images)
        torch.testing.assert_close(model.encode(images)[0], entities)
        forward = model(images).entities
    torch.testing.assert_close(forward, entities)  # the fast path returns the training path's entities
    # Centroid and mass come from the attention map: in range, the masses a partition of the image.
    assert entities[..., d : d + 2].abs().max() <= 1
    torch.testing.assert_close(entities[..., d + 2].view(2, 2, 7).sum(-1), torch.ones(2, 2))
    # A sample's entities do not depend on the rest of the batch.
    torch.testing.assert_close(model.encode(images[:1])[0], entities[:1], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("images", "match"),
    [
        (torch.rand(2, 3, 64, 64), r"expected shape \(B, 2, 3, 64, 64\)"),
        (torch.rand(2, 1, 3, 64, 64), r"expected shape \(B, 2, 3, 64, 64\)"),
        (torch.rand(2, 2, 3, 32, 32), r"expected shape \(B, 2, 3, 64, 64\)"),
        (torch.zeros(2, 2, 3, 64, 64, dtype=torch.uint8), "floating-point"),
    ],
)
def test_bad_images_are_rejected(images, match):
    model = _encoder()
    with pytest.raises(ValueError, match=match):
        model(images)
    with pytest.raises(ValueError, match=match):
        model.encode(images)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"image_size": 48}, "image_size must be one of"),
        ({"image_size": 64.0}, "image_size must be an integer"),
        ({"entities": 0}, "entities must be an integer >= 1"),
        ({"views": 1.5}, "views must be an integer"),
        ({"iterations": 0}, "iterations must be"),
        ({"decoder_size": 12}, "decoder_size must be a power of two"),
        ({"decoder_size": 64}, "decoder_size must be a power of two below image_size"),
        ({"view_dim": -1}, "view_dim must be an integer >= 0"),
    ],
)
def test_bad_config_is_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SlotAttentionConfig(**kwargs)


def test_config_round_trips_through_json():
    config = SlotAttentionConfig(views=1, entities=5, image_size=32)
    assert SlotAttentionConfig(**json.loads(json.dumps(asdict(config)))) == config
    model = SlotAttentionEncoder(config)
    assert model.config_dict() == asdict(config)
    assert SlotAttentionEncoder.kind == "slot" and SlotAttentionEncoder.Config is SlotAttentionConfig


def test_a_short_training_run_lowers_the_reconstruction_loss(make):
    env = make("ecrl/Push3-v0", width=32, height=32)
    frames = []
    for seed in range(4):
        env.reset(seed=seed)
        views = env.unwrapped.render_views(("front", "top"))
        frames.append(np.stack([views["front"], views["top"]]))
    images = torch.from_numpy(np.stack(frames)).permute(0, 1, 4, 2, 3).float() / 255  # (4, 2, 3, 32, 32)
    model = _encoder(image_size=32, entities=4, width=16, slot_dim=16)
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(60):
        loss = model(images).losses["loss"]
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    final = np.mean(losses[-5:])
    assert final < 0.5 * losses[0], losses
    # Better than painting each image its mean colour: the slots have learned some layout.
    assert final < ((images - images.mean((-2, -1), keepdim=True)) ** 2).mean().item(), losses
