"""The diffusion benchmark: its measurement (:mod:`ecrl.diffusion.bench`) called directly, and `ecrl-bench
diffusion` end to end, with tiny settings; sane numbers, never timing thresholds."""

import importlib.util
import json

import pytest
from diffusion_helpers import tiny_train_config

from ecrl.checkpoint import builder
from ecrl.datasets import CollectConfig, collect_dataset
from ecrl.diffusion.bench import DiffusionBenchConfig, measure, reference_actor
from ecrl.diffusion.denoiser import DenoiserConfig
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.diffusion.train import planner_policy, train
from ecrl.scripts.bench import main

TINY = [
    "--n-objects", "1", "2",
    "--settings", "4", "2", "1", "4", "2", "2",
    "--steps", "6", "--repeats", "2", "--warmup-steps", "1", "--denoiser-calls", "2",
    "--width", "16", "--heads", "2", "--blocks", "1", "--ref-n", "2",
    "--train-horizons", "4", "--train-batch", "4", "--train-steps", "1", "--train-n-objects", "2",
    "--threads", "1",
]  # fmt: skip

_TINY_CONFIG = {
    "n_objects": (2,),
    "settings": ((4, 2, 2),),
    "steps": 4,
    "repeats": 2,
    "warmup_steps": 1,
    "denoiser_calls": 2,
    "width": 16,
    "heads": 2,
    "blocks": 1,
    "ref_n": 2,
    "train_horizons": (4,),
    "train_batch": 4,
    "train_steps": 1,
    "train_n_objects": 2,
    "threads": 1,
}


def test_bench_diffusion_writes_latency_denoiser_and_training_numbers(tmp_path):
    main(["diffusion", *TINY, "--out", str(tmp_path)])
    result = json.loads((tmp_path / "bench.json").read_text())
    assert {"README.md", "speed.png"} <= {p.name for p in tmp_path.iterdir()}
    assert result["command"].startswith("ecrl-bench diffusion")
    assert result["weights"] == "random" and result["threads"] == 1

    latency = result["latency"]
    assert [(r["n_objects"], r["replan_every"]) for r in latency] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    for r in latency:
        assert r["horizon"] == 4 and r["sampling_steps"] == 2 and r["steps"] == 6
        assert r["plans"] == 6 // r["replan_every"]
        assert 0 < r["plan_median_ms"] <= r["plan_p90_ms"]
        if r["replan_every"] > 1:  # reading the next action of a plan costs less than sampling one
            assert 0 < r["read_median_ms"] < r["plan_median_ms"]
        assert r["per_step_ms"] == pytest.approx(
            (r["plan_median_ms"] + (r["replan_every"] - 1) * r["read_median_ms"]) / r["replan_every"]
        )
        assert r["env_step_median_ms"] > 0 and r["per_step_vs_ref"] > 0
    assert 0 < result["reference"]["median_ms"] <= result["reference"]["p90_ms"]

    assert [(r["n_objects"], r["horizon"]) for r in result["denoiser_call"]] == [(1, 4), (2, 4)]
    assert result["denoiser_call"][0]["tokens"] == 5 * 2 + 4 + 1  # (H + 1) x entities + actions + goals
    assert all(0 < r["median_ms"] <= r["p90_ms"] for r in result["denoiser_call"])

    (train,) = result["training"]
    assert (train["horizon"], train["batch"], train["n_objects"]) == (4, 4, 2)
    assert 0 < train["windows_per_s_median"] <= train["windows_per_s_best"]

    (target,) = result["targets"]
    assert target["pass"] == (latency[0]["per_step_ms"] <= 20.0)
    assert "H=4, 2 sampling steps" in target["target"]


def test_bench_diffusion_times_a_checkpoint_at_its_own_horizon(tmp_path):
    config = DenoiserConfig(width=16, heads=2, blocks=1, horizon=3)
    planner_policy(DiffusionPlanner(config, sampling_steps=2, replan_every=3), {}).save(tmp_path / "ckpt")
    args = [*TINY, "--checkpoint", str(tmp_path / "ckpt"), "--n-objects", "1", "--out", str(tmp_path / "out")]
    main(["diffusion", *args])
    result = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert result["denoiser"]["horizon"] == 3
    assert [(r["horizon"], r["sampling_steps"], r["replan_every"]) for r in result["latency"]] == [(3, 2, 3)]


