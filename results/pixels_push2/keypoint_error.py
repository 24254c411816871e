"""How close table-frame keypoints land to the objects: per camera, each object's nearest lifted particle.

Usage (from the repository root)::

    python results/pixels_push2/keypoint_error.py --dataset data/push2-pixg --frames 1000
    python results/pixels_push2/keypoint_error.py --encoder results/encoders/agent/particles_agent \
        --out results/pixels_push2/keypoint_error_agent.json

For ``--frames`` states drawn from the pixel dataset, the frozen particle encoder's particles of each
view are lifted to the table plane at an object's centre height (:func:`ecrl.encoders.rows.lift_to_table`)
and, for every object (and the pusher), the distance from its true ``(x, y)`` to the nearest lifted
particle of that view is taken. Objects are also split by whether the pusher is near them (centres within
``--near-cm``, about touching for the default sizes) and counted as *shared* where their nearest particle is
the pusher's nearest particle too. Prints and writes ``--out`` (default ``keypoint_error.json`` beside this file).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from ecrl.datasets import DemoDataset
from ecrl.encoders import frames_to_images, load_encoder
from ecrl.encoders.rows import OBJECT_CENTRE, lift_to_table, position_columns
from ecrl.envs.layout import ENTITY_FIELDS, ENTITY_XY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=Path("data/push2-pixg"))
    parser.add_argument("--encoder", type=Path, default=Path("results/encoders/particles"))
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--near-cm", type=float, default=7.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "keypoint_error.json")
    args = parser.parse_args()
    data, encoder = DemoDataset(args.dataset), load_encoder(args.encoder)
    rng = np.random.default_rng(args.seed)
    index = np.sort(rng.choice(len(data.pixels), size=min(args.frames, len(data.pixels)), replace=False))
    with torch.no_grad():
        raw = encoder.encode(frames_to_images(torch.as_tensor(data.pixels[index])))[0].numpy()
    cameras, columns = list(data.cameras), position_columns(encoder)
    lifted = lift_to_table(raw, cameras, columns, OBJECT_CENTRE)[..., columns]
    rows = data.observation[index]
    real = rows[..., ENTITY_FIELDS["present"]][..., 0] > 0.5
    agent = rows[..., ENTITY_FIELDS["is_agent"]][..., 0] > 0.5
    k = raw.shape[1] // len(cameras)
    objects = real & ~agent
    pusher = rows[np.arange(len(rows)), agent.argmax(1)][:, ENTITY_XY]  # (F, 2)
    near = objects & (np.linalg.norm(rows[..., ENTITY_XY] - pusher[:, None], axis=-1) < args.near_cm / 100)
    report = {"dataset": str(args.dataset), "encoder": str(args.encoder), "frames": len(index), "height": OBJECT_CENTRE}
    for v, camera in enumerate(cameras):
        particles = lifted[:, v * k : (v + 1) * k]  # (F, K, 2)
        distance = np.linalg.norm(rows[:, :, None, ENTITY_XY] - particles[:, None], axis=-1)  # (F, N, K)
        gap, nearest = distance.min(-1), distance.argmin(-1)  # (F, N)
        shared = nearest == nearest[np.arange(len(rows)), agent.argmax(1)][:, None]
        groups = {
            "objects": objects,
            "agent": real & agent,
            "objects_near_pusher": near,
            "objects_away_from_pusher": objects & ~near,
        }
        for name, which in groups.items():
            d = gap[which] * 100
            report[f"{camera}/{name}"] = {
                "count": int(which.sum()),
                "median_cm": float(np.median(d)),
                "p90_cm": float(np.percentile(d, 90)),
                "within_2cm": float((d < 2).mean()),
                **({"shared_with_pusher": float(shared[which].mean())} if name != "agent" else {}),
            }
    print(json.dumps(report, indent=2))
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
