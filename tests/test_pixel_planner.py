"""Planning from pixels: a diffusion planner over a frozen encoder's entities (``ecrl-train-diffusion --encoder``)."""

import json
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import torch
from diffusion_helpers import tiny_train_config

import ecrl
from ecrl.datasets import CollectConfig, DatasetError, DemoDataset, collect_dataset, read_meta
from ecrl.diffusion import DenoiserConfig, EntityDenoiser
from ecrl.diffusion.noise import loss, sample
from ecrl.diffusion.pixels import LatentWindows, track
from ecrl.diffusion.train import train
from ecrl.encoders import build_encoder, save_encoder
from ecrl.encoders.rows import OBJECT_CENTRE, TABLE_REACH, lift_to_table
from ecrl.envs.scene import project
from ecrl.evaluation import evaluate

ENCODER = {"views": 2, "image_size": 32, "entities": 3, "width": 8, "feature_dim": 4, "prior_keypoints": 4}


@pytest.fixture(scope="module")
def pixel_demos(tmp_path_factory):
    """Two expert episodes of push-2 with 32-px frames, and a (random-weight) particle encoder checkpoint."""
    root = tmp_path_factory.mktemp("pixplan")
    collect_dataset(root / "data", CollectConfig(n_objects=(2,), episodes=2, pixels=32, idle_steps=2, progress=False))
    torch.manual_seed(0)
    save_encoder(build_encoder("particles", **ENCODER), root / "encoder")
    return root / "data", root / "encoder"


def test_generic_rows_train_and_sample_with_the_inpainted_step():
    config = DenoiserConfig(width=16, heads=2, blocks=1, horizon=3, diffusion_steps=10, entity_dim=5)
    model = EntityDenoiser(config)
    rows = torch.randn(4, 4, 6, 5)
    batch = {"observation": rows, "action": torch.rand(4, 3, 2) * 2 - 1, "desired_goal": torch.zeros(4, 2, 14)}
    batch["desired_goal"][..., 0] = 1
    with pytest.raises(ValueError, match="needs a mask"):
        loss(model, batch)
    terms = loss(model, {**batch, "mask": torch.ones(4, 6, dtype=torch.bool)})
    assert torch.isfinite(terms.total)
    plan = sample(model.eval(), rows[:, 0], batch["desired_goal"], steps=2, mask=torch.ones(4, 6, dtype=torch.bool))
    assert plan.states.shape == (4, 4, 6, 5) and torch.equal(plan.states[:, 0], rows[:, 0])


def test_tracking_follows_entities_from_frame_to_frame():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(4, 3))  # 2 views x 2 entities, D = 3
    frames = np.stack([base + 0.01 * t for t in range(3)])  # one episode of 2 steps: 3 states
    shuffled = frames.copy()
    shuffled[1, :2], shuffled[2, 2:] = frames[1, [1, 0]], frames[2, [3, 2]]
    np.testing.assert_allclose(track(shuffled, np.array([2]), views=2), frames)


def test_tracking_leaves_pinned_entities_in_place():
    rng = np.random.default_rng(1)
    frames = np.stack([rng.normal(size=(4, 3))] * 2)  # one episode of 1 step, 2 views x 2 entities
    swapped = frames.copy()
    swapped[1, :2] = frames[1, [1, 0]]
    np.testing.assert_allclose(track(swapped, np.array([1]), views=2), frames)  # tracked back
    np.testing.assert_allclose(track(swapped, np.array([1]), views=2, pinned=1), swapped)  # particle 0 stays


def test_an_agent_particle_is_pinned_and_flagged_in_windows_and_at_acting_time(pixel_demos, tmp_path):
    data_path, _ = pixel_demos
    torch.manual_seed(0)
    save_encoder(build_encoder("particles", **ENCODER, agent_weight=0.03), tmp_path / "agent_encoder")
    encoder = ecrl.encoders.load_encoder(tmp_path / "agent_encoder")
    windows = LatentWindows(DemoDataset(data_path), encoder, progress=False)
    assert windows.width == encoder.entity_dim + 1 == windows.rows.shape[-1]
    flag = np.array([1, 0, 0, 1, 0, 0], np.float32)  # particle 0 of each of the 2 views (3 per view)
    np.testing.assert_array_equal(windows.rows[..., -1], np.broadcast_to(flag, windows.rows.shape[:2]))
    result = train(tiny_train_config(data_path, tmp_path, encoder=tmp_path / "agent_encoder"))
    policy = ecrl.load(result.run_dir)
    env = gym.make("ecrl/Push-v0", n_objects=2, pixels=32)
    obs, _ = env.reset(seed=0)
    rows = policy.module.rows(torch.as_tensor(obs["pixels"])[None])
    assert rows.shape == (1, 6, encoder.entity_dim + 1)
    np.testing.assert_array_equal(rows[0, :, -1].numpy(), flag)
    policy.reset()
    assert policy.act(obs).shape == (2,)


