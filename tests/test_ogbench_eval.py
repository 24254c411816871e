"""OGBench's evaluation protocol in ``evaluate`` and ``ecrl-eval``: its tasks, its success flag, its headline number.

Tests skip, saying so, when OGBench (the extra ``ecrl[ogbench]``) is not installed.
"""

import importlib.util
import json
import re

import gymnasium as gym
import mujoco
import numpy as np
import pytest

from ecrl.eval_report import report_table, scalars, write_report
from ecrl.evaluation import EVAL_SEED, ExpertPolicy, evaluate
from ecrl.parallel import PolicyLoader
from ecrl.policy import Policy
from ecrl.reporting import compare_evaluations

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ogbench") is None, reason="OGBench is not installed (pip install 'ecrl[ogbench]')"
)
MAX_STEPS = 25


class Teleport:
    """Zero actions, except that before its ``at``-th step an episode whose seed is in ``seeds`` has its cubes
    put on their goals (privileged, through the adapter's simulator): OGBench then reports success."""

    action_dim = 5

    def __init__(self, seeds=(), at=3) -> None:
        self.seeds, self.at = set(seeds), at

    def reset(self, envs, seeds) -> None:
        self.envs, self.episode_seeds, self.calls = [e.unwrapped for e in envs], list(seeds), 0

    def act(self, obs) -> np.ndarray:
        self.calls += 1
        for env, seed in zip(self.envs, self.episode_seeds, strict=True):
            if seed in self.seeds and self.calls == self.at:
                env._data.qpos[env._cube_q[:, :3]] = env._data.mocap_pos[env._mocap]
                env._data.qvel[:] = 0.0
                mujoco.mj_forward(env._model, env._data)
        return np.zeros((len(obs["observation"]), 5), np.float32)


def tiny_cube_policy(env="ogbench-cube") -> Policy:
    """An untrained entity-centric (EIT) policy with OGBench's 5-D actions, saved and loaded like a trained one."""
    from ecrl.policies.actor import EntityActorModule

    kwargs = {"net": {"arch": "eit", "width": 16, "heads": 2, "blocks": 1}, "action_dim": 5, "stochastic": False}
    meta = {"arch": "eit", "algo": "diffusion", "train_n_objects": [2], **({"env": env} if env else {})}
    return Policy(EntityActorModule(**kwargs), -np.ones(5), np.ones(5), meta, "entity_actor", kwargs)


def replay(env: gym.Env, seed: int, policy: Teleport) -> tuple[bool, int, float]:
    """Success, length and return of one episode of ``env``, stepped here by hand (what the env itself reports)."""
    obs, info = env.reset(seed=seed)
    policy.reset([env], [seed])
    steps, total = 0, 0.0
    while True:
        obs, reward, terminated, truncated, info = env.step(policy.act({k: v[None] for k, v in obs.items()})[0])
        steps, total = steps + 1, total + reward
        if terminated or truncated:
            return info["is_success"], steps if info["is_success"] else MAX_STEPS, total


@pytest.fixture(scope="module")
def report():
    """cube-double, tasks 1 and 4, two episodes each; the first episode of each is put on its goals."""
    return evaluate(
        Teleport(seeds=[EVAL_SEED]),
        [2],
        env="ogbench-cube",
        tasks=(1, 4),
        episodes=2,
        max_steps=MAX_STEPS,
        progress=False,
    )


