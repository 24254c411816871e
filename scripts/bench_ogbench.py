"""`ecrl-bench ogbench`: the OGBench cube adapter's step time against OGBench's own env, and play data speed.

The measurement (and what it times, how) is :mod:`ecrl.envs.ogbench_bench`; this module checks its target
and writes its tables, plot and README. Needs the extra `ecrl[ogbench]`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ecrl.envs.ogbench import EPISODE_STEPS
from ecrl.envs.ogbench_bench import OGBenchBenchConfig, measure
from ecrl.reporting import markdown_table, report_header, targets_table

__all__ = [
    "FIGURE",
    "JSON_NAME",
    "check_targets",
    "measure",
    "plot",
    "record_extra",
    "tables",
    "write_readme",
]


def check_targets(args: OGBenchBenchConfig, result: dict[str, Any]) -> list[dict[str, Any]]:
    """PASS/FAIL: the adapter's step time against OGBench's, for every number of cubes."""
    return [
        {
            "target": f"cube-{r['n_cubes']} adapter step <= {args.max_ratio:g}x OGBench's own step",
            "value": f"{r['ratio']:.3f}x",
            "pass": r["ratio"] <= args.max_ratio,
        }
        for r in result["steps"]
    ]


def tables(result: dict[str, Any]) -> str:
    """Markdown tables: step times per number of cubes, play data speed, targets."""
    lines = [
        markdown_table(
            [
                "cubes",
                "OGBench steps/s",
                "adapter steps/s",
                "adapter steps/s (gym.make)",
                "OGBench step µs",
                "adapter step µs",
                "adapter / OGBench",
                "adapter (gym.make) / OGBench",
            ],
            [
                [
                    r["n_cubes"],
                    f"{r['ogbench_steps_per_s']:,.0f}",
                    f"{r['adapter_steps_per_s']:,.0f}",
                    f"{r['adapter_make_steps_per_s']:,.0f}",
                    f"{r['ogbench_step_us']:,.0f}",
                    f"{r['adapter_step_us']:,.0f}",
                    f"{r['ratio']:.3f}",
                    f"{r['ratio_make']:.3f}",
                ]
                for r in result["steps"]
            ],
        )
    ]
    if result["play"]:
        lines.append(
            markdown_table(
                ["play data (oracle + adapter)", "steps timed", "steps/s"],
                [[f"cube-{p['n_cubes']}", p["steps"], f"{p['steps_per_s']:,.0f}"] for p in result["play"]],
            )
        )
    if result.get("targets"):
        lines.append(targets_table(result["targets"]))
    return "\n\n".join(lines)


def plot(result: dict[str, Any], args: OGBenchBenchConfig, path: Path) -> None:
    """Steps/s vs number of cubes: OGBench's own env and the adapter."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n_cubes"] for r in result["steps"]]
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=120)
    ax.plot(ns, [r["ogbench_steps_per_s"] for r in result["steps"]], "k--", marker=".", label="OGBench's own env")
    ax.plot(ns, [r["adapter_steps_per_s"] for r in result["steps"]], marker="o", label="adapter, unwrapped")
    ax.plot(ns, [r["adapter_make_steps_per_s"] for r in result["steps"]], marker="s", ms=4, label="adapter, gym.make")
    ax.set(xlabel="number of cubes", ylabel="env steps / s (one core)", xticks=ns)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_readme(path: Path, command: str, args: OGBenchBenchConfig, result: dict[str, Any]) -> None:
    m = result["machine"]
    lines = [
        *report_header("OGBench cubes: adapter speed", command),
        f"{args.reduce.capitalize()} of {args.repeats} runs each; {args.steps} seeded random-action steps per run on "
        f"evaluation task {args.task_id}, the steps of the three envs of a size interleaved one by one and timed "
        f"each on its own, in one process. Machine: "
        f"{m['cpus']} CPUs ({m['processor']}), mujoco {m['mujoco']}, numpy {m['numpy']}.",
        "",
        tables(result),
        "",
        "![steps/s vs cubes](steps_per_s.png)",
    ]
    path.write_text("\n".join(lines) + "\n")


FIGURE = "steps_per_s.png"
JSON_NAME = "bench_ogbench.json"


def record_extra(args: OGBenchBenchConfig) -> dict[str, Any]:
    """Constants recorded in the JSON beside the arguments."""
    return {"reduce": args.reduce, "episode_steps": {str(n): EPISODE_STEPS[n] for n in args.n_cubes}}
