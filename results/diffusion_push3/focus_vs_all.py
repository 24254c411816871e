"""One plot of the same planner planning over every object (``longest/``) and over two (``focus2/``).

Reads the two evaluations' ``eval.json`` (same weights, same episodes: seeds 100000 …) and writes
``focus_vs_all.png`` beside this script, with the train and held-out parts of each.

    python results/diffusion_push3/focus_vs_all.py
"""

from __future__ import annotations

import json
from pathlib import Path

from ecrl.reporting import markdown_table, plot_success_vs_n

HERE = Path(__file__).parent
RUNS = {"all objects": HERE / "longest", "focus=2": HERE / "focus2"}
COLOURS = {"all objects": "tab:grey", "focus=2": "tab:blue"}


def main() -> None:
    series, styles, table = {}, {}, {}
    for label, folder in RUNS.items():
        results = json.loads((folder / "eval.json").read_text())["results"]
        for part, line in (("train", "-"), ("test", "--")):
            rows = sorted((r for r in results if r["part"] == part), key=lambda r: r["n_objects"])
            name = f"{label}, {'train part' if part == 'train' else 'held out'}"
            series[name] = rows
            styles[name] = {"color": COLOURS[label], "linestyle": line, "marker": "o" if part == "train" else "s"}
            for r in rows:
                table.setdefault(r["n_objects"], {})[name] = f"{r['successes']}/{r['episodes']}"
    plot_success_vs_n(
        series,
        HERE / "focus_vs_all.png",
        title="push-3 planner, same weights: over every object vs focus=2 (50 episodes per point)",
        styles=styles,
        train_n=(3,),
    )
    print(markdown_table(["N", *series], [[n, *(row.get(s, "–") for s in series)] for n, row in sorted(table.items())]))
    print(f"wrote {HERE / 'focus_vs_all.png'}")


if __name__ == "__main__":
    main()
