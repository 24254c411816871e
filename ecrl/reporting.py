"""What every result file carries: provenance, intervals, the command that made it, its tables, plots and GIFs."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

import ecrl

_LIBRARIES = ("mujoco", "gymnasium", "gymnasium-robotics", "numpy", "scipy", "torch", "stable-baselines3")


def provenance() -> dict[str, Any]:
    """Machine, library versions and the git commit, so that a number can be traced to what made it."""
    info: dict[str, Any] = {
        "ecrl": ecrl.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "mujoco_gl": os.environ.get("MUJOCO_GL"),
    }
    for name in _LIBRARIES:
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = None
    git = ["git", "-C", str(Path(__file__).resolve().parent.parent)]
    try:
        info["git_commit"] = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout.strip()
        info["git_dirty"] = bool(dirty)
    except OSError:
        pass
    return info


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% for ``z = 1.96``); sound at 0/n and n/n."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def report_header(title: str, command: str) -> list[str]:
    """Opening lines of a result ``README.md``: its title and the exact command that produced it."""
    return [f"# {title}", "", "Produced by (from the repository root):", "", "```bash", command, "```", ""]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """A markdown table; ``align`` has one ``l``/``r`` per column (default: the first left, the rest right)."""
    align = align or "l" + "r" * (len(header) - 1)
    if len(align) != len(header):
        raise ValueError(f"align {align!r} has {len(align)} columns, header has {len(header)}")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def targets_table(targets: Iterable[Mapping[str, Any]]) -> str:
    """The markdown table of a benchmark's ``targets`` (``target``, ``value``, ``pass``): PASS or FAIL per row."""
    rows = [[t["target"], t["value"], "PASS" if t["pass"] else "FAIL"] for t in targets]
    return markdown_table(["target", "value", "result"], rows, align="lrl")


def plot_success_vs_n(
    series: Mapping[str, Sequence[Mapping[str, Any]]],
    path: Path,
    *,
    title: str,
    legend_title: str | None = None,
    styles: Mapping[str, Mapping[str, Any]] | None = None,
    train_n: Sequence[int] = (),
) -> None:
    """Success rate vs number of objects, one line per series, with 95% Wilson error bars.

    Args:
        series: label → rows, each with ``n_objects``, ``success_rate`` and ``success_ci95`` ``[lo, hi]``.
        path: the PNG to write.
        title: the plot's title.
        legend_title: the legend's title.
        styles: label → extra ``errorbar`` keywords (colour, line style) for that series.
        train_n: numbers of objects seen in training, shaded in the plot.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for k, n in enumerate(sorted(set(train_n))):
        ax.axvspan(n - 0.3, n + 0.3, color="0.85", zorder=0, label="trained on" if k == 0 else None)
    for k, (label, rows) in enumerate(series.items()):
        n = np.array([r["n_objects"] for r in rows], dtype=float)
        rate = np.array([r["success_rate"] for r in rows])
        ci = np.array([r["success_ci95"] for r in rows]).reshape(-1, 2)
        # Small horizontal offsets keep overlapping error bars apart.
        x = n + (k - (len(series) - 1) / 2) * 0.08
        style = {"marker": "o", "capsize": 3, **(styles or {}).get(label, {})}
        ax.errorbar(x, rate, yerr=[rate - ci[:, 0], ci[:, 1] - rate], label=label, **style)
    ax.set_xticks(sorted({r["n_objects"] for rows in series.values() for r in rows} | set(train_n)))
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlabel("number of objects N")
    ax.set_ylabel("success rate (all objects placed)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(title=legend_title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


_COMPARE_COLOURS = ("tab:grey", "tab:blue", "tab:orange", "tab:green")
_COMPARE_PARTS = {
    "train": ("train part", "-", "o"),
    "test": ("held out", "--", "s"),
    "overall": ("mean of OGBench's tasks", "-", "o"),
}


def compare_evaluations(
    evals: Sequence[Path],
    labels: Sequence[str],
    path: Path,
    *,
    title: str = "the same weights, 50 episodes per point",
    train_n: Sequence[int] = (),
) -> str:
    """Several ``ecrl-eval`` outputs in one plot of success vs N (train part solid, held out dashed).

    Args:
        evals: folders holding an ``eval.json`` (e.g. the same weights with and without a setting, same seeds);
            of an evaluation on OGBench cubes, its mean success over the tasks is compared.
        labels: a name per folder.
        path: the PNG to write.
        title: the plot's title.
        train_n: numbers of objects trained on, shaded.

    Returns:
        A markdown table of successes per N, a column per (folder, part).
    """
    if len(labels) != len(evals):
        raise ValueError(f"a label per folder: {len(evals)} folders but {len(labels)} labels")
    series: dict[str, list[Mapping[str, Any]]] = {}
    styles: dict[str, dict[str, Any]] = {}
    table: dict[int, dict[str, str]] = {}
    for k, (label, folder) in enumerate(zip(labels, evals, strict=True)):
        file = Path(folder) / "eval.json"
        if not file.is_file():
            raise ValueError(f"{folder} has no eval.json: expected a folder written by ecrl-eval")
        data = json.loads(file.read_text())
        results = data["results"]
        if data.get("overall"):  # OGBench cubes: the mean over the tasks, OGBench's headline number
            results = [{**r, "part": "overall"} for r in data["overall"]]
        for part, (name, line, marker) in _COMPARE_PARTS.items():
            rows = sorted((r for r in results if r["part"] == part), key=lambda r: r["n_objects"])
            if not rows:
                continue
            key = f"{label}, {name}"
            series[key] = rows
            styles[key] = {"color": _COMPARE_COLOURS[k % len(_COMPARE_COLOURS)], "linestyle": line, "marker": marker}
            for r in rows:
                table.setdefault(r["n_objects"], {})[key] = f"{r['successes']}/{r['episodes']}"
    plot_success_vs_n(series, path, title=title, styles=styles, train_n=train_n)
    return markdown_table(["N", *series], [[n, *(row.get(s, "–") for s in series)] for n, row in sorted(table.items())])


def camera_strip(views: Mapping[str, np.ndarray]) -> np.ndarray:
    """Camera images ``{name: (H, W, 3) uint8}`` side by side, 2 white pixels apart: ``(H, W', 3)``."""
    images = list(views.values())
    gap = np.full((images[0].shape[0], 2, 3), 255, np.uint8)
    return np.concatenate([part for image in images for part in (gap, image)][1:], axis=1)


def write_gif(path: Path, frames: Sequence[np.ndarray], fps: float, hold: int = 10) -> int:
    """Write ``frames`` (each ``(H, W, 3) uint8``) as a looping GIF, the last one held ``hold`` extra frames; its bytes."""
    import imageio.v3 as iio

    frames = [*frames, *[frames[-1]] * hold]
    iio.imwrite(path, np.stack(frames), duration=1000 / fps, loop=0)
    return path.stat().st_size


def benchmark_record(args: Any, command: str, result: dict[str, Any], wall_s: float, **extra: Any) -> dict[str, Any]:
    """What a benchmark's JSON holds: the command, its arguments, ``extra`` constants, provenance, the wall
    time, then the measurements (``result``, including its ``targets``)."""
    from dataclasses import asdict

    return {
        "command": command,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items()},
        **extra,
        "machine": provenance(),
        "total_wall_s": wall_s,
        **result,
    }


