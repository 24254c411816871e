"""Padding to ``n_max``: padded rows are all zero and change nothing about the task."""

import numpy as np
import pytest
from push_helpers import TASKS

from ecrl.envs import ENTITY_FIELDS, ScriptedExpert


@pytest.mark.parametrize("goal", ["positions", "sort", "ordered"])
@pytest.mark.parametrize("reward_type", ["sparse", "dense"])
def test_padded_env_matches_unpadded_env(make, goal, reward_type):
    spec, n = TASKS[goal], TASKS[goal].n_objects
    env = make(spec, reward_type=reward_type)
    padded = make(spec, reward_type=reward_type, n_max=7)
    assert padded.observation_space["observation"].shape[0] == 1 + 7
    assert padded.observation_space["achieved_goal"].shape[0] == 7

    expert = ScriptedExpert(env)
    obs, info = env.reset(seed=4)
    obs_p, info_p = padded.reset(seed=4)
    steps = 0
    while True:
        for key, real in (("observation", 1 + n), ("achieved_goal", n), ("desired_goal", n)):
            assert obs_p[key].shape[0] == padded.observation_space[key].shape[0]
            np.testing.assert_array_equal(obs_p[key][:real], obs[key], err_msg=key)
            assert not obs_p[key][real:].any(), f"{key}: padded rows must be all zero"
        assert info_p == info
        rewards = [
            e.unwrapped.compute_reward(o["achieved_goal"], o["desired_goal"], {})
            for e, o in ((env, obs), (padded, obs_p))
        ]
        assert rewards[1] == pytest.approx(rewards[0])
        if info["is_success"] or steps == 300:
            break
        action = expert.act(obs)
        obs, reward, _, _, info = env.step(action)
        obs_p, reward_p, _, _, info_p = padded.step(action)
        assert reward_p == reward
        steps += 1
    assert info["is_success"], "the episode should reach success, so that success is compared too"
    # The present flag tells real rows from padding.
    present = obs_p["observation"][:, ENTITY_FIELDS["present"].start]
    assert present.tolist() == [1.0] * (1 + n) + [0.0] * (7 - n)
