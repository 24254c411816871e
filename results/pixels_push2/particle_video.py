"""A rollout of a planner from pixels with its encoder's particles drawn over the frames it reads.

Usage (from the repository root)::

    MUJOCO_GL=egl python results/pixels_push2/particle_video.py results/pixels_push2/table_frame/policy \
        --n-objects 2 --seed 100000 --out results/pixels_push2/table_frame/particles_n2.gif

Every step shows the policy's own camera frames (``obs["pixels"]``, side by side, upscaled) with a dot
on each particle's keypoint, its opacity the particle's transparency; with goal images the goal
frames and their particles are shown below. The title line says the step and how many objects are
placed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import ecrl
from ecrl.encoders import frames_to_images
from ecrl.reporting import write_gif

SCALE = 4
"""Pixels of the GIF per pixel of the policy's frames."""


def _draw(frame: np.ndarray, keypoints: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``frame (P, P, 3)`` upscaled by :data:`SCALE`, with a 3 × 3 dot (magenta, opacity ``alpha``) per keypoint."""
    big = np.kron(frame, np.ones((SCALE, SCALE, 1), dtype=np.uint8)).astype(np.float32)
    side = big.shape[0]
    for (x, y), a in zip(keypoints, alpha, strict=True):
        col, row = int((x + 1) / 2 * side), int((y + 1) / 2 * side)
        rows, cols = slice(max(row - 2, 0), row + 3), slice(max(col - 2, 0), col + 3)
        big[rows, cols] = (1 - a) * big[rows, cols] + a * np.array([255.0, 0.0, 255.0])
    return big.astype(np.uint8)


def _panel(policy, pixels: np.ndarray) -> np.ndarray:
    """The views of ``pixels (V, P, P, 3)`` side by side, each with its particles."""
    encoder = policy.module.encoder
    with torch.no_grad():
        rows, _ = encoder.encode(frames_to_images(torch.as_tensor(pixels[None])))
    fields, k = encoder.fields(), encoder.config.entities
    keypoints = rows[0, :, fields["position"]].numpy()
    alpha = rows[0, :, fields["transparency"]].numpy()[:, 0].clip(0, 1)
    views = [_draw(pixels[v], keypoints[v * k : (v + 1) * k], alpha[v * k : (v + 1) * k]) for v in range(len(pixels))]
    return np.concatenate(views, axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policy", type=Path)
    parser.add_argument("--n-objects", type=int, default=2)
    parser.add_argument("--seed", type=int, default=100000)
    parser.add_argument("--every", type=int, default=2, help="keep every k-th step")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    policy = ecrl.load(args.policy)
    frames = policy.meta.get("pixels")
    if frames is None:
        raise SystemExit(f"{args.policy} does not plan from pixels (its meta has no 'pixels')")
    goal = bool(frames.get("goal"))
    env = gym.make(
        "ecrl/Push-v0",
        n_objects=args.n_objects,
        pixels=frames["size"],
        cameras=tuple(frames["cameras"]),
        goal_pixels=goal,
    )
    obs, _ = env.reset(seed=args.seed)
    policy.reset()
    goal_panel = _panel(policy, obs["goal_pixels"]) if goal else None
    shots, done, step, info = [], False, 0, {}
    while not done:
        if step % args.every == 0:
            panel = _panel(policy, obs["pixels"])
            shots.append(panel if goal_panel is None else np.concatenate([panel, goal_panel], axis=0))
        obs, _, terminated, truncated, info = env.step(policy.act(obs))
        done, step = terminated or truncated, step + 1
    write_gif(args.out, shots, fps=20 / args.every)
    print(f"{args.out}: {len(shots)} frames, {step} steps, success {bool(info.get('is_success'))}")


if __name__ == "__main__":
    main()
