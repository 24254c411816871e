"""The object-focus wrapper: its rule, its per-episode state, and any policy behind it."""

import gymnasium as gym
import numpy as np
import pytest

import ecrl.envs  # noqa: F401  (registers the envs)
from ecrl.entities import ENTITY_DIM, ENTITY_FIELDS, GOAL_DIM, GOAL_FIELDS
from ecrl.focus import Focus, focus_order

COLOUR, GOAL_COLOUR = ENTITY_FIELDS["colour"].start, GOAL_FIELDS["colour"].start
XY = slice(ENTITY_FIELDS["position"].start, ENTITY_FIELDS["position"].start + 2)
GOAL_XY = slice(GOAL_FIELDS["position"].start, GOAL_FIELDS["position"].start + 2)


def scene(objects_xy, goals_xy, n_max):
    """Agent at the origin and objects at ``objects_xy``, goal row i for object row i + 1, padded to ``n_max``;
    object i has colour value i, which tells the rows apart."""
    obs, goal = np.zeros((1, 1 + n_max, ENTITY_DIM)), np.zeros((1, n_max, GOAL_DIM))
    obs[0, 0, ENTITY_FIELDS["present"]] = 1.0
    for i, (o, g) in enumerate(zip(objects_xy, goals_xy, strict=True)):
        obs[0, 1 + i, ENTITY_FIELDS["present"]] = goal[0, i, GOAL_FIELDS["present"]] = 1.0
        obs[0, 1 + i, COLOUR], goal[0, i, GOAL_COLOUR] = i, i
        obs[0, 1 + i, XY], goal[0, i, GOAL_XY] = o, g
    return obs, goal


def env_batch(n: int, seeds, n_max: int | None = None) -> dict[str, np.ndarray]:
    env = gym.make("ecrl/Push-v0", n_objects=n, n_max=n_max or n)
    obs = [env.reset(seed=s)[0] for s in seeds]
    env.close()
    return {k: np.stack([o[k] for o in obs]) for k in obs[0]}


class Recorder:
    """A batch policy that records what it is shown and answers with the colour of the first object it sees."""

    def __init__(self, **attributes) -> None:
        self.seen, self.resets = [], []
        self.__dict__.update(attributes)

    def reset(self, *args) -> None:
        self.resets.append(args)

    def act(self, obs, deterministic: bool = True):
        self.seen.append({k: np.array(v) for k, v in obs.items()})
        return np.stack([obs["observation"][:, 1, COLOUR], np.full(len(obs["observation"]), deterministic)], -1)


def test_the_rule_takes_unplaced_objects_nearest_the_pusher_first_then_placed_ones():
    # Objects 0 and 3 are on their targets; 1, 2 and 4 are not, at 0.3, 0.1 and 0.2 m from the agent.
    objects = [(0.05, 0.0), (0.3, 0.0), (0.0, 0.1), (0.5, 0.5), (-0.2, 0.0)]
    goals = [(0.05, 0.01), (0.0, -0.3), (0.2, 0.2), (0.5, 0.5), (0.1, 0.3)]
    obs, goal = scene(objects, goals, n_max=7)
    assert focus_order(obs, goal)[0].tolist()[:5] == [2, 4, 1, 0, 3]  # padded rows (5, 6) come last
    # Ordered goals: among objects not yet placed, the lowest-ranked target comes first, however far.
    ranked = goal.copy()
    ranked[0, :5, GOAL_FIELDS["rank"]] = np.array([0.2, 0.4, 0.8, 0.6, 1.0])[:, None]
    assert focus_order(obs, ranked)[0].tolist()[:3] == [1, 2, 4]
    both = focus_order(np.concatenate([obs, obs]), np.concatenate([goal, ranked]))  # each scene on its own
    assert both[:, :4].tolist() == [[2, 4, 1, 0], [1, 2, 4, 0]]
    # Held objects come first among the unplaced, objects set aside after them.
    held, aside = np.zeros((1, 7), bool), np.zeros((1, 7), bool)
    held[0, 1], aside[0, 2] = True, True
    assert focus_order(obs, goal, held=held, aside=aside)[0].tolist()[:5] == [1, 4, 2, 0, 3]
    with pytest.raises(ValueError, match="one goal row per object row"):
        focus_order(obs, goal[:, :5])
    with pytest.raises(ValueError, match="ecrl entity rows"):
        focus_order(obs[..., :5], goal)


def test_the_policy_sees_the_agent_and_k_objects_with_their_goal_rows():
    batch = env_batch(5, seeds=[0, 1, 2], n_max=7)
    inner = Recorder()
    focus = Focus(inner, k=2)
    action = focus.act(batch, deterministic=False)
    seen = inner.seen[-1]
    keep = focus_order(batch["observation"], batch["desired_goal"])[:, :2]
    assert seen["observation"].shape == (3, 3, ENTITY_DIM) and seen["desired_goal"].shape == (3, 2, GOAL_DIM)
    for b in range(3):
        np.testing.assert_array_equal(seen["observation"][b, 0], batch["observation"][b, 0])  # the agent first
        for i, j in enumerate(keep[b]):  # object j's row, its goal and its achieved goal stay together
            np.testing.assert_array_equal(seen["observation"][b, 1 + i], batch["observation"][b, 1 + j])
            np.testing.assert_array_equal(seen["desired_goal"][b, i], batch["desired_goal"][b, j])
            np.testing.assert_array_equal(seen["achieved_goal"][b, i], batch["achieved_goal"][b, j])
    assert action.shape == (3, 2) and not action[:, 1].any()  # the wrapped policy's answer, keywords passed on
    one = focus.act({k: v[0] for k, v in batch.items()})  # one observation in, one action out
    assert one.shape == (2,) and inner.seen[-1]["observation"].shape == (1, 3, ENTITY_DIM)
    assert Focus(inner, k=20).act(batch).shape == (3, 2) and inner.seen[-1]["observation"].shape[1] == 8