def test_latent_windows_replace_the_state_rows(pixel_demos):
    data_path, encoder_path = pixel_demos
    data = DemoDataset(data_path)
    windows = LatentWindows(data, ecrl.encoders.load_encoder(encoder_path), progress=False)
    assert windows.rows.shape == (len(data.observation), 6, 6 + 4 + 4)
    np.testing.assert_allclose(windows.rows.mean((0, 1)), 0, atol=1e-2)
    batch = windows.sample_windows(5, 3, np.random.default_rng(0))
    assert batch["observation"].shape == (5, 4, 6, 14) and batch["mask"].all()
    with pytest.raises(DatasetError, match="camera"):
        LatentWindows(data, build_encoder("particles", **{**ENCODER, "views": 1}), progress=False)


def test_a_planner_from_pixels_trains_saves_and_acts_on_pixel_observations(pixel_demos, tmp_path):
    data_path, encoder_path = pixel_demos
    result = train(tiny_train_config(data_path, tmp_path, encoder=encoder_path))
    policy = ecrl.load(result.run_dir)
    assert policy.meta["pixels"] == {"size": 32, "cameras": ["front", "top"]}
    assert policy.meta["arch"] == "diffusion_from_pixels" and not any(k.startswith("subgoal") for k in policy.meta)
    env = gym.make("ecrl/Push-v0", n_objects=3, pixels=32)  # more objects than in training
    obs, _ = env.reset(seed=0)
    policy.reset()
    first = policy.act(obs)
    assert first.shape == (2,) and np.abs(first).max() <= 1
    with pytest.raises(ValueError, match="pixels"):
        policy.act({k: v for k, v in obs.items() if k != "pixels"})
    # The runner gives a policy from pixels envs that render them.
    report = evaluate(policy, [1], episodes=1, progress=False)
    assert len(report.results[0].success) == 1
    with pytest.raises(ValueError, match="flat planner only"):
        tiny_train_config(data_path, tmp_path, encoder=encoder_path, planner="hierarchical")
    with pytest.raises(ValueError, match="recolour is implemented for state planners"):
        tiny_train_config(data_path, tmp_path, encoder=encoder_path, recolour=True)


def test_init_from_starts_a_planner_from_pixels_only_from_one_with_the_same_front_end(pixel_demos, tmp_path):
    from ecrl.diffusion.train import _entities, _Trainer

    data_path, encoder_path = pixel_demos
    saved = train(tiny_train_config(data_path, tmp_path, encoder=encoder_path, name="first")).run_dir / "final"
    config = tiny_train_config(data_path, tmp_path, encoder=encoder_path, init_from=saved).for_dataset(
        read_meta(data_path)
    )
    _, pixels = _entities(config, DemoDataset(data_path), torch.device("cpu"))
    trainer = _Trainer(config, torch.device("cpu"), pixels)
    weights = ecrl.load(saved).module.planner.state_dict()
    for name, value in trainer.planner.state_dict().items():
        assert torch.equal(value, weights[name]), name
    for name, value in trainer.emas[""].model.state_dict().items():  # the EMA starts there too
        assert torch.equal(value, weights[f"denoiser.{name}"]), name
    # Another keypoint frame or encoder means other rows: refused, as is a state planner's start.
    with pytest.raises(ValueError, match="front end differs.*table_height"):
        table = replace(config, table_frame=True)
        _Trainer(table, torch.device("cpu"), _entities(table, DemoDataset(data_path), torch.device("cpu"))[1])
    torch.manual_seed(1)
    save_encoder(build_encoder("particles", **ENCODER), tmp_path / "other_encoder")
    other = replace(config, encoder=tmp_path / "other_encoder")
    with pytest.raises(ValueError, match="front end differs.*the encoder's weights"):
        _Trainer(other, torch.device("cpu"), _entities(other, DemoDataset(data_path), torch.device("cpu"))[1])
    state = train(tiny_train_config(data_path, tmp_path, name="state")).run_dir / "final"
    with pytest.raises(ValueError, match="that is a state planner"):
        _Trainer(replace(config, init_from=state), torch.device("cpu"), pixels)
    with pytest.raises(ValueError, match="that is a planner from pixels"):
        state_config = tiny_train_config(data_path, tmp_path, init_from=saved).for_dataset(read_meta(data_path))
        _Trainer(state_config, torch.device("cpu"))


