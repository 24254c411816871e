"""`ecrl-bench pixels`: the planner from pixels against the state planner, training windows/s and planning time.

The measurement (and what it times, how) is :mod:`ecrl.diffusion.bench_pixels`; this module writes its tables,
plot and README.

Examples:
    # the committed particle encoder, N = 3, 8 envs side by side, one thread -> results/bench_pixels/
    ecrl-bench pixels --threads 1

    # another encoder, 30 envs side by side (the batch of ecrl-bench planners' default evaluation)
    ecrl-bench pixels --encoder runs/<encoder-run> --batch 30 --threads 1 --out /tmp/bench_pixels
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ecrl.diffusion.bench_pixels import PixelsBenchConfig, measure
from ecrl.reporting import markdown_table, report_header

__all__ = ["FIGURE", "measure", "plot", "tables", "write_readme"]

_NAMES = {"state": "state", "pixels": "pixels (encoding included)"}
# Columns of each table: (header, key, format); an empty cell where a row has no such key.
_PLANNING = (
    ("planning: planner", "name", "{}"),
    ("tokens / step", "tokens_per_step", "{}"),
    ("row width", "row_width", "{}"),
    ("denoiser calls / env step", "denoiser_calls_per_step", "{:g}"),
    ("ms / env step (mean)", "ms_per_step_mean", "**{:.2f}**"),
    ("median", "ms_per_step_median", "{:.2f}"),
    ("p90", "ms_per_step_p90", "{:.2f}"),
    ("ms / episode-step (mean)", "ms_per_episode_step_mean", "{:.3f}"),
    ("× state", "vs_state", "{}"),
)
_TRAINING = (
    ("training: planner", "planner", "{}"),
    ("tokens / step", "tokens_per_step", "{}"),
    ("row width", "row_width", "{}"),
    ("horizon H", "horizon", "{}"),
    ("batch", "batch", "{}"),
    ("windows/s (best)", "windows_per_s_best", "**{:.0f}**"),
    ("windows/s (median)", "windows_per_s_median", "{:.0f}"),
    ("ms / step", "ms_per_step_median", "{:.1f}"),
    ("× state", "vs_state", "{}"),
)


def _table(columns: tuple[tuple[str, str, str], ...], rows: list[dict[str, Any]]) -> str:
    cells = [[fmt.format(r[key]) if key in r else "" for _, key, fmt in columns] for r in rows]
    return markdown_table([header for header, _, _ in columns], cells, align="l" + "r" * (len(columns) - 1))


def tables(result: dict[str, Any]) -> str:
    """Markdown tables: planning ms per env step (with the encoding alone), training windows/s."""
    ratios, enc = result["ratios"], result["encoding"]
    vs = {"planning": ratios["planning_ms_per_step"], "training": ratios["training_windows_per_s"]}
    rows = {
        kind: [
            {**r, "name": _NAMES[r["planner"]], "vs_state": f"{1.0 if r['planner'] == 'state' else vs[kind]:.2f}x"}
            for r in result[kind]
        ]
        for kind in vs
    }
    encoding = {
        **enc,
        "name": "encoding alone",
        "ms_per_episode_step_mean": enc["ms_per_step_mean"] / result["planning"][0]["batch"],
        "vs_state": f"{ratios['encoding_share_of_pixel_step']:.0%} of the pixel step",
    }
    return _table(_PLANNING, [*rows["planning"], encoding]) + "\n\n" + _table(_TRAINING, rows["training"])


def plot(result: dict[str, Any], args: PixelsBenchConfig, path: Path) -> None:
    """Planning ms per env step (the pixel bar split into encoding and the rest) and training windows/s per planner."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(8.5, 3.6), dpi=120)
    state, pixels = result["planning"]
    encoding, x = result["encoding"]["ms_per_step_mean"], np.arange(2)
    left.bar(x, [state["ms_per_step_mean"], pixels["ms_per_step_mean"] - encoding], 0.6, color="C0", label="planning")
    left.bar(1, encoding, 0.6, bottom=pixels["ms_per_step_mean"] - encoding, color="C1", label="encoding the frames")
    left.set(
        xticks=x,
        xticklabels=["state", "pixels"],
        ylabel="ms / env step (mean)",
        title=f"batch {state['batch']}, N={result['n_objects']}: "
        f"pixels {result['ratios']['planning_ms_per_step']:.1f}x state",
    )
    left.legend(fontsize=7, loc="upper left")
    training = result["training"]
    right.bar(x, [r["windows_per_s_best"] for r in training], 0.6, color="C2")
    right.set(
        xticks=x,
        xticklabels=[r["planner"] for r in training],
        ylabel="training windows / s (best)",
        title=f"batch {training[0]['batch']}, H={training[0]['horizon']}: "
        f"pixels {result['ratios']['training_windows_per_s']:.2f}x state",
    )
    for ax in (left, right):
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"{result['threads']} thread(s), random weights, encoder {result['encoder']['path']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_readme(path: Path, command: str, args: PixelsBenchConfig, result: dict[str, Any]) -> None:
    m, d, e = result["machine"], result["denoiser"], result["encoder"]
    state = result["planning"][0]
    lines = [
        *report_header("Planning from pixels against planning from state: speed", command),
        f"Both planners have the `ecrl-train-diffusion` recipe: denoiser width {d['width']}, {d['heads']} heads, "
        f"{d['blocks']} blocks, horizon {d['horizon']}, {result['sampling_steps']} DDIM steps per plan, re-planning "
        f"every {result['replan_every']} step(s), classifier-free guidance {result['guidance']:g} (conditional and "
        f"goal-free passes in one batch); **random weights** (the cost does not depend on them). The state planner "
        f"plans over the env's {state['tokens_per_step']} entity rows per step (agent + N = {result['n_objects']} "
        f"objects, {state['row_width']} features); the planner from pixels over the {e['tokens']} normalised rows "
        f"per step ({e['row_width']} features) of the frozen {e['kind']} encoder `{e['path']}`, {len(e['cameras'])} "
        f"views ({', '.join(e['cameras'])}) at {e['image_size']} px. Goals: `positions` goal rows for both. "
        f"**Planning**: `{result['env_id']}` with N = {result['n_objects']}, {state['batch']} envs side by side, "
        f"{state['act_calls']} timed env steps; on every step one `policy.act` call of each planner on the stacked "
        f"batch (the state planner without the frames) and the encoding alone (`PixelPlanner.rows`: encoder and "
        f"normalisation), each timed on its own. The pixel planner's time **includes encoding** the frames; "
        f"rendering them (in `env.step`) is **not** included in any number. *ms / env step* is per call (the whole "
        f"batch advances one step), mean (amortised over re-planning) and median; *ms / episode-step* divides by "
        f"the batch. **Training**: the `ecrl-train-diffusion` step (loss, backward, clipping, AdamW, EMA) on the "
        f"same windows for both planners, cut from one random-action rollout whose frames were encoded once "
        f"(encoding is not part of a training step: training encodes a dataset once), {args.train_steps} steps × "
        f"{args.repeats} turns, the planners taking turns. *× state*: the median, over the env steps (planning) "
        f"or turns (training), of pixels / state measured side by side, so that the machine's load cancels; the "
        f"encoding's share is its median fraction of the pixel call of the same step. torch {m['torch']} on "
        f"{result['threads']} thread(s); machine: {m['cpus']} CPUs ({m['processor']}), shared with other jobs. "
        f"Total wall-clock {result['total_wall_s']:.0f} s.",
        "",
        tables(result),
        "",
        "![planning time per env step and training throughput](pixels.png)",
    ]
    path.write_text("\n".join(lines) + "\n")


FIGURE = "pixels.png"
