"""Which entity errors cost the pixel planner its episodes: the true positions put into its particle rows at test time.

Usage (from the repository root)::

    MUJOCO_GL=egl python results/pixels_push2/oracle_entities.py --policy results/pixels_push2/objects/policy

A planner from pixels (table-frame keypoints, an encoder with an agent particle) is evaluated at N = 2 with
some of its particles' positions replaced, before every planning call, by the simulator's. Everything else
(the other columns, the other particles, the weights) is what the encoder gives:

- ``pusher``: each view's agent particle gets the pusher's ideal keypoint: its true centre projected into the
  view and lifted back to the table's frame at the planner's height, as the front end lifts every keypoint (the
  pusher's centre is higher than an object's, so this is a little off its true ``x, y``, as a perfect encoder's
  particle would be);
- ``objects``: in each view, every object is matched to one non-agent particle (optimal assignment on the
  lifted positions); a particle within ``--radius`` of its object gets the object's ideal keypoint (the same lift of its centre), so only
  the encoder's precision changes, not which objects it sees;
- ``objects_seen``: the same without the radius: every object's matched particle moves onto it, so an object
  the encoder missed or merged with the pusher becomes visible (at the cost of whatever that particle was);
- ``both`` and ``both_seen``: ``pusher`` with ``objects`` or ``objects_seen``.

These labels are the simulator's, which a robot does not have: this is a diagnosis of the pipeline, not a
policy. The planner was trained on the encoder's rows, so cleaner rows at test time are a shift of its input;
a gain says the error matters, no gain is weaker evidence that it does not. Prints and writes ``--out``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

import ecrl
from ecrl.envs.layout import ENTITY_FIELDS
from ecrl.envs.scene import project, unproject
from ecrl.evaluation import evaluate

POSITION = ENTITY_FIELDS["position"]
PRESENT = ENTITY_FIELDS["present"].start
IS_AGENT = ENTITY_FIELDS["is_agent"].start
KINDS = ("none", "pusher", "objects", "objects_seen", "both", "both_seen")


def substitute(
    rows: torch.Tensor, state: np.ndarray, module: Any, kind: str, radius: float
) -> tuple[torch.Tensor, int]:
    """Normalised particle rows ``(B, V * K, W)`` with the true positions of ``kind`` written in; also how many
    object particles were moved."""
    columns, views = module.columns, module.encoder.config.views
    mean, std = module.mean[columns].cpu().numpy(), module.std[columns].cpu().numpy()
    xy = rows[..., columns].cpu().numpy() * std + mean  # lifted table-frame positions, metres
    k = rows.shape[1] // views
    moved = 0
    for b in range(len(state)):
        real = state[b, :, PRESENT] > 0.5
        agent = real & (state[b, :, IS_AGENT] > 0.5)
        things = np.concatenate([state[b, agent], state[b, real & ~agent]])[:, POSITION]
        for v in range(views):
            camera = module.cameras[v]
            ideal = unproject(project(things, camera), camera, module.table_height)[:, :2]
            pusher, objects = ideal[0], ideal[1:]
            if kind in ("pusher", "both", "both_seen"):
                xy[b, v * k] = pusher
            if kind in ("none", "pusher") or not len(objects):
                continue
            others = xy[b, v * k + 1 : (v + 1) * k]
            distance = np.linalg.norm(objects[:, None] - others[None], axis=-1)
            obj, particle = linear_sum_assignment(distance)
            keep = distance[obj, particle] < radius if kind in ("objects", "both") else np.ones(len(obj), bool)
            others[particle[keep]] = objects[obj[keep]]
            moved += int(keep.sum())
    out = rows.clone()
    out[..., columns] = torch.as_tensor((xy - mean) / std, dtype=rows.dtype, device=rows.device)
    return out, moved


def with_oracle(policy: Any, kind: str, radius: float) -> dict[str, int]:
    """Make ``policy`` (a pixel planner) read ``kind``'s true positions in its rows (see the module docstring); returns
    the counts it keeps: object particles moved and frames seen."""
    module = policy.module
    if getattr(module, "table_height", None) is None or not module.encoder.uses_agent:
        raise ValueError("this probe needs a pixel planner with table-frame keypoints and an agent particle")
    counts = {"moved": 0, "frames": 0}
    original = module.entity_rows

    def entity_rows(obs: dict[str, torch.Tensor]) -> torch.Tensor:
        rows = original(obs)
        if kind == "none":
            return rows
        rows, moved = substitute(rows, obs["observation"].cpu().numpy(), module, kind, radius)
        counts["moved"] += moved
        counts["frames"] += len(rows)
        return rows

    module.entity_rows = entity_rows  # forward() reads it from the instance
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, default=Path("results/pixels_push2/objects/policy"))
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--n-objects", type=int, default=2)
    parser.add_argument("--seed", type=int, default=100000)
    parser.add_argument("--radius", type=float, default=0.03, help="objects: move only particles this close (m)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "oracle_entities.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    report = {k: v for k, v in vars(args).items() if k not in ("out", "policy", "threads")}
    report |= {"policy": str(args.policy), "results": {}}
    for kind in args.kinds:
        policy = ecrl.load(args.policy)
        counts = with_oracle(policy, kind, args.radius)
        result = evaluate(policy, [args.n_objects], episodes=args.episodes, seed=args.seed, progress=False).results[0]
        success = np.asarray(result.success)
        placed = float(np.mean(result.fraction_placed))
        moved = counts["moved"] / max(counts["frames"], 1)
        report["results"][kind] = {
            "success": int(success.sum()),
            "episodes": len(success),
            "fraction_placed": placed,
            "object_particles_moved_per_frame": moved,
        }
        print(
            f"{kind:>12}: {int(success.sum())}/{len(success)} at N = {args.n_objects}, placed {placed:.2f}, "
            f"object particles moved per frame {moved:.2f}",
            flush=True,
        )
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
