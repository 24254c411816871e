"""Demonstration datasets: collection (API and ``ecrl-collect``), the on-disk format, windows, errors."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import ecrl.datasets
import ecrl.rollout
from ecrl.datasets import (
    PLACED_CLEARANCE,
    CollectConfig,
    DatasetError,
    DemoDataset,
    add_placed_objects,
    collect_dataset,
)
from ecrl.envs import ENTITY_DIM, GOAL_DIM, ScriptedExpert
from ecrl.envs.layout import ENTITY_FIELDS as F
from ecrl.envs.layout import GOAL_FIELDS
from ecrl.policy import Policy
from ecrl.scripts.collect import main

QUIET = {"progress": False}


def config(**kwargs) -> CollectConfig:
    return CollectConfig(**{"n_objects": (1,), "episodes": 3, "shard_episodes": 2, **QUIET, **kwargs})


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """3 expert episodes with 1 object and 3 with 2 objects (shards of 2: one shard mixes both)."""
    path = tmp_path_factory.mktemp("mixed") / "data"
    result = collect_dataset(path, config(n_objects=(1, 2)))
    return path, result, DemoDataset(path)


def shard_arrays(path) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for shard in sorted(path.glob("shard_*.npz")):
        with np.load(shard, allow_pickle=False) as data:
            out[shard.name] = {k: data[k] for k in data.files}
    return out


class ZeroPolicy:
    """A batch policy that never moves: every episode fails."""

    def act(self, obs):
        return np.zeros((len(obs["observation"]), 2), np.float32)


# ---------------------------------------------------------------------------------------------- collection


def test_collected_episodes_replay_in_the_env(mixed):
    path, result, data = mixed
    assert (result.kept, result.dropped, result.seeds) == (6, 0, (0, 6))
    assert len(data) == 6 and data.n_max == 2
    assert data.n_objects.tolist() == [1, 1, 1, 2, 2, 2]
    assert data.seeds.tolist() == list(range(6))
    for i in (0, 4):
        ep = data[i]
        n, t = ep.n_objects, len(ep)
        assert ep.observation.shape == (t + 1, 1 + n, ENTITY_DIM) and ep.achieved_goal.shape == (t + 1, n, GOAL_DIM)
        assert ep.desired_goal.shape == (n, GOAL_DIM) and ep.action.shape == (t, 2)
        assert ep.success and ep.is_success[-1] and not ep.expert_random.any()
        env = gym.make("ecrl/Push-v0", n_objects=n)
        obs, _ = env.reset(seed=ep.seed)
        assert env.unwrapped.spec_ == ep.task
        np.testing.assert_array_equal(ep.desired_goal, obs["desired_goal"].astype(np.float32))
        np.testing.assert_array_equal(ep.observation[0], obs["observation"].astype(np.float32))
        for k, action in enumerate(ep.action):
            obs, reward, *_, info = env.step(action)
            np.testing.assert_array_equal(ep.observation[k + 1], obs["observation"].astype(np.float32))
            np.testing.assert_array_equal(ep.achieved_goal[k + 1], obs["achieved_goal"].astype(np.float32))
            assert (ep.reward[k], ep.is_success[k]) == (np.float32(reward), info["is_success"])
        env.close()


def test_episodes_keep_exactly_the_allowed_idle_tail(mixed, tmp_path):
    _, _, data = mixed
    for ep in data:
        moving = np.flatnonzero(ep.action.any(-1))
        assert len(ep) - 1 - moving[-1] == 10  # the expert's last 10 actions are "stay", then the episode ends
    short = DemoDataset(collect_dataset(tmp_path / "d", config(episodes=2, idle_steps=0)).path)
    assert all(ep.action[-1].any() and ep.success for ep in short)
    w = short.windows([0], [short.lengths[0] - 1], 3)  # the last action moves; the padding after it does not
    np.testing.assert_array_equal(w["action"][0], [short[0].action[-1], [0, 0], [0, 0]])


def test_same_seed_gives_identical_arrays(tmp_path):
    a = shard_arrays(collect_dataset(tmp_path / "a", config(seed=5)).path)
    b = shard_arrays(collect_dataset(tmp_path / "b", config(seed=5)).path)
    c = shard_arrays(collect_dataset(tmp_path / "c", config(seed=6)).path)
    assert a.keys() == b.keys() and len(a) == 2
    for shard in a:
        assert a[shard].keys() == b[shard].keys()
        for key in a[shard]:
            assert a[shard][key].dtype == b[shard][key].dtype
            assert a[shard][key].tobytes() == b[shard][key].tobytes(), key
    assert a["shard_00000.npz"]["seed"].tolist() == [5, 6] and c["shard_00000.npz"]["seed"].tolist() == [6, 7]
    # episode k resets with seed + k: seed 6 is episode 1 of one collection and episode 0 of the other
    np.testing.assert_array_equal(DemoDataset(tmp_path / "a")[1].action, DemoDataset(tmp_path / "c")[0].action)
    assert not np.array_equal(DemoDataset(tmp_path / "a")[0].action, DemoDataset(tmp_path / "c")[0].action)


def test_append_adds_shards_and_continues_the_seeds(tmp_path):
    path = tmp_path / "d"
    collect_dataset(path, config(episodes=3))
    with pytest.raises(DatasetError, match=r"already holds a dataset \(3 episodes\).*--append"):
        collect_dataset(path, config())
    with pytest.raises(DatasetError, match=r"seeds 2 … 3 overlap seeds 0 … 2.*continue from 3"):
        collect_dataset(path, config(episodes=2, seed=2), append=True)
    result = collect_dataset(path, config(n_objects=(2,), episodes=2), append=True)
    assert result.seeds == (3, 5) and result.shards == ["shard_00002.npz"]
    meta = json.loads((path / "meta.json").read_text())
    assert [s["file"] for s in meta["shards"]] == [f"shard_{i:05d}.npz" for i in range(3)]
    assert (meta["episodes"], meta["next_seed"], len(meta["collections"])) == (5, 5, 2)
    data = DemoDataset(path)
    assert data.seeds.tolist() == list(range(5)) and data.n_objects.tolist() == [1, 1, 1, 2, 2]
    assert meta["steps"] == data.num_steps == sum(len(ep) for ep in data)


def test_only_success_drops_failures_and_records_how_many(tmp_path):
    result = collect_dataset(tmp_path / "drop", config(episodes=2), policy=ZeroPolicy())
    assert (result.kept, result.dropped) == (0, 2)
    meta = json.loads((tmp_path / "drop" / "meta.json").read_text())
    assert (meta["episodes"], meta["dropped"], meta["collections"][0]["source"]) == (0, 2, "policy")
    assert len(DemoDataset(tmp_path / "drop")) == 0
    kept = DemoDataset(collect_dataset(tmp_path / "keep", config(episodes=2, only_success=False), ZeroPolicy()).path)
    assert len(kept) == 2 and not kept.success.any()
    assert kept.lengths.tolist() == [150, 150]  # a failing episode runs to the horizon (50 + 100 N)


def test_expert_random_steps_are_flagged_not_dropped(tmp_path, monkeypatch):
    class Stalling(ScriptedExpert):
        """Marks every 7th action as random (the real expert does so only when it stalls)."""

        def act(self, obs):
            action = super().act(obs)
            self.last_random = self._t % 7 == 0 and action.any()
            return action

    monkeypatch.setitem(ecrl.rollout.EXPERTS, "pusher", Stalling)
    ep = DemoDataset(collect_dataset(tmp_path / "d", config(episodes=1)).path)[0]
    expected = [(k + 1) % 7 == 0 and a.any() for k, a in enumerate(ep.action)]
    assert ep.expert_random.tolist() == expected and any(expected)


class ConstantPolicy:
    """A batch policy that always pushes right at half speed."""

    def act(self, obs):
        return np.tile(np.float32([0.5, 0.0]), (len(obs["observation"]), 1))


def test_action_noise_perturbs_execution_and_records_the_policy_action(tmp_path):
    clean = DemoDataset(collect_dataset(tmp_path / "c", config(only_success=False), ConstantPolicy()).path)
    noisy_config = config(only_success=False, action_noise=0.2)
    noisy = DemoDataset(collect_dataset(tmp_path / "n", noisy_config, ConstantPolicy()).path)
    np.testing.assert_array_equal(noisy.action, np.tile([0.5, 0.0], (noisy.num_steps, 1)))  # the policy's action
    assert noisy.num_steps == clean.num_steps and not noisy.expert_random.any()
    agent = noisy.observation[:, 0, F["position"]]
    assert not np.allclose(agent, clean.observation[:, 0, F["position"]])  # but the noisy one was executed
    again = DemoDataset(collect_dataset(tmp_path / "again", noisy_config, ConstantPolicy()).path)
    np.testing.assert_array_equal(again.observation, noisy.observation)  # seeded by the episodes' seeds


def test_action_noise_leaves_zero_actions_and_the_experts_idle_tail_alone(tmp_path):
    still = dict(episodes=1, only_success=False)
    clean = DemoDataset(collect_dataset(tmp_path / "z", config(**still), ZeroPolicy()).path)
    noisy = DemoDataset(collect_dataset(tmp_path / "zn", config(**still, action_noise=0.5), ZeroPolicy()).path)
    np.testing.assert_array_equal(noisy.observation, clean.observation)  # a zero action is executed as it is
    data = DemoDataset(collect_dataset(tmp_path / "d", config(episodes=2, action_noise=0.05)).path)
    assert len(data) > 0
    for ep in data:  # so the expert's idle steps stay zero and the episode is still cut after 10 of them
        assert len(ep) - 1 - np.flatnonzero(ep.action.any(-1))[-1] == 10


@pytest.mark.parametrize("noise", [-0.1, 1.5])
def test_action_noise_out_of_range_is_refused(noise):
    with pytest.raises(ValueError, match=rf"action_noise must be a standard deviation in \[0, 1\], got {noise}"):
        config(action_noise=noise)


# ---------------------------------------------------------------------------------------------- windows


def test_windows_match_the_episode_and_pad_past_its_end(mixed):
    _, _, data = mixed
    h = 6
    for e in range(len(data)):
        ep = data[e]
        t_end = len(ep)
        for t in (0, t_end // 2, t_end - 3, t_end - 1):
            w = data.windows([e], [t], h, n_max=ep.n_objects)
            k = np.minimum(t + np.arange(h + 1), t_end)
            np.testing.assert_array_equal(w["observation"][0], ep.observation[k])
            np.testing.assert_array_equal(w["achieved_goal"][0], ep.achieved_goal[k])
            inside = t + np.arange(h) < t_end
            np.testing.assert_array_equal(w["valid"][0], inside)
            np.testing.assert_array_equal(w["action"][0, inside], ep.action[t : t + inside.sum()])
            assert not w["action"][0, ~inside].any() and not w["reward"][0, ~inside].any()
            np.testing.assert_array_equal(w["desired_goal"][0], ep.desired_goal)
    # the last state repeats: a window starting at the last step never reaches the next episode
    w = data.windows([0], [len(data[0]) - 1], h)
    assert (w["observation"][0, 1:] == data[0].observation[-1]).all() and w["valid"][0].tolist() == [True] + [False] * 5


def test_windows_pad_entities_to_a_common_n_with_masks(mixed):
    _, _, data = mixed
    w = data.windows([0, 3], [0, 0], 4)  # 1 and 2 objects
    assert w["observation"].shape == (2, 5, 3, ENTITY_DIM) and w["desired_goal"].shape == (2, 2, GOAL_DIM)
    assert w["mask"].tolist() == [[True, True, False], [True, True, True]]
    assert w["goal_mask"].tolist() == [[True, False], [True, True]]
    assert not w["observation"][0, :, 2].any() and not w["desired_goal"][0, 1].any()
    assert (w["observation"][..., 0] > 0.5).tolist() == np.repeat(w["mask"][:, None], 5, 1).tolist()
    one = data.windows([0, 1], [0, 0], 4)  # only 1-object episodes: N = 2 unless asked for more
    assert one["observation"].shape[2] == 2
    wide = data.windows([0, 3], [0, 0], 4, n_max=5)
    assert wide["observation"].shape == (2, 5, 6, ENTITY_DIM) and wide["goal_mask"].sum(1).tolist() == [1, 2]
    with pytest.raises(ValueError, match="n_max = 1 is below the 2 objects"):
        data.windows([3], [0], 4, n_max=1)


def test_sample_and_iterate_windows(mixed):
    _, _, data = mixed
    a, b = data.sample_windows(32, 8, rng=3), data.sample_windows(32, 8, rng=np.random.default_rng(3))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["observation"].shape == (32, 9, 3, ENTITY_DIM) and a["action"].shape == (32, 8, 2)
    assert a["valid"][:, 0].all() and (a["start"] < data.lengths[a["episode"]]).all()
    starts = {(e, t) for w in data.iter_windows(10, 4, rng=0) for e, t in zip(w["episode"], w["start"], strict=True)}
    assert starts == {(e, t) for e in range(len(data)) for t in range(data.lengths[e])}
    with pytest.raises(ValueError, match="inside their episodes"):
        data.windows([0], [data.lengths[0]], 4)


# ---------------------------------------------------------------------------------------------- errors


@pytest.fixture
def copy(mixed, tmp_path):
    """A writable copy of the mixed dataset."""
    import shutil

    return shutil.copytree(mixed[0], tmp_path / "copy")


def edit_meta(path, **changes) -> None:
    meta = json.loads((path / "meta.json").read_text())
    meta.update(changes)
    (path / "meta.json").write_text(json.dumps(meta))


def test_a_missing_or_foreign_directory_is_refused(tmp_path):
    with pytest.raises(DatasetError, match="does not exist: expected a dataset directory"):
        DemoDataset(tmp_path / "nothing")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(DatasetError, match="has no meta.json"):
        DemoDataset(tmp_path / "other")
    with pytest.raises(DatasetError, match="is not a dataset .* refusing to write"):
        collect_dataset(tmp_path / "other", config())


def test_another_format_version_or_layout_is_refused(copy):
    edit_meta(copy, version=2)
    with pytest.raises(DatasetError, match="expected format version 1, found 2"):
        DemoDataset(copy)
    edit_meta(copy, version=1, entity_dim=ENTITY_DIM + 1)
    with pytest.raises(DatasetError, match=f"entity_dim = {ENTITY_DIM + 1}.*layout has {ENTITY_DIM}"):
        DemoDataset(copy)
    (copy / "meta.json").write_text("{not json")
    with pytest.raises(DatasetError, match="not valid JSON"):
        DemoDataset(copy)


def test_a_corrupt_or_missing_shard_is_refused(copy):
    shard = copy / "shard_00001.npz"
    shard.write_bytes(shard.read_bytes()[:200])
    with pytest.raises(DatasetError, match="shard_00001.npz is not a readable npz shard"):
        DemoDataset(copy)
    shard.unlink()
    with pytest.raises(DatasetError, match="shard_00001.npz is listed in .*meta.json but missing"):
        DemoDataset(copy)


def test_a_shard_that_disagrees_with_meta_or_itself_is_refused(copy):
    meta = json.loads((copy / "meta.json").read_text())
    meta["shards"][0]["episodes"] = 3
    (copy / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match=r"shard_00000.npz does not match its entry .*'episodes': 3.*'episodes': 2"):
        DemoDataset(copy)
    meta["shards"][0]["episodes"] = 2
    (copy / "meta.json").write_text(json.dumps(meta))
    with np.load(copy / "shard_00000.npz") as data:
        arrays = {k: data[k] for k in data.files}
    arrays["action"] = arrays["action"][:-1]
    np.savez_compressed(copy / "shard_00000.npz", **arrays)
    with pytest.raises(DatasetError, match=r"action should have shape \(\d+, 2\)"):
        DemoDataset(copy)
    del arrays["seed"]
    np.savez_compressed(copy / "shard_00000.npz", **arrays)
    with pytest.raises(DatasetError, match=r"lacks arrays \['seed'\]"):
        DemoDataset(copy)


# ---------------------------------------------------------------------------------------------- the CLI


def test_cli_collects_appends_and_refuses_to_overwrite(tmp_path, capsys):
    out = str(tmp_path / "cli")
    main(["--out", out, "--n-objects", "1", "--episodes", "2", "--no-progress"])
    assert "wrote 2 episodes" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", out, "--n-objects", "1", "--episodes", "2", "--no-progress"])
    assert exit_info.value.code == 2 and "--append" in capsys.readouterr().err
    main(["--out", out, "--n-objects", "2", "--episodes", "1", "--no-progress", "--append"])
    data = DemoDataset(out)
    assert len(data) == 3 and data.seeds.tolist() == [0, 1, 2]
    record = data.meta["collections"][1]
    assert record["command"].startswith("ecrl-collect --out") and record["config"]["n_objects"] == [2]
    with pytest.raises(SystemExit):
        main(["--out", out, "--goal", "juggle", "--no-progress", "--append"])
    assert "unknown goal kind 'juggle'" in capsys.readouterr().err


def test_cli_rolls_out_a_policy_checkpoint(tmp_path):
    from ecrl.policies.actor import EntityActorModule

    torch.manual_seed(0)
    kwargs = {"net": {"arch": "eit", "width": 8}, "action_dim": 2, "stochastic": False}
    builder = "entity_actor"
    Policy(EntityActorModule(**kwargs), -np.ones(2), np.ones(2), {"arch": "eit"}, builder, kwargs).save(tmp_path / "p")
    out = tmp_path / "d"
    args = ["--out", str(out), "--policy", str(tmp_path / "p"), "--n-objects", "1", "--episodes", "1"]
    main([*args, "--no-only-success", "--no-progress"])
    main([*args, "--no-only-success", "--no-progress", "--append"])
    data = DemoDataset(out)
    record = data.meta["collections"][0]
    assert record["source"] == "policy" and record["policy"] == str(tmp_path / "p") and record["arch"] == "eit"
    assert len(data) == 2 and data.seeds.tolist() == [0, 1] and not data.expert_random.any()
    assert data[0].action.any() and not np.array_equal(data[0].action, data[1].action)


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    text = capsys.readouterr().out
    assert exit_info.value.code == 0
    for option in ("--policy", "--append", "--only-success", "--idle-steps", "--split", "--n-objects", "--seed"):
        assert option in text


def test_seeds_reaching_the_evaluation_seeds_are_warned_about(tmp_path):
    from ecrl.evaluation import EVAL_SEED

    with pytest.warns(UserWarning, match="reach the evaluation seeds"):
        collect_dataset(tmp_path / "d", config(episodes=1, seed=EVAL_SEED))


def test_add_placed_objects_adds_still_objects_at_their_goals_out_of_the_way(mixed):
    _, _, dataset = mixed
    rng = np.random.default_rng(0)
    batch = dataset.sample_windows(64, 4, rng)
    out = add_placed_objects(batch, rng, 2)
    added = out["n_objects"] - batch["n_objects"]
    assert added.min() >= 0 and added.max() <= 2 and added.sum() > 0
    rows = batch["observation"].shape[2]
    assert (
        out["observation"].shape[2] == rows + 2 and out["desired_goal"].shape[1] == batch["desired_goal"].shape[1] + 2
    )
    xy = slice(F["position"].start, F["position"].start + 2)
    for w in np.flatnonzero(added):
        n, k = int(batch["n_objects"][w]), int(added[w])
        np.testing.assert_array_equal(out["observation"][w, :, : 1 + n], batch["observation"][w, :, : 1 + n])  # as was
        assert out["mask"][w].sum() == 1 + n + k and out["goal_mask"][w].sum() == n + k
        new = out["observation"][w, :, 1 + n : 1 + n + k]
        np.testing.assert_array_equal(new, np.broadcast_to(new[:1], new.shape))  # left alone
        assert np.abs(new[..., F["velocity"]]).max() == 0
        goals = out["desired_goal"][w, n : n + k]
        np.testing.assert_allclose(goals[:, GOAL_FIELDS["position"]], new[0, :, F["position"]])  # already placed
        others = batch["observation"][w][:, batch["mask"][w], xy].reshape(-1, 2)
        for spot in new[0, :, xy]:
            assert np.linalg.norm(others - spot, axis=1).min() >= PLACED_CLEARANCE
    ranked = dict(batch, desired_goal=batch["desired_goal"].copy())
    ranked["desired_goal"][..., GOAL_FIELDS["rank"]] = 1.0
    assert (add_placed_objects(ranked, rng, 2)["n_objects"] == batch["n_objects"]).all()  # towers keep their order
    with pytest.raises(ValueError, match="most must be >= 0"):
        add_placed_objects(batch, rng, -1)
