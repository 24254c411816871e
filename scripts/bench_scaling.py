"""`ecrl-bench scaling`: diffusion training windows/s, evaluation and collection env steps/s, 1 vs K processes.

The measurement (what runs, how it is timed, what is checked) is :mod:`ecrl.scaling`; this module checks
its targets and writes its tables, plot and README.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ecrl.reporting import markdown_table, report_header, targets_table
from ecrl.scaling import ScalingBenchConfig, measure

__all__ = ["FIGURE", "JSON_NAME", "check_targets", "measure", "plot", "tables", "write_readme"]


ROWS = (
    ("training", "diffusion training", "windows/s"),
    ("evaluation", "evaluation (`ecrl-eval --workers`)", "env steps/s"),
    ("collection", "collection (`ecrl-collect --workers`)", "env steps/s"),
)


def check_targets(args: ScalingBenchConfig, result: dict[str, Any]) -> list[dict[str, Any]]:
    """PASS/FAIL: training, evaluation and collection with 2 processes at least ``args.target`` times one (K = 2 only)."""
    if args.processes != 2:
        return []
    rows = [(f"{ROWS[0][1]} (batch {r['batch']})", r) for r in result["training"]]
    rows += [(label, result[key]) for key, label, _ in ROWS[1:]]
    ceiling = result["ceiling"]["ratio"]
    return [
        {
            "target": f"{label} with 2 processes >= {args.target:g}x one",
            "value": f"{r['ratio']:.2f}x (machine ceiling {ceiling:.2f}x)",
            "pass": r["ratio"] >= args.target,
        }
        for label, r in rows
    ]


def tables(result: dict[str, Any]) -> str:
    """Markdown tables: rates with 1 and K processes, their ratio and its share of the machine's ceiling."""
    k, ceiling = result["processes"], result["ceiling"]
    rows = [
        [
            "machine (busy loop)",
            "iterations/s",
            f"{ceiling['one']:,.0f}",
            f"{ceiling['many']:,.0f}",
            f"{ceiling['ratio']:.2f}",
            "1.00",
        ]
    ]
    named = [(f"{ROWS[0][1]}, batch {r['batch']}", ROWS[0][2], r) for r in result["training"]]
    named += [(label, unit, result[key]) for key, label, unit in ROWS[1:]]
    for label, unit, r in named:
        rows.append(
            [label, unit, f"{r['one']:,.0f}", f"{r['many']:,.0f}", f"{r['ratio']:.2f}", f"{r['share_of_ceiling']:.2f}"]
        )
    train = markdown_table(
        [
            "global batch",
            "1 process",
            f"1 process, {k} threads",
            f"{k} processes (torchrun)",
            f"{k} separate runs of batch / {k}",
        ],
        [
            [
                r["batch"],
                f"{r['one']:,.0f}",
                f"{r['one_threads']:,.0f} ({r['ratio_threads']:.2f}×)",
                f"{r['many']:,.0f} ({r['ratio']:.2f}×)",
                f"{r['independent']:,.0f} ({r['ratio_independent']:.2f}×)",
            ]
            for r in result["training"]
        ],
    )
    lines = [
        markdown_table(["work", "unit", "1 process", f"{k} processes", "ratio", "ratio / machine ceiling"], rows),
        "Diffusion training, windows/s (× one process of one thread). The separate runs do not communicate: "
        "the most data parallelism could reach at that per-process batch on this machine.\n\n" + train,
    ]
    if result.get("targets"):
        lines.append(targets_table(result["targets"]))
    return "\n\n".join(lines)


def plot(result: dict[str, Any], args: ScalingBenchConfig, path: Path) -> None:
    """Bars: the ratio of K processes to one for the machine, training, evaluation and collection."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = result["training"]
    labels = ["machine", *(f"training\nbatch {r['batch']}" for r in train), "evaluation", "collection"]
    ratios = [result["ceiling"]["ratio"], *(r["ratio"] for r in train), *(result[k]["ratio"] for k, _, _ in ROWS[1:])]
    fig, ax = plt.subplots(figsize=(6, 3.4), dpi=120)
    ax.bar(labels, ratios, color=["0.6", *["C0"] * len(train), "C1", "C2"])
    ax.axhline(1.0, color="k", lw=0.8)
    if args.processes == 2:
        ax.axhline(args.target, color="C3", ls="--", lw=1, label=f"target {args.target:g}×")
        ax.legend(fontsize=8)
    ax.set(ylabel=f"{args.processes} processes / 1 process")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_readme(path: Path, command: str, args: ScalingBenchConfig, result: dict[str, Any]) -> None:
    m = result["machine"]
    lines = [
        *report_header(f"Scaling: 1 vs {args.processes} processes", command),
        f"Training: `ecrl-train-diffusion` on {args.train_episodes} expert episodes of push-{args.train_n_objects}, "
        f"{args.train_windows:,} windows per run at each global batch, the rate of the second half; "
        f"{args.processes} processes under `torchrun` (gloo), one thread each. Evaluation and collection: the "
        f"scripted expert on push-{args.n_objects}, {args.eval_episodes} episodes (collection in batches of "
        f"{args.collect_batch}), the whole call timed, with results checked equal to one process's. The machine "
        f"row is a pure-Python loop: the parallel CPU the machine gave during the run (another user's job takes "
        f"its share). torch {m['torch']}; machine: {m['cpus']} CPUs ({m['processor']}).",
        "",
        tables(result),
        "",
        f"![ratios]({FIGURE})",
    ]
    path.write_text("\n".join(lines) + "\n")


FIGURE = "scaling.png"
JSON_NAME = "bench_scaling.json"
