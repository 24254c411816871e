"""Learning on the Fetch arm: its scripted expert behind the batch interface, demonstrations collected from it,
evaluation on its skills, and a planner trained on them (`--env fetch` of ecrl-collect and ecrl-eval)."""

import json

import gymnasium as gym
import numpy as np
import pytest

from ecrl.collect import CollectConfig, collect_dataset
from ecrl.datasets import DemoDataset
from ecrl.evaluation import ExpertPolicy, evaluate


def test_the_fetch_expert_policy_acts_with_the_arms_4d_actions_and_refuses_the_pusher():
    envs = [gym.make("ecrl/FetchPickPlace-v0", n_objects=2) for _ in range(2)]
    obs = [env.reset(seed=s)[0] for s, env in enumerate(envs)]
    policy = ExpertPolicy(embodiment="fetch")
    policy.reset(envs, [0, 1])
    actions = policy.act({k: np.stack([o[k] for o in obs]) for k in obs[0]})
    assert actions.shape == (2, 4) and actions.dtype == np.float32 and np.abs(actions).max() <= 1
    assert policy.action_dim == 4 and "embodiment='fetch'" in repr(policy)
    with pytest.raises(ValueError, match="no scripted expert for embodiment 'arm'"):
        ExpertPolicy(embodiment="arm")
    with pytest.raises(ValueError, match="drives"):  # the pusher's expert on the arm
        ExpertPolicy().reset(envs[:1], [0])
    for env in envs:
        env.close()


def test_collect_config_of_the_fetch_arm_checks_its_skill_and_size():
    config = CollectConfig(env="fetch", n_objects=(2,))
    assert config.skill == "pick_place" and config.action_dim == 4
    with pytest.raises(ValueError, match="unknown Fetch skill 'throw'"):
        CollectConfig(env="fetch", skill="throw")
    with pytest.raises(ValueError, match="holds 1 … 8 objects"):
        CollectConfig(env="fetch", n_objects=(9,))
    with pytest.raises(ValueError, match="pass --env fetch"):
        CollectConfig(skill="stack")


@pytest.fixture(scope="module")
def fetch_data(tmp_path_factory):
    """Four pick-and-place demonstrations with one object, from the arm's scripted expert."""
    path = tmp_path_factory.mktemp("fetch") / "pick_place1"
    config = CollectConfig(env="fetch", skill="pick_place", n_objects=(1,), episodes=4, batch_size=2, progress=False)
    result = collect_dataset(path, config)
    return path, result


def test_collected_fetch_demonstrations_are_the_experts_episodes(fetch_data):
    path, result = fetch_data
    assert result.kept + result.dropped == 4 and result.kept >= 3
    meta = json.loads((path / "meta.json").read_text())
    assert meta["action_dim"] == 4 and meta["collections"][0]["config"]["skill"] == "pick_place"
    data = DemoDataset(path)
    episode = data[0]
    assert episode.action.shape[1] == 4 and episode.task.embodiment == "fetch" and episode.task.skill == "pick_place"
    # The same seed replays the same episode: the expert's actions reproduce the stored observations.
    env = gym.make("ecrl/FetchPickPlace-v0", n_objects=1)
    obs, _ = env.reset(seed=episode.seed)
    np.testing.assert_allclose(obs["observation"], episode.observation[0], atol=1e-6)
    for t in range(5):
        obs, *_ = env.step(episode.action[t])
    np.testing.assert_allclose(obs["observation"], episode.observation[5], atol=1e-5)
    env.close()


def test_evaluate_runs_the_fetch_skills_with_their_ids_horizons_and_checks():
    report = evaluate(ExpertPolicy(embodiment="fetch"), [1], env="fetch", episodes=2, progress=False)
    (result,) = report.results
    assert report.settings["skill"] == "pick_place" and result.horizon == 150
    assert result.success == [True, True]  # the expert places one object on these seeds
    stack = evaluate(ExpertPolicy(embodiment="fetch"), [2], env="fetch", skill="stack", episodes=1, progress=False)
    assert stack.settings["skill"] == "stack"
    with pytest.raises(ValueError, match="2-D ones"):  # the pusher's expert on the arm
        evaluate(ExpertPolicy(), [1], env="fetch", episodes=1, progress=False)
    with pytest.raises(ValueError, match="env='fetch'"):
        evaluate(ExpertPolicy(), [1], skill="pick_place", episodes=1, progress=False)
    with pytest.raises(ValueError, match="in 1 … 8"):
        evaluate(ExpertPolicy(embodiment="fetch"), [9], env="fetch", episodes=1, progress=False)
    with pytest.raises(ValueError, match="unknown Fetch skill"):
        evaluate(ExpertPolicy(embodiment="fetch"), [1], env="fetch", skill="throw", episodes=1, progress=False)


def test_ecrl_eval_runs_the_fetch_expert_and_refuses_a_skill_on_push(tmp_path, capsys):
    from ecrl.scripts.eval import main

    out = tmp_path / "fetch_expert"
    main(
        ["expert", "--env", "fetch", "--skill", "push", "--objects", "1", "--episodes", "1", "--no-progress"]
        + ["--out", str(out)]
    )
    data = json.loads((out / "eval.json").read_text())
    assert data["settings"]["env"] == "fetch" and data["settings"]["skill"] == "push"
    with pytest.raises(SystemExit):
        main(["expert", "--skill", "stack", "--objects", "1", "--episodes", "1", "--out", str(tmp_path / "x")])
    assert "pass --env fetch" in capsys.readouterr().err


def test_a_planner_trained_on_fetch_data_plans_the_arms_spatial_state_and_is_evaluated_there(fetch_data, tmp_path):
    from diffusion_helpers import tiny_train_config

    import ecrl
    from ecrl.diffusion.train import train
    from ecrl.scripts.eval import main

    path, _ = fetch_data
    result = train(tiny_train_config(path, tmp_path / "runs"))
    policy = ecrl.load(result.run_dir)
    assert policy.meta["env"] == "fetch" and policy.meta["skill"] == "pick_place"
    assert policy.kwargs["denoiser"]["state"] == "spatial" and policy.kwargs["denoiser"]["action_dim"] == 4
    for n in (1, 3):  # trained on one object, it acts on three
        env = gym.make("ecrl/FetchPickPlace-v0", n_objects=n)
        obs, _ = env.reset(seed=7)
        policy.reset()
        for _ in range(3):
            action = policy.act(obs)
            assert action.shape == (4,) and np.isfinite(action).all()
            obs = env.step(action)[0]
        env.close()
    out = tmp_path / "ev"
    main([str(result.run_dir), "--objects", "1", "--episodes", "1", "--no-progress", "--out", str(out)])
    data = json.loads((out / "eval.json").read_text())
    assert data["settings"]["env"] == "fetch" and data["expert"]["settings"]["skill"] == "pick_place"