def run_benchmark(args: Any, command: str, bench: Any) -> dict[str, Any]:
    """The life of a benchmark, from ``bench`` (a benchmark module of ``ecrl.scripts``).

    ``bench.measure(args)`` measures (the library's measurement, e.g. :func:`ecrl.envs.bench.measure`,
    which the module imports; ``args`` is that measurement's config); ``bench.check_targets(args, result)`` (optional) checks the targets;
    the result goes through :func:`benchmark_record` (with ``bench.record_extra(args)``, optional) into
    ``args.out/<bench.JSON_NAME or bench.json>``, ``bench.plot(result, args, path)`` draws ``bench.FIGURE``,
    ``bench.write_readme(path, command, args, result)`` writes ``README.md``; ``bench.tables(result)`` is
    printed. With ``args.strict`` a missed target exits with status 1.
    """
    start = time.perf_counter()
    result = bench.measure(args)
    check_targets = getattr(bench, "check_targets", None)
    if check_targets is not None:
        result["targets"] = check_targets(args, result)
    extra = bench.record_extra(args) if hasattr(bench, "record_extra") else {}
    result = benchmark_record(args, command, result, time.perf_counter() - start, **extra)
    out, json_name = Path(args.out), getattr(bench, "JSON_NAME", "bench.json")
    out.mkdir(parents=True, exist_ok=True)
    (out / json_name).write_text(json.dumps(result, indent=2) + "\n")
    bench.plot(result, args, out / bench.FIGURE)
    bench.write_readme(out / "README.md", command, args, result)
    print(bench.tables(result))
    threads = f"torch threads: {result['threads']}; " if "threads" in result else ""
    print(f"{threads}wrote {out}/ ({json_name}, README.md, {bench.FIGURE})")
    if check_targets is not None:
        exit_if_targets_missed(result, args.strict)
    return result


def exit_if_targets_missed(result: dict[str, Any], strict: bool) -> None:
    """With ``strict``, exit with status 1 when any of ``result["targets"]`` failed."""
    if strict and not all(t["pass"] for t in result["targets"]):
        raise SystemExit(1)
