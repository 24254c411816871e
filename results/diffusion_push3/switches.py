"""Does the planner stay with one object until it is placed, as the expert does? (issue 23)

Runs policies on the same episodes and records, every step, which object moved most (more than
0.5 mm; ``-`` when none did) and which objects sit on their targets (the env's matching of
interchangeable objects). A *segment* is a run of steps moving the same object; a *switch* is the
start of a segment on another object while the previous one is still off its target (work left
unfinished). The scripted expert keeps working on one object until it is placed; its switches come
from nudging an object it passes and from setting a wedged object aside.

    python results/diffusion_push3/switches.py expert results/diffusion_push3/longest/policy --objects 3 6

Prints a table and writes ``switches.json`` beside this script (or to ``--out``), with each
episode's step-by-step string of moved objects (digit: an object off its target, letter: on it).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from scipy.optimize import linear_sum_assignment  # noqa: E402

import ecrl  # noqa: E402
from ecrl.envs import goals  # noqa: E402
from ecrl.envs.layout import ENTITY_FIELDS, GOAL_POSITION, SUCCESS_DISTANCE  # noqa: E402
from ecrl.reporting import markdown_table  # noqa: E402
from ecrl.rollout import ExpertPolicy, Recorder, Step, rollout  # noqa: E402

MOVED_M = 5e-4
"""An object moved in a step when its centre travelled more than this (m)."""
TUNING_SEED = 300_000
"""The inference sweep's tuning seeds, away from the reported evaluations (100000 …)."""
_OBJECT, _XY = ENTITY_FIELDS["is_object"].start, ENTITY_FIELDS["position"].start


def on_target(obs: dict) -> np.ndarray:
    """``(N,)`` bool: object ``i`` is within the success distance of the target matched to it."""
    desired, achieved = obs["desired_goal"], obs["achieved_goal"]
    allowed = goals.same_group(desired[None], by_colour=False)[0] | np.eye(len(desired), dtype=bool)
    cost = np.linalg.norm(achieved[:, None, GOAL_POSITION] - desired[None, :, GOAL_POSITION], axis=-1)
    objects, targets = linear_sum_assignment(np.where(allowed, cost, 1e6))  # goal row j was drawn for object j
    return cost[objects, targets] <= SUCCESS_DISTANCE


class Moves(Recorder):
    """Per env: the objects' positions and which are on target, after every step."""

    def __init__(self) -> None:
        self.xy: dict[int, list[np.ndarray]] = {}
        self.placed: dict[int, list[np.ndarray]] = {}

    def start(self, i, seed, obs, info) -> None:
        self.xy[i], self.placed[i] = [_objects(obs)], [on_target(obs)]

    def step(self, step: Step) -> None:
        self.xy[step.env].append(_objects(step.next_obs))
        self.placed[step.env].append(on_target(step.next_obs))


def _objects(obs: dict) -> np.ndarray:
    rows = obs["observation"]
    return rows[rows[:, _OBJECT] > 0.5, _XY : _XY + 2].copy()


def episode_switches(xy: np.ndarray, placed: np.ndarray) -> dict:
    """Segments, switches and the moved-object string of one episode: ``xy (T+1, N, 2)``, ``placed (T+1, N)``."""
    moved = np.linalg.norm(np.diff(xy, axis=0), axis=-1)  # (T, N)
    which = np.where(moved.max(1) > MOVED_M, moved.argmax(1), -1)
    trace, segments, switches, last = [], 0, 0, -1
    for t, k in enumerate(which):
        if k < 0:
            trace.append("-")
            continue
        trace.append(chr(ord("a") + k) if placed[t, k] else str(k))
        if k != last:
            segments += 1
            switches += last >= 0 and not placed[t, last]
            last = k
    return {"success": bool(placed[-1].all()), "segments": segments, "switches": int(switches), "trace": "".join(trace)}


def run(path: str, n: int, episodes: int, seed: int, split: str, part: str) -> list[dict]:
    policy = ExpertPolicy() if path == "expert" else ecrl.load(path)
    envs = [gym.make("ecrl/Push-v0", n_objects=n, goal="positions", split=split, part=part) for _ in range(episodes)]
    recorder = Moves()
    rollout(envs, policy, [seed + i for i in range(episodes)], recorder=recorder)
    return [episode_switches(np.stack(recorder.xy[i]), np.stack(recorder.placed[i])) for i in range(episodes)]


def summary(rows: list[dict]) -> dict:
    out = {"episodes": len(rows), "solved": sum(r["success"] for r in rows)}
    for label, group in (("all", rows), ("successes", [r for r in rows if r["success"]])):
        group = group or [{"segments": np.nan, "switches": np.nan}]
        out[label] = {k: float(np.mean([r[k] for r in group])) for k in ("segments", "switches")}
    failures = [r for r in rows if not r["success"]]
    out["failures"] = {
        k: float(np.mean([r[k] for r in failures])) if failures else None for k in ("segments", "switches")
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("policies", nargs="+", help="checkpoints, or `expert` for the scripted expert")
    parser.add_argument("--objects", type=int, nargs="+", default=[3, 6])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--seed", type=int, default=TUNING_SEED)
    parser.add_argument("--split", default="colour_shape")
    parser.add_argument("--part", default="train")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("switches.json"))
    args = parser.parse_args()
    result = {"seed": args.seed, "split": args.split, "part": args.part, "runs": []}
    table = []
    fmt = lambda v: "–" if v is None or np.isnan(v) else f"{v:.1f}"  # noqa: E731
    for path in args.policies:
        for n in args.objects:
            rows = run(path, n, args.episodes, args.seed, args.split, args.part)
            s = summary(rows)
            result["runs"].append({"policy": path, "n_objects": n, "summary": s, "episodes": rows})
            table.append(
                [path, n, f"{s['solved']}/{s['episodes']}", fmt(s["all"]["segments"]), fmt(s["all"]["switches"])]
                + [fmt(s["successes"]["switches"]), fmt(s["failures"]["switches"])]
            )
            print(table[-1], flush=True)
    header = ["policy", "N", "success", "segments", "switches", "switches (successes)", "switches (failures)"]
    print("\n" + markdown_table(header, table))
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
