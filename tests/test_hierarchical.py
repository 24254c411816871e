"""The hierarchical (jumpy) diffusion planner: subgoal-given segments, the planner API, its training."""

import json

import numpy as np
import pytest
import torch
from diffusion_helpers import resume_to_six_steps, rollout, tiny_train_config
from safetensors.torch import load_file
from torch import nn

import ecrl
import ecrl.envs  # noqa: F401  (registers ecrl/Push*)
from ecrl.datasets import DemoDataset
from ecrl.diffusion import DYNAMIC_DIM, DenoiserConfig, loss, sample, split_rows
from ecrl.diffusion.hierarchical import HierarchicalPlanner, segment_windows, subgoal_windows
from ecrl.diffusion.train import DiffusionTrainConfig, planner_policy, train
from ecrl.entities import ENTITY_DIM, ENTITY_FIELDS, GOAL_DIM, GOAL_FIELDS
from ecrl.scripts.train_diffusion import main

K, HH = 3, 3
HIGH = DenoiserConfig(width=16, heads=2, blocks=1, horizon=HH, diffusion_steps=20)
LOW = DenoiserConfig(width=16, heads=2, blocks=1, horizon=K, diffusion_steps=20)
F = ENTITY_FIELDS


def randomise(module: nn.Module, seed: int = 0) -> nn.Module:
    """Every weight random: adaLN-Zero's zero gates would make a fresh denoiser ignore its inputs."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return module.eval()


def make_planner(**kwargs) -> HierarchicalPlanner:
    settings = {"high_sampling_steps": 2, "low_sampling_steps": 3, "seed": 5} | kwargs
    return randomise(HierarchicalPlanner(HIGH, LOW, **settings))


def rows(batch: int, n_objects: int, n_max: int, seed: int = 0) -> torch.Tensor:
    """``(B, 1 + n_max, ENTITY_DIM)``: an agent and ``n_objects`` objects, zero rows after them."""
    g = torch.Generator().manual_seed(seed)
    n = 1 + n_objects
    out = torch.zeros(batch, 1 + n_max, ENTITY_DIM)
    out[:, :n, F["present"]] = 1.0
    out[:, 0, F["is_agent"]] = 1.0
    out[:, 1:n, F["is_object"]] = 1.0
    out[:, :n, F["position"]] = (torch.rand(batch, n, 3, generator=g) - 0.5) * 0.6
    yaw = torch.rand(batch, n, generator=g) * 6.28
    out[:, :n, F["yaw"]] = torch.stack([yaw.sin(), yaw.cos()], -1)
    out[:, :n, F["size"].start : F["colour"].stop] = torch.rand(
        batch, n, F["colour"].stop - F["size"].start, generator=g
    )
    return out


def goals(batch: int, m: int) -> torch.Tensor:
    out = torch.rand(batch, m, GOAL_DIM, generator=torch.Generator().manual_seed(1))
    out[..., GOAL_FIELDS["present"]] = 1.0
    return out


# ---------------------------------------------------------------------------------------------- the low level


def test_segment_plan_honours_the_subgoal_exactly_at_step_k():
    planner = make_planner()
    obs = {"observation": rows(2, 3, n_max=5), "desired_goal": goals(2, 3)}
    subgoal = torch.randn(2, 6, DYNAMIC_DIM)
    plan = planner.plan_segment(obs, subgoal)
    real = obs["observation"][..., F["present"].start] > 0.5
    assert plan.states.shape == (2, K + 1, 6, DYNAMIC_DIM) and plan.actions.shape == (2, K, 2)
    assert torch.equal(plan.states[:, K][real], subgoal[real])
    assert plan.states[:, :, 4:].abs().max() == 0  # padded entities
    _, now = split_rows(obs["observation"][:, None])
    assert torch.equal(plan.states[:, 0], now[:, 0])
    assert not torch.allclose(plan.states[:, 1:K][real[:, None].expand(-1, K - 1, -1)], subgoal[real].repeat(K - 1, 1))
    planner.low = spy = Spy(planner.low)
    planner.plan_segment(obs, subgoal)  # the subgoal enters clean at every DDIM step, as in training
    assert all(torch.equal(x[:, K][real], subgoal[real]) for x in spy.inputs)


class Spy(nn.Module):
    """A denoiser wrapper that records its noisy state inputs and can shift its step-``H`` predictions."""

    def __init__(self, model: nn.Module, shift_last: float = 0.0) -> None:
        super().__init__()
        self.model, self.config, self.shift_last, self.inputs = model, model.config, shift_last, []

    def forward(self, states, *args):
        self.inputs.append(states.clone())
        out_states, out_actions = self.model(states, *args)
        out_states = out_states.clone()
        out_states[:, -1] += self.shift_last
        return out_states, out_actions


def test_sampling_with_clean_known_feeds_the_subgoal_clean_at_every_step():
    spy = Spy(randomise(HierarchicalPlanner(HIGH, LOW)).low)
    obs, subgoal = rows(2, 2, 2), torch.randn(2, 3, DYNAMIC_DIM)
    known = torch.zeros(2, K + 1, 3, DYNAMIC_DIM)
    known[:, K] = subgoal
    mask = torch.zeros(1, K + 1, 1, 1, dtype=torch.bool)
    mask[:, K] = True
    sample(spy, obs, goals(2, 2), steps=4, known_states=known, known_mask=mask, clean_known=True)
    assert len(spy.inputs) == 4 and all(torch.equal(x[:, K], subgoal) for x in spy.inputs)
    spy.inputs.clear()
    sample(spy, obs, goals(2, 2), steps=4, known_states=known, known_mask=mask)  # the default: noised
    assert not torch.equal(spy.inputs[0][:, K], subgoal)


def segments(batch: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    """Windows of ``K`` steps: random entity rows per step, random actions, two objects."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.stack([rows(batch, 2, 2, seed=seed + t) for t in range(K + 1)], 1)
    obs[..., F["size"].start : F["colour"].stop] = obs[:, :1, :, F["size"].start : F["colour"].stop]
    return {"observation": obs, "action": torch.rand(batch, K, 2, generator=g) * 2 - 1, "desired_goal": goals(batch, 2)}


