"""The policy benchmark's measurement (:mod:`ecrl.policies.bench`) called directly, tiny networks and sizes.

What is checked is the structure and consistency of the numbers, never how fast anything is. Building a
model fills its replay buffer past one episode (200 env steps at N=1), so each test builds as few as it can.
"""

import math

import pytest

from ecrl.policies.bench import PoliciesBenchConfig, label, measure
from ecrl.scripts import bench_policies

TINY = {
    "n_objects": 1,
    "batch_size": 8,
    "gradient_steps": 2,
    "repeats": 2,
    "warmup_updates": 1,
    "width": 16,
    "heads": 1,
    "blocks": 1,
    "net_arch": (16, 16),
    "latency_n": 2,
    "latency_calls": 6,
    "threads": 1,
}


def test_policies_measure_gives_updates_and_latency_per_network(tmp_path):
    config = PoliciesBenchConfig(models=("mlp", "eit"), **TINY, out=tmp_path)
    result = measure(config)
    assert result["threads"] == 1 and result["setup_s"] > 0

    updates = {r["model"]: r for r in result["updates"]}
    assert list(updates) == ["mlp", "eit"]
    raw = result["raw"]["updates_per_s"]
    for name, r in updates.items():
        assert r["label"] == label(name, config) and r["params"] > 0
        assert len(raw[name]) == 2 and min(raw[name]) > 0  # one rate per repeat
        assert r["updates_per_s_best"] == max(raw[name]) >= r["updates_per_s_median"] > 0
        assert r["vs_mlp_best"] == pytest.approx(r["updates_per_s_best"] / updates["mlp"]["updates_per_s_best"])
        assert math.isfinite(r["vs_mlp_median"]) and r["vs_mlp_median"] > 0
    assert updates["mlp"]["vs_mlp_best"] == updates["mlp"]["vs_mlp_median"] == 1.0
    assert updates["mlp"]["params"] != updates["eit"]["params"]

    latency = {r["model"]: r for r in result["latency"]}
    assert list(latency) == ["mlp", "eit"]
    for r in latency.values():
        assert r["n_objects"] == 2 and r["calls"] == 6  # latency_calls / repeats per turn, repeats turns
        assert 0 < r["min_ms"] <= r["median_ms"] <= r["p90_ms"]

    targets = bench_policies.check_targets(config, result)
    assert [t["target"].split()[0] for t in targets] == ["EIT", "EIT"]
    assert targets[0]["pass"] == (updates["eit"]["vs_mlp_best"] >= config.min_update_ratio)


def test_policies_measure_without_the_mlp_has_no_ratio_to_it(tmp_path):
    result = measure(PoliciesBenchConfig(models=("deepsets",), **TINY, out=tmp_path))
    (row,) = result["updates"]
    assert row["model"] == "deepsets" and row["label"] == "DeepSets, width 16" and "vs_mlp_best" not in row
    assert [r["model"] for r in result["latency"]] == ["deepsets"] and result["latency"][0]["calls"] == 6


@pytest.mark.parametrize(
    "kwargs", [{"models": ()}, {"models": ("cnn",)}, {"latency_n": 0}, {"repeats": 0}, {"threads": 0}]
)
def test_policies_config_refuses_bad_settings(kwargs):
    with pytest.raises(ValueError):
        PoliciesBenchConfig(**kwargs)
