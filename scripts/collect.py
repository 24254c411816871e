"""`ecrl-collect`: roll out the scripted expert (or a trained policy) and write a demonstration dataset.

The dataset is a directory of compressed `.npz` shards and a `meta.json` (the format is described in the `ecrl.datasets` module docstring):
per episode its entity observations, actions, goals, rewards, success flags, the expert's random
stall steps, its task spec and seed. `ecrl.datasets.DemoDataset(PATH)` reads it and cuts
fixed-horizon windows for diffusion planners.

Episode `k` of a collection resets with seed `--seed + k`: the same command writes the same arrays.
Failed episodes are left out (`--no-only-success` keeps them) and counted in `meta.json`. An
existing dataset is never overwritten: `--append` adds shards to it, continuing from the seed where
its last collection stopped.

`--workers K` collects in K processes, each a contiguous range of the batches (`--batch-size`
episodes of consecutive seeds) into a shard set of its own, `collection_<c>/worker_<k>/`; `meta.json`
then lists every set's shards in seed order, and `DemoDataset` reads the arrays one process would
have written (the shard files too, where every set fills whole shards). A killed parallel collection
is finished by the same command with `--append` (each set continues after its last shard; any
`--workers`). Under torchrun (its `RANK`/`WORLD_SIZE`) every rank collects `--workers` shard sets and
rank 0 writes `meta.json`.

Examples:
    # 100 expert episodes of push with 3 objects (about 10 s on one core)
    ecrl-collect --out data/push3 --n-objects 3 --episodes 100

    # mixed numbers of objects, the train part of the colour x shape split
    ecrl-collect --out data/push123-cs --n-objects 1 2 3 --episodes 200 --split colour_shape

    # 100 more episodes into the same dataset
    ecrl-collect --out data/push3 --n-objects 3 --episodes 100 --append

    # the same dataset from 4 processes (shard sets collection_000/worker_000 … worker_003/); if it is
    # killed, the same command with --append finishes it
    ecrl-collect --out data/push3 --n-objects 3 --episodes 1000 --batch-size 25 --workers 4

    # the same under torchrun: each of the 2 ranks collects 2 shard sets, rank 0 writes meta.json
    torchrun --nproc-per-node 2 -m ecrl.scripts.collect --out data/push3 --n-objects 3 --episodes 1000 --workers 2

    # the Fetch arm's scripted expert (ecrl.envs.FetchExpert): pick-and-place of 2 objects, 4-D actions
    # (about 6 episodes/s on one core)
    ecrl-collect --env fetch --skill pick_place --n-objects 2 --episodes 2000 --out data/fetch-pick_place2

    # roll out a trained policy instead of the expert, keeping its failures too
    ecrl-collect --out data/push1-eit --n-objects 1 --policy runs/push1-positions-eit__td3__0__20250101-000000 --no-only-success

OGBench cubes (`pip install 'ecrl[ogbench]'`): `--env ogbench-cube --play` generates play data with
OGBench's own oracle, following its `cube-*-play` recipe (OGBench's `data_gen_scripts/
generate_manipspace.py` with `dataset_type=play`): `CubePlanOracle(noise=0.1, noise_smoothing=0.5)`
plans a pick-and-place of one target cube; when the plan ends, `set_new_target(p_stack)` chooses the
next target cube and goal (stacked on another cube with probability p_stack, drawn per episode:
double U(0, 0.25), triple U(0.05, 0.35), quadruple U(0.1, 0.5), octuple U(0, 0.35)); 1,001-step
episodes (`--play-steps`), `terminate_at_goal=False`, actions clipped to [-1, 1], no random actions.
Episode k resets the env with seed `--seed + k` and the oracle draws from its own stream of that
seed, so a collection is deterministic and `--append` continues it. OGBench's datasets hold 1,000
such episodes (its `1M` transitions; 100 more make its validation file).

    # cube-double play data, 1,000 episodes of 1,001 steps (about 1M transitions)
    ecrl-collect --env ogbench-cube --n-objects 2 --play --episodes 1000 --out data/ogbench-cube-double-play

    # convert a published OGBench file instead (its keys: observations, actions, terminals, qpos, qvel)
    ecrl-collect --env ogbench-cube --from-ogbench ~/.ogbench/data/cube-double-play-v0.npz --out data/cube-double-play
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tyro

import ecrl
from ecrl.checkpoint import CheckpointError
from ecrl.datasets import CollectConfig, DatasetError, collect_dataset, import_ogbench_dataset
from ecrl.parallel import PolicyLoader, torchrun_rank
from ecrl.scripts.cli import cli_errors, config_of
from ecrl.scripts.eval import fixed_n_max


@dataclass
class Args(CollectConfig):
    """Options of `ecrl-collect`: what to roll out (a collection config), with which policy, and where to write it."""

    out: Path | None = None
    """Dataset directory (default: `data/push<N>-<goal>[-<split>]__<expert|policy>`)."""
    append: bool = False
    """Add episodes to the dataset in `--out` (without it an existing dataset is an error)."""
    policy: str | None = None
    """A policy checkpoint loadable by `ecrl.load` (run directory, checkpoint directory or file); default: the scripted expert."""
    device: str = "cpu"
    """Torch device of `--policy`."""
    threads: int | None = None
    """torch CPU threads for `--policy` (default: torch's choice)."""
    from_ogbench: Path | None = None
    """Convert this OGBench dataset file (`.npz`, e.g. cube-double-play-v0.npz) instead of rolling anything out."""
    workers: int = 1
    """Processes collecting, each into a shard set of its own (`collection_<c>/worker_<k>/`) that `meta.json` lists in seed order: the dataset reads as the one a single process writes. Under torchrun, each rank collects `--workers` shard sets."""


def default_out(args: Args) -> Path:
    """`data/push<N>-<goal>[-<split>]__<expert|policy>` (N joined by `_` when there are several),
    `data/fetch-<skill><N>-<goal>[-<split>]__<expert|policy>` for the Fetch arm, or
    `data/ogbench-cube<N>-<play|policy>` for OGBench cubes."""
    n = "_".join(map(str, args.n_objects))
    if args.env == "ogbench-cube":
        return Path("data") / f"ogbench-cube{n}-{'policy' if args.policy else 'play'}"
    split = f"-{args.split}" if args.split else ""
    task = f"fetch-{args.skill}" if args.env == "fetch" else "push"
    return Path("data") / f"{task}{n}-{args.goal}{split}__{'policy' if args.policy else 'expert'}"


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `ecrl-collect`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with cli_errors(
        "ecrl-collect", (CheckpointError, DatasetError, ValueError)
    ):  # bad input: a message, not a traceback
        args = tyro.cli(Args, args=argv, prog="ecrl-collect", description=__doc__)
        command = shlex.join(["ecrl-collect", *argv])
        if args.from_ogbench is not None:
            if args.env != "ogbench-cube" or args.policy is not None:
                raise ValueError("--from-ogbench converts an OGBench file: pass --env ogbench-cube, and no --policy")
            out = args.out or Path("data") / args.from_ogbench.stem
            result = import_ogbench_dataset(
                out, args.from_ogbench, append=args.append, shard_episodes=args.shard_episodes, command=command
            )
            print(f"converted {result.kept} episodes ({result.steps} steps) from {args.from_ogbench} to {out}/")
            return
        policy, info = None, None
        config = config_of(args, CollectConfig)
        ranks = torchrun_rank()
        if args.policy is not None:
            if args.threads:
                import torch

                torch.set_num_threads(args.threads)
            policy = ecrl.load(args.policy, device=args.device)
            info = {"policy": args.policy}
            width = fixed_n_max(policy)  # a flat MLP reads exactly the rows it was trained with
            if width is not None and config.n_max not in (None, width):
                raise ValueError(f"this flat-MLP policy reads exactly {width} object rows; got --n-max {config.n_max}")
            if width is not None:
                config = dataclasses.replace(config, n_max=width)
            if args.workers > 1:  # each worker loads the policy itself
                policy = PolicyLoader(args.policy, args.device)
        out = args.out or default_out(args)
        result = collect_dataset(
            out,
            config,
            policy,
            append=args.append,
            command=command,
            policy_info=info,
            workers=args.workers,
            ranks=ranks,
        )
    if ranks is not None and ranks[0] != 0:
        return
    rate = (result.kept + result.dropped) / max(result.wall_s, 1e-9)
    print(
        f"wrote {result.kept} episodes ({result.steps} steps, {len(result.shards)} shards) to {result.path}/; "
        f"dropped {result.dropped} failed; seeds {result.seeds[0]} … {result.seeds[1] - 1}; "
        f"{result.wall_s:.1f} s ({rate:.1f} episodes/s)"
    )


if __name__ == "__main__":
    main()
