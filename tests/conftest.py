"""Shared fixtures. ``MUJOCO_GL`` is set here, before any test module imports mujoco."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from ecrl.envs import TaskSpec, make_env  # noqa: E402

# The test models are tiny: extra threads only add overhead, and thrash on a busy machine.
torch.set_num_threads(1)


@pytest.fixture
def make():
    """``make(id_or_spec, **kwargs)``: ``gym.make`` for an id, :func:`make_env` for a ``TaskSpec``; closed after the test."""
    envs: list[gym.Env] = []

    def _make(what, **kwargs) -> gym.Env:
        env = make_env(what, **kwargs) if isinstance(what, TaskSpec | dict) else gym.make(what, **kwargs)
        envs.append(env)
        return env

    yield _make
    for env in envs:
        env.close()


@pytest.fixture(scope="session")
def push1_demos(tmp_path_factory):
    """A tiny demonstration dataset: 3 expert episodes of push with 1 object."""
    from ecrl.datasets import CollectConfig, collect_dataset

    path = tmp_path_factory.mktemp("demos") / "push1"
    collect_dataset(path, CollectConfig(n_objects=(1,), episodes=3, progress=False))
    return path
