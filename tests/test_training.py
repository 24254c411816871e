"""ecrl-train: run directories, checkpoints without pickle, --resume, demonstrations, config errors."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import ecrl
from ecrl.policies.nets import NetConfig
from ecrl.policies.train import TrainConfig, build_model, load_checkpoint, train
from ecrl.scripts.train import main


def tiny(tmp_path, **kw) -> TrainConfig:
    base = dict(
        n_objects=1,
        steps=400,
        net=NetConfig(width=8, heads=1),
        batch_size=16,
        eval_every=0,
        checkpoint_every=200,
        runs_dir=tmp_path,
        name="run",
        progress=False,
        utd=0.25,
        demos=0,
        bc_steps=0,
        dagger_iterations=0,
        bc_weight=0.0,
        actor_warmup=0,
        actor_lr_scale=1.0,
    )
    return TrainConfig(**{**base, **kw})


def test_run_directory_checkpoint_and_resume(tmp_path):
    config = tiny(tmp_path, steps=400)
    result = train(config)
    run = result.run_dir
    assert result.env_steps == 400
    assert json.loads((run / "config.json").read_text())["steps"] == 400
    assert any((run / "tb").glob("events.out.tfevents.*")) and (run / "tb" / "progress.csv").exists()
    latest = run / "checkpoints" / "latest"
    assert {"policy.json", "policy.safetensors", "training.json", "training.safetensors", "replay.npz"} <= {
        p.name for p in latest.iterdir()
    }
    # Pickle-free: safetensors + JSON + an npz of plain arrays.
    assert any(k.startswith("opt.critic.") for k in load_file(str(latest / "training.safetensors")))
    with np.load(latest / "replay.npz", allow_pickle=False) as replay:
        assert len(replay["actions"]) == 400

    # Resume the finished run with a larger --steps: it extends, and the step counter continues from 400.
    before = ecrl.load(latest)
    resumed = train(tiny(tmp_path, steps=600, net=NetConfig(width=64)), resume=run)  # the run's own width stays
    assert resumed.env_steps == 600
    assert json.loads((run / "checkpoints" / "latest" / "training.json").read_text())["num_timesteps"] == 600
    assert json.loads((run / "config.json").read_text())["steps"] == 400  # the run's config file stays as started
    sessions = [json.loads(line) for line in (run / "sessions.jsonl").read_text().splitlines()]
    assert [s["start_step"] for s in sessions if "start_step" in s] == [0, 400] and sessions[2]["resumed"]
    assert [s["end_step"] for s in sessions if "end_step" in s] == [400, 600]
    # Training went on from the checkpoint: the policy changed.
    obs = {"observation": np.zeros((2, 20), np.float32), "desired_goal": np.zeros((1, 14), np.float32)}
    obs["observation"][:, 0] = obs["desired_goal"][:, 0] = 1
    assert not np.allclose(before.act(obs), ecrl.load(run).act(obs))


def test_checkpoint_restores_networks_optimizers_and_buffer(tmp_path):
    config = tiny(tmp_path, steps=300, checkpoint_every=0)
    run = train(config).run_dir
    saved = load_file(str(run / "checkpoints" / "latest" / "training.safetensors"))
    fresh = build_model(config, _vec_env(config))
    load_checkpoint(fresh, run / "checkpoints" / "latest")
    for k, v in fresh.policy.state_dict().items():
        torch.testing.assert_close(v, saved[f"policy.{k}"])
    assert fresh.num_timesteps == 300
    state = fresh.critic.optimizer.state_dict()["state"]
    assert state and all(int(s["step"]) > 0 for s in state.values())
    assert fresh.replay_buffer.pos == 300


def _vec_env(config):
    from stable_baselines3.common.vec_env import DummyVecEnv

    from ecrl.policies.train import _make_env

    return DummyVecEnv([lambda: _make_env(config)])


def test_demonstrations_seed_the_buffer_and_pretrain(tmp_path):
    result = train(tiny(tmp_path, steps=50, demos=2, bc_steps=5, bc_weight=1.0, actor_warmup=20, checkpoint_every=0))
    assert result.demo_success == 1.0 and result.bc_loss is not None
    with np.load(result.run_dir / "checkpoints" / "latest" / "replay.npz", allow_pickle=False) as replay:
        assert len(replay["actions"]) == 2 * 150 + 50  # two expert episodes, then 50 RL steps


def test_imitation_logs_its_cloning_to_tensorboard_over_every_round(tmp_path, monkeypatch, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import ecrl.policies.train as train_module

    monkeypatch.setattr(train_module, "BC_LOG_EVERY", 4)
    config = tiny(tmp_path, steps=20, demos=2, bc_steps=6, dagger_iterations=1, dagger_episodes=1, dagger_steps=5)
    run_dir = train(config).run_dir
    points: dict[str, list] = {}
    for events in sorted((run_dir / "tb").glob("events.*")):
        acc = EventAccumulator(str(events))
        acc.Reload()
        for tag in ("imitation/bc_loss", "time/bc_steps_per_s"):
            if tag in acc.Tags()["scalars"]:
                points.setdefault(tag, []).extend(acc.Scalars(tag))
    # every 4 steps and at each round's end, numbered over both rounds: BC 1-6, then DAgger 7-11
    assert [p.step for p in points["imitation/bc_loss"]] == [4, 6, 10, 11]
    assert all(np.isfinite(p.value) and p.value > 0 for p in points["imitation/bc_loss"])
    assert [p.step for p in points["time/bc_steps_per_s"]] == [4, 6, 10, 11]
    assert all(p.value > 0 for p in points["time/bc_steps_per_s"])
    out = capsys.readouterr().out
    assert "imitation round 0: 6 cloning steps" in out and "imitation round 1: 5 cloning steps" in out


def test_a_run_that_dies_when_rl_starts_resumes_after_imitation(tmp_path, monkeypatch):
    import ecrl.policies.train as train_module

    class DiesInRL(train_module.TD3):
        def learn(self, *args, **kwargs):
            raise RuntimeError("killed at the start of RL")

    config = tiny(tmp_path, steps=40, demos=2, bc_steps=5, dagger_iterations=1, dagger_episodes=1, dagger_steps=5)
    config.bc_weight, config.actor_warmup = 1.0, 20
    monkeypatch.setitem(train_module.ALGOS, "td3", DiesInRL)
    with pytest.raises(RuntimeError, match="killed"):
        train(config)
    run = tmp_path / "run"
    latest = run / "checkpoints" / "latest"
    assert json.loads((latest / "training.json").read_text())["num_timesteps"] == 0
    grown = train_module.Demos.load(run / "imitation" / train_module.DEMOS_FILE)
    expert_only = train_module.collect_demos(lambda: train_module._make_env(config), 2, seed=2_000_000, progress=False)
    assert grown.episodes == 2 and len(grown) > len(expert_only)  # plus the DAgger round's labels

    # Resumed, imitation is not run again: RL starts from the imitation weights and the grown demos.
    monkeypatch.setitem(train_module.ALGOS, "td3", train_module.TD3)
    monkeypatch.setattr(train_module, "pretrain_actor", lambda *a, **k: pytest.fail("imitation ran again"))
    monkeypatch.setattr(train_module, "collect_demos", lambda *a, **k: pytest.fail("demos collected again"))
    imitation = load_file(str(latest / "training.safetensors"))
    seen = {}
    real_load = train_module.load_checkpoint

    def spy(model, ckpt):
        real_load(model, ckpt)
        seen["actor"] = {k: v.clone() for k, v in model.actor.state_dict().items()}
        seen["buffer"] = model.replay_buffer.pos

    monkeypatch.setattr(train_module, "load_checkpoint", spy)
    resumed = train(config, resume=run)
    assert resumed.env_steps == 40
    for k, v in seen["actor"].items():
        torch.testing.assert_close(v, imitation[f"policy.actor.{k}"])
    assert seen["buffer"] == 2 * 150  # the expert's episodes, restored from replay.npz


@pytest.mark.parametrize(
    "dies_after", [2, 4, 5]
)  # in the first cloning, after a DAgger round's rollouts, within its cloning
def test_a_run_killed_in_imitation_resumes_it_where_it_stopped(tmp_path, monkeypatch, dies_after):
    import ecrl.policies.train as train_module

    kw = dict(steps=20, demos=2, bc_steps=6, dagger_iterations=2, dagger_episodes=1, dagger_steps=4, checkpoint_every=2)
    kw.update(bc_weight=1.0, actor_warmup=20)
    reference = train(tiny(tmp_path / "reference", **kw))

    # Checkpoints of imitation: after the demos (1), cloning steps 2 and 4 (2, 3), DAgger round 1's rollouts (4)
    # and its cloning step 2 (5), round 2's rollouts (6) and cloning step 2 (7). The run dies after the k-th.
    saves, real_save = [], train_module.ImitationCheckpoint.save

    def dies(self, *args, **kwargs):
        real_save(self, *args, **kwargs)
        saves.append(json.loads(self.state.read_text()))
        if len(saves) == dies_after:
            raise RuntimeError("killed in imitation")

    monkeypatch.setattr(train_module.ImitationCheckpoint, "save", dies)
    with pytest.raises(RuntimeError, match="killed in imitation"):
        train(tiny(tmp_path / "killed", **kw))
    run = tmp_path / "killed" / "run"
    stopped = json.loads((run / train_module.IMITATION_STATE).read_text())
    assert stopped["round"] == {2: 0, 4: 1, 5: 1}[dies_after]
    assert (stopped["bc"] or {}).get("step") == {2: 2, 4: None, 5: 2}[dies_after]
    assert not (run / "imitation").exists() and not (run / "checkpoints" / "latest").exists()

    # Resumed: the demonstrations are not collected again, and imitation ends where the uninterrupted run's did.
    monkeypatch.setattr(train_module.ImitationCheckpoint, "save", real_save)
    monkeypatch.setattr(train_module, "collect_demos", lambda *a, **k: pytest.fail("demos collected again"))
    resumed = train(tiny(tmp_path / "killed", **kw), resume=run)
    assert resumed.env_steps == 20 and resumed.bc_loss == pytest.approx(reference.bc_loss, rel=1e-6)
    assert resumed.demo_success == reference.demo_success
    want = load_file(str(reference.run_dir / "imitation" / "policy.safetensors"))
    got = load_file(str(run / "imitation" / "policy.safetensors"))
    assert want.keys() == got.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=0)
    grown, grown_there = (
        train_module.Demos.load(d / "imitation" / train_module.DEMOS_FILE) for d in (run, reference.run_dir)
    )
    np.testing.assert_array_equal(grown.actions, grown_there.actions)
    with np.load(run / "checkpoints" / "latest" / "replay.npz", allow_pickle=False) as replay:
        assert len(replay["actions"]) == 2 * 150 + 20  # the expert's episodes came back with the buffer
    assert not (run / "checkpoints" / "imitation").exists()  # superseded by RL's checkpoint
    sessions = [json.loads(line) for line in (run / "sessions.jsonl").read_text().splitlines()]
    assert [s.get("resumed") for s in sessions if "start_step" in s] == [False, True]


def test_an_imitation_checkpoint_keeps_only_the_demonstrations_it_needs(tmp_path):
    import ecrl.policies.train as train_module

    result = train(
        tiny(
            tmp_path,
            steps=10,
            demos=2,
            bc_steps=4,
            dagger_iterations=1,
            dagger_episodes=1,
            dagger_steps=4,
            checkpoint_every=2,
            bc_weight=1.0,
            actor_warmup=10,
            eval_every=0,
        ),
    )
    assert not (result.run_dir / "checkpoints" / "imitation").exists()
    checkpoint = train_module.ImitationCheckpoint(tmp_path / "other")
    demos = train_module.Demos.load(result.run_dir / "imitation" / train_module.DEMOS_FILE)
    actor = torch.nn.Linear(2, 2)
    for round_ in (0, 1, 2):
        checkpoint.save_demos(demos, round_)
        checkpoint.save(actor, round_, None, None)
        assert sorted(p.name for p in checkpoint.root.glob("demos_*.npz")) == [f"demos_{round_}.npz"]
    assert checkpoint.load(actor, None)[0] == 2


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(n_objects=0), "n_objects"),
        (dict(steps=0), "steps"),
        (dict(bc_weight=1.0), "demonstrations"),
        (dict(utd=0), "utd"),
    ],
)
def test_bad_config_is_refused(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        tiny(tmp_path, **kw)


def test_a_resumed_run_continues_its_progress_csv(tmp_path):
    """Each session of a run opens tb/progress.csv again: the rows of the earlier sessions stay (SB3's own CSV
    format truncated them), and a key new in this session widens the old rows with empty cells."""
    from ecrl.policies.train import _run_logger

    folder = tmp_path / "tb"
    for session, rows in enumerate(
        ([{"steps": 1, "loss": 0.5}, {"steps": 2, "loss": 0.25}], [{"steps": 3, "loss": 0.125}])
    ):
        logger = _run_logger(folder)
        for row in rows:
            for key, value in row.items():
                logger.record(key, value)
            if session == 1:
                logger.record("eval/success", 1.0)
            logger.dump(row["steps"])
        logger.close()
    lines = (folder / "progress.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert sorted(header) == ["eval/success", "loss", "steps"]
    table = [dict(zip(header, line.split(","), strict=True)) for line in lines[1:]]
    assert [r["steps"] for r in table] == ["1", "2", "3"]
    assert [r["loss"] for r in table] == ["0.5", "0.25", "0.125"]
    assert [r["eval/success"] for r in table] == ["", "", "1.0"]
    with open(folder / "progress.csv", "a") as f:  # killed while writing a row
        f.write("4,0.0")
    logger = _run_logger(folder)
    logger.record("steps", 5)
    logger.dump(5)
    logger.close()
    *_, partial, last = (folder / "progress.csv").read_text().splitlines()
    assert partial == "4,0.0"  # left as it was, and the next row starts on a line of its own
    assert dict(zip(header, last.split(","), strict=True)) == {"steps": "5", "loss": "", "eval/success": ""}


@pytest.mark.parametrize("n_envs", [1, 3])
def test_periodic_evaluation_falls_on_the_same_steps_after_a_resume(tmp_path, monkeypatch, n_envs):
    """A run resumed between two evaluations evaluates at the next multiple of eval_every, as the same run
    without the interruption does (before: eval_every after the resume, so a 16k run resumed at 10k never evaluated
    at 16k), and with several envs at the first step past each multiple."""
    import ecrl.policies.train as train_module

    config = tiny(tmp_path, eval_every=8000)
    seen: list[int] = []
    monkeypatch.setattr(
        train_module, "run_periodic_eval", lambda model, config, logger: seen.append(model.num_timesteps)
    )

    def steps(start: int, end: int) -> list[int]:
        callback = train_module.PeriodicEvalCallback(config)
        callback.model = type("Model", (), {"num_timesteps": start, "logger": None})()
        callback._on_training_start()
        before = len(seen)
        for now in range(start + n_envs, end + 1, n_envs):
            callback.model.num_timesteps = now
            callback._on_step()
        return seen[before:]

    whole = steps(0, 16000 + n_envs)
    assert whole == [-(-8000 // n_envs) * n_envs, -(-16000 // n_envs) * n_envs]
    first = steps(0, 10002 - 10002 % n_envs)
    assert first + steps(10002 - 10002 % n_envs, 16000 + n_envs) == whole


def test_existing_run_dir_and_missing_resume_are_clear_errors(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(FileExistsError, match="--resume"):
        train(tiny(tmp_path))
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        train(tiny(tmp_path), resume=tmp_path / "run")


def test_cli_help_documents_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for option in ("--n-objects", "--algo", "--arch", "--steps", "--n-envs", "--device", "--resume", "--demos"):
        assert option in out
    assert "Budget: environment steps" in out


def test_dagger_grows_the_dataset():
    import gymnasium as gym

    from ecrl.policies.actor import EntityActorModule
    from ecrl.policies.demos import collect_demos, dagger

    make = lambda: gym.make("ecrl/Push-v0", n_objects=1)  # noqa: E731
    demos = collect_demos(make, 2, seed=0, progress=False)
    n = len(demos)
    net = EntityActorModule({"width": 8, "heads": 1}, action_dim=2, stochastic=False)
    before = [p.detach().clone() for p in net.parameters()]
    grown = dagger(net, make, demos, iterations=1, episodes=2, steps=3, batch_size=8, progress=False)
    # An untrained actor never succeeds, so each of its 2 x 150 states is labelled by the expert,
    # except where the expert would take a random step out of a stall (no label there).
    assert n + 150 < len(grown) <= n + 2 * 150
    assert np.abs(grown.actions).max() <= 1.0 and np.abs(grown.actions[n:]).sum() > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
