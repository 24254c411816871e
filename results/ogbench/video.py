"""A rollout video of a planner trained on cube-double, zero-shot on more cubes (OGBench's front camera).

Runs ``episodes`` episodes of one OGBench task with N cubes from ``--seed`` (a batch, as ``ecrl-eval``
runs them) and writes the first one as ``rollout_n<N>_task<K>.gif`` beside this script, every
``--every``-th step, with whether it succeeded.

    python results/ogbench/video.py results/ogbench/placements/policy --n 3 --task 1 --seed 100000
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import ecrl  # noqa: E402
from ecrl.evaluation import evaluate  # noqa: E402

HERE = Path(__file__).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy", type=Path)
    parser.add_argument("--n", type=int, default=3, help="cubes (OGBench's sizes 1, 2, 3, 4, 8)")
    parser.add_argument("--task", type=int, default=1, help="OGBench's evaluation task, 1 … 5")
    parser.add_argument("--seed", type=int, default=100_000, help="seed of the recorded episode")
    parser.add_argument("--episodes", type=int, default=1, help="episodes run side by side (the first is recorded)")
    parser.add_argument("--every", type=int, default=4, help="keep every k-th step")
    args = parser.parse_args()
    out = HERE / "videos"
    report = evaluate(
        ecrl.load(args.policy),
        [args.n],
        env="ogbench-cube",
        tasks=[args.task],
        episodes=args.episodes,
        seed=args.seed,
        video_dir=out,
        video_every=args.every,
        progress=False,
    )
    result = report.results[0]
    gif = out / f"rollout_n{args.n}_task{args.task}.gif"
    (out / f"{result.part}_n{args.n}.gif").rename(gif)
    record = {"policy": str(args.policy), "n_cubes": args.n, "task": args.task, "task_name": result.task_name}
    record |= {"seed": args.seed, "success": bool(result.success[0]), "length": int(result.lengths[0])}
    (out / f"rollout_n{args.n}_task{args.task}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"{gif}: {record}")


if __name__ == "__main__":
    main()
