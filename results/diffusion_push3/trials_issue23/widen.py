"""Save a wider copy of a saved flat planner that computes the same function (issue 23, session 20).

Width ``w`` becomes ``k * w`` and heads ``h`` become ``k * h`` (the head width stays), in the manner of
Net2Net (Chen et al., 2016) for a transformer with pre-norm and adaLN-Zero:
- every hidden vector of the copy is ``k`` copies of the saved one side by side (token width, each
  head, each MLP hidden layer, each chunk of the modulations);
- a layer that reads a copied vector splits each of the saved weights over its ``k`` copies with
  random fractions that sum to one, so the sum is the saved product while the copies differ (equal
  fractions would give the copies equal gradients for ever);
- LayerNorm sees the same mean and variance over copies, so it gives copies of its output;
- the diffusion-time sinusoid is computed at the copy's width: the saved frequencies are every
  ``k``-th of the new ones, so ``embed_time``'s first layer reads those columns (the rest start at zero).

The script checks the copy against the saved denoiser on random inputs at several numbers of objects
(and the printed maximum difference is what a user sees). Fine-tuning the copy
(``ecrl-train-diffusion --init-from <copy> --denoiser.width <k w> --denoiser.heads <k h> …``) asks
whether width, at the cost of a fine-tune only, helps the planner generalise to more objects. Usage::

    python results/diffusion_push3/trials_issue23/widen.py results/diffusion_push3/placed/policy /tmp/wide64 2
"""

from __future__ import annotations

import argparse
import copy

import torch

import ecrl
from ecrl import checkpoint
from ecrl.diffusion.denoiser import sinusoid
from ecrl.policy import Policy

parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
parser.add_argument("source", help="a saved flat planner (state rows)")
parser.add_argument("out", help="where to save the wider copy")
parser.add_argument("factor", type=int, help="the copy's width and heads as a multiple of the source's (at least 2)")
parser.add_argument("--seed", type=int, default=0, help="seed of the random split fractions")
args = parser.parse_args()
if args.factor < 2:
    raise SystemExit(f"factor must be at least 2, got {args.factor}")

policy = ecrl.load(args.source)
source = policy.module.denoiser
config = source.config
if config.entity_dim or config.goal_dim:
    raise SystemExit("widen.py copies planners over state rows only")
k, w = args.factor, config.width
kwargs = copy.deepcopy(policy.kwargs)
kwargs["denoiser"].update(width=k * w, heads=k * config.heads)
module = checkpoint.build(policy.builder, kwargs)
target = module.denoiser
generator = torch.Generator().manual_seed(args.seed)


def tiled(n: int, chunks: int = 1) -> torch.Tensor:
    """For each index of a widened vector made of ``chunks`` chunks of ``n`` each, the saved index it copies."""
    i = torch.arange(k * n * chunks)
    chunk, rest = i // (k * n), i % (k * n)
    return chunk * n + rest % n


def split(weight: torch.Tensor, n: int) -> torch.Tensor:
    """Columns of ``weight`` (reading ``k`` copies of an ``n``-vector) with random fractions summing to one per copy set."""
    fractions = torch.rand(weight.shape[0], k, n, generator=generator) + 0.5  # in [0.5, 1.5): no copy near zero
    fractions = fractions / fractions.sum(dim=1, keepdim=True)
    return (weight[:, tiled(n)].reshape(weight.shape[0], k, n) * fractions).reshape(weight.shape[0], k * n)


def copy_linear(name: str, rows_in: int | None, rows_chunks: int, cols_in: int | None) -> None:
    """``name``: a Linear whose output is ``rows_chunks`` chunks of ``rows_in`` (None: not widened) and whose
    input is a copied vector of ``cols_in`` (None: not widened)."""
    weight, bias = saved[f"{name}.weight"], saved[f"{name}.bias"]
    if rows_in is not None:
        rows = tiled(rows_in, rows_chunks)
        weight, bias = weight[rows], bias[rows]
    if cols_in is not None:
        weight = split(weight, cols_in)
    new[f"{name}.weight"], new[f"{name}.bias"] = weight, bias


