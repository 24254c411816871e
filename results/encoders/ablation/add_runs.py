"""Add training runs' held-out evaluations to ablation.json and redraw ablation.png.

    python results/encoders/ablation/add_runs.py LABEL=RUN_DIR [LABEL=RUN_DIR ...]

Each run's options are read from its ``config.json`` and its evaluations (FG-ARI, position error,
reconstruction error every ``--eval-every`` steps) from its ``tb/progress.csv``. With no arguments it
only redraws the plot from ablation.json.
"""

import csv
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
table = json.loads((HERE / "ablation.json").read_text())
for argument in sys.argv[1:]:
    label, _, run = argument.partition("=")
    if not run or not (Path(run) / "tb" / "progress.csv").exists():
        sys.exit(f"expected LABEL=RUN_DIR with RUN_DIR/tb/progress.csv, got {argument!r}")
    options = json.loads((Path(run) / "config.json").read_text()).get("options", [])
    with open(Path(run) / "tb" / "progress.csv") as f:
        evals = [
            {
                "step": int(row["train/gradient_steps"]),
                "fg_ari": round(float(row["eval/fg_ari"]), 4),
                "position_cm": round(float(row["eval/position_cm"]), 2),
                "recon_mse": round(float(row["eval/recon_mse"]), 5),
            }
            for row in csv.DictReader(f)
        ]
    table[label] = {"options": " ".join(options), "evals": evals}
(HERE / "ablation.json").write_text(json.dumps(table, indent=1) + "\n")

fig, axes = plt.subplots(1, 2, figsize=(11, 4))
colours = plt.get_cmap("tab20").colors
for i, (label, run) in enumerate(table.items()):
    steps = [e["step"] for e in run["evals"]]
    style = (
        {"lw": 2.5, "color": "black"} if label.startswith("baseline") else {"marker": "o", "ms": 3, "color": colours[i]}
    )
    axes[0].plot(steps, [e["fg_ari"] for e in run["evals"]], label=label, **style)
    axes[1].plot(steps, [e["position_cm"] for e in run["evals"]], label=label, **style)
axes[0].axhline(0.9, ls="--", color="grey")
axes[1].axhline(1.0, ls="--", color="grey")
axes[0].set(xlabel="training step", ylabel="held-out FG-ARI", title="decomposition (target 0.9)")
axes[1].set(xlabel="training step", ylabel="position error, cm", title="position probe (target 1 cm)")
axes[1].legend(fontsize=7, ncol=2)
fig.tight_layout()
fig.savefig(HERE / "ablation.png", dpi=110)
print(f"{len(table)} runs in {HERE / 'ablation.json'}; plot {HERE / 'ablation.png'}")
