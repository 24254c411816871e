"""Roll out the Fetch scripted expert over skills × numbers of objects and report how often it succeeds.

`ecrl.envs.FetchExpert` solves the Fetch arm's push, pick_place and stack tasks from privileged
state. This script measures its success on fixed evaluation seeds (episode `e` resets with seed
`seed + e`, far from training seeds) and writes, to `--out`:

- `expert.json`: every number, the arguments and the command that produced them;
- `README.md`: a table per (skill, goal kind, N) with 95% Wilson intervals and the targets of issue 22,
  and how many solved episodes are still solved 40 expert steps later (the last object let go, the
  gripper risen: a tower that falls then shows here).

Examples:
    # the issue's points: push and pick_place at N = 1, 2, 3, 6, towers of 3 and 4 (about 2 minutes on one core)
    ecrl-fetch-expert

    # one skill, other goal kinds
    ecrl-fetch-expert --skills pick_place --goals sort adjacent --n-objects 2 4 --out /tmp/fetch_expert
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import tyro

from ecrl.envs import FETCH_IDS, SKILLS, FetchExpert
from ecrl.envs.task import SKILL_GOALS
from ecrl.reporting import markdown_table, provenance, report_header, wilson_interval

TARGETS = {("push", 1): 0.95, ("push", 2): 0.95, ("push", 3): 0.95, ("push", 6): 0.9}
TARGETS |= {("pick_place", n): t for (_, n), t in TARGETS.items()} | {("stack", 3): 0.9, ("stack", 4): 0.8}
"""Issue 22's success targets per (skill, N)."""
SETTLE_STEPS = 40
"""Expert steps run on after a success (it releases the last object and rises) before checking it again."""


@dataclass(frozen=True)
class Args:
    """Fetch scripted-expert rollouts: success rate per skill, goal kind and number of objects."""

    skills: tuple[str, ...] = SKILLS
    """Skills to evaluate (push, pick_place, stack)."""
    goals: tuple[str, ...] = ("positions",)
    """Goal kinds to evaluate (those that make no sense for a skill are skipped)."""
    n_objects: tuple[int, ...] = (1, 2, 3, 6)
    """Numbers of objects for push and pick_place."""
    tower_heights: tuple[int, ...] = (3, 4)
    """Numbers of objects for stack."""
    episodes: int = 20
    """Episodes per point."""
    seed: int = 10_000
    """Episode `e` of every point resets with seed `seed + e`."""
    out: Path = Path("results/fetch_expert")
    """Output directory (created if missing)."""


def run_point(skill: str, goal: str, n: int, episodes: int, seed: int) -> dict[str, Any]:
    """Success, fraction placed and length of ``episodes`` expert episodes of one (skill, goal, N)."""
    env = gym.make(FETCH_IDS[SKILLS.index(skill)], n_objects=n, goal=goal)
    success, placed, lengths, failed, lost = [], [], [], [], []
    for e in range(episodes):
        obs, info = env.reset(seed=seed + e)
        expert = FetchExpert(env, seed=seed + e)
        for t in range(env.unwrapped.spec_.max_steps):  # noqa: B007 (t is the length below)
            obs, _, terminated, truncated, info = env.step(expert.act(obs))
            if info["is_success"] or terminated or truncated:
                break
        success.append(info["is_success"])
        placed.append(info["fraction_placed"])
        lengths.append(t + 1)
        if not info["is_success"]:
            failed.append(seed + e)
            continue
        for _ in range(SETTLE_STEPS):  # the expert lets go and backs off: does the scene stay solved?
            obs, _, _, _, info = env.step(expert.act(obs))
        if not info["is_success"]:
            lost.append(seed + e)
    env.close()
    k = int(sum(success))
    lo, hi = wilson_interval(k, episodes)
    return {
        "skill": skill,
        "goal": goal,
        "n_objects": n,
        "episodes": episodes,
        "successes": k,
        "success_rate": k / episodes,
        "ci95": [lo, hi],
        "fraction_placed": float(np.mean(placed)),
        "mean_length": float(np.mean(lengths)),
        "failed_seeds": failed,
        "still_solved_after": {"steps": SETTLE_STEPS, "episodes": k - len(lost), "lost_seeds": lost},
        "target": TARGETS.get((skill, n)) if goal == "positions" else None,
    }


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(Args, args=argv)
    command = shlex.join(["ecrl-fetch-expert", *(sys.argv[1:] if argv is None else argv)])
    start = time.perf_counter()
    points = []
    for skill in args.skills:
        for goal in (g for g in args.goals if g in SKILL_GOALS[skill]):
            for n in args.tower_heights if skill == "stack" else args.n_objects:
                points.append(run_point(skill, goal, n, args.episodes, args.seed))
                p = points[-1]
                print(
                    f"{skill:10s} {goal:9s} N={n}: {p['successes']}/{p['episodes']} (failed seeds {p['failed_seeds']})"
                )
    rows = [
        (
            p["skill"],
            p["goal"],
            p["n_objects"],
            f"{p['successes']}/{p['episodes']}",
            f"[{p['ci95'][0]:.2f}, {p['ci95'][1]:.2f}]",
            f"{p['fraction_placed']:.2f}",
            f"{p['mean_length']:.0f}",
            f"{p['still_solved_after']['episodes']}/{p['successes']}",
            "–"
            if p["target"] is None
            else f"≥ {p['target']:.0%}: {'met' if p['success_rate'] >= p['target'] else 'NOT met'}",
        )
        for p in points
    ]
    header = (
        "skill",
        "goal",
        "N",
        "success",
        "95% CI",
        "placed",
        "steps",
        f"still solved {SETTLE_STEPS} steps on",
        "target",
    )
    table = markdown_table(header, rows, align="llrrrrrrl")
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"args": asdict(args) | {"out": str(args.out)}, "command": command, "points": points}
    record |= {"wall_s": time.perf_counter() - start, "provenance": provenance()}
    (args.out / "expert.json").write_text(json.dumps(record, indent=2))
    lines = report_header("Fetch scripted expert", command)
    lines += [f"Episode `e` resets with seed `{args.seed} + e`; success is `info['is_success']` before truncation.", ""]
    (args.out / "README.md").write_text("\n".join([*lines, table, ""]))
    print(table)


if __name__ == "__main__":
    main()
