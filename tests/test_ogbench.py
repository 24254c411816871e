"""The OGBench cube adapter: the entity contract around OGBench's own env, play data, dataset files.

Tests that need OGBench (the extra ``ecrl[ogbench]``) skip, saying so, when it is not installed.
"""

import importlib.util
import json
import sys

import gymnasium as gym
import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from ecrl.datasets import CollectConfig, DemoDataset, collect_dataset, import_ogbench_dataset
from ecrl.envs import OGBENCH_IDS
from ecrl.envs.layout import AGENT_GRIPPER, ENTITY_FIELDS, GOAL_FIELDS
from ecrl.envs.ogbench import (
    CUBE_ENV_TYPES,
    EPISODE_STEPS,
    TABLE_CENTRE,
    CubePlayOracle,
    OGBenchCubeTask,
    import_ogbench,
)
from ecrl.envs.ogbench_data import CUBE_RGB, load_ogbench_episodes
from ecrl.scripts import collect

needs_ogbench = pytest.mark.skipif(
    importlib.util.find_spec("ogbench") is None, reason="OGBench is not installed (pip install 'ecrl[ogbench]')"
)
POS = ENTITY_FIELDS["position"]


def test_a_missing_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "ogbench", None)  # import ogbench now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'ecrl\[ogbench\]'"):
        import_ogbench()
    with pytest.raises(ImportError, match=r"ecrl\[ogbench\]"):
        gym.make("ecrl/OGBenchCube-v0")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_cubes": 5}, "n_cubes must be one of OGBench's sizes"),
        ({"task_id": 6}, "task_id must be in 1 … 5"),
        ({"task_id": 1, "mode": "play"}, "task_id must be in 1 … 5 in task mode"),
        ({"mode": "eval"}, "mode must be one of"),
        ({"n_cubes": 3, "n_max": 2}, "n_max must be >= n_cubes"),
        ({"reward_type": "shaped"}, "unknown reward_type"),
    ],
)
def test_bad_settings_are_refused_before_ogbench_loads(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make("ecrl/OGBenchCube-v0", **kwargs)


# ---------------------------------------------------------------------------------------------- the env
def ogbench_env(n: int, **kwargs):
    """OGBench's own env of ``n`` cubes (unwrapped), as its id registers it."""
    import_ogbench()
    return gym.make(f"cube-{CUBE_ENV_TYPES[n]}-v0", disable_env_checker=True, **kwargs).unwrapped


@needs_ogbench
@pytest.mark.parametrize("env_id", OGBENCH_IDS)
def test_check_env_passes(env_id, make):
    env = make(env_id, n_max=9)
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    n = env.unwrapped.n_objects
    assert obs["observation"].shape == (10, env.observation_space["observation"].shape[1])
    assert not obs["observation"][1 + n :].any() and not obs["desired_goal"][n:].any()  # padding is all zero


@needs_ogbench
def test_episode_limits_and_colours_are_ogbenchs(make):
    for n, name in CUBE_ENV_TYPES.items():
        assert gym.spec(f"cube-{name}-v0").max_episode_steps == EPISODE_STEPS[n]
    env = make("ecrl/OGBenchCubeOctuple-v0").unwrapped
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(CUBE_RGB, env.ogbench_env._cube_colors[:, :3])
    np.testing.assert_array_equal(obs["observation"][1:, ENTITY_FIELDS["colour"]], CUBE_RGB)
    assert env.max_episode_steps == 1500 and env.spec_.task_name.startswith("task")


@needs_ogbench
def test_same_seed_same_rollout(make):
    def rollout():
        env = make("ecrl/OGBenchCubeDouble-v0")
        out = [env.reset(seed=3)]
        actions = np.random.default_rng(0).uniform(-1, 1, (25, 5))
        out += [env.step(a) for a in actions]
        return out

    a, b = rollout(), rollout()
    assert a[0][1] == b[0][1]  # the same task drawn
    for x, y in zip(a, b, strict=True):
        for key in x[0]:
            np.testing.assert_array_equal(x[0][key], y[0][key])
        assert x[1:] == y[1:]


def _teleport_cubes_to_goals(data, mocap_ids, qpos_addresses):
    for mocap, adr in zip(mocap_ids, qpos_addresses, strict=True):
        data.qpos[adr : adr + 3] = data.mocap_pos[mocap]
        data.qpos[adr + 3 : adr + 7] = (1, 0, 0, 0)
    data.qvel[14:] = 0


@needs_ogbench
def test_task_mode_success_and_state_equal_ogbenchs_own_env(make):
    """Lockstep with OGBench's own env on the same seed and task: same state, same success flag."""
    env = make("ecrl/OGBenchCubeTriple-v0", task_id=4).unwrapped
    own = ogbench_env(3)
    obs, info = env.reset(seed=11)
    _, own_info = own.reset(seed=11, options={"task_id": 4})
    actions = np.random.default_rng(1).uniform(-1, 1, (12, 5))
    flags = []
    for t, a in enumerate(actions):
        if t == 6:  # put every cube on its goal in both envs: OGBench must call it a success
            for e in (env.ogbench_env, own):
                adr = [e._model.jnt_qposadr[e._model.joint(f"object_joint_{i}").id] for i in range(3)]
                _teleport_cubes_to_goals(e._data, e._cube_target_mocap_ids, adr)
                mujoco.mj_forward(e._model, e._data)
            a = np.zeros(5)
        obs, reward, terminated, _, info = env.step(a)
        _, own_reward, own_terminated, _, own_info = own.step(a)
        assert info["is_success"] == own_info["success"] and terminated == own_terminated
        for i in range(3):
            np.testing.assert_allclose(
                obs["observation"][1 + i, POS], own_info[f"privileged/block_{i}_pos"] - TABLE_CENTRE
            )
        np.testing.assert_allclose(obs["observation"][0, POS], own_info["proprio/effector_pos"] - TABLE_CENTRE)
        assert obs["observation"][0, AGENT_GRIPPER.start] == own_info["proprio/gripper_opening"][0]
        assert obs["observation"][0, AGENT_GRIPPER.start + 1] == own_info["proprio/gripper_contact"][0]
        assert reward == env.compute_reward(obs["achieved_goal"], obs["desired_goal"], info)
        flags.append(info["is_success"])
        if terminated:
            break
    assert flags[-1] and not flags[0] and reward == 0.0  # a success seen, and the episode ended at it


@needs_ogbench
def test_play_mode_success_equals_ogbenchs_under_its_oracle(make):
    env = make("ecrl/OGBenchCube-v0", n_cubes=2, mode="play").unwrapped
    own = ogbench_env(2, mode="data_collection", terminate_at_goal=False)
    obs, _ = env.reset(seed=5)
    own.reset(seed=5)
    oracle, active, flags = CubePlayOracle(), np.ones(1, bool), []
    oracle.reset([env], [5])
    for _ in range(160):
        action = oracle.act({k: v[None] for k, v in obs.items()}, active)
        # The oracle's new targets come from the adapter's OGBench env: give OGBench's own env the same.
        own._target_block = env.ogbench_env._target_block
        own._data.mocap_pos[:] = env.ogbench_env._data.mocap_pos
        obs, _, terminated, _, info = env.step(action[0])
        *_, own_info = own.step(action[0])
        assert info["is_success"] == own_info["success"] and not terminated
        flags.append(info["is_success"])
    assert any(flags), "the oracle placed no cube in 160 steps"


@needs_ogbench
def test_permuting_the_cubes_permutes_the_rows_and_nothing_else(make):
    perm = np.array([2, 0, 1])
    a = make("ecrl/OGBenchCubeTriple-v0", task_id=2).unwrapped
    b = make("ecrl/OGBenchCubeTriple-v0", task_id=2).unwrapped
    a.reset(seed=4)
    b.ogbench_env._cube_colors = a.ogbench_env._cube_colors.copy()
    b.ogbench_env._cube_colors[:3] = a.ogbench_env._cube_colors[perm]  # cube k of b is cube perm[k] of a
    b.reset(seed=4)
    da, db = a.ogbench_env._data, b.ogbench_env._data
    q = np.arange(14, 14 + 21).reshape(3, 7)
    v = np.arange(14, 14 + 18).reshape(3, 6)
    for name, blocks in (("qpos", q), ("qvel", v), ("qacc_warmstart", v)):
        src, dst = getattr(da, name), getattr(db, name)
        dst[:] = src
        dst[blocks.ravel()] = src[blocks[perm].ravel()]
    db.ctrl[:], db.time = da.ctrl, da.time
    mocap_a, mocap_b = a.ogbench_env._cube_target_mocap_ids, b.ogbench_env._cube_target_mocap_ids
    db.mocap_pos[mocap_b] = da.mocap_pos[np.array(mocap_a)[perm]]
    mujoco.mj_forward(b.ogbench_env._model, db)
    b._prev_effector = a._prev_effector.copy()

    def same(x, y):
        np.testing.assert_allclose(y["observation"][0], x["observation"][0], atol=1e-6)
        np.testing.assert_allclose(y["observation"][1:], x["observation"][1 + perm], atol=1e-6)
        for key in ("achieved_goal", "desired_goal"):
            np.testing.assert_allclose(y[key], x[key][perm], atol=1e-6)

    same(a.observe(), b.observe())
    for action in np.random.default_rng(2).uniform(-1, 1, (15, 5)):
        xa, ra, ta, _, ia = a.step(action)
        xb, rb, tb, _, ib = b.step(action)
        same(xa, xb)
        assert (ra, ta, ia) == (rb, tb, ib)


@needs_ogbench
def test_compute_reward_is_batched(make):
    env = make("ecrl/OGBenchCubeDouble-v0", n_max=3).unwrapped
    obs, _ = env.reset(seed=0)
    achieved = np.broadcast_to(obs["achieved_goal"], (4, 5, 3, obs["achieved_goal"].shape[-1]))
    desired = np.broadcast_to(obs["desired_goal"], achieved.shape).copy()
    desired[0, 0, :2, GOAL_FIELDS["position"]] = achieved[0, 0, :2, GOAL_FIELDS["position"]]
    reward = env.compute_reward(achieved, desired, [{}] * 20)
    assert reward.shape == (4, 5) and reward[0, 0] == 0.0
    assert reward[1, 1] == env.compute_reward(obs["achieved_goal"], obs["desired_goal"], {})


@needs_ogbench
def test_bad_actions_and_options_are_refused(make):
    env = make("ecrl/OGBenchCubeSingle-v0").unwrapped
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(seed=0, options={"task": 1})
    env.reset(seed=0, options={"task_id": 3})
    assert env.spec_.task_id == 3
    with pytest.raises(ValueError, match=r"action must be a finite array of shape \(5,\)"):
        env.step(np.zeros(4))
    with pytest.raises(ValueError, match="finite"):
        env.step(np.full(5, np.nan))
    with pytest.raises(ValueError, match="set_new_target is for play mode"):
        env.set_new_target(0.5)


# ---------------------------------------------------------------------------------------------- datasets
def _ogbench_file(env, path, seeds, steps):
    """An OGBench-format play file, its rows laid out as OGBench's generator writes them, and the
    adapter's own observation rows of the same states."""
    arrays, live = {k: [] for k in ("observations", "actions", "terminals", "qpos", "qvel")}, []
    oracle, active = CubePlayOracle(), np.ones(1, bool)
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        oracle.reset([env], [seed])
        rows = [obs["observation"]]
        for t in range(steps):
            ogb = env.ogbench_env
            arrays["observations"].append(ogb.compute_observation())
            arrays["qpos"].append(ogb._data.qpos.copy())
            arrays["qvel"].append(ogb._data.qvel.copy())
            action = oracle.act({k: v[None] for k, v in obs.items()}, active)
            arrays["actions"].append(action[0])
            arrays["terminals"].append(t == steps - 1)
            if t < steps - 1:
                obs, *_ = env.step(action[0])
                rows.append(obs["observation"])
        live.append(np.stack(rows))
    np.savez_compressed(path, **{k: np.array(v, np.float32 if k != "terminals" else bool) for k, v in arrays.items()})
    return live


@needs_ogbench
def test_ogbench_files_convert_to_the_adapters_rows(make, tmp_path):
    env = make("ecrl/OGBenchCube-v0", n_cubes=2, mode="play").unwrapped
    live = _ogbench_file(env, tmp_path / "cube-double-play-v0.npz", seeds=[1, 2], steps=30)
    episodes = load_ogbench_episodes(tmp_path / "cube-double-play-v0.npz")
    assert len(episodes) == 2
    for ep, rows in zip(episodes, live, strict=True):
        assert ep["observation"].shape == rows.shape == (30, 3, rows.shape[-1]) and ep["action"].shape == (29, 5)
        np.testing.assert_allclose(ep["observation"], rows, atol=2e-5)  # float32 file, OGBench's x10 scaling
        np.testing.assert_array_equal(ep["desired_goal"], ep["achieved_goal"][-1])  # hindsight
        assert ep["is_success"][-1] and ep["reward"][-1] == 0.0

    result = import_ogbench_dataset(tmp_path / "converted", tmp_path / "cube-double-play-v0.npz")
    data = DemoDataset(tmp_path / "converted")
    assert (result.kept, result.steps, data.action_dim) == (2, 58, 5)
    assert data.task(0) == OGBenchCubeTask(2, "play") and data.seeds.tolist() == [-1, -1]
    np.testing.assert_array_equal(data[1].observation, episodes[1]["observation"])


def test_files_that_are_not_ogbench_cube_datasets_are_refused(tmp_path):
    np.savez(tmp_path / "a.npz", observations=np.zeros((4, 37)), actions=np.zeros((4, 5)))
    with pytest.raises(ValueError, match=r"lacks OGBench's keys \['terminals'\]"):
        load_ogbench_episodes(tmp_path / "a.npz")
    np.savez(tmp_path / "b.npz", observations=np.zeros((4, 30)), actions=np.zeros((4, 5)), terminals=np.ones(4))
    with pytest.raises(ValueError, match="not an OGBench cube env's state vectors"):
        load_ogbench_episodes(tmp_path / "b.npz")
    np.savez(tmp_path / "c.npz", observations=np.zeros((4, 37)), actions=np.zeros((4, 5)), terminals=np.zeros(4))
    with pytest.raises(ValueError, match="last row is not terminal"):
        load_ogbench_episodes(tmp_path / "c.npz")
    (tmp_path / "d.npz").write_text("no")
    with pytest.raises(ValueError, match="not a readable OGBench"):
        load_ogbench_episodes(tmp_path / "d.npz")


def _play(**kwargs) -> CollectConfig:
    return CollectConfig(
        **{"env": "ogbench-cube", "play": True, "n_objects": (2,), "episodes": 2, "play_steps": 40, "progress": False}
        | kwargs
    )


@needs_ogbench
def test_play_collection_is_deterministic_and_independent_of_the_batch(tmp_path):
    a = collect_dataset(tmp_path / "a", _play(batch_size=2))
    collect_dataset(tmp_path / "b", _play(batch_size=1))
    assert (a.kept, a.steps, a.seeds) == (2, 80, (0, 2))
    da, db = DemoDataset(tmp_path / "a"), DemoDataset(tmp_path / "b")
    for key in ("observation", "action", "desired_goal", "reward", "is_success"):
        np.testing.assert_array_equal(getattr(da, key), getattr(db, key), err_msg=key)
    assert da.action_dim == 5 and da.task(1) == OGBenchCubeTask(2, "play")
    assert np.abs(np.diff(da.observation[:41, 0, POS], axis=0)).max() > 0.005  # the arm moves
    meta = json.loads((tmp_path / "a" / "meta.json").read_text())
    assert meta["collections"][0]["source"] == "ogbench_play_oracle"

    collect_dataset(tmp_path / "a", _play(episodes=1), append=True)  # continues at seed 2
    whole = collect_dataset(tmp_path / "c", _play(episodes=3, batch_size=3))
    np.testing.assert_array_equal(DemoDataset(tmp_path / "a").action, DemoDataset(whole.path).action)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--play"], "pass --env ogbench-cube with --play"),
        (["--env", "ogbench-cube", "--n-objects", "5", "--play"], "n_cubes must be one of OGBench's sizes"),
        (["--env", "ogbench-cube", "--n-objects", "2"], "pass --play, or a --policy"),
        (["--env", "ogbench-cube", "--play", "--goal", "sort"], "goal, split and pixels are push options"),
        (["--from-ogbench", "x.npz"], "pass --env ogbench-cube"),
    ],
)
def test_cli_refuses_bad_ogbench_options(argv, match, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        collect.main([*argv, "--out", str(tmp_path / "x")])
    err = " ".join(capsys.readouterr().err.replace("│", " ").split())  # tyro boxes and wraps option errors
    assert exit_info.value.code == 2 and match in err


@needs_ogbench
def test_cli_collects_play_data_and_benchmarks(tmp_path, capsys):
    collect.main(
        ["--env", "ogbench-cube", "--n-objects", "1", "--play", "--episodes", "1", "--play-steps", "20"]
        + ["--out", str(tmp_path / "play"), "--no-progress"]
    )
    assert "wrote 1 episodes (20 steps" in capsys.readouterr().out
    from ecrl.scripts import bench

    bench.main(
        ["ogbench", "--n-cubes", "1", "--steps", "10", "--play-steps", "10", "--play-n", "1"]
        + ["--repeats", "1", "--out", str(tmp_path / "bench")]
    )
    result = json.loads((tmp_path / "bench" / "bench_ogbench.json").read_text())
    assert result["steps"][0]["n_cubes"] == 1 and result["steps"][0]["ratio"] > 0 and result["play"]
    assert (tmp_path / "bench" / "README.md").exists() and (tmp_path / "bench" / "steps_per_s.png").exists()
