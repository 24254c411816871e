"""Gather the OGBench cube evaluations of this folder into one table, JSON and plot beside the published baselines.

Every ``<model>/eval_n<N>/eval.json`` here is one ``ecrl-eval`` run of a planner trained on cube-double
play data, on OGBench's five evaluation tasks with N cubes (``--objects N``). This prints the markdown
tables of the README (overall success per model and N; per task) and writes ``summary.json`` and
``success_vs_cubes.png`` beside this script.

    python results/ogbench/summarize.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ecrl.reporting import markdown_table  # noqa: E402

HERE = Path(__file__).parent
SIZES = (2, 3, 4, 8)
NAMES = {2: "double", 3: "triple", 4: "quadruple", 8: "octuple"}
PUBLISHED = {  # OGBench's paper, success % over the five tasks, each method trained on its own size's play data
    "GCBC": {2: 1, 3: 1, 4: 0},
    "GCIVL": {2: 36, 3: 1, 4: 0},
    "GCIQL": {2: 40, 3: 3, 4: 0},
    "QRL": {2: 1, 3: 0, 4: 0},
    "CRL": {2: 10, 3: 4, 4: 0},
    "HIQL": {2: 6, 3: 3, 4: 0},
}
TARGETS = {2: 40, 3: 20, 4: 5}


def load() -> dict:
    """``{model: {N: {"overall": …, "tasks": [...], "policy_steps": …}}}`` from every ``eval.json`` here."""
    summary: dict = {}
    for path in sorted(HERE.glob("*/eval_n*/eval.json")):
        report = json.loads(path.read_text())
        model = path.parent.parent.name
        for overall in report.get("overall", []):
            n = overall["n_objects"]
            tasks = [
                {k: r[k] for k in ("part", "task_name", "episodes", "successes", "success_rate", "success_ci95")}
                for r in report["results"]
                if r["n_objects"] == n
            ]
            steps = report["policy"].get("steps")
            summary.setdefault(model, {})[n] = {"overall": overall, "tasks": tasks, "gradient_steps": steps}
    return summary


def pct(x: float) -> str:
    return f"{100 * x:.0f}"


def tables(summary: dict) -> str:
    header = ["model", "gradient steps"] + [f"cube-{NAMES[n]} (N = {n})" for n in SIZES]
    rows = []
    for model, by_n in summary.items():
        steps = next(iter(by_n.values()))["gradient_steps"]
        cells = []
        for n in SIZES:
            if n not in by_n:
                cells.append("–")
                continue
            o = by_n[n]["overall"]
            lo, hi = o["success_ci95"]
            cells.append(f"**{pct(o['success_rate'])}** [{pct(lo)}, {pct(hi)}] ({o['episodes']} ep.)")
        rows.append([f"`{model}`", f"{steps:,}" if steps else "?", *cells])
    for method, by_n in PUBLISHED.items():
        rows.append([f"{method} (published, own size's data)", "1M", *[str(by_n.get(n, "–")) for n in SIZES]])
    out = [markdown_table(header, rows), ""]
    for model, by_n in summary.items():
        task_rows = []
        for n in sorted(by_n):
            for t in by_n[n]["tasks"]:
                lo, hi = t["success_ci95"]
                name = t.get("task_name") or t["part"]
                cell = f"{t['successes']}/{t['episodes']} [{pct(lo)}, {pct(hi)}]"
                task_rows.append([n, name, cell])
        out += [
            f"Per task, `{model}` (successes, 95% Wilson interval in %):",
            "",
            markdown_table(["N", "task", "success"], task_rows),
            "",
        ]
    return "\n".join(out)


def seeds(summary: dict) -> dict:
    """``{recipe: {N: {"seeds": {model: rate}, "mean": …, "sd": …, "pooled": …}}}`` over the training seeds of a
    recipe: the models ``<recipe>`` (seed 0) and ``<recipe>_s<k>`` (seed k), at each N every seed was evaluated on.
    ``pooled``: successes over episodes of all seeds together."""
    groups: dict = {}
    for model in summary:
        recipe = model.rsplit("_s", 1)[0] if model.rsplit("_s", 1)[-1].isdigit() else model
        groups.setdefault(recipe, []).append(model)
    out: dict = {}
    for recipe, models in groups.items():
        if len(models) < 2:
            continue
        for n in SIZES:
            if not all(n in summary[m] for m in models):
                continue
            overall = {m: summary[m][n]["overall"] for m in models}
            rates = [o["success_rate"] for o in overall.values()]
            mean = sum(rates) / len(rates)
            sd = (sum((r - mean) ** 2 for r in rates) / (len(rates) - 1)) ** 0.5
            pooled = sum(o["successes"] for o in overall.values()) / sum(o["episodes"] for o in overall.values())
            out.setdefault(recipe, {})[n] = {
                "seeds": {m: o["success_rate"] for m, o in overall.items()},
                "mean": mean,
                "sd": sd,
                "pooled": pooled,
            }
    return out


def seed_table(by_recipe: dict) -> str:
    rows = []
    for recipe, by_n in by_recipe.items():
        for n, r in by_n.items():
            per_seed = ", ".join(pct(v) for v in r["seeds"].values())
            rows.append(
                [
                    f"`{recipe}`",
                    n,
                    len(r["seeds"]),
                    per_seed,
                    f"**{pct(r['mean'])} ± {pct(r['sd'])}**",
                    pct(r["pooled"]),
                ]
            )
    header = ["recipe", "N", "seeds", "per seed (%)", "mean ± sd (%)", "pooled (%)"]
    return markdown_table(header, rows) if rows else ""


def plot(summary: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for method, by_n in PUBLISHED.items():
        ns = sorted(by_n)
        ax.plot(ns, [by_n[n] for n in ns], color="grey", alpha=0.5, marker=".", lw=1)
        ax.annotate(method, (ns[0], by_n[ns[0]]), fontsize=7, color="grey", xytext=(-28, 0), textcoords="offset points")
    for model, by_n in summary.items():
        ns = sorted(by_n)
        rates = [100 * by_n[n]["overall"]["success_rate"] for n in ns]
        lo = [100 * by_n[n]["overall"]["success_ci95"][0] for n in ns]
        hi = [100 * by_n[n]["overall"]["success_ci95"][1] for n in ns]
        ax.errorbar(
            ns,
            rates,
            yerr=[[r - a for r, a in zip(rates, lo, strict=True)], [b - r for r, b in zip(rates, hi, strict=True)]],
            marker="o",
            capsize=3,
            label=model,
        )
    ax.scatter(list(TARGETS), list(TARGETS.values()), marker="_", s=300, color="red", label="issue targets")
    ax.axvspan(1.7, 2.3, color="tab:blue", alpha=0.08, label="training size")
    ax.set_xticks(list(SIZES))
    ax.set_xlabel("cubes (zero-shot beyond 2)")
    ax.set_ylabel("success over OGBench's 5 tasks (%)")
    ax.set_ylim(-2, 100)
    ax.legend(fontsize=7)
    ax.set_title("Trained on cube-double play data; published baselines (grey) trained per size", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    summary = load()
    by_recipe = seeds(summary)
    (HERE / "summary.json").write_text(json.dumps(summary | {"over_seeds": by_recipe}, indent=1) + "\n")
    plot(summary, HERE / "success_vs_cubes.png")
    print(tables(summary))
    if by_recipe:
        print("Over training seeds:\n\n" + seed_table(by_recipe))


if __name__ == "__main__":
    main()
