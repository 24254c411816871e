"""The policy API: ``Policy.act``, ``Policy.save`` and ``ecrl.load`` (safetensors + JSON, no pickle)."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib import TQC
from stable_baselines3 import SAC, TD3
from torch import nn

import ecrl
import ecrl.policy
from ecrl.focus import Focus, focus_order
from ecrl.policies.actor import EntityActorModule, FlatActorModule, policy_from_model
from ecrl.policies.sb3 import ENTITY_POLICIES
from ecrl.policy import CONFIG, WEIGHTS, CheckpointError, Policy

ALGOS = {"sac": SAC, "td3": TD3, "tqc": TQC}
# (algo, arch): entity-centric policies and SB3's flat MLP baseline, all trained on n_max = 2.
KINDS = [("sac", "eit"), ("td3", "eit"), ("tqc", "deepsets"), ("sac", "mlp"), ("td3", "mlp")]


@pytest.fixture(scope="module")
def push2():
    env = gym.make("ecrl/Push2-v0")
    yield env
    env.close()


@pytest.fixture(scope="module")
def models(push2):
    """Untrained (randomly initialised) SB3 models; what is tested is that the export is faithful."""
    out = {}
    for algo, arch in KINDS:
        if arch == "mlp":
            policy, kwargs, meta = "MultiInputPolicy", {"net_arch": [32, 32]}, {"net_arch": [32, 32]}
        else:
            policy, kwargs, meta = ENTITY_POLICIES[algo], {"net": {"arch": arch, "width": 16, "heads": 2}}, {}
        model = ALGOS[algo](policy, push2, buffer_size=100, policy_kwargs=kwargs, seed=0)
        out[algo, arch] = (model, {"algo": algo, "arch": arch, **meta})
    return out


def exported(models, algo: str = "sac", arch: str = "eit") -> Policy:
    model, meta = models[algo, arch]
    return policy_from_model(model, meta)


def observations(n_objects: int, seeds=range(4), n_max: int | None = None) -> list[dict[str, np.ndarray]]:
    env = gym.make("ecrl/Push-v0", n_objects=n_objects, n_max=n_max or n_objects)
    obs = [env.reset(seed=s)[0] for s in seeds]
    env.close()
    return obs


def stack(obs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.stack([o[k] for o in obs]) for k in obs[0]}


@pytest.fixture
def saved(models, tmp_path):
    """A saved SAC-EIT policy: ``(policy, directory)``."""
    policy = exported(models)
    return policy, policy.save(tmp_path / "policy")


def edit_config(path, **changes) -> None:
    config = json.loads((path / CONFIG).read_text())
    config.update(changes)
    (path / CONFIG).write_text(json.dumps(config))


# --- round trip, shapes, bounds --------------------------------------------------------------------


@pytest.mark.parametrize(("algo", "arch"), KINDS)
def test_save_load_round_trip_gives_identical_actions(models, tmp_path, algo, arch):
    policy = exported(models, algo, arch)
    assert isinstance(policy.module, FlatActorModule if arch == "mlp" else EntityActorModule)
    path = policy.save(tmp_path / "p")
    assert sorted(p.name for p in path.iterdir()) == sorted([CONFIG, WEIGHTS])
    loaded = ecrl.load(path)
    assert loaded.meta == policy.meta and loaded.builder == policy.builder
    obs = observations(2)
    batch = stack(obs)
    actions = policy.act(batch)
    np.testing.assert_array_equal(loaded.act(batch), actions)
    for i, o in enumerate(obs):
        single = loaded.act(o)
        np.testing.assert_array_equal(single, policy.act(o))
        np.testing.assert_allclose(single, actions[i], atol=1e-6)  # a batch is the stack of its singles


@pytest.mark.parametrize(("algo", "arch"), KINDS)
def test_exported_policy_acts_like_the_sb3_model(models, algo, arch):
    model, meta = models[algo, arch]
    policy = policy_from_model(model, meta)
    batch = stack(observations(2))
    expected, _ = model.predict(batch, deterministic=True)
    np.testing.assert_allclose(policy.act(batch), expected, atol=1e-5)


def test_act_shapes_and_action_bounds(models):
    policy = exported(models)
    obs = observations(2)
    assert policy.act(obs[0]).shape == (2,)
    assert policy.act(stack(obs)).shape == (4, 2)
    # Actions in [-1, 1] are rescaled to the env's bounds, whatever they are.
    low, high = np.array([-2.0, 0.0]), np.array([2.0, 4.0])
    scaled = Policy(policy.module, low, high)
    unit = policy.act(stack(obs))
    actions = scaled.act(stack(obs))
    assert np.all(actions >= low) and np.all(actions <= high)
    np.testing.assert_allclose(actions, low + (unit + 1) / 2 * (high - low), atol=1e-6)
    sampled = Policy(policy.module, low, high).act(stack(obs), deterministic=False)
    assert np.all(sampled >= low) and np.all(sampled <= high)


# --- any number of objects ----------------------------------------------------------------------


def test_entity_policy_trained_on_two_objects_runs_on_six_and_twelve(saved):
    _, path = saved
    policy = ecrl.load(path)
    for n in (6, 12):
        obs = observations(n, seeds=(0, 1))
        assert obs[0]["observation"].shape == (1 + n, 20)
        action = policy.act(obs[0])
        assert action.shape == (2,) and np.all(np.isfinite(action)) and np.all(np.abs(action) <= 1)
        assert policy.act(stack(obs)).shape == (2, 2)
    # Padding a 2-object scene to n_max = 12 gives the action of the unpadded scene.
    np.testing.assert_allclose(
        policy.act(observations(2, seeds=(5,), n_max=12)[0]), policy.act(observations(2, seeds=(5,))[0]), atol=1e-5
    )


def test_an_entity_policy_behind_the_focus_acts_on_its_focus_only(saved, models):
    policy, _ = saved
    batch = stack(observations(6, seeds=(0, 1, 2)))
    focused = Focus(policy, k=2)
    cut = focused.cut(batch, focus_order(batch["observation"], batch["desired_goal"])[:, :2])
    assert cut["observation"].shape == (3, 3, 20)
    np.testing.assert_allclose(focused.act(batch), policy.act(cut), atol=1e-6)
    assert "focus" not in policy.options  # a rule around the policy, not a setting of its model
    with pytest.raises(ValueError, match="runs on any number of objects"):
        Focus(exported(models, "sac", "mlp"), k=1)


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_flat_mlp_policy_refuses_another_n_max(models, tmp_path, algo):
    policy = ecrl.load(exported(models, algo, "mlp").save(tmp_path / "mlp"))
    assert policy.act(observations(2)[0]).shape == (2,)
    for n in (6, 12):
        with pytest.raises(ValueError, match=rf"trained with n_max = 2.*got an observation with n_max = {n}"):
            policy.act(observations(n, seeds=(0,))[0])
    no_achieved = {k: v for k, v in observations(2)[0].items() if k != "achieved_goal"}
    with pytest.raises(ValueError, match="reads every key"):
        policy.act(no_achieved)


# --- stochastic and deterministic acting ---------------------------------------------------------


@pytest.mark.parametrize(("algo", "arch"), [("sac", "eit"), ("tqc", "deepsets"), ("sac", "mlp")])
def test_sampling_a_stochastic_policy_gives_different_actions(models, algo, arch):
    policy = exported(models, algo, arch)
    obs = observations(2, seeds=(0,))[0]
    torch.manual_seed(0)
    a, b = policy.act(obs, deterministic=False), policy.act(obs, deterministic=False)
    assert not np.allclose(a, b) and not np.allclose(a, policy.act(obs))
    np.testing.assert_array_equal(policy.act(obs), policy.act(obs))  # deterministic is the default
    assert np.all(np.abs([a, b]) <= 1)


@pytest.mark.parametrize("arch", ["eit", "mlp"])
def test_td3_policy_samples_its_deterministic_action(models, arch):
    # Like SB3's ``predict``: TD3's exploration noise belongs to training, not to the policy.
    policy = exported(models, "td3", arch)
    batch = stack(observations(2))
    np.testing.assert_array_equal(policy.act(batch, deterministic=False), policy.act(batch))


def test_a_module_without_sample_refuses_stochastic_acting(models):
    class Deterministic(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, obs):
            return self.inner(obs)

    policy = Policy(Deterministic(exported(models).module), -np.ones(2), np.ones(2))
    obs = observations(2, seeds=(0,))[0]
    assert policy.act(obs).shape == (2,)
    with pytest.raises(ValueError, match="is deterministic"):
        policy.act(obs, deterministic=False)


# --- bad observations ------------------------------------------------------------------------------


def test_act_refuses_what_is_not_an_observation_dict(models):
    policy = exported(models)
    obs = observations(2, seeds=(0, 1))
    with pytest.raises(TypeError, match="act takes an observation dict, got ndarray"):
        policy.act(obs[0]["observation"])
    with pytest.raises(ValueError, match=r"lacks \['desired_goal'\]"):
        policy.act({"observation": obs[0]["observation"]})
    with pytest.raises(ValueError, match="one is batched and the other is not"):
        policy.act({**obs[0], "observation": obs[0]["observation"][None]})
    with pytest.raises(ValueError, match="batch sizes differ"):
        policy.act({**stack(obs), "desired_goal": obs[0]["desired_goal"][None]})
    with pytest.raises(ValueError, match=r"expected \(N, D\) or \(B, N, D\)"):
        policy.act({k: v[None, None] for k, v in obs[0].items()})
    with pytest.raises(ValueError, match="observation: expected shape"):
        policy.act({**obs[0], "observation": obs[0]["observation"][:, :12]})


@pytest.mark.parametrize("key", ["observation", "desired_goal", "achieved_goal"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_act_refuses_nan_or_inf_anywhere_in_the_observation(models, key, bad):
    policy = exported(models)
    obs = observations(2, seeds=(0, 1))
    refused = rf"obs\['{key}'\] holds 1 value\(s\) that are NaN, inf or beyond float32's range"
    single = {k: v.copy() for k, v in obs[0].items()}
    single[key][1, 3] = bad
    with pytest.raises(ValueError, match=refused + r" \(the first at index \(1, 3\)\)"):
        policy.act(single)
    batch = stack(obs)
    batch[key][1, 0, 2] = bad
    with pytest.raises(ValueError, match=refused + r" \(the first at index \(1, 0, 2\)\)"):
        policy.act(batch)
    batch[key][1, 0, 2] = 1e39  # finite, but not as a float32
    with pytest.raises(ValueError, match=refused):
        policy.act(batch)
    batch[key][1, 0, 2] = 0.0
    assert np.all(np.isfinite(policy.act(batch)))


# --- loading ----------------------------------------------------------------------------------------


def test_load_finds_the_checkpoint_of_a_run_directory(models, tmp_path):
    policy = exported(models)
    obs = observations(2, seeds=(0,))[0]
    policy.save(tmp_path / "run" / "final")
    policy.save(tmp_path / "run2" / "checkpoints" / "latest")
    assert ecrl.load is ecrl.policy.load
    for where in (tmp_path / "run", str(tmp_path / "run"), tmp_path / "run" / "final" / CONFIG, tmp_path / "run2"):
        np.testing.assert_array_equal(ecrl.load(where).act(obs), policy.act(obs))


def test_load_refuses_a_directory_without_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="is not an ecrl policy checkpoint"):
        ecrl.load(tmp_path)
    with pytest.raises(CheckpointError, match="is not an ecrl policy checkpoint"):
        ecrl.load(tmp_path / "missing")


def test_load_refuses_a_config_of_another_format(saved):
    _, path = saved
    edit_config(path, format="sb3")
    with pytest.raises(CheckpointError, match="not an ecrl policy config"):
        ecrl.load(path)


def test_load_refuses_another_version_and_invalid_json(saved):
    _, path = saved
    edit_config(path, version=99)
    with pytest.raises(CheckpointError, match="unsupported version 99"):
        ecrl.load(path)
    (path / CONFIG).write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        ecrl.load(path)


def test_load_refuses_missing_or_corrupt_weights(saved):
    _, path = saved
    data = (path / WEIGHTS).read_bytes()
    (path / WEIGHTS).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        ecrl.load(path)
    (path / WEIGHTS).write_bytes(b"\x00" * 64)
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        ecrl.load(path)
    (path / WEIGHTS).unlink()
    with pytest.raises(CheckpointError, match=f"no {WEIGHTS}"):
        ecrl.load(path)


def test_load_refuses_weights_of_another_model(saved):
    policy, path = saved
    edit_config(path, kwargs={**policy.kwargs, "net": {**policy.kwargs["net"], "width": 32}})
    with pytest.raises(CheckpointError, match="does not fit the model"):
        ecrl.load(path)
    edit_config(path, kwargs={**policy.kwargs, "stochastic": False})  # half the output layer
    with pytest.raises(CheckpointError, match="does not fit the model"):
        ecrl.load(path)


def test_load_refuses_kwargs_that_build_no_model(saved):
    policy, path = saved
    edit_config(path, kwargs={**policy.kwargs, "net": {**policy.kwargs["net"], "width": 15}})  # 15 % 2 heads
    with pytest.raises(CheckpointError, match="divisible"):
        ecrl.load(path)
    edit_config(path, kwargs={**policy.kwargs, "unknown": 1})
    with pytest.raises(CheckpointError, match="unknown"):
        ecrl.load(path)


def test_load_refuses_a_builder_name_that_is_not_registered(saved):
    # Builders by import path (version 1) are read through a fixed alias table; crafted configs
    # that name anything else are refused before anything is imported or called (see test_checkpoint.py).
    _, path = saved
    edit_config(path, builder="ecrl.policies.export:NoSuchModule")
    with pytest.raises(CheckpointError, match="unknown model builder 'ecrl.policies.export:NoSuchModule'"):
        ecrl.load(path)
    edit_config(path, builder="ecrl.policies.export:NoSuchModule", version=1)
    with pytest.raises(CheckpointError, match="version-1 checkpoints name their builder by one of the import paths"):
        ecrl.load(path)


def test_a_policy_with_an_unregistered_builder_is_refused_when_made(models):
    module = exported(models).module
    with pytest.raises(CheckpointError, match="unknown model builder 'ecrl.policies.export:EntityActorModule'"):
        Policy(module, -np.ones(2), np.ones(2), builder="ecrl.policies.export:EntityActorModule")


def test_a_policy_without_builder_cannot_be_saved(models, tmp_path):
    policy = Policy(exported(models).module, -np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="no builder"):
        policy.save(tmp_path / "p")
