"""Entity-centric networks (EIT, DeepSets) and their SB3 bridge (SAC, TD3, TQC with HER)."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from sb3_contrib import TQC
from stable_baselines3 import SAC, TD3, HerReplayBuffer
from torch import nn

from ecrl.attention import AttentionPool, EnsembleLayerNorm, EnsembleLinear
from ecrl.entities import ENTITY_DIM, ENTITY_FIELDS, GOAL_DIM, GOAL_FIELDS
from ecrl.policies.nets import EntityNet, NetConfig
from ecrl.policies.sb3 import ENTITY_POLICIES, EntityCritic, EntitySACPolicy

PRESENT, GOAL_PRESENT = ENTITY_FIELDS["present"].start, GOAL_FIELDS["present"].start
ARCHS = ["eit", "deepsets"]
ALGOS = {"sac": SAC, "td3": TD3, "tqc": TQC}


def tiny(arch: str) -> NetConfig:
    return NetConfig(arch=arch, width=16, heads=2, blocks=1)


def random_obs(batch: int, n: int, n_max: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """``batch`` random observations of ``n`` objects padded (all-zero rows) to ``n_max``."""
    g = torch.Generator().manual_seed(seed)
    ents = torch.zeros(batch, 1 + n_max, ENTITY_DIM)
    goals = torch.zeros(batch, n_max, GOAL_DIM)
    ents[:, : 1 + n] = torch.randn(batch, 1 + n, ENTITY_DIM, generator=g)
    goals[:, :n] = torch.randn(batch, n, GOAL_DIM, generator=g)
    ents[:, : 1 + n, PRESENT] = 1.0
    goals[:, :n, GOAL_PRESENT] = 1.0
    return {"observation": ents, "desired_goal": goals}


def env_obs(n_objects: int, n_max: int | None = None, seeds=(0, 1, 2)) -> dict[str, torch.Tensor]:
    """Reset observations of ``ecrl/Push-v0`` stacked into a batch of float32 tensors."""
    env = gym.make("ecrl/Push-v0", n_objects=n_objects, n_max=n_max or n_objects)
    obs = [env.reset(seed=s)[0] for s in seeds]
    env.close()
    return {k: torch.as_tensor(np.stack([o[k] for o in obs]), dtype=torch.float32) for k in obs[0]}


def make_net(arch: str, members: int = 1, action_dim: int = 0, out_dim: int = 3) -> EntityNet:
    torch.manual_seed(0)
    return EntityNet(tiny(arch), out_dim=out_dim, action_dim=action_dim, members=members).eval()


def permuted(obs: dict[str, torch.Tensor], rows: torch.Tensor, goal_rows: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"observation": obs["observation"][:, rows], "desired_goal": obs["desired_goal"][:, goal_rows]}


# --- permutation invariance, padding, masking ----------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("members", [1, 2])
def test_output_is_invariant_to_the_order_of_entities_and_goals(arch, members):
    action_dim = 2 if members > 1 else 0  # members > 1: a twin critic, which also reads an action
    net = make_net(arch, members, action_dim)
    obs = random_obs(batch=4, n=5, n_max=5)
    action = torch.randn(4, action_dim) if action_dim else None
    out = net(obs, action)
    assert out.shape == ((members, 4, 3) if members > 1 else (4, 3))
    same_goals = torch.arange(5)
    objects_only = torch.tensor([0, 3, 1, 5, 2, 4])  # the agent stays in row 0
    with_agent = torch.tensor([4, 2, 5, 0, 3, 1])  # the agent is an entity like any other: any row works
    goals = torch.tensor([2, 4, 0, 1, 3])
    for rows, goal_rows in [(objects_only, same_goals), (with_agent, same_goals), (objects_only, goals)]:
        torch.testing.assert_close(net(permuted(obs, rows, goal_rows), action), out, atol=1e-5, rtol=1e-5)
    # Goals are matched to objects by attributes, not by row, so the sets are all that matter; but the
    # output does depend on them: moving one object changes it.
    moved = {k: v.clone() for k, v in obs.items()}
    moved["observation"][:, 2, ENTITY_FIELDS["position"]] += 0.5
    assert not torch.allclose(net(moved, action), out, atol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_ensemble_members_have_independent_weights(arch):
    net = make_net(arch, members=2, action_dim=2)
    q = net(random_obs(8, 3, 3), torch.randn(8, 2))
    assert q.shape == (2, 8, 3)
    assert not torch.allclose(q[0], q[1]), "twin critics must not share weights"
    ensemble_params = [p for p in net.parameters() if p.shape[0] == 2]
    assert ensemble_params and all(not torch.equal(p[0], p[1]) for p in ensemble_params if p.std() > 0)


@pytest.mark.parametrize("arch", ARCHS)
def test_padding_changes_nothing_for_real_env_observations(arch):
    net = make_net(arch)
    exact, padded = env_obs(3, n_max=3), env_obs(3, n_max=8)
    assert padded["observation"].shape == (3, 9, ENTITY_DIM)
    assert not padded["observation"][:, 4:].any() and not padded["desired_goal"][:, 3:].any()
    torch.testing.assert_close(net(padded), net(exact), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("members", [1, 2])
def test_padding_and_garbage_in_absent_rows_change_nothing(arch, members):
    action_dim = 2 if members > 1 else 0
    net = make_net(arch, members, action_dim)
    action = torch.randn(5, action_dim) if action_dim else None
    exact, padded = random_obs(5, 3, 3, seed=1), random_obs(5, 3, 8, seed=1)
    out = net(exact, action)
    torch.testing.assert_close(net(padded, action), out, atol=1e-5, rtol=1e-5)
    # Rows whose present flag is 0 are ignored whatever else they hold.
    garbage = {k: v.clone() for k, v in padded.items()}
    garbage["observation"][:, 4:, 1:] = 100 * torch.randn(5, 5, ENTITY_DIM - 1)
    garbage["desired_goal"][:, 3:, 1:] = 100 * torch.randn(5, 5, GOAL_DIM - 1)
    torch.testing.assert_close(net(garbage, action), out, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_one_model_runs_on_any_number_of_objects(arch):
    actor, critic = make_net(arch), make_net(arch, members=2, action_dim=2)
    for n in (1, 2, 5, 12, 16):
        obs = env_obs(n, seeds=(n, n + 1))
        assert obs["observation"].shape == (2, 1 + n, ENTITY_DIM)
        a, q = actor(obs), critic(obs, torch.zeros(2, 2))
        assert a.shape == (2, 3) and q.shape == (2, 2, 3)
        assert torch.isfinite(a).all() and torch.isfinite(q).all()


# --- one batched pass for the twin critics ---------------------------------------------------------


def member_net(ensemble: EntityNet, i: int) -> EntityNet:
    """A ``members = 1`` net holding member ``i``'s weights of ``ensemble``."""
    single = EntityNet(ensemble.config, ensemble.out_dim, ensemble.action_dim, members=1).eval()
    source = dict(ensemble.named_modules())
    copied = 0
    with torch.no_grad():
        for name, module in single.named_modules():
            src = source[name]
            if isinstance(module, nn.Linear):
                assert isinstance(src, EnsembleLinear)
                module.weight.copy_(src.weight[i].T)  # (E, in, out) -> (out, in)
                module.bias.copy_(src.bias[i, 0])  # (E, 1, out) -> (out,)
                copied += 2
            elif isinstance(module, nn.LayerNorm):
                assert isinstance(src, EnsembleLayerNorm)
                module.weight.copy_(src.weight[i])
                module.bias.copy_(src.bias[i])
                copied += 2
            elif isinstance(module, AttentionPool):
                module.query.copy_(src.query[i : i + 1])
                copied += 1
    assert copied == len(list(single.parameters())), "every parameter of the member net must be copied"
    return single


