"""Gather the shape × goal-kind evaluations of this folder into one table, JSON and plot.

Every ``<stage>/<goal>/eval.json`` here is one ``ecrl-eval`` run (N = 3; both parts of the
``shape_goal`` split for ``sort`` and ``ordered``, the train part for ``positions`` and ``adjacent``,
which have no held-out combination); ``focus1`` is stage 3's weights planning with ``focus=1``. This prints the markdown table of the README and writes
``summary.json`` and ``splits.png`` beside this script.

    python results/diffusion_shape_goal/from_push3/summarize.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ecrl.reporting import markdown_table  # noqa: E402

HERE = Path(__file__).parent
STAGES = ("zero_shot", "stage1", "stage2", "stage3", "stage4", "focus1")
GOALS = ("sort", "ordered", "positions", "adjacent")
TICKS = {"focus1": "stage3,\nfocus=1"}
HELD_OUT = {"sort": "spheres sorted", "ordered": "cylinders ordered"}


def load() -> dict:
    summary: dict = {}
    for stage in STAGES:
        for goal in GOALS:
            path = HERE / stage / goal / "eval.json"
            if not path.exists():
                continue
            for r in json.loads(path.read_text())["results"]:
                summary.setdefault(stage, {}).setdefault(goal, {})[r["part"]] = {
                    "successes": r["successes"],
                    "episodes": r["episodes"],
                    "success_rate": r["success_rate"],
                    "success_ci95": r["success_ci95"],
                }
    if not summary:
        raise SystemExit(f"no <stage>/<goal>/eval.json under {HERE}")
    return summary


def cell(entry: dict | None) -> str:
    return "–" if entry is None else f"{entry['successes']}/{entry['episodes']}"


def main() -> None:
    summary = load()
    stages = [s for s in STAGES if s in summary]
    rows = []
    for goal in GOALS:
        for part in ("train", "test"):
            entries = [summary[s].get(goal, {}).get(part) for s in stages]
            if any(e is not None for e in entries):
                label = f"held out ({HELD_OUT[goal]})" if part == "test" else "train"
                rows.append([goal, label, *(cell(e) for e in entries)])
    print(markdown_table(["goal", "part", *stages], rows, align="ll" + "r" * len(stages)))
    (HERE / "summary.json").write_text(json.dumps(summary, indent=2))

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, goal in zip(axes, ("sort", "ordered"), strict=True):
        for k, part in enumerate(("train", "test")):
            xs = [i + (k - 0.5) * 0.38 for i in range(len(stages))]
            entries = [summary[s].get(goal, {}).get(part) for s in stages]
            rates = [float("nan") if e is None else e["success_rate"] for e in entries]
            lo = [0.0 if e is None else e["success_rate"] - e["success_ci95"][0] for e in entries]
            hi = [0.0 if e is None else e["success_ci95"][1] - e["success_rate"] for e in entries]
            ax.bar(xs, rates, 0.38, yerr=[lo, hi], capsize=3, label="train part" if part == "train" else "held out")
        ax.set_xticks(range(len(stages)), [TICKS.get(s, s.replace("_", " ")) for s in stages], fontsize=8)
        ax.set_title(f"{goal} (held out: {HELD_OUT[goal]})")
        ax.set_ylim(0, 1.05)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("success at N = 3 (95% CI)")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "splits.png", dpi=110)
    print(f"wrote {HERE / 'summary.json'} and {HERE / 'splits.png'}")


if __name__ == "__main__":
    main()
