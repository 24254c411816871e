"""Does a cluttered input slow the planner down? The state planner trained and evaluated with distractor rows.

Usage (from the repository root)::

    python results/pixels_push2/distractor_rows.py train --distractors 21 -- \\
        --dataset data/push2 --steps 15000 --eval-every 0 --final-eval-objects --threads 2 --name p2_distract21
    python results/pixels_push2/distractor_rows.py eval runs/p2_distract21/final --distractors 21 0

The planner from pixels reads 24 particle rows, of which about six are the pusher and the two objects (each
seen by two cameras); the rest lie on the table and the walls. The state planner reads three rows, the
things themselves. This probe gives the state planner ``--distractors`` more rows in training (every window
the planner learns from) and at test time (every observation it acts on), so that only the clutter differs:

- ``--style lookalike`` (the default): each distractor is a row like an object's (``present``,
  ``is_object``, a random shape, a size in the objects' range, a random yaw, no velocity) with a background
  colour (grey to brown, never one of the objects' colours) and no goal. Only its colour, its stillness and
  having no goal tell it from an object;
- ``--style background``: each distractor says what it is: ``is_object`` 0, no shape, no size, one grey,
  only its place differs. A planner can tell it from the things by one column;
- it stays where it is for a whole window (in evaluation, a whole episode), anywhere on the table
  (``|x|, |y| < 0.35`` m), with ``--jitter`` (3 mm) of noise per step, as a particle on the table does.

``train`` runs ``ecrl-train-diffusion`` with the arguments after ``--`` on windows with the distractors
(its own evaluations would see none, so give it ``--eval-every 0`` and ``--final-eval-objects`` with no
numbers, which skips the final one);
``eval`` evaluates a planner at N = 2 (50 episodes, seeds 100000 …) with the same distractors in every
observation, and with ``--distractors 0`` the same planner without them. Prints and writes JSON beside
the checkpoint (``--out``). ``curves`` reads the runs' action loss from their tensorboard logs and writes
``action_loss.json`` and ``action_loss.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

import ecrl
from ecrl.datasets import DemoDataset
from ecrl.envs.layout import ENTITY_DIM, ENTITY_FIELDS, SHAPES
from ecrl.envs.task import SIZE_RANGE
from ecrl.evaluation import evaluate

F = ENTITY_FIELDS
REACH = 0.35
"""Distractors lie anywhere with ``|x|, |y|`` below this (metres): the table and a little beyond."""


STYLES = ("lookalike", "background")


def distractor_rows(rng: np.random.Generator, shape: tuple[int, ...], style: str = "lookalike") -> np.ndarray:
    """``shape + (ENTITY_DIM,)`` distractor rows of ``style`` (see the module docstring), each drawn independently."""
    rows = np.zeros((*shape, ENTITY_DIM), np.float32)
    rows[..., F["present"]] = 1.0
    if style == "background":
        rows[..., F["position"]] = np.stack([*rng.uniform(-REACH, REACH, (2, *shape)), np.zeros(shape)], -1)
        rows[..., F["yaw"]] = [0.0, 1.0]
        rows[..., F["colour"]] = 0.5
        return rows
    if style != "lookalike":
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    rows[..., F["is_object"]] = 1.0
    size = rng.uniform(*SIZE_RANGE, shape)
    rows[..., F["position"]] = np.stack([*rng.uniform(-REACH, REACH, (2, *shape)), size], -1)
    yaw = rng.uniform(-np.pi, np.pi, shape)
    rows[..., F["yaw"]] = np.stack([np.sin(yaw), np.cos(yaw)], -1)
    rows[..., F["size"]] = size[..., None]
    rows[..., F["shape"]] = np.eye(len(SHAPES), dtype=np.float32)[rng.integers(len(SHAPES), size=shape)]
    grey = rng.uniform(0.3, 0.7, shape)[..., None]
    rows[..., F["colour"]] = np.clip(grey + rng.uniform(-0.05, 0.1, (*shape, 3)) * [1.0, 0.5, -0.5], 0, 1)
    return rows


def jittered(rows: np.ndarray, rng: np.random.Generator, jitter: float) -> np.ndarray:
    """``rows`` with Gaussian noise of ``jitter`` metres on their ``x, y``."""
    out = rows.copy()
    xy = slice(F["position"].start, F["position"].start + 2)
    out[..., xy] += rng.normal(0, jitter, out[..., xy].shape).astype(np.float32)
    return out


def with_distractors(
    batch: dict[str, np.ndarray], k: int, jitter: float, rng: np.random.Generator, style: str = "lookalike"
) -> dict[str, np.ndarray]:
    """Training windows (:meth:`DemoDataset.windows`) with ``k`` static distractor rows appended to every state."""
    b, steps = batch["observation"].shape[:2]
    rows = distractor_rows(rng, (b, 1, k), style)
    rows = jittered(np.broadcast_to(rows, (b, steps, k, ENTITY_DIM)), rng, jitter)
    out = dict(batch)
    out["observation"] = np.concatenate([batch["observation"], rows], 2)
    out["mask"] = np.concatenate([batch["mask"], np.ones((b, k), bool)], 1)
    return out


class Distracted:
    """A policy whose observations get ``k`` distractor rows, drawn at each reset and kept for the episode."""

    def __init__(self, policy: Any, k: int, jitter: float, seed: int, style: str = "lookalike") -> None:
        self.policy, self.k, self.jitter, self.style = policy, k, jitter, style
        self.rng = np.random.default_rng(seed)
        self.meta, self.rows = policy.meta, None

    def reset(self, *args: Any) -> None:
        self.rows = None
        self.policy.reset(*args)

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        if self.k == 0:
            return self.policy.act(obs)
        rows = np.asarray(obs["observation"], np.float32)
        if self.rows is None or len(self.rows) != len(rows):
            self.rows = distractor_rows(self.rng, (len(rows), self.k), self.style)
        noisy = jittered(self.rows, self.rng, self.jitter)
        return self.policy.act({**obs, "observation": np.concatenate([rows, noisy], 1)})


def train(args: argparse.Namespace, rest: list[str]) -> None:
    from ecrl.scripts.train_diffusion import main as train_main

    rng = np.random.default_rng(args.seed)
    original = DemoDataset.sample_windows

    def sample_windows(self: DemoDataset, *a: Any, **kw: Any) -> dict[str, np.ndarray]:
        return with_distractors(original(self, *a, **kw), args.distractors, args.jitter, rng, args.style)

    DemoDataset.sample_windows = sample_windows
    train_main(rest)


def evaluate_planner(args: argparse.Namespace) -> None:
    report: dict[str, Any] = {"policy": str(args.policy), "style": args.style, "jitter": args.jitter, "seed": args.seed}
    report["results"] = {}
    for k in args.distractors:
        policy = Distracted(ecrl.load(args.policy), k, args.jitter, seed=args.seed, style=args.style)
        result = evaluate(policy, [args.n_objects], episodes=args.episodes, progress=False).results[0]
        success = np.asarray(result.success)
        placed = float(np.mean(result.fraction_placed))
        report["results"][str(k)] = {"success": int(success.sum()), "episodes": len(success), "fraction_placed": placed}
        print(f"{k:>3} distractors: {int(success.sum())}/{len(success)} at N = {args.n_objects}, placed {placed:.2f}")
    out = args.out or Path(args.policy) / "distractor_eval.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


def curves(args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    labels = args.labels or [Path(r).name for r in args.runs]
    if len(labels) != len(args.runs):
        raise SystemExit(f"--labels: one per run, got {len(labels)} for {len(args.runs)} runs")
    report: dict[str, Any] = {}
    fig, ax = plt.subplots(figsize=(6, 4))
    for run, label in zip(args.runs, labels, strict=True):
        events = EventAccumulator(str(Path(run) / "tb"))
        events.Reload()
        points = events.Scalars("train/action_loss")
        step = np.array([e.step for e in points])
        loss = np.array([e.value for e in points])
        at = {str(s): float(loss[np.abs(step - s) <= 300].mean()) for s in args.at if (np.abs(step - s) <= 300).any()}
        report[label] = {"run": str(run), "action_loss_near": at, "step": step.tolist(), "action_loss": loss.tolist()}
        ax.plot(step, loss, label=label)
        print(f"{label}: " + "  ".join(f"{s}: {v:.3f}" for s, v in at.items()))
    ax.set(xlabel="gradient step", ylabel="action loss (MSE)", yscale="log", title="push-2 state planner, 15k steps")
    ax.legend()
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "action_loss.png", dpi=120)
    (args.out / "action_loss.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out / 'action_loss.json'} and action_loss.png")


def main() -> None:
    argv = sys.argv[1:]
    rest = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="ecrl-train-diffusion (arguments after --) on windows with distractors")
    t.add_argument("--distractors", type=int, default=21)
    t.add_argument("--style", choices=STYLES, default="lookalike")
    t.add_argument("--jitter", type=float, default=0.003)
    t.add_argument("--seed", type=int, default=0)
    e = sub.add_parser("eval", help="evaluate a planner with distractors in its observations")
    e.add_argument("policy", type=Path)
    e.add_argument("--distractors", type=int, nargs="+", default=[21, 0])
    e.add_argument("--style", choices=STYLES, default="lookalike")
    e.add_argument("--jitter", type=float, default=0.003)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--episodes", type=int, default=50)
    e.add_argument("--n-objects", type=int, default=2)
    e.add_argument("--out", type=Path, default=None)
    c = sub.add_parser("curves", help="the runs' action loss: JSON and a plot")
    c.add_argument("runs", type=Path, nargs="+")
    c.add_argument("--labels", nargs="+", default=None)
    c.add_argument("--at", type=int, nargs="+", default=[1000, 3000, 5000, 10000, 15000])
    c.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "curves":
        curves(args)
    elif args.command == "train":
        if not rest:
            parser.error("train needs ecrl-train-diffusion's arguments after --")
        train(args, rest)
    else:
        evaluate_planner(args)


if __name__ == "__main__":
    main()