@pytest.mark.parametrize("arch", ARCHS)
def test_ensemble_pass_equals_each_member_run_alone(arch):
    ensemble = make_net(arch, members=3, action_dim=2)
    obs, action = random_obs(6, 4, 7, seed=3), torch.randn(6, 2)
    out = ensemble(obs, action)
    for i in range(3):
        torch.testing.assert_close(out[i], member_net(ensemble, i)(obs, action), atol=1e-5, rtol=1e-4)


# --- bad input -----------------------------------------------------------------------------------


def test_bad_input_is_refused_where_it_enters():
    actor, critic = make_net("eit"), make_net("eit", members=2, action_dim=2)
    obs = random_obs(4, 2, 3)
    narrow = {**obs, "observation": obs["observation"][..., :-1]}
    with pytest.raises(ValueError, match=rf"observation: expected shape \(B, N, {ENTITY_DIM}\), got \(4, 4, 19\)"):
        actor(narrow)
    with pytest.raises(ValueError, match=rf"desired_goal: expected shape \(B, N, {GOAL_DIM}\)"):
        actor({**obs, "desired_goal": obs["desired_goal"][..., :5]})
    with pytest.raises(ValueError, match="observation: expected shape"):
        actor({**obs, "observation": obs["observation"][0]})  # unbatched
    with pytest.raises(ValueError, match="batch sizes differ"):
        actor({**obs, "desired_goal": obs["desired_goal"][:3]})
    with pytest.raises(ValueError, match="takes no action"):
        actor(obs, torch.zeros(4, 2))
    with pytest.raises(ValueError, match="takes an action"):
        critic(obs)
    with pytest.raises(ValueError, match=r"action: expected shape \(4, 2\), got \(4, 3\)"):
        critic(obs, torch.zeros(4, 3))


