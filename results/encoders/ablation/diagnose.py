"""Where a particle encoder's decomposition goes wrong: merged and split objects, undrawn pixels.

    python results/encoders/ablation/diagnose.py CHECKPOINT [TEST_DATASET]

On 256 held-out frames (seed 0), per camera:
- the share of foreground labels (pusher, objects) whose pixels mostly go to an entity that also
  takes another label (merged), how many of those merges involve the pusher, and the median pixel
  distance between the centres of merged labels;
- the share of pusher and object pixels drawn (entity alpha > 0.5);
- the FG-ARI over objects only (pusher pixels left out);
- the FG-ARI if the pusher's pixels had an entity of their own, the objects' decomposition
  unchanged (what separating the pusher alone would reach);
- the FG-ARI of the frames in which two labels touch (a pixel of one is next to a pixel of the
  other) against the frames in which none do.
"""

import sys

import numpy as np
import torch

from ecrl.datasets import DemoDataset
from ecrl.encoders import load_encoder
from ecrl.encoders.data import Frames
from ecrl.encoders.evaluate import run_encoder
from ecrl.encoders.metrics import fg_ari, touching

torch.set_num_threads(1)
encoder = load_encoder(sys.argv[1])
frames = Frames(DemoDataset(sys.argv[2] if len(sys.argv) > 2 else "data/pix-mix-test"))
index = np.sort(np.random.default_rng(0).choice(len(frames), 256, replace=False))
alpha, segmentation = run_encoder(encoder, frames, index)["alpha"], frames.segmentation[index]
for view, camera in enumerate(frames.cameras):
    labels = merged = with_pusher = 0
    gaps = []  # per merge: the distance between the nearest two centres of the labels merged
    for a, seg in zip(alpha[:, view], segmentation[:, view], strict=True):
        owner = a.argmax(0)
        owners, centres = {}, {}
        for label in np.unique(seg)[1:]:
            entity, count = np.unique(owner[seg == label], return_counts=True)
            owners.setdefault(entity[count.argmax()], []).append(label)
            centres[label] = np.argwhere(seg == label).mean(0)
            labels += 1
        for group in owners.values():
            merged += len(group) - 1
            with_pusher += len(group) > 1 and 1 in group
            if len(group) > 1:
                gaps.append(min(np.linalg.norm(centres[i] - centres[j]) for i in group for j in group if i < j))
    drawn = alpha[:, view].sum(1) > 0.5
    seg = segmentation[:, view]
    objects_only = fg_ari(np.where(seg == 1, 0, seg), alpha[:, view])
    own_pusher = np.concatenate([alpha[:, view], 2.0 * (seg == 1)[:, None]], 1)  # one more entity, on the pusher
    pusher_apart = fg_ari(seg, own_pusher)
    ari = fg_ari(seg, alpha[:, view])
    touch = touching(seg)
    print(
        f"{camera}: FG-ARI {np.nanmean(ari):.3f}, objects only {np.nanmean(objects_only):.3f}, "
        f"pusher apart {np.nanmean(pusher_apart):.3f}; "
        f"frames with touching labels {touch.mean():.0%}: FG-ARI {np.nanmean(ari[touch]):.3f} there, "
        f"{np.nanmean(ari[~touch]):.3f} elsewhere; "
        f"merged labels {merged}/{labels} ({merged / labels:.1%}), merges with the pusher {with_pusher}, "
        f"merged centres {np.median(gaps):.1f} px apart (median); "
        f"drawn: pusher pixels {drawn[seg == 1].mean():.2f}, object pixels {drawn[seg >= 2].mean():.2f}"
    )
