"""Episodes over processes (issue 25): ``--workers`` in evaluation and collection, ``--n-envs`` in RL training.

What is identical, precisely:

- evaluation: every per-episode number of the report (``seeds``, ``success``, ``fraction_placed``,
  ``returns``, ``lengths``) and ``env_steps``, so every number of ``eval.json`` but the timings
  (``wall_s``, ``steps_per_s``), the command and the provenance, with the same batches of episodes
  (a network's actions differ in the last float bits between batch sizes; the expert's do not);
- collection: every array :class:`DemoDataset` returns (same dtype, shape and bytes), and, where each
  worker's episodes fill whole shards (here: every episode kept, 12 per worker, 2 per shard), every
  shard file byte for byte; ``meta.json`` differs (shard paths, collection records).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ecrl.datasets import CollectConfig, DatasetError, DemoDataset, collect_dataset
from ecrl.evaluation import ExpertPolicy, evaluate
from ecrl.parallel import split_contiguous

RESULTS = Path(__file__).resolve().parents[1] / "results"
ARRAYS = (
    "observation",
    "achieved_goal",
    "desired_goal",
    "action",
    "reward",
    "is_success",
    "expert_random",
    "lengths",
    "n_objects",
    "seeds",
    "success",
)
# 6 batches of 4 episodes: two shard sets of 12 episodes each, 6 shards each; random actions make an
# episode depend on its batch, so the batches must be the same in every process
COLLECT = {
    "n_objects": (2,),
    "episodes": 24,
    "batch_size": 4,
    "shard_episodes": 2,
    "random_actions": 0.1,
    "only_success": False,
    "progress": False,
}


def per_episode(report) -> list[tuple]:
    return [(r.seeds, r.success, r.fraction_placed, r.returns, r.lengths, r.env_steps) for r in report.results]


def assert_same_dataset(path, reference, shards: bool = True) -> None:
    """``path`` reads back the arrays of ``reference`` (and, with ``shards``, holds byte-identical shards)."""
    got, want = DemoDataset(path), DemoDataset(reference)
    for key in ARRAYS:
        a, b = getattr(got, key), getattr(want, key)
        assert (a.dtype, a.shape) == (b.dtype, b.shape) and a.tobytes() == b.tobytes(), key
    assert got._tasks == want._tasks
    if shards:
        files = [e["file"] for e in got.meta["shards"]], [e["file"] for e in want.meta["shards"]]
        assert len(files[0]) == len(files[1])
        for mine, theirs in zip(*files, strict=True):
            assert (path / mine).read_bytes() == (reference / theirs).read_bytes(), (mine, theirs)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The dataset of :data:`COLLECT` collected by one process."""
    path = tmp_path_factory.mktemp("one") / "data"
    collect_dataset(path, CollectConfig(**COLLECT))
    return path


def test_split_contiguous_cuts_near_equal_shares():
    assert split_contiguous([4, 4, 4, 4, 4, 4], 2) == [range(0, 3), range(3, 6)]
    assert split_contiguous([16, 16, 8], 2) == [range(0, 1), range(1, 3)]
    assert split_contiguous([1, 1], 5) == [range(0, 1), range(1, 2)]  # at most one group per item
    assert split_contiguous([3], 1) == [range(0, 1)]


def test_expert_evaluation_over_two_workers_is_the_one_process_evaluation():
    kwargs = {"episodes": 5, "stop_on_success": True, "progress": False}
    one = evaluate(ExpertPolicy(), [1, 2], **kwargs)
    two = evaluate(ExpertPolicy, [1, 2], workers=2, **kwargs)  # a class is a factory: each worker builds its own
    assert per_episode(two) == per_episode(one)
    assert two.settings == one.settings and two.policy == one.policy
    assert [sum(r.success) for r in one.results] == [5, 5]


