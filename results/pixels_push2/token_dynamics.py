"""What a pixel planner is asked to predict: how well its tracked tokens follow the things in the scene.

Usage (from the repository root)::

    python results/pixels_push2/token_dynamics.py --dataset data/push2-pixg --episodes 100

A planner from pixels is trained on windows of tracked token rows (:class:`ecrl.diffusion.pixels.LatentWindows`:
the frozen encoder's particles of every frame, lifted to the table plane, re-ordered per camera to follow
the frame before). It learns the scene's dynamics only as far as a token keeps standing for the same thing
from one step to the next. For ``--episodes`` episodes of the pixel dataset, every tracked token of every
view is labelled at each state with the true entity (the pusher or an object) whose ``(x, y)`` is nearest
to it, if within ``--radius-cm``, and otherwise *none*. Reported per view:

- **switches**: of the consecutive-state pairs where a token is labelled with an entity at both states, the
  share where the labels differ (the token jumped from one thing to another);
- **coverage**: the share of (state, entity) pairs with a labelled token, and of *followed* pairs, where one
  token stays on the entity from that state to the next;
- **displacement error**: for a token labelled with the same object at both states, how far its step
  displacement is from the object's true one (cm), beside the object's mean true step displacement.

Over both views (``both_views``): the share of object-states that neither view labels, overall and with the
pusher within ``--near-cm`` (in contact), and of those the share that a view labelled within the last 1, 2, 4 or 8
states of the episode, which is what a planner with a memory of that many frames could still see (a memory of one
frame was tried and rejected: the README's session 25).

Prints and writes ``--out`` (default ``token_dynamics.json`` beside this file).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from ecrl.datasets import DemoDataset
from ecrl.diffusion.pixels import track
from ecrl.encoders import frames_to_images, load_encoder
from ecrl.encoders.rows import OBJECT_CENTRE, lift_to_table, position_columns
from ecrl.envs.layout import ENTITY_FIELDS, ENTITY_XY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=Path("data/push2-pixg"))
    parser.add_argument("--encoder", type=Path, default=Path("results/encoders/particles"))
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--radius-cm", type=float, default=3.0)
    parser.add_argument("--near-cm", type=float, default=7.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "token_dynamics.json")
    args = parser.parse_args()
    data, encoder = DemoDataset(args.dataset), load_encoder(args.encoder)
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
    cameras, columns = list(data.cameras), position_columns(encoder)
    lifted = lift_to_table(raw, cameras, columns, OBJECT_CENTRE)
    mean, std = lifted.mean((0, 1)), lifted.std((0, 1)) + 1e-6
    pinned = int(encoder.uses_agent)  # an agent particle stays in place
    tracked = track((lifted - mean) / std, data.lengths[:episodes], len(cameras), pinned) * std + mean
    xy = tracked[..., columns]  # (S, V*K, 2) table-frame positions, in tracked order
    rows = data.observation[:stop]
    real = rows[..., ENTITY_FIELDS["present"]][..., 0] > 0.5
    agent = rows[..., ENTITY_FIELDS["is_agent"]][..., 0] > 0.5
    truth = rows[..., ENTITY_XY]  # (S, N, 2)
    pusher = truth[np.arange(len(truth)), agent.argmax(1)]  # (S, 2)
    # consecutive states within an episode: (t, t + 1) for t < the episode's last state
    starts, lengths = data.state_starts[:episodes], data.lengths[:episodes]
    pairs = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths, strict=True)])
    k = xy.shape[1] // len(cameras)
    seen = np.zeros(truth.shape[:2], bool)  # (S, N): some view labels the entity
    report = {"dataset": str(args.dataset), "encoder": str(args.encoder), "episodes": episodes, "states": stop}
    report["radius_cm"] = args.radius_cm
    for v, camera in enumerate(cameras):
        tokens = xy[:, v * k : (v + 1) * k]  # (S, K, 2)
        distance = np.linalg.norm(tokens[:, :, None] - truth[:, None], axis=-1)  # (S, K, N)
        distance = np.where(real[:, None], distance, np.inf)
        label = np.where(distance.min(-1) < args.radius_cm / 100, distance.argmin(-1), -1)  # (S, K)
        a, b = label[pairs], label[pairs + 1]
        both = (a >= 0) & (b >= 0)
        held = (a == b) & both  # (P, K) the token stays on one entity
        covered = np.stack([(label == n).any(1) for n in range(truth.shape[1])], 1) & real  # (S, N)
        seen |= covered
        followed = np.stack([(held & (a == n)).any(1) for n in range(truth.shape[1])], 1) & real[pairs]
        obj = ~agent[pairs] & real[pairs]  # (P, N)
        move_true = truth[pairs + 1] - truth[pairs]  # (P, N, 2)
        move_token = tokens[pairs + 1] - tokens[pairs]  # (P, K, 2)
        errors, errors_moving, moves = [], [], []
        for n in range(truth.shape[1]):
            token_held = held & (a == n) & obj[:, n : n + 1]  # (P, K)
            p, t = np.nonzero(token_held)
            error = np.linalg.norm(move_token[p, t] - move_true[p, n], axis=-1)
            errors.append(error)
            errors_moving.append(error[np.linalg.norm(move_true[p, n], axis=-1) > 0.001])
            moves.append(np.linalg.norm(move_true[obj[:, n], n], axis=-1))
        errors, moves = np.concatenate(errors) * 100, np.concatenate(moves) * 100
        errors_moving = np.concatenate(errors_moving) * 100
        moving = moves > 0.1
        report[camera] = {
            "switches": float((a != b)[both].mean()),
            "coverage_objects": float(covered[~agent & real].mean()),
            "coverage_pusher": float(covered[agent & real].mean()),
            "followed_objects": float(followed[~agent[pairs] & real[pairs]].mean()),
            "followed_pusher": float(followed[agent[pairs] & real[pairs]].mean()),
            "displacement_error_cm_median": float(np.median(errors)),
            "displacement_error_cm_mean": float(errors.mean()),
            "displacement_error_cm_median_when_moving": float(np.median(errors_moving)),
            "object_step_cm_mean": float(moves.mean()),
            "object_step_cm_mean_when_moving": float(moves[moving].mean()) if moving.any() else 0.0,
            "share_of_object_steps_moving": float(moving.mean()),
        }
        if pinned:  # the agent particle (token 0 of the view): on the pusher, and its step displacement's error
            on = label[:, 0] == agent.argmax(1)
            step_error = np.linalg.norm(
                (tokens[pairs + 1, 0] - tokens[pairs, 0]) - (pusher[pairs + 1] - pusher[pairs]), axis=-1
            )
            report[camera] |= {
                "agent_particle_on_pusher": float(on.mean()),
                "agent_particle_step_error_cm_median": float(np.median(step_error) * 100),
            }
    near = np.linalg.norm(truth - pusher[:, None], axis=-1) < args.near_cm / 100
    objects = (~agent & real)[pairs + 1]  # (P, N) object-states with a state before them in the episode
    lost = objects & ~seen[pairs + 1]
    report["both_views"] = {"near_cm": args.near_cm}
    episode_start = np.repeat(starts, lengths)  # (P,) the first state of each pair's episode
    seen_before, recent = {}, np.zeros_like(lost)
    for back in range(1, 9):  # seen at state t - back, within the episode
        before = pairs + 1 - back
        recent |= seen[np.maximum(before, 0)] & (before >= episode_start)[:, None]
        if back in (1, 2, 4, 8):
            seen_before[back] = recent.copy()
    for name, where in (("all", objects), ("near_pusher", objects & near[pairs + 1])):
        report["both_views"][name] = {
            "object_states": int(where.sum()),
            "seen_by_neither_view": float(lost[where].mean()),
        } | {f"of_those_seen_within_{b}_states_before": float(r[lost & where].mean()) for b, r in seen_before.items()}
    print(json.dumps(report, indent=2))
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
