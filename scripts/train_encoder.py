"""`ecrl-train-encoder`: train an object-centric encoder (Slot Attention or particles) on camera frames.

The frames come from `ecrl-collect --pixels`. The encoder learns without labels, by reconstructing
them; MuJoCo's segmentation and the true object positions only score it. The run directory (see
`ecrl.encoders.train`) holds the config, tensorboard logs (`tensorboard --logdir runs`: losses,
images/s, decomposition images, periodic held-out FG-ARI and position-probe error), checkpoints
every `--checkpoint-every` steps, the final encoder (`ecrl.encoders.load_encoder(path)`) and its
held-out scores (`scores.json`).

Examples:
    # frames of push with 1-6 objects from expert and random actions, and held-out frames
    ecrl-collect --out data/pix-mix --n-objects 1 2 3 4 5 6 --episodes 60 --pixels 64 --random-actions 0.3 --no-only-success
    ecrl-collect --out data/pix-mix-test --seed 5000 --n-objects 1 2 3 4 5 6 --episodes 8 --pixels 64 --random-actions 0.3 --no-only-success

    ecrl-train-encoder --dataset data/pix-mix --test-dataset data/pix-mix-test --kind slot
    ecrl-train-encoder --dataset data/pix-mix --test-dataset data/pix-mix-test --kind particles --options beta_kl=0.1

    # continue a killed run from its last checkpoint (or extend a finished one with --steps)
    ecrl-train-encoder --resume runs/pix-mix__slot__0__20261130-170000

    # data-parallel on 2 GPUs (or CPU processes: gloo), the same global --batch-size split over them
    torchrun --nproc-per-node 2 -m ecrl.scripts.train_encoder --dataset data/pix-mix --kind slot --batch-size 64
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tyro

from ecrl.datasets import DatasetError
from ecrl.distributed import is_main
from ecrl.encoders.train import EncoderTrainConfig, train
from ecrl.scripts.cli import cli_errors, training_config_of


@dataclass
class TrainEncoderArgs(EncoderTrainConfig):
    """Options of `ecrl-train-encoder` (a training config plus --resume)."""

    resume: Path | None = None
    """Continue the run in this directory from checkpoints/latest/ (its config.json is used, except a larger --steps)."""


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `ecrl-train-encoder`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = tyro.cli(TrainEncoderArgs, args=argv, description=__doc__)
    with cli_errors("ecrl-train-encoder", (DatasetError, FileExistsError, FileNotFoundError, ValueError)):
        result = train(training_config_of(args, EncoderTrainConfig, argv), resume=args.resume)
    if not is_main():  # under torchrun, rank 0 reports
        return
    scores = ", ".join(f"{k} {v:.3f}" for k, v in result.scores.items())
    print(
        f"run directory: {result.run_dir}  steps: {result.steps}  wall: {result.wall_s:.0f} s  "
        f"loss: {result.loss:.5f}  images/s: {result.images_per_s:.0f}\nheld-out: {scores}"
    )


if __name__ == "__main__":
    main()