def test_a_saved_policy_behind_the_focus_rule_evaluates_the_same_over_workers(tmp_path):
    from ecrl.scripts.eval import main

    policy = RESULTS / "rl_push2" / "select" / "policy"  # a trained EIT actor (results/rl_push2)
    if not (policy / "policy.json").exists():
        pytest.skip("no results/ directory beside the tests (not a source checkout)")
    results = {}
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}"
        args = ["--objects", "3", "--episodes", "4", "--batch-size", "2", "--focus", "1", "--patience", "30"]
        args += ["--stop-on-success"]  # 2 parts × 2 batches of 2 episodes: 4 tasks
        main([str(policy), *args, "--no-expert", "--no-progress", "--workers", workers, "--out", str(out)])
        results[workers] = json.loads((out / "eval.json").read_text())
    one, two = results["1"]["results"], results["2"]["results"]
    timing = {"wall_s", "steps_per_s"}
    assert [{k: v for k, v in r.items() if k not in timing} for r in two] == [
        {k: v for k, v in r.items() if k not in timing} for r in one
    ]
    assert (
        results["2"]["policy"] == results["1"]["policy"] and results["2"]["policy"]["rule"] == "focus k=1, patience 30"
    )
    episodes = one[0]["per_episode"]
    assert len(set(episodes["lengths"])) > 1 and len(set(episodes["returns"])) > 1  # episodes that tell apart


def test_collection_over_two_workers_reads_back_the_one_process_dataset(tmp_path, reference):
    from ecrl.scripts.collect import main

    flags = ["--n-objects", "2", "--episodes", "24", "--batch-size", "4", "--shard-episodes", "2"]
    main(
        [
            "--out",
            str(tmp_path / "two"),
            *flags,
            "--random-actions",
            "0.1",
            "--no-only-success",
            "--no-progress",
            "--workers",
            "2",
        ]
    )
    assert_same_dataset(tmp_path / "two", reference)
    meta = json.loads((tmp_path / "two" / "meta.json").read_text())
    record = meta["collections"][0]
    assert record["complete"] and record["seeds"] == [0, 24] and (record["kept"], meta["episodes"]) == (24, 24)
    assert record["shard_sets"] == [
        {"dir": "collection_000/worker_000", "seeds": [0, 12]},
        {"dir": "collection_000/worker_001", "seeds": [12, 24]},
    ]
    assert meta["shards"][0]["file"] == "collection_000/worker_000/shard_00000.npz"
    assert DemoDataset(tmp_path / "two" / "collection_000" / "worker_001").seeds.tolist() == list(range(12, 24))
    collect_dataset(tmp_path / "two", CollectConfig(**{**COLLECT, "episodes": 4}), append=True)  # then one process
    assert DemoDataset(tmp_path / "two").seeds.tolist() == list(range(28))


def test_a_killed_parallel_collection_is_finished_by_append(tmp_path, reference):
    path = tmp_path / "killed"
    script = (
        "from ecrl.datasets import CollectConfig, collect_dataset\n"
        f"collect_dataset({str(path)!r}, CollectConfig(**{COLLECT!r}), workers=2)\n"
    )
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not list(path.glob("collection_000/worker_*/shard_*.npz")) and time.monotonic() < deadline:
            assert proc.poll() is None, "the collection ended before it could be killed"
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the collection and its worker processes
        proc.wait()
    written = len(list(path.glob("collection_000/worker_*/shard_*.npz")))
    assert 0 < written < 12
    meta = json.loads((path / "meta.json").read_text())
    assert not meta["collections"][0]["complete"] and meta["episodes"] == 0  # readable: nothing listed yet
    assert len(DemoDataset(path).seeds) == 0

    with pytest.raises(DatasetError, match=r"did not finish, and this one differs from it in \['episodes'\]"):
        collect_dataset(path, CollectConfig(**{**COLLECT, "episodes": 8}), append=True)
    with pytest.raises(DatasetError, match="already holds a dataset"):
        collect_dataset(path, CollectConfig(**COLLECT))
    result = collect_dataset(path, CollectConfig(**COLLECT), append=True)  # one process finishes both sets
    assert (result.kept, result.seeds, len(result.shards)) == (24, (0, 24), 12)
    assert_same_dataset(path, reference)


