"""Retired options: committed checkpoints and run configs still load, or say clearly why they cannot."""

import importlib
import inspect
import json
import shutil
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest

import ecrl
from ecrl.diffusion.denoiser import DenoiserConfig, EntityDenoiser, load_denoiser, save_denoiser
from ecrl.diffusion.train import DiffusionTrainConfig
from ecrl.encoders import load_encoder
from ecrl.encoders.train import EncoderTrainConfig, parse_options
from ecrl.policies.train import TrainConfig
from ecrl.policy import CheckpointError
from ecrl.retired import ANY, RETIRED, RetiredOptionError, drop_retired
from ecrl.training import resume_config

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
SELECT_RUNS = {
    RESULTS / "rl_push2" / name / "policy": "select=True" for name in ("select", "select_seed1", "select_seed2")
}
"""``results/rl_push2`` actors trained with the retired object scorer: their checkpoints were saved again without
it (documented there), their training configs still name it."""
UNLOADABLE_RUNS = SELECT_RUNS | {
    RESULTS / "diffusion_push3" / "still_objects" / "policy": "still_objects=3",
    RESULTS / "pixels_push2" / "fused_views": "fuse_views=True",
    RESULTS / "pixels_push2" / "memory": "past=1",
}
"""Training configs whose run used a retired option: the selecting actors, the still-objects, fused-views and memory
trials."""
RECORD = {
    "still_objects=3": "results/diffusion_push3/README.md",
    "select=True": "results/rl_push2/README.md",
    "fuse_views=True": "results/pixels_push2/README.md",
    "past=1": "results/pixels_push2/README.md",
}

POLICIES = sorted(p.parent for p in RESULTS.rglob("policy.json"))
ENCODERS = sorted(p.parent for p in RESULTS.rglob("encoder.json"))
TRAIN_CONFIGS = sorted(RESULTS.rglob("train_config.json"))
OPTIONS = [(model, name, option) for model, table in RETIRED.items() for name, option in table.items()]


def _label(path: Path) -> str:
    return str(path.relative_to(RESULTS))


@pytest.mark.parametrize("path", POLICIES, ids=_label)
def test_every_committed_policy_loads(path):
    assert ecrl.load(path).module is not None


@pytest.mark.parametrize("path", ENCODERS, ids=_label)
def test_every_committed_encoder_loads(path):
    assert load_encoder(path).kind in ("slot", "particles")


def _config_class(config: dict) -> type:
    if "kind" in config:
        return EncoderTrainConfig
    return DiffusionTrainConfig if "planner" in config else TrainConfig


@pytest.mark.parametrize("path", TRAIN_CONFIGS, ids=_label)
def test_every_committed_training_config_reads_or_names_the_retired_option_it_used(path):
    data = json.loads(path.read_text())
    cls = _config_class(data)
    if path.parent in UNLOADABLE_RUNS:
        what = UNLOADABLE_RUNS[path.parent]
        with pytest.raises(RetiredOptionError, match=rf"{what}.*retired.*{RECORD[what]}"):
            cls.from_json(data)
    else:
        assert isinstance(cls.from_json(data), cls)


@pytest.mark.parametrize("model, name, option", OPTIONS, ids=lambda x: x if isinstance(x, str) else "")
def test_a_retired_option_is_gone_from_its_model_and_recorded_in_its_readme(model, name, option):
    module, _, attr = model.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    config = cls.Config if hasattr(cls, "Config") else cls
    live = {f.name for f in fields(config)} if is_dataclass(config) else set(inspect.signature(cls).parameters)
    assert name not in live  # a live option must never be dropped silently
    assert f"`{name}" in (ROOT / option.record).read_text()  # the rejected idea is a paragraph, not a flag


@pytest.mark.parametrize("model, name, option", OPTIONS, ids=lambda x: x if isinstance(x, str) else "")
def test_drop_retired_drops_a_neutral_value_and_refuses_another(model, name, option):
    assert drop_retired(model, {"kept": 1}) == {"kept": 1}
    if option.neutral is ANY:
        assert drop_retired(model, {name: 123, "kept": 1}) == {"kept": 1}
        return
    assert drop_retired(model, {name: option.neutral, "kept": 1}) == {"kept": 1}
    other = (not option.neutral) if isinstance(option.neutral, bool) else option.neutral + 1
    with pytest.raises(RetiredOptionError, match=rf"{name}={other!r} was retired.*{option.record}"):
        drop_retired(model, {name: other})


def test_models_without_retired_options_pass_unchanged():
    kwargs = {"relative_goals": True}
    assert drop_retired("ecrl.policies.actor:FlatActorModule", kwargs) == kwargs
    assert drop_retired(EntityDenoiser, kwargs) == kwargs  # the model, not its config
    assert drop_retired(DenoiserConfig, {"relative_goals": False}) == {}


def _edit(src: Path, dst: Path, file: str, edit) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / file).read_text())
    edit(config)
    (dst / file).write_text(json.dumps(config))
    return dst


