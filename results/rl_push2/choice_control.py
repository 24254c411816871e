"""Control for a selecting policy: does its learnt object choice matter, or only the structure around it?

Evaluates the same weights with three scorers, keeping the action net, the commitment and the
skipping of placed objects: the learnt scorer; the scorer re-initialised at random (a fixed but
arbitrary preference among objects); and a constant scorer (every object rated alike, so the first
object row not yet placed, an order that means nothing). Train part of the colour x shape split,
tuning seeds by default. Prints a table and writes JSON:

    python results/rl_push2/choice_control.py results/rl_push2/select/policy --objects 2 4 8 \
        --out results/rl_push2/choice_control.json

This control is why issue 20 removed the scorer (and ``select``) in favour of the focus rule
(``ecrl.focus.Focus``). It runs only with an ecrl from before that change, on the checkpoint as it
was then, with its ``scorer.*`` tensors (``git log -- results/rl_push2/select/policy``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import ecrl
from ecrl.evaluation import evaluate


class ConstantScorer(torch.nn.Module):
    """Rates every present object alike (``-inf`` on absent rows, as a real scorer)."""

    def __init__(self, scorer: torch.nn.Module) -> None:
        super().__init__()
        self.scorer = scorer

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.where(torch.isfinite(self.scorer(obs)), 0.0, float("-inf"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy", type=Path)
    parser.add_argument("--objects", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--seed", type=int, default=300_000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, dict[int, int]] = {}
    for variant in ("learnt", "random", "constant"):
        policy = ecrl.load(args.policy)
        module = policy.module
        if getattr(module, "scorer", None) is None:
            raise SystemExit(f"{args.policy} is not a selecting policy (trained without --select)")
        if variant == "random":
            torch.manual_seed(0)
            for layer in module.scorer.modules():
                if hasattr(layer, "reset_parameters") and layer is not module.scorer:
                    layer.reset_parameters()
        elif variant == "constant":
            module.scorer = ConstantScorer(module.scorer)
        report = evaluate(
            policy,
            args.objects,
            split="colour_shape",
            parts=("train",),
            episodes=args.episodes,
            seed=args.seed,
            stop_on_success=True,
            progress=False,
        )
        results[variant] = {r.n_objects: int(sum(r.success)) for r in report.results}
        print(variant, results[variant], flush=True)
    header = "| scorer | " + " | ".join(f"N = {n}" for n in args.objects) + " |"
    print(header + "\n|---|" + "---:|" * len(args.objects))
    for variant, row in results.items():
        print(f"| {variant} | " + " | ".join(f"{row[n]}/{args.episodes}" for n in args.objects) + " |")
    payload = {"policy": str(args.policy), "seed": args.seed, "episodes": args.episodes, "success": results}
    args.out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
