"""How planners fail on push: the fate of every object of every episode, from the env's state.

Each policy runs ``--episodes`` episodes at ``--objects`` N (seeds from ``--seed``, the full horizon, as
``ecrl-eval`` runs them). Per object it records the distance to its target at every step and sorts the
object into one of:

- ``placed``: within the success distance at the end;
- ``knocked off``: within it at some step, not at the end;
- ``pushed, never placed``: moved, never within it (and, of these, ``ended farther``: farther from its
  target at the end than at the start);
- ``never moved``.

A policy from pixels (``meta["pixels"]``) gets envs rendering its cameras, as in ``ecrl-eval``. The table
(objects per category, as a share of all objects, and for the failed episodes only) is printed as
markdown and written with the per-episode numbers to ``--out`` (JSON).

    python results/pixels_push2/failures.py results/diffusion_push2/policy results/pixels_push2/agent/policy \
        --labels state agent --out results/pixels_push2/failures.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import ecrl
from ecrl.envs.layout import ENTITY_FIELDS, ENTITY_XY, GOAL_POSITION
from ecrl.eval_configs import push_configs
from ecrl.reporting import markdown_table
from ecrl.rollout import Recorder, Step, rollout

CATEGORIES = ("placed", "knocked off", "pushed, never placed", "never moved")
MOVED = 0.005
"""Metres an object must travel from its start to count as moved."""


class _Distances(Recorder):
    """Per env: each object's xy and its target's xy at every step (episode start included)."""

    def __init__(self, count: int) -> None:
        self.objects: list[list[np.ndarray]] = [[] for _ in range(count)]
        self.targets: list[np.ndarray | None] = [None] * count

    def _keep(self, i: int, obs) -> None:
        rows = obs["observation"]
        objects = rows[rows[:, ENTITY_FIELDS["is_object"].start] > 0.5]
        self.objects[i].append(objects[:, ENTITY_XY].copy())
        if self.targets[i] is None:
            self.targets[i] = obs["desired_goal"][: len(objects), GOAL_POSITION][:, :2].copy()

    def start(self, i, seed, obs, info) -> None:
        self._keep(i, obs)

    def step(self, s: Step) -> None:
        self._keep(s.env, s.next_obs)


def fates(d: np.ndarray, travel: np.ndarray, threshold: float) -> list[str]:
    """The category of each object from its ``(T, N)`` distances to its target and ``(N,)`` largest travel."""
    out = []
    for n in range(d.shape[1]):
        if d[-1, n] <= threshold:
            out.append("placed")
        elif d[:, n].min() <= threshold:
            out.append("knocked off")
        elif travel[n] > MOVED:
            out.append("pushed, never placed" + (" (ended farther)" if d[-1, n] > d[0, n] else ""))
        else:
            out.append("never moved")
    return out


def run(path: str, n: int, episodes: int, seed: int) -> dict:
    policy = ecrl.load(path)
    config = push_configs([n], "positions", None, ["train"], None, policy.meta.get("pixels"))[0]
    envs = [gym.make(config.env_id, **config.env_kwargs) for _ in range(episodes)]
    threshold = envs[0].unwrapped.distance_threshold
    record = _Distances(episodes)
    rollout(envs, policy, range(seed, seed + episodes), recorder=record)
    episodes_out = []
    for i in range(episodes):
        objects = np.stack(record.objects[i])  # (T, N, 2)
        d = np.linalg.norm(objects - record.targets[i], axis=-1)  # (T, N)
        travel = np.linalg.norm(objects - objects[0], axis=-1).max(0)
        cm = lambda x: (x * 100).round(1).tolist()  # noqa: E731
        episodes_out.append(
            {
                "seed": seed + i,
                "fates": fates(d, travel, threshold),
                "start_cm": cm(d[0]),
                "closest_cm": cm(d.min(0)),
                "end_cm": cm(d[-1]),
            }
        )
    for env in envs:
        env.close()
    return {"policy": path, "n_objects": n, "threshold_m": threshold, "episodes": episodes_out}


def summary(result: dict) -> dict:
    eps = result["episodes"]
    failed = [e for e in eps if any(f != "placed" for f in e["fates"])]

    def shares(group: list[dict]) -> dict[str, float]:
        fates_ = [f for e in group for f in e["fates"]]
        row = {c: sum(f.startswith(c) for f in fates_) / max(len(fates_), 1) for c in CATEGORIES}
        row["ended farther"] = sum(f.endswith("(ended farther)") for f in fates_) / max(len(fates_), 1)
        return row

    def of(fate: str, key: str) -> np.ndarray:
        return np.array([v for e in eps for f, v in zip(e["fates"], e[key], strict=True) if f.startswith(fate)])

    never, knocked = of("pushed, never placed", "closest_cm"), of("knocked off", "end_cm")
    return {
        "successes": len(eps) - len(failed),
        "episodes": len(eps),
        "all": shares(eps),
        "failed": shares(failed),
        # pushed, never placed: how near they came; knocked off: how far they ended
        "never_placed_closest_cm_median": float(np.median(never)) if len(never) else None,
        "never_placed_within_8cm": float((never < 8).mean()) if len(never) else None,
        "knocked_off_end_cm_median": float(np.median(knocked)) if len(knocked) else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("policies", nargs="+")
    parser.add_argument("--labels", nargs="+")
    parser.add_argument("--objects", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=100000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    labels = args.labels or args.policies
    if len(labels) != len(args.policies):
        parser.error(f"{len(args.policies)} policies need as many --labels, got {len(labels)}")
    torch.set_num_threads(args.threads)
    results = {}
    for label, path in zip(labels, args.policies, strict=True):
        results[label] = run(path, args.objects, args.episodes, args.seed)
        results[label]["summary"] = summary(results[label])
        print(label, json.dumps(results[label]["summary"]), flush=True)
    columns = (*CATEGORIES, "ended farther")
    rows = []
    for label, r in results.items():
        s = r["summary"]
        rows.append([label, f"all ({s['successes']}/{s['episodes']} solved)", *(f"{s['all'][c]:.0%}" for c in columns)])
        rows.append([label, "failed episodes", *(f"{s['failed'][c]:.0%}" for c in columns)])
    print(markdown_table(["policy", "episodes", *columns], rows, "ll" + "r" * len(columns)))
    args.out.write_text(json.dumps({"command": vars(args) | {"out": str(args.out)}, "results": results}, indent=1))


if __name__ == "__main__":
    main()
