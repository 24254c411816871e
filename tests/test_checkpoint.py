"""The checkpoint module: a registry of model builders, crafted configs refused, committed checkpoints still load."""

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import ecrl
from ecrl import checkpoint
from ecrl.checkpoint import BUILDER_MODULES, LEGACY_BUILDERS, CheckpointError, register_builder
from ecrl.diffusion.denoiser import DENOISER, DenoiserConfig, EntityDenoiser, load_denoiser, save_denoiser
from ecrl.encoders import build_encoder, load_encoder, save_encoder
from ecrl.encoders.io import ENCODER, ENCODER_KINDS
from ecrl.policy import CONFIG, POLICY, WEIGHTS, Policy

RESULTS = Path(__file__).resolve().parent.parent / "results"
COMMITTED = sorted(
    str(p.relative_to(RESULTS))
    for pattern in (POLICY.config, ENCODER.config, DENOISER.config)
    for p in RESULTS.glob(f"**/{pattern}")
)
ACTOR = {"net": {"arch": "eit", "width": 8, "heads": 1, "blocks": 1}, "action_dim": 2, "stochastic": False}


@pytest.fixture
def saved(tmp_path) -> Path:
    """A saved, untrained entity-centric policy."""
    from ecrl.policies.actor import EntityActorModule

    torch.manual_seed(0)
    policy = Policy(EntityActorModule(**ACTOR), -np.ones(2), np.ones(2), {"arch": "eit"}, "entity_actor", ACTOR)
    return policy.save(tmp_path / "policy")


def craft(path: Path, **changes) -> None:
    """Overwrite fields of the checkpoint config at ``path``."""
    config = json.loads((path / CONFIG).read_text())
    (path / CONFIG).write_text(json.dumps(config | changes))


@pytest.fixture
def imports(monkeypatch) -> list[str]:
    """Every module name passed to ``importlib.import_module`` during the test."""
    names: list[str] = []
    real = importlib.import_module

    def spy(name, package=None):
        names.append(name)
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", spy)
    return names


# --- the registry ----------------------------------------------------------------------------------------


def test_every_library_builder_is_registered_by_the_module_the_table_names():
    for name, module in BUILDER_MODULES.items():
        fn = checkpoint.builder(name)
        assert callable(fn) and importlib.import_module(module).__name__ == module
    assert set(LEGACY_BUILDERS.values()) <= set(BUILDER_MODULES)
    assert set(ENCODER_KINDS.values()) <= set(BUILDER_MODULES)


def test_the_legacy_alias_table_maps_each_import_path_to_the_same_class():
    # The only place an import path is resolved is here, in a test of the fixed table. A saved path keeps
    # its old module (ecrl.policies.export became ecrl.policies.actor); the class it names is the builder.
    for path, name in LEGACY_BUILDERS.items():
        attr = path.partition(":")[2]
        assert getattr(importlib.import_module(BUILDER_MODULES[name]), attr) is checkpoint.builder(name)


def test_register_builder_refuses_a_taken_name_and_a_bad_name():
    with pytest.raises(ValueError, match="builder name 'entity_actor' is taken"):
        register_builder("entity_actor")(torch.nn.Linear)
    with pytest.raises(ValueError, match="a builder name is a Python identifier"):
        register_builder("ecrl.policies.export:EntityActorModule")
    from ecrl.policies.actor import EntityActorModule

    assert register_builder("entity_actor")(EntityActorModule) is EntityActorModule  # the same one again is fine


def test_build_checks_the_arguments_against_the_builder():
    with pytest.raises(CheckpointError, match=r"builder 'entity_actor' does not accept \['unknown'\]"):
        checkpoint.build("entity_actor", {**ACTOR, "unknown": 1})
    with pytest.raises(CheckpointError, match=r"builder 'entity_actor' needs \['net'\]"):
        checkpoint.build("entity_actor", {"action_dim": 2, "stochastic": False})
    with pytest.raises(CheckpointError, match="must be a JSON object"):
        checkpoint.build("entity_actor", [1, 2])
    with pytest.raises(ValueError, match=r"slot encoders have no option \['colour'\]"):
        checkpoint.build("slot_encoder", {"views": 1, "image_size": 32, "colour": 1})
    assert isinstance(checkpoint.build("entity_actor", ACTOR), torch.nn.Module)


# --- crafted configs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize(
    "builder",
    [
        "no_such_model",
        "replace_dir",
        "ecrl.checkpoint:replace_dir",
        "ecrl.checkpoint:save_file",
        "ecrl.policy:load",
        "os:system",
        "builtins:eval",
        "ecrl.policies.export:EntityActorModule.__init__",
        "ecrl.policies.export",
        "ecrl.policies.actor:EntityActorModule",
        "",
        None,
        ["entity_actor"],
    ],
)
def test_load_calls_nothing_but_registered_builders(saved, imports, version, builder):
    craft(saved, version=version, builder=builder)
    expected = "version-1 checkpoints name their builder" if version == 1 else "model builder"
    with pytest.raises(CheckpointError, match=expected):
        ecrl.load(saved)
    assert set(imports) <= set(BUILDER_MODULES.values())  # nothing a JSON file names is imported


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("builder", ["ecrl.checkpoint:save_file", "ecrl.policy:save_file"])
def test_a_crafted_config_cannot_make_load_write_a_file(saved, tmp_path, version, builder):
    # Before the registry, ``ecrl.load`` called any function importable from an ecrl module: this
    # one (safetensors' save_file, imported into ecrl.policy) wrote ``target``.
    target = tmp_path / "written_by_load"
    craft(saved, version=version, builder=builder, kwargs={"tensors": {}, "filename": str(target)})
    with pytest.raises(CheckpointError):
        ecrl.load(saved)
    assert not target.exists()


