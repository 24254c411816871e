"""How the trained state planner copes when its input is corrupted the way the particle encoder's tokens are.

Usage (from the repository root)::

    python results/pixels_push2/state_corruption.py

The push-2 state planner of ``results/diffusion_push2`` (80% at N = 2 over 50 episodes) is evaluated at N = 2
with its observation rows corrupted before every planning call; the env itself is untouched. The corruptions
mimic what ``token_dynamics.py`` and ``keypoint_error.py`` measured of the pixel planners' tokens:

- ``noise``: Gaussian noise of ``--noise-cm`` on the pusher's and the objects' ``x, y`` (the lifted keypoints are
  about 1 cm from the things);
- ``drop``: each object row hidden (``present = 0``) with probability ``--drop`` per step (a token covers an
  object in 84-89% of states);
- ``merge``: an object whose centre is within 7 cm of the pusher's hidden with probability ``--merge`` per step
  (the object being pushed shares the pusher's particle in 40-58% of those frames);
- ``all``: the three together.

If the state planner itself fails under these, the pixel planners' gap is the entities they are given,
not how fast they learn. Prints and writes ``--out`` (default ``state_corruption.json`` beside this file).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

import ecrl
from ecrl.envs.layout import ENTITY_FIELDS, ENTITY_XY
from ecrl.evaluation import evaluate

PRESENT = ENTITY_FIELDS["present"].start
IS_AGENT = ENTITY_FIELDS["is_agent"].start


class Corrupted:
    """The planner behind a corruption of its observation rows (``kind``: noise, drop, merge, all, none)."""

    def __init__(self, policy: Any, kind: str, noise: float, drop: float, merge: float, seed: int) -> None:
        self.policy, self.kind = policy, kind
        self.noise, self.drop, self.merge = noise, drop, merge
        self.rng = np.random.default_rng(seed)
        self.meta = policy.meta

    def reset(self, *args: Any) -> None:
        self.policy.reset(*args)

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        rows = np.array(obs["observation"], dtype=np.float32, copy=True)  # (B, N, D)
        agent = rows[..., IS_AGENT] > 0.5
        real = rows[..., PRESENT] > 0.5
        objects = real & ~agent
        if self.kind in ("noise", "all"):
            rows[..., ENTITY_XY] += self.rng.normal(0, self.noise, rows[..., ENTITY_XY].shape) * real[..., None]
        hide = np.zeros_like(objects)
        if self.kind in ("drop", "all"):
            hide |= objects & (self.rng.random(objects.shape) < self.drop)
        if self.kind in ("merge", "all"):
            pusher = obs["observation"][np.arange(len(rows)), agent.argmax(1)][:, ENTITY_XY]
            near = np.linalg.norm(np.asarray(obs["observation"])[..., ENTITY_XY] - pusher[:, None], axis=-1) < 0.07
            hide |= objects & near & (self.rng.random(objects.shape) < self.merge)
        rows[hide, PRESENT] = 0.0
        return self.policy.act({**obs, "observation": rows})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, default=Path("results/diffusion_push2/policy"))
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--n-objects", type=int, default=2)
    parser.add_argument("--noise-cm", type=float, default=1.0)
    parser.add_argument("--drop", type=float, default=0.15)
    parser.add_argument("--merge", type=float, default=0.5)
    parser.add_argument("--kinds", nargs="+", default=["none", "noise", "drop", "merge", "all"])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "state_corruption.json")
    args = parser.parse_args()
    report = {k: v for k, v in vars(args).items() if k not in ("out", "policy")} | {"policy": str(args.policy)}
    report["results"] = {}
    for kind in args.kinds:
        policy = Corrupted(ecrl.load(args.policy), kind, args.noise_cm / 100, args.drop, args.merge, seed=0)
        result = evaluate(policy, [args.n_objects], episodes=args.episodes, progress=False).results[0]
        success = np.asarray(result.success)
        placed = float(np.mean(result.fraction_placed))
        report["results"][kind] = {"success": int(success.sum()), "episodes": len(success), "fraction_placed": placed}
        print(
            f"{kind:>6}: {int(success.sum())}/{len(success)} at N = {args.n_objects}, placed {placed:.2f}", flush=True
        )
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
