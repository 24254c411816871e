"""Gather the OGBench cube evaluations of this folder into tables, JSON and a plot beside the published baselines.

Every ``<model>/[<variant>/]eval_n<N>/eval.json`` here is one ``ecrl-eval`` run of a planner trained on
cube-double play data, on OGBench's five evaluation tasks with N cubes (``--objects N``). ``<model>/eval_n<N>``
is the headline (the policy as saved); a ``<variant>`` folder holds the same weights evaluated otherwise
(e.g. ``replan1/``: re-planning every step, ``seeds200000/``: fresh evaluation seeds). This prints the
markdown tables of the README (overall success per model and N; per task; over training seeds, per
variant) and writes ``summary.json`` and ``success_vs_cubes.png`` (headline and ``replan1``) beside this script.

    python results/ogbench/summarize.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import numpy as np

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
    """``{variant: {model: {N: {"overall": …, "tasks": [...], "gradient_steps": …}}}}`` from every ``eval.json``
    here; the headline's variant is ``""``."""
    summary: dict = {}
    for path in sorted(HERE.glob("*/**/eval_n*/eval.json")):
        report = json.loads(path.read_text())
        model, *variant = path.parent.relative_to(HERE).parts[:-1]
        for overall in report.get("overall", []):
            n = overall["n_objects"]
            tasks = [
                {k: r[k] for k in ("part", "task_name", "episodes", "successes", "success_rate", "success_ci95")}
                for r in report["results"]
                if r["n_objects"] == n
            ]
            steps = report["policy"].get("steps")
            entry = {"overall": overall, "tasks": tasks, "gradient_steps": steps}
            summary.setdefault("/".join(variant), {}).setdefault(model, {})[n] = entry
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


def task_table(models: dict) -> str:
    """Per N and task, the successes of every training seed (``model``, ``model_s1``, …) in one cell."""
    rows = []
    for n in SIZES:
        evaluated = [by_n[n] for by_n in models.values() if n in by_n]
        if len(evaluated) < 2:
            continue
        cells = []
        for tasks in zip(*(e["tasks"] for e in evaluated), strict=True):
            name = tasks[0]["task_name"].split("_", 1)[1]
            cells.append(f"{name} " + ", ".join(str(t["successes"]) for t in tasks))
        rows.append([n, *cells])
    return markdown_table(["N", "task 1", "task 2", "task 3", "task 4", "task 5"], rows) if rows else ""


def plot(headline: dict, replan1: dict, path: Path) -> None:
    """Success vs cubes: each training seed (thin) and their mean (thick), re-planning every 4 steps (the policies
    as saved) and every step (``replan1/``), beside the published baselines."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for method, by_n in PUBLISHED.items():
        ns = sorted(by_n)
        ax.plot(ns, [by_n[n] for n in ns], color="grey", alpha=0.5, marker=".", lw=1)
        ax.annotate(method, (ns[0], by_n[ns[0]]), fontsize=7, color="grey", xytext=(-28, 0), textcoords="offset points")
    for models, colour, label in (
        (headline, "tab:blue", "re-plan every 4 steps"),
        (replan1, "tab:orange", "re-planning every step"),
    ):
        for by_n in models.values():
            ns = sorted(by_n)
            ax.plot(
                ns, [100 * by_n[n]["overall"]["success_rate"] for n in ns], color=colour, alpha=0.35, lw=1, marker="."
            )
        ns = [n for n in SIZES if sum(n in by_n for by_n in models.values()) > 1]
        means = [
            100 * np.mean([by_n[n]["overall"]["success_rate"] for by_n in models.values() if n in by_n]) for n in ns
        ]
        ax.plot(
            ns, means, color=colour, lw=2.5, marker="o", label=f"this planner, {label} (mean of {len(models)} seeds)"
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
    by_recipe = {variant: seeds(models) for variant, models in summary.items()}
    (HERE / "summary.json").write_text(json.dumps({"evaluations": summary, "over_seeds": by_recipe}, indent=1) + "\n")
    plot(summary[""], summary.get("replan1", {}), HERE / "success_vs_cubes.png")
    print(tables(summary[""]))
    for variant in sorted(by_recipe):
        if by_recipe[variant]:
            print(f"Over training seeds, {variant or 'headline'}:\n\n" + seed_table(by_recipe[variant]) + "\n")
            print(
                f"Successes of 50 per task and seed, {variant or 'headline'}:\n\n" + task_table(summary[variant]) + "\n"
            )


if __name__ == "__main__":
    main()
