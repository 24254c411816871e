"""The periodic cube-double evaluations of the goal-relabelling comparison, read from the runs' tensorboard logs.

Training with ``--eval-every 20000 --eval-objects 2 --eval-episodes 4`` runs OGBench's five tasks, 4
episodes each, every 20k gradient steps (seeds from 100,000). This writes ``periodic.json`` beside it:
per run and step, each task's success rate and the successes out of 20. The run directories are not
committed; ``periodic.json`` is what they held.

    python results/ogbench/periodic.py runs/cube2_future runs/cube2_placements runs/cube2_placements_s1
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

EPISODES_PER_TASK = 4


def periodic(run: Path) -> dict[int, dict]:
    events = EventAccumulator(str(run / "tb"))
    events.Reload()
    out: dict[int, dict] = {}
    for task in range(1, 6):
        for scalar in events.Scalars(f"eval/task{task}/n2/success_rate"):
            out.setdefault(scalar.step, {})[f"task{task}"] = scalar.value
    for rates in out.values():
        rates["successes"] = round(sum(rates.values()) * EPISODES_PER_TASK)
        rates["episodes"] = 5 * EPISODES_PER_TASK
    return dict(sorted(out.items()))


def main() -> None:
    runs = [Path(p) for p in sys.argv[1:]]
    record = {"command": "python results/ogbench/periodic.py " + " ".join(sys.argv[1:])}
    record |= {run.name: periodic(run) for run in runs}
    (Path(__file__).parent / "periodic.json").write_text(json.dumps(record, indent=1) + "\n")
    for run in runs:
        print(run.name, {step: f"{r['successes']}/{r['episodes']}" for step, r in record[run.name].items()})


if __name__ == "__main__":
    main()
