"""The receding-horizon diffusion planner behind the policy API, and ``ecrl-train-diffusion``."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from diffusion_helpers import resume_to_six_steps, rollout, tiny_train_config

import ecrl
import ecrl.envs  # noqa: F401  (registers ecrl/Push*)
from ecrl.diffusion import DenoiserConfig
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.diffusion.train import planner_policy, train
from ecrl.entities import ENTITY_DIM
from ecrl.focus import Focus, focus_order
from ecrl.scripts.train_diffusion import main

TINY = DenoiserConfig(width=16, heads=2, blocks=1, horizon=4, diffusion_steps=20)


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    planner = DiffusionPlanner(TINY, sampling_steps=3, replan_every=2, seed=5)
    return planner_policy(planner, {"arch": "diffusion"})


def test_planner_save_load_round_trip_gives_identical_actions(policy, tmp_path):
    policy.save(tmp_path / "planner")
    loaded = ecrl.load(tmp_path / "planner")
    assert isinstance(loaded.module, DiffusionPlanner)
    assert loaded.module.replan_every == 2 and loaded.module.sampling_steps == 3
    np.testing.assert_array_equal(rollout(policy, 2, 6), rollout(loaded, 2, 6))


@pytest.mark.parametrize("n_objects", [1, 3, 8])
def test_planner_acts_for_any_number_of_objects(policy, n_objects):
    actions = rollout(policy, n_objects, 3)
    assert actions.shape == (3, 2)
    assert np.isfinite(actions).all() and np.abs(actions).max() <= 1.0


def test_reset_makes_episodes_repeatable(policy):
    np.testing.assert_array_equal(rollout(policy, 2, 5, seed=3), rollout(policy, 2, 5, seed=3))


def test_planner_replans_every_k_steps(policy, monkeypatch):
    planner = policy.module
    calls = []
    original = planner.plan
    monkeypatch.setattr(planner, "plan", lambda obs: calls.append(1) or original(obs))
    rollout(policy, 1, 7)
    assert len(calls) == 4  # steps 0, 2, 4, 6 with replan_every = 2


def test_planner_executes_its_plan_in_order(policy):
    env = gym.make("ecrl/Push-v0", n_objects=2)
    obs, _ = env.reset(seed=1)
    policy.reset()
    batch = {k: torch.as_tensor(v[None]) for k, v in obs.items()}
    plan = policy.module.plan(batch)  # the first plan after a reset uses the same noise
    policy.reset()
    first, second = policy.module(batch), policy.module(batch)
    torch.testing.assert_close(first, plan.actions[:, 0])
    torch.testing.assert_close(second, plan.actions[:, 1])


def test_planner_rejects_bad_settings():
    with pytest.raises(ValueError, match="replan_every"):
        DiffusionPlanner(TINY, replan_every=TINY.horizon + 1)
    with pytest.raises(ValueError, match="sampling_steps"):
        DiffusionPlanner(TINY, sampling_steps=TINY.diffusion_steps + 1)


def test_a_planner_behind_the_focus_plans_over_its_focus_only(policy, monkeypatch):
    env = gym.make("ecrl/Push-v0", n_objects=6)
    obs, _ = env.reset(seed=2)
    planned = []
    plan = policy.module.plan
    monkeypatch.setattr(policy.module, "plan", lambda batch: planned.append(batch["observation"].shape) or plan(batch))
    focused = Focus(policy, k=2)
    focused.reset()
    action = focused.act(obs)
    assert planned == [(1, 3, ENTITY_DIM)]  # the agent and two objects
    batch = {k: v[None] for k, v in obs.items()}
    policy.reset()
    np.testing.assert_array_equal(
        action, policy.act(focused.cut(batch, focus_order(batch["observation"], batch["desired_goal"])[:, :2]))[0]
    )


tiny_config = tiny_train_config


def test_training_writes_the_run_directory_and_resume_continues(push1_demos, tmp_path):
    config = tiny_config(push1_demos, tmp_path)
    result = train(config)
    run = tmp_path / "tiny"
    assert result.steps == 4 and np.isfinite(result.loss)
    for name in ("config.json", "provenance.json", "sessions.jsonl", "final/policy.json", "tb"):
        assert (run / name).exists(), name
    latest = run / "checkpoints" / "latest"
    assert json.loads((latest / "training.json").read_text())["step"] == 4
    assert any((run / "tb").glob("events.out.tfevents.*"))
    policy = ecrl.load(run)
    assert policy.meta["train_n_objects"] == [1] and policy.meta["goal"] == "positions"
    assert policy.meta["arch"] == "diffusion" and "horizon" in policy.meta
    assert not any(key.startswith("subgoal") for key in policy.meta)  # a flat planner has no subgoals
    assert rollout(policy, 3, 2).shape == (2, 2)

    # A larger budget on resume extends the run from its checkpoint; the rest of the config is the run's own.
    resume_to_six_steps(tiny_config(push1_demos, tmp_path, steps=6, denoiser={"width": 998}), run)
    assert ecrl.load(run).module.denoiser.config.width == 16


def test_training_with_placed_objects_acts_with_more_objects(push1_demos, tmp_path):
    train(tiny_config(push1_demos, tmp_path, placed_objects=2))
    assert json.loads((tmp_path / "tiny" / "config.json").read_text())["placed_objects"] == 2
    assert rollout(ecrl.load(tmp_path / "tiny"), 3, 2).shape == (2, 2)


def test_training_refuses_to_overwrite_a_run(push1_demos, tmp_path):
    train(tiny_config(push1_demos, tmp_path, steps=1, checkpoint_every=0))
    with pytest.raises(FileExistsError, match="--resume"):
        train(tiny_config(push1_demos, tmp_path, steps=1))


def test_config_errors_name_the_problem(push1_demos, tmp_path):
    with pytest.raises(ValueError, match="replan_every"):
        tiny_config(push1_demos, tmp_path, replan_every=5)
    with pytest.raises(ValueError, match="sampling_steps"):
        tiny_config(push1_demos, tmp_path, sampling_steps=50)
    with pytest.raises(ValueError, match="placed_objects must be >= 0"):
        tiny_config(push1_demos, tmp_path, placed_objects=-1)
    with pytest.raises(ValueError, match="placed_objects is implemented for the flat"):
        tiny_config(push1_demos, tmp_path, placed_objects=1, planner="hierarchical")


def test_cli_help_and_a_missing_dataset(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "--replan-every" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["--dataset", str(tmp_path / "nothing"), "--runs-dir", str(tmp_path), "--final-eval-objects"])
    assert exit_info.value.code == 2
    assert "nothing" in capsys.readouterr().err


def test_a_resumed_run_keeps_the_final_evaluation_of_its_first_call(push1_demos, tmp_path, monkeypatch):
    """``--final-eval-*`` are options of a call, not of the experiment; a resumed run without them once ran
    the default final evaluation (N = 1-8 with the expert) that its first call had turned off."""
    import ecrl.scripts.eval as eval_cli

    evaluations = []
    monkeypatch.setattr(eval_cli, "main", lambda argv: evaluations.append(argv[1:]))
    tiny = ["--denoiser.width", "16", "--denoiser.heads", "2", "--denoiser.blocks", "1", "--denoiser.horizon", "4"]
    tiny += ["--denoiser.diffusion-steps", "20", "--sampling-steps", "2", "--batch-size", "8", "--warmup", "1"]
    tiny += ["--eval-every", "0", "--no-progress", "--threads", "1"]
    run = tmp_path / "run"
    main(["--dataset", str(push1_demos), "--runs-dir", str(tmp_path), "--name", "run", "--steps", "2", *tiny,
          "--final-eval-objects"])  # fmt: skip
    main(["--resume", str(run), "--steps", "3", "--no-progress"])
    assert evaluations == []  # the first call's: none
    main(["--resume", str(run), "--steps", "4", "--final-eval-objects", "1", "3", "--final-eval-episodes=2"])
    main(["--resume", str(run), "--steps", "5", "--final-eval-episodes", "4"])  # objects from the last session
    assert [argv[:5] for argv in evaluations] == [["--objects", "1", "3", "--episodes", "2"]] + [
        ["--objects", "1", "3", "--episodes", "4"]
    ]
    sessions = [json.loads(line) for line in (run / "sessions.jsonl").read_text().splitlines()]
    recorded = [s["final_eval"] for s in sessions if "start_step" in s]
    assert [r["final_eval_objects"] for r in recorded] == [[], [], [1, 3], [1, 3]]
    assert [r["final_eval_episodes"] for r in recorded] == [50, 50, 2, 4]


def test_a_run_from_before_the_final_evaluation_was_recorded_resumes_with_the_calls_settings(tmp_path):
    from ecrl.scripts.eval import FinalEvaluation

    (tmp_path / "sessions.jsonl").write_text(json.dumps({"start_step": 0, "threads": 1}) + "\n")
    given = FinalEvaluation((2,), 7)
    assert given.of_call(tmp_path, ["--resume", str(tmp_path)]) == given
    assert given.of_call(None, []) == given


def test_fresh_noise_is_the_default_and_fixed_noise_repeats_plans(policy):
    assert policy.module.fixed_noise is False
    env = gym.make("ecrl/Push-v0", n_objects=2)
    batch = {k: torch.as_tensor(v[None]) for k, v in env.reset(seed=1)[0].items()}
    for fixed in (False, True):
        planner = policy.with_options(fixed_noise=fixed).module
        planner.reset()
        first, second = planner.plan(batch).actions, planner.plan(batch).actions
        assert torch.equal(first, second) == fixed


def test_with_options_changes_settings_not_weights(policy, tmp_path):
    changed = policy.with_options(sampling_steps=2, fixed_noise=True, guidance=1.5)
    assert (changed.module.sampling_steps, changed.module.fixed_noise, changed.module.guidance) == (2, True, 1.5)
    assert policy.module.sampling_steps == 3  # the original is untouched
    for (name, a), b in zip(policy.module.state_dict().items(), changed.module.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    loaded = ecrl.load(changed.save(tmp_path / "changed"))
    assert loaded.kwargs["sampling_steps"] == 2 and loaded.module.fixed_noise is True


def test_with_options_sets_settings_added_after_a_checkpoint_was_saved(policy, tmp_path):
    path = policy.save(tmp_path / "old")
    config = json.loads((path / "policy.json").read_text())
    del config["kwargs"]["guidance"]  # as written before this setting existed
    (path / "policy.json").write_text(json.dumps(config))
    old = ecrl.load(path)
    assert old.module.guidance == 1.0 and old.options["guidance"] == 1.0
    assert old.with_options(guidance=2.0).module.guidance == 2.0


def test_with_options_refuses_what_it_cannot_set(policy):
    with pytest.raises(ValueError, match=r"cannot set \['denoiser', 'width'\].*settable options are"):
        policy.with_options(denoiser={}, width=8)
    with pytest.raises(ValueError, match="'fixed_noise' must be a bool"):
        policy.with_options(fixed_noise=1)
    with pytest.raises(ValueError, match="'sampling_steps' must be a int"):
        policy.with_options(sampling_steps=2.5)
    with pytest.raises(ValueError, match="sampling_steps must be in"):  # the builder's own check
        policy.with_options(sampling_steps=TINY.diffusion_steps + 1)


def test_init_from_starts_from_a_saved_planner_of_the_same_size(push1_demos, tmp_path):
    from ecrl.diffusion.train import _Trainer

    saved = train(tiny_config(push1_demos, tmp_path)).run_dir / "final"
    trainer = _Trainer(tiny_config(push1_demos, tmp_path, init_from=saved), torch.device("cpu"))
    weights = ecrl.load(saved).module.state_dict()
    for name, value in trainer.planner.state_dict().items():
        assert torch.equal(value, weights[name]), name
    for name, value in trainer.emas[""].model.state_dict().items():  # the EMA starts there too
        assert torch.equal(value, weights[f"denoiser.{name}"]), name
    with pytest.raises(ValueError, match=r"denoiser differs.*'width': \(16, 8\)"):
        _Trainer(tiny_config(push1_demos, tmp_path, init_from=saved, denoiser={"width": 8}), torch.device("cpu"))
    with pytest.raises(ValueError, match=r"\(high level\).*'width': \(16, 8\)"):
        _Trainer(
            tiny_config(push1_demos, tmp_path, init_from=saved, planner="hierarchical", denoiser={"width": 8}),
            torch.device("cpu"),
        )


def test_init_from_a_flat_planner_starts_both_levels_of_a_hierarchical_one(push1_demos, tmp_path):
    from ecrl.diffusion.train import _Trainer

    flat = train(tiny_config(push1_demos, tmp_path, name="flat")).run_dir / "final"
    levels = {"planner": "hierarchical", "subgoal_every": 4, "subgoal_horizon": 3}  # horizons 3 and 4 (flat: 4)
    trainer = _Trainer(tiny_config(push1_demos, tmp_path, init_from=flat, **levels), torch.device("cpu"))
    weights = ecrl.load(flat).module.denoiser.state_dict()
    fresh = _Trainer(tiny_config(push1_demos, tmp_path, **levels), torch.device("cpu"))
    for level in ("high", "low"):
        model, ema = getattr(trainer.planner, level), trainer.emas[level].model
        for name, value in model.state_dict().items():
            expected = weights[name]
            if name == "step_embedding":  # rows both have come from the flat planner, the rest start afresh
                rows = min(len(value), len(expected))
                assert torch.equal(value[:rows], expected[:rows])
                assert torch.equal(value[rows:], getattr(fresh.planner, level).step_embedding[rows:].detach())
            else:
                assert torch.equal(value, expected), (level, name)
            assert torch.equal(ema.state_dict()[name], value), (level, name)
    hierarchical = train(tiny_config(push1_demos, tmp_path, name="hier", **levels)).run_dir / "final"
    with pytest.raises(ValueError, match="that is a hierarchical planner"):
        _Trainer(tiny_config(push1_demos, tmp_path, init_from=hierarchical), torch.device("cpu"))


def test_eval_cli_sets_policy_options_and_copies_them(policy, tmp_path, capsys):
    from ecrl.scripts.eval import main as eval_main

    path = policy.save(tmp_path / "planner")
    out = tmp_path / "out"
    args = [str(path), "--objects", "1", "--episodes", "1", "--no-progress", "--no-expert", "--out", str(out)]
    eval_main([*args, "--policy-options", "sampling_steps=2", "fixed_noise=true", "--copy-policy"])
    assert json.loads((out / "eval.json").read_text())["policy"]["kwargs"]["sampling_steps"] == 2
    copied = ecrl.load(out / "policy")
    assert copied.module.sampling_steps == 2 and copied.module.fixed_noise is True
    for bad, message in (
        ("steps", "name=value"),
        ("guidance=high", "not a valid float"),
        ("seeds=1", "among"),
        ("focus=1", "use --focus 1"),
    ):
        with pytest.raises(SystemExit) as exit_:
            eval_main([*args, "--policy-options", bad])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_eval_cli_copies_the_training_record_of_a_policy_inside_its_run(policy, tmp_path):
    """`ecrl-eval runs/<run>/final --copy-policy` copies the run's config, training log and sessions (they are in the
    run directory, the parent of `final/`), as it does for the run directory itself."""
    from ecrl.scripts.eval import main as eval_main

    run = tmp_path / "run"
    (run / "tb").mkdir(parents=True)
    (run / "config.json").write_text('{"name": "run"}')
    (run / "tb" / "progress.csv").write_text("time/total_timesteps,rollout/success_rate\n1000,0.5\n")
    (run / "sessions.jsonl").write_text('{"start_step": 0}\n')
    policy.save(run / "final")
    policy.save(run)
    for path in (run / "final", run):
        out = tmp_path / f"out_{path.name}"
        options = "--objects 1 --episodes 1 --no-progress --no-expert --copy-policy --policy-options sampling_steps=2"
        eval_main([str(path), *options.split(), "--out", str(out)])
        copied = out / "policy"
        assert (copied / "train_config.json").read_text() == '{"name": "run"}'
        assert (copied / "train_progress.csv").read_text().startswith("time/total_timesteps")
        assert (copied / "train_sessions.jsonl").read_text() == '{"start_step": 0}\n'
        assert (out / "learning_curve.png").exists()


def test_eval_cli_focus_labels_the_report_rule_assisted_and_copies_the_plain_policy(policy, tmp_path, capsys):
    from ecrl.scripts.eval import main as eval_main

    path = policy.save(tmp_path / "planner")
    out = tmp_path / "out"
    args = [str(path), "--objects", "3", "--episodes", "1", "--no-progress", "--no-expert", "--out", str(out)]
    eval_main([*args, "--focus", "1", "--patience", "30", "--copy-policy"])
    report = json.loads((out / "eval.json").read_text())
    assert report["policy"]["rule"] == "focus k=1, patience 30" and report["policy"]["focus"]["k"] == 1
    readme = (out / "README.md").read_text()
    assert "**Rule-assisted** (focus k=1, patience 30)" in readme
    assert "| rule-assisted | part |" in readme and "| focus k=1, patience 30 | train | 3 |" in readme
    assert ecrl.load(out / "policy").kwargs == policy.kwargs  # the rule is not saved into the model
    for bad, message in (
        (["--focus", "-1"], "k (objects in focus) must be an int >= 1"),
        (["--patience", "5"], "add --focus K"),
    ):
        with pytest.raises(SystemExit) as exit_:
            eval_main([*args, *bad])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        eval_main(["expert", "--objects", "1", "--episodes", "1", "--focus", "1", "--out", str(out)])
    assert exit_.value.code == 2 and "not the scripted expert" in capsys.readouterr().err
