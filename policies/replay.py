"""A HER replay buffer saved with a training checkpoint (``replay.npz``, no pickle) and read back for ``--resume``."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from stable_baselines3 import HerReplayBuffer

__all__ = ["load_replay", "save_replay"]


_BUFFER_ARRAYS = ("actions", "rewards", "dones", "timeouts", "ep_start", "ep_length")


def save_replay(buffer: HerReplayBuffer, path: Path) -> None:
    """Write the filled part of ``buffer`` (transitions, episode bookkeeping, write position) to ``path``."""
    end = buffer.buffer_size if buffer.full else buffer.pos
    arrays = {name: getattr(buffer, name)[:end] for name in _BUFFER_ARRAYS}
    for key in buffer.observations:
        arrays[f"obs.{key}"] = buffer.observations[key][:end]
        arrays[f"next_obs.{key}"] = buffer.next_observations[key][:end]
    arrays["_current_ep_start"] = buffer._current_ep_start
    arrays["_pos_full"] = np.array([buffer.pos, int(buffer.full)])
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def load_replay(buffer: HerReplayBuffer, path: Path) -> None:
    """Fill ``buffer`` with what :func:`save_replay` wrote to ``path``; ValueError if it does not fit."""
    with np.load(path, allow_pickle=False) as data:
        end = len(data["actions"])
        if end > buffer.buffer_size:
            raise ValueError(f"{path} holds {end} transitions but the buffer has room for {buffer.buffer_size}")
        for name in _BUFFER_ARRAYS:
            getattr(buffer, name)[:end] = data[name]
        for key in buffer.observations:
            buffer.observations[key][:end] = data[f"obs.{key}"]
            buffer.next_observations[key][:end] = data[f"next_obs.{key}"]
        buffer._current_ep_start[:] = data["_current_ep_start"]
        buffer.pos, buffer.full = int(data["_pos_full"][0]), bool(data["_pos_full"][1])
    # The episodes in progress when the checkpoint was written were cut: close them so HER never
    # relabels across the break (the envs restart fresh episodes).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # SB3 warns that it truncates: that is the point
        buffer.truncate_last_trajectory()
