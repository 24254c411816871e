"""`ecrl-bench planners` compares two tiny saved planners end to end: success, planning time, denoiser calls."""

import json

import pytest

from ecrl.diffusion.denoiser import DenoiserConfig
from ecrl.diffusion.hierarchical import HierarchicalPlanner
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.diffusion.train import planner_policy
from ecrl.scripts.bench import main
from ecrl.scripts.bench_planners import PlannersArgs

TINY = {"width": 16, "heads": 2, "blocks": 1, "diffusion_steps": 20}
TASK = {"arch": "diffusion", "train_n_objects": [2], "goal": "sort", "split": None}


@pytest.fixture
def planners(tmp_path):
    """A flat and a hierarchical planner saved in ``tmp_path``; the flat one carries a training task."""
    flat = DiffusionPlanner(DenoiserConfig(horizon=4, **TINY), sampling_steps=2)
    planner_policy(flat, TASK).save(tmp_path / "flat")
    high, low = DenoiserConfig(horizon=2, **TINY), DenoiserConfig(horizon=2, **TINY)
    hierarchical = HierarchicalPlanner(high, low, high_sampling_steps=2, low_sampling_steps=2, replan_every=2)
    planner_policy(hierarchical, {}).save(tmp_path / "hierarchical")
    return [str(tmp_path / "flat"), str(tmp_path / "hierarchical")]


def test_bench_planners_reports_success_and_planning_time_per_planner(tmp_path, planners):
    out = tmp_path / "out"
    main(["planners", *planners, "--labels", "flat", "hier", "--episodes", "2", "--threads", "1", "--out", str(out)])
    result = json.loads((out / "bench.json").read_text())
    assert {"README.md", "planners.png"} <= {p.name for p in out.iterdir()}
    assert result["command"].startswith("ecrl-bench planners")
    assert "ecrl-bench planners" in (out / "README.md").read_text()

    # The task defaults to the first planner's training task.
    task = result["task"]
    assert (task["objects"], task["goal"], task["split"], task["parts"]) == ([2], "sort", None, ["train"])
    assert task["episodes"] == 2 and task["batch_size"] == 2

    flat, hier = result["planners"]
    assert (flat["label"], flat["kind"], flat["horizon"], flat["sampling_steps"]) == ("flat", "diffusion", 4, 2)
    assert hier["kind"] == "HierarchicalPlanner" and (hier["subgoal_every"], hier["horizon"]) == (2, 4)
    assert hier["sampling_steps"] == {"high": 2, "low": 2} and hier["replan_every"] == {"high": 2, "low": 2}

    rows = {r["label"]: r for r in result["results"]}
    assert list(rows) == ["flat", "hier"]
    for r in rows.values():
        assert (r["part"], r["n_objects"], r["episodes"]) == ("train", 2, 2)
        assert 0 <= r["success_ci95"][0] <= r["success_rate"] <= r["success_ci95"][1] <= 1
        assert 0 <= r["fraction_placed"] <= 1
        assert r["per_episode"]["seeds"] == [task["seed"], task["seed"] + 1]
        assert r["act_calls"] == r["horizon"] and r["batch"] == 2  # one call per env step, 2 episodes side by side
        assert r["ms_per_step_median"] > 0 and r["ms_per_step_mean"] > 0
        assert r["ms_per_episode_step_mean"] == pytest.approx(r["ms_per_step_mean"] / 2)
    # The flat planner re-plans every step with 2 DDIM steps; the hierarchical one's counts match its stats.
    assert rows["flat"]["denoiser_calls_per_step"] == 2 and rows["flat"]["stats"] is None
    stats = rows["hier"]["stats"]
    assert stats["actions"] == 2 * rows["hier"]["act_calls"]
    assert stats["denoiser_calls"] == rows["hier"]["denoiser_calls"] > 0
    assert 0 < stats["planning_s"] <= rows["hier"]["act_total_s"]


def test_bench_planners_rejects_a_label_per_path_mismatch():
    with pytest.raises(ValueError, match="one label per PATH"):
        PlannersArgs(paths=("a", "b"), labels=("flat",))


def test_bench_planners_needs_objects_when_the_first_planner_has_no_training_task(tmp_path, planners):
    with pytest.raises(ValueError, match="--objects"):
        main(["planners", planners[1], "--episodes", "1", "--out", str(tmp_path / "out")])
