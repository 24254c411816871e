"""Training configs hold their model's config (``net``, ``denoiser``); configs saved flat still read."""

import json
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from ecrl.diffusion.denoiser import DenoiserConfig
from ecrl.diffusion.train import DiffusionTrainConfig
from ecrl.policies.nets import NetConfig
from ecrl.policies.train import TrainConfig
from ecrl.training import resume_config

RESULTS = Path(__file__).resolve().parents[1] / "results"
FLAT_DIFFUSION = RESULTS / "diffusion_hierarchical" / "hier_from_sg" / "train_config.json"
FLAT_RL = RESULTS / "rl_push1" / "eit" / "policy" / "train_config.json"


@pytest.mark.parametrize(
    "cls, path, nested, model",
    [(DiffusionTrainConfig, FLAT_DIFFUSION, "denoiser", DenoiserConfig), (TrainConfig, FLAT_RL, "net", NetConfig)],
    ids=["diffusion", "rl"],
)
def test_a_flat_legacy_config_resumes_into_the_nested_model_config_with_the_same_values(
    cls, path, nested, model, tmp_path
):
    flat = json.loads(path.read_text()) | {"width": 48}  # a committed flat config, at a size no default has
    moved = {f.name for f in fields(model)} & set(flat) - {f.name for f in fields(cls)}
    assert moved >= {"width", "heads", "blocks", "mlp_ratio"}  # the file really is flat
    (tmp_path / "config.json").write_text(json.dumps(flat))
    config = resume_config(cls, cls(steps=1), tmp_path, "a")
    assert {name: getattr(getattr(config, nested), name) for name in moved} == {name: flat[name] for name in moved}
    kept = set(flat) & {f.name for f in fields(cls)} - {"threads", "device", "progress"}
    saved = json.loads(json.dumps(config.to_json()))
    assert {name: saved[name] for name in kept} == {name: flat[name] for name in kept}
    assert cls.from_json(json.loads(json.dumps(config.to_json()))) == config  # the nested form round-trips


def test_the_model_configs_default_to_the_training_recipe():
    """Every committed command that sets no size builds the model it built when training copied the fields."""
    assert DiffusionTrainConfig().denoiser == DenoiserConfig(
        width=32, heads=2, blocks=2, mlp_ratio=2, horizon=4, diffusion_steps=100
    )
    assert asdict(TrainConfig().net) == {
        "arch": "eit",
        "width": 32,
        "heads": 1,
        "blocks": 1,
        "mlp_ratio": 2,
        "entity_dim": 0,
    }


def test_the_rl_network_architecture_follows_arch_and_a_contradiction_is_an_error():
    assert TrainConfig(arch="deepsets").net.arch == "deepsets"
    with pytest.raises(ValueError, match=r"net.arch \('deepsets'\) differs from arch \('eit'\)"):
        TrainConfig(net=NetConfig(arch="deepsets"))


def test_the_denoiser_entity_width_comes_from_the_encoder_only():
    with pytest.raises(ValueError, match="entity_dim is set by the encoder"):
        DiffusionTrainConfig(denoiser=DenoiserConfig(entity_dim=5))
