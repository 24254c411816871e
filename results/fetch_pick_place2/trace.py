"""What a Fetch pick-and-place policy's failed episodes look like, target by target.

For each episode (seeds ``--seed`` ...), over every object (no focus, no selection), this script
rolls the policy out to the task's horizon and classifies each target that is not filled at the end:

- ``never_lifted``: the object nearest to it at the end never rose 2 cm above its resting height;
- ``never_reached``: it was lifted, but never came within the success radius of the target;
- ``lost``: it was within the radius at some step and is not at the end;
- and for each such target the final distance, so that near misses (within 1.5 radii) show.

Usage::

    python results/fetch_pick_place2/trace.py <policy> --objects 2 --episodes 50 --options guidance=1.0 \
        --out results/fetch_pick_place2/<run>/trace_n2.json
    python results/fetch_pick_place2/trace.py <policy> --skill stack --split skill_shape --part train --objects 3 \
        --episodes 50 --out results/fetch_skill_shape/<run>/trace_stack3.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np

import ecrl
from ecrl.envs import FETCH_SKILL_IDS
from ecrl.envs.layout import ENTITY_FIELDS, GOAL_FIELDS
from ecrl.rollout import episode_horizon
from ecrl.scripts.eval import with_policy_options

_POS, _SIZE, _GPOS = ENTITY_FIELDS["position"], ENTITY_FIELDS["size"], GOAL_FIELDS["position"]


def trace(policy, n: int, seed: int, skill: str, split: str | None = None, part: str = "train") -> dict:
    env = gym.make(FETCH_SKILL_IDS[skill], n_objects=n, split=split, part=part)
    obs, _ = env.reset(seed=seed)
    base, horizon = env.unwrapped, episode_horizon(env)
    policy.reset()
    rest = obs["observation"][1 : 1 + n, _SIZE.start + 2].copy()
    lifted = np.zeros(n, bool)
    reached = np.zeros(n, bool)
    for _ in range(horizon):
        obs, _, terminated, truncated, info = env.step(policy.act(obs))
        z = obs["observation"][1 : 1 + n, _POS.start + 2]
        lifted |= z > rest + 0.02
        reached |= base._dist <= base.distance_threshold  # per target, matched object within the radius
        if terminated or truncated:
            break
    final = base._dist.copy()
    objects = obs["observation"][1 : 1 + n, _POS]
    targets = obs["desired_goal"][:n, _GPOS]
    # the object nearest to each target at the end stands for it (ties between interchangeable objects aside)
    nearest = np.linalg.norm(objects[None] - targets[:, None], axis=-1).argmin(1)
    kinds = []
    for t in range(n):
        if final[t] <= base.distance_threshold:
            kinds.append("placed")
        elif reached[t]:
            kinds.append("lost")
        elif not lifted[nearest[t]]:
            kinds.append("never_lifted")
        else:
            kinds.append("never_reached")
    env.close()
    return {
        "seed": seed,
        "success": bool(info["is_success"]),
        "kinds": kinds,
        "final_distance": final.round(4).tolist(),
        "in_air_target": (targets[:, 2] > rest.max() + 0.01).tolist(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("policy")
    ap.add_argument("--objects", type=int, default=2)
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=100_000)
    ap.add_argument("--skill", default="pick_place")
    ap.add_argument("--split", default=None, help="a Fetch split preset (e.g. skill_shape); default: random objects")
    ap.add_argument("--part", default="train", choices=("train", "test"))
    ap.add_argument("--options", nargs="*", default=[], help="policy options, key=value")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    policy = with_policy_options(ecrl.load(args.policy), args.options)
    episodes = [
        trace(policy, args.objects, args.seed + k, args.skill, args.split, args.part) for k in range(args.episodes)
    ]
    kinds = Counter(k for e in episodes for k in e["kinds"])
    radius = gym.make(FETCH_SKILL_IDS[args.skill], n_objects=args.objects).unwrapped.distance_threshold
    near = sum(
        1
        for e in episodes
        for k, d in zip(e["kinds"], e["final_distance"], strict=True)
        if k != "placed" and d <= 1.5 * radius
    )
    summary = {
        "policy": args.policy,
        "objects": args.objects,
        "skill": args.skill,
        "split": args.split,
        "part": args.part,
        "episodes": args.episodes,
        "successes": sum(e["success"] for e in episodes),
        "targets": dict(kinds),
        "unfilled_within_1.5_radii": near,
    }
    print(json.dumps(summary))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "episodes": episodes}, indent=1) + "\n")


if __name__ == "__main__":
    main()
