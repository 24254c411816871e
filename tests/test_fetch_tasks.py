"""Fetch skills as data: their goals, their combinations with goal kinds and shapes, splits over them, experts."""

import json

import mujoco
import numpy as np
import pytest

from ecrl.envs import (
    GOAL_FIELDS,
    SKILL_COLOUR,
    SKILL_SHAPE,
    SKILL_SHAPE_GRASP,
    SKILL_SHAPE_SINGLE,
    CompositionalSplit,
    FetchExpert,
    HeldOut,
    ObjectSpec,
    ScriptedExpert,
    TaskSpec,
)
from ecrl.envs.fetch_goals import AIR_HEIGHT
from ecrl.envs.fetch_scene import TABLE_ORIGIN

_POS, _RANK = GOAL_FIELDS["position"], GOAL_FIELDS["rank"].start


def _fetch(n, skill, goal="positions", seed=0):
    return TaskSpec.random(n, goal=goal, seed=seed, skill=skill, embodiment="fetch")


def test_invalid_combinations_raise_clear_errors():
    sphere = (ObjectSpec("cube"), ObjectSpec("sphere", "blue"))
    with pytest.raises(ValueError, match="spheres cannot be stacked"):
        TaskSpec(objects=sphere, skill="stack", embodiment="fetch")
    with pytest.raises(ValueError, match="'pusher' embodiment cannot 'pick_place'"):
        TaskSpec(objects=sphere, skill="pick_place")
    with pytest.raises(ValueError, match="makes no sense for skill 'stack'"):
        TaskSpec(objects=sphere[:1], skill="stack", goal="sort", embodiment="fetch")
    with pytest.raises(ValueError, match="cannot be stacked"):
        HeldOut("shape", "sphere", "skill", "stack")
    with pytest.raises(ValueError, match="held-out skill"):
        CompositionalSplit((HeldOut("shape", "cube", "skill", "stack"),), skills=("push",), embodiment="fetch")
    with pytest.raises(ValueError, match="cannot 'stack'"):
        CompositionalSplit((HeldOut("shape", "cube", "goal", "positions"),), skills=("stack",))
    # Random stack tasks only draw shapes that stack; the JSON form keeps skill and embodiment.
    specs = [_fetch(4, "stack", seed=s) for s in range(30)]
    assert all(o.shape != "sphere" for s in specs for o in s.objects)
    assert all(TaskSpec.from_json(s.to_json()) == s for s in specs)


@pytest.mark.parametrize("goal", ["positions", "ordered"])
def test_stack_targets_form_one_tower_in_rank_order(make, goal):
    env = make("ecrl/FetchStack-v0", n_objects=4, goal=goal)
    for seed in range(5):
        obs, _ = env.reset(seed=seed)
        desired = obs["desired_goal"]
        pos, ranks, sizes = desired[:, _POS], desired[:, _RANK], env.unwrapped._sizes
        assert np.ptp(pos[:, :2], axis=0).max() == 0  # one column
        order = np.argsort(ranks)
        np.testing.assert_allclose(np.sort(ranks), [0.25, 0.5, 0.75, 1.0])
        # Level k rests on level k - 1: its bottom is the top of the one below, the first on the table.
        bottoms, tops = pos[order, 2] - sizes[order], pos[order, 2] + sizes[order]
        np.testing.assert_allclose(bottoms, np.concatenate([[0.0], tops[:-1]]), atol=1e-12)
        assert env.unwrapped.distance_threshold == 0.02 < 2 * sizes.min()


def test_pick_place_targets_are_on_the_table_or_in_the_air_as_fetch_samples_them(make):
    env = make("ecrl/FetchPickPlace-v0", n_objects=2)
    lifted = []
    for seed in range(60):
        obs, _ = env.reset(seed=seed)
        height = obs["desired_goal"][:2, _POS][:, 2] - env.unwrapped._sizes
        assert (height >= 0).all() and (height < AIR_HEIGHT).all() and (height > 1e-9).sum() <= 1
        lifted.append(height.max() > 1e-9)
    assert 0.3 < np.mean(lifted) < 0.7  # FetchPickAndPlace: half of its goals are in the air
    push = make("ecrl/FetchPush-v0", n_objects=3)
    for seed in range(10):
        obs, _ = push.reset(seed=seed)
        np.testing.assert_allclose(obs["desired_goal"][:3, _POS][:, 2], push.unwrapped._sizes)


@pytest.mark.parametrize("goal", ["adjacent", "sort"])
def test_pick_place_takes_cluster_goals(make, goal):
    env = make("ecrl/FetchPickPlace-v0", n_objects=4, goal=goal)
    obs, _ = env.reset(seed=0)
    pos = obs["desired_goal"][:, _POS]
    np.testing.assert_allclose(pos[:, 2], env.unwrapped._sizes)  # cluster targets lie on the table
    gaps = np.linalg.norm(pos[:, None, :2] - pos[None, :, :2], axis=-1) + np.eye(4)
    assert gaps.min() > 2 * env.unwrapped._sizes.max()  # never overlapping


