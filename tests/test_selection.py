"""Actors that choose one object (``select``): the scorer, teacher-forced imitation, export, training."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from ecrl.entities import ENTITY_FIELDS, GOAL_FIELDS, placed_objects, take_objects
from ecrl.envs import ScriptedExpert
from ecrl.policies.demos import Demos, bc_errors, collect_demos, pretrain_actor
from ecrl.policies.export import EntityActorModule
from ecrl.policies.nets import ObjectScorer, choose_object, select_object
from ecrl.policies.train import TrainConfig

PRESENT, GOAL_PRESENT = ENTITY_FIELDS["present"].start, GOAL_FIELDS["present"].start
XY = slice(ENTITY_FIELDS["position"].start, ENTITY_FIELDS["position"].start + 2)
NET = {"width": 16, "heads": 2, "blocks": 1}


def env_batch(n: int, seeds, n_max: int | None = None) -> dict[str, torch.Tensor]:
    env = gym.make("ecrl/Push-v0", n_objects=n, n_max=n_max or n)
    obs = [env.reset(seed=s)[0] for s in seeds]
    env.close()
    return {k: torch.as_tensor(np.stack([o[k] for o in obs]), dtype=torch.float32) for k in obs[0]}


def selecting_actor(seed: int = 0) -> EntityActorModule:
    torch.manual_seed(seed)
    return EntityActorModule(NET, action_dim=2, stochastic=False, select=True).eval()


def test_take_objects_keeps_the_agent_and_the_named_objects_with_their_goal_rows():
    obs = env_batch(3, seeds=[0, 1])
    keep = torch.tensor([[2], [0]])
    cut = take_objects(obs, keep)
    assert cut["observation"].shape[1] == 2 and cut["desired_goal"].shape[1] == 1
    for b, i in enumerate([2, 0]):
        assert torch.equal(cut["observation"][b, 0], obs["observation"][b, 0])
        assert torch.equal(cut["observation"][b, 1], obs["observation"][b, 1 + i])
        assert torch.equal(cut["desired_goal"][b, 0], obs["desired_goal"][b, i])
        assert torch.equal(cut["achieved_goal"][b, 0], obs["achieved_goal"][b, i])
    with pytest.raises(ValueError, match=r"in \[0, 3\)"):
        take_objects(obs, torch.tensor([[3], [0]]))
    with pytest.raises(ValueError, match=r"\(B, m\)"):
        take_objects(obs, torch.tensor([1, 0]))


def test_object_logits_follow_the_objects_and_ignore_padding():
    torch.manual_seed(0)
    scorer = ObjectScorer(16).eval()
    obs = env_batch(3, seeds=[0, 1, 2], n_max=5)
    logits = scorer(obs)
    assert logits.shape == (3, 5) and torch.isinf(logits[:, 3:]).all() and torch.isfinite(logits[:, :3]).all()
    order = torch.tensor([2, 0, 1, 3, 4])
    swapped = {
        "observation": obs["observation"][:, torch.cat([torch.zeros(1, dtype=torch.long), 1 + order])],
        "desired_goal": obs["desired_goal"][:, order],
    }
    torch.testing.assert_close(scorer(swapped), logits[:, order], atol=1e-5, rtol=1e-5)
    unpadded = {k: v[:, : 4 if k == "observation" else 3] for k, v in obs.items()}
    torch.testing.assert_close(scorer(unpadded), logits[:, :3], atol=1e-5, rtol=1e-5)


def test_a_selecting_actor_acts_on_the_object_its_scorer_rates_highest():
    actor = selecting_actor()
    obs = env_batch(4, seeds=range(6))
    with torch.no_grad():
        choice = actor.scorer(obs).argmax(-1)
        by_hand = torch.tanh(actor.net(take_objects(obs, choice[:, None])))
        assert not placed_objects(
            obs["observation"], obs["desired_goal"]
        ).any()  # at reset no object is on its target: the scorer's best is free
        assert torch.equal(actor(obs), by_hand)
        cut = select_object(actor.scorer, obs)
    assert cut["observation"].shape[1] == 2
    # Moving an object the scorer did not choose changes the action only if it changes the choice.
    moved = {k: v.clone() for k, v in obs.items()}
    other = (choice + 1) % 4
    moved["observation"][torch.arange(6), 1 + other, XY.start] += 0.05
    with torch.no_grad():
        same = actor.scorer(moved).argmax(-1) == choice
        assert same.any()
        actor.reset()  # choose afresh in the moved scenes rather than keep the first choice
        assert torch.equal(actor(moved)[same], by_hand[same])


def test_a_committed_choice_holds_until_its_object_is_placed_and_reset_forgets_it():
    actor = selecting_actor()
    obs = env_batch(3, seeds=range(4))
    with torch.no_grad():
        best = actor.scorer(obs).argmax(-1)
        other = (best + 1) % 3
        actor.reset()
        actor._choice = other.clone()
        held = actor(obs)
        assert torch.equal(actor._choice, other)
        assert torch.equal(held, actor.act_on(take_objects(obs, other[:, None])))
        # Scene 0's held object lands on its target: that scene asks its scorer again.
        moved = {k: v.clone() for k, v in obs.items()}
        i = int(other[0])
        moved["observation"][0, 1 + i, XY] = moved["desired_goal"][0, i, GOAL_FIELDS["position"].start :][:2]
        actor(moved)
        fresh = actor.scorer(moved).argmax(-1)
        assert actor._choice[0] == fresh[0] and torch.equal(actor._choice[1:], other[1:])
        actor.reset()
        assert actor._choice is None
        actor(obs)
        assert torch.equal(actor._choice, best)


def test_an_object_that_makes_no_progress_is_set_aside_for_patience_steps():
    torch.manual_seed(0)
    actor = EntityActorModule(NET, action_dim=2, stochastic=False, select=True, patience=3).eval()
    obs = env_batch(3, seeds=[0])
    with torch.no_grad():
        first = int(actor.scorer(obs).argmax(-1))
        chosen = [int(actor._select(obs)) for _ in range(12)]  # the scene never changes: no progress
    # The first step sets its distance; after 3 more without 5 mm of progress, one more, it stalls:
    # set aside, the next object is held as long, and then the first (no longer set aside) returns.
    other = chosen[5]
    assert other != first
    assert chosen == [first] * 5 + [other] * 5 + [first] * 2
    with pytest.raises(ValueError, match="patience"):
        EntityActorModule(NET, action_dim=2, stochastic=False, select=True, patience=-1)


def test_choose_object_passes_over_placed_objects_while_others_are_left():
    obs = env_batch(3, seeds=[0, 1])
    goal_xy = slice(GOAL_FIELDS["position"].start, GOAL_FIELDS["position"].start + 2)
    obs["observation"][0, 1, XY] = obs["desired_goal"][0, 0, goal_xy]  # scene 0: object 0 placed
    obs["observation"][1, 1:, XY] = obs["desired_goal"][1, :, goal_xy]  # scene 1: every object placed
    prefer_0 = lambda _: torch.tensor([[3.0, 1.0, 2.0], [3.0, 1.0, 2.0]])  # noqa: E731
    placed = placed_objects(obs["observation"], obs["desired_goal"])
    assert choose_object(prefer_0, obs, placed).tolist() == [2, 0]  # scene 1 has nothing left: plain argmax
    assert choose_object(prefer_0, obs).tolist() == [0, 0]
    aside = torch.tensor([[False, False, True], [False, False, False]])
    assert choose_object(prefer_0, obs, placed, set_aside=aside).tolist() == [1, 0]
    # Setting aside the only object left is dropped as a rule rather than choosing a placed one.
    aside_all_open = torch.tensor([[False, True, True], [False, False, False]])
    assert choose_object(prefer_0, obs, placed, set_aside=aside_all_open).tolist() == [2, 0]


def test_select_and_focus_exclude_each_other():
    with pytest.raises(ValueError, match="own object choice"):
        EntityActorModule(NET, action_dim=2, stochastic=False, focus=1, select=True)
    with pytest.raises(ValueError, match="needs the EIT"):
        TrainConfig(n_objects=2, arch="deepsets", select=True)
    with pytest.raises(ValueError, match="demonstrations"):
        TrainConfig(n_objects=2, select=True, demos=0, bc_steps=0, dagger_iterations=0, bc_weight=0.0)


def test_expert_reports_the_object_it_works_on():
    env = gym.make("ecrl/Push-v0", n_objects=2)
    expert = ScriptedExpert(env)
    obs, _ = env.reset(seed=3)
    choices = []
    for _ in range(env.unwrapped.spec_.max_steps):
        action = expert.act(obs)
        choices.append(expert.choice)
        obs, _, _, _, info = env.step(action)
        if info["is_success"]:
            break
    assert info["is_success"]
    worked = [c for c in choices if c is not None]
    assert set(worked) == {0, 1}  # both objects, one at a time
    idle = expert.act(obs)
    assert not idle.any() and expert.choice is None  # all placed: it idles and chooses nothing


def test_imitation_teaches_the_scorer_the_experts_choice():
    make = lambda: gym.make("ecrl/Push-v0", n_objects=3)  # noqa: E731
    demos = collect_demos(make, 6, seed=0, progress=False)
    assert demos.choices.shape == (len(demos),) and set(np.unique(demos.choices)) <= {-1, 0, 1, 2}
    assert (demos.choices >= 0).mean() > 0.8
    actor = selecting_actor()
    full = demos.batch(np.arange(len(demos)), "cpu")
    labelled = full[2] >= 0

    def accuracy() -> float:
        with torch.no_grad():
            guess = actor.scorer(full[0]).argmax(-1)
        return (guess[labelled] == full[2][labelled]).float().mean().item()

    ce_before = bc_errors(actor, *full)[1].item()
    losses = pretrain_actor(actor, demos, steps=300, batch_size=64, seed=0, progress=False)
    ce_after = bc_errors(actor, *full)[1].item()
    assert ce_after < 0.5 * ce_before, (ce_before, ce_after)
    assert accuracy() > 0.8  # three objects: chance is 1/3
    assert np.mean(losses[-20:]) < np.mean(losses[:20])


def test_demos_concatenate_with_their_choices():
    make = lambda: gym.make("ecrl/Push-v0", n_objects=2)  # noqa: E731
    a = collect_demos(make, 1, seed=0, progress=False)
    b = collect_demos(make, 1, seed=1, progress=False)
    both = a + b
    assert isinstance(both, Demos) and len(both) == len(a) + len(b)
    assert np.array_equal(both.choices, np.concatenate([a.choices, b.choices]))
    assert both.obs["observation"].shape[0] == len(both)
