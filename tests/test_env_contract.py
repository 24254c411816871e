"""Every registered id honours the gymnasium / SB3 contract: checkers, seeding, pickling, rendering."""

import pickle
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from ecrl.envs import ENTITY_FIELDS, FETCH_IDS, REGISTERED_IDS, PushEnv
from ecrl.envs.scene import CAMERAS, project, unproject

_E = ENTITY_FIELDS
EMBODIED_IDS = (*REGISTERED_IDS, *FETCH_IDS)
"""The push variants and the Fetch arm's skills: the contract every simulated embodiment honours."""


def _assert_same_step(a: tuple, b: tuple) -> None:
    (obs_a, *rest_a), (obs_b, *rest_b) = a, b
    assert obs_a.keys() == obs_b.keys()
    for key in obs_a:
        np.testing.assert_array_equal(obs_a[key], obs_b[key], err_msg=key)
    assert rest_a == rest_b


@pytest.mark.parametrize("env_id", EMBODIED_IDS)
def test_passes_gymnasium_and_sb3_env_checkers(make, env_id):
    env = make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Entity sets are (rows, features) boxes with unbounded positions: both are by design.
        warnings.filterwarnings("ignore", message=".*unconventional shape")
        warnings.filterwarnings("ignore", message=".*Box observation space m[a-z]+imum value is -?infinity")
        gym_check_env(env.unwrapped)
        sb3_check_env(env.unwrapped)


@pytest.mark.parametrize("env_id", EMBODIED_IDS)
def test_same_seed_gives_same_rollout(make, env_id):
    def rollout(env, seed):
        env.action_space.seed(seed)
        steps = [env.reset(seed=seed)]
        steps += [env.step(env.action_space.sample()) for _ in range(50)]
        return steps

    first, second = rollout(make(env_id), 7), rollout(make(env_id), 7)
    assert all("is_success" in info and "fraction_placed" in info for *_, info in first)
    for a, b in zip(first, second, strict=True):
        _assert_same_step(a, b)
    # The seed matters: another one gives another scene.
    other, _ = make(env_id).reset(seed=8)
    assert not np.array_equal(other["observation"], first[0][0]["observation"])


@pytest.mark.parametrize("env_id", EMBODIED_IDS)
def test_pickled_env_continues_identically(make, env_id):
    env = make(env_id, render_mode="rgb_array", width=32, height=32)
    env.reset(seed=3)
    env.render()  # a live GL context must not stop pickling
    rng = np.random.default_rng(0)
    for _ in range(5):
        env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
    clone = pickle.loads(pickle.dumps(env))
    try:
        for _ in range(20):
            action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
            _assert_same_step(env.step(action), clone.step(action))
        np.testing.assert_array_equal(clone.render(), env.render())
    finally:
        clone.close()


@pytest.mark.parametrize("env_id", REGISTERED_IDS)
@pytest.mark.parametrize("mode", PushEnv.metadata["render_modes"])
def test_render_mode_gives_image_of_requested_size(make, env_id, mode):
    env = make(env_id, render_mode=mode, camera="top", width=80, height=48)
    env.reset(seed=0)
    image = env.render()
    if mode == "rgb_array":
        assert image.shape == (48, 80, 3) and image.dtype == np.uint8
    else:
        assert mode == "depth_array", f"add a check for render mode {mode!r}"
        assert image.shape == (48, 80) and image.dtype == np.float32
        # Metres: the top camera looks straight down at the table top, which fills most of the view.
        height = env.unwrapped.data.cam_xpos[env.unwrapped.model.camera("top").id][2]
        assert np.median(image) == pytest.approx(height, abs=0.01)
        assert image.min() > height - 0.1
    assert image.std() > 0
    # The image shows the state: another scene renders differently.
    env.reset(seed=1)
    assert not np.array_equal(env.render(), image)


