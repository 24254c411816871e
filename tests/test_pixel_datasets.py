"""Pixel datasets (``ecrl-collect --pixels``): frames and segmentation aligned with the states, errors."""

import gymnasium as gym
import numpy as np
import pytest

from ecrl.datasets import CollectConfig, DatasetError, DemoDataset, collect_dataset

QUIET = {"progress": False}


def config(**kwargs) -> CollectConfig:
    base = {"n_objects": (2,), "episodes": 2, "pixels": 32, "idle_steps": 2, **QUIET}
    return CollectConfig(**{**base, **kwargs})


@pytest.fixture(scope="module")
def pixel_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("pix") / "data"
    collect_dataset(path, config(random_actions=0.5, only_success=False))
    return path, DemoDataset(path)


def test_frames_are_the_renders_of_the_stored_states(pixel_data):
    path, data = pixel_data
    assert data.cameras == ("front", "top")
    assert data.pixels.shape == (len(data.observation), 2, 32, 32, 3) and data.pixels.dtype == np.uint8
    assert data.segmentation.shape == (len(data.observation), 2, 32, 32)
    episode = data[1]
    assert len(episode.pixels) == len(episode.observation) == len(episode) + 1
    # Replaying the stored actions from the episode's seed renders the stored frames again.
    env = gym.make("ecrl/Push-v0", n_objects=2, width=32, height=32)
    env.reset(seed=episode.seed)
    views = env.unwrapped.render_views(("front", "top"))
    np.testing.assert_array_equal(episode.pixels[0, 0], views["front"])
    np.testing.assert_array_equal(episode.segmentation[0, 1], env.unwrapped.render_segmentation("top"))
    for action in episode.action:
        env.step(action)
    np.testing.assert_array_equal(episode.pixels[-1, 1], env.unwrapped.render_views(("top",))["top"])
    env.close()


def test_segmentation_labels_the_agent_and_every_object(pixel_data):
    _, data = pixel_data
    labels = np.unique(data.segmentation[:, 1])  # the top view sees everything on the table
    assert set(labels.tolist()) == {0, 1, 2, 3}


def test_random_actions_are_flagged_and_deterministic(pixel_data, tmp_path):
    _, data = pixel_data
    share = data.expert_random.mean()
    assert 0.3 < share < 0.7, share
    collect_dataset(tmp_path / "again", config(random_actions=0.5, only_success=False))
    again = DemoDataset(tmp_path / "again")
    np.testing.assert_array_equal(again.action, data.action)
    np.testing.assert_array_equal(again.pixels, data.pixels)


def test_appending_with_other_rendering_is_refused(pixel_data, tmp_path):
    path = tmp_path / "d"
    collect_dataset(path, config(episodes=1))
    with pytest.raises(DatasetError, match="pixels"):
        collect_dataset(path, config(episodes=1, pixels=None), append=True)
    with pytest.raises(DatasetError, match="pixels"):
        collect_dataset(path, config(episodes=1, cameras=("top",)), append=True)


def test_a_shard_without_its_frames_is_refused(tmp_path):
    path = tmp_path / "d"
    collect_dataset(path, config(episodes=1))
    shard = next(path.glob("shard_*.npz"))
    with np.load(shard, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files if k != "segmentation"}
    np.savez_compressed(shard, **arrays)
    with pytest.raises(DatasetError, match="segmentation"):
        DemoDataset(path)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pixels": 8}, "pixels must be"),
        ({"cameras": ("side",)}, "cameras must be"),
        ({"random_actions": 1.5}, "random_actions"),
    ],
)
def test_bad_pixel_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        config(**kwargs)


def test_fully_random_rollouts_must_keep_failures(tmp_path):
    with pytest.raises(ValueError, match="only_success"):
        collect_dataset(tmp_path / "d", config(random_actions=1.0))


def test_env_pixel_observations_are_the_camera_frames(pixel_data):
    _, data = pixel_data
    episode = data[0]
    env = gym.make("ecrl/Push-v0", n_objects=2, pixels=32)
    obs, _ = env.reset(seed=episode.seed)
    assert env.observation_space.contains(obs)
    np.testing.assert_array_equal(obs["pixels"], episode.pixels[0])
    obs = env.step(episode.action[0])[0]
    np.testing.assert_array_equal(obs["pixels"], episode.pixels[1])
    env.close()
    with pytest.raises(ValueError, match="cameras must be"):
        gym.make("ecrl/Push-v0", n_objects=2, pixels=32, cameras=())
    assert "pixels" not in gym.make("ecrl/Push-v0", n_objects=2).reset(seed=0)[0]
