"""`ecrl-bench`: speed benchmarks, one subcommand each, every one writing JSON + a markdown table + a plot.

Subcommands:
    envs      env steps/s vs number of objects (gym.make and unwrapped) for push and the Fetch arm, the
              raw-physics floor of the same model, FetchPush-v4 and FetchPickAndPlace-v4 for comparison,
              reset time, render fps (see `ecrl.envs.bench`)
    policies  SAC+HER gradient updates/s of SB3's MLP vs the EIT vs DeepSets, batch-1 actor latency at
              N=12 (see `ecrl.policies.bench`)
    diffusion planning latency per env step at N=3 and N=12 (horizon, sampling steps, replan interval),
              one denoiser call, training windows/s (see `ecrl.diffusion.bench`); `--env ogbench-cube`:
              the same on OGBench's cubes, with env steps/s with planning
    planners  trained planners side by side on one task: success (95% CI) and planning ms per env step
              (see `ecrl.diffusion.bench_planners`)
    pixels    the planner from pixels against the state planner at N=3: training windows/s and planning ms
              per env step of a batch of envs, encoding included, and the ratios (see `ecrl.diffusion.bench_pixels`)
    encoders  object-centric encoders: held-out FG-ARI, object-position probe error (cm), encoded
              images/s against MuJoCo rendering (see `ecrl.encoders.bench`)
    ogbench   the OGBench cube adapter's step time against OGBench's own env, steps/s for 2, 3, 4 and 8
              cubes, play data steps/s (see `ecrl.envs.ogbench_bench`; extra `ecrl[ogbench]`)
    scaling   1 vs K processes: diffusion training windows/s under torchrun, evaluation and collection env
              steps/s with --workers, beside the machine's own parallel ceiling (see `ecrl.scaling`)

Examples:
    # the full environment benchmark (about a minute on 2 cores) -> results/bench_envs/
    ecrl-bench envs

    # a smoke run in a few seconds
    ecrl-bench envs --n-objects 3 --fetch-objects 1 --steps 200 --resets 10 --frames 5 --repeats 1 --out /tmp/bench_envs

    # median instead of best of 7 runs, fail (exit 1) when a target is missed
    ecrl-bench envs --repeats 7 --reduce median --strict

    # SAC updates/s (MLP vs EIT vs DeepSets) and actor latency (under 3 minutes) -> results/bench_policies/
    ecrl-bench policies

    # a smaller EIT, on one thread, failing (exit 1) when a target is missed
    ecrl-bench policies --width 32 --heads 1 --threads 1 --strict

    # diffusion planner latency per env step at N=3 and 12, and training windows/s -> results/bench_diffusion/
    ecrl-bench diffusion --threads 1

    # a trained planner, training windows from a real dataset
    ecrl-bench diffusion --checkpoint runs/<run>/final --dataset data/push3

    # OGBench cubes: a planner trained on play data, planning ms per env step and env steps/s with planning
    # at 2, 3, 4 and 8 cubes (a checkpoint trained on OGBench data picks --env ogbench-cube by itself)
    ecrl-bench diffusion --env ogbench-cube --n-objects 2 3 4 8 --settings 8 5 4 --checkpoint <run>/final \\
        --dataset <play data> --threads 1 --out results/bench_ogbench_planning

    # the flat and the hierarchical planner on one task -> results/diffusion_hierarchical/
    ecrl-bench planners runs/<flat-run> runs/<hierarchical-run> --labels flat hierarchical \\
        --objects 4 --goal sort --episodes 20 --out results/diffusion_hierarchical

    # the planner from pixels (committed particle encoder) against the state planner -> results/bench_pixels/
    ecrl-bench pixels --threads 1

    # trained encoders side by side on held-out frames -> results/bench_encoders/
    ecrl-bench encoders --checkpoints runs/<slot-run> runs/<particles-run> --labels slot particles

    # OGBench cubes: adapter vs OGBench step time (under 2 minutes) -> results/bench_ogbench/
    ecrl-bench ogbench

    # 1 vs 2 processes: diffusion training under torchrun, evaluation and collection workers -> results/bench_scaling/
    ecrl-bench scaling

    # every option
    ecrl-bench envs --help
    ecrl-bench policies --help
    ecrl-bench diffusion --help
    ecrl-bench planners --help
    ecrl-bench pixels --help
    ecrl-bench encoders --help
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from types import ModuleType

import tyro

from ecrl.diffusion.bench import DiffusionBenchConfig
from ecrl.diffusion.bench_pixels import PixelsBenchConfig
from ecrl.encoders.bench import EncodersBenchConfig
from ecrl.envs.bench import EnvsBenchConfig
from ecrl.envs.ogbench_bench import OGBenchBenchConfig
from ecrl.policies.bench import PoliciesBenchConfig
from ecrl.reporting import run_benchmark
from ecrl.scaling import ScalingBenchConfig
from ecrl.scripts import (
    bench_diffusion,
    bench_encoders,
    bench_envs,
    bench_ogbench,
    bench_pixels,
    bench_planners,
    bench_policies,
    bench_scaling,
)

# name -> (the measurement's config, which is the subcommand's typed arguments; the CLI module that reports it).
BENCHMARKS: dict[str, tuple[type, ModuleType]] = {
    "envs": (EnvsBenchConfig, bench_envs),
    "policies": (PoliciesBenchConfig, bench_policies),
    "diffusion": (DiffusionBenchConfig, bench_diffusion),
    "planners": (bench_planners.PlannersArgs, bench_planners),  # the planners' config with positional paths
    "pixels": (PixelsBenchConfig, bench_pixels),
    "encoders": (EncodersBenchConfig, bench_encoders),
    "ogbench": (OGBenchBenchConfig, bench_ogbench),
    "scaling": (ScalingBenchConfig, bench_scaling),
}


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `ecrl-bench`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = tyro.extras.subcommand_cli_from_dict(
        {name: cls for name, (cls, _) in BENCHMARKS.items()}, prog="ecrl-bench", description=__doc__, args=argv
    )
    bench = next(module for cls, module in BENCHMARKS.values() if isinstance(args, cls))
    run_benchmark(args, shlex.join(["ecrl-bench", *argv]), bench)


if __name__ == "__main__":
    main()