saved = source.state_dict()
new: dict[str, torch.Tensor] = {}
hidden = config.mlp_ratio * w
for name in ("embed_state", "embed_static", "embed_action", "embed_goal"):
    copy_linear(f"{name}.0", w, 1, None)
    copy_linear(f"{name}.2", w, 1, w)
new["null_goal"] = saved["null_goal"][tiled(w)]
new["step_embedding"] = saved["step_embedding"][:, tiled(w)]
# The time sinusoid at width k·w has k·w/2 frequencies; the saved w/2 are every k-th of them.
half, wide_half = w // 2, k * w // 2
time_columns = torch.cat([torch.arange(half) * k, wide_half + torch.arange(half) * k])
assert torch.allclose(sinusoid(torch.arange(100), w), sinusoid(torch.arange(100), k * w)[:, time_columns], atol=1e-5)
first = saved["embed_time.0.weight"][tiled(w)]
new["embed_time.0.weight"] = torch.zeros(k * w, k * w).index_copy_(1, time_columns, first)
new["embed_time.0.bias"] = saved["embed_time.0.bias"][tiled(w)]
copy_linear("embed_time.2", w, 1, w)
block = "entity_goals"
for norm in ("norm_x", "norm_context", "norm_mlp"):
    for p in ("weight", "bias"):
        new[f"{block}.{norm}.{p}"] = saved[f"{block}.{norm}.{p}"][tiled(w)]
for prefix in [f"blocks.{b}" for b in range(config.blocks)] + [block]:
    copy_linear(f"{prefix}.attention.q", w, 1, w)
    copy_linear(f"{prefix}.attention.kv", w, 2, w)
    copy_linear(f"{prefix}.attention.out", w, 1, w)
    copy_linear(f"{prefix}.mlp.0", hidden, 1, w)
    copy_linear(f"{prefix}.mlp.2", w, 1, hidden)
    if prefix != block:
        copy_linear(f"{prefix}.modulation", w, 6, w)
copy_linear("modulation_out", w, 2, w)
copy_linear("head_state", None, 1, w)
copy_linear("head_action", None, 1, w)
missing = set(target.state_dict()) ^ set(new)
if missing:
    raise SystemExit(f"not a layer-for-layer copy: {sorted(missing)}")
target.load_state_dict(new)

# The same function: random plans, goals and times, at several numbers of objects, with padding and goal dropout.
source.eval(), target.eval()
worst = 0.0
with torch.no_grad():
    for n in (1, 3, 6, 8):
        b, steps = 16, config.horizon + 1
        inputs = dict(
            states=torch.randn(b, steps, n + 1, config.dynamic_dim),
            actions=torch.randn(b, config.horizon, config.action_dim),
            t=torch.randint(0, config.diffusion_steps, (b,)),
            static=torch.randn(b, n + 1, config.static_dim),
            goals=torch.randn(b, n, config.goal_row_dim),
            mask=torch.rand(b, n + 1) < 0.8,
            goal_mask=torch.ones(b, n, dtype=torch.bool),
            drop_goal=torch.rand(b) < 0.3,
        )
        inputs["mask"][:, 0] = True
        for a, c in zip(source(**inputs), target(**inputs), strict=True):
            worst = max(worst, (a - c).abs().max().item())
print(f"largest difference of the outputs over random inputs at N = 1, 3, 6, 8: {worst:.2e}")
if worst > 1e-4:
    raise SystemExit("the wider copy does not compute the saved function")
Policy(module, policy.action_low, policy.action_high, policy.meta, policy.builder, kwargs).save(args.out)
count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
print(
    f"width {w} -> {k * w}, heads {config.heads} -> {k * config.heads}, "
    f"{count(policy.module)} -> {count(module)} parameters; wrote {args.out}"
)