@pytest.fixture(scope="module")
def goal_image_demos(tmp_path_factory, pixel_demos):
    """The same kind of episodes, collected with the frames of their goal configuration."""
    path = tmp_path_factory.mktemp("goalimg") / "data"
    collect_dataset(
        path, CollectConfig(n_objects=(2,), episodes=2, pixels=32, idle_steps=2, goal_pixels=True, progress=False)
    )
    return path, pixel_demos[1]


def test_latent_windows_give_each_window_its_episodes_encoded_goal_frames(goal_image_demos, pixel_demos):
    data_path, encoder_path = goal_image_demos
    data, encoder = DemoDataset(data_path), ecrl.encoders.load_encoder(encoder_path)
    windows = LatentWindows(data, encoder, progress=False, goal_images=True)
    assert windows.goal_rows.shape == (len(data), 6, 14)
    with torch.no_grad():
        raw = encoder.encode(ecrl.encoders.frames_to_images(torch.as_tensor(data.goal_pixels)))[0].numpy()
    np.testing.assert_allclose(windows.goal_rows, (raw - windows.mean) / windows.std, rtol=1e-5, atol=1e-5)
    batch = windows.sample_windows(16, 3, np.random.default_rng(0))
    episode = np.searchsorted(data.state_starts, batch["state_index"][:, 0], side="right") - 1
    assert set(episode.tolist()) == {0, 1}  # both episodes drawn: the check below tells them apart
    np.testing.assert_array_equal(batch["desired_goal"], windows.goal_rows[episode])
    assert batch["goal_mask"].shape == (16, 6) and batch["goal_mask"].all()
    with pytest.raises(DatasetError, match="no goal frames"):
        LatentWindows(DemoDataset(pixel_demos[0]), encoder, progress=False, goal_images=True)


def test_a_planner_towards_goal_images_trains_saves_and_acts_on_goal_frames(goal_image_demos, tmp_path):
    data_path, encoder_path = goal_image_demos
    result = train(tiny_train_config(data_path, tmp_path, encoder=encoder_path, goal_images=True))
    policy = ecrl.load(result.run_dir)
    assert policy.meta["pixels"] == {"size": 32, "cameras": ["front", "top"], "goal": True}
    assert policy.meta["goal_input"] == "images" and policy.meta["goal"] == "positions"  # ecrl-eval reads "goal"
    env = gym.make("ecrl/Push-v0", n_objects=3, pixels=32, goal_pixels=True)
    obs, _ = env.reset(seed=0)
    policy.reset()
    first = policy.act(obs)
    assert first.shape == (2,) and np.abs(first).max() <= 1
    # the goal comes from the goal frames, not the goal rows: other frames, another plan
    policy.reset()
    moved = policy.act({**obs, "goal_pixels": np.ascontiguousarray(obs["goal_pixels"][:, ::-1])})
    policy.reset()
    assert np.array_equal(policy.act(obs), first) and not np.array_equal(moved, first)
    policy.reset()
    rows_changed = policy.act({**obs, "desired_goal": np.zeros_like(obs["desired_goal"])})
    np.testing.assert_array_equal(rows_changed, first)
    with pytest.raises(ValueError, match="goal_pixels"):
        policy.act({k: v for k, v in obs.items() if k != "goal_pixels"})
    # the runner makes envs that render the goal frames
    report = evaluate(policy, [2], episodes=1, progress=False)
    assert len(report.results[0].success) == 1
    # and so does ecrl-eval, which reads the task's goal kind from the policy's meta
    from ecrl.scripts.eval import main as eval_main

    out = tmp_path / "cli"
    eval_main(
        [
            str(result.run_dir / "final"),
            "--objects",
            "1",
            "--episodes",
            "1",
            "--no-progress",
            "--no-expert",
            "--out",
            str(out),
        ]
    )
    assert len(json.loads((out / "eval.json").read_text())["results"]) == 1
    with pytest.raises(ValueError, match="needs --encoder"):
        tiny_train_config(data_path, tmp_path, goal_images=True)


