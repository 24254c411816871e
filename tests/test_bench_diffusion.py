"""The diffusion benchmark: its measurement (:mod:`ecrl.diffusion.bench`) called directly, and `ecrl-bench
diffusion` end to end, with tiny settings; sane numbers, never timing thresholds."""

import json

import pytest

from ecrl.checkpoint import builder
from ecrl.diffusion.bench import DiffusionBenchConfig, measure, reference_actor
from ecrl.diffusion.denoiser import DenoiserConfig
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.diffusion.train import planner_policy
from ecrl.scripts.bench import main

TINY = [
    "--n-objects", "1", "2",
    "--settings", "4", "2", "1", "4", "2", "2",
    "--steps", "6", "--repeats", "2", "--warmup-steps", "1", "--denoiser-calls", "2",
    "--width", "16", "--heads", "2", "--blocks", "1", "--ref-n", "2",
    "--train-horizons", "4", "--train-batch", "4", "--train-steps", "1", "--train-n-objects", "2",
    "--threads", "1",
]  # fmt: skip


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
