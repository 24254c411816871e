"""How far an encoder's keypoints are from its objects, and what the position probe reaches without an encoder.

    python results/encoders/ablation/position_floor.py CHECKPOINT FIT_DATASET TEST_DATASET

- The probe's floor: the position probe of ``ecrl-bench encoders`` fitted on the true mask centres
  (pixel centre and area of each object in every camera; 1,024 frames of FIT_DATASET) and scored
  on 1,024 frames of TEST_DATASET, in centimetres.
- The encoder: on 256 held-out frames (seed 0), per camera, the distance in pixels between each
  object's mask centre and the keypoint of the entity matched to it (``match_objects``), and between
  the mask centre and the centre of what that entity draws (its alpha above 0.3).
"""

import sys

import numpy as np
import torch

from ecrl.datasets import DemoDataset
from ecrl.encoders import load_encoder
from ecrl.encoders.data import Frames
from ecrl.encoders.evaluate import run_encoder
from ecrl.encoders.metrics import PositionProbe, match_objects

torch.set_num_threads(2)
fit, test = Frames(DemoDataset(sys.argv[2])), Frames(DemoDataset(sys.argv[3]))


def centres(frames: Frames, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per visible object: (x, y, area) of its mask in every camera, and its table position."""
    x, y = [], []
    for i in index:
        for o in range(frames.n_objects[i]):
            masks = [frames.segmentation[i, v] == o + 2 for v in range(frames.views)]
            if all(m.any() for m in masks):
                x.append([c for m in masks for c in (*np.argwhere(m).mean(0)[::-1], m.sum())])
                y.append(frames.positions[i, o])
    return np.array(x, np.float32), np.array(y, np.float32)


rng = np.random.default_rng(0)
fit_x, fit_y = centres(fit, np.sort(rng.choice(len(fit), 1024, replace=False)))
test_x, test_y = centres(test, np.sort(rng.choice(len(test), 1024, replace=False)))
floor = PositionProbe().fit(fit_x, fit_y).score(test_x, test_y)
print(
    f"probe on true mask centres: {floor.mean_cm:.2f} cm mean, {floor.median_cm:.2f} median ({floor.objects} objects)"
)

encoder = load_encoder(sys.argv[1])
index = np.sort(np.random.default_rng(0).choice(len(test), 256, replace=False))
run = run_encoder(encoder, test, index)
alpha, rows, seg, n = run["alpha"], run["entities"], test.segmentation[index], test.n_objects[index]
matches = match_objects(alpha, seg, n)
k, size = alpha.shape[2], alpha.shape[-1]
ys, xs = np.mgrid[0:size, 0:size] + 0.5
for view, camera in enumerate(test.cameras):
    keypoint, drawn = [], []
    for s in range(len(index)):
        for o in range(n[s]):
            mask, entity = seg[s, view] == o + 2, matches[s, o, view]
            if not mask.any() or entity < 0:
                continue
            cy, cx = np.argwhere(mask).mean(0) + 0.5
            mu = (rows[s, view * k + entity, :2] + 1) / 2 * size  # x, y in pixels
            keypoint.append(np.hypot(mu[0] - cx, mu[1] - cy))
            a = alpha[s, view, entity] * (alpha[s, view, entity] > 0.3)
            mass = max(a.sum(), 1e-6)
            drawn.append(np.hypot((a * xs).sum() / mass - cx, (a * ys).sum() / mass - cy))
    print(
        f"{camera}: matched keypoint to mask centre {np.mean(keypoint):.2f} px mean, {np.median(keypoint):.2f} median; "
        f"drawn centre to mask centre {np.mean(drawn):.2f} px mean, {np.median(drawn):.2f} median"
    )