def test_each_task_is_a_part_with_ogbench_name_seeds_lengths_and_success(report):
    assert [(r.part, r.n_objects, r.task_name) for r in report.results] == [
        ("task1", 2, "task1_single_pnp"),
        ("task4", 2, "task4_swap"),
    ]
    for task, r in zip((1, 4), report.results, strict=True):
        assert r.seeds == [EVAL_SEED, EVAL_SEED + 1] and r.horizon == MAX_STEPS
        assert r.success == [True, False] and r.lengths == [3, MAX_STEPS]  # OGBench's success ends an episode
        assert r.fraction_placed[0] == 1.0 and r.env_steps == 3 + MAX_STEPS
        env = gym.make("ecrl/OGBenchCube-v0", n_cubes=2, task_id=task, max_episode_steps=MAX_STEPS)
        for i, seed in enumerate(r.seeds):
            success, length, total = replay(env, seed, Teleport(seeds=[EVAL_SEED]))
            assert (r.success[i], r.lengths[i]) == (success, length)
            assert r.returns[i] == pytest.approx(total)
        env.close()
        assert r.summary()["task_name"] == r.task_name
    assert report.settings == {
        "env": "ogbench-cube",
        "n_objects": [2],
        "tasks": [1, 4],
        "episodes": 2,
        "seed": EVAL_SEED,
        "n_max": None,
        "max_steps": MAX_STEPS,
        "video_dir": None,
    }


def test_overall_is_the_mean_success_over_the_tasks_in_json_table_and_scalars(report, tmp_path):
    (overall,) = report.overall()
    assert overall["success_rate"] == np.mean([np.mean(r.success) for r in report.results]) == 0.5
    assert (overall["n_objects"], overall["tasks"], overall["successes"], overall["episodes"]) == (
        2,
        ["task1", "task4"],
        2,
        4,
    )
    lo, hi = overall["success_ci95"]
    assert 0 < lo < 0.5 < hi < 1
    result = write_report(report, tmp_path, "ecrl-eval x --env ogbench-cube")
    assert result["overall"] == [overall] and result["expert"] is None
    assert [r["task_name"] for r in json.loads((tmp_path / "eval.json").read_text())["results"]] == [
        "task1_single_pnp",
        "task4_swap",
    ]
    table = report_table(report)
    assert (
        "| task1 | task1_single_pnp | 2 | 1/2 (0.50) |" in table
        and "| **overall** | mean of 2 tasks | 2 | 2/4 (0.50)" in table
    )
    assert report_table(report) in (tmp_path / "README.md").read_text()
    values = scalars(report)
    assert values["eval/task1/n2/success_rate"] == 0.5 and values["eval/overall/n2/success_rate"] == 0.5
    assert (tmp_path / "success.png").stat().st_size > 0
    compared = compare_evaluations([tmp_path, tmp_path], ["a", "b"], tmp_path / "compare.png")
    assert "| 2 | 2/4 | 2/4 |" in compared and "a, mean of OGBench's tasks" in compared  # the headline number


def test_videos_show_ogbench_front_camera(tmp_path):
    evaluate(
        Teleport(), [1], env="ogbench-cube", tasks=(2,), episodes=1, max_steps=4, video_dir=tmp_path, progress=False
    )
    import imageio.v3 as iio

    frames = iio.imread(tmp_path / "task2_n1.gif")
    assert frames.shape[1:3] == (200, 200) and len(frames) >= 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_objects": [5]}, r"OGBench's cube envs have \[1, 2, 3, 4, 8\] cubes, got N = 5"),
        ({"tasks": (0,)}, r"tasks are 1 … 5, got task 0"),
        ({"tasks": (6,)}, r"tasks are 1 … 5, got task 6"),
        ({"goal": "sort"}, "goal, split, parts and skill are options of the library"),
        ({"split": "colour_shape"}, "goal, split, parts and skill are options of the library"),
        ({"parts": ("train",)}, "goal, split, parts and skill are options of the library"),
        ({"policy": ExpertPolicy()}, r"env 'ogbench-cube' takes 5-D actions, but .* acts with 2-D ones; .*'push'"),
        ({"env": "push", "tasks": (1,)}, "tasks and max_steps are options of env='ogbench-cube'"),
        ({"env": "push", "max_steps": 10}, "tasks and max_steps are options of env='ogbench-cube'"),
        ({"env": "push", "n_objects": [1]}, r"env 'push' takes 2-D actions, but .* acts with 5-D ones"),
        ({"env": "cube"}, r"unknown env 'cube': expected one of \['push', 'fetch', 'ogbench-cube'\]"),
        ({"max_steps": 0}, "max_steps must be >= 1"),
    ],
)
def test_settings_ogbench_cannot_run_are_refused_before_any_episode(kwargs, match):
    kwargs = {"policy": Teleport(), "n_objects": [2], "env": "ogbench-cube", "progress": False, **kwargs}
    with pytest.raises(ValueError, match=match):
        evaluate(kwargs.pop("policy"), kwargs.pop("n_objects"), **kwargs)


