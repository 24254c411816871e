"""Observation dicts → entity tensors."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import ecrl.envs  # noqa: F401  (registers the envs)
from ecrl.entities import (
    ENTITY_DIM,
    ENTITY_FIELDS,
    GOAL_DIM,
    GOAL_FIELDS,
    check_focus,
    focus_rows,
    focused,
    to_entities,
)


def test_single_and_batched_observations_give_masked_entity_sets():
    env = gym.make("ecrl/Push-v0", n_objects=2, n_max=5)
    obs, _ = env.reset(seed=0)
    one = to_entities(obs)
    assert one.entities.shape == (1, 6, ENTITY_DIM) and one.goal_entities.shape == (1, 5, GOAL_DIM)
    assert one.mask[0].tolist() == [True, True, True, False, False, False]
    assert one.goal_mask[0].tolist() == [True, True, False, False, False]
    batch = {k: np.stack([v, v]) for k, v in obs.items()}
    two = to_entities(batch)
    assert two.entities.shape == (2, 6, ENTITY_DIM)
    torch.testing.assert_close(two.entities[1], one.entities[0])


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("observation", np.zeros((4, ENTITY_DIM + 1)), "expected shape"),
        ("desired_goal", np.zeros((2, 3, GOAL_DIM)), "batch dimension"),
        ("observation", np.full((4, ENTITY_DIM), np.nan), "NaN"),
    ],
)
def test_bad_observations_raise_clear_errors(key, value, message):
    obs = {"observation": np.zeros((4, ENTITY_DIM)), "desired_goal": np.zeros((3, GOAL_DIM))}
    obs[key] = value
    with pytest.raises(ValueError, match=message):
        to_entities(obs)


def test_missing_key_is_named():
    with pytest.raises(ValueError, match="desired_goal"):
        to_entities({"observation": np.zeros((4, ENTITY_DIM))})


def _scene(objects_xy, goals_xy, n_max):
    """Agent at the origin and objects at ``objects_xy``, goal row i for object row i + 1, padded to ``n_max``."""
    obs = torch.zeros(1, 1 + n_max, ENTITY_DIM)
    goal = torch.zeros(1, n_max, GOAL_DIM)
    obs[0, 0, ENTITY_FIELDS["present"]] = 1.0
    for i, (o, g) in enumerate(zip(objects_xy, goals_xy, strict=True)):
        obs[0, 1 + i, ENTITY_FIELDS["present"]] = 1.0
        obs[0, 1 + i, ENTITY_FIELDS["colour"]] = float(i)  # tells the rows apart
        obs[0, 1 + i, ENTITY_FIELDS["position"].start : ENTITY_FIELDS["position"].start + 2] = torch.tensor(o)
        goal[0, i, GOAL_FIELDS["present"]] = 1.0
        goal[0, i, GOAL_FIELDS["colour"]] = float(i)
        goal[0, i, GOAL_FIELDS["position"].start : GOAL_FIELDS["position"].start + 2] = torch.tensor(g)
    return obs, goal


def test_focus_keeps_unplaced_objects_nearest_the_agent_first_then_placed_ones():
    # Objects 0 and 3 are on their targets; 1, 2 and 4 are not, at 0.3, 0.1 and 0.2 m from the agent.
    objects = [(0.05, 0.0), (0.3, 0.0), (0.0, 0.1), (0.5, 0.5), (-0.2, 0.0)]
    goals = [(0.05, 0.01), (0.0, -0.3), (0.2, 0.2), (0.5, 0.5), (0.1, 0.3)]
    obs, goal = _scene(objects, goals, n_max=7)
    colour = ENTITY_FIELDS["colour"].start
    for k, expected in ((2, [2, 4]), (3, [2, 4, 1]), (4, [2, 4, 1, 0]), (5, [2, 4, 1, 0, 3])):
        rows, goal_rows, _ = focus_rows(obs, goal, k)
        assert rows.shape == (1, 1 + k, ENTITY_DIM) and goal_rows.shape == (1, k, GOAL_DIM)
        assert torch.equal(rows[0, 0], obs[0, 0])  # the agent stays first
        assert rows[0, 1:, colour].tolist() == expected
        assert goal_rows[0, :, GOAL_FIELDS["colour"].start].tolist() == expected  # each object keeps its goal
    rows, goal_rows, keep = focus_rows(obs, goal, 6)  # more than there are objects: padded rows come last
    assert keep[0].tolist()[:5] == [2, 4, 1, 0, 3]
    assert rows[0, 6, ENTITY_FIELDS["present"]].item() == 0 and goal_rows[0, 5, GOAL_FIELDS["present"]].item() == 0
    assert focus_rows(obs, goal, 20)[0].shape == (1, 8, ENTITY_DIM)  # never more rows than it was given
    # Ordered goals: among objects not yet placed, the lowest-ranked target comes first, however far.
    ranked = goal.clone()
    ranked[0, :5, GOAL_FIELDS["rank"]] = torch.tensor([0.2, 0.4, 0.8, 0.6, 1.0])[:, None]
    assert focus_rows(obs, ranked, 3)[0][0, 1:, colour].tolist() == [1, 2, 4]
    both = focus_rows(torch.cat([obs, obs]), torch.cat([goal, ranked]), 4)[0]  # each scene sorted on its own
    assert both[:, 1:, colour].tolist() == [[2, 4, 1, 0], [1, 2, 4, 0]]
    with pytest.raises(ValueError, match="one goal row per object row"):
        focus_rows(obs, goal[:, :5], 3)
    with pytest.raises(ValueError, match="k must be >= 1"):
        focus_rows(obs, goal, 0)


def test_focused_cuts_every_row_kind_of_an_env_observation_alike():
    env = gym.make("ecrl/Push-v0", n_objects=5, n_max=7)
    obs = {k: torch.as_tensor(v[None]) for k, v in env.reset(seed=4)[0].items()}
    cut = focused(obs, 2)
    _, _, keep = focus_rows(obs["observation"], obs["desired_goal"], 2)
    assert cut["observation"].shape == (1, 3, ENTITY_DIM) and cut["desired_goal"].shape == (1, 2, GOAL_DIM)
    for i, j in enumerate(keep[0].tolist()):  # object j's rows, its goal and its achieved goal stay together
        assert torch.equal(cut["observation"][0, 1 + i], obs["observation"][0, 1 + j])
        assert torch.equal(cut["desired_goal"][0, i], obs["desired_goal"][0, j])
        assert torch.equal(cut["achieved_goal"][0, i], obs["achieved_goal"][0, j])
    for bad, message in (((-1, 0.04), "focus must be an int >= 0"), ((2, 0.0), "placed_within must be positive")):
        with pytest.raises(ValueError, match=message):
            check_focus(*bad)
    check_focus(0, 0.04)