def test_bench_diffusion_rejects_a_replan_interval_beyond_the_horizon():
    with pytest.raises(ValueError, match="replan_every"):
        DiffusionBenchConfig(settings=((4, 2, 5),))


def test_diffusion_measure_counts_every_timed_call(tmp_path):
    config = DiffusionBenchConfig(
        n_objects=(2,),
        settings=((4, 2, 1), (4, 2, 3)),
        steps=7,
        repeats=2,
        warmup_steps=1,
        denoiser_calls=5,
        width=16,
        heads=2,
        blocks=1,
        ref_n=2,
        train_horizons=(2, 4),
        train_batch=3,
        train_steps=2,
        train_n_objects=1,
        threads=1,
        reduce="median",
        out=tmp_path,
    )
    result = measure(config)
    assert set(result) == {
        "env",
        "env_id",
        "task_id",
        "threads",
        "weights",
        "denoiser",
        "guidance",
        "reference",
        "latency",
        "denoiser_call",
        "training",
    }
    assert result["denoiser"]["width"] == 16 and result["denoiser"]["horizon"] == 4 and result["weights"] == "random"
    assert (result["env"], result["env_id"], result["task_id"]) == ("push", "ecrl/Push-v0", None)
    assert result["denoiser"]["action_dim"] == 2 and result["denoiser"]["state"] == "planar"

    every, third = result["latency"]
    assert every["steps"] == third["steps"] == 7  # warm-up steps are not timed
    assert (every["plans"], every["read_median_ms"]) == (7, 0.0)  # re-planning every step: nothing only read
    assert third["plans"] == 2  # after 1 warm-up step the timed steps are 1 … 7: steps 3 and 6 sample a plan
    for r in (every, third):
        assert 0 < r["plan_min_ms"] <= r["plan_median_ms"] <= r["plan_p90_ms"]
        assert r["per_step_vs_ref"] == pytest.approx(r["per_step_ms"] / r["ref_median_ms"])
    assert result["reference"]["calls"] == 2 * 7  # one reference call per timed env step of every rollout

    (call,) = result["denoiser_call"]  # one horizon, one N
    assert (call["n_objects"], call["horizon"], call["calls"]) == (2, 4, 5)

    assert [r["horizon"] for r in result["training"]] == [2, 4]
    for r in result["training"]:
        assert (r["batch"], r["n_objects"], r["windows"]) == (3, 1, "synthetic (random-action rollout)")
        assert r["windows_per_s_best"] >= r["windows_per_s_median"] > 0
        assert r["ms_per_step_median"] == pytest.approx(1e3 * 3 / r["windows_per_s_median"])


def test_the_reference_workload_is_the_registered_eit_actor():
    actor, observations = reference_actor(DiffusionBenchConfig(ref_n=3, width=16, heads=2))
    assert isinstance(actor, builder("entity_actor")) and not actor.training
    assert len(observations) == 16 and observations[0]["observation"].shape[:2] == (1, 4)  # agent + 3 objects


# ---------------------------------------------------------------------------------------- OGBench cubes
needs_ogbench = pytest.mark.skipif(importlib.util.find_spec("ogbench") is None, reason="needs the ogbench extra")
TINY_CUBES = [
    "--env", "ogbench-cube", "--n-objects", "1", "8",
    "--settings", "4", "2", "2",
    "--steps", "4", "--repeats", "2", "--warmup-steps", "1", "--denoiser-calls", "2",
    "--width", "16", "--heads", "2", "--blocks", "1", "--ref-n", "2",
    "--train-horizons", "4", "--train-batch", "4", "--train-steps", "1", "--train-n-objects", "2",
    "--threads", "1",
]  # fmt: skip


