"""Attention blocks: masked, permutation-equivariant (blocks) and invariant (pooling)."""

import pytest
import torch

from ecrl.attention import AttentionBlock, AttentionPool


@pytest.fixture
def sets():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    return x, mask


def test_self_attention_is_permutation_equivariant(sets):
    x, mask = sets
    block = AttentionBlock(16, heads=4).eval()
    perm = torch.tensor([3, 0, 4, 2, 1])
    torch.testing.assert_close(block(x, mask=mask)[:, perm], block(x[:, perm], mask=mask[:, perm]))


def test_pooling_is_invariant_and_ignores_masked_rows(sets):
    x, mask = sets
    pool = AttentionPool(16, heads=4).eval()
    perm = torch.tensor([4, 2, 0, 1, 3])
    out = pool(x, mask)
    torch.testing.assert_close(out, pool(x[:, perm], mask[:, perm]))
    garbage = torch.where(mask[..., None], x, torch.randn_like(x) * 100)
    torch.testing.assert_close(out, pool(garbage, mask))
    # Padding with extra masked rows changes nothing either.
    padded = torch.cat([x, torch.zeros(3, 4, 16)], 1)
    torch.testing.assert_close(out, pool(padded, torch.cat([mask, torch.zeros(3, 4, dtype=torch.bool)], 1)))


def test_cross_attention_ignores_masked_context(sets):
    x, mask = sets
    block = AttentionBlock(16, heads=4).eval()
    context = torch.randn(3, 5, 16)
    noisy = torch.where(mask[..., None], context, torch.randn_like(context) * 100)
    torch.testing.assert_close(block(x, context, mask), block(x, noisy, mask))


def test_width_must_split_into_heads():
    with pytest.raises(ValueError, match="divisible"):
        AttentionBlock(10, heads=4)
