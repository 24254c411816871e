"""Goal images (issue 24): ``PushEnv(goal_pixels=True)`` observes the goal configuration as frames."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from ecrl.datasets import CollectConfig, DatasetError, DemoDataset, collect_dataset
from ecrl.envs import ENTITY_FIELDS, GOAL_FIELDS, PushEnv
from ecrl.envs.scene import project

_G = GOAL_FIELDS


def _table_colour(image: np.ndarray) -> np.ndarray:
    """The most common colour of a top view: the bare table."""
    colours, counts = np.unique(image.reshape(-1, 3), axis=0, return_counts=True)
    return colours[counts.argmax()].astype(int)


def _pixel(image: np.ndarray, xyz: np.ndarray) -> np.ndarray:
    size = image.shape[0]
    x, y = ((project(xyz, "top") + 1) / 2 * size).astype(int)
    return image[y, x].astype(int)


def test_goal_frames_show_every_object_at_its_target_and_nothing_where_it_starts(make):
    env = make("ecrl/Push-v0", n_objects=3, pixels=64, cameras=("front", "top"), goal_pixels=True)
    assert env.observation_space["goal_pixels"] == env.observation_space["pixels"]
    checked = 0
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        goal = obs["goal_pixels"]
        assert goal.shape == (2, 64, 64, 3) and goal.dtype == np.uint8
        top = goal[1]
        table = _table_colour(top)
        targets = obs["desired_goal"][:3, _G["position"]]
        starts = obs["observation"][1:4, ENTITY_FIELDS["position"]]
        for target in targets:
            assert np.abs(_pixel(top, target) - table).sum() > 40, (seed, target)
        for start in starts:
            if np.linalg.norm(targets[:, :2] - start[:2], axis=1).min() > 0.06:
                assert np.abs(_pixel(top, start) - table).sum() < 20, (seed, start)
                checked += 1
        # the current frames show the objects where they are, so they differ from the goal's
        assert not np.array_equal(obs["pixels"], goal)
    assert checked >= 6


def test_goal_frames_change_nothing_in_the_episode_and_stay_fixed_within_it(make):
    with_goal = make("ecrl/Push-v0", n_objects=2, pixels=32, goal_pixels=True)
    plain = make("ecrl/Push-v0", n_objects=2, pixels=32)
    a, _ = with_goal.reset(seed=11)
    b, _ = plain.reset(seed=11)
    first = a["goal_pixels"]
    rng = np.random.default_rng(0)
    for _ in range(30):
        for key in b:
            np.testing.assert_array_equal(a[key], b[key])
        np.testing.assert_array_equal(a["goal_pixels"], first)
        action = rng.uniform(-1, 1, 2)
        a, *_ = with_goal.step(action)
        b, *_ = plain.step(action)
    # the goal frames of the same seed are the same again; another seed's differ
    assert np.array_equal(with_goal.reset(seed=11)[0]["goal_pixels"], first)
    assert not np.array_equal(with_goal.reset(seed=12)[0]["goal_pixels"], first)


def test_goal_pixels_bad_requests_are_clear_errors():
    with pytest.raises(ValueError, match="pass pixels=P too"):
        PushEnv(n_objects=2, goal_pixels=True)
    env = PushEnv(n_objects=3, goal="adjacent", pixels=32, goal_pixels=True)
    with pytest.raises(ValueError, match="'adjacent' goals are met by many"):
        env.reset(seed=0)
    with pytest.raises(RuntimeError, match="call reset"):
        PushEnv(n_objects=2, pixels=32).render_goal_views()
    env.close()


def test_an_env_with_goal_frames_passes_gymnasiums_check(make):
    env = make("ecrl/Push-v0", n_objects=2, pixels=32, goal_pixels=True)
    check_env(env.unwrapped, skip_render_check=True)


def test_a_collection_with_goal_pixels_stores_each_episodes_goal_frames(tmp_path):
    path = tmp_path / "data"
    config = {"n_objects": (2,), "episodes": 3, "pixels": 32, "idle_steps": 2, "progress": False}
    collect_dataset(path, CollectConfig(**config, goal_pixels=True))
    data = DemoDataset(path)
    assert data.pixel_meta == {"size": 32, "cameras": ["front", "top"], "goal": True}
    assert data.goal_pixels.shape == (3, 2, 32, 32, 3) and data.goal_pixels.dtype == np.uint8
    env = PushEnv(n_objects=2, pixels=32, goal_pixels=True)
    for i, episode in enumerate(data):
        obs, _ = env.reset(seed=episode.seed)
        np.testing.assert_array_equal(episode.goal_pixels, obs["goal_pixels"])
        np.testing.assert_array_equal(data.goal_pixels[i], obs["goal_pixels"])
    env.close()
    # the rest of the dataset is what a collection without goal frames writes
    collect_dataset(tmp_path / "plain", CollectConfig(**config))
    plain = DemoDataset(tmp_path / "plain")
    assert plain.goal_pixels is None and plain[0].goal_pixels is None
    np.testing.assert_array_equal(plain.pixels, data.pixels)
    np.testing.assert_array_equal(plain.action, data.action)
    # appending without goal frames to a dataset that has them is refused
    with pytest.raises(DatasetError, match="renders every episode the same way"):
        collect_dataset(path, CollectConfig(**config | {"seed": 10}), append=True)


@pytest.mark.parametrize(
    "kwargs",
    [{"pixels": None}, {"goal": "adjacent"}, {"env": "fetch"}],
    ids=["no pixels", "adjacent goals", "fetch"],
)
def test_goal_pixels_collection_needs_push_positions_and_pixels(kwargs):
    base = {"n_objects": (2,), "episodes": 1, "pixels": 32, "goal_pixels": True}
    with pytest.raises(ValueError, match="goal_pixels records goal images"):
        CollectConfig(**base | kwargs)