@pytest.mark.parametrize("env_id", REGISTERED_IDS)
def test_render_views_gives_one_distinct_image_per_camera(make, env_id):
    env = make(env_id, width=64, height=64)
    env.reset(seed=0)
    assert list(env.unwrapped.render_views()) == ["front", "top"]
    views = env.unwrapped.render_views(CAMERAS)
    assert set(views) == set(CAMERAS) >= {"front", "top", "top_close"}
    for image in views.values():
        assert image.shape == (64, 64, 3) and image.dtype == np.uint8
    assert not np.array_equal(views["front"], views["top"])
    assert not np.array_equal(views["top"], views["top_close"])
    only_top = env.unwrapped.render_views(("top",))
    assert list(only_top) == ["top"]
    np.testing.assert_array_equal(only_top["top"], views["top"])


def _project(env, camera: str, xyz: np.ndarray, size: int) -> np.ndarray:
    """``(K, 2)`` (row, col) pixels of world points ``xyz: (K, 3)`` in a square image of ``camera``."""
    x, y = ((project(xyz, camera) + 1) / 2 * size).T
    return np.floor(np.stack([y, x], axis=1)).astype(int)


@pytest.mark.parametrize("camera", CAMERAS)
def test_projection_puts_every_entity_on_its_segmentation(make, camera):
    """``scene.project`` of each entity's centre lands on the centre of its label, in every camera."""
    env = make("ecrl/Push3-v0", width=64, height=64)
    misses = []
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        labels = env.unwrapped.render_segmentation(camera)
        for row in range(4):
            ys, xs = np.nonzero(labels == row + 1)
            if len(xs) > 4:  # in view, not hidden behind another entity
                centre = (np.array([xs.mean(), ys.mean()]) + 0.5) / 32 - 1
                misses.append(np.linalg.norm(project(obs["observation"][row, _E["position"]], camera) - centre) * 32)
    assert len(misses) >= 8 and np.median(misses) < 0.5 and max(misses) < 1.5, misses
    with pytest.raises(ValueError, match="points: expected shape"):
        project(np.zeros((2, 2)), camera)
    with pytest.raises(ValueError, match="unknown camera"):
        project(np.zeros(3), "side")


@pytest.mark.parametrize("camera", CAMERAS)
def test_unproject_inverts_project_at_a_known_height(camera):
    """A point on the table area seen by ``camera`` comes back from its image position and height."""
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.uniform(-0.25, 0.25, (64, 2)), rng.uniform(0.0, 0.08, (64, 1))], 1)
    image = project(points, camera)
    np.testing.assert_allclose(unproject(image, camera, points[:, 2]), points, atol=1e-9)
    # one height for a batch of any shape; a wrong height moves the point along its ray, not across it
    grid = image.reshape(8, 8, 2)
    lifted = unproject(grid, camera, 0.05)
    assert lifted.shape == (8, 8, 3) and np.allclose(lifted[..., 2], 0.05)
    np.testing.assert_allclose(project(lifted, camera), grid, atol=1e-9)
    with pytest.raises(ValueError, match="image_xy: expected shape"):
        unproject(np.zeros((2, 3)), camera)


def test_unproject_gives_nan_for_a_plane_behind_the_camera():
    above = 10.0  # a plane above every camera: the rays ahead never meet it
    assert np.isnan(unproject(np.zeros(2), "top", above)).all()


@pytest.mark.parametrize("env_id", REGISTERED_IDS)
@pytest.mark.parametrize("size", [64, 128])
def test_segmentation_labels_index_observation_rows(make, env_id, size):
    env = make(env_id, width=size, height=size)
    obs, _ = env.reset(seed=2)
    rows = obs["observation"]
    n = int(rows[:, _E["present"].start].sum()) - 1
    top = env.unwrapped.render_segmentation("top")
    assert top.shape == (size, size) and np.issubdtype(top.dtype, np.integer)
    # Seen from above nothing hides an entity: the agent and every object are labelled.
    assert set(np.unique(top)) == set(range(n + 2))
    # The pixel under each entity's top centre carries that entity's label, and label - 1 is its row.
    tops = rows[: 1 + n, _E["position"]] + rows[: 1 + n, _E["size"]] * [0, 0, 1]
    pixels = _project(env, "top", tops, size)
    labels = top[pixels[:, 0], pixels[:, 1]]
    assert labels.tolist() == list(range(1, n + 2))
    assert rows[labels[0] - 1, _E["is_agent"].start] == 1
    front = env.unwrapped.render_segmentation("front")
    assert front.shape == (size, size) and set(np.unique(front)) <= set(range(n + 2)) and 1 in front