def test_worker_counts_are_checked_and_more_workers_than_batches_are_not_started(tmp_path):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="workers must be an int >= 1"):
            evaluate(ExpertPolicy(), [1], episodes=1, workers=bad, progress=False)
        with pytest.raises(ValueError, match="workers must be an int >= 1"):
            collect_dataset(tmp_path / "bad", CollectConfig(n_objects=(1,), episodes=1, progress=False), workers=bad)
    assert not (tmp_path / "bad").exists()
    # one episode, one batch: run here, as one process would
    one = evaluate(ExpertPolicy(), [1], episodes=1, progress=False, stop_on_success=True)
    assert per_episode(evaluate(ExpertPolicy, [1], episodes=1, progress=False, stop_on_success=True, workers=4)) == (
        per_episode(one)
    )
    result = collect_dataset(tmp_path / "one", CollectConfig(n_objects=(1,), episodes=2, progress=False), workers=4)
    assert result.shards == ["shard_00000.npz"]  # a single batch: the one-process layout

    class Local:  # defined in a function: it cannot be pickled for another process
        meta: dict = {}

        def act(self, obs):
            return np.zeros((len(obs["observation"]), 2), np.float32)

    config = CollectConfig(n_objects=(1,), episodes=4, batch_size=2, only_success=False, progress=False)
    with pytest.raises(ValueError, match="cannot be pickled"):
        collect_dataset(tmp_path / "local", config, Local(), workers=2)
    assert not (tmp_path / "local").exists()
    with pytest.raises(ValueError, match="cannot be pickled"):
        evaluate(Local(), [1], episodes=2, batch_size=1, workers=2, progress=False)
    evaluate(Local(), [1], episodes=2, workers=2, progress=False)  # one batch (the default): run here


def test_cli_refuses_zero_workers(capsys):
    from ecrl.scripts.eval import main

    with pytest.raises(SystemExit) as exit_:
        main(["expert", "--objects", "1", "--episodes", "1", "--workers", "0", "--no-progress"])
    assert exit_.value.code == 2 and "workers must be an int >= 1" in capsys.readouterr().err


@pytest.mark.parametrize(("subproc", "demos"), [(False, 3), (True, 3), (False, 0)])
def test_rl_with_two_envs_her_demos_and_bc(tmp_path, subproc, demos):
    from ecrl.policies.nets import NetConfig
    from ecrl.policies.train import TrainConfig, train

    config = TrainConfig(
        n_objects=1,
        steps=100 if demos else 2 * 150 + 20,  # without demos, HER waits for an episode in every env
        n_envs=2,
        subproc=subproc,
        net=NetConfig(width=8, heads=1),
        batch_size=16,
        utd=0.25,
        demos=demos,  # 3 is rounded up to 4: whole episodes in both env slots of the HER buffer
        bc_steps=5 if demos else 0,
        dagger_iterations=0,
        bc_weight=1.0 if demos else 0.0,
        actor_warmup=0,
        eval_every=0,
        checkpoint_every=0,
        save_replay=False,
        runs_dir=tmp_path,
        name="run",
        progress=False,
    )
    assert config.demo_episodes == (4 if demos else 0)
    result = train(config)
    assert result.env_steps == config.steps and result.demo_success == (1.0 if demos else None)


def test_demonstrations_fill_whole_episodes_in_every_slot_of_a_her_buffer():
    import gymnasium as gym
    from stable_baselines3 import HerReplayBuffer
    from stable_baselines3.common.vec_env import DummyVecEnv

    from ecrl.policies.demos import collect_demos

    make = lambda: gym.make("ecrl/Push-v0", n_objects=1)  # noqa: E731
    venv = DummyVecEnv([make, make])
    buffer = HerReplayBuffer(1000, venv.observation_space, venv.action_space, env=venv, n_envs=2)
    with pytest.raises(ValueError, match=r"episodes \(3\) must be a multiple of 2"):
        collect_demos(make, 3, seed=0, replay_buffer=buffer, progress=False)
    collect_demos(make, 4, seed=0, replay_buffer=buffer, progress=False)
    # every row lies in a finished episode of its slot, and the slots' next episodes start after them
    assert buffer.pos == 2 * 150 and (buffer.ep_length[: buffer.pos] > 0).all()
    assert buffer._current_ep_start.tolist() == [300, 300]