@pytest.mark.parametrize(
    "split",
    [SKILL_SHAPE, SKILL_SHAPE_GRASP, SKILL_SHAPE_SINGLE, SKILL_COLOUR],
    ids=["skill_shape", "skill_shape_grasp", "skill_shape_single", "skill_colour"],
)
def test_skill_splits_hold_out_skill_combinations(split):
    skills, seen, test_skills = set(), set(), set()
    for seed in range(200):
        train, test = split.sample(seed, "train", 3), split.sample(seed, "test", 3)
        assert not split.is_test(train) and split.is_test(test)
        assert train.embodiment == test.embodiment == "fetch"
        for spec in (train, test):
            if spec.skill == "stack":
                assert all(o.shape != "sphere" for o in spec.objects)
        if split in (SKILL_SHAPE, SKILL_SHAPE_GRASP):
            assert not (train.skill == "stack" and any(o.shape == "cylinder" for o in train.objects))
        if split in (SKILL_SHAPE_GRASP, SKILL_SHAPE_SINGLE):
            assert not (train.skill == "pick_place" and any(o.shape == "cube" for o in train.objects))
            if test.skill == "pick_place":
                assert any(o.shape == "cube" for o in test.objects)
            seen |= {(o.shape, train.skill) for o in train.objects}
        skills |= {train.skill, test.skill}
        test_skills.add(test.skill)
    assert skills == {"push", "pick_place", "stack"}
    assert CompositionalSplit.from_json(split.to_json()) == split
    if split is SKILL_SHAPE_GRASP:  # each held-out shape is grasped in training by the other skill
        assert {("cube", "stack"), ("cylinder", "pick_place")} <= seen
    if split is SKILL_SHAPE_SINGLE:  # cylinders do both skills, cubes are stacked, the one test skill is pick_place
        assert {("cube", "stack"), ("cylinder", "stack"), ("cylinder", "pick_place")} <= seen
        assert test_skills == {"pick_place"}


def test_env_on_a_skill_split_resets_into_that_part(make):
    env = make("ecrl/FetchStack-v0", n_objects=3, split="skill_shape", part="test")
    for seed in range(5):
        env.reset(seed=seed)
        spec = env.unwrapped.spec_
        assert spec.skill == "stack" and any(o.shape == "cylinder" for o in spec.objects)
    with pytest.raises(ValueError, match="split of the 'fetch' embodiment"):
        make("ecrl/FetchStack-v0", split="colour_shape")
    with pytest.raises(ValueError, match="split of the 'pusher' embodiment"):
        make("ecrl/Push-v0", split="skill_shape")


CASES = [
    ("ecrl/FetchPush-v0", 2, "positions", (0, 1)),
    ("ecrl/FetchPickPlace-v0", 2, "positions", (0, 1, 6)),  # seeds 0 and 6 lift a target into the air
    ("ecrl/FetchPickPlace-v0", 3, "sort", (0,)),
    ("ecrl/FetchStack-v0", 3, "positions", (0, 1)),
    ("ecrl/FetchStack-v0", 3, "ordered", (2,)),
]


@pytest.mark.parametrize(("env_id", "n", "goal", "seeds"), CASES, ids=[f"{c[0][5:-3]}-{c[2]}-{c[1]}" for c in CASES])
def test_expert_succeeds_and_reports_its_object(make, env_id, n, goal, seeds):
    env = make(env_id, n_objects=n, goal=goal)
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        expert = FetchExpert(env, seed=seed)
        worked_on = set()
        for _ in range(env.unwrapped.spec_.max_steps):
            obs, _, _, truncated, info = env.step(expert.act(obs))
            worked_on.add(expert.current)
            if info["is_success"] or truncated:
                break
        assert info["is_success"], (seed, info)
        assert worked_on - {None} == set(range(n))
    with pytest.raises(ValueError, match="drives ecrl push envs"):
        ScriptedExpert(env)
    with pytest.raises(ValueError, match="drives ecrl Fetch envs"):
        FetchExpert(make("ecrl/Push-v0"))


def _teleport(env, index, position):
    u = env.unwrapped
    u._obj_qpos[index, :3] = position + TABLE_ORIGIN
    u._obj_qpos[index, 3:] = [1, 0, 0, 0]
    u._obj_qvel[:] = 0
    mujoco.mj_forward(u.model, u.data)
    return env.step(np.zeros(4, dtype=np.float32))[-1]


def test_ordered_targets_count_only_when_filled_in_rank_order(make):
    objects = (ObjectSpec("cube", "red"), ObjectSpec("cylinder", "green"), ObjectSpec("cube", "blue"))
    env = make(TaskSpec(objects=objects, skill="pick_place", goal="ordered", embodiment="fetch"))
    obs, _ = env.reset(seed=0)
    targets, starts = obs["desired_goal"][:3, _POS], obs["achieved_goal"][:3, _POS]
    first, second, third = env.unwrapped.target_order
    assert _teleport(env, second, targets[second])["fraction_placed"] == 0.0  # out of turn: nothing
    assert _teleport(env, first, targets[first])["fraction_placed"] == pytest.approx(1 / 3)
    info = _teleport(env, third, targets[third])
    assert info["fraction_placed"] == pytest.approx(1 / 3) and not info["is_success"]
    _teleport(env, second, starts[second])
    _teleport(env, second, targets[second])
    _teleport(env, third, starts[third])
    info = _teleport(env, third, targets[third])
    assert info["is_success"] and info["fraction_placed"] == 1.0


def test_ecrl_expert_on_fetch_writes_its_table_and_json(tmp_path):
    from ecrl.scripts.expert import main

    main(
        ["--embodiment", "fetch", "--skills", "stack", "pick_place", "--n-objects", "1", "--tower-heights", "2"]
        + ["--episodes", "2", "--out", str(tmp_path)]
    )
    record = json.loads((tmp_path / "expert.json").read_text())
    points = {(p["skill"], p["n_objects"]): p for p in record["points"]}
    assert set(points) == {("stack", 2), ("pick_place", 1)}
    assert all(p["successes"] == 2 and p["failed_seeds"] == [] for p in points.values())
    assert record["command"].startswith("ecrl-expert --embodiment fetch --skills stack")
    readme = (tmp_path / "README.md").read_text()
    assert "| stack | positions | 2 | 2/2 |" in readme and "| pick_place | positions | 1 | 2/2 |" in readme
