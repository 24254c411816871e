"""The pixels benchmark: `ecrl-bench pixels` end to end with a tiny random-weight encoder and tiny settings; the
numbers it writes exist and are positive, never timing thresholds."""

import json

import pytest
import torch

from ecrl.diffusion.bench_pixels import PixelsBenchConfig, measure
from ecrl.encoders import build_encoder, save_encoder
from ecrl.scripts.bench import main

ENCODER = {"views": 2, "image_size": 32, "entities": 3, "width": 8, "feature_dim": 4, "prior_keypoints": 4}
TINY = ["--batch", "2", "--steps", "3", "--warmup-steps", "1", "--train-batch", "4", "--train-steps", "1"]
TINY += ["--repeats", "2", "--threads", "1"]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """A random-weight particle encoder of 2 views × 3 particles at 32 px, trained (its meta says) on front and top."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("encoder") / "particles"
    return save_encoder(build_encoder("particles", **ENCODER), path, meta={"cameras": ["front", "top"]})


def test_bench_pixels_writes_training_and_planning_numbers_of_both_planners(encoder, tmp_path):
    main(["pixels", "--encoder", str(encoder), *TINY, "--out", str(tmp_path)])
    result = json.loads((tmp_path / "bench.json").read_text())
    assert {"README.md", "pixels.png"} <= {p.name for p in tmp_path.iterdir()}
    assert result["command"].startswith("ecrl-bench pixels")
    assert "ecrl-bench pixels" in (tmp_path / "README.md").read_text()
    assert (result["weights"], result["threads"], result["n_objects"]) == ("random", 1, 3)
    assert (result["encoder"]["tokens"], result["encoder"]["image_size"]) == (6, 32)  # V * K rows at 32 px

    state, pixels = result["training"]
    assert (state["planner"], pixels["planner"]) == ("state", "pixels")
    assert (state["tokens_per_step"], pixels["tokens_per_step"]) == (4, 6)  # agent + 3 objects; 2 views x 3
    assert pixels["row_width"] == result["encoder"]["row_width"]
    for r in (state, pixels):
        assert r["batch"] == 4 and r["horizon"] == result["denoiser"]["horizon"]
        assert 0 < r["windows_per_s_median"] <= r["windows_per_s_best"] and r["ms_per_step_median"] > 0

    state, pixels = result["planning"]
    for r in (state, pixels):
        assert (r["act_calls"], r["batch"]) == (3, 2)  # warm-up calls are not timed
        assert 0 < r["ms_per_step_median"] <= r["ms_per_step_p90"] and r["ms_per_step_mean"] > 0
        plans = -(-3 // result["replan_every"])  # the timed calls that sample a plan
        assert r["denoiser_calls"] == plans * result["sampling_steps"]
    encoding = result["encoding"]
    assert encoding["calls"] == 3 and 0 < encoding["ms_per_step_median"] <= encoding["ms_per_step_p90"]
    assert all(v > 0 for v in result["ratios"].values())


def test_bench_pixels_needs_the_encoders_cameras(tmp_path):
    torch.manual_seed(0)
    bare = save_encoder(build_encoder("particles", **ENCODER), tmp_path / "bare")
    with pytest.raises(ValueError, match="one camera per view"):
        measure(PixelsBenchConfig(encoder=bare, out=tmp_path))


def test_bench_pixels_refuses_sizes_it_cannot_run():
    with pytest.raises(ValueError, match="n_objects must be in 1 … 16"):
        PixelsBenchConfig(n_objects=17)
    with pytest.raises(ValueError, match="must be positive"):
        PixelsBenchConfig(batch=0)
