"""`ecrl-bench scaling`: the measurement runs end to end at a tiny size and says what it measured."""

import json

import pytest

from ecrl.scaling import ScalingBenchConfig, machine_ceiling
from ecrl.scripts.bench import main as bench_main


def test_machine_ceiling_counts_the_work_of_one_and_of_two_processes():
    ceiling = machine_ceiling(2, 0.05, repeats=1)
    assert ceiling["one"] > 0 and ceiling["many"] > 0
    assert ceiling["ratio"] == pytest.approx(ceiling["many"] / ceiling["one"])


def test_a_tiny_scaling_benchmark_measures_training_evaluation_and_collection(tmp_path):
    out = tmp_path / "scaling"
    bench_main(
        ["scaling", "--train-windows", "64", "--batch-sizes", "8", "--train-episodes", "2"]
        + ["--eval-episodes", "4", "--collect-batch", "2", "--busy-s", "0.05", "--out", str(out)]
    )
    result = json.loads((out / "bench_scaling.json").read_text())
    assert [r["batch"] for r in result["training"]] == [8]
    (train,) = result["training"]
    assert train["independent"] > 0 and train["ratio_independent"] == pytest.approx(train["independent"] / train["one"])
    for row in (*result["training"], result["evaluation"], result["collection"]):
        assert row["one"] > 0 and row["many"] > 0
        assert row["ratio"] == pytest.approx(row["many"] / row["one"])
        assert row["share_of_ceiling"] == pytest.approx(row["ratio"] / result["ceiling"]["ratio"])
    assert result["evaluation"]["steps"] > 0 and result["collection"]["steps"] > 0
    assert len(result["targets"]) == 3  # training, evaluation, collection
    readme = (out / "README.md").read_text()
    assert "| diffusion training, batch 8 | windows/s |" in readme and "diffusion training (batch 8) with 2" in readme
    assert (out / "scaling.png").stat().st_size > 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"processes": 1}, "processes must be >= 2"),
        ({"batch_sizes": (7,)}, "split evenly"),
        ({"train_windows": 100, "batch_sizes": (128,)}, "at least 4 batches"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ScalingBenchConfig(**kwargs)
