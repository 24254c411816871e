"""Masked attention blocks shared by entity-centric policies and planners.

Nothing here knows about slots: tokens carry their own features, masks say which are real, and no
positional embedding runs over the entity axis, so every block is permutation-equivariant over
entities (pooling: invariant).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn


def _key_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """``(B, M)`` bool (True = real) → SDPA's boolean mask ``(B, 1, 1, M)``."""
    return None if mask is None else rearrange(mask, "b m -> b 1 1 m")


class MultiHeadAttention(nn.Module):
    """Multi-head attention of queries ``(B, N, C)`` over keys/values ``(B, M, C)`` with a key mask."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width ({width}) must be divisible by heads ({heads})")
        self.heads = heads
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x: (B, N, C)``, ``context: (B, M, C)``, ``mask: (B, M)`` bool → ``(B, N, C)``."""
        q = rearrange(self.q(x), "b n (h c) -> b h n c", h=self.heads)
        k, v = rearrange(self.kv(context), "b m (two h c) -> two b h m c", two=2, h=self.heads)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=_key_mask(mask))
        return self.out(rearrange(y, "b h n c -> b n (h c)"))


class AttentionBlock(nn.Module):
    """Pre-norm residual block: attention to a context (itself for self-attention), then an MLP."""

    def __init__(self, width: int, heads: int, mlp_ratio: int = 2) -> None:
        super().__init__()
        self.norm_x = nn.LayerNorm(width)
        self.norm_context = nn.LayerNorm(width)
        self.attention = MultiHeadAttention(width, heads)
        self.norm_mlp = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(), nn.Linear(mlp_ratio * width, width))

    def forward(
        self, x: torch.Tensor, context: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``x: (B, N, C)``; ``context: (B, M, C)`` (default ``x``); ``mask: (B, M)`` bool over the context."""
        h = self.norm_x(x)
        c = h if context is None else self.norm_context(context)
        x = x + self.attention(h, c, mask)
        return x + self.mlp(self.norm_mlp(x))


class AttentionPool(nn.Module):
    """Pool a masked set ``(B, N, C)`` into one vector ``(B, C)`` with a learned query."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.query = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.norm = nn.LayerNorm(width)
        self.attention = MultiHeadAttention(width, heads)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x: (B, N, C)``, ``mask: (B, N)`` bool → ``(B, C)``."""
        query = self.query.expand(x.shape[0], -1, -1)
        return self.attention(query, self.norm(x), mask)[:, 0]
