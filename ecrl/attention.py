"""Masked attention blocks shared by entity-centric policies and planners.

Nothing here knows about slots: tokens carry their own features, masks say which are real, and no
positional embedding runs over the entity axis, so every block is permutation-equivariant over
entities (pooling: invariant).

Every layer takes ``members``: with ``members = E > 1`` it holds E independent copies of its weights
and maps inputs with a leading ensemble axis ``(E, B, …)`` in one batched pass. That is how twin
critics (or a critic ensemble) run as one network instead of a Python loop over copies. With the
default ``members = 1`` the layers are the plain ones and inputs have no ensemble axis.

The blocks compute the same function as the plain composition of their layers (to float rounding);
on many token rows (``FAST_PATH_MIN_ROWS``: training batches) they take a path arranged for the sizes
entity-centric RL trains at on a CPU, a handful of tokens of width 32–64, where per-op and per-pass
costs dominate the arithmetic:

- a layer norm only standardises, its scale and shift folded into the linear map that reads it (a
  weight product instead of a pass over every token);
- self-attention projects queries, keys and values with one matmul; with one head, the key and output
  projections are folded into the query and value maps (:meth:`AttentionBlock._attend_one_head`);
- small attention problems are packed into larger ones with a block-diagonal mask (``_attend``);
- pooling with a learned query never projects the tokens to keys and values (:class:`AttentionPool`).

On few rows (a batch-1 actor) the plain composition runs: there the weight products would cost more
than they save.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

Params = tuple[torch.Tensor, torch.Tensor]
"""A linear map as ``(weight (E, in, out), bias (E, 1, out))``: the ensemble layout, ``E = 1`` for an ``nn.Linear``."""


FAST_PATH_MIN_ROWS = 128
"""Token rows (all leading axes together) from which the blocks take their rearranged fast path; on
fewer rows the extra weight products cost more than they save, and the plain composition runs."""


def _fast(x: torch.Tensor) -> bool:
    return x.numel() >= FAST_PATH_MIN_ROWS * x.shape[-1]


def _linear_params(layer: nn.Module) -> Params:
    w, b = layer.weight, layer.bias
    return (w.mT.unsqueeze(0), b.view(1, 1, -1)) if isinstance(layer, nn.Linear) else (w, b)


def _norm_params(norm: nn.Module) -> Params:
    """A layer norm's scale and shift, each ``(E, C)``."""
    w, b = norm.weight, norm.bias
    return (w.view(1, -1), b.view(1, -1)) if isinstance(norm, nn.LayerNorm) else (w, b)


def _fold(norm: Params, linear: Params) -> Params:
    """``linear ∘ norm`` as a linear map of the standardised input: the norm's scale and shift folded in."""
    (scale, shift), (w, b) = norm, linear
    return w * scale[..., None], torch.baddbmm(b, shift[:, None], w)


def _concat(*maps: Params) -> Params:
    """One linear map whose output is the concatenation of the given maps' outputs."""
    return torch.cat([w for w, _ in maps], -1), torch.cat([b for _, b in maps], -1)


def _affine(x: torch.Tensor, params: Params) -> torch.Tensor:
    """Apply a linear map to ``(E, …, in)``."""
    w, b = params
    return torch.baddbmm(b, x.reshape(w.shape[0], -1, x.shape[-1]), w).view(*x.shape[:-1], w.shape[-1])


def _standardise(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps)`` over the last axis: ``layer_norm`` without its affine."""
    if (torch.is_grad_enabled() and x.requires_grad) or not _fast(x):
        return F.layer_norm(x, x.shape[-1:], eps=eps)
    # Without autograd, on many rows, a few elementwise ops beat the fused kernel (2x on rows of 32–64).
    centred = x - x.mean(-1, keepdim=True)
    return centred * torch.rsqrt(centred.square().mean(-1, keepdim=True) + eps)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Attention of ``q: (…, B, H, N, c)`` over ``k, v: (…, B, H, M, c)`` with a key mask ``(B, M)`` bool.

    The leading axes are folded into the batch: PyTorch's fused CPU kernel takes 4-D inputs only and
    falls back to its much slower to differentiate math path on 5-D ensemble inputs. With sets this
    small every kernel spends its time on per-problem overhead (and ``bmm`` loops over the batch when
    ``N × M × c < 400``), so on the fast path :func:`_group` problems are packed into one: their queries
    attend over all their keys with a block-diagonal mask, which gives the other problems' keys
    exactly zero weight.
    """
    lead, (heads, n, c), m = q.shape[:-3], q.shape[-3:], k.shape[-2]
    group = _group(q.numel() // (n * c), n, m)
    if group == 1:
        if len(lead) == 1:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask[:, None, None])
        q, k, v = (t.reshape(-1, *t.shape[-3:]) for t in (q, k, v))
        mask = None if mask is None else mask.expand(*lead, m).reshape(-1, 1, 1, m)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).view(*lead, heads, n, c)
    q, k, v = (t.reshape(-1, group * t.shape[-2], c) for t in (q, k, v))  # (problems / group, group × N, c)
    allowed = _block_diagonal(group, n, m, q.device)
    if mask is not None:
        allowed = allowed & mask.expand(*lead, m)[..., None, :].expand(*lead, heads, m).reshape(-1, 1, group * m)
    bias = torch.where(allowed, 0.0, float("-inf")).to(q.dtype)
    scores = torch.baddbmm(bias.expand(q.shape[0], -1, -1), q, k.mT, alpha=c**-0.5)
    return torch.bmm(scores.softmax(dim=-1), v).view(*lead, heads, n, c)


