"""Shared pieces of the diffusion training tests: a tiny training config on a tiny dataset."""

import json
from dataclasses import replace

import gymnasium as gym
import numpy as np

from ecrl.diffusion.denoiser import DenoiserConfig
from ecrl.diffusion.train import DiffusionTrainConfig, train

TINY_DENOISER = DenoiserConfig(width=16, heads=2, blocks=1, horizon=4, diffusion_steps=20)
TINY_TRAINING = {
    "sampling_steps": 2,
    "steps": 4,
    "batch_size": 8,
    "warmup": 2,
    "checkpoint_every": 2,
    "log_every": 2,
    "eval_every": 0,
    "name": "tiny",
    "progress": False,
    "threads": 1,
}


def tiny_train_config(dataset, runs, denoiser: dict | None = None, **kwargs) -> DiffusionTrainConfig:
    """A training config that runs in about a second on ``dataset``, writing ``runs/tiny``; ``denoiser``
    changes fields of the tiny denoiser."""
    tiny = replace(TINY_DENOISER, **(denoiser or {}))
    return DiffusionTrainConfig(**{**TINY_TRAINING, "denoiser": tiny, "dataset": dataset, "runs_dir": runs, **kwargs})


def resume_to_six_steps(config, run, train_fn=train) -> None:
    """Resume ``run`` (trained for 4 steps) with ``config`` (steps=6) through ``train_fn`` (diffusion's
    ``train`` by default, or the encoders'): the step counter, the checkpoint and the session log
    continue from step 4."""
    resumed = train_fn(config, resume=run)
    assert resumed.steps == 6
    sessions = [json.loads(line) for line in (run / "sessions.jsonl").read_text().splitlines()]
    assert [s["start_step"] for s in sessions if "start_step" in s] == [0, 4]
    assert json.loads((run / "checkpoints" / "latest" / "training.json").read_text())["step"] == 6


def rollout(policy, n_objects: int, steps: int, seed: int = 0) -> np.ndarray:
    """The actions ``(steps, 2)`` of ``policy`` (reset first) in ``ecrl/Push-v0`` with ``n_objects`` objects."""
    import ecrl.envs  # noqa: F401  (registers ecrl/Push*)

    env = gym.make("ecrl/Push-v0", n_objects=n_objects)
    obs, _ = env.reset(seed=seed)
    policy.reset()
    actions = []
    for _ in range(steps):
        actions.append(policy.act(obs))
        obs = env.step(actions[-1])[0]
    env.close()
    return np.stack(actions)
