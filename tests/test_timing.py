"""The timers behind ``ecrl-bench``: what they count, and that the physics floor replays the env's own physics."""

import gc
import time

import gymnasium as gym
import numpy as np
import pytest

import ecrl.envs  # noqa: F401  (registers ecrl/Push-v0)
from ecrl.timing import (
    call_ms,
    gc_paused,
    latency_stats,
    random_actions,
    record_controls,
    reduce_rates,
    reduce_times,
    rollout_observations,
    time_calls,
    time_physics,
    time_steps,
)


def test_reduce_times_takes_the_best_or_the_median_and_refuses_anything_else():
    assert reduce_times([3.0, 1.0, 2.0, 10.0], "best") == 1.0
    assert reduce_times([3.0, 1.0, 2.0], "median") == 2.0
    with pytest.raises(ValueError, match="'best' or 'median'"):
        reduce_times([1.0], "mean")
    with pytest.raises(ValueError, match="no measurements"):
        reduce_times([], "best")


def test_reduce_rates_takes_the_largest_or_the_median_and_refuses_anything_else():
    assert reduce_rates([3.0, 1.0, 2.0, 10.0], "best") == 10.0
    assert reduce_rates([3.0, 1.0, 2.0], "median") == 2.0
    with pytest.raises(ValueError, match="'best' or 'median'"):
        reduce_rates([1.0], "max")
    with pytest.raises(ValueError, match="no measurements"):
        reduce_rates([], "median")


def test_latency_stats_summarise_calls_timed_one_by_one():
    ms = [float(k) for k in range(1, 11)]  # 1 … 10 ms
    assert latency_stats(ms) == {"median_ms": 5.5, "p90_ms": pytest.approx(9.1), "calls": 10}
    stats = latency_stats(ms, with_min=True)
    assert list(stats) == ["median_ms", "p90_ms", "min_ms", "calls"] and stats["min_ms"] == 1.0


def test_call_ms_times_one_call_in_milliseconds():
    calls = []
    ms = call_ms(lambda: calls.append(gc.isenabled()) or time.sleep(0.01))
    assert calls == [False] and 10 <= ms < 1000


def test_gc_is_paused_inside_a_timer_and_restored_after():
    seen = []
    assert gc_paused(lambda: seen.append(gc.isenabled()) or 0.5) == 0.5
    assert seen == [False] and gc.isenabled()


def test_time_calls_calls_count_times_and_returns_seconds_per_call():
    calls = []
    per_call = time_calls(lambda: calls.append(1), 7)
    assert len(calls) == 7 and 0 <= per_call < 0.1


def test_random_actions_are_seeded_and_inside_the_space():
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    a = random_actions(space, 50, seed=3)
    assert a.shape == (50, 2) and a.dtype == np.float32 and (np.abs(a) <= 1).all()
    np.testing.assert_array_equal(a, random_actions(space, 50, seed=3))


def test_the_physics_floor_replays_the_physics_of_the_env_steps():
    env = gym.make("ecrl/Push-v0", n_objects=2)
    actions = random_actions(env.action_space, 40, seed=0)
    ctrls, ends, qpos = record_controls(env, actions, seed=0)
    assert ctrls.shape == (40, env.unwrapped.model.nu) and len(ends) == 40
    seconds, replayed = time_physics(env, ctrls, ends, seed=0)
    np.testing.assert_array_equal(replayed, qpos)  # the same trajectory, bit for bit
    assert seconds > 0 and time_steps(env, actions, seed=0) > 0
    env.close()


def test_rollout_observations_are_push_observations_of_the_requested_size():
    obs = rollout_observations(3, 5, seed=0)
    assert len(obs) == 5 and set(obs[0]) == {"observation", "achieved_goal", "desired_goal"}
