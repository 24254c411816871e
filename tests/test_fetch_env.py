"""The Fetch arm env simulates what its rows say (checkers, seeding and pickling: tests/test_env_contract.py)."""

import gymnasium as gym
import mujoco
import numpy as np
import pytest

from ecrl.envs import (
    AGENT_GRIPPER,
    ENTITY_FIELDS,
    FETCH_IDS,
    GOAL_FIELDS,
    FetchEnv,
    FetchExpert,
    ObjectSpec,
    TaskSpec,
    fetch_scene,
)
from ecrl.envs.fetch_scene import TABLE_ORIGIN
from ecrl.envs.scene import project

_E, _G = ENTITY_FIELDS, GOAL_FIELDS
_POS = _E["position"]


@pytest.mark.parametrize("env_id", FETCH_IDS)
@pytest.mark.parametrize(
    "action", [[np.nan, 0, 0, 0], [0, 0, np.inf, 0], [0, 0, -np.inf, 0], [0, 0, 0], [0, 0, 0, 0, 0], [[0, 0, 0, 0]]]
)
def test_bad_actions_raise(make, env_id, action):
    env = make(env_id, n_objects=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="finite array of shape"):
        env.step(np.array(action, dtype=np.float64))


def test_one_model_per_number_of_objects_and_resets_never_compile(make):
    make("ecrl/FetchPush-v0", n_objects=5)
    misses = fetch_scene._compiled.cache_info().misses
    env = make("ecrl/FetchStack-v0", n_objects=5)
    for seed in range(5):
        env.reset(seed=seed)
    assert fetch_scene._compiled.cache_info().misses == misses
    # Each env owns its copy: resizing one task's objects leaves another env's model alone.
    other = make("ecrl/FetchPickPlace-v0", n_objects=5)
    other.reset(seed=1)
    assert env.unwrapped.model is not other.unwrapped.model


@pytest.mark.parametrize("n", [1, 8])
def test_reset_scenes_start_without_collisions_and_at_rest(make, n):
    env = make("ecrl/FetchPickPlace-v0", n_objects=n)
    u = env.unwrapped
    table = u.model.geom("table").id
    objects = set(u._geom.ravel().tolist())
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        start = obs["observation"][1 : 1 + n, _POS].copy()
        pairs = {(int(c.geom1), int(c.geom2)) for c in u.data.contact[: u.data.ncon]}
        bad = [p for p in pairs if (p[0] in objects or p[1] in objects) and table not in p]
        assert not bad, f"seed {seed}: objects touch at reset {bad}"
        np.testing.assert_allclose(start[:, 2], u._sizes, atol=1e-9)  # on the table top (z = 0)
        for _ in range(10):
            obs, *_ = env.step(np.zeros(4, dtype=np.float32))
        assert np.abs(obs["observation"][1 : 1 + n, _POS] - start).max() < 2e-3


def test_agent_row_reads_the_gripper(make):
    env = make("ecrl/FetchPickPlace-v0", n_objects=1)
    obs, _ = env.reset(seed=0)
    u = env.unwrapped
    np.testing.assert_allclose(obs["observation"][0, _POS], u.data.site("robot0:grip").xpos - TABLE_ORIGIN)
    for _ in range(4):
        obs, *_ = env.step(np.array([0, 0, 0, 1], dtype=np.float32))
    assert obs["observation"][0, AGENT_GRIPPER.start] > 0.95
    for _ in range(4):
        obs, *_ = env.step(np.array([1, 0, 0, -1], dtype=np.float32))
    row = obs["observation"][0]
    assert row[AGENT_GRIPPER.start] < 0.05
    assert row[_E["velocity"].start] > 0.3  # moving along +x at about 3 cm per 40 ms step
    # push blocks the gripper closed, as FetchPush does.
    push = make("ecrl/FetchPush-v0", n_objects=1)
    push.reset(seed=0)
    for _ in range(4):
        obs, *_ = push.step(np.array([0, 0, 0, 1], dtype=np.float32))
    assert obs["observation"][0, AGENT_GRIPPER.start] < 0.02


def _tower_spec():
    objects = (ObjectSpec("cube", "red", 0.025), ObjectSpec("cylinder", "blue", 0.02))
    objects += (ObjectSpec("cube", "green", 0.03), ObjectSpec("cylinder", "yellow", 0.025))
    return TaskSpec(objects=objects, skill="stack", embodiment="fetch")


def test_a_tower_of_four_placed_by_hand_stands_for_500_steps(make):
    env = make(_tower_spec())
    obs, _ = env.reset(seed=3)
    for _ in range(8):  # lift the gripper out of the tower's way
        obs, *_ = env.step(np.array([0, 0, 1, 0], dtype=np.float32))
    u = env.unwrapped
    targets = obs["desired_goal"][:4, _G["position"]]
    assert np.ptp(targets[:, :2], axis=0).max() == 0 and np.ptp(targets[:, 2]) > 0.1  # one tower, four levels
    u._obj_qpos[:, :3] = targets + TABLE_ORIGIN
    u._obj_qpos[:, 3:] = [1, 0, 0, 0]
    u._obj_qvel[:] = 0
    mujoco.mj_forward(u.model, u.data)
    for _ in range(500):
        obs, _, _, _, info = env.step(np.zeros(4, dtype=np.float32))
    moved = np.linalg.norm(obs["achieved_goal"][:4, _G["position"]] - targets, axis=1)
    assert moved.max() < 0.01, moved
    assert info["is_success"]


