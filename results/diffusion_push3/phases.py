"""What fails at N = 6 over every object (issue 23): which objects end unplaced, and in which phase.

Runs a policy on the evaluation's episodes (the same seeds as ``ecrl-eval``) through the library's rollout
and records, every step, which targets have an object on them (the env's own matching of interchangeable
objects) and how far the pusher moved. For every episode it reports:

- *knocked off*: times a target that had its object lost it again (a placed object pushed away);
- *never reached*: targets still empty at the end that were never filled during the episode;
- *lost*: targets empty at the end that had been filled before (knocked off and not put back);
- *last progress*: the last step at which the number of filled targets rose;
- *still at the end*: steps at the end with the pusher moving less than 1 mm per step.

    python results/diffusion_push3/phases.py results/diffusion_push3/longest/policy --objects 6 --episodes 50

Prints a table and writes ``phases.json`` beside this script (or to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import ecrl  # noqa: E402
from ecrl.envs import goals  # noqa: E402
from ecrl.envs.layout import ENTITY_FIELDS, GOAL_POSITION, SUCCESS_DISTANCE  # noqa: E402
from ecrl.evaluation import EVAL_SEED  # noqa: E402
from ecrl.rollout import Recorder, Step, rollout  # noqa: E402

STILL_M = 1e-3
_AGENT, _XY = ENTITY_FIELDS["is_agent"].start, ENTITY_FIELDS["position"].start


def filled(achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
    """``(M,)`` bool: target ``j`` has an object within the success distance (interchangeable objects matched)."""
    same = goals.same_group(desired[None], by_colour=False)
    dist = goals.assigned_distances(achieved[None, :, GOAL_POSITION], desired[None, :, GOAL_POSITION], same)[0]
    return dist <= SUCCESS_DISTANCE


class Phases(Recorder):
    """Per env: the filled targets and the pusher's position after every step."""

    def __init__(self) -> None:
        self.filled: dict[int, list[np.ndarray]] = {}
        self.pusher: dict[int, list[np.ndarray]] = {}

    def start(self, i, seed, obs, info) -> None:
        self.filled[i] = [filled(obs["achieved_goal"], obs["desired_goal"])]
        self.pusher[i] = [_pusher(obs)]

    def step(self, step: Step) -> None:
        self.filled[step.env].append(filled(step.next_obs["achieved_goal"], step.next_obs["desired_goal"]))
        self.pusher[step.env].append(_pusher(step.next_obs))


def _pusher(obs) -> np.ndarray:
    rows = obs["observation"]
    return rows[np.argmax(rows[:, _AGENT]), _XY : _XY + 2].copy()


def episode_phases(filled_steps: np.ndarray, pusher: np.ndarray) -> dict:
    """The numbers of the module docstring for one episode: ``filled_steps (T+1, M)``, ``pusher (T+1, 2)``."""
    count = filled_steps.sum(1)
    lost_now = filled_steps[:-1] & ~filled_steps[1:]
    end, ever = filled_steps[-1], filled_steps.any(0)
    rises = np.flatnonzero(np.diff(count) > 0)
    moving = np.linalg.norm(np.diff(pusher, axis=0), axis=-1) >= STILL_M
    still = int(np.argmax(moving[::-1])) if moving.any() else len(moving)  # steps after the last move
    return {
        "success": bool(end.all()),
        "filled_at_end": int(end.sum()),
        "knocked_off": int(lost_now.sum()),
        "never_reached": int((~ever).sum()),
        "lost": int((ever & ~end).sum()),
        "last_progress": int(rises[-1] + 1) if len(rises) else 0,
        "still_at_end": int(still),
        "steps": len(filled_steps) - 1,
    }


def run(path: str, n: int, episodes: int, split: str, part: str) -> list[dict]:
    policy = ecrl.load(path)
    envs = [gym.make("ecrl/Push-v0", n_objects=n, goal="positions", split=split, part=part) for _ in range(episodes)]
    recorder = Phases()
    rollout(envs, policy, [EVAL_SEED + i for i in range(episodes)], recorder=recorder)
    return [episode_phases(np.stack(recorder.filled[i]), np.stack(recorder.pusher[i])) for i in range(episodes)]


def summary(rows: list[dict]) -> dict:
    out = {}
    for label, group in (
        ("successes", [r for r in rows if r["success"]]),
        ("failures", [r for r in rows if not r["success"]]),
    ):
        if group:
            keys = ("filled_at_end", "knocked_off", "never_reached", "lost", "last_progress", "still_at_end")
            out[label] = {"episodes": len(group), **{k: float(np.mean([r[k] for r in group])) for k in keys}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("policy")
    parser.add_argument("--objects", type=int, nargs="+", default=[6])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--split", default="colour_shape")
    parser.add_argument("--parts", nargs="+", default=["train", "test"])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("phases.json"))
    args = parser.parse_args()
    result = {"policy": args.policy, "split": args.split, "seed": EVAL_SEED, "runs": []}
    print("| part | N | episodes | filled at end | knocked off | never reached | lost | last progress | still at end |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for part in args.parts:
        for n in args.objects:
            rows = run(args.policy, n, args.episodes, args.split, part)
            result["runs"].append({"part": part, "n_objects": n, "episodes": rows, "summary": summary(rows)})
            for label, s in summary(rows).items():
                print(
                    f"| {part} | {n} | {s['episodes']} {label} | {s['filled_at_end']:.2f} | {s['knocked_off']:.2f} | "
                    f"{s['never_reached']:.2f} | {s['lost']:.2f} | {s['last_progress']:.0f} | {s['still_at_end']:.0f} |"
                )
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
