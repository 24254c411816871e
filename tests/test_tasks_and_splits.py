"""Tasks and compositional splits are data: JSON round-trips, deterministic sampling, clean train/test parts."""

import numpy as np
import pytest

from ecrl.envs import COLOUR_SHAPE, GOAL_KINDS, SHAPE_GOAL, CompositionalSplit, HeldOut, TaskSpec

PRESETS = {"colour_shape": COLOUR_SHAPE, "shape_goal": SHAPE_GOAL}


def test_task_spec_json_round_trip():
    for seed in range(20):
        spec = TaskSpec.random(1 + seed % 16, goal=GOAL_KINDS[seed % 4], seed=seed, horizon=None if seed % 2 else 123)
        assert TaskSpec.from_json(spec.to_json()) == spec
        assert TaskSpec.from_dict(spec.to_dict()) == spec
    assert TaskSpec.from_json(spec.to_json()).max_steps == spec.max_steps


def test_make_env_accepts_the_dict_form_of_a_spec(make):
    spec = TaskSpec.random(2, goal="sort", seed=0)
    env = make(spec.to_dict())
    env.reset(seed=0)
    assert env.unwrapped.spec_ == spec


@pytest.mark.parametrize(
    "split",
    [
        *PRESETS.values(),
        CompositionalSplit((HeldOut("size", 0.02, "goal", "adjacent"),), goals=("positions", "adjacent")),
    ],
)
def test_split_json_round_trip(split):
    again = CompositionalSplit.from_json(split.to_json())
    assert again == split
    assert again.sample(5, "test", 4) == split.sample(5, "test", 4)


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.parametrize("part", ["train", "test"])
def test_split_sampling_is_deterministic_under_a_seed(name, part):
    split = PRESETS[name]
    first = [split.sample(seed, part, n_objects=3) for seed in range(20)]
    assert first == [split.sample(seed, part, n_objects=3) for seed in range(20)]
    assert len(set(first)) > 10, "different seeds should give different tasks"
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
    assert [split.sample(rng_a, part) for _ in range(5)] == [split.sample(rng_b, part) for _ in range(5)]


def _holds(spec: TaskSpec, held: HeldOut) -> bool:
    """Independent of ``HeldOut.occurs_in``: does ``spec`` contain this combination?"""
    if held.factor_b == "goal":
        return spec.goal == held.value_b and any(getattr(o, held.factor_a) == held.value_a for o in spec.objects)
    return any(
        getattr(o, held.factor_a) == held.value_a and getattr(o, held.factor_b) == held.value_b for o in spec.objects
    )


@pytest.mark.parametrize("name", PRESETS)
def test_train_tasks_exclude_and_test_tasks_contain_held_out_combinations(name):
    split = PRESETS[name]
    seen_goals = set()
    for seed in range(300):
        n = 1 + seed % 6
        train, test = split.sample(seed, "train", n), split.sample(seed, "test", n)
        assert train.n_objects == test.n_objects == n
        assert not split.is_test(train) and not any(_holds(train, h) for h in split.held_out), train
        assert split.is_test(test) and any(_holds(test, h) for h in split.held_out), test
        seen_goals |= {train.goal, test.goal}
    assert seen_goals == set(split.goals), "every goal kind of the split is drawn"


def test_shape_goal_test_part_needs_a_held_out_goal_kind():
    with pytest.raises(ValueError, match="no held-out combination"):
        SHAPE_GOAL.sample(0, "test", goal="positions")
    assert SHAPE_GOAL.sample(0, "test", goal="sort").goal == "sort"


@pytest.mark.parametrize("part", ["train", "test"])
def test_env_on_a_split_resets_into_that_part(make, part):
    env = make("ecrl/Push-v0", split="colour_shape", part=part, n_objects=4)
    for seed in range(10):
        env.reset(seed=seed)
        assert COLOUR_SHAPE.is_test(env.unwrapped.spec_) == (part == "test")
