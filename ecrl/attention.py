"""Masked attention blocks shared by entity-centric policies and planners.

Nothing here knows about slots: tokens carry their own features, masks say which are real, and no
positional embedding runs over the entity axis, so every block is permutation-equivariant over
entities (pooling: invariant).

Every layer takes ``members``: with ``members = E > 1`` it holds E independent copies of its weights
and maps inputs with a leading ensemble axis ``(E, B, …)`` in one batched pass. That is how twin
critics (or a critic ensemble) run as one network instead of a Python loop over copies. With the
default ``members = 1`` the layers are the plain ones and inputs have no ensemble axis.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn


def _key_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """``(B, M)`` bool (True = real) → SDPA's boolean mask ``(B, 1, 1, M)``."""
    return None if mask is None else rearrange(mask, "b m -> b 1 1 m")


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """SDPA of ``q: (…, B, H, N, c)`` over ``k, v: (…, B, H, M, c)`` with a key mask ``(B, M)``.

    The leading axes are folded into the batch: PyTorch's fused CPU kernel takes 4-D inputs only and
    falls back to the (much slower to differentiate) math path on 5-D ensemble inputs.
    """
    lead = q.shape[:-3]
    if len(lead) > 1:
        if mask is not None:
            mask = mask.expand(*lead[:-1], *mask.shape).reshape(-1, mask.shape[-1])
        q, k, v = (t.reshape(-1, *t.shape[-3:]) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=_key_mask(mask))
    return y.reshape(*lead, *y.shape[-3:])


class EnsembleLinear(nn.Module):
    """``members`` independent linear maps applied to ``(E, …, in)`` with one batched matmul."""

    def __init__(self, in_features: int, out_features: int, members: int) -> None:
        super().__init__()
        self.members = members
        bound = 1 / math.sqrt(in_features)  # nn.Linear's default initialisation, per member
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] != self.members:
            raise ValueError(f"expected a leading ensemble axis of {self.members}, got shape {tuple(x.shape)}")
        flat = x.reshape(self.members, -1, x.shape[-1])
        return torch.baddbmm(self.bias, flat, self.weight).reshape(*x.shape[:-1], -1)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm with a separate affine transform per ensemble member; input ``(E, …, C)``."""

    def __init__(self, width: int, members: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, width))
        self.bias = nn.Parameter(torch.zeros(members, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
        return torch.addcmul(self.bias.view(shape), F.layer_norm(x, x.shape[-1:]), self.weight.view(shape))


def linear(in_features: int, out_features: int, members: int = 1) -> nn.Module:
    """``nn.Linear`` for one member, :class:`EnsembleLinear` for several."""
    return nn.Linear(in_features, out_features) if members == 1 else EnsembleLinear(in_features, out_features, members)


def layer_norm(width: int, members: int = 1) -> nn.Module:
    """``nn.LayerNorm`` for one member, :class:`EnsembleLayerNorm` for several."""
    return nn.LayerNorm(width) if members == 1 else EnsembleLayerNorm(width, members)


def mlp(sizes: list[int], members: int = 1, activation: type[nn.Module] = nn.GELU) -> nn.Sequential:
    """Linear layers of the given sizes with ``activation`` between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(linear(a, b, members))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


class MultiHeadAttention(nn.Module):
    """Multi-head attention of queries ``([E,] B, N, C)`` over keys/values ``([E,] B, M, C)`` with a key mask."""

    def __init__(self, width: int, heads: int, members: int = 1) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width ({width}) must be divisible by heads ({heads})")
        self.heads = heads
        self.q = linear(width, width, members)
        self.kv = linear(width, 2 * width, members)
        self.out = linear(width, width, members)

    def forward(self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x: ([E,] B, N, C)``, ``context: ([E,] B, M, C)``, ``mask: (B, M)`` bool → like ``x``."""
        q = rearrange(self.q(x), "... n (h c) -> ... h n c", h=self.heads)
        k, v = rearrange(self.kv(context), "... m (two h c) -> two ... h m c", two=2, h=self.heads)
        y = _attend(q, k, v, mask)
        return self.out(rearrange(y, "... h n c -> ... n (h c)"))


class AttentionBlock(nn.Module):
    """Pre-norm residual block: attention to a context (itself for self-attention), then an MLP."""

    def __init__(self, width: int, heads: int, mlp_ratio: int = 2, members: int = 1) -> None:
        super().__init__()
        self.norm_x = layer_norm(width, members)
        self.norm_context = layer_norm(width, members)
        self.attention = MultiHeadAttention(width, heads, members)
        self.norm_mlp = layer_norm(width, members)
        self.mlp = mlp([width, mlp_ratio * width, width], members)

    def forward(
        self, x: torch.Tensor, context: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``x: ([E,] B, N, C)``; ``context: ([E,] B, M, C)`` (default ``x``); ``mask: (B, M)`` bool over the context."""
        h = self.norm_x(x)
        c = h if context is None else self.norm_context(context)
        x = x + self.attention(h, c, mask)
        return x + self.mlp(self.norm_mlp(x))


class AttentionPool(nn.Module):
    """Pool a masked set ``([E,] B, N, C)`` into one vector ``([E,] B, C)`` with a learned query."""

    def __init__(self, width: int, heads: int, members: int = 1) -> None:
        super().__init__()
        self.members = members
        self.query = nn.Parameter(torch.randn(members, 1, 1, width) * 0.02)
        self.norm = layer_norm(width, members)
        self.attention = MultiHeadAttention(width, heads, members)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x: ([E,] B, N, C)``, ``mask: (B, N)`` bool → ``([E,] B, C)``."""
        query = self.query if self.members > 1 else self.query[0]
        query = query.expand(*x.shape[:-2], 1, -1)
        return self.attention(query, self.norm(x), mask)[..., 0, :]
