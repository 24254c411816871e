"""`ecrl-eval compare`: several `ecrl-eval` outputs in one plot of success vs number of objects.

Reads each folder's `eval.json` (e.g. the same weights with and without a setting, evaluated on the
same seeds), prints a markdown table of successes per N and writes the PNG given by `--out`.

Examples:
    ecrl-eval compare results/diffusion_push3/longest results/diffusion_push3/focus2 \\
        --labels "all objects" "focus=2" --train-n 3 --out results/diffusion_push3/focus_vs_all.png
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from ecrl.reporting import compare_evaluations
from ecrl.scripts.cli import cli_errors


@dataclass(frozen=True)
class CompareArgs:
    """Compare `ecrl-eval` outputs: one success-vs-N plot and a table of successes."""

    evals: Annotated[tuple[Path, ...], tyro.conf.Positional, tyro.conf.arg(metavar="FOLDER")]
    """Folders with an eval.json."""
    labels: tuple[str, ...]
    """A name per folder."""
    out: Path
    """The PNG to write."""
    train_n: tuple[int, ...] = ()
    """Numbers of objects trained on (shaded)."""
    title: str = "the same weights, 50 episodes per point"
    """The plot's title."""


def main(argv: Sequence[str]) -> None:
    """`ecrl-eval compare ARGV`."""
    args = tyro.cli(CompareArgs, args=list(argv), prog="ecrl-eval compare", description=__doc__)
    with cli_errors("ecrl-eval compare", (ValueError,)):
        table = compare_evaluations(args.evals, args.labels, args.out, title=args.title, train_n=args.train_n)
    print(table)
    print(f"wrote {args.out}")