@needs_ogbench
def test_bench_diffusion_plans_in_ogbench_cubes_with_their_action_width(tmp_path):
    main(["diffusion", *TINY_CUBES, "--out", str(tmp_path)])
    result = json.loads((tmp_path / "bench.json").read_text())
    assert (result["env"], result["env_id"], result["task_id"]) == ("ogbench-cube", "ecrl/OGBenchCube-v0", 2)
    assert result["denoiser"]["action_dim"] == 5 and result["denoiser"]["state"] == "spatial"
    assert [(r["env"], r["n_objects"]) for r in result["latency"]] == [("ogbench-cube", 1), ("ogbench-cube", 8)]
    for r in result["latency"]:
        assert r["steps"] == 4 and r["plans"] == 2 and r["env_step_median_ms"] > 0
        assert r["steps_per_s_with_planning"] == pytest.approx(1e3 / (r["per_step_ms"] + r["env_step_median_ms"]))
    assert [(r["env"], r["n_objects"], r["tokens"]) for r in result["denoiser_call"]] == [
        ("ogbench-cube", 1, 5 * 2 + 4 + 1),  # (H + 1) x (gripper + cube) + actions + goals
        ("ogbench-cube", 8, 5 * 9 + 4 + 8),
    ]
    (train,) = result["training"]
    assert (train["env"], train["n_objects"], train["windows"]) == (
        "ogbench-cube",
        2,
        "synthetic (random-action rollout)",
    )
    assert "ecrl/OGBenchCube-v0" in (tmp_path / "README.md").read_text()
    assert "ogbench-cube, N=1" in result["targets"][0]["target"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"env": "ogbench-cube", "n_objects": (2, 5)}, "OGBench's cube counts \\[1, 2, 3, 4, 8\\]"),
        ({"env": "ogbench-cube", "n_objects": (2,), "train_n_objects": 12}, "train_n_objects must be OGBench's"),
        ({"env": "ogbench-cube", "n_objects": (2,), "task_id": 6}, "task_id must be in 1 … 5"),
        ({"n_objects": (17,)}, "n_objects must be in 1 … 16 in env push"),
    ],
)
def test_bench_diffusion_refuses_numbers_of_objects_the_env_lacks(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DiffusionBenchConfig(**kwargs)


@pytest.fixture(scope="module")
def cube_planner(tmp_path_factory):
    """A planner from a tiny training run on OGBench play data (2 cubes), and the play data."""
    if importlib.util.find_spec("ogbench") is None:
        pytest.skip("needs the ogbench extra")
    root = tmp_path_factory.mktemp("cubes")
    config = CollectConfig(env="ogbench-cube", play=True, n_objects=(2,), episodes=2, play_steps=30, progress=False)
    collect_dataset(root / "play", config)
    run = train(tiny_train_config(root / "play", root / "runs", replan_every=2)).run_dir
    return run / "final", root / "play"


@needs_ogbench
def test_a_checkpoint_trained_on_ogbench_cubes_is_timed_in_their_env(cube_planner, tmp_path):
    checkpoint, play = cube_planner
    config = DiffusionBenchConfig(
        **{**_TINY_CONFIG, "n_objects": (2, 3), "checkpoint": checkpoint, "dataset": play, "out": tmp_path}
    )
    assert config.env is None  # left to the checkpoint
    result = measure(config)
    assert result["env"] == "ogbench-cube" and result["denoiser"]["state"] == "spatial"
    assert [(r["env"], r["n_objects"], r["horizon"], r["replan_every"]) for r in result["latency"]] == [
        ("ogbench-cube", 2, 4, 2),
        ("ogbench-cube", 3, 4, 2),
    ]
    assert all(r["windows"] == str(play) and r["env"] == "ogbench-cube" for r in result["training"])


@needs_ogbench
def test_a_checkpoint_or_dataset_of_another_env_is_refused(cube_planner, tmp_path):
    checkpoint, play = cube_planner
    with pytest.raises(ValueError, match="trained in env ogbench-cube .* not in --env push"):
        measure(DiffusionBenchConfig(**{**_TINY_CONFIG, "env": "push", "checkpoint": checkpoint}))
    with pytest.raises(ValueError, match="OGBench's cube counts"):  # the checkpoint's env has no 12 cubes
        measure(DiffusionBenchConfig(**{**_TINY_CONFIG, "n_objects": (12,), "checkpoint": checkpoint}))
    with pytest.raises(ValueError, match="collected in env ogbench-cube .* plans in push"):
        measure(DiffusionBenchConfig(**{**_TINY_CONFIG, "dataset": play}))