@functools.cache
def _block_diagonal(group: int, n: int, m: int, device: torch.device) -> torch.Tensor:
    """``(group × n, group × m)`` bool, True where query and key belong to the same packed problem."""
    return torch.eye(group, dtype=torch.bool, device=device).repeat_interleave(n, 0).repeat_interleave(m, 1)


def _group(problems: int, n: int, m: int) -> int:
    """Attention problems packed into one: none (1) off the fast path, else up to 24 queries or keys' worth."""
    group = 1
    if problems * n >= FAST_PATH_MIN_ROWS:
        while group * 2 * min(n, m) <= 24 and problems % (group * 2) == 0:
            group *= 2
    return group


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
        return _affine(x, (self.weight, self.bias))


class EnsembleLayerNorm(nn.Module):
    """LayerNorm with a separate affine transform per ensemble member; input ``(E, …, C)``."""

    eps = 1e-5

    def __init__(self, width: int, members: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, width))
        self.bias = nn.Parameter(torch.zeros(members, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
        return torch.addcmul(self.bias.view(shape), _standardise(x, self.eps), self.weight.view(shape))


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


def normed_mlp(x: torch.Tensor, norm: nn.Module, layers: nn.Sequential) -> torch.Tensor:
    """``layers(norm(x))`` for ``x: ([E,] …, C)``, the norm's scale and shift folded into the first layer."""
    if not _fast(x):
        return layers(norm(x))
    if isinstance(norm, nn.LayerNorm):  # the fast path works on an ensemble axis of one
        return _normed_mlp(x[None], norm, layers)[0]
    return _normed_mlp(x, norm, layers)


def _normed_mlp(x: torch.Tensor, norm: nn.Module, layers: nn.Sequential) -> torch.Tensor:
    """:func:`normed_mlp` of ``x: (E, …, C)`` (``E = 1`` for plain layers), the fast way."""
    first, *rest = layers
    h = _affine(_standardise(x, norm.eps), _fold(_norm_params(norm), _linear_params(first)))
    for layer in rest:
        h = layer(h)
    return h


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
        return self.out(rearrange(_attend(q, k, v, mask), "... h n c -> ... n (h c)"))


class AttentionBlock(nn.Module):
    """Pre-norm residual block: attention to a context (itself for self-attention), then an MLP."""

    def __init__(self, width: int, heads: int, mlp_ratio: int = 2, members: int = 1) -> None:
        super().__init__()
        self.members = members
        self.norm_x = layer_norm(width, members)
        self.norm_context = layer_norm(width, members)
        self.attention = MultiHeadAttention(width, heads, members)
        self.norm_mlp = layer_norm(width, members)
        self.mlp = mlp([width, mlp_ratio * width, width], members)

    def forward(
        self, x: torch.Tensor, context: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``x: ([E,] B, N, C)``; ``context: ([E,] B, M, C)`` (default ``x``); ``mask: (B, M)`` bool over the context."""
        if not _fast(x):  # the plain composition of the layers
            h = self.norm_x(x)
            x = x + self.attention(h, h if context is None else self.norm_context(context), mask)
            return x + self.mlp(self.norm_mlp(x))
        if self.members == 1:  # the fast path works on an ensemble axis of one
            x, context = x[None], None if context is None else context[None]
        attend = self._attend_one_head if self.attention.heads == 1 else self._attend_heads
        x = x + attend(x, context, mask)
        x = x + _normed_mlp(x, self.norm_mlp, self.mlp)
        return x if self.members > 1 else x[0]

    def _attend_heads(self, x: torch.Tensor, context: torch.Tensor | None, mask: torch.Tensor | None) -> torch.Tensor:
        """Attention with the norms folded into the projections; ``x: (E, B, N, C)``, ``context: (E, B, M, C)``."""
        attention = self.attention
        norm_x, q_map, kv_map = _norm_params(self.norm_x), _linear_params(attention.q), _linear_params(attention.kv)
        z = _standardise(x, self.norm_x.eps)
        if context is None:
            q, k, v = _affine(z, _fold(norm_x, _concat(q_map, kv_map))).chunk(3, dim=-1)
        else:
            q = _affine(z, _fold(norm_x, q_map))
            kv_map = _fold(_norm_params(self.norm_context), kv_map)
            k, v = _affine(_standardise(context, self.norm_context.eps), kv_map).chunk(2, dim=-1)
        heads = lambda t: rearrange(t, "... n (h c) -> ... h n c", h=attention.heads)  # noqa: E731
        y = rearrange(_attend(heads(q), heads(k), heads(v), mask), "... h n c -> ... n (h c)")
        return _affine(y, _linear_params(attention.out))

    def _attend_one_head(
        self, x: torch.Tensor, context: torch.Tensor | None, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """One head: the key and output projections folded into the query and value maps.

        With ``z`` the standardised tokens, a score is ``(ẑ_x W_q + b_q) · (ẑ_c W_k + b_k)`` where
        ``ẑ = z ⊙ γ + β``; the terms constant over keys cancel in the softmax, leaving ``(z_x A + a) · z_c``
        with ``A = diag(γ_x) W_q W_kᵀ diag(γ_c)``. As the attention weights sum to one, the output
        ``Σ p (ẑ_c W_v + b_v) W_o + b_o`` is ``Σ p (z_c W_vo + b_vo)``. Two token-wide matmuls instead of
        four, the rest are ``C × C`` weight products.
        """
        attention = self.attention
        norm_c = self.norm_x if context is None else self.norm_context
        (scale_x, shift_x), (scale_c, shift_c) = _norm_params(self.norm_x), _norm_params(norm_c)
        (w_q, b_q), (w_kv, b_kv), (w_o, b_o) = (_linear_params(m) for m in (attention.q, attention.kv, attention.out))
        width = w_q.shape[-1]
        w_k, w_v, b_v = w_kv[..., :width], w_kv[..., width:], b_kv[..., width:]
        # Each map's weight rows with its bias as one more row, so both go through the second map at once.
        query = torch.cat([w_q * scale_x[..., None], torch.baddbmm(b_q, shift_x[:, None], w_q)], dim=1)
        query = torch.bmm(query, w_k.mT) * scale_c[:, None]
        value = torch.bmm(torch.cat([w_v * scale_c[..., None], torch.baddbmm(b_v, shift_c[:, None], w_v)], dim=1), w_o)
        query_map, value_map = (query[:, :width], query[:, width:]), (value[:, :width], value[:, width:] + b_o)
        z_x = _standardise(x, self.norm_x.eps)
        if context is None:
            z_c = z_x
            q, v = _affine(z_x, _concat(query_map, value_map)).chunk(2, dim=-1)
        else:
            z_c = _standardise(context, norm_c.eps)
            q, v = _affine(z_x, query_map), _affine(z_c, value_map)
        return _attend(q.unsqueeze(-3), z_c.unsqueeze(-3), v.unsqueeze(-3), mask).squeeze(-3)


class AttentionPool(nn.Module):
    """Pool a masked set ``([E,] B, N, C)`` into one vector ``([E,] B, C)`` with a learned query.

    The function is multi-head attention of the projected query over the layer-normed set, computed
    without projecting the set: with one query per head, a score is ``z_j · (W_k q_h)`` (the key bias
    adds the same to every score and cancels in the softmax) and, as the weights sum to one, the
    output is ``(Σ_j p_jh z_j) W_v + b_v``, so only the weighted means of the normed tokens are projected.
    """

    def __init__(self, width: int, heads: int, members: int = 1) -> None:
        super().__init__()
        self.members = members
        self.query = nn.Parameter(torch.randn(members, 1, 1, width) * 0.02)
        self.norm = layer_norm(width, members)
        self.attention = MultiHeadAttention(width, heads, members)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x: ([E,] B, N, C)``, ``mask: (B, N)`` bool → ``([E,] B, C)``."""
        if not _fast(x):  # the plain composition of the layers
            query = (self.query if self.members > 1 else self.query[0]).expand(*x.shape[:-2], 1, -1)
            return self.attention(query, self.norm(x), mask)[..., 0, :]
        attention, heads, ensemble = self.attention, self.attention.heads, self.members > 1
        z = _standardise(x if ensemble else x[None], self.norm.eps)  # (E, B, N, C)
        e, b, n, width = z.shape
        c = width // heads
        w_q, b_q = _linear_params(attention.q)
        q = torch.baddbmm(b_q, self.query.view(e, 1, width), w_q).view(e, heads, c)
        w_kv, b_kv = _fold(_norm_params(self.norm), _linear_params(attention.kv))
        w_k, w_v, b_v = w_kv[..., :width], w_kv[..., width:], b_kv[..., width:]
        u = (w_k.view(e, width, heads, c) * q[:, None]).sum(-1) * c**-0.5  # (E, C, H)
        scores = torch.bmm(z.view(e, b * n, width), u).view(e, b, n, heads)
        if mask is not None:
            scores = scores.masked_fill(~mask[:, :, None], float("-inf"))
        p = scores.softmax(dim=-2)
        if heads == 1:  # as a (1 × N) @ (N × C) bmm the weighted mean would loop over the batch (see _attend)
            y = torch.bmm((p * z).sum(dim=-2), w_v)
        else:
            means = torch.matmul(p.mT, z)  # (E, B, H, C)
            y = torch.einsum("ebhi,eihc->ebhc", means, w_v.view(e, width, heads, c)).reshape(e, b, width)
        w_o, b_o = _linear_params(attention.out)
        y = torch.baddbmm(b_o, y + b_v, w_o)
        return y if ensemble else y[0]
