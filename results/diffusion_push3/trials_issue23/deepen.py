"""Save a deeper copy of a saved flat planner that computes the same function (issue 23, session 15).

The copy has ``blocks`` transformer blocks: the saved ones first, then fresh adaLN-Zero blocks, which
start as the identity (their modulation is zero). Fine-tuning the copy (``ecrl-train-diffusion
--init-from <copy> --denoiser.blocks <blocks> …``) then asks whether depth, at the cost of fine-tuning only,
helps the planner. Usage::

    python results/diffusion_push3/trials_issue23/deepen.py results/diffusion_push3/placed/policy /tmp/deep4 4
"""

from __future__ import annotations

import argparse
import copy

import torch

import ecrl
from ecrl import checkpoint
from ecrl.policy import Policy

parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
parser.add_argument("source", help="a saved flat planner")
parser.add_argument("out", help="where to save the deeper copy")
parser.add_argument("blocks", type=int, help="transformer blocks of the copy (at least the source's)")
args = parser.parse_args()

policy = ecrl.load(args.source)
torch.manual_seed(0)  # the fresh blocks' inner weights (their output is gated to zero at the start)
kwargs = copy.deepcopy(policy.kwargs)
have = kwargs["denoiser"]["blocks"]
if args.blocks < have:
    raise SystemExit(f"the copy needs at least the source's {have} blocks, got {args.blocks}")
kwargs["denoiser"]["blocks"] = args.blocks
module = checkpoint.build(policy.builder, kwargs)
result = module.load_state_dict(policy.module.state_dict(), strict=False)
fresh = [k for k in result.missing_keys if ".blocks." in k and int(k.split(".blocks.")[1].split(".")[0]) >= have]
if result.unexpected_keys or len(fresh) != len(result.missing_keys):
    raise SystemExit(f"not a block-for-block copy: unexpected {result.unexpected_keys}, missing {result.missing_keys}")
Policy(module, policy.action_low, policy.action_high, policy.meta, policy.builder, kwargs).save(args.out)
count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
print(f"{have} -> {args.blocks} blocks, {count(policy.module)} -> {count(module)} parameters; wrote {args.out}")