def test_cli_evaluates_a_saved_ogbench_policy_with_ogbench_protocol(tmp_path, capsys):
    from ecrl.scripts.eval import main

    path = tiny_cube_policy().save(tmp_path / "final")  # meta["env"] = "ogbench-cube": no --env needed
    main([str(path), "--objects", "1", "--tasks", "1", "--episodes", "1", "--no-progress"])
    out = tmp_path / "final_eval"
    data = json.loads((out / "eval.json").read_text())
    assert data["settings"]["env"] == "ogbench-cube" and data["expert"] is None  # no scripted expert on OGBench
    assert [(r["part"], r["task_name"], r["horizon"]) for r in data["results"]] == [("task1", "task1_horizontal", 200)]
    assert data["overall"][0]["n_objects"] == 1 and "expert" not in capsys.readouterr().out
    assert "| **overall** | mean of 1 tasks | 1 |" in (out / "README.md").read_text()


@pytest.mark.parametrize(
    ("meta_env", "argv", "match"),
    [
        ("ogbench-cube", ["--goal", "sort"], "--goal: push options"),
        ("ogbench-cube", ["--objects", "6"], r"have \[1, 2, 3, 4, 8\] cubes, got N = 6"),
        ("ogbench-cube", ["--env", "push"], r"env 'push' takes 2-D actions, but .* acts with 5-D ones"),
        (None, [], r"env 'push' takes 2-D actions, but .* acts with 5-D ones; evaluate it on env='ogbench-cube'"),
        (None, ["--env", "ogbench-cube", "--tasks", "7"], r"tasks are 1 … 5, got task 7"),
    ],
)
def test_cli_refuses_what_ogbench_cannot_run(tmp_path, capsys, meta_env, argv, match):
    from ecrl.scripts.eval import main

    path = tiny_cube_policy(meta_env).save(tmp_path / "final")
    with pytest.raises(SystemExit) as exit_info:
        main([str(path), *argv, "--no-progress"])
    assert exit_info.value.code == 2
    assert re.search(match, capsys.readouterr().err)


def test_cli_refuses_the_push_expert_and_tasks_on_push(capsys):
    from ecrl.scripts.eval import main

    for argv, match in [
        (["expert", "--env", "ogbench-cube"], "the scripted expert pushes"),
        (["expert", "--tasks", "1"], "--tasks 1: OGBench's evaluation tasks; add --env ogbench-cube"),
    ]:
        with pytest.raises(SystemExit):
            main([*argv, "--no-progress"])
        assert match in capsys.readouterr().err


@pytest.mark.slow  # ~10-20 s: a process pool, each worker building its envs and loading the policy
def test_two_workers_give_the_one_process_numbers(tmp_path):
    path = tiny_cube_policy().save(tmp_path / "final")
    kwargs = {"env": "ogbench-cube", "tasks": (1, 2), "episodes": 2, "max_steps": 15, "progress": False}
    one = evaluate(PolicyLoader(str(path)), [1], **kwargs)
    two = evaluate(PolicyLoader(str(path)), [1], workers=2, **kwargs)
    fields = ("part", "task_name", "seeds", "success", "fraction_placed", "returns", "lengths", "env_steps")
    assert [[getattr(r, f) for f in fields] for r in two.results] == [
        [getattr(r, f) for f in fields] for r in one.results
    ]
    assert [r.task_name for r in two.results] == ["task1_horizontal", "task2_vertical1"]
