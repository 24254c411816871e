"""Why deterministic acting fails: how many failed episodes end with the pusher standing still.

With ``fixed_noise`` a plan is a deterministic function of the observation, so a planner that
plans to stand still sees the same state next step, plans the same, and stands still for good; an
RL actor's deterministic action has the same trap. This runs a policy on the same episodes (a
diffusion planner twice, with fixed and with fresh noise) and, for every failed episode, counts the
steps at its end during which the pusher moved less than 1 mm per step.

    python results/diffusion_push3/stand_still.py results/diffusion_push3/flat/policy --objects 3 6

Prints a table and writes ``stand_still.json`` beside this script (or to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

import ecrl  # noqa: E402
from ecrl.envs.layout import ENTITY_FIELDS  # noqa: E402

STILL_M = 1e-3  # a step that moves the pusher less than this is "still"
LONG = 100  # failed episodes whose final still stretch is at least this long count as stuck

_AGENT, _XY = ENTITY_FIELDS["is_agent"].start, ENTITY_FIELDS["position"].start


def final_still_run(agent_xy: np.ndarray) -> np.ndarray:
    """``agent_xy: (T, B, 2)`` → ``(B,)`` steps at the end of each episode with movement below ``STILL_M``."""
    moving = np.linalg.norm(np.diff(agent_xy, axis=0), axis=-1) >= STILL_M  # (T-1, B)
    last = np.where(moving.any(0), moving.shape[0] - 1 - np.argmax(moving[::-1], axis=0), -1)
    return moving.shape[0] - 1 - last


def run(policy, n: int, episodes: int, seed: int, split: str, part: str) -> dict:
    envs = [gym.make("ecrl/Push-v0", n_objects=n, goal="positions", split=split, part=part) for _ in range(episodes)]
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    policy.reset()
    horizon = envs[0].unwrapped.spec_.max_steps
    success, path = np.zeros(episodes, bool), []
    for _ in tqdm(range(horizon), desc=f"N={n}", leave=False):
        rows = np.stack([o["observation"] for o in obs])
        path.append(rows[np.arange(episodes), np.argmax(rows[..., _AGENT], axis=1), _XY : _XY + 2])
        actions = policy.act({k: np.stack([o[k] for o in obs]) for k in obs[0]})
        for i, env in enumerate(envs):
            obs[i], _, _, _, info = env.step(actions[i])
            success[i] = info["is_success"]
    still = final_still_run(np.stack(path))[~success]
    return {
        "n_objects": n,
        "episodes": episodes,
        "successes": int(success.sum()),
        "failures": int((~success).sum()),
        f"failures_still_last_{LONG}_steps": int((still >= LONG).sum()),
        "failures_final_still_steps": sorted(still.tolist()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("policy", help="a saved flat diffusion planner")
    parser.add_argument("--objects", type=int, nargs="+", default=[3, 6])
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--seed", type=int, default=100_000)
    parser.add_argument("--split", default="colour_shape")
    parser.add_argument("--part", default="train")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("stand_still.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = ecrl.load(args.policy)
    start, rows = time.perf_counter(), []
    modes = {"fixed": True, "fresh": False} if "fixed_noise" in base.kwargs else {"deterministic": None}
    for mode, fixed in modes.items():
        policy = base if fixed is None else base.with_options(fixed_noise=fixed)
        for n in args.objects:
            rows.append({"mode": mode, **run(policy, n, args.episodes, args.seed, args.split, args.part)})
    print(f"| acting | N | success | failures | failures still for the last {LONG}+ steps |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        still = r[f"failures_still_last_{LONG}_steps"]
        print(f"| {r['mode']} | {r['n_objects']} | {r['successes']}/{r['episodes']} | {r['failures']} | {still} |")
    settings = {k: v for k, v in vars(args).items() if k != "out"} | {"still_m": STILL_M}
    report = {"settings": settings, "wall_s": time.perf_counter() - start, "rows": rows}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
