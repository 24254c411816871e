"""The planners comparison: its measurement (:mod:`ecrl.diffusion.bench_planners`) called directly, and
`ecrl-bench planners` end to end on two tiny saved planners: success, planning time, denoiser calls."""

import json

import numpy as np
import pytest

import ecrl
from ecrl.diffusion.bench_planners import PlannersBenchConfig, TimedPolicy, measure
from ecrl.diffusion.denoiser import DenoiserConfig
from ecrl.diffusion.hierarchical import HierarchicalPlanner
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.diffusion.train import planner_policy
from ecrl.evaluation import EVAL_SEED
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


def test_planners_measure_evaluates_every_planner_on_every_part_and_n(planners):
    config = PlannersBenchConfig(paths=tuple(planners), objects=(1, 2), goal="positions", episodes=2, batch_size=1)
    result = measure(config)
    assert result["task"] == {
        "objects": [1, 2],
        "goal": "positions",
        "split": None,
        "parts": ["train"],
        "episodes": 2,
        "seed": EVAL_SEED,
        "batch_size": 1,
        "stop_on_success": False,
    }
    # Labels: each planner's meta["arch"], else "planner"; kinds: meta["arch"], else the module's class.
    planners_ = [(p["label"], p["kind"]) for p in result["planners"]]
    assert planners_ == [("diffusion", "diffusion"), ("planner", "HierarchicalPlanner")]
    cases = [(r["n_objects"], r["label"]) for r in result["results"]]
    assert cases == [(1, "diffusion"), (1, "planner"), (2, "diffusion"), (2, "planner")]
    for r in result["results"]:
        assert r["batch"] == 1 and r["act_calls"] == 2 * r["horizon"]  # the 2 episodes one after the other
        assert r["ms_per_episode_step_mean"] == pytest.approx(r["ms_per_step_mean"])  # batch 1
        assert r["denoiser_calls"] > 0 and r["denoiser_calls_per_step"] == r["denoiser_calls"] / r["act_calls"]


def test_a_timed_policy_counts_denoiser_passes_until_it_is_closed(planners):
    policy = ecrl.load(planners[0])  # the flat planner: 2 DDIM steps, re-planning every step
    timed = TimedPolicy(policy)
    obs = {k: v[None] for k, v in _push_observation(2).items()}
    timed.reset()
    action = timed.act(obs)
    assert action.shape == (1, 2) and timed.denoiser_calls == 2 and timed.has_denoisers
    assert len(timed.calls) == 1 and timed.calls[0][0] > 0 and timed.calls[0][1] == 1  # (ms, batch)
    timed.close()
    policy.act(obs)
    assert timed.denoiser_calls == 2  # the hooks are gone


def _push_observation(n: int) -> dict[str, np.ndarray]:
    from ecrl.timing import rollout_observations

    return rollout_observations(n, 1, seed=0)[0]
