"""Shared pieces of the diffusion training tests: a tiny training config on a tiny dataset."""

from ecrl.diffusion.train import DiffusionTrainConfig

TINY_TRAINING = {
    "width": 16,
    "heads": 2,
    "blocks": 1,
    "horizon": 4,
    "diffusion_steps": 20,
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


def tiny_train_config(dataset, runs, **kwargs) -> DiffusionTrainConfig:
    """A training config that runs in about a second on ``dataset``, writing ``runs/tiny``."""
    return DiffusionTrainConfig(**{**TINY_TRAINING, "dataset": dataset, "runs_dir": runs, **kwargs})
