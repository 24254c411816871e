"""Bad input fails where it enters, with a ValueError that says what was expected."""

import numpy as np
import pytest

from ecrl.envs import GOAL_DIM, ObjectSpec, TaskSpec


@pytest.mark.parametrize(
    "action",
    [[np.nan, 0.0], [0.0, np.inf], [-np.inf, 0.0], [0.1, 0.2, 0.3], [0.5], [[0.1, 0.2]], 0.5],
    ids=["nan", "inf", "-inf", "three", "one", "2d", "scalar"],
)
def test_bad_action_is_rejected(make, action):
    env = make("ecrl/Push2-v0")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action must be a finite array of shape \(2,\)"):
        env.step(np.array(action, dtype=np.float32))


def test_out_of_range_finite_action_is_clipped_not_rejected(make):
    env = make("ecrl/Push1-v0")
    env.reset(seed=0)
    big, _, _, _, _ = env.step(np.array([50.0, -50.0]))
    env.reset(seed=0)
    unit, _, _, _, _ = env.step(np.array([1.0, -1.0]))
    np.testing.assert_array_equal(big["observation"], unit["observation"])


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ObjectSpec(colour="octarine"), "unknown colour 'octarine'"),
        (lambda: ObjectSpec(shape="torus"), "unknown shape 'torus'"),
        (lambda: ObjectSpec(size=0.5), "object size must be in"),
        (lambda: TaskSpec((ObjectSpec(),), goal="pyramid"), "unknown goal kind 'pyramid'"),
        (lambda: TaskSpec((ObjectSpec(),), skill="juggle"), "unknown skill 'juggle'"),
        (lambda: TaskSpec(()), "a task needs 1 … 16 objects, got 0"),
        (lambda: TaskSpec((ObjectSpec(),) * 17), "a task needs 1 … 16 objects, got 17"),
    ],
)
def test_bad_task_is_rejected(build, message):
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_objects": 0}, r"n_objects must be in 1 … 16, got 0"),
        ({"n_objects": 17}, r"n_objects must be in 1 … 16, got 17"),
        ({"n_objects": 2.5}, "n_objects must be an integer"),
        ({"n_objects": 4, "n_max": 3}, r"n_max must be >= n_objects \(4\), got 3"),
        ({"goal": "pyramid"}, "unknown goal kind 'pyramid'"),
        ({"n_objects": 16, "table_size": 0.3}, "do not fit a 0.3 m table"),
        ({"split": "nope"}, "unknown split 'nope'"),
        ({"reward_type": "shaped"}, "unknown reward_type 'shaped'"),
        pytest.param(
            {"render_mode": "ansi"},
            "unknown render_mode 'ansi'",
            marks=pytest.mark.filterwarnings("ignore:.*not in the possible render_modes"),
        ),
        ({"camera": "side"}, "unknown camera 'side'"),
    ],
)
def test_bad_env_option_is_rejected_at_make(make, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make("ecrl/Push-v0", **kwargs)


def test_spec_that_does_not_fit_the_table_is_rejected_at_make(make):
    big_cubes = TaskSpec(tuple(ObjectSpec("cube", "red", 0.035) for _ in range(16)))
    with pytest.raises(ValueError, match="do not fit a 0.5 m table"):
        make(big_cubes, table_size=0.5)


def test_reset_task_of_another_size_is_rejected(make):
    env = make("ecrl/Push2-v0")
    with pytest.raises(ValueError, match="this env simulates 2 objects, the task has 3"):
        env.reset(seed=0, options={"task": TaskSpec.random(3, seed=0)})


@pytest.mark.parametrize(
    ("achieved", "desired", "info", "message"),
    [
        ((3, GOAL_DIM), (4, GOAL_DIM), {}, "must both be"),
        ((3, GOAL_DIM + 1), (3, GOAL_DIM + 1), {}, "must both be"),
        ((GOAL_DIM,), (GOAL_DIM,), {}, "must both be"),
        ((5, 3, GOAL_DIM), (5, 3, GOAL_DIM), [{}] * 4, "expected 5 dicts"),
        ((3, GOAL_DIM), (3, GOAL_DIM), "info", "info must be a dict"),
        ((3, GOAL_DIM), (3, GOAL_DIM), 3, "info must be a dict"),
    ],
)
def test_compute_reward_rejects_bad_goals(make, achieved, desired, info, message):
    env = make("ecrl/Push3-v0").unwrapped
    env.reset(seed=0)
    with pytest.raises(ValueError, match=message):
        env.compute_reward(np.zeros(achieved), np.zeros(desired), info)
