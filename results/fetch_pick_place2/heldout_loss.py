"""Is the Fetch pick-and-place planner limited by its data or by its size? Its loss on seen and unseen demonstrations.

For each planner, the denoising loss (the training objective: state and action terms, no goal
dropout, no added objects) is averaged over the same ``--batches`` batches of windows, drawn with a
fixed seed from the training dataset and from a held-out dataset of the same expert on other seeds.
A held-out loss well above the training loss says the planner has learnt its 2,000 demonstrations
better than the task (more data should help); equal losses say it is limited by its size or its
training, not by the data.

Usage::

    ecrl-collect --env fetch --skill pick_place --n-objects 2 --episodes 300 --seed 900000 \
        --out data/fetch-pick_place2-val
    python results/fetch_pick_place2/heldout_loss.py results/fetch_pick_place2/policy \
        results/fetch_pick_place2/placed_finetune/policy --train data/fetch-pick_place2 \
        --heldout data/fetch-pick_place2-val --out results/fetch_pick_place2/heldout_loss.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

import ecrl
from ecrl.datasets import DemoDataset
from ecrl.diffusion.noise import loss


@torch.no_grad()
def mean_loss(denoiser, dataset: DemoDataset, batches: int, batch_size: int, seed: int, action_weight: float) -> dict:
    rng, generator = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    totals = np.zeros(3)
    for _ in range(batches):
        batch = dataset.sample_windows(batch_size, denoiser.config.horizon, rng)
        batch = {k: torch.as_tensor(np.ascontiguousarray(v)) for k, v in batch.items()}
        terms = loss(denoiser, batch, generator, action_weight)
        totals += [float(terms.total), float(terms.states), float(terms.actions)]
    total, states, actions = totals / batches
    return {"total": round(total, 5), "states": round(states, 5), "actions": round(actions, 5)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policies", nargs="+")
    parser.add_argument("--train", required=True)
    parser.add_argument("--heldout", required=True)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--action-weight", type=float, default=10.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = {"train": DemoDataset(args.train), "heldout": DemoDataset(args.heldout)}
    rows = []
    for path in args.policies:
        denoiser = ecrl.load(path).module.denoiser.eval()
        row = {"policy": path}
        for name, dataset in data.items():
            row[name] = mean_loss(denoiser, dataset, args.batches, args.batch_size, args.seed, args.action_weight)
        row["heldout_over_train_actions"] = round(row["heldout"]["actions"] / row["train"]["actions"], 3)
        rows.append(row)
        print(json.dumps(row))
    if args.out:
        sizes = {name: {"path": str(d.path), "episodes": len(d), "steps": d.num_steps} for name, d in data.items()}
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        args.out.write_text(json.dumps({"settings": settings, "datasets": sizes, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