def test_net_config_is_validated():
    with pytest.raises(ValueError, match="unknown architecture 'transformer'"):
        NetConfig(arch="transformer")
    with pytest.raises(ValueError, match="divisible by heads"):
        NetConfig(width=30, heads=4)
    with pytest.raises(ValueError, match="invalid network size"):
        NetConfig(width=0)
    with pytest.raises(ValueError, match="invalid network size"):
        NetConfig(blocks=-1)
    NetConfig(arch="deepsets", width=30, heads=4)  # DeepSets has no heads to split into


def test_entity_policies_need_a_goal_dict_observation_space():
    action_space = spaces.Box(-1, 1, (2,))
    flat = spaces.Box(-np.inf, np.inf, (10,))
    with pytest.raises(ValueError, match=r"Dict observation space with \['desired_goal', 'observation'\]"):
        EntitySACPolicy(flat, action_space, lambda _: 1e-3)
    with pytest.raises(ValueError, match="desired_goal"):
        EntitySACPolicy(spaces.Dict({"observation": flat}), action_space, lambda _: 1e-3)


# --- SB3 learn smoke ----------------------------------------------------------------------------


@pytest.mark.parametrize(("algo", "arch"), [("sac", "eit"), ("td3", "eit"), ("tqc", "eit"), ("sac", "deepsets")])
def test_sb3_learns_with_her_and_entity_policies(algo, arch):
    env = gym.make("ecrl/Push1-v0")  # episodes of 150 steps: learning starts after the first
    model = ALGOS[algo](
        ENTITY_POLICIES[algo],
        env,
        buffer_size=1_000,
        replay_buffer_class=HerReplayBuffer,
        batch_size=32,
        learning_starts=160,
        policy_kwargs={"net": {"arch": arch, "width": 16, "heads": 2}},
        seed=0,
    )
    assert isinstance(model.critic, EntityCritic)
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.learn(200)
    assert model.num_timesteps == 200
    assert model._n_updates == 40  # one gradient step per env step after learning_starts
    after = model.policy.state_dict()
    for prefix in ("actor.net.", "critic.net."):
        changed = [k for k in before if k.startswith(prefix) and not torch.equal(before[k], after[k])]
        assert changed, f"{prefix} parameters did not change during training"

    obs = {k: torch.as_tensor(v[None], dtype=torch.float32) for k, v in env.reset(seed=0)[0].items()}
    actions = torch.zeros(1, 2)
    with torch.no_grad():
        q = model.critic(obs, actions)
        q1 = model.critic.q1_forward(obs, actions)
    if algo == "tqc":
        n_quantiles = model.policy.critic_kwargs["n_quantiles"]
        assert q.shape == (1, model.policy.critic_kwargs["n_critics"], n_quantiles)
    else:
        assert isinstance(q, tuple) and len(q) == 2 and all(v.shape == (1, 1) for v in q)
        torch.testing.assert_close(q1, q[0])
    assert q1.shape == (1, 1)
    action, _ = model.predict(env.reset(seed=1)[0], deterministic=True)
    assert action.shape == (2,) and np.all(np.abs(action) <= 1)
    env.close()