def test_loss_with_the_last_state_given_ignores_it():
    batch = segments()
    model = randomise(HierarchicalPlanner(HIGH, LOW)).low

    def terms(shift: float, given_last: bool):
        spy = Spy(model, shift)
        return loss(spy, batch, torch.Generator().manual_seed(0), given_last=given_last), spy.inputs[0]

    reference, noisy = terms(0.0, True)
    shifted, _ = terms(100.0, True)  # any prediction at step K: not part of the loss
    torch.testing.assert_close(shifted.total, reference.total)
    assert reference.states > 0
    _, clean = split_rows(batch["observation"])
    assert torch.equal(noisy[:, -1], clean[:, -1]) and torch.equal(noisy[:, 0], clean[:, 0])  # given, clean
    plain, plain_noisy = terms(0.0, False)
    assert terms(100.0, False)[0].total > plain.total + 100  # without given_last, step K is predicted
    assert not torch.equal(plain_noisy[:, -1], clean[:, -1])


# ---------------------------------------------------------------------------------------------- training windows


def test_subgoal_windows_take_every_kth_state_and_the_mean_action_per_stride():
    b, n, h = 2, 3, K * HH
    dense = {
        "observation": np.random.default_rng(0).normal(size=(b, h + 1, n, ENTITY_DIM)).astype(np.float32),
        "action": np.arange(b * h * 2, dtype=np.float32).reshape(b, h, 2),
        "valid": np.arange(h)[None].repeat(b, 0) < 4,  # both episodes end after action 3
        "episode": np.array([0, 1]),
        "desired_goal": np.zeros((b, n - 1, GOAL_DIM), np.float32),
        "mask": np.ones((b, n), bool),
        "goal_mask": np.ones((b, n - 1), bool),
    }
    jumpy = subgoal_windows(dense, K, success=np.array([True, False]))
    np.testing.assert_array_equal(jumpy["observation"], dense["observation"][:, [0, K, 2 * K, 3 * K]])
    np.testing.assert_allclose(jumpy["action"][:, 1], dense["action"][:, K : 2 * K].mean(1))
    # Episode 0 succeeded: its final state holds (every step valid); episode 1 keeps its mask.
    np.testing.assert_array_equal(jumpy["valid"], [[True, True, True], [True, False, False]])
    assert segment_windows(dense, np.array([True, False]))["valid"][0].all()
    with pytest.raises(ValueError, match="strides of 2"):
        subgoal_windows(dense, 2, np.array([True, True]))