def test_table_frame_keypoints_are_where_the_camera_rays_meet_the_table():
    rng = np.random.default_rng(0)
    world = np.concatenate([rng.uniform(-0.3, 0.3, (5, 2)), np.full((5, 1), OBJECT_CENTRE)], -1)  # on the table
    rows = rng.normal(size=(1, 10, 7)).astype(np.float32)  # 2 views x 5 entities; position in columns 1:3
    rows[0, :5, 1:3], rows[0, 5:, 1:3] = project(world, "front"), project(world, "top")
    lifted = lift_to_table(rows, ["front", "top"], slice(1, 3), OBJECT_CENTRE)
    # both views' particles of a point land on its table position, whatever the camera
    np.testing.assert_allclose(lifted[0, :5, 1:3], world[:, :2], atol=1e-5)
    np.testing.assert_allclose(lifted[0, 5:, 1:3], world[:, :2], atol=1e-5)
    np.testing.assert_array_equal(np.delete(lifted, [1, 2], -1), np.delete(rows, [1, 2], -1))  # the rest unchanged
    # a ray above the horizon meets no table: clipped to the reach, never NaN
    rows[0, 0, 1:3] = (0.0, -5.0)
    far = lift_to_table(rows, ["front", "top"], slice(1, 3), OBJECT_CENTRE)
    assert np.isfinite(far).all() and np.abs(far[..., 1:3]).max() <= TABLE_REACH
    with pytest.raises(ValueError, match="camera views"):
        lift_to_table(rows[:, :9], ["front", "top"], slice(1, 3), OBJECT_CENTRE)


def test_a_planner_over_table_frame_keypoints_trains_lifts_and_acts(goal_image_demos, tmp_path):
    data_path, encoder_path = goal_image_demos
    data, encoder = DemoDataset(data_path), ecrl.encoders.load_encoder(encoder_path)
    windows = LatentWindows(data, encoder, progress=False, goal_images=True, table_height=OBJECT_CENTRE)
    with torch.no_grad():
        raw = encoder.encode(ecrl.encoders.frames_to_images(torch.as_tensor(data.pixels[:4])))[0].numpy()
    lifted = lift_to_table(raw, list(data.cameras), encoder.fields()["position"], OBJECT_CENTRE)
    np.testing.assert_allclose(windows.rows[:4, :3] * windows.std + windows.mean, lifted[:, :3], rtol=1e-4, atol=1e-4)
    assert np.abs(windows.rows[:, :, :2] * windows.std[:2] + windows.mean[:2]).max() <= TABLE_REACH + 1e-4

    result = train(tiny_train_config(data_path, tmp_path, encoder=encoder_path, table_frame=True))
    policy = ecrl.load(result.run_dir)
    assert policy.meta["keypoints"] == "table" and policy.meta["goal_input"] == "rows"
    assert policy.module.table_height == OBJECT_CENTRE and policy.module.cameras == ["front", "top"]
    env = gym.make("ecrl/Push-v0", n_objects=2, pixels=32)
    obs, _ = env.reset(seed=0)
    with torch.no_grad():
        rows = policy.module.rows(torch.as_tensor(obs["pixels"][None]))
        raw = encoder.encode(ecrl.encoders.frames_to_images(torch.as_tensor(obs["pixels"][None])))[0].numpy()
    expected = (
        lift_to_table(raw, ["front", "top"], encoder.fields()["position"], OBJECT_CENTRE) - policy.module.mean.numpy()
    )
    np.testing.assert_allclose(rows.numpy(), expected / policy.module.std.numpy(), rtol=1e-4, atol=1e-4)
    policy.reset()
    assert policy.act(obs).shape == (2,)
    with pytest.raises(ValueError, match="needs --encoder"):
        tiny_train_config(data_path, tmp_path, table_frame=True)
    slot = build_encoder("slot", views=2, image_size=32)
    with pytest.raises(ValueError, match="no 'position' field"):
        LatentWindows(data, slot, progress=False, table_height=OBJECT_CENTRE)


def test_a_planner_that_plans_positions_reads_the_rest_as_static_context(goal_image_demos, tmp_path):
    data_path, encoder_path = goal_image_demos
    encoder = ecrl.encoders.load_encoder(encoder_path)
    d = encoder.entity_dim
    result = train(tiny_train_config(data_path, tmp_path, encoder=encoder_path, plan_positions=True))
    policy = ecrl.load(result.run_dir)
    config = policy.module.planner.denoiser.config
    assert config.planned == [0, 1] and config.dynamic_dim == 2 and config.static_dim == d
    assert policy.meta["planned"] == "positions"
    env = gym.make("ecrl/Push-v0", n_objects=2, pixels=32)
    obs, _ = env.reset(seed=0)
    policy.reset()
    assert policy.act(obs).shape == (2,)
    rows = torch.randn(1, 5, d)
    plan = sample(
        policy.module.planner.denoiser, rows, torch.zeros(1, 2, 14), steps=2, mask=torch.ones(1, 5, dtype=torch.bool)
    )
    assert plan.states.shape[-1] == 2
    torch.testing.assert_close(plan.states[:, 0], rows[..., :2])
    with pytest.raises(ValueError, match="planned must name distinct columns"):
        DenoiserConfig(entity_dim=4, planned=(0, 4))
    with pytest.raises(ValueError, match="needs --encoder"):
        tiny_train_config(data_path, tmp_path, plan_positions=True)
