"""How an evaluation is shown: scalars for tensorboard and SB3's logger, the markdown table, the plot,
and ``eval.json`` with its README, from an :class:`~ecrl.evaluation.EvalReport`."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ecrl.evaluation import EvalReport
from ecrl.reporting import (
    markdown_table,
    plot_success_vs_n,
    provenance,
    report_header,
)


def scalars(report: EvalReport) -> dict[str, float]:
    """``eval/<part>/n<N>/<metric>`` → value, for tensorboard and SB3's logger; on OGBench cubes also
    ``eval/overall/n<N>/success_rate``, the mean over the tasks (:meth:`~ecrl.evaluation.EvalReport.overall`)."""
    out = {}
    for r in report.rows():
        prefix = f"eval/{r['part']}/n{r['n_objects']}"
        for metric in ("success_rate", "fraction_placed", "mean_return", "episode_length"):
            out[f"{prefix}/{metric}"] = float(r[metric])
    for r in report.overall():
        out[f"eval/overall/n{r['n_objects']}/success_rate"] = float(r["success_rate"])
    return out


def log_report(report: EvalReport, logger, exclude: str | tuple[str, ...] | None = None) -> None:
    """Record the report's scalars into an SB3 logger (written at its next ``dump``)."""
    for key, value in scalars(report).items():
        logger.record(key, value, exclude=exclude)


def log_tensorboard(report: EvalReport, writer, step: int = 0) -> None:
    """Write the report's scalars at ``step`` to a ``SummaryWriter`` or, given a path, to event files there."""
    if isinstance(writer, str | Path):
        from torch.utils.tensorboard import SummaryWriter

        with SummaryWriter(str(writer)) as w:
            log_tensorboard(report, w, step)
        return
    for key, value in scalars(report).items():
        writer.add_scalar(key, value, step)
    writer.flush()


# ---------------------------------------------------------------------------------------------- report files


def success_cells(row: dict[str, Any], fraction_placed: bool = True) -> list[str]:
    """Table cells of one configuration's summary (:meth:`~ecrl.evaluation.EvalResult.summary`): successes
    ``k/n (rate)`` and the success rate's 95% interval; with ``fraction_placed``, also the fraction placed
    with its 95% interval."""
    cells = [f"{row['successes']}/{row['episodes']} ({row['success_rate']:.2f})"]
    cells.append("[{:.2f}, {:.2f}]".format(*row["success_ci95"]))
    if fraction_placed:
        cells.append("{:.2f} [{:.2f}, {:.2f}]".format(row["fraction_placed"], *row["fraction_placed_ci95"]))
    return cells


def report_table(report: EvalReport, expert: EvalReport | None = None) -> str:
    """Markdown table, a row per (part, N); with ``expert``, its success on the same seeds as the ceiling.

    On OGBench cubes a row per (task, N), with OGBench's name of the task, then a row per N with the mean
    success over the tasks (``overall``, OGBench's headline number). A policy that acted through a rule (its
    ``meta["rule"]``, e.g. :class:`ecrl.focus.Focus`) gets a first column that labels every row rule-assisted.
    """
    rule = report.policy.get("rule")
    ogbench = report.settings.get("env") == "ogbench-cube"
    names = ["task", "task name"] if ogbench else ["part"]
    header = [*names, "N", "success", "95% CI", "fraction placed [95% CI]", "return", "length / horizon"]
    header = ["rule-assisted", *header] if rule else header
    rows = []
    for r in report.rows():
        row = [
            *([rule] if rule else []),
            r["part"],
            *([r["task_name"]] if ogbench else []),
            r["n_objects"],
            *success_cells(r),
            f"{r['mean_return']:.1f}",
            f"{r['episode_length']:.0f} / {r['horizon']}",
        ]
        if expert is not None:
            try:
                e = expert.get(r["part"], r["n_objects"]).summary()
                row.append(success_cells(e)[0])
            except KeyError:
                row.append("–")
        rows.append(row)
    for r in report.overall():
        mean = f"mean of {len(r['tasks'])} tasks"
        rows.append(
            [*([rule] if rule else []), "**overall**", mean, r["n_objects"], *success_cells(r, False), "–", "–", "–"]
        )
    header = [*header, "expert success"] if expert is not None else header
    align = "l" * (len(names) + bool(rule)) + "r" * (len(header) - len(names) - bool(rule)) if ogbench else None
    return markdown_table(header, rows, align)


def _label(report: EvalReport) -> str:
    meta = report.policy
    name = "scripted expert" if meta.get("arch") == "scripted_expert" else str(meta.get("arch") or "policy")
    return f"{name} (rule-assisted: {meta['rule']})" if meta.get("rule") else name


