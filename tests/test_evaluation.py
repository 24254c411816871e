"""The evaluation runner and `ecrl-eval`: right numbers, batched calls, same seeds ⇒ same results, every artifact."""

import json

import numpy as np
import pytest

from ecrl.eval_report import log_report, report_table, scalars, write_report
from ecrl.evaluation import ExpertPolicy, evaluate
from ecrl.policy import Policy


class ZeroPolicy:
    """Never moves; records the batch size of every call."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def act(self, obs):
        self.batches.append(len(obs["observation"]))
        return np.zeros((len(obs["observation"]), 2), dtype=np.float32)


def tiny_policy(train_n=(1,)) -> Policy:
    """An untrained entity-centric (EIT) policy, saved and loaded like a trained one."""
    from ecrl.policies.actor import EntityActorModule

    kwargs = {"net": {"arch": "eit", "width": 16, "heads": 2, "blocks": 1}, "action_dim": 2, "stochastic": False}
    meta = {"arch": "eit", "algo": "sac", "train_n_objects": list(train_n), "env_steps": 123}
    return Policy(EntityActorModule(**kwargs), -np.ones(2), np.ones(2), meta, "entity_actor", kwargs)


@pytest.fixture(scope="module")
def expert_report():
    return evaluate(ExpertPolicy(), [1], episodes=4, progress=False)


def test_expert_through_the_runner_solves_one_object(expert_report):
    r = expert_report.get("train", 1)
    s = r.summary()
    assert (s["successes"], s["episodes"], s["success_rate"]) == (4, 4, 1.0)
    assert s["fraction_placed"] == 1.0 and s["fraction_placed_ci95"] == [1.0, 1.0]
    assert s["success_ci95"][1] == 1.0 and 0.4 < s["success_ci95"][0] < 0.6  # Wilson 4/4
    assert all(0 < n < r.horizon for n in r.lengths) and r.horizon == 150
    assert r.env_steps == 4 * r.horizon  # by default episodes run to the horizon (success read at the end)
    quick = evaluate(ExpertPolicy(), [1], episodes=4, progress=False, stop_on_success=True).get("train", 1)
    assert quick.env_steps == sum(quick.lengths) and quick.lengths == r.lengths  # or stop at the first success
    assert r.seeds == [100_000, 100_001, 100_002, 100_003]


def test_zero_policy_never_succeeds_and_is_called_once_per_step_on_the_whole_batch():
    policy = ZeroPolicy()
    report = evaluate(policy, [2], episodes=3, progress=False)
    r = report.get("train", 2)
    assert r.success == [False] * 3 and r.fraction_placed == [0.0] * 3
    assert r.lengths == [r.horizon] * 3 == [250] * 3
    assert r.returns == [-250.0] * 3  # sparse reward: -1 per step while nothing is placed
    assert policy.batches == [3] * r.horizon


def test_same_seed_same_results_regardless_of_batching():
    def per_episode(**kwargs):
        r = evaluate(ExpertPolicy(), [2], episodes=2, progress=False, **kwargs).get("train", 2)
        return r.success, r.lengths, r.returns, r.fraction_placed

    first = per_episode()
    assert per_episode() == first
    assert per_episode(batch_size=1) == first
    assert per_episode(seed=7)[1] != first[1]


def test_padding_observations_does_not_change_an_entity_policy_results():
    policy = tiny_policy()
    plain = evaluate(policy, [1, 2], episodes=2, progress=False)
    padded = evaluate(policy, [1, 2], episodes=2, progress=False, n_max=4)
    for n in (1, 2):
        a, b = plain.get("train", n), padded.get("train", n)
        assert (a.n_max, b.n_max) == (n, 4)
        assert a.success == b.success and a.lengths == b.lengths
        np.testing.assert_allclose(a.returns, b.returns, atol=1e-6)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="needs a split"):
        evaluate(ZeroPolicy(), [1], parts=("test",), progress=False)
    with pytest.raises(ValueError, match="n_max"):
        evaluate(ZeroPolicy(), [1, 3], n_max=2, progress=False)
    with pytest.raises(ValueError, match="numbers of objects"):
        evaluate(ZeroPolicy(), [0], progress=False)


def test_write_report_writes_json_table_plot_and_tensorboard(tmp_path, expert_report):
    report = evaluate(ZeroPolicy(), [1], episodes=2, progress=False)
    result = write_report(report, tmp_path, "ecrl-eval something", expert=expert_report, train_n=[1])

    data = json.loads((tmp_path / "eval.json").read_text())
    assert data == json.loads(json.dumps(result))
    assert data["command"] == "ecrl-eval something" and data["train_n_objects"] == [1]
    (row,) = data["results"]
    assert (row["part"], row["n_objects"], row["successes"], row["episodes"]) == ("train", 1, 0, 2)
    assert row["per_episode"]["lengths"] == [150, 150]
    assert data["expert"]["results"][0]["success_rate"] == 1.0
    assert "git_commit" in data["provenance"]

    readme = (tmp_path / "README.md").read_text()
    assert "ecrl-eval something" in readme and report_table(report, expert_report) in readme
    assert "| train | 1 | 0/2 (0.00) |" in readme and "4/4 (1.00) |" in readme
    assert (tmp_path / "success.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert set(scalars(report)) <= set(events.Tags()["scalars"])
    (point,) = events.Scalars("eval/train/n1/success_rate")
    assert point.value == 0.0


def test_log_report_records_into_an_sb3_logger(expert_report):
    from stable_baselines3.common.logger import Logger

    logger = Logger(folder=None, output_formats=[])
    log_report(expert_report, logger)
    assert logger.name_to_value["eval/train/n1/success_rate"] == 1.0
    assert logger.name_to_value["eval/train/n1/fraction_placed"] == 1.0


def test_cli_on_the_expert_with_a_split_and_videos(tmp_path, capsys):
    from ecrl.scripts.eval import main

    out = tmp_path / "out"
    main(
        ["expert", "--objects", "1", "--episodes", "2", "--split", "colour_shape", "--video", "--no-progress"]
        + ["--out", str(out)]
    )
    printed = capsys.readouterr().out
    assert "| train | 1 | 2/2 (1.00) |" in printed and "| test | 1 | 2/2 (1.00) |" in printed
    data = json.loads((out / "eval.json").read_text())
    assert [(r["part"], r["success_rate"]) for r in data["results"]] == [("train", 1.0), ("test", 1.0)]
    assert data["settings"]["split"] == "colour_shape" and data["expert"] is None
    assert {p.name for p in (out / "videos").iterdir()} == {"train_n1.gif", "test_n1.gif"}
    assert {"README.md", "success.png", "tb"} <= {p.name for p in out.iterdir()}


def test_cli_on_a_checkpoint_adds_the_expert_ceiling_next_to_it(tmp_path, capsys):
    from ecrl.scripts.eval import main

    ckpt = tiny_policy(train_n=[1]).save(tmp_path / "final")
    main([str(tmp_path), "--objects", "1", "--episodes", "2", "--no-progress"])  # a run directory
    data = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert data["policy"]["arch"] == "eit" and data["train_n_objects"] == [1]
    assert data["expert"]["results"][0]["success_rate"] == 1.0
    assert "expert success" in capsys.readouterr().out
    main([str(ckpt), "--objects", "1", "--episodes", "1", "--no-progress", "--no-expert"])
    assert json.loads((tmp_path / "final_eval" / "eval.json").read_text())["expert"] is None


def test_cli_refuses_a_path_that_is_not_a_checkpoint(tmp_path, capsys):
    from ecrl.scripts.eval import main

    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path), "--objects", "1"])
    assert exit_.value.code == 2
    assert "not an ecrl policy checkpoint" in capsys.readouterr().err


def test_cli_compare_plots_several_evaluations_and_tables_their_successes(tmp_path, capsys, expert_report):
    from ecrl.scripts.eval import main

    write_report(expert_report, tmp_path / "expert", "ecrl-eval expert", train_n=[1])
    write_report(evaluate(ZeroPolicy(), [1], episodes=4, progress=False), tmp_path / "zero", "ecrl-eval zero")
    out = tmp_path / "both.png"
    main(["compare", str(tmp_path / "expert"), str(tmp_path / "zero"), "--labels", "expert", "zero", "--out", str(out)])
    printed = capsys.readouterr().out
    assert out.stat().st_size > 0
    assert "| N | expert, train part | zero, train part |" in printed and "| 1 | 4/4 | 0/4 |" in printed
    with pytest.raises(SystemExit):  # a label per folder
        main(["compare", str(tmp_path / "expert"), "--labels", "a", "b", "--out", str(out)])
    assert "a label per folder" in capsys.readouterr().err
