"""`ecrl-train-diffusion`: train an entity-centric diffusion planner on a demonstration dataset.

The dataset comes from `ecrl-collect`. The run directory (see `ecrl.diffusion.train`) holds the
config, tensorboard logs (`tensorboard --logdir runs`: losses, windows/s, periodic success in the
env), checkpoints every `--checkpoint-every` steps and the final planner, which `ecrl.load(path)`
and `ecrl-eval` use like any policy. At the end it is evaluated on more objects than trained
(`<run>/eval/`, like `ecrl-eval`).

Examples:
    # the README's main job (results/diffusion_push2): 2 objects, 45k steps, evaluated on 1-6 objects
    ecrl-collect --out data/push2 --n-objects 2 --episodes 1000
    ecrl-train-diffusion --dataset data/push2 --steps 45000 --eval-every 15000 --final-eval-objects 1 2 3 4 6

    # expert demonstrations of push with 3 objects, then the planner
    ecrl-collect --out data/push3 --n-objects 3 --episodes 1000
    ecrl-train-diffusion --dataset data/push3

    # a longer plan, re-planned every 2 steps with 10 DDIM steps
    ecrl-train-diffusion --dataset data/push3 --denoiser.horizon 16 --replan-every 2 --sampling-steps 10

    # hierarchical: subgoals every 8 steps, 8 of them per high-level plan (64 env steps ahead),
    # a dense 8-step segment to the next subgoal re-planned every step
    ecrl-collect --out data/push4-sort --n-objects 4 --goal sort --episodes 1000
    ecrl-train-diffusion --dataset data/push4-sort --planner hierarchical --subgoal-every 8 --subgoal-horizon 8

    # from pixels towards goal images: a frozen encoder's entities of the frames and of the goal's frames
    ecrl-collect --out data/push2-pixgoal --n-objects 2 --episodes 600 --pixels 64 --goal-pixels
    ecrl-train-diffusion --dataset data/push2-pixgoal --encoder results/encoders/particles --goal-images

    # continue a killed run from its last checkpoint (or extend a finished one with --steps)
    ecrl-train-diffusion --resume runs/push3__diffusion__0__20261130-150000

    # data-parallel on 4 GPUs (or CPU processes: gloo), the same global --batch-size split over them;
    # rank 0 logs, evaluates and saves; bf16 autocast and torch.compile are options
    torchrun --nproc-per-node 4 -m ecrl.scripts.train_diffusion --dataset data/push3 --batch-size 512 --precision bf16 --compile
    torchrun --nproc-per-node 4 -m ecrl.scripts.train_diffusion --resume runs/push3__diffusion__0__20261130-150000
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tyro

from ecrl.datasets import DatasetError
from ecrl.diffusion.train import DiffusionTrainConfig, train
from ecrl.distributed import is_main
from ecrl.scripts.cli import cli_errors, training_config_of
from ecrl.scripts.eval import FinalEvaluation


@dataclass
class TrainDiffusionArgs(DiffusionTrainConfig, FinalEvaluation):
    """Options of `ecrl-train-diffusion` (a training config plus what to do around it)."""

    resume: Path | None = None
    """Continue the run in this directory from checkpoints/latest/ (its config.json is used, except a larger --steps; the final evaluation is the first call's unless
    --final-eval-* are given again)."""


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `ecrl-train-diffusion`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = tyro.cli(TrainDiffusionArgs, args=argv, description=__doc__)
    final = FinalEvaluation.of_call(args, args.resume, argv)
    with cli_errors("ecrl-train-diffusion", (DatasetError, FileExistsError, FileNotFoundError, ValueError)):
        config = training_config_of(args, DiffusionTrainConfig, argv)
        result = train(config, resume=args.resume, session=final.session_record())
    if not is_main():  # under torchrun, rank 0 reports and evaluates
        return
    print(
        f"run directory: {result.run_dir}  gradient steps: {result.steps}  wall: {result.wall_s:.0f} s  "
        f"loss: {result.loss:.4f}  windows/s: {result.windows_per_s:.0f}"
    )
    final.run_final_evaluation(result.run_dir, args.progress)


if __name__ == "__main__":
    main()