def plot_report(report: EvalReport, path: Path, expert: EvalReport | None = None, train_n: Sequence[int] = ()) -> None:
    """``success.png``: success vs N, a line per part or OGBench task (and per part for the expert ceiling;
    on OGBench cubes, the mean over the tasks in black), training N shaded."""
    name, parts = _label(report), list(dict.fromkeys(r.part for r in report.results))
    series, styles = {}, {}
    for k, part in enumerate(parts):
        label = f"{name}: {part}" if len(parts) > 1 else name
        series[label] = [r for r in report.rows() if r["part"] == part]
        styles[label] = {"color": f"C{k}"}
        if expert is not None:
            ceiling = f"expert: {part}" if len(parts) > 1 else "scripted expert"
            series[ceiling] = [r for r in expert.rows() if r["part"] == part]
            styles[ceiling] = {"color": f"C{k}", "linestyle": "--", "alpha": 0.5, "marker": "s"}
    s = report.settings
    if s.get("env") == "ogbench-cube":
        series[f"{name}: mean of the tasks"] = report.overall()
        styles[f"{name}: mean of the tasks"] = {"color": "black", "linewidth": 2}
        task = "OGBench cube tasks"
    else:
        task = f"{s['goal']}, " + (f"split {s['split']}" if s["split"] else "random objects")
    title = f"{name} on {task} ({s['episodes']} episodes per point, 95% Wilson CI)"
    plot_success_vs_n(series, path, title=title, styles=styles, train_n=train_n)


def _description(report: EvalReport, expert: EvalReport | None, train_n: Sequence[int]) -> str:
    """The paragraph above the table: the policy, what it was evaluated on, and what each column means."""
    s = report.settings
    policy = f"Policy: `{report.policy.get('repr', '?')}`" + (
        f", trained on N = {', '.join(map(str, train_n))}" if train_n else ""
    )
    seeds = (
        f"{s['episodes']} episodes per row, seeds {s['seed']} … {s['seed'] + s['episodes'] - 1} (the same for every "
        "row" + (" and for the expert" if expert is not None else "") + ")"
    )
    wall = f"Total wall-clock {report.wall_s:.0f} s."
    if s.get("env") == "ogbench-cube":
        cut = f", here cut at {s['max_steps']} steps (`max_steps`: not OGBench's protocol)" if s["max_steps"] else ""
        return (
            f"{policy}. OGBench's cube tasks {', '.join(map(str, s['tasks']))} (`ecrl/OGBenchCube-v0`, task names "
            f"from OGBench's `task_infos`); {seeds}. An episode ends at OGBench's success or at its episode limit "
            f"for N (the horizon){cut}. *success*: OGBench's own success flag (every cube within 4 cm of its "
            "goal) at the episode's end (95% CI: Wilson score interval); *fraction placed*: cubes within 4 cm of "
            "their goals at the episode's end (95% CI: normal approximation); *return*: sum of rewards (minus the "
            "fraction of cubes off their goals per step); *length*: steps to success, or the horizon if never; "
            "**overall**: OGBench's headline number, the mean success over the tasks (95% CI: Wilson interval of "
            "the pooled episodes). No expert column: OGBench's tasks have no scripted expert here. " + wall
        )
    stop = (
        "at the first step at which every object is placed, or at the horizon"
        if s["stop_on_success"]
        else "at the horizon (success is read at the last step)"
    )
    return (
        f"{policy}. Goal `{s['goal']}`, "
        + (f"split `{s['split']}` (`test`: held-out combinations)" if s["split"] else "random objects (no split)")
        + f"; {seeds}. An episode ends {stop}. *success*: every object placed at the episode's end (95% CI: "
        "Wilson score interval); *fraction placed*: at the episode's end (95% CI: normal approximation); "
        "*return*: sum of rewards; *length*: first step with every object placed, or the horizon if never. " + wall
    )


def write_report(
    report: EvalReport,
    out_dir: str | Path,
    command: str,
    *,
    expert: EvalReport | None = None,
    train_n: Sequence[int] | None = None,
    tb_step: int | None = None,
) -> dict[str, Any]:
    """Write ``eval.json``, ``README.md``, ``success.png`` and tensorboard scalars (``tb/``) to ``out_dir``.

    Args:
        report: what :func:`evaluate` returned.
        out_dir: the output directory (created if missing).
        command: the command that produced the report (quoted in ``README.md`` and ``eval.json``).
        expert: the scripted expert evaluated on the same seeds: the ceiling row and plot lines.
        train_n: numbers of objects seen in training, marked in the plot (default: the policy's
            ``meta["train_n_objects"]``).
        tb_step: global step of the scalars (default: the policy's ``meta["env_steps"]``, else 0).

    Returns:
        What ``eval.json`` holds.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train_n = list(report.policy.get("train_n_objects") or []) if train_n is None else list(train_n)
    result = {
        "command": command,
        **report.to_dict(),
        "train_n_objects": train_n,
        "expert": None if expert is None else expert.to_dict(),
        "provenance": provenance(),
    }
    (out / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    plot_report(report, out / "success.png", expert, train_n)
    log_tensorboard(report, out / "tb", report.policy.get("env_steps", 0) if tb_step is None else tb_step)
    lines = [
        *report_header(f"Evaluation of {_label(report)}: success per number of objects", command),
        _description(report, expert, train_n)
        + (
            f" **Rule-assisted** ({report.policy['rule']}): at every step the policy saw only the objects a fixed "
            "rule chose (`ecrl.focus.Focus`), not every object."
            if report.policy.get("rule")
            else ""
        ),
        "",
        report_table(report, expert),
        "",
        "![success vs number of objects](success.png)",
    ]
    if report.settings.get("video_dir"):
        for gif in sorted(Path(report.settings["video_dir"]).glob("*.gif")):
            lines += ["", f"![{gif.stem}]({os.path.relpath(gif, out)})"]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    return result
