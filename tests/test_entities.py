"""Observation dicts → entity tensors."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import ecrl.envs  # noqa: F401  (registers the envs)
from ecrl.entities import ENTITY_DIM, GOAL_DIM, to_entities


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
