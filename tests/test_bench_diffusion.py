"""`ecrl-bench diffusion` runs end to end with tiny settings and writes sane numbers."""

import json

import pytest

from ecrl.diffusion.denoiser import DenoiserConfig
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.diffusion.train import planner_policy
from ecrl.scripts.bench import main
from ecrl.scripts.bench_diffusion import DiffusionArgs

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
        DiffusionArgs(settings=((4, 2, 5),))
