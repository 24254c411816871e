"""The env benchmarks' measurement (:mod:`ecrl.envs.bench`, :mod:`ecrl.envs.ogbench_bench`) called directly, tiny sizes.

What is checked is the structure and consistency of the numbers, never how fast anything is.
"""

import importlib.util

import pytest

from ecrl.envs.bench import EnvsBenchConfig, measure
from ecrl.envs.ogbench_bench import OGBenchBenchConfig
from ecrl.envs.ogbench_bench import measure as measure_ogbench
from ecrl.scripts import bench_envs


def test_envs_measure_gives_a_row_per_n_and_per_render_size(tmp_path):
    # 180 steps cross the 150-step episode of push-1 (and the 50 steps of Fetch), so timed runs go through resets.
    config = EnvsBenchConfig(
        n_objects=(1, 2),
        fetch_objects=(1, 2),
        steps=180,
        resets=2,
        frames=2,
        render_sizes=(32, 48),
        repeats=2,
        fetch=False,
        out=tmp_path,
    )
    result = measure(config)
    assert set(result) == {"push", "fetch", "fetch_push_v4", "fetch_pick_and_place_v4", "render", "raw_seconds"}
    assert result["fetch_push_v4"] is None and result["fetch_pick_and_place_v4"] is None

    for kind in ("push", "fetch"):
        rows = result[kind]
        assert [r["n_objects"] for r in rows] == [1, 2]
        for r in rows:
            assert r["physics_replay_exact"] is True  # the physics floor replayed the env's own trajectory
            assert min(r["steps_per_s"], r["steps_per_s_unwrapped"], r["physics_steps_per_s"], r["reset_ms"]) > 0
            assert r["step_us"] == pytest.approx(1e6 / r["steps_per_s"])
            assert r["physics_us"] == pytest.approx(1e6 / r["physics_steps_per_s"])
            assert r["physics_ratio"] == pytest.approx(r["step_us"] / r["physics_us"])
            assert r["physics_ratio_unwrapped"] == pytest.approx(r["step_us_unwrapped"] / r["physics_us"])

    assert [(r["size"], r["n_objects"]) for r in result["render"]] == [(32, 3), (48, 3)]
    assert all(r["rgb_fps"] > 0 and r["segmentation_fps"] > 0 for r in result["render"])

    raw = result["raw_seconds"]
    per_n = [
        f"{kind}/{k}/{n}"
        for kind in ("push", "fetch")
        for k in ("make", "unwrapped", "physics", "reset", "reset_unwrapped")
        for n in (1, 2)
    ]
    per_size = [f"{k}/{s}" for k in ("rgb", "segmentation") for s in (32, 48)]
    assert set(raw) == {*per_n, *per_size}
    assert all(len(v) == 2 and min(v) > 0 for v in raw.values())  # one time per repeat
    # `best` keeps the fastest repeat of each number.
    assert result["push"][0]["steps_per_s"] == pytest.approx(1 / min(raw["push/make/1"]))
    assert result["fetch"][1]["reset_ms"] == pytest.approx(1e3 * min(raw["fetch/reset/2"]))


def test_envs_measure_times_gymnasium_robotics_and_the_cli_checks_the_targets(tmp_path):
    config = EnvsBenchConfig(
        n_objects=(3,),
        fetch_objects=(1, 3),
        steps=30,
        resets=2,
        frames=1,
        render_sizes=(32,),
        repeats=1,
        reduce="median",
        out=tmp_path,
    )
    result = measure(config)
    for key in ("fetch_push_v4", "fetch_pick_and_place_v4"):
        ref = result[key]
        assert ref["steps_per_s"] > 0 and ref["reset_ms"] > 0
        assert ref["step_us"] == pytest.approx(1e6 / ref["steps_per_s"])
    raw = result["raw_seconds"]
    assert len(raw["FetchPush-v4/step"]) == len(raw["FetchPickAndPlace-v4/reset"]) == 1

    targets = bench_envs.check_targets(config, result)
    assert [t["target"].split()[0] for t in targets] == ["push-3"] * 3 + ["fetch-1", "fetch-1", "fetch"]
    speedup = result["push"][0]["steps_per_s"] / result["fetch_push_v4"]["steps_per_s"]
    assert targets[0]["pass"] == (speedup >= config.min_speedup_vs_fetch)
    fetch_ratio = result["fetch"][0]["steps_per_s"] / result["fetch_pick_and_place_v4"]["steps_per_s"]
    assert targets[3]["pass"] == (fetch_ratio >= config.min_fetch_ratio)
    worst = max(r["reset_ms"] for r in result["fetch"])
    assert targets[5]["pass"] == (worst <= config.max_fetch_reset_ms)

    # Without Fetch rows there are no Fetch targets, and the tables and plot still come out.
    no_fetch = {**result, "fetch": []}
    assert [t["target"].split()[0] for t in bench_envs.check_targets(config, no_fetch)] == ["push-3"] * 3
    tables = bench_envs.tables({**result, "targets": targets})
    assert "fetch (pick_place): N" in tables and "FetchPickAndPlace-v4" in tables
    bench_envs.plot(result, config, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_objects": ()},
        {"n_objects": (0,)},
        {"fetch_objects": (9,)},
        {"steps": 0},
        {"repeats": 0},
        {"render_sizes": (8,)},
    ],
)
def test_envs_config_refuses_bad_sizes(kwargs):
    with pytest.raises(ValueError):
        EnvsBenchConfig(**kwargs)


needs_ogbench = pytest.mark.skipif(
    importlib.util.find_spec("ogbench") is None, reason="OGBench is not installed (pip install 'ecrl[ogbench]')"
)


@needs_ogbench
def test_ogbench_measure_times_the_adapter_against_ogbench_and_play_data(tmp_path):
    config = OGBenchBenchConfig(n_cubes=(1, 2), steps=8, play_steps=5, play_n=1, repeats=2, out=tmp_path)
    result = measure_ogbench(config)  # raises if the adapter's state left OGBench's, bit for bit
    assert [r["n_cubes"] for r in result["steps"]] == [1, 2]
    for r in result["steps"]:
        assert set(r["raw_seconds"]) == {"ogbench", "adapter", "adapter_make"}
        assert all(len(v) == 2 and min(v) > 0 for v in r["raw_seconds"].values())
        assert r["ogbench_step_us"] == pytest.approx(1e6 / r["ogbench_steps_per_s"])
        assert r["ratio"] == pytest.approx(r["adapter_step_us"] / r["ogbench_step_us"])
        assert r["ratio_make"] == pytest.approx(r["adapter_make_step_us"] / r["ogbench_step_us"])
    (play,) = result["play"]
    assert (play["n_cubes"], play["steps"]) == (1, 5) and play["steps_per_s"] > 0


def test_ogbench_config_refuses_sizes_ogbench_has_not():  # checked before OGBench is needed
    with pytest.raises(ValueError, match="OGBench's sizes"):
        OGBenchBenchConfig(n_cubes=(5,))
    with pytest.raises(ValueError, match="task_id"):
        OGBenchBenchConfig(task_id=0)
