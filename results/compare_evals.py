"""One plot of several ``ecrl-eval`` evaluations: success vs number of objects, train and held-out parts.

Reads each folder's ``eval.json`` (e.g. the same weights with and without a setting, evaluated on
the same seeds), prints a markdown table of successes per N and writes the PNG given by ``--out``.

    python results/compare_evals.py results/diffusion_push3/longest results/diffusion_push3/focus2 \\
        --labels "all objects" "focus=2" --train-n 3 --out results/diffusion_push3/focus_vs_all.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ecrl.reporting import markdown_table, plot_success_vs_n

COLOURS = ("tab:grey", "tab:blue", "tab:orange", "tab:green")
PARTS = {"train": ("train part", "-", "o"), "test": ("held out", "--", "s")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("evals", nargs="+", type=Path, help="folders with an eval.json")
    parser.add_argument("--labels", nargs="+", required=True, help="a name per folder")
    parser.add_argument("--train-n", nargs="*", type=int, default=[], help="numbers of objects trained on (shaded)")
    parser.add_argument("--title", default="the same weights, 50 episodes per point")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = parser.parse_args()
    if len(args.labels) != len(args.evals):
        parser.error(f"{len(args.evals)} folders but {len(args.labels)} labels")
    series, styles, table = {}, {}, {}
    for k, (label, folder) in enumerate(zip(args.labels, args.evals, strict=True)):
        results = json.loads((folder / "eval.json").read_text())["results"]
        for part, (name, line, marker) in PARTS.items():
            rows = sorted((r for r in results if r["part"] == part), key=lambda r: r["n_objects"])
            if not rows:
                continue
            key = f"{label}, {name}"
            series[key] = rows
            styles[key] = {"color": COLOURS[k % len(COLOURS)], "linestyle": line, "marker": marker}
            for r in rows:
                table.setdefault(r["n_objects"], {})[key] = f"{r['successes']}/{r['episodes']}"
    plot_success_vs_n(series, args.out, title=args.title, styles=styles, train_n=args.train_n)
    print(markdown_table(["N", *series], [[n, *(row.get(s, "–") for s in series)] for n, row in sorted(table.items())]))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
