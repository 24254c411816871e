"""`ecrl-bench policies`: how fast the RL policies train and act on a CPU.

The measurement (and what it times, how) is :mod:`ecrl.policies.bench`; this module checks its targets and
writes its tables, plot and README.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ecrl.policies.bench import PoliciesBenchConfig, measure
from ecrl.reporting import markdown_table, report_header, targets_table

__all__ = ["FIGURE", "check_targets", "measure", "plot", "tables", "write_readme"]


def check_targets(args: PoliciesBenchConfig, result: dict[str, Any]) -> list[dict[str, Any]]:
    """PASS/FAIL per target (each needs the models it compares)."""
    updates = {r["model"]: r for r in result["updates"]}
    latency = {r["model"]: r for r in result["latency"]}
    targets = []
    if "eit" in updates and "mlp" in updates:
        ratio = updates["eit"][f"vs_mlp_{args.reduce}"]
        targets.append(
            {
                "target": f"EIT SAC updates/s >= {args.min_update_ratio:.2f} x the MLP's ({args.reduce} of {args.repeats})",
                "value": f"{ratio:.3f}x",
                "pass": ratio >= args.min_update_ratio,
            }
        )
    if "eit" in latency:
        ms = latency["eit"]["median_ms"]
        targets.append(
            {
                "target": f"EIT actor latency, batch 1, N={args.latency_n}: median <= {args.max_latency_ms:g} ms",
                "value": f"{ms:.3f} ms",
                "pass": ms <= args.max_latency_ms,
            }
        )
    return targets


# ---------------------------------------------------------------------------------------- outputs
def tables(result: dict[str, Any]) -> str:
    """Markdown tables: updates/s, actor latency, targets."""
    has_ratio = any("vs_mlp_best" in r for r in result["updates"])
    header = ["network", "parameters (actor + critic)", "updates/s (best)", "updates/s (median)"]
    header += ["vs MLP (best)", "vs MLP (median)"] if has_ratio else []
    rows = []
    for r in result["updates"]:
        row = [r["label"], f"{r['params']:,}", f"{r['updates_per_s_best']:.1f}", f"{r['updates_per_s_median']:.1f}"]
        row += [f"{r['vs_mlp_best']:.3f}x", f"{r['vs_mlp_median']:.3f}x"] if has_ratio else []
        rows.append(row)
    parts = [markdown_table(header, rows)]
    lat = result["latency"]
    if lat:
        header = [f"actor, batch 1, N={lat[0]['n_objects']}", "median ms", "p90 ms", "min ms"]
        rows = [[r["label"], f"{r['median_ms']:.3f}", f"{r['p90_ms']:.3f}", f"{r['min_ms']:.3f}"] for r in lat]
        parts.append(markdown_table(header, rows))
    if result["targets"]:
        parts.append(targets_table(result["targets"]))
    return "\n\n".join(parts)


def plot(result: dict[str, Any], args: PoliciesBenchConfig, path: Path) -> None:
    """Updates/s per network (with the target line) and actor latency per network."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(8.5, 3.4), dpi=120)
    updates = result["updates"]
    names = [r["model"] for r in updates]
    x = np.arange(len(names))
    left.bar(x - 0.2, [r["updates_per_s_best"] for r in updates], 0.4, label="best")
    left.bar(x + 0.2, [r["updates_per_s_median"] for r in updates], 0.4, label="median")
    mlp = next((r for r in updates if r["model"] == "mlp"), None)
    if mlp is not None:
        left.axhline(
            mlp[f"updates_per_s_{args.reduce}"] * args.min_update_ratio, color="k", ls=":", label="target (EIT)"
        )
    left.set(
        xticks=x,
        xticklabels=names,
        ylabel="SAC updates / s",
        title=f"batch {args.batch_size}, N={args.n_objects}, {result['threads']} thread(s)",
    )
    left.legend(fontsize=8)
    lat = result["latency"]
    x = np.arange(len(lat))
    right.bar(x - 0.2, [r["median_ms"] for r in lat], 0.4, label="median")
    right.bar(x + 0.2, [r["p90_ms"] for r in lat], 0.4, label="p90")
    right.axhline(args.max_latency_ms, color="k", ls=":", label="target (EIT)")
    right.set(
        xticks=x,
        xticklabels=[r["model"] for r in lat],
        ylabel="ms per call",
        title=f"actor latency, batch 1, N={args.latency_n}",
    )
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_readme(path: Path, command: str, args: PoliciesBenchConfig, result: dict[str, Any]) -> None:
    m, net = result["machine"], args.net_config("eit")
    lines = [
        *report_header("Policy speed", command),
        f"SAC + HerReplayBuffer on `ecrl/Push-v0` with {args.n_objects} objects, batch {args.batch_size}: "
        f"`model.train(gradient_steps={args.gradient_steps})` timed {args.repeats} times per network, the networks "
        f"taking turns. EIT: width {net.width}, {net.heads} head(s), {net.blocks} block(s) before and after the "
        f"cross-attention, MLP ratio {net.mlp_ratio}; DeepSets: width {net.width}; flat MLP: net_arch "
        f"{list(args.net_arch)}. Actor latency: one `ecrl/Push-v0` observation with {args.latency_n} objects per "
        f"call under `torch.inference_mode()`, {result['latency'][0]['calls'] if result['latency'] else 0} calls "
        f"per actor. Targets use the {args.reduce} repeat. torch {m['torch']} on {result['threads']} thread(s); "
        f"machine: {m['cpus']} CPUs ({m['processor']}).",
        "",
        tables(result),
        "",
        "![updates/s and latency](speed.png)",
    ]
    path.write_text("\n".join(lines) + "\n")


FIGURE = "speed.png"
