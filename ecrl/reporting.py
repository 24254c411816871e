"""What every result file carries: provenance, intervals, and the command that made it."""

from __future__ import annotations

import math
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

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
