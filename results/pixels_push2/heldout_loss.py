"""Does a planner fit its demonstrations better than demonstrations it never saw? Its loss on both.

For each saved flat planner (a state planner, or a planner from pixels behind its frozen encoder), the
denoising loss of its weights (action and state terms, as training logs them, no goal dropout) on
``--batches`` batches of 128 windows drawn from its training dataset and from a held-out dataset of other
seeds. A planner from pixels sees both datasets through its own front end: the encoder's rows, tracked and
lifted to the table as in training, normalised with the policy's saved mean and standard deviation.

    python results/pixels_push2/heldout_loss.py results/diffusion_push2/policy results/pixels_push2/agent/policy \
        --labels state agent --train data/push2-pixc data/push2-pixc --heldout data/push2-pixc-small \
        --out results/pixels_push2/heldout_loss.json
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
from ecrl.diffusion.pixels import LatentWindows, PixelPlanner


def windows_source(policy, path: str):
    """What draws training windows of ``path`` as ``policy`` sees them, and its denoiser."""
    data = DemoDataset(path)
    module = policy.module
    if not isinstance(module, PixelPlanner):
        data.pixels = data.segmentation = None  # a state planner reads the rows only
        return data, module.denoiser
    kwargs = module.kwargs
    windows = LatentWindows(
        data, module.encoder, policy.device, progress=False, table_height=kwargs.get("table_height")
    )
    mean, std = np.asarray(kwargs["mean"], np.float32), np.asarray(kwargs["std"], np.float32)
    d = len(mean)  # an agent particle's flag column (after the D features) is not normalised
    windows.rows[..., :d] = (windows.rows[..., :d] * windows.std + windows.mean - mean) / std
    return windows, module.planner.denoiser


def losses(policy, path: str, batches: int) -> dict[str, float]:
    source, denoiser = windows_source(policy, path)
    rng, generator = np.random.default_rng(0), torch.Generator().manual_seed(0)
    actions, states = [], []
    with torch.no_grad():
        for _ in range(batches):
            batch = source.sample_windows(128, denoiser.config.horizon, rng)
            batch = {k: torch.as_tensor(np.ascontiguousarray(v)) for k, v in batch.items()}
            terms = loss(denoiser, batch, generator, action_weight=1.0)
            actions.append(float(terms.actions))
            states.append(float(terms.states))
    return {
        "action_loss": float(np.mean(actions)),
        "state_loss": float(np.mean(states)),
        "episodes": len(source.success),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("policies", nargs="+")
    parser.add_argument("--labels", nargs="+", required=True)
    parser.add_argument("--train", nargs="+", required=True, help="each policy's training dataset")
    parser.add_argument("--heldout", required=True, help="a dataset of other seeds (with frames for pixel planners)")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if not len(args.policies) == len(args.labels) == len(args.train):
        parser.error("give one --labels and one --train dataset per policy")
    torch.set_num_threads(args.threads)
    rows = {}
    for label, path, train in zip(args.labels, args.policies, args.train, strict=True):
        policy = ecrl.load(path)
        rows[label] = {"policy": path, "train": losses(policy, train, args.batches)}
        rows[label]["heldout"] = losses(policy, args.heldout, args.batches)
        rows[label]["action_gap"] = rows[label]["heldout"]["action_loss"] / rows[label]["train"]["action_loss"] - 1
        print(label, json.dumps(rows[label]), flush=True)
    print("| planner | action loss, training episodes | held out | gap |\n|---|---:|---:|---:|")
    for label, r in rows.items():
        print(
            f"| {label} | {r['train']['action_loss']:.4f} | {r['heldout']['action_loss']:.4f} | {r['action_gap']:+.0%} |"
        )
    args.out.write_text(json.dumps({"command": vars(args) | {"out": str(args.out)}, "results": rows}, indent=1))


if __name__ == "__main__":
    main()
