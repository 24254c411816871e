"""Do the planner's failures come with objects that look alike?

The planner finds each object's target by attending from the object to the goal rows by their
attributes (colour, shape, size). With more objects on the table, more pairs share an attribute, and
an object can be pushed to a look-alike's target. This reads an evaluation's ``eval.json``, rebuilds
every episode's objects from its seed (no rollouts), and compares successes with failures by how many
object pairs share colour and shape (they differ in size alone), share exactly one of the two, or
share neither.

    python results/diffusion_push3/binding.py results/diffusion_push3/longest/eval.json --objects 6 8

Prints a table and writes ``binding.json`` beside this script (or to ``--out``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import ecrl.envs  # noqa: E402, F401  (registers ecrl/Push-v0)
from ecrl.reporting import markdown_table  # noqa: E402


def pair_counts(objects) -> tuple[int, int, int]:
    """``(colour and shape, exactly one of them, neither)``: object pairs sharing those attributes."""
    both = one = neither = 0
    for a, b in itertools.combinations(objects, 2):
        same = (a.colour == b.colour) + (a.shape == b.shape)
        both, one, neither = both + (same == 2), one + (same == 1), neither + (same == 0)
    return both, one, neither


def analyse(result: dict, goal: str, split: str | None) -> dict:
    n, part, per = result["n_objects"], result["part"], result["per_episode"]
    env = gym.make("ecrl/Push-v0", n_objects=n, goal=goal, split=split, part=part)
    counts, success = [], np.array(per["success"], bool)
    for seed in per["seeds"]:
        env.reset(seed=int(seed))
        counts.append(pair_counts(env.unwrapped.spec_.objects))
    env.close()
    counts = np.array(counts, float)
    twin = counts[:, 0] > 0
    row = {"part": part, "n_objects": n, "episodes": len(success), "successes": int(success.sum())}
    for name, keep in (("success", success), ("failure", ~success)):
        row[f"{name}_episodes"] = int(keep.sum())
        for j, what in enumerate(("both", "one", "neither")):
            row[f"{name}_pairs_sharing_{what}"] = float(counts[keep, j].mean()) if keep.any() else None
    for name, keep in (("with_twin", twin), ("without_twin", ~twin)):
        row[f"episodes_{name}"] = int(keep.sum())
        row[f"success_rate_{name}"] = float(success[keep].mean()) if keep.any() else None
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("eval_json", type=Path, help="an ecrl-eval eval.json with per-episode results")
    parser.add_argument("--objects", type=int, nargs="+", default=[6, 8])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("binding.json"))
    args = parser.parse_args()
    data = json.loads(args.eval_json.read_text())
    settings = data["settings"]
    goal, split = settings.get("goal") or "positions", settings.get("split")
    rows = [analyse(r, goal, split) for r in data["results"] if r["n_objects"] in args.objects]
    if not rows:
        raise SystemExit(f"{args.eval_json} has no results for N in {args.objects}")
    pairs = lambda r, k: " / ".join(f"{r[f'{k}_pairs_sharing_{w}']:.2f}" for w in ("both", "one", "neither"))  # noqa: E731
    rate = lambda r, k: (
        "–" if r[f"success_rate_{k}"] is None else f"{r[f'success_rate_{k}']:.2f} ({r[f'episodes_{k}']})"
    )  # noqa: E731
    header = ["part", "N", "success", "pairs sharing colour+shape / one / neither: successes", "failures"]
    header += ["success with a colour+shape twin (episodes)", "without"]
    table = [
        [r["part"], r["n_objects"], f"{r['successes']}/{r['episodes']}", pairs(r, "success"), pairs(r, "failure")]
        + [rate(r, "with_twin"), rate(r, "without_twin")]
        for r in rows
    ]
    print(markdown_table(header, table, align="lrrllrr"))
    args.out.write_text(
        json.dumps({"eval_json": str(args.eval_json), "goal": goal, "split": split, "rows": rows}, indent=2)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
