"""Success at N = 2 of the push-2 planners by number of demonstrations, training seed and width (``more_demos.png``).

Reads the ``eval/eval.json`` of each run folder here and of the committed planners it is compared with.

    python results/pixels_push2/more_demos/plot.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
RUNS = {
    "state, 1k, seed 0 (committed)": HERE.parents[1] / "diffusion_push2" / "eval",
    "state, 1k, seed 0 (again)": HERE / "state1k_repro" / "eval",
    "state, 1k, seed 1": HERE / "state1k_s1" / "eval",
    "state, 3k, seed 0": HERE / "state3k" / "eval",
    "state, 3k, seed 1": HERE / "state3k_s1" / "eval",
    "state, 1k, seed 0, width 64": HERE / "state1k_w64" / "eval",
    "pixels (agent/), 1k, seed 0": HERE.parent / "agent" / "eval",
}


def success_at_2(folder: Path) -> tuple[int, int]:
    for row in json.loads((folder / "eval.json").read_text())["results"]:
        if row["n_objects"] == 2:
            return row["successes"], row["episodes"]
    raise ValueError(f"{folder} has no evaluation at N = 2")


def main() -> None:
    labels, values = [], []
    for label, folder in RUNS.items():
        if (folder / "eval.json").exists():
            solved, episodes = success_at_2(folder)
            labels.append(f"{label}: {solved}/{episodes}")
            values.append(solved / episodes)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    colours = [
        "tab:blue" if "1k" in label and "state" in label else "tab:orange" if "state" in label else "tab:green"
        for label in labels
    ]
    ax.barh(labels[::-1], values[::-1], color=colours[::-1])
    ax.set(xlim=(0, 1), xlabel="success at N = 2 (50 episodes, seeds 100000 …)", title="push-2 planners, 45k steps")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(HERE / "more_demos.png", dpi=120)
    print("\n".join(labels))


if __name__ == "__main__":
    main()
