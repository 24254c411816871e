"""What fused views give a planner: how often a fused row holds the same object in both cameras.

Usage (from the repository root)::

    python results/pixels_push2/fusion_pairs.py --dataset data/push2-pixc --episodes 100

``--fuse-views`` (:func:`ecrl.encoders.rows.fuse_views`) pairs each particle of the first camera with the particle
of the second camera nearest it on the table (one-to-one per frame, the agent particles with each other). For
every state of ``--episodes`` episodes, each object is checked against the fused rows:

- **seen by view v**: some row's view-``v`` particle lies within ``--radius-cm`` of the object (table frame);
- **seen by either / by both in one row**: some row has a particle of either view near it / both of its
  particles near it (the pair agrees on the object);
- **split**: both views see it, but in different rows (the pairing missed).

and each non-agent row is checked for **agreement**: its two particles lie within ``--radius-cm`` of each
other. Prints and writes ``--out`` (default ``fusion_pairs.json`` beside this file).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from ecrl.datasets import DemoDataset
from ecrl.encoders import frames_to_images, load_encoder
from ecrl.encoders.rows import OBJECT_CENTRE, fuse_views, lift_to_table, position_columns
from ecrl.envs.layout import ENTITY_FIELDS, ENTITY_XY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=Path("data/push2-pixc"))
    parser.add_argument("--encoder", type=Path, default=Path("results/encoders/agent/particles_agent"))
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--radius-cm", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "fusion_pairs.json")
    args = parser.parse_args()
    data, encoder = DemoDataset(args.dataset), load_encoder(args.encoder)
    if len(data.cameras) != 2:
        raise SystemExit(f"fusion_pairs.py reads two cameras; {args.dataset} has {list(data.cameras)}")
    episodes = min(args.episodes, len(data))
    stop = int(data.state_starts[episodes - 1] + data.lengths[episodes - 1] + 1)
    with torch.no_grad():
        raw = np.concatenate(
            [
                encoder.encode(frames_to_images(torch.as_tensor(data.pixels[first : min(first + 256, stop)])))[
                    0
                ].numpy()
                for first in range(0, stop, 256)
            ]
        )
    columns = position_columns(encoder)
    lifted = lift_to_table(raw, list(data.cameras), columns, OBJECT_CENTRE)
    d, agent = lifted.shape[-1], int(encoder.uses_agent)
    fused = fuse_views(lifted, 2, columns, pinned=agent)[:, agent:]  # (S, K - agent, 2 D), objects' candidates
    views = np.stack([fused[..., columns], fused[..., d + columns.start : d + columns.stop]], 2)  # (S, R, 2, 2)
    rows = data.observation[:stop]
    real = rows[..., ENTITY_FIELDS["present"]][..., 0] > 0.5
    pusher = rows[..., ENTITY_FIELDS["is_agent"]][..., 0] > 0.5
    objects = real & ~pusher  # (S, N)
    truth = rows[..., ENTITY_XY]  # (S, N, 2)
    near = np.linalg.norm(views[:, None] - truth[:, :, None, None], axis=-1) * 100 < args.radius_cm  # (S,N,R,2)
    seen = near.any(2)  # (S, N, 2)
    both_in_row = (near[..., 0] & near[..., 1]).any(2)
    split = seen[..., 0] & seen[..., 1] & ~both_in_row
    seen, both_in_row, split = seen[objects], both_in_row[objects], split[objects]
    agree = np.linalg.norm(views[:, :, 0] - views[:, :, 1], axis=-1) * 100 < args.radius_cm
    summary = {
        "dataset": str(args.dataset),
        "encoder": str(args.encoder),
        "episodes": episodes,
        "states": stop,
        "radius_cm": args.radius_cm,
        "objects_seen_by_view": {camera: float(seen[..., v].mean()) for v, camera in enumerate(data.cameras)},
        "objects_seen_by_either": float(seen.any(-1).mean()),
        "objects_in_one_row_both_views": float(both_in_row.mean()),
        "objects_split_over_rows": float(split.mean()),
        "rows_whose_particles_agree": float(agree.mean()),
    }
    print(json.dumps(summary, indent=2))
    args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
