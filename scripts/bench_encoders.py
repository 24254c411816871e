"""`ecrl-bench encoders`: how well and how fast object-centric encoders turn camera frames into entities.

The measurement (and what it measures, how) is :mod:`ecrl.encoders.bench`; this module checks its targets
and writes its tables, plot and README (the decomposition pictures are written by the measurement).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ecrl.encoders.bench import EncodersBenchConfig, decomposition_file, measure
from ecrl.reporting import markdown_table, report_header, targets_table

__all__ = ["FIGURE", "check_targets", "measure", "plot", "tables", "write_readme"]


def check_targets(args: EncodersBenchConfig, result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = result["encoders"]
    targets = []
    if result["trained"]:
        best_ari = max(rows, key=lambda r: r["fg_ari"])
        best_cm = min(rows, key=lambda r: r["position_cm"])
        targets += [
            {
                "target": f"FG-ARI of the best encoder >= {args.min_ari:g}",
                "value": f"{best_ari['fg_ari']:.3f} ({best_ari['label']})",
                "pass": best_ari["fg_ari"] >= args.min_ari,
            },
            {
                "target": f"position error of the best encoder <= {args.max_cm:g} cm",
                "value": f"{best_cm['position_cm']:.2f} cm ({best_cm['label']})",
                "pass": best_cm["position_cm"] <= args.max_cm,
            },
        ]
    for r in rows:
        targets.append(
            {
                "target": f"{r['label']}: encoding >= {args.min_rate:g} images/s ({result['threads']} thread(s))",
                "value": f"{r['encode_images_per_s']:.0f} images/s",
                "pass": r["encode_images_per_s"] >= args.min_rate,
            }
        )
    return targets


def tables(result: dict[str, Any]) -> str:
    rows = result["encoders"]
    header = ["encoder", "entities/view", "params", "encode images/s", "vs render"]
    body = [
        [
            r["label"],
            r["entities_per_view"],
            f"{r['parameters']:,}",
            f"{r['encode_images_per_s']:.0f}",
            f"{r['encode_vs_render']:.2f}×",
        ]
        for r in rows
    ]
    if result["trained"]:
        header += ["FG-ARI", *[f"FG-ARI {c}" for c in result["cameras"]], "FG-ARI touching / apart (share touching)"]
        header += ["FG-ARI objects only", "agent keypoint px", "position cm (mean / median)", "recon MSE"]
        for line, r in zip(body, rows, strict=True):
            line += [f"{r['fg_ari']:.3f}", *[f"{r[f'fg_ari_{c}']:.3f}" for c in result["cameras"]]]
            line += [f"{r['fg_ari_touching']:.3f} / {r['fg_ari_apart']:.3f} ({r['touching_share']:.0%})"]
            line += [f"{r['fg_ari_objects']:.3f}", "–" if math.isnan(r["agent_px"]) else f"{r['agent_px']:.2f}"]
            line += [f"{r['position_cm']:.2f} / {r['position_median_cm']:.2f}", f"{r['recon_mse']:.5f}"]
    parts = [markdown_table(header, body)]
    if result["trained"]:
        ns = sorted({int(n) for r in rows for n in r["per_n"]})
        per_n = [
            [r["label"], *[f"{r['per_n'][str(n)]['fg_ari']:.3f} / {r['per_n'][str(n)]['position_cm']:.2f}" for n in ns]]
            for r in rows
        ]
        parts.append(
            "FG-ARI / position error (cm) by number of objects in the scene:\n\n"
            + markdown_table(["encoder", *[f"N={n}" for n in ns]], per_n)
        )
    parts.append(targets_table(result["targets"]))
    return "\n\n".join(parts)


def plot(result: dict[str, Any], args: EncodersBenchConfig, path: Path) -> None:
    """FG-ARI and position error vs number of objects per encoder (trained), and encode images/s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["encoders"]
    panels = 3 if result["trained"] else 1
    fig, axes = plt.subplots(1, panels, figsize=(3.6 * panels, 3.3), dpi=120, squeeze=False)
    axes = axes[0]
    if result["trained"]:
        for r in rows:
            ns = sorted(int(n) for n in r["per_n"])
            axes[0].plot(ns, [r["per_n"][str(n)]["fg_ari"] for n in ns], "o-", label=r["label"])
            axes[1].plot(ns, [r["per_n"][str(n)]["position_cm"] for n in ns], "o-", label=r["label"])
        axes[0].axhline(args.min_ari, color="k", ls=":", label="target")
        axes[1].axhline(args.max_cm, color="k", ls=":", label="target")
        axes[0].set(xlabel="objects in the scene", ylabel="FG-ARI (held-out)", ylim=(0, 1.02))
        axes[1].set(xlabel="objects in the scene", ylabel="position error, cm", ylim=(0, None))
        for ax in axes[:2]:
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
    ax = axes[-1]
    x = np.arange(len(rows))
    ax.bar(x, [r["encode_images_per_s"] for r in rows], 0.6, label="encode")
    ax.axhline(rows[0]["render_images_per_s"], color="tab:gray", ls="--", label="MuJoCo render (reference)")
    ax.axhline(args.min_rate, color="k", ls=":", label="target")
    ax.set(
        xticks=x,
        xticklabels=[r["label"] for r in rows],
        ylabel="camera images / s",
        title=f"{result['threads']} thread(s)",
    )
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_readme(path: Path, command: str, args: EncodersBenchConfig, result: dict[str, Any]) -> None:
    m = result["machine"]
    how = (
        f"Scored on {result['encoders'][0].get('scored_frames')} held-out frames of `{args.test_dataset}` "
        f"({' + '.join(result['cameras'])} cameras, {result['image_size']} px); the position probe (an MLP on the "
        f"matched entity rows of every camera) is fitted on {args.fit_frames} frames of `{args.fit_dataset}`. "
        if result["trained"]
        else "Fresh (untrained) encoders: speed only. "
    )
    lines = [
        *report_header("Object-centric encoders: decomposition, positions, speed", command),
        how
        + f"Encoding: `encode` (no decoder), batch {args.batch} samples × {len(result['cameras'])} cameras, best of "
        f"{args.repeats}; reference: MuJoCo rendering of the same number of images in the same process. torch "
        f"{m['torch']} on {result['threads']} thread(s); machine: {m['cpus']} CPUs, shared with other jobs.",
        "",
        tables(result),
        "",
        f"![FG-ARI, position error and encoding speed]({FIGURE})",
    ]
    for r in result["encoders"] if result["trained"] else []:
        lines += [
            "",
            f"**{r['label']}** on held-out frames; per row one camera image: input, reconstruction, decomposition "
            "(each pixel coloured by the entity with the largest alpha, dimmed where little is explained), entity positions:",
            "",
            f"![{r['label']} decomposition]({decomposition_file(r['label'])})",
        ]
    path.write_text("\n".join(lines) + "\n")


FIGURE = "encoders.png"
