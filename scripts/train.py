"""`ecrl-train`: train an entity-centric (or flat MLP baseline) policy with SB3 + HER on an ecrl push task.

Writes a run directory (see `ecrl.policies.train`): config, tensorboard logs (`tensorboard --logdir runs`),
periodic evaluations, checkpoints every `--checkpoint-every` steps, the final policy, and at the end an
evaluation on more objects than trained (`eval/`, like `ecrl-eval`).

Examples:
    # the recipe of results/rl_push1 (the defaults): EIT + TD3 + HER on 1 object, expert demos, BC, DAgger
    ecrl-train --n-objects 1

    # 2 objects, trained on the colour x shape split's train part, expert-seeded replay + BC term
    ecrl-train --n-objects 2 --split colour_shape --demos 200 --bc-steps 2000 --bc-weight 1 --steps 200000

    # a larger EIT (the model's size is the nested --net config)
    ecrl-train --n-objects 2 --net.width 64 --net.heads 4 --net.blocks 2 --steps 200000

    # SB3's flat MLP baseline with the same budget
    ecrl-train --n-objects 1 --arch mlp --steps 60000

    # continue a killed run from its last checkpoint
    ecrl-train --resume runs/push1-positions-eit__sac__0__20261130-120000

    # behaviour cloning and DAgger's refits data-parallel in 2 processes, then RL in rank 0
    torchrun --nproc-per-node 2 -m ecrl.scripts.train --n-objects 1
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tyro

from ecrl.distributed import is_main
from ecrl.policies.train import TrainConfig, train
from ecrl.scripts.cli import training_config_of
from ecrl.scripts.eval import FinalEvaluation


@dataclass
class TrainArgs(TrainConfig, FinalEvaluation):
    """Options of `ecrl-train` (a training config plus what to do around it)."""

    resume: Path | None = None
    """Continue the run in this directory from checkpoints/latest/, or, killed before RL started, its imitation stage
    from checkpoints/imitation/ (its config.json is used; other options are ignored, except --final-eval-* given again: without them, the
    final evaluation of the run's first call)."""


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `ecrl-train`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = tyro.cli(TrainArgs, args=argv, description=__doc__)
    final = FinalEvaluation.of_call(args, args.resume, argv)
    result = train(training_config_of(args, TrainConfig, argv), resume=args.resume, session=final.session_record())
    if not is_main():  # under torchrun, rank 0 trains the RL stage, reports and evaluates
        return
    print(f"run directory: {result.run_dir}  env steps: {result.env_steps}  wall: {result.wall_s:.0f} s")
    final.run_final_evaluation(result.run_dir, args.progress)


if __name__ == "__main__":
    main()