def test_load_refuses_kwargs_the_builder_does_not_accept(saved):
    craft(saved, kwargs={**ACTOR, "run_dir": "/tmp/x"})
    with pytest.raises(CheckpointError, match=r"builder 'entity_actor' does not accept \['run_dir'\]"):
        ecrl.load(saved)
    craft(saved, kwargs={"action_dim": 2})
    with pytest.raises(CheckpointError, match=r"needs \['net', 'stochastic'\]"):
        ecrl.load(saved)
    craft(saved, kwargs="net=1")
    with pytest.raises(CheckpointError, match="must be a JSON object"):
        ecrl.load(saved)


def test_load_refuses_missing_fields_and_bad_action_bounds(saved):
    config = json.loads((saved / CONFIG).read_text())
    (saved / CONFIG).write_text(json.dumps({k: v for k, v in config.items() if k != "kwargs"}))
    with pytest.raises(CheckpointError, match=r"lacks \['kwargs'\]"):
        ecrl.load(saved)
    (saved / CONFIG).write_text(json.dumps(config))
    craft(saved, action_low=[-1.0], action_high=[1.0, 1.0])
    with pytest.raises(CheckpointError, match="must be finite lists of one length"):
        ecrl.load(saved)
    craft(saved, action_low=["a", "b"], action_high=[1.0, 1.0])
    with pytest.raises(CheckpointError, match="must be lists of numbers"):
        ecrl.load(saved)
    craft(saved, action_low=[1.0, 1.0], action_high=[-1.0, -1.0])
    with pytest.raises(CheckpointError, match="exceeds action_high"):
        ecrl.load(saved)


def test_a_crafted_encoder_config_is_refused(tmp_path):
    path = save_encoder(build_encoder("slot", views=1, image_size=32, entities=2, width=8, slot_dim=8), tmp_path / "e")
    config = json.loads((path / ENCODER.config).read_text())
    assert config["builder"] == "slot_encoder" and config["version"] == 2
    for builder in ("ecrl.encoders.slot_attention:SlotAttentionEncoder", "entity_actor"):
        (path / ENCODER.config).write_text(json.dumps({**config, "builder": builder}))
        with pytest.raises(CheckpointError, match="unknown model builder|not an encoder|does not accept"):
            load_encoder(path)
    (path / ENCODER.config).write_text(json.dumps({**config, "kwargs": {**config["kwargs"], "path": "/tmp/x"}}))
    with pytest.raises(CheckpointError, match=r"slot encoders have no option \['path'\]"):
        load_encoder(path)
    legacy = {"format": "ecrl.encoder", "version": 1, "kind": "ecrl.checkpoint:replace_dir", "config": {}}
    (path / ENCODER.config).write_text(json.dumps(legacy))
    with pytest.raises(CheckpointError, match="unknown encoder kind 'ecrl.checkpoint:replace_dir'"):
        load_encoder(path)


def test_a_version_1_denoiser_still_loads(tmp_path):
    model = EntityDenoiser(DenoiserConfig(width=16, heads=2, blocks=1, horizon=4))
    path = save_denoiser(model, tmp_path / "d")
    config = json.loads((path / DENOISER.config).read_text())
    assert config["builder"] == "entity_denoiser" and config["version"] == 2
    v1 = {"format": "ecrl.denoiser", "version": 1, "config": config["kwargs"]}
    (path / DENOISER.config).write_text(json.dumps(v1))
    loaded = load_denoiser(path)
    assert loaded.config == model.config
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k])


# --- committed checkpoints ---------------------------------------------------------------------------------


def test_there_are_committed_checkpoints_to_check():
    if not RESULTS.is_dir():
        pytest.skip("no results/ directory beside the tests (not a source checkout)")
    assert any(name.endswith(POLICY.config) for name in COMMITTED)
    assert any(name.endswith(ENCODER.config) for name in COMMITTED)


@pytest.mark.parametrize("name", COMMITTED)
def test_a_committed_checkpoint_loads_and_round_trips(name, tmp_path):
    path = RESULTS / name
    old = json.loads(path.read_text())
    if path.name == POLICY.config:
        first = ecrl.load(path)
        again = ecrl.load(first.save(tmp_path / "copy"))
        assert (again.builder, again.kwargs, again.meta) == (first.builder, first.kwargs, first.meta)
        np.testing.assert_array_equal(again.action_low, first.action_low)
        np.testing.assert_array_equal(again.action_high, first.action_high)
        modules = first.module, again.module
        assert first.builder == LEGACY_BUILDERS.get(old["builder"], old["builder"])
    elif path.name == ENCODER.config:
        modules = load_encoder(path), load_encoder(save_encoder(load_encoder(path), tmp_path / "copy"))
        assert modules[1].kind == old.get("kind", modules[1].kind) and modules[1].config == modules[0].config
    else:
        modules = load_denoiser(path), load_denoiser(save_denoiser(load_denoiser(path), tmp_path / "copy"))
    written = json.loads(next((tmp_path / "copy").glob("*.json")).read_text())
    assert written["version"] == 2 and written["builder"] in BUILDER_MODULES  # new saves: registry names
    mine, theirs = modules[0].state_dict(), modules[1].state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert len(mine) and (tmp_path / "copy" / WEIGHTS).exists() == (path.name == POLICY.config)