def test_a_policy_saved_with_a_retired_option_loads_at_its_neutral_value_only(tmp_path):
    select = RESULTS / "rl_push2" / "select" / "policy"
    neutral = {"commit": True, "skip_placed": True, "select": False, "focus": 0, "placed_within": 0.05, "patience": 9}
    policy = ecrl.load(_edit(select, tmp_path / "a", "policy.json", lambda c: c["kwargs"].update(neutral)))
    assert set(policy.kwargs) == {"net", "action_dim", "stochastic"}
    changed = _edit(select, tmp_path / "b", "policy.json", lambda c: c["kwargs"].update(skip_placed=False))
    with pytest.raises(CheckpointError, match=r"skip_placed=False was retired.*results/rl_push2/README.md"):
        ecrl.load(changed)


def test_a_model_saved_with_focus_says_to_wrap_it_in_the_focus_rule(tmp_path):
    longest = RESULTS / "diffusion_push3" / "longest" / "policy"
    planner = _edit(longest, tmp_path / "a", "policy.json", lambda c: c["kwargs"].update(focus=2, placed_within=0.04))
    with pytest.raises(CheckpointError, match=r"focus=2 was retired.*Focus\(policy, k=2\).*--focus 2.*diffusion_push3"):
        ecrl.load(planner)
    actor = _edit(RESULTS / "rl_push2" / "eit_bc80k" / "policy", tmp_path / "b", "policy.json",
                  lambda c: c["kwargs"].update(focus=1))  # fmt: skip
    with pytest.raises(CheckpointError, match=r"focus=1 was retired.*--focus 1.*results/rl_push2/README.md"):
        ecrl.load(actor)


def test_an_actor_saved_with_its_object_scorer_names_the_retirement(tmp_path):
    select = _edit(RESULTS / "rl_push2" / "select" / "policy", tmp_path / "a", "policy.json",
                   lambda c: c["kwargs"].update(select=True))  # fmt: skip
    with pytest.raises(CheckpointError, match=r"select=True was retired: the learnt object scorer is gone.*scorer\.\*"):
        ecrl.load(select)
    with pytest.raises(RetiredOptionError, match=r"select=True was retired.*--focus 1 --patience 30"):
        TrainConfig.from_json({**json.loads((RESULTS / "rl_push2/select/policy/train_config.json").read_text())})


def test_a_planner_saved_with_a_retired_denoiser_option_loads_at_its_neutral_value_only(tmp_path):
    longest = RESULTS / "diffusion_push3" / "longest" / "policy"  # saved with entity_goals=True, relative_goals=False
    off = _edit(longest, tmp_path / "a", "policy.json", lambda c: c["kwargs"]["denoiser"].update(entity_goals=False))
    with pytest.raises(CheckpointError, match=r"entity_goals=False was retired.*results/diffusion_push3/README.md"):
        ecrl.load(off)


def test_a_denoiser_checkpoint_with_a_retired_option_loads_at_its_neutral_value_only(tmp_path):
    path = save_denoiser(EntityDenoiser(DenoiserConfig(width=16, heads=2, blocks=1, horizon=2)), tmp_path / "d")
    config = json.loads((path / "denoiser.json").read_text())
    config["kwargs"] |= {"entity_goals": True, "relative_goals": False}
    (path / "denoiser.json").write_text(json.dumps(config))
    assert load_denoiser(path).config.width == 16
    config["kwargs"]["relative_goals"] = True
    (path / "denoiser.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"relative_goals=True was retired"):
        load_denoiser(path)


def test_an_encoder_saved_with_a_retired_option_loads_at_its_neutral_value_only(tmp_path):
    agent = RESULTS / "encoders" / "agent" / "particles_agent"
    assert "crop_zoom" in json.loads((agent / "encoder.json").read_text())["config"]  # saved before the removal
    changed = _edit(agent, tmp_path / "a", "encoder.json", lambda c: c["config"].update(crop_zoom=2.0))
    with pytest.raises(CheckpointError, match=r"crop_zoom=2.0 was retired.*results/encoders/ablation/README.md"):
        load_encoder(changed)


def test_a_resumed_run_reads_retired_options_of_its_config(tmp_path):
    given = DiffusionTrainConfig(steps=1)
    (tmp_path / "config.json").write_text(json.dumps(given.to_json() | {"still_objects": 0, "relative_goals": False}))
    assert resume_config(DiffusionTrainConfig, given, tmp_path, "a diffusion") == given
    (tmp_path / "config.json").write_text(json.dumps(TrainConfig().to_json() | {"bc_q_filter": True}))
    with pytest.raises(RetiredOptionError, match=r"bc_q_filter=True was retired.*results/rl_push1/README.md"):
        resume_config(TrainConfig, TrainConfig(), tmp_path, "an RL")


def test_encoder_options_of_a_saved_run_may_name_retired_options_at_their_neutral_values():
    assert parse_options("particles", ("crop_zoom=1", "locality_start=1000", "beta_kl=0.1")) == {"beta_kl": 0.1}
    with pytest.raises(RetiredOptionError, match=r"locality_weight=1.0 was retired"):
        parse_options("particles", ("locality_weight=1",))
    with pytest.raises(RetiredOptionError, match="locality_weight"):
        EncoderTrainConfig(kind="particles", options=("locality_weight=0.3",))
