"""A resumed run keeps its own ``steps`` unless the command line names ``--steps``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tyro

from ecrl.diffusion.train import DiffusionTrainConfig
from ecrl.encoders.train import EncoderTrainConfig
from ecrl.policies.config import TrainConfig
from ecrl.scripts.cli import training_config_of
from ecrl.scripts.train import TrainArgs
from ecrl.scripts.train_diffusion import TrainDiffusionArgs
from ecrl.scripts.train_encoder import TrainEncoderArgs
from ecrl.training import resume_config

CASES = [
    (TrainDiffusionArgs, DiffusionTrainConfig, "a diffusion"),
    (TrainArgs, TrainConfig, "an RL"),
    (TrainEncoderArgs, EncoderTrainConfig, "an encoder"),
]


def _run_dir(tmp_path: Path, cls: type, steps: int) -> Path:
    default = cls.__dataclass_fields__["steps"].default
    assert steps < default  # a run shorter than the default: what the parser's default would extend
    (tmp_path / "config.json").write_text(json.dumps(cls(steps=steps).to_json()))
    return tmp_path


@pytest.mark.parametrize("args_cls, cls, what", CASES, ids=["diffusion", "rl", "encoder"])
def test_resume_without_steps_keeps_the_runs_own(args_cls, cls, what, tmp_path):
    run = _run_dir(tmp_path, cls, 80)
    argv = ["--resume", str(run)]
    given = training_config_of(tyro.cli(args_cls, args=argv), cls, argv)
    assert resume_config(cls, given, run, what).steps == 80


@pytest.mark.parametrize("args_cls, cls, what", CASES, ids=["diffusion", "rl", "encoder"])
@pytest.mark.parametrize("form", ["separate", "equals"])
def test_resume_with_steps_extends_the_run(args_cls, cls, what, form, tmp_path):
    run = _run_dir(tmp_path, cls, 80)
    argv = ["--resume", str(run), *(["--steps", "200"] if form == "separate" else ["--steps=200"])]
    given = training_config_of(tyro.cli(args_cls, args=argv), cls, argv)
    assert resume_config(cls, given, run, what).steps == 200


def test_a_new_run_takes_the_parsers_steps():
    assert training_config_of(tyro.cli(TrainDiffusionArgs, args=[]), DiffusionTrainConfig, []).steps == (
        DiffusionTrainConfig.__dataclass_fields__["steps"].default
    )