# ---------------------------------------------------------------------------------------------- the planner


def test_planner_acts_for_1_to_8_objects_and_round_trips_through_ecrl_load(tmp_path):
    policy = planner_policy(make_planner(replan_every=2), {"arch": "hierarchical_diffusion"})
    policy.save(tmp_path / "planner")
    loaded = ecrl.load(tmp_path / "planner")
    assert isinstance(loaded.module, HierarchicalPlanner) and loaded.module.kwargs == policy.module.kwargs
    for n_objects in range(1, 9):
        actions = rollout(policy, n_objects, 4, seed=n_objects)
        assert actions.shape == (4, 2) and np.isfinite(actions).all() and np.abs(actions).max() <= 1.0
        np.testing.assert_array_equal(actions, rollout(loaded, n_objects, 4, seed=n_objects))
    assert len({tuple(a) for a in rollout(policy, 3, 4)}) > 1  # it acts, not a constant


def test_planner_replans_each_level_on_its_schedule():
    planner = make_planner(replan_every=1)
    policy = planner_policy(planner, {})
    rollout(policy, 2, 2 * K)
    stats = planner.stats.as_dict()
    assert stats["high_plans"] == 2 and stats["low_plans"] == 2 * K and stats["actions"] == 2 * K
    assert stats["denoiser_calls"] == 2 * 2 + 2 * K * 3 and stats["planning_s"] > 0
    open_loop = make_planner(replan_every=K, high_replan_every=2 * K)
    rollout(planner_policy(open_loop, {}), 2, 2 * K)
    assert (open_loop.stats.high_plans, open_loop.stats.low_plans) == (1, 2)


def test_low_level_targets_the_sliding_subgoal(monkeypatch):
    planner = make_planner(replan_every=1)
    targets, original = [], planner.plan_segment
    monkeypatch.setattr(planner, "plan_segment", lambda obs, subgoal: targets.append(subgoal) or original(obs, subgoal))
    rollout(planner_policy(planner, {}), 2, K)
    subgoals = planner._subgoals  # the one high-level plan of these K steps
    assert torch.equal(targets[0], subgoals[:, 1])  # K steps ahead: the first subgoal exactly
    torch.testing.assert_close(targets[1], torch.lerp(subgoals[:, 1], subgoals[:, 2], 1 / K))


def test_reset_makes_episodes_repeatable():
    policy = planner_policy(make_planner(replan_every=2), {})
    np.testing.assert_array_equal(rollout(policy, 2, 5, seed=3), rollout(policy, 2, 5, seed=3))


@pytest.mark.parametrize("fixed_noise", [True, False])
def test_fixed_noise_makes_each_plan_a_function_of_the_observation(fixed_noise):
    planner = make_planner(fixed_noise=fixed_noise)
    obs = {"observation": rows(2, 3, 3), "desired_goal": goals(2, 3)}
    first, second = planner.plan_subgoals(obs).states, planner.plan_subgoals(obs).states
    segments = [planner.plan_segment(obs, first[:, 1]).actions for _ in range(2)]
    assert torch.equal(first, second) == fixed_noise and torch.equal(*segments) == fixed_noise