def test_object_rows_permute_with_the_objects(make):
    spec = TaskSpec.random(4, seed=2, skill="pick_place", embodiment="fetch")
    perm = np.array([2, 0, 3, 1])
    permuted = TaskSpec(objects=tuple(spec.objects[k] for k in perm), skill="pick_place", embodiment="fetch")
    a, b = make(spec), make(permuted)
    obs_a, _ = a.reset(seed=5)
    b.reset(seed=5)
    ua, ub = a.unwrapped, b.unwrapped
    ub.data.qpos[:], ub.data.qvel[:] = ua.data.qpos, ua.data.qvel
    ub.data.mocap_pos[:], ub.data.mocap_quat[:] = ua.data.mocap_pos, ua.data.mocap_quat
    ub._obj_qpos[:] = ua._obj_qpos[perm]
    ub._set_targets(ua._target_pos[perm], np.zeros(4))
    mujoco.mj_forward(ub.model, ub.data)
    rng = np.random.default_rng(0)
    for _ in range(5):
        action = rng.uniform(-1, 1, 4).astype(np.float32)
        obs_a, reward_a, *_, info_a = a.step(action)
        obs_b, reward_b, *_, info_b = b.step(action)
        np.testing.assert_allclose(obs_b["observation"][0], obs_a["observation"][0], atol=1e-6)
        np.testing.assert_allclose(obs_b["observation"][1:], obs_a["observation"][1:][perm], atol=1e-6)
        np.testing.assert_allclose(obs_b["achieved_goal"], obs_a["achieved_goal"][perm], atol=1e-6)
        np.testing.assert_array_equal(obs_b["desired_goal"], obs_a["desired_goal"][perm])
        assert reward_a == reward_b and info_a == info_b


def test_pixels_segmentation_and_projection_match_the_rows(make):
    env = make("ecrl/FetchPickPlace-v0", n_objects=3, pixels=64)
    obs, _ = env.reset(seed=1)
    assert obs["pixels"].shape == (2, 64, 64, 3) and obs["pixels"].std() > 0
    seen = []  # per visible object: whether its projected top centre carries its label
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        rows = obs["observation"]
        for camera in ("front", "top"):
            labels = env.unwrapped.render_segmentation(camera)
            assert set(np.unique(labels)) <= set(range(5))  # background (table, arm), gripper, objects
            assert camera == "top" or 1 in labels  # seen from above, the wrist hides the fingers
            for row in range(1, 4):
                top = rows[row, _POS] + [0, 0, rows[row, _E["size"].start]]
                col, line = np.floor((project(top, camera) + 1) / 2 * 64).astype(int)
                if (labels == row + 1).sum() > 4:  # in view
                    seen.append(labels[line, col] == row + 1)
    assert len(seen) >= 12 and np.mean(seen) >= 0.8, seen  # the rest: behind the arm or the gripper
    depth = make("ecrl/FetchStack-v0", render_mode="depth_array", camera="front", width=48, height=32)
    depth.reset(seed=0)
    image = depth.render()
    assert image.shape == (32, 48) and image.dtype == np.float32 and image.std() > 0


def test_fetch_tasks_go_to_fetch_envs_and_push_envs_refuse_them(make):
    spec = _tower_spec()
    env = make(spec)
    assert isinstance(env.unwrapped, FetchEnv)
    env.reset(seed=0)
    assert env.unwrapped.spec_ == spec and env.action_space.shape == (4,)
    with pytest.raises(ValueError, match="planar pusher"):
        gym.make("ecrl/Push-v0", task=spec)
    with pytest.raises(ValueError, match="disagrees"):
        gym.make("ecrl/FetchPush-v0", task=spec)
    with pytest.raises(ValueError, match="at most 8"):
        gym.make("ecrl/FetchPickPlace-v0", n_objects=9)


@pytest.mark.parametrize("env_id", FETCH_IDS)
@pytest.mark.parametrize("reward_type", ["sparse", "dense"])
def test_step_reward_is_compute_reward_of_its_goals(make, env_id, reward_type):
    env = make(env_id, n_objects=3, n_max=5, reward_type=reward_type)
    u = env.unwrapped
    obs, _ = env.reset(seed=4)
    expert, steps = FetchExpert(env), []
    for _ in range(60):  # the expert moves objects onto targets, so rewards change along the way
        obs, reward, _, _, info = env.step(expert.act(obs))
        steps.append((obs["achieved_goal"], obs["desired_goal"], reward, info))
    for achieved, desired, reward, info in steps:
        assert u.compute_reward(achieved, desired, info) == pytest.approx(reward, abs=1e-6)
    batch = u.compute_reward(np.stack([s[0] for s in steps]), np.stack([s[1] for s in steps]), [s[3] for s in steps])
    np.testing.assert_allclose(batch, [s[2] for s in steps], atol=1e-6)
    assert len({round(s[2], 6) for s in steps}) > 1
