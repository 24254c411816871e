"""An EIT from pixels (``ecrl-train --encoder``): the encoder's entities in the observations, the policy acting from frames."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_training import tiny

import ecrl
from ecrl.encoders import build_encoder, save_encoder
from ecrl.encoders.rows import ENTITIES_KEY, EncodedObservation, FrameRows
from ecrl.evaluation import evaluate
from ecrl.policies.nets import EntityNet, NetConfig
from ecrl.policies.train import train

ENCODER = {"views": 2, "image_size": 32, "entities": 3, "width": 8, "feature_dim": 4, "prior_keypoints": 4}


@pytest.fixture(scope="module")
def encoder_path(tmp_path_factory):
    torch.manual_seed(0)
    encoder = build_encoder("particles", **ENCODER)
    return save_encoder(encoder, tmp_path_factory.mktemp("pixpolicy") / "encoder", meta={"cameras": ["front", "top"]})


def _front_end() -> FrameRows:
    torch.manual_seed(0)
    encoder = build_encoder("particles", **ENCODER)
    d = encoder.entity_dim
    rows = FrameRows({"kind": "particles", "config": encoder.config_dict()}, [0.0] * d, [1.0] * d)
    rows.encoder.load_state_dict(encoder.state_dict())
    return rows


def test_encoded_observations_carry_the_front_ends_rows():
    rows = _front_end()
    env = EncodedObservation(gym.make("ecrl/Push-v0", n_objects=2, pixels=32), rows)
    raw = gym.make("ecrl/Push-v0", n_objects=2, pixels=32)
    obs, _ = env.reset(seed=3)
    frame, _ = raw.reset(seed=3)
    assert "pixels" not in obs and obs[ENTITIES_KEY].dtype == np.float32
    assert env.observation_space[ENTITIES_KEY].shape == obs[ENTITIES_KEY].shape == (6, rows.width)
    with torch.no_grad():
        expected = rows.entity_rows({"pixels": torch.as_tensor(frame["pixels"][None])})[0]
    np.testing.assert_allclose(obs[ENTITIES_KEY], expected.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(obs["observation"], frame["observation"])
    with pytest.raises(ValueError, match="pixels=P"):
        EncodedObservation(gym.make("ecrl/Push-v0", n_objects=2), rows)


def test_a_net_over_generic_rows_reads_entities_and_refuses_state_rows():
    net = EntityNet(NetConfig(width=8, entity_dim=5), out_dim=2)
    goals = torch.zeros(3, 2, 14)
    goals[..., 0] = 1
    assert net({ENTITIES_KEY: torch.randn(3, 7, 5), "desired_goal": goals}).shape == (3, 2)
    with pytest.raises(ValueError, match="reads 'entities' rows"):
        net({"observation": torch.zeros(3, 3, 20), "desired_goal": goals})
    with pytest.raises(ValueError, match=r"expected shape \(B, N, 5\)"):
        net({ENTITIES_KEY: torch.randn(3, 7, 4), "desired_goal": goals})


def test_an_eit_trained_from_pixels_acts_from_frames(encoder_path, tmp_path):
    config = tiny(
        tmp_path,
        steps=200,
        encoder=encoder_path,
        demos=2,
        bc_steps=5,
        checkpoint_every=100,
    )
    result = train(config)
    policy = ecrl.load(result.run_dir)
    assert policy.builder == "pixel_actor"
    assert policy.meta["pixels"] == {"size": 32, "cameras": ["front", "top"]}
    env = gym.make("ecrl/Push-v0", n_objects=2, pixels=32)
    obs, _ = env.reset(seed=0)
    assert policy.act(obs).shape == (2,)
    without = {k: v for k, v in obs.items() if k != "pixels"}
    with pytest.raises(ValueError, match="need 'pixels'"):
        policy.act(without)
    imitation = ecrl.load(result.run_dir / "imitation")
    assert imitation.builder == "pixel_actor"
    report = evaluate(policy, [1], episodes=2, progress=False)  # the runner renders the frames the policy needs
    assert len(report.results[0].success) == 2
    resumed = train(tiny(tmp_path, steps=300, encoder=encoder_path), resume=result.run_dir)
    assert resumed.env_steps == 300
    with pytest.raises(ValueError, match="use --arch eit"):
        tiny(tmp_path, encoder=encoder_path, arch="mlp")