def test_planner_rejects_bad_settings():
    with pytest.raises(ValueError, match="replan_every"):
        HierarchicalPlanner(HIGH, LOW, replan_every=K + 1)
    with pytest.raises(ValueError, match="high_replan_every"):
        HierarchicalPlanner(HIGH, LOW, high_replan_every=K * (HH - 1) + 2)
    with pytest.raises(ValueError, match="high_sampling_steps"):
        HierarchicalPlanner(HIGH, LOW, high_sampling_steps=HIGH.diffusion_steps + 1)


# ---------------------------------------------------------------------------------------------- training


def tiny_config(dataset, runs, **kwargs) -> DiffusionTrainConfig:
    hierarchical = {"planner": "hierarchical", "subgoal_every": K, "subgoal_horizon": HH, "subgoal_sampling_steps": 2}
    return tiny_train_config(dataset, runs, **{**hierarchical, **kwargs})


def test_hierarchical_training_writes_the_run_directory_and_resume_continues(push1_demos, tmp_path):
    result = train(tiny_config(push1_demos, tmp_path))
    run = tmp_path / "tiny"
    assert result.steps == 4 and np.isfinite(result.loss)
    for name in ("config.json", "provenance.json", "sessions.jsonl", "final/policy.json", "tb"):
        assert (run / name).exists(), name
    latest = run / "checkpoints" / "latest"
    assert json.loads((latest / "training.json").read_text())["step"] == 4
    prefixes = {".".join(k.split(".")[:2]) for k in load_file(str(latest / "training.safetensors"))}
    assert {"model.high", "model.low", "ema.high", "ema.low"} <= prefixes
    policy = ecrl.load(run)
    assert isinstance(policy.module, HierarchicalPlanner) and policy.module.subgoal_every == K
    assert policy.meta["arch"] == "hierarchical_diffusion" and policy.meta["subgoal_horizon"] == HH
    assert rollout(policy, 3, 2).shape == (2, 2)

    resume_to_six_steps(tiny_config(push1_demos, tmp_path, steps=6, denoiser={"width": 998}), run)
    assert ecrl.load(run).module.low.config.width == 16


def test_config_errors_name_the_problem(push1_demos, tmp_path):
    with pytest.raises(ValueError, match="subgoal_every"):
        tiny_config(push1_demos, tmp_path, replan_every=K + 1)
    with pytest.raises(ValueError, match="subgoal_replan_every"):
        tiny_config(push1_demos, tmp_path, subgoal_replan_every=K * HH)
    with pytest.raises(ValueError, match="subgoal_horizon"):
        tiny_config(push1_demos, tmp_path, subgoal_horizon=1)
    tiny_config(push1_demos, tmp_path, planner="flat", replan_every=K + 1)  # the flat planner's bound is horizon


def test_cli_offers_the_hierarchical_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--planner" in out and "--subgoal-every" in out and "--subgoal-horizon" in out


def test_real_segments_are_learnable(push1_demos):
    """On real demonstrations both levels' losses fall within a few dozen steps."""
    data = DemoDataset(push1_demos)
    rng, g = np.random.default_rng(0), torch.Generator().manual_seed(0)
    planner = HierarchicalPlanner(HIGH, LOW)
    optimiser = torch.optim.Adam(planner.parameters(), lr=3e-3)
    history = []
    for _ in range(60):
        high = subgoal_windows(data.sample_windows(16, K * HH, rng), K, data.success)
        low = segment_windows(data.sample_windows(16, K, rng), data.success)
        as_torch = lambda b: {k: torch.as_tensor(np.ascontiguousarray(v)) for k, v in b.items()}  # noqa: E731
        terms = [loss(planner.high, as_torch(high), g), loss(planner.low, as_torch(low), g, given_last=True)]
        optimiser.zero_grad()
        sum(t.total for t in terms).backward()
        optimiser.step()
        history.append([t.total.item() for t in terms])
    first, last = np.mean(history[:10], 0), np.mean(history[-10:], 0)
    assert (last < 0.7 * first).all(), (first, last)