def test_without_patience_the_rule_chooses_afresh_at_every_step():
    objects, goals = [(0.1, 0.0), (0.2, 0.0)], [(0.4, 0.4), (-0.4, 0.4)]
    obs, goal = scene(objects, goals, n_max=2)
    focus = Focus(Recorder(), k=1)
    assert focus.choose({"observation": obs, "desired_goal": goal}).tolist() == [[0]]
    obs[0, 0, XY] = (0.25, 0.0)  # the pusher moves on: object 1 is now the nearer
    assert focus.choose({"observation": obs, "desired_goal": goal}).tolist() == [[1]]


def test_with_patience_the_objects_are_held_until_placed_and_reset_forgets_them():
    objects, goals = [(0.1, 0.0), (0.2, 0.0), (0.3, 0.0)], [(0.4, 0.4), (-0.4, 0.4), (0.0, -0.4)]
    obs, goal = scene(objects, goals, n_max=3)
    inner = Recorder()
    focus = Focus(inner, k=1, patience=30)
    choose = lambda: focus.choose({"observation": obs, "desired_goal": goal})[0].tolist()  # noqa: E731
    assert choose() == [0]
    obs[0, 0, XY] = (0.3, 0.0)  # object 2 is now the nearest, but object 0 is held
    obs[0, 1, XY] = (0.15, 0.05)  # and it makes progress
    assert choose() == [0]
    obs[0, 1, XY] = goal[0, 0, GOAL_XY]  # placed: the nearest object not yet placed is next
    assert choose() == [2]
    focus.reset("envs", "seeds")
    assert inner.resets == [("envs", "seeds")]  # the wrapped policy is reset too
    obs[0, 0, XY] = (0.2, 0.0)
    assert choose() == [1]  # nothing held any more


def test_an_object_that_makes_no_progress_is_set_aside_for_patience_steps():
    obs = env_batch(3, seeds=[0])
    focus = Focus(Recorder(), k=1, patience=3)
    first = int(focus_order(obs["observation"], obs["desired_goal"])[0, 0])
    chosen = [int(focus.choose(obs)[0, 0]) for _ in range(12)]  # the scene never changes: no progress
    # The first step sets its distance; after 3 more without 5 mm of progress, one more, it stalls:
    # set aside, the next object is held as long, and then the first (no longer set aside) returns.
    other = chosen[5]
    assert other != first
    assert chosen == [first] * 5 + [other] * 5 + [first] * 2


def test_state_is_per_scene_of_the_batch():
    objects, goals = [(0.1, 0.0), (0.2, 0.0)], [(0.4, 0.4), (-0.4, 0.4)]
    obs, goal = scene(objects, goals, n_max=2)
    obs, goal = np.concatenate([obs, obs]), np.concatenate([goal, goal])
    focus = Focus(Recorder(), k=1, patience=30)
    assert focus.choose({"observation": obs, "desired_goal": goal}).tolist() == [[0], [0]]
    obs[1, 1, XY] = goal[1, 0, GOAL_XY]  # scene 1 places its object; scene 0 keeps its own
    obs[:, 0, XY] = (0.25, 0.0)
    assert focus.choose({"observation": obs, "desired_goal": goal}).tolist() == [[0], [1]]
    # A batch of another shape starts new episodes.
    assert focus.choose({"observation": obs[:1], "desired_goal": goal[:1]}).tolist() == [[1]]


def test_bad_settings_and_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match=r"k \(objects in focus\) must be an int >= 1, got 0"):
        Focus(Recorder(), k=0)
    with pytest.raises(ValueError, match="must be an int >= 1, got True"):
        Focus(Recorder(), k=True)
    with pytest.raises(ValueError, match="patience must be an int >= 0"):
        Focus(Recorder(), k=1, patience=-1)
    with pytest.raises(ValueError, match="placed_within must be positive"):
        Focus(Recorder(), k=1, placed_within=0.0)
    with pytest.raises(ValueError, match="policy with act"):
        Focus(object(), k=1)
    with pytest.raises(ValueError, match="reads exactly 2 object rows"):
        Focus(Recorder(kwargs={"n_max": 2}), k=1)
    with pytest.raises(ValueError, match="camera frames"):
        Focus(Recorder(meta={"pixels": {"size": 64, "cameras": ["top"]}}), k=1)
    focus = Focus(Recorder(), k=1)
    batch = env_batch(2, seeds=[0])
    with pytest.raises(ValueError, match="ecrl entity rows"):
        focus.act({"observation": np.zeros((1, 3, 7)), "desired_goal": batch["desired_goal"]})
    with pytest.raises(ValueError, match=r"cannot cut obs\['pixels'\]"):
        focus.act({**batch, "pixels": np.zeros((1, 1, 8, 8, 3), np.uint8)})
    with pytest.raises(ValueError, match="'desired_goal'"):
        focus.act({"observation": batch["observation"]})


def test_reports_describe_the_rule():
    focus = Focus(Recorder(meta={"arch": "eit", "goal": "positions"}), k=1, patience=30)
    assert focus.meta == {"arch": "eit", "goal": "positions", "rule": "focus k=1, patience 30",
                          "focus": {"k": 1, "patience": 30}}  # fmt: skip
    assert Focus(Recorder(), k=2).rule == "focus k=2"
