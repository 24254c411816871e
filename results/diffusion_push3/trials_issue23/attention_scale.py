"""``ecrl-eval`` with a denoiser's attention logits scaled by ``(log keys / log reference keys) ** SCALE_POW``.

An inference-only trial (SSMax-like): queries are multiplied by that factor, so attention over more
tokens than in training is sharpened and at the training size nothing changes. Every attention runs
through the plain path (``FAST_PATH_MIN_ROWS`` raised), the same function as the fast path.
Environment: ``SCALE_KINDS`` (comma-separated: ``goal`` for the entity-goal attention, ``self`` for the
blocks' attention; ``none`` for neither), ``SCALE_POW`` (default 1), ``REF_GOAL`` / ``REF_SELF`` (the
keys at N = 3: 3 goals; 4 entities x 5 steps + 4 actions + 3 goals = 27).
"""

import math
import os
import sys

import torch
from einops import rearrange

import ecrl.attention as A
from ecrl.diffusion import denoiser as D

A.FAST_PATH_MIN_ROWS = 10**12
KIND = {}
orig_init = D.EntityDenoiser.__init__


def init(self, *a, **k):
    orig_init(self, *a, **k)
    KIND[id(self.entity_goals.attention)] = "goal"
    for b in self.blocks:
        KIND[id(b.attention)] = "self"


D.EntityDenoiser.__init__ = init
REF = {"goal": float(os.environ.get("REF_GOAL", 3)), "self": float(os.environ.get("REF_SELF", 27))}
ON = set(os.environ.get("SCALE_KINDS", "goal,self").split(","))
POW = float(os.environ.get("SCALE_POW", 1.0))


def forward(self, x, context, mask=None):
    q = rearrange(self.q(x), "... n (h c) -> ... h n c", h=self.heads)
    k, v = rearrange(self.kv(context), "... m (two h c) -> two ... h m c", two=2, h=self.heads)
    kind = KIND.get(id(self))
    if kind in ON:
        m = context.shape[-2]
        n = mask.sum(-1).float() if mask is not None else torch.full(q.shape[:1], float(m))
        f = (torch.log(n.clamp(min=2)) / math.log(REF[kind])) ** POW
        q = q * f.view(-1, 1, 1, 1)
    return self.out(rearrange(A._attend(q, k, v, mask), "... h n c -> ... n (h c)"))


A.MultiHeadAttention.forward = forward

if __name__ == "__main__":
    from ecrl.scripts.eval import main

    main(sys.argv[1:])
