"""Small pieces every training loop of the library uses: the learning-rate schedule and the progress CSV."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path

__all__ = ["append_csv", "warmup_cosine"]


def warmup_cosine(step: int, warmup: int, steps: int, floor: float = 0.1) -> float:
    """Learning-rate factor: linear warm-up over ``warmup`` steps, then a cosine from 1 to ``floor`` at ``steps``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def append_csv(path: Path, row: Mapping[str, float]) -> None:
    """Append ``row`` to the CSV file ``path``, writing the header first if the file is new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(row))
        if new:
            out.writeheader()
        out.writerow(row)
