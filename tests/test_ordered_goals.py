"""``ordered`` goals: a target filled out of turn does not count until it is refilled in turn."""

import numpy as np
import pytest
from push_helpers import TASKS, XY, park_agent, teleport

SPEC = TASKS["ordered"]  # three objects of different colours: object i belongs on target i


def _roomy_seed(make) -> int:
    """A seed whose targets lie far from each other and from every object's start (teleports touch nothing)."""
    env = make(SPEC)
    for seed in range(100):
        obs, _ = env.reset(seed=seed)
        targets, starts = obs["desired_goal"][:, XY], obs["achieved_goal"][:, XY]
        points = np.concatenate([targets, starts])
        gaps = np.linalg.norm(targets[:, None] - points[None], axis=-1)
        gaps[np.arange(3), np.arange(3)] = np.inf
        if gaps.min() > 0.12:
            return seed
    raise AssertionError("no roomy seed in 0 … 99")


@pytest.fixture
def scene(make):
    """``(env, targets (3, 2), order (3,))`` after a roomy reset with the pusher parked off the table."""
    seed = _roomy_seed(make)
    env = make(SPEC)
    obs, info = env.reset(seed=seed)
    assert info["fraction_placed"] == 0.0
    park_agent(env)
    order = env.unwrapped.target_order
    assert sorted(order.tolist()) == [0, 1, 2]
    ranks = obs["desired_goal"][order, -1]
    assert (np.diff(ranks) > 0).all(), "target_order sorts targets by their rank feature"
    return env, obs["desired_goal"][:, XY], order


def test_filling_targets_in_rank_order_succeeds(scene):
    env, targets, order = scene
    for k, t in enumerate(order):
        _, reward, _, _, info = teleport(env, t, targets[t])
        assert info["fraction_placed"] == pytest.approx((k + 1) / 3)
        assert info["is_success"] == (k == 2)
    assert reward == 0.0


def test_object_placed_out_of_turn_does_not_count(scene):
    env, targets, order = scene
    first, second, third = order
    starts = env.unwrapped._obj_qpos[:, :2].copy()
    _, _, _, _, info = teleport(env, second, targets[second])
    assert info["fraction_placed"] == 0.0, "the second target filled before the first counts for nothing"
    _, _, _, _, info = teleport(env, first, targets[first])
    assert info["fraction_placed"] == pytest.approx(1 / 3)
    obs, reward, _, _, info = teleport(env, third, targets[third])
    # Every object sits on its target, so the position-only reward is full; the order is not.
    assert reward == 0.0 and env.unwrapped.compute_reward(obs["achieved_goal"], obs["desired_goal"], info) == 0.0
    assert info["fraction_placed"] == pytest.approx(1 / 3) and not info["is_success"]
    # Moving the early object off and back puts it in turn; the third, filled before it, is now early.
    _, _, _, _, info = teleport(env, second, starts[second])
    assert info["fraction_placed"] == pytest.approx(1 / 3)
    _, _, _, _, info = teleport(env, second, targets[second])
    assert info["fraction_placed"] == pytest.approx(2 / 3) and not info["is_success"]
    _, _, _, _, info = teleport(env, third, starts[third])
    _, _, _, _, info = teleport(env, third, targets[third])
    assert info["is_success"] and info["fraction_placed"] == 1.0
