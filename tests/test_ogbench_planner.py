"""A diffusion planner on OGBench play data: the spatial state, hindsight goals, training and acting."""

import importlib.util
import json

import numpy as np
import pytest
import torch
from diffusion_helpers import tiny_train_config

import ecrl
from ecrl.datasets import (
    PLACEMENT_CONTACT,
    PLACEMENT_MOVE,
    PLACEMENT_SPEED,
    CollectConfig,
    DemoDataset,
    collect_dataset,
    recolour_windows,
)
from ecrl.diffusion.denoiser import (
    DYNAMIC_DIM,
    SPATIAL_DYNAMIC_DIM,
    DenoiserConfig,
    EntityDenoiser,
    join_rows,
    split_rows,
)
from ecrl.diffusion.train import train
from ecrl.envs.layout import AGENT_GRIPPER, ENTITY_DIM, ENTITY_FIELDS, GOAL_COLOUR, GOAL_DIM, GOAL_POSITION

needs_ogbench = pytest.mark.skipif(importlib.util.find_spec("ogbench") is None, reason="needs the ogbench extra")
POS = ENTITY_FIELDS["position"]


def _rows(seed: int = 0, n: int = 2) -> torch.Tensor:
    """``(1, 3, 1 + n, ENTITY_DIM)`` random rows over 3 steps: an agent with a gripper, then ``n`` objects."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.rand(1, 3, 1 + n, ENTITY_DIM, generator=g)
    rows[..., ENTITY_FIELDS["present"]] = 1.0
    rows[..., ENTITY_FIELDS["is_agent"]] = torch.tensor([1.0] + [0.0] * n)[:, None]
    rows[..., ENTITY_FIELDS["is_object"]] = torch.tensor([0.0] + [1.0] * n)[:, None]
    rows[..., ENTITY_FIELDS["yaw"]] = torch.nn.functional.normalize(rows[..., ENTITY_FIELDS["yaw"]], dim=-1)
    return rows


def test_the_spatial_state_holds_height_and_the_gripper_and_joins_back():
    rows = _rows()
    static, planar = split_rows(rows)
    static_s, spatial = split_rows(rows, "spatial")
    assert planar.shape[-1] == DYNAMIC_DIM and spatial.shape[-1] == SPATIAL_DYNAMIC_DIM
    torch.testing.assert_close(spatial[..., :3], rows[..., POS] * 4)
    torch.testing.assert_close(spatial[..., 0, 5:], rows[..., 0, AGENT_GRIPPER])  # the agent's gripper
    assert (spatial[..., 1:, 5:] == 0).all()  # objects have none
    # The gripper is dynamic, so it leaves the agent's static attributes; objects keep their shape.
    assert not torch.equal(static[:, 0], static_s[:, 0]) and torch.equal(static[:, 1:], static_s[:, 1:])
    joined = join_rows(rows[:, 0], spatial)
    for field in ("position", "yaw"):
        torch.testing.assert_close(joined[..., ENTITY_FIELDS[field]], rows[..., ENTITY_FIELDS[field]])
    torch.testing.assert_close(joined[:, :, 0, AGENT_GRIPPER], rows[:, :, 0, AGENT_GRIPPER])
    # A planar join keeps the reference's height.
    planar_join = join_rows(rows[:, 0], planar)
    torch.testing.assert_close(planar_join[..., POS.stop - 1], rows[:, :1, :, POS.stop - 1].expand(-1, 3, -1))


def test_bad_states_are_refused():
    with pytest.raises(ValueError, match="state must be one of"):
        split_rows(_rows(), "flying")
    with pytest.raises(ValueError, match="state must be one of"):
        DenoiserConfig(state="flying")
    with pytest.raises(ValueError, match="expected 4 \\(planar\\) or 7 \\(spatial\\)"):
        join_rows(_rows()[:, 0], torch.zeros(1, 2, 3, 5))


def test_a_spatial_denoiser_plans_spatial_states_for_any_number_of_objects():
    model = EntityDenoiser(DenoiserConfig(width=16, heads=2, blocks=1, horizon=4, action_dim=5, state="spatial"))
    for n in (1, 2, 5):
        obs = _rows(n=n)[:, :1].expand(-1, 5, -1, -1)
        static, states = model.config.split(obs)
        goals = torch.zeros(1, n, GOAL_DIM)
        mask = torch.ones(1, 1 + n, dtype=torch.bool)
        out_states, out_actions = model(
            states, torch.zeros(1, 4, 5), 3, static, goals, mask, torch.ones(1, n, dtype=torch.bool)
        )
        assert out_states.shape == (1, 5, 1 + n, SPATIAL_DYNAMIC_DIM) and out_actions.shape == (1, 4, 5)


def _collect_play(tmp_path_factory, steps: int):
    """Two cube-double play episodes of ``steps`` steps (a directory)."""
    if importlib.util.find_spec("ogbench") is None:
        pytest.skip("needs the ogbench extra")
    path = tmp_path_factory.mktemp("play") / f"double_{steps}"
    config = CollectConfig(env="ogbench-cube", play=True, n_objects=(2,), episodes=2, play_steps=steps, progress=False)
    collect_dataset(path, config)
    return path


@pytest.fixture(scope="module")
def play_data(tmp_path_factory):
    return _collect_play(tmp_path_factory, 60)


@needs_ogbench
def test_hindsight_goals_are_later_states_of_the_same_episode(play_data):
    data = DemoDataset(play_data)
    assert data.play
    rng = np.random.default_rng(0)
    episodes, starts = np.array([0, 0, 1, 1] * 50), np.array([0, 59, 10, 30] * 50)
    goals = data.hindsight_goals(episodes, starts, rng)
    assert goals.shape == (200, 2, data.achieved_goal.shape[-1])
    for e, t, goal in zip(episodes, starts, goals, strict=True):
        first, length = data.state_starts[e], data.lengths[e]
        matches = [k for k in range(t + 1, length + 1) if np.array_equal(data.achieved_goal[first + k], goal)]
        assert matches, f"goal of episode {e} from step {t} is no later state of it"
    # A window from the last step can only aim at the episode's last state; others spread over the rest.
    np.testing.assert_array_equal(goals[1], data.achieved_goal[data.state_starts[0] + 60])
    batch = data.sample_windows(16, 4, np.random.default_rng(1), hindsight="future")
    plain = data.sample_windows(16, 4, np.random.default_rng(1))
    np.testing.assert_array_equal(batch["observation"], plain["observation"])  # same windows, other goals
    assert not np.array_equal(batch["desired_goal"], plain["desired_goal"])


@pytest.fixture(scope="module")
def long_play(tmp_path_factory):
    """Two play episodes long enough for a few placements each (one takes the oracle 45-90 steps)."""
    return DemoDataset(_collect_play(tmp_path_factory, 400))


@needs_ogbench
def test_placements_are_the_first_rests_after_an_object_moved(long_play):
    data = long_play
    placements = data.placements()
    speed = np.linalg.norm(data.observation[:, 1:, ENTITY_FIELDS["velocity"]], axis=-1).max(-1)
    contact = data.observation[:, 0, AGENT_GRIPPER.start + 1]
    rest = (speed < PLACEMENT_SPEED) & (contact < PLACEMENT_CONTACT)
    position = data.achieved_goal[..., GOAL_POSITION]
    assert (np.diff(placements) > 0).all() and rest[placements].all()
    for e in range(len(data)):
        first, last = data.state_starts[e], data.state_starts[e] + data.lengths[e]
        mine = placements[(placements > first) & (placements <= last)]
        assert len(mine) >= 2, f"the oracle places a cube every 45-90 steps; episode {e} has {len(mine)} placements"
        reference = position[first]
        for s in range(first + 1, last + 1):
            moved = np.abs(position[s] - reference).max() > PLACEMENT_MOVE
            assert (s in mine) == (rest[s] and moved), f"state {s}: rest {rest[s]}, moved {moved}"
            if s in mine:
                reference = position[s]
    # k = 1 (p_next = 1): the scene of the first placement after the window's start, else the last state.
    episodes = np.repeat(np.arange(len(data)), 400)
    starts = np.tile(np.arange(400), len(data))
    goals = data.placement_goals(episodes, starts, np.random.default_rng(0), p_next=1.0)
    for e, t, goal in zip(episodes, starts, goals, strict=True):
        first, last = data.state_starts[e], data.state_starts[e] + data.lengths[e]
        after = placements[(placements > first + t) & (placements <= last)]
        np.testing.assert_array_equal(goal, data.achieved_goal[after[0] if len(after) else last])
    # k geometric: goals are later placements of the same episode (or its last state), one move or more ahead.
    goals = data.placement_goals(episodes, starts, np.random.default_rng(1))
    for e, t, goal in zip(episodes, starts, goals, strict=True):
        first, last = data.state_starts[e], data.state_starts[e] + data.lengths[e]
        allowed = [s for s in placements if first + t < s <= last] + [last]
        assert any(np.array_equal(goal, data.achieved_goal[s]) for s in allowed)
    batch = data.sample_windows(64, 4, np.random.default_rng(2), hindsight="placements")
    assert batch["desired_goal"].shape == (64, 2, GOAL_DIM)
    with pytest.raises(ValueError, match="hindsight must be"):
        data.sample_windows(4, 4, np.random.default_rng(2), hindsight="uniform")
    with pytest.raises(ValueError, match="p_next"):
        data.placement_goals(episodes[:2], starts[:2], np.random.default_rng(0), p_next=0.0)


@needs_ogbench
def test_a_planner_trained_on_play_data_is_spatial_and_acts_in_the_cube_env(play_data, tmp_path):
    result = train(tiny_train_config(play_data, tmp_path / "runs", recolour=True))
    config = json.loads((result.run_dir / "config.json").read_text())
    assert config["denoiser"]["state"] == "spatial" and config["denoiser"]["action_dim"] == 5 and config["recolour"]
    policy = ecrl.load(result.run_dir / "final")
    assert policy.meta["env"] == "ogbench-cube"
    from ecrl.envs.ogbench import OGBenchCubeEnv

    env = OGBenchCubeEnv(3, task_id=1, max_episode_steps=3)  # trained on 2 cubes, acts with 3
    obs, _ = env.reset(seed=0)
    policy.reset()
    for _ in range(3):
        action = policy.act(obs)
        assert action.shape == (5,) and np.abs(action).max() <= 1.0
        obs = env.step(action)[0]
    env.close()


@needs_ogbench
def test_recolouring_gives_each_object_and_its_goals_one_new_colour(play_data):
    data = DemoDataset(play_data)
    batch = data.sample_windows(32, 4, np.random.default_rng(0), hindsight="future", n_max=3)  # one padded object
    out = recolour_windows(batch, np.random.default_rng(1))
    colour = ENTITY_FIELDS["colour"]
    objects = out["observation"][:, :, 1:, colour]
    assert (objects == objects[:, :1]).all()  # constant over the window
    np.testing.assert_array_equal(out["achieved_goal"][..., GOAL_COLOUR], objects)
    np.testing.assert_array_equal(out["desired_goal"][..., GOAL_COLOUR], objects[:, 0])
    assert (objects[:, :, 2] == 0).all() and (out["observation"][:, :, 3] == 0).all()  # the padded row
    assert not np.isclose(objects[:, 0, :2], batch["observation"][:, :1, 1:3, colour][:, 0]).all(-1).any()
    np.testing.assert_array_equal(out["observation"][:, :, 0], batch["observation"][:, :, 0])  # the agent
    for key in ("observation", "achieved_goal", "desired_goal"):  # nothing else changed
        other = np.ones(out[key].shape[-1], bool)
        other[colour if key == "observation" else GOAL_COLOUR] = False
        np.testing.assert_array_equal(out[key][..., other], batch[key][..., other])
    swapped = dict(batch, desired_goal=batch["desired_goal"][:, ::-1].copy())
    swapped["goal_mask"] = np.ones_like(batch["goal_mask"])
    with pytest.raises(ValueError, match="desired_goal row i to refer to object i"):
        recolour_windows(swapped, np.random.default_rng(1))


@needs_ogbench
def test_a_hierarchical_planner_trains_on_recoloured_windows_at_both_levels(play_data, tmp_path, monkeypatch):
    import ecrl.diffusion.train as diffusion_train

    horizons = []

    def counted(batch, rng):
        horizons.append(batch["action"].shape[1])
        return recolour_windows(batch, rng)

    monkeypatch.setattr(diffusion_train, "recolour_windows", counted)
    hierarchical = {"planner": "hierarchical", "subgoal_every": 2, "subgoal_horizon": 2, "subgoal_sampling_steps": 2}
    result = train(tiny_train_config(play_data, tmp_path / "runs", recolour=True, **hierarchical))
    steps = json.loads((result.run_dir / "config.json").read_text())["steps"]
    # every step recolours a dense high-level window (K * Hh = 4 steps) and a low-level one (K = 2)
    assert sorted(set(horizons)) == [2, 4] and horizons.count(4) == horizons.count(2) == steps
    policy = ecrl.load(result.run_dir / "final")
    from ecrl.envs.ogbench import OGBenchCubeEnv

    env = OGBenchCubeEnv(3, task_id=1, max_episode_steps=2)
    obs, _ = env.reset(seed=0)
    policy.reset()
    assert policy.act(obs).shape == (5,)
    env.close()
